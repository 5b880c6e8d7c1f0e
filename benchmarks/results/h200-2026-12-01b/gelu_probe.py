"""GELU (exact) over 16384 x 4096 bf16: tilesafe's kernel and torch's, a few launches each,
for a profiler to read (``ncu``), and each timed as CUDA-graph replays in one process."""
import sys, time
import torch, torch.nn.functional as F
import tilesafe as ts
import tilesafe.kernels as K

x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
out, ref = torch.empty_like(x), torch.empty_like(x)
for _ in range(3):
    K.gelu(x, out=out); F.gelu(x, out=ref)
torch.cuda.synchronize()
print("max |tilesafe - torch|:", (out.float() - ref.float()).abs().max().item(),
      "differing elements:", (out != ref).sum().item(), flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "time":
    graphs = {}
    for name, fn in (("tilesafe", lambda: K.gelu(x, out=out)), ("torch", lambda: F.gelu(x, out=ref))):
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            fn(); torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=s):
                for _ in range(10):
                    fn()
        graphs[name] = g
    best = {n: 1e9 for n in graphs}
    for _ in range(7):
        for n, g in graphs.items():
            g.replay(); torch.cuda.synchronize()
            t = time.perf_counter(); g.replay(); torch.cuda.synchronize()
            best[n] = min(best[n], (time.perf_counter() - t) / 10)
    for n, t in best.items():
        print(f"{n}: {t * 1e6:.1f} us, {4 * x.numel() / t / 1e9:.0f} GB/s", flush=True)
