"""Host partitions: a tensor cut into disjoint tiles, one owned by each tile program.

``t.partition(tile_shape)`` *moves* ``t`` into an owned :class:`Partition`;
``ts.borrow_mut(t).partition(tile_shape)`` makes a *borrowed* one that writes ``t`` in place:
the launch that takes it borrows ``t`` exclusively until it completes, after which the borrowed
partition is spent and ``t`` is usable again. (A launch that is rejected borrows nothing, so the
partition can be passed again.) The grid of a launch is the tile grid:
``ceil(extent / tile)`` per axis, so every element belongs to exactly one tile (edge tiles are
partial and masked on the device).
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..errors import Location, MovedError, PartitionError
from .callsite import caller_location
from .tensor import Tensor


class Partition:
    """A tensor split into tiles of ``tile_shape``; passed to a ``tc.MutTensor`` parameter."""

    __slots__ = ("_tensor", "tile_shape", "_spent_at", "_spent_why", "_borrowed_from")

    def __init__(self, tensor: Tensor, tile_shape: "int | Sequence[int]", *,
                 borrowed_from: Optional[Tensor] = None):
        tile = (tile_shape,) if isinstance(tile_shape, int) else tuple(tile_shape)
        if len(tile) != tensor.ndim:
            raise PartitionError(f"tile shape {tile} has rank {len(tile)} but the tensor has "
                                 f"shape {tensor.shape}", caller_location(),
                                 hint="give one tile extent per tensor dimension")
        if any(not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in tile):
            raise PartitionError(f"tile shape {tile} must be positive integers",
                                 caller_location())
        self._tensor = tensor
        self.tile_shape = tile
        self._spent_at: Optional[Location] = None
        self._spent_why = ""
        self._borrowed_from = borrowed_from

    # -- metadata -------------------------------------------------------------------------
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
    def is_borrowed(self) -> bool:
        """True for ``ts.borrow_mut(t).partition(...)`` (writes ``t`` in place)."""
        return self._borrowed_from is not None

    @property
    def grid(self) -> tuple[int, ...]:
        """Number of tiles per axis: ``ceil(extent / tile)``."""
        return tuple(-(-d // t) for d, t in zip(self._tensor.shape, self.tile_shape))

    # -- ownership ------------------------------------------------------------------------
    def _check_usable(self, action: str) -> None:
        if self._spent_at is not None:
            raise MovedError(f"cannot {action}: this partition {self._spent_why} at "
                             f"{self._spent_at}", caller_location(),
                             hint="use the tensor it gave back, or make a new partition")
        if self._borrowed_from is not None:
            self._borrowed_from._check_usable(action)

    def _spend(self, why: str, where: Location) -> None:
        self._spent_at = where
        self._spent_why = why

    def unpartition(self) -> Tensor:
        """End the partition and return the whole tensor (the partition is consumed).

        For a borrowed partition this returns the borrowed tensor.
        """
        self._check_usable("unpartition it")
        self._spend("was unpartitioned", caller_location())
        return self._borrowed_from if self._borrowed_from is not None else self._tensor

    def __repr__(self) -> str:
        if self._spent_at is not None:
            return f"Partition(<{self._spent_why} at {self._spent_at}>)"
        kind = "borrowed " if self.is_borrowed else ""
        return (f"Partition({kind}shape={self._tensor.shape}, tile_shape={self.tile_shape}, "
                f"grid={self.grid}, dtype={self._tensor.dtype.short})")


class BorrowMut:
    """An exclusive borrow of a tensor, made by :func:`borrow_mut`; partition it to launch."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor):
        self._tensor = tensor

    def partition(self, tile_shape: "int | Sequence[int]") -> Partition:
        """A partition that writes the borrowed tensor in place. The launch that takes it
        borrows the tensor exclusively until it completes."""
        t = self._tensor
        t._check_access("borrow this tensor mutably", write=True)
        inner = Tensor(t._alloc, t.shape, t.dtype, offset=t._offset, strides=t.strides)
        return Partition(inner, tile_shape, borrowed_from=t)


def borrow_mut(tensor: Tensor) -> BorrowMut:
    """Borrow ``tensor`` exclusively: ``ts.borrow_mut(t).partition(tile_shape)`` gives a
    partition that writes ``t`` in place; ``t`` is usable again once that launch completes."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"borrow_mut takes a tilesafe Tensor, got {type(tensor).__name__}")
    tensor._check_usable("borrow it")
    return BorrowMut(tensor)
