"""Moving element data between host numpy arrays and tensors on any device.

The one place that knows how each device stores bytes: ``cpu`` tensors are numpy views of a
1-D storage array; ``cuda:N`` tensors live in stream-ordered device memory (runtime.cuda).
Tensor, constructors and copies call these functions and stay device-agnostic.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from .allocation import Allocation
from .device import Device
from .tensor import Tensor


def from_host(storage: np.ndarray, dtype: DType, device: Device) -> Tensor:
    """A new contiguous tensor on ``device`` holding ``storage`` (already in storage dtype)."""
    storage = np.array(storage, order="C", copy=True)
    if device.kind == "cpu":
        return Tensor(Allocation(storage.reshape(-1), device), storage.shape, dtype)
    from . import cuda
    from ..exec.stream import next_stream
    stream = next_stream(device).native
    buf = cuda.allocate(device.index, storage.nbytes, stream)
    cuda.host_to_device(buf.ptr, storage, stream)
    return Tensor(Allocation(buf, device), storage.shape, dtype)


def read(tensor: Tensor) -> np.ndarray:
    """A host copy of the tensor's elements, in its storage dtype and shape."""
    if tensor.device.kind == "cpu":
        return np.array(tensor._array(), copy=True)
    from . import cuda
    from ..exec.stream import next_stream
    lo, hi = tensor.footprint()
    buf = tensor._alloc.data
    raw = cuda.device_to_host(buf.ptr + lo, hi - lo, next_stream(tensor.device).native)
    item = tensor.dtype.itemsize
    flat = raw.view(tensor.dtype.storage)
    base = tensor._offset - lo // item
    view = np.lib.stride_tricks.as_strided(flat[base:], shape=tensor.shape,
                                           strides=tuple(s * item for s in tensor.strides))
    return np.array(view, copy=True)


def write(tensor: Tensor, storage: np.ndarray) -> None:
    """Overwrite the tensor's elements with ``storage`` (storage dtype, the tensor's shape)."""
    if tensor.device.kind == "cpu":
        tensor._array()[...] = storage
        return
    if not tensor.is_contiguous:
        raise NotImplementedError("writing a non-contiguous cuda tensor from the host is not "
                                  "supported yet; write a contiguous tensor and take the view")
    from . import cuda
    from ..exec.stream import next_stream
    ptr = tensor._alloc.data.ptr + tensor._offset * tensor.dtype.itemsize
    cuda.host_to_device(ptr, np.ascontiguousarray(storage, dtype=tensor.dtype.storage),
                        next_stream(tensor.device).native)
