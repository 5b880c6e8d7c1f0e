"""Misuse is a feature: kernels that break the device-side rules (the MutTensor's and the
shared Tensor's access rules, tile typing, unsafe kernels, the tile language's syntax) must be
rejected at compile time with the right error class, a message that says what is wrong, the
file:line of the offending statement, the kernel's name and a fix.

Each offending line carries a marker comment ``# <- tag``; :func:`here` finds its line number
in this file, so the expected locations never go stale when the file is edited.
"""

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line
from tilesafe.errors import (BroadcastError, CompileError, DTypeError, KernelNameError,
                             SafetyError, ShapeError, SignatureError, TileShapeError,
                             UnsupportedSyntaxError)



def here(tag: str) -> int:
    """The 1-based line of this file that carries the marker ``# <- tag``."""
    return marker_line(__file__, tag)


def out(n: int = 16, tile: int = 8, dtype=ts.float32):
    """A fresh partitioned output for a ``tc.MutTensor`` parameter."""
    return ts.zeros(n, dtype).sync().partition(tile)


def inp(n: int = 16, dtype=ts.float32):
    return ts.arange(n, dtype=dtype).sync()


def check(err: CompileError, cls: type, phrase: str, tag: str, kernel: str | None,
          hint: str | None = None) -> None:
    """The error is exactly ``cls``, says ``phrase``, points at the ``tag`` line, names the
    kernel, and comes with a fix (containing ``hint`` if given)."""
    assert type(err) is cls, f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    assert phrase in err.message, err.message
    assert err.location is not None, f"no location: {err}"
    assert os.path.samefile(err.location.file, __file__), err.location
    assert err.location.line == here(tag), f"reported {err.location}, expected line {here(tag)}"
    if kernel is not None:
        assert err.kernel == kernel, f"kernel={err.kernel!r}"
    assert err.hint, f"no fix in: {err}"
    if hint is not None:
        assert hint in err.hint, err.hint
    text = str(err)
    assert f"{err.location.file}:{err.location.line}" in text
    assert err.message in text and err.hint in text


def compile_error(kernel, *args) -> CompileError:
    with pytest.raises(CompileError) as info:
        kernel.ir(*args)
    return info.value


# =============================================================================================
# rule 4: shapes and dtypes of tiles


