"""The ownership ledger: allocations and the loans on them, who may touch which bytes now.

An :class:`Allocation` is one block of device memory (on ``cpu``, a 1-D numpy array of the
storage dtype), or foreign memory imported through DLPack. Tensors are typed, strided views of
an allocation. Work that is created but not yet complete (a pending DeviceOp, a borrowed
partition) holds :class:`Loan` s on the byte ranges it may touch: *shared* loans for inputs,
*mutable* loans for outputs. While a loan lasts:

* reading bytes under a mutable loan raises :class:`~tilesafe.errors.BorrowError`;
* writing, or lending mutably, bytes under any loan raises it too.

Completion (sync, an awaited future, an observed event) releases the loan. Work enqueued on a
stream is ordered after earlier work on the same stream, so loans held by that stream do not
stop it from enqueueing more (they still stop the host). Byte ranges are the conservative
footprint ``[lowest, highest]`` of a view, as device addresses.

Loans are keyed by memory, not by allocation: every allocation and import on a device is a
:class:`Region` of that device's :class:`MemoryMap`, and regions that share a byte share one
loan book (two DLPack imports of one buffer, a slice imported beside the whole, a tilesafe
tensor exported and imported back), so any two tensors over the same bytes conflict exactly as
two views of one allocation do.

Threads (awaited pipelines run on waiter threads) share the loans, so every ownership step
holds :data:`LEDGER` from its checks to its effect: a launch's checks and loans, the end of
loans, a move, a spend, and a host access until its data has moved.

Loans are taken by :func:`take_loans` (check, then lend) and, for work repeated on one stream,
:func:`shared_or_new_loans`; they end through :func:`release_all`. A loan does not keep its
memory alive: what must outlive a Python object over it (memory a call made for work that a
foreign graph records) is collected by :func:`retaining_new_allocations`. This module imports only
``errors`` and ``driver.device`` (and the compiled lock, ``driver._ledger``).
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import threading
import weakref
from typing import Any, Iterator, Optional

from .. import _compiled
from ..errors import BorrowError, Location
from .device import Device

_FAST = _compiled.FASTPATH


class _LoanState:
    """A borrow of ``[lo, hi)`` bytes of the memory whose loans ``book`` lists, by pending
    work ``holder``; ``count`` uses of the same range by work on one stream share it.

    (The Python definition of ``Loan``; the compiled fast path has the same type in C.)"""

    __slots__ = ("book", "lo", "hi", "mutable", "holder", "where", "stream", "count")

    def __init__(self, book: list, lo: int, hi: int, mutable: bool, holder: str,
                 where: Optional[Location], stream: Any = None):
        self.book, self.lo, self.hi, self.mutable = book, lo, hi, mutable
        self.holder, self.where, self.stream, self.count = holder, where, stream, 1


Loan = _FAST.Loan if _FAST is not None else _LoanState


class _ReadOnly:
    """The ``stream`` of a loan that never ends: memory made read-only for good (the result of
    a ``.shared()`` op). No stream is it, so no work is exempt from it."""

    def __repr__(self) -> str:
        return "READ_ONLY"


READ_ONLY = _ReadOnly()


def make_read_only(book: list, lo: int, hi: int, where: Optional[Location]) -> None:
    """Keep the addresses ``[lo, hi)`` read-only from now on, through every path to them (the
    caller holds :data:`LEDGER`)."""
    lend(book, lo, hi, mutable=False, holder="the read-only result of .shared()", where=where,
         stream=READ_ONLY)


def is_read_only(book: list, lo: int, hi: int) -> bool:
    """Whether any of the addresses ``[lo, hi)`` was made read-only."""
    return any(loan.stream is READ_ONLY and loan.lo < hi and lo < loan.hi for loan in book)


def describe(loan: Loan) -> str:
    """How a borrow error names ``loan``."""
    kind = "mutably" if loan.mutable else "shared"
    at = f" (created at {loan.where})" if loan.where else ""
    return f"{kind} borrowed by {loan.holder}{at}"


def conflict(book: list, lo: int, hi: int, *, write: bool, stream: Any = None) -> Optional[Loan]:
    """The first loan of ``book`` that forbids reading (``write=False``) or writing/lending
    mutably (``write=True``) the bytes ``[lo, hi)``, or None. Work enqueued on ``stream`` is
    not blocked by loans of earlier work on that same stream."""
    for loan in book:
        if loan.lo < hi and lo < loan.hi and (write or loan.mutable) and \
                (stream is None or loan.stream is not stream):
            return loan
    return None


def check(book: list, lo: int, hi: int, *, write: bool, action: str, where: Location,
          stream: Any = None) -> None:
    """Raise BorrowError if a loan of ``book`` forbids ``action`` (see :func:`conflict`)."""
    loan = conflict(book, lo, hi, write=write, stream=stream)
    if loan is not None and loan.stream is READ_ONLY:
        raise BorrowError(f"cannot {action}: its memory is the read-only result of .shared() "
                          f"(at {loan.where}), reached through another tensor over the same "
                          "bytes", where, hint="pass it as a tc.Tensor input; to modify it, "
                          "copy it first with .clone()")
    if loan is not None:
        hint = getattr(loan.stream, "pending_hint", None) or (
            "drive that work to completion first (.sync() or await it), or, where another "
            "thread or task already runs it (an await that timed out goes on), wait for that; "
            "its results come back from the launch")
        raise BorrowError(f"cannot {action}: its memory is {describe(loan)}, which has not "
                          "completed", where, hint=hint)


def lend(book: list, lo: int, hi: int, *, mutable: bool, holder: str,
         where: Optional[Location], stream: Any = None) -> Loan:
    """Lend ``[lo, hi)``: a new loan in ``book``, or one more use of a loan of the same range
    that work on the same ``stream`` holds (repeated work on one stream shares it)."""
    if stream is not None:
        for loan in book:
            if loan.stream is stream and loan.lo == lo and loan.hi == hi and \
                    loan.mutable == mutable:
                loan.count += 1
                return loan
    loan = Loan(book, lo, hi, mutable, holder, where, stream)
    book.append(loan)
    return loan


def release(loan: Loan) -> None:
    """End one use of ``loan`` (a loan shared by several uses ends with the last)."""
    if loan.count > 1:
        loan.count -= 1
        return
    loan.count = 0
    try:
        loan.book.remove(loan)
    except ValueError:
        pass  # already released


class Region:
    """The address range ``[lo, hi)`` of one live allocation or import on a device, and the
    loan book it shares with every region it overlaps."""

    __slots__ = ("lo", "hi", "book")

    def __init__(self, lo: int, hi: int, book: list):
        self.lo, self.hi, self.book = lo, hi, book


class MemoryMap:
    """The live regions of one device, sorted by address (an interval index). Registering a
    region that overlaps others gives it their book; overlapping regions of different books
    merge them into one (which bumps the ownership epoch: plans validated before re-check)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._regions: list[Region] = []
        self._widest = 0

    def overlapping(self, lo: int, hi: int) -> list[Region]:
        """The live regions sharing a byte with ``[lo, hi)``."""
        end = bisect.bisect_left(self._starts, hi)
        found, i = [], end - 1
        while i >= 0 and self._starts[i] > lo - self._widest - 1:
            region = self._regions[i]
            if region.hi > lo and region.lo < hi:
                found.append(region)
            i -= 1
        return found

    def register(self, lo: int, hi: int) -> Region:
        """A new region for ``[lo, hi)``, in the book of the regions it overlaps (the caller
        holds :data:`LEDGER`)."""
        books: list[list] = []
        for other in self.overlapping(lo, hi) if hi > lo else ():
            if not any(other.book is b for b in books):
                books.append(other.book)
        if not books:
            book: list = []
        else:
            book = books[0]
            for other_book in books[1:]:  # one group now: one book
                for loan in other_book:
                    loan.book = book
                book.extend(other_book)
                other_book.clear()
                for region in self._regions:
                    if region.book is other_book:
                        region.book = book
            if len(books) > 1:
                bump_ownership_epoch()
        region = Region(lo, hi, book)
        at = bisect.bisect_right(self._starts, lo)
        self._starts.insert(at, lo)
        self._regions.insert(at, region)
        self._widest = max(self._widest, hi - lo)
        return region

    def remove(self, region: Region) -> None:
        """Forget a region whose memory is gone (its allocation was collected)."""
        with LEDGER:
            at = bisect.bisect_left(self._starts, region.lo)
            while at < len(self._regions) and self._starts[at] == region.lo:
                if self._regions[at] is region:
                    del self._starts[at], self._regions[at]
                    return
                at += 1


