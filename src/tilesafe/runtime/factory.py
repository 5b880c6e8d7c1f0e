"""Tensor constructors. Each returns a lazy DeviceOp that allocates and fills when driven."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..exec.deviceop import DeviceOp
from .device import Device, as_device
from .tensor import Tensor, _normalize_shape

Shape = "int | Sequence[int]"


def _from_values(values: np.ndarray, dtype: DType, device: Device) -> Tensor:
    storage = np.ascontiguousarray(dtype.to_storage(dtype.round(values)))
    return Tensor(storage.reshape(-1), storage.shape, dtype, device=device)


def _op(label: str, make) -> DeviceOp[Tensor]:
    return DeviceOp(make, label)


def full(shape: Shape, value: Any, dtype: Any = dt.float32,
         device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """A tensor of ``shape`` filled with ``value`` (lazy: returns a DeviceOp)."""
    dims, dtype, dev = _normalize_shape(shape), dt.as_dtype(dtype), as_device(device)
    if not dtype.fits(value) and not (dtype.is_float and isinstance(value, (int, float))):
        raise ValueError(f"fill value {value!r} does not fit {dtype.name}")
    return _op(f"full({dims}, {value!r}, {dtype.short})",
               lambda: _from_values(np.full(dims, value, dtype=np.float64 if dtype.is_float
                                            else dtype.compute), dtype, dev))


def zeros(shape: Shape, dtype: Any = dt.float32,
          device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """A tensor of zeros (lazy)."""
    return full(shape, False if dt.as_dtype(dtype).is_bool else 0, dtype, device)


def ones(shape: Shape, dtype: Any = dt.float32,
         device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """A tensor of ones (lazy)."""
    return full(shape, True if dt.as_dtype(dtype).is_bool else 1, dtype, device)


def empty(shape: Shape, dtype: Any = dt.float32,
          device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """A tensor with unspecified contents (lazy). On the cpu device it is zero-filled."""
    return zeros(shape, dtype, device)


def arange(start: float, stop: Optional[float] = None, step: float = 1,
           dtype: Any = dt.float32, device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """``[start, start+step, ...)`` up to ``stop`` like ``numpy.arange`` (lazy)."""
    if stop is None:
        start, stop = 0, start
    dtype, dev = dt.as_dtype(dtype), as_device(device)
    return _op(f"arange({start}, {stop}, {step}, {dtype.short})",
               lambda: _from_values(np.arange(start, stop, step, dtype=np.float64
                                              if dtype.is_float else dtype.compute), dtype, dev))


def tensor(data: Any, dtype: Any = None,
           device: "Device | str | None" = None) -> DeviceOp[Tensor]:
    """A tensor holding a copy of ``data`` (a numpy array or nested sequence) (lazy).

    ``dtype`` defaults to the array's dtype (float64 stays float64); pass ``ts.bfloat16`` to
    round float data to bf16.
    """
    array = np.array(data, copy=True)
    dtype = dt.from_numpy(array.dtype) if dtype is None else dt.as_dtype(dtype)
    dev = as_device(device)
    return _op(f"tensor({array.shape}, {dtype.short})",
               lambda: _from_values(array, dtype, dev))
