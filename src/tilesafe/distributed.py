"""Collectives over tilesafe tensors through ``torch.distributed``, as DeviceOps that borrow
their buffers like a launch.

``all_reduce``, ``broadcast``, ``all_gather``, ``reduce_scatter``, ``send`` and ``recv`` each
return a lazy :class:`~tilesafe.DeviceOp`; nothing is sent until it is driven (``.sync()``,
``await``, a ``.then`` chain). While it runs, the op holds loans on its buffers exactly as a
kernel launch does: a buffer it writes (the all-reduced tensor, a gather's output, a received
tensor) mutably, a buffer it only reads (a gather's input, a sent tensor) shared. So the host,
another thread, another op or a DLPack import of the same memory cannot read a buffer that is
being written, or write one that is being read, until the collective completes; the
arguments are checked for overlap (``AliasingError``) before anything is sent.

The tensors are handed to ``torch.distributed`` without a copy (DLPack views made under the
ledger's lock and dropped when the collective returns). Processes are started as
torch.distributed expects (``torchrun``, or ``init_process_group`` in each process); a process
group must be initialized before an op is driven.

On ``cpu`` tensors (the ``gloo`` backend) a collective runs synchronously inside the op and its
loans end when it returns. On ``cuda`` tensors (NCCL) it is enqueued in the order of the
tilesafe stream the op is driven on, never with a device-wide wait: torch.distributed is
called with that stream as torch's current stream (an ``ExternalStream`` over it), so NCCL
starts after the work enqueued on it before, and ``work.wait()`` makes the stream wait for the
collective (the host does not). The loans, and the tensors themselves, are then handed to the
stream like a launch's: they end when the stream is synchronized, the point where the host
knows the collective completed. A collective cannot be recorded into a tilesafe graph (it is
refused there, as any op without graph nodes).

Imports the host layer (tensors), the DeviceOp machinery, the ledger and ``torch`` (on first
use).
"""

from __future__ import annotations

from typing import Any, Sequence

from ._callsite import caller_location
from .deviceops.deviceop import DeviceOp
from .driver.ledger import LEDGER, release_all, take_loans
from .driver.stream import HeldUntilComplete, current_stream
from .errors import AliasingError, ArgumentError, DeviceOpError, Location
from .host.export import loaned_capsule
from .host.tensor import Tensor

__all__ = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "send", "recv",
           "REDUCE_OPS"]

#: the reductions, by name, as torch.distributed calls them
REDUCE_OPS = ("sum", "product", "min", "max", "avg")


def all_reduce(tensor: Tensor, op: str = "sum", *, group: Any = None) -> DeviceOp[Tensor]:
    """Reduce ``tensor`` across every process of ``group`` (default: the world) in place; the
    op's result is ``tensor``, mutably borrowed until the reduction completes.

    Args:
        tensor: a contiguous tilesafe tensor, the same shape and dtype in every process.
        op: one of :data:`REDUCE_OPS` (``"avg"``: only where the backend has it).
        group: a ``torch.distributed`` process group.
    """
    where = caller_location()
    reduce_op = _reduce_op(op, where)
    return _collective("all_reduce", [], [("tensor", tensor)], where,
                       lambda dist, views: dist.all_reduce(views[0], op=reduce_op(dist),
                                                           group=group, async_op=True),
                       result=tensor, group=group)


def broadcast(tensor: Tensor, src: int, *, group: Any = None) -> DeviceOp[Tensor]:
    """Replace ``tensor`` in every process by process ``src``'s (its global rank); the result
    is ``tensor``, mutably borrowed until the broadcast completes (in ``src`` too: it must not
    change while it is being sent)."""
    where = caller_location()
    return _collective("broadcast", [], [("tensor", tensor)], where,
                       lambda dist, views: dist.broadcast(views[0], src=int(src), group=group,
                                                         async_op=True),
                       result=tensor, group=group)


def all_gather(output: Tensor, input: Tensor, *, group: Any = None) -> DeviceOp[Tensor]:
    """Write every process's ``input`` into ``output``, in rank order along the first axis
    (``output`` is ``(world_size * n, ...)`` for an ``(n, ...)`` input); ``input`` is borrowed
    shared and ``output`` mutably until the gather completes. The result is ``output``."""
    where = caller_location()
    _gathered("all_gather", ("output", output), ("input", input), where)
    return _collective("all_gather", [("input", input)], [("output", output)], where,
                       lambda dist, views: dist.all_gather_into_tensor(views[1], views[0],
                                                                       group=group,
                                                                       async_op=True),
                       result=output, group=group)


