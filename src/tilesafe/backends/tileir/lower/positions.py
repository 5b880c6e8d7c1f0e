"""Indexed partitions on the GPU: each program's own tile from its row of the positions, after
the whole positions tensor is proven distinct and inside the tile grid (safety rule 11).

At entry every program of the launch reads *all* the positions, ``ORDERED_CHUNK`` rows at a
time, and checks each row inside the tile grid and that no two rows name one tile (rows compared by
their linear tile index): in one pass when the positions are strictly increasing (each row
compared with the next: a KV cache's slots, a contiguous range), else by comparing every chunk
with itself and every later chunk. Every
program reaches the same verdict from the same memory, so either every program writes its tile
or none writes anything: a failed launch sets its own index outside the tile grid, where the
bounds-checked view masks every store (and loads read padding); where any indexed partition of
the kernel failed, every partition stores off its grid (``lower/memory.py``: the ordinary ones
and the indexed ones whose positions passed), and a kernel that also writes
through mapped partitions, atomics or pointers runs its body only where the positions passed
(``lower/kernel.py``): the launch writes nothing, as on every device. The first program to fail then
reports the smallest failing row to the kernel's fault record (``lower/checks.py``): word 1 the
row, words 4.. its coordinates, words 7.. the tile grid, word 10 the kind (1: outside the
grid, 2: it repeats an earlier row).

The cost per program is ``ceil(n / ORDERED_CHUNK)`` chunk reads for increasing positions,
``n`` the number of positions (four for a 4096-token prefill's KV-cache slots), and
``ceil(n / CHUNK) ** 2 / 2`` chunk comparisons more for any other order (``CHUNK``-square
tiles): one for up to 64 positions (a KV-cache update of a batch), a few thousand for
thousands in no order (an expert scatter). Above a few hundred positions that cost is paid by
a separate launch instead (below).

Validated first (the fact ``validated_first``, which the launch facts set above
``facts.VALIDATE_FIRST_ABOVE`` positions): a launch of one program enqueued just before the
kernel on the same stream (``executable.ValidatedLaunch``; a graph capture records both) is
the kernel lowered ``positions_only``: the same entry parameters, the validation above, the
report to the fault record, and a verdict word of device memory written (0: passed, 1:
failed), nothing of the body. The kernel itself (:func:`positions_from_verdict`) reads the
verdict once (both are ordinary launches, so the validation has completed when the kernel
starts, whatever else was enqueued between them), and owns its row of the positions or, on a
failed verdict, a tile off the grid, as above. The validation's reads are then made once per launch instead of once per program:
at 4096 KV-cache slots, 2.7-3.2x torch's ``index_put_`` instead of 0.42-0.48x (H200).

Imports the ``bytecode`` package and its sibling lowering modules only.
"""

from __future__ import annotations

from typing import Sequence

from ..bytecode import I32, I64, ComparisonPredicate, IntegerAttr, Signedness, TileType, Value
from .checks import (WORD_AXES, WORD_BOUND, WORD_INDEX, WORD_PROGRAM, as_i64, negate,
                     report_unless)
from .context import LoweringContext, TensorArg
from .memory import tile_count

__all__ = ["own_positions", "positions_from_verdict", "CHUNK", "ORDERED_CHUNK"]

#: positions per chunk of the pairwise comparison (a ``(CHUNK, CHUNK)`` tile of comparisons)
CHUNK = 64
#: positions per chunk of the one pass over increasing positions (a prefill's KV-cache slots:
#: thousands of rows, read by every program, so few long chunks rather than many short ones)
ORDERED_CHUNK = 1024
_NONE = (1 << 31) - 1  # "no failing row"
_SIGNED = Signedness.SIGNED


def _min_i32(lw: LoweringContext, tile: Value) -> Value:
    """The minimum of an i32 tile, as a scalar."""
    fn = lw.fn
    size = 1
    for d in tile.type.shape:
        size *= d
    flat = fn.reshape(tile, (size,)) if len(tile.type.shape) != 1 else tile

    def body(e: Value, acc: Value) -> None:
        fn.yield_([fn.mini(e, acc, signedness=_SIGNED)])

    (result,) = fn.reduce([flat], 0, [IntegerAttr(_NONE, I32)], body)
    return result


def _row_addresses(lw: LoweringContext, z: TensorArg, rows: Value, axis: int) -> Value:
    """Pointers to ``positions[rows, axis]`` (``rows``: an i32 tile or scalar)."""
    fn, pos = lw.fn, z.positions
    shape = rows.type.shape
    wide = fn.exti(rows, I64, signedness=_SIGNED)
    s0 = fn.exti(pos.stride0, I64, signedness=_SIGNED)
    s1 = fn.exti(pos.stride1, I64, signedness=_SIGNED)
    offset = fn.addi(fn.muli(wide, lw.splat(s0, shape)),
                     lw.splat(fn.muli(s1, fn.constant(axis, TileType(I64))), shape))
    return fn.offset(lw.splat(pos.ptr, shape), offset)


