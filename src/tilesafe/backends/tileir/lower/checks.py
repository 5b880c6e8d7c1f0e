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
4-8    the index per axis (for a gather: an offending element index per axis)
9-13   the bound per axis (tile count, or the tensor's extent)
14     a bit per axis whose index was out of range
====== ========================================================================

The first :data:`REPORTED_AXES` axes are named (an access of higher rank leaves the others
out; the host shows them as ``?``). An indexed partition's positions (``positions.py``, rank
3 at most) use word 1 for the failing row and word 14 for the kind of failure instead.

Imports the ``bytecode`` package and ``context`` only.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..bytecode import (I1, I32, I64, ComparisonPredicate, MemoryOrdering, MemoryScope,
                        Signedness, TileType, Value)
from .context import LoweringContext

__all__ = ["FAULT_WORDS", "REPORTED_AXES", "WORD_SITE", "WORD_PROGRAM", "WORD_INDEX", "WORD_BOUND",
           "WORD_AXES", "as_i64", "in_range", "report_unless", "program_words", "axis_words",
           "all_of", "negate"]

FAULT_WORDS = 16
#: the axes a record names an index and a bound for (a 4-D cache's partition has four; with 3
#: the fourth axis's index overwrote the first bound)
REPORTED_AXES = 5
WORD_SITE, WORD_PROGRAM, WORD_INDEX = 0, 1, 4
WORD_BOUND = WORD_INDEX + REPORTED_AXES
WORD_AXES = WORD_BOUND + REPORTED_AXES
assert WORD_AXES < FAULT_WORDS

_UNSIGNED = Signedness.UNSIGNED


def as_i64(lw: LoweringContext, value: Value, signed: bool) -> Value:
    """An integer tile widened to i64 (sign- or zero-extended)."""
    if value.type.element.bits == 64:
        return value
    return lw.fn.exti(value, I64, signedness=Signedness.SIGNED if signed else _UNSIGNED)


def in_range(lw: LoweringContext, index: Value, signed: bool, bound: Value) -> Value:
    """``0 <= index < bound`` as i1 (one unsigned compare; a negative index is a huge unsigned
    one). ``index`` is any integer tile, ``bound`` an i32 scalar (non-negative); 64-bit indices
    are compared in 64 bits, so no truncation can wrap an index into range."""
    fn = lw.fn
    bits = index.type.element.bits
    if bits == 64:
        bound = fn.exti(bound, I64, signedness=_UNSIGNED)
    elif bits < 32:
        index = fn.exti(index, I32, signedness=Signedness.SIGNED if signed else _UNSIGNED)
    return fn.cmpi(ComparisonPredicate.LT, index, lw.splat(bound, index.type.shape),
                   signedness=_UNSIGNED)


def report_unless(lw: LoweringContext, site: int, ok: Value,
                  words: Callable[[], Sequence[tuple[int, Value]]]) -> None:
    """Emit: unless ``ok`` (a scalar i1), claim the fault record for ``site`` (a
    compare-and-swap of word 0) and, for the program that claims it, write ``words()``:
    ``(word, i64 scalar)`` pairs, emitted inside the failure branch (so what they compute
    costs nothing when the check passes)."""
    fn = lw.fn
    record: Optional[Value] = lw.fault_record
    if record is None:
        raise ValueError("a checked access in a kernel without a fault record")
    zero = fn.constant(0, TileType(I64))

    def claim() -> None:
        old, _ = fn.atomic_cas_tko(record, zero, fn.constant(site, TileType(I64)),
                                   ordering=MemoryOrdering.RELAXED, scope=MemoryScope.DEVICE)
        first = fn.cmpi(ComparisonPredicate.EQ, old, zero, signedness=Signedness.SIGNED)

        def write() -> None:
            for word, value in words():
                fn.store_ptr_tko(fn.offset(record, fn.constant(word, TileType(I32))), value)
            fn.yield_()

        fn.if_(first, write)
        fn.yield_()

    fn.if_(ok, fn.yield_, claim)


def program_words(lw: LoweringContext) -> list[tuple[int, Value]]:
    """The words naming this tile program: its block ids."""
    ids = lw.fn.get_tile_block_id() if lw.block_ids is None else lw.block_ids
    return [(WORD_PROGRAM + k, as_i64(lw, b, True)) for k, b in enumerate(ids)]


def axis_words(lw: LoweringContext,
               axes: Sequence[tuple[Value, Value, Value]]) -> list[tuple[int, Value]]:
    """The words naming a failed index: per axis ``(bad, index, bound)`` (whether it failed,
    scalar i1; the index, scalar i64; the bound, scalar i32), and the mask of failed axes."""
    fn = lw.fn
    zero = fn.constant(0, TileType(I64))
    out, mask = [], zero
    for axis, (bad, index, bound) in enumerate(axes):
        if axis < REPORTED_AXES:
            out += [(WORD_INDEX + axis, index), (WORD_BOUND + axis, as_i64(lw, bound, True))]
        mask = fn.ori(mask, fn.select(bad, fn.constant(1 << axis, TileType(I64)), zero))
    return out + [(WORD_AXES, mask)]


def all_of(lw: LoweringContext, flags: Sequence[Value]) -> Value:
    """The conjunction of i1 values of one shape."""
    out = flags[0]
    for flag in flags[1:]:
        out = lw.fn.andi(out, flag)
    return out


def negate(lw: LoweringContext, flags: Value) -> Value:
    """The logical not of an i1 tile."""
    return lw.fn.xori(flags, lw.fn.constant(True, TileType(I1, tuple(flags.type.shape))))
