"""Matrix multiply-accumulate on tiles: ``mma(a, b, acc)`` and ``matmul(a, b)`` (``a @ b``).

Supported element types (inputs -> accumulator): f16 -> f16 or f32, bf16 -> f32, f32 -> f32,
f64 -> f64, i8/u8 -> i32. The interpreter accumulates floats in float64 and rounds once to the
accumulator's dtype; a GPU accumulates in the accumulator's dtype on tensor cores, so float
results agree within a tolerance (documented per dtype in the test suite), integer ones exactly.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from ..registry import builtin, op
from ._rules import tiles

ACCUMULATORS = {
    dt.float16: (dt.float16, dt.float32),
    dt.bfloat16: (dt.float32,),
    dt.float32: (dt.float32,),
    dt.float64: (dt.float64,),
    dt.int8: (dt.int32,),
    dt.uint8: (dt.int32,),
}


def _mma_rule(types, attrs):
    a, b, acc = tiles("mma", types, 3)
    if a.rank != 2 or b.rank != 2 or acc.rank != 2:
        raise ShapeError(f"mma takes 2-D tiles, got {a.shape} @ {b.shape} + {acc.shape}",
                         hint="reshape to (M, K), (K, N) and (M, N)")
    if a.dtype is not b.dtype:
        raise DTypeError(f"mma: operand types differ ({a.dtype.short} and {b.dtype.short})",
                         hint="convert one operand with .astype(...)")
    allowed = ACCUMULATORS.get(a.dtype)
    if allowed is None:
        raise DTypeError(f"mma does not accept {a.dtype.short} operands",
                         hint="use f16, bf16, f32, f64, i8 or u8 operands")
    if acc.dtype not in allowed:
        raise DTypeError(f"mma: a {acc.dtype.short} accumulator does not fit "
                         f"{a.dtype.short} operands",
                         hint="use an accumulator of " + " or ".join(d.short for d in allowed))
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ShapeError(f"mma inner dimensions differ: a is {m}x{k} (MxK) but b is {k2}x{n} "
                         f"(KxN)", hint="the columns of a must equal the rows of b")
    if acc.shape != (m, n):
        raise ShapeError(f"mma accumulator shape {acc.shape} differs from the product shape "
                         f"{(m, n)}", hint=f"accumulate into a tile of shape {(m, n)}, e.g. "
                         f"tc.zeros({(m, n)}, tc.f32)")
    return (acc,)


def _mma_eval(ctx, attrs, a, b, acc):
    if acc.dtype.kind in "iu":
        return (a.astype(np.int64) @ b.astype(np.int64) + acc).astype(acc.dtype,
                                                                       casting="unsafe")
    return a.astype(np.float64) @ b.astype(np.float64) + acc.astype(np.float64)


op("mma", "Matrix multiply-accumulate: a @ b + acc (a: MxK, b: KxN, acc: MxN).", _mma_rule,
   _mma_eval)


def _build_mma(b, x, y, acc):
    """mma(a, b, acc) -> tile

    ``a @ b + acc`` for 2-D tiles a (M x K), b (K x N) and acc (M x N); the result has the
    accumulator's dtype. Operand/accumulator dtypes: f16 -> f16/f32, bf16 -> f32, f32 -> f32,
    f64 -> f64, i8/u8 -> i32. Mismatched inner dimensions are a compile error.
    """
    return b.emit1("mma", (b.tile(x, "mma lhs"), b.tile(y, "mma rhs"), b.tile(acc, "mma acc")))


def _build_matmul(b, x, y):
    """matmul(a, b) -> tile   (also ``a @ b``)

    The matrix product of 2-D tiles. Float products keep the operands' dtype (f16/bf16 are
    accumulated in f32, then rounded); i8/u8 products are i32.
    """
    vx, vy = b.tile(x, "matmul lhs"), b.tile(y, "matmul rhs")
    if vx.type.rank != 2 or vy.type.rank != 2:
        raise b.error(ShapeError, f"matmul takes 2-D tiles, got {vx.type.shape} @ "
                      f"{vy.type.shape}", "reshape the operands to (M, K) and (K, N), e.g. "
                      "v.reshape((1, K)) for a row vector")
    allowed = ACCUMULATORS.get(vx.type.dtype)
    acc_dtype = allowed[-1] if allowed else vx.type.dtype
    acc = b.constant(0, acc_dtype, (vx.type.shape[0], vy.type.shape[1]))
    out = b.emit1("mma", (vx, vy, acc))
    if vx.type.dtype.is_float and out.type.dtype is not vx.type.dtype:
        out = b.emit1("convert", (out,), {"dtype": vx.type.dtype})
    return out


builtin("mma", _build_mma.__doc__, _build_mma)
builtin("matmul", _build_matmul.__doc__, _build_matmul)