#: every device's memory, in one map: host and device addresses are one virtual address space
#: (CUDA's unified addressing, on every 64-bit platform it supports), so memory a GPU reaches
#: at a host address (pinned, mapped or managed memory) imported once as ``cpu`` and once as
#: ``cuda:N`` is one region, with one loan book, like any two imports of one buffer
_MAP = MemoryMap()


def memory_map(device: Device) -> MemoryMap:
    """The memory map ``device``'s allocations are registered in (one for every device: see
    ``_MAP``)."""
    return _MAP


#: while set (to a list), each allocation of tilesafe's own memory made in this context is
#: appended to it (:func:`retaining_new_allocations`)
_RETAINED: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar(
    "tilesafe_retained_allocations", default=None)


@contextlib.contextmanager
def retaining_new_allocations() -> Iterator[list]:
    """Collect every allocation of tilesafe's own memory (not an import of foreign memory)
    made inside the block, in this thread or task: for work recorded into a foreign CUDA
    graph (torch's), whose replays may read such memory (a scratch value a launch made for
    itself) after every tilesafe object over it is gone, so the caller keeps them for good."""
    kept: list = []
    token = _RETAINED.set(kept)
    try:
        yield kept
    finally:
        _RETAINED.reset(token)


class Allocation:
    """A block of memory on one device, registered in the device's memory map.

    Attributes:
        data: the backing store (a 1-D numpy array on ``cpu``, a device buffer on ``cuda``).
        device: where it lives.
        owner: a foreign object kept alive with the memory (DLPack imports), or None.
        base: the address of its first byte (loans and conflicts are in addresses).
        readonly: True for memory imported read-only (it is never written or lent mutably).
        loans: the loan book: the live loans on this memory and on every region overlapping it.
    """

    __slots__ = ("data", "device", "owner", "base", "readonly", "region", "__weakref__")

    def __init__(self, data: Any, device: Device, owner: Any = None, *, base: int = 0,
                 nbytes: int = 0, readonly: bool = False):
        self.data = data
        self.device = device
        self.owner = owner
        self.base = base
        self.readonly = readonly
        maps = memory_map(device)
        with LEDGER:
            self.region = maps.register(base, base + nbytes)
        weakref.finalize(self, maps.remove, self.region)
        if owner is None:
            retained = _RETAINED.get()
            if retained is not None:
                retained.append(self)

    @property
    def loans(self) -> list:
        """The loan book of this memory (shared with every region that overlaps it)."""
        return self.region.book

    def conflict(self, lo: int, hi: int, *, write: bool, stream: Any = None) -> Optional[Loan]:
        """The first loan on these addresses that forbids the access (see :func:`conflict`)."""
        return conflict(self.region.book, lo, hi, write=write, stream=stream)

    def check(self, lo: int, hi: int, *, write: bool, action: str, where: Location,
              stream: Any = None) -> None:
        """Raise BorrowError if a loan on the addresses ``[lo, hi)`` forbids ``action``."""
        check(self.region.book, lo, hi, write=write, action=action, where=where, stream=stream)


