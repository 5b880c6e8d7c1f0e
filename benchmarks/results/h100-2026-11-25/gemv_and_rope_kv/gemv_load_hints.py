"""GEMV weight-load hints A/B: latency (1-10) and allow_tma on gemv_rows, decode shapes of qwen3-4b."""
import time, sys, itertools, torch
import tilesafe as ts
import tilesafe.core as tc
from tilesafe.kernel import kernel
from tilesafe.kernels import gemv as G
from tilesafe.kernels.gemv import _store_sum

@kernel
def gemv_hinted(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, -1)],
                w: tc.Tensor["T", (-1, -1)], BK: tc.Const[int], ACC: tc.Const[bool],
                LAT: tc.Const[int], TMA: tc.Const[bool]):
    _, j, _ = tc.get_tile_block_id()
    px, pw = x.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        acc = acc + pw.load((j, k), latency=LAT, allow_tma=TMA).astype(tc.f32) * px.load((0, k)).astype(tc.f32)
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)

@kernel
def gemv_tma(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, -1)],
             w: tc.Tensor["T", (-1, -1)], BK: tc.Const[int], ACC: tc.Const[bool], TMA: tc.Const[bool]):
    _, j, _ = tc.get_tile_block_id()
    px, pw = x.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        acc = acc + pw.load((j, k), allow_tma=TMA).astype(tc.f32) * px.load((0, k)).astype(tc.f32)
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)

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

def R(shape, seed, scale=1.0):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).mul(scale).to(torch.bfloat16).cuda()
    return ts.from_dlpack(t), t

keep = []
LATS = [int(a) for a in (sys.argv[1] if len(sys.argv) > 1 else "1,3,6,10").split(",")]
SHAPES = [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)]
ALT = {"BN": 16, "BK": 512, "slices": 1, "occupancy": 4}
ALT2 = {"BN": 8, "BK": 1024, "slices": 1, "occupancy": 4}
for n, k in SHAPES:
    ws = []
    for c in range(4):
        w, W = R((n, k), 10 + c, 0.02); ws.append(w); keep.append(W)
    x, X = R((1, k), 2, 3.0); keep.append(X)
    out = ts.zeros((1, n), ts.bfloat16, device="cuda:0").sync()
    ref = (X.float() @ torch.stack([t for t in keep[-5:-1]])[0].float().T)
    tuned = G.launch_gemv.config_for(x, ws[0].T, G.Output(None, (1, n), ts.bfloat16, x.device), None, None)
    cfgs = [tuned] + [c for c in (ALT, ALT2) if c != tuned][:1]
    for cfg in cfgs:
        bn, bk = int(cfg["BN"]), int(cfg["BK"])
        def mk(kern, **kw):
            kv = G.with_occupancy(kern, cfg)
            return [(lambda w=w: kv(ts.borrow_mut(out).partition((1, bn)), x, w, BK=bk, ACC=False, **kw)) for w in ws]
        var = {"plain": mk(G.gemv_rows), "tmaF": mk(gemv_tma, TMA=False), "tmaT": mk(gemv_tma, TMA=True)}
        for lat, tma in itertools.product(LATS, (False, True)):
            var[f"L{lat}{'T' if tma else 'F'}"] = mk(gemv_hinted, LAT=lat, TMA=tma)
        res = {}
        for rnd in range(3):
            for name, makes in var.items():
                try:
                    us = timeit(makes)
                    if rnd == 0:
                        makes[0]().sync()
                        got = torch.from_dlpack(out.to_dlpack() if hasattr(out, "to_dlpack") else out).float() if False else None
                except Exception as e:
                    print(name, "FAILED", type(e).__name__, str(e)[:300], flush=True); us = float("nan")
                res.setdefault(name, []).append(us)
        mb = n * k * 2 / 1e6
        print(f"N={n} K={k} {mb:.1f} MB cfg={cfg}", flush=True)
        print("   " + " | ".join(f"{nm} {min(v):.2f}" for nm, v in res.items()), flush=True)
        print("   TB/s " + " | ".join(f"{nm} {mb/min(v)/1e6:.2f}" for nm, v in res.items()), flush=True)
