"""Matrix multiply-accumulate on tiles: ``mma(a, b, acc)`` and ``matmul(a, b)`` (``a @ b``).

Supported element types (inputs -> accumulator), as Tile IR's ``mmaf``/``mmai`` allow them on
sm_90: f16 -> f16 or f32, bf16 -> f32, tf32 -> f32, f32 -> f32, f64 -> f64, f8e4m3fn -> f16 or
f32, f8e5m2 -> f16 or f32, i8/u8 -> i32. Both operands have one element type (no e4m3 x e5m2
mix: Tile IR requires equal operand types). Tiles are 2-D, ``(M, K) @ (K, N) + (M, N)``, or 3-D
with a leading batch dimension, ``(B, M, K) @ (B, K, N) + (B, M, N)``.

The interpreter multiplies exactly (every product of two f8/tf32/f16/bf16 values is exact in
float64), sums in float64 and rounds once to the accumulator's dtype; a GPU accumulates in the
accumulator's dtype on tensor cores in an unspecified order (Hopper's f8 tensor cores with a
reduced-precision internal accumulator), so float results agree within a tolerance (documented
per dtype in the test suite), integer ones exactly.

Fast accumulation (``mma(a, b, acc, fast_accumulation=True)``, f8 operands only) is a float
mode, chosen per op by the kernel's author: Hopper then keeps the whole K loop in its tensor
cores' reduced-precision accumulator, where by default each ``mma`` op's product is added into
the f32 accumulator on the CUDA cores (one more f32 tile of registers and an add per element,
each op). The interpreter computes the same exact sum either way; the GPU's result is less
precise (``torch._scaled_mm(use_fast_accum=True)`` makes the same trade).
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
    dt.tfloat32: (dt.float32,),
    dt.float8_e4m3fn: (dt.float16, dt.float32),
    dt.float8_e5m2: (dt.float16, dt.float32),
    dt.float32: (dt.float32,),
    dt.float64: (dt.float64,),
    dt.int8: (dt.int32,),
    dt.uint8: (dt.int32,),
}


def _mma_rule(types, attrs):
    a, b, acc = tiles("mma", types, 3)
    if a.rank not in (2, 3) or b.rank != a.rank or acc.rank != a.rank:
        raise ShapeError(f"mma takes 2-D tiles, or 3-D tiles with a leading batch dimension, "
                         f"all of one rank; got {a.shape} @ {b.shape} + {acc.shape}",
                         hint="reshape to (M, K), (K, N) and (M, N), or (B, M, K), (B, K, N) "
                         "and (B, M, N)")
    if a.dtype is not b.dtype:
        raise DTypeError(f"mma: operand types differ ({a.dtype.short} and {b.dtype.short})",
                         hint="convert one operand with .astype(...); Tile IR multiplies only "
                         "operands of one element type (f8e4m3fn x f8e5m2 is not allowed)")
    allowed = ACCUMULATORS.get(a.dtype)
    if allowed is None:
        raise DTypeError(f"mma does not accept {a.dtype.short} operands",
                         hint="use f16, bf16, tf32, f32, f64, f8e4m3fn, f8e5m2, i8 or u8 "
                         "operands")
    if acc.dtype not in allowed:
        raise DTypeError(f"mma: a {acc.dtype.short} accumulator does not fit "
                         f"{a.dtype.short} operands",
                         hint="use an accumulator of " + " or ".join(d.short for d in allowed))
    batch = a.shape[:-2]
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if b.shape[:-2] != batch:
        raise ShapeError(f"mma batch dimensions differ: a is {a.shape} (BxMxK) but b is "
                         f"{b.shape} (BxKxN)", hint="both operands need the same batch extent")
    if k != k2:
        raise ShapeError(f"mma inner dimensions differ: a is {m}x{k} (MxK) but b is {k2}x{n} "
                         f"(KxN)", hint="the columns of a must equal the rows of b")
    if acc.shape != (*batch, m, n):
        raise ShapeError(f"mma accumulator shape {acc.shape} differs from the product shape "
                         f"{(*batch, m, n)}", hint=f"accumulate into a tile of shape "
                         f"{(*batch, m, n)}, e.g. tc.zeros({(*batch, m, n)}, tc.f32)")
    return (acc,)


def _mma_eval(ctx, attrs, a, b, acc):
    if acc.dtype.kind in "iu":
        return (a.astype(np.int64) @ b.astype(np.int64) + acc).astype(acc.dtype,
                                                                       casting="unsafe")
    return a.astype(np.float64) @ b.astype(np.float64) + acc.astype(np.float64)


op("mma", "Matrix multiply-accumulate: a @ b + acc (a: [B]xMxK, b: [B]xKxN, acc: [B]xMxN).",
   _mma_rule,
   _mma_eval)


def _build_mma(b, x, y, acc, fast_accumulation=False):
    """mma(a, b, acc, fast_accumulation=False) -> tile

    ``a @ b + acc`` for 2-D tiles a (M x K), b (K x N) and acc (M x N), or batched 3-D tiles
    a (B x M x K), b (B x K x N) and acc (B x M x N); the result has the accumulator's dtype.
    Both operands have one dtype. Operand -> accumulator dtypes: f16 -> f16/f32,
    bf16 -> f32, tf32 -> f32, f32 -> f32, f64 -> f64, f8e4m3fn and f8e5m2 -> f16/f32,
    i8/u8 -> i32. For tf32, convert f32 tiles with ``x.astype(tc.tf32)``. Mismatched inner
    or batch dimensions are a compile error.

    Products are exact and summed in float64 on the interpreter, then rounded once to the
    accumulator's dtype; a GPU sums on tensor cores in its own order, so float results agree
    within a tolerance (f8 inputs: Hopper's f8 tensor cores accumulate with reduced
    precision, expect a relative error of about 2**-13 of the sum of |products|).

    ``fast_accumulation=True`` (f8 operands only): the GPU accumulates in the tensor cores'
    reduced-precision accumulator across calls too, instead of adding each call's product
    into ``acc`` in f32 (faster: no second accumulator tile, no adds; less precise). The
    interpreter's result is the same exact sum.
    """
    operands = (b.tile(x, "mma lhs"), b.tile(y, "mma rhs"), b.tile(acc, "mma acc"))
    if not isinstance(fast_accumulation, bool):
        raise b.error(DTypeError, f"mma: fast_accumulation must be True or False, got "
                      f"{fast_accumulation!r}", "pass a Python bool, or a tc.Const[bool]")
    if not fast_accumulation:
        return b.emit1("mma", operands)
    dtype = operands[0].type.dtype
    if dtype not in (dt.float8_e4m3fn, dt.float8_e5m2):
        raise b.error(DTypeError, f"mma: fast_accumulation applies to f8e4m3fn and f8e5m2 "
                      f"operands, not {dtype.short}", "leave fast_accumulation out: other "
                      "operand types always accumulate at the accumulator's precision")
    return b.emit1("mma", operands, {"fast_accumulation": True})


def _build_matmul(b, x, y):
    """matmul(a, b) -> tile   (also ``a @ b``)

    The matrix product of 2-D tiles, or of 3-D tiles with a leading batch dimension. Float
    products keep the operands' dtype (f16/bf16 are accumulated in f32, then rounded), except
    that products of f8e4m3fn, f8e5m2 or tf32 tiles are f32; i8/u8 products are i32.
    """
    vx, vy = b.tile(x, "matmul lhs"), b.tile(y, "matmul rhs")
    rank = vx.type.rank
    if rank not in (2, 3) or vy.type.rank != rank:
        raise b.error(ShapeError, "matmul takes 2-D tiles (or batched 3-D tiles) of one rank, "
                      f"got {vx.type.shape} @ {vy.type.shape}", "reshape the operands to (M, K) "
                      "and (K, N), e.g. v.reshape((1, K)) for a row vector")
    allowed = ACCUMULATORS.get(vx.type.dtype)
    acc_dtype = allowed[-1] if allowed else vx.type.dtype
    acc = b.constant(0, acc_dtype, (*vx.type.shape[:-1], vy.type.shape[-1]))
    out = b.emit1("mma", (vx, vy, acc))
    if (vx.type.dtype.is_float and vx.type.dtype.arithmetic
            and out.type.dtype is not vx.type.dtype):
        out = b.emit1("convert", (out,), {"dtype": vx.type.dtype})
    return out


builtin("mma", _build_mma.__doc__, _build_mma)
builtin("matmul", _build_matmul.__doc__, _build_matmul)
