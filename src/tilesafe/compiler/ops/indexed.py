"""Data-dependent reads of shared tensors: ``tc.gather`` (safety rule 10).

``tc.gather(x, i0, i1, ...)`` reads the shared tensor ``x`` at element indices computed at run
time, with numpy's advanced-indexing semantics: the index tiles (one per axis of ``x``) are
broadcast together and ``result[k...] = x[i0[k...], i1[k...], ...]``. A gather only reads a
shared input, so it cannot race. Every index is bounds-checked on every device: an index
outside ``x`` is an ``IndexOutOfRangeError`` naming the kernel, the line and the offending
index, unless the gather asks for ``padding`` (then those lanes read the padding value), or the
kernel is ``unchecked_accesses``. The GPU reads padding at such a lane either way, so no memory
outside ``x`` is touched.

The numpy semantics read their operands as the interpreter's bindings (``compiler.bindings``).
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError, DTypeError, IndexOutOfRangeError, SafetyError, ShapeError
from ..bounds import out_of_range_message
from ..ir import Value
from ..registry import builtin, op
from ..types import TensorViewType, TileType, broadcast_shapes
from .memory import fill_value, output_read

__all__ = ["offending_indices"]


def _gather_rule(types, attrs):
    x, *indices = types
    problem = output_read(x, reader="gather")
    if problem:
        raise SafetyError(problem[0], hint=problem[1])
    if not isinstance(x, TensorViewType):
        raise CompileError(f"gather reads a tensor parameter, got {x}")
    if len(indices) != x.rank:
        raise ShapeError(f"gather: {len(indices)} index tile(s) for a rank-{x.rank} tensor",
                         hint=f"give one index per axis ({x.rank})")
    shape: tuple = ()
    for t in indices:
        if not (isinstance(t, TileType) and t.dtype.is_int):
            raise DTypeError(f"gather indices must be integer tiles, got {t}")
        if t.rank != indices[0].rank:
            raise ShapeError(f"gather: index tiles have different ranks ({indices[0]} and {t})")
        new = broadcast_shapes(shape, t.shape)
        if new is None:
            raise ShapeError(f"gather: index shapes do not broadcast together ({shape} and "
                             f"{t.shape})")
        shape = new
    return (TileType(x.dtype, shape),)


def offending_indices(indices, extents, live=None):
    """Per axis: the largest index that is outside ``[0, extent)`` (among the ``live`` lanes,
    if given), or None if none is (what both devices report of a failed gather or atomic
    update)."""
    out = []
    for i, n in zip(indices, extents):
        i = np.asarray(i, dtype=np.int64)
        bad = (i < 0) | (i >= n)
        if live is not None:
            bad = bad & live
        out.append(int(i[bad].max()) if np.any(bad) else None)
    return out


def _gather_eval(ctx, attrs, x, *indices):
    data = x.data
    wide = np.broadcast_arrays(*(np.asarray(i).astype(np.int64) for i in indices)) \
        if indices else []
    inside = np.ones(wide[0].shape if wide else (), dtype=bool)
    for i, n in zip(wide, data.shape):
        inside &= (i >= 0) & (i < n)
    fill = attrs.get("padding_value")
    if fill is None and not np.all(inside):
        ctx.fail(out_of_range_message("gather", offending_indices(wide, data.shape),
                                      data.shape), IndexOutOfRangeError)
    safe = tuple(np.where(inside, i, 0) for i in wide)
    values = x.dtype.to_compute(data[safe] if safe else data[()])
    if fill is not None:
        values = np.where(inside, values, np.asarray(fill).astype(values.dtype))
    return np.array(values, copy=True)


op("gather", "Read a shared tensor at element indices (one integer tile per axis, of one "
   "rank, broadcast together); attrs: padding_value (out-of-range lanes read it instead of "
   "failing).",
   _gather_rule, _gather_eval, effect="read")


def _build_gather(b, x, *indices, padding=None):
    """gather(x, *indices, padding=None) -> tile

    Read the shared tensor ``x`` at element indices computed at run time, as numpy's advanced
    indexing does: one integer tile (or scalar) per axis of ``x``, broadcast together;
    ``result[k...] = x[indices[0][k...], indices[1][k...], ...]``. An embedding lookup is
    ``tc.gather(table, rows.reshape((n, 1)), tc.arange(d).reshape((1, d)))``.

    Every index must lie inside ``x``: one that does not is an ``IndexOutOfRangeError`` on
    every device (at the access on the interpreter, when the launch's stream is synchronized
    on a GPU), naming the kernel, this line and the index. With ``padding`` (a number the
    tensor's dtype can hold) such lanes read ``padding`` instead. A gather reads a shared
    ``tc.Tensor`` only (outputs are read through their own ``load``), so it never races.
    """
    if len(indices) == 1 and isinstance(indices[0], tuple):
        indices = indices[0]
    problem = output_read(x.type, x.name, "gather") if isinstance(x, Value) else None
    if problem:
        raise b.error(SafetyError, *problem)
    if not (isinstance(x, Value) and isinstance(x.type, TensorViewType)):
        raise b.error(CompileError, "gather(x, *indices): x must be a tc.Tensor parameter",
                      "pass the tensor to read as a tc.Tensor parameter")
    if len(indices) != x.type.rank:
        raise b.error(ShapeError, f"gather: {len(indices)} index tile(s) for the rank-"
                      f"{x.type.rank} tensor '{x.name}'",
                      f"give one index per axis ({x.type.rank}), e.g. gather(x, "
                      f"{', '.join(f'i{a}' for a in range(x.type.rank))})")
    tiles = []
    for axis, i in enumerate(indices):
        v = b.tile(i, f"gather index {axis}")
        if not v.type.dtype.is_int:
            raise b.error(DTypeError, f"gather index {axis} must be an integer tile, got "
                          f"{v.type}", "convert it first: i.astype(tc.i32)")
        tiles.append(v)
    shape: tuple = ()
    for v in tiles:
        new = broadcast_shapes(shape, v.type.shape)
        if new is None:
            raise b.error(ShapeError, f"gather: index shapes "
                          f"{' and '.join(str(v.type.shape) for v in tiles)} cannot be "
                          "broadcast together", "numpy rules apply: align shapes from the "
                          "right; each dimension must be equal or 1")
        shape = new
    if shape:
        b.check_tile_shape(shape)
    attrs = {}
    if padding is not None:
        attrs["padding_value"] = fill_value(b, padding, x.type.dtype, "padding")
    # each index keeps its own extents (reshaped to the result's rank): a GPU checks and
    # scales it before broadcasting, so an (n, 1) row index is checked n times, not n * d
    ranked = [v if v.type.rank == len(shape) else
              b.emit1("reshape", (v,), {"shape": (1,) * (len(shape) - v.type.rank)
                                       + v.type.shape}) for v in tiles]
    return b.emit1("gather", (x, *ranked), attrs)


builtin("gather", _build_gather.__doc__, _build_gather)
