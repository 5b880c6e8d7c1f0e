"""Host cost of an eager library call (warm), torch tensors and tilesafe tensors, vs torch."""
import time, cProfile, pstats, torch, numpy as np
import tilesafe as ts
from tilesafe import kernels as K
dev = "cuda:0"
x = torch.randn(16, 4096, device=dev, dtype=torch.bfloat16); w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
W = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
xs, ws, Ws = ts.from_dlpack(x), ts.from_dlpack(w), ts.from_dlpack(W)
def per_call(fn, n=300):
    for _ in range(20): fn()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e6
cases = {
  "torch rms_norm": lambda: torch.nn.functional.rms_norm(x, (4096,), w),
  "K.rms_norm torch in/out": lambda: K.rms_norm(x, w),
  "K.rms_norm ts .sync()": lambda: K.rms_norm(xs, ws).sync(),
  "torch matmul 16x4096x4096": lambda: x @ W.T,
  "K.matmul torch": lambda: K.matmul(x, W),
  "K.matmul ts .sync()": lambda: K.matmul(xs, Ws).sync(),
  "torch silu*mul": lambda: torch.nn.functional.silu(x) * x,
  "K.silu_mul torch": lambda: K.silu_mul(x, x),
}
for name, fn in cases.items():
    print(f"{name:32s} {per_call(fn):8.1f} us/call", flush=True)
pr = cProfile.Profile(); pr.enable()
for _ in range(300): K.rms_norm(xs, ws).sync()
pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(25)
