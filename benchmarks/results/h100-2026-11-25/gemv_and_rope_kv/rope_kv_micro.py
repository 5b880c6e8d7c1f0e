"""Per-launch time of the rope + KV-write variants at decode shapes, graphs of 50 back-to-back."""
import time, sys, numpy as np, torch
import tilesafe as ts
from tilesafe import kernels as K
dev = "cuda:0"
def timeit(makes, reps=50):
    with ts.CudaGraph.scope() as g:
        for _ in range(reps):
            for m in makes:
                g.record(m())
    g.replay(); torch.cuda.synchronize()
    best = []
    for _ in range(7):
        t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize(); best.append((time.perf_counter() - t0) / reps)
    return min(best) * 1e6
for hq in (32, 16):
    hkv, d, S = 8, 128, 4096
    qkv = ts.randn((1, (hq + 2 * hkv) * d), dtype=ts.bfloat16, seed=1, device=dev).sync()
    q = qkv[:, :hq * d].reshape(1, hq, d); k = qkv[:, hq * d:(hq + hkv) * d].reshape(1, hkv, d); v = qkv[:, (hq + hkv) * d:].reshape(1, hkv, d)
    table = K.rope_cache(S, d, device=dev).sync()
    pos = ts.tensor(np.array([700], np.int32), device=dev).sync(); slot = ts.tensor(np.array([700], np.int32), device=dev).sync()
    ck = ts.zeros((1, S, hkv, d), ts.bfloat16, device=dev).sync(); cv = ts.zeros((1, S, hkv, d), ts.bfloat16, device=dev).sync()
    qn = ts.empty((1, hq, d), ts.bfloat16, device=dev).sync(); kn = ts.empty((1, hkv, d), ts.bfloat16, device=dev).sync()
    wq = ts.randn((d,), dtype=ts.bfloat16, seed=2, device=dev).sync(); wk = ts.randn((d,), dtype=ts.bfloat16, seed=3, device=dev).sync()
    qc, kc = qn.clone().sync(), kn.clone().sync()
    rows = ts.zeros((1, hkv), ts.int32, device=dev).sync()
    V = {
     "rope_copy_norm": [lambda: K.rope(q, k, table, pos, q_out=qn, k_out=kn, q_norm=wq, k_norm=wk)],
     "kv_update": [lambda: K.kv_cache_update(ck, cv, kn, v, slot, layout="nhd")],
     "fused_norm_rows": [lambda: K.rope_kv_cache_update(q, k, v, table, pos, ck, cv, slot, q_out=qn, q_norm=wq, k_norm=wk, workspace=rows)],
     "fused_norm_reuse": [lambda: K.rope_kv_cache_update(q, k, v, table, pos, ck, cv, slot, q_out=qn, q_norm=wq, k_norm=wk, workspace=rows, rows_in_workspace=True)],
     "two_launch": [lambda: K.rope(q, k, table, pos, q_out=qn, k_out=kn, q_norm=wq, k_norm=wk), lambda: K.kv_cache_update(ck, cv, kn, v, slot, layout="nhd")],
    }
    res = {}
    for rnd in range(3):
        for name, makes in V.items():
            try:
                res.setdefault(name, []).append(timeit(makes))
            except Exception as e:
                print(name, "FAILED", type(e).__name__, str(e)[:300], flush=True); res.setdefault(name, []).append(float("nan"))
    print(f"heads {hq}/{hkv}: " + " | ".join(f"{n} {min(r):.2f} us" for n, r in res.items()), flush=True)
