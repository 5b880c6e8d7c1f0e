"""Selection ops: argmax/argmin (and the tile methods), topk, static tile slicing
(``t[a:b]``, ``t[:, a:b]``, ``t[3]``, ``t[:, None]``) and ``tc.cat``, against numpy.

argmax/argmin must agree with ``numpy.argmax``/``numpy.argmin`` exactly (first index on ties,
first NaN if any). topk is compared with a stable argsort of ``-x`` with NaN ranked first (what
``torch.topk`` does with NaN). Slices and concatenations are exact copies, compared bit for bit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line, poisoned
from tilesafe.errors import CompileError, DTypeError, ShapeError, TileShapeError


def here(tag: str) -> int:
    return marker_line(__file__, tag)


def host(vals, dtype) -> np.ndarray:
    """Host values of ``dtype`` (bf16 travels as float32 values already representable)."""
    if dtype is ts.bfloat16:
        return np.asarray(vals, dtype=np.float32)
    return np.asarray(vals).astype(dtype.storage)


def tied_tile(rng, dtype, shape):
    """Values from a small range, so that most rows hold ties."""
    if dtype.is_bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.is_int and not dtype.is_signed:
        info = np.iinfo(dtype.storage)
        vals = rng.integers(0, 4, shape) * (int(info.max) // 3)  # 0 .. max, unsigned order
        return vals.astype(dtype.storage)
    return host(rng.integers(-3, 4, shape), dtype)


def launch(kernel, out_shape, out_dtype, x, dtype, *consts):
    z = poisoned(out_shape, out_dtype).partition(out_shape)
    z, _ = kernel(z, ts.tensor(x, dtype), *consts).sync()
    return z.unpartition().numpy()


def check_error(err: CompileError, cls: type, phrase: str, tag: str, hint: str = "") -> None:
    """Exactly ``cls``, saying ``phrase``, at this file's ``tag`` line, with a fix."""
    assert type(err) is cls, f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    assert phrase in err.message, err.message
    assert err.location is not None and os.path.samefile(err.location.file, __file__), err
    assert err.location.line == here(tag), f"reported {err.location}, expected {here(tag)}"
    assert err.hint and hint in err.hint, err.hint


# ---------------------------------------------------------------------------------------------
# argmax / argmin


@ts.kernel
def arg_k(z: tc.MutTensor[tc.i32, "S"], x: tc.Tensor["T", (-1, -1)], KIND: tc.Const[str],
          AXIS: tc.Const[int], KEEP: tc.Const[bool]):
    t = x.partition((8, 16)).load((0, 0))
    axis = None if AXIS == 99 else AXIS
    if KIND == "argmax":
        r = tc.argmax(t, axis, keepdims=KEEP)
    elif KIND == "argmin":
        r = tc.argmin(t, axis=axis, keepdims=KEEP)
    elif KIND == "m.argmax":
        r = t.argmax(axis, keepdims=KEEP)
    else:
        r = t.argmin(axis, KEEP)
    z.store(r)


AXES = [(0, False), (1, True), (-1, False), (-2, True), (99, False), (99, True)]


def arg_out_shape(axis, keep):
    if axis == 99:
        return (1, 1) if keep else (1,)  # the scalar index broadcasts into a (1,) tile
    shape = [8, 16]
    if keep:
        shape[axis] = 1
    else:
        del shape[axis]
    return tuple(shape)


def numpy_arg(kind, x, axis, keep):
    fn = np.argmax if kind.endswith("argmax") else np.argmin
    r = fn(x, axis=None if axis == 99 else axis, keepdims=keep)
    return np.asarray(r).reshape(arg_out_shape(axis, keep)).astype(np.int32)


@pytest.mark.parametrize("axis,keep", AXES)
@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [ts.float32, ts.float16, ts.int32, ts.uint8, ts.int64],
                         ids=str)
