"""The ownership ledger: allocations and the loans on them, who may touch which bytes now.

An :class:`Allocation` is one block of device memory (on ``cpu``, a 1-D numpy array of the
storage dtype). Tensors are typed, strided views of an allocation. Work that is created but not
yet complete (a pending DeviceOp, a borrowed partition) holds :class:`Loan` s on the byte
ranges it may touch: *shared* loans for inputs, *mutable* loans for outputs. While a loan
lasts:

* reading bytes under a mutable loan raises :class:`~tilesafe.errors.BorrowError`;
* writing, or lending mutably, bytes under any loan raises it too.

Completion (sync, an awaited future, an observed event) releases the loan. Work enqueued on a
stream is ordered after earlier work on the same stream, so loans held by that stream do not
stop it from enqueueing more (they still stop the host). Byte ranges are the conservative
footprint ``[lowest, highest]`` of a view.

Threads (awaited pipelines run on waiter threads) share the loans, so every ownership step
holds :data:`LEDGER` from its checks to its effect: a launch's checks and loans, the end of
loans, a move, a spend, and a host access until its data has moved.

Loans are taken by :func:`take_loans` (check, then lend) and, for work repeated on one stream,
:func:`shared_or_new_loans`; they end through :func:`release_all`. This module imports only
``errors`` and ``driver.device`` (and the compiled lock, ``driver._ledger``).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

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
    if loan is not None:
        raise BorrowError(f"cannot {action}: its memory is {describe(loan)}, which has not "
                          "completed", where,
                          hint="drive that work to completion first (.sync() or await it); "
                          "its results come back from the launch")


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


class Allocation:
    """A block of memory on one device, with its loan book (the loans of pending work).

    Attributes:
        data: the backing store (a 1-D numpy array on ``cpu``).
        device: where it lives.
        owner: a foreign object kept alive with the memory (DLPack imports), or None.
        loans: the loan book: the live loans on this memory.
    """

    __slots__ = ("data", "device", "owner", "loans", "__weakref__")

    def __init__(self, data: Any, device: Device, owner: Any = None):
        self.data = data
        self.device = device
        self.owner = owner
        self.loans: list[Loan] = []

    def conflict(self, lo: int, hi: int, *, write: bool, stream: Any = None) -> Optional[Loan]:
        """The first loan on this memory that forbids the access (see :func:`conflict`)."""
        return conflict(self.loans, lo, hi, write=write, stream=stream)

    def check(self, lo: int, hi: int, *, write: bool, action: str, where: Location,
              stream: Any = None) -> None:
        """Raise BorrowError if a loan on this memory forbids ``action``."""
        check(self.loans, lo, hi, write=write, action=action, where=where, stream=stream)


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


def take_loans(borrows: list, holder: str, where: Location, stream: Any) -> list:
    """Check every borrow ``(book, lo, hi, mutable, action)`` against the loans of pending
    work, then lend them all (the caller holds :data:`LEDGER`)."""
    for book, lo, hi, mutable, action in borrows:
        if book:
            check(book, lo, hi, write=mutable, action=action, where=where, stream=stream)
    return [lend(book, lo, hi, mutable=mutable, holder=holder, where=where, stream=stream)
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