def _chunk(lw: LoweringContext, z: TensorArg, start: Value, rank: int,
           grid: list[Value], size: int = CHUNK) -> tuple[Value, Value, list[Value], Value]:
    """Rows ``start .. start + size``: (row numbers, live (row < n), coordinates as i64,
    inside the grid) as (size,) tiles."""
    fn, pos = lw.fn, z.positions
    rows = fn.addi(lw.splat(start, (size,)), fn.iota(size, I32))
    live = fn.cmpi(ComparisonPredicate.LT, rows, lw.splat(pos.count, (size,)),
                   signedness=_SIGNED)
    coords, inside = [], live
    for axis in range(rank):
        pointers = _row_addresses(lw, z, rows, axis)
        padding = lw.constant(0, pos.dtype, (size,))
        value, _ = fn.load_ptr_tko(pointers, mask=live, padding=padding, token=lw.gate)
        wide = as_i64(lw, value, pos.dtype.is_signed)
        coords.append(wide)
        limit = lw.splat(fn.exti(grid[axis], I64, signedness=Signedness.UNSIGNED), (size,))
        inside = fn.andi(inside, fn.cmpi(ComparisonPredicate.LT, wide, limit,
                                         signedness=Signedness.UNSIGNED))
    return rows, live, coords, inside


def _linear(lw: LoweringContext, coords: list[Value], grid: list[Value]) -> Value:
    """Row-major linear tile index of coordinates (i64 tiles) in the tile ``grid``."""
    fn = lw.fn
    key = coords[0]
    for axis in range(1, len(coords)):
        extent = lw.splat(fn.exti(grid[axis], I64, signedness=Signedness.UNSIGNED),
                        coords[axis].type.shape)
        key = fn.addi(fn.muli(key, extent), coords[axis])
    return key


def own_positions(lw: LoweringContext, z: TensorArg, site: int,
                  tile_shape: Sequence[int]) -> None:
    """Validate ``z``'s positions, report a failure, and set ``z.own_index``."""
    fn, pos = lw.fn, z.positions
    rank = len(tile_shape)
    grid = [tile_count(lw, z, axis, tile) for axis, tile in enumerate(tile_shape)]
    zero = fn.constant(0, TileType(I32))
    one = fn.constant(1, TileType(I32))
    step = fn.constant(CHUNK, TileType(I32))
    ordered_step = fn.constant(ORDERED_CHUNK, TileType(I32))
    none = fn.constant(_NONE, TileType(I32))
    count = pos.count

    def ordered(start: Value, outside_row: Value, unsorted_row: Value) -> None:
        """One pass: rows outside the grid, and rows whose successor's linear tile index is
        not larger (strictly increasing positions are distinct without comparing pairs)."""
        rows_a, live_a, coords_a, inside_a = _chunk(lw, z, start, rank, grid, ORDERED_CHUNK)
        _, live_next, coords_next, _ = _chunk(lw, z, fn.addi(start, one), rank, grid,
                                              ORDERED_CHUNK)
        bad = fn.andi(live_a, negate(lw, inside_a))
        first_outside = _min_i32(lw, fn.select(bad, rows_a, lw.splat(none, (ORDERED_CHUNK,))))
        ascending = fn.cmpi(ComparisonPredicate.LT, _linear(lw, coords_a, grid),
                            _linear(lw, coords_next, grid), signedness=_SIGNED)
        unsorted = fn.andi(live_next, negate(lw, ascending))
        first_unsorted = _min_i32(lw, fn.select(unsorted, rows_a,
                                                lw.splat(none, (ORDERED_CHUNK,))))
        fn.continue_([fn.mini(outside_row, first_outside, signedness=_SIGNED),
                      fn.mini(unsorted_row, first_unsorted, signedness=_SIGNED)])

    outside_row, unsorted_row = fn.for_(zero, count, ordered_step, [none, none], ordered)
    is_unsorted = fn.cmpi(ComparisonPredicate.NE, unsorted_row, none, signedness=_SIGNED)

    def pairwise() -> None:
        """Positions not in increasing order: compare every chunk with itself and every later
        chunk for the smallest row that repeats an earlier one."""
        def outer(start: Value, repeat_row: Value) -> None:
            rows_a, live_a, coords_a, _ = _chunk(lw, z, start, rank, grid)
            key_a = _linear(lw, coords_a, grid)
            square = (CHUNK, CHUNK)

            def column(t: Value) -> Value:
                return fn.broadcast(fn.reshape(t, (CHUNK, 1)), square)

            def row(t: Value) -> Value:
                return fn.broadcast(fn.reshape(t, (1, CHUNK)), square)

            def inner(start_b: Value, repeat: Value) -> None:
                rows_b, live_b, coords_b, _ = _chunk(lw, z, start_b, rank, grid)
                key_b = _linear(lw, coords_b, grid)
                same = fn.cmpi(ComparisonPredicate.EQ, column(key_a), row(key_b),
                               signedness=_SIGNED)
                later = fn.cmpi(ComparisonPredicate.LT, column(rows_a), row(rows_b),
                                signedness=_SIGNED)
                both = fn.andi(column(live_a), row(live_b))
                clash = fn.andi(fn.andi(same, later), both)
                found = _min_i32(lw, fn.select(clash, row(rows_b), lw.splat(none, square)))
                fn.continue_([fn.mini(repeat, found, signedness=_SIGNED)])

            (repeat_row,) = fn.for_(start, count, step, [repeat_row], inner)
            fn.continue_([repeat_row])

        (found,) = fn.for_(zero, count, step, [none], outer)
        fn.yield_([found])

    (repeat_row,) = fn.if_(is_unsorted, pairwise, lambda: fn.yield_([none]),
                           result_types=[TileType(I32)])
    is_outside = fn.cmpi(ComparisonPredicate.NE, outside_row, none, signedness=_SIGNED)
    is_repeat = fn.cmpi(ComparisonPredicate.NE, repeat_row, none, signedness=_SIGNED)
    failed = fn.ori(is_outside, is_repeat)
    lw.positions_verdict = (failed if lw.positions_verdict is None
                            else fn.ori(lw.positions_verdict, failed))
    _report(lw, z, site, failed, fn.select(is_outside, outside_row, repeat_row), is_outside,
            rank, grid)
    z.own_index = _own_row(lw, z, failed, grid)


