"""Reductions and scans along one axis: reduce_sum/max/min/prod, cumsum/cumprod, and the
index-valued ones: argmax/argmin and topk.

Integer reductions wrap exactly. Float sums and products are computed here in float64 and
rounded once to the tile's dtype; a GPU reduces in a tree in the tile's dtype, so float results
agree within a tolerance that grows with the reduced extent, not bit for bit. ``reduce_max`` and
``reduce_min`` propagate NaN; on bool tiles they are "any" and "all".
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import CompileError, DTypeError, ShapeError
from ..registry import builtin, op
from ..types import TileType
from ._rules import arithmetic, normalize_axis, tiles

_REDUCE_FNS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
_SCAN_FNS = {"sum": np.cumsum, "prod": np.cumprod}


def _check_dtype(name: str, kind: str, t: TileType) -> None:
    arithmetic(name, t)
    if t.dtype.is_bool and kind in ("sum", "prod"):
        raise DTypeError(f"{name} does not accept bool tiles",
                         hint="convert first, e.g. x.astype(tc.i32)")


def _reduce_rule(types, attrs):
    name = f"reduce_{attrs['kind']}"
    (t,) = tiles(name, types, 1)
    _check_dtype(name, attrs["kind"], t)
    axis = normalize_axis(name, attrs["axis"], t.rank)
    return (t.with_shape(t.shape[:axis] + t.shape[axis + 1:]),)


def _accumulate(fn, x: np.ndarray, axis: int, kind: str) -> np.ndarray:
    if x.dtype.kind == "f" and kind in ("sum", "prod"):
        return fn(x.astype(np.float64), axis=axis)
    if x.dtype.kind in "iu" and kind in ("sum", "prod"):
        return fn(x, axis=axis, dtype=x.dtype)
    return fn(x, axis=axis)


op("reduce", "Reduce one axis with sum, prod, max or min (attrs: kind, axis).", _reduce_rule,
   lambda ctx, attrs, x: _accumulate(_REDUCE_FNS[attrs["kind"]], x, attrs["axis"],
                                     attrs["kind"]))


def _scan_rule(types, attrs):
    name = "cumsum" if attrs["kind"] == "sum" else "cumprod"
    (t,) = tiles(name, types, 1)
    _check_dtype(name, attrs["kind"], t)
    normalize_axis(name, attrs["axis"], t.rank)
    return (t,)


def _scan_eval(ctx, attrs, x):
    fn = _SCAN_FNS[attrs["kind"]]
    if attrs.get("reverse"):
        return np.flip(_accumulate(fn, np.flip(x, attrs["axis"]), attrs["axis"], attrs["kind"]),
                       attrs["axis"])
    return _accumulate(fn, x, attrs["axis"], attrs["kind"])


op("scan", "Inclusive prefix sum or product along one axis (attrs: kind, axis, reverse).",
   _scan_rule, _scan_eval)


def _declare_reduce(kind: str, what: str) -> None:
    name = f"reduce_{kind}"

    def build(b, x, axis=None, keepdims=False):
        v = b.tile(x, f"{name} operand")
        if axis is None:
            if v.type.rank != 1:
                v = b.emit1("reshape", (v,), {"shape": (v.type.size,)})
            out = b.emit1("reduce", (v,), {"kind": kind, "axis": 0})
            if keepdims:
                out = b.emit1("reshape", (out,), {"shape": (1,) * b.tile(x).type.rank})
            return out
        axis = b.axis_arg(axis, v.type.rank, name)
        out = b.emit1("reduce", (v,), {"kind": kind, "axis": axis})
        if keepdims:
            shape = v.type.shape[:axis] + (1,) + v.type.shape[axis + 1:]
            out = b.emit1("reshape", (out,), {"shape": shape})
        return out

    doc = (f"{name}(x, axis=None, keepdims=False) -> tile   (also x.{kind}(...))\n\n"
           f"{what} of ``x`` along the compile-time ``axis`` (all axes when None). The axis is "
           f"removed unless ``keepdims`` is True, which keeps it with size 1 so the result "
           f"broadcasts back against ``x``.")
    builtin(name, doc, build, methods=(("tile", kind),))


_declare_reduce("sum", "Sum")
_declare_reduce("prod", "Product")
_declare_reduce("max", "Maximum (NaN propagates; 'any' for bool)")
_declare_reduce("min", "Minimum (NaN propagates; 'all' for bool)")


def _declare_scan(kind: str, name: str, what: str) -> None:
    def build(b, x, axis=None, reverse=False):
        v = b.tile(x, f"{name} operand")
        if axis is None:
            if v.type.rank != 1:
                raise b.error(CompileError, f"{name}: give the axis for a rank-"
                              f"{v.type.rank} tile", f"e.g. {name}(x, axis=1)")
            axis = 0
        axis = b.axis_arg(axis, v.type.rank, name)
        return b.emit1("scan", (v,), {"kind": kind, "axis": axis, "reverse": bool(reverse)})

    builtin(name, f"{name}(x, axis=None, reverse=False) -> tile\n\nInclusive {what} along "
            f"``axis`` (required unless ``x`` is 1-D); ``reverse`` scans from the end.", build)


_declare_scan("sum", "cumsum", "prefix sum")
_declare_scan("prod", "cumprod", "prefix product")


# ---------------------------------------------------------------------------------------------
# argmax / argmin / topk
#
# Indices are i32 (numpy's are int64): a tile has at most 2**24 elements, so every index fits.
# The order every backend must reproduce, for argmax and topk: NaN is larger than every number
# (numpy's argmax and argmin both return the first NaN; torch.topk ranks NaN first), equal
# values rank by lower index first. argmin is the mirror image for numbers, NaN still first.


def _arg_operand(name: str, types) -> TileType:
    (t,) = tiles(name, types, 1)
    if t.dtype.is_bool:
        raise DTypeError(f"{name} does not accept bool tiles",
                         hint="convert first, e.g. x.astype(tc.i32)")
    if t.rank == 0:
        raise ShapeError(f"{name} needs a tile with at least one axis, got a scalar")
    return t


def _argreduce_rule(types, attrs):
    name = f"arg{attrs['kind']}"
    t = _arg_operand(name, types)
    axis = normalize_axis(name, attrs["axis"], t.rank)
    return (TileType(dt.int32, t.shape[:axis] + t.shape[axis + 1:]),)


def _argreduce_eval(ctx, attrs, x):
    fn = np.argmax if attrs["kind"] == "max" else np.argmin
    return fn(x, axis=attrs["axis"])


op("argreduce", "The index (i32) of the largest (kind 'max') or smallest ('min') element along "
   "one axis; the first on ties, the first NaN if any (attrs: kind, axis).",
   _argreduce_rule, _argreduce_eval)


def descending_order(x: np.ndarray, axis: int) -> np.ndarray:
    """The indices that sort ``x`` along ``axis`` largest first: NaN before every number, equal
    values by lower index first (a stable sort; -0.0 and 0.0 are equal)."""
    if x.dtype.kind == "f":
        wide = x.astype(np.float64)
        nan = np.isnan(wide)
        # lexsort sorts by its last key first: NaN (False in ~nan) first, then by -value.
        return np.lexsort((np.where(nan, 0.0, -wide), ~nan), axis=axis)
    # ~v reverses the order of signed and unsigned integers alike, without overflow.
    return np.argsort(~x, axis=axis, kind="stable")


def _topk_rule(types, attrs):
    t = _arg_operand("topk", types)
    axis = normalize_axis("topk", attrs["axis"], t.rank)
    k = attrs["k"]
    if not 1 <= k <= t.shape[axis]:
        raise ShapeError(f"topk: k={k} is out of range for axis {axis} of extent "
                         f"{t.shape[axis]}", hint=f"use a k from 1 to {t.shape[axis]}")
    shape = t.shape[:axis] + (k,) + t.shape[axis + 1:]
    return (t.with_shape(shape), TileType(dt.int32, shape))


def _topk_eval(ctx, attrs, x):
    axis, k = attrs["axis"], attrs["k"]
    order = np.take(descending_order(x, axis), np.arange(k), axis=axis)
    return np.take_along_axis(x, order, axis=axis), order


op("topk", "The k largest elements along one axis, largest first, and their i32 indices; NaN "
   "ranks above every number, equal values by lower index first (attrs: k, axis).",
   _topk_rule, _topk_eval)


def _arg_tile(b, x, name):
    """``x`` as a tile argmax/argmin/topk can rank (bool becomes i8: False < True)."""
    v = b.tile(x, f"{name} operand")
    if v.type.is_scalar:
        raise b.error(ShapeError, f"{name} needs a tile with at least one axis, got a scalar",
                      "a scalar is its own extreme: its index is 0")
    return v


def _declare_arg(kind: str) -> None:
    name = f"arg{kind}"

    def build(b, x, axis=None, keepdims=False):
        v = _arg_tile(b, x, name)
        if v.type.dtype.is_bool:
            v = b.emit1("convert", (v,), {"dtype": dt.int8})
        rank = v.type.rank
        if axis is None:
            if rank != 1:
                v = b.emit1("reshape", (v,), {"shape": (v.type.size,)})
            out = b.emit1("argreduce", (v,), {"kind": kind, "axis": 0})
            if keepdims:
                out = b.emit1("reshape", (out,), {"shape": (1,) * rank})
            return out
        axis = b.axis_arg(axis, rank, name)
        out = b.emit1("argreduce", (v,), {"kind": kind, "axis": axis})
        if keepdims:
            shape = v.type.shape[:axis] + (1,) + v.type.shape[axis + 1:]
            out = b.emit1("reshape", (out,), {"shape": shape})
        return out

    extreme = "largest" if kind == "max" else "smallest"
    doc = (f"{name}(x, axis=None, keepdims=False) -> i32 tile   (also x.{name}(...))\n\n"
           f"The index of the {extreme} element of ``x`` along the compile-time ``axis``, like "
           f"``numpy.{name}``: the first one on ties, and the first NaN if the slice holds any "
           f"NaN. ``axis=None`` ranks the flattened tile (row-major) and gives a scalar. The "
           f"axis is removed unless ``keepdims`` is True. Indices are ``i32`` (numpy gives "
           f"int64; a tile's indices always fit). Bool tiles rank False below True.")
    builtin(name, doc, build, methods=(("tile", name),))


_declare_arg("max")
_declare_arg("min")


def _next_pow2(k: int, limit: int) -> int:
    p = 1
    while p < k:
        p *= 2
    return min(p, limit)


def _build_topk(b, x, k, axis=-1):
    """topk(x, k, axis=-1) -> (values, indices)   (also x.topk(k, axis))

    The ``k`` largest elements of ``x`` along the compile-time ``axis``, sorted largest first,
    and their positions along that axis as an ``i32`` tile; both have ``x``'s shape with that
    axis's extent replaced by ``k``. ``k`` is a compile-time power of two no larger than the
    axis's extent (tile extents are powers of two). Equal values come out lower index first
    (the order of a stable sort of ``-x``); NaN counts as larger than every number, as in
    ``torch.topk``, so NaNs come first. Int and float tiles; convert bool tiles first.

    On the GPU, ``k`` takes ``k`` rounds, each a reduction along the axis, so compile and
    run time grow with ``k``: it suits the small ``k`` of sampling and routing. A ``k`` above
    eight times the stage count of a bitonic sort of the axis (``s(s+1)/2`` for an extent of
    ``2**s``: so ``k >= 512`` of 512 or 1024 elements) sorts the axis with a bitonic network
    instead and keeps the first ``k``. Both give exactly this order.
    """
    v = _arg_tile(b, x, "topk")
    if v.type.dtype.is_bool:
        raise b.error(DTypeError, "topk does not accept bool tiles",
                      "convert first, e.g. x.astype(tc.i32)")
    axis = b.axis_arg(axis, v.type.rank, "topk")
    k = b.int_arg(k, "topk k")
    extent = v.type.shape[axis]
    if k < 1 or k > extent or k & (k - 1):
        raise b.error(ShapeError, f"topk: k={k} must be a power of two from 1 to the extent "
                      f"{extent} of axis {axis}",
                      f"tile extents are powers of two: ask for k={_next_pow2(k, extent)} "
                      f"and ignore the values you do not need" if 1 <= k < extent
                      else f"use a power of two k <= {extent}")
    return b.emit("topk", (v,), {"k": k, "axis": axis})


builtin("topk", _build_topk.__doc__, _build_topk, methods=(("tile", "topk"),))
