import sys, re, subprocess, collections, numpy as np
import tilesafe as ts
from tilesafe import pipeline, backends
from tilesafe.launch.checks import kernel_args
import importlib; MM = importlib.import_module("tilesafe.kernels.matmul")
cu = "/tmp/nvtools/nvidia/cu13/bin/cuobjdump"
m = n = k = 4096
def sass_of(kern, args, consts):
    prepared = kern._check_only(args, None, consts)
    ir = kern._ir(prepared.specialization)
    facts = backends.by_name("tileir").launch_facts(ir, kernel_args(kern.params, prepared.args))
    cubin = pipeline.compile(ir, backends.by_name("tileir").ahead_of_time("sm_90"), hints=kern.hints, facts=facts)
    open("/tmp/_b.cubin", "wb").write(cubin)
    s = subprocess.run([cu, "-sass", "/tmp/_b.cubin"], capture_output=True, text=True).stdout
    ops = collections.Counter(re.findall(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", s))
    res = subprocess.run([cu, "-res-usage", "/tmp/_b.cubin"], capture_output=True, text=True).stdout
    return re.search(r"REG:\d+", res).group(0), {o: c for o, c in ops.items() if any(t in o for t in ("GMMA", "STL", "LDL", "SETMAXREG"))}
for dt, name in ((ts.bfloat16, "bf16"), (ts.float8_e4m3fn, "f8")):
    a = ts.tensor(np.random.randn(m, k).astype(np.float32), dt).sync()
    bnk = ts.tensor(np.random.randn(n, k).astype(np.float32), dt).sync()
    b = bnk.T  # (k, n) K-major view
    scaled = name == "f8"
    for (bm, bn, bk, warps) in ((128, 128, 64 if not scaled else 128, 4), (256, 128, 64 if not scaled else 128, 8), (128, 256, 64 if not scaled else 128, 8)):
        out = ts.empty((m, n), ts.bfloat16).sync()
        part = out.partition((bm, bn)).map((8, 1), 132)
        kern = MM.tile_kernel("persistent", scaled, warps)
        sa = ts.tensor(np.ones(1, np.float32)).sync(); sb = ts.tensor(np.ones(1, np.float32)).sync()
        args = (part, a, b, sa, sb) if scaled else (part, a, b)
        print(name, bm, bn, bk, warps, *sass_of(kern, args, {"BK": bk}), flush=True)
print("--- variants")
a = ts.tensor(np.random.randn(m, k).astype(np.float32), ts.float8_e4m3fn).sync()
b = ts.tensor(np.random.randn(n, k).astype(np.float32), ts.float8_e4m3fn).sync().T
sa = ts.tensor(np.ones(1, np.float32)).sync(); sb = ts.tensor(np.ones(1, np.float32)).sync()
for (bm, bn, bk, warps, scaled) in ((256, 128, 64, 8, True), (256, 128, 128, 8, False), (256, 128, 64, 8, False), (128, 128, 64, 4, True), (128, 128, 128, 4, False)):
    out = ts.empty((m, n), ts.bfloat16).sync()
    part = out.partition((bm, bn)).map((8, 1), 132)
    kern = MM.tile_kernel("persistent", scaled, warps)
    args = (part, a, b, sa, sb) if scaled else (part, a, b)
    try:
        print("f8", bm, bn, bk, warps, "scaled" if scaled else "plain", *sass_of(kern, args, {"BK": bk}), flush=True)
    except Exception as e:
        print("f8", bm, bn, bk, warps, scaled, "ERR", str(e)[:200])
