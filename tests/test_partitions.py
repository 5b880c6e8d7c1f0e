"""Partitions and the tile grid: exact cover of outputs by tile programs (every element written
exactly once, edge tiles masked), program ids and grid sizes, shared-tensor partitions with
padding values, ``load_tile_like``, ``z.load()`` read-modify-write, ``num_tiles``, writes
through sliced views, and the launch/run-time errors of partitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tilesafe as ts
import tilesafe.core as tc
from conftest import poisoned
from tilesafe.errors import CompileError, DTypeError, KernelRuntimeError, PartitionError

pytestmark = pytest.mark.usefixtures("launch_path")  # both launch paths

FLOATS = [ts.float16, ts.bfloat16, ts.float32, ts.float64]


def grid_of(shape, tile):
    return tuple(-(-d // t) for d, t in zip(shape, tile))


def expected_stamp(shape, tile):
    """The linear program id (x + nx * (y + ny * z)) owning each element."""
    g = grid_of(shape, tile) + (1,) * (3 - len(shape))
    idx = np.indices(shape)
    c = [idx[a] // tile[a] for a in range(len(shape))] + [0] * (3 - len(shape))
    return c[0] + g[0] * (c[1] + g[1] * c[2])


# ---------------------------------------------------------------------------------------------
# exact cover


@ts.kernel
def stamp(z: tc.MutTensor[tc.i32, "S"], w: tc.MutTensor[tc.i32, "S"],
          g: tc.MutTensor[tc.i32, "S"]):
    bx, by, bz = tc.get_tile_block_id()
    nx, ny, nz = tc.get_num_tile_blocks()
    z.store(bx + nx * (by + ny * bz))          # a scalar store broadcasts over the tile
    w.store(w.load() + 1)                      # read-modify-write: 1 iff written exactly once
    g.store(tc.full(g.shape, nx * 10000 + ny * 100 + nz))


shapes_and_tiles = st.integers(1, 3).flatmap(lambda rank: st.tuples(
    st.lists(st.integers(1, 40), min_size=rank, max_size=rank),
    st.lists(st.sampled_from([1, 2, 4, 8, 16, 32]), min_size=rank, max_size=rank)))


@settings(max_examples=30, deadline=None)
@given(shapes_and_tiles)
def test_every_element_is_written_exactly_once_by_its_tile_program(shape_tile):
    shape, tile = map(tuple, shape_tile)
    grid = grid_of(shape, tile)
    assume(math.prod(grid) <= 400 and math.prod(tile) <= 4096)
    z = poisoned(shape, ts.int32).partition(tile)
    w = ts.zeros(shape, ts.int32).sync().partition(tile)
    g = poisoned(shape, ts.int32).partition(tile)
    assert z.grid == grid
    z, w, g = stamp(z, w, g).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), expected_stamp(shape, tile))
    assert (w.unpartition().numpy() == 1).all()
    full = grid + (1,) * (3 - len(grid))
    assert (g.unpartition().numpy() == full[0] * 10000 + full[1] * 100 + full[2]).all()


@pytest.mark.parametrize("shape,tile", [((100, 33), (32, 32)), ((7, 5), (4, 2)),
                                        ((1000,), (1024,)), ((5, 6, 7), (2, 4, 8)),
                                        ((64, 64), (64, 64)), ((1, 1), (1, 1))])
def test_exact_cover_examples(shape, tile):
    z = poisoned(shape, ts.int32).partition(tile)
    w = ts.zeros(shape, ts.int32).sync().partition(tile)
    g = poisoned(shape, ts.int32).partition(tile)
    z, w, g = stamp(z, w, g).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), expected_stamp(shape, tile))
    assert (w.unpartition().numpy() == 1).all()


@ts.kernel
def copy2(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1, -1)]):
    z.store(tc.load_tile_like(x, z))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 50), n=st.integers(1, 50), tm=st.sampled_from([1, 2, 4, 8, 32]),
       tn=st.sampled_from([1, 4, 8, 16, 64]),
       dtype=st.sampled_from([ts.int8, ts.uint64, ts.bool_, ts.float16, ts.bfloat16,
                              ts.float64]))
def test_copy_is_exact_for_every_dtype_and_tiling(m, n, tm, tn, dtype):
    assume(grid_of((m, n), (tm, tn))[0] * grid_of((m, n), (tm, tn))[1] <= 400)
    rng = np.random.default_rng(m * 100 + n)
    if dtype.is_bool:
        x = rng.integers(0, 2, (m, n)).astype(bool)
    elif dtype.is_int:
        x = rng.integers(0, 100, (m, n)).astype(dtype.storage)
    else:
        x = rng.standard_normal((m, n)).astype(np.float32 if dtype is ts.bfloat16 else
                                                 dtype.storage)
    src = ts.tensor(x, dtype).sync()
    expected = src.numpy()
    z = poisoned((m, n), dtype).partition((tm, tn))
    z, _ = copy2(z, src).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), expected)


@ts.kernel
def rmw(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1, -1)]):
    z.store(z.load() * 2 + tc.load_tile_like(x, z))


def test_read_modify_write_of_the_owned_sub_tensor(rng):
    for dtype in (ts.int16, ts.float32, ts.bfloat16):
        base = rng.integers(-50, 50, (9, 14))
        x = rng.integers(-50, 50, (9, 14))
        host = (lambda a: a.astype(np.float32 if dtype is ts.bfloat16 else dtype.storage))
        z = ts.tensor(host(base), dtype).sync().partition((4, 4))
        z, _ = rmw(z, ts.tensor(host(x), dtype)).sync()
        np.testing.assert_array_equal(z.unpartition().numpy(), base * 2 + x)


# ---------------------------------------------------------------------------------------------
# writes through sliced views touch nothing outside the view


@ts.kernel
def fill_ids(z: tc.MutTensor[tc.i32, "S"]):
    bx, by, _ = tc.get_tile_block_id()
    nx, _, _ = tc.get_num_tile_blocks()
    z.store(tc.full(z.shape, bx + nx * by) + 1000)


@settings(max_examples=25, deadline=None)
@given(r0=st.integers(0, 12), r1=st.integers(1, 12), rs=st.integers(1, 3),
       c0=st.integers(0, 20), c1=st.integers(1, 20), cs=st.integers(1, 3),
       tile=st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8])))
def test_a_partitioned_slice_writes_only_inside_the_slice(r0, r1, rs, c0, c1, cs, tile):
    base = ts.full((24, 40), -7, ts.int32).sync()
    view = base[r0:r0 + r1 * rs:rs, c0:c0 + c1 * cs:cs]
    shape = view.shape
    z = ts.borrow_mut(view).partition(tile)
    z, = fill_ids(z).sync()
    after = base.numpy()
    expected = np.full((24, 40), -7, np.int32)
    expected[r0:r0 + r1 * rs:rs, c0:c0 + c1 * cs:cs] = expected_stamp(shape, tile) + 1000
    np.testing.assert_array_equal(after, expected)


def test_a_transposed_view_is_read_correctly(rng):
    x = rng.standard_normal((13, 21)).astype(np.float32)
    t = ts.tensor(x).sync()
    z = poisoned((21, 13)).partition((8, 4))
    z, _ = copy2(z, t.T).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x.T)
    z = poisoned((5, 7)).partition((4, 4))
    z, _ = copy2(z, t[3:13:2, 1:8]).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x[3:13:2, 1:8])


# ---------------------------------------------------------------------------------------------
# shared-tensor partitions, padding, num_tiles


@ts.kernel
def padded_loads(z: tc.MutTensor["T", (4, 8)], w: tc.MutTensor["T", (4, 8)],
                 x: tc.Tensor["T", (-1, -1)], PAD: tc.Const[float]):
    i, j, _ = tc.get_tile_block_id()
    z.store(x.partition((4, 8), padding=PAD).load((i, j)))
    w.store(tc.load_tile_like(x, w, padding=PAD))


@pytest.mark.parametrize("pad", [0.0, -0.0, math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_padding_values_of_partition_loads_and_load_tile_like(rng, dtype, pad):
    x = rng.uniform(1, 2, (5, 11))
    host = x.astype(np.float32 if dtype is ts.bfloat16 else dtype.storage)
    src = ts.tensor(host, dtype).sync()
    vals = src.numpy()
    # the outputs cover the whole padded grid (8 x 16), so padding is visible
    z = poisoned((8, 16), dtype).partition((4, 8))
    w = poisoned((8, 16), dtype).partition((4, 8))
    z, w, _ = padded_loads(z, w, src, pad).sync()
    expected = np.full((8, 16), pad)
    expected[:5, :11] = vals
    for got in (z.unpartition().numpy(), w.unpartition().numpy()):
        got = got.astype(np.float64)  # exact (bf16 comes back as ml_dtypes.bfloat16)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got[5:, :]), np.signbit(expected[5:, :]))


@ts.kernel
def padded_int(z: tc.MutTensor["T", (4, 8)], x: tc.Tensor["T", (-1, -1)],
               PAD: tc.Const[float]):
    i, j, _ = tc.get_tile_block_id()
    z.store(x.partition((4, 8), padding=PAD).load(i, j))


@ts.kernel
def padded_by_name(z: tc.MutTensor[tc.f32, (4, 8)], x: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.load_tile_like(x, z, padding="neg_inf"))


def test_integer_partitions_pad_with_zero_and_reject_other_padding():
    x = np.arange(1, 16, dtype=np.int8).reshape(3, 5)
    z = poisoned((4, 8), ts.int8).partition((4, 8))
    z, _ = padded_int(z, ts.tensor(x), 0).sync()
    expected = np.zeros((4, 8), np.int8)
    expected[:3, :5] = x
    np.testing.assert_array_equal(z.unpartition().numpy(), expected)
    with pytest.raises(DTypeError, match="needs a float tensor"):
        padded_int(poisoned((4, 8), ts.int8).partition((4, 8)), ts.tensor(x), math.nan).sync()
    with pytest.raises(CompileError, match="not supported"):
        padded_int(poisoned((4, 8), ts.float32).partition((4, 8)),
                   ts.tensor(x.astype(np.float32)), 1.5).sync()
    z = poisoned((4, 8)).partition((4, 8))
    z, _ = padded_by_name(z, ts.tensor(x.astype(np.float32))).sync()
    assert (z.unpartition().numpy()[3:] == -np.inf).all()


@ts.kernel
def reshaped_partition(z: tc.MutTensor[tc.f32, (4, 8)], x: tc.Tensor[tc.f32, (-1, -1)]):
    i, j, _ = tc.get_tile_block_id()
    p = x.partition((2, 16))                      # another tile shape than z's
    top = tc.reshape(tc.permute(tc.reshape(p.load((2 * i, j // 2)), (2, 2, 8)), (1, 0, 2)),
                     (4, 8))
    bottom = tc.reshape(tc.reshape(p.load(2 * i + 1, j // 2), (2, 2, 8)).permute((1, 0, 2)),
                        (4, 8))
    z.store(tc.where(tc.reshape(tc.arange(4), (4, 1)) < 2, top, bottom))


def test_partition_with_a_tile_shape_other_than_the_output(rng):
    """Program (i, j) gathers x's (2, 16) tiles (2i, j//2) and (2i+1, j//2) into a (4, 8)
    tile: rows 0-1 are the two 8-column halves of `top` (permuted), rows 2-3 of `bottom`."""
    x = rng.standard_normal((8, 32)).astype(np.float32)
    z = poisoned((8, 32)).partition((4, 8))
    z, _ = reshaped_partition(z, ts.tensor(x)).sync()
    got = z.unpartition().numpy()
    for i in range(2):
        for j in range(4):
            top = x[4 * i:4 * i + 2, 16 * (j // 2):16 * (j // 2) + 16]
            bottom = x[4 * i + 2:4 * i + 4, 16 * (j // 2):16 * (j // 2) + 16]
            t = top.reshape(2, 2, 8).transpose(1, 0, 2).reshape(4, 8)
            b = bottom.reshape(2, 2, 8).transpose(1, 0, 2).reshape(4, 8)
            np.testing.assert_array_equal(got[4 * i:4 * i + 4, 8 * j:8 * j + 8],
                                          np.where(np.arange(4)[:, None] < 2, t, b))


@ts.kernel
def tile_counts(z: tc.MutTensor[tc.i32, "S"], x: tc.Tensor[tc.f16, (-1, -1, -1)]):
    p = x.partition((2, 4, 8))
    z.store(tc.num_tiles(p, 0) * 10000 + p.num_tiles(1) * 100 + tc.num_tiles(p, -1))


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 4, 8), (3, 9, 17), (40, 1, 100)])
def test_num_tiles(shape):
    z = poisoned(3, ts.int32).partition(4)
    z, _ = tile_counts(z, ts.zeros(shape, ts.float16)).sync()
    g = grid_of(shape, (2, 4, 8))
    assert (z.unpartition().numpy() == g[0] * 10000 + g[1] * 100 + g[2]).all()
    if ts.default_device().kind == "cpu":  # GPUs also key on 16-divisibility classes
        assert tile_counts.compile_count == 1


# ---------------------------------------------------------------------------------------------
# errors


@ts.kernel
def past_the_grid(z: tc.MutTensor[tc.f32, (4, 8)], x: tc.Tensor[tc.f32, (-1, -1)]):
    i, j, _ = tc.get_tile_block_id()
    z.store(x.partition((4, 8)).load((i + 1, j)))


@pytest.mark.interpreter_only("the interpreter's out-of-bounds diagnostics")
def test_partition_index_outside_the_grid_is_a_runtime_error():
    z = poisoned((8, 8)).partition((4, 8))
    with pytest.raises(KernelRuntimeError) as info:
        past_the_grid(z, ts.zeros((8, 8))).sync()
    msg = str(info.value)
    assert "past_the_grid" in msg and "(1, 0, 0)" in msg and "(2, 0)" in msg
    assert "outside the tile grid (2, 1)" in msg and "test_partitions.py" in msg


@ts.kernel
def two_outputs(z: tc.MutTensor[tc.f32, (4, 4)], w: tc.MutTensor[tc.f32, (4, 4)]):
    z.store(1.0)
    w.store(2.0)


@ts.kernel
def declared_tile(z: tc.MutTensor[tc.f32, ("B", 8)], B: tc.Const[int]):
    z.store(0.0)


@ts.kernel
def rows_and_blocks(z: tc.MutTensor[tc.f32, (4,)], w: tc.MutTensor[tc.f32, (1, 2, 2)]):
    i, _, _ = tc.get_tile_block_id()
    z.store(tc.full((4,), i, tc.f32))
    w.store(tc.full((1, 2, 2), i, tc.f32))


def test_partitions_of_fewer_axes_share_the_grid_with_trailing_ones():
    """A grid (3,) and a grid (3, 1, 1) are one grid: program i owns tile i of each. A grid
    that differs in a trailing axis is still refused."""
    z, w = ts.zeros((12,)).sync(), ts.zeros((3, 2, 2)).sync()
    rows_and_blocks(ts.borrow_mut(z).partition(4), ts.borrow_mut(w).partition((1, 2, 2))).sync()
    assert np.array_equal(z.numpy(), np.repeat(np.arange(3.0), 4))
    assert np.array_equal(w.numpy(), np.arange(3.0)[:, None, None] * np.ones((3, 2, 2)))
    with pytest.raises(PartitionError, match="different grids"):
        rows_and_blocks(poisoned((12,)).partition(4),
                        poisoned((3, 4, 2)).partition((1, 2, 2))).sync()


def test_partition_launch_errors():
    with pytest.raises(PartitionError, match="different grids"):
        two_outputs(poisoned((8, 8)).partition((4, 4)),
                    poisoned((8, 12)).partition((4, 4))).sync()
    with pytest.raises(PartitionError, match="power of two"):
        copy2(poisoned((8, 8)).partition((3, 4)), ts.zeros((8, 8))).sync()
    with pytest.raises(PartitionError, match="differs from the kernel's static shape"):
        declared_tile(poisoned((8, 8)).partition((4, 4)), 4).sync()
    with pytest.raises(PartitionError, match="at most 3"):
        ts.kernel(_rank4)(poisoned((2, 2, 2, 2)).partition((2, 2, 2, 2))).sync()
    with pytest.raises(PartitionError, match="rank"):
        poisoned((8, 8)).partition(4)
    # the launch checks ran before anything: a fresh output is still fully poisoned
    z = poisoned((8, 8)).partition((4, 4))
    w = poisoned((8, 8)).partition((4, 4))
    z, w = two_outputs(z, w).sync()
    assert (z.unpartition().numpy() == 1).all() and (w.unpartition().numpy() == 2).all()


def _rank4(z: tc.MutTensor[tc.f32, "S"]):
    z.store(0.0)


# ---------------------------------------------------------------------------------------------
# raw pointers (unsafe kernels): load_ptr / store_ptr


@ts.kernel
def gather_scatter(z: tc.MutTensor[tc.f32, (8,)], src: tc.Ptr[tc.f32], dst: tc.Ptr[tc.f32],
                   n: int, MASKED: tc.Const[bool]):
    i, _, _ = tc.get_tile_block_id()
    offs = tc.arange(8) + i * 8
    if MASKED:
        v = tc.load_ptr(src, offs, offs < n, -1.0)
        tc.store_ptr(dst, n - 1 - offs, v * 2.0, offs < n)
    else:
        v = tc.load_ptr(src, offs)
    z.store(v)


@pytest.mark.interpreter_only("the interpreter's out-of-bounds diagnostics")
def test_load_ptr_and_store_ptr_with_masks():
    x = np.arange(13, dtype=np.float32) + 0.5
    src, dst = ts.tensor(x).sync(), ts.zeros(13).sync()
    z = poisoned(16).partition(8)
    with pytest.raises(ts.UnsafeError):
        gather_scatter(z, src, dst, 13, True)
    with ts.unsafe():
        op = gather_scatter(z, src, dst, 13, True)
    z, src, dst = op.sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), np.concatenate([x, [-1.0] * 3]))
    np.testing.assert_array_equal(dst.numpy(), (x * 2)[::-1])
    with ts.unsafe():
        op = gather_scatter(poisoned(16).partition(8), src, dst, 13, False)
    with pytest.raises(KernelRuntimeError, match="outside the allocation of 13 elements"):
        op.sync()
