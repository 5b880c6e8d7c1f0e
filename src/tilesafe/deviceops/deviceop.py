"""DeviceOp: a lazy description of device work (a tensor constructor, a kernel launch, a copy).

Nothing runs until the op is *driven*, in one of three modes:

* ``op.sync()`` / ``op.sync_on(stream)`` — run on a stream (default: the device's pool) and
  block until complete;
* ``await op`` — run without blocking the asyncio event loop; other coroutines progress while
  the work is in flight;
* ``ts.CudaGraph.capture(op)`` or ``ts.CudaGraph.scope(...)`` — record into a replayable graph
  (``deviceops.graph``).

An op runs once (driving it again raises :class:`~tilesafe.errors.DeviceOpError`) unless it is
``.shared()``. Ops compose without running: ``then``, ``map``, :func:`zip`, ``partition``.
Everything an op does happens on one stream, in order, with no host synchronization between
composed steps. On the ``cpu`` device work completes when it runs.

This module imports only the driver package (streams, the ledger) and ``deviceops.awaiting``:
it knows nothing of tensors or kernels. A result that must become read-only when shared says
so itself (an object with ``_mark_shared(where, stream)``).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

from .. import _compiled
from .._callsite import caller_location
from ..driver.device import Device
from ..driver.ledger import LEDGER, bump_ownership_epoch
from ..driver.stream import Stream, next_stream, set_current_stream
from ..errors import DeviceOpError, Location
from .awaiting import await_on_loop, waiters

T = TypeVar("T")
U = TypeVar("U")


class _Unknown:
    """What a recorded op hands back when only running it would tell (see
    ``DeviceOp._recorded``)."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
_FAST = _compiled.FASTPATH
#: makes an op's check-and-mark of its one use atomic across threads (:func:`claim`)
_CLAIM_LOCK = threading.Lock()


def claim(op: Any, how: str, where: Location) -> Optional[tuple]:
    """Mark ``op`` used (``how``, at ``where``) unless it already is; returns None when this
    call marked it, else the ``(how, where)`` of its earlier use. The check and the mark are
    one step, so of several threads claiming one op exactly one gets None."""
    with _CLAIM_LOCK:
        first = op._driven_at
        if first is None:
            op._driven_at = (how, where)
        return first


class _OpState:
    """What every DeviceOp keeps: its device, where it was driven (None until then) and, for
    an op made from a function, the function and its label.

    (The Python definition of ``OpCore``, the base of every op; the compiled fast path has the
    same type in C, so that the ops it runs keep their state where it can reach it.)"""

    __slots__ = ("device", "_driven_at", "_run", "_label", "__weakref__")


OpCore = _FAST.OpCore if _FAST is not None else _OpState


