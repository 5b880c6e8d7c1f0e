"""Reductions and scans along one axis: reduce_sum/max/min/prod, cumsum/cumprod.

Integer reductions wrap exactly. Float sums and products are computed here in float64 and
rounded once to the tile's dtype; a GPU reduces in a tree in the tile's dtype, so float results
agree within a tolerance that grows with the reduced extent, not bit for bit. ``reduce_max`` and
``reduce_min`` propagate NaN; on bool tiles they are "any" and "all".
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError, DTypeError
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
