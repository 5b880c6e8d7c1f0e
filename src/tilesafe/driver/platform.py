"""What each device kind does with memory, streams and events: one :class:`Platform` per kind.

Everything above the driver asks the platform of a device (:func:`platform_of`) instead of
branching on ``device.kind``, so a new kind of device is a new platform here (and a backend
that compiles kernels for it, in ``tilesafe.backends``):

* ``cpu``: memory is a 1-D numpy array of the storage dtype; work runs when it is enqueued, so
  a stream only orders work and an event is complete once recorded;
* ``cuda``: stream-ordered device memory and CUDA streams and events (``driver.cuda``).

Memory is described by the allocation's ``data`` (the array or the device buffer), an element
offset, a shape, element strides and the element's storage numpy dtype. Streams are tilesafe
:class:`~tilesafe.driver.stream.Stream` objects (only their native handles are used here).
This module may import ``dtypes``, ``shapes``, ``driver.device`` and ``driver.cuda``, nothing
above the driver.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..dtypes import as_strided
from ..shapes import is_contiguous
from . import cuda
from .device import Device


def strided(flat: np.ndarray, offset: int, shape: Sequence[int], strides: Sequence[int],
            writeable: bool = False) -> np.ndarray:
    """A strided view of the 1-D array ``flat`` starting at element ``offset``."""
    item = flat.itemsize
    return as_strided(flat[offset:] if offset >= 0 else flat,
                                           shape=tuple(shape),
                                           strides=tuple(s * item for s in strides),
                                           writeable=writeable)


class Platform:
    """The operations of one device kind (see the module docstring)."""

    kind = ""
    #: DLPack's device type code (kDLCPU = 1, kDLCUDA = 2)
    dlpack_device_type = 0
    #: whether work runs asynchronously, so an ``await`` may enqueue it on the event loop's
    #: thread and poll for completion (else the awaited work runs on a waiter thread)
    asynchronous = False
    #: whether recorded work can be captured into one native graph launch
    captures_graphs = False
    #: whether memory can be exported through ``__cuda_array_interface__``
    cuda_array_interface = False

    # -- memory -----------------------------------------------------------------------------
    def allocate(self, device: Device, storage: np.ndarray, stream: Any) -> Any:
        """New memory on ``device`` holding the C-contiguous array ``storage``."""
        raise NotImplementedError

    def allocate_filled(self, device: Device, shape: Sequence[int], value: np.ndarray,
                        stream: Any) -> Any:
        """New memory on ``device`` holding ``shape`` elements equal to the storage scalar
        ``value`` (the device fills it where it can, with no host array of the size)."""
        return self.allocate(device, np.full(tuple(shape), value, dtype=value.dtype), stream)

    def read(self, data: Any, offset: int, shape: Sequence[int], strides: Sequence[int],
             storage: np.dtype, byte_range: tuple[int, int], stream: Any) -> np.ndarray:
        """A host copy (storage dtype, ``shape``) of the elements of a strided view;
        ``byte_range`` is the view's footprint in the memory."""
        raise NotImplementedError

    def write(self, data: Any, offset: int, shape: Sequence[int], strides: Sequence[int],
              storage: np.dtype, values: np.ndarray, stream: Any) -> None:
        """Overwrite the elements of a strided view with ``values`` (storage dtype)."""
        raise NotImplementedError

    def span(self, data: Any) -> tuple[int, int]:
        """The address of the memory's first byte and its size in bytes."""
        raise NotImplementedError

    def copy_within(self, destination: Any, source: Any, nbytes: int, stream: Any) -> bool:
        """Copy ``nbytes`` between two contiguous ranges of this kind's memory on one device
        (``(data, byte offset)`` each) without the host, and wait; False where this platform
        has no such copy (the caller stages it through the host)."""
        return False

    def host_array(self, data: Any, offset: int, shape: Sequence[int],
                   strides: Sequence[int]) -> np.ndarray:
        """A writable numpy view of the elements, where the host can address the memory."""
        raise TypeError(f"{self.kind} memory has no host array; read a copy with .numpy()")

    def address(self, data: Any, byte_offset: int) -> int:
        """The address of the byte at ``byte_offset`` of the memory."""
        raise NotImplementedError

    def export_dlpack(self, data: Any, offset: int, shape: Sequence[int],
                      strides: Sequence[int], storage: np.dtype, *, readonly: bool, stream: Any,
                      max_version: Any, copy: Optional[bool]) -> Any:
        """The DLPack capsule of a strided view of the memory (zero-copy; flagged read-only
        with ``readonly``)."""
        raise NotImplementedError

    # -- streams and events -----------------------------------------------------------------
    def native_stream(self, device: Device, foreign: Any) -> Any:
        """The native stream behind a stream of ``device`` (``foreign``: one to wrap)."""
        raise TypeError(f"a {device} stream has no native stream")

    def synchronize(self, stream: Any) -> None:
        """Block until the work enqueued on ``stream`` has completed."""

    def is_idle(self, stream: Any) -> bool:
        """Whether the work enqueued on ``stream`` has completed (never blocks)."""
        return True

    def record_event(self, stream: Any, *, timing: bool = False) -> Optional[Any]:
        """A native event marking the current end of ``stream``'s work (with a timestamp when
        ``timing``), or None when recorded work is complete at once."""
        return None

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two native events recorded with ``timing``."""
        raise TypeError(f"{self.kind} events have no device timestamps")


class HostPlatform(Platform):
    """``cpu``: numpy memory; work completes as it is enqueued."""

    kind = "cpu"
    dlpack_device_type = 1

    def allocate(self, device: Device, storage: np.ndarray, stream: Any) -> np.ndarray:
        return np.array(storage, order="C", copy=True).reshape(-1)

    def span(self, data: np.ndarray) -> tuple[int, int]:
        return int(data.ctypes.data), int(data.nbytes)

    def read(self, data, offset, shape, strides, storage, byte_range, stream) -> np.ndarray:
        return np.array(strided(data, offset, shape, strides), copy=True)

    def write(self, data, offset, shape, strides, storage, values, stream) -> None:
        strided(data, offset, shape, strides, writeable=True)[...] = values

    def host_array(self, data, offset, shape, strides) -> np.ndarray:
        return strided(data, offset, shape, strides, writeable=True)

    def address(self, data: np.ndarray, byte_offset: int) -> int:
        return int(data.ctypes.data) + byte_offset

    def export_dlpack(self, data, offset, shape, strides, storage, *, readonly, stream,
                      max_version, copy) -> Any:
        array = self.host_array(data, offset, shape, strides)
        if array.dtype != storage:  # (a bf16/f8 export is made as an unsigned integer)
            array = array.view(storage)
        if readonly:
            array.flags.writeable = False
            if max_version is None or tuple(max_version) < (1, 0):
                raise BufferError("this tensor is read-only and DLPack before 1.0 cannot say so: "
                                  "import it with a consumer of DLPack 1.0 that honours the "
                                  "flag (numpy 2.1+) or copy it first (t.clone())")
        if max_version is not None:
            return array.__dlpack__(max_version=max_version, copy=copy)
        return array.__dlpack__()


class CudaPlatform(Platform):
    """``cuda:N``: stream-ordered device memory, CUDA streams and events."""

    kind = "cuda"
    dlpack_device_type = 2
    asynchronous = True
    captures_graphs = True
    cuda_array_interface = True

    def allocate(self, device: Device, storage: np.ndarray, stream: Any) -> cuda.DeviceBuffer:
        storage = np.ascontiguousarray(storage)
        buf = cuda.allocate(device.index, storage.nbytes, stream.native)
        cuda.host_to_device(buf.ptr, storage, stream.native)
        return buf

    def allocate_filled(self, device, shape, value, stream) -> cuda.DeviceBuffer:
        nbytes = int(np.prod(shape, dtype=np.int64)) * value.dtype.itemsize
        buf = cuda.allocate(device.index, nbytes, stream.native)
        if not cuda.fill(buf.ptr, nbytes, value.tobytes(), stream.native):
            cuda.host_to_device(buf.ptr, np.full(tuple(shape), value, dtype=value.dtype),
                                stream.native)
        return buf

    def span(self, data: cuda.DeviceBuffer) -> tuple[int, int]:
        return data.ptr, data.nbytes

    def copy_within(self, destination, source, nbytes, stream) -> bool:
        (dst, dst_offset), (src, src_offset) = destination, source
        cuda.device_to_device(dst.ptr + dst_offset, src.ptr + src_offset, nbytes, stream.native)
        return True

    def read(self, data, offset, shape, strides, storage, byte_range, stream) -> np.ndarray:
        lo, hi = byte_range
        raw = cuda.device_to_host(data.ptr + lo, hi - lo, stream.native)
        item = np.dtype(storage).itemsize
        view = strided(raw.view(storage), offset - lo // item, shape, strides)
        return np.array(view, copy=True)

    def write(self, data, offset, shape, strides, storage, values, stream) -> None:
        if not is_contiguous(shape, strides):
            raise NotImplementedError("writing a non-contiguous cuda tensor from the host is "
                                      "not supported yet; write a contiguous tensor and take "
                                      "the view")
        ptr = data.ptr + offset * np.dtype(storage).itemsize
        cuda.host_to_device(ptr, np.ascontiguousarray(values, dtype=storage), stream.native)

    def address(self, data: cuda.DeviceBuffer, byte_offset: int) -> int:
        return data.ptr + byte_offset

    def export_dlpack(self, data, offset, shape, strides, storage, *, readonly, stream,
                      max_version, copy) -> Any:
        view = cuda.export_view(data, offset * np.dtype(storage).itemsize, shape, strides,
                                storage, readonly)
        return view.__dlpack__(stream=stream, max_version=max_version)

    def native_stream(self, device: Device, foreign: Any) -> Any:
        return cuda.new_stream(device.index, foreign)

    def synchronize(self, stream: Any) -> None:
        cuda.synchronize(stream.native_address)

    def is_idle(self, stream: Any) -> bool:
        return cuda.is_idle(stream.native_address)

    def record_event(self, stream: Any, *, timing: bool = False) -> Any:
        if not timing:
            return stream.native.record()
        return stream.native.record(options=_timing_options())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end - start)  # cuda.core: an event minus an earlier one, in milliseconds


def _timing_options() -> Any:
    """cuda.core's options for an event that records a timestamp (the field was renamed
    between releases: ``timing_enabled``, earlier ``enable_timing``)."""
    from cuda.core import EventOptions  # type: ignore[import-not-found]
    try:
        return EventOptions(timing_enabled=True)
    except TypeError:
        return EventOptions(enable_timing=True)


_PLATFORMS: dict[str, Platform] = {"cpu": HostPlatform(), "cuda": CudaPlatform()}


def platform_of(device: Device) -> Platform:
    """The platform of ``device``'s kind."""
    return _PLATFORMS[device.kind]
