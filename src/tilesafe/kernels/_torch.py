"""Calling the library with torch tensors: zero-copy in and out, on torch's current stream.

:func:`accepts_torch` wraps a library function (``fn(...) -> DeviceOp``). Called with
tilesafe tensors it is that function. Called with torch tensors, each one is imported with
DLPack (no copy), the outputs are allocated by torch (``torch.empty``: its caching allocator,
its device, contiguous), the launch is enqueued on torch's current stream of that device, and
the call returns torch tensors at once, as a torch op does: no host synchronization. (On torch's
CPU device the interpreter runs the launch as it is enqueued.)

Loans: the launch borrows the imported memory like any launch. The work is *marked* on the
stream (``Stream.mark``), and the loans end once it has completed, checked without waiting at
the next library call with torch tensors on that device (whichever of torch's streams it
runs on: work on one stream, synchronized, then a call on another, as torch code does) or by
:func:`release_completed`. So a tilesafe tensor over the same memory stays protected while
the work is pending; torch itself orders its own use of the tensors by the stream, as for its
own ops. The call's imports, and memory tilesafe allocates for the call itself (not its
outputs, which torch allocates: a value ``sample`` makes of an int offset), are held until
then too. A failed run-time check of an earlier call (``IndexOutOfRangeError``,
``PositionsError``) is raised by the first library call on the device after that work
completed, or by :func:`release_completed`.

While torch captures a CUDA graph on the stream, nothing runs: the launch is recorded into
torch's graph and its loans end at once (a torch graph's replays are torch's to order). The
kernel's accesses stay inside their tensors on every replay; a failed check of a replay is not
reported (torch graphs have no place to report it). What the replays use that tilesafe owns is
never freed: the fault records, the memory tilesafe allocated for the call itself (not its
outputs, which torch allocates), and the kernels' modules (``driver.cuda.load_kernel``).

May import every layer below ``kernels``; torch only inside functions (an optional
dependency)."""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable, Optional

from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp
from ..driver.ledger import retaining_new_allocations
from ..driver.stream import HeldUntilComplete, Stream, next_stream, set_current_stream
from ..dtypes import DType
from ..errors import ArgumentError
from ..host.interop import from_dlpack
from ..host.tensor import Tensor
from ._outputs import ALLOCATOR

_STREAMS: dict[tuple[int, int], Stream] = {}
_STREAMS_LOCK = threading.Lock()
#: fault records of launches recorded into torch CUDA graphs: kept out of the pool for good
_RECORDED_FAULT_RECORDS: list = []
#: tilesafe's own allocations made by calls recorded into torch CUDA graphs (an int ``offset``
#: of ``sample`` as a device value, say): never freed, since a replay may read them
_RECORDED_ALLOCATIONS: list = []


def _is_fault_record(item: Any) -> bool:
    from ..backends.tileir.faults import FaultRecord
    return isinstance(item, FaultRecord)


def _is_torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # (no torch imported: no torch tensor either)
    return torch is not None and isinstance(value, torch.Tensor)


