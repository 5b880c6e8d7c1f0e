"""The values that the ops' numpy semantics read for kernel arguments: a tensor argument is a
strided numpy array over host storage (storage dtype), a partitioned output adds its tile
shape, a mapped one its map shape, a raw pointer is the whole allocation and an offset.

The interpreter backend makes them from a launch's arguments; the op registry's ``evaluate``
functions (``compiler.ops``) read them. Plain data: this module imports only ``dtypes`` and
``shapes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..dtypes import DType
from ..shapes import tile_grid


@dataclass(frozen=True)
class TensorBinding:
    """A tensor argument (a shared input, or an atomic tensor, which the atomic ops update in
    place): ``data`` is a strided numpy view of host storage (storage dtype)."""

    data: np.ndarray
    dtype: DType


@dataclass(frozen=True)
class PartitionBinding:
    """A partition of a shared tensor made inside a kernel (``x.partition(shape)``)."""

    tensor: TensorBinding
    tile_shape: tuple[int, ...]
    padding: str

    def grid(self) -> tuple[int, ...]:
        return tile_grid(self.tensor.data.shape, self.tile_shape)


@dataclass(frozen=True)
class PointerBinding:
    """A raw pointer: the whole allocation (1-D storage) and the element offset pointed at."""

    buffer: np.ndarray
    offset: int
    dtype: DType


@dataclass(frozen=True)
class MutTensorBinding(TensorBinding):
    """A partitioned output: the whole tensor and the partition's tile shape; for an indexed
    partition, ``positions``: an ``(n, rank)`` int64 array, program ``i`` owning the tile at
    ``positions[i]``."""

    tile_shape: tuple[int, ...] = ()
    positions: Optional[np.ndarray] = None

    def own_index(self, program_id: tuple) -> tuple:
        """The tile coordinates of the sub-tensor program ``program_id`` owns."""
        if self.positions is not None:
            return tuple(int(i) for i in self.positions[program_id[0]])
        return tuple(program_id[:self.data.ndim])

    def grid(self) -> tuple[int, ...]:
        return tile_grid(self.data.shape, self.tile_shape)


@dataclass(frozen=True)
class MappedBinding(MutTensorBinding):
    """A mapped partition argument: the whole output, its tile shape and map shape."""

    map_shape: tuple[int, ...] = ()