def test_argmax_argmin_match_numpy_with_ties(rng, dtype, kind, axis, keep):
    x = tied_tile(rng, dtype, (8, 16))
    res = launch(arg_k, arg_out_shape(axis, keep), ts.int32, x, dtype, kind, axis, keep)
    assert res.dtype == np.int32
    np.testing.assert_array_equal(res, numpy_arg(kind, x, axis, keep))


@pytest.mark.parametrize("kind", ["m.argmax", "m.argmin"])
@pytest.mark.parametrize("axis,keep", [(1, False), (99, True)])
def test_argmax_argmin_methods(rng, kind, axis, keep):
    x = host(rng.standard_normal((8, 16)), ts.bfloat16)
    x[:, 5] = x.max()  # a tie across each row's maximum
    res = launch(arg_k, arg_out_shape(axis, keep), ts.int32, x, ts.bfloat16, kind, axis, keep)
    np.testing.assert_array_equal(res, numpy_arg(kind, x, axis, keep))


def test_argmax_all_equal_and_infinities_give_the_first_index():
    x = np.full((8, 16), -np.inf, np.float32)
    x[3] = np.inf
    x[5, 7:] = 2.0
    for kind in ("argmax", "argmin"):
        res = launch(arg_k, (8,), ts.int32, x, ts.float32, kind, 1, False)
        np.testing.assert_array_equal(res, numpy_arg(kind, x, 1, False))
    res = launch(arg_k, (8,), ts.int32, x, ts.float32, "argmax", 1, False)
    assert res[0] == 0 and res[3] == 0 and res[5] == 7


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [ts.float32, ts.float16], ids=str)
def test_argmax_argmin_return_the_first_nan(dtype, kind):
    x = np.arange(128, dtype=np.float64).reshape(8, 16) - 60
    x[1, 9] = x[1, 12] = np.nan           # two NaNs: the first wins
    x[2, 15] = np.nan                     # a NaN after the maximum
    x[4, 0] = np.nan                      # a NaN before everything
    x[6, :] = np.nan                      # all NaN
    x[7, 3], x[7, 4] = -0.0, 0.0          # signed zeros are equal: the first wins
    x[7, 5:] = -1.0
    x[7, :3] = -2.0
    x = host(x, dtype)
    for axis in (0, 1, 99):
        res = launch(arg_k, arg_out_shape(axis, False), ts.int32, x, dtype, kind, axis, False)
        np.testing.assert_array_equal(res, numpy_arg(kind, x, axis, False))
    res = launch(arg_k, (8,), ts.int32, x, dtype, kind, 1, False)
    assert res[1] == 9 and res[2] == 15 and res[4] == 0 and res[6] == 0
    assert res[7] == (3 if kind == "argmax" else 0)


def test_argmax_of_bool_ranks_false_below_true(rng):
    x = rng.integers(0, 2, (8, 16)).astype(bool)
    x[2] = False
    x[3] = True
    for kind in ("argmax", "argmin"):
        res = launch(arg_k, (8,), ts.int32, x, ts.bool_, kind, 1, False)
        np.testing.assert_array_equal(res, numpy_arg(kind, x, 1, False))


@ts.kernel
def arg_1d(z: tc.MutTensor[tc.i32, (1,)], x: tc.Tensor[tc.i16, (-1,)]):
    t = x.partition((64,)).load((0,))
    z.store(tc.argmax(t) * 1000 + tc.argmin(t, 0))


def test_argmax_of_a_1d_tile_is_a_scalar(rng):
    x = rng.integers(-500, 500, 64).astype(np.int16)
    z = poisoned((1,), ts.int32).partition(1)
    z, _ = arg_1d(z, ts.tensor(x)).sync()
    assert z.unpartition().numpy()[0] == np.argmax(x) * 1000 + np.argmin(x)


@ts.kernel
def bad_arg(z: tc.MutTensor[tc.i32, (8,)], x: tc.Tensor[tc.f32, (-1, -1)], K: tc.Const[int]):
    t = x.partition((8, 16)).load((0, 0))
    if K == 0:
        r = tc.argmax(t, 2)  # <- arg axis
    elif K == 1:
        r = tc.argmin(tc.reduce_sum(t))  # <- arg scalar
    elif K == 2:
        r = tc.argmax(t, axis=1.0)  # <- arg float axis
    else:
        r = t.argmin(x.shape[0])  # <- arg runtime axis
    z.store(r)


