"""Tile IR lowerings of the whole-tile ops: constants, ``iota``, shape ops, static slices and
``cat`` (``compiler/ops/shape.py``), reductions, scans, argmax/argmin and topk (``reduce.py``)
and ``mma`` (``matmul.py``).

Reductions use the identity of their operation (sum 0, prod 1, max -inf / the type's minimum /
false, min +inf / the type's maximum / true); max and min propagate NaN, and on bool tiles are
"any" (``ori``) and "all" (``andi``). Integer sums and products wrap exactly. Float sums and
products of f16/bf16 tiles are accumulated in f32 and rounded once to the dtype (the
interpreter accumulates in float64, so float results agree within a tolerance, not bit for
bit); f32 and f64 reduce in their own precision. Scans (cumsum/cumprod, optionally reversed)
follow the same rules. ``mma`` is ``mmaf`` for floats and ``mmai`` for i8/u8 with each
operand's signedness.

argmax/argmin are a two-operand ``reduce`` of (value, position) whose body keeps the pair
ranked first in a total order (NaN first, then the larger or smaller value, then the lower
position), so any tree order gives numpy's answer. topk uses the same ranking, in ``k``
reduction rounds or, for a very large ``k``, a bitonic sort of the axis. A static slice is one
``extract`` when its window is aligned (each start a multiple of its extent), else aligned
pieces joined with ``cat``; ``cat`` joins two tiles.

Importing it registers these lowerings (``context.lowers``). It imports the ``bytecode``
package, ``context`` and ``tilesafe.compiler``/``dtypes``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

import math

import numpy as np

from .... import dtypes as dt
from ....compiler.ir import Operation
from ....compiler.ops.shape import slice_piece
from ....dtypes import DType
from ..bytecode import (F32, I32, ComparisonOrdering, ComparisonPredicate, FloatAttr,
                        IntegerAttr, Signedness, Value)
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


@lowers("slice")
def lower_slice(lw: LoweringContext, op: Operation) -> None:
    """``extract`` counts windows of the result's shape, so an aligned window (each start a
    multiple of its extent) is one ``extract`` at ``start // extent``. Otherwise each
    misaligned axis in turn is cut into aligned pieces (``compiler.ops.shape.slice_piece``)
    that are extracted and joined pairwise."""
    (x,) = lw.operands(op)
    start, shape = tuple(op.attrs["start"]), tuple(op.attrs["shape"])
    if all(s % n == 0 for s, n in zip(start, shape)):
        lw.set_result(op, lw.fn.extract(x, [lw.i32(s // n) for s, n in zip(start, shape)],
                                        shape))
        return
    current = list(op.operands[0].type.shape)
    for axis, (s, n) in enumerate(zip(start, shape)):
        if n == current[axis]:
            continue
        piece = slice_piece(s, n)
        window = tuple(current[:axis] + [piece] + current[axis + 1:])
        parts = []
        for at in range(s, s + n, piece):
            coords = [lw.i32(0)] * len(current)
            coords[axis] = lw.i32(at // piece)
            parts.append(lw.fn.extract(x, coords, window))
        x = _cat_tree(lw, parts, axis)
        current[axis] = n
    lw.set_result(op, x)


@lowers("cat")
def lower_cat(lw: LoweringContext, op: Operation) -> None:
    a, c = lw.operands(op)
    lw.set_result(op, lw.fn.cat(a, c, op.attrs["axis"]))


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
# argmax / argmin / topk: a two-operand reduce of (value, index)

_INDEX_IDENTITY = np.iinfo(np.int32).max  # above every index: an identity loses every tie


def _ranks_first(lw: LoweringContext, kind: str, dtype: DType, e: Value, acc: Value,
                 ei: Value, ai: Value) -> Value:
    """Whether ``(e, ei)`` ranks before ``(acc, ai)`` (an ``i1``): NaN before every number,
    then the larger (kind 'max') or smaller ('min') value, then the lower index. A total
    order on (value, index) pairs, so the reduction's tree order cannot change the answer."""
    fn = lw.fn
    predicate = ComparisonPredicate.GT if kind == "max" else ComparisonPredicate.LT
    first = fn.cmpi(ComparisonPredicate.LT, ei, ai, signedness=Signedness.SIGNED)
    if not dtype.is_float:
        wins = fn.cmpi(predicate, e, acc, signedness=_sign(dtype))
        equal = fn.cmpi(ComparisonPredicate.EQ, e, acc, signedness=_sign(dtype))
        return fn.ori(wins, fn.andi(equal, first))
    ordered = ComparisonOrdering.ORDERED
    wins = fn.cmpf(predicate, e, acc, ordering=ordered)
    equal = fn.cmpf(ComparisonPredicate.EQ, e, acc, ordering=ordered)
    e_number = fn.cmpf(ComparisonPredicate.EQ, e, e, ordering=ordered)
    acc_number = fn.cmpf(ComparisonPredicate.EQ, acc, acc, ordering=ordered)
    e_nan = fn.cmpf(ComparisonPredicate.NE, e, e, ordering=ComparisonOrdering.UNORDERED)
    acc_nan = fn.cmpf(ComparisonPredicate.NE, acc, acc, ordering=ComparisonOrdering.UNORDERED)
    nan_over_number = fn.andi(e_nan, acc_number)
    numbers_win = fn.andi(e_number, wins)  # ordered: already false with a NaN
    tie = fn.andi(fn.ori(equal, fn.andi(e_nan, acc_nan)), first)
    return fn.ori(fn.ori(nan_over_number, numbers_win), tie)


