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
from ..bytecode import (I32, I64, ComparisonPredicate, MemoryOrdering, MemoryScope, Signedness,
                        TileType, Value)
from .arith import convert
from .checks import (REPORTED_AXES, WORD_AXES, WORD_BOUND, WORD_INDEX, WORD_SITE, all_of,
                     as_i64, in_range, negate, program_words)
from .context import LoweringContext, TensorArg, lowers, memory_type

__all__ = ["element_offsets", "report_lanes"]


def element_offsets(lw: LoweringContext, tensor: TensorArg, indices: Sequence[Value],
                    shape: Sequence[int]) -> Value:
    """``sum(index_d * stride_d)`` as an i64 tile of ``shape``: each index (an i64 tile that
    broadcasts to ``shape``) is scaled at its own extents, then broadcast."""
    fn = lw.fn
    total = None
    for index, stride in zip(indices, tensor.strides):
        if not (isinstance(stride, int) and stride == 1):
            scale = (fn.constant(int(stride), TileType(I64)) if isinstance(stride, int) else
                     fn.exti(stride, I64, signedness=Signedness.SIGNED))
            index = fn.muli(index, lw.splat(scale, index.type.shape))
        term = lw.splat(index, shape)
        total = term if total is None else fn.addi(total, term)
    return total


@lowers("gather")
def lower_gather(lw: LoweringContext, op: Operation) -> None:
    """Each index keeps its own extents (it broadcasts to the result): it is checked and
    scaled by its stride at those extents, then broadcast, so an ``(n, 1)`` row index costs
    ``n`` compares, not ``n * d``."""
    fn = lw.fn
    x, *indices = lw.operands(op)
    tensor: TensorArg = x
    index_dtypes: list[DType] = [v.type.dtype for v in op.operands[1:]]
    dtype: DType = tensor.dtype
    shape = tuple(op.result.type.shape)
    wide = [as_i64(lw, i, d.is_signed) for i, d in zip(indices, index_dtypes)]
    dims = [lw.dim(tensor, axis) for axis in range(len(indices))]
    flags = [in_range(lw, i, d.is_signed, n) for i, d, n in zip(indices, index_dtypes, dims)]
    mask = all_of(lw, [lw.splat(f, shape) for f in flags]) if flags else None
    base = lw.splat(tensor.ptr, shape)
    pointers = fn.offset(base, element_offsets(lw, tensor, wide, shape)) if wide else base
    padding = None
    if mask is not None:
        fill = op.attrs.get("padding_value", 0)
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
    program = program_words(lw)
    for axis, (flag, index, bound) in enumerate(zip(flags, wide, dims)):
        bad = negate(lw, flag)
        if live is not None:
            bad = fn.andi(lw.splat(bad, live.type.shape), live)
            index = lw.splat(index, live.type.shape)
        shape = tuple(bad.type.shape)
        zeros = fn.constant(0, TileType(I64, shape))

        def at(word: int) -> Value:
            return lw.splat(fn.offset(record, fn.constant(word, TileType(I32))), shape)

        old, _ = fn.atomic_cas_tko(at(WORD_SITE), zeros,
                                   fn.constant(site, TileType(I64, shape)), mask=bad,
                                   ordering=MemoryOrdering.RELAXED, scope=MemoryScope.DEVICE)
        won = fn.andi(bad, fn.cmpi(ComparisonPredicate.EQ, old, zeros,
                                   signedness=Signedness.SIGNED))
        named = ([(WORD_INDEX + axis, index), (WORD_BOUND + axis, as_i64(lw, bound, True))]
                 if axis < REPORTED_AXES else [])
        words = program + named + [(WORD_AXES, fn.constant(1 << axis, TileType(I64)))]
        for word, value in words:
            fn.store_ptr_tko(at(word), lw.splat(value, shape), mask=won)
