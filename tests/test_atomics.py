"""Atomic tensors (safety rule 12): ``tc.AtomicTensor`` parameters passed as ``ts.atomic(t)``.

Use: histograms with many duplicate bins per program, split-K accumulation of partial
products, max/min/and/or/xor against numpy's ``ufunc.at``, masks, 2-D indices, the tensor
handed back by the launch. The order of float additions: two interpreter seeds give two
roundings, both within tolerance of float64. Misuse: loads, stores, indexing and partitions
of an atomic tensor, wrong dtypes and index counts, the wrong argument kind on either side,
aliasing with another argument, host access while the launch is pending, out-of-range indices
(an error naming the kernel and the index)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import IndexOutOfRangeError
from tilesafe.errors import (AliasingError, ArgumentError, BorrowError, CompileError,
                             DTypeError, KernelRuntimeError, MovedError, SafetyError, ShapeError,
                             SignatureError)

from conftest import marker_line

TILE = 256


@ts.kernel
def histogram(h: tc.AtomicTensor[tc.i32, (-1,)], x: tc.Tensor[tc.i32, (-1,)]):
    bid = tc.get_tile_block_id()[0]
    bins = x.partition((TILE,)).load(bid)
    at = bid * TILE + tc.arange(TILE, tc.i32)
    h.atomic_add(1, bins, mask=at < x.shape[0])


def _bins(rng, n, nbins):
    return rng.integers(0, nbins, n).astype(np.int32)


@pytest.mark.parametrize("n,nbins", [(4096, 16), (1000, 256), (TILE, 1)])
def test_histogram_counts_every_duplicate_bin(rng, n, nbins):
    xs = _bins(rng, n, nbins)
    h = ts.zeros(nbins, dtype=ts.int32).sync()
    out = histogram(ts.atomic(h), ts.tensor(xs), grid=(-(-n // TILE),)).sync()
    assert out.h is h  # the launch hands back the tensor itself
    assert np.array_equal(h.numpy(), np.bincount(xs, minlength=nbins))


def test_histogram_accumulates_over_launches_with_one_borrow(rng):
    xs = _bins(rng, 3 * TILE, 8)
    h = ts.zeros(8, dtype=ts.int32).sync()
    borrow = ts.atomic(h)
    x = ts.tensor(xs).sync()
    for _ in range(3):
        histogram(borrow, x, grid=(3,)).sync()
    assert np.array_equal(h.numpy(), 3 * np.bincount(xs, minlength=8))


@ts.kernel
def pair_counts(h: tc.AtomicTensor[tc.i64, (-1, -1)], rows: tc.Tensor[tc.i32, (-1,)],
                cols: tc.Tensor[tc.u32, (-1,)], w: tc.Tensor[tc.i64, (-1,)]):
    bid = tc.get_tile_block_id()[0]
    tc.atomic_add(h, w.partition((64,)).load(bid), rows.partition((64,)).load(bid),
                  cols.partition((64,)).load(bid))


def test_two_dimensional_indices_of_mixed_integer_dtypes(rng):
    n = 512
    r = rng.integers(0, 5, n).astype(np.int32)
    c = rng.integers(0, 7, n).astype(np.uint32)
    w = rng.integers(-1000, 1000, n).astype(np.int64)
    h = ts.zeros((5, 7), dtype=ts.int64).sync()
    pair_counts(ts.atomic(h), ts.tensor(r), ts.tensor(c), ts.tensor(w), grid=(n // 64,)).sync()
    want = np.zeros((5, 7), np.int64)
    np.add.at(want, (r, c), w)
    assert np.array_equal(h.numpy(), want)


@ts.kernel
def split_k(c: tc.AtomicTensor[tc.f32, ("M", "N")], a: tc.Tensor[tc.f32, ("M", -1)],
            b: tc.Tensor[tc.f32, (-1, "N")]):
    i, j, kk = tc.get_tile_block_id()
    part = a.partition((16, 32)).load(i, kk) @ b.partition((32, 16)).load(kk, j)
    rows = i * 16 + tc.arange(16, tc.i32)
    cols = j * 16 + tc.arange(16, tc.i32)
    rr = rows.reshape((16, 1))
    cc = cols.reshape((1, 16))
    c.atomic_add(part, rr, cc, mask=(rr < c.shape[0]) & (cc < c.shape[1]))


def test_split_k_partial_products_sum_to_the_matrix_product(rng):
    m, k, n = 40, 128, 24
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = ts.zeros((m, n), dtype=ts.float32).sync()
    split_k(ts.atomic(c), ts.tensor(a), ts.tensor(b), grid=(3, 2, k // 32)).sync()
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 4 * k * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(c.numpy() - want) <= bound)


@ts.kernel
def combine(h: tc.AtomicTensor["T", (-1,)], v: tc.Tensor["T", (-1,)],
            at: tc.Tensor[tc.i32, (-1,)], MODE: tc.Const[str]):
    bid = tc.get_tile_block_id()[0]
    value = v.partition((64,)).load(bid)
    index = at.partition((64,)).load(bid)
    if MODE == "max":
        h.atomic_max(value, index)
    elif MODE == "min":
        h.atomic_min(value, index)
    elif MODE == "and":
        h.atomic_and(value, index)
    elif MODE == "or":
        h.atomic_or(value, index)
    elif MODE == "xor":
        h.atomic_xor(value, index)
    else:
        h.atomic_add(value, index)


_UFUNCS = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor}


@pytest.mark.parametrize("mode", list(_UFUNCS))
@pytest.mark.parametrize("dtype", [ts.int32, ts.uint32, ts.int64, ts.uint64])
def test_integer_modes_match_numpy_ufunc_at(rng, mode, dtype):
    n, nbins = 256, 9
    info = np.iinfo(dtype.storage)
    values = rng.integers(info.min, info.max, n, dtype=dtype.storage, endpoint=True)
    at = rng.integers(0, nbins, n).astype(np.int32)
    start = rng.integers(info.min, info.max, nbins, dtype=dtype.storage, endpoint=True)
    h = ts.tensor(start.copy()).sync()
    combine(ts.atomic(h), ts.tensor(values), ts.tensor(at), mode, grid=(n // 64,)).sync()
    want = start.copy()
    with np.errstate(over="ignore"):
        _UFUNCS[mode].at(want, at, values)  # add wraps around
    assert np.array_equal(h.numpy(), want)


def test_unsigned_max_compares_as_unsigned():
    values = np.array([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 5] * 16, dtype=np.uint32)
    at = np.repeat(np.arange(4, dtype=np.int32), 16)
    h = ts.zeros(4, dtype=ts.uint32).sync()
    combine(ts.atomic(h), ts.tensor(values), ts.tensor(at), "max", grid=(1,)).sync()
    assert h.numpy().tolist() == [0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF]
    g = ts.full(2, 0xFFFFFFFF, dtype=ts.uint32).sync()
    combine(ts.atomic(g), ts.tensor(values), ts.tensor(at % 2), "min", grid=(1,)).sync()
    assert g.numpy().tolist() == [5, 5]


@ts.kernel
def scalar_update(h: tc.AtomicTensor[tc.i32, (4, 4)], k: int):
    h.atomic_add(k, 1, 2)
    h.atomic_max(100, (3, 0))


def test_scalar_value_and_indices():
    h = ts.zeros((4, 4), dtype=ts.int32).sync()
    scalar_update(ts.atomic(h), 7, grid=(5,)).sync()
    want = np.zeros((4, 4), np.int32)
    want[1, 2], want[3, 0] = 35, 100
    assert np.array_equal(h.numpy(), want)


@ts.kernel
def in_loops(h: tc.AtomicTensor[tc.i32, (-1,)], z: tc.MutTensor[tc.i32, "S"], n: int):
    for i in range(n):
        h.atomic_add(i, tc.arange(16, tc.i32) % 4)
        if i > 2:
            z.store(z.load() + 1)
            h.atomic_max(100, 0)


def test_atomics_inside_loops_and_branches_next_to_owned_stores():
    h = ts.zeros(4, dtype=ts.int32).sync()
    z = ts.zeros(16, dtype=ts.int32).sync()
    in_loops(ts.atomic(h), ts.borrow_mut(z).partition(16), 5).sync()
    assert h.numpy().tolist() == [116, 40, 40, 40]  # 4 * (0 + 1 + 2 + 3), max 100, + 4 * 4
    assert z.numpy().tolist() == [2] * 16


# -- floats: the order of additions ------------------------------------------------------------

@ts.kernel
def float_sums(h: tc.AtomicTensor["F", (-1,)], v: tc.Tensor["F", (-1,)],
               at: tc.Tensor[tc.i32, (-1,)]):
    bid = tc.get_tile_block_id()[0]
    h.atomic_add(v.partition((256,)).load(bid), at.partition((256,)).load(bid))


def _float_sums(values, at, nbins, dtype=ts.float32):
    h = ts.zeros(nbins, dtype=dtype).sync()
    float_sums(ts.atomic(h), ts.tensor(values, dtype=dtype), ts.tensor(at),
               grid=(len(values) // 256,)).sync()
    return h.numpy()


@pytest.mark.interpreter_only("the interpreter's seeded order of float atomic additions")
def test_two_orders_round_differently_and_both_are_within_tolerance(rng):
    n, nbins = 1024, 4
    values = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 6, n)).astype(np.float32)
    at = rng.integers(0, nbins, n).astype(np.int32)
    with ts.interpreter_atomic_order(1):
        first = _float_sums(values, at, nbins)
    with ts.interpreter_atomic_order(1):
        again = _float_sums(values, at, nbins)
    with ts.interpreter_atomic_order(2):
        second = _float_sums(values, at, nbins)
    assert np.array_equal(first, again)  # one seed, one order
    assert not np.array_equal(first, second)  # another seed, another rounding
    want = np.zeros(nbins)
    np.add.at(want, at, values.astype(np.float64))
    mass = np.zeros(nbins)
    np.add.at(mass, at, np.abs(values).astype(np.float64))
    bound = n * np.finfo(np.float32).eps * mass
    for got in (first, second):
        assert np.all(np.abs(got - want) <= bound)


@pytest.mark.interpreter_only("the interpreter's seeded order of float atomic additions")
def test_each_addition_rounds_to_the_dtype():
    # 2**24 + 1 + 1 + ... in f32: every +1 is lost to rounding, whatever the order
    values = np.array([2.0 ** 24] + [1.0] * 255, dtype=np.float32)
    at = np.zeros(256, dtype=np.int32)
    for seed in (0, 3):
        with ts.interpreter_atomic_order(seed):
            got = _float_sums(values, at, 1)
        # the 1s added before 2**24 survive (exactly), those after it are each rounded away
        assert got[0] in {np.float32(2.0 ** 24 + 2 * k) for k in range(128)}
    with ts.interpreter_atomic_order(None):  # a fresh order: still a sum of these values
        got = _float_sums(values, at, 1)
    assert 2.0 ** 24 <= got[0] <= 2.0 ** 24 + 256


@pytest.mark.parametrize("dtype", [ts.float16, ts.bfloat16, ts.float64])
def test_exact_float_sums_in_every_float_dtype(rng, dtype):
    n, nbins = 512, 8
    values = rng.integers(-4, 5, n).astype(np.float32) / 4  # every partial sum is exact
    at = rng.integers(0, nbins, n).astype(np.int32)
    want = np.zeros(nbins)
    np.add.at(want, at, values.astype(np.float64))
    assert np.array_equal(_float_sums(values, at, nbins, dtype), want)


def test_seed_must_be_a_non_negative_int():
    with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
        with ts.interpreter_atomic_order(-1):
            pass


# -- out-of-range indices --------------------------------------------------------------------

@ts.kernel
def scatter(h: tc.AtomicTensor[tc.i32, (-1,)], at: tc.Tensor[tc.i32, (-1,)], CHECK: tc.Const[bool]):
    index = at.partition((16,)).load(0)
    if CHECK:
        h.atomic_add(1, index, mask=(index >= 0) & (index < h.shape[0]))
    else:
        h.atomic_add(1, index)  # <- oob


@pytest.mark.interpreter_only("the interpreter's out-of-range diagnostics")
@pytest.mark.parametrize("bad", [10, -1])
def test_out_of_range_index_is_an_error_naming_the_kernel_and_the_index(bad):
    at = np.arange(16, dtype=np.int32) % 8
    at[5] = bad
    h = ts.zeros(10, dtype=ts.int32).sync()
    line = marker_line(__file__, "oob")
    with pytest.raises(IndexOutOfRangeError,
                       match=rf"test_atomics.py:{line}: in kernel 'scatter', tile program "
                       rf"\(0, 0, 0\): atomic_add index {bad} along axis 0 is outside \[0, 10\) "
                       r"of the atomic tensor 'h' \(no lane outside it was updated\)"):
        scatter(ts.atomic(h), ts.tensor(at), False, grid=(1,)).sync()
    h.numpy()  # the loan ended with the failed launch


def test_masked_off_lanes_may_hold_any_index():
    at = np.array([3, -7, 99, 3] * 4, dtype=np.int32)
    h = ts.zeros(10, dtype=ts.int32).sync()
    scatter(ts.atomic(h), ts.tensor(at), True, grid=(1,)).sync()
    assert h.numpy().tolist() == [0, 0, 0, 8, 0, 0, 0, 0, 0, 0]


# -- misuse in the kernel ------------------------------------------------------------------------

def _compile(src: str, *args, **kw):
    namespace = {"tc": tc, "ts": ts}
    exec(src, namespace)  # noqa: S102 (test kernels)
    return namespace["k"].ir(*args, **kw)


def _h(dtype=ts.int32, shape=(16,)):
    return ts.zeros(shape, dtype=dtype).sync()


@ts.kernel
def loads_it(h: tc.AtomicTensor[tc.i32, (-1,)], z: tc.MutTensor[tc.i32, "S"]):
    z.store(h.load())


@ts.kernel
def stores_it(h: tc.AtomicTensor[tc.i32, (-1,)]):
    h.store(tc.zeros((16,), tc.i32))


@ts.kernel
def indexes_it(h: tc.AtomicTensor[tc.i32, (-1,)], z: tc.MutTensor[tc.i32, "S"]):
    z.store(h[0])


@ts.kernel
def partitions_it(h: tc.AtomicTensor[tc.i32, (-1,)], z: tc.MutTensor[tc.i32, "S"]):
    z.store(h.partition((16,)).load(0))


@ts.kernel
def loads_like(h: tc.AtomicTensor[tc.i32, (-1,)], z: tc.MutTensor[tc.i32, "S"]):
    z.store(tc.load_tile_like(h, z))


@pytest.mark.parametrize("kernel,what", [(stores_it, r"store\(\)"), (loads_it, r"load\(\)"),
                                         (indexes_it, "indexing"),
                                         (partitions_it, r"partition\(\)")])
def test_an_atomic_tensor_has_no_loads_stores_indexing_or_partitions(kernel, what):
    args = (ts.atomic(_h()),) if kernel is stores_it else \
        (ts.atomic(_h()), _h().partition(16))
    with pytest.raises(SafetyError, match=rf"the atomic tensor 'h' has no {what}: a "
                       r"tc.AtomicTensor is updated by atomic read-modify-writes only.*"
                       r"\(safety rule 12\)"):
        kernel.ir(*args, grid=(1,))


def test_load_tile_like_cannot_read_an_atomic_tensor():
    with pytest.raises(SafetyError, match=r"load_tile_like cannot read the atomic tensor 'h'.*"
                       r"safety rule 12"):
        loads_like.ir(ts.atomic(_h()), _h().partition(16))


@ts.kernel
def float_and(h: tc.AtomicTensor[tc.f32, (-1,)]):
    h.atomic_and(1.0, 0)


@ts.kernel
def float_max(h: tc.AtomicTensor[tc.f32, (-1,)]):
    h.atomic_max(1.0, 0)


@ts.kernel
def narrow_add(h: tc.AtomicTensor[tc.i16, (-1,)]):
    h.atomic_add(1, 0)


@ts.kernel
def wrong_value_dtype(h: tc.AtomicTensor[tc.i32, (-1,)]):
    h.atomic_add(tc.zeros((4,), tc.i64), tc.arange(4, tc.i32))


@ts.kernel
def float_index(h: tc.AtomicTensor[tc.i32, (-1,)]):
    h.atomic_add(1, tc.zeros((4,), tc.f32))


@ts.kernel
def too_few_indices(h: tc.AtomicTensor[tc.i32, (-1, -1)]):
    h.atomic_add(1, tc.arange(4, tc.i32))


@ts.kernel
def int_mask(h: tc.AtomicTensor[tc.i32, (-1,)]):
    h.atomic_add(1, tc.arange(4, tc.i32), mask=tc.arange(4, tc.i32))


@ts.kernel
def unbroadcastable(h: tc.AtomicTensor[tc.i32, (-1,)]):
    h.atomic_add(tc.zeros((8,), tc.i32), tc.arange(4, tc.i32))


@ts.kernel
def on_a_shared_tensor(x: tc.Tensor[tc.i32, (-1,)]):
    tc.atomic_add(x, 1, 0)


@pytest.mark.parametrize("kernel,error,message", [
    (float_and, DTypeError, r"atomic_and needs an integer atomic tensor, got f32 \(bitwise"),
    (float_max, DTypeError, r"atomic_max needs an integer atomic tensor, got f32 \(float "
                            "max/min"),
    (narrow_add, DTypeError, r"atomic_add on i16 elements is not supported: the GPU has "
                             "atomics on 32- and 64-bit elements only"),
    (wrong_value_dtype, DTypeError, r"atomic_add: value dtype i64 differs from the atomic "
                                    "tensor's i32"),
    (float_index, DTypeError, r"atomic_add: index 0 must be an integer tile, got tile<4xf32>"),
    (too_few_indices, ShapeError, r"atomic_add: 1 index value\(s\) for the rank-2 atomic "
                                  "tensor 'h'"),
    (int_mask, DTypeError, r"atomic_add: mask must be a bool tile, got tile<4xi32>"),
    (unbroadcastable, ShapeError, r"atomic_add: the value, index and mask shapes \(\(8,\), "
                                  r"\(4,\)\) cannot be broadcast together"),
])
def test_misused_atomic_ops_are_compile_errors(kernel, error, message):
    rank = 2 if kernel is too_few_indices else 1
    dtype = {float_and: ts.float32, float_max: ts.float32, narrow_add: ts.int16}.get(
        kernel, ts.int32)
    with pytest.raises(error, match=message):
        kernel.ir(ts.atomic(_h(dtype, (4,) * rank)), grid=(1,))


@ts.kernel
def method_on_a_shared_tensor(x: tc.Tensor[tc.i32, (-1,)]):
    x.atomic_max(1, 0)


def test_atomic_ops_need_an_atomic_tensor():
    with pytest.raises(CompileError, match=r"atomic_add: the first argument must be a "
                       r"tc.AtomicTensor parameter, got tensor<\?xi32>"):
        on_a_shared_tensor.ir(_h(), grid=(1,))
    with pytest.raises(CompileError, match="has no attribute or method 'atomic_max'") as info:
        method_on_a_shared_tensor.ir(_h(), grid=(1,))
    assert "tc.AtomicTensor parameter, passed as ts.atomic(t)" in info.value.hint


@ts.kernel
def uses_what_an_atomic_update_returns(h: tc.AtomicTensor[tc.i32, (-1,)],
                                       z: tc.MutTensor[tc.i32, (4,)]):
    old = h.atomic_add(1, 0)
    z.store(tc.zeros((4,), tc.i32) + old)


def test_an_atomic_update_gives_no_value():
    with pytest.raises(CompileError, match="operand is None, not a tile") as info:
        uses_what_an_atomic_update_returns.ir(ts.atomic(_h()),
                                              ts.zeros(4, ts.int32).sync().partition(4))
    assert "atomic updates, stores and device functions without a return" in info.value.hint


def test_an_atomic_tensor_needs_a_shape_tuple():
    with pytest.raises(SignatureError, match="a tc.AtomicTensor needs an explicit shape tuple"):
        tc.AtomicTensor[tc.i32, "S"]


# -- misuse at the launch ----------------------------------------------------------------------

@ts.kernel
def reads_x(z: tc.MutTensor[tc.i32, "S"], x: tc.Tensor[tc.i32, (-1,)]):
    z.store(tc.load_tile_like(x, z))


def test_a_plain_tensor_where_an_atomic_tensor_is_declared_is_refused(rng):
    h = _h()
    with pytest.raises(ArgumentError, match=r"(?s)argument 'h' of 'histogram' is a "
                       r"tc.AtomicTensor, got a i32 tensor of shape \(16,\).*fix: .*pass "
                       r"ts.atomic\(t\)"):
        histogram(h, ts.tensor(_bins(rng, TILE, 16)).sync(), grid=(1,))
    assert h.numpy().tolist() == [0] * 16


def test_an_atomic_borrow_where_a_tensor_is_declared_is_refused():
    with pytest.raises(ArgumentError, match=r"argument 'x' of 'reads_x' is a shared tc.Tensor, "
                       r"got ts.atomic\(...\) of a i32 tensor of shape \(16,\): an atomic borrow "
                       "only goes to a tc.AtomicTensor parameter"):
        reads_x(_h().partition(16), ts.atomic(_h()))
    with pytest.raises(ArgumentError, match=r"argument 'z' of 'reads_x' is a tc.MutTensor, got "
                       r"ts.atomic\(...\)"):
        reads_x(ts.atomic(_h()), _h())


def test_an_input_over_the_atomic_tensor_is_refused_before_anything_runs():
    t = ts.tensor(np.arange(16, dtype=np.int32) % 4).sync()
    borrow = ts.atomic(t)
    for other in (t, t[2:10]):
        with pytest.raises(AliasingError, match=r"arguments 'h' and 'x' of 'histogram' overlap "
                           r"in memory and 'h' is mutable") as err:
            histogram(borrow, other, grid=(1,))
        assert err.value.arguments[0] is borrow
    assert t.numpy().tolist() == [0, 1, 2, 3] * 4  # nothing ran, t is usable
    out = histogram(borrow, ts.tensor(np.zeros(4, np.int32)), grid=(1,)).sync()
    assert out.h is t and t.numpy().tolist()[:4] == [4, 1, 2, 3]


@ts.kernel
def two_atomics(a: tc.AtomicTensor[tc.i32, (-1,)], b: tc.AtomicTensor[tc.i32, (-1,)]):
    a.atomic_add(1, 0)
    b.atomic_add(1, 0)


def test_two_atomic_borrows_of_one_buffer_are_refused():
    t = _h()
    with pytest.raises(AliasingError, match="arguments 'a' and 'b' of 'two_atomics' overlap"):
        two_atomics(ts.atomic(t), ts.atomic(t[4:]), grid=(1,))
    a, b = two_atomics(ts.atomic(t[:8]), ts.atomic(t[8:]), grid=(2,)).sync()
    assert t.numpy().tolist() == [2] + [0] * 7 + [2] + [0] * 7


def test_the_host_cannot_touch_the_tensor_while_the_launch_is_pending(rng):
    h = _h()
    op = histogram(ts.atomic(h), ts.tensor(_bins(rng, TILE, 16)).sync(), grid=(1,))
    with pytest.raises(BorrowError, match="mutably borrowed"):
        h.numpy()
    with pytest.raises(BorrowError):
        ts.atomic(h)
    with pytest.raises(BorrowError):
        h.partition(4)
    (out, _) = op.sync()
    assert out is h and h.numpy().sum() == TILE


def test_ts_atomic_takes_a_usable_tensor():
    with pytest.raises(ArgumentError, match=r"ts.atomic takes a tensor, got .*a DeviceOp not "
                       r"run yet"):
        ts.atomic(ts.zeros(4, dtype=ts.int32))
    with pytest.raises(TypeError, match="ts.atomic takes a tilesafe Tensor, got ndarray"):
        ts.atomic(np.zeros(4))
    t = _h()
    borrow = ts.atomic(t)
    t.partition(4)
    with pytest.raises(MovedError, match="cannot launch with it: this tensor was moved"):
        histogram(borrow, _h(), grid=(1,))
    with pytest.raises(MovedError):
        ts.atomic(t)


def test_an_atomic_borrow_of_read_only_memory_is_refused():
    t = _h()
    shared = t.clone().shared()
    readonly = shared.sync()
    with pytest.raises(BorrowError, match="cannot lend this tensor to atomic updates: this "
                       r"tensor is the shared, read-only result of .shared\(\)"):
        ts.atomic(readonly)
    frozen = np.zeros(16, np.int32)
    frozen.setflags(write=False)
    with pytest.raises(BorrowError, match="imported read-only"):
        ts.atomic(ts.from_dlpack(frozen))


def test_an_atomic_tensor_whose_elements_share_an_address_is_refused():
    base = np.zeros(16, np.int32)
    zero_stride = ts.from_dlpack(np.lib.stride_tricks.as_strided(base, (16,), (0,)))
    with pytest.raises(AliasingError, match=r"the layout of 'h' of 'histogram' \(shape "
                       r"\(16,\), strides \(0,\)\) reaches one address from several indices"):
        histogram(ts.atomic(zero_stride), _h(), grid=(1,))


# -- pipelines and graphs ------------------------------------------------------------------------

def test_the_tensor_handed_back_feeds_the_next_launch_of_a_chain(rng):
    xs = _bins(rng, 2 * TILE, 16)
    x = ts.tensor(xs).sync()
    h = _h()
    op = histogram(ts.atomic(h), x, grid=(2,))
    op = op.then(lambda r: histogram(ts.atomic(r.h), x, grid=(2,)))
    out = op.sync()
    assert out.h is h
    assert np.array_equal(h.numpy(), 2 * np.bincount(xs, minlength=16))


def test_a_recorded_atomic_launch_borrows_the_tensor_on_each_replay(rng):
    xs = _bins(rng, TILE, 16)
    h = _h()
    graph = ts.CudaGraph.capture(histogram(ts.atomic(h), ts.tensor(xs).sync(), grid=(1,)))
    assert h.numpy().sum() == 0  # recorded, not run: h is readable
    graph.replay()
    graph.replay()
    assert np.array_equal(h.numpy(), 2 * np.bincount(xs, minlength=16))


# -- property: any extents, duplicates, masks and index dtypes -------------------------------

@ts.kernel
def masked_scatter(h: tc.AtomicTensor[tc.i32, (-1, -1)], v: tc.Tensor[tc.i32, (-1,)],
                   r: tc.Tensor["I", (-1,)], c: tc.Tensor["J", (-1,)],
                   keep: tc.Tensor[tc.bool_, (-1,)]):
    bid = tc.get_tile_block_id()[0]
    h.atomic_add(v.partition((32,)).load(bid), r.partition((32,)).load(bid),
                 c.partition((32,)).load(bid), mask=keep.partition((32,)).load(bid))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 40), tiles=st.integers(1, 3),
       index_dtypes=st.sampled_from([(ts.int32, ts.int32), (ts.uint8, ts.int64),
                                     (ts.int16, ts.uint32)]), seed=st.integers(0, 2**32 - 1))
def test_masked_scatter_matches_numpy_add_at(rows, cols, tiles, index_dtypes, seed):
    rng = np.random.default_rng(seed)
    n = 32 * tiles
    keep = rng.random(n) < 0.7
    r = np.where(keep, rng.integers(0, rows, n), 200).astype(index_dtypes[0].storage)
    c = np.where(keep, rng.integers(0, cols, n), 0).astype(index_dtypes[1].storage)
    v = rng.integers(-50, 50, n).astype(np.int32)
    h = ts.zeros((rows, cols), dtype=ts.int32).sync()
    masked_scatter(ts.atomic(h), ts.tensor(v), ts.tensor(r), ts.tensor(c), ts.tensor(keep),
                   grid=(tiles,)).sync()
    want = np.zeros((rows, cols), np.int32)
    np.add.at(want, (r[keep].astype(np.int64), c[keep].astype(np.int64)), v[keep])
    assert np.array_equal(h.numpy(), want)
