"""Executes a verified :class:`~tilesafe.compiler.ir.KernelIR` with numpy, exactly.

The IR is first flattened into *steps* (the registry's numpy ``evaluate`` function, operand
and result slots, attributes, compiled regions), so running a tile program is a tight loop with
no dictionary lookups. Programs run one after another over the grid in row-major order (the
order is unobservable: each program owns its output tiles). Each result is rounded to its
declared dtype, so integers wrap and f16/bf16 round exactly as the dtype does.

This module reads the registry; it must not special-case ops (their semantics live there): a
``continue``/``break`` op leaves its loop by raising from its ``evaluate``, through the blocks in
between, to the loop's own (``compiler.ops.control``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ...compiler.ir import Block, KernelIR
from ...compiler.registry import get_op
from ...compiler.types import TileType
from ...errors import KernelRuntimeError, Location


@dataclass(eq=False)
class _Step:
    evaluate: Callable[..., Any]
    attrs: dict
    operands: tuple[int, ...]
    results: tuple[int, ...]
    rounders: tuple[Optional[Callable[[Any], np.ndarray]], ...]
    regions: tuple["_CompiledBlock", ...]
    location: Optional[Location]
    is_yield: bool


@dataclass(eq=False)
class _CompiledBlock:
    arg_slots: tuple[int, ...]
    steps: list[_Step]


class _ProgramContext:
    """What an op's numpy semantics may ask about the running tile program."""

    __slots__ = ("kernel_name", "program_id", "grid", "location", "env", "_runner")

    def __init__(self, kernel_name: str, grid: tuple[int, int, int], env: list, runner):
        self.kernel_name = kernel_name
        self.grid = grid
        self.program_id = (0, 0, 0)
        self.location: Optional[Location] = None
        self.env = env
        self._runner = runner

    def run_block(self, block: _CompiledBlock, args: Sequence[Any]) -> tuple:
        return self._runner(block, args, self)

    def fail(self, message: str, error: type = KernelRuntimeError) -> None:
        """Stop the launch with ``error`` (a KernelRuntimeError), naming the access's line,
        the kernel and the tile program."""
        where = f"{self.location}: " if self.location else ""
        raise error(f"{where}in kernel '{self.kernel_name}', tile program "
                    f"{self.program_id}: {message}")


class InterpretedKernel:
    """A kernel ready to run on the interpreter."""

    def __init__(self, kernel: KernelIR):
        self.kernel = kernel
        self._slots: dict[int, int] = {}
        self.param_slots = tuple(self._slot(p.value.id) for p in kernel.params)
        self.body = self._compile_block(kernel.body)

    def _slot(self, value_id: int) -> int:
        return self._slots.setdefault(value_id, len(self._slots))

    def _compile_block(self, block: Block) -> _CompiledBlock:
        arg_slots = tuple(self._slot(a.id) for a in block.args)
        steps = []
        for op in block.ops:
            definition = get_op(op.name)
            rounders = tuple(r.type.dtype.round if isinstance(r.type, TileType) else None
                             for r in op.results)
            steps.append(_Step(definition.evaluate, op.attrs,
                               tuple(self._slot(v.id) for v in op.operands),
                               tuple(self._slot(r.id) for r in op.results), rounders,
                               tuple(self._compile_block(r) for r in op.regions), op.location,
                               op.name == "yield"))
        return _CompiledBlock(arg_slots, steps)

    def run(self, bindings: Sequence[Any], grid: tuple[int, int, int]) -> None:
        """Run every tile program of ``grid``; ``bindings`` follow the kernel's parameters."""
        env: list[Any] = [None] * len(self._slots)
        for slot, binding in zip(self.param_slots, bindings):
            env[slot] = binding
        ctx = _ProgramContext(self.kernel.name, tuple(grid), env, _run_block)
        with np.errstate(all="ignore"):
            for z, y, x in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
                ctx.program_id = (x, y, z)
                _run_block(self.body, (), ctx)


def _run_block(block: _CompiledBlock, args: Sequence[Any], ctx: _ProgramContext) -> tuple:
    env = ctx.env
    for slot, value in zip(block.arg_slots, args):
        env[slot] = value
    for step in block.steps:
        operands = [env[s] for s in step.operands]
        if step.is_yield:
            return tuple(operands)
        ctx.location = step.location
        if step.regions:
            out = step.evaluate(ctx, step.attrs, step.regions, *operands)
        else:
            out = step.evaluate(ctx, step.attrs, *operands)
        if not step.results:
            continue
        if len(step.results) == 1 and not step.regions:
            out = (out,)
        for slot, value, rounder in zip(step.results, out, step.rounders):
            env[slot] = rounder(value) if rounder is not None else value
    return ()
