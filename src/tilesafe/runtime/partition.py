"""Host partitions: a tensor cut into disjoint tiles, one owned by each tile program.

A :class:`Partition` owns the tensor it was made from (the tensor was moved into it). The grid
of a launch is the partition's tile grid: ``ceil(extent / tile)`` per axis, so every element
belongs to exactly one tile (edge tiles are partial and masked on the device).
"""

from __future__ import annotations

from typing import Sequence

from ..errors import MovedError, PartitionError
from .callsite import caller_location
from .tensor import Tensor


class Partition:
    """A tensor split into tiles of ``tile_shape``; passed to a ``tc.MutTensor`` parameter."""

    __slots__ = ("_tensor", "tile_shape", "_consumed_at")

    def __init__(self, tensor: Tensor, tile_shape: "int | Sequence[int]"):
        tile = (tile_shape,) if isinstance(tile_shape, int) else tuple(tile_shape)
        if len(tile) != tensor.ndim:
            raise PartitionError(f"tile shape {tile} has rank {len(tile)} but the tensor has "
                                 f"shape {tensor.shape}", caller_location(),
                                 hint="give one tile extent per tensor dimension")
        if any(not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in tile):
            raise PartitionError(f"tile shape {tile} must be positive integers", caller_location())
        self._tensor = tensor
        self.tile_shape = tile
        self._consumed_at = None

    @property
    def tensor(self) -> Tensor:
        """The partitioned tensor (for reading metadata; it stays owned by the partition)."""
        self._check_usable("use it")
        return self._tensor

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
    def grid(self) -> tuple[int, ...]:
        """Number of tiles per axis: ``ceil(extent / tile)``."""
        return tuple(-(-d // t) for d, t in zip(self._tensor.shape, self.tile_shape))

    def _check_usable(self, action: str) -> None:
        if self._consumed_at is not None:
            raise MovedError(f"cannot {action}: this partition was unpartitioned at "
                             f"{self._consumed_at}", caller_location(),
                             hint="use the tensor that unpartition() returned")

    def unpartition(self) -> Tensor:
        """End the partition and return the whole tensor (the partition is consumed)."""
        self._check_usable("unpartition it")
        self._consumed_at = caller_location()
        return self._tensor

    def __repr__(self) -> str:
        if self._consumed_at is not None:
            return f"Partition(<unpartitioned at {self._consumed_at}>)"
        return (f"Partition(shape={self._tensor.shape}, tile_shape={self.tile_shape}, "
                f"grid={self.grid}, dtype={self._tensor.dtype.short})")
