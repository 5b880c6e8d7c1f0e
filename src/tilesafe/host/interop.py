"""Zero-copy imports through DLPack: ``ts.from_dlpack(obj)`` borrows another library's memory
(the foreign object stays alive as long as the tilesafe tensor). Exports are
``host.export``'s.

On the ``cpu`` device imports go through numpy's DLPack support, so every dtype numpy can
represent is exchanged without a copy; bf16 (which numpy cannot represent) is rejected with an
explanation. On ``cuda:N`` they go through cuda.core's StridedMemoryView (DLPack or the CUDA
array interface v3); the producer's stream is ordered before the consumer's as the protocols
specify.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import dtypes as dt
from .._callsite import caller_location
from ..driver import cuda
from ..driver.device import CPU, Device
from ..driver.ledger import Allocation
from ..errors import ArgumentError
from .tensor import Tensor

_DL_CPU, _DL_CUDA = 1, 2


def from_dlpack(obj: Any) -> Tensor:
    """A tilesafe tensor sharing the memory of ``obj`` (numpy, torch, cupy, jax, ...).

    Writes through either side are visible to the other. The tensor keeps ``obj`` alive.
    """
    where = caller_location()
    device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else \
        (_DL_CUDA if hasattr(obj, "__cuda_array_interface__") else _DL_CPU)
    if device_type == _DL_CUDA:
        return _from_cuda(obj, where)
    if device_type != _DL_CPU:
        raise ArgumentError(f"from_dlpack: memory on DLPack device type {device_type} is not "
                            "supported (cpu and cuda only)", where)
    try:
        array = np.from_dlpack(obj)
    except (TypeError, BufferError, RuntimeError) as err:
        raise ArgumentError(f"from_dlpack: cannot import {type(obj).__name__}: {err}", where,
                            hint="bf16 cannot be imported on the cpu device; convert to float32 "
                            "first") from None
    dtype = dt.from_numpy(array.dtype)
    item = array.itemsize
    if any(s % item for s in array.strides) or any(s < 0 for s in array.strides):
        raise ArgumentError("from_dlpack: negative or unaligned strides are not supported",
                            where, hint="make the array contiguous first")
    strides = tuple(s // item for s in array.strides)
    span = 1 + sum((d - 1) * s for d, s in zip(array.shape, strides)) if array.size else 0
    flat = np.lib.stride_tricks.as_strided(array, shape=(span,), strides=(item,),
                                           writeable=array.flags.writeable)
    return Tensor(Allocation(flat, CPU, owner=obj), array.shape, dtype, strides=strides)


def _from_cuda(obj: Any, where) -> Tensor:
    view = cuda.dlpack_view(obj)
    dtype = dt.from_numpy(view.dtype)
    shape = tuple(view.shape)
    strides = tuple(view.strides) if view.strides is not None else None
    probe = Tensor(Allocation(None, CPU), shape, dtype, strides=strides)
    lo, hi = probe.footprint()
    if lo < 0:
        raise ArgumentError("from_dlpack: negative strides are not supported", where)
    buf = cuda.wrap_foreign(int(view.ptr), hi, obj)
    return Tensor(Allocation(buf, Device("cuda", int(view.device_id)), owner=obj), shape, dtype,
                  strides=probe.strides)
