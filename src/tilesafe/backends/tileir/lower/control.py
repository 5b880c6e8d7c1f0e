"""Tile IR lowerings of structured control flow (``compiler/ops/control.py``): ``for``,
``loop``, ``if``, ``yield``, ``continue`` and ``break``.

The memory token of the mutable-access chain is threaded through a region whenever the region
(or one nested in it) accesses a mutable view: as an extra, last loop-carried value of a
``for``/``loop`` (so also of each ``continue``/``break``) and as an extra, last result of an
``if``. Regions without such accesses leave the chain alone, so the token live before the op
stays current after it.

``for`` bounds of 8/16-bit integer types are widened to i32 (the induction variable is
truncated back inside the body); unsigned bounds compare unsigned. The IR's loops count upward,
and run exactly Python's ``range`` (``compiler/ops/control.py``), which Tile IR's ``for`` alone
does not give: it requires a positive step, and its ``iv += step`` may wrap past the bound near
the dtype's maximum (then the loop never ends). So:

* a compile-time step of 1 (``attrs["step"] == 1``) is Tile IR's ``for`` as it is (``iv + 1``
  cannot pass ``ub`` without reaching it);
* any other step counts trips instead: ``n = lb < ub ? (ub - lb - 1) / step + 1 : 0`` (the
  difference and the division unsigned, so exact for every pair of bounds), a ``for k in
  [0, n)`` (unsigned) and ``iv = lb + k * step`` in the body;
* a runtime step (``attrs["runtime_step"]``) is guarded: where it is <= 0 the loop runs zero
  times (the interpreter raises instead); the step used is then 1, so nothing divides by 0;
* Tile IR's ``for`` cannot be left early, so a ``for`` whose body breaks becomes a ``loop``
  carrying the induction variable: each iteration first leaves when ``iv >= ub``; its ends
  (``yield`` and ``continue``) go on with ``iv + step`` only while ``step < ub - iv`` (compared
  unsigned: the distance is exact even where ``iv + step`` would wrap), else break.

``continue`` inside a ``for`` is Tile IR's ``continue``; ``loop`` (the ``while`` loop) maps one
to one.

Importing it registers these lowerings (``context.lowers``). It imports the ``bytecode``
package, ``context`` and ``tilesafe.compiler``/``dtypes``/``errors``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from typing import Optional

from ....compiler.ir import Block, Operation
from ....compiler.types import TileType as IRTileType
from ....errors import CompileError
from ..bytecode import I32, TOKEN, ComparisonPredicate, Signedness, Value
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


def _token(lw: LoweringContext, thread: bool) -> list[Value]:
    return [lw.token] if thread else []


def _breaks(block: Block) -> bool:
    """Whether ``block`` (or an ``if`` region in it, not an inner loop) leaves by ``break``."""
    return any(op.name == "break" or (op.name == "if" and any(_breaks(r) for r in op.regions))
               for op in block.ops)


def _loop_region(lw: LoweringContext, block: Block, token_in: Optional[Value], thread: bool,
                 advance, leave) -> None:
    """Lower a loop body: its ``yield`` and ``continue`` ops emit ``advance(values)``, its
    ``break`` ops ``leave(values)`` (values with the token when the loop threads it)."""
    lw.push_loop({"continue": lambda values: advance(values + _token(lw, thread)),
                  "break": lambda values: leave(values + _token(lw, thread))})
    try:
        _lower_region(lw, block, token_in, thread, advance)
    finally:
        lw.pop_loop()


@lowers("for")
def lower_for(lw: LoweringContext, op: Operation) -> None:
    """``for iv in range(lb, ub, step)`` with loop-carried tiles (and the token, if needed)."""
    fn = lw.fn
    lb, ub, step, *inits = lw.operands(op)
    (body,) = op.regions
    dtype = op.operands[0].type.dtype
    sign = signedness(dtype)
    narrow = scalar_type(dtype).bits < 32
    if narrow:
        lb, ub, step = (fn.exti(v, I32, signedness=sign) for v in (lb, ub, step))
    one = fn.constant(1, step.type)
    positive = None
    if op.attrs.get("runtime_step"):
        positive = fn.cmpi(ComparisonPredicate.GT, step, fn.constant(0, step.type),
                           signedness=sign)
        step = fn.select(positive, step, one)
    thread = lw.touches_memory(body)
    carried = list(inits) + ([lw.token] if thread else [])

    def bind(iv: Value, args) -> None:
        lw.set(body.args[0], fn.trunci(iv, scalar_type(dtype)) if narrow else iv)
        for arg, value in zip(body.args[1:], args):
            lw.set(arg, value)

    def counted(iv: Value, *args: Value) -> None:
        bind(iv, args)
        _loop_region(lw, body, args[-1] if thread else None, thread, fn.continue_, fn.break_)

    def trips(k: Value, *args: Value) -> None:
        counted(fn.addi(lb, fn.muli(k, step)), *args)

    def breakable(iv: Value, *args: Value) -> None:
        inside = fn.cmpi(ComparisonPredicate.LT, iv, ub, signedness=sign)
        fn.if_(inside, fn.yield_, lambda: fn.break_(list(args)))
        bind(iv, args)

        def advance(values: list[Value]) -> None:
            room = fn.subi(ub, iv)
            more = fn.cmpi(ComparisonPredicate.LT, step, room, signedness=Signedness.UNSIGNED)
            fn.if_(more, lambda: fn.continue_([fn.addi(iv, step)] + values))
            fn.break_(values)
        _loop_region(lw, body, args[-1] if thread else None, thread, advance, fn.break_)

    if _breaks(body):
        if positive is not None:
            ub = fn.select(positive, ub, lb)
        results = fn.loop([lb] + carried, breakable, result_types=[v.type for v in carried])
    elif op.attrs.get("step") == 1:
        results = fn.for_(lb, ub, step, carried, counted, unsigned_compare=not dtype.is_signed)
    else:
        zero = fn.constant(0, step.type)
        results = fn.for_(zero, _trip_count(lw, lb, ub, step, sign, positive), one, carried,
                          trips, unsigned_compare=True)
    _bind_results(lw, op, results, thread)


def _trip_count(lw: LoweringContext, lb: Value, ub: Value, step: Value, sign,
                positive: Optional[Value]) -> Value:
    """``len(range(lb, ub, step))`` for a positive ``step`` (0 where ``positive`` is false),
    exact for any bounds of the type: the count of a non-empty range is ``(ub - lb - 1) / step
    + 1``, the difference and the division taken unsigned."""
    fn = lw.fn
    one, zero = fn.constant(1, step.type), fn.constant(0, step.type)
    nonempty = fn.cmpi(ComparisonPredicate.LT, lb, ub, signedness=sign)
    if positive is not None:
        nonempty = fn.andi(nonempty, positive)
    span = fn.subi(fn.subi(ub, lb), one)
    count = fn.addi(fn.divi(span, step, signedness=Signedness.UNSIGNED), one)
    return fn.select(nonempty, count, zero)


@lowers("loop")
def lower_loop(lw: LoweringContext, op: Operation) -> None:
    """``loop`` (a ``while`` loop): Tile IR's ``loop``, carrying the token if needed."""
    inits = lw.operands(op)
    (body,) = op.regions
    thread = lw.touches_memory(body)
    carried = list(inits) + ([lw.token] if thread else [])

    def region(*args: Value) -> None:
        for arg, value in zip(body.args, args):
            lw.set(arg, value)
        _loop_region(lw, body, args[-1] if thread else None, thread, lw.fn.continue_,
                     lw.fn.break_)

    results = lw.fn.loop(carried, region, result_types=[v.type for v in carried])
    _bind_results(lw, op, results, thread)


def _bind_results(lw: LoweringContext, op: Operation, results: list[Value],
                  thread: bool) -> None:
    if thread:
        lw.token = results[-1]
        results = results[:-1]
    for value, result in zip(op.results, results):
        lw.set(value, result)


@lowers("if")
def lower_if(lw: LoweringContext, op: Operation) -> None:
    """``if cond: ... else: ...``; both branches yield the op's results (and the token), but
    for one that leaves the enclosing loop (``continue``/``break``)."""
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
    _bind_results(lw, op, results, thread)


@lowers("yield")
def lower_yield(lw: LoweringContext, op: Operation) -> None:
    """The terminator of a for/loop (``continue``) or if (``yield``) region."""
    lw.terminate(lw.operands(op))


@lowers("continue", "break")
def lower_loop_exit(lw: LoweringContext, op: Operation) -> None:
    """``continue``/``break`` of the innermost loop, from its body or an ``if`` inside it."""
    lw.leave_loop(op.name, lw.operands(op))
