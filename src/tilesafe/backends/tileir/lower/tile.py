"""Tile IR lowerings of the whole-tile ops: constants, ``iota``, shape ops (``compiler/ops/
shape.py``), reductions and scans (``reduce.py``) and ``mma`` (``matmul.py``).

Reductions use the identity of their operation (sum 0, prod 1, max -inf / the type's minimum /
false, min +inf / the type's maximum / true); max and min propagate NaN, and on bool tiles are
"any" (``ori``) and "all" (``andi``). Integer sums and products wrap exactly. Float sums and
products of f16/bf16 tiles are accumulated in f32 and rounded once to the dtype (the
interpreter accumulates in float64, so float results agree within a tolerance, not bit for
bit); f32 and f64 reduce in their own precision. Scans (cumsum/cumprod, optionally reversed)
follow the same rules. ``mma`` is ``mmaf`` for floats and ``mmai`` for i8/u8 with each
operand's signedness.

Importing it registers these lowerings (``context.lowers``). It imports the ``bytecode``
package, ``context`` and ``tilesafe.compiler``/``dtypes``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

import math

import numpy as np

from .... import dtypes as dt
from ....compiler.ir import Operation
from ....dtypes import DType
from ..bytecode import F32, FloatAttr, IntegerAttr, Value
from .context import HALF_FLOATS, LoweringContext, lowers, scalar_type
from .context import signedness as _sign

__all__: list[str] = []


@lowers("constant")
def lower_constant(lw: LoweringContext, op: Operation) -> None:
    """A splat (or, for an array value, dense) constant rounded to its dtype."""
    attrs = op.attrs
    lw.set_result(op, lw.constant(attrs["value"], attrs["dtype"], attrs["shape"]))


@lowers("iota")
def lower_iota(lw: LoweringContext, op: Operation) -> None:
    lw.set_result(op, lw.fn.iota(op.attrs["n"], scalar_type(op.attrs["dtype"])))


@lowers("broadcast")
def lower_broadcast(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    lw.set_result(op, lw.fn.broadcast(x, tuple(op.attrs["shape"])))


@lowers("reshape")
def lower_reshape(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    lw.set_result(op, lw.fn.reshape(x, tuple(op.attrs["shape"])))


@lowers("permute")
def lower_permute(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    lw.set_result(op, lw.fn.permute(x, tuple(op.attrs["perm"])))


# ---------------------------------------------------------------------------------------------
# reductions and scans


def identity(kind: str, dtype: DType) -> object:
    """The identity element of reduction ``kind`` over ``dtype`` values."""
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    low = kind == "max"
    if dtype.is_bool:
        return not low
    if dtype.is_float:
        return -math.inf if low else math.inf
    info = np.iinfo(dtype.compute)
    return int(info.min) if low else int(info.max)


def _combiner(lw: LoweringContext, kind: str, dtype: DType):
    """The body ``(element, accumulator) -> value`` of a reduce/scan of ``kind``."""
    fn = lw.fn
    if kind in ("sum", "prod"):
        name = {"sum": "add", "prod": "mul"}[kind] + ("f" if dtype.is_float else "i")
        return getattr(fn, name)
    if dtype.is_float:
        return lambda e, acc: getattr(fn, f"{kind}f")(e, acc, propagate_nan=True)
    if dtype.is_bool:
        return fn.ori if kind == "max" else fn.andi
    return lambda e, acc: getattr(fn, f"{kind}i")(e, acc, signedness=_sign(dtype))


def _combine(lw: LoweringContext, op: Operation, scan: bool) -> None:
    (x,) = lw.operands(op)
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    dtype: DType = op.operands[0].type.dtype
    accumulate = dtype in HALF_FLOATS and kind in ("sum", "prod")
    work = dt.float32 if accumulate else dtype
    if accumulate:
        x = lw.to_f32(x)
    element = F32 if accumulate else scalar_type(dtype)
    value = identity(kind, work)
    attr = (FloatAttr(value, element) if work.is_float
            else IntegerAttr(int(value), element))
    combine = _combiner(lw, kind, work)

    def body(e: Value, acc: Value) -> None:
        lw.fn.yield_([combine(e, acc)])

    if scan:
        (result,) = lw.fn.scan([x], axis, [attr], body, reverse=bool(op.attrs.get("reverse")))
    else:
        (result,) = lw.fn.reduce([x], axis, [attr], body)
    lw.set_result(op, lw.from_f32(result, dtype) if accumulate else result)


@lowers("reduce")
def lower_reduce(lw: LoweringContext, op: Operation) -> None:
    _combine(lw, op, scan=False)


@lowers("scan")
def lower_scan(lw: LoweringContext, op: Operation) -> None:
    _combine(lw, op, scan=True)


# ---------------------------------------------------------------------------------------------
# matrix multiply-accumulate


@lowers("mma")
def lower_mma(lw: LoweringContext, op: Operation) -> None:
    a, b, acc = lw.operands(op)
    dtype: DType = op.operands[0].type.dtype
    if dtype.is_float:
        result = lw.fn.mmaf(a, b, acc)
    else:
        sign = _sign(dtype)
        result = lw.fn.mmai(a, b, acc, lhs_signedness=sign, rhs_signedness=sign)
    lw.set_result(op, result)