class DeviceOp(OpCore, Generic[T]):
    """A lazy unit of device work producing a value of type ``T`` when driven.

    ``run(stream)`` does the work on ``stream`` and returns the result.
    """

    __slots__ = ()

    def __init__(self, run: Optional[Callable[[Stream], T]], label: Optional[str],
                 device: Optional[Device] = None):
        self._run = run
        self._label = label
        self.device = device
        self._driven_at = None

    @property
    def label(self) -> str:
        """What the op does, for messages (subclasses may build it only when asked)."""
        return self._label or type(self).__name__

    def __getattr__(self, name: str) -> Any:
        # only for names the op does not have: say what a DeviceOp is, not just that it lacks
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}': "
                             f"{self.label} is device work not run yet; call .sync() (or "
                             "await it) and use its result")

    # -- driving ----------------------------------------------------------------------------
    def _execute(self, stream: Stream) -> T:
        """Run on ``stream`` (once); composed ops call this on their parts."""
        self._consume("driven")
        return self._perform(stream)

    def _perform(self, stream: Stream) -> T:
        """The work itself (subclasses override this rather than pass ``run``)."""
        return self._run(stream)

    def sync(self) -> T:
        """Run the op (and everything it depends on) and wait for completion."""
        return self.sync_on(self._default_stream())

    def _default_stream(self) -> Stream:
        """The stream ``sync()`` and ``await`` run the op on: the device's next pool stream."""
        return next_stream(self.device)

    def sync_on(self, stream: Stream) -> T:
        """Run the op on ``stream`` and wait for that stream (which ends the borrows of the
        work it ran)."""
        return self._drive(stream, caller_location())

    def _drive(self, stream: Stream, where: Location) -> T:
        """Run on ``stream`` and wait; ``where`` is the user's driving call, recorded by every
        op this drive consumes."""
        try:
            return self._enqueue(stream, where)
        finally:
            stream.synchronize()

    def _enqueue(self, stream: Stream, where: Location,
                 run: Optional[Callable[[Stream], Any]] = None) -> Any:
        """Run on ``stream`` without waiting for the device (see ``_drive``): ``_execute``, or
        ``run`` in its place, as the pipeline of the user's call at ``where``."""
        saved = set_current_stream(stream)
        saved_where, _DRIVE.where = getattr(_DRIVE, "where", None), where
        try:
            return (run or self._execute)(stream)
        finally:
            _DRIVE.where = saved_where
            set_current_stream(saved)

    def __await__(self):
        return self._run_async().__await__()

    async def _run_async(self) -> T:
        stream = self._default_stream()
        where = caller_location()  # the awaiting coroutine's line
        if stream._platform.asynchronous:
            return await await_on_loop(self, stream, where)
        # Where work completes as it runs (cpu), it runs off the event loop, on tilesafe's own
        # long-lived waiter threads, and the loop keeps serving other coroutines.
        return await asyncio.get_running_loop().run_in_executor(waiters(), self._drive, stream,
                                                                where)

    def _only_enqueues(self, stream: Stream) -> bool:
        """Whether running this op on ``stream`` does nothing on the host but enqueue device
        work (nothing to compile, no host-side step), so an await may run it on the event
        loop's thread."""
        return False

    def _enqueue_while_only_enqueueing(self, stream: Stream) -> tuple[bool, Any]:
        """Run as much of this op on ``stream`` as only enqueues device work. Returns
        ``(True, result)`` when all of it ran, else ``(False, rest)``: ``rest`` is the op that
        runs the remainder (this op itself when none of it ran)."""
        if not self._only_enqueues(stream):
            return False, self
        return True, self._execute(stream)

    # -- composition ------------------------------------------------------------------------
    def then(self, fn: Callable[[T], "DeviceOp[U] | U"]) -> "DeviceOp[U]":
        """After this op, run ``fn(result)`` on the same stream; if it returns a DeviceOp,
        that op runs next (no host synchronization in between). Long chains are flat: no
        recursion per step. ``fn`` runs on the thread that drives the chain; under ``await``,
        while the steps before it only enqueued, that is the event loop's thread, so ``fn``
        should only build the next op."""
        return _Chain(self, [fn])

    def map(self, fn: Callable[[T], U]) -> "DeviceOp[U]":
        """Transform the result on the host after the op completes: the stream is synchronized
        first (ending the op's borrows), so ``fn`` may read the tensors it receives."""
        def run(stream: Stream) -> U:
            result = self._execute(stream)
            stream.synchronize()
            return fn(result)
        return DeviceOp(run, f"{self.label}.map", self.device)

    def partition(self, tile_shape: "int | Sequence[int]") -> "DeviceOp[Any]":
        """Partition the tensor this op produces (see ``Tensor.partition``)."""
        return DeviceOp(lambda stream: self._execute(stream).partition(tile_shape),
                        f"{self.label}.partition({tile_shape})", self.device)

    def shared(self) -> "SharedOp[T]":
        """An op that runs this one at most once and hands every driver the same result.

        A tensor it produces becomes shared and read-only: it can be passed to any number of
        launches as a ``tc.Tensor`` input, but not partitioned, borrowed mutably or written.
        So does every tensor in the result's tuples, lists and dicts, and the memory of a
        partition, mapped partition, mutable or atomic borrow in it.
        """
        return SharedOp(self)

    # -- graphs -----------------------------------------------------------------------------
    def graph_nodes(self) -> Optional[list]:
        """The replayable graph nodes this op consists of, or None if it cannot be recorded
        into a graph (it allocates memory, or its next step is only known when it runs)."""
        return None

    def _recorded(self) -> Optional[tuple[list, Any]]:
        """``(graph nodes, result)`` of this op recorded rather than run, ``result`` being what
        running it would hand back, or :data:`UNKNOWN` when that is only known by running; None
        if the op cannot be recorded. (A chain records its steps from this: see
        ``_Chain.graph_nodes``.)"""
        nodes = self.graph_nodes()
        return None if nodes is None else (nodes, UNKNOWN)

    def _consume(self, how: str) -> None:
        """Mark the op as used (``how``: "driven", "recorded into a graph"); an op is used
        once, also when two threads drive it at once (the check and the mark are one step).
        A drive records the location of the user's driving call."""
        where = (getattr(_DRIVE, "where", None) if how == "driven" else None) or \
            caller_location()
        first = claim(self, how, where)
        if first is None:
            return
        first_how, first_where = first
        # (``where``: the user's call, also when the drive runs on a waiter thread for await)
        raise DeviceOpError(f"{where}: this DeviceOp ({self.label}) was already "
                            f"{first_how} at {first_where}; an op runs once\n  fix: build a "
                            "new op for each run, or call .shared() to reuse one result")

    def __repr__(self) -> str:
        state = "driven" if self._driven_at else "pending"
        return f"<DeviceOp {self.label} ({state})>"


