"""argmax/argmin, topk (both GPU strategies: reduction rounds for small k, a bitonic sort for
large k), static slices (aligned and in pieces) and cat on cuda:0, over a grid of row blocks,
against numpy and the interpreter, bit for bit (selection only moves values)."""

from __future__ import annotations

import numpy as np

import tilesafe as ts
import tilesafe.core as tc

GPU = "cuda:0"
ROWS = 256  # 128 programs of 2 rows (wide), 16 of 16 rows (narrow)


@ts.kernel
def wide_rows(vals: tc.MutTensor[tc.f32, (2, 512)], idx: tc.MutTensor[tc.i32, (2, 512)],
              best: tc.MutTensor[tc.i32, (2, 2)], x: tc.Tensor[tc.f32, (-1, 512)]):
    bx, _, _ = tc.get_tile_block_id()
    t = x.partition((2, 512)).load((bx, 0))
    values, indices = tc.topk(t, 512, axis=1)  # k=512 of 512: the bitonic sort
    vals.store(values)
    idx.store(indices)
    best.store(tc.cat((tc.argmax(t, 1, keepdims=True), t.argmin(1)[:, None]), 1))


@ts.kernel
def narrow_rows(vals: tc.MutTensor[tc.f16, (16, 8)], idx: tc.MutTensor[tc.i32, (16, 8)],
                mix: tc.MutTensor[tc.f16, (16, 32)], x: tc.Tensor[tc.f16, (-1, 128)]):
    bx, _, _ = tc.get_tile_block_id()
    t = x.partition((16, 128)).load((bx, 0))
    values, indices = tc.topk(t, 8)  # eight reduction rounds
    vals.store(values)
    idx.store(indices)
    mix.store(tc.cat((t[:, 96:112], t[:, 3:19]), 1))


def _order(x):
    """Stable descending order with NaN first (the documented topk order)."""
    wide = x.astype(np.float64)
    nan = np.isnan(wide)
    return np.lexsort((np.where(nan, 0.0, -wide), ~nan), axis=1)


def _wide_input(rng):
    x = rng.integers(-50, 50, (ROWS, 512)).astype(np.float32)  # many ties
    x[3, ::5] = np.nan
    x[7, :] = -np.inf
    x[9, 100] = np.inf
    return x


def _run(kernel, outs, x, device):
    results = kernel(*[ts.full(shape, -1, dtype, device=device).sync().partition(tile)
                       for shape, dtype, tile in outs], ts.tensor(x, device=device)).sync()
    return [r.unpartition().numpy() for r in results[:len(outs)]]


def test_wide_rows_topk_by_sorting_and_argmax(rng):
    x = _wide_input(rng)
    outs = [((ROWS, 512), ts.float32, (2, 512)), ((ROWS, 512), ts.int32, (2, 512)),
            ((ROWS, 2), ts.int32, (2, 2))]
    gpu = _run(wide_rows, outs, x, GPU)
    order = _order(x)
    np.testing.assert_array_equal(gpu[1], order)
    np.testing.assert_array_equal(gpu[0], np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(gpu[2], np.stack([x.argmax(1), x.argmin(1)], 1))
    for got, want in zip(gpu, _run(wide_rows, outs, x, "cpu")):
        np.testing.assert_array_equal(got, want)


def test_narrow_rows_topk_by_rounds_slices_and_cat(rng):
    x = rng.integers(-8, 8, (ROWS, 128)).astype(np.float16)
    x[5, 10:20] = np.nan
    outs = [((ROWS, 8), ts.float16, (16, 8)), ((ROWS, 8), ts.int32, (16, 8)),
            ((ROWS, 32), ts.float16, (16, 32))]
    gpu = _run(narrow_rows, outs, x, GPU)
    order = _order(x)[:, :8]
    np.testing.assert_array_equal(gpu[1], order)
    np.testing.assert_array_equal(gpu[0], np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(gpu[2], np.concatenate((x[:, 96:112], x[:, 3:19]), 1))
    for got, want in zip(gpu, _run(narrow_rows, outs, x, "cpu")):
        np.testing.assert_array_equal(got, want)
