"""The static types of the typed tile IR: tiles, tensor views, partitions and raw pointers.

A *tile* is an immutable value with a static shape and an element type; scalars are rank-0
tiles. A *tensor view* is a kernel parameter in global memory: shared (read-only, dims may be
dynamic) or mutable (the tile program's own sub-tensor, static tile shape). An *atomic tensor*
is one that every program updates by atomic read-modify-writes only. A *partition view*
is a shared tensor cut into tiles of a static shape. This module also owns Tile IR's tile-shape
rules (powers of two, at most 2**24 elements), enforced on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..dtypes import DType
from ..shapes import MAX_GRID_RANK

MAX_TILE_ELEMENTS = 1 << 24
MAX_PARTITION_RANK = MAX_GRID_RANK


@dataclass(frozen=True)
class TileType:
    """An immutable tile: ``dtype`` elements in a static ``shape`` (``()`` for a scalar)."""

    dtype: DType
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def with_shape(self, shape: tuple[int, ...]) -> "TileType":
        return TileType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: DType) -> "TileType":
        return TileType(dtype, self.shape)

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"tile<{dims + 'x' if dims else ''}{self.dtype.short}>"


@dataclass(frozen=True)
class TensorViewType:
    """A tensor parameter in global memory.

    Attributes:
        dtype: element type.
        shape: per-dimension extent, ``None`` for a dynamic dimension. For a mutable view this
            is the static tile shape of the program's own sub-tensor.
        mutable: True for a ``tc.MutTensor`` (exclusive sub-tensor), False for a shared
            read-only ``tc.Tensor``.
        positions: for a MutTensor bound to an indexed partition (``partition(tile,
            at=positions)``), the integer dtype of the positions: program ``i`` owns the tile
            at ``positions[i]``; None when program ``(x, y, z)`` owns tile ``(x, y, z)``.
    """

    dtype: DType
    shape: tuple[Optional[int], ...]
    mutable: bool
    positions: Optional[DType] = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        kind = "mut_tensor" if self.mutable else "tensor"
        at = f" at positions<{self.positions.short}>" if self.positions is not None else ""
        return f"{kind}<{dims}x{self.dtype.short}{at}>"


@dataclass(frozen=True)
class AtomicTensorType:
    """A ``tc.AtomicTensor`` parameter: global memory that every program may update by atomic
    read-modify-writes only (no loads, no stores). ``shape`` as a shared tensor view's."""

    dtype: DType
    shape: tuple[Optional[int], ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"atomic_tensor<{dims}x{self.dtype.short}>"


@dataclass(frozen=True)
class PartitionViewType:
    """A shared tensor viewed as a grid of ``tile_shape`` tiles (read-only)."""

    tensor: TensorViewType
    tile_shape: tuple[int, ...]

    @property
    def dtype(self) -> DType:
        return self.tensor.dtype

    @property
    def rank(self) -> int:
        return len(self.tile_shape)

    @property
    def tile_type(self) -> TileType:
        return TileType(self.tensor.dtype, self.tile_shape)

    def __str__(self) -> str:
        return f"partition<{'x'.join(map(str, self.tile_shape))} of {self.tensor}>"


@dataclass(frozen=True)
class PointerType:
    """A raw pointer parameter (``tc.Ptr[dtype]``): unsafe, no bounds known to the compiler."""

    dtype: DType

    def __str__(self) -> str:
        return f"ptr<{self.dtype.short}>"


@dataclass(frozen=True)
class MappedPartitionType:
    """A ``tc.MappedPartitionMut`` parameter: an output partitioned into ``tile_shape`` tiles,
    of which this program owns the statically scheduled set that ``iter_indices()`` yields.
    ``map_shape`` groups the tile grid (``(GM, GN)`` bands); ``brand`` is the parameter name,
    so indices of one mapped partition cannot be used with another."""

    dtype: DType
    tile_shape: tuple[int, ...]
    map_shape: tuple[int, ...]
    brand: str

    @property
    def rank(self) -> int:
        return len(self.tile_shape)

    @property
    def tile_type(self) -> TileType:
        return TileType(self.dtype, self.tile_shape)

    def __str__(self) -> str:
        return (f"mapped_partition<{'x'.join(map(str, self.tile_shape))}x{self.dtype.short}, "
                f"map={list(self.map_shape)}, '{self.brand}'>")


@dataclass(frozen=True)
class PartitionIndexType:
    """A tile index minted by ``iter_indices()`` of the mapped partition named ``brand``."""

    rank: int
    brand: str

    def __str__(self) -> str:
        return f"partition_index<{self.rank}, '{self.brand}'>"


IRType = (TileType | TensorViewType | PartitionViewType | PointerType | MappedPartitionType
          | PartitionIndexType | AtomicTensorType)


def is_power_of_two(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def tile_shape_problem(shape: tuple[int, ...]) -> str | None:
    """Why ``shape`` is not a legal tile shape, or None when it is.

    Tile IR requires every dimension to be a power of two and at most 2**24 elements in all.
    """
    for d in shape:
        if not isinstance(d, int) or isinstance(d, bool):
            return f"tile dimension {d!r} is not a compile-time integer"
        if not is_power_of_two(d):
            return f"tile dimension {d} is not a power of two"
    n = 1
    for d in shape:
        n *= d
    if n > MAX_TILE_ELEMENTS:
        return f"tile of shape {shape} has {n} elements, more than 2**24"
    return None


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcasting of two static shapes, or None when incompatible."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and da != 1 and db != 1:
            return None
        out.append(max(da, db))
    return tuple(reversed(out))
