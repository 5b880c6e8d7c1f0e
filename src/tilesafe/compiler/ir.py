"""The typed SSA IR: values, operations, blocks (regions), kernel functions, and a printer.

An :class:`Operation` names an op declared in the registry (``compiler.registry``), takes
operand :class:`Value` s, produces result values, carries compile-time attributes and may own
nested blocks (the bodies of ``for``, ``loop`` and ``if``). Every value has a static type from
``compiler.types``. A region ends with a terminator: ``yield`` (the normal end of a body), or,
inside a loop (possibly nested in ``if`` regions), ``continue`` or ``break``; an ``if`` whose
branches all end in ``continue``/``break`` may be followed by an unreachable terminator, since
only the last op of a block terminates it.

This module holds data and printing only; type rules live in the registry, checks in
``compiler.verify``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from ..errors import Location
from .types import IRType


class Value:
    """An SSA value: defined once (by an op result, a block argument or a kernel parameter).

    ``weak`` marks a runtime scalar whose dtype adapts to the values it meets, as a Python
    number's does: a kernel parameter declared ``float`` or ``int``, and elementwise results
    computed from weak values and numbers only. It matters to the front end alone (the builder
    inserts explicit conversions, see ``compiler.builder``); backends never read it.
    """

    __slots__ = ("id", "type", "name", "weak")
    _ids = itertools.count()

    def __init__(self, type: IRType, name: str = "", weak: bool = False):
        self.id = next(Value._ids)
        self.type = type
        self.name = name
        self.weak = weak

    def __repr__(self) -> str:
        return f"%{self.name or 'v'}{self.id}: {'weak ' if self.weak else ''}{self.type}"


@dataclass(eq=False)
class Block:
    """A list of operations with block arguments (loop induction variable, carried values)."""

    args: list[Value] = field(default_factory=list)
    ops: list["Operation"] = field(default_factory=list)


@dataclass(eq=False)
class Operation:
    """One IR operation. ``name`` is the registry key of its op declaration."""

    name: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attrs: dict[str, Any]
    location: Optional[Location]
    regions: tuple[Block, ...] = ()

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]


@dataclass(frozen=True)
class KernelParam:
    """A kernel parameter as the IR sees it.

    ``kind`` is one of ``"tensor"`` (shared), ``"mut_tensor"`` (exclusive sub-tensor),
    ``"mapped"`` (a mapped output partition), ``"atomic"`` (updated by atomic read-modify-writes
    only), ``"scalar"`` (runtime scalar, a rank-0 tile) or ``"pointer"`` (raw, unsafe). Compile-time
    constants are not parameters of the IR: they are folded into it.
    """

    name: str
    kind: str
    value: Value


@dataclass(eq=False)
class KernelIR:
    """A kernel specialized for one set of compile-time inputs."""

    name: str
    params: list[KernelParam]
    body: Block
    location: Optional[Location]
    unchecked_accesses: bool = False
    grid: Optional[tuple[int, int, int]] = None  # the launch grid, when compiled in (const_grid)

    def walk(self) -> Iterator[Operation]:
        """All operations, nested regions included, in program order."""
        yield from _walk(self.body)


def _walk(block: Block) -> Iterator[Operation]:
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from _walk(region)


def _fmt_attr(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt_attr(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def print_ir(kernel: KernelIR) -> str:
    """Render a kernel as MLIR-like text (stable enough to read and diff, not to parse)."""
    lines: list[str] = []
    params = ", ".join(f"{p.name}: {p.value!r}" for p in kernel.params)
    flag = " unchecked_accesses" if kernel.unchecked_accesses else ""
    if kernel.grid is not None:
        flag += f" grid={list(kernel.grid)}"
    lines.append(f"kernel @{kernel.name}({params}){flag} {{")
    _print_block(kernel.body, lines, 1)
    lines.append("}")
    return "\n".join(lines)


def _print_block(block: Block, lines: list[str], depth: int) -> None:
    pad = "  " * depth
    for op in block.ops:
        res = ", ".join(repr(r) for r in op.results)
        lhs = f"{res} = " if res else ""
        args = ", ".join(f"%{v.name or 'v'}{v.id}" for v in op.operands)
        attrs = ""
        if op.attrs:
            attrs = " {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(op.attrs.items())) + "}"
        loc = f"  // line {op.location.line}" if op.location else ""
        lines.append(f"{pad}{lhs}{op.name}({args}){attrs}{loc}")
        for i, region in enumerate(op.regions):
            bargs = ", ".join(repr(a) for a in region.args)
            lines.append(f"{pad}  ^region{i}({bargs}):")
            _print_block(region, lines, depth + 2)
