"""Dropout and categorical sampling with counter-based random numbers (``tc.rand``).

Each random number is a pure function of (seed, offset): a kernel gives every element its own
offset (here its global index), so the result does not depend on the grid, the tile size or
the device, and the same seed reproduces it exactly.
"""

from __future__ import annotations

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel(examples=[{"B": 1024}])
def dropout(z: tc.MutTensor[tc.f32, ("B",)], x: tc.Tensor[tc.f32, (-1,)], p: float,
            seed: tc.i64, B: tc.Const[int]):
    """z = x / (1 - p) where rand >= p, else 0: each element kept with probability 1 - p."""
    offsets = tc.arange(B, tc.i32) + tc.get_tile_block_id()[0] * B
    keep = tc.rand(seed, offsets) >= p
    z.store(tc.where(keep, tc.load_tile_like(x, z) / (1.0 - p), 0.0))


@ts.kernel(examples=[{"R": 256, "K": 8}])
def sample_rows(z: tc.MutTensor[tc.i32, ("R",)], probs: tc.Tensor[tc.f32, (-1, "K")],
                seed: tc.i64, R: tc.Const[int], K: tc.Const[int]):
    """One draw per row from the categorical distribution in that row of ``probs``: the number
    of cumulative probabilities at or below a uniform number (inverse transform sampling)."""
    block = tc.get_tile_block_id()[0]
    p = probs.partition((R, K)).load((block, 0))
    rows = tc.arange(R, tc.i32) + block * R
    u = tc.reshape(tc.rand(seed, rows), (R, 1))   # one number per row: the row is its offset
    below = (tc.cumsum(p, 1) <= u).astype(tc.i32)
    z.store(tc.minimum(tc.reduce_sum(below, 1), K - 1))  # float rounding at the top end


def main(n: int = 100_000, rows: int = 20_000) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) + 3.0).astype(np.float32)
    p, seed = 0.3, 1234

    z, _ = dropout(ts.zeros(n).partition(1024), ts.tensor(x), p, seed).sync()
    out = z.unpartition().numpy()
    kept = out != 0
    assert abs(kept.mean() - (1 - p)) < 0.01, kept.mean()
    np.testing.assert_array_equal(out[kept], x[kept] / np.float32(1 - p))
    again, _ = dropout(ts.zeros(n).partition(4096), ts.tensor(x), p, seed).sync()
    assert np.array_equal(again.unpartition().numpy(), out)  # other tiles, same numbers
    other, _ = dropout(ts.zeros(n).partition(1024), ts.tensor(x), p, seed + 1).sync()
    assert not np.array_equal(other.unpartition().numpy(), out)

    weights = np.array([0.05, 0.1, 0.2, 0.3, 0.15, 0.1, 0.05, 0.05], dtype=np.float32)
    probs = np.tile(weights, (rows, 1))
    draws, _ = sample_rows(ts.zeros(rows, ts.int32).partition(256), ts.tensor(probs), 7).sync()
    counts = np.bincount(draws.unpartition().numpy(), minlength=8) / rows
    assert np.all(np.abs(counts - weights) < 0.015), counts


if __name__ == "__main__":
    main()
    print("dropout and sampling agree with their probabilities")
