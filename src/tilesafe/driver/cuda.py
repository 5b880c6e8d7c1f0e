"""CUDA glue through cuda.core / cuda.bindings: devices, stream-ordered device memory, copies,
streams, module loading and kernel launches.

cuda.core and cuda.bindings are imported only when a ``cuda:N`` device is used, so machines
without a driver never load them. The calls on the launch path (enqueue a kernel, wait for a
stream) go through the compiled launcher (``_launcher.c``) when it was built, else through
cuda.bindings. Every driver error becomes a :class:`~tilesafe.errors.CudaError` naming the
call. Pointers and stream handles are plain ints. This module imports only ``errors``,
``_callsite`` and the compiled launcher (``driver/_launcher.c``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import _compiled
from .._callsite import caller_location
from ..errors import CudaError


def _core():
    import cuda.core as core  # type: ignore[import-not-found]
    return core


def _driver():
    from cuda.bindings import driver  # type: ignore[import-not-found]
    return driver


def _check(result: Any, what: str) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != _driver().CUresult.CUDA_SUCCESS:
        _fail(int(err), what)
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.lru_cache(maxsize=None)
def device(index: int) -> Any:
    """The cuda.core Device ``index``. Looking it up leaves the thread's current context as
    it is: only ``make_current`` changes it, and records the change."""
    return _core().Device(index)


def make_current(index: int) -> Any:
    """Make device ``index``'s context current on this thread (and remember it there)."""
    dev = device(index)
    dev.set_current()
    _THREAD.index = index
    _CONTEXT_SWITCHES[0] += 1
    return dev


_CONTEXT_SWITCHES = [0]  # bumped by make_current: the compiled path re-reads _THREAD.index


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


def allocate(index: int, nbytes: int, stream: Any) -> DeviceBuffer:
    """Stream-ordered device memory from the device's memory resource."""
    dev = make_current(index)
    buf = dev.memory_resource.allocate(max(nbytes, 1), stream=stream)
    return DeviceBuffer(buf, int(buf.handle), nbytes)


class MappedWords:
    """``count`` int64 words of page-locked host memory that kernels on every device can write
    (mapped into the device address space): the host reads them with no copy once the work
    that writes them is complete. Zeroed at allocation; freed with the object."""

    def __init__(self, index: int, count: int):
        make_current(index)
        driver = _driver()
        flags = driver.CU_MEMHOSTALLOC_PORTABLE | driver.CU_MEMHOSTALLOC_DEVICEMAP
        host = int(_check(driver.cuMemHostAlloc(count * 8, flags), "cuMemHostAlloc"))
        self._finalizer = weakref.finalize(self, _free_host, host)
        self.address = int(_check(driver.cuMemHostGetDevicePointer(host, 0),
                                  "cuMemHostGetDevicePointer"))
        self.words = np.ctypeslib.as_array((ctypes.c_int64 * count).from_address(host))
        self.words[:] = 0


class DeviceWords:
    """``count`` int32 words of device memory on device ``index`` (``cuMemAlloc``: not
    stream-ordered, so usable from any stream at once), each set to ``initial`` before the
    constructor returns; freed with the object."""

    def __init__(self, index: int, count: int, initial: int = 0):
        make_current(index)
        driver = _driver()
        self._count = count
        self.address = int(_check(driver.cuMemAlloc(count * 4), "cuMemAlloc"))
        self._finalizer = weakref.finalize(self, _free_device, index, self.address)
        # (the memset runs on the legacy stream, which other streams need not wait for: the
        # words are set once that stream has finished, before anything can use them)
        _check(driver.cuMemsetD32(self.address, initial & 0xFFFFFFFF, count), "cuMemsetD32")
        _check(driver.cuStreamSynchronize(0), "cuStreamSynchronize")

    def read(self) -> np.ndarray:
        """The words now (a synchronous copy to the host; for tests and diagnostics)."""
        count = self._count
        host = np.empty(count, np.int32)
        _check(_driver().cuMemcpyDtoH(host.ctypes.data, self.address, count * 4), "cuMemcpyDtoH")
        return host


def _free_device(index: int, address: int) -> None:
    try:
        make_current(index)
        _driver().cuMemFree(address)
    except Exception:  # (interpreter shutdown)
        pass


def _free_host(host: int) -> None:
    try:
        _driver().cuMemFreeHost(host)
    except Exception:  # (interpreter shutdown)
        pass