@pytest.mark.parametrize("k,cls,phrase,tag,hint", [
    (0, ShapeError, "argmax: axis 2 is out of range for rank 2", "arg axis", "[-2, 1]"),
    (1, ShapeError, "argmin needs a tile with at least one axis", "arg scalar", "index is 0"),
    (2, CompileError, "argmax axis must be a compile-time integer", "arg float axis",
     "tc.Const[int]"),
    (3, CompileError, "argmin axis must be a compile-time integer", "arg runtime axis",
     "tc.Const[int]"),
])
def test_argmax_misuse(k, cls, phrase, tag, hint):
    z = poisoned((8,), ts.int32).partition(8)
    with pytest.raises(CompileError) as info:
        bad_arg.ir(z, ts.zeros((8, 16)).sync(), k)
    check_error(info.value, cls, phrase, tag, hint)


# ---------------------------------------------------------------------------------------------
# topk


@ts.kernel
def topk_k(zv: tc.MutTensor["T", "S"], zi: tc.MutTensor[tc.i32, "S"],
           x: tc.Tensor["T", (-1, -1)], K: tc.Const[int], AXIS: tc.Const[int],
           METHOD: tc.Const[bool]):
    t = x.partition((8, 16)).load((0, 0))
    if METHOD:
        values, indices = t.topk(K, AXIS)
    else:
        values, indices = tc.topk(t, K, axis=AXIS)
    zv.store(values)
    zi.store(indices)


def reference_topk(x, k, axis):
    """Sort each line by Python's stable sort: NaN first, then larger values, then lower
    index (an independent statement of the documented order)."""
    moved = np.moveaxis(x.astype(np.float64) if x.dtype.kind == "f" else x.astype(object),
                        axis, -1)
    vals = np.empty(moved.shape[:-1] + (k,), dtype=object)
    idxs = np.empty(moved.shape[:-1] + (k,), dtype=np.int32)
    for pos in np.ndindex(moved.shape[:-1]):
        line = list(moved[pos])
        order = sorted(range(len(line)), key=lambda i: (
            not (isinstance(line[i], float) and np.isnan(line[i])),
            0 if isinstance(line[i], float) and np.isnan(line[i]) else -line[i]))
        idxs[pos] = order[:k]
        vals[pos] = [line[i] for i in order[:k]]
    return (np.moveaxis(vals, -1, axis).astype(x.dtype), np.moveaxis(idxs, -1, axis))


def run_topk(x, dtype, k, axis, method=False):
    shape = list(x.shape)
    shape[axis] = k
    zv = poisoned(tuple(shape), dtype).partition(tuple(shape))
    zi = poisoned(tuple(shape), ts.int32).partition(tuple(shape))
    zv, zi, _ = topk_k(zv, zi, ts.tensor(x, dtype), k, axis, method).sync()
    return zv.unpartition().numpy(), zi.unpartition().numpy()


@pytest.mark.parametrize("k,axis", [(1, 1), (4, -1), (16, 1), (2, 0), (8, -2)])
@pytest.mark.parametrize("dtype", [ts.float32, ts.float16, ts.int32, ts.uint8], ids=str)
def test_topk_matches_a_stable_descending_sort(rng, dtype, k, axis):
    x = tied_tile(rng, dtype, (8, 16))
    values, indices = run_topk(x, dtype, k, axis)
    want_values, want_indices = reference_topk(x, k, axis)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(np.take_along_axis(x, indices.astype(np.int64), axis), values)


def test_topk_method_and_distinct_values(rng):
    x = host(rng.permutation(128).reshape(8, 16) - 64.5, ts.bfloat16)
    values, indices = run_topk(x, ts.bfloat16, 4, 1, method=True)
    want = np.argsort(-x.astype(np.float64), axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, 1))


