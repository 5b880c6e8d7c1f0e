"""Atomic borrows: ``ts.atomic(t)`` lends a tensor to one launch's atomic updates.

A kernel parameter ``tc.AtomicTensor[dtype, shape]`` takes ``ts.atomic(t)``. Like
``ts.borrow_mut(t)``, the launch that takes it borrows ``t`` exclusively (mutably, in device
addresses: an argument sharing a byte with ``t`` is refused, and the host cannot read or write
``t`` until the launch completes). Unlike a partition it gives every tile program the whole
tensor, which is safe only because the kernel can do nothing to it but atomic
read-modify-writes (safety rule 12).

What the launch hands back in its place is ``t`` itself, readable once the launch completes:
``h, x = histogram(ts.atomic(h), x, grid=...).sync()``. An :class:`AtomicBorrow` is not spent
by a launch; it can be passed again (each launch borrows ``t`` anew), and it becomes unusable
when ``t`` is moved.

This module builds on ``host.tensor`` (tensors and their ownership checks) and ``host.lazy``.
"""

from __future__ import annotations

from typing import Any

from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp
from .lazy import not_run_yet
from .tensor import Tensor

__all__ = ["AtomicBorrow", "atomic"]


class AtomicBorrow:
    """A tensor lent to the atomic updates of the launch it is passed to (``ts.atomic(t)``),
    for a ``tc.AtomicTensor`` parameter."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor):
        self._tensor = tensor

    @property
    def tensor(self) -> Tensor:
        """The borrowed tensor (what a launch hands back for this argument)."""
        return self._tensor

    def _mark_shared(self, where: Any, stream: Any) -> None:
        """The result of a ``.shared()`` op: the tensor becomes read-only (no atomic update
        reaches it either)."""
        self._tensor._mark_shared(where, stream)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._tensor.shape

    @property
    def dtype(self):
        return self._tensor.dtype

    @property
    def device(self):
        return self._tensor.device

    @property
    def ndim(self) -> int:
        return self._tensor.ndim

    def _check_usable(self, action: str) -> None:
        self._tensor._check_usable(action)

    def __repr__(self) -> str:
        t = self._tensor
        return f"AtomicBorrow(shape={t.shape}, dtype={t.dtype.short}, device={t.device})"


def atomic(tensor: Tensor) -> AtomicBorrow:
    """Lend ``tensor`` to a launch's atomic updates, for a ``tc.AtomicTensor`` parameter.

    The launch borrows it exclusively until it completes (no other argument may share its
    memory; the host cannot read or write it meanwhile) and hands ``tensor`` back in the
    borrow's place. Inside the kernel every tile program may update any element, by atomic
    read-modify-writes only (``a.atomic_add(value, *indices)``, ``atomic_max``, ...).
    Float additions land in an unspecified order, so float sums may differ in the last bits
    from run to run (the interpreter's order: ``ts.interpreter_atomic_order``).
    """
    if isinstance(tensor, DeviceOp):
        raise not_run_yet("ts.atomic takes a tensor", tensor, caller_location(),
                          ": ts.atomic(op.sync())")
    if not isinstance(tensor, Tensor):
        raise TypeError(f"ts.atomic takes a tilesafe Tensor, got {type(tensor).__name__}")
    tensor._check_access("lend this tensor to atomic updates", write=True, in_pipeline=True)
    return AtomicBorrow(tensor)
