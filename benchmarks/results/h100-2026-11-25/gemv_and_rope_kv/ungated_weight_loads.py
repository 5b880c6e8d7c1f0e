"""Layer-like chain of the 4b decode GEMVs (qkv, o, gate_up, down shapes), plain gemv_rows with tuned
configs; run once with the normal compiler and once with TS_EARLY (read-only view loads not gated)."""
import os, time, sys, torch
import tilesafe as ts
from tilesafe.kernels import gemv as G

def timeit(makes, reps=10):
    with ts.CudaGraph.scope() as g:
        for _ in range(reps):
            for make in makes:
                g.record(make())
    g.replay(); torch.cuda.synchronize()
    best = []
    for _ in range(9):
        t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize()
        best.append((time.perf_counter() - t0) / reps)
    return min(best) * 1e6

keep = []
SHAPES = [(6144, 2560, {"BN": 64, "BK": 128, "occupancy": 2}), (2560, 4096, {"BN": 8, "BK": 512, "occupancy": 4}),
          (19456, 2560, {"BN": 16, "BK": 512, "occupancy": 4}), (2560, 9728, {"BN": 16, "BK": 512, "occupancy": 2})]
layer = []
singles = {}
for n, k, cfg in SHAPES:
    X = torch.randn(1, k, device="cuda", dtype=torch.bfloat16); keep.append(X); x = ts.from_dlpack(X)
    out = ts.zeros((1, n), ts.bfloat16, device="cuda:0").sync()
    kv = G.with_occupancy(G.gemv_rows, cfg)
    bn, bk = int(cfg["BN"]), int(cfg["BK"])
    ms = []
    for c in range(4):
        W = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02; keep.append(W); w = ts.from_dlpack(W)
        ms.append(lambda w=w, kv=kv, out=out, x=x, bn=bn, bk=bk: kv(ts.borrow_mut(out).partition((1, bn)), x, w, BK=bk, ACC=False))
        if c == 0:
            ms[0]().sync(); torch.cuda.synchronize()
            try:
                got = torch.from_dlpack(out).float()
            except Exception as e:
                print("no check:", e); got = None
            if got is not None:
                ref = (X.float() @ W.float().T)
                print(f"  check {n}x{k}: max err {float((got - ref).abs().max()):.4f}", flush=True)
    singles[(n, k)] = ms
for rnd in range(3):
    for (n, k), ms in singles.items():
        t = timeit(ms) / 4
        print(f"{os.environ.get('TAG')} rnd{rnd} single {n}x{k}: {t:.2f} us  {n*k*2/t/1e6:.2f} TB/s", flush=True)
    chain = [m for i in range(4) for m in (singles[(6144, 2560)][i], singles[(2560, 4096)][i], singles[(19456, 2560)][i], singles[(2560, 9728)][i])]
    t = timeit(chain) / 4
    print(f"{os.environ.get('TAG')} rnd{rnd} layer chain: {t:.2f} us per layer", flush=True)
