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


class Loan:
    """A borrow of ``[lo, hi)`` bytes of an allocation by pending work ``holder``; ``count``
    uses of the same range by work on one stream share it."""

    __slots__ = ("allocation", "lo", "hi", "mutable", "holder", "where", "stream", "count")

    def __init__(self, allocation: "Allocation", lo: int, hi: int, mutable: bool, holder: str,
                 where: Optional[Location], stream: Any = None):
        self.allocation, self.lo, self.hi, self.mutable = allocation, lo, hi, mutable
        self.holder, self.where, self.stream, self.count = holder, where, stream, 1

    def overlaps(self, lo: int, hi: int) -> bool:
        return self.lo < hi and lo < self.hi

    def describe(self) -> str:
        kind = "mutably" if self.mutable else "shared"
        at = f" (created at {self.where})" if self.where else ""
        return f"{kind} borrowed by {self.holder}{at}"


class Allocation:
    """A block of memory on one device, with its active loans.

    Attributes:
        data: the backing store (a 1-D numpy array on ``cpu``).
        device: where it lives.
        owner: a foreign object kept alive with the memory (DLPack imports), or None.
    """

    __slots__ = ("data", "device", "owner", "loans", "__weakref__")

    def __init__(self, data: Any, device: Device, owner: Any = None):
        self.data = data
        self.device = device
        self.owner = owner
        self.loans: list[Loan] = []

    # -- checks ---------------------------------------------------------------------------
    def conflict(self, lo: int, hi: int, *, write: bool, stream: Any = None) -> Optional[Loan]:
        """The first loan that forbids reading (``write=False``) or writing/lending mutably
        (``write=True``) the bytes ``[lo, hi)``, or None. Work enqueued on ``stream`` is not
        blocked by loans of earlier work on that same stream."""
        for loan in self.loans:
            if loan.overlaps(lo, hi) and (write or loan.mutable) and \
                    (stream is None or loan.stream is not stream):
                return loan
        return None

    def check(self, lo: int, hi: int, *, write: bool, action: str, where: Location,
              stream: Any = None) -> None:
        loan = self.conflict(lo, hi, write=write, stream=stream)
        if loan is not None:
            raise BorrowError(f"cannot {action}: its memory is {loan.describe()}, which has not "
                              "completed", where,
                              hint="drive that work to completion first (.sync() or await it); "
                              "its results come back from the launch")

    # -- lending --------------------------------------------------------------------------
    def lend(self, lo: int, hi: int, *, mutable: bool, holder: str,
             where: Optional[Location], stream: Any = None) -> Loan:
        if stream is not None:  # repeated work on one stream shares one loan (counted)
            for loan in self.loans:
                if loan.stream is stream and (loan.lo, loan.hi, loan.mutable) == \
                        (lo, hi, mutable):
                    loan.count += 1
                    return loan
        loan = Loan(self, lo, hi, mutable, holder, where, stream)
        self.loans.append(loan)
        return loan

    def release(self, loan: Loan) -> None:
        """End one use of ``loan`` (a loan shared by several uses ends with the last)."""
        if loan.count > 1:
            loan.count -= 1
            return
        loan.count = 0
        try:
            self.loans.remove(loan)
        except ValueError:
            pass  # already released


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


def release_all(loans: list[Loan]) -> None:
    """Release every loan in ``loans`` (idempotent) and empty the list."""
    LEDGER.acquire()  # (acquire/release: cheaper than a with-block on every launch)
    try:
        for loan in loans:
            loan.allocation.release(loan)
        loans.clear()
    finally:
        LEDGER.release()


def take_loans(borrows: list, holder: str, where: Location, stream: Any) -> list[Loan]:
    """Check every borrow ``(allocation, lo, hi, mutable, action)`` against the loans of
    pending work, then lend them all (the caller holds :data:`LEDGER`)."""
    for alloc, lo, hi, mutable, action in borrows:
        if alloc.loans:
            alloc.check(lo, hi, write=mutable, action=action, where=where, stream=stream)
    return [alloc.lend(lo, hi, mutable=mutable, holder=holder, where=where, stream=stream)
            for alloc, lo, hi, mutable, _ in borrows]


def shared_or_new_loans(owner: Any, borrows: list, holder: str, where: Location,
                        stream: Any) -> list[Loan]:
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
