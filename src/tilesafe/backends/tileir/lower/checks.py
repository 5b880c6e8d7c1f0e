"""Run-time bounds checks in GPU code, and the fault record they report to (safety rule 10).

A kernel with checked accesses (``compiler.bounds.checked_accesses``) takes one more entry
parameter after its own: the address of its *fault record*, ``FAULT_WORDS`` i64 words in memory
the host can read (``backends/tileir/faults.py`` allocates and reads it). An access whose index
fails its check still runs, reading padding as a bounds-checked view or masked pointer access
does, so no memory outside the tensor is touched; the first failing access of the launch
claims the record with a compare-and-swap of word 0 (0 to its site, the access's 1-based
position in ``checked_accesses``) and writes what the host needs to name it:

====== ========================================================================
word   meaning
====== ========================================================================
0      site (0: no fault)
1-3    the tile program's block ids (x, y, z)
4-6    the index per axis (for a gather: an offending element index per axis)
7-9    the bound per axis (tile count, or the tensor's extent)
10     a bit per axis whose index was out of range
====== ========================================================================

Imports the ``bytecode`` package and ``context`` only.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..bytecode import (I1, I32, I64, ComparisonPredicate, IntegerAttr, MemoryOrdering,
                        MemoryScope, Signedness, TileType, Value)
from .context import LoweringContext

__all__ = ["FAULT_WORDS", "WORD_SITE", "WORD_PROGRAM", "WORD_INDEX", "WORD_BOUND", "as_i64", "all_of",
           "reduce_i64",
           "WORD_AXES", "in_range", "report_unless", "all_true"]

FAULT_WORDS = 16
WORD_SITE, WORD_PROGRAM, WORD_INDEX, WORD_BOUND, WORD_AXES = 0, 1, 4, 7, 10

_UNSIGNED = Signedness.UNSIGNED


def as_i64(lw: LoweringContext, value: Value, signed: bool) -> Value:
    bits = value.type.element.bits
    if bits == 64:
        return value
    return lw.fn.exti(value, I64, signedness=Signedness.SIGNED if signed else _UNSIGNED)


def in_range(lw: LoweringContext, index: Value, signed: bool, bound: Value) -> Value:
    """``0 <= index < bound`` as i1 (one unsigned compare; a negative index is a huge unsigned
    one). ``index`` is any integer tile, ``bound`` an i32 scalar (non-negative); 64-bit indices
    are compared in 64 bits, so no truncation can wrap an index into range."""
    fn = lw.fn
    bits = index.type.element.bits
    shape = index.type.shape
    if bits == 64:
        wide = fn.exti(bound, I64, signedness=_UNSIGNED)
        limit = fn.broadcast(fn.reshape(wide, (1,) * len(shape)), shape) if shape else wide
        return fn.cmpi(ComparisonPredicate.LT, index, limit, signedness=_UNSIGNED)
    if bits < 32:
        index = fn.exti(index, I32, signedness=Signedness.SIGNED if signed else _UNSIGNED)
    if not signed and bits == 32:
        # an unsigned 32-bit index above i32's range is out of range of any i32 bound too
        pass
    limit = fn.broadcast(fn.reshape(bound, (1,) * len(shape)), shape) if shape else bound
    return fn.cmpi(ComparisonPredicate.LT, index, limit, signedness=_UNSIGNED)


def report_unless(lw: LoweringContext, site: int, ok: Value, axes) -> None:
    """Emit: unless ``ok`` (a scalar i1), claim the fault record for ``site`` and write the
    program id and, per axis, ``(bad, index, bound)``: whether that axis failed (scalar i1),
    the offending index (scalar i64) and the bound (scalar i32). ``axes`` is that list, or a
    function that emits it: then its ops run only when the check failed."""
    fn = lw.fn
    record: Optional[Value] = lw.fault_record
    if record is None:
        raise ValueError("a checked access in a kernel without a fault record")
    zero = fn.constant(0, TileType(I64))
    ids = lw.fn.get_tile_block_id() if lw.block_ids is None else lw.block_ids

    def store(word: int, value: Value) -> None:
        fn.store_ptr_tko(fn.offset(record, fn.constant(word, TileType(I32))), value,
                         ordering=MemoryOrdering.WEAK, scope=None)

    def claim() -> None:
        old, _ = fn.atomic_cas_tko(record, zero, fn.constant(site, TileType(I64)),
                                   ordering=MemoryOrdering.RELAXED, scope=MemoryScope.DEVICE)
        first = fn.cmpi(ComparisonPredicate.EQ, old, zero, signedness=Signedness.SIGNED)

        def write() -> None:
            for k, block_id in enumerate(ids):
                store(WORD_PROGRAM + k, as_i64(lw, block_id, True))
            mask = zero
            for axis, (bad, index, bound) in enumerate(axes() if callable(axes) else axes):
                store(WORD_INDEX + axis, index)
                store(WORD_BOUND + axis, as_i64(lw, bound, True))
                bit = fn.select(bad, fn.constant(1 << axis, TileType(I64)), zero)
                mask = fn.ori(mask, bit)
            store(WORD_AXES, mask)
            fn.yield_()

        fn.if_(first, write)
        fn.yield_()

    fn.if_(ok, fn.yield_, claim)


def reduce_i64(lw: LoweringContext, tile: Value, largest: bool) -> Value:
    """The maximum (``largest``) or minimum of an i64 tile, as a scalar (a scalar as is)."""
    fn = lw.fn
    if not tile.type.shape:
        return tile
    size = 1
    for d in tile.type.shape:
        size *= d
    flat = fn.reshape(tile, (size,)) if len(tile.type.shape) != 1 else tile
    identity = IntegerAttr(-(1 << 63) if largest else (1 << 63) - 1, I64)

    def body(e: Value, acc: Value) -> None:
        pick = fn.maxi if largest else fn.mini
        fn.yield_([pick(e, acc, signedness=Signedness.SIGNED)])

    (result,) = fn.reduce([flat], 0, [identity], body)
    return result


def all_true(lw: LoweringContext, flags: Value) -> Value:
    """Whether every element of an i1 tile is true, as a scalar i1 (one reduction)."""
    fn = lw.fn
    if not flags.type.shape:
        return flags
    shape = flags.type.shape
    zeros = fn.constant(0, TileType(I64, shape))
    ones = fn.constant(1, TileType(I64, shape))
    worst = reduce_i64(lw, fn.select(flags, zeros, ones), True)
    return fn.cmpi(ComparisonPredicate.EQ, worst, fn.constant(0, TileType(I64)),
                   signedness=Signedness.SIGNED)


def all_of(lw: LoweringContext, flags: Sequence[Value]) -> Value:
    """The conjunction of scalar i1 values."""
    out = flags[0]
    for flag in flags[1:]:
        out = lw.fn.andi(out, flag)
    return out


def true(lw: LoweringContext) -> Value:
    return lw.fn.constant(True, TileType(I1))
