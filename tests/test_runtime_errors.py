"""Misuse is a feature: what only shows up while tile programs run (the interpreter). A partition
index outside the tile grid, and a raw-pointer access outside the allocation in an unsafe
kernel, raise KernelRuntimeError naming the kernel, the tile program, the offending values and
the kernel's source line (marked ``# <- tag``). Afterwards the arguments are usable again.
"""

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc

pytestmark = pytest.mark.interpreter_only("the interpreter's out-of-bounds diagnostics")
from conftest import marker_line
from tilesafe.errors import KernelRuntimeError, TilesafeError

FILE = os.path.abspath(__file__)


def here(tag: str) -> int:
    """The 1-based line of this file that carries the marker ``# <- tag``."""
    return marker_line(__file__, tag)


def runtime_error(thunk) -> str:
    with pytest.raises(KernelRuntimeError) as info:
        thunk()
    assert isinstance(info.value, TilesafeError)
    return str(info.value)


# =============================================================================================
# a partition index outside the tile grid


@ts.kernel
def shift_left(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)]):
    px = x.partition((8,))
    i, _, _ = tc.get_tile_block_id()
    z.store(px.load(i + 1))  # <- past-the-end


@ts.kernel
def shift_right(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)]):
    px = x.partition((8,))
    i, _, _ = tc.get_tile_block_id()
    z.store(px.load(i - 1))  # <- before-start


@ts.kernel
def transpose_tiles(z: tc.MutTensor[tc.f32, (4, 8)], x: tc.Tensor[tc.f32, (-1, -1)]):
    px = x.partition((4, 8))
    i, j, _ = tc.get_tile_block_id()
    t = px.load((j, i))  # <- transposed-index
    z.store(t)


@ts.kernel
def loop_over_tiles(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)], n: int):
    px = x.partition((8,))
    acc = tc.zeros((8,), tc.f32)
    for k in range(n):
        acc = acc + px.load(k)  # <- loop-index
    z.store(acc)


def test_index_past_the_end_of_the_grid():
    x = ts.tensor(np.arange(32, dtype=np.float32)).sync()
    z = ts.full(32, -1.0).sync().partition(8)
    text = runtime_error(lambda: shift_left(z, x).sync())
    assert text.startswith(f"{FILE}:{here('past-the-end')}: "), text
    assert "kernel 'shift_left'" in text
    assert "tile program (3, 0, 0)" in text
    assert "index (4,) is outside the tile grid (4,)" in text
    # programs 0-2 ran before the failure; the arguments are not left borrowed or moved
    assert np.array_equal(x.numpy(), np.arange(32, dtype=np.float32))
    out = z.unpartition().numpy()
    assert np.array_equal(out[:24], np.arange(8, 32, dtype=np.float32))
    assert np.array_equal(out[24:], np.full(8, -1.0, np.float32)), "the failing program wrote"


def test_negative_index():
    x = ts.tensor(np.arange(32, dtype=np.float32)).sync()
    z = ts.full(32, -1.0).sync().partition(8)
    text = runtime_error(lambda: shift_right(z, x).sync())
    assert text.startswith(f"{FILE}:{here('before-start')}: "), text
    assert "kernel 'shift_right'" in text and "tile program (0, 0, 0)" in text
    assert "index (-1,) is outside the tile grid (4,)" in text
    assert np.array_equal(z.unpartition().numpy(), np.full(32, -1.0, np.float32))


def test_index_outside_a_2d_grid():
    x = ts.tensor(np.arange(8 * 32, dtype=np.float32).reshape(8, 32)).sync()  # grid (2, 4)
    z = ts.full((8, 32), -1.0).sync().partition((4, 8))
    text = runtime_error(lambda: transpose_tiles(z, x).sync())
    assert text.startswith(f"{FILE}:{here('transposed-index')}: "), text
    assert "kernel 'transpose_tiles'" in text
    assert "tile program (0, 2, 0)" in text  # the first program with j = 2 >= 2 rows of tiles
    assert "index (2, 0) is outside the tile grid (2, 4)" in text
    z.unpartition()


def test_index_from_a_loop_bound():
    x = ts.ones(20).sync()  # grid (3,): tiles 0, 1, 2 (the last one partial)
    z = ts.full(8, -1.0).sync().partition(8)
    loop_over_tiles(z, x, 3).sync()  # in range: the partial tile is padded with zeros
    assert np.array_equal(z.unpartition().numpy(), np.array([3, 3, 3, 3, 2, 2, 2, 2],
                                                            np.float32))
    z = ts.full(8, -1.0).sync().partition(8)
    text = runtime_error(lambda: loop_over_tiles(z, x, 4).sync())
    assert text.startswith(f"{FILE}:{here('loop-index')}: "), text
    assert "tile program (0, 0, 0)" in text and "index (3,) is outside the tile grid (3,)" in text


