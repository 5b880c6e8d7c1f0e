"""Facts the launcher knows about a launch's arguments, for the lowering's ``assume`` ops.

Coarse classes keep the number of specializations small: a base address is either 16-byte
aligned or not; an extent is divisible by 16 or not; a stride of 1 is known exactly and any
other stride is known to span a multiple of 16 bytes or not. These are what let tileiras use
TMA and wide vector accesses. They join the executable's cache key (in memory and, through the
bytecode, on disk), so a launch with other alignments compiles its own variant.

A kernel whose indexed partitions hold more than :data:`VALIDATE_FIRST_ABOVE` positions in all
has them validated by a launch of one program before it (the fact ``validated_first`` on each
of them, ``lower/positions.py``): validated at entry, every program of the kernel would read
every position, a cost that grows with the square of their number.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...compiler.ir import KernelIR
from ..base import KernelArg
from .lower import normalize_facts

ALIGN = 16
#: the most positions (over all the kernel's indexed partitions) that the kernel's own programs
#: validate at entry; above, a launch before it does (module docstring)
VALIDATE_FIRST_ABOVE = 256


def launch_facts(kernel: KernelIR, args: Sequence[KernelArg]) -> Any:
    """The normalized facts of one launch (hashable)."""
    facts: dict[str, dict[str, Any]] = {}
    for arg in args:
        if arg.kind == "scalar":
            continue
        item = arg.dtype.itemsize
        entry: dict[str, Any] = {}
        if arg.address() % ALIGN == 0:
            entry["ptr_align"] = ALIGN
        if arg.kind != "pointer":
            entry["dims_div"] = tuple(ALIGN if d % ALIGN == 0 and d else None for d in arg.shape)
            entry["strides"] = tuple(1 if s == 1 and d > 1 else None
                                     for s, d in zip(arg.strides, arg.shape))
            per = max(1, ALIGN // item)
            entry["strides_div"] = tuple(
                per if s != 1 and (s * item) % ALIGN == 0 and s else None for s in arg.strides)
        twin = _positions_twin(kernel, args, arg)
        if twin is not None:
            entry["positions_of"] = twin
        facts[arg.name] = entry
    indexed = [arg for arg in args if arg.positions is not None]
    # (a twin's positions are its first partition's, validated once: counted once)
    validated = sum(arg.positions.shape[0] for arg in indexed
                    if "positions_of" not in facts[arg.name])
    if validated > VALIDATE_FIRST_ABOVE:
        for arg in indexed:
            facts[arg.name]["validated_first"] = True
    return normalize_facts(facts)


def _tile_grid(arg: KernelArg) -> tuple[int, ...]:
    return tuple(-(-extent // tile) for extent, tile in zip(arg.shape, arg.tile_shape))


def _positions_twin(kernel: KernelIR, args: Sequence[KernelArg], arg: KernelArg) -> Any:
    """For an indexed partition whose positions are the very memory (address, shape, strides,
    dtype) of an earlier indexed partition's, over a tile grid of the same extents: the index
    of that earlier parameter. Both validations would read the same positions against the
    same grid and reach the same verdict, so the kernel validates once and both partitions own
    the same tile coordinates (``lower/positions.py``). None otherwise."""
    mine = arg.positions
    if mine is None:
        return None
    names = [p.name for p in kernel.params]
    for other in args:
        if other is arg:
            return None
        theirs = other.positions
        if (theirs is not None and theirs.address() == mine.address()
                and theirs.shape == mine.shape and theirs.strides == mine.strides
                and theirs.dtype == mine.dtype and _tile_grid(other) == _tile_grid(arg)):
            return names.index(other.name)
    return None
