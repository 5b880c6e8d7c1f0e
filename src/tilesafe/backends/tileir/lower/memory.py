"""Tile IR lowerings of the memory ops (``compiler/ops/memory.py`` and ``mapped.py``): grid
queries, tensor shapes, the owned sub-tensor, shared loads, partitions, mapped partitions and
raw pointers.

Views: every tensor-like parameter gets one tensor view, and every (parameter, tile shape,
padding) that an op needs one partition view, all made at the kernel's entry (see
:func:`view_requests`); the ops index them with tile coordinates. Loads past the tensor's edge
read the partition's padding and stores past it are masked: that is what a bounds-checked
(``inbounds`` false) view access does. Grid axis ``i`` indexes partition axis ``i``.

Ordering: accesses through mutable views (``mut_load``/``mut_store``, ``mapped_load``/
``mapped_store``, ``ptr_load``/``ptr_store``, ``ptr_cas``/``ptr_exchange``) take the current
token of the chain and make the next one; shared loads (``load_like``, ``partition_load``) take
no token.

Bool tensors are bytes in memory (0/1): loads compare the byte with 0, stores write 0 or 1.

Importing it registers these lowerings (``context.lowers``). It imports the ``bytecode``
package, ``context``, ``arith`` and ``tilesafe.compiler``/``dtypes``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .... import dtypes as dt
from ....compiler.ir import Operation
from ....compiler.ir import Value as IRValue
from ....shapes import tile_grid
from ....compiler.types import MappedPartitionType
from ....dtypes import DType
from ..bytecode import (I1, I32, I64, AtomicMode, MemoryOrdering, MemoryScope, RoundingMode,
                        Signedness, TileType, Value)
from .arith import convert
from .checks import all_of, as_i64, axis_words, in_range, negate, program_words, report_unless
from .context import (LoweringContext, PartitionArg, TensorArg, lowers, memory_type,
                      signedness)

__all__ = ["view_requests"]

SIGNED = Signedness.SIGNED


# ---------------------------------------------------------------------------------------------
# the partition views each op needs (made at entry by the driver)


def view_requests(op: Operation) -> list[tuple[IRValue, tuple[int, ...], str]]:
    """``(tensor parameter, tile shape, padding)`` of each partition view ``op`` uses."""
    name, operands = op.name, op.operands
    if name in ("mut_load", "mut_store"):
        z = operands[0]
        return [(z, tuple(z.type.shape), "zero")]
    if name == "load_like":
        x, z = operands
        return [(x, tuple(z.type.shape), op.attrs["padding"])]
    if name == "make_partition":
        return [(operands[0], tuple(op.attrs["tile_shape"]), op.attrs["padding"])]
    if name in ("mapped_load", "mapped_store"):
        z = operands[0]
        return [(z, tuple(z.type.tile_shape), "zero")]
    return []


def _view(lw: LoweringContext, tensor: TensorArg, tile_shape: Sequence[int],
          padding: str) -> Value:
    return tensor.partitions[(tuple(tile_shape), padding)]


# ---------------------------------------------------------------------------------------------
# loads and stores of partition views


def access_hints(op: Operation) -> Optional[dict]:
    """The op's ``latency`` / ``allow_tma`` hints as Tile IR load/store hints (all archs)."""
    hints = op.attrs.get("hints")
    return {"default": dict(hints)} if hints else None


def load_view(lw: LoweringContext, view: Value, indices: Sequence[Value], dtype: DType, *,
              ordered: bool, hints: Optional[dict] = None) -> Value:
    """Load a tile through a partition view (padded past the edge); ``ordered`` accesses (those
    ``LoweringContext.needs_token`` selects) join the token chain, the others depend only on
    the grid-dependency gate (when the kernel has one)."""
    tile, token = lw.fn.load_view_tko(view, list(indices),
                                      token=lw.token if ordered else lw.gate,
                                      inbounds=[lw.inbounds] * len(indices), hints=hints)
    if ordered:
        lw.token = token
    return convert(lw, tile, dt.int8, dt.bool_) if dtype.is_bool else tile


def store_view(lw: LoweringContext, tile: Value, view: Value, indices: Sequence[Value],
               dtype: DType, hints: Optional[dict] = None) -> None:
    """Store a tile through a partition view (masked at the edge), in the token chain."""
    if dtype.is_bool:
        tile = convert(lw, tile, dt.bool_, dt.int8)
    lw.token = lw.fn.store_view_tko(tile, view, list(indices), token=lw.token,
                                    inbounds=[lw.inbounds] * len(indices), hints=hints)


