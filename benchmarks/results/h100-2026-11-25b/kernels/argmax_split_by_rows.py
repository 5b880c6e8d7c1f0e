"""argmax over 151936 bf16 logits: split schedule vs one program per row, by row count."""
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
for rows in (1, 8, 16, 32, 64):
    x = torch.randn(rows, 151936, device="cuda", dtype=torch.bfloat16)
    res = {}
    for split in (True, False):
        S.SPLIT_MAX_ROWS = 64 if split else 0
        got = K.argmax(x)
        assert torch.equal(got.long(), torch.argmax(x, -1)), (rows, split)
        res[split] = timed(lambda: K.argmax(x))
    t = timed(lambda: torch.argmax(x, -1))
    print(f"rows {rows:3d}: split {res[True]:6.1f} us, one program per row {res[False]:6.1f} us, torch {t:6.1f} us", flush=True)
