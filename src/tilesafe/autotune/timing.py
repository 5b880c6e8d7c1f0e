"""Timing configs on a device: the *timing strategy* (the one seam between the tuner and a
GPU, so tests can stand in for one) and the arguments timing runs use.

:class:`CudaEventTiming` times ``cuda`` devices with CUDA events: it waits for all earlier
work on the device (so inputs being written on any stream are complete), then times a batch of
back-to-back runs of one config between two events: recorded into a graph and replayed where
the runs can be recorded, else enqueued as one chain on one stream (no host synchronization
between runs), which measures the host instead when the host enqueues more slowly than the
device runs (:class:`HostBound` says so). The tuner interleaves configs over several rounds
and keeps each config's median.

:func:`timing_arguments` makes the arguments of timing runs, which must never change what the
caller sees: a tensor named in ``mutates`` is replaced by a clone, a partition (a kernel's
output) by a partition of a clone, an object by its ``tuning_copy()`` when it has one, and an
object holding a lazy tensor not yet made (an output allocation) by a shallow copy holding a
scratch tensor of the same shape and dtype. A call whose arguments cannot be copied so (a
DeviceOp not yet run, a mapped or atomic borrow) is not timed.

This module may import the host layer (tensors, partitions, constructors) and the driver.
"""

from __future__ import annotations

import copy
import sys
import time
from typing import Any, Callable, Optional

from ..deviceops.deviceop import DeviceOp
from ..driver import cuda
from ..driver.device import Device
from ..deviceops.graph import CudaGraph
from ..driver.stream import Event, Stream
from ..errors import DeviceOpError
from ..host.atomic import AtomicBorrow
from ..host.factory import empty
from ..host.lazy import TensorOp
from ..host.partition import BorrowMut, MappedPartition, Partition
from ..host.tensor import Tensor


class Timing:
    """The timing strategy: which devices it can time, what they are, and how long a config
    takes. The tuner uses the module's :data:`TIMING`; a test may replace it."""

    def can_time(self, device: Device) -> bool:
        """Whether configs are timed on ``device`` (else the first config is used)."""
        raise NotImplementedError

    def describe(self, device: Device) -> tuple[str, str]:
        """``(architecture, device name)``, e.g. ``("sm_90", "NVIDIA H100 80GB HBM3")``."""
        raise NotImplementedError

    def ready(self, device: Device) -> bool:
        """Whether timing may run now (not while a CUDA graph is being captured)."""
        return True

    def stream(self, device: Device) -> Stream:
        """The stream timing runs on, after all earlier work on the device has completed."""
        raise NotImplementedError

    def time_runs(self, config: dict, make_op: Callable[[], DeviceOp], stream: Stream,
                  runs: int) -> float:
        """Milliseconds per run of ``runs`` back-to-back runs of ``make_op()`` (each call
        builds a new op of ``config``), driven on ``stream``."""
        raise NotImplementedError


class CudaEventTiming(Timing):
    """Times ``cuda`` devices with CUDA events (see the module docstring)."""

    def can_time(self, device: Device) -> bool:
        return device.kind == "cuda"

    def describe(self, device: Device) -> tuple[str, str]:
        major, minor = cuda.compute_capability(device.index)
        return f"sm_{major}{minor}", str(cuda.device(device.index).name)

    def ready(self, device: Device) -> bool:
        # a device-wide wait (and any allocation) would break a torch graph being captured
        torch = sys.modules.get("torch")
        try:
            return torch is None or not torch.cuda.is_current_stream_capturing()
        except Exception:  # (a torch without CUDA)
            return True

    def stream(self, device: Device) -> Stream:
        cuda.make_current(device.index).sync()  # earlier work, on any stream, is complete
        return Stream(device)

    def time_runs(self, config: dict, make_op: Callable[[], DeviceOp], stream: Stream,
                  runs: int) -> float:
        """Milliseconds per run. The runs are recorded into a graph and timed as one replay
        when they can be (so that the host's work to make each launch, which can exceed a
        small kernel's device time, is not what is measured); else enqueued as one chain,
        and :class:`HostBound` is raised when a chain of two or more runs kept the device
        waiting for the host (:func:`host_bound`)."""
        start, end = Event(timing=True), Event(timing=True)
        graph = _recorded(make_op, stream, runs)
        if graph is not None:
            graph.launch(stream).sync_on(stream)  # (a first replay instantiates the graph)
            start.record(stream)
            graph.launch(stream).then(lambda result: end.record(stream)).sync_on(stream)
            end.synchronize()
            return start.elapsed_ms(end) / runs
        enqueued: list = []

        def mark_end(result: Any) -> Any:  # (runs as the chain's last step is enqueued)
            end.record(stream)
            enqueued.append(time.perf_counter())
            return result
        began = time.perf_counter()
        start.record(stream)
        op = make_op()
        for _ in range(runs - 1):
            op = op.then(lambda _result: make_op())
        op.then(mark_end).sync_on(stream)
        end.synchronize()
        device_ms = start.elapsed_ms(end)
        host_ms = (enqueued[0] - began) * 1e3
        if runs > 1 and host_bound(device_ms, host_ms):
            raise HostBound(device_ms / runs, host_ms / runs)
        return device_ms / runs


