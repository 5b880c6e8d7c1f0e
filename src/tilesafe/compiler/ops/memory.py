"""Memory ops: tile-block ids, loads from shared tensors and partitions, the owned sub-tensor's
load/store, and the unsafe raw-pointer accesses (loads, stores, compare-and-swap, exchange).

The device-side safety rules live in the shape of these ops:

* rule 1 — ``mut_load``/``mut_store`` take the ``MutTensor`` and nothing else: there is no index,
  the sub-tensor is the one the launch gave this program. An output (``MutTensor`` or
  ``MappedPartitionMut``) is read only through its own ``load``: it cannot be re-partitioned,
  indexed, or be ``load_tile_like``'s source (that would read tiles other programs write);
* rule 2 — a shared ``Tensor`` has loads only; its ``store`` method is a SafetyError;
* a store writes a tile of the destination's exact shape: a smaller tile is a ShapeError,
  only scalars fill (``stored_tile``);
* edge tiles: loads past the edge of a tensor are padded (zero unless the partition says
  otherwise), stores past the edge are masked. A partition index outside the partition's tile
  grid is an error in the interpreter (on a GPU the bounds-checked load returns padding).

The numpy semantics read their operands as the interpreter's bindings
(``compiler.bindings``).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...errors import CompileError, DTypeError, IndexOutOfRangeError, SafetyError, ShapeError
from ...shapes import tile_grid
from ..bindings import PartitionBinding, PointerBinding, TensorBinding
from ..builder import is_py_scalar
from ..ir import Value
from ..registry import builtin, op
from ..types import (AtomicTensorType, MappedPartitionType, PartitionViewType, PointerType,
                     TensorViewType, TileType, broadcast_shapes)

PADDING_VALUES = {"zero": 0.0, "neg_zero": -0.0, "nan": math.nan, "pos_inf": math.inf,
                  "neg_inf": -math.inf}

def _tile_slices(shape, index, tile_shape):
    return tuple(slice(i * t, min(i * t + t, d)) for i, t, d in zip(index, tile_shape, shape))


def _check_index(ctx, what: str, index, grid) -> None:
    if any(i < 0 or i >= g for i, g in zip(index, grid)):
        ctx.fail(f"{what} index {tuple(int(i) for i in index)} is outside the tile grid "
                 f"{tuple(grid)}", IndexOutOfRangeError)


def load_tile(ctx, tensor: TensorBinding, index, tile_shape, padding: str = "zero",
              what: str = "partition", checked: bool = True):
    """The tile at tile coordinates ``index``; out-of-tensor elements are padding. ``checked``:
    an index outside the tile grid is an error (else the whole tile is padding)."""
    if checked:
        _check_index(ctx, what, index, tile_grid(tensor.data.shape, tile_shape))
    part = tensor.dtype.to_compute(tensor.data[_tile_slices(tensor.data.shape, index,
                                                            tile_shape)])
    if part.shape == tuple(tile_shape):
        return np.array(part, copy=True)
    out = np.full(tile_shape, PADDING_VALUES[padding] if tensor.dtype.is_float else 0,
                  dtype=tensor.dtype.compute)
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out


def store_tile(ctx, tensor: TensorBinding, index, tile_shape, values) -> None:
    """Write the in-bounds part of a tile at tile coordinates ``index`` (the rest is masked)."""
    slices = _tile_slices(tensor.data.shape, index, tile_shape)
    inner = tuple(slice(0, s.stop - s.start) for s in slices)
    tensor.data[slices] = tensor.dtype.to_storage(values[inner])


# ---------------------------------------------------------------------------------------------
# tile block ids


def _i32_scalar_rule(count):
    def infer(types, attrs):
        if len(types) != count:
            raise CompileError(f"expected {count} operand(s)")
        return (TileType(dt.int32, ()),)
    return infer


op("tile_block_id", "This tile program's coordinate along grid axis ``axis`` (i32).",
   _i32_scalar_rule(0), lambda ctx, attrs: np.int32(ctx.program_id[attrs["axis"]]))
op("num_tile_blocks", "The grid's extent along axis ``axis`` (i32).",
   _i32_scalar_rule(0), lambda ctx, attrs: np.int32(ctx.grid[attrs["axis"]]))


def _build_block_id(b):
    """get_tile_block_id() -> (x, y, z)

    This tile program's coordinates in the grid, as three i32 scalars. For a partitioned
    output, coordinate ``i`` is the index of the program's sub-tensor along axis ``i``.
    """
    return tuple(b.emit1("tile_block_id", (), {"axis": a}) for a in range(3))


def _build_num_blocks(b):
    """get_num_tile_blocks() -> (x, y, z)

    The grid's extent along each axis as three i32 scalars (1 for unused axes).
    """
    return tuple(b.emit1("num_tile_blocks", (), {"axis": a}) for a in range(3))


builtin("get_tile_block_id", _build_block_id.__doc__, _build_block_id)
builtin("get_num_tile_blocks", _build_num_blocks.__doc__, _build_num_blocks)

# ---------------------------------------------------------------------------------------------
# tensor shape


def _tensor_dim_rule(types, attrs):
    (t,) = types
    if not isinstance(t, (TensorViewType, AtomicTensorType)):
        raise CompileError(f"shape of a {t}")
    return (TileType(dt.int32, ()),)


op("tensor_dim", "The runtime extent of a tensor (or atomic tensor) parameter along ``axis`` "
   "(i32).",
   _tensor_dim_rule, lambda ctx, attrs, x: np.int32(x.data.shape[attrs["axis"]]))


def tensor_shape(b, x: Value) -> tuple:
    """``x.shape``: static dims as Python ints, dynamic dims as i32 scalar values."""
    return tuple(d if d is not None else b.emit1("tensor_dim", (x,), {"axis": i})
                 for i, d in enumerate(x.type.shape))


# ---------------------------------------------------------------------------------------------
# the owned sub-tensor (MutTensor)


def _require_mut(types, what):
    z = types[0]
    if not (isinstance(z, TensorViewType) and z.mutable):
        raise SafetyError(f"{what} needs a tc.MutTensor, got {z}")
    return z


def _mut_load_rule(types, attrs):
    z = _require_mut(types, "load()")
    return (TileType(z.dtype, z.shape),)


def _mut_load_eval(ctx, attrs, z):
    return load_tile(ctx, z, z.own_index(ctx.program_id), z.tile_shape, what="sub-tensor")


op("mut_load", "Load this program's own sub-tensor (padded at the tensor's edge).",
   _mut_load_rule, _mut_load_eval, effect="read")


def _mut_store_rule(types, attrs):
    z = _require_mut(types, "store()")
    tile = types[1]
    if tile != TileType(z.dtype, z.shape):
        raise ShapeError(f"store: tile {tile} does not match the sub-tensor {z}")
    return ()


def _mut_store_eval(ctx, attrs, z, tile):
    store_tile(ctx, z, z.own_index(ctx.program_id), z.tile_shape, tile)


op("mut_store", "Store a tile into this program's own sub-tensor (masked at the edge).",
   _mut_store_rule, _mut_store_eval, effect="write")


def _build_mut_load(b, z, *, latency=None, allow_tma=None):
    """z.load(*, latency=None, allow_tma=None) -> tile

    Load this tile program's own sub-tensor as a tile of the partition's tile shape (elements
    past the tensor's edge read as zero). ``latency``/``allow_tma`` are optimization hints.
    """
    return b.emit1("mut_load", (z,), access_hints(b, latency, allow_tma))


def _build_mut_store(b, z, tile, *index, latency=None, allow_tma=None):
    """z.store(tile, *, latency=None, allow_tma=None)

    Store ``tile`` into this program's own sub-tensor. Its dtype must equal the tensor's and
    its shape the sub-tensor's (leading 1s aside): a smaller tile is a ShapeError, broadcast it
    explicitly (``t.broadcast(z.shape)``). A scalar (a Python number or a runtime scalar) fills
    the sub-tensor, like ``tc.full(z.shape, s)``. Elements past the tensor's edge are masked.
    There is no index: the launch gave this program exactly one sub-tensor (safety rule 1).
    """
    if index:
        raise b.error(SafetyError, "a MutTensor has no indexed store: store(tile) writes this "
                      "program's own sub-tensor", "call z.store(tile) without an index; to let "
                      "one program write several tiles, partition the output and use a mapped "
                      "partition")
    v = stored_tile(b, tile, z.type.dtype, z.type.shape)
    b.emit("mut_store", (z, v), access_hints(b, latency, allow_tma))


def stored_tile(b, tile, dtype: DType, shape: tuple[int, ...]) -> Value:
    """The tile a store writes, of exactly ``dtype`` and the destination's static ``shape``.

    * A scalar fills the destination, as ``tc.full(shape, scalar)`` would: a Python number takes
      the destination's dtype (it must fit it); a runtime scalar (a rank-0 tile) must have the
      dtype (a weak ``float``/``int`` scalar is converted, as in arithmetic: ``compiler.builder``).
    * A tile of rank >= 1 must have the dtype and the destination's number of elements: a store
      never broadcasts a tile. Leading dimensions of extent 1 may be added or dropped (a ``(4,)``
      tile into a ``(1, 4)`` sub-tensor); a tile meant to be replicated is broadcast explicitly,
      ``t.broadcast(shape)``, so that a ``(1,)`` reduction result cannot fill a sub-tensor by
      mistake.
    """
    if isinstance(tile, Value) and isinstance(tile.type, TileType) and not tile.weak \
            and tile.type.dtype is not dtype:
        raise b.error(DTypeError, f"store: tile dtype {tile.type.dtype.short} differs from the "
                      f"tensor's {dtype.short}", f"convert first: z.store(t.astype(tc."
                      f"{dtype.short}))")
    if is_py_scalar(tile):
        return b.constant(tile, dtype, shape)
    (v,) = b.coerce([tile], "store", dtype=dtype)
    got = v.type.shape
    fits = broadcast_shapes(got, shape) == shape
    if got and got != shape and (not fits or math.prod(got) != math.prod(shape)):
        if fits:
            raise b.error(ShapeError, f"store: a tile of shape {got} is smaller than the "
                          f"sub-tensor's static shape {shape}; stores never broadcast a tile",
                          f"broadcast it explicitly if every element should get its values: "
                          f"z.store(t.broadcast({shape}))")
        raise b.error(ShapeError, f"store: tile shape {got} does not match the "
                      f"sub-tensor's static shape {shape}",
                      "store a tile of the partition's tile shape (load_tile_like(x, z) "
                      "gives one)")
    return b.broadcast_to(v, shape)


def _forbid(rule: str, message: str, hint: str):
    def build(b, *args, **kwargs):
        raise b.error(SafetyError, f"{message} (safety rule {rule})", hint)
    return build


builtin("mut_tensor_load", _build_mut_load.__doc__, _build_mut_load,
        methods=(("mut_tensor", "load"),), public=False)
builtin("mut_tensor_store", _build_mut_store.__doc__, _build_mut_store,
        methods=(("mut_tensor", "store"),), public=False)
builtin("shared_tensor_store", "Storing to a shared tc.Tensor is not allowed.",
        _forbid("2", "a tc.Tensor parameter is shared and read-only: it cannot be stored to",
                "declare the output as tc.MutTensor[...] and pass a partition of it "
                "(t.partition(tile_shape)); each program then stores to its own sub-tensor"),
        methods=(("tensor", "store"), ("tensor", "__setitem__"), ("partition", "store"),
                 ("partition", "__setitem__")), public=False)
builtin("mut_tensor_index", "A MutTensor cannot be indexed or re-partitioned.",
        _forbid("1", "a tc.MutTensor is this program's own sub-tensor: it cannot be indexed "
                "or re-partitioned", "use z.load() and z.store(tile); the host chooses the "
                "partition"),
        methods=(("mut_tensor", "__setitem__"), ("mut_tensor", "__getitem__"),
                 ("mut_tensor", "partition")), public=False)

# ---------------------------------------------------------------------------------------------
# shared tensors: load_tile_like and partitions


def access_hints(b, latency, allow_tma) -> dict:
    """The ``hints`` attribute of a load or store: ``latency`` (1-10, how long the access may
    take to be hidden) and ``allow_tma`` (whether the tensor memory accelerator may be used);
    each optional. Any other keyword is a compile error (Python reports it)."""
    hints = []
    if latency is not None:
        if isinstance(latency, bool) or not isinstance(latency, int) or not 1 <= latency <= 10:
            raise b.error(CompileError, f"latency hint {latency!r} must be an int from 1 to 10",
                          "e.g. latency=3")
        hints.append(("latency", latency))
    if allow_tma is not None:
        if not isinstance(allow_tma, bool):
            raise b.error(CompileError, f"allow_tma hint {allow_tma!r} must be True or False",
                          "e.g. allow_tma=False")
        hints.append(("allow_tma", allow_tma))
    return {"hints": tuple(hints)} if hints else {}


def _padding_arg(b, padding, dtype: DType) -> str:
    if padding in PADDING_VALUES:
        name = padding
    elif isinstance(padding, (int, float)) and not isinstance(padding, bool):
        value = float(padding)
        name = next((k for k, v in PADDING_VALUES.items()
                     if (math.isnan(v) and math.isnan(value))
                     or (v == value and math.copysign(1, v) == math.copysign(1, value))), None)
        if name is None:
            raise b.error(CompileError, f"padding value {padding!r} is not supported",
                          "use 0, -0.0, nan, inf or -inf (Tile IR's padding values)")
    else:
        raise b.error(CompileError, f"padding must be a compile-time number, got {padding!r}")
    if name != "zero" and not dtype.is_float:
        raise b.error(DTypeError, f"padding {padding!r} needs a float tensor, not "
                      f"{dtype.short}", "integer tensors pad with zero")
    if name in ("pos_inf", "neg_inf") and dtype.is_float and not dtype.fits(math.inf):
        raise b.error(DTypeError, f"padding {padding!r}: {dtype.short} has no infinity",
                      "pad with 0, -0.0 or nan")
    return name


def output_read(x, name: str = "", reader: str = "load_tile_like") -> Optional[tuple[str, str]]:
    """The message and fix when the source ``x`` (a type) of a shared read (``reader``:
    ``load_tile_like``, ``gather``) is an output: a ``tc.MutTensor`` or
    ``tc.MappedPartitionMut`` is read only through its own ``load()``, at the tiles this program
    owns (other programs write its other tiles); None for anything else. ``name`` is the
    parameter's name for the fix, where the builder knows it."""
    mapped = isinstance(x, MappedPartitionType)
    if not (mapped or (isinstance(x, TensorViewType) and x.mutable)):
        return None
    name = name or ("m" if mapped else "z")
    own = (f"{name}.load(idx) for each idx of {name}.iter_indices()" if mapped
           else f"{name}.load()")
    return (f"{reader} reads a shared tc.Tensor, not the output {x}: an output is read "
            f"only through its own load(), at the tiles this program owns (safety rule 1)",
            f"read this program's own tile with {own}; pass an array that other programs may "
            f"read as a tc.Tensor parameter")


def _load_like_rule(types, attrs):
    x, z = types
    problem = output_read(x)
    if problem:
        raise SafetyError(problem[0], hint=problem[1])
    if not isinstance(x, TensorViewType):
        raise CompileError(f"load_tile_like reads a tensor parameter, got {x}")
    if not (isinstance(z, TensorViewType) and z.mutable):
        raise CompileError(f"load_tile_like's second argument must be a tc.MutTensor, got {z}",
                           hint="load_tile_like(x, z) loads the tile of x at z's position")
    if x.rank != z.rank:
        raise ShapeError(f"load_tile_like: tensor rank {x.rank} differs from the sub-tensor's "
                         f"rank {z.rank}", hint="reshape the input on the host (t.reshape)")
    return (TileType(x.dtype, z.shape),)


def _load_like_eval(ctx, attrs, x, z):
    # (past x's edge, even wholly, the elements are padding, as on a GPU: the index is the
    # program's own position, and the load reads only inside x)
    return load_tile(ctx, x, z.own_index(ctx.program_id), z.tile_shape, attrs["padding"],
                     what="load_tile_like", checked=False)


op("load_like", "Load the tile of a tensor at the position and shape of a MutTensor.",
   _load_like_rule, _load_like_eval, effect="read")


def _build_load_like(b, x, z, padding=0, *, latency=None, allow_tma=None):
    """load_tile_like(x, z, padding=0, *, latency=None, allow_tma=None) -> tile

    Load from the shared tensor ``x`` the tile that sits where this program's sub-tensor ``z``
    sits: same tile shape, same tile coordinates. ``x`` cannot be an output (a tc.MutTensor or
    tc.MappedPartitionMut: other programs write its tiles; read yours with its own ``load``,
    safety rule 1). Elements past ``x``'s edge read as ``padding`` (0, -0.0, nan, inf or
    -inf), on every device, also where the whole tile lies past it (``x`` smaller than ``z``'s
    tensor). ``latency`` (1-10) and ``allow_tma`` (bool) are optimization hints for the GPU.
    """
    problem = output_read(x.type, x.name) if isinstance(x, Value) else None
    if problem:
        raise b.error(SafetyError, *problem)
    if isinstance(x, Value) and isinstance(x.type, AtomicTensorType):
        raise b.error(SafetyError, f"load_tile_like cannot read the atomic tensor '{x.name}': "
                      "a tc.AtomicTensor has atomic read-modify-writes only, no loads (safety "
                      "rule 12), since other programs update it concurrently",
                      "read it on the host after the launch completes, or in a later launch "
                      "as a tc.Tensor")
    if not (isinstance(x, Value) and isinstance(x.type, TensorViewType)):
        raise b.error(CompileError, "load_tile_like(x, z): x must be a tensor parameter",
                      "pass a tc.Tensor parameter")
    if not (isinstance(z, Value) and isinstance(z.type, TensorViewType) and z.type.mutable):
        raise b.error(CompileError, "load_tile_like(x, z): z must be a tc.MutTensor parameter",
                      "pass the output sub-tensor whose position and shape to copy")
    return b.emit1("load_like", (x, z), {"padding": _padding_arg(b, padding, x.type.dtype),
                                         **access_hints(b, latency, allow_tma)})


builtin("load_tile_like", _build_load_like.__doc__, _build_load_like)


def _partition_rule(types, attrs):
    (x,) = types
    if not isinstance(x, TensorViewType) or x.mutable:
        raise SafetyError(f"only a shared tc.Tensor can be partitioned on the device, got {x}")
    shape = tuple(attrs["tile_shape"])
    if len(shape) != x.rank:
        raise ShapeError(f"partition: tile shape {shape} has rank {len(shape)}, the tensor "
                         f"has rank {x.rank}")
    return (PartitionViewType(x, shape),)


op("make_partition", "View a shared tensor as a grid of tiles of a static shape.",
   _partition_rule, lambda ctx, attrs, x: PartitionBinding(x, tuple(attrs["tile_shape"]),
                                                            attrs["padding"]))


def _build_partition(b, x, shape, padding=0):
    """x.partition(tile_shape, padding=0) -> partition

    View the shared tensor ``x`` as a grid of tiles of the static ``tile_shape`` (powers of
    two); load them with ``.load(index)``. Elements past the edge read as ``padding``.
    """
    shape = b.shape_arg(shape, "partition")
    b.check_tile_shape(shape)
    return b.emit1("make_partition", (x,), {"tile_shape": shape,
                                            "padding": _padding_arg(b, padding, x.type.dtype)})


builtin("partition", _build_partition.__doc__, _build_partition,
        methods=(("tensor", "partition"),), public=False)


def _partition_load_rule(types, attrs):
    p, *index = types
    if not isinstance(p, PartitionViewType):
        raise CompileError(f"load(index) needs a partition, got {p}")
    if len(index) != p.rank:
        raise ShapeError(f"partition load: {len(index)} index value(s) for a rank-{p.rank} "
                         f"partition", hint=f"give one tile coordinate per axis ({p.rank})")
    for t in index:
        if not (isinstance(t, TileType) and t.is_scalar and t.dtype.is_int):
            raise DTypeError(f"partition index must be an integer scalar, got {t}")
    return (p.tile_type,)


def _partition_load_eval(ctx, attrs, p, *index):
    index = tuple(int(i) for i in index)
    fill = attrs.get("padding_value")
    if fill is not None and any(i < 0 or i >= g for i, g in zip(index, p.grid())):
        return np.full(p.tile_shape, fill, dtype=p.tensor.dtype.compute)
    return load_tile(ctx, p.tensor, index, p.tile_shape, p.padding)


op("partition_load", "Load the tile at tile coordinates ``index`` of a partition.",
   _partition_load_rule, _partition_load_eval, effect="read")


def _build_partition_load(b, p, *index, padding=None, latency=None, allow_tma=None):
    """p.load(index, *, padding=None, latency=None, allow_tma=None) -> tile

    The tile at tile coordinates ``index`` (one integer per axis, e.g. ``p.load((i, k))`` or
    ``p.load(i, k)``). Elements past the tensor's edge read as the partition's padding. An index
    outside the tile grid is an error on every device (``IndexOutOfRangeError``: raised at the
    access on the interpreter, when the launch's stream is next synchronized on a GPU), unless
    ``padding`` is given: then such a tile reads as ``padding`` everywhere. The GPU checks an
    index only where the compiler cannot prove it in range (static extents, ``const_grid``,
    ``for k in range(p.num_tiles(axis))``).
    """
    if len(index) == 1 and isinstance(index[0], tuple):
        index = index[0]
    attrs = access_hints(b, latency, allow_tma)
    if padding is not None:
        attrs["padding_value"] = fill_value(b, padding, p.type.tensor.dtype, "padding")
    return b.emit1("partition_load", (p, *(b.scalar_int(i, "partition index") for i in index)),
                   attrs)


def fill_value(b, value, dtype: DType, what: str):
    """A compile-time Python number that ``dtype`` can hold (the value of padded reads)."""
    if not isinstance(value, (bool, int, float)) or not dtype.fits(value):
        raise b.error(DTypeError, f"{what} {value!r} must be a compile-time number that "
                      f"{dtype.short} can hold", f"e.g. {what}=0")
    return value


builtin("partition_load", _build_partition_load.__doc__, _build_partition_load,
        methods=(("partition", "load"),), public=False)


def _num_tiles_rule(types, attrs):
    (p,) = types
    if not isinstance(p, PartitionViewType):
        raise CompileError(f"num_tiles needs a partition, got {p}")
    if not 0 <= attrs["axis"] < p.rank:
        raise ShapeError(f"num_tiles: axis {attrs['axis']} out of range for rank {p.rank}")
    return (TileType(dt.int32, ()),)


op("num_tiles", "The number of tiles of a partition along ``axis`` (ceil(extent / tile)).",
   _num_tiles_rule, lambda ctx, attrs, p: np.int32(p.grid()[attrs["axis"]]))


def _build_num_tiles(b, p, axis):
    """num_tiles(p, axis) -> i32   (also p.num_tiles(axis))

    The number of tiles of partition ``p`` along ``axis``: ceil(extent / tile).
    """
    if not (isinstance(p, Value) and isinstance(p.type, PartitionViewType)):
        raise b.error(CompileError, "num_tiles(p, axis): p must be a partition",
                      "make one with x.partition(tile_shape)")
    return b.emit1("num_tiles", (p,), {"axis": b.axis_arg(axis, p.type.rank, "num_tiles")})


builtin("num_tiles", _build_num_tiles.__doc__, _build_num_tiles,
        methods=(("partition", "num_tiles"),))

# ---------------------------------------------------------------------------------------------
# raw pointers (unsafe)


def _ptr_operands(types, what):
    ptr, offsets, *rest = types
    if not isinstance(ptr, PointerType):
        raise CompileError(f"{what} needs a tc.Ptr parameter, got {ptr}")
    if not (isinstance(offsets, TileType) and offsets.dtype.is_int):
        raise DTypeError(f"{what}: offsets must be an integer tile, got {offsets}")
    return ptr, offsets, rest


def _ptr_load_rule(types, attrs):
    ptr, offsets, rest = _ptr_operands(types, "load_ptr")
    if rest and rest[0] != TileType(dt.bool_, offsets.shape):
        raise ShapeError(f"load_ptr: mask {rest[0]} must be a bool tile of shape {offsets.shape}")
    return (TileType(ptr.dtype, offsets.shape),)


def _ptr_indices(ctx, ptr: PointerBinding, offsets, mask):
    idx = ptr.offset + offsets.astype(np.int64)
    live = np.ones(idx.shape, dtype=bool) if mask is None else mask
    bad = live & ((idx < 0) | (idx >= ptr.buffer.size))
    if np.any(bad):
        ctx.fail(f"raw pointer access at element offset {int(offsets[bad].flat[0])} is outside "
                 f"the allocation of {ptr.buffer.size} elements (undefined behaviour on a GPU)")
    return np.where(live, idx, 0), live


def _ptr_load_eval(ctx, attrs, ptr, offsets, mask=None):
    idx, live = _ptr_indices(ctx, ptr, offsets, mask)
    values = ptr.dtype.to_compute(ptr.buffer[idx])
    return np.where(live, values, np.asarray(attrs["padding"], dtype=values.dtype))


op("ptr_load", "Gather from a raw pointer at element offsets (optional mask, padding).",
   _ptr_load_rule, _ptr_load_eval, effect="read")


def _ptr_store_rule(types, attrs):
    ptr, offsets, rest = _ptr_operands(types, "store_ptr")
    if not rest or rest[0] != TileType(ptr.dtype, offsets.shape):
        raise ShapeError(f"store_ptr: value must be a {ptr.dtype.short} tile of shape "
                         f"{offsets.shape}")
    if len(rest) > 1 and rest[1] != TileType(dt.bool_, offsets.shape):
        raise ShapeError(f"store_ptr: mask must be a bool tile of shape {offsets.shape}")
    return ()


def _ptr_store_eval(ctx, attrs, ptr, offsets, value, mask=None):
    idx, live = _ptr_indices(ctx, ptr, offsets, mask)
    ptr.buffer[idx[live]] = ptr.dtype.to_storage(value[live])


op("ptr_store", "Scatter to a raw pointer at element offsets (optional mask).",
   _ptr_store_rule, _ptr_store_eval, effect="write")


def _ptr_arg(b, ptr, what):
    if not (isinstance(ptr, Value) and isinstance(ptr.type, PointerType)):
        raise b.error(CompileError, f"{what}: the first argument must be a tc.Ptr parameter",
                      "declare the parameter as tc.Ptr[dtype] (an unsafe kernel), or load "
                      "tensors safely with load_tile_like / partition(...).load(...)")
    return ptr


def _build_load_ptr(b, ptr, offsets, mask=None, padding=0):
    """load_ptr(ptr, offsets, mask=None, padding=0) -> tile   (unsafe kernels only)

    Gather ``ptr[offsets]`` for an integer tile of element offsets; where ``mask`` is False the
    result is ``padding`` and memory is not touched. No bounds are checked on a GPU.
    """
    ptr = _ptr_arg(b, ptr, "load_ptr")
    off = b.tile(offsets, "offsets")
    operands = [ptr, off]
    if mask is not None:
        operands.append(b.broadcast_to(b.tile(mask, "mask"), off.type.shape))
    if not ptr.type.dtype.fits(padding):
        raise b.error(DTypeError, f"padding {padding!r} does not fit {ptr.type.dtype.short}")
    return b.emit1("ptr_load", operands, {"padding": padding})


def _build_store_ptr(b, ptr, offsets, value, mask=None):
    """store_ptr(ptr, offsets, value, mask=None)   (unsafe kernels only)

    Scatter ``value`` to ``ptr[offsets]`` where ``mask`` is True. No bounds are checked on a
    GPU, and nothing stops two programs from writing the same element: that is why raw
    pointers make a kernel unsafe.
    """
    ptr = _ptr_arg(b, ptr, "store_ptr")
    off = b.tile(offsets, "offsets")
    (v,) = b.coerce([value], "store_ptr", dtype=ptr.type.dtype)
    operands = [ptr, off, b.broadcast_to(v, off.type.shape)]
    if mask is not None:
        operands.append(b.broadcast_to(b.tile(mask, "mask"), off.type.shape))
    b.emit("ptr_store", operands)


builtin("load_ptr", _build_load_ptr.__doc__, _build_load_ptr)
builtin("store_ptr", _build_store_ptr.__doc__, _build_store_ptr)


# ---------------------------------------------------------------------------------------------
# raw-pointer atomics (unsafe): compare-and-swap and exchange
#
# Unlike an atomic tensor's read-modify-writes (``ops/atomic.py``), these return what each lane
# found in memory, so a program can act on the outcome (claim a slot, swap a value out): that
# makes the result depend on the order in which lanes and programs are served, which is why
# they stay behind ``tc.Ptr`` (safety rule 12). The interpreter fixes one order: the lanes of
# one op in row-major order, each seeing the effect of the lanes before it (two lanes at one
# offset included), and the programs one after another in grid order (axis 0 fastest, as
# ``backends/interp`` runs them). A GPU serves the lanes of different programs in any
# interleaving, and the lanes of one op in some order too: code must not depend on the order
# it sees.

#: The element types of ``atomic_cas_ptr`` / ``atomic_exchange_ptr`` (what tileiras 13.4
#: accepts for sm_90: 32- and 64-bit elements).
PTR_ATOMIC_DTYPES = (dt.int32, dt.uint32, dt.int64, dt.uint64, dt.float32, dt.float64)


def _ptr_atomic_dtype_problem(name: str, dtype: DType) -> Optional[tuple[str, str]]:
    """Why ``name`` cannot work on ``dtype`` elements (message, fix), or None."""
    if dtype in PTR_ATOMIC_DTYPES:
        return None
    return (f"{name} on {dtype.short} elements is not supported: the GPU's compare-and-swap and "
            "exchange work on 32- and 64-bit elements only (i32, u32, i64, u64, f32, f64)",
            "point at a 32- or 64-bit buffer (e.g. tc.Ptr[tc.i32]) and convert on the host")


def _ptr_atomic_rule(name: str, count: int):
    """The type rule of a raw-pointer atomic with ``count`` value operands after the offsets
    (compare and value, or value), then an optional mask; every operand has one shape."""
    def infer(types, attrs):
        ptr, offsets, rest = _ptr_operands(types, name)
        problem = _ptr_atomic_dtype_problem(name, ptr.dtype)
        if problem:
            raise DTypeError(problem[0], hint=problem[1])
        values, mask = rest[:count], rest[count:]
        if len(values) != count or len(mask) > 1:
            raise CompileError(f"{name}: expected {count} value operand(s) and an optional mask")
        for v in values:
            if v != TileType(ptr.dtype, offsets.shape):
                raise DTypeError(f"{name}: operand {v} must be a {ptr.dtype.short} tile of "
                                 f"shape {offsets.shape}")
        if mask and mask[0] != TileType(dt.bool_, offsets.shape):
            raise ShapeError(f"{name}: mask {mask[0]} must be a bool tile of shape "
                             f"{offsets.shape}")
        return (TileType(ptr.dtype, offsets.shape),)
    return infer


def _serve_in_order(targets: np.ndarray) -> list[np.ndarray]:
    """Positions into ``targets`` (element offsets, one per live lane in row-major order)
    grouped in rounds: round ``r`` holds, for every offset, the ``r``-th lane that names it.
    Serving the rounds in turn serves every offset's lanes in row-major order, and the lanes of
    one round touch distinct elements, so each round is one vectorized step."""
    if targets.size == 0:
        return []
    by_target = np.argsort(targets, kind="stable")  # (stable: row-major order within one offset)
    ordered = targets[by_target]
    new_group = np.ones(ordered.size, dtype=bool)
    new_group[1:] = ordered[1:] != ordered[:-1]
    group_start = np.flatnonzero(new_group)[np.cumsum(new_group) - 1]
    turn = np.empty(targets.size, dtype=np.int64)
    turn[by_target] = np.arange(targets.size) - group_start
    return [np.flatnonzero(turn == r) for r in range(int(turn.max()) + 1)]


def _bits(values: np.ndarray, dtype: DType) -> np.ndarray:
    """The bit patterns of ``values`` (storage of ``dtype``), as unsigned integers."""
    stored = np.ascontiguousarray(dtype.to_storage(values))
    return stored.view(f"u{stored.dtype.itemsize}")


def _ptr_atomic_eval(ctx, attrs, ptr: PointerBinding, offsets, compare, value, mask):
    """Compare-and-swap (``compare`` given) or exchange (``compare`` None), lane by lane in
    row-major order; returns the old values (``padding`` where the mask is off)."""
    idx, live = _ptr_indices(ctx, ptr, offsets, mask)
    dtype = ptr.dtype
    old = np.full(idx.shape, attrs["padding"], dtype=dtype.compute)
    lanes = np.flatnonzero(live)  # (row-major: the order the lanes are served in)
    targets = idx.reshape(-1)[lanes]
    new = dtype.to_storage(np.broadcast_to(value, idx.shape).reshape(-1)[lanes])
    expected = (None if compare is None
                else _bits(np.broadcast_to(compare, idx.shape).reshape(-1)[lanes], dtype))
    flat_old = old.reshape(-1)
    for turn in _serve_in_order(targets):
        at = targets[turn]
        found = ptr.buffer[at]
        flat_old[lanes[turn]] = dtype.to_compute(found)
        if expected is None:
            ptr.buffer[at] = new[turn]
        else:  # (floats compare by bit pattern, as the hardware does: -0.0 is not 0.0)
            hit = _bits(found, dtype) == expected[turn]
            ptr.buffer[at[hit]] = new[turn][hit]
    return old


op("ptr_cas", "Atomic compare-and-swap through a raw pointer at element offsets, lane by lane "
   "(optional mask); returns the values found.",
   _ptr_atomic_rule("atomic_cas_ptr", 2),
   lambda ctx, attrs, ptr, offsets, compare, value, mask=None:
       _ptr_atomic_eval(ctx, attrs, ptr, offsets, compare, value, mask),
   effect="write")
op("ptr_exchange", "Atomic exchange through a raw pointer at element offsets, lane by lane "
   "(optional mask); returns the values found.",
   _ptr_atomic_rule("atomic_exchange_ptr", 1),
   lambda ctx, attrs, ptr, offsets, value, mask=None:
       _ptr_atomic_eval(ctx, attrs, ptr, offsets, None, value, mask),
   effect="write")


def _emit_ptr_atomic(b, name: str, op_name: str, ptr, offsets, values, mask, padding):
    ptr = _ptr_arg(b, ptr, name)
    dtype: DType = ptr.type.dtype
    problem = _ptr_atomic_dtype_problem(name, dtype)
    if problem:
        raise b.error(DTypeError, *problem)
    off = b.tile(offsets, f"{name} offsets")
    if not off.type.dtype.is_int:
        raise b.error(DTypeError, f"{name}: offsets must be an integer tile, got {off.type}",
                      "convert them: offsets.astype(tc.i32)")
    operands = [off, *(b.exact_tile(x, dtype, name, what, "the pointer") for what, x in values)]
    if mask is not None:
        operands.append(b.mask_tile(mask, name, "mask=offsets < n"))
    operands = b.broadcast_together(operands, name, "the offsets, value and mask")
    if not isinstance(padding, (int, float)) or isinstance(padding, bool) \
            or not dtype.fits(padding) or (isinstance(padding, float) and not dtype.is_float):
        raise b.error(DTypeError, f"{name}: padding {padding!r} must be a compile-time "
                      f"number that {dtype.short} can hold", "e.g. padding=0")
    return b.emit1(op_name, (ptr, *operands), {"padding": padding})


def _build_atomic_cas_ptr(b, ptr, offsets, compare, value, mask=None, *, padding=0):
    """atomic_cas_ptr(ptr, offsets, compare, value, mask=None, *, padding=0) -> old
    (unsafe kernels only)

    Atomic compare-and-swap at ``ptr[offsets]``, per lane: ``old = ptr[off]; if old ==
    compare: ptr[off] = value``, as one atomic step; returns the tile of ``old`` values. The
    offsets (an integer tile of element offsets), ``compare``, ``value`` and ``mask`` broadcast
    together (numpy rules); ``compare`` and ``value`` have the pointer's dtype (a Python number
    is converted; a tile of another dtype is a DTypeError). Float elements compare by bit
    pattern, as the hardware does: ``-0.0`` does not match ``0.0`` and a NaN matches the same
    NaN. Where ``mask`` is False the lane touches no memory and returns ``padding``.

    Order: the interpreter serves the lanes in row-major order, each seeing the lanes before it
    (two lanes at one offset: the second finds what the first left), and the tile programs one
    after another in grid order (axis 0 fastest). A GPU interleaves the programs, and the lanes
    of one op, in an unspecified order: the result must be read as "some order", e.g. exactly
    one lane of all programs that CAS the same empty slot finds it empty. Memory order:
    acquire-release at device scope, so a program that wins a slot and one that later observes
    its value agree on what was written before. Element types: i32, u32, i64, u64, f32, f64
    (Tile IR has no narrower atomics). The interpreter raises on a live lane's offset outside
    the allocation (naming the offset; the op then touches nothing); a GPU checks nothing
    (undefined behaviour), as for ``load_ptr``.
    """
    return _emit_ptr_atomic(b, "atomic_cas_ptr", "ptr_cas", ptr, offsets,
                            (("compare", compare), ("value", value)), mask, padding)


def _build_atomic_exchange_ptr(b, ptr, offsets, value, mask=None, *, padding=0):
    """atomic_exchange_ptr(ptr, offsets, value, mask=None, *, padding=0) -> old
    (unsafe kernels only)

    Atomic exchange at ``ptr[offsets]``, per lane: ``old = ptr[off]; ptr[off] = value``, as one
    atomic step; returns the tile of ``old`` values. The offsets (an integer tile of element
    offsets), ``value`` and ``mask`` broadcast together (numpy rules); ``value`` has the
    pointer's dtype (a Python number is converted). Where ``mask`` is False the lane touches no
    memory and returns ``padding``. Order, memory order, element types and bounds as for
    ``atomic_cas_ptr``: on the interpreter, lanes at one offset chain (each finds the value of
    the lane before it, the element keeps the last lane's value).
    """
    return _emit_ptr_atomic(b, "atomic_exchange_ptr", "ptr_exchange", ptr, offsets,
                            (("value", value),), mask, padding)


builtin("atomic_cas_ptr", _build_atomic_cas_ptr.__doc__, _build_atomic_cas_ptr)
builtin("atomic_exchange_ptr", _build_atomic_exchange_ptr.__doc__, _build_atomic_exchange_ptr)