@pytest.mark.parametrize("dtype", [ts.float32, ts.float16], ids=str)
def test_topk_ranks_nan_first_and_keeps_infinities_and_signed_zeros(dtype):
    x = np.tile(np.arange(16, dtype=np.float64), (8, 1))
    x[0, 3] = x[0, 10] = np.nan               # NaNs first, by index
    x[1, :] = -np.inf                          # all equal: by index
    x[2, 5], x[2, 6] = np.inf, np.nan
    x[3, :] = np.nan
    x[4, :] = 0.0
    x[4, 2] = -0.0                             # -0.0 == 0.0: by index, sign kept
    x[5, 0:4] = -np.inf                        # -inf below every number but still ranked
    x = host(x, dtype)
    values, indices = run_topk(x, dtype, 16, 1)
    want_values, want_indices = reference_topk(x, 16, 1)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values, want_values)  # NaN positions equal too
    assert list(indices[0, :3]) == [3, 10, 15] and list(indices[2, :2]) == [6, 5]
    assert list(indices[1, :4]) == [0, 1, 2, 3] and list(indices[3, :2]) == [0, 1]
    assert np.signbit(values[4, 2]) and indices[4, 2] == 2
    assert list(indices[5, -4:]) == [0, 1, 2, 3]


def test_topk_of_int_extremes(rng):
    info = np.iinfo(np.int64)
    x = rng.integers(-5, 5, (8, 16)).astype(np.int64)
    x[0, :] = info.min
    x[1, 4] = info.max
    x[2, 3:5] = info.min
    values, indices = run_topk(x, ts.int64, 16, 1)
    want_values, want_indices = reference_topk(x, 16, 1)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values, want_values)


@ts.kernel
def topk_wide(zv: tc.MutTensor[tc.f32, ("R", "K")], zi: tc.MutTensor[tc.i32, ("R", "K")],
              x: tc.Tensor[tc.f32, (-1, -1)], N: tc.Const[int]):
    values, indices = tc.topk(x.partition((zv.shape[0], N)).load((0, 0)), zv.shape[1])
    zv.store(values)
    zi.store(indices)


@pytest.mark.parametrize("rows,n,k", [(4, 64, 32), (1, 512, 512)])
def test_topk_of_a_large_k_with_ties_and_nan(rng, rows, n, k):
    # k=32 of 64: 32 reduction rounds on a GPU; k=512 of 512: a bitonic sort of the axis.
    x = rng.integers(-4, 4, (rows, n)).astype(np.float32)
    x[0, ::7] = np.nan
    x[-1, 40:] = -np.inf
    x[-1, 3] = np.inf
    if rows > 2:
        x[2, :] = 1.0
    zv = poisoned((rows, k)).partition((rows, k))
    zi = poisoned((rows, k), ts.int32).partition((rows, k))
    zv, zi, _ = topk_wide(zv, zi, ts.tensor(x), n).sync()
    want_values, want_indices = reference_topk(x, k, 1)
    np.testing.assert_array_equal(zi.unpartition().numpy(), want_indices)
    np.testing.assert_array_equal(zv.unpartition().numpy(), want_values)
    assert list(want_indices[0, :3]) == [0, 7, 14]


@ts.kernel
def bad_topk(z: tc.MutTensor[tc.f32, (8, 4)], x: tc.Tensor[tc.f32, (-1, -1)],
             K: tc.Const[int]):
    t = x.partition((8, 16)).load((0, 0))
    if K == 0:
        v, i = tc.topk(t, 3)  # <- topk three
    elif K == 1:
        v, i = tc.topk(t, 32)  # <- topk too many
    elif K == 2:
        v, i = tc.topk(t > 0, 4)  # <- topk bool
    elif K == 3:
        v, i = tc.topk(t, 4, axis=2)  # <- topk axis
    else:
        v, i = tc.topk(t, x.shape[0])  # <- topk runtime k
    z.store(v)


