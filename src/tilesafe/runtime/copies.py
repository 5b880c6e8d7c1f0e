"""Copies between tensors, as lazy DeviceOps: ``t.clone()``, ``t.to(device)``, ``t.copy_(src)``.

A copy reads its source (a shared access) and writes its destination (an exclusive one), under
the same borrow rules as a kernel launch.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..exec.deviceop import DeviceOp
from .._callsite import caller_location
from .allocation import LEDGER
from .device import Device, as_device
from .factory import from_values
from .memory import write
from .tensor import Tensor


def clone(source: Tensor, device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """A contiguous copy of ``source`` on ``device`` (default: the source's device)."""
    target = source.device if device is None else as_device(device)
    source._check_usable("copy it")

    def run(stream) -> Tensor:
        return from_values(source.numpy(), source.dtype, target)
    return DeviceOp(run, f"clone({source.shape}, to={target})", target)


def copy_into(destination: Tensor, source: Tensor) -> DeviceOp[Tensor]:
    """Copy ``source`` into ``destination`` (same shape and dtype); the op yields
    ``destination``."""
    where = caller_location()
    if not isinstance(source, Tensor):
        raise ArgumentError("copy_ needs a tilesafe Tensor as its source", where)
    if source.shape != destination.shape or source.dtype is not destination.dtype:
        raise ArgumentError(f"copy_: source {source.shape} {source.dtype.short} does not match "
                            f"destination {destination.shape} {destination.dtype.short}", where,
                            hint="copies keep shape and dtype; reshape or convert first")
    destination._check_usable("copy into it")
    return CopyOp(destination, source)


class CopyNode:
    """A copy between two existing tensors: graph-safe, replayable."""

    def __init__(self, destination: Tensor, source: Tensor):
        self.destination, self.source = destination, source
        self.label = f"copy_({destination.shape}, {destination.dtype.short})"

    def replay(self, stream=None) -> Tensor:
        values = self.source.numpy()
        with LEDGER:  # no launch may start on it until the copy is written
            self.destination._check_access("write this tensor", write=True)
            write(self.destination, self.destination.dtype.to_storage(np.asarray(values)))
        return self.destination

    def compatible(self, other) -> "str | None":
        if not isinstance(other, CopyNode):
            return "the replacement is not a copy"
        if (other.destination.shape, other.destination.dtype) != \
                (self.destination.shape, self.destination.dtype):
            return "the replacement copies a different shape or dtype"
        return None


class CopyOp(DeviceOp[Tensor]):
    """The lazy copy made by ``t.copy_(source)``; the result is ``t``."""

    __slots__ = ("_node",)

    def __init__(self, destination: Tensor, source: Tensor):
        self._node = CopyNode(destination, source)
        super().__init__(self._node.replay, self._node.label, destination.device)

    def graph_nodes(self):
        return [self._node]