def reduce_scatter(output: Tensor, input: Tensor, op: str = "sum", *,
                   group: Any = None) -> DeviceOp[Tensor]:
    """Reduce ``input`` (``(world_size * n, ...)``) across the processes and write block
    ``rank`` of the first axis (``(n, ...)``) into ``output``; ``input`` is borrowed shared and
    ``output`` mutably until it completes. The result is ``output``."""
    where = caller_location()
    reduce_op = _reduce_op(op, where)
    _gathered("reduce_scatter", ("input", input), ("output", output), where)
    return _collective("reduce_scatter", [("input", input)], [("output", output)], where,
                       lambda dist, views: dist.reduce_scatter_tensor(
                           views[1], views[0], op=reduce_op(dist), group=group, async_op=True),
                       result=output, group=group)


def send(tensor: Tensor, dst: int, *, group: Any = None) -> DeviceOp[Tensor]:
    """Send ``tensor`` to process ``dst`` (the op completes when the send has, the buffer free
    again); ``tensor`` is borrowed shared meanwhile. The result is ``tensor``."""
    where = caller_location()
    return _collective("send", [("tensor", tensor)], [], where,
                       lambda dist, views: dist.isend(views[0], dst=int(dst), group=group),
                       result=tensor, group=group)


def recv(tensor: Tensor, src: int, *, group: Any = None) -> DeviceOp[Tensor]:
    """Receive into ``tensor`` what process ``src`` sends; ``tensor`` is borrowed mutably until
    it arrives. The result is ``tensor``."""
    where = caller_location()
    return _collective("recv", [], [("tensor", tensor)], where,
                       lambda dist, views: dist.irecv(views[0], src=int(src), group=group),
                       result=tensor, group=group)


# -- the one implementation ----------------------------------------------------------------

def _collective(name: str, reads: Sequence[tuple[str, Tensor]],
                writes: Sequence[tuple[str, Tensor]], where: Location, call: Any, *,
                result: Tensor, group: Any = None) -> DeviceOp:
    """The checked op of one collective (see :class:`_CollectiveOp`)."""
    named = [*reads, *writes]
    for label, t in named:
        _check_tensor(name, label, t, where)
    device = named[0][1].device
    for label, t in named[1:]:
        if t.device != device:
            raise ArgumentError(f"{name}: '{label}' is on {t.device}, '{named[0][0]}' on "
                                f"{device}", where, hint="give a collective tensors of one device")
    if device.kind not in ("cpu", "cuda"):
        raise ArgumentError(f"{name}: the tensors are on {device}; collectives run on cpu "
                            "(gloo) and cuda (NCCL) tensors", where,
                            hint="copy the tensors to a cpu or cuda device first")
    _refuse_overlap(name, named, len(reads), where)
    return _CollectiveOp(name, reads, writes, where, call, result, group)