def accepts_torch(fn: Callable[..., DeviceOp]) -> Callable[..., Any]:
    """``fn`` (a library function returning a DeviceOp) that also takes torch tensors: see the
    module docstring."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not any(_is_torch_tensor(a) for a in (*args, *kwargs.values())):
            return fn(*args, **kwargs)
        return _call_with_torch(fn, args, kwargs)
    return call


def workspace_accepts_torch(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a workspace constructor: tensors in, a lazy ``empty`` out) that also takes torch
    tensors: they are read through DLPack imports (their shapes and dtypes) and the workspace
    is a new torch tensor on their device."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        values = (*args, *kwargs.values())
        found = next((a for a in values if _is_torch_tensor(a)), None)
        if found is None:
            return fn(*args, **kwargs)
        import torch

        def imported(value: Any) -> Any:
            return from_dlpack(value.detach()) if isinstance(value, torch.Tensor) else value
        made = fn(*map(imported, args), **{k: imported(v) for k, v in kwargs.items()})
        return torch.empty(tuple(made.shape), dtype=torch_dtype(made.dtype),
                           device=found.device)
    return call


def torch_dtype(dtype: DType) -> Any:
    """The torch dtype of a tilesafe one (ArgumentError if torch has none)."""
    import torch
    found = getattr(torch, dtype.name, None)
    if not isinstance(found, torch.dtype):
        raise ArgumentError(f"torch has no dtype for {dtype.name}", caller_location())
    return found


def _call_with_torch(fn: Callable[..., DeviceOp], args: tuple, kwargs: dict) -> Any:
    import torch
    where = caller_location()
    devices = {a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        raise ArgumentError(f"{fn.__name__}: the torch tensors are on several devices "
                            f"({', '.join(sorted(map(str, devices)))})", where,
                            hint="move them to one device first")
    (device,) = devices
    if device.type not in ("cpu", "cuda"):
        raise ArgumentError(f"{fn.__name__}: torch tensors on {device} are not supported "
                            "(cpu and cuda only)", where)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if any(isinstance(a, Tensor) for a in (*args, *kwargs.values())):
        raise ArgumentError(f"{fn.__name__}: torch tensors and tilesafe tensors in one call",
                            where, hint="pass all tensors of one kind (ts.from_dlpack imports "
                            "a torch tensor, torch.from_dlpack a tilesafe one)")
    back: dict[int, tuple] = {}  # id(tilesafe tensor) -> (it, the torch tensor over it)

    def imported(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        mine = from_dlpack(value.detach())
        back[id(mine)] = (mine, value)
        return mine

    def allocate(shape: tuple, dtype: DType, _device: Any) -> Tensor:
        out = torch.empty(shape, dtype=torch_dtype(dtype), device=device)
        mine = from_dlpack(out)
        back[id(mine)] = (mine, out)
        return mine

    stream = _stream_of(device)
    capturing = stream is not None and _capturing(device)
    if stream is not None and not capturing:  # (an event query would end torch's capture)
        _release_completed(device.index)
        reserve_fault_records(FAULT_RECORDS_AHEAD, device=f"cuda:{device.index}")
    runs_on = stream if stream is not None else next_stream("cpu")
    # (memory tilesafe allocates for the call itself is held until the call's work is done:
    # for good when it is recorded into torch's graph, whose replays may read it long after)
    with retaining_new_allocations() as made:
        token = ALLOCATOR.set(allocate)
        # built as a step of work on the stream it runs on: earlier work on that stream (the
        # previous call that wrote this call's input) does not block the new launch's loans
        saved = set_current_stream(runs_on)
        try:
            op = fn(*(imported(a) for a in args), **{k: imported(v) for k, v in kwargs.items()})
        finally:
            set_current_stream(saved)
            ALLOCATOR.reset(token)
        if stream is None:  # torch's cpu device: the interpreter runs the launch now
            result = op._drive(runs_on, where)
        else:
            try:
                result = op._enqueue(stream, where)
            except BaseException:  # (a part enqueued before the failure may read them)
                _hold(made, back, stream, capturing, where)
                raise
    if capturing:
        # recorded into torch's graph, nothing ran (module docstring); a fault record its
        # replays may write is never handed to another launch
        _RECORDED_FAULT_RECORDS.extend(stream._release_recorded(keep=_is_fault_record))
    if stream is not None:
        _hold(made, back, stream, capturing, where)
        if not capturing:
            stream.mark()
    return _to_torch(result, back)


def _hold(made: list, back: dict, stream: Stream, capturing: bool, where: Any) -> None:
    """Keep what a call's work uses while it may use it. Recorded into torch's graph: the
    allocations tilesafe made for the call, for good (the graph's torch tensors are the user's
    to keep, as for any torch graph). Run: those allocations and the call's imports of torch
    tensors (``back``), until the work has completed. Freed earlier, an allocation (on the
    stream that made it) could go to another while a launch on torch's stream still reads it;
    and an import collected early takes its memory's loan book with it, so a new import of
    that memory would see none of the pending loans."""
    if capturing:
        _RECORDED_ALLOCATIONS.extend(made)
        return
    held = [*made, *(mine for mine, _ in back.values())]
    if held:
        stream.on_complete([], [HeldUntilComplete(held)], where)


def _capturing(device: Any) -> bool:
    """Whether torch captures a CUDA graph on its current stream of the cuda ``device`` (the
    stream the call's launches go to), whichever device is current: a call on cuda:0 while
    torch captures on cuda:1 runs eagerly, and must keep its loans until it completes."""
    import torch
    if torch.cuda.current_device() == device.index:
        return torch.cuda.is_current_stream_capturing()
    with torch.cuda.device(device.index):
        return torch.cuda.is_current_stream_capturing()


def _stream_of(device: Any) -> Any:
    """The tilesafe stream over torch's current stream of a cuda ``device`` (one per torch
    stream, so launches on it share loans as work on one stream does); None on cpu."""
    if device.type != "cuda":
        return None
    import torch
    current = torch.cuda.current_stream(device)
    key = (device.index, int(current.cuda_stream))
    found = _STREAMS.get(key)
    if found is None:
        with _STREAMS_LOCK:
            found = _STREAMS.get(key)
            if found is None:
                found = _STREAMS[key] = Stream.wrap(current, f"cuda:{device.index}")
    return found


def _to_torch(value: Any, back: dict[int, tuple]) -> Any:
    if isinstance(value, tuple):
        return type(value)(*(_to_torch(v, back) for v in value)) if hasattr(value, "_fields") \
            else tuple(_to_torch(v, back) for v in value)
    if isinstance(value, Tensor):
        found = back.get(id(value))
        if found is not None:
            return found[1]
        for mine, theirs in back.values():  # a view (a reshape) of a tensor of this call
            if mine._alloc is value._alloc and mine.dtype == value.dtype:
                return theirs.as_strided(value.shape, value.strides, theirs.storage_offset()
                                         + value._offset - mine._offset)
        import torch
        return torch.from_dlpack(value)
    return value


#: fault records kept free ahead of a torch graph capture (each call made while torch captures
#: binds new launches; a launch with run-time checks takes a record, none can be allocated
#: during a capture, and a captured launch keeps its record for good)
FAULT_RECORDS_AHEAD = 1024


def reserve_fault_records(count: int, device: Any = "cuda:0") -> None:
    """Keep at least ``count`` fault records free on a cuda ``device`` (page-locked memory,
    allocated now in slabs): call it before capturing more launches with run-time checks into
    a torch CUDA graph than a call with torch tensors keeps ready (:data:`FAULT_RECORDS_AHEAD`).
    """
    from ..backends.tileir.faults import reserve
    from ..driver.device import as_device
    reserve(as_device(device).index, int(count))


def _release_completed(device_index: Optional[int] = None) -> None:
    """End the loans of completed work on every torch stream used so far (of one device, or of
    all), each stream's whatever another raises; then raise the first failure reported."""
    first: Optional[BaseException] = None
    for (index, _), stream in list(_STREAMS.items()):
        if device_index is None or index == device_index:
            try:
                stream.release_completed()
            except Exception as err:  # (the other streams are released first)
                first = first or err
    if first is not None:
        raise first


def release_completed() -> None:
    """End the loans of library calls made with torch tensors whose work has completed, on
    every torch stream used so far (no wait), raising a run-time check's failure if one of
    them reported one."""
    _release_completed()
