"""Mapped partitions (rule 3): persistent programs owning several output tiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.compiler.ops.mapped import mapped_coords
from tilesafe.errors import PartitionError, SafetyError
from conftest import poisoned


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 5), st.integers(1, 5))
def test_schedule_is_a_bijection_onto_the_tile_grid(n_m, n_n, gm, gn):
    coords = [mapped_coords(t, (n_m, n_n), (gm, gn)) for t in range(n_m * n_n)]
    assert sorted(coords) == [(m, n) for m in range(n_m) for n in range(n_n)]


def test_schedule_matches_the_grouped_order():
    # 8x4 tile grid, bands of 4 tile rows walked column by column
    assert [mapped_coords(t, (8, 4), (4, 1)) for t in (0, 1, 4, 6, 16, 31)] == \
        [(0, 0), (1, 0), (0, 1), (2, 1), (4, 0), (7, 3)]
    assert [mapped_coords(t, (2, 3), (1, 1)) for t in range(6)] == \
        [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


@ts.kernel
def persistent_gemm(z: tc.MappedPartitionMut[tc.f32, ("BM", "BN"), "M"],
                    x: tc.Tensor[tc.f32, (-1, -1)], y: tc.Tensor[tc.f32, (-1, -1)],
                    BM: tc.Const[int], BN: tc.Const[int], BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for k in range(tc.num_tiles(px, 1)):
            acc = tc.mma(px.load((m, k)), py.load((k, n)), acc)
        z.store(acc, idx)


@pytest.mark.parametrize("m,k,n,blocks,mapping", [(70, 40, 50, 3, (2, 1)), (64, 32, 64, 4, (1, 1)),
                                                  (33, 17, 65, 7, (2, 2))])
def test_persistent_gemm_non_divisible(rng, m, k, n, blocks, mapping):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    z = poisoned((m, n)).partition((16, 16)).map(mapping, blocks)
    out, *_ = persistent_gemm(z, ts.tensor(a), ts.tensor(b), 16, 16, 8).sync()
    assert out is z
    np.testing.assert_allclose(out.unpartition().numpy(), a @ b, rtol=1e-5, atol=1e-5)


@ts.kernel
def count_writes(z: tc.MappedPartitionMut[tc.i32, "S", "M"]):
    for idx in z.iter_indices():
        z.store(z.load(idx) + 1, idx)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.sampled_from([2, 4, 8]),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 12))
def test_every_element_written_exactly_once(rows, cols, tile, gm, gn, blocks):
    p = ts.zeros((rows, cols), ts.int32).sync().partition((tile, tile))
    total = p.grid[0] * p.grid[1]
    mp = p.map((gm, gn), min(blocks, total))
    out, = count_writes(mp).sync()
    assert np.array_equal(out.unpartition().numpy(), np.ones((rows, cols), np.int32))


def test_a_map_wider_than_the_grid_walks_it_as_the_grids_extent_does():
    """Groups wider than the tile grid give the schedule of groups of the grid's extent, and
    the GPU code takes the smaller of the two, so its 32-bit schedule arithmetic (group x
    grid) stays below the tile count. Unclamped, ``(2**31 - 1, 1)`` over a 4 x 4 grid wrapped
    in i32 and mapped two tile ids to one tile. A group of 2**31 or more is refused."""
    from tilesafe.compiler.ops.mapped import mapped_coords
    wide_map = ((1 << 31) - 1, 1 << 20)
    assert [mapped_coords(t, (4, 4), (4, 4)) for t in range(16)] == \
        [mapped_coords(t, (4, 4), wide_map) for t in range(16)]
    p = ts.zeros((16, 16), ts.int32).sync().partition((4, 4))
    out, = count_writes(p.map(wide_map, 16)).sync()
    assert np.array_equal(out.unpartition().numpy(), np.ones((16, 16), np.int32))
    p = ts.zeros((16, 16), ts.int32).sync().partition((4, 4))
    with pytest.raises(ts.PartitionError, match="32-bit"):
        p.map((1 << 31, 1), 4)
    from tilesafe.backends.tileir.lower import lower_kernel
    assert lower_kernel(count_writes.ir(p.map(wide_map, 16)))  # (sm_90: the compile suite)


def _compile(kernel, *extra):
    z = ts.zeros((8, 8), ts.int32).sync().partition((4, 4)).map((1, 1), 2)
    return kernel.ir(z, *extra)


def test_store_with_a_block_id_is_rejected():
    @ts.kernel
    def bad(z: tc.MappedPartitionMut[tc.i32, "S", "M"]):
        bid = tc.get_tile_block_id()
        z.store(tc.zeros((4, 4), tc.i32), bid)
    with pytest.raises(SafetyError, match="iter_indices"):
        _compile(bad)


def test_store_with_an_index_of_another_partition_is_rejected():
    @ts.kernel
    def bad(z: tc.MappedPartitionMut[tc.i32, "S", "M"], w: tc.MappedPartitionMut[tc.i32, "S", "M"]):
        for idx in w.iter_indices():
            z.store(tc.zeros((4, 4), tc.i32), idx)
    z = ts.zeros((8, 8), ts.int32).sync().partition((4, 4)).map((1, 1), 2)
    w = ts.zeros((8, 8), ts.int32).sync().partition((4, 4)).map((1, 1), 2)
    with pytest.raises(SafetyError, match="produced by the mapped partition 'w'"):
        bad.ir(z, w)


def test_an_index_cannot_leave_its_loop():
    @ts.kernel
    def bad(z: tc.MappedPartitionMut[tc.i32, "S", "M"]):
        for idx in z.iter_indices():
            pass
        z.store(tc.zeros((4, 4), tc.i32), idx)
    with pytest.raises(ts.CompileError, match="only defined inside the loop"):
        _compile(bad)


def test_map_validation():
    p = ts.zeros((8, 8)).sync().partition((4, 4))
    with pytest.raises(PartitionError, match="num_tile_blocks"):
        p.map((1, 1), 5)
    with pytest.raises(PartitionError, match="map shape"):
        p.map((1,), 2)
    assert p.map((2, 1), 4).grid == (4,)
