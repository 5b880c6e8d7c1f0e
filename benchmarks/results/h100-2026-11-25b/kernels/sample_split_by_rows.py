"""sample (full vocabulary) over 151936 bf16 logits: split vs one program per row, by rows."""
import torch
from tilesafe import kernels as K
from tilesafe.kernels import sampling as S
def timed(fn, reps=20):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(); torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps): fn()
    out = []
    for _ in range(9):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b) / reps * 1e3)
    return sorted(out)[4]
off = torch.tensor([11], device="cuda", dtype=torch.int64)
for rows in (1, 8, 32):
    x = torch.randn(rows, 151936, device="cuda", dtype=torch.bfloat16)
    res, tok = {}, {}
    for split in (True, False):
        S.SPLIT_MAX_ROWS = 64 if split else 0
        tok[split] = K.sample(x, temperature=0.8, seed=3, offset=off)
        res[split] = timed(lambda: K.sample(x, temperature=0.8, seed=3, offset=off))
    t = timed(lambda: torch.multinomial(torch.softmax(x.float() / 0.8, -1), 1))
    print(f"rows {rows:3d}: split {res[True]:6.1f} us, one program per row {res[False]:6.1f} us, torch softmax+multinomial {t:6.1f} us; same tokens: {torch.equal(tok[True], tok[False])}", flush=True)
