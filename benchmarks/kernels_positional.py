"""Positions and tokens: ``rope``, ``embedding``, ``kv_cache_update``, ``argmax`` and
``sample`` of ``tilesafe.kernels`` against torch and the copy bandwidth of the same bytes, on
one GPU, in one process (method: ``benchmarks/_rowwise.py``: poisoned output, a float64 check,
torch CUDA graphs of the library's torch surface, interleaved CUDA-event rounds).

* ``rope``: Qwen3-8B heads (32 query, 8 key/value, head_dim 128), bf16, tokens 1-4096, the
  rotated heads written out of place, against transformers' formula in torch eager
  (``q*cos + rotate_half(q)*sin`` on rows gathered from a cos/sin cache) and, when it
  compiles, the same function under ``torch.compile``;
* ``embedding``: a 151936-row bf16 table, hidden 1024-8192, tokens 1-4096, against
  ``F.embedding``;
* ``kv_update``: tokens of 8 x 128 bf16 heads into head-major key and value caches (64
  sequences of 256 positions: ``decode_attention``'s layout) at increasing slots, tokens
  1-4096, against torch's indexed assignment ``cache[seq, :, pos] = k`` on both caches;
* ``argmax``: (batch, 151936) bf16 and f32 logits, batch 1-64, against ``torch.argmax``;
* ``sample``: (batch, 151936) bf16 logits, temperature 0.7, full-vocabulary sampling against
  ``softmax`` + ``multinomial``, and top-k 20 / top-p 0.95 against ``topk`` + top-p mask +
  ``multinomial``; the check asserts that every drawn token is allowed (inside the vocabulary,
  or among the row's 20 largest logits), since two random generators cannot agree.

Bandwidth counts the bytes that must move (inputs read once, outputs written once).

    python -m benchmarks kernels --device cuda:0 --out DIR   (with the other families)
    python -m benchmarks.kernels_positional --device cuda:0 --out DIR [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from . import _harness as h
from . import _rowwise as rw

VOCAB = 151936  # Qwen3
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128  # Qwen3-8B
MAX_POSITIONS = 8192
CACHE_BATCH, CACHE_LEN = 64, 256  # 16384 token slots
BASE = 1_000_000.0
TOKENS = (1, 32, 512, 4096)
HIDDEN = (1024, 4096, 8192)
BATCH = (1, 8, 32, 64)
QUICK_TOKENS, QUICK_HIDDEN, QUICK_BATCH = (32, 4096), (4096,), (32,)
TEMPERATURE, TOP_K, TOP_P = 0.7, 20, 0.95


def _rotate_half(x: Any) -> Any:
    import torch
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_rope(q: Any, k: Any, cos_cache: Any, sin_cache: Any, positions: Any) -> tuple:
    """transformers' apply_rotary_pos_emb on cos/sin rows gathered by position (the cos and
    sin of ``emb = cat(freqs, freqs)``, cast to the activations' dtype as transformers does)."""
    cos = cos_cache[positions].unsqueeze(1).to(q.dtype)
    sin = sin_cache[positions].unsqueeze(1).to(q.dtype)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _tables(device: str) -> tuple:
    """The library's table and transformers' full-width cos and sin caches (float32)."""
    import torch

    from tilesafe.kernels import rope_cache
    table = torch.from_dlpack(rope_cache(MAX_POSITIONS, HEAD_DIM, base=BASE,
                                         device=device).sync()).clone()
    half = HEAD_DIM // 2
    cos = torch.cat((table[:, :half], table[:, :half]), dim=-1)
    sin = torch.cat((table[:, half:], table[:, half:]), dim=-1)
    return table, cos, sin


