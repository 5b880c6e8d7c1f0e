"""Tile IR lowering of ``gather`` (``compiler/ops/indexed.py``): a masked pointer load.

Each lane's address is the tensor's base plus the sum of index times stride over the axes,
computed in 64 bits; a lane whose index lies outside the tensor on any axis is masked off and
reads the padding (``padding=``, else zero), so no memory outside the tensor is read. A checked
gather (``compiler.bounds``) then reports a failing lane's index to the kernel's fault record
(``lower/checks.py``) with masked atomics and stores (``report_lanes``: nothing to do, and no
reduction or branch, when every lane passes). A gather reads a shared
tensor: it takes the grid-dependency gate as its token, never the chain of mutable accesses.

Imports the ``bytecode`` package and its sibling lowering modules only.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .... import dtypes as dt
from ....compiler.ir import Operation
from ....dtypes import DType
from ..bytecode import (I1, I32, I64, ComparisonPredicate, MemoryOrdering, MemoryScope,
                        Signedness, TileType, Value)
from .arith import convert
from .checks import (WORD_AXES, WORD_BOUND, WORD_INDEX, WORD_PROGRAM, WORD_SITE, as_i64,
                     in_range)
from .context import LoweringContext, TensorArg, lowers, memory_type

def _splat(lw: LoweringContext, value: Value, shape: Sequence[int]) -> Value:
    """``value`` (a scalar, or a tile of ``shape``'s rank with extents 1 or equal) broadcast to
    ``shape``."""
    shape = tuple(shape)
    if tuple(value.type.shape) == shape:
        return value
    if not value.type.shape:
        value = lw.fn.reshape(value, (1,) * len(shape)) if shape else value
    return lw.fn.broadcast(value, shape) if shape else value


def _i32(lw: LoweringContext, value) -> Value:
    return lw.i32(value) if isinstance(value, int) else value


@lowers("gather")
def lower_gather(lw: LoweringContext, op: Operation) -> None:
    """Each index keeps its own extents (it broadcasts to the result): it is checked and
    scaled by its stride at those extents, then broadcast, so an ``(n, 1)`` row index costs
    ``n`` compares, not ``n * d``. The failure report's reductions run only on failure."""
    fn = lw.fn
    x, *indices = lw.operands(op)
    tensor: TensorArg = x
    index_dtypes: list[DType] = [v.type.dtype for v in op.operands[1:]]
    dtype: DType = tensor.dtype
    shape = tuple(op.result.type.shape)
    wide = [as_i64(lw, i, d.is_signed) for i, d in zip(indices, index_dtypes)]
    dims = [_i32(lw, d) for d in tensor.dims]
    flags = [in_range(lw, i, d.is_signed, n) for i, d, n in zip(indices, index_dtypes, dims)]
    mask = None
    for flag in flags:
        full = _splat(lw, flag, shape)
        mask = full if mask is None else fn.andi(mask, full)
    offset = None
    for i, stride in zip(wide, tensor.strides):
        if isinstance(stride, int) and stride == 1:
            term = i
        else:
            s = fn.constant(int(stride), TileType(I64)) if isinstance(stride, int) else \
                fn.exti(stride, I64, signedness=Signedness.SIGNED)
            term = fn.muli(i, _splat(lw, s, i.type.shape))
        term = _splat(lw, term, shape)
        offset = term if offset is None else fn.addi(offset, term)
    base = _splat(lw, tensor.ptr, shape)
    pointers = fn.offset(base, offset) if offset is not None else base
    fill = op.attrs.get("padding_value", 0)
    padding = None
    if mask is not None:
        padding = (fn.constant(int(bool(fill)), TileType(memory_type(dtype), shape))
                   if dtype.is_bool else lw.constant(fill, dtype, shape))
    tile, _ = fn.load_ptr_tko(pointers, mask=mask, padding=padding, token=lw.gate)
    site = lw.checked_sites.get(id(op))
    if site is not None and flags:
        report_lanes(lw, site, flags, wide, dims)
    lw.set_result(op, convert(lw, tile, dt.int8, dt.bool_) if dtype.is_bool else tile)


def report_lanes(lw: LoweringContext, site: int, flags: Sequence[Value], wide: Sequence[Value],
                 dims: Sequence[Value], live: Optional[Value] = None) -> None:
    """Report the lanes of a tile access that failed their check, lane by lane: ``flags`` per
    axis (i1 tiles: the lane's index on that axis is in range), ``wide`` the indices (i64
    tiles, each of its flag's shape), ``dims`` the extents (i32 scalars), ``live`` the lanes
    that access memory (all if None; of the shape the indices broadcast to).

    Per axis, one masked compare-and-swap claims the fault record for the failing lanes (a
    lane whose mask is off does nothing, so a passing access costs no memory traffic, no
    reduction across the tile and no branch); the one lane that claims it writes its index,
    the extent and the program's block ids with masked stores. The record then names one
    offending index (the interpreter names the largest per axis)."""
    fn = lw.fn
    record = lw.fault_record
    ids = lw.block_ids if lw.block_ids is not None else fn.get_tile_block_id()
    for axis, (flag, index, bound) in enumerate(zip(flags, wide, dims)):
        shape = tuple(flag.type.shape)
        bad = fn.xori(flag, _splat(lw, fn.constant(True, TileType(I1)), shape))
        if live is not None:
            shape = tuple(live.type.shape)
            bad = fn.andi(_splat(lw, bad, shape), live)
            index = _splat(lw, index, shape)
        zeros = fn.constant(0, TileType(I64, shape))

        def at(word: int) -> Value:
            return _splat(lw, fn.offset(record, fn.constant(word, TileType(I32))), shape)

        old, _ = fn.atomic_cas_tko(at(WORD_SITE), zeros,
                                   fn.constant(site, TileType(I64, shape)), mask=bad,
                                   ordering=MemoryOrdering.RELAXED, scope=MemoryScope.DEVICE)
        won = fn.andi(bad, fn.cmpi(ComparisonPredicate.EQ, old, zeros,
                                   signedness=Signedness.SIGNED))
        words = [(WORD_PROGRAM + k, as_i64(lw, b, True)) for k, b in enumerate(ids)]
        words += [(WORD_INDEX + axis, index), (WORD_BOUND + axis, as_i64(lw, bound, True)),
                  (WORD_AXES, fn.constant(1 << axis, TileType(I64)))]
        for word, value in words:
            fn.store_ptr_tko(at(word), _splat(lw, value, shape), mask=won)