def test_the_same_launch_in_range_runs():
    x = ts.tensor(np.arange(40, dtype=np.float32)).sync()  # grid (5,) for x, (4,) for z
    z = ts.full(32, -1.0).sync().partition(8)
    shift_left(z, x).sync()
    assert np.array_equal(z.unpartition().numpy(), np.arange(8, 40, dtype=np.float32))


# =============================================================================================
# raw pointers out of the allocation (unsafe kernels)


@ts.kernel
def gather_shifted(z: tc.MutTensor[tc.f32, (8,)], p: tc.Ptr[tc.f32], shift: int):
    i, _, _ = tc.get_tile_block_id()
    offsets = tc.arange(8) + i * 8 + shift
    z.store(tc.load_ptr(p, offsets))  # <- ptr-load


@ts.kernel
def gather_masked(z: tc.MutTensor[tc.f32, (8,)], p: tc.Ptr[tc.f32], shift: int, n: int):
    i, _, _ = tc.get_tile_block_id()
    offsets = tc.arange(8) + i * 8 + shift
    z.store(tc.load_ptr(p, offsets, (offsets >= 0) & (offsets < n), -5.0))


@ts.kernel
def scatter_shifted(z: tc.MutTensor[tc.f32, (8,)], p: tc.Ptr[tc.f32], shift: int):
    i, _, _ = tc.get_tile_block_id()
    offsets = tc.arange(8) + i * 8 + shift
    tc.store_ptr(p, offsets, z.load())  # <- ptr-store


@ts.kernel(unchecked_accesses=True)
def unchecked_copy(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z))


def test_pointer_load_past_the_allocation():
    src = ts.tensor(np.arange(32, dtype=np.float32)).sync()
    z = ts.full(32, -1.0).sync().partition(8)
    with ts.unsafe():
        op = gather_shifted(z, src, 1)
    text = runtime_error(op.sync)
    assert text.startswith(f"{FILE}:{here('ptr-load')}: "), text
    assert "kernel 'gather_shifted'" in text and "tile program (3, 0, 0)" in text
    assert "element offset 32 is outside the allocation of 32 elements" in text
    assert np.array_equal(src.numpy(), np.arange(32, dtype=np.float32))
    out = z.unpartition().numpy()
    assert np.array_equal(out[:24], np.arange(1, 25, dtype=np.float32))


def test_pointer_load_before_the_allocation():
    src = ts.tensor(np.arange(32, dtype=np.float32)).sync()
    z = ts.full(32, -1.0).sync().partition(8)
    with ts.unsafe():
        op = gather_shifted(z, src, -3)
    text = runtime_error(op.sync)
    assert "tile program (0, 0, 0)" in text and "element offset -3 is outside" in text


def test_masked_pointer_load_does_not_touch_memory():
    src = ts.tensor(np.arange(32, dtype=np.float32)).sync()
    z = ts.full(32, -1.0).sync().partition(8)
    with ts.unsafe():
        gather_masked(z, src, 4, 32).sync()
    expected = np.concatenate([np.arange(4, 32), np.full(4, -5.0)]).astype(np.float32)
    assert np.array_equal(z.unpartition().numpy(), expected)


def test_pointer_store_past_the_allocation_writes_nothing_out_of_it():
    dst = ts.full(32, -1.0).sync()
    z = ts.tensor(np.arange(32, dtype=np.float32)).sync().partition(8)
    with ts.unsafe():
        op = scatter_shifted(z, dst, 2)
    text = runtime_error(op.sync)
    assert text.startswith(f"{FILE}:{here('ptr-store')}: "), text
    assert "kernel 'scatter_shifted'" in text and "tile program (3, 0, 0)" in text
    assert "outside the allocation of 32 elements" in text
    out = dst.numpy()  # programs 0-2 stored, the failing program stored nothing
    assert np.array_equal(out[2:26], np.arange(24, dtype=np.float32))
    assert np.array_equal(out[26:], np.full(6, -1.0, np.float32))


def test_unchecked_accesses_kernel_runs_inside_unsafe():
    x = ts.tensor(np.arange(20, dtype=np.float32)).sync()
    z = ts.full(20, -1.0).sync().partition(8)
    with ts.unsafe():
        unchecked_copy(z, x).sync()
    assert np.array_equal(z.unpartition().numpy(), np.arange(20, dtype=np.float32))
