"""Streams and events: the ordered queues device work runs on, and markers for ordering across
them.

A :class:`Stream` belongs to one device. tilesafe owns its streams or wraps a foreign one
(anything with ``__cuda_stream__``, e.g. torch or cupy streams, or a raw handle). Drivers
without an explicit stream take one from the device's pool, round-robin
(:func:`next_stream`). On the ``cpu`` device work runs when it is enqueued, so a stream is an
ordering label and an :class:`Event` completes as soon as it is recorded (the device's
platform, ``driver.platform``, says which).

A stream also keeps the loans of the work enqueued on it until it is synchronized: that is
where the host learns the work is complete. This module also holds the thread's *current*
stream (that of the pipeline running on the thread). It imports only the driver package.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Any, Callable, Optional

from .. import _compiled
from .._callsite import caller_location
from ..errors import DeviceOpError
from .device import Device, as_device
from .ledger import release_all
from .platform import Platform, platform_of

_FAST = _compiled.FASTPATH
#: makes a stream's native stream once (two threads creating one each would leave one of
#: them launching on a stream the other's garbage collection destroyed)
_NATIVE_CREATION = threading.Lock()

POOL_SIZE = 4


class _StreamState:
    """What a stream keeps for the host: its device, the loans of work enqueued on it and the
    borrowed partitions that work spends, and its driver handle once known.

    (The Python definition of ``StreamCore``, the base of :class:`Stream`; the compiled fast
    path has the same type in C.)"""

    __slots__ = ("device", "_pending", "_spent", "_native_address")

    def on_complete(self, loans: list, borrowed_partitions: list, where: Any) -> None:
        """Release ``loans`` and hand back ``borrowed_partitions`` (each item's ``_spend`` is
        called: a borrowed partition is spent, a fault record read, memory held for the work
        let go) when this stream is next synchronized (the point where the host knows the work
        is complete)."""
        # No lock needed: the work was enqueued before this call, so a synchronize on another
        # thread that takes the list this lands in began its wait after the enqueue.
        self._pending.extend(loans)
        if borrowed_partitions:
            self._spent.extend((p, where) for p in borrowed_partitions)

    def synchronize(self) -> None:
        """Wait until all work enqueued on this stream is complete (immediate on cpu), then
        end the loans of that work and hand back what it borrowed besides (borrowed partitions
        are spent; a kernel's fault record is read, and the first failure it reports is raised
        once everything is handed back).

        Only the loans registered before the wait begins are ended: their work was enqueued
        before it (a launch registers its loans after enqueueing), so the wait covers it.
        Another thread may enqueue on a shared stream while this one waits; whether the wait
        covers that work is undefined, so its loans stay until the next synchronize."""
        pending, self._pending = self._pending, []
        spent, self._spent = self._spent, []
        try:
            self._platform.synchronize(self)
        except BaseException:
            self._pending[:0], self._spent[:0] = pending, spent  # still pending
            raise
        _hand_back(pending, spent)


class HeldUntilComplete:
    """What work handed to a stream uses besides its loans (tensors, allocations: ``held``),
    kept alive with the work: an item of :meth:`Stream.on_complete`, let go by the
    synchronize or ``release_completed`` that sees the work complete."""

    __slots__ = ("held",)

    def __init__(self, held: Any):
        self.held = held

    def _spend(self, why: str, where: Any) -> None:
        self.held = None


def _hand_back(pending: list, spent: list) -> None:
    """Hand back what completed work borrowed besides its loans (``spent``: ``(item, where)``),
    every item whatever the others raise, then end its loans ``pending``; then raise the first
    failure an item reported (a fault record's failed run-time check). Borrowed partitions are
    spent before the loans end, so no launch in another thread can take a partition in
    between (its memory free, the partition not yet spent)."""
    first_error = None
    for item, where in spent:
        try:
            item._spend("was borrowed by a launch that completed", where)
        except Exception as err:  # (a fault record reporting a failed bounds check)
            first_error = first_error or err
    release_all(pending)
    if first_error is not None:
        raise first_error


StreamCore = _FAST.StreamCore if _FAST is not None else _StreamState


class Stream(StreamCore):
    """An ordered queue of device work on one device.

    Args:
        device: the device (default: the default device).
        handle: wrap an existing stream instead of owning one: an object with
            ``__cuda_stream__`` (torch, cupy, cuda.core) or an integer handle.
    """

    __slots__ = ("id", "foreign", "handle", "_native", "_platform", "order_lock", "__dict__")
    #: the hint of a borrow error blocked by this stream's work, where the default (drive it
    #: to completion) does not apply: set by :meth:`mark`
    pending_hint: Optional[str] = None
    _ids = itertools.count()

    def __init__(self, device: "Device | str | None" = None, *, handle: Any = None):
        self.device = as_device(device)
        self.id = next(Stream._ids)
        self.foreign = handle
        self.handle = _raw_handle(handle) if handle is not None else None
        self._native: Any = None
        self._native_address: Optional[int] = None
        self._pending: list = []
        self._spent: list = []
        self._platform: Platform = platform_of(self.device)
        #: held by host-run work on this stream (a kernel on the interpreter, a copy, a whole
        #: graph replay): where work runs when it is enqueued, a stream runs it in order, one
        #: piece at a time, as a device stream does, whatever thread enqueues it
        self.order_lock = threading.RLock()
        #: marked work (``mark``): ``(event, loans, borrowed items)`` in enqueue order
        self._marks: collections.deque = collections.deque()
        self._marks_lock = threading.Lock()

    @property
    def native(self) -> Any:
        """The native stream behind this one (a cuda.core stream for ``cuda:N``; created on
        first use, once: threads that first use a stream together get the same one). A
        ``cpu`` stream has none (TypeError)."""
        if self._native is None:
            with _NATIVE_CREATION:
                if self._native is None:
                    self._native = self._platform.native_stream(self.device, self.foreign)
        return self._native

    @property
    def native_address(self) -> int:
        """The driver handle (CUstream) of a ``cuda:N`` stream, as an int."""
        if self._native_address is None:
            address = int(self.native.handle)  # the one native stream: every thread agrees
            self._native_address = address
        return self._native_address

    def mark(self) -> None:
        """Hand the loans of the work enqueued on this stream so far (and what it borrowed
        besides) to a marker: an event recorded now. :meth:`release_completed` ends them once
        that work has completed, without waiting for it; a later :meth:`synchronize` does not
        see them. For callers that enqueue on a stream they never synchronize (work enqueued
        on another library's stream, which that library waits for)."""
        pending, self._pending = self._pending, []
        spent, self._spent = self._spent, []
        if not pending and not spent:
            return
        self.pending_hint = MARKED_WORK_HINT
        event = Event().record(self)
        with self._marks_lock:
            self._marks.append((event, pending, spent))

    def release_completed(self) -> None:
        """End the loans of marked work that has completed (in the order it was marked; an
        event query each, no wait), and hand back what it borrowed: a kernel's fault report
        is raised here (the first, once everything completed is handed back)."""
        first_error = None
        while True:
            with self._marks_lock:
                if not self._marks or not self._marks[0][0].query():
                    break
                _, pending, spent = self._marks.popleft()
            try:
                _hand_back(pending, spent)
            except Exception as err:  # (every completed mark is handed back first)
                first_error = first_error or err
        if first_error is not None:
            raise first_error

    def _release_recorded(self, keep: Callable[[Any], bool] = lambda item: False) -> list:
        """End now the loans of the work enqueued on this stream so far, for work that was
        recorded rather than run (a graph capture in progress on the stream: nothing ran, and
        the graph's replays are ordered by whoever replays it). What it borrowed besides is
        handed back (before the loans end, as at a synchronize), except the items ``keep``
        selects, which are returned to the caller. Private: called on a stream whose work did
        run, it would end loans of work still running."""
        pending, self._pending = self._pending, []
        spent, self._spent = self._spent, []
        kept = []
        for item, where in spent:
            if keep(item):
                kept.append(item)
            else:
                item._spend("was borrowed by a launch recorded into a graph", where)
        release_all(pending)
        return kept

    @classmethod
    def wrap(cls, foreign: Any, device: "Device | str | None" = None) -> "Stream":
        """A tilesafe view of another library's stream (it stays owned by that library)."""
        return cls(device, handle=foreign)

    def __repr__(self) -> str:
        kind = "wrapped" if self.foreign is not None else "owned"
        return f"<Stream {self.id} on {self.device} ({kind})>"


#: how a borrow error blocked by marked work (:meth:`Stream.mark`) says to proceed: nothing of
#: it can be driven from the host, it ends once the stream has run it
MARKED_WORK_HINT = ("that work was enqueued on another library's stream (a call with torch "
                    "tensors); wait for that stream (torch.cuda.synchronize(), or order this "
                    "work after it on the same stream) and call again: completed work's loans "
                    "end at the next call with torch tensors, or at "
                    "tilesafe.kernels.release_completed()")


def _raw_handle(handle: Any) -> int:
    if hasattr(handle, "__cuda_stream__"):
        value = handle.__cuda_stream__()
        return int(value[1] if isinstance(value, tuple) else value)
    if isinstance(handle, int):
        return handle
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(handle, attr):
            return int(getattr(handle, attr))
    raise TypeError(f"cannot use {type(handle).__name__} as a stream: it has no "
                    "__cuda_stream__ and is not an integer handle")


class Event:
    """A point in a stream's work; other streams (or the host) can wait for it."""

    def __init__(self, *, timing: bool = False) -> None:
        """``timing=True`` records a timestamp too, for :meth:`elapsed_ms` (a CUDA event with
        timing costs a little more to record)."""
        self._native: Any = None
        self._recorded = False
        self._timing = bool(timing)
        self._host_time: Optional[float] = None
        self._device: Optional[Device] = None

    def record(self, stream: Stream) -> "Event":
        """Mark the current end of ``stream``'s work (cpu: already complete)."""
        platform = platform_of(stream.device)
        self._native = platform.record_event(stream, timing=self._timing)
        # where work completes as it is enqueued (cpu), now is when the work before completed
        self._host_time = time.perf_counter() if self._native is None else None
        self._device = stream.device
        self._recorded = True
        return self

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end``, both recorded with ``timing=True`` on one
        device and ``end`` complete (call ``end.synchronize()`` first). On a GPU the device's
        clock (CUDA events); on ``cpu`` the host's, at the records.

        Raises:
            DeviceOpError: an event not recorded, recorded without ``timing=True``, or the
                two recorded on different devices."""
        for event, which in ((self, "start"), (end, "end")):
            if not event._recorded or not event._timing:
                why = "was never recorded" if not event._recorded else \
                    "was made without timing=True"
                raise DeviceOpError(f"{caller_location()}: the {which} event {why}, so it has "
                                    "no timestamp\n  fix: ts.Event(timing=True).record(stream) "
                                    "for both events")
        if self._device != end._device:
            raise DeviceOpError(f"{caller_location()}: the events were recorded on "
                                f"{self._device} and {end._device}; elapsed time needs one "
                                "device\n  fix: record both on streams of one device")
        if self._native is None:
            return (end._host_time - self._host_time) * 1e3
        return platform_of(self._device).elapsed_ms(self._native, end._native)

    def query(self) -> bool:
        """True once the recorded work has completed (False before it is recorded)."""
        if self._native is not None:
            return self._native.is_done
        return self._recorded

    def synchronize(self) -> None:
        """Block the host until the recorded work has completed; an event never recorded has
        nothing to wait for, and raises (waiting would never end)."""
        if not self._recorded:
            raise DeviceOpError(f"{caller_location()}: this Event was never recorded, so there "
                                "is nothing to wait for\n  fix: event.record(stream) after "
                                "enqueueing the work to wait for")
        if self._native is not None:
            self._native.sync()

    def wait(self, stream: Stream) -> None:
        """Make later work on ``stream`` wait for this event (cpu: nothing to wait for)."""
        if self._native is not None and platform_of(stream.device).asynchronous:
            stream.native.wait(self._native)


class _Pool:
    """Each device's streams, handed out round-robin. The pool fills under a lock; after that a
    full pool's ``itertools.cycle`` (atomic under the GIL) serves without locking. Keyed by
    ``(kind, index)``: a tuple hashes in C, a Device (a dataclass) runs Python to hash."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[tuple[str, int], list[Stream]] = {}
        self._cycles: dict[tuple[str, int], Any] = {}

    def next_stream(self, device: Device) -> Stream:
        key = (device.kind, device.index)
        cycle = self._cycles.get(key)
        if cycle is not None:
            return next(cycle)
        with self._lock:
            streams = self._streams.setdefault(key, [])
            if len(streams) < POOL_SIZE:
                streams.append(Stream(device))
                if len(streams) == POOL_SIZE:
                    self._cycles[key] = itertools.cycle(streams)
                return streams[-1]
            return next(self._cycles[key])


_POOL = _Pool()
_CURRENT = threading.local()


def current_stream() -> Optional[Stream]:
    """The stream of the pipeline running on this thread, if any (ops created while it runs,
    e.g. inside ``then``, are enqueued on it)."""
    return getattr(_CURRENT, "stream", None)


def set_current_stream(stream: Optional[Stream]) -> Optional[Stream]:
    """Make ``stream`` this thread's current pipeline stream; returns the previous one."""
    saved = getattr(_CURRENT, "stream", None)
    _CURRENT.stream = stream
    return saved


def next_stream(device: "Device | str | None" = None) -> Stream:
    """The next stream of ``device``'s pool (round-robin over a few streams)."""
    return _POOL.next_stream(device if isinstance(device, Device) else as_device(device))


if _FAST is not None:
    _FAST.configure(current=_CURRENT, pool_cycles=_POOL._cycles, next_stream=next_stream)
