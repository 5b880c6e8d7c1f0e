"""Registers and shared memory of every config of ``gemv_stages.py``, compiled here (no GPU)
for sm_90 with tileiras 13.4 and read with cuobjdump 13.5 (the PyPI wheels
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm``): ``buffers`` is the shared memory over
one K chunk's bytes (the weight tile and its row chunk), about the TMA buffers in flight."""
import collections, re, subprocess, sys
import numpy as np
import tilesafe as ts
from tilesafe import backends, pipeline
from tilesafe.kernels import gemv as G
from tilesafe.launch.checks import kernel_args
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gemv_stages import CONFIGS, SHAPES

CUOBJDUMP = sys.argv[1]


def resources(kern, args, consts):
    prepared = kern._check_only(args, None, consts)
    ir = kern._ir(prepared.specialization)
    backend = backends.by_name("tileir")
    facts = backend.launch_facts(ir, kernel_args(kern.params, prepared.args))
    cubin = pipeline.compile(ir, backend.ahead_of_time("sm_90"), hints=kern.hints, facts=facts)
    open("/tmp/_stages.cubin", "wb").write(cubin)
    usage = subprocess.run([CUOBJDUMP, "-res-usage", "/tmp/_stages.cubin"], capture_output=True,
                           text=True).stdout
    return (int(re.search(r"REG:(\d+)", usage).group(1)),
            int(re.search(r"SHARED:(\d+)", usage).group(1)))


def tensor(*shape):
    return ts.tensor(np.zeros(shape, np.float32), ts.bfloat16).sync()


for model, shapes in SHAPES.items():
    for variant, n, k in shapes:
        w, x = tensor(n, k), tensor(1, 2 * k)
        for bn, bk, occ in CONFIGS:
            if n % bn or k % bk:
                continue
            out = ts.empty((1, n), ts.bfloat16).sync().partition((1, bn))
            if variant == "normed":
                kern, args = G.gemv_rows_normed, (out, x[:, :k], x[:, :k].reshape((k,)), w,
                                                   float(k), 1e-6)
                consts = {"BK": bk, "KP": 1 << (k - 1).bit_length(), "WEIGHTED": False}
            elif variant == "acc":
                kern, args, consts = G.gemv_rows, (out, x[:, :k], w), {"BK": bk, "ACC": True}
            else:
                kern, args = G.gemv_rows_silu_mul, (out, x[:, :k], x[:, k:], w)
                consts = {"BK": bk, "ACC": True}
            regs, shared = resources(G.with_occupancy(kern, {"occupancy": occ}), args, consts)
            chunk = bn * bk * 2 + bk * 2 * (2 if variant == "silu" else 1)
            print(f"{model} {variant:6s} {n:6d}x{k:5d} {bn:3d}x{bk:4d} occ{occ}  regs {regs:3d}  "
                  f"shared {shared:6d}  buffers {shared / chunk:4.1f}", flush=True)
