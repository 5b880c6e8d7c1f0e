"""Copies between tensors, as lazy DeviceOps: ``t.clone()``, ``t.to(device)``, ``t.copy_(src)``.

A copy reads its source (a shared access) and writes its destination (an exclusive one), under
the same borrow rules as a kernel launch.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..exec.deviceop import DeviceOp
from .._callsite import caller_location
from .device import Device, as_device
from .factory import from_values
from .tensor import Tensor


def clone(source: Tensor, device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """A contiguous copy of ``source`` on ``device`` (default: the source's device)."""
    target = source.device if device is None else as_device(device)
    source._check_usable("copy it")

    def run() -> Tensor:
        return from_values(source.numpy(), source.dtype, target)
    return DeviceOp(run, f"clone({source.shape}, to={target})")


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

    def run() -> Tensor:
        values = source.numpy()
        destination._check_access("write this tensor", write=True)
        destination._array()[...] = destination.dtype.to_storage(np.asarray(values))
        return destination
    return DeviceOp(run, f"copy_({destination.shape})")