class _ChainState(OpCore):
    """A chain's first op and its steps, run as a loop: ``then`` extends it, ``_perform`` runs
    it, ``_enqueue_while_only_enqueueing`` runs it under ``await``.

    (The Python definition of ``ChainCore``, the base of the chain op; the compiled fast path
    has the same type in C, which runs the loop without Python between the steps.)"""

    __slots__ = ("_first", "_steps", "_length")

    def then(self, fn: Callable[[Any], Any]) -> "DeviceOp":
        """Extend the chain (see ``DeviceOp.then``); this chain is consumed and hands its step
        list on (appending is O(1), so a chain of n steps is built in O(n))."""
        self._consume("extended with .then()")
        self._steps.append(fn)
        return type(self)(self._first, self._steps)

    def _perform(self, stream: Stream) -> Any:
        return _run_steps(self._steps, 0, self._first._execute(stream), stream)[0]

    def _enqueue_while_only_enqueueing(self, stream: Stream) -> tuple[bool, Any]:
        first = self._first
        if not first._only_enqueues(stream):
            return False, self
        self._consume("driven")
        result, resume_at = _run_steps(self._steps, 0, first._execute(stream), stream,
                                       only_enqueueing=True)
        if resume_at is None:
            return True, result
        return False, _ChainRest(self, result, resume_at)


ChainCore = _FAST.ChainCore if _FAST is not None else _ChainState


class _Chain(ChainCore, DeviceOp):
    """``first.then(f1).then(f2)...``, executed as a loop."""

    __slots__ = ()

    def __init__(self, first: DeviceOp, steps: list):
        DeviceOp.__init__(self, None, None, first.device)
        self._first, self._steps, self._length = first, steps, len(steps)

    @property
    def label(self) -> str:
        return f"{self._first.label}" + ".then(...)" * self._length


    def graph_nodes(self) -> Optional[list]:
        recorded = self._recorded()
        return None if recorded is None else recorded[0]

    def _recorded(self) -> Optional[tuple[list, Any]]:
        """The first op's nodes and then each step's, the steps called with what the op before
        would hand back (a launch hands back its arguments, known without running it): a chain
        whose steps only build launches on those arguments records like the launches one by
        one. Each op is consumed as it is recorded (ending its loans, so the next step can
        borrow what it wrote), so a chain that turns out not to be recordable is used up."""
        recorded = self._first._recorded()
        if recorded is None:
            return None
        nodes, result = list(recorded[0]), recorded[1]
        self._first._consume("recorded into a graph")
        for step in self._steps:
            if result is UNKNOWN:
                return None
            result = step(result)
            if isinstance(result, DeviceOp):
                inner = result._recorded()
                if inner is None:
                    return None
                result._consume("recorded into a graph")
                nodes += inner[0]
                result = inner[1]
        return nodes, result


class _ChainRest(DeviceOp):
    """What remains of a chain whose step ``op`` was not run: ``op``, then the chain's steps
    from ``start`` on."""

    __slots__ = ("_chain", "_op", "_start")

    def __init__(self, chain: _Chain, op: DeviceOp, start: int):
        super().__init__(None, None, chain.device)
        self._chain, self._op, self._start = chain, op, start

    @property
    def label(self) -> str:
        return self._chain.label

    def _perform(self, stream: Stream) -> Any:
        return _run_steps(self._chain._steps, self._start, self._op._execute(stream),
                          stream)[0]


