"""Zero-copy imports through DLPack: ``ts.from_dlpack(obj)`` borrows another library's memory
(the foreign object stays alive as long as the tilesafe tensor). Exports are
``host.export``'s.

On the ``cpu`` device imports go through numpy's DLPack support, so every dtype numpy can
represent is exchanged without a copy; bf16 and the 8-bit floats (DLPack codes 4, 10 and 12),
which numpy's DLPack does not know, are bridged by ``host.dlpack_dtypes`` (still zero-copy),
and a numpy array of an ``ml_dtypes`` type is taken as it is. On ``cuda:N`` they go through
cuda.core's StridedMemoryView (DLPack or the CUDA array interface v3), with bf16 and the 8-bit
floats bridged the same way; the producer's stream is ordered before the consumer's as the
protocols specify.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import dtypes as dt
from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp
from ..driver import cuda
from ..driver.device import CPU, Device
from ..driver.ledger import Allocation
from ..errors import ArgumentError
from ..shapes import contiguous_strides, footprint
from .dlpack_dtypes import Retagging, import_retagged
from .lazy import not_run_yet
from .tensor import Tensor

_DL_CPU, _DL_CUDA = 1, 2


def from_dlpack(obj: Any) -> Tensor:
    """A tilesafe tensor sharing the memory of ``obj`` (numpy, torch, cupy, jax, ...; anything
    with ``__dlpack__``, ``__cuda_array_interface__`` or ``__array_interface__``).

    The tensor keeps ``obj`` alive. Its loans are keyed by the memory itself: importing the same
    bytes twice, or a slice beside the whole, gives tensors that conflict like two views of one
    allocation. Memory imported read-only (a read-only numpy array) is never written by
    tilesafe: it cannot be partitioned, borrowed mutably or written.

    What tilesafe cannot see: writes made through ``obj`` itself (or any other handle of the
    foreign library) while tilesafe work that borrows the memory is pending. Those are outside
    the safety model: drive tilesafe work to completion before touching the memory elsewhere.
    """
    where = caller_location()
    if isinstance(obj, DeviceOp):
        raise not_run_yet("from_dlpack takes an array", obj, where,
                          " (a tilesafe tensor needs no import: use it as it is)")
    if hasattr(obj, "__dlpack_device__"):
        device_type = obj.__dlpack_device__()[0]
    elif hasattr(obj, "__cuda_array_interface__"):
        device_type = _DL_CUDA
    elif hasattr(obj, "__dlpack__") or hasattr(obj, "__array_interface__"):
        device_type = _DL_CPU
    else:
        raise ArgumentError(f"from_dlpack: {type(obj).__name__} exposes no DLPack, CUDA array "
                            "or array interface", where,
                            hint="pass a numpy, torch, cupy or jax array (or a tilesafe tensor)")
    if device_type == _DL_CUDA:
        return _from_cuda(obj, where)
    if device_type != _DL_CPU:
        raise ArgumentError(f"from_dlpack: memory on DLPack device type {device_type} is not "
                            "supported (cpu and cuda only)", where)
    try:
        if isinstance(obj, np.ndarray):
            array = obj  # (numpy's own DLPack refuses its ml_dtypes arrays)
        elif hasattr(obj, "__dlpack__"):
            array = import_retagged(obj)
        else:
            array = np.asarray(obj)
    except (TypeError, BufferError, RuntimeError, ValueError) as err:
        raise ArgumentError(f"from_dlpack: cannot import {type(obj).__name__}: {err}", where,
                            hint="convert it to a numeric dtype tilesafe has first") from None
    if array.dtype.hasobject or array.dtype.fields is not None:
        raise ArgumentError(f"from_dlpack: {array.dtype} elements are not a tilesafe dtype",
                            where, hint="convert to a numeric dtype first")
    dtype = dt.from_numpy(array.dtype)
    item = array.itemsize
    if any(s % item for s in array.strides) or any(s < 0 for s in array.strides):
        raise ArgumentError("from_dlpack: negative or unaligned strides are not supported",
                            where, hint="make the array contiguous first")
    strides = tuple(s // item for s in array.strides)
    span = 1 + sum((d - 1) * s for d, s in zip(array.shape, strides)) if array.size else 0
    flat = dt.as_strided(array, shape=(span,), strides=(item,),
                         writeable=array.flags.writeable)
    allocation = Allocation(flat, CPU, owner=obj, base=int(flat.ctypes.data),
                            nbytes=span * item, readonly=not array.flags.writeable)
    return Tensor(allocation, array.shape, dtype, strides=strides)


def _from_cuda(obj: Any, where) -> Tensor:
    proxy = Retagging(obj) if hasattr(obj, "__dlpack__") else None
    view = cuda.dlpack_view(proxy if proxy is not None else obj)
    dtype = proxy.dtype if proxy is not None and proxy.dtype is not None \
        else dt.from_numpy(view.dtype)
    shape = tuple(view.shape)
    strides = tuple(view.strides) if view.strides is not None else contiguous_strides(shape)
    lo, hi = footprint(shape, strides, 0, dtype.itemsize)
    if lo < 0:
        raise ArgumentError("from_dlpack: negative strides are not supported", where)
    buf = cuda.wrap_foreign(int(view.ptr), hi, obj)
    allocation = Allocation(buf, Device("cuda", int(view.device_id)), owner=obj, base=buf.ptr,
                            nbytes=hi, readonly=bool(getattr(view, "readonly", False)))
    return Tensor(allocation, shape, dtype, strides=strides)
