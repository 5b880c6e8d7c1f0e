"""Fault records: how a GPU kernel's failed bounds check reaches the host (safety rule 10).

A kernel with checked accesses (``compiler.bounds.checked_accesses``) writes its first failed
check into a small record of host-visible memory (layout: ``lower/checks.py``). Each bound
launch of such a kernel (one per launch plan: the same argument objects) has its own
:class:`FaultRecord`; every launch of it lends the record to the launch, and the borrow ends
when the stream the launch ran on is synchronized (the stream calls ``_spend``, as for a
borrowed partition): then the host reads the record and, if a check failed, clears it and
raises :class:`~tilesafe.errors.IndexOutOfRangeError` (or ``PositionsError``) naming the
kernel, the access's file:line, the tile program and the index, in the words the interpreter
uses.

A record also holds one word of device memory, the *verdict* of a kernel whose indexed
partitions' positions a launch of one program validates before it (``lower/positions.py``):
that launch writes it (0: passed, 1: failed) and reports a failure to the record; the kernel
reads it. A new word holds "failed" until its first validation writes it.

The access itself stayed inside its tensor (a bounds-checked view, a masked gather or atomic),
so no memory outside the tensors was touched. Launches that share a record share their
argument objects, so they cannot be in flight on two streams at once when they write an
output (their loans conflict): a report reaches the stream of the launch that made it. The
memory of a record goes back to a per-device pool when its bound launch is dropped (a pending
launch's stream holds its record until it is synchronized).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Optional

from ...compiler.bounds import (UNRECORDED, access_rank, fault_sites, out_of_range_message,
                                positions_message)
from ...compiler.ir import KernelIR
from ...driver import cuda
from ..._callsite import caller_location
from ...errors import CudaError, IndexOutOfRangeError, PositionsError, TilesafeError
from .lower.checks import (FAULT_WORDS, REPORTED_AXES, WORD_AXES, WORD_BOUND, WORD_INDEX,
                           WORD_PROGRAM, WORD_SITE)

__all__ = ["FaultRecord", "FaultRecords", "fault_records_for"]


class FaultRecord:
    """A fault record of a bound launch of ``kernel`` (made by :class:`FaultRecords`)."""

    def __init__(self, kernel: KernelIR, memory: Any, sites: Optional[list] = None):
        """``memory``: ``FAULT_WORDS`` zeroed int64 words the kernel can write (``words``, a
        numpy view the host reads, and ``address``, the device address; ``verdict``, the
        device address of the record's verdict word, where it has one); ``sites``: the
        kernel's ``fault_sites`` when already known."""
        self.kernel_name = kernel.name
        #: where the kernel is defined: a failure found before any program ran (an indexed
        #: partition's positions) has no line of the body to name
        self.kernel_location = kernel.location
        self.sites = fault_sites(kernel) if sites is None else sites
        self._memory = memory
        self.address = memory.address
        #: the device address of the positions verdict word (module docstring)
        self.verdict_address = getattr(memory, "verdict", None)
        self._reading = threading.Lock()  # one reader takes a report: it is raised once

    def _spend(self, why: str, where: Any) -> None:
        """The launch that borrowed the record has completed: raise what it reported."""
        error = self.take()
        if error is not None:
            raise error

    def take(self) -> Optional[TilesafeError]:
        """The error a completed launch reported (clearing the record), or None."""
        words = self._memory.words
        if int(words[WORD_SITE]) == 0:  # (the common case: no lock)
            return None
        with self._reading:
            site = int(words[WORD_SITE])
            if site == 0:
                return None
            record = [int(w) for w in words]
            words[:] = 0
        return self._describe(site, record)

    def _describe(self, site: int, record: list[int]) -> TilesafeError:
        if not 1 <= site <= len(self.sites):
            return IndexOutOfRangeError(f"kernel '{self.kernel_name}' reported a failed bounds "
                                        f"check at an unknown site {site}")
        op = self.sites[site - 1]
        if not hasattr(op, "operands"):  # an indexed partition's positions (a parameter)
            rank = len(op.value.type.shape)
            problem = positions_message(record[WORD_PROGRAM],
                                        record[WORD_INDEX:WORD_INDEX + rank],
                                        record[WORD_BOUND:WORD_BOUND + rank],
                                        duplicate=record[WORD_AXES] == 2)
            defined = f"{self.kernel_location}: " if self.kernel_location else ""
            return PositionsError(f"{defined}kernel '{self.kernel_name}', the indexed partition "
                                  f"'{op.name}': {problem} (found by the kernel before any "
                                  "program wrote; raised where the launch's stream was "
                                  "synchronized)", hint="give each program a distinct tile "
                                  "inside the partition's tile grid")
        rank = access_rank(op)
        named = min(rank, REPORTED_AXES)  # (the axes past these are not in the record)
        unnamed = [None] * (rank - named)
        index = record[WORD_INDEX:WORD_INDEX + named] + unnamed
        bounds = record[WORD_BOUND:WORD_BOUND + named] + unnamed
        if op.name != "partition_load":
            bad = record[WORD_AXES]
            # (a failed axis past the named ones has its bit in the mask, but no index word)
            index = [(UNRECORDED if i is None else i) if bad >> axis & 1 else None
                     for axis, i in enumerate(index)]
        program = tuple(record[WORD_PROGRAM:WORD_PROGRAM + 3])
        where = f"{op.location}: " if op.location else ""
        return IndexOutOfRangeError(
            f"{where}in kernel '{self.kernel_name}', tile program {program}: "
            f"{out_of_range_message(op.name, index, bounds, op.attrs)} (found by the GPU's bounds "
            "check, which kept the access inside the tensor; raised where the launch's stream "
            "was synchronized)")


_FREE: dict[int, list] = {}  # device index -> the memory of dropped records, zeroed
_FREE_LOCK = threading.Lock()


#: what a verdict word holds before any validating launch wrote it: failed, so a kernel that
#: ran without its validation (which ``ValidatedLaunch`` never enqueues) would write nothing
VERDICT_UNVALIDATED = 1

#: records per page-locked allocation: a launch plan takes one, and allocating page-locked
#: memory is slow and not allowed while a CUDA graph is being captured on the device (a
#: library call made inside a torch graph capture binds a new plan), so records come in slabs
SLAB = 256


class _Slice:
    """``FAULT_WORDS`` words of a slab (what a record writes: ``address``, ``words``) and one
    word of its device slab (``verdict``); keeps both slabs alive."""

    __slots__ = ("slab", "address", "words", "device_slab", "verdict")

    def __init__(self, slab: Any, device_slab: Any, at: int):
        self.slab, self.device_slab = slab, device_slab
        self.address = slab.address + at * FAULT_WORDS * 8
        self.words = slab.words[at * FAULT_WORDS:(at + 1) * FAULT_WORDS]
        self.verdict = device_slab.address + at * 4


def _add_slab(index: int, free: list) -> None:
    try:
        slab = cuda.MappedWords(index, FAULT_WORDS * SLAB)
        device_slab = cuda.DeviceWords(index, SLAB, initial=VERDICT_UNVALIDATED)
    except CudaError as err:
        if "CAPTURE" not in str(err):
            raise
        raise CudaError(f"{caller_location()}: a launch with run-time checks needs a fault record, "
                        "and none is left to take while a CUDA graph is being captured (a record's "
                        "page-locked words and its device verdict word cannot be allocated, nor "
                        "the verdict set, then)\n  fix: reserve records before "
                        "the capture: tilesafe.kernels.reserve_fault_records(n) with n at least "
                        "the number of checked launches the capture records") from None
    free.extend(_Slice(slab, device_slab, i) for i in range(SLAB - 1, -1, -1))


def _take(index: int) -> Any:
    with _FREE_LOCK:
        free = _FREE.setdefault(index, [])
        if not free:
            _add_slab(index, free)
        return free.pop()


def reserve(index: int, count: int) -> None:
    """Make sure at least ``count`` fault records of device ``index`` are free (allocated now,
    in slabs): for work about to be captured into a graph, where none can be allocated."""
    with _FREE_LOCK:
        free = _FREE.setdefault(index, [])
        while len(free) < count:
            _add_slab(index, free)


def _give_back(index: int, memory: Any) -> None:
    memory.words[:] = 0
    with _FREE_LOCK:
        _FREE.setdefault(index, []).append(memory)


class FaultRecords:
    """Makes the fault records of one executable of ``kernel`` on device ``index``: one for
    each bound launch (``TileIRExecutable.bind``)."""

    def __init__(self, kernel: KernelIR, index: int):
        self.kernel, self.index = kernel, index
        self.sites = fault_sites(kernel)  # (worked out once: a record is made per launch plan)

    def new(self) -> FaultRecord:
        memory = _take(self.index)
        record = FaultRecord(self.kernel, memory, self.sites)
        finalizer = weakref.finalize(record, _give_back, self.index, memory)
        finalizer.atexit = False
        return record


def fault_records_for(kernel: KernelIR, index: int) -> Optional[FaultRecords]:
    """What makes the fault records of an executable of ``kernel`` on device ``index``, if it
    has checked accesses."""
    records = FaultRecords(kernel, index)
    return records if records.sites else None
