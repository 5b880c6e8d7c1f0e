"""The DeviceOp of a kernel launch, and its graph node.

A launch whose arguments are all concrete is validated when it is created and borrows its
arguments until it completes (or is dropped undriven, or recorded into a graph, which gives the
loans back: each replay borrows for as long as it runs). A launch taking pending DeviceOps as
arguments drives them first, on the same stream, then validates. A recorded launch is a
:class:`KernelNode` of a graph (``deviceops.graph``).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .. import _compiled
from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp, OpCore, claim, resolve
from ..driver.ledger import ownership_epoch, release_all
from ..driver.stream import Stream, current_stream, next_stream
from ..errors import Location, TilesafeError
from .checks import PreparedLaunch, handed_back, prepare, replay_borrows

_FAST = _compiled.FASTPATH


class _CaptureStream:
    """The stream a graph is being captured on, as a bound launch sees it."""

    __slots__ = ("native_address",)

    def __init__(self, handle: int):
        self.native_address = handle


class KernelNode:
    """A kernel launch with fixed arguments, replayable any number of times."""

    def __init__(self, kernel: Any, args: tuple, grid: Optional[Sequence[int]],
                 where: Location, prepared: PreparedLaunch):
        self.kernel, self.args, self.grid, self.where = kernel, args, grid, where
        self.device = prepared.device
        self.label = f"{kernel.name}(...) recorded at {where}"
        # what recording validated, without loans: a capture packs the launch from it
        self._validated = PreparedLaunch(prepared.specialization, prepared.grid, prepared.args,
                                         [], where, prepared.device, prepared.plan)
        self._captured: Any = None  # the bound launch a capture put in the native graph

    @property
    def borrow_key(self) -> tuple:
        """Equal for launches of the same argument objects (they borrow the same memory)."""
        return tuple(map(id, self.args))

    @property
    def launch_counter(self) -> Any:
        """The kernel, whose ``launch_count`` counts replays."""
        return self.kernel

    def borrows(self) -> list:
        """What a replay borrows: ``(argument, action, allocation, lo, hi, mutable)`` for every
        argument that touches memory."""
        return replay_borrows(self.kernel.params, self.args)

    def capture(self, builder: Any) -> None:
        """Add this launch to a native graph being built (no loans: each replay checks and
        borrows the arguments before the graph runs)."""
        self._captured = self.kernel._bound(self._validated)
        self._captured.launch(_CaptureStream(int(builder.stream.handle)))

    def compile(self) -> None:
        """Compile (or load from the disk cache) the kernel for this launch now, so the first
        replay only binds it."""
        self.kernel._executable_for(self._validated)

    def fault_records(self) -> list:
        """What each replay of the captured launch lends besides its arguments and reads back
        at the replay's synchronize: the fault record the captured launch writes, if its kernel
        has checked accesses."""
        record = getattr(self._captured, "fault_record", None)
        return [record] if record is not None else []

    def check_permitted(self, where: Location) -> None:
        """A replay launches the kernel again: an unsafe kernel's replay is made only inside
        ``with ts.unsafe():``, as its launch is."""
        self.kernel._check_permitted("replayed from a graph", where)

    def replay(self, stream: Stream) -> None:
        self.run_staged(self.stage(stream), stream)

    def stage(self, stream: Stream) -> PreparedLaunch:
        """A replay's checks and loans, for a launch on ``stream`` (nothing runs)."""
        k = self.kernel
        return prepare(k.rules, self.args, self.grid, self.where, stream=stream,
                       plans=k._plans)

    def run_staged(self, prepared: PreparedLaunch, stream: Stream) -> None:
        self.kernel._run_prepared(prepared, stream, spend=False)

    def unstage(self, prepared: PreparedLaunch) -> None:
        """Give back the loans of a staged replay that will not run."""
        release_all(prepared.loans)

    def compatible(self, other: Any) -> Optional[str]:
        if not isinstance(other, KernelNode) or other.kernel is not self.kernel:
            return "the replacement launches a different kernel"
        if other._validated.specialization != self._validated.specialization:
            return "the replacement's arguments differ in dtype, static shape or constants"
        if other._validated.grid != self._validated.grid:
            return "the replacement has a different grid"
        return None