def _run_steps(steps: list, start: int, result: Any, stream: Stream,
               only_enqueueing: bool = False) -> tuple[Any, Optional[int]]:
    """Run a chain's steps from ``start`` on, the first given ``result``, on ``stream``:
    ``(result, None)``. With ``only_enqueueing``, stop at the first op a step returns that
    does more than enqueue: ``(that op, unrun, the index of the step after it)``."""
    for index in range(start, len(steps)):
        result = steps[index](result)
        if isinstance(result, DeviceOp):
            if only_enqueueing and not result._only_enqueues(stream):
                return result, index + 1
            result = result._execute(stream)
    return result, None


_DRIVE = threading.local()  # .where: the user's call driving ops on this thread


class SharedOp(DeviceOp[T]):
    """An op that executes once; every later drive returns the same (read-only) result."""

    __slots__ = ("_inner", "_done", "_result", "_lock")

    def __init__(self, inner: DeviceOp[T]):
        super().__init__(None, f"{inner.label}.shared()", inner.device)
        self._inner = inner
        self._done = False
        self._result: Any = None
        self._lock = threading.Lock()

    def _execute(self, stream: Stream) -> T:
        """The first driver runs the op; drivers on other threads meanwhile wait for it, and
        every later one gets the same result (or the error the one run raised)."""
        with self._lock:
            if not self._done:
                try:
                    self._result = _mark_shared(self._inner._execute(stream), stream)
                except BaseException as err:
                    self._result = err
                    raise
                finally:
                    self._done = True
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result


def _mark_shared(result: Any, stream: Stream) -> Any:
    """Make the result of a shared op, run on ``stream``, read-only: every value of it that can
    be shared (a tensor, a partition, a borrow: it has ``_mark_shared``), at any depth of the
    tuples, lists and dicts it is made of, is marked, in one ownership step (refused while
    work not ordered before ``stream`` still writes it)."""
    where = caller_location()
    with LEDGER:
        pending, seen = [result], set()
        while pending:
            v = pending.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, (tuple, list)):
                pending.extend(v)
            elif isinstance(v, dict):
                pending.extend(v.values())
            else:
                mark = getattr(v, "_mark_shared", None)
                if mark is not None:
                    mark(where, stream)
        bump_ownership_epoch()
    return result


class _Zip(DeviceOp[tuple]):
    __slots__ = ("_parts",)

    def __init__(self, parts: Sequence[DeviceOp]):
        super().__init__(lambda stream: tuple(p._execute(stream) for p in parts),
                         "zip(" + ", ".join(p.label for p in parts) + ")",
                         next((p.device for p in parts if p.device is not None), None))
        self._parts = tuple(parts)

    def graph_nodes(self) -> Optional[list]:
        nodes = []
        for p in self._parts:
            part = p.graph_nodes()
            if part is None:
                return None
            nodes.extend(part)
        return nodes

    def _recorded(self) -> Optional[tuple[list, Any]]:
        nodes, results = [], []
        for p in self._parts:
            part = p._recorded()
            if part is None:
                return None
            nodes.extend(part[0])
            results.append(part[1])
        return nodes, (UNKNOWN if any(r is UNKNOWN for r in results) else tuple(results))

    def _consume(self, how: str) -> None:
        super()._consume(how)
        if how != "driven":  # driving runs the parts, which marks them themselves
            for p in self._parts:
                p._consume(how)


def zip(*ops: DeviceOp) -> DeviceOp[tuple]:  # noqa: A001 (mirrors cuTile's zip!)
    """One op running ``ops`` in order on the same stream; its result is the tuple of theirs."""
    for op in ops:
        if not isinstance(op, DeviceOp):
            raise TypeError(f"ts.zip takes DeviceOps, got {type(op).__name__}")
    return _Zip(ops)


def value(result: T, label: str = "value") -> DeviceOp[T]:
    """An op that does no device work and produces ``result``."""
    return DeviceOp(lambda stream: result, label)


def resolve(item: Any, stream: Stream) -> Any:
    """Drive ``item`` on ``stream`` if it is a DeviceOp; otherwise return it unchanged."""
    return item._execute(stream) if isinstance(item, DeviceOp) else item


if _FAST is not None:
    _FAST.configure(DeviceOp=DeviceOp, drive=_DRIVE, ChainRest=_ChainRest,
                    deviceop_sync=DeviceOp.sync, deviceop_execute=DeviceOp._execute)
