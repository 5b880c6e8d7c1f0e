"""DLPack element types numpy cannot exchange: bf16 and the 8-bit floats.

numpy's DLPack support knows ints, floats, complex and bool only, while DLPack itself has codes
for ``bfloat16`` (kDLBfloat = 4), ``float8_e4m3fn`` (kDLFloat8_e4m3fn = 10) and ``float8_e5m2``
(kDLFloat8_e5m2 = 12). This module owns the bridge: an export is made as the unsigned integer
of the same width and its capsule is *retagged* with the real type before the consumer sees
it; an import retags a producer's capsule to the unsigned integer, lets numpy import that, and
views the array as the ``ml_dtypes`` type. Both edit only the ``dtype`` field of a capsule that
no consumer has taken yet (the producer's deleter does not read it), so they are zero-copy.

The capsule layouts are dlpack.h's: ``DLManagedTensor`` (capsule ``"dltensor"``) starts with its
``DLTensor``; ``DLManagedTensorVersioned`` (``"dltensor_versioned"``) has it after a version, a
manager context, a deleter and flags (32 bytes). ``DLTensor.dtype`` is at byte 20 (after the
data pointer, the device and ``ndim``): ``uint8 code, uint8 bits, uint16 lanes``.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

import numpy as np

from .. import dtypes as dt

__all__ = ["needs_bridge", "capsule_dtype", "retag", "unsigned_for", "Retagging",
           "import_retagged"]

_DL_UINT = 1
_DTYPE_OFFSET = 20
_VERSIONED_HEADER = 32

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

#: DLPack code -> the tilesafe dtype numpy cannot exchange
_BRIDGED = {d.dlpack_code: d for d in (dt.bfloat16, dt.float8_e4m3fn, dt.float8_e5m2)}


def needs_bridge(dtype: dt.DType) -> bool:
    """Whether ``dtype`` crosses DLPack through this module (bf16, f8e4m3fn, f8e5m2)."""
    return _BRIDGED.get(dtype.dlpack_code) is dtype


def unsigned_for(dtype: dt.DType) -> np.dtype:
    """The unsigned integer numpy dtype of ``dtype``'s width (what an export is made as)."""
    return np.dtype(f"u{dtype.itemsize}")


def _dtype_field(capsule: Any) -> ctypes.Array:
    name = _get_name(capsule)
    if name not in (b"dltensor", b"dltensor_versioned"):
        raise BufferError(f"not an unconsumed DLPack capsule (its name is {name!r})")
    address = _get_pointer(capsule, name)
    if name == b"dltensor_versioned":
        address += _VERSIONED_HEADER
    return (ctypes.c_uint8 * 4).from_address(address + _DTYPE_OFFSET)


def capsule_dtype(capsule: Any) -> tuple[int, int, int]:
    """``(code, bits, lanes)`` of the DLPack capsule's tensor."""
    field = _dtype_field(capsule)
    return field[0], field[1], field[2] | field[3] << 8


def retag(capsule: Any, code: int, bits: int) -> None:
    """Set the element type of the (not yet consumed) capsule's tensor to ``(code, bits, 1)``."""
    field = _dtype_field(capsule)
    field[0], field[1], field[2], field[3] = code, bits, 1, 0


class Retagging:
    """Stands in for a DLPack producer: passes the consumer's ``__dlpack__`` call (numpy's, or
    cuda.core's on a GPU) through and retags a bf16/f8 capsule as the unsigned integer of its
    width, remembering the real dtype in ``dtype``."""

    def __init__(self, producer: Any):
        self.producer = producer
        self.dtype: Optional[dt.DType] = None

    def __dlpack_device__(self) -> Any:
        return self.producer.__dlpack_device__()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        capsule = self.producer.__dlpack__(*args, **kwargs)
        code, bits, lanes = capsule_dtype(capsule)
        found = _BRIDGED.get(code)
        if found is not None and lanes == 1 and bits == found.bits:
            self.dtype = found
            retag(capsule, _DL_UINT, bits)
        return capsule


def import_retagged(producer: Any) -> np.ndarray:
    """``np.from_dlpack(producer)``, also for bf16 and 8-bit float tensors (which come back as
    arrays of the ``ml_dtypes`` type, sharing the producer's memory)."""
    proxy = Retagging(producer)
    array = np.from_dlpack(proxy)
    if proxy.dtype is not None:
        array = array.view(proxy.dtype.storage)
    return array
