"""Histograms with an atomic tensor: every program adds its values' counts into one shared
tensor of bins, by atomic adds only (``tc.AtomicTensor``, passed as ``ts.atomic(h)``).

* ``histogram`` adds 1 per value, straight into the bins (duplicates within a tile all count);
* ``histogram_onehot`` first counts its tile per bin (a one-hot comparison, summed), then adds
  one count per bin: fewer, uncontended atomics when the bins are few;
* ``expert_counts`` is the counting step of a mixture-of-experts router: how many tokens each
  expert receives from a ``(tokens, top_k)`` tensor of expert ids.
"""

from __future__ import annotations

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel(examples=[{"TILE": 1024}])
def histogram(h: tc.AtomicTensor[tc.i32, (-1,)], x: tc.Tensor[tc.i32, (-1,)],
              TILE: tc.Const[int]):
    bid = tc.get_tile_block_id()[0]
    bins = x.partition((TILE,)).load(bid)
    at = bid * TILE + tc.arange(TILE, tc.i32)
    h.atomic_add(1, bins, mask=at < x.shape[0])  # the last tile may be partial


@ts.kernel(examples=[{"B": 256, "TILE": 256}])
def histogram_onehot(h: tc.AtomicTensor[tc.i32, ("B",)], x: tc.Tensor[tc.i32, (-1,)],
                     TILE: tc.Const[int]):
    bid = tc.get_tile_block_id()[0]
    bins = x.partition((TILE,)).load(bid)
    at = bid * TILE + tc.arange(TILE, tc.i32)
    bins = tc.where(at < x.shape[0], bins, -1)  # past the end: in no bin
    hits = bins.reshape((TILE, 1)) == tc.arange(B, tc.i32).reshape((1, B))
    h.atomic_add(hits.astype(tc.i32).sum(axis=0), tc.arange(B, tc.i32))


@ts.kernel(examples=[{"K": 2, "ROWS": 64}])
def expert_counts(counts: tc.AtomicTensor[tc.i32, (-1,)],
                  experts: tc.Tensor[tc.i32, (-1, "K")], ROWS: tc.Const[int]):
    bid = tc.get_tile_block_id()[0]
    ids = experts.partition((ROWS, K)).load(bid, 0)
    row = bid * ROWS + tc.arange(ROWS, tc.i32).reshape((ROWS, 1))
    counts.atomic_add(1, ids, mask=row < experts.shape[0])


def bincount(x: np.ndarray, bins: int, *, onehot: bool = False, tile: int = 1024) -> np.ndarray:
    """``np.bincount(x, minlength=bins)`` of int32 values in ``[0, bins)`` with either kernel
    (``bins`` a power of two for ``onehot``)."""
    h = ts.zeros(bins, dtype=ts.int32).sync()
    grid = (-(-len(x) // tile),)
    kernel = histogram_onehot if onehot else histogram
    h, _ = kernel(ts.atomic(h), ts.tensor(x), tile, grid=grid).sync()  # h comes back
    return h.numpy()


def main(n: int = 10_000, bins: int = 256) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, bins, n).astype(np.int32)
    want = np.bincount(x, minlength=bins)
    assert np.array_equal(bincount(x, bins), want)
    assert np.array_equal(bincount(x, bins, onehot=True, tile=256), want)
    experts = rng.integers(0, 8, (n // 10, 2)).astype(np.int32)
    counts = ts.zeros(8, dtype=ts.int32).sync()
    grid = (-(-len(experts) // 64),)
    expert_counts(ts.atomic(counts), ts.tensor(experts), 64, grid=grid).sync()
    assert np.array_equal(counts.numpy(), np.bincount(experts.ravel(), minlength=8))


if __name__ == "__main__":
    main()
    print("histograms match np.bincount")