def rope_cases(tokens: int, device: str, generator: Any, tables: tuple,
               compiled: bool) -> Iterator[rw.Case]:
    import torch

    from tilesafe.kernels import rope
    table, cos, sin = tables
    dtype = "bfloat16"
    moved = rw.bytes_of(dtype, 2 * tokens * (HEADS + KV_HEADS) * HEAD_DIM)
    count = rw.set_count(moved)
    qs = [rw.randn((tokens, HEADS, HEAD_DIM), dtype, device, generator) for _ in range(count)]
    ks = [rw.randn((tokens, KV_HEADS, HEAD_DIM), dtype, device, generator)
          for _ in range(count)]
    q_outs = [torch.empty_like(q) for q in qs]
    k_outs = [torch.empty_like(k) for k in ks]
    positions = [torch.randint(0, MAX_POSITIONS, (tokens,), device=device, generator=generator)
                 for _ in range(count)]

    def expected() -> Any:
        c = cos.to(torch.float64)[positions[0]].unsqueeze(1)
        s = sin.to(torch.float64)[positions[0]].unsqueeze(1)
        q = qs[0].to(torch.float64)
        return q * c + _rotate_half(q) * s
    common = dict(benchmark="rope", dtype=dtype,
                  size=rw.size_label(tokens, HEADS * HEAD_DIM), bytes_moved=moved, sets=count,
                  ours=lambda j: rope(qs[j], ks[j], table, positions[j], q_out=q_outs[j],
                                      k_out=k_outs[j]),
                  result=lambda: q_outs[0], expected=expected,
                  poison=lambda: q_outs[0].fill_(float("nan")))
    yield rw.Case(theirs=lambda j: hf_rope(qs[j], ks[j], cos, sin, positions[j]),
                  reference="torch", **common)
    if compiled:
        try:
            fused = torch.compile(hf_rope, dynamic=False)
            fused(qs[0], ks[0], cos, sin, positions[0])
        except Exception as err:  # noqa: BLE001 (torch.compile is optional here)
            print(f"  (torch.compile of the rope reference failed: {err}; skipped)")
            return
        yield rw.Case(theirs=lambda j: fused(qs[j], ks[j], cos, sin, positions[j]),
                      reference="torch.compile", **common)


def embedding_case(tokens: int, hidden: int, device: str, generator: Any,
                   table: Any) -> rw.Case:
    import torch
    import torch.nn.functional as F

    from tilesafe.kernels import embedding
    dtype = "bfloat16"
    view = table[:, :hidden]
    moved = rw.bytes_of(dtype, 2 * tokens * hidden)
    count = rw.set_count(moved)
    ids = [torch.randint(0, VOCAB, (tokens,), device=device, generator=generator,
                         dtype=torch.int32) for _ in range(count)]
    outs = [torch.empty((tokens, hidden), dtype=torch.bfloat16, device=device)
            for _ in range(count)]
    ids_long = [i.long() for i in ids]
    return rw.Case("embedding", dtype, rw.size_label(tokens, hidden), moved, count,
                   ours=lambda j: embedding(ids[j], view, out=outs[j]),
                   theirs=lambda j: F.embedding(ids_long[j], view),
                   result=lambda: outs[0],
                   expected=lambda: F.embedding(ids_long[0], view).to(torch.float64),
                   poison=lambda: outs[0].fill_(float("nan")))


