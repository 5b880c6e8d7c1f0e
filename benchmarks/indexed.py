"""What checked indices cost: an embedding lookup with ``tc.gather`` against
``torch.nn.functional.embedding``; the safe GEMM (its partition loads checked where the compiler
cannot prove them) against the same kernel with ``unchecked_accesses``; and an indexed
partition's validation (a KV-cache update through ``partition(tile, at=positions)``) against
the same writes through an ordinary partition, which needs none.

Everything is measured in one process on one stream: each variant is a CUDA graph of a few
launches (tilesafe graphs for tilesafe, torch graphs for torch), replayed in interleaved
rounds (``_harness.interleaved_ms``), results checked before timing.

    python -m benchmarks indexed --device cuda:0 --out DIR [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import tilesafe as ts
import tilesafe.core as tc

from . import _harness as h

VOCAB = 151936  # Qwen3's vocabulary
EMBED_SHAPES = ((1, 1024), (32, 1024), (4096, 1024), (32, 2560), (4096, 2560))
GEMM_SHAPES = (4096, 8192)
GEMM_CONFIG = (128, 256, 64, (("num_worker_warps_per_cta", 8),))
KV_ROWS, KV_WIDTH = 8192, 1024  # cache rows (positions) of 1024 bf16 each
KV_COUNTS = (1, 32, 512, 4096)  # (positions in any order cost n**3 in all: 92 ms at 4096)


def embedding_kernel(unchecked: bool) -> Any:
    def embedding(out: tc.MutTensor["T", ("TT", "TD")], table: tc.Tensor["T", (-1, -1)],
                  ids: tc.Tensor[tc.i32, (-1,)]):
        i, j, _ = tc.get_tile_block_id()
        rows = ids.partition((TT,)).load(i, padding=0)
        cols = j * TD + tc.arange(TD, tc.i32)
        out.store(tc.gather(table, rows.reshape((TT, 1)), cols.reshape((1, TD))))
    return ts.kernel(embedding, unchecked_accesses=unchecked)


def kv_update_kernel() -> Any:
    def kv_update(cache: tc.MutTensor["T", ("W",)], rows: tc.Tensor["T", (-1,)]):
        i, _, _ = tc.get_tile_block_id()
        cache.store(rows.partition((W,)).load(i))
    return ts.kernel(kv_update)


def _graph(ts_stream: Any, make: Any, reps: int) -> Any:
    return h.tilesafe_graph(ts_stream, lambda: (make() for _ in range(reps)))


def _embeddings(device: str, quick: bool, rows: list, stream: Any, ts_stream: Any) -> None:
    import torch
    import torch.nn.functional as F
    generator = torch.Generator(device=device).manual_seed(2)
    table, table_view = h.shared((VOCAB, 2560), "bfloat16", device)
    h.fill_random(table_view, generator)
    kernels = {"safe": embedding_kernel(False), "unchecked": embedding_kernel(True)}
    for tokens, width in (EMBED_SHAPES[1:3] if quick else EMBED_SHAPES):
        view = table[:, :width]
        torch_table = table_view[:, :width]
        ids, ids_view = h.shared((tokens,), "int32", device)
        ids_view.copy_(torch.randint(0, VOCAB, (tokens,), device=device, generator=generator,
                                     dtype=torch.int32))
        tt = min(32, 1 << (tokens - 1).bit_length())
        reps = 20
        runs, outs = {}, []
        for name, kernel in kernels.items():
            out, out_view = h.shared((tokens, width), "bfloat16", device)
            h.poison(out_view)
            part = ts.borrow_mut(out)
            kernel(part.partition((tt, 128)), view, ids).sync_on(ts_stream)
            if not torch.equal(out_view, F.embedding(ids_view.long(), torch_table)):
                raise AssertionError(f"embedding {name} {tokens}x{width} differs from torch")
            runs[name] = _graph(ts_stream, lambda k=kernel, o=out: k(
                ts.borrow_mut(o).partition((tt, 128)), view, ids), reps)
            outs.append(out)
        ids_long = ids_view.long()
        result = torch.empty((tokens, width), dtype=torch.bfloat16, device=device)

        def body():
            for _ in range(reps):
                torch.index_select(torch_table, 0, ids_long, out=result)
        runs["torch"] = h.torch_graph(stream, body)
        timed = h.interleaved_ms(runs, stream, rounds=31)
        size = f"{tokens}x{width}"
        gbs = {k: 2 * tokens * width * 2 * reps / (v[0] * 1e-3) / 1e9 for k, v in timed.items()}
        for name in ("safe", "unchecked"):
            rows.append(h.Row("embedding", "bf16", size, name, gbs[name], "GB/s", "torch",
                              gbs["torch"]))
        rows.append(h.Row("embedding", "bf16", size, "safe", gbs["safe"], "GB/s", "unchecked",
                          gbs["unchecked"]))
        print(f"  embedding {size}: " + ", ".join(f"{k} {v:.0f} GB/s" for k, v in gbs.items()),
              flush=True)


def _gemms(device: str, quick: bool, rows: list, stream: Any, ts_stream: Any) -> None:
    import torch
    from .gemm import gemm_kernel
    generator = torch.Generator(device=device).manual_seed(3)
    bm, bn, bk, hints = GEMM_CONFIG
    for size in (GEMM_SHAPES[-1:] if quick else GEMM_SHAPES):
        a, av = h.shared((size, size), "float16", device)
        b, bv = h.shared((size, size), "float16", device)
        h.fill_random(av, generator)
        h.fill_random(bv, generator)
        ref = (av.float() @ bv.float())
        runs = {}
        for name, unchecked in (("safe", False), ("unchecked", True)):
            kernel = gemm_kernel("tiled", hints, unchecked)
            out, view = h.shared((size, size), "float16", device)
            h.poison(view)
            kernel(ts.borrow_mut(out).partition((bm, bn)), a, b, BK=bk).sync_on(ts_stream)
            err = h.relative_error(view, ref)
            if not err < 1e-2:
                raise AssertionError(f"gemm {name} {size}: relative error {err}")
            runs[name] = _graph(ts_stream, lambda k=kernel, o=out: k(
                ts.borrow_mut(o).partition((bm, bn)), a, b, BK=bk), 5)
        timed = h.interleaved_ms(runs, stream, rounds=41)
        tflops = {k: 2 * size ** 3 * 5 / (v[0] * 1e-3) / 1e12 for k, v in timed.items()}
        rows.append(h.Row("gemm_checks", "f16", f"{size}^3", "safe", tflops["safe"], "TFLOP/s",
                          "unchecked", tflops["unchecked"]))
        print(f"  gemm f16 {size}^3 tiled {bm}x{bn}x{bk}: safe {tflops['safe']:.0f}, "
              f"unchecked {tflops['unchecked']:.0f} TFLOP/s", flush=True)


def _kv_updates(device: str, quick: bool, rows: list, stream: Any, ts_stream: Any) -> None:
    import torch
    kernel = kv_update_kernel()
    generator = torch.Generator(device=device).manual_seed(4)
    cache, cache_view = h.shared((KV_ROWS * KV_WIDTH,), "bfloat16", device)
    for n in (KV_COUNTS[:2] if quick else KV_COUNTS):
        new, new_view = h.shared((n * KV_WIDTH,), "bfloat16", device)
        h.fill_random(new_view, generator)
        shuffled = np.random.default_rng(n).permutation(KV_ROWS)[:n].astype(np.int32)
        increasing = np.sort(shuffled)  # (a cache's slots: checked in one pass)
        orders = {"increasing": increasing, "any order": shuffled}
        positions = {}
        for name, order in orders.items():
            positions[name] = ts.tensor(order, device=device).sync()
            kernel(ts.borrow_mut(cache).partition(KV_WIDTH, at=positions[name]),
                   new).sync_on(ts_stream)
            got = cache_view.view(KV_ROWS, KV_WIDTH)[torch.as_tensor(order,
                                                                     device=device).long()]
            if not torch.equal(got, new_view.view(n, KV_WIDTH)):
                raise AssertionError(f"kv update n={n} ({name}): rows differ")
        plain = cache[0:n * KV_WIDTH]
        reps = 20 if n <= 1024 else 2
        runs = {name: _graph(ts_stream, lambda p=p: kernel(
            ts.borrow_mut(cache).partition(KV_WIDTH, at=p), new), reps)
            for name, p in positions.items()}
        runs["plain"] = _graph(ts_stream, lambda: kernel(
            ts.borrow_mut(plain).partition(KV_WIDTH), new), reps)
        timed = h.interleaved_ms(runs, stream, rounds=31 if n <= 1024 else 5)
        us = {k: v[0] * 1e3 / reps for k, v in timed.items()}
        for name in orders:
            rows.append(h.Row("kv_update", "bf16", f"n={n}", f"indexed, {name} (validated)",
                              us[name], "us", "plain partition", us["plain"],
                              lower_is_better=True))
        print(f"  kv update n={n}: indexed {us['increasing']:.2f} us (increasing), "
              f"{us['any order']:.2f} us (any order), plain {us['plain']:.2f} us per launch",
              flush=True)


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    import torch
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    rows: list = []
    with torch.cuda.stream(stream), ts.unsafe():  # (for the unchecked variants)
        _embeddings(device, quick, rows, stream, ts_stream)
        _gemms(device, quick, rows, stream, ts_stream)
        _kv_updates(device, quick, rows, stream, ts_stream)
    out.mkdir(parents=True, exist_ok=True)
    h.write_csv(rows, out / "indexed.csv")
    h.print_table("Checked indices (ratio = value / reference, same run)", rows)
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "indexed", argv)


if __name__ == "__main__":
    raise SystemExit(main())
