"""Is gemv_rows latency-bound per program? Time vs N (programs) and K (iterations), 8x512 occ4 / 16x512 occ4."""
import time, sys, torch
import tilesafe as ts
import tilesafe.core as tc
from tilesafe.kernel import kernel
from tilesafe.kernels import gemv as G
from tilesafe.kernels.gemv import _store_sum

@kernel
def gemv_two(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, -1)],
             w: tc.Tensor["T", (-1, -1)], BK: tc.Const[int], ACC: tc.Const[bool]):
    """two independent K halves per iteration (K a multiple of 2*BK)"""
    _, j, _ = tc.get_tile_block_id()
    px, pw = x.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    acc2 = tc.zeros((BN, BK), tc.f32)
    half = tc.num_tiles(pw, 1) // 2
    for k in range(half):
        acc = acc + pw.load((j, k)).astype(tc.f32) * px.load((0, k)).astype(tc.f32)
        acc2 = acc2 + pw.load((j, k + half)).astype(tc.f32) * px.load((0, k + half)).astype(tc.f32)
    _store_sum(z, (acc + acc2).sum(1).reshape((1, BN)), ACC)

def timeit(makes, reps=10):
    with ts.CudaGraph.scope() as g:
        for _ in range(reps):
            for make in makes:
                g.record(make())
    g.replay(); torch.cuda.synchronize()
    best = []
    for _ in range(7):
        t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize()
        best.append((time.perf_counter() - t0) / (reps * len(makes)))
    return min(best) * 1e6

keep = []
def case(n, k, cfg, kerns):
    ws = []
    for c in range(4):
        W = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02; keep.append(W); ws.append(ts.from_dlpack(W))
    X = torch.randn(1, k, device="cuda", dtype=torch.bfloat16); keep.append(X); x = ts.from_dlpack(X)
    out = ts.zeros((1, n), ts.bfloat16, device="cuda:0").sync()
    bn, bk = int(cfg["BN"]), int(cfg["BK"])
    res = []
    for kern in kerns:
        kv = G.with_occupancy(kern, cfg)
        makes = [(lambda w=w: kv(ts.borrow_mut(out).partition((1, bn)), x, w, BK=bk, ACC=False)) for w in ws]
        res.append(min(timeit(makes) for _ in range(2)))
    mb = n * k * 2 / 1e6
    print(f"N={n:6d} K={k:5d} {mb:6.1f} MB progs={n//bn:5d} iters={k//bk:3d} cfg={bn}x{bk}/occ{cfg.get('occupancy')} " +
          " | ".join(f"{kn.name} {t:.2f} us {mb/t:.2f} TB/s" for kn, t in zip(kerns, res)), flush=True)

A = {"BN": 8, "BK": 512, "occupancy": 4}
B = {"BN": 16, "BK": 512, "occupancy": 4}
for n in (256, 528, 1056, 2560, 5120, 10240):
    case(n, 4096, A, [G.gemv_rows, gemv_two])
for k in (1024, 2048, 4096, 8192, 16384):
    case(2560, k, A, [G.gemv_rows, gemv_two])
for n in (2112, 4224, 6144, 8448, 19456):
    case(n, 2560 if n != 6144 else 2560, B, [G.gemv_rows])
case(2560, 9728, {"BN": 16, "BK": 512, "occupancy": 2}, [G.gemv_rows])
case(2560, 9728, {"BN": 8, "BK": 512, "occupancy": 4}, [G.gemv_rows])
