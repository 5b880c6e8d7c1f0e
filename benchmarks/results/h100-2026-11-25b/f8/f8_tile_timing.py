"""Time one f8 persistent config at 8192^3 through the library's tuner (graph replays), and
torch._scaled_mm the same way. argv: BM BN BK16 warps"""
import sys, json, glob, os, torch
import tilesafe as ts
from tilesafe import kernels as K
import importlib
MM = importlib.import_module("tilesafe.kernels.matmul")
bm, bn, bk, warps = map(int, sys.argv[1:5])
cfg = {"BM": bm, "BN": bn, "BK": bk, "warps": warps, "cga": 1}
MM.launch_persistent.configs = [cfg, dict(cfg)]
M = N = Kd = 8192
a = torch.randn(M, Kd, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(N, Kd, device="cuda").to(torch.float8_e4m3fn)
sa = torch.ones(1, device="cuda"); sb = torch.ones(1, device="cuda")
out = K.scaled_matmul(a, b, sa, sb)
torch.cuda.synchronize()
ref = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
for f in glob.glob(os.environ["TILESAFE_CACHE_DIR"] + "/autotune/*persistent*.json"):
    for e in json.load(open(f))["entries"].values():
        t = min(e["timings_ms"].values())
        print(f"f8 {cfg}: {t:.3f} ms = {2 * M * N * Kd / t / 1e9:.0f} TFLOP/s (rel err vs _scaled_mm {err:.1e})")
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16); torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(5): torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
ev = [torch.cuda.Event(True), torch.cuda.Event(True)]
ts_ = []
for _ in range(5):
    ev[0].record(); g.replay(); ev[1].record(); torch.cuda.synchronize(); ts_.append(ev[0].elapsed_time(ev[1]) / 5)
t = sorted(ts_)[2]
print(f"torch._scaled_mm: {t:.3f} ms = {2 * M * N * Kd / t / 1e9:.0f} TFLOP/s")
