"""Facts the launcher knows about a launch's arguments, for the lowering's ``assume`` ops.

Coarse classes keep the number of specializations small: a base address is either 16-byte
aligned or not; an extent is divisible by 16 or not; a stride of 1 is known exactly and any
other stride is known to span a multiple of 16 bytes or not. These are what let tileiras use
TMA and wide vector accesses. They join the executable's cache key (in memory and, through the
bytecode, on disk), so a launch with other alignments compiles its own variant.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...compiler.ir import KernelIR
from ..base import KernelArg
from .lower import normalize_facts

ALIGN = 16


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
        facts[arg.name] = entry
    return normalize_facts(facts)
