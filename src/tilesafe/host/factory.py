"""Tensor constructors. Each returns a lazy DeviceOp that allocates and fills when driven.

Random constructors are seeded (``seed=None`` draws a fresh seed) and use numpy's PCG64, so a
seed gives the same values on every device. A new constructor is one function here (and its
name in ``tilesafe/__init__.py``).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from .. import dtypes as dt
from ..driver.device import Device, as_device
from ..dtypes import DType
from ..shapes import normalize_shape
from .lazy import TensorOp
from .tensor import Tensor

Shape = "int | Sequence[int]"
DeviceLike = "Device | str | None"


def _lazy(label: str, dtype: Any, device: DeviceLike, shape: Sequence[int],
          make_values) -> TensorOp:
    dtype, dev = dt.memory_dtype(dtype, "a tensor"), as_device(device)
    return TensorOp(lambda stream: Tensor.from_values(make_values(dtype), dtype, dev), label,
                    dev, shape, dtype)


def _wide(dtype: DType):
    return np.float64 if dtype.is_float else dtype.compute


def full(shape: Shape, value: Any, dtype: Any = dt.float32,
         device: DeviceLike = None) -> TensorOp:
    """A tensor of ``shape`` filled with ``value`` (lazy: returns a DeviceOp)."""
    dims, target = normalize_shape(shape), dt.as_dtype(dtype)
    if not (target.fits(value) or (target.is_float and isinstance(value, (int, float)))):
        raise ValueError(f"fill value {value!r} does not fit {target.name}")
    dev = as_device(device)
    memory = dt.memory_dtype(target, "a tensor")
    fill = np.asarray(value, dtype=_wide(memory))
    return TensorOp(lambda stream: Tensor.filled(dims, fill, memory, dev),
                    f"full({dims}, {value!r}, {target.short})", dev, dims, memory)


def zeros(shape: Shape, dtype: Any = dt.float32, device: DeviceLike = None) -> TensorOp:
    """A tensor of zeros (lazy)."""
    return full(shape, False if dt.as_dtype(dtype).is_bool else 0, dtype, device)


def ones(shape: Shape, dtype: Any = dt.float32, device: DeviceLike = None) -> TensorOp:
    """A tensor of ones (lazy)."""
    return full(shape, True if dt.as_dtype(dtype).is_bool else 1, dtype, device)


def empty(shape: Shape, dtype: Any = dt.float32, device: DeviceLike = None) -> TensorOp:
    """A tensor whose contents are unspecified (lazy); on the cpu device it is zero-filled."""
    return zeros(shape, dtype, device)


def arange(start: float, stop: Optional[float] = None, step: float = 1,
           dtype: Any = dt.float32, device: DeviceLike = None) -> TensorOp:
    """``[start, start+step, ...)`` up to ``stop``, like ``numpy.arange`` (lazy)."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be 0")
    length = max(0, math.ceil((stop - start) / step))
    return _lazy(f"arange({start}, {stop}, {step})", dtype, device, (length,),
                 lambda d: np.arange(start, stop, step, dtype=_wide(d)))


def linspace(start: float, stop: float, num: int, dtype: Any = dt.float32,
             device: DeviceLike = None) -> TensorOp:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive (lazy)."""
    return _lazy(f"linspace({start}, {stop}, {num})", dtype, device, (num,),
                 lambda d: np.linspace(start, stop, num))


def eye(n: int, m: Optional[int] = None, dtype: Any = dt.float32,
        device: DeviceLike = None) -> TensorOp:
    """An ``n x m`` identity matrix (lazy)."""
    return _lazy(f"eye({n}, {m})", dtype, device, (n, n if m is None else m),
                 lambda d: np.eye(n, m, dtype=_wide(d)))


def rand(shape: Shape, dtype: Any = dt.float32, seed: Optional[int] = None,
         device: DeviceLike = None) -> TensorOp:
    """Uniform random values in [0, 1) (lazy; seeded by ``seed``)."""
    dims = normalize_shape(shape)
    return _lazy(f"rand({dims}, seed={seed})", dtype, device, dims,
                 lambda d: np.random.default_rng(seed).random(dims))


def randn(shape: Shape, dtype: Any = dt.float32, seed: Optional[int] = None,
          mean: float = 0.0, std: float = 1.0, device: DeviceLike = None) -> TensorOp:
    """Normally distributed random values (lazy; seeded by ``seed``)."""
    dims = normalize_shape(shape)
    return _lazy(f"randn({dims}, seed={seed})", dtype, device, dims,
                 lambda d: np.random.default_rng(seed).normal(mean, std, dims))


def tensor(data: Any, dtype: Any = None, device: DeviceLike = None) -> TensorOp:
    """A tensor holding a copy of ``data`` (a numpy array or nested sequence) (lazy).

    ``dtype`` defaults to the array's dtype (``ml_dtypes`` arrays give bf16 and 8-bit float
    tensors); pass ``ts.bfloat16``, ``ts.float8_e4m3fn`` or ``ts.float8_e5m2`` to round float
    data to that format (8-bit floats saturate: see ``tilesafe.dtypes``).
    """
    array = np.array(data, copy=True)
    target = dt.from_numpy(array.dtype) if dtype is None else dt.as_dtype(dtype)
    return _lazy(f"tensor({array.shape}, {target.short})", target, device, array.shape,
                 lambda d: array)
