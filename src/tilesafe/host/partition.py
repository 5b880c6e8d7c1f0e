"""Host partitions: a tensor cut into disjoint tiles, one owned by each tile program.

``t.partition(tile_shape)`` *moves* ``t`` into an owned :class:`Partition`;
``ts.borrow_mut(t).partition(tile_shape)`` makes a *borrowed* one that writes ``t`` in place:
the launch that takes it borrows ``t`` exclusively until it completes, after which the borrowed
partition is spent and ``t`` is usable again. (A launch that is rejected borrows nothing, so the
partition can be passed again.) The grid of a launch is the tile grid:
``ceil(extent / tile)`` per axis, so every element belongs to exactly one tile (edge tiles are
partial and masked on the device).

Partitions know the tensor they cut only through its methods (``host.tensor`` builds on this
module): this module imports the driver's ledger and ``shapes``, nothing else of the host.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .._callsite import caller_location
from ..driver.ledger import LEDGER, bump_ownership_epoch
from ..errors import Location, MovedError, PartitionError, PartitionRankError
from ..shapes import MAX_GRID_RANK, tile_grid


class Partition:
    """A tensor split into tiles of ``tile_shape``; passed to a ``tc.MutTensor`` parameter."""

    __slots__ = ("_tensor", "_tile_shape", "_spent_at", "_spent_why", "_borrowed_from",
                 "_positions")

    def __init__(self, tensor: Any, tile_shape: "int | Sequence[int]", *,
                 borrowed_from: Optional[Any] = None, positions: Optional[Any] = None):
        tile = (tile_shape,) if isinstance(tile_shape, (int, np.integer)) else tuple(tile_shape)
        if any(not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t < 1
               for t in tile):
            raise PartitionError(f"tile shape {tile_shape!r} must be positive integers",
                                 caller_location(), hint="e.g. t.partition(1024) or "
                                 "t.partition((64, 64))")
        tile = tuple(int(t) for t in tile)
        if not 1 <= len(tile) <= MAX_GRID_RANK:
            raise PartitionRankError(f"a partition of rank {len(tile)} cannot be made: a launch "
                                     f"grid has 1 to {MAX_GRID_RANK} axes (at most "
                                     f"{MAX_GRID_RANK}), one per partition axis",
                                     caller_location(), hint="reshape the tensor to rank 1 to "
                                     f"{MAX_GRID_RANK} before partitioning (t.reshape(...))")
        if len(tile) != tensor.ndim:
            raise PartitionError(f"tile shape {tile} has rank {len(tile)} but the tensor has "
                                 f"shape {tensor.shape}", caller_location(),
                                 hint="give one tile extent per tensor dimension")
        if positions is not None:
            _check_positions(positions, tensor, len(tile), caller_location())
        self._tensor = tensor
        self._tile_shape = tile
        self._spent_at: Optional[Location] = None
        self._spent_why = ""
        self._borrowed_from = borrowed_from
        self._positions = positions

    # -- metadata (read-only) ---------------------------------------------------------------
    @property
    def tile_shape(self) -> tuple[int, ...]:
        """The shape of each program's tile."""
        return self._tile_shape

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
    def positions(self) -> Optional[Any]:
        """For an indexed partition, the integer tensor of tile coordinates (``(n, rank)``, or
        ``(n,)`` for rank 1): program ``i`` owns the tile at ``positions[i]``; else None."""
        return self._positions

    @property
    def tile_grid(self) -> tuple[int, ...]:
        """Number of tiles per axis: ``ceil(extent / tile)``."""
        return tile_grid(self._tensor.shape, self.tile_shape)

    @property
    def grid(self) -> tuple[int, ...]:
        """The launch grid: the tile grid, or ``(n,)`` (one program per position) for an
        indexed partition."""
        if self._positions is not None:
            return (self._positions.shape[0],)
        return self.tile_grid

    # -- ownership ------------------------------------------------------------------------
    def _check_usable(self, action: str) -> None:
        if self._spent_at is not None:
            raise MovedError(f"cannot {action}: this partition {self._spent_why} at "
                             f"{self._spent_at}", caller_location(),
                             hint="use the tensor it gave back, or make a new partition")
        if self._borrowed_from is not None:
            self._borrowed_from._check_usable(action)

    def _spend(self, why: str, where: Location) -> None:
        with LEDGER:
            self._spent_at = where
            self._spent_why = why
            bump_ownership_epoch()

    def _mark_shared(self, where: Location, stream: Any) -> None:
        """The result of a ``.shared()`` op: the partitioned memory becomes read-only, so the
        partition can no longer be launched as an output (called with the ledger held)."""
        self._tensor._mark_shared(where, stream)

    def unpartition(self) -> Any:
        """End the partition and return the whole tensor (the partition is consumed).

        For a borrowed partition this returns the borrowed tensor.
        """
        self._check_usable("unpartition it")
        self._spend("was unpartitioned", caller_location())
        return self._borrowed_from if self._borrowed_from is not None else self._tensor

    def map(self, map_shape: "int | Sequence[int]", num_tile_blocks: int) -> "MappedPartition":
        """Schedule this partition's tiles over ``num_tile_blocks`` persistent tile programs.

        Each program owns the tiles with ids ``b, b + num_tile_blocks, ...`` (ids in grouped
        order, see ``map_shape``); the kernel takes it as a ``tc.MappedPartitionMut``.
        ``map_shape`` has the partition's rank: ``(1, 1)`` is row-major, ``(GM, 1)`` walks bands
        of GM tile rows, ``(GM, GN)`` blocks of GM x GN tiles.
        """
        self._check_usable("map it")
        if self._positions is not None:
            raise PartitionError("an indexed partition cannot be mapped: its programs already "
                                 "own the tiles its positions name", caller_location(),
                                 hint="map a partition made without at=")
        return MappedPartition(self, map_shape, num_tile_blocks)

    def __repr__(self) -> str:
        if self._spent_at is not None:
            return f"Partition(<{self._spent_why} at {self._spent_at}>)"
        kind = "borrowed " if self.is_borrowed else ""
        at = (f", at={self._positions.shape[0]} positions" if self._positions is not None
              else "")
        return (f"Partition({kind}shape={self._tensor.shape}, tile_shape={self.tile_shape}, "
                f"grid={self.grid}{at}, dtype={self._tensor.dtype.short})")