# ---------------------------------------------------------------------------------------------
# grid and shapes


@lowers("tile_block_id")
def lower_tile_block_id(lw: LoweringContext, op: Operation) -> None:
    lw.set_result(op, lw.block_ids[op.attrs["axis"]])


@lowers("num_tile_blocks")
def lower_num_tile_blocks(lw: LoweringContext, op: Operation) -> None:
    lw.set_result(op, lw.num_blocks[op.attrs["axis"]])


@lowers("tensor_dim")
def lower_tensor_dim(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    lw.set_result(op, lw.dim(x, op.attrs["axis"]))


def tile_count(lw: LoweringContext, tensor: TensorArg, axis: int, tile: int) -> Value:
    """``ceil(dim / tile)`` as i32 (folded when the dim is static)."""
    dim = tensor.dims[axis]
    if isinstance(dim, int):
        return lw.i32(tile_grid((dim,), (tile,))[0])
    if tile == 1:
        return dim
    return lw.fn.divi(dim, lw.i32(tile), signedness=SIGNED, rounding=RoundingMode.POSITIVE_INF)


@lowers("num_tiles")
def lower_num_tiles(lw: LoweringContext, op: Operation) -> None:
    (p,) = lw.operands(op)
    axis = op.attrs["axis"]
    lw.set_result(op, tile_count(lw, p.tensor, axis, p.tile_shape[axis]))


# ---------------------------------------------------------------------------------------------
# the owned sub-tensor and shared tensors


def _own_index(lw: LoweringContext, rank: int, z: Optional[TensorArg] = None) -> list[Value]:
    """The tile coordinates of the sub-tensor this program owns: its block ids, or for an
    indexed partition the validated row of its positions (``lower/positions.py``)."""
    if z is not None and z.own_index is not None:
        return list(z.own_index)
    return list(lw.block_ids[:rank])


@lowers("mut_load")
def lower_mut_load(lw: LoweringContext, op: Operation) -> None:
    (z,) = lw.operands(op)
    shape = tuple(op.operands[0].type.shape)
    view = _view(lw, z, shape, "zero")
    lw.set_result(op, load_view(lw, view, _own_index(lw, len(shape), z), z.dtype,
                                ordered=lw.needs_token(op), hints=access_hints(op)))


@lowers("mut_store")
def lower_mut_store(lw: LoweringContext, op: Operation) -> None:
    """Store the program's own tile. In a kernel with indexed partitions where any of their
    positions failed (``lw.positions_verdict``), every partition's tile is moved off its grid,
    where the bounds-checked view masks it: an ordinary one's, and an indexed one whose own
    positions passed. The launch writes nothing (rule 11)."""
    z, tile = lw.operands(op)
    shape = tuple(op.operands[0].type.shape)
    index = _own_index(lw, len(shape), z)
    if lw.positions_verdict is not None:
        index = [lw.fn.select(lw.positions_verdict, tile_count(lw, z, axis, size), value)
                 for axis, (value, size) in enumerate(zip(index, shape))]
    store_view(lw, tile, _view(lw, z, shape, "zero"), index, z.dtype, access_hints(op))


@lowers("load_like")
def lower_load_like(lw: LoweringContext, op: Operation) -> None:
    x, z = lw.operands(op)
    shape = tuple(op.operands[1].type.shape)
    view = _view(lw, x, shape, op.attrs["padding"])
    lw.set_result(op, load_view(lw, view, _own_index(lw, len(shape), z), x.dtype,
                                ordered=lw.needs_token(op), hints=access_hints(op)))


@lowers("make_partition")
def lower_make_partition(lw: LoweringContext, op: Operation) -> None:
    (x,) = lw.operands(op)
    shape = tuple(op.attrs["tile_shape"])
    lw.set_result(op, PartitionArg(x, _view(lw, x, shape, op.attrs["padding"]), shape))


@lowers("partition_load")
def lower_partition_load(lw: LoweringContext, op: Operation) -> None:
    """The tile at ``index`` through the partition view (padded past the tensor's edge, and
    entirely padding for a tile outside the grid). A checked access (see
    ``compiler.bounds``) reports an index outside the grid to the fault record; one with
    ``padding=`` reads that value there instead."""
    p, *index = lw.operands(op)
    dtypes = [ir.type.dtype for ir in op.operands[1:]]
    indices = [lw.index_i32(v, d) for v, d in zip(index, dtypes)]
    site = lw.checked_sites.get(id(op))
    fill = op.attrs.get("padding_value")
    inside = None
    if site is not None or fill is not None:
        bounds = [tile_count(lw, p.tensor, axis, tile) for axis, tile in enumerate(p.tile_shape)]
        flags = [in_range(lw, v, d.is_signed, b) for v, d, b in zip(index, dtypes, bounds)]
        inside = all_of(lw, flags)
        if site is not None:
            report_unless(lw, site, inside, lambda: program_words(lw) + axis_words(lw, [
                (negate(lw, flag), as_i64(lw, v, d.is_signed), b)
                for flag, v, d, b in zip(flags, index, dtypes, bounds)]))
    tile = load_view(lw, p.view, indices, p.tensor.dtype, ordered=lw.needs_token(op),
                     hints=access_hints(op))
    if fill is not None:
        dtype = p.tensor.dtype
        padded = (lw.fn.constant(bool(fill), TileType(I1, tuple(p.tile_shape))) if dtype.is_bool
                  else lw.constant(fill, dtype, tuple(p.tile_shape)))
        tile = lw.fn.select(lw.splat(inside, p.tile_shape), tile, padded)
    lw.set_result(op, tile)


# ---------------------------------------------------------------------------------------------
# mapped partitions


@lowers("mapped_count")
def lower_mapped_count(lw: LoweringContext, op: Operation) -> None:
    (z,) = lw.operands(op)
    zt: MappedPartitionType = op.operands[0].type
    count: Optional[Value] = None
    for axis, tile in enumerate(zt.tile_shape):
        n = tile_count(lw, z, axis, tile)
        count = n if count is None else lw.fn.muli(count, n)
    lw.set_result(op, count)


@lowers("mapped_index")
def lower_mapped_index(lw: LoweringContext, op: Operation) -> None:
    """Tile id -> tile coordinates: ``compiler/ops/mapped.py::mapped_coords`` in i32 (every
    quantity is non-negative, so signed division rounding to zero is floor division)."""
    z, tile_id = lw.operands(op)
    zt: MappedPartitionType = op.operands[0].type
    fn = lw.fn
    t = lw.index_i32(tile_id, op.operands[1].type.dtype)
    grid = [tile_count(lw, z, axis, tile) for axis, tile in enumerate(zt.tile_shape)]
    if len(grid) == 1:
        lw.set_result(op, (t,))
        return

    def div(a: Value, b: Value) -> Value:
        return fn.divi(a, b, signedness=SIGNED, rounding=RoundingMode.ZERO)

    def rem(a: Value, b: Value) -> Value:
        return fn.remi(a, b, signedness=SIGNED)

    n_m, n_n = grid[-2], grid[-1]
    lead = None
    if len(grid) == 3:
        per_plane = fn.muli(n_m, n_n)
        lead, t = div(t, per_plane), rem(t, per_plane)
    # groups wider than the grid walk it as the grid's extent does (the same coordinates);
    # kept within it, every product below stays under the tile count, which fits i32, so
    # none wraps (a (2**31 - 1, 1) map wrapped and gave two ids one tile)
    gm = fn.mini(lw.i32(zt.map_shape[-2]), n_m, signedness=SIGNED)
    gn = fn.mini(lw.i32(zt.map_shape[-1]), n_n, signedness=SIGNED)
    band = fn.muli(gm, n_n)
    group = div(t, band)
    first_m = fn.muli(group, gm)
    rows = fn.mini(fn.subi(n_m, first_m), gm, signedness=SIGNED)
    in_band = fn.subi(t, fn.muli(group, band))
    cap = fn.muli(rows, gn)
    within = rem(in_band, cap)
    n = fn.addi(fn.muli(div(in_band, cap), gn), div(within, rows))
    m = fn.addi(first_m, rem(within, rows))
    lw.set_result(op, (m, n) if lead is None else (lead, m, n))


@lowers("index_coord")
def lower_index_coord(lw: LoweringContext, op: Operation) -> None:
    (index,) = lw.operands(op)
    lw.set_result(op, index[op.attrs["axis"]])


@lowers("mapped_load")
def lower_mapped_load(lw: LoweringContext, op: Operation) -> None:
    z, index = lw.operands(op)
    view = _view(lw, z, tuple(op.operands[0].type.tile_shape), "zero")
    lw.set_result(op, load_view(lw, view, index, z.dtype, ordered=lw.needs_token(op),
                                hints=access_hints(op)))


@lowers("mapped_store")
def lower_mapped_store(lw: LoweringContext, op: Operation) -> None:
    z, tile, index = lw.operands(op)
    view = _view(lw, z, tuple(op.operands[0].type.tile_shape), "zero")
    store_view(lw, tile, view, index, z.dtype, access_hints(op))


# ---------------------------------------------------------------------------------------------
# raw pointers


def _pointers(lw: LoweringContext, base: Value, offsets: Value, dtype: DType) -> Value:
    """A tile of pointers ``base + offsets`` (offsets in elements, of any integer dtype)."""
    fn = lw.fn
    bits = offsets.type.element.bits
    if bits < 32:
        offsets = fn.exti(offsets, I32, signedness=signedness(dtype))
    elif bits == 32 and not dtype.is_signed:
        offsets = fn.exti(offsets, I64, signedness=Signedness.UNSIGNED)
    shape = offsets.type.shape
    if shape:
        base = fn.broadcast(fn.reshape(base, (1,) * len(shape)), shape)
    return fn.offset(base, offsets)


@lowers("ptr_load")
def lower_ptr_load(lw: LoweringContext, op: Operation) -> None:
    """Gather ``ptr[offsets]``; masked-off lanes read ``padding`` and touch no memory."""
    ptr, offsets, *rest = lw.operands(op)
    dtype: DType = op.operands[0].type.dtype
    pointers = _pointers(lw, ptr, offsets, op.operands[1].type.dtype)
    mask = rest[0] if rest else None
    padding = None
    if mask is not None:
        value = op.attrs.get("padding", 0)
        padding = (lw.fn.constant(int(bool(value)), TileType(memory_type(dtype), mask.type.shape))
                   if dtype.is_bool else lw.like(value, dtype, mask))
    tile, lw.token = lw.fn.load_ptr_tko(pointers, mask=mask, padding=padding, token=lw.token)
    lw.set_result(op, convert(lw, tile, dt.int8, dt.bool_) if dtype.is_bool else tile)


@lowers("ptr_store")
def lower_ptr_store(lw: LoweringContext, op: Operation) -> None:
    """Scatter ``value`` to ``ptr[offsets]`` where ``mask`` is true."""
    ptr, offsets, value, *rest = lw.operands(op)
    dtype: DType = op.operands[0].type.dtype
    pointers = _pointers(lw, ptr, offsets, op.operands[1].type.dtype)
    if dtype.is_bool:
        value = convert(lw, value, dt.bool_, dt.int8)
    lw.token = lw.fn.store_ptr_tko(pointers, value, mask=rest[0] if rest else None,
                                   token=lw.token)


def _ptr_atomic_result(lw: LoweringContext, op: Operation, old: Value,
                       mask: Optional[Value]) -> None:
    """Set ``op``'s result: ``old``, and the op's ``padding`` where ``mask`` is off (what a
    masked-off lane of an atomic returns is not defined; the interpreter returns padding)."""
    if mask is not None:
        old = lw.fn.select(mask, old, lw.like(op.attrs["padding"], op.operands[0].type.dtype,
                                               mask))
    lw.set_result(op, old)


@lowers("ptr_cas")
def lower_ptr_cas(lw: LoweringContext, op: Operation) -> None:
    """One ``atomic_cas_tko`` over the lanes' pointers, acquire-release at device scope (a
    claim made with it publishes what the program wrote before); masked-off lanes touch no
    memory and read ``padding``."""
    ptr, offsets, compare, value, *rest = lw.operands(op)
    pointers = _pointers(lw, ptr, offsets, op.operands[1].type.dtype)
    mask = rest[0] if rest else None
    old, lw.token = lw.fn.atomic_cas_tko(pointers, compare, value,
                                         ordering=MemoryOrdering.ACQ_REL,
                                         scope=MemoryScope.DEVICE, mask=mask, token=lw.token)
    _ptr_atomic_result(lw, op, old, mask)


@lowers("ptr_exchange")
def lower_ptr_exchange(lw: LoweringContext, op: Operation) -> None:
    """One ``atomic_rmw_tko`` in mode ``xchg`` over the lanes' pointers, ordered as
    ``ptr_cas``."""
    ptr, offsets, value, *rest = lw.operands(op)
    pointers = _pointers(lw, ptr, offsets, op.operands[1].type.dtype)
    mask = rest[0] if rest else None
    old, lw.token = lw.fn.atomic_rmw_tko(pointers, value, AtomicMode.XCHG,
                                         ordering=MemoryOrdering.ACQ_REL,
                                         scope=MemoryScope.DEVICE, mask=mask, token=lw.token)
    _ptr_atomic_result(lw, op, old, mask)