class _LaunchState(OpCore):
    """What a launch op keeps: its kernel, arguments, grid and line, and, when it was
    validated at creation, the prepared launch (with its loans) and the pipeline stream it
    was validated for. Driving it (``sync``; ``_execute`` is DeviceOp's) and dropping it
    undriven (``__del__``, which gives the loans back) are defined here.

    (The Python definition of ``LaunchCore``, the base of :class:`LaunchOp`; the compiled fast
    path has the same type in C, which also runs ``_execute`` of a launch that only needs its
    packed arguments enqueued.)"""

    __slots__ = ("_kernel", "_args", "_grid", "_where", "_early", "_early_stream")

    def sync(self) -> tuple:
        """Run on the device's next pool stream and wait. A launch validated at creation
        takes a direct path (it runs no nested ops, so no pipeline state is needed)."""
        if self._early is None or self._driven_at is not None or self._early_stream is not None:
            return DeviceOp.sync(self)
        stream = next_stream(self.device)
        if claim(self, "driven", caller_location()) is not None:  # (another thread's drive)
            return DeviceOp.sync(self)  # (which raises the second drive's error)
        try:
            return self._kernel._run_prepared(self._early, stream)
        finally:
            stream.synchronize()

    def _only_enqueues(self, stream: Stream) -> bool:
        """Validated at creation (outside a pipeline or inside the one running on ``stream``)
        and already bound to a backend launch that only enqueues: running it is one enqueue."""
        early = self._early
        return early is not None and self._early_stream in (None, stream) and \
            early.plan is not None and early.plan.bound is not None and \
            early.plan.bound.enqueues_only

    def __del__(self) -> None:
        # an op dropped without being driven (or recorded) gives its loans back
        early = self._early
        if early is not None and self._driven_at is None and early.loans:
            release_all(early.loans)


LaunchCore = _FAST.LaunchCore if _FAST is not None else _LaunchState


class LaunchOp(LaunchCore, DeviceOp[tuple]):
    """A lazy kernel launch (what calling a ``@ts.kernel`` returns)."""

    __slots__ = ("_early_epoch",)

    def __init__(self, kernel: Any, args: tuple, grid: Optional[Sequence[int]],
                 where: Location):
        self._run = self._label = self._driven_at = None
        self._kernel, self._args, self._grid, self._where = kernel, args, grid, where
        self._early = None
        self._early_stream = None
        for a in args:
            if isinstance(a, DeviceOp):  # the device is the one its pending arguments use
                self.device = next((getattr(a, "device", None) for a in args
                                    if getattr(a, "device", None) is not None), None)
                return
        # Inside a running pipeline, work already enqueued on its stream does not block the
        # launch; the loans are then valid for that stream only (see _perform).
        self._early_stream = current_stream()
        self._early_epoch = ownership_epoch()
        self._early = prepare(kernel.rules, args, grid, where, stream=self._early_stream,
                              plans=kernel._plans)
        self.device = self._early.device

    @property
    def label(self) -> str:
        return f"{self._kernel.name}(...) launched at {self._where}"

    def _perform(self, stream: Stream) -> tuple:
        k = self._kernel
        prepared = self._early
        if prepared is not None and self._early_stream is not None and (
                self._early_stream is not stream or
                getattr(self, "_early_epoch", None) != ownership_epoch()):
            # validated for another pipeline's stream: check again for the one it runs on.
            # Or validated inside a pipeline step and driven after an ownership change: its
            # loans, lent to the step's stream, did not block the work enqueued there
            # meanwhile (a .shared() result, a move of a tensor it writes), although it was
            # not enqueued yet; checked again, it is refused where that work changed its
            # arguments.
            release_all(prepared.loans)
            prepared = None
        if prepared is None:
            args = tuple(resolve(a, stream) for a in self._args)
            try:
                prepared = prepare(k.rules, args, self._grid, self._where, stream=stream,
                                   plans=k._plans)
            except TilesafeError as err:  # the arguments come back with the error
                err.arguments = args
                raise
        return k._run_prepared(prepared, stream)

    def graph_nodes(self) -> Optional[list]:
        if self._early is None:
            return None  # arguments still to be produced: they may allocate
        return [KernelNode(self._kernel, self._args, self._grid, self._where, self._early)]

    def _recorded(self) -> Optional[tuple[list, Any]]:
        """Recorded, a launch hands back what running it would: its tensor-like arguments."""
        nodes = self.graph_nodes()
        if nodes is None:
            return None
        early = self._early
        return nodes, (early.plan.result if early.plan is not None else handed_back(early.args))

    def _consume(self, how: str) -> None:
        super()._consume(how)
        if how != "driven" and self._early is not None:
            release_all(self._early.loans)


if _FAST is not None:
    _FAST.configure(LaunchOp=LaunchOp)