def kv_update_case(tokens: int, device: str, generator: Any, caches: tuple) -> rw.Case:
    import torch

    from tilesafe.kernels import kv_cache_update
    cache_k, cache_v = caches
    dtype = "bfloat16"
    moved = rw.bytes_of(dtype, 4 * tokens * KV_HEADS * HEAD_DIM)
    count = rw.set_count(moved)
    ks = [rw.randn((tokens, KV_HEADS, HEAD_DIM), dtype, device, generator)
          for _ in range(count)]
    vs = [rw.randn((tokens, KV_HEADS, HEAD_DIM), dtype, device, generator)
          for _ in range(count)]
    slots = [torch.randperm(CACHE_BATCH * CACHE_LEN, device=device, generator=generator)
             [:tokens].sort().values for _ in range(count)]  # increasing: new tokens in order
    sequences = [s // CACHE_LEN for s in slots]
    positions = [s % CACHE_LEN for s in slots]
    workspaces = [torch.empty((tokens, 3), dtype=torch.int64, device=device)
                  for _ in range(count)]

    def theirs(j: int) -> None:
        cache_k[sequences[j], :, positions[j]] = ks[j]
        cache_v[sequences[j], :, positions[j]] = vs[j]
    return rw.Case("kv_update", dtype, rw.size_label(tokens, KV_HEADS * HEAD_DIM), moved,
                   count, ours=lambda j: kv_cache_update(cache_k, cache_v, ks[j], vs[j],
                                                         slots[j], workspace=workspaces[j]),
                   theirs=theirs, result=lambda: cache_k[sequences[0], :, positions[0]],
                   expected=lambda: ks[0].to(torch.float64),
                   poison=lambda: cache_k.fill_(float("nan")), reference="torch index_put")


def argmax_case(batch: int, dtype: str, device: str, generator: Any) -> rw.Case:
    import torch

    from tilesafe.kernels import argmax
    moved = rw.bytes_of(dtype, batch * VOCAB)
    count = rw.set_count(moved)
    logits = [rw.randn((batch, VOCAB), dtype, device, generator, 3.0) for _ in range(count)]
    outs = [torch.empty((batch,), dtype=torch.int32, device=device) for _ in range(count)]
    return rw.Case("argmax", dtype, rw.size_label(batch, VOCAB), moved, count,
                   ours=lambda j: argmax(logits[j], out=outs[j]),
                   theirs=lambda j: torch.argmax(logits[j], -1),
                   result=lambda: outs[0],
                   expected=lambda: torch.argmax(logits[0], -1).to(torch.float64),
                   poison=lambda: outs[0].fill_(-1))


def sample_case(batch: int, top_k: int, device: str, generator: Any, offset: Any) -> rw.Case:
    import torch

    from tilesafe.kernels import sample
    dtype = "bfloat16"
    moved = rw.bytes_of(dtype, batch * VOCAB)
    count = rw.set_count(moved)
    logits = [rw.randn((batch, VOCAB), dtype, device, generator, 3.0) for _ in range(count)]
    outs = [torch.empty((batch,), dtype=torch.int32, device=device) for _ in range(count)]
    top_p = TOP_P if top_k else 1.0

    def theirs(j: int) -> Any:
        scaled = logits[j].float() / TEMPERATURE
        if not top_k:
            return torch.multinomial(torch.softmax(scaled, -1), 1)
        values, indices = torch.topk(scaled, top_k)
        probs = torch.softmax(values, -1)
        before = torch.cumsum(probs, -1) - probs
        probs = torch.where(before < top_p, probs, torch.zeros_like(probs))
        return indices.gather(-1, torch.multinomial(probs, 1))

    def allowed() -> Any:
        """1.0 for each drawn token the options allow (the check wants all ones)."""
        tokens = outs[0].long()
        inside = (tokens >= 0) & (tokens < VOCAB)
        if top_k:
            kth = torch.topk(logits[0].float(), top_k).values[:, -1]
            chosen = logits[0].float().gather(-1, tokens.clamp(0, VOCAB - 1)[:, None])[:, 0]
            inside &= chosen >= kth
        return inside.to(torch.float64)
    label = f"topk{top_k}_topp{top_p}" if top_k else "full"
    return rw.Case(f"sample_{label}", dtype, rw.size_label(batch, VOCAB), moved, count,
                   ours=lambda j: sample(logits[j], temperature=TEMPERATURE, top_k=top_k,
                                         top_p=top_p, seed=1, offset=offset, out=outs[j]),
                   theirs=theirs, result=allowed,
                   expected=lambda: torch.ones(batch, dtype=torch.float64, device=device),
                   poison=lambda: outs[0].fill_(-1), reference="torch multinomial")


def cases(device: str, quick: bool) -> Iterator[rw.Case]:
    import torch
    generator = torch.Generator(device=device).manual_seed(12)
    tables = _tables(device)
    for tokens in (QUICK_TOKENS if quick else TOKENS):
        yield from rope_cases(tokens, device, generator, tables, compiled=not quick)
    del tables
    table = rw.randn((VOCAB, max(HIDDEN)), "bfloat16", device, generator)
    for tokens, hidden in rw.shapes(quick, TOKENS, HIDDEN, QUICK_TOKENS, QUICK_HIDDEN):
        yield embedding_case(tokens, hidden, device, generator, table)
    del table
    caches = tuple(torch.zeros((CACHE_BATCH, KV_HEADS, CACHE_LEN, HEAD_DIM),
                               dtype=torch.bfloat16, device=device) for _ in range(2))
    for tokens in (QUICK_TOKENS if quick else TOKENS):
        yield kv_update_case(tokens, device, generator, caches)
    del caches
    for dtype in (("bfloat16",) if quick else ("bfloat16", "float32")):
        for batch in (QUICK_BATCH if quick else BATCH):
            yield argmax_case(batch, dtype, device, generator)
    offset = torch.zeros((1,), dtype=torch.int64, device=device)  # fed on the device
    for top_k in (0, TOP_K):
        for batch in (QUICK_BATCH if quick else BATCH):
            yield sample_case(batch, top_k, device, generator, offset)


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    """Measure every case; write kernels_positional.csv and the plots under ``out``."""
    rows = rw.measure(cases(device, quick), device, "positional")
    rw.report(rows, out, "positional",
              "positions and tokens (GB/s; ratio = tilesafe / reference, same run)")
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "kernels_positional", argv)


if __name__ == "__main__":
    raise SystemExit(main())