class _CollectiveOp(DeviceOp):
    """A collective as pending work: from its creation it holds shared loans on the tensors it
    reads and mutable ones on those it writes (as a launch does), until it completes, fails, or
    is dropped without being driven. Driven, it runs ``call(torch.distributed, views)`` with
    zero-copy torch views of the reads then the writes (dropped before the loans end)."""

    __slots__ = ("_name", "_tensors", "_call", "_result", "_loans", "_where", "_borrows",
                 "_group")

    def __init__(self, name: str, reads: Sequence[tuple[str, Tensor]],
                 writes: Sequence[tuple[str, Tensor]], where: Location, call: Any,
                 result: Tensor, group: Any = None):
        tensors = [t for _, t in (*reads, *writes)]
        shapes = ", ".join(f"{t.shape} {t.dtype.short}" for t in tensors)
        super().__init__(None, f"{name}({shapes}) created at {where}", tensors[0].device)
        self._name, self._tensors, self._call, self._result = name, tensors, call, result
        self._where, self._group = where, group
        self._borrows = [(t, False, f"{name} reading it") for _, t in reads] + \
            [(t, True, f"{name} writing it") for _, t in writes]
        # Inside a running pipeline (a .then step), work already enqueued on its stream does
        # not block the collective, which runs after it there; the loans are then valid for
        # that stream only (_perform checks again for the stream it runs on), as a launch's.
        early_stream = current_stream()
        with LEDGER:
            for _, t in reads:
                t._check_access(f"send it ({name})", write=False, in_pipeline=True)
            for _, t in writes:
                t._check_access(f"receive into it ({name})", write=True, in_pipeline=True)
            self._loans = take_loans(self._loan_books(), f"the pending {name} created at "
                                     f"{where}", where, early_stream)

    def _loan_books(self) -> list:
        """What the collective borrows, in the loan books its tensors' memory has now (read
        anew each time: an import that overlaps one of them merges their books, and loans
        lent into a book no memory points to any more would stop nothing)."""
        return [(t._alloc.loans, *t.span(), mutable, action)
                for t, mutable, action in self._borrows]

    def _perform(self, stream: Any) -> Tensor:
        """Run the collective in ``stream``'s order (module docstring). While torch.distributed
        runs it, its loans are its own: work another thread puts on ``stream`` meanwhile is
        not ordered after it (on a GPU, NCCL runs on its own stream until ``stream`` waits for
        it), so such work is refused by the loans, not let through as later work there."""
        on_gpu = self._tensors[0].device.kind == "cuda"
        with LEDGER:  # (the loans of its creation go; private ones, checked for `stream`, come)
            release_all(self._loans)
            self._loans = take_loans(self._loan_books(), f"the running {self._name} created "
                                     f"at {self._where}", self._where, stream, private=True)
        enqueued = False  # (then torch may still touch the buffers: the loans must not end)
        try:
            import torch
            dist = _initialized(self._name, self._where)
            _refuse_coalescing(dist, self._name, self._where)
            _refuse_outsider(dist, self._group, self._name, self._where)
            views = [torch.from_dlpack(loaned_capsule(t)) for t in self._tensors]
            try:
                if on_gpu:
                    with torch.cuda.stream(_torch_stream(torch, stream, views[0].device)):
                        work = self._hand_to_torch(dist, views)
                        enqueued = True
                        work.wait()  # (the stream waits for NCCL's; the host does not)
                else:
                    with stream.order_lock:  # (the stream's other host work: before or after)
                        work = self._hand_to_torch(dist, views)
                        enqueued = True
                        work.wait()  # (complete: nothing touches the buffers after this)
            finally:
                del views[:]  # (no view of ours outlives the loans)
        except _Deferred as deferred:
            raise deferred.error from None  # (queued to run later: the loans stay, for good)
        except BaseException as err:
            if not enqueued:
                release_all(self._loans)
                raise
            # started, then failed: whether torch still touches the buffers is unknown
            raise DeviceOpError(f"{self._name} created at {self._where} failed after torch "
                                f"started it ({type(err).__name__}: {err}); its buffers stay "
                                "borrowed for good, since it may still be running") from err
        if on_gpu:  # (the stream now orders later work after it: the loans become the
            self._hand_to_stream(stream)  # stream's, and end when it is synchronized)
        else:
            release_all(self._loans)
        return self._result

    def _hand_to_stream(self, stream: Any) -> None:
        """The loans end, and the tensors are let go, when ``stream`` is synchronized; until
        then they are the stream's (later work on it may use the buffers), as a launch's."""
        for loan in self._loans:
            loan.stream = stream
        stream.on_complete(self._loans, [HeldUntilComplete(self._tensors)], self._where)

    def _hand_to_torch(self, dist: Any, views: list) -> Any:
        """The collective handed to torch.distributed, which returns its work object; one
        queued to run later (a coalescing context opened behind the check) would touch the
        buffers after this op returns, so its loans are kept for good and it is refused."""
        work = self._call(dist, views)
        if work is None or type(work).__name__ == "_IllegalWork":
            raise _Deferred(ArgumentError(
                f"{self._name}: torch.distributed queued the collective to run later instead "
                "of running it; its buffers stay borrowed for good", self._where,
                hint="do not drive tilesafe collectives inside torch.distributed's coalescing "
                     "contexts"))
        return work

    def _consume(self, how: str) -> None:
        super()._consume(how)
        if how != "driven":
            release_all(self._loans)

    def graph_nodes(self) -> None:
        return None  # (a host-side collective cannot be captured into a graph)

    def __del__(self) -> None:
        # dropped without being driven: the loans go back
        loans = getattr(self, "_loans", None)
        if loans and self._driven_at is None:
            release_all(loans)


#: torch's wrapper of each tilesafe stream collectives ran on, by (device, driver handle):
#: a wrapper is only the handle on its device, so a handle reused by a later stream of the
#: same device is still wrapped right; at most :data:`STREAMS_KEPT` are kept
_TORCH_STREAMS: dict = {}
STREAMS_KEPT = 64


def _torch_stream(torch: Any, stream: Any, device: Any) -> Any:
    """``stream`` as a ``torch.cuda.ExternalStream`` on ``device`` (torch's current stream
    for the call)."""
    key = (device.index, stream.native_address)
    wrapped = _TORCH_STREAMS.get(key)
    if wrapped is None:
        if len(_TORCH_STREAMS) >= STREAMS_KEPT:
            _TORCH_STREAMS.clear()
        wrapped = _TORCH_STREAMS[key] = torch.cuda.ExternalStream(key[1], device=device)
    return wrapped