def _check_positions(positions: Any, tensor: Any, rank: int, where: Location) -> None:
    """What ``partition(tile, at=positions)`` needs of ``positions`` before any launch: an
    integer tensor of ``(n, rank)`` tile coordinates (``(n,)`` for rank 1) on the tensor's
    device. Whether they are in range and distinct is checked by every launch (the values
    can change between launches)."""
    if not hasattr(positions, "_alloc"):
        kind = type(positions)
        foreign = hasattr(positions, "__dlpack__") or hasattr(positions, "__array_interface__")
        package = kind.__module__.split(".")[0]
        name = kind.__qualname__ if package == "builtins" else f"{package}.{kind.__qualname__}"
        raise PartitionError(f"positions must be a tilesafe tensor of tile coordinates, got "
                             f"{name}", where,
                             hint="import it without a copy: at=ts.from_dlpack(positions)"
                             if foreign else "e.g. at=ts.tensor(np.array([[0, 3], [2, 1]], "
                             "np.int32)) (a DeviceOp: .sync() it first)")
    dtype = positions.dtype
    if not dtype.is_int:
        raise PartitionError(f"positions must hold integers, got {dtype.short}", where,
                             hint="convert them to int32 on the host: "
                             "ts.tensor(positions.numpy().astype(np.int32)).sync()")
    shape = positions.shape
    if not (len(shape) == 2 and shape[1] == rank or len(shape) == 1 and rank == 1):
        want = "(n,) or (n, 1)" if rank == 1 else f"(n, {rank})"
        raise PartitionError(f"positions of shape {shape} for a rank-{rank} partition: give "
                             f"one row of {rank} tile coordinate(s) per program, {want}", where)
    if positions.device != tensor.device:
        raise PartitionError(f"positions are on {positions.device}, the tensor on "
                             f"{tensor.device}", where,
                             hint=f"move them: positions.to('{tensor.device}').sync()")
    if shape[0] >= 1 << 31:
        raise PartitionError(f"{shape[0]} positions: a launch has fewer than 2**31 programs",
                             where)
    if shape[0] == 0:
        raise PartitionError("positions has no rows: an indexed partition has one program per "
                             "position, and a launch needs at least one", where,
                             hint="skip the launch when there is nothing to write")