@ts.kernel
def k_broadcast(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((4,), tc.f32)
    b = tc.zeros((8,), tc.f32)
    z.store(a + b)  # <- broadcast


@ts.kernel
def k_broadcast_2d(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((4, 8), tc.f32)
    b = tc.zeros((8, 4), tc.f32)
    c = tc.maximum(a, b)  # <- broadcast-2d
    z.store(c.reshape((32,)))


@ts.kernel
def k_dtype_mix(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((8,), tc.f32)
    b = tc.zeros((8,), tc.i32)
    z.store(a + b)  # <- dtype-mix


@ts.kernel
def k_float_literal_int_tile(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.ones((8,), tc.i32)
    b = a * 0.5  # <- float-literal
    z.store(b.astype(tc.f32))


@ts.kernel
def k_i8_literal(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.ones((8,), tc.i8)
    b = a + 300  # <- i8-literal
    z.store(b.astype(tc.f32))


@ts.kernel
def k_int_truediv(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.ones((8,), tc.i32)
    b = tc.full((8,), 2, tc.i32)
    c = a / b  # <- int-div
    z.store(c.astype(tc.f32))


@ts.kernel
def k_store_wrong_dtype(z: tc.MutTensor[tc.f32, "S"]):
    z.store(tc.zeros((8,), tc.f64))  # <- store-dtype


@ts.kernel
def k_store_wrong_shape(z: tc.MutTensor[tc.f32, "S"]):
    z.store(tc.zeros((16,), tc.f32))  # <- store-shape


@ts.kernel
def k_store_smaller_tile(z: tc.MutTensor[tc.f32, "S"]):
    t = tc.reduce_max(z.load(), 0, keepdims=True)
    z.store(t)  # <- store-smaller


SHAPE_DTYPE_CASES = [
    (k_broadcast, BroadcastError, "cannot be broadcast", "broadcast", None),
    (k_broadcast_2d, BroadcastError, "cannot be broadcast", "broadcast-2d", None),
    (k_dtype_mix, DTypeError, "element types differ (f32 and i32)", "dtype-mix", "astype"),
    (k_float_literal_int_tile, DTypeError, "float constant 0.5", "float-literal", "astype"),
    (k_i8_literal, DTypeError, "int constant 300", "i8-literal", "i8"),
    (k_int_truediv, DTypeError, "does not accept i32", "int-div", "//"),
    (k_store_wrong_dtype, DTypeError, "differs from the tensor's f32", "store-dtype", "astype"),
    (k_store_wrong_shape, ShapeError, "does not match the sub-tensor", "store-shape", None),
    (k_store_smaller_tile, ShapeError, "a tile of shape (1,) is smaller than the sub-tensor's "
     "static shape (8,); stores never broadcast a tile", "store-smaller", "t.broadcast((8,))"),
]


@ts.kernel
def k_store_row_into_block(z: tc.MutTensor[tc.f32, "S"]):
    row = tc.reduce_sum(z.load(), 0, keepdims=True)
    z.store(row * 2.0)  # <- store-row


def test_a_row_is_not_stored_into_a_block():
    err = compile_error(k_store_row_into_block, ts.zeros((8, 8)).sync().partition((4, 8)))
    check(err, ShapeError, "a tile of shape (1, 8) is smaller than the sub-tensor's static "
          "shape (4, 8)", "store-row", "k_store_row_into_block", hint="t.broadcast((4, 8))")


@ts.kernel
def k_store_explicit_broadcasts(z: tc.MutTensor[tc.f32, "S"], w: tc.MutTensor[tc.f32, "S"],
                                v: tc.MutTensor[tc.f32, "S"], u: tc.MutTensor[tc.f32, "S"]):
    t = tc.reduce_max(z.load(), 1, keepdims=True)
    z.store(t.broadcast(z.shape))             # the ways to fill: an explicit broadcast,
    w.store(tc.broadcast(t, w.shape) + 1.0)
    v.store(tc.reduce_min(v.load().reshape((8,)), 0) + 2.5)  # a scalar fills, like tc.full,
    u.store(tc.arange(8, tc.f32))             # and leading 1s may be added: (8,) -> (1, 8)


def test_stores_fill_only_when_asked():
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    outs = [ts.tensor(x).sync().partition((1, 8)) for _ in range(4)]
    z, w, v, u = k_store_explicit_broadcasts(*outs).sync()
    assert (z.unpartition().numpy() == 7.0).all() and (w.unpartition().numpy() == 8.0).all()
    assert (v.unpartition().numpy() == 2.5).all()
    assert u.unpartition().numpy().tolist() == [list(range(8))]


@pytest.mark.parametrize("kernel,cls,phrase,tag,hint", SHAPE_DTYPE_CASES,
                         ids=[c[3] for c in SHAPE_DTYPE_CASES])
def test_shape_and_dtype_mismatches(kernel, cls, phrase, tag, hint):
    check(compile_error(kernel, out()), cls, phrase, tag, kernel.name, hint)


def test_broadcast_error_names_both_shapes():
    err = compile_error(k_broadcast, out())
    assert "(4,)" in err.message and "(8,)" in err.message


# ---------------------------------------------------------------------------------------------
# mma / matmul


@ts.kernel
def k_mma_inner(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((16, 8), tc.f32)
    b = tc.zeros((16, 16), tc.f32)
    acc = tc.mma(a, b, tc.zeros((16, 16), tc.f32))  # <- mma-inner
    z.store(acc.reshape((256,)))


@ts.kernel
def k_mma_acc_dtype(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((16, 16), tc.f32)
    acc = tc.mma(a, a, tc.zeros((16, 16), tc.f64))  # <- mma-acc
    z.store(acc.astype(tc.f32).reshape((256,)))


@ts.kernel
def k_mma_operand_dtypes(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((16, 16), tc.f32)
    b = tc.zeros((16, 16), tc.f16)
    acc = tc.mma(a, b, tc.zeros((16, 16), tc.f32))  # <- mma-operands
    z.store(acc.reshape((256,)))


@ts.kernel
def k_mma_int_operands(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((16, 16), tc.i32)
    acc = tc.mma(a, a, tc.zeros((16, 16), tc.i32))  # <- mma-i32
    z.store(acc.astype(tc.f32).reshape((256,)))


@ts.kernel
def k_mma_acc_shape(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((16, 8), tc.f32)
    b = tc.zeros((8, 32), tc.f32)
    acc = tc.mma(a, b, tc.zeros((16, 16), tc.f32))  # <- mma-acc-shape
    z.store(acc.reshape((256,)))


@ts.kernel
def k_mma_3d(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((2, 2, 8, 8), tc.f32)  # 3-D (batched) mma is fine; 4-D is not
    acc = tc.mma(a, a, tc.zeros((2, 2, 8, 8), tc.f32))  # <- mma-3d
    z.store(acc.reshape((256,)))


@ts.kernel
def k_matmul_1d(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((16,), tc.f32)
    c = a @ a  # <- matmul-1d
    z.store(c)


@ts.kernel
def k_matmul_inner(z: tc.MutTensor[tc.f32, "S"]):
    a = tc.zeros((16, 8), tc.f32)
    c = tc.matmul(a, a)  # <- matmul-inner
    z.store(c.reshape((128,)))


MMA_CASES = [
    (k_mma_inner, ShapeError, "inner dimensions differ", "mma-inner", 256),
    (k_mma_acc_dtype, DTypeError, "f64 accumulator does not fit f32", "mma-acc", 256),
    (k_mma_operand_dtypes, DTypeError, "operand types differ", "mma-operands", 256),
    (k_mma_int_operands, DTypeError, "does not accept i32", "mma-i32", 256),
    (k_mma_acc_shape, ShapeError, "accumulator shape", "mma-acc-shape", 256),
    (k_mma_3d, ShapeError, "2-D tiles, or 3-D tiles with a leading batch", "mma-3d", 256),
    (k_matmul_1d, ShapeError, "2-D tiles", "matmul-1d", 16),
    (k_matmul_inner, ShapeError, "inner dimensions differ", "matmul-inner", 128),
]


@pytest.mark.parametrize("kernel,cls,phrase,tag,n", MMA_CASES, ids=[c[3] for c in MMA_CASES])
def test_mma_and_matmul_mismatches(kernel, cls, phrase, tag, n):
    check(compile_error(kernel, out(n, n)), cls, phrase, tag, kernel.name)


# ---------------------------------------------------------------------------------------------
# tile shapes: static, powers of two, at most 2**24 elements


@ts.kernel
def k_shape_from_tensor_extent(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    n = x.shape[0]
    t = tc.zeros((n,), tc.f32)  # <- shape-extent
    z.store(t)


@ts.kernel
def k_shape_from_scalar(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int):
    t = tc.full((n, 2), 1.0, tc.f32)  # <- shape-scalar
    z.store(t.reshape((16,)))


@ts.kernel
def k_arange_runtime(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int):
    t = tc.arange(n, tc.f32)  # <- arange-runtime
    z.store(t)


@ts.kernel
def k_reshape_runtime(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int):
    t = z.load().reshape((n, 1))  # <- reshape-runtime
    z.store(t)


@ts.kernel
def k_partition_runtime(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int):
    px = x.partition((n,))  # <- partition-runtime
    z.store(px.load(0))


@ts.kernel
def k_not_power_of_two(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int):
    t = tc.zeros((3, 4), tc.f32)  # <- pow2
    z.store(t.sum(0))


@ts.kernel
def k_arange_not_power_of_two(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
                              n: int):
    t = tc.arange(12, tc.f32)  # <- arange-pow2
    z.store(t)


@ts.kernel
def k_too_large(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int):
    t = tc.zeros((1 << 13, 1 << 12), tc.f32)  # <- too-large
    z.store(t.sum(0))


@ts.kernel
def k_broadcast_too_large(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int):
    a = tc.zeros((1 << 13, 1), tc.f32)
    b = tc.zeros((1, 1 << 12), tc.f32)
    t = a + b  # <- broadcast-too-large
    z.store(t.sum(0))


@ts.kernel
def k_device_partition_not_pow2(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
                                n: int):
    px = x.partition((3,))  # <- partition-pow2
    z.store(px.load(0))


@ts.kernel
def k_arange_tuple(z: tc.MutTensor[tc.f32, "S"]):
    z.store(tc.reshape(tc.arange((4, 2), tc.f32), (8,)))  # <- arange-tuple


def test_arange_of_a_shape_tuple_is_a_shape_error():
    check(compile_error(k_arange_tuple, out()), ShapeError, "size is one integer",
          "arange-tuple", "k_arange_tuple", "tc.arange(16)")


_STATIC, _POW2 = "tc.Const[int]", "power"
TILE_SHAPE_CASES = [
    (k_shape_from_tensor_extent, "not a compile-time constant", "shape-extent", _STATIC),
    (k_shape_from_scalar, "not a compile-time constant", "shape-scalar", _STATIC),
    (k_arange_runtime, "compile-time", "arange-runtime", _STATIC),
    (k_reshape_runtime, "not a compile-time constant", "reshape-runtime", _STATIC),
    (k_partition_runtime, "not a compile-time constant", "partition-runtime", _STATIC),
    (k_not_power_of_two, "tile dimension 3 is not a power of two", "pow2", _POW2),
    (k_arange_not_power_of_two, "tile dimension 12 is not a power of two", "arange-pow2",
     _POW2),
    (k_too_large, "more than 2**24", "too-large", "2**24"),
    (k_broadcast_too_large, "more than 2**24", "broadcast-too-large", "2**24"),
    (k_device_partition_not_pow2, "tile dimension 3 is not a power of two", "partition-pow2",
     _POW2),
]


@pytest.mark.parametrize("kernel,phrase,tag,hint", TILE_SHAPE_CASES,
                         ids=[c[2] for c in TILE_SHAPE_CASES])
def test_tile_shape_rules(kernel, phrase, tag, hint):
    # k_shape_from_tensor_extent takes (z, x); the others also take a runtime scalar n.
    args = (out(), inp()) + (() if kernel is k_shape_from_tensor_extent else (8,))
    check(compile_error(kernel, *args), TileShapeError, phrase, tag, kernel.name, hint)


# =============================================================================================
# syntax outside the tile language


@ts.kernel
def k_while_else(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    while tc.reduce_sum(t, 0) > 0.0:  # <- while-else
        t = t - 1.0
    else:
        t = t + 1.0
    z.store(t)


@ts.kernel
def k_runtime_break_unrolled(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    for s in (1.0, 2.0):
        if tc.reduce_sum(t, 0) > 0.0:
            break  # <- break-unrolled
        t = t * s
    z.store(t)


@ts.kernel
def k_runtime_continue_unrolled(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    for s in (1.0, 2.0):
        if tc.reduce_sum(t, 0) > 0.0:
            continue  # <- continue-unrolled
        t = t * s
    z.store(t)


@ts.kernel
def k_try(z: tc.MutTensor[tc.f32, "S"]):
    try:  # <- try
        z.store(z.load())
    except Exception:
        pass


@ts.kernel
def k_with(z: tc.MutTensor[tc.f32, "S"]):
    with ts.unsafe():  # <- with
        z.store(z.load())


@ts.kernel
def k_lambda(z: tc.MutTensor[tc.f32, "S"]):
    f = lambda t: t + 1.0  # <- lambda  # noqa: E731
    z.store(f(z.load()))


@ts.kernel
def k_listcomp(z: tc.MutTensor[tc.f32, "S"]):
    parts = [tc.zeros((8,), tc.f32) for _ in range(2)]  # <- listcomp
    z.store(parts[0])


@ts.kernel
def k_nested_def(z: tc.MutTensor[tc.f32, "S"]):
    def inner(t):  # <- nested-def
        return t + 1.0
    z.store(inner(z.load()))


@ts.kernel
def k_return_value(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    return t  # <- return


@ts.kernel
def k_tile_setitem(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    t[0] = 1.0  # <- tile-setitem
    z.store(t)


@ts.kernel
def k_fstring(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    name = f"tile {t}"  # <- fstring  # noqa: F841
    z.store(t)


@ts.kernel
def k_raise(z: tc.MutTensor[tc.f32, "S"]):
    raise ValueError("no")  # <- raise


@ts.kernel
def k_for_else(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    for i in range(2):  # <- for-else
        t = t + 1.0
    else:
        t = t - 1.0
    z.store(t)


@ts.kernel
def k_del_in_branch(z: tc.MutTensor[tc.f32, "S"], flag: bool):
    t = z.load()
    if flag:
        u = t + 1.0
        del u  # <- del-in-branch
    z.store(t)


@ts.function
def _recursive(t):
    return _recursive(t)  # <- recursion


@ts.kernel
def k_recursion(z: tc.MutTensor[tc.f32, "S"]):
    z.store(_recursive(z.load()))


SYNTAX_CASES = [
    (k_while_else, "while ... else is not supported", "while-else"),
    (k_runtime_break_unrolled, "'break' under a runtime condition in a loop over a "
     "compile-time tuple", "break-unrolled"),
    (k_runtime_continue_unrolled, "'continue' under a runtime condition in a loop over a "
     "compile-time tuple", "continue-unrolled"),
    (k_try, "'Try' statements are not supported", "try"),
    (k_with, "'With' statements are not supported", "with"),
    (k_lambda, "'Lambda' expressions are not supported", "lambda"),
    (k_listcomp, "'ListComp' expressions are not supported", "listcomp"),
    (k_nested_def, "'FunctionDef' statements are not supported", "nested-def"),
    (k_return_value, "a kernel cannot return a value", "return"),
    (k_tile_setitem, "indexed assignment is not supported", "tile-setitem"),
    (k_fstring, "'JoinedStr' expressions are not supported", "fstring"),
    (k_raise, "'Raise' statements are not supported", "raise"),
    (k_for_else, "for ... else is not supported", "for-else"),
    (k_recursion, "device function '_recursive' calls itself", "recursion"),
]


@pytest.mark.parametrize("kernel,phrase,tag", SYNTAX_CASES, ids=[c[2] for c in SYNTAX_CASES])
def test_unsupported_syntax(kernel, phrase, tag):
    check(compile_error(kernel, out()), UnsupportedSyntaxError, phrase, tag, kernel.name)


def test_unsupported_syntax_inside_a_runtime_branch():
    err = compile_error(k_del_in_branch, out(), True)
    check(err, UnsupportedSyntaxError, "'Delete' statements are not supported",
          "del-in-branch", "k_del_in_branch")


@ts.kernel
def k_endless_while(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    while True:  # <- endless-while
        t = t + 1.0
    z.store(t)


def test_a_while_loop_that_cannot_end_is_a_compile_error():
    err = compile_error(k_endless_while, out())
    check(err, CompileError, "'while True' never ends: its condition is a compile-time truth "
          "and its body has no break", "endless-while", "k_endless_while", hint="add a break")


# =============================================================================================
# rule 2: a shared tc.Tensor is read-only


@ts.kernel
def k_store_shared(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    t = tc.load_tile_like(x, z)
    x.store(t)  # <- store-shared


@ts.kernel
def k_setitem_shared(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    t = tc.load_tile_like(x, z)
    x[0] = t  # <- setitem-shared


@ts.kernel
def k_store_shared_partition(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    px = x.partition((8,))
    i, _, _ = tc.get_tile_block_id()
    px.store(px.load(i))  # <- store-partition


@ts.function
def _store_into(dst, t):
    dst.store(t)  # <- store-shared-via-function


@ts.kernel
def k_store_shared_via_function(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    _store_into(x, tc.load_tile_like(x, z))
    z.store(tc.load_tile_like(x, z))


RULE2_CASES = [
    (k_store_shared, "store-shared"),
    (k_setitem_shared, "setitem-shared"),
    (k_store_shared_partition, "store-partition"),
    (k_store_shared_via_function, "store-shared-via-function"),
]


@pytest.mark.parametrize("kernel,tag", RULE2_CASES, ids=[c[1] for c in RULE2_CASES])
def test_rule2_shared_tensor_is_read_only(kernel, tag):
    err = compile_error(kernel, out(), inp())
    check(err, SafetyError, "read-only", tag, kernel.name, hint="tc.MutTensor")
    assert "rule 2" in err.message


# =============================================================================================
# rule 1: a MutTensor is loaded and stored whole, nothing else


@ts.kernel
def k_indexed_store(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    z.store(t, 0)  # <- indexed-store


@ts.kernel
def k_mut_setitem(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    z[0] = t  # <- mut-setitem


@ts.kernel
def k_mut_getitem(z: tc.MutTensor[tc.f32, "S"]):
    t = z[0]  # <- mut-getitem
    z.store(t)


@ts.kernel
def k_mut_repartition(z: tc.MutTensor[tc.f32, "S"]):
    pz = z.partition((4,))  # <- mut-repartition
    z.store(pz.load(0))


@ts.kernel
def k_mut_augassign_index(z: tc.MutTensor[tc.f32, "S"]):
    z[1] += 1.0  # <- mut-augassign


RULE1_CASES = [
    (k_indexed_store, SafetyError, "no indexed store", "indexed-store"),
    (k_mut_setitem, SafetyError, "cannot be indexed or re-partitioned", "mut-setitem"),
    (k_mut_getitem, SafetyError, "cannot be indexed or re-partitioned", "mut-getitem"),
    (k_mut_repartition, SafetyError, "cannot be indexed or re-partitioned", "mut-repartition"),
    (k_mut_augassign_index, SafetyError, "cannot be indexed or re-partitioned", "mut-augassign"),
]


@pytest.mark.parametrize("kernel,cls,phrase,tag", RULE1_CASES, ids=[c[3] for c in RULE1_CASES])
def test_rule1_mut_tensor_has_no_index(kernel, cls, phrase, tag):
    check(compile_error(kernel, out()), cls, phrase, tag, kernel.name)


# load_tile_like reads shared tensors only: another output's tile at this program's coordinates
# (or its position under another tile shape) is written by other programs


@ts.kernel
def k_load_like_other_mut(z: tc.MutTensor[tc.f32, "S"], w: tc.MutTensor[tc.f32, "S"]):
    z.store(tc.load_tile_like(w, z))  # <- load-like-mut


@ts.kernel
def k_load_like_own_mut(z: tc.MutTensor[tc.f32, "S"]):
    z.store(tc.load_tile_like(z, z) + 1.0)  # <- load-like-self


@ts.function
def _peek(a, z):
    return tc.load_tile_like(a, z)  # <- load-like-via-function


@ts.kernel
def k_load_like_mut_via_function(z: tc.MutTensor[tc.f32, "S"], w: tc.MutTensor[tc.f32, "S"]):
    z.store(_peek(w, z))


@ts.kernel
def k_load_like_mapped(z: tc.MutTensor[tc.f32, "S"], m: tc.MappedPartitionMut[tc.f32, "S", "M"]):
    z.store(tc.load_tile_like(m, z))  # <- load-like-mapped


MUT_READ_CASES = [
    (k_load_like_other_mut, "load-like-mut", "w.load()", lambda: (out(), out())),
    (k_load_like_own_mut, "load-like-self", "z.load()", lambda: (out(),)),
    (k_load_like_mut_via_function, "load-like-via-function", "w.load()",
     lambda: (out(), out())),
    (k_load_like_mapped, "load-like-mapped", "m.load(idx)",
     lambda: (out(), ts.zeros(16).sync().partition(8).map((1,), 2))),
]


@pytest.mark.parametrize("kernel,tag,fix,args", MUT_READ_CASES,
                         ids=[c[1] for c in MUT_READ_CASES])
def test_rule1_load_tile_like_cannot_read_an_output(kernel, tag, fix, args):
    err = compile_error(kernel, *args())
    check(err, SafetyError, "load_tile_like reads a shared tc.Tensor", tag, kernel.name, fix)
    assert "rule 1" in err.message and "tc.Tensor" in err.hint


def test_rule1_load_tile_like_of_an_output_fails_the_ir_verifier():
    """The type rule is the authority: IR that reads an output through load_like, however it
    was built, does not verify."""
    from tilesafe.compiler.ir import Block, KernelIR, KernelParam, Operation, Value
    from tilesafe.compiler.types import TensorViewType, TileType
    from tilesafe.compiler.verify import verify
    z, w = (Value(TensorViewType(ts.float32, (8,), True), n) for n in "zw")
    tile = Value(TileType(ts.float32, (8,)))
    body = Block(ops=[Operation("load_like", (w, z), (tile,), {"padding": "zero"}, None, ())])
    kernel = KernelIR("k", [KernelParam("z", "mut_tensor", z), KernelParam("w", "mut_tensor", w)],
                      body, None, unchecked_accesses=False)
    with pytest.raises(SafetyError, match="safety rule 1"):
        verify(kernel)


# =============================================================================================
# names, scopes and control flow


@ts.kernel
def k_loop_carried_dtype(z: tc.MutTensor[tc.f32, "S"]):
    acc = tc.zeros((8,), tc.f32)
    for i in range(4):  # <- carried-dtype
        acc = acc.astype(tc.f64)
    z.store(acc.astype(tc.f32))


@ts.kernel
def k_loop_carried_shape(z: tc.MutTensor[tc.f32, "S"]):
    acc = tc.zeros((8,), tc.f32)
    for i in range(4):  # <- carried-shape
        acc = tc.zeros((16,), tc.f32) + 1.0
    z.store(acc.reshape((2, 8)).sum(0))


@ts.kernel
def k_loop_local_used_after(z: tc.MutTensor[tc.f32, "S"]):
    for i in range(4):
        t = z.load() + 1.0
    z.store(t)  # <- loop-local


@ts.kernel
def k_loop_variable_used_after(z: tc.MutTensor[tc.f32, "S"]):
    for i in range(4):
        pass
    z.store(z.load() + i.astype(tc.f32))  # <- loop-var


@ts.kernel
def k_one_branch(z: tc.MutTensor[tc.f32, "S"], flag: bool):
    if flag:
        t = z.load() * 2.0
    z.store(t)  # <- one-branch


@ts.kernel
def k_branch_types_differ(z: tc.MutTensor[tc.f32, "S"], flag: bool):
    t = z.load()
    if flag:  # <- branch-types
        t = t.astype(tc.f64)
    z.store(t.astype(tc.f32))


@ts.kernel
def k_undefined(z: tc.MutTensor[tc.f32, "S"]):
    z.store(no_such_tile)  # <- undefined  # noqa: F821


@ts.kernel
def k_print(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    print(t)  # <- print
    z.store(t)


@ts.kernel
def k_np_sum(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    s = np.sum(t)  # <- np-sum
    z.store(t + s)


def _host_helper(t):
    return t


@ts.kernel
def k_host_function(z: tc.MutTensor[tc.f32, "S"]):
    z.store(_host_helper(z.load()))  # <- host-function


@ts.kernel
def k_runtime_truth_value(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    if t > 0.0:  # <- truth-value
        t = t + 1.0
    z.store(t)


NAME_CASES = [
    (k_loop_carried_dtype, CompileError, "loop-carried variable 'acc' changes", "carried-dtype"),
    (k_loop_carried_shape, CompileError, "loop-carried variable 'acc' changes", "carried-shape"),
    (k_loop_local_used_after, KernelNameError, "only defined inside the loop", "loop-local"),
    (k_loop_variable_used_after, KernelNameError, "only defined inside the loop", "loop-var"),
    (k_one_branch, KernelNameError, "assigned in only one branch", "one-branch"),
    (k_branch_types_differ, CompileError, "in the if branch but", "branch-types"),
    (k_undefined, KernelNameError, "'no_such_tile' is not defined", "undefined"),
    (k_print, KernelNameError, "print", "print"),
    (k_np_sum, KernelNameError, "numpy.sum", "np-sum"),
    (k_host_function, KernelNameError, "_host_helper", "host-function"),
    (k_runtime_truth_value, CompileError, "truth value", "truth-value"),
]


@pytest.mark.parametrize("kernel,cls,phrase,tag", NAME_CASES, ids=[c[3] for c in NAME_CASES])
def test_names_scopes_and_control_flow(kernel, cls, phrase, tag):
    args = (out(), True) if kernel in (k_one_branch, k_branch_types_differ) else (out(),)
    check(compile_error(kernel, *args), cls, phrase, tag, kernel.name)


def test_loop_carried_error_names_both_types():
    err = compile_error(k_loop_carried_dtype, out())
    assert "tile<8xf32>" in err.message and "tile<8xf64>" in err.message
    assert "before the loop" in err.hint


def test_one_branch_error_names_the_if_line():
    err = compile_error(k_one_branch, out(), True)
    assert f"line {here('one-branch') - 2}" in err.message  # the 'if flag:' line


# ---------------------------------------------------------------------------------------------
# device functions report the line inside the function; the kernel is the one being compiled


@ts.function
def _bad_add(a, b):
    return a + b  # <- in-function


@ts.kernel
def k_calls_bad_function(z: tc.MutTensor[tc.f32, "S"]):
    z.store(_bad_add(z.load(), tc.zeros((4,), tc.f32)))


def test_error_inside_a_device_function_points_into_it():
    err = compile_error(k_calls_bad_function, out())
    check(err, BroadcastError, "cannot be broadcast", "in-function", "k_calls_bad_function")


def test_rule2_through_a_device_function_names_the_calling_kernel():
    err = compile_error(k_store_shared_via_function, out(), inp())
    assert err.kernel == "k_store_shared_via_function"


# ---------------------------------------------------------------------------------------------
# compile errors surface at the first launch, leave the output untouched, and are not cached


def test_compile_error_at_launch_leaves_output_unchanged_and_is_raised_again():
    z = ts.full(16, 7.0).sync().partition(8)
    for _ in range(2):  # a failed compilation is not cached as a success
        with pytest.raises(BroadcastError) as info:
            k_broadcast(z).sync()
        assert info.value.location.line == here("broadcast")
    assert k_broadcast.compile_count == 0
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 7.0, np.float32))


def test_compile_error_via_ir_text():
    with pytest.raises(SafetyError) as info:
        k_indexed_store.ir_text(out())
    assert info.value.location.line == here("indexed-store")


# =============================================================================================
# the device language outside a kernel


@pytest.mark.parametrize("call", [lambda: tc.zeros((8,), tc.f32), lambda: tc.exp(1.0),
                                  lambda: tc.mma(1, 2, 3), lambda: tc.get_tile_block_id()],
                         ids=["zeros", "exp", "mma", "get_tile_block_id"])
def test_core_functions_outside_a_kernel(call):
    with pytest.raises(CompileError) as info:
        call()
    err = info.value
    assert "can only be called inside a @ts.kernel or @ts.function" in err.message
    assert err.hint


def test_device_function_outside_a_kernel():
    with pytest.raises(CompileError) as info:
        _bad_add(1, 2)
    assert "can only be called from a @ts.kernel" in info.value.message
    assert info.value.hint, f"no fix in: {info.value}"


# =============================================================================================
# bad annotations, rejected when the kernel is decorated (SignatureError)
#
# Two spellings: annotations evaluated when the ``def`` runs (the tc.* subscription itself
# rejects them), and string annotations (what ``from __future__ import annotations`` gives),
# which parse_signature evaluates. Either way the error must point into this file at the bad
# signature and carry a fix.


def check_signature(err: SignatureError, phrase: str, tag: str, kernel: str | None,
                    hint: str | None = None) -> None:
    check(err, SignatureError, phrase, tag, kernel, hint)


@ts.kernel(examples=[{"S": ()}])
def k_rank0_output(z: tc.MutTensor[tc.f32, "S"]):  # <- sig-rank0
    z.store(1.0)


@ts.kernel(examples=[{"S": (), "M": ()}])
def k_rank0_mapped(z: tc.MappedPartitionMut[tc.f32, "S", "M"]):  # <- sig-rank0-mapped
    for idx in z.iter_indices():
        z.store(1.0, idx)


@pytest.mark.parametrize("kernel,tag", [(k_rank0_output, "sig-rank0"),
                                        (k_rank0_mapped, "sig-rank0-mapped")])
def test_a_rank_0_output_shape_is_a_signature_error(kernel, tag):
    """A shape name bound to () (by an example: a launch cannot partition a 0-d tensor) would
    give an output with no dimension; tc.MutTensor[dtype, ()] itself is refused when the
    annotation is made."""
    with pytest.raises(SignatureError) as info:
        kernel._ir(kernel.specialize_example(kernel.examples[0]))  # what `tilesafe check` does
    check_signature(info.value, "parameter 'z': an output's static shape cannot be () (rank 0)",
                    tag, kernel.name, hint="shape (1,)")


def test_signature_mut_tensor_dynamic_extent():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad(z: tc.MutTensor[tc.f32, (-1,)]):  # <- sig-dyn
            pass
    check_signature(info.value, "-1 is not allowed", "sig-dyn", None, hint="\"S\"")


def test_signature_mut_tensor_dynamic_extent_string_annotation():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad_dyn(z: "tc.MutTensor[tc.f32, (-1,)]"):  # <- sig-dyn-str
            pass
    check_signature(info.value, "-1 is not allowed", "sig-dyn-str", "bad_dyn", hint="\"S\"")


def test_signature_unknown_const_type():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad(z: tc.MutTensor[tc.f32, "S"], k: tc.Const[list]):  # <- sig-const
            pass
    check_signature(info.value, "tc.Const[<class 'list'>] is not supported", "sig-const", None,
                    hint="tc.Const[int]")


def test_signature_unknown_const_type_string_annotation():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad_const(z: "tc.MutTensor[tc.f32, 'S']", k: "tc.Const[list]"):  # <- sig-const-str
            pass
    check_signature(info.value, "is not supported", "sig-const-str", "bad_const",
                    hint="tc.Const[int]")


def test_signature_missing_annotation():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad_missing(z: tc.MutTensor[tc.f32, "S"], x):  # <- sig-missing
            pass
    err = info.value
    check_signature(err, "parameter 'x': parameter has no annotation", "sig-missing",
                    "bad_missing", hint="tc.Tensor")


def test_signature_shape_names_a_non_const_parameter():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad_shape(z: tc.MutTensor[tc.f32, ("n",)], n: int):  # <- sig-nonconst
            pass
    check_signature(info.value, "shape entry 'n' is not a tc.Const parameter", "sig-nonconst",
                    "bad_shape", hint="declare 'n' as tc.Const[int]")


def test_signature_shape_names_bind_from_the_partition():
    @ts.kernel
    def bound_extent(z: tc.MutTensor[tc.f32, ("BM", 8)]):
        z.store(tc.zeros((BM, 8), tc.f32))  # noqa: F821 (bound from the partition)

    z = ts.zeros((8, 8)).sync().partition((4, 8))
    assert bound_extent.ir(z).params[0].value.type.shape == (4, 8)


def test_signature_varargs():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad_varargs(z: tc.MutTensor[tc.f32, "S"], *rest):  # <- sig-varargs
            pass
    check_signature(info.value, "*args", "sig-varargs", "bad_varargs")


def test_signature_bare_tensor_annotation():
    with pytest.raises(SignatureError) as info:
        @ts.kernel
        def bad_bare(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor):  # <- sig-bare
            pass
    check_signature(info.value, "needs a dtype and a shape", "sig-bare", "bad_bare")


def test_signature_errors_are_compile_errors():
    assert issubclass(SignatureError, CompileError)
