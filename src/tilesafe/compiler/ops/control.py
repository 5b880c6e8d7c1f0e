"""Structured control flow: ``for`` loops with loop-carried tiles, ``loop`` (the ``while``
loop), ``if``/``else`` on scalars, and the terminators of their bodies: ``yield`` (the normal
end of a body), ``continue`` and ``break``.

Semantics (the interpreter's, which every backend must match):

* ``for`` runs its body for ``iv`` in Python's ``range(lb, ub, step)``. The step must be
  positive: a step <= 0 (only a runtime step can be one) is a KernelRuntimeError at the loop's
  line in the interpreter; a GPU does not check it, and there the loop runs zero times (the
  Tile IR lowering guards a runtime step). Bounds are exact: no iteration is added or lost by
  overflow near the dtype's limits.
* ``loop`` runs its body until a ``break``; its body's ``yield`` starts the next iteration with
  the yielded carried values. The front end lowers ``while cond:`` to a ``loop`` whose body
  starts with ``if cond: (nothing) else: break``.
* ``continue`` and ``break`` end the innermost ``for``/``loop`` body from anywhere inside it
  (nested in ``if`` regions, never in another loop): ``continue(values)`` starts the next
  iteration with ``values`` as the carried values; ``break(values)`` ends the loop with
  ``values`` as its results. Both take the loop's carried types. An ``if`` region ending in one
  of them yields nothing; the ``if``'s results come from its other region.

Ops with regions are evaluated with their blocks: ``evaluate(ctx, attrs, regions, *operands)``,
where ``ctx.run_block(block, args)`` runs a block and returns the values it yields;
``continue``/``break`` raise :class:`LoopContinue`/:class:`LoopBreak`, which the enclosing
loop's evaluation catches (through any ``if`` in between).
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError, DTypeError
from ..registry import op
from ..types import TileType

__all__ = ["LoopBreak", "LoopContinue", "LoopExit", "LOOP_EXITS", "TERMINATORS"]

#: The ops that end a region early, leaving the innermost loop's body.
LOOP_EXITS = ("continue", "break")
#: The ops that end a region.
TERMINATORS = ("yield",) + LOOP_EXITS


class LoopExit(Exception):
    """Raised by ``continue``/``break`` in the interpreter, caught by the enclosing loop."""

    def __init__(self, values: tuple):
        super().__init__()
        self.values = values


class LoopContinue(LoopExit):
    """``continue(values)``: the next iteration starts with ``values``."""


class LoopBreak(LoopExit):
    """``break(values)``: the loop ends with ``values`` as its results."""


def _for_rule(types, attrs):
    lb, ub, step, *inits = types
    for t in (lb, ub, step):
        if not (isinstance(t, TileType) and t.is_scalar and t.dtype.is_int):
            raise DTypeError(f"range bounds must be integer scalars, got {t}")
    if not lb.dtype is ub.dtype is step.dtype:
        raise DTypeError(f"range bounds have different integer types "
                         f"({lb.dtype.short}, {ub.dtype.short}, {step.dtype.short})",
                         hint="convert them to one type with .astype(tc.i32)")
    return tuple(inits)


def _for_eval(ctx, attrs, regions, lb, ub, step, *carried):
    (body,) = regions
    iv_dtype = np.asarray(lb).dtype
    if int(step) <= 0:
        ctx.fail(f"the range step is {int(step)}, but a loop's step must be positive (on a GPU, "
                 "where it is not checked, this loop runs zero times)")
    for i in range(int(lb), int(ub), int(step)):
        try:
            carried = ctx.run_block(body, (np.asarray(i, dtype=iv_dtype), *carried))
        except LoopContinue as exit_:
            carried = exit_.values
        except LoopBreak as exit_:
            return exit_.values
    return tuple(carried)


op("for", "for iv in range(lb, ub, step) with loop-carried values (step > 0; attrs: "
   "step, the step of a range when it is a compile-time int, or runtime_step, true when it is "
   "a runtime value; a mapped loop has neither). The body's block "
   "arguments are (iv, *carried); it yields the next carried values, or leaves by "
   "continue/break.", _for_rule, _for_eval, num_regions=1)


def _loop_rule(types, attrs):
    for t in types:
        if not isinstance(t, TileType):
            raise CompileError(f"a loop can only carry tiles, got {t}")
    return tuple(types)


def _loop_eval(ctx, attrs, regions, *carried):
    (body,) = regions
    while True:
        try:
            carried = ctx.run_block(body, carried)
        except LoopContinue as exit_:
            carried = exit_.values
        except LoopBreak as exit_:
            return exit_.values


op("loop", "Repeat the body until it breaks. The body's block arguments are the carried "
   "values; it yields (or continues with) the next ones; break(values) gives the results.",
   _loop_rule, _loop_eval, num_regions=1)


def _if_rule(types, attrs):
    if len(types) != 1:
        raise CompileError("if takes one condition")
    (cond,) = types
    if not (isinstance(cond, TileType) and cond.is_scalar and cond.dtype.is_bool):
        raise DTypeError(f"an if condition must be a bool scalar, got {cond}")
    return tuple(attrs["result_types"])


def _if_eval(ctx, attrs, regions, cond):
    return tuple(ctx.run_block(regions[0] if bool(cond) else regions[1], ()))


op("if", "if cond: then-block else: else-block; both yield the op's results "
   "(attrs: result_types), unless a region leaves its loop by continue/break.",
   _if_rule, _if_eval, num_regions=2)

op("yield", "Terminates a for/loop/if body, passing values to the enclosing op.",
   lambda types, attrs: (), lambda ctx, attrs, *values: values)


def _raise(exit_type):
    def evaluate(ctx, attrs, *values):
        raise exit_type(values)
    return evaluate


op("continue", "Ends the innermost loop's iteration from inside if regions: the operands are "
   "the next carried values.", lambda types, attrs: (), _raise(LoopContinue))
op("break", "Leaves the innermost loop from inside if regions: the operands are the loop's "
   "results (its carried types).", lambda types, attrs: (), _raise(LoopBreak))
