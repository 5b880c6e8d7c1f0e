"""CUDA glue through cuda.core / cuda.bindings: devices, stream-ordered device memory, copies,
streams, module loading and kernel launches.

Imported only when a ``cuda:N`` device is used, so machines without a driver never load it.
Every driver error becomes a :class:`CudaError` naming the call. Pointers are plain ints.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import TilesafeError


class CudaError(TilesafeError):
    """A CUDA driver call failed."""


def _core():
    import cuda.core as core  # type: ignore[import-not-found]
    return core


def _driver():
    from cuda.bindings import driver  # type: ignore[import-not-found]
    return driver


def _check(result: Any, what: str) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    driver = _driver()
    if err != driver.CUresult.CUDA_SUCCESS:
        raise CudaError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.lru_cache(maxsize=None)
def device(index: int) -> Any:
    """The cuda.core Device ``index``, made current on first use."""
    dev = _core().Device(index)
    dev.set_current()
    return dev


def make_current(index: int) -> Any:
    dev = device(index)
    dev.set_current()
    _THREAD.index = index
    return dev




def compute_capability(index: int) -> tuple[int, int]:
    cc = device(index).compute_capability
    return (cc.major, cc.minor)


# -- streams -------------------------------------------------------------------------

def new_stream(index: int, foreign: Any = None) -> Any:
    dev = make_current(index)
    return dev.create_stream(foreign) if foreign is not None else dev.create_stream()


# -- memory -----------------------------------------------------------------------------------

@dataclass(eq=False)
class DeviceBuffer:
    """A device allocation: the cuda.core Buffer (which frees it), its address and size."""

    buffer: Any
    ptr: int
    nbytes: int
    itemsize: int
    device_index: int


def allocate(index: int, nbytes: int, itemsize: int, stream: Any) -> DeviceBuffer:
    """Stream-ordered device memory from the device's memory resource."""
    dev = make_current(index)
    buf = dev.memory_resource.allocate(max(nbytes, 1), stream=stream)
    return DeviceBuffer(buf, int(buf.handle), nbytes, itemsize, index)


def wrap_foreign(ptr: int, nbytes: int, itemsize: int, index: int, owner: Any) -> DeviceBuffer:
    """A view of memory owned by another library (kept alive through ``owner``)."""
    buf = _core().Buffer.from_handle(ptr, max(nbytes, 1), owner=owner)
    return DeviceBuffer(buf, int(ptr), nbytes, itemsize, index)


def host_to_device(dst_ptr: int, host: np.ndarray, stream: Any) -> None:
    """Copy a contiguous host array to ``dst_ptr`` and wait (the host array may go away)."""
    host = np.ascontiguousarray(host)
    if host.nbytes:
        _check(_driver().cuMemcpyHtoDAsync(dst_ptr, host.ctypes.data, host.nbytes,
                                           stream.handle), "cuMemcpyHtoDAsync")
    stream.sync()


def device_to_host(src_ptr: int, nbytes: int, stream: Any) -> np.ndarray:
    """The bytes at ``src_ptr`` as a host uint8 array (waits for the stream)."""
    out = np.empty(nbytes, dtype=np.uint8)
    if nbytes:
        _check(_driver().cuMemcpyDtoHAsync(out.ctypes.data, src_ptr, nbytes, stream.handle),
               "cuMemcpyDtoHAsync")
    stream.sync()
    return out




# -- modules and launches -------------------------------------------------------------------

def load_kernel(cubin: bytes, name: str, index: int) -> Any:
    """Load a cubin on device ``index`` and return its kernel ``name``."""
    make_current(index)
    return _core().ObjectCode.from_cubin(cubin).get_kernel(name)


