"""Zero-copy interop through DLPack: ``ts.from_dlpack(obj)`` borrows another library's memory
(the foreign object stays alive as long as the tilesafe tensor), and tilesafe tensors export
``__dlpack__`` / ``__dlpack_device__``.

On the ``cpu`` device both directions go through numpy's DLPack support, so every dtype numpy
can represent is exchanged without a copy; bf16 (which numpy cannot represent) is rejected with
an explanation. On ``cuda:N`` both directions go through cuda.core's StridedMemoryView (DLPack
or the CUDA array interface v3 in, DLPack out), and tensors also expose
``__cuda_array_interface__``; the producer's stream is ordered before the consumer's as the
protocols specify.
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
    from . import cuda
    from .device import Device
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


def dlpack_device(tensor: Tensor) -> tuple[int, int]:
    if tensor.device.kind == "cuda":
        return (_DL_CUDA, tensor.device.index)
    return (_DL_CPU, 0)


def _cuda_view(tensor: Tensor) -> Any:
    from . import cuda
    if tensor.dtype is dt.bfloat16:
        raise BufferError("bf16 cuda tensors cannot be exported yet")
    return cuda.export_view(tensor._alloc.data, tensor._offset * tensor.dtype.itemsize,
                            tensor.shape, tensor.strides, tensor.dtype.storage, False)


def cuda_array_interface(tensor: Tensor) -> dict:
    """``__cuda_array_interface__`` v3 of a cuda tensor (strides in bytes, no stream: the
    tensor's producing work is complete when the host holds it)."""
    tensor._check_access("export it", write=False)
    item = tensor.dtype.itemsize
    return {"shape": tensor.shape, "typestr": tensor.dtype.storage.str,
            "data": (tensor._alloc.data.ptr + tensor._offset * item, False),
            "strides": tuple(s * item for s in tensor.strides), "version": 3, "stream": None}


def export_dlpack(tensor: Tensor, *, stream: Any = None, max_version: Any = None,
                  copy: Optional[bool] = None) -> Any:
    """The DLPack capsule of ``tensor`` (a read of its memory: borrow rules apply)."""
    tensor._check_access("export it through DLPack", write=False)
    if tensor.device.kind == "cuda":
        return _cuda_view(tensor).__dlpack__(stream=stream, max_version=max_version)
    if tensor.dtype is dt.bfloat16:
        raise BufferError("bf16 tensors cannot be exported through DLPack on the cpu device")
    array = tensor._array()
    if max_version is not None:
        return array.__dlpack__(max_version=max_version, copy=copy)
    return array.__dlpack__()