def wrap_foreign(ptr: int, nbytes: int, owner: Any) -> DeviceBuffer:
    """A view of memory owned by another library (kept alive through ``owner``)."""
    buf = _core().Buffer.from_handle(ptr, max(nbytes, 1), owner=owner)
    return DeviceBuffer(buf, int(ptr), nbytes)


def host_to_device(dst_ptr: int, host: np.ndarray, stream: Any) -> None:
    """Copy a contiguous host array to ``dst_ptr`` and wait (the host array may go away)."""
    host = np.ascontiguousarray(host)
    if host.nbytes:
        _check(_driver().cuMemcpyHtoDAsync(dst_ptr, host.ctypes.data, host.nbytes,
                                           stream.handle), "cuMemcpyHtoDAsync")
    stream.sync()


def fill(dst_ptr: int, nbytes: int, pattern: bytes, stream: Any) -> bool:
    """Set every ``len(pattern)``-byte word of ``nbytes`` at ``dst_ptr`` to ``pattern`` on the
    device and wait; False (nothing done) for a pattern no memset writes (8-byte words that
    are not one repeated byte)."""
    size = len(pattern)
    if size not in (1, 2, 4) and pattern != pattern[:1] * size:
        return False
    if nbytes:
        driver = _driver()
        if size == 2:
            _check(driver.cuMemsetD16Async(dst_ptr, int.from_bytes(pattern, "little"),
                                           nbytes // 2, stream.handle), "cuMemsetD16Async")
        elif size == 4:
            _check(driver.cuMemsetD32Async(dst_ptr, int.from_bytes(pattern, "little"),
                                           nbytes // 4, stream.handle), "cuMemsetD32Async")
        else:
            _check(driver.cuMemsetD8Async(dst_ptr, pattern[0], nbytes, stream.handle),
                   "cuMemsetD8Async")
    stream.sync()
    return True


def device_to_device(dst_ptr: int, src_ptr: int, nbytes: int, stream: Any) -> None:
    """Copy ``nbytes`` from ``src_ptr`` to ``dst_ptr`` (one device's memory) and wait."""
    if nbytes:
        _check(_driver().cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, stream.handle),
               "cuMemcpyDtoDAsync")
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

#: every module this process loaded, kept loaded for good, by (device, cubin digest, kernel
#: name): ``(module, kernel)``. A recorded CUDA graph holds its kernels' functions: tilesafe's
#: own, or a foreign one (torch's, which a library call made while torch captures records into)
#: that nothing of tilesafe sees replayed. A module unloaded when the last tilesafe object
#: using it went away would leave such a graph launching freed code (an illegal address on its
#: next replay). The cost is the modules' device memory: one per distinct cubin loaded on a
#: device (a kernel specialization, or a tuning config tried); loading one again reuses it.
_LOADED: dict = {}
_LOADED_LOCK = threading.Lock()


def load_kernel(cubin: bytes, name: str, index: int) -> Any:
    """Load a cubin on device ``index`` and return its kernel ``name``; the module stays
    loaded for the life of the process (:data:`_LOADED`), and the same cubin and name on the
    same device give the kernel already loaded."""
    key = (index, hashlib.sha256(cubin).digest(), name)
    with _LOADED_LOCK:
        found = _LOADED.get(key)
    if found is not None:
        return found[1]
    make_current(index)
    module = _core().ObjectCode.from_cubin(cubin)
    kernel = module.get_kernel(name)
    with _LOADED_LOCK:
        return _LOADED.setdefault(key, (module, kernel))[1]


class PackedLaunch:
    """One kernel launch laid out once for the driver: a buffer per argument (Python ints are
    device addresses, numpy scalars keep their dtype), the array of pointers to them, and the
    function's address. Repeated launches of a plan reuse it, so enqueueing costs one driver
    call and no argument conversion.

    A ``programmatic`` launch (a kernel that waits for its predecessor before touching memory,
    see ``backends.tileir.lower``) is enqueued as a programmatic dependent of the previous
    kernel on its stream: it may start while that kernel finishes."""

    __slots__ = ("function", "grid", "index", "values", "pointers", "address", "programmatic",
                 "fault_record")

    def __init__(self, kernel: Any, grid: tuple[int, int, int], args: Sequence[Any],
                 index: int, programmatic: bool = False):
        self.function = int(kernel.handle)
        self.grid = tuple(int(g) for g in grid)
        self.index = index
        self.values = [np.array(a, dtype=np.uint64) if isinstance(a, int) else np.array(a)
                       for a in args]
        self.pointers = np.array([v.ctypes.data for v in self.values], dtype=np.uintp)
        self.address = int(self.pointers.ctypes.data)
        self.programmatic = programmatic
        #: what the launch lends besides its arguments and reads back when it completes (a
        #: backend's fault record, ``backends/tileir/faults.py``), or None
        self.fault_record: Any = None

    #: running it only enqueues device work (see ``backends.base.BoundLaunch``)
    enqueues_only = True

    @property
    def driver_launch(self) -> tuple:
        """What the driver's launch call takes of it: ``(function, gx, gy, gz, parameters
        address, programmatic, device index)`` (a launch plan keeps it for the fast path)."""
        gx, gy, gz = self.grid
        return (self.function, gx, gy, gz, self.address, self.programmatic, self.index)

    def launch(self, stream: Any) -> None:
        """Enqueue on the tilesafe stream ``stream``."""
        launch_packed(stream.native_address, self)


_THREAD = threading.local()  # .index: the device whose context this thread has made current


def launch_packed(stream: int, packed: PackedLaunch) -> None:
    """Enqueue ``packed`` on the stream whose driver handle (CUstream) is the int ``stream``."""
    if getattr(_THREAD, "index", None) != packed.index:
        make_current(packed.index)  # contexts are per thread (await drives on other threads)
    gx, gy, gz = packed.grid
    err = _DRIVER_CALLS.launch(packed.function, gx, gy, gz, stream, packed.address,
                               packed.programmatic)
    if err:
        _fail(err, "cuLaunchKernelEx" if packed.programmatic else "cuLaunchKernel")


def launch_graph(graph_exec: int, stream: int) -> None:
    """Enqueue the executable graph whose handle (CUgraphExec) is the int ``graph_exec``."""
    err = _DRIVER_CALLS.launch_graph(graph_exec, stream)
    if err:
        _fail(err, "cuGraphLaunch")


def synchronize(stream: int) -> None:
    """Block until the work on the stream whose handle is the int ``stream`` has completed
    (other Python threads keep running meanwhile)."""
    err = _DRIVER_CALLS.synchronize(stream)
    if err:
        _fail(err, "cuStreamSynchronize")


_NOT_READY = 600  # CUDA_ERROR_NOT_READY


def is_idle(stream: int) -> bool:
    """Whether all work on the stream whose handle is the int ``stream`` has completed
    (never blocks)."""
    err = _DRIVER_CALLS.query(stream)
    if err == _NOT_READY:
        return False
    if err:
        _fail(err, "cuStreamQuery")
    return True


def _fail(err: int, what: str) -> None:
    """Raise the CudaError of a failed launch-path call, at the user's line that drove it."""
    try:
        name = _driver().CUresult(err).name
    except Exception:  # noqa: BLE001 (no cuda.bindings, or a code it does not know)
        name = f"CUresult {err}"
    raise CudaError(f"{caller_location()}: {what} failed: {name}\n  fix: errors of a kernel "
                    "that already ran surface at the next driver call and leave the device "
                    "unusable; run the same work on the 'cpu' device, whose interpreter "
                    "reports the failing tile program, and check kernels launched under "
                    "ts.unsafe()")


class _BindingsLaunch:
    """The launch-path driver calls through cuda.bindings, with the native launcher's
    interface (ints in, the CUresult as an int out): used when the native launcher was not
    built, and by tests comparing the two."""

    CONFIGS_KEPT = 64  # programmatic launch configurations, keyed by stream and grid

    def __init__(self) -> None:
        driver = _driver()
        self._launch_kernel, self._launch_kernel_ex = driver.cuLaunchKernel, driver.cuLaunchKernelEx
        self._stream_synchronize = driver.cuStreamSynchronize
        self._graph_launch = driver.cuGraphLaunch
        self._stream_query = driver.cuStreamQuery
        self._function, self._graph_exec = driver.CUfunction, driver.CUgraphExec
        self._configs: dict[tuple[int, int, int, int], Any] = {}

    def launch(self, function: int, gx: int, gy: int, gz: int, stream: int, parameters: int,
               programmatic: bool) -> int:
        if programmatic:
            (err,) = self._launch_kernel_ex(self._config(stream, gx, gy, gz),
                                            self._function(function), parameters, 0)
        else:
            (err,) = self._launch_kernel(self._function(function), gx, gy, gz, 1, 1, 1, 0,
                                         stream, parameters, 0)
        return int(err)

    def synchronize(self, stream: int) -> int:
        (err,) = self._stream_synchronize(stream)
        return int(err)

    def query(self, stream: int) -> int:
        (err,) = self._stream_query(stream)
        return int(err)

    def launch_graph(self, graph_exec: int, stream: int) -> int:
        (err,) = self._graph_launch(self._graph_exec(graph_exec), stream)
        return int(err)

    def _config(self, stream: int, gx: int, gy: int, gz: int) -> Any:
        key = (stream, gx, gy, gz)
        config = self._configs.get(key)
        if config is None:
            driver = _driver()
            attribute = driver.CUlaunchAttribute()
            attribute.id = (driver.CUlaunchAttributeID
                            .CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            attribute.value.programmaticStreamSerializationAllowed = 1
            config = driver.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = gx, gy, gz
            config.blockDimX = config.blockDimY = config.blockDimZ = 1
            config.sharedMemBytes = 0
            config.hStream = stream
            config.attrs = [attribute]
            config.numAttrs = 1
            if len(self._configs) >= self.CONFIGS_KEPT:  # e.g. one stream per graph capture
                self._configs.clear()
            self._configs[key] = config
        return config


def _native_launch() -> Any:
    """The native launcher (``_launcher.c``) bound to the driver cuda.bindings loaded, or None
    when it was not built."""
    _launcher = _compiled.built("tilesafe.driver._launcher")
    if _launcher is None:
        return None
    driver = _driver()
    legacy = driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
    found = driver.CUdriverProcAddressQueryResult.CU_GET_PROC_ADDRESS_SUCCESS
    entries = []
    for name in (b"cuLaunchKernel", b"cuLaunchKernelEx", b"cuStreamSynchronize",
                 b"cuGraphLaunch", b"cuStreamQuery"):
        err, address, status = driver.cuGetProcAddress(name, 12000, legacy)
        if err != driver.CUresult.CUDA_SUCCESS or status != found or not int(address):
            return None
        entries.append(int(address))
    _launcher.bind(*entries)
    return _launcher


class _DriverCalls:
    """Which implementation makes the launch-path driver calls (chosen on first use: the
    native launcher when it was built, else cuda.bindings); ``use_native`` switches."""

    def __getattr__(self, name: str) -> Any:
        if name not in _DRIVER_CALL_NAMES:
            raise AttributeError(name)
        self.use_native(True)
        return vars(self)[name]

    def use_native(self, native: bool) -> bool:
        """Route launches and stream waits through the native launcher (if it was built) or
        through cuda.bindings; returns whether the native launcher is now in use."""
        calls = _native_launch() if native else None
        calls = calls or _BindingsLaunch()
        for name in _DRIVER_CALL_NAMES:
            setattr(self, name, getattr(calls, name))
        return not isinstance(calls, _BindingsLaunch)


_DRIVER_CALL_NAMES = ("launch", "synchronize", "launch_graph", "query")
_DRIVER_CALLS = _DriverCalls()


def use_native_launcher(native: bool = True) -> bool:
    """Make launches and stream waits through the compiled launcher (``native=True``, the
    default when it was built) or through cuda.bindings; returns whether the compiled one is
    in use (False when it was not built, e.g. no C compiler at install time)."""
    return _DRIVER_CALLS.use_native(native)


def graph_builder(index: int) -> Any:
    """Start capturing a graph for device ``index`` on a stream of its own (launch into
    ``builder.stream.handle``): work other threads enqueue meanwhile, on any stream, is neither
    captured nor refused."""
    builder = make_current(index).create_graph_builder()
    builder.begin_building()
    return builder


def finish_graph(builder: Any, previous: Any = None) -> Any:
    """End a capture and return its executable graph: ``previous`` updated in place
    (cuGraphExecUpdate, no new instantiation) when given and the captured work has its
    topology, else a newly instantiated graph."""
    builder.end_building()
    if previous is not None:
        try:
            previous.update(builder)
            return previous
        except Exception:  # noqa: BLE001 (the driver refused the update: instantiate anew)
            pass
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


if _compiled.FASTPATH is not None:
    _compiled.FASTPATH.configure(driver_calls=_DRIVER_CALLS, fail=_fail, thread=_THREAD,
                                 context_switches=_CONTEXT_SWITCHES)
