"""Reductions (reduce_sum/max/min/prod and the tile methods), scans (cumsum/cumprod, reverse)
and matrix multiply (mma, matmul, ``@``) against independent references.

Integers are exact (Python ints, wrapped). Float sums/products/matmuls are compared with the
exact result (``fractions.Fraction``) within a tolerance: the interpreter accumulates in
float64 and rounds once, a GPU reduces in a tree in the accumulator's dtype.
"""

from __future__ import annotations

from fractions import Fraction
from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
import tilesafe.core as tc
from conftest import poisoned, wrap
from tilesafe.errors import CompileError, DTypeError, ShapeError

INT_DTYPES = [ts.int8, ts.int16, ts.int32, ts.int64, ts.uint8, ts.uint16, ts.uint32, ts.uint64]
FLOAT_DTYPES = [ts.float16, ts.bfloat16, ts.float32, ts.float64]
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def bf16_round(a) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    r = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return np.where(np.isnan(a), np.float32("nan"), r.view(np.float32))


def representable(vals, dtype) -> np.ndarray:
    """float64 values exactly representable in the float ``dtype``."""
    vals = np.asarray(vals, dtype=np.float64)
    if dtype is ts.bfloat16:
        return bf16_round(vals.astype(np.float32)).astype(np.float64)
    return vals.astype(dtype.storage).astype(np.float64)


def host(vals, dtype) -> np.ndarray:
    if dtype is ts.bfloat16:
        return np.asarray(vals, dtype=np.float32)
    return np.asarray(vals).astype(dtype.storage)


def random_tile(rng, dtype, shape):
    if dtype.is_bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.is_int:
        info = np.iinfo(dtype.storage)
        return rng.integers(info.min, info.max, shape, dtype=dtype.storage, endpoint=True)
    return representable(rng.uniform(-4, 4, shape), dtype)


def assert_close(actual, exact, dtype, n):
    """``actual`` within the rounding error of an n-term float accumulation in ``dtype``.

    The interpreter accumulates in float64 and rounds once (relative error <= 2 eps); a GPU
    accumulates in a tree in the tile's dtype, whose documented bound is 2 n eps."""
    exact = np.asarray(exact, dtype=np.float64)
    eps = EPS[dtype.name]
    rtol = 2 * eps if ts.default_device().kind == "cpu" else 2 * n * eps
    np.testing.assert_allclose(np.asarray(actual, np.float64), exact,
                               rtol=rtol, atol=n * eps * 4)


def launch(kernel, out_shape, out_dtype, inputs, *consts, tile=None):
    z = poisoned(out_shape, out_dtype).partition(tile or out_shape)
    z, *_ = kernel(z, *[ts.tensor(host(a, d), d) for a, d in inputs], *consts).sync()
    return z.unpartition().numpy()


# ---------------------------------------------------------------------------------------------
# reductions of one (4, 8) tile


@ts.kernel
def reduce_k(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1, -1)], KIND: tc.Const[str],
             AXIS: tc.Const[int], KEEP: tc.Const[bool]):
    t = x.partition((4, 8)).load((0, 0))
    axis = None if AXIS == 99 else AXIS
    if KIND == "sum":
        r = tc.reduce_sum(t, axis, keepdims=KEEP)
    elif KIND == "max":
        r = tc.reduce_max(t, axis=axis, keepdims=KEEP)
    elif KIND == "min":
        r = tc.reduce_min(t, axis, KEEP)
    elif KIND == "prod":
        r = tc.reduce_prod(t, axis, keepdims=KEEP)
    elif KIND == "m.sum":
        r = t.sum(axis, keepdims=KEEP)
    elif KIND == "m.max":
        r = t.max(axis, keepdims=KEEP)
    elif KIND == "m.min":
        r = t.min(axis, keepdims=KEEP)
    else:
        r = t.prod(axis, keepdims=KEEP)
    z.store(r)


def out_shape(axis, keep):
    if axis == 99:
        return (1, 1) if keep else (1,)  # a scalar result broadcasts into the (1,) tile
    full = [4, 8]
    if keep:
        full[axis] = 1
        return tuple(full)
    del full[axis]
    return tuple(full)