def _arg_reduce(lw: LoweringContext, kind: str, dtype: DType, x: Value, index: Value,
                axis: int) -> tuple[Value, Value]:
    """The (value, index) pair ranked first along ``axis`` (both with ``axis`` removed)."""
    element = scalar_type(dtype)
    value = identity(kind, dtype)
    attr = FloatAttr(value, element) if dtype.is_float else IntegerAttr(int(value), element)

    def body(e: Value, acc: Value, ei: Value, ai: Value) -> None:
        take = _ranks_first(lw, kind, dtype, e, acc, ei, ai)
        lw.fn.yield_([lw.fn.select(take, e, acc), lw.fn.select(take, ei, ai)])

    values, indices = lw.fn.reduce([x, index], axis, [attr, IntegerAttr(_INDEX_IDENTITY, I32)],
                                   body)
    return values, indices


def _positions(lw: LoweringContext, shape: tuple[int, ...], axis: int) -> Value:
    """An i32 tile of ``shape`` holding each element's position along ``axis``."""
    line = lw.fn.iota(shape[axis], I32)
    keep = tuple(n if d == axis else 1 for d, n in enumerate(shape))
    if keep != (shape[axis],):
        line = lw.fn.reshape(line, keep)
    return line if keep == shape else lw.fn.broadcast(line, shape)


