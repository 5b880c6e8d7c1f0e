"""The IR verifier: structural and type invariants every backend may rely on.

Checks that each operand is defined before use in an enclosing scope, that each op's result
types are what its registry type rule says, that tiles obey the shape rules, and that every
region ends with a terminator matching its op: ``yield`` of the op's result types (a loop's
carried types), or, inside a ``for``/``loop`` body (possibly nested in ``if`` regions, not in
another loop), ``continue``/``break`` of the loop's carried types. A terminator is the last op
of its block (an ``if`` whose regions all leave the loop is followed by an unreachable one,
since an ``if`` is not a terminator). A failure here is a compiler bug, reported as a
CompileError at the op's line.
"""

from __future__ import annotations

from typing import Optional

from ..errors import CompileError
from .ir import Block, KernelIR, Operation
from .ops.control import TERMINATORS
from .registry import get_op
from .types import TileType, tile_shape_problem

_LOOPS = ("for", "loop")


def verify(kernel: KernelIR) -> None:
    """Raise CompileError if ``kernel`` breaks an IR invariant."""
    defined = {p.value.id for p in kernel.params}
    _verify_block(kernel, kernel.body, defined, terminator=None, loop=None)


def _fail(kernel: KernelIR, op: Operation, message: str) -> CompileError:
    return CompileError(f"internal IR error in op '{op.name}': {message}", op.location,
                        kernel=kernel.name, hint="this is a tilesafe bug; please report it "
                        "with the kernel source")


def _verify_block(kernel: KernelIR, block: Block, defined: set[int], terminator,
                  loop: Optional[tuple]) -> None:
    """``terminator``: the types a ``yield`` here passes (None: no yield allowed); ``loop``:
    the carried types of the innermost loop this block may leave (None: not in a loop)."""
    scope = set(defined) | {a.id for a in block.args}
    for index, op in enumerate(block.ops):
        definition = get_op(op.name)
        for v in op.operands:
            if v.id not in scope:
                raise _fail(kernel, op, f"operand {v!r} is used before it is defined")
        expected = definition.infer(tuple(v.type for v in op.operands), op.attrs)
        if tuple(r.type for r in op.results) != tuple(expected):
            raise _fail(kernel, op, f"result types {[str(r.type) for r in op.results]} differ "
                        f"from the type rule's {[str(t) for t in expected]}")
        for r in op.results:
            if isinstance(r.type, TileType) and tile_shape_problem(r.type.shape):
                raise _fail(kernel, op, tile_shape_problem(r.type.shape))
        if len(op.regions) != definition.num_regions:
            raise _fail(kernel, op, f"has {len(op.regions)} regions, expected "
                        f"{definition.num_regions}")
        if op.name in TERMINATORS:
            _verify_terminator(kernel, block, index, op, terminator, loop)
        for region in op.regions:
            if op.name in _LOOPS:
                carried = tuple(r.type for r in op.results)
                _verify_block(kernel, region, scope, terminator=carried, loop=carried)
            else:
                _verify_block(kernel, region, scope,
                              terminator=tuple(r.type for r in op.results), loop=loop)
            if not region.ops or region.ops[-1].name not in TERMINATORS:
                raise _fail(kernel, op, "region does not end with a terminator (yield, "
                            "continue or break)")
        scope.update(r.id for r in op.results)


def _verify_terminator(kernel: KernelIR, block: Block, index: int, op: Operation, terminator,
                       loop: Optional[tuple]) -> None:
    if index != len(block.ops) - 1:
        raise _fail(kernel, op, f"{op.name} is not at the end of its region")
    got = tuple(v.type for v in op.operands)
    if op.name == "yield":
        if terminator is None:
            raise _fail(kernel, op, "yield outside the end of a region")
        if got != terminator:
            raise _fail(kernel, op, "yielded types differ from the enclosing op's results")
        return
    if loop is None:
        raise _fail(kernel, op, f"{op.name} outside a loop body")
    if got != loop:
        raise _fail(kernel, op, f"{op.name} passes {[str(t) for t in got]}, but the loop "
                    f"carries {[str(t) for t in loop]}")
