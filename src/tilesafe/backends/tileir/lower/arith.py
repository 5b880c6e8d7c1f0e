"""Tile IR lowerings of the elementwise ops (``compiler/ops/elementwise.py``): math functions,
arithmetic, comparisons, ``select`` and ``convert``.

Each lowering reproduces the op's numpy semantics:

* Tile IR integers are signless; signedness comes from the tilesafe dtype (``'i'`` signed,
  ``'u'`` unsigned) and picks the ``signedness`` of divi/remi/maxi/mini/shri/cmpi/exti/itof/
  ftoi. Integer arithmetic wraps (no overflow promises).
* ``//`` and ``%`` follow Python: integer floor division is ``divi`` rounding to -inf (signed)
  or to zero (unsigned); ``%`` is ``remi`` plus ``b`` where the remainder is non-zero and its
  sign differs from ``b``'s. Float ``//`` is ``floor(a / b)``; float ``%`` is numpy's
  ``fmod``-based remainder with the sign of ``b`` (``-0.0``/``+0.0`` for zero results).
* 16-bit floats: ``+ - * max min abs neg`` and comparisons run natively (they are exact or
  correctly rounded); division, math functions, ``//``, ``%`` and ``**`` are computed in f32
  and rounded once to the dtype, as the interpreter does (float16 ``//`` rounds the quotient
  to f16 before the floor, like numpy's float16 arrays).
* ``maximum``/``minimum`` propagate NaN (``propagate_nan``) unless the op says
  ``propagate_nan=False``; comparisons are ordered except ``!=`` (unordered, so ``nan != x``
  is true).
* Float modes an op asks for (never a default): ``exp2(flush_to_zero=True)`` is ``exp2``
  with ``ftz``, ``exp(approx=True)`` is ``exp`` rounding ``approx``, ``truediv(rounding=
  "approx"|"full", flush_to_zero=...)`` is ``divf`` with that rounding and ``ftz``.
* ``convert``: float -> int truncates toward zero (``ftoi``), int -> float rounds to nearest
  even (``itof``), ints widen with the source's signedness and narrow by truncation, anything
  -> bool is ``!= 0``, bool -> number is 0/1. Conversions to and from the 8-bit floats and tf32
  go through f32 (``ftof`` to f32 is exact from every format they meet, so one rounding
  happens, in the last ``ftof``); f32 -> f8 is the GPU's saturating round-to-nearest-even
  (``cvt.rn.satfinite``), which the interpreter reproduces.

Importing it registers these lowerings (``context.lowers``). It imports the ``bytecode``
package, ``context`` and ``tilesafe.compiler``/``dtypes``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from .... import dtypes as dt
from ....compiler.ir import Operation
from ....dtypes import DType
from ..bytecode import (F32, ComparisonOrdering, ComparisonPredicate, RoundingMode, Signedness,
                        Value)
from .context import HALF_FLOATS, LoweringContext, lowers, scalar_type
from .context import signedness as _sign

__all__: list[str] = []


def _dtype(op: Operation, index: int = 0) -> DType:
    return op.operands[index].type.dtype


# ---------------------------------------------------------------------------------------------
# unary

_FLOAT_MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan", "sinh",
               "cosh", "tanh", "floor", "ceil")


@lowers(*_FLOAT_MATH)
def lower_float_math(lw: LoweringContext, op: Operation) -> None:
    """Float math functions: native for f32/f64, in f32 then rounded for f16/bf16. ``exp`` and
    ``tanh`` use the accurate (``full``) variants, ``sqrt`` is correctly rounded."""
    (x,) = lw.operands(op)
    emit = getattr(lw.fn, op.name)
    if op.name == "exp2" and op.attrs.get("ftz"):
        emit = lambda v: lw.fn.exp2(v, flush_to_zero=True)  # noqa: E731
    elif op.name == "exp" and op.attrs.get("approx"):
        emit = lambda v: lw.fn.exp(v, rounding=RoundingMode.APPROX)  # noqa: E731
    lw.set_result(op, lw.in_f32(_dtype(op), [x], emit))


@lowers("negative")
def lower_negative(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    lw.set_result(op, lw.fn.negf(x) if _dtype(op).is_float else lw.fn.negi(x))


@lowers("abs")
def lower_abs(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    dtype = _dtype(op)
    if dtype.is_float:
        result = lw.fn.absf(x)
    elif dtype.is_signed:
        result = lw.fn.absi(x)
    else:
        result = x  # numpy's abs of an unsigned integer is the identity
    lw.set_result(op, result)


@lowers("invert")
def lower_invert(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    dtype = _dtype(op)
    ones = lw.like(True if dtype.is_bool else -1, dtype, x)
    lw.set_result(op, lw.fn.xori(x, ones))


# ---------------------------------------------------------------------------------------------
# arithmetic


def _arith(float_op: str, int_op: str):
    def lower(lw: LoweringContext, op: Operation) -> None:
        a, b = lw.operands(op)
        emit = getattr(lw.fn, float_op if _dtype(op).is_float else int_op)
        lw.set_result(op, emit(a, b))
    return lower


lowers("add")(_arith("addf", "addi"))
lowers("sub")(_arith("subf", "subi"))
lowers("mul")(_arith("mulf", "muli"))


@lowers("fma")
def lower_fma(lw: LoweringContext, op: Operation) -> None:
    """One fused multiply-add, rounded to nearest (f32 only: the op's rule)."""
    a, b, c = lw.operands(op)
    lw.set_result(op, lw.fn.fma(a, b, c))


@lowers("truediv")
def lower_truediv(lw: LoweringContext, op: Operation) -> None:
    a, b = lw.operands(op)
    rounding = _DIVISION_ROUNDING[op.attrs.get("rounding", "nearest_even")]
    flush = bool(op.attrs.get("ftz"))
    lw.set_result(op, lw.in_f32(_dtype(op), [a, b], lambda x, y: lw.fn.divf(
        x, y, rounding=rounding, flush_to_zero=flush)))


_DIVISION_ROUNDING = {"nearest_even": RoundingMode.NEAREST_EVEN, "full": RoundingMode.FULL,
                      "approx": RoundingMode.APPROX}


@lowers("floordiv")
def lower_floordiv(lw: LoweringContext, op: Operation) -> None:
    a, b = lw.operands(op)
    dtype = _dtype(op)
    fn = lw.fn
    if not dtype.is_float:
        rounding = RoundingMode.NEGATIVE_INF if dtype.is_signed else RoundingMode.ZERO
        lw.set_result(op, fn.divi(a, b, signedness=_sign(dtype), rounding=rounding))
        return
    if dtype in HALF_FLOATS:
        quotient = fn.divf(lw.to_f32(a), lw.to_f32(b))
        if dtype is dt.float16:
            # numpy divides float16 arrays to a float16 quotient, then floors it
            quotient = lw.to_f32(lw.from_f32(quotient, dtype))
        lw.set_result(op, lw.from_f32(fn.floor(quotient), dtype))
        return
    lw.set_result(op, fn.floor(fn.divf(a, b)))


def _float_mod(lw: LoweringContext, a: Value, b: Value) -> Value:
    """numpy's float remainder: ``fmod``, moved into ``b``'s sign, signed zero for 0."""
    fn = lw.fn
    dtype = dt.float64 if a.type.element.bits == 64 else dt.float32
    zero = lw.like(0.0, dtype, a)
    r = fn.remf(a, b)
    b_negative = fn.cmpf(ComparisonPredicate.LT, b, zero)
    r_negative = fn.cmpf(ComparisonPredicate.LT, r, zero)
    r_nonzero = fn.cmpf(ComparisonPredicate.NE, r, zero, ordering=ComparisonOrdering.UNORDERED)
    fix = fn.andi(r_nonzero, fn.xori(b_negative, r_negative))
    moved = fn.select(fix, fn.addf(r, b), r)
    r_zero = fn.cmpf(ComparisonPredicate.EQ, r, zero)
    signed_zero = fn.select(b_negative, lw.like(-0.0, dtype, a), zero)
    return fn.select(r_zero, signed_zero, moved)


@lowers("mod")
def lower_mod(lw: LoweringContext, op: Operation) -> None:
    a, b = lw.operands(op)
    dtype = _dtype(op)
    fn = lw.fn
    if dtype.is_float:
        lw.set_result(op, lw.in_f32(dtype, [a, b], lambda x, y: _float_mod(lw, x, y)))
        return
    r = fn.remi(a, b, signedness=_sign(dtype))
    if dtype.is_signed:
        zero = lw.like(0, dtype, a)
        nonzero = fn.cmpi(ComparisonPredicate.NE, r, zero, signedness=Signedness.SIGNED)
        differ = fn.cmpi(ComparisonPredicate.LT, fn.xori(r, b), zero,
                         signedness=Signedness.SIGNED)
        r = fn.select(fn.andi(nonzero, differ), fn.addi(r, b), r)
    lw.set_result(op, r)


@lowers("pow")
def lower_pow(lw: LoweringContext, op: Operation) -> None:
    a, b = lw.operands(op)
    lw.set_result(op, lw.in_f32(_dtype(op), [a, b], lw.fn.fpowf))


def _extremum(float_op: str, int_op: str, bool_op: str):
    def lower(lw: LoweringContext, op: Operation) -> None:
        a, b = lw.operands(op)
        dtype = _dtype(op)
        if dtype.is_float:
            result = getattr(lw.fn, float_op)(
                a, b, propagate_nan=op.attrs.get("propagate_nan", True))
        elif dtype.is_bool:
            result = getattr(lw.fn, bool_op)(a, b)
        else:
            result = getattr(lw.fn, int_op)(a, b, signedness=_sign(dtype))
        lw.set_result(op, result)
    return lower


lowers("maximum")(_extremum("maxf", "maxi", "ori"))
lowers("minimum")(_extremum("minf", "mini", "andi"))


def _bitwise(name: str):
    def lower(lw: LoweringContext, op: Operation) -> None:
        a, b = lw.operands(op)
        lw.set_result(op, getattr(lw.fn, name)(a, b))
    return lower


lowers("bitwise_and")(_bitwise("andi"))
lowers("bitwise_or")(_bitwise("ori"))
lowers("bitwise_xor")(_bitwise("xori"))
lowers("left_shift")(_bitwise("shli"))


@lowers("right_shift")
def lower_right_shift(lw: LoweringContext, op: Operation) -> None:
    a, b = lw.operands(op)
    lw.set_result(op, lw.fn.shri(a, b, signedness=_sign(_dtype(op))))


# ---------------------------------------------------------------------------------------------
# comparisons and select

_PREDICATES = {"equal": ComparisonPredicate.EQ, "not_equal": ComparisonPredicate.NE,
               "less": ComparisonPredicate.LT, "less_equal": ComparisonPredicate.LE,
               "greater": ComparisonPredicate.GT, "greater_equal": ComparisonPredicate.GE}


@lowers(*_PREDICATES)
def lower_compare(lw: LoweringContext, op: Operation) -> None:
    """Float comparisons are ordered (false with NaN) except ``!=`` (unordered: true with NaN);
    integer comparisons use the dtype's signedness (bool compares as unsigned 0/1)."""
    a, b = lw.operands(op)
    dtype = _dtype(op)
    predicate = _PREDICATES[op.name]
    if dtype.is_float:
        ordering = (ComparisonOrdering.UNORDERED if predicate == ComparisonPredicate.NE
                    else ComparisonOrdering.ORDERED)
        result = lw.fn.cmpf(predicate, a, b, ordering=ordering)
    else:
        result = lw.fn.cmpi(predicate, a, b, signedness=_sign(dtype))
    lw.set_result(op, result)


@lowers("select")
def lower_select(lw: LoweringContext, op: Operation) -> None:
    cond, a, b = lw.operands(op)
    lw.set_result(op, lw.fn.select(cond, a, b))


# ---------------------------------------------------------------------------------------------
# conversion


def convert(lw: LoweringContext, x: Value, source: DType, target: DType) -> Value:
    """``x`` (a tile of ``source``) converted to ``target`` with ``astype``'s semantics."""
    fn = lw.fn
    if source is target:
        return x
    if target.is_bool:
        zero = lw.like(0, source, x)
        if source.is_float:
            return fn.cmpf(ComparisonPredicate.NE, x, zero, ordering=ComparisonOrdering.UNORDERED)
        return fn.cmpi(ComparisonPredicate.NE, x, zero, signedness=Signedness.UNSIGNED)
    element = scalar_type(target)
    if source.is_bool:
        return fn.select(x, lw.like(1, target, x), lw.like(0, target, x))
    if source.is_float and target.is_float:
        if source.arithmetic and target.arithmetic or F32 in (scalar_type(source), element):
            return fn.ftof(x, element)
        return fn.ftof(lw.to_f32(x), element)  # a storage-and-mma type: through f32
    if source.is_float:
        wide = lw.to_f32(x) if source in HALF_FLOATS else x
        return fn.ftoi(wide, element, signedness=_sign(target))
    if target.is_float:
        return fn.itof(x, element, signedness=_sign(source))
    width = scalar_type(source).bits
    if element.bits > width:
        return fn.exti(x, element, signedness=_sign(source))
    if element.bits < width:
        return fn.trunci(x, element)
    return x  # same width: Tile IR integers are signless


@lowers("convert")
def lower_convert(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    lw.set_result(op, convert(lw, x, _dtype(op), op.attrs["dtype"]))

