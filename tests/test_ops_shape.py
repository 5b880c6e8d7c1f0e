"""Tile construction and shape ops: full/zeros/ones/constant/arange/iota, broadcast, reshape,
permute/transpose/.T, expand_dims, ``x.shape`` of dynamic tensors and ``z.shape``, and the
compile errors for shapes that Tile IR forbids."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
import tilesafe.core as tc
from conftest import poisoned
from tilesafe.errors import BroadcastError, DTypeError, ShapeError, TileShapeError


def bf16_round(a) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    r = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return r.view(np.float32)


def out(shape, dtype=ts.float32, tile=None):
    return poisoned(shape, dtype).partition(tile or shape)


# ---------------------------------------------------------------------------------------------
# constructors


@ts.kernel
def factories(a: tc.MutTensor[tc.f32, (4, 8)], b: tc.MutTensor[tc.i8, (4, 8)],
              c: tc.MutTensor[tc.bool_, (4, 8)], d: tc.MutTensor[tc.bf16, (4, 8)],
              e: tc.MutTensor[tc.u64, (4, 8)], f: tc.MutTensor[tc.f16, (4, 8)],
              g: tc.MutTensor[tc.i32, (4, 8)], s: float, n: int):
    a.store(tc.full((4, 8), 2.5) + tc.zeros((4, 8)) + tc.ones((4, 8), tc.f32))
    b.store(tc.full((4, 8), -7, tc.i8) + tc.constant(3, (4, 8), tc.i8) + tc.ones((4, 8), tc.i8))
    c.store(tc.ones((4, 8), tc.bool_) & ~tc.zeros((4, 8), tc.bool_) & tc.full((4, 8), True))
    d.store(tc.full((4, 8), 1.0 / 3.0, tc.bf16) + tc.zeros((4, 8), "bf16"))
    e.store(tc.full((4, 8), 2**64 - 1, tc.u64) + tc.constant(0, (4, 8), tc.u64))
    f.store(tc.full((4, 8), s, tc.f16))                       # runtime scalar, converted
    g.store(tc.full((4, 8), n) + tc.constant(5) + tc.zeros((4, 8), tc.i32))  # scalar broadcast


def test_full_zeros_ones_constant():
    shape = (6, 10)  # 2x2 grid, partial edge tiles on both axes
    dts = [ts.float32, ts.int8, ts.bool_, ts.bfloat16, ts.uint64, ts.float16, ts.int32]
    outs = [out(shape, d, (4, 8)) for d in dts]
    results = factories(*outs, 0.1, -40).sync()
    a, b, c, d, e, f, g = (p.unpartition().numpy() for p in results[:7])
    assert (a == 3.5).all() and a.dtype == np.float32
    assert (b == -3).all() and b.dtype == np.int8
    assert c.all() and c.dtype == np.bool_
    assert (d == bf16_round(np.float32(1 / 3))).all() and d.dtype == ml_dtypes.bfloat16
    assert (e == np.uint64(2**64 - 1)).all()
    assert (f == np.float16(np.float32(0.1))).all() and f.dtype == np.float16
    assert (g == -35).all()


BIG = 2**62 + 2**38 + 1  # needs 63 bits: float64 cannot hold it, f32 rounds it up (2**62 + 2**39)


@ts.kernel
def big_int_constants(z: tc.MutTensor[tc.f32, (4,)], w: tc.MutTensor[tc.bf16, (4,)]):
    z.store(tc.full((4,), BIG, tc.f32))
    w.store(tc.zeros((4,), tc.bf16) + (2**62 + 2**54 + 1))   # a weak int scalar


def test_integer_constants_are_rounded_once_into_float_tiles():
    z, w = poisoned(4).partition(4), poisoned(4, ts.bfloat16).partition(4)
    z, w = big_int_constants(z, w).sync()
    assert int(z.unpartition().numpy()[0]) == 2**62 + 2**39
    assert int(w.unpartition().numpy()[0]) == 2**62 + 2**55   # bf16: 8 significant bits


@ts.kernel
def iota_k(z: tc.MutTensor[tc.i32, (4, 8)], w: tc.MutTensor[tc.f32, (4, 8)],
           u: tc.MutTensor[tc.u8, (4, 8)], h: tc.MutTensor[tc.bf16, (4, 8)]):
    rows = tc.reshape(tc.arange(4), (4, 1))
    cols = tc.iota(8)
    z.store(rows * 8 + cols)
    w.store(tc.broadcast(tc.arange(8, tc.f32) * 0.5, (4, 8)))
    u.store(tc.broadcast(tc.expand_dims(tc.iota(4, tc.u8), 1), (4, 8)) - 1)   # wraps at 0
    h.store(tc.reshape(tc.arange(32, tc.bf16), (4, 8)) + 250)


def test_arange_and_iota_in_every_tile():
    shape = (7, 13)
    parts = [out(shape, d, (4, 8)) for d in (ts.int32, ts.float32, ts.uint8, ts.bfloat16)]
    z, w, u, h = (p.unpartition().numpy() for p in iota_k(*parts).sync())
    i, j = np.indices(shape)
    np.testing.assert_array_equal(z, (i % 4) * 8 + j % 8)
    np.testing.assert_array_equal(w, (j % 8) * 0.5)
    np.testing.assert_array_equal(u, ((i % 4) - 1).astype(np.uint8))
    # the float arange converts exactly; + 250 then rounds to bf16 (8 significant bits)
    expected = bf16_round(((i % 4) * 8 + j % 8 + 250).astype(np.float32))
    np.testing.assert_array_equal(h, expected)


@ts.kernel
def bad_full(z: tc.MutTensor[tc.f32, (4, 8)], K: tc.Const[int]):
    if K == 0:
        t = tc.zeros((3, 8))
    elif K == 1:
        t = tc.arange(6, tc.f32).reshape((6, 1))
    elif K == 2:
        t = tc.full((4, 8), 1.5, tc.i32).astype(tc.f32)
    elif K == 3:
        t = tc.zeros((1 << 13, 1 << 12)).reshape((4, 8))
    elif K == 4:
        t = tc.full((4, 8), -1, tc.u8).astype(tc.f32)
    else:
        t = tc.zeros((4, 0))
    z.store(t)


@pytest.mark.parametrize("k,err,match", [
    (0, TileShapeError, "not a power of two"), (1, TileShapeError, "not a power of two"),
    (2, DTypeError, "does not fit"), (3, TileShapeError, "more than 2\\*\\*24"),
    (4, DTypeError, "does not fit"), (5, TileShapeError, "power of two"),
])
def test_constructor_errors(k, err, match):
    with pytest.raises(err, match=match):
        bad_full(out((4, 8)), k).sync()


# ---------------------------------------------------------------------------------------------
# reshape / permute / transpose / expand_dims / broadcast (one tile: shape == tile)


@ts.kernel
def shape_ops(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1, -1, -1)], K: tc.Const[int]):
    p = x.partition((2, 4, 8))
    t = p.load((0, 0, 0))
    if K == 0:
        r = tc.reshape(t, (8, 8))
    elif K == 1:
        r = t.reshape((64,)).reshape((4, 16))
    elif K == 2:
        r = tc.permute(t, (2, 0, 1))
    elif K == 3:
        r = t.permute((1, 2, 0))
    elif K == 4:
        r = tc.transpose(t)                       # reverses all axes
    elif K == 5:
        r = t.transpose((0, 2, 1))
    elif K == 6:
        r = tc.reshape(t, (8, 8)).T
    elif K == 7:
        r = tc.expand_dims(tc.reshape(t, (8, 8)), 0)
    elif K == 8:
        r = tc.expand_dims(tc.reshape(t, (64,)), -1)
    elif K == 9:
        r = tc.expand_dims(tc.reshape(t, (8, 8)), 1)
    elif K == 10:
        r = tc.permute(t, (0, 1, 2))              # identity permutation
    else:
        r = tc.reshape(t, 64)                     # an int shape
    z.store(r)


SHAPE_CASES = {
    0: lambda t: t.reshape(8, 8), 1: lambda t: t.reshape(4, 16),
    2: lambda t: t.transpose(2, 0, 1), 3: lambda t: t.transpose(1, 2, 0),
    4: lambda t: t.transpose(), 5: lambda t: t.transpose(0, 2, 1),
    6: lambda t: t.reshape(8, 8).T, 7: lambda t: t.reshape(1, 8, 8),
    8: lambda t: t.reshape(64, 1), 9: lambda t: t.reshape(8, 1, 8), 10: lambda t: t,
    11: lambda t: t.reshape(64),
}


@pytest.mark.parametrize("dtype", [ts.float32, ts.int8, ts.bfloat16, ts.bool_], ids=str)
@pytest.mark.parametrize("k", list(SHAPE_CASES))
def test_reshape_permute_transpose_expand_dims(rng, k, dtype):
    x = rng.integers(-100, 100, (2, 4, 8))
    host = x > 0 if dtype is ts.bool_ else x.astype(np.float32 if dtype.is_float else
                                                     dtype.storage)
    expected = SHAPE_CASES[k](host)
    z = out(expected.shape, dtype)
    z, _ = shape_ops(z, ts.tensor(host, dtype), k).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), expected)


@ts.kernel
def broadcasts(z: tc.MutTensor[tc.i32, (4, 8)], x: tc.Tensor[tc.i32, (-1,)]):
    row = x.partition((8,)).load((0,))                 # (8,)
    col = tc.reshape(x.partition((4,)).load((0,)), (4, 1))
    a = tc.broadcast(row, (4, 8))                      # rank grows
    b = col.broadcast((4, 8))                          # size-1 axis expands (method form)
    c = tc.broadcast(tc.expand_dims(row, 0), (4, 8))
    d = row + col                                      # implicit numpy broadcasting
    e = tc.broadcast(tc.constant(3), (4, 8))           # scalar
    z.store(a * 10000 + b * 1000 + c * 100 + d * 10 + e)


def test_broadcast():
    x = np.arange(1, 9, dtype=np.int32)
    z = out((4, 8), ts.int32)
    z, _ = broadcasts(z, ts.tensor(x)).sync()
    row, col = x[None, :], x[:4, None]
    expected = row * 10000 + col * 1000 + row * 100 + (row + col) * 10 + 3
    np.testing.assert_array_equal(z.unpartition().numpy(), np.broadcast_to(expected, (4, 8)))


@ts.kernel
def bad_shapes(z: tc.MutTensor[tc.f32, (4, 8)], K: tc.Const[int]):
    t = tc.zeros((4, 8))
    if K == 0:
        r = tc.reshape(t, (4, 4))
    elif K == 1:
        r = tc.permute(t, (0, 0))
    elif K == 2:
        r = t + tc.zeros((8, 4))
    elif K == 3:
        r = tc.broadcast(tc.zeros((2, 8)), (4, 8))
    elif K == 4:
        r = tc.expand_dims(t, 3)
    elif K == 5:
        r = tc.permute(t, (1, 2))
    else:
        r = tc.reshape(t, (4, 8, 1))
    z.store(r)


@pytest.mark.parametrize("k,err,match", [
    (0, ShapeError, "element count"), (1, ShapeError, "not a permutation"),
    (2, BroadcastError, "cannot be broadcast"), (3, BroadcastError, "cannot broadcast"),
    (4, ShapeError, "out of range"), (5, ShapeError, "not a permutation"),
    (6, ShapeError, "does not match"),
])
def test_shape_errors(k, err, match):
    with pytest.raises(err, match=match):
        bad_shapes(out((4, 8)), k).sync()


# ---------------------------------------------------------------------------------------------
# a tiled transpose over a grid, non-divisible extents


@ts.kernel
def tiled_transpose(z: tc.MutTensor["T", ("BN", "BM")], x: tc.Tensor["T", (-1, -1)],
                    BM: tc.Const[int], BN: tc.Const[int]):
    i, j, _ = tc.get_tile_block_id()       # z's tile (i, j) is x's tile (j, i) transposed
    z.store(x.partition((BM, BN)).load((j, i)).T)


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), bm=st.sampled_from([1, 2, 4, 8, 16]),
       bn=st.sampled_from([1, 4, 8, 32]), dtype=st.sampled_from([ts.float64, ts.int16,
                                                                   ts.float16]))
def test_tiled_transpose_property(m, n, bm, bn, dtype):
    x = (np.arange(m * n).reshape(m, n) % 1000).astype(dtype.storage)
    z = out((n, m), dtype, (bn, bm))
    z, _ = tiled_transpose(z, ts.tensor(x), bm, bn).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x.T)


# ---------------------------------------------------------------------------------------------
# x.shape of dynamic tensors, z.shape


@ts.kernel
def shapes_k(z: tc.MutTensor[tc.i32, "S"], x: tc.Tensor[tc.f32, (-1, 5, -1)],
             y: tc.Tensor[tc.i8, (-1,)]):
    a, b, c = x.shape                       # dynamic, static (a Python int), dynamic
    (n,) = y.shape
    rows, cols = z.shape                    # the partition's static tile shape
    assert b == 5 and x.ndim == 3 and rows * cols == 32
    z.store(tc.full(z.shape, a * 1000000 + b * 10000 + c * 100 + n) + rows * 0)


def test_tensor_shape_of_dynamic_tensors():
    for dims, n in [((3, 5, 7), 11), ((40, 5, 1), 99)]:
        z = out((5, 9), ts.int32, (4, 8))
        z, _, _ = shapes_k(z, ts.zeros(dims), ts.zeros(n, ts.int8)).sync()
        expected = dims[0] * 1000000 + 5 * 10000 + dims[2] * 100 + n
        assert (z.unpartition().numpy() == expected).all()
    assert shapes_k.compile_count == 1  # dynamic extents never recompile
    text = shapes_k.ir_text(out((5, 9), ts.int32, (4, 8)), ts.zeros((3, 5, 7)),
                            ts.zeros(4, ts.int8))
    assert text.count("tensor_dim(") == 3
