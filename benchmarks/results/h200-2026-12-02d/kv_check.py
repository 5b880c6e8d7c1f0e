"""kv_cache_update against torch's index_put, with the positions validated in every program of
the write (as before) and by a launch of one program before it (``validated_first``, the facts'
``VALIDATE_FIRST_ABOVE`` switched per case), at 64-4096 new tokens, both cache layouts:
bf16, 8 key/value heads of 128, 16384 slots, slots increasing (new tokens in order). Method:
benchmarks/_rowwise.py (poisoned output, float64 check, interleaved CUDA-graph rounds).

    python benchmarks/results/h200-2026-12-02d/kv_check.py OUTDIR
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks import _rowwise as rw  # noqa: E402
from benchmarks import kernels_positional as P  # noqa: E402
from tilesafe.backends.tileir import facts  # noqa: E402

MODES = {"in each program": 1 << 30, "validated first": 0}


def in_mode(case, mode, above):
    ours = case.ours

    def run(j):
        facts.VALIDATE_FIRST_ABOVE = above
        return ours(j)
    case.ours = run
    case.benchmark = f"{case.benchmark} ({mode})"
    return case


def nhd_case(tokens, device, generator, caches):
    import torch
    from tilesafe.kernels import kv_cache_update
    cache_k, cache_v = caches
    count = rw.set_count(rw.bytes_of("bfloat16", 4 * tokens * P.KV_HEADS * P.HEAD_DIM))
    ks = [rw.randn((tokens, P.KV_HEADS, P.HEAD_DIM), "bfloat16", device, generator)
          for _ in range(count)]
    vs = [rw.randn((tokens, P.KV_HEADS, P.HEAD_DIM), "bfloat16", device, generator)
          for _ in range(count)]
    slots = [torch.randperm(cache_k.shape[0], device=device, generator=generator)[:tokens]
             .sort().values for _ in range(count)]

    def theirs(j):
        cache_k[slots[j]] = ks[j]
        cache_v[slots[j]] = vs[j]
    return rw.Case("kv_update nhd", "bfloat16", rw.size_label(tokens, P.KV_HEADS * P.HEAD_DIM),
                   rw.bytes_of("bfloat16", 4 * tokens * P.KV_HEADS * P.HEAD_DIM), count,
                   ours=lambda j: kv_cache_update(cache_k, cache_v, ks[j], vs[j], slots[j],
                                                  layout="nhd"),
                   theirs=theirs, result=lambda: cache_k[slots[0]],
                   expected=lambda: ks[0].to(torch.float64),
                   poison=lambda: cache_k.fill_(float("nan")), reference="torch index_put")


def cases(device):
    import torch
    generator = torch.Generator(device=device).manual_seed(12)
    hnd = tuple(torch.zeros((P.CACHE_BATCH, P.KV_HEADS, P.CACHE_LEN, P.HEAD_DIM),
                            dtype=torch.bfloat16, device=device) for _ in range(2))
    nhd = tuple(torch.zeros((P.CACHE_BATCH * P.CACHE_LEN, P.KV_HEADS, P.HEAD_DIM),
                            dtype=torch.bfloat16, device=device) for _ in range(2))
    for tokens in (64, 512, 1024, 4096):
        for mode, above in MODES.items():
            yield in_mode(P.kv_update_case(tokens, device, generator, hnd), mode, above)
            yield in_mode(nhd_case(tokens, device, generator, nhd), mode, above)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    rows = rw.measure(cases("cuda:0"), "cuda:0", "positional")
    rw.report(rows, out, "kv_check", "kv_cache_update (GB/s; ratio = tilesafe / torch, same run)")