class _Deferred(Exception):
    """A collective torch.distributed only queued: ``error`` is what the caller gets."""

    def __init__(self, error: ArgumentError):
        super().__init__(str(error))
        self.error = error


def _check_tensor(name: str, label: str, t: Any, where: Location) -> None:
    if isinstance(t, DeviceOp):
        raise ArgumentError(f"{name}: '{label}' is a DeviceOp that has not run", where,
                            hint="pass the tensor it produces (op.sync())")
    if not isinstance(t, Tensor):
        raise ArgumentError(f"{name}: '{label}' is a {type(t).__name__}, not a tilesafe "
                            "Tensor", where,
                            hint="import it first (ts.from_dlpack(x) or ts.tensor(x))")
    t._check_usable(f"use it in {name}")
    if not t.is_contiguous:
        raise ArgumentError(f"{name}: '{label}' is not contiguous (strides {t.strides})",
                            where, hint="pass a contiguous copy (t.clone())")


def _refuse_overlap(name: str, named: Sequence[tuple[str, Tensor]], first_write: int,
                    where: Location) -> None:
    """A written buffer may share no byte with any other argument (as a launch's)."""
    for i in range(first_write, len(named)):
        label, w = named[i]
        for j, (other_label, other) in enumerate(named):
            if j != i and w._overlaps(other):
                raise AliasingError(f"{name}: '{label}' (written) and '{other_label}' overlap "
                                    "in memory", where,
                                    hint="gather or scatter between separate tensors")


def _gathered(name: str, whole: tuple[str, Any], part: tuple[str, Any],
              where: Location) -> None:
    """The tensor ``whole`` must be ``(k * n, ...)`` for ``part`` ``(n, ...)``, one dtype (``k``,
    the world size, is checked by torch.distributed when it runs)."""
    (whole_label, w), (part_label, p) = whole, part
    _check_tensor(name, whole_label, w, where)
    _check_tensor(name, part_label, p, where)
    if w.dtype != p.dtype:
        raise ArgumentError(f"{name}: '{whole_label}' is {w.dtype.name}, '{part_label}' "
                            f"{p.dtype.name}", where, hint="give both one dtype")
    if len(w.shape) != len(p.shape) or not p.shape or tuple(w.shape[1:]) != tuple(p.shape[1:]) \
            or not p.shape[0] or w.shape[0] % p.shape[0]:
        raise ArgumentError(f"{name}: '{whole_label}' of shape {tuple(w.shape)} cannot hold "
                            f"world-size blocks of '{part_label}' {tuple(p.shape)} along its "
                            "first axis", where,
                            hint="make it (world_size * n, ...) for an (n, ...) part")


def _refuse_coalescing(dist: Any, name: str, where: Location) -> None:
    """A collective called inside torch.distributed's coalescing context is only queued, to
    run when the context ends: after this op would have given its loans back. Refused."""
    world = getattr(getattr(dist, "distributed_c10d", None), "_world", None)
    if getattr(world, "pg_coalesce_state", None):
        raise ArgumentError(f"{name}: called inside a torch.distributed coalescing context, "
                            "where it would run only when the context ends, after its "
                            "buffers' loans", where,
                            hint="drive tilesafe collectives outside coalescing contexts")


def _refuse_outsider(dist: Any, group: Any, name: str, where: Location) -> None:
    """torch.distributed skips a collective of a group this process is not in (it returns no
    work): refused before anything is handed to it."""
    not_in = getattr(getattr(dist, "distributed_c10d", None), "_rank_not_in_group", None)
    if group is not None and not_in is not None and not_in(group):
        raise ArgumentError(f"{name}: this process (rank {dist.get_rank()}) is not in the "
                            "process group given", where,
                            hint="call a group's collectives only in its member processes")


def _reduce_op(op: str, where: Location) -> Any:
    if op not in REDUCE_OPS:
        raise ArgumentError(f"unknown reduction {op!r}", where,
                            hint="one of " + ", ".join(REDUCE_OPS))
    return lambda dist: getattr(dist.ReduceOp, op.upper())


def _initialized(name: str, where: Location) -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        raise ArgumentError(f"{name}: torch is not installed", where,
                            hint="pip install torch (the collectives run through "
                                 "torch.distributed)") from None
    if not dist.is_available() or not dist.is_initialized():
        raise ArgumentError(f"{name}: no torch.distributed process group is initialized in "
                            "this process", where,
                            hint="start the processes with torchrun, or call "
                                 "torch.distributed.init_process_group('gloo', ...) first")
    return dist
