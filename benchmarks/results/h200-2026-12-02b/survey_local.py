import re, subprocess, sys
import numpy as np
import tilesafe as ts
from tilesafe import backends, pipeline
from tilesafe.kernels import gemv as G
from tilesafe.launch.checks import kernel_args
BIN = "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cu13/bin/"
def res(kern, args, consts):
    prepared = kern._check_only(args, None, consts)
    ir = kern._ir(prepared.specialization)
    backend = backends.by_name("tileir")
    facts = backend.launch_facts(ir, kernel_args(kern.params, prepared.args), kern.static_shapes)
    cubin = pipeline.compile(ir, backend.ahead_of_time("sm_90"), hints=kern.hints, facts=facts)
    open("/tmp/exp/s.cubin", "wb").write(cubin)
    u = subprocess.run([BIN + "cuobjdump", "-res-usage", "/tmp/exp/s.cubin"], capture_output=True, text=True).stdout
    return int(re.search(r"REG:(\d+)", u).group(1)), int(re.search(r"SHARED:(\d+)", u).group(1))
def tensor(*shape):
    return ts.tensor(np.zeros(shape, np.float32), ts.bfloat16).sync()
SHAPES = {"4b": [("normed", 6144, 2560), ("acc", 2560, 4096), ("normed", 19456, 2560), ("silu", 2560, 9728), ("normed", 151936, 2560)],
          "8b": [("normed", 6144, 4096), ("acc", 4096, 4096), ("normed", 24576, 4096), ("silu", 4096, 12288), ("normed", 151936, 4096)]}
CONFIGS = [(8, 512, 4), (16, 512, 4), (16, 512, 2), (8, 256, 4), (16, 256, 3), (8, 512, 3), (16, 512, 3), (32, 256, 3), (8, 1024, 3)]
sel = sys.argv[1:] or list(SHAPES)
for model in sel:
    for variant, n, k in SHAPES[model]:
        w, x = tensor(n, k), tensor(1, 2 * k)
        for bn, bk, occ in CONFIGS:
            row = []
            for static in (False, True):
                out = ts.empty((1, n), ts.bfloat16).sync().partition((1, bn))
                cfg = {"occupancy": occ, "static_shape": static}
                if variant == "normed":
                    kern, args = G.gemv_rows_normed, (out, x[:, :k], x[:, :k].reshape((k,)), w, float(k), 1e-6)
                    consts = {"BK": bk, "KP": 1 << (k - 1).bit_length(), "WEIGHTED": False}
                elif variant == "acc":
                    kern, args, consts = G.gemv_rows, (out, x[:, :k], w), {"BK": bk, "ACC": True}
                else:
                    kern, args = G.gemv_rows_silu_mul, (out, x[:, :k], x[:, k:], w)
                    consts = {"BK": bk, "ACC": True}
                regs, shared = res(G.with_occupancy(kern, cfg), args, consts)
                chunk = bn * bk * 2 + bk * 2 * (2 if variant == "silu" else 1)
                row.append(f"regs {regs:3d} shared {shared:6d} buf {shared / chunk:4.1f}")
            print(f"{model} {variant:6s} {n:6d}x{k:5d} {bn:3d}x{bk:4d} occ{occ} | dyn {row[0]} | static {row[1]}", flush=True)
