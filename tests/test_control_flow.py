"""Control flow and compilation: ``for`` loops with loop-carried tiles (several values, nested,
dynamic trip counts), runtime ``if``/``else`` on scalars, compile-time ``if`` on ``tc.Const``
values (the dead branch is never compiled), loops over compile-time tuples (unrolled), device
functions (``@ts.function``), runtime scalar parameters, the specialization cache
(``compile_count``) and the printed IR."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import poisoned
from tilesafe.compiler import registry
from tilesafe.errors import (CompileError, DTypeError, KernelNameError, UnsupportedSyntaxError)


def op_names(kernel, *args):
    return [op.name for op in kernel.ir(*args).walk()]


# ---------------------------------------------------------------------------------------------
# for loops


@ts.kernel
def row_stats(s: tc.MutTensor[tc.f32, ("BM", 1)], m: tc.MutTensor[tc.f32, ("BM", 1)],
              c: tc.MutTensor[tc.i32, ("BM", 1)], x: tc.Tensor[tc.f32, (-1, -1)],
              BM: tc.Const[int], BK: tc.Const[int]):
    """Row sums, maxima and counts of positive entries, BK columns at a time."""
    i, _, _ = tc.get_tile_block_id()
    p = x.partition((BM, BK))
    pmax = x.partition((BM, BK), padding=float("-inf"))
    total = tc.zeros((BM, 1), tc.f32)
    best = tc.full((BM, 1), float("-inf"))
    count = tc.zeros((BM, 1), tc.i32)
    for k in range(tc.num_tiles(p, 1)):            # dynamic trip count
        t = p.load((i, k))
        total = total + tc.reduce_sum(t, 1, keepdims=True)
        best = tc.maximum(best, pmax.load((i, k)).max(1, keepdims=True))
        count = count + (t > 0).astype(tc.i32).sum(1, keepdims=True)
    s.store(total)
    m.store(best)
    c.store(count)


@pytest.mark.parametrize("rows,cols,bm,bk", [(8, 64, 4, 16), (13, 37, 8, 8), (3, 5, 4, 32),
                                             (1, 100, 1, 16)])
def test_loop_with_several_carried_tiles(rng, rows, cols, bm, bk):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    outs = [poisoned((rows, 1), d).partition((bm, 1)) for d in (ts.float32, ts.float32,
                                                                ts.int32)]
    s, m, c, *_ = row_stats(*outs, ts.tensor(x), bm, bk).sync()
    np.testing.assert_allclose(s.unpartition().numpy()[:, 0], x.sum(1, dtype=np.float64),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m.unpartition().numpy()[:, 0], x.max(1))
    np.testing.assert_array_equal(c.unpartition().numpy()[:, 0], (x > 0).sum(1))
    assert row_stats.compile_count <= 4


@ts.kernel
def loops_k(z: tc.MutTensor[tc.i32, (8,)], x: tc.Tensor[tc.i32, (-1,)], n: int):
    t = tc.load_tile_like(x, z)
    s = 0                                    # a Python scalar becomes a carried i32 scalar
    for i in range(n):
        s = s + i
    acc = t * 0
    for i in range(2, x.shape[0], 3):        # lb, dynamic ub, step
        acc = acc + i
    nested = t * 0
    for i in range(n):
        for j in range(i):                   # inner trip count depends on the outer variable
            nested = nested + (i * 10 + j)
    neg = 0
    for i in range(-3, 2):
        neg = neg * 2 + i
    z.store(t * 0 + s * 1000000 + acc * 10000 + nested + neg * 0 + tc.full((8,), neg) * 100)


@pytest.mark.parametrize("n,length", [(5, 8), (0, 3), (1, 20), (7, 1)])
def test_loop_bounds_nesting_and_scalar_carries(n, length):
    z = poisoned(8, ts.int32).partition(8)
    z, _ = loops_k(z, ts.tensor(np.zeros(length, np.int32)), n).sync()
    s = sum(range(n))
    acc = sum(range(2, length, 3))
    nested = sum(i * 10 + j for i in range(n) for j in range(i))
    neg = 0
    for i in range(-3, 2):
        neg = neg * 2 + i
    expected = s * 1000000 + acc * 10000 + nested + neg * 100
    out = z.unpartition().numpy()
    assert (out == np.int32(np.int64(expected).astype(np.int32))).all(), (out, expected)
    if ts.default_device().kind == "cpu":  # GPUs also key on 16-divisibility classes
        assert loops_k.compile_count == 1  # n and the extent are runtime values


@ts.kernel
def unrolled(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    t = tc.load_tile_like(x, z)
    acc = tc.zeros(z.shape, tc.f32)
    for scale in (1.0, 2.0, 0.5):                  # a compile-time tuple: unrolled
        acc = acc * scale + t
    for k, fn in ((1, tc.abs), (2, tc.negative)):  # tuples of tuples, functions included
        acc = acc + fn(t) * k
    for tensor in (x, x):                          # a tuple of tensor parameters
        acc = acc + tc.load_tile_like(tensor, z)
    z.store(acc)


def test_loop_over_compile_time_tuple_is_unrolled(rng):
    x = rng.standard_normal(10).astype(np.float32)
    z = poisoned(10).partition(4)
    names = op_names(unrolled, ts.zeros(10).sync().partition(4), ts.tensor(x))
    assert "for" not in names and names.count("mul") == 5
    z, _ = unrolled(z, ts.tensor(x)).sync()
    acc = np.zeros(10, np.float32)
    for scale in (1.0, 2.0, 0.5):
        acc = acc * np.float32(scale) + x
    acc = acc + np.abs(x) + (-x) * np.float32(2)
    acc = acc + x + x
    np.testing.assert_array_equal(z.unpartition().numpy(), acc)


@ts.kernel
def zero_trip(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    acc = tc.full(z.shape, 7.0)
    for i in range(x.shape[0] - 100):     # negative or zero trip count: the body never runs
        acc = acc + tc.load_tile_like(x, z)
    z.store(acc)


def test_zero_trip_loop_returns_the_initial_values():
    z = poisoned(6).partition(8)
    z, _ = zero_trip(z, ts.ones(6)).sync()
    assert (z.unpartition().numpy() == 7).all()


# ---------------------------------------------------------------------------------------------
# runtime if / else


@ts.kernel
def branches(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int, flag: bool,
             alpha: float):
    t = tc.load_tile_like(x, z)
    if n > 3:                                   # runtime bool scalar: an if op yielding a tile
        r = t * 2.0
    else:
        r = t - 1.0
    if flag:                                    # a bool parameter
        r = r + alpha
    if n:                                       # an int scalar: compared with 0
        c = 10.0                                # Python scalars in both branches are merged
    else:
        c = 20.0
    if not flag and n < 100:                    # not / and on runtime scalars
        r = -r
    q = alpha if n == 5 else alpha * 3.0        # a runtime conditional expression
    z.store(r * c + q)


@pytest.mark.parametrize("n,flag,alpha", [(5, True, 0.5), (2, False, 1.25), (0, True, -2.0),
                                          (200, False, 3.0), (4, False, 0.0)])
def test_runtime_if_else(rng, n, flag, alpha):
    x = rng.standard_normal(11).astype(np.float32)
    z = poisoned(11).partition(8)
    z, *_ = branches(z, ts.tensor(x), n, flag, alpha).sync()
    a = np.float32(alpha)
    r = x * np.float32(2) if n > 3 else x - np.float32(1)
    if flag:
        r = r + a
    c = np.float32(10 if n else 20)
    if not flag and n < 100:
        r = -r
    q = a if n == 5 else a * np.float32(3)
    np.testing.assert_array_equal(z.unpartition().numpy(), r * c + q)
    assert branches.compile_count == 1
    names = op_names(branches, ts.zeros(11).sync().partition(8), ts.tensor(x), n, flag, alpha)
    assert names.count("if") == 4 and "select" in names


@ts.kernel
def if_in_loop(z: tc.MutTensor[tc.i32, "S"], n: int):
    evens = tc.zeros(z.shape, tc.i32)
    odds = tc.zeros(z.shape, tc.i32)
    for i in range(n):
        if i % 2 == 0:
            evens = evens + i
        else:
            odds = odds + i
        if i == 3:                               # no else: the value before the if flows on
            evens = evens * 100
    z.store(evens * 1000 + odds)


@pytest.mark.parametrize("n", [0, 1, 4, 9])
def test_if_inside_loop_updates_carried_values(n):
    z = poisoned(4, ts.int32).partition(4)
    (z,) = if_in_loop(z, n).sync()
    evens = odds = 0
    for i in range(n):
        if i % 2 == 0:
            evens += i
        else:
            odds += i
        if i == 3:
            evens *= 100
    assert (z.unpartition().numpy() == evens * 1000 + odds).all()


@ts.kernel
def tile_truth(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    t = tc.load_tile_like(x, z)
    if t > 0:
        t = t + 1.0
    z.store(t)


@ts.kernel
def branch_mismatch(z: tc.MutTensor[tc.f32, "S"], n: int):
    if n > 0:
        r = tc.zeros(z.shape, tc.f32)
    else:
        r = tc.zeros(z.shape, tc.f16)
    z.store(r.astype(tc.f32))


@ts.kernel
def one_branch_only(z: tc.MutTensor[tc.f32, "S"], n: int):
    if n > 0:
        r = tc.zeros(z.shape, tc.f32)
    z.store(r)


@ts.kernel
def carried_type_change(z: tc.MutTensor[tc.f32, "S"], n: int):
    acc = tc.zeros(z.shape, tc.f32)
    for i in range(n):
        acc = acc.astype(tc.f64)
    z.store(acc.astype(tc.f32))


@ts.kernel
def endless_while(z: tc.MutTensor[tc.f32, "S"], n: int):
    while True:
        n = n - 1
    z.store(0.0)


@ts.kernel
def float_step(z: tc.MutTensor[tc.f32, "S"], n: int):
    acc = tc.zeros(z.shape, tc.f32)
    for i in range(0, 10, n * 0.5):
        acc = acc + 1.0
    z.store(acc)


@pytest.mark.parametrize("kernel,err,match", [
    (tile_truth, CompileError, "truth value of a tile<8xbool> is ambiguous"),
    (branch_mismatch, CompileError, "in the if branch but"),
    (one_branch_only, KernelNameError, "assigned in only one branch"),
    (carried_type_change, CompileError, "loop-carried variable 'acc' changes"),
    (endless_while, CompileError, "'while True' never ends"),
    (float_step, DTypeError, "the range step must be an integer scalar, got a tile<f32>"),
])
def test_control_flow_errors_point_at_the_source(kernel, err, match):
    args = [poisoned(8).partition(8)]
    args.append(ts.zeros(8) if kernel is tile_truth else 3)
    with pytest.raises(err, match=match) as info:
        kernel(*args).sync()
    assert "test_control_flow.py" in str(info.value)


# ---------------------------------------------------------------------------------------------
# compile-time if on Const values


@ts.kernel
def static_branches(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], MODE: tc.Const[int],
                    NEG: tc.Const[bool], SCALE: tc.Const[float]):
    t = tc.load_tile_like(x, z)
    if MODE == 0:
        r = t * 3
    elif MODE == 1:
        r = tc.exp(t)                       # invalid for integer T: must not be compiled then
    elif MODE == 2:
        r = t + this_name_does_not_exist    # noqa: F821 (never compiled)
    else:
        r = t * SCALE
    if NEG:
        r = -r
    z.store(r)


def test_compile_time_if_compiles_only_the_taken_branch():
    xi = np.arange(-3, 5, dtype=np.int32)
    z = poisoned(8, ts.int32).partition(4)
    z, *_ = static_branches(z, ts.tensor(xi), 0, True, 0.5).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), -(xi * 3))
    xf = np.linspace(-1, 1, 8).astype(np.float32)
    z = poisoned(8).partition(4)
    z, *_ = static_branches(z, ts.tensor(xf), 1, False, 1.0).sync()
    np.testing.assert_allclose(z.unpartition().numpy(), np.exp(xf), rtol=1e-6)
    names = op_names(static_branches, ts.zeros(8).sync().partition(4), ts.tensor(xf), 1, True,
                     1.0)
    assert "if" not in names and "exp" in names and "negative" in names
    with pytest.raises(DTypeError, match="exp does not accept i32"):
        static_branches(poisoned(8, ts.int32).partition(4), ts.tensor(xi), 1, False, 1.0).sync()
    with pytest.raises(KernelNameError, match="this_name_does_not_exist"):
        static_branches(poisoned(8).partition(4), ts.tensor(xf), 2, False, 1.0).sync()
    z = poisoned(8).partition(4)
    z, *_ = static_branches(z, ts.tensor(xf), 3, False, 3).sync()   # Const[float] accepts 3
    np.testing.assert_array_equal(z.unpartition().numpy(), xf * np.float32(3))
    # ir() builds only the front end and is not counted; failed compilations are not cached
    assert static_branches.compile_count == 3


@ts.kernel
def weak_const(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], SCALE: tc.Const[float]):
    z.store(tc.load_tile_like(x, z) * SCALE)


def test_const_float_is_a_weak_scalar():
    x = np.array([1.0, 2.0, 3.0, 1000.0], np.float16)
    z = poisoned(4, ts.float16).partition(4)
    z, _ = weak_const(z, ts.tensor(x), 0.1).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x * np.float16(0.1))


# ---------------------------------------------------------------------------------------------
# device functions


@ts.function
def affine(t, a, b=1.0):
    return t * a + b


@ts.function
def stats(t):
    lo = tc.reduce_min(t, 0)
    hi = tc.reduce_max(t, 0)
    return lo, hi, affine(t, 2.0)          # a tuple; nested call with a default argument


@ts.function
def normalize(x, z):
    t = tc.load_tile_like(x, z)
    lo, hi, doubled = stats(t)
    total = tc.zeros(z.shape, t.dtype)
    for i in range(3):                     # a loop inside a device function
        total = total + doubled
    return (t - lo) / (hi - lo), total


@ts.kernel
def use_functions(z: tc.MutTensor[tc.f32, "S"], w: tc.MutTensor[tc.f32, "S"],
                  x: tc.Tensor[tc.f32, (-1,)]):
    scaled, total = normalize(x, z)
    z.store(scaled)
    w.store(affine(total, b=0.5, a=1.0))


def test_device_functions_nested_and_returning_tuples(rng):
    x = rng.standard_normal(8).astype(np.float32)
    z, w = poisoned(8).partition(8), poisoned(8).partition(8)
    z, w, _ = use_functions(z, w, ts.tensor(x)).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), (x - x.min()) / (x.max() - x.min()))
    d = x * np.float32(2) + np.float32(1)
    np.testing.assert_array_equal(w.unpartition().numpy(), ((d + d) + d) + np.float32(0.5))


def test_device_function_defined_in_a_test_and_recursion_error():
    @ts.function
    def square(t):
        return t * t

    @ts.kernel
    def k(z: tc.MutTensor[tc.i64, "S"], x: tc.Tensor[tc.i64, (-1,)]):
        z.store(square(square(tc.load_tile_like(x, z))))

    x = np.arange(-5, 5, dtype=np.int64)
    z = poisoned(10, ts.int64).partition(4)
    z, _ = k(z, ts.tensor(x)).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x ** 4)

    @ts.function
    def forever(t):
        return forever(t)

    @ts.kernel
    def bad(z: tc.MutTensor[tc.f32, "S"]):
        z.store(forever(tc.zeros(z.shape)))

    with pytest.raises(UnsupportedSyntaxError, match="recursion"):
        bad(poisoned(4).partition(4)).sync()


# ---------------------------------------------------------------------------------------------
# runtime scalar parameters


@ts.kernel
def scalars(z: tc.MutTensor[tc.f16, "S"], w: tc.MutTensor[tc.i64, "S"],
            x: tc.Tensor[tc.f16, (-1,)], h: tc.f16, big: tc.i64, n: int, alpha: float):
    t = tc.load_tile_like(x, z)
    z.store(t * h + alpha.astype(tc.f16))
    w.store(tc.full(w.shape, big) + n.astype(tc.i64))


def test_runtime_scalar_params_and_their_dtypes():
    x = np.array([1.0, 2.0, -3.0, 0.5, 8.0], np.float16)
    for h, big, n, alpha in [(0.25, 2**40, -3, 1.1), (3.0, -(2**62), 7, -0.3)]:
        z, w = poisoned(5, ts.float16).partition(4), poisoned(5, ts.int64).partition(4)
        z, w, *_ = scalars(z, w, ts.tensor(x), h, big, n, alpha).sync()
        expected = x * np.float16(h) + np.float16(np.float32(alpha))
        np.testing.assert_array_equal(z.unpartition().numpy(), expected)
        assert (w.unpartition().numpy() == big + n).all()
    assert scalars.compile_count == 1
    text = scalars.ir_text(poisoned(5, ts.float16).partition(4),
                           poisoned(5, ts.int64).partition(4), ts.tensor(x), 1.0, 1, 1, 1.0)
    assert "h: %h" in text and "tile<f16>" in text and "tile<i64>" in text
    assert "tile<i32>" in text and "tile<f32>" in text


def test_runtime_scalar_out_of_range_is_rejected():
    x = ts.tensor(np.zeros(5, np.float16)).sync()
    with pytest.raises(ts.ArgumentError, match="i32 scalar"):
        scalars(poisoned(5, ts.float16).partition(4), poisoned(5, ts.int64).partition(4), x,
                1.0, 1, 2**31, 1.0).sync()
    with pytest.raises(ts.ArgumentError, match="f32 scalar"):
        scalars(poisoned(5, ts.float16).partition(4), poisoned(5, ts.int64).partition(4), x,
                1.0, 1, 1, "1.0").sync()


# ---------------------------------------------------------------------------------------------
# specialization cache


@ts.kernel
def cached(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], alpha: float,
           K: tc.Const[int]):
    z.store(tc.load_tile_like(x, z) * K + alpha.astype(z.dtype))


def test_compile_count():
    def go(n, dtype, alpha, k, tile=4):
        z = poisoned(n, dtype).partition(tile)
        z, *_ = cached(z, ts.ones(n, dtype), alpha, k).sync()
        return z.unpartition().numpy()

    assert cached.compile_count == 0
    assert (go(10, ts.float32, 0.5, 2) == 2.5).all()
    assert cached.compile_count == 1
    assert (go(37, ts.float32, 1.5, 2) == 3.5).all()     # another extent, another scalar
    assert (go(3, ts.float32, 0.0, 2) == 2.0).all()
    assert cached.compile_count == 1
    assert (go(10, ts.float32, 0.5, 3) == 3.5).all()     # a new Const value
    assert cached.compile_count == 2
    assert (go(10, ts.float64, 0.5, 3) == 3.5).all()     # a new dtype
    assert cached.compile_count == 3
    assert (go(10, ts.float32, 0.5, 2) == 2.5).all()     # cached
    assert cached.compile_count == 3
    assert (go(10, ts.float32, 0.5, 2, tile=8) == 2.5).all()  # a new static tile shape
    assert cached.compile_count == 4


@ts.kernel
def divide_by_const(z: tc.MutTensor[tc.f32, "S"], V: tc.Const[float]):
    z.store(tc.full(z.shape, 1.0) / V)


def test_const_float_specializations_distinguish_signed_zeros_and_reuse_nan():
    def go(v):
        (z,) = divide_by_const(poisoned(4).partition(4), v).sync()
        return z.unpartition().numpy()

    assert (go(0.0) == np.inf).all()
    assert (go(-0.0) == -np.inf).all()       # -0.0 is another constant than 0.0
    count = divide_by_const.compile_count
    for _ in range(3):
        assert np.isnan(go(float("nan"))).all()
    assert divide_by_const.compile_count <= count + 1  # one specialization for NaN


# ---------------------------------------------------------------------------------------------
# the IR


@ts.kernel
def everything(z: tc.MutTensor[tc.f32, (16, 16)], a: tc.Tensor[tc.f16, (-1, -1)],
               b: tc.Tensor[tc.f16, (-1, -1)], n: int):
    pa = a.partition((16, 16))
    pb = b.partition((16, 16))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((16, 16), tc.f32)
    for k in range(pa.num_tiles(1)):
        acc = tc.mma(pa.load((i, k)), pb.load((k, j)), acc)
    if n > 0:
        acc = tc.cumsum(acc, 1) + tc.reduce_sum(acc, 0, keepdims=True)
    z.store(tc.where(acc > 0, acc, tc.exp(acc)))


def test_ir_text_names_the_ops_and_every_op_is_registered(rng):
    def fresh_args():  # (ir() must not be needed to release them: see the test below)
        return (poisoned((20, 20)).partition((16, 16)), ts.zeros((20, 40), ts.float16).sync(),
                ts.zeros((40, 20), ts.float16).sync(), 1)
    text = everything.ir_text(*fresh_args())
    for name in ("mma(", "for(", "if(", "yield(", "make_partition(", "partition_load(",
                 "num_tiles(", "tile_block_id(", "scan(", "reduce(", "select(", "exp(",
                 "greater(", "mut_store(", "constant("):
        assert name in text, name
    names = set(op_names(everything, *fresh_args()))
    assert names <= set(registry.OPS), names - set(registry.OPS)
    a = rng.standard_normal((20, 40)).astype(np.float16)
    b = rng.standard_normal((40, 20)).astype(np.float16)
    z = poisoned((20, 20)).partition((16, 16))
    z, *_ = everything(z, ts.tensor(a), ts.tensor(b), 1).sync()
    acc = a.astype(np.float64) @ b.astype(np.float64)
    full = np.zeros((32, 32))
    full[:20, :20] = acc
    ref = np.zeros((32, 32))
    for ti in range(2):
        for tj in range(2):
            blk = full[ti * 16:ti * 16 + 16, tj * 16:tj * 16 + 16]
            blk = np.cumsum(blk, 1) + blk.sum(0, keepdims=True)
            ref[ti * 16:ti * 16 + 16, tj * 16:tj * 16 + 16] = np.where(blk > 0, blk, np.exp(blk))
    np.testing.assert_allclose(z.unpartition().numpy(), ref[:20, :20], rtol=1e-4, atol=1e-4)


def test_ir_text_does_not_keep_the_arguments_borrowed():
    """Kernel.ir()/ir_text() only compile: the arguments must stay usable for a launch."""
    z = poisoned((20, 20)).partition((16, 16))
    a, b = ts.zeros((20, 40), ts.float16).sync(), ts.zeros((40, 20), ts.float16).sync()
    assert "mma(" in everything.ir_text(z, a, b, 0)
    z, *_ = everything(z, a, b, 0).sync()
    assert (z.unpartition().numpy() == 1).all()  # where(0 > 0, 0, exp(0))
