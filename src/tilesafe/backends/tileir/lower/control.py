"""Tile IR lowerings of structured control flow (``compiler/ops/control.py``): ``for``,
``if`` and ``yield``.

The memory token of the mutable-access chain is threaded through a region whenever the region
(or one nested in it) accesses a mutable view: as an extra, last loop-carried value of a ``for``
and as an extra, last result of an ``if``. Regions without such accesses leave the chain alone,
so the token live before the op stays current after it.

``for`` bounds of 8/16-bit integer types are widened to i32 (the induction variable is
truncated back inside the body); unsigned bounds compare unsigned. The IR's loops always count
upward (range steps are positive; mapped loops step by ``num_tile_blocks``).

Importing it registers these lowerings (``context.lowers``). It imports the ``bytecode``
package, ``context`` and ``tilesafe.compiler``/``dtypes``/``errors``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from typing import Optional

from ....compiler.ir import Block, Operation
from ....compiler.types import TileType as IRTileType
from ....errors import CompileError
from ..bytecode import I32, TOKEN, Value
from .context import LoweringContext, lowers, scalar_type, signedness, tile_type

__all__: list[str] = []


def _lower_region(lw: LoweringContext, block: Block, token_in: Optional[Value], thread: bool,
                  terminator) -> None:
    """Lower ``block``; its yield emits ``terminator(values [+ token])``."""
    saved = lw.token
    if thread:
        lw.token = token_in
    lw.push_terminator(lambda values: terminator(values + ([lw.token] if thread else [])))
    try:
        lw.lower_block(block)
    finally:
        lw.pop_terminator()
        lw.token = saved


@lowers("for")
def lower_for(lw: LoweringContext, op: Operation) -> None:
    """``for iv in range(lb, ub, step)`` with loop-carried tiles (and the token, if needed)."""
    lb, ub, step, *inits = lw.operands(op)
    (body,) = op.regions
    dtype = op.operands[0].type.dtype
    sign = signedness(dtype)
    narrow = scalar_type(dtype).bits < 32
    if narrow:
        lb, ub, step = (lw.fn.exti(v, I32, signedness=sign) for v in (lb, ub, step))
    thread = lw.touches_memory(body)
    carried = list(inits) + ([lw.token] if thread else [])

    def region(iv: Value, *args: Value) -> None:
        lw.set(body.args[0], lw.fn.trunci(iv, scalar_type(dtype)) if narrow else iv)
        for arg, value in zip(body.args[1:], args):
            lw.set(arg, value)
        _lower_region(lw, body, args[-1] if thread else None, thread, lw.fn.continue_)

    results = lw.fn.for_(lb, ub, step, carried, region,
                         unsigned_compare=not dtype.is_signed)
    if thread:
        lw.token = results[-1]
        results = results[:-1]
    for value, result in zip(op.results, results):
        lw.set(value, result)


@lowers("if")
def lower_if(lw: LoweringContext, op: Operation) -> None:
    """``if cond: ... else: ...``; both branches yield the op's results (and the token)."""
    (cond,) = lw.operands(op)
    then_block, else_block = op.regions
    for value in op.results:
        if not isinstance(value.type, IRTileType):
            raise CompileError(f"an if/else that yields a {value.type} cannot be compiled for "
                               "the GPU", hint="compute the value before the if, or yield tiles "
                               "only")
    thread = lw.touches_memory(then_block) or lw.touches_memory(else_block)
    result_types = [tile_type(v.type) for v in op.results] + ([TOKEN] if thread else [])
    token = lw.token

    def branch(block: Block):
        return lambda: _lower_region(lw, block, token, thread, lw.fn.yield_)

    results = lw.fn.if_(cond, branch(then_block), branch(else_block), result_types=result_types)
    if thread:
        lw.token = results[-1]
        results = results[:-1]
    for value, result in zip(op.results, results):
        lw.set(value, result)


@lowers("yield")
def lower_yield(lw: LoweringContext, op: Operation) -> None:
    """The terminator of a for (``continue``) or if (``yield``) region."""
    lw.terminate(lw.operands(op))
