"""Tile construction and shape ops: constants, iota/arange, broadcast, reshape, permute,
static slicing of tiles (``t[:, a:b]``) and ``cat``.

Shapes here are compile-time constants; every produced tile obeys Tile IR's shape rules (each
dimension a power of two, at most 2**24 elements), checked by the builder.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import CompileError, DTypeError, ShapeError, TileShapeError
from ..builder import default_dtype, describe
from ..ir import Value
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


# ---------------------------------------------------------------------------------------------
# static slicing (t[a:b], t[:, a:b], t[3], t[:, None]) and cat
#
# Tile IR's ``extract`` takes the sub-tile of a given shape at sub-tile coordinates: a window
# whose extent is a power of two (every tile's is) and whose start is a multiple of that extent
# costs one ``extract``. Any other start ``s`` is cut into aligned pieces of ``g``, the largest
# power of two dividing ``s``, which are extracted and joined again (``length / g`` extracts);
# a window that would take more than MAX_SLICE_PIECES pieces is a compile error.

MAX_SLICE_PIECES = 64


def slice_piece(start: int, length: int) -> int:
    """The extent of the aligned pieces a window ``[start, start + length)`` is cut into."""
    return length if start % length == 0 else start & -start


def _slice_rule(types, attrs):
    (t,) = tiles("slice", types, 1)
    start, shape = tuple(attrs["start"]), tuple(attrs["shape"])
    if len(start) != t.rank or len(shape) != t.rank:
        raise ShapeError(f"slice: {len(start)} starts and {len(shape)} extents for a rank-"
                         f"{t.rank} tile")
    for axis, (s, n, whole) in enumerate(zip(start, shape, t.shape)):
        if n < 1 or s < 0 or s + n > whole:
            raise ShapeError(f"slice: the window [{s}, {s + n}) of axis {axis} does not fit an "
                             f"extent-{whole} axis")
    return (t.with_shape(shape),)


op("slice", "The static window x[start[i] : start[i] + shape[i], ...] (attrs: start, shape).",
   _slice_rule,
   lambda ctx, attrs, x: x[tuple(slice(s, s + n) for s, n in zip(attrs["start"],
                                                                  attrs["shape"]))])


def _slice_window(b, item: slice, extent: int, axis: int) -> tuple[int, int]:
    """The (start, length) of one axis's slice, numpy's clamping, checked for Tile IR."""
    for part, what in ((item.start, "start"), (item.stop, "stop"), (item.step, "step")):
        if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
            raise b.error(CompileError, f"tile slice {what} must be a compile-time integer, got "
                          f"{describe(part)}", "use integer literals or tc.Const[int] "
                          "parameters")
    start, stop, step = item.indices(extent)
    if step != 1:
        raise b.error(ShapeError, f"tile slices take step 1 only, got step {item.step} on "
                      f"axis {axis}", "reverse or stride with reshape/permute, or load the "
                      "elements you need from the tensor")
    length = stop - start
    if length <= 0:
        raise b.error(ShapeError, f"the slice {start}:{stop} of axis {axis} (extent {extent}) "
                      "is empty", "tiles cannot be empty: give a window of at least one element")
    if length & (length - 1):
        raise b.error(TileShapeError, f"the slice {start}:{stop} of axis {axis} has {length} "
                      "elements, not a power of two",
                      "tile extents are powers of two: slice 1, 2, 4, 8, ... elements")
    pieces = length // slice_piece(start, length)
    if pieces > MAX_SLICE_PIECES:
        aligned = start - start % length
        raise b.error(ShapeError, f"the slice {start}:{stop} of axis {axis} would be cut into "
                      f"{pieces} pieces (at most {MAX_SLICE_PIECES}): its start is not a "
                      f"multiple of its length {length}",
                      f"start it at a multiple of {length} (e.g. {aligned}:{aligned + length}, "
                      f"one step), or at least of {length // MAX_SLICE_PIECES}")
    return start, length


def _index_items(b, index, rank: int) -> list:
    items = list(index) if isinstance(index, tuple) else [index]
    for item in items:
        if isinstance(item, Value):
            raise b.error(CompileError, "a tile can only be indexed with compile-time integers "
                          f"and slices, got a runtime {item.type}",
                          "to pick an element by a runtime index i, mask and reduce: "
                          "tc.reduce_sum(tc.where(tc.arange(n) == i, t, 0), 0)")
        if not (item is None or item is Ellipsis or isinstance(item, slice)
                or (isinstance(item, int) and not isinstance(item, bool))):
            raise b.error(CompileError, f"a tile cannot be indexed with {describe(item)}",
                          "use integers, slices a:b, None (a new axis) and ...")
    if sum(item is Ellipsis for item in items) > 1:
        raise b.error(CompileError, "a tile index can hold at most one '...'",
                      "'...' stands for every axis not indexed otherwise: write it once")
    used = sum(item is not None and item is not Ellipsis for item in items)
    if used > rank:
        raise b.error(ShapeError, f"too many indices for a rank-{rank} tile: {used}",
                      f"index at most {rank} axes")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (rank - used)
    else:
        items += [slice(None)] * (rank - used)
    return items


def _build_getitem(b, x, index):
    """t[index] -> tile

    A static sub-tile, with numpy's indexing rules for compile-time integers, slices ``a:b``
    (step 1), ``None`` (a new size-1 axis) and ``...``: ``t[:, 8:16]``, ``t[2]`` (the axis is
    dropped), ``t[..., None]``. Bounds are clamped like numpy's. Each sliced extent must be a
    power of two. A window that starts at a multiple of its extent (``t[:, 4:8]``) is one
    step on the GPU; any other start (``t[:, 2:6]``) is cut into aligned pieces of the largest
    power of two dividing the start, joined again: at most 64 pieces, so ``t[:, 1:129]``
    (128 pieces of one element) is a compile error.
    """
    v = b.tile(x, "indexed value")
    if v.type.is_scalar:
        raise b.error(ShapeError, "a scalar cannot be indexed", "index tiles with at least "
                      "one axis")
    items = _index_items(b, index, v.type.rank)
    start, window, result = [], [], []
    axis = 0
    for item in items:
        if item is None:
            result.append(1)
            continue
        extent = v.type.shape[axis]
        if isinstance(item, slice):
            s, n = _slice_window(b, item, extent, axis)
            result.append(n)
        else:
            if not -extent <= item < extent:
                raise b.error(ShapeError, f"index {item} is out of range for axis {axis} of "
                              f"extent {extent}", f"use an index in [{-extent}, {extent - 1}]")
            s, n = item % extent, 1
        start.append(s)
        window.append(n)
        axis += 1
    if tuple(window) != v.type.shape:
        v = b.emit1("slice", (v,), {"start": tuple(start), "shape": tuple(window)})
    if tuple(result) != v.type.shape:
        v = b.emit1("reshape", (v,), {"shape": tuple(result)})
    return v


builtin("tile_getitem", _build_getitem.__doc__, _build_getitem,
        methods=(("tile", "__getitem__"),), public=False)


def _cat_rule(types, attrs):
    a, c = tiles("cat", types, 2)
    axis = attrs["axis"]
    if a.dtype is not c.dtype:
        raise DTypeError(f"cat: element types differ ({a.dtype.short} and {c.dtype.short})")
    if a.rank != c.rank or not 0 <= axis < a.rank or any(
            m != n for d, (m, n) in enumerate(zip(a.shape, c.shape)) if d != axis):
        raise ShapeError(f"cat: cannot join {a.shape} and {c.shape} along axis {axis}")
    shape = list(a.shape)
    shape[axis] += c.shape[axis]
    return (a.with_shape(tuple(shape)),)


op("cat", "Two tiles joined along one axis (attrs: axis).", _cat_rule,
   lambda ctx, attrs, a, c: np.concatenate((a, c), axis=attrs["axis"]))


def _build_cat(b, tiles, axis=0):
    """cat(tiles, axis=0) -> tile   (like numpy.concatenate / torch.cat)

    Join a tuple or list of tiles along the compile-time ``axis``. The tiles have one dtype
    and equal extents on every other axis (no broadcasting). The result's extent must be a
    power of two, and Tile IR joins two tiles at a time, each join's result a power of two as
    well: equal pieces (two halves, four quarters) always work; so do unequal ones that pair
    up with equal neighbours (8, 4, 4), but not (2, 4, 2).
    """
    if not isinstance(tiles, tuple) or not tiles:
        raise b.error(CompileError, f"cat takes a tuple or list of tiles, got {describe(tiles)}",
                      "e.g. tc.cat((a, b), axis=1)")
    parts = []
    for i, t in enumerate(tiles):
        if not (isinstance(t, Value) and isinstance(t.type, TileType)):
            raise b.error(CompileError, f"cat: item {i} is a {describe(t)}, not a tile",
                          "make a tile first, e.g. tc.full(shape, value)")
        parts.append(t)
    first = parts[0].type
    if first.is_scalar:
        raise b.error(ShapeError, "cat: scalars have no axis to join along",
                      "reshape them to (1,) tiles first")
    axis = b.axis_arg(axis, first.rank, "cat")
    for i, p in enumerate(parts[1:], 1):
        t = p.type
        if t.dtype is not first.dtype:
            raise b.error(DTypeError, f"cat: item {i} is {t.dtype.short}, item 0 is "
                          f"{first.dtype.short}", f"convert first, e.g. .astype(tc."
                          f"{first.dtype.short})")
        if t.rank != first.rank or any(m != n for d, (m, n) in
                                       enumerate(zip(first.shape, t.shape)) if d != axis):
            raise b.error(ShapeError, f"cat: item {i} has shape {t.shape}, item 0 has "
                          f"{first.shape}; along axis {axis} only the extents may differ",
                          "reshape or broadcast the pieces to matching shapes first")
    extents = tuple(p.type.shape[axis] for p in parts)
    total = sum(extents)
    if total & (total - 1):
        raise b.error(TileShapeError, f"cat: the result's extent along axis {axis} would be "
                      f"{total} ({' + '.join(map(str, extents))}), not a power of two",
                      "tile extents are powers of two: join pieces that add up to one, e.g. "
                      "two halves")
    stack: list[Value] = []
    for p in parts:
        stack.append(p)
        while len(stack) > 1 and stack[-1].type.shape[axis] == stack[-2].type.shape[axis]:
            right = stack.pop()
            stack.append(b.emit1("cat", (stack.pop(), right), {"axis": axis}))
    if len(stack) > 1:
        raise b.error(ShapeError, f"cat: pieces of extents {extents} along axis {axis} cannot "
                      "be joined two at a time with a power-of-two extent after each join",
                      "order the pieces so that neighbours of equal extent pair up, or split "
                      "a larger piece with slices (t[:, 0:2], t[:, 2:4])")
    return stack[0]


builtin("cat", _build_cat.__doc__, _build_cat)