@pytest.mark.parametrize("k,cls,phrase,tag,hint", [
    (0, ShapeError, "topk: k=3 must be a power of two from 1 to the extent 16", "topk three",
     "k=4"),
    (1, ShapeError, "topk: k=32 must be a power of two from 1 to the extent 16",
     "topk too many", "k <= 16"),
    (2, DTypeError, "topk does not accept bool tiles", "topk bool", "astype"),
    (3, ShapeError, "topk: axis 2 is out of range for rank 2", "topk axis", "[-2, 1]"),
    (4, CompileError, "topk k must be a compile-time integer", "topk runtime k",
     "tc.Const[int]"),
])
def test_topk_misuse(k, cls, phrase, tag, hint):
    z = poisoned((8, 4)).partition((8, 4))
    with pytest.raises(CompileError) as info:
        bad_topk.ir(z, ts.zeros((8, 16)).sync(), k)
    check_error(info.value, cls, phrase, tag, hint)


# ---------------------------------------------------------------------------------------------
# static slicing

SLICES = {
    "cols": np.s_[:, 4:8],
    "rows": np.s_[2:4],
    "block": np.s_[4:8, 8:16],
    "int": np.s_[3],
    "negative int and open stop": np.s_[-1, 12:],
    "new axis": np.s_[:, None],
    "ellipsis": np.s_[..., 0:2],
    "element": np.s_[5, 7],
    "clamped": np.s_[-100:, :100],
    "mixed": np.s_[None, 6:8, ..., -4:],
    "negative bounds": np.s_[-2:, -16:-8],
    "whole": np.s_[:],
    "misaligned cols": np.s_[:, 2:6],
    "misaligned both": np.s_[3:5, 5:13],
    "misaligned int and slice": np.s_[7, 1:9],
}


@ts.kernel
def slice_k(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1, -1)], CASE: tc.Const[str]):
    t = x.partition((8, 16)).load((0, 0))
    if CASE == "cols":
        r = t[:, 4:8]
    elif CASE == "rows":
        r = t[2:4]
    elif CASE == "block":
        r = t[4:8, 8:16]
    elif CASE == "int":
        r = t[3]
    elif CASE == "negative int and open stop":
        r = t[-1, 12:]
    elif CASE == "new axis":
        r = t[:, None]
    elif CASE == "ellipsis":
        r = t[..., 0:2]
    elif CASE == "element":
        r = t[5, 7]
    elif CASE == "clamped":
        r = t[-100:, :100]
    elif CASE == "mixed":
        r = t[None, 6:8, ..., -4:]
    elif CASE == "negative bounds":
        r = t[-2:, -16:-8]
    elif CASE == "misaligned cols":
        r = t[:, 2:6]
    elif CASE == "misaligned both":
        r = t[3:5, 5:13]
    elif CASE == "misaligned int and slice":
        r = t[7, 1:9]
    else:
        r = t[:]
    z.store(r)


@pytest.mark.parametrize("case", list(SLICES))
@pytest.mark.parametrize("dtype", [ts.float32, ts.float16, ts.int32], ids=str)
def test_static_slices_match_numpy(rng, dtype, case):
    x = host(rng.integers(-1000, 1000, (8, 16)), dtype)
    want = x[SLICES[case]]
    shape = want.shape or (1,)  # a scalar result is stored into a (1,) tile
    res = launch(slice_k, shape, dtype, x, dtype, case)
    np.testing.assert_array_equal(res, want.reshape(shape))


@ts.kernel
def slice_chain(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1, -1)],
                A: tc.Const[int]):
    t = x.partition((8, 16)).load((0, 0))
    z.store(t[A:A + 4][1, A * 2:A * 2 + 4] + t[A + 1:A + 2, 8:12][0])


def test_slices_with_const_bounds_and_chained_indexing(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    z = poisoned((4,)).partition(4)
    z, _ = slice_chain(z, ts.tensor(x), 4).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x[4:8][1, 8:12] + x[5:6, 8:12][0])


