"""Copies between tensors, as lazy DeviceOps: ``t.clone()``, ``t.to(device)``, ``t.copy_(src)``.

A copy reads its source (a shared access) and writes its destination (an exclusive one), under
the same borrow rules as a kernel launch. ``t.copy_(src)`` is graph-safe (its node replays).

``host.tensor`` builds on this module, so tensors are used here through their methods only;
this module imports the DeviceOp machinery and the driver.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import numpy as np

from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp
from ..driver.device import Device, as_device
from ..driver.ledger import LEDGER
from ..driver.platform import platform_of
from ..driver.stream import next_stream
from ..errors import ArgumentError, Location
from .lazy import TensorOp, not_run_yet


def clone(source: Any, device: "Device | str | None" = None) -> DeviceOp:
    """A contiguous copy of ``source`` on ``device`` (default: the source's device)."""
    target = source.device if device is None else as_device(device)
    source._check_usable("copy it")

    def run(stream) -> Any:
        if target == source.device and source.is_contiguous:  # copied on the device
            copy = type(source).filled(source.shape, 0, source.dtype, target)
            return CopyNode(copy, source).replay(stream)
        return type(source).from_values(source.numpy(), source.dtype, target)
    return TensorOp(run, f"clone({source.shape}, to={target})", target, source.shape,
                    source.dtype)


def copy_into(destination: Any, source: Any) -> DeviceOp:
    """Copy ``source`` into ``destination`` (same shape and dtype); the op yields
    ``destination``."""
    where = caller_location()
    if isinstance(source, DeviceOp):
        raise not_run_yet("copy_ needs a tensor as its source", source, where,
                          ": t.copy_(op.sync())")
    if not isinstance(source, type(destination)):
        raise ArgumentError("copy_ needs a tilesafe Tensor as its source", where)
    if source.shape != destination.shape or source.dtype is not destination.dtype:
        raise ArgumentError(f"copy_: source {source.shape} {source.dtype.short} does not match "
                            f"destination {destination.shape} {destination.dtype.short}", where,
                            hint="copies keep shape and dtype; reshape or convert first")
    destination._check_usable("copy into it")
    return CopyOp(destination, source)


class CopyNode:
    """A copy between two existing tensors: graph-safe, replayable (on the host: it is not
    captured into a native graph)."""

    def __init__(self, destination: Any, source: Any, where: Optional[Location] = None):
        self.destination, self.source = destination, source
        self.where = where
        self.device = destination.device
        self.label = f"copy_({destination.shape}, {destination.dtype.short})"

    def replay(self, stream=None) -> Any:
        """Copy, as work in ``stream``'s order when given (a step of a pipeline or a graph
        replay): the loans of work enqueued there before it, which has run by then, do not
        block it."""
        with stream.order_lock if stream is not None else contextlib.nullcontext():
            if self._copy_on_device(stream):
                return self.destination
            with LEDGER:  # no launch may start on either until the copy is written
                self._check(stream)
                values = self.source._read_storage()
                self.destination._write_storage(
                    self.destination.dtype.to_storage(np.asarray(values)))
        return self.destination

    def _check(self, stream: Any) -> None:
        """The source may be read and the destination written (called with the ledger held):
        as work in ``stream``'s order, after the work enqueued there before it, where the copy
        runs in that order (on the device, or through the host where a stream's work has run
        when it is enqueued: the cpu device); elsewhere as a host access."""
        ordered = stream if stream is not None and (
            self._on_device() or not platform_of(self.destination.device).asynchronous) \
            else None
        self.source._check_access("read this tensor", write=False, stream=ordered)
        self.destination._check_access("write this tensor", write=True, stream=ordered)

    def stage(self, stream: Any) -> tuple:
        """A replay's checks (a copy lends nothing), nothing copied (see ``_check``)."""
        with LEDGER:
            self._check(stream)
        return ()

    def run_staged(self, staged: tuple, stream: Any) -> None:
        self.replay(stream)

    def unstage(self, staged: tuple) -> None:
        pass

    def _on_device(self) -> bool:
        """Whether the copy can run without the host (see ``_copy_on_device``)."""
        source, destination = self.source, self.destination
        if source.device != destination.device or not source.is_contiguous or \
                not destination.is_contiguous:
            return False
        nbytes = destination.nbytes
        lo, hi = source._address(), destination._address()
        return not (lo < hi + nbytes and hi < lo + nbytes)

    def _copy_on_device(self, stream: Any) -> bool:
        """Copy two contiguous tensors of one device without the host (a device-to-device
        copy, waited for), checked by ``_check`` under the ledger's lock so no launch starts
        on either until the copy is made. False where the platform has no such copy, a view
        is strided or the two overlap in memory (the host path reads the whole source before
        writing)."""
        source, destination = self.source, self.destination
        if not self._on_device():
            return False
        nbytes = destination.nbytes
        platform = platform_of(destination.device)
        item = destination.dtype.itemsize
        with LEDGER:
            self._check(stream)
            return platform.copy_within(
                (destination._alloc.data, destination._offset * item),
                (source._alloc.data, source._offset * item), nbytes,
                stream if stream is not None else next_stream(destination.device))

    def compatible(self, other) -> "str | None":
        if not isinstance(other, CopyNode):
            return "the replacement is not a copy"
        if (other.destination.shape, other.destination.dtype) != \
                (self.destination.shape, self.destination.dtype):
            return "the replacement copies a different shape or dtype"
        return None


class CopyOp(DeviceOp):
    """The lazy copy made by ``t.copy_(source)``; the result is ``t``."""

    __slots__ = ("_node",)

    def __init__(self, destination: Any, source: Any):
        self._node = CopyNode(destination, source, caller_location())
        super().__init__(self._node.replay, self._node.label, destination.device)

    def graph_nodes(self):
        return [self._node]
