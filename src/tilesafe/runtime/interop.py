"""Zero-copy interop through DLPack: ``ts.from_dlpack(obj)`` borrows another library's memory
(the foreign object stays alive as long as the tilesafe tensor), and tilesafe tensors export
``__dlpack__`` / ``__dlpack_device__``.

On the ``cpu`` device both directions go through numpy's DLPack support, so every dtype numpy
can represent is exchanged without a copy; bf16 (which numpy cannot represent) is rejected with
an explanation.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError
from .allocation import Allocation
from .._callsite import caller_location
from .device import CPU
from .tensor import Tensor

_DL_CPU = 1


def from_dlpack(obj: Any) -> Tensor:
    """A tilesafe tensor sharing the memory of ``obj`` (numpy, torch, cupy, jax, ...).

    Writes through either side are visible to the other. The tensor keeps ``obj`` alive.
    """
    where = caller_location()
    device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else _DL_CPU
    if device_type != _DL_CPU:
        raise ArgumentError(f"from_dlpack: memory on DLPack device type {device_type} is not "
                            "supported by this version (cpu only)", where)
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


def dlpack_device(tensor: Tensor) -> tuple[int, int]:
    return (_DL_CPU, 0)


def export_dlpack(tensor: Tensor, *, stream: Any = None, max_version: Any = None,
                  copy: Optional[bool] = None) -> Any:
    """The DLPack capsule of ``tensor`` (a read of its memory: borrow rules apply)."""
    tensor._check_access("export it through DLPack", write=False)
    if tensor.dtype is dt.bfloat16:
        raise BufferError("bf16 tensors cannot be exported through DLPack on the cpu device")
    array = tensor._array()
    if max_version is not None:
        return array.__dlpack__(max_version=max_version, copy=copy)
    return array.__dlpack__()
