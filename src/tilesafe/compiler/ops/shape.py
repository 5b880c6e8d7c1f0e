"""Tile construction and shape ops: constants, iota/arange, broadcast, reshape, permute.

Shapes here are compile-time constants; every produced tile obeys Tile IR's shape rules (each
dimension a power of two, at most 2**24 elements), checked by the builder.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ..builder import default_dtype
from ..registry import builtin, op
from ..types import TileType
from ._rules import tiles

# ---------------------------------------------------------------------------------------------
# constants


def _constant_rule(types, attrs):
    tiles("constant", types, 0)
    return (TileType(attrs["dtype"], tuple(attrs["shape"])),)


def _constant_eval(ctx, attrs):
    dtype = attrs["dtype"]
    value = dt.constant_source(attrs["value"], dtype)  # an exact integer is rounded once
    return dtype.round(np.full(attrs["shape"], value,
                               dtype=np.float64 if dtype.is_float else dtype.compute))


op("constant", "A tile filled with one compile-time value.", _constant_rule, _constant_eval)


def _fill(b, shape, value, dtype, what):
    shape = b.shape_arg(shape, what)
    if isinstance(value, (int, float)):
        dtype = b.dtype_arg(dtype, what) if dtype is not None else default_dtype(value)
        return b.constant(value, dtype, shape)
    # A runtime scalar value: broadcast it (convert first when a dtype is given).
    v = b.tile(value, f"{what} value")
    if not v.type.is_scalar:
        raise b.error(ShapeError, f"{what}: the fill value must be a scalar, got {v.type}")
    if dtype is not None:
        target = b.dtype_arg(dtype, what)
        if target is not v.type.dtype:
            v = b.emit1("convert", (v,), {"dtype": target})
    return b.broadcast_to(v, shape)


def _build_full(b, shape, value, dtype=None):
    """full(shape, value, dtype=None) -> tile

    A tile of ``shape`` (compile-time ints, powers of two) filled with ``value``: a Python
    number (dtype defaults to i32 for ints, f32 for floats, bool for bools) or a runtime scalar.
    """
    return _fill(b, shape, value, dtype, "full")


def _build_constant(b, value, shape=(), dtype=None):
    """constant(value, shape=(), dtype=None) -> tile

    Like ``full(shape, value, dtype)`` with the value first (cuTile's argument order).
    """
    return _fill(b, shape, value, dtype, "constant")


def _build_zeros(b, shape, dtype=dt.float32):
    """zeros(shape, dtype=tc.f32) -> tile of zeros."""
    return _fill(b, shape, False if b.dtype_arg(dtype, "zeros").is_bool else 0, dtype, "zeros")


def _build_ones(b, shape, dtype=dt.float32):
    """ones(shape, dtype=tc.f32) -> tile of ones."""
    return _fill(b, shape, True if b.dtype_arg(dtype, "ones").is_bool else 1, dtype, "ones")


builtin("full", _build_full.__doc__, _build_full)
builtin("constant", _build_constant.__doc__, _build_constant)
builtin("zeros", _build_zeros.__doc__, _build_zeros)
builtin("ones", _build_ones.__doc__, _build_ones)

# ---------------------------------------------------------------------------------------------
# iota


def _iota_rule(types, attrs):
    tiles("iota", types, 0)
    if not attrs["dtype"].is_int:
        raise ShapeError("iota produces integer tiles")
    return (TileType(attrs["dtype"], (attrs["n"],)),)


op("iota", "The 1-D integer tile [0, 1, ..., n-1].", _iota_rule,
   lambda ctx, attrs: np.arange(attrs["n"], dtype=attrs["dtype"].compute))


def _build_arange(b, n, dtype=dt.int32):
    """arange(n, dtype=tc.i32) -> tile   (alias: iota)

    The 1-D tile ``[0, 1, ..., n-1]``; ``n`` is a compile-time power of two. A float dtype
    converts the integers with the dtype's rounding (exact up to 2**24 in f32, 2**11 in f16,
    2**8 in bf16).
    """
    size = b.shape_arg(n, "arange size")
    if len(size) != 1:
        raise b.error(ShapeError, f"arange makes a 1-D tile: its size is one integer, got {n}",
                      "e.g. tc.arange(16); reshape or broadcast the result for more axes")
    (n,) = size
    dtype = b.dtype_arg(dtype, "arange")
    b.check_tile_shape((n,))
    if dtype.is_int:
        return b.emit1("iota", (), {"n": n, "dtype": dtype})
    v = b.emit1("iota", (), {"n": n, "dtype": dt.int32})
    return b.emit1("convert", (v,), {"dtype": dtype})


builtin("arange", _build_arange.__doc__, _build_arange)
builtin("iota", _build_arange.__doc__, _build_arange)

# ---------------------------------------------------------------------------------------------
# broadcast / reshape / permute


def _broadcast_rule(types, attrs):
    (t,) = tiles("broadcast", types, 1)
    target = tuple(attrs["shape"])
    if len(target) != t.rank or any(s != d and s != 1 for s, d in zip(t.shape, target)):
        raise ShapeError(f"broadcast: cannot expand {t.shape} to {target}")
    return (t.with_shape(target),)


op("broadcast", "Expand size-1 dimensions to a target shape of the same rank.",
   _broadcast_rule, lambda ctx, attrs, x: np.broadcast_to(x, attrs["shape"]))


def _build_broadcast(b, x, shape):
    """broadcast(x, shape) -> tile   (also x.broadcast(shape))

    Broadcast by numpy rules: missing leading dimensions are added, size-1 dimensions expand.
    """
    return b.broadcast_to(b.tile(x, "broadcast operand"), b.shape_arg(shape, "broadcast"))


builtin("broadcast", _build_broadcast.__doc__, _build_broadcast,
        methods=(("tile", "broadcast"),))


def _reshape_rule(types, attrs):
    (t,) = tiles("reshape", types, 1)
    target = tuple(attrs["shape"])
    size = 1
    for d in target:
        size *= d
    if size != t.size:
        raise ShapeError(f"reshape: cannot reshape {t.shape} ({t.size} elements) to {target} "
                         f"({size} elements)", hint="the element count must stay the same")
    return (t.with_shape(target),)


op("reshape", "Same elements in a new shape (row-major order).", _reshape_rule,
   lambda ctx, attrs, x: np.reshape(x, attrs["shape"]))


def _build_reshape(b, x, shape):
    """reshape(x, shape) -> tile   (also x.reshape(shape))

    The same elements, row-major, in a new static shape with the same element count.
    """
    v = b.tile(x, "reshape operand")
    shape = b.shape_arg(shape, "reshape")
    return v if v.type.shape == shape else b.emit1("reshape", (v,), {"shape": shape})


builtin("reshape", _build_reshape.__doc__, _build_reshape, methods=(("tile", "reshape"),))


def _permute_rule(types, attrs):
    (t,) = tiles("permute", types, 1)
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(t.rank)):
        raise ShapeError(f"permute: {perm} is not a permutation of the {t.rank} axes of {t.shape}",
                         hint=f"list each axis 0..{t.rank - 1} exactly once")
    return (t.with_shape(tuple(t.shape[p] for p in perm)),)


op("permute", "Reorder the dimensions: result.shape[i] = x.shape[perm[i]].", _permute_rule,
   lambda ctx, attrs, x: np.transpose(x, attrs["perm"]))


def _build_permute(b, x, perm):
    """permute(x, perm) -> tile   (also x.permute(perm))

    Reorder dimensions like ``numpy.transpose(x, perm)``.
    """
    v = b.tile(x, "permute operand")
    perm = b.shape_arg(perm, "permute")
    if perm == tuple(range(v.type.rank)):
        return v
    return b.emit1("permute", (v,), {"perm": perm})


def _build_transpose(b, x, axes=None):
    """transpose(x, axes=None) -> tile   (also x.transpose(), x.T)

    Reverse the dimensions (a 2-D tile's transpose), or permute them by ``axes``.
    """
    v = b.tile(x, "transpose operand")
    perm = tuple(reversed(range(v.type.rank))) if axes is None else axes
    return _build_permute(b, v, perm)


builtin("permute", _build_permute.__doc__, _build_permute, methods=(("tile", "permute"),))
builtin("transpose", _build_transpose.__doc__, _build_transpose,
        methods=(("tile", "transpose"),))


def _build_expand_dims(b, x, axis):
    """expand_dims(x, axis) -> tile

    Insert a size-1 dimension at ``axis`` (like ``numpy.expand_dims``).
    """
    v = b.tile(x, "expand_dims operand")
    axis = b.axis_arg(axis, v.type.rank + 1, "expand_dims")
    shape = v.type.shape[:axis] + (1,) + v.type.shape[axis:]
    return b.emit1("reshape", (v,), {"shape": shape})


builtin("expand_dims", _build_expand_dims.__doc__, _build_expand_dims)