class PackedLaunch:
    """One kernel launch laid out once for the driver: a buffer per argument (Python ints are
    device addresses, numpy scalars keep their dtype), the array of pointers to them, and the
    function handle. Repeated launches of a plan reuse it, so enqueueing costs one driver call
    and no argument conversion.

    A ``programmatic`` launch (a kernel that waits for its predecessor before touching memory,
    see ``backends.tileir.lower``) is enqueued as a programmatic dependent of the previous
    kernel on its stream: it may start while that kernel finishes. Its launch configuration is
    built once per stream."""

    __slots__ = ("function", "grid", "index", "values", "pointers", "address", "programmatic",
                 "configs")

    def __init__(self, kernel: Any, grid: tuple[int, int, int], args: Sequence[Any],
                 index: int, programmatic: bool = False):
        if _LAUNCH_KERNEL is None:
            _bind_driver_launch()
        self.function = _driver().CUfunction(int(kernel.handle))
        self.grid = tuple(int(g) for g in grid)
        self.index = index
        self.values = [np.array(a, dtype=np.uint64) if isinstance(a, int) else np.array(a)
                       for a in args]
        self.pointers = np.array([v.ctypes.data for v in self.values], dtype=np.uintp)
        self.address = int(self.pointers.ctypes.data)
        self.programmatic = programmatic
        self.configs: dict[int, tuple[Any, Any]] = {}  # id(stream handle) -> (handle, config)

    def config(self, stream_handle: Any) -> Any:
        """The programmatic launch configuration of this launch on ``stream_handle``."""
        entry = self.configs.get(id(stream_handle))
        if entry is None or entry[0] is not stream_handle:  # the entry keeps its handle alive
            driver = _driver()
            attribute = driver.CUlaunchAttribute()
            attribute.id = (driver.CUlaunchAttributeID
                            .CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            attribute.value.programmaticStreamSerializationAllowed = 1
            config = driver.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = self.grid
            config.blockDimX = config.blockDimY = config.blockDimZ = 1
            config.sharedMemBytes = 0
            config.hStream = stream_handle
            config.attrs = [attribute]
            config.numAttrs = 1
            if len(self.configs) >= _CONFIGS_PER_LAUNCH:  # e.g. one handle per graph capture
                self.configs.clear()
            entry = self.configs[id(stream_handle)] = (stream_handle, config)
        return entry[1]


_CONFIGS_PER_LAUNCH = 16  # programmatic launch configurations kept per packed launch
_THREAD = threading.local()  # .index: the device whose context this thread has made current


def launch_packed(stream_handle: Any, packed: PackedLaunch) -> None:
    """Enqueue ``packed`` on the stream ``stream_handle`` (a CUstream)."""
    if getattr(_THREAD, "index", None) != packed.index:
        make_current(packed.index)  # contexts are per thread (await drives on other threads)
    if packed.programmatic:
        (err,) = _LAUNCH_KERNEL_EX(packed.config(stream_handle), packed.function,
                                   packed.address, 0)
    else:
        gx, gy, gz = packed.grid
        (err,) = _LAUNCH_KERNEL(packed.function, gx, gy, gz, 1, 1, 1, 0, stream_handle,
                                packed.address, 0)
    if err != _SUCCESS:
        raise CudaError(f"cuLaunchKernel failed: {err}")


def _bind_driver_launch() -> None:
    global _LAUNCH_KERNEL, _LAUNCH_KERNEL_EX, _SUCCESS
    driver = _driver()
    _LAUNCH_KERNEL, _SUCCESS = driver.cuLaunchKernel, driver.CUresult.CUDA_SUCCESS
    _LAUNCH_KERNEL_EX = driver.cuLaunchKernelEx


_LAUNCH_KERNEL: Any = None
_LAUNCH_KERNEL_EX: Any = None
_SUCCESS: Any = None


def graph_builder(stream: Any) -> Any:
    """Start capturing ``stream``'s work into a graph; launch into ``builder.stream.handle``."""
    builder = stream.create_graph_builder()
    builder.begin_building()
    return builder


def finish_graph(builder: Any) -> Any:
    builder.end_building()
    return builder.complete()


def dlpack_view(obj: Any) -> Any:
    """A cuda.core StridedMemoryView of a DLPack / CUDA-array-interface object (no copy)."""
    from cuda.core.utils import StridedMemoryView  # type: ignore[import-not-found]
    if hasattr(StridedMemoryView, "from_any_interface"):
        return StridedMemoryView.from_any_interface(obj, -1)
    return StridedMemoryView(obj, -1)


def export_view(buf: DeviceBuffer, byte_offset: int, shape: Sequence[int],
                strides: Sequence[int], np_dtype: Any, readonly: bool) -> Any:
    """A StridedMemoryView over part of a buffer, for ``__dlpack__`` export."""
    from cuda.core.utils import StridedMemoryView  # type: ignore[import-not-found]
    item = np.dtype(np_dtype).itemsize
    sub = _core().Buffer.from_handle(buf.ptr + byte_offset,
                                     max(1, buf.nbytes - byte_offset), owner=buf.buffer)
    return StridedMemoryView.from_buffer(sub, tuple(shape), tuple(strides), itemsize=item,
                                         dtype=np.dtype(np_dtype), is_readonly=readonly)