#: a chain of runs whose device time is at most this many times the host's time to enqueue it
#: measured the host (:func:`host_bound`)
HOST_BOUND_MARGIN = 1.25


def host_bound(device_ms: float, host_ms: float) -> bool:
    """Whether a chain of runs that took the device ``device_ms`` between its two events, and
    the host ``host_ms`` to enqueue, measured the host: a device that finishes within
    :data:`HOST_BOUND_MARGIN` times the enqueueing spent it waiting for work, so the time is
    the host's, not the config's: the config takes the device less time than that (a chain
    the device was busy with takes it longer than the host took to enqueue it)."""
    return device_ms <= host_ms * HOST_BOUND_MARGIN


class HostBound(Exception):
    """Timing runs that could not be recorded into a graph kept the device waiting for the
    host: ``device_ms`` and ``host_ms`` per run (:func:`host_bound`)."""

    def __init__(self, device_ms: float, host_ms: float):
        super().__init__(f"the device took {device_ms:.4f} ms a run and the host "
                         f"{host_ms:.4f} ms to enqueue one")
        self.device_ms, self.host_ms = device_ms, host_ms


def _recorded(make_op: Callable[[], DeviceOp], stream: Stream, runs: int) -> Any:
    """A graph of ``runs`` ops from ``make_op``, or None when one cannot be recorded (it
    allocates, or decides its next step only when it runs)."""
    try:
        with CudaGraph.scope(stream) as graph:
            for _ in range(runs):
                graph.record(make_op())
    except DeviceOpError:
        return None
    return graph


#: the strategy the tuner uses
TIMING: Timing = CudaEventTiming()


class NotTimeable(Exception):
    """A call whose arguments timing runs cannot copy (the message says which and why)."""


def timing_arguments(bound: dict, mutates: tuple) -> dict:
    """Copies of a call's arguments (by parameter name) for timing runs (module docstring);
    raises :class:`NotTimeable`."""
    for name, value in bound.items():  # (refused before anything is copied)
        _check_timeable(name, value, name in mutates)
    return {name: _timing_copy(name, value, name in mutates) for name, value in bound.items()}


def _check_timeable(name: str, value: Any, mutated: bool) -> None:
    """NotTimeable if timing runs cannot copy the argument (checked for every argument before
    any is copied)."""
    if isinstance(value, DeviceOp):
        raise NotTimeable(f"argument '{name}' is {value.label}, a DeviceOp not run yet")
    if isinstance(value, (MappedPartition, AtomicBorrow, BorrowMut)):
        raise NotTimeable(f"argument '{name}' is a {type(value).__name__}, which timing runs "
                          "cannot copy")
    if isinstance(value, (tuple, list)):
        for v in value:
            _check_timeable(name, v, mutated)
        return
    if isinstance(value, (Tensor, Partition)) or callable(getattr(value, "tuning_copy", None)):
        return
    lazy = [(attr, v) for attr, v in _attributes(value) if isinstance(v, DeviceOp)]
    if not lazy and mutated:
        raise NotTimeable(f"argument '{name}' is named in mutates= but is a "
                          f"{type(value).__name__}, not a tensor")
    for attr, op in lazy:
        if not isinstance(op, TensorOp):
            raise NotTimeable(f"argument '{name}' holds {op.label} ('{attr}'), a DeviceOp not "
                              "run yet")


def _timing_copy(name: str, value: Any, mutated: bool) -> Any:
    """The copy of an argument :func:`_check_timeable` accepted."""
    if isinstance(value, Partition):
        tensor = value._tensor  # (read only: the copy's data and layout)
        return tensor.clone().sync().partition(value.tile_shape, at=value.positions) \
            if value.positions is not None else tensor.clone().sync().partition(value.tile_shape)
    if isinstance(value, Tensor):
        return value.clone().sync() if mutated else value
    if isinstance(value, (tuple, list)):
        return type(value)(_timing_copy(name, v, mutated) for v in value)
    maker = getattr(value, "tuning_copy", None)
    if callable(maker):
        return maker()
    lazy = {attr: v for attr, v in _attributes(value) if isinstance(v, DeviceOp)}
    if not lazy:
        return value
    duplicate = copy.copy(value)
    for attr, op in lazy.items():
        setattr(duplicate, attr, empty(op.shape, dtype=op.dtype, device=op.device).sync())
    return duplicate


def _attributes(value: Any) -> list[tuple[str, Any]]:
    """An object's attributes (``__dict__`` and ``__slots__``), for lazy tensors it holds."""
    found = list(getattr(value, "__dict__", {}).items())
    for cls in type(value).__mro__:
        for attr in getattr(cls, "__slots__", ()):
            if attr not in ("__dict__", "__weakref__") and hasattr(value, attr):
                found.append((attr, getattr(value, attr)))
    return found


def device_of(values: Any) -> Optional[Device]:
    """The device of the first argument that has one (a tensor, partition or lazy op)."""
    for value in values:
        device = getattr(value, "device", None) if not isinstance(value, (tuple, list)) \
            else device_of(value)
        if isinstance(device, Device):
            return device
    return None
