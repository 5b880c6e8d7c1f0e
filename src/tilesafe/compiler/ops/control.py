"""Structured control flow: ``for`` loops with loop-carried tiles, ``if``/``else`` on scalars,
and ``yield``, the terminator of their bodies.

Ops with regions are evaluated with their blocks: ``evaluate(ctx, attrs, regions, *operands)``,
where ``ctx.run_block(block, args)`` runs a block and returns the values it yields.
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError, DTypeError
from ..registry import op
from ..types import TileType


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
    for i in range(int(lb), int(ub), int(step)):
        carried = ctx.run_block(body, (np.asarray(i, dtype=iv_dtype), *carried))
    return tuple(carried)


op("for", "for iv in range(lb, ub, step) with loop-carried values (step > 0). The body's "
   "block arguments are (iv, *carried); it yields the next carried values.",
   _for_rule, _for_eval, num_regions=1)


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
   "(attrs: result_types).", _if_rule, _if_eval, num_regions=2)

op("yield", "Terminates a for/if body, passing values to the enclosing op.",
   lambda types, attrs: (), lambda ctx, attrs, *values: values)
