"""Which data-dependent accesses of a kernel need a run-time bounds check (safety rule 10).

A partition's ``load(index)`` and ``tc.gather`` read memory at indices computed at run time.
Every device checks them: the interpreter at the access, a GPU kernel with a compare and a
report to the kernel's fault record (``backends/tileir``). A check the compiler can prove
always passes is left out of the GPU code. This module owns that proof and the message both
devices print for an index that fails.

The proof is a small interval analysis over integer scalars: constants, block ids (bounded by
the grid when it is compiled in, ``const_grid``), ``for`` induction variables, and ``+ - *
// % min max`` and conversions of those. An op whose exact result could leave its dtype's
range may have wrapped, so nothing is known of its result. A loop ``for k in range(lb,
num_tiles(p, a))`` also knows ``k < num_tiles(p, a)`` symbolically, so ``p.load((..., k, ...))`` (or a load from
another partition of the same tensor with the same tile extent on that axis) needs no check
whatever the tensor's extents. Static extents (a shape the signature fixes) make the tile grid a
constant. An access is *checked* unless every index is proven in range, the access asks for
padding (``padding=``), or the kernel is ``unchecked_accesses``.

Imports only the IR and types (and the base layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ..shapes import tile_grid
from .ir import KernelIR, Operation, Value
from .types import PartitionViewType, TensorViewType, TileType

__all__ = ["Range", "index_ranges", "checked_accesses", "CHECKED_OPS", "out_of_range_message",
           "positions_message", "positions_problem", "indexed_params", "fault_sites",
           "access_rank"]

#: the ops whose indices are data-dependent and bounds-checked on every device
CHECKED_OPS = ("partition_load", "gather", "atomic_rmw")

_I32 = (-(1 << 31), (1 << 31) - 1)


@dataclass(frozen=True)
class Range:
    """What is known of an integer scalar: ``lo <= value <= hi`` (None: unknown), and
    ``value < num_tiles(tensor, axis, tile)`` for each symbol ``(tensor value id, axis, tile)``
    in ``below``."""

    lo: Optional[int] = None
    hi: Optional[int] = None
    below: frozenset = frozenset()


UNKNOWN = Range()


def _fits(lo: Optional[int], hi: Optional[int]) -> Range:
    """A range, forgotten where it may leave i32 (arithmetic that wraps proves nothing)."""
    if lo is not None and not _I32[0] <= lo <= _I32[1]:
        return UNKNOWN
    if hi is not None and not _I32[0] <= hi <= _I32[1]:
        return UNKNOWN
    return Range(lo, hi)


def _add(a: Range, b: Range) -> Range:
    lo = a.lo + b.lo if a.lo is not None and b.lo is not None else None
    hi = a.hi + b.hi if a.hi is not None and b.hi is not None else None
    out = _fits(lo, hi)
    # x + c < sym when x < sym - c ... only c <= 0 keeps the symbol
    below = (a.below if b.hi is not None and b.hi <= 0 else frozenset()) | \
            (b.below if a.hi is not None and a.hi <= 0 else frozenset())
    return Range(out.lo, out.hi, below) if out is not UNKNOWN else Range(below=below)


def _sub(a: Range, b: Range) -> Range:
    lo = a.lo - b.hi if a.lo is not None and b.hi is not None else None
    hi = a.hi - b.lo if a.hi is not None and b.lo is not None else None
    out = _fits(lo, hi)
    below = a.below if b.lo is not None and b.lo >= 0 else frozenset()
    return Range(out.lo, out.hi, below) if out is not UNKNOWN else Range(below=below)


def _mul(a: Range, b: Range) -> Range:
    if None in (a.lo, a.hi, b.lo, b.hi):
        if a.lo is not None and b.lo is not None and a.lo >= 0 and b.lo >= 0:
            return _fits(a.lo * b.lo, None)
        return UNKNOWN
    products = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return _fits(min(products), max(products))


def _min(a: Range, b: Range) -> Range:
    lo = min(a.lo, b.lo) if a.lo is not None and b.lo is not None else None
    his = [h for h in (a.hi, b.hi) if h is not None]
    return Range(lo, min(his) if his else None, a.below | b.below)


def _max(a: Range, b: Range) -> Range:
    los = [lo for lo in (a.lo, b.lo) if lo is not None]
    hi = max(a.hi, b.hi) if a.hi is not None and b.hi is not None else None
    return Range(max(los) if los else None, hi, a.below & b.below)


def _constant_divisor(b: Range) -> Optional[int]:
    return b.lo if b.lo is not None and b.lo == b.hi and b.lo > 0 else None


def _floordiv(a: Range, b: Range) -> Range:
    c = _constant_divisor(b)
    if c is None or a.lo is None:
        return UNKNOWN
    return Range(a.lo // c, a.hi // c if a.hi is not None else None,
                 a.below if a.lo >= 0 else frozenset())


def _mod(a: Range, b: Range) -> Range:
    c = _constant_divisor(b)
    if c is None:
        return UNKNOWN
    if a.lo is not None and a.lo >= 0:  # a % c <= a, so what bounds a bounds it
        return Range(0, c - 1 if a.hi is None else min(c - 1, a.hi), a.below)
    return Range(0, c - 1)  # Python's remainder takes the divisor's sign


_BINARY = {"add": _add, "sub": _sub, "mul": _mul, "minimum": _min, "maximum": _max,
           "floordiv": _floordiv, "mod": _mod}


def _is_int_scalar(value: Value) -> bool:
    t = value.type
    return isinstance(t, TileType) and t.is_scalar and t.dtype.is_int


def _num_tiles_symbol(p: Value, axis: int, tensors: dict[int, Value]) -> tuple:
    """``(tensor value id, axis, tile extent)`` of partition ``p`` along ``axis``."""
    tensor = tensors.get(p.id)
    return (tensor.id if tensor is not None else p.id, axis, p.type.tile_shape[axis])


def index_ranges(kernel: KernelIR) -> tuple[dict[int, Range], dict[int, Value]]:
    """What the analysis knows of every integer scalar of ``kernel`` (by value id), and the
    tensor each partition value views (by the partition's value id). One pass in program
    order: a value is defined before its uses, and a loop's induction variable before its
    body."""
    ranges: dict[int, Range] = {}
    counts: dict[int, tuple] = {}  # value id -> the num_tiles symbol it equals
    tensors: dict[int, Value] = {}
    grid = kernel.grid
    for op in kernel.walk():
        name = op.name
        if name == "make_partition":
            tensors[op.result.id] = op.operands[0]
        elif name == "for":
            _bind_induction_variable(op, ranges, counts)
        if len(op.results) != 1 or not _is_int_scalar(op.results[0]):
            continue
        result = op.results[0]
        if name == "constant":
            value = int(op.attrs["value"])
            ranges[result.id] = Range(value, value)
        elif name == "tile_block_id":
            axis = op.attrs["axis"]
            ranges[result.id] = Range(0, grid[axis] - 1 if grid and grid[axis] > 0 else None)
        elif name == "num_tile_blocks":
            axis = op.attrs["axis"]
            ranges[result.id] = Range(grid[axis], grid[axis]) if grid else Range(1, None)
        elif name == "num_tiles":
            ranges[result.id] = Range(0, None)
            counts[result.id] = _num_tiles_symbol(op.operands[0], op.attrs["axis"], tensors)
        elif name in _BINARY:
            a, b = (ranges.get(v.id, UNKNOWN) for v in op.operands)
            ranges[result.id] = _without_wrap(_BINARY[name](a, b), result.type.dtype)
        elif name == "convert" and _is_int_scalar(op.operands[0]):
            known = ranges.get(op.operands[0].id, UNKNOWN)
            lo, hi = _limits(result.type.dtype)
            if known.lo is not None and known.lo >= lo and (
                    (known.hi is not None and known.hi <= hi) or hi >= _I32[1]):
                ranges[result.id] = known
    return ranges, tensors


def _without_wrap(r: Range, dtype) -> Range:
    """``r`` (the exact result of an op on the exact ranges of its operands) where the result
    cannot have wrapped in ``dtype``: both bounds known and inside the dtype's limits (a
    ``num_tiles`` symbol bounds a value below 2**31 - 1). Otherwise the value may have wrapped
    anywhere in the dtype, and nothing is known of it (``bid * 2**30`` of an i32, ``i + 101``
    of an i8, ``u - 5`` of a u32)."""
    lo_limit, hi_limit = _limits(dtype)
    hi = r.hi if r.hi is not None else (_I32[1] - 1 if r.below else None)
    if r.lo is None or hi is None or r.lo < lo_limit or hi > hi_limit:
        return UNKNOWN
    return r


def _limits(dtype) -> tuple[int, int]:
    bits = dtype.bits
    if dtype.is_signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _bind_induction_variable(op: Operation, ranges: dict[int, Range],
                             counts: dict[int, tuple]) -> None:
    """``iv`` of ``for iv in range(lb, ub, step)`` (the step is positive: a loop refuses any
    other on the interpreter and runs zero times on a GPU): ``lb <= iv < ub``, so ``iv`` is
    below ``num_tiles(...)`` when ``ub`` is that count or below it."""
    if len(op.operands) < 3 or not op.regions or not op.regions[0].args:
        return
    lb_value, ub_value = op.operands[:2]
    lb, ub = ranges.get(lb_value.id, UNKNOWN), ranges.get(ub_value.id, UNKNOWN)
    below = ub.below | ({counts[ub_value.id]} if ub_value.id in counts else frozenset())
    ranges[op.regions[0].args[0].id] = Range(lb.lo, ub.hi - 1 if ub.hi is not None else None,
                                             frozenset(below))


def _proven(index: Range, bound: int | tuple) -> bool:
    """Whether ``0 <= index < bound`` is proven; ``bound`` is a static count or a symbol."""
    if index.lo is None or index.lo < 0:
        return False
    if index.hi is not None and index.hi < index.lo:  # (an empty range proves nothing)
        return False
    if isinstance(bound, int):
        return index.hi is not None and index.hi < bound
    return bound in index.below


def partition_bounds(p: Value, tensors: dict[int, Value]) -> list:
    """Per axis of partition ``p``: its static tile count, or the ``num_tiles`` symbol."""
    pt: PartitionViewType = p.type
    out: list = []
    for axis, (dim, tile) in enumerate(zip(pt.tensor.shape, pt.tile_shape)):
        if dim is not None:
            out.append(tile_grid((dim,), (tile,))[0])
        else:
            out.append(_num_tiles_symbol(p, axis, tensors))
    return out


def checked_accesses(kernel: KernelIR) -> list[Operation]:
    """The accesses of ``kernel`` that a GPU must bounds-check at run time, in program order
    (a fault record names one by its 1-based position in this list)."""
    if kernel.unchecked_accesses:
        return []
    ranges: Optional[dict] = None
    tensors: dict = {}
    out = []
    for op in kernel.walk():
        if op.name not in CHECKED_OPS or op.attrs.get("padding_value") is not None:
            continue
        if op.name == "partition_load":
            if ranges is None:
                ranges, tensors = index_ranges(kernel)
            p, *index = op.operands
            bounds = partition_bounds(p, tensors)
            if all(_proven(ranges.get(v.id, UNKNOWN), b) for v, b in zip(index, bounds)):
                continue
        out.append(op)
    return out


def indexed_params(kernel: KernelIR) -> list:
    """The ``tc.MutTensor`` parameters of ``kernel`` bound to indexed partitions: each launch
    validates their positions (distinct, inside the tile grid) before any program writes."""
    return [p for p in kernel.params
            if isinstance(p.value.type, TensorViewType) and p.value.type.mutable
            and p.value.type.positions is not None]


def fault_sites(kernel: KernelIR) -> list:
    """What a GPU kernel reports to its fault record, numbered from 1 in this order: its
    checked accesses (operations), then the positions of its indexed partitions (parameters;
    validated even in an ``unchecked_accesses`` kernel: two programs writing one tile would
    race)."""
    return checked_accesses(kernel) + indexed_params(kernel)


def access_rank(op: Operation) -> int:
    """The number of index axes of a checked access."""
    if op.name == "atomic_rmw":
        return op.operands[0].type.rank
    return len(op.operands) - 1  # (the tensor or partition, then one index per axis)


#: the index of a failed axis that a GPU's fault record has no word for (an access of more
#: axes than the record names): :func:`out_of_range_message` shows it as ``?``
UNRECORDED = "?"


def out_of_range_message(op_name: str, index: Sequence[Optional[int]],
                         bounds: Sequence[Optional[int]], attrs: Optional[dict] = None) -> str:
    """The words both devices use for an index of a checked access (op ``op_name`` with
    ``attrs``) that failed its check: for a partition, the tile coordinates and the tile grid;
    for a gather or an atomic update, per axis the largest offending element index and the
    extent (None for an axis whose indices were all in range). A GPU's record names the first
    few axes only: a bound it left out is None and shows as ``?``, and so does the index of a
    failed axis it left out (:data:`UNRECORDED`)."""
    def number(v: Any) -> str:
        return "?" if v is None or v is UNRECORDED else str(int(v))

    def shown(values: Sequence[Optional[int]]) -> str:
        items = [number(v) for v in values]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    if op_name == "partition_load":
        return f"partition index {shown(index)} is outside the tile grid {shown(bounds)}"
    parts = "; ".join(f"{number(i)} along axis {axis} is outside [0, {number(b)})"
                      for axis, (i, b) in enumerate(zip(index, bounds)) if i is not None)
    if op_name == "atomic_rmw":
        attrs = attrs or {}
        return (f"atomic_{attrs.get('mode')} index {parts} of the atomic tensor "
                f"'{attrs.get('tensor')}' (no lane outside it was updated)")
    return "gather index " + parts




# ---------------------------------------------------------------------------------------------
# the positions of an indexed partition (safety rule 11)


def positions_message(row: int, position: Sequence[int], grid: Sequence[int],
                      repeats: Optional[int] = None, duplicate: bool = False) -> str:
    """The words both devices use for positions that fail: ``positions[row]`` outside the
    tile ``grid``, or (``duplicate``) naming a tile another row names too (``repeats``, when
    known)."""
    at = f"positions[{row}] = {tuple(int(i) for i in position)}"
    if not duplicate:
        return (f"{at} is outside the tile grid {tuple(int(g) for g in grid)}: the launch "
                "wrote nothing")
    other = f"positions[{repeats}]" if repeats is not None else "another row"
    return (f"{at} names the same tile as {other}: two programs would own it, so the launch "
            "wrote nothing")


def positions_problem(positions, grid: Sequence[int]) -> Optional[str]:
    """Why the ``(n, rank)`` integer array ``positions`` cannot index a partition with this
    tile ``grid`` (the first row outside the grid, else the first row that repeats an earlier
    one), or None."""
    rows = np.asarray(positions, dtype=np.int64).reshape(len(positions), -1)
    limits = np.asarray(grid, dtype=np.int64)
    outside = np.any((rows < 0) | (rows >= limits), axis=1)
    if np.any(outside):
        row = int(np.argmax(outside))
        return positions_message(row, rows[row], grid)
    seen: dict = {}
    for row, position in enumerate(map(tuple, rows.tolist())):
        if position in seen:
            return positions_message(row, position, grid, repeats=seen[position],
                                     duplicate=True)
        seen[position] = row
    return None
