"""Exporting tensors to other libraries, zero-copy: ``__dlpack__``, ``__dlpack_device__`` and,
on cuda, ``__cuda_array_interface__`` (v3).

An export is a read of the tensor's memory, so the borrow rules apply (a tensor that pending
work borrows mutably cannot be exported), and read-only memory (a ``.shared()`` result, a
read-only import) is exported read-only (DLPack 1.0's flag; a consumer asking for an older
DLPack gets a BufferError rather than a writable view). On the ``cpu`` device the export goes
through numpy's DLPack support, on ``cuda:N`` through cuda.core's StridedMemoryView; bf16 and
the 8-bit floats, which those do not know, are exported as the unsigned integer of their width
and the capsule is retagged with their DLPack code (``host.dlpack_dtypes``). Imports are
``host.interop``'s.

``host.tensor`` builds on this module: tensors are used here through their methods only.
"""

from __future__ import annotations

from typing import Any, Optional

from ..driver.platform import platform_of
from .dlpack_dtypes import needs_bridge, retag, unsigned_for


def dlpack_device(tensor: Any) -> tuple[int, int]:
    """``(DLPack device type, device index)`` of ``tensor``'s memory."""
    return (platform_of(tensor.device).dlpack_device_type, tensor.device.index)


def cuda_array_interface(tensor: Any) -> dict:
    """``__cuda_array_interface__`` v3 of a cuda tensor (strides in bytes, no stream: the
    tensor's producing work is complete when the host holds it). bf16 and the 8-bit floats are
    described as the unsigned integer of their width (``"<u2"``, ``"|u1"``): the interface
    has no type string for them; DLPack carries their real type."""
    if not platform_of(tensor.device).cuda_array_interface:
        raise AttributeError("__cuda_array_interface__ exists on cuda tensors only")
    tensor._check_access("export it", write=False)
    item = tensor.dtype.itemsize
    # the array interface has no bf16/f8 typestr: those are described as unsigned integers
    storage = unsigned_for(tensor.dtype) if needs_bridge(tensor.dtype) else tensor.dtype.storage
    return {"shape": tensor.shape, "typestr": storage.str,
            "data": (tensor._address(), tensor.is_read_only),
            "strides": tuple(s * item for s in tensor.strides), "version": 3, "stream": None}


def export_dlpack(tensor: Any, *, stream: Any = None, max_version: Any = None,
                  copy: Optional[bool] = None) -> Any:
    """The DLPack capsule of ``tensor`` (a read of its memory: borrow rules apply)."""
    tensor._check_access("export it through DLPack", write=False)
    return _capsule(tensor, tensor.is_read_only, stream, max_version, copy)


def loaned_capsule(tensor: Any) -> Any:
    """The DLPack capsule of ``tensor`` without the borrow check and without the read-only
    flag: only for work that holds the loans on the tensor itself (a collective's,
    ``tilesafe.distributed``), writes only what it holds mutably and drops every view of the
    capsule before it releases them."""
    return _capsule(tensor, False, None, None, None)


def _capsule(tensor: Any, readonly: bool, stream: Any, max_version: Any,
             copy: Optional[bool]) -> Any:
    dtype = tensor.dtype
    bridged = needs_bridge(dtype)
    capsule = platform_of(tensor.device).export_dlpack(
        tensor._alloc.data, tensor._offset, tensor.shape, tensor.strides,
        unsigned_for(dtype) if bridged else dtype.storage,
        readonly=readonly, stream=stream, max_version=max_version, copy=copy)
    if bridged:
        retag(capsule, dtype.dlpack_code, dtype.bits)
    return capsule