@lowers("argreduce")
def lower_argreduce(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    source = op.operands[0].type
    positions = _positions(lw, source.shape, axis)
    lw.set_result(op, _arg_reduce(lw, kind, source.dtype, x, positions, axis)[1])


def _cat_tree(lw: LoweringContext, parts: list[Value], axis: int) -> Value:
    """Concatenate ``parts`` (a power-of-two count of equal tiles) pairwise, so every
    intermediate extent is a power of two."""
    while len(parts) > 1:
        parts = [lw.fn.cat(parts[i], parts[i + 1], axis) for i in range(0, len(parts), 2)]
    return parts[0]


def _bitonic_stages(n: int) -> int:
    """Compare-exchange stages of a bitonic sort of ``n`` (a power of two) elements."""
    log = n.bit_length() - 1
    return log * (log + 1) // 2


# A bitonic stage costs tileiras (13.4, sm_90) about as much compile time as 8 to 20 reduction
# rounds over the same tile (measured: a (16, 128) tile, k=32: 70 s sorted, 6 s in rounds;
# (16, 1024), k=64 in rounds: 62 s; (1, 1024) sorted: 23 s). So rounds are used until k passes
# 8 stages' worth: the sort only serves k >= 512 of 512 or 1024 elements and beyond. Run time
# on a GPU was not measured for either.
SORT_FACTOR = 8


def topk_sorts(n: int, k: int) -> bool:
    """Whether topk of ``k`` along an axis of ``n`` sorts the axis (else: ``k`` rounds)."""
    return k > SORT_FACTOR * _bitonic_stages(n)


def _topk_by_rounds(lw: LoweringContext, dtype: DType, x: Value, shape: tuple[int, ...],
                    axis: int, k: int) -> tuple[Value, Value]:
    """``k`` rounds: take the first-ranked (value, index) along the axis, then retire that
    element by giving it the reduction's identity (value and index), which ranks after every
    element still in play (an equal value at a real index wins the index tie)."""
    keep = shape[:axis] + (1,) + shape[axis + 1:]
    positions = _positions(lw, shape, axis)
    work, index = x, positions
    retired_value = lw.constant(identity("max", dtype), dtype, shape)
    retired_index = lw.constant(_INDEX_IDENTITY, dt.int32, shape)
    values, indices = [], []
    for round_ in range(k):
        value, at = _arg_reduce(lw, "max", dtype, work, index, axis)
        values.append(lw.fn.reshape(value, keep))
        indices.append(lw.fn.reshape(at, keep))
        if round_ + 1 < k:
            taken = lw.fn.cmpi(ComparisonPredicate.EQ, positions,
                               lw.fn.broadcast(indices[-1], shape),
                               signedness=Signedness.SIGNED)
            work = lw.fn.select(taken, retired_value, work)
            index = lw.fn.select(taken, retired_index, index)
    return _cat_tree(lw, values, axis), _cat_tree(lw, indices, axis)


def _topk_by_sorting(lw: LoweringContext, dtype: DType, x: Value, shape: tuple[int, ...],
                     axis: int, k: int) -> tuple[Value, Value]:
    """A bitonic sort of (value, index) pairs along the axis, then its first ``k``.

    A stage with partner distance ``j`` views the axis as ``(n / 2j, 2, j)``: element ``i``
    sits at ``(i // 2j, 0, i % j)`` and its partner ``i + j`` at ``(i // 2j, 1, i % j)``. The
    two halves are extracted, compared with the ranking of argmax (a total order, so the
    unstable network still gives the stable answer), swapped where a block's direction asks
    for it, and joined again. A block of ``size`` runs first-ranked-first where bit ``size``
    of ``i`` is clear, which depends on ``i // 2j`` only."""
    fn = lw.fn
    n = shape[axis]
    pre, post = shape[:axis], shape[axis + 1:]
    values, index = x, _positions(lw, shape, axis)
    size = 2
    while size <= n:
        j = size // 2
        while j >= 1:
            view = pre + (n // (2 * j), 2, j) + post
            half = pre + (n // (2 * j), 1, j) + post
            zero = [lw.i32(0)] * len(view)
            one = list(zero)
            one[axis + 1] = lw.i32(1)
            v, i = fn.reshape(values, view), fn.reshape(index, view)
            v0, v1 = fn.extract(v, zero, half), fn.extract(v, one, half)
            i0, i1 = fn.extract(i, zero, half), fn.extract(i, one, half)
            blocks = np.arange(n // (2 * j)) * (2 * j)
            forward = ((blocks & size) == 0).reshape(
                (1,) * len(pre) + (n // (2 * j), 1, 1) + (1,) * len(post))
            direction = fn.broadcast(lw.constant(forward, dt.bool_, forward.shape), half)
            in_order = _ranks_first(lw, "max", dtype, v0, v1, i0, i1)
            swap = fn.xori(in_order, direction)
            values = fn.reshape(fn.cat(fn.select(swap, v1, v0), fn.select(swap, v0, v1),
                                       axis + 1), shape)
            index = fn.reshape(fn.cat(fn.select(swap, i1, i0), fn.select(swap, i0, i1),
                                      axis + 1), shape)
            j //= 2
        size *= 2
    if k == n:
        return values, index
    window = shape[:axis] + (k,) + shape[axis + 1:]
    origin = [lw.i32(0)] * len(shape)
    return fn.extract(values, origin, window), fn.extract(index, origin, window)


@lowers("topk")
def lower_topk(lw: LoweringContext, op: Operation) -> None:
    """``k`` reduction rounds, or for a ``k`` so large that they would cost more
    (``topk_sorts``) a bitonic sort of the whole axis; both give the same answer."""
    (x,) = lw.operands(op)
    k, axis = op.attrs["k"], op.attrs["axis"]
    source = op.operands[0].type
    shape = tuple(source.shape)
    method = _topk_by_sorting if topk_sorts(shape[axis], k) else _topk_by_rounds
    values, indices = method(lw, source.dtype, x, shape, axis, k)
    lw.set(op.results[0], values)
    lw.set(op.results[1], indices)


# ---------------------------------------------------------------------------------------------
# matrix multiply-accumulate


@lowers("mma")
def lower_mma(lw: LoweringContext, op: Operation) -> None:
    a, b, acc = lw.operands(op)
    dtype: DType = op.operands[0].type.dtype
    if dtype.is_float:  # (fast accumulation: f8 only, checked where the op was built)
        result = lw.fn.mmaf(a, b, acc,
                            fast_accumulation=bool(op.attrs.get("fast_accumulation", False)))
    else:
        sign = _sign(dtype)
        result = lw.fn.mmai(a, b, acc, lhs_signedness=sign, rhs_signedness=sign)
    lw.set_result(op, result)
