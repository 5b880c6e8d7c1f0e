"""The IR verifier: structural and type invariants every backend may rely on.

Checks that each operand is defined before use in an enclosing scope, that each op's result
types are what its registry type rule says, that region bodies end in a ``yield`` matching
their op, and that tiles obey the shape rules. A failure here is a compiler bug, reported as a CompileError at the op's line.
"""

from __future__ import annotations

from ..errors import CompileError
from .ir import Block, KernelIR, Operation
from .registry import get_op
from .types import TileType, tile_shape_problem


def verify(kernel: KernelIR) -> None:
    """Raise CompileError if ``kernel`` breaks an IR invariant."""
    defined = {p.value.id for p in kernel.params}
    _verify_block(kernel, kernel.body, defined, terminator=None)


def _fail(kernel: KernelIR, op: Operation, message: str) -> CompileError:
    return CompileError(f"internal IR error in op '{op.name}': {message}", op.location,
                        kernel=kernel.name, hint="this is a tilesafe bug; please report it "
                        "with the kernel source")


def _verify_block(kernel: KernelIR, block: Block, defined: set[int], terminator) -> None:
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
        if op.name == "yield":
            if terminator is None or index != len(block.ops) - 1:
                raise _fail(kernel, op, "yield outside the end of a region")
            if tuple(v.type for v in op.operands) != terminator:
                raise _fail(kernel, op, "yielded types differ from the enclosing op's results")
        for region in op.regions:
            _verify_block(kernel, region, scope,
                          terminator=tuple(r.type for r in op.results))
            if not region.ops or region.ops[-1].name != "yield":
                raise _fail(kernel, op, "region does not end with yield")
        scope.update(r.id for r in op.results)