@ts.kernel
def bad_slice(z: tc.MutTensor[tc.f32, (8, 4)], x: tc.Tensor[tc.f32, (-1, -1)],
              K: tc.Const[int]):
    t = x.partition((8, 16)).load((0, 0))
    if K == 0:
        r = t[:, 0:3]  # <- slice three
    elif K == 1:
        r = tc.zeros((2, 256))[:, 1:129]  # <- slice too many pieces
    elif K == 2:
        r = t[:, ::2]  # <- slice step
    elif K == 3:
        r = t[:, 4:4]  # <- slice empty
    elif K == 4:
        r = t[8]  # <- index out of range
    elif K == 5:
        r = t[0, 0, 0]  # <- too many indices
    elif K == 6:
        r = t[x.shape[0]]  # <- runtime index
    elif K == 7:
        r = t[:, 0:x.shape[1]]  # <- runtime bound
    elif K == 8:
        r = t[..., ...]  # <- two ellipses
    elif K == 9:
        r = tc.reduce_sum(t)[0]  # <- scalar index
    else:
        r = t[:, 0.5:4]  # <- float bound
    z.store(r)


@pytest.mark.parametrize("k,cls,phrase,tag,hint", [
    (0, TileShapeError, "the slice 0:3 of axis 1 has 3 elements, not a power of two",
     "slice three", "powers of two"),
    (1, ShapeError, "the slice 1:129 of axis 1 would be cut into 128 pieces (at most 64): "
     "its start is not a multiple of its length 128", "slice too many pieces",
     "start it at a multiple of 128 (e.g. 0:128, one step), or at least of 2"),
    (2, ShapeError, "tile slices take step 1 only, got step 2 on axis 1", "slice step",
     "reshape"),
    (3, ShapeError, "the slice 4:4 of axis 1 (extent 16) is empty", "slice empty",
     "at least one element"),
    (4, ShapeError, "index 8 is out of range for axis 0 of extent 8", "index out of range",
     "[-8, 7]"),
    (5, ShapeError, "too many indices for a rank-2 tile: 3", "too many indices", "at most 2"),
    (6, CompileError, "a tile can only be indexed with compile-time integers and slices",
     "runtime index", "tc.where"),
    (7, CompileError, "slice bounds must be compile-time integers", "runtime bound",
     "tc.Const[int]"),
    (8, CompileError, "a tile index can hold at most one '...'", "two ellipses", "write it once"),
    (9, ShapeError, "a scalar cannot be indexed", "scalar index", "at least one axis"),
    (10, CompileError, "tile slice start must be a compile-time integer, got float constant",
     "float bound", "tc.Const[int]"),
])
def test_slice_misuse(k, cls, phrase, tag, hint):
    z = poisoned((8, 4)).partition((8, 4))
    with pytest.raises(CompileError) as info:
        bad_slice.ir(z, ts.zeros((8, 16)).sync(), k)
    check_error(info.value, cls, phrase, tag, hint)


# ---------------------------------------------------------------------------------------------
# cat

CATS = {
    "swap halves": lambda x: np.concatenate((x[:, 8:16], x[:, 0:8]), 1),
    "stack twice": lambda x: np.concatenate((x, x), 0),
    "rows back together": lambda x: np.concatenate((x[0:4], x[4:8]), -2),
    "8+4+4": lambda x: np.concatenate((x[:, 0:8], x[:, 8:12], x[:, 12:16]), 1),
    "2+2+4": lambda x: np.concatenate((x[:, 12:14], x[:, 14:16], x[:, 0:4]), 1),
    "1+1+2+4": lambda x: np.concatenate((x[0:1], x[1:2], x[2:4], x[4:8]), 0),
    "quarters reversed": lambda x: np.concatenate(
        (x[:, 12:16], x[:, 8:12], x[:, 4:8], x[:, 0:4]), 1),
    "one": lambda x: x,
    "1-d": lambda x: np.concatenate((x[0], x[7])),
}


