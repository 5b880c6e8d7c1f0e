"""Split-K matrix multiply: the K dimension is cut into slices, each tile program multiplies one
(row tile, column tile, K slice) and adds its partial product into the output with atomic adds
(a ``tc.AtomicTensor``), so several programs accumulate into the same output tile safely. Useful
when M x N alone has too few tiles to fill the GPU. Float additions land in an unspecified
order: the result may differ from run to run in the last bits (well within the tolerance of a
float32 product)."""

from __future__ import annotations

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel(examples=[{"BM": 32, "BN": 32, "BK": 64}])
def split_k_gemm(c: tc.AtomicTensor[tc.f32, (-1, -1)], a: tc.Tensor[tc.f32, (-1, -1)],
                 b: tc.Tensor[tc.f32, (-1, -1)], BM: tc.Const[int], BN: tc.Const[int],
                 BK: tc.Const[int]):
    i, j, s = tc.get_tile_block_id()  # row tile, column tile, K slice
    part = a.partition((BM, BK)).load(i, s) @ b.partition((BK, BN)).load(s, j)
    rows = (i * BM + tc.arange(BM, tc.i32)).reshape((BM, 1))
    cols = (j * BN + tc.arange(BN, tc.i32)).reshape((1, BN))
    c.atomic_add(part, rows, cols, mask=(rows < c.shape[0]) & (cols < c.shape[1]))


def matmul(a: np.ndarray, b: np.ndarray, bm: int = 32, bn: int = 32, bk: int = 64) -> np.ndarray:
    """``a @ b`` in float32 with split-K (edge tiles padded with zeros, masked on the add)."""
    (m, k), n = a.shape, b.shape[1]
    c = ts.zeros((m, n), dtype=ts.float32).sync()
    grid = (-(-m // bm), -(-n // bn), -(-k // bk))
    c, _, _ = split_k_gemm(ts.atomic(c), ts.tensor(a), ts.tensor(b), bm, bn, bk,
                           grid=grid).sync()  # the launch hands c back
    return c.numpy()


def main(m: int = 70, n: int = 50, k: int = 300) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    got = matmul(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2 * k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(got - want) <= bound)
    return float(np.abs(got - want).max())


if __name__ == "__main__":
    print(f"max abs error: {main():.2e}")
