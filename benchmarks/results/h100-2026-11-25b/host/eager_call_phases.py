import time, cProfile, pstats, torch
import tilesafe as ts
from tilesafe import kernels as K
dev = "cuda:0"
x = torch.randn(16, 4096, device=dev, dtype=torch.bfloat16); w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
xs, ws = ts.from_dlpack(x), ts.from_dlpack(w)
out = ts.empty((16, 4096), ts.bfloat16, device=dev).sync()
for _ in range(50): K.rms_norm(xs, ws).sync()
def t(fn, n=300):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e6
print("build op only       ", t(lambda: K.rms_norm(xs, ws)._consume("dropped") if hasattr(K.rms_norm(xs, ws), "_consume") else None))
print("build + sync        ", t(lambda: K.rms_norm(xs, ws).sync()))
print("out= build + sync   ", t(lambda: K.rms_norm(xs, ws, out=out).sync()))
print("empty().sync()      ", t(lambda: ts.empty((16, 4096), ts.bfloat16, device=dev).sync()))
print("torch.empty         ", t(lambda: torch.empty((16, 4096), dtype=torch.bfloat16, device=dev)))
pr = cProfile.Profile(); pr.enable()
for _ in range(300): K.rms_norm(xs, ws, out=out).sync()
pr.disable(); pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