class MappedPartition:
    """A partition scheduled over a fixed number of persistent tile programs (see
    :meth:`Partition.map`); passed to a ``tc.MappedPartitionMut`` parameter. The launch grid
    is ``(num_tile_blocks,)``."""

    __slots__ = ("_partition", "_map_shape", "_num_tile_blocks")

    def __init__(self, partition: Partition, map_shape: "int | Sequence[int]",
                 num_tile_blocks: int):
        where = caller_location()
        shape = (map_shape,) if isinstance(map_shape, int) else tuple(map_shape)
        rank = len(partition.tile_shape)
        if not 1 <= rank <= 3:
            raise PartitionError(f"a mapped partition has rank 1 to 3, got {rank}", where)
        if len(shape) != rank or any(not isinstance(d, int) or isinstance(d, bool) or d < 1
                                     for d in shape):
            raise PartitionError(f"map shape {shape} must be {rank} positive ints (the "
                                 "partition's rank)", where, hint="e.g. (8, 1) to walk bands "
                                 "of 8 tile rows, (1, 1) for row-major order")
        if rank == 1 and shape != (1,) or rank == 3 and shape[0] != 1:
            raise PartitionError(f"map shape {shape}: only the last two axes can be grouped",
                                 where, hint="use 1 on the other axes")
        total = 1
        for g in partition.grid:
            total *= g
        if not isinstance(num_tile_blocks, int) or isinstance(num_tile_blocks, bool) or \
                not 0 < num_tile_blocks <= max(total, 1):
            raise PartitionError(f"num_tile_blocks must be an int between 1 and the number of "
                                 f"tiles ({total}), got {num_tile_blocks!r}", where,
                                 hint="e.g. the number of SMs, or a multiple of it")
        if total >= 1 << 31:
            raise PartitionError(f"a mapped partition of {total} tiles: tile ids beyond 2**31 - 1 "
                                 "do not fit the kernel's 32-bit indices", where,
                                 hint="use larger tiles, or map a smaller view in several "
                                 "launches")
        if any(d >= 1 << 31 for d in shape):
            raise PartitionError(f"map shape {shape}: a group of 2**31 tiles or more does not "
                                 "fit the kernel's 32-bit indices", where,
                                 hint="use at most the tile grid's extent on each axis")
        self._partition = partition
        self._map_shape = shape
        self._num_tile_blocks = num_tile_blocks

    @property
    def partition(self) -> Partition:
        """The partition scheduled."""
        return self._partition

    def _mark_shared(self, where: Location, stream: Any) -> None:
        """The result of a ``.shared()`` op: the partitioned memory becomes read-only."""
        self._partition._mark_shared(where, stream)

    @property
    def map_shape(self) -> tuple[int, ...]:
        """How tile ids walk the grid (see :meth:`Partition.map`)."""
        return self._map_shape

    @property
    def num_tile_blocks(self) -> int:
        """The number of persistent tile programs."""
        return self._num_tile_blocks

    @property
    def device(self):
        """The device of the partitioned tensor."""
        return self.partition.device

    @property
    def grid(self) -> tuple[int]:
        """The launch grid: one axis of ``num_tile_blocks`` programs."""
        return (self.num_tile_blocks,)

    def unpartition(self):
        """End the mapping and the partition; returns the tensor."""
        return self.partition.unpartition()

    def __repr__(self) -> str:
        return (f"MappedPartition({self.partition!r}, map_shape={self.map_shape}, "
                f"num_tile_blocks={self.num_tile_blocks})")


class BorrowMut:
    """An exclusive borrow of a tensor, made by :func:`borrow_mut`; partition it to launch."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Any):
        self._tensor = tensor

    def _mark_shared(self, where: Location, stream: Any) -> None:
        """The result of a ``.shared()`` op: the borrowed tensor becomes read-only."""
        self._tensor._mark_shared(where, stream)

    def partition(self, tile_shape: "int | Sequence[int]", *,
                  at: Optional[Any] = None) -> Partition:
        """A partition that writes the borrowed tensor in place. The launch that takes it
        borrows the tensor exclusively until it completes. With ``at`` (an integer tensor of
        tile coordinates, see ``Tensor.partition``) program ``i`` owns the tile at
        ``at[i]``."""
        t = self._tensor
        t._check_access("borrow this tensor mutably", write=True, in_pipeline=True)
        return Partition(t._alias(), tile_shape, borrowed_from=t, positions=at)