def exact_reduce(kind, x, axis):
    """Reference with Python numbers: ints exact, floats as Fractions."""
    kind = kind.split(".")[-1]
    if x.dtype == bool:
        fn = {"max": any, "min": all}[kind]
    elif kind == "sum":
        fn = lambda vs: sum(vs, start=vs[0] * 0)  # noqa: E731
    elif kind == "prod":
        fn = lambda vs: reduce(lambda a, b: a * b, vs)  # noqa: E731
    else:
        fn = max if kind == "max" else min
    conv = (lambda v: Fraction(float(v))) if x.dtype.kind == "f" else (
        (lambda v: bool(v)) if x.dtype == bool else (lambda v: int(v)))
    objs = np.vectorize(conv, otypes=[object])(x)
    if axis == 99:
        return np.array(fn(list(objs.ravel())), dtype=object).reshape(1)
    moved = np.moveaxis(objs, axis, -1)
    return np.array([fn(list(row)) for row in moved.reshape(-1, moved.shape[-1])],
                    dtype=object).reshape(moved.shape[:-1])


AXES = [(0, False), (1, True), (-1, False), (99, False), (99, True)]


@pytest.mark.parametrize("axis,keep", AXES)
@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod", "m.sum", "m.max", "m.min",
                                  "m.prod"])
@pytest.mark.parametrize("dtype", [ts.int8, ts.uint32, ts.int64, ts.float16, ts.bfloat16,
                                   ts.float32, ts.float64], ids=str)
def test_reductions(rng, dtype, kind, axis, keep):
    x = random_tile(rng, dtype, (4, 8))
    if dtype.is_float and kind.endswith("prod"):
        x = representable(rng.uniform(0.5, 2.0, (4, 8)) * np.sign(rng.uniform(-1, 1, (4, 8))),
                          dtype)
    shape = out_shape(axis, keep)
    res = launch(reduce_k, shape, dtype, [(x, dtype)], kind, axis, keep)
    exact = exact_reduce(kind, x, axis)
    if dtype.is_int:
        expected = np.vectorize(lambda v: wrap(v, dtype), otypes=[object])(exact)
        np.testing.assert_array_equal(res.reshape(-1), expected.astype(dtype.storage).ravel())
    elif kind.endswith(("max", "min")):
        np.testing.assert_array_equal(res.reshape(-1), exact.astype(np.float64).ravel())
    else:
        n = 32 if axis == 99 else x.shape[axis]
        assert_close(res.reshape(-1), exact.astype(np.float64).ravel(), dtype, n)


@pytest.mark.parametrize("axis,keep", AXES)
@pytest.mark.parametrize("kind", ["max", "min", "m.max", "m.min"])
def test_bool_max_is_any_min_is_all(rng, kind, axis, keep):
    x = random_tile(rng, ts.bool_, (4, 8))
    x[0] = True
    x[1] = False
    res = launch(reduce_k, out_shape(axis, keep), ts.bool_, [(x, ts.bool_)], kind, axis, keep)
    np.testing.assert_array_equal(res.reshape(-1), exact_reduce(kind, x, axis).astype(bool)
                                  .ravel())


@pytest.mark.parametrize("kind", ["sum", "prod"])
def test_bool_sum_and_prod_are_rejected(kind):
    z = ts.zeros((4,), ts.bool_).sync().partition(4)
    with pytest.raises(DTypeError, match="does not accept bool"):
        reduce_k(z, ts.zeros((4, 8), ts.bool_), kind, 1, False).sync()