def _own_row(lw: LoweringContext, z: TensorArg, failed: Value, grid: list[Value]) -> list:
    """The program's row of the positions as tile coordinates, or, where ``failed``, the
    grid's extents (outside the grid: nothing written)."""
    fn = lw.fn
    program = lw.block_ids[0] if lw.block_ids is not None else fn.get_tile_block_id()[0]
    own = []
    for axis in range(len(grid)):
        value, _ = fn.load_ptr_tko(_row_addresses(lw, z, program, axis), token=lw.gate)
        own.append(fn.select(failed, grid[axis], lw.index_i32(value, z.positions.dtype)))
    return own


def positions_from_verdict(lw: LoweringContext, z: TensorArg,
                           tile_shape: Sequence[int]) -> None:
    """Set ``z.own_index`` from the verdict a launch before this one wrote (``validated_first``):
    the program's row of the positions where they passed, else the tile grid's extents (off
    the grid: nothing is written). The verdict is read once; the validating launch has
    completed by then (both are ordinary launches on one stream, ``executable.py``)."""
    fn = lw.fn
    if lw.positions_verdict is None:
        word, _ = fn.load_ptr_tko(lw.verdict, token=lw.gate)
        lw.positions_verdict = fn.cmpi(ComparisonPredicate.NE, word,
                                       fn.constant(0, TileType(I32)), signedness=_SIGNED)
    grid = [tile_count(lw, z, axis, tile) for axis, tile in enumerate(tile_shape)]
    z.own_index = _own_row(lw, z, lw.positions_verdict, grid)


def _report(lw: LoweringContext, z: TensorArg, site: int, failed: Value, row: Value,
            outside: Value, rank: int, grid: list[Value]) -> None:
    """Unless the positions passed, claim the fault record and write the failing row: its
    number (word 1), its coordinates, the tile grid and the kind (1: outside, 2: a repeat)."""
    fn = lw.fn

    def words() -> list[tuple[int, Value]]:
        out = [(WORD_PROGRAM, fn.exti(row, I64, signedness=_SIGNED))]
        for axis in range(rank):
            value, _ = fn.load_ptr_tko(_row_addresses(lw, z, row, axis), token=lw.gate)
            out += [(WORD_INDEX + axis, as_i64(lw, value, z.positions.dtype.is_signed)),
                    (WORD_BOUND + axis, fn.exti(grid[axis], I64, signedness=_SIGNED))]
        kind = fn.select(outside, fn.constant(1, TileType(I64)), fn.constant(2, TileType(I64)))
        return out + [(WORD_AXES, kind)]

    report_unless(lw, site, negate(lw, failed), words)
