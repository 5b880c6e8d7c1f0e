"""The foundation's acceptance examples: the README kernel, a tiled f64 matmul with an mma
K-loop (divisible and non-divisible shapes), and a row softmax."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import poisoned


@ts.kernel
def add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def test_readme_example():
    n = 1 << 20
    x = ts.arange(n, dtype=ts.float32)
    y = ts.ones(n, dtype=ts.float32)
    z = ts.zeros(n, dtype=ts.float32).partition(1024)
    z, x, y = add(z, x, y).sync()
    assert np.array_equal(z.unpartition().numpy(), np.arange(n, dtype=np.float32) + 1)


def test_launch_returns_the_same_objects(rng):
    x, y = ts.tensor(rng.standard_normal(100, dtype=np.float32)).sync(), ts.ones(100).sync()
    z = poisoned(100).partition(32)
    out = add(z, x, y).sync()
    assert out[0] is z and out[1] is x and out[2] is y


@ts.kernel
def matmul(z: tc.MutTensor[tc.f64, ("BM", "BN")], x: tc.Tensor[tc.f64, (-1, -1)],
           y: tc.Tensor[tc.f64, (-1, -1)], BM: tc.Const[int], BN: tc.Const[int],
           BK: tc.Const[int]):
    px = x.partition((BM, BK))
    py = y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), tc.f64)
    for k in range(tc.num_tiles(px, 1)):
        acc = tc.mma(px.load((i, k)), py.load((k, j)), acc)
    z.store(acc)


@pytest.mark.parametrize("m,k,n", [(96, 64, 80), (70, 64, 50)])
def test_tiled_matmul_f64(rng, m, k, n):
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    z = poisoned((m, n), ts.float64).partition((32, 32))
    z, *_ = matmul(z, ts.tensor(a), ts.tensor(b), 32, 32, 16).sync()
    out = z.unpartition().numpy()
    assert not np.isnan(out).any(), "an output element was not written"
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


@ts.kernel
def softmax(z: tc.MutTensor[tc.f32, (1, "BN")], x: tc.Tensor[tc.f32, (-1, -1)],
            BN: tc.Const[int]):
    row = tc.load_tile_like(x, z, padding=float("-inf"))
    e = tc.exp(row - tc.reduce_max(row, 1, keepdims=True))
    z.store(e / tc.reduce_sum(e, 1, keepdims=True))


@pytest.mark.parametrize("rows,cols,block", [(37, 100, 128), (8, 64, 64), (3, 5, 8)])
def test_softmax_rows_f32(rng, rows, cols, block):
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    z = poisoned((rows, cols)).partition((1, block))
    z, _ = softmax(z, ts.tensor(x), block).sync()
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(z.unpartition().numpy(), ref, rtol=1e-6, atol=1e-6)