def test_integer_sum_and_prod_wrap():
    x = np.full((4, 8), 100, np.int8)
    res = launch(reduce_k, (4,), ts.int8, [(x, ts.int8)], "sum", 1, False)
    assert (res == wrap(800, ts.int8)).all()
    x = np.full((4, 8), 3, np.uint8)
    res = launch(reduce_k, (4,), ts.uint8, [(x, ts.uint8)], "prod", 1, False)
    assert (res == pow(3, 8, 256)).all()
    x = np.full((4, 8), 2**31 - 1, np.int32)
    res = launch(reduce_k, (1,), ts.int32, [(x, ts.int32)], "sum", 99, False)
    assert res[0] == wrap(32 * (2**31 - 1), ts.int32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_reduce_max_min_propagate_nan(dtype):
    x = np.arange(32, dtype=np.float64).reshape(4, 8)
    x[1, 3] = np.nan
    x[2, 0] = -np.inf
    for kind in ("max", "min"):
        res = launch(reduce_k, (4,), dtype, [(x, dtype)], kind, 1, False)
        assert np.isnan(res[1]), (kind, res)
        fn = np.max if kind == "max" else np.min
        np.testing.assert_array_equal(res[[0, 2, 3]], representable(fn(x[[0, 2, 3]], 1), dtype))
        res = launch(reduce_k, (8,), dtype, [(x, dtype)], kind, 0, False)
        assert np.isnan(res[3]) and not np.isnan(np.delete(res, 3)).any()
        res = launch(reduce_k, (1,), dtype, [(x, dtype)], kind, 99, False)
        assert np.isnan(res[0])


@ts.kernel
def row_max(z: tc.MutTensor[tc.f32, (4, 1)], x: tc.Tensor[tc.f32, (-1, -1)],
            PAD: tc.Const[float]):
    i, _, _ = tc.get_tile_block_id()
    t = x.partition((4, 8), padding=PAD).load((i, 0))
    z.store(tc.reduce_max(t, 1, keepdims=True))


def test_reduce_over_padded_edge_tile():
    x = -np.arange(1, 16, dtype=np.float32).reshape(5, 3) - 10  # all negative: 0 would win
    z = poisoned((5, 1)).partition((4, 1))
    z, _ = row_max(z, ts.tensor(x), float("-inf")).sync()
    np.testing.assert_array_equal(z.unpartition().numpy()[:, 0], x.max(1))
    z = poisoned((5, 1)).partition((4, 1))
    z, _ = row_max(z, ts.tensor(x), 0.0).sync()
    assert (z.unpartition().numpy() == 0).all()  # zero padding is part of the tile
    z = poisoned((5, 1)).partition((4, 1))
    z, _ = row_max(z, ts.tensor(x), float("nan")).sync()
    assert np.isnan(z.unpartition().numpy()).all()


# ---------------------------------------------------------------------------------------------
# scans


@ts.kernel
def scan_k(z: tc.MutTensor["T", (4, 8)], x: tc.Tensor["T", (-1, -1)], KIND: tc.Const[str],
           AXIS: tc.Const[int], REV: tc.Const[bool]):
    t = x.partition((4, 8)).load((0, 0))
    if KIND == "sum":
        z.store(tc.cumsum(t, AXIS, reverse=REV))
    else:
        z.store(tc.cumprod(t, axis=AXIS, reverse=REV))


@ts.kernel
def scan_1d(z: tc.MutTensor["T", (8,)], x: tc.Tensor["T", (-1,)], REV: tc.Const[bool]):
    t = tc.load_tile_like(x, z)
    z.store(tc.cumsum(t, reverse=REV) + tc.cumprod(t, None, REV) * 0)


def exact_scan(kind, x, axis, rev):
    conv = (lambda v: Fraction(float(v))) if x.dtype.kind == "f" else int
    objs = np.vectorize(conv, otypes=[object])(x)
    moved = np.moveaxis(objs, axis, -1)
    out = np.empty_like(moved)
    for idx in np.ndindex(moved.shape[:-1]):
        row = list(moved[idx])
        if rev:
            row = row[::-1]
        acc, res = None, []
        for v in row:
            acc = v if acc is None else (acc + v if kind == "sum" else acc * v)
            res.append(acc)
        out[idx] = res[::-1] if rev else res
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("rev", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("kind", ["sum", "prod"])
@pytest.mark.parametrize("dtype", [ts.int8, ts.uint16, ts.int64, ts.float16, ts.bfloat16,
                                   ts.float32, ts.float64], ids=str)
def test_scans(rng, dtype, kind, axis, rev):
    if dtype.is_int:
        x = random_tile(rng, dtype, (4, 8))
    else:
        x = representable(rng.uniform(0.5, 1.5, (4, 8)) * np.where(rng.uniform(size=(4, 8)) < .3,
                                                                   -1, 1), dtype)
    res = launch(scan_k, (4, 8), dtype, [(x, dtype)], kind, axis, rev)
    exact = exact_scan(kind, x, axis, rev)
    if dtype.is_int:
        expected = np.vectorize(lambda v: wrap(v, dtype), otypes=[object])(exact)
        np.testing.assert_array_equal(res, expected.astype(dtype.storage))
    else:
        assert_close(res, exact.astype(np.float64), dtype, 8)


def test_scan_1d_default_axis():
    x = np.arange(1, 9, dtype=np.int32)
    for rev in (False, True):
        z = poisoned(8, ts.int32).partition(8)
        z, _ = scan_1d(z, ts.tensor(x), rev).sync()
        expected = np.cumsum(x[::-1])[::-1] if rev else np.cumsum(x)
        np.testing.assert_array_equal(z.unpartition().numpy(), expected)


@ts.kernel
def scan_no_axis(z: tc.MutTensor[tc.i32, (4, 8)], x: tc.Tensor[tc.i32, (-1, -1)]):
    z.store(tc.cumsum(tc.load_tile_like(x, z)))


def test_scan_of_2d_tile_needs_an_axis():
    z = ts.zeros((4, 8), ts.int32).sync().partition((4, 8))
    with pytest.raises(CompileError, match="give the axis"):
        scan_no_axis(z, ts.zeros((4, 8), ts.int32)).sync()
    z = ts.zeros((4, 8), ts.bool_).sync().partition((4, 8))
    with pytest.raises(DTypeError, match="does not accept bool"):
        scan_k(z, ts.zeros((4, 8), ts.bool_), "sum", 0, False).sync()


# ---------------------------------------------------------------------------------------------
# matrix multiply


@ts.kernel
def mma_k(z: tc.MutTensor["C", ("M", "N")], a: tc.Tensor["A", (-1, -1)],
          b: tc.Tensor["A", (-1, -1)], c: tc.Tensor["C", (-1, -1)], M: tc.Const[int],
          N: tc.Const[int], K: tc.Const[int], MODE: tc.Const[str]):
    ta = a.partition((M, K)).load((0, 0))
    tb = b.partition((K, N)).load((0, 0))
    if MODE == "mma":
        z.store(tc.mma(ta, tb, tc.load_tile_like(c, z)))
    elif MODE == "@":
        z.store(ta @ tb)
    else:
        z.store(tc.matmul(ta, tb))


MMA_TYPES = [(ts.float16, ts.float32), (ts.float16, ts.float16), (ts.bfloat16, ts.float32),
             (ts.float32, ts.float32), (ts.float64, ts.float64), (ts.int8, ts.int32),
             (ts.uint8, ts.int32)]


def exact_matmul(a, b):
    conv = (lambda v: Fraction(float(v))) if a.dtype.kind == "f" else int
    A = np.vectorize(conv, otypes=[object])(a)
    B = np.vectorize(conv, otypes=[object])(b)
    return A.dot(B)


def operands(rng, dtype, shape):
    if dtype.is_int:
        info = np.iinfo(dtype.storage)
        return rng.integers(info.min, info.max, shape, dtype=dtype.storage, endpoint=True)
    return representable(rng.uniform(-2, 2, shape), dtype)


@pytest.mark.parametrize("m,n,k", [(16, 16, 16), (8, 32, 64), (1, 4, 2)])
@pytest.mark.parametrize("ab,acc", MMA_TYPES, ids=lambda d: str(d))
def test_mma(rng, ab, acc, m, n, k):
    a, b = operands(rng, ab, (m, k)), operands(rng, ab, (k, n))
    c = operands(rng, acc, (m, n)) if acc.is_float else rng.integers(-2**20, 2**20, (m, n))
    res = launch(mma_k, (m, n), acc, [(a, ab), (b, ab), (c, acc)], m, n, k, "mma")
    exact = exact_matmul(a, b) + np.vectorize(
        (lambda v: Fraction(float(v))) if acc.is_float else int, otypes=[object])(c)
    if acc.is_int:
        np.testing.assert_array_equal(res, np.vectorize(lambda v: wrap(v, acc), otypes=[object])
                                      (exact).astype(np.int32))
    else:
        assert_close(res, exact.astype(np.float64), acc, k)


def test_i8_mma_accumulator_wraps():
    a = np.ones((1, 2), np.int8)
    b = np.ones((2, 4), np.int8)
    c = np.full((1, 4), 2**31 - 2, np.int32)
    res = launch(mma_k, (1, 4), ts.int32, [(a, ts.int8), (b, ts.int8), (c, ts.int32)],
                 1, 4, 2, "mma")
    assert (res == -2**31).all()
    a, b = np.full((1, 2), -128, np.int8), np.full((2, 4), -128, np.int8)
    res = launch(mma_k, (1, 4), ts.int32, [(a, ts.int8), (b, ts.int8), (c * 0, ts.int32)],
                 1, 4, 2, "mma")
    assert (res == 2 * 128 * 128).all()


@pytest.mark.parametrize("mode", ["@", "matmul"])
@pytest.mark.parametrize("ab,out", [(ts.float16, ts.float16), (ts.bfloat16, ts.bfloat16),
                                    (ts.float32, ts.float32), (ts.float64, ts.float64),
                                    (ts.int8, ts.int32), (ts.uint8, ts.int32)], ids=str)
def test_matmul_and_at_operator(rng, ab, out, mode):
    m, n, k = 8, 16, 32
    a, b = operands(rng, ab, (m, k)), operands(rng, ab, (k, n))
    c = np.zeros((m, n))
    res = launch(mma_k, (m, n), out, [(a, ab), (b, ab), (c, out)], m, n, k, mode)
    exact = exact_matmul(a, b)
    if out.is_int:
        np.testing.assert_array_equal(res, exact.astype(np.int64))
    else:
        assert_close(res, exact.astype(np.float64), out, k)


@ts.kernel
def bad_mma(z: tc.MutTensor[tc.f32, (4, 4)], CASE: tc.Const[int]):
    if CASE == 0:
        r = tc.mma(tc.zeros((4, 8), tc.f16), tc.zeros((4, 4), tc.f16), tc.zeros((4, 4)))
    elif CASE == 1:
        r = tc.mma(tc.zeros((4, 4), tc.bf16), tc.zeros((4, 4), tc.bf16),
                   tc.zeros((4, 4), tc.bf16)).astype(tc.f32)
    elif CASE == 2:
        r = tc.mma(tc.zeros((4, 4), tc.i32), tc.zeros((4, 4), tc.i32),
                   tc.zeros((4, 4), tc.i32)).astype(tc.f32)
    elif CASE == 3:
        r = tc.mma(tc.zeros((4, 4), tc.f16), tc.zeros((4, 4), tc.f32), tc.zeros((4, 4)))
    elif CASE == 4:
        r = tc.mma(tc.zeros((4, 4), tc.f32), tc.zeros((4, 4), tc.f32), tc.zeros((4, 8)))
    elif CASE == 5:
        r = tc.zeros((4, 4)) + (tc.zeros((4,)) @ tc.zeros((4, 4)))
    else:
        r = tc.mma(tc.zeros((2, 4, 4)), tc.zeros((4, 4)), tc.zeros((4, 4)))
    z.store(r)


@pytest.mark.parametrize("case,err,match", [
    (0, ShapeError, "inner dimensions differ"), (1, DTypeError, "accumulator"),
    (2, DTypeError, "does not accept i32"), (3, DTypeError, "operand types differ"),
    (4, ShapeError, "accumulator shape"), (5, ShapeError, "2-D"), (6, ShapeError, "2-D"),
])
def test_mma_errors(case, err, match):
    with pytest.raises(err, match=match):
        bad_mma(ts.zeros((4, 4)).sync().partition((4, 4)), case).sync()


@ts.kernel
def tiled_mm(z: tc.MutTensor["C", ("BM", "BN")], x: tc.Tensor["A", (-1, -1)],
             y: tc.Tensor["A", (-1, -1)], BM: tc.Const[int], BN: tc.Const[int],
             BK: tc.Const[int]):
    px = x.partition((BM, BK))
    py = y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), z.dtype)
    for k in range(px.num_tiles(1)):
        acc = tc.mma(px.load((i, k)), py.load(k, j), acc)
    z.store(acc)


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 70),
       bm=st.sampled_from([1, 8, 16]), bn=st.sampled_from([4, 16, 32]),
       bk=st.sampled_from([8, 16, 64]), types=st.sampled_from(MMA_TYPES),
       seed=st.integers(0, 2**16))
def test_tiled_matmul_property(m, n, k, bm, bn, bk, types, seed):
    ab, acc = types
    rng = np.random.default_rng(seed)
    a, b = operands(rng, ab, (m, k)), operands(rng, ab, (k, n))
    z = poisoned((m, n), acc).partition((bm, bn))
    z, _, _ = tiled_mm(z, ts.tensor(host(a, ab), ab), ts.tensor(host(b, ab), ab),
                       bm, bn, bk).sync()
    res = z.unpartition().numpy()
    exact = exact_matmul(a, b)
    if acc.is_int:
        np.testing.assert_array_equal(res, np.vectorize(lambda v: wrap(v, acc),
                                                        otypes=[object])(exact).astype(np.int32))
    else:
        assert not np.isnan(res).any(), "an output element was not written"
        assert_close(res, exact.astype(np.float64), acc, k)