def _ledger_lock() -> Any:
    """The C re-entrant lock of ``driver/_ledger.c`` when it was built (the compiled launch
    path takes it without a Python call), else ``threading.RLock``;
    ``TILESAFE_COMPILED_PATH=0`` keeps the latter."""
    compiled = _compiled.built("tilesafe.driver._ledger") if _compiled.wanted() else None
    return compiled.Ledger() if compiled is not None else threading.RLock()


LEDGER = _ledger_lock()
"""Held by each ownership step, so that no other thread's step lands between its check and its
effect. Re-entrant: an op collected during a step gives its loans back in the same thread."""

_EPOCH = [0]


def ownership_epoch() -> int:
    """A counter bumped by every move, spend and sharing of a tensor or partition: launch plans
    validated at one epoch stay valid while it is unchanged."""
    return _EPOCH[0]


def bump_ownership_epoch() -> None:
    _EPOCH[0] += 1


def release_all(loans: list) -> None:
    """Release every loan in ``loans`` (idempotent) and empty the list."""
    LEDGER.acquire()  # (acquire/release: cheaper than a with-block on every launch)
    try:
        for loan in loans:
            release(loan)
        loans.clear()
    finally:
        LEDGER.release()


def take_loans(borrows: list, holder: str, where: Location, stream: Any, *,
               private: bool = False) -> list:
    """Check every borrow ``(book, lo, hi, mutable, action)`` against the loans of pending
    work, as work on ``stream``, then lend them all (the caller holds :data:`LEDGER`). The loans
    are ``stream``'s (later work on it shares them and is not refused by them), or with
    ``private`` the holder's alone (refusing every other work until they are made the
    stream's: work that is not yet ordered on ``stream`` while it runs)."""
    for book, lo, hi, mutable, action in borrows:
        if book:
            check(book, lo, hi, write=mutable, action=action, where=where, stream=stream)
    lent_to = None if private else stream
    return [lend(book, lo, hi, mutable=mutable, holder=holder, where=where, stream=lent_to)
            for book, lo, hi, mutable, _ in borrows]


def _shared_or_new_loans(owner: Any, borrows: list, holder: str, where: Location,
                         stream: Any) -> list:
    """The loans of repeated work whose last loans on a stream ``owner.stream_loans`` keeps.
    When that work on this same stream still holds all its loans, the new work shares them
    (one more use each) without checking again: while those loans live, no conflicting loan
    can have been taken (work on other streams and the host are refused by them), and the
    caller has seen the ownership epoch unchanged. Else new loans of ``borrows``."""
    last_stream, loans = owner.stream_loans
    if stream is not None and last_stream is stream and loans:
        for loan in loans:
            if loan.count <= 0:
                break
        else:
            for loan in loans:
                loan.count += 1
            return list(loans)
    loans = take_loans(borrows, holder, where, stream)
    if stream is not None:
        owner.stream_loans = (stream, tuple(loans))
    return loans


def _ledger_functions() -> Any:
    """The C acquire and release of a ``driver._ledger.Ledger`` ledger (else None: the fast
    path calls the lock's Python methods)."""
    compiled = _compiled.built("tilesafe.driver._ledger")
    return compiled.functions() if compiled and type(LEDGER) is compiled.Ledger else None


shared_or_new_loans = _FAST.shared_or_new_loans if _FAST is not None else _shared_or_new_loans
"""The loans of repeated work (see ``_shared_or_new_loans``, its definition)."""

if _FAST is not None:
    _FAST.configure(epoch=_EPOCH, ledger=LEDGER, ledger_functions=_ledger_functions(),
                    take_loans=take_loans)