@ts.kernel
def cat_k(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1, -1)], CASE: tc.Const[str]):
    t = x.partition((8, 16)).load((0, 0))
    if CASE == "swap halves":
        r = tc.cat((t[:, 8:16], t[:, 0:8]), axis=1)
    elif CASE == "stack twice":
        r = tc.cat([t, t], 0)
    elif CASE == "rows back together":
        r = tc.cat((t[0:4], t[4:8]), -2)
    elif CASE == "8+4+4":
        r = tc.cat((t[:, 0:8], t[:, 8:12], t[:, 12:16]), 1)
    elif CASE == "2+2+4":
        r = tc.cat((t[:, 12:14], t[:, 14:16], t[:, 0:4]), 1)
    elif CASE == "1+1+2+4":
        r = tc.cat((t[0:1], t[1:2], t[2:4], t[4:8]))
    elif CASE == "quarters reversed":
        r = tc.cat((t[:, 12:16], t[:, 8:12], t[:, 4:8], t[:, 0:4]), axis=-1)
    elif CASE == "one":
        r = tc.cat((t,), 1)
    else:
        r = tc.cat((t[0], t[7]))
    z.store(r)


@pytest.mark.parametrize("case", list(CATS))
@pytest.mark.parametrize("dtype", [ts.float32, ts.float16, ts.int32], ids=str)
def test_cat_matches_numpy(rng, dtype, case):
    x = host(rng.integers(-1000, 1000, (8, 16)), dtype)
    want = CATS[case](x)
    res = launch(cat_k, want.shape, dtype, x, dtype, case)
    np.testing.assert_array_equal(res, want)


@ts.kernel
def bad_cat(z: tc.MutTensor[tc.f32, (8, 16)], x: tc.Tensor[tc.f32, (-1, -1)],
            K: tc.Const[int]):
    t = x.partition((8, 16)).load((0, 0))
    if K == 0:
        r = tc.cat((t, t.astype(tc.f16)), 1)  # <- cat dtypes
    elif K == 1:
        r = tc.cat((t, t[0:4]), 1)  # <- cat shapes
    elif K == 2:
        r = tc.cat((t, t[:, 0:8]), 1)  # <- cat not pow2
    elif K == 3:
        r = tc.cat((t[:, 0:2], t[:, 4:8], t[:, 2:4]), 1)  # <- cat unpaired
    elif K == 4:
        r = tc.cat(t, 1)  # <- cat not tuple
    elif K == 5:
        r = tc.cat((t, 1.0), 1)  # <- cat number
    elif K == 6:
        r = tc.cat((t, t), 2)  # <- cat axis
    else:
        r = tc.cat((tc.reduce_sum(t), tc.reduce_max(t)))  # <- cat scalars
    z.store(r)


@pytest.mark.parametrize("k,cls,phrase,tag,hint", [
    (0, DTypeError, "cat: item 1 is f16, item 0 is f32", "cat dtypes", "astype(tc.f32)"),
    (1, ShapeError, "cat: item 1 has shape (4, 16), item 0 has (8, 16); along axis 1 only",
     "cat shapes", "reshape"),
    (2, TileShapeError, "along axis 1 would be 24 (16 + 8), not a power of two",
     "cat not pow2", "two halves"),
    (3, ShapeError, "cat: pieces of extents (2, 4, 2) along axis 1 cannot be joined",
     "cat unpaired", "neighbours of equal extent"),
    (4, CompileError, "cat takes a tuple or list of tiles", "cat not tuple", "tc.cat((a, b)"),
    (5, CompileError, "cat: item 1 is a float constant 1.0, not a tile", "cat number",
     "tc.full"),
    (6, ShapeError, "cat: axis 2 is out of range for rank 2", "cat axis", "[-2, 1]"),
    (7, ShapeError, "cat: scalars have no axis to join along", "cat scalars", "(1,)"),
])
def test_cat_misuse(k, cls, phrase, tag, hint):
    z = poisoned((8, 16)).partition((8, 16))
    with pytest.raises(CompileError) as info:
        bad_cat.ir(z, ts.zeros((8, 16)).sync(), k)
    check_error(info.value, cls, phrase, tag, hint)
