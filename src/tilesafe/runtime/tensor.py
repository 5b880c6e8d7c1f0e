"""The host :class:`Tensor`: a typed, strided view of an allocation on a device, with the
ownership state the launch boundary checks (moved or not).

On the ``cpu`` device the allocation is a 1-D numpy array of the dtype's storage type. Shape and
strides are in elements. A tensor moved into a partition (``t.partition(...)``) cannot be used
again: every access raises :class:`~tilesafe.errors.MovedError` naming the line of the move.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..dtypes import DType
from ..errors import Location, MovedError
from .callsite import caller_location
from .device import CPU, Device


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _normalize_shape(shape: "int | Sequence[int]") -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise ValueError(f"bad tensor shape {shape!r}: extents must be non-negative ints")
    return tuple(int(d) for d in dims)


class Tensor:
    """A tensor on a device (host side).

    Attributes:
        shape: extents per dimension.
        strides: element strides per dimension.
        dtype: the :class:`~tilesafe.dtypes.DType` of the elements.
        device: the :class:`~tilesafe.runtime.device.Device` holding the memory.
    """

    __slots__ = ("_buffer", "_offset", "shape", "strides", "dtype", "device", "_moved_at",
                 "__weakref__")

    def __init__(self, buffer: np.ndarray, shape: "int | Sequence[int]", dtype: DType, *,
                 offset: int = 0, strides: Optional[Sequence[int]] = None,
                 device: Device = CPU):
        self._buffer = buffer
        self._offset = int(offset)
        self.shape = _normalize_shape(shape)
        self.strides = tuple(strides) if strides is not None else contiguous_strides(self.shape)
        self.dtype = dtype
        self.device = device
        self._moved_at: Optional[Location] = None

    # -- properties -----------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)

    # -- ownership ------------------------------------------------------------------------
    def _check_usable(self, action: str) -> None:
        if self._moved_at is not None:
            raise MovedError(f"cannot {action}: this tensor was moved at {self._moved_at}",
                             caller_location(),
                             hint="use the value the move produced (the partition, or what "
                             "the launch returned); call .unpartition() to get the tensor back")

    def _move(self, where: Location) -> None:
        self._check_usable("move it")
        self._moved_at = where

    # -- data -----------------------------------------------------------------------------
    def _array(self) -> np.ndarray:
        """A writable strided numpy view (storage dtype) of this tensor's elements."""
        item = self._buffer.itemsize
        return np.lib.stride_tricks.as_strided(
            self._buffer[self._offset:], shape=self.shape,
            strides=tuple(s * item for s in self.strides), writeable=True)

    def numpy(self) -> np.ndarray:
        """A copy of the elements as a numpy array (bf16 tensors come back as float32)."""
        self._check_usable("read it")
        return np.array(self.dtype.to_compute(self._array()), copy=True)

    def partition(self, tile_shape: "int | Sequence[int]") -> "Partition":
        """Move this tensor into a partition of ``tile_shape`` tiles (one per tile program).

        The tensor itself can no longer be used; ``partition.unpartition()`` gives it back.
        """
        from .partition import Partition
        where = caller_location()
        self._move(where)
        inner = Tensor(self._buffer, self.shape, self.dtype, offset=self._offset,
                       strides=self.strides, device=self.device)
        return Partition(inner, tile_shape)

    def __repr__(self) -> str:
        if self._moved_at is not None:
            return f"Tensor(<moved at {self._moved_at}>)"
        return (f"Tensor(shape={self.shape}, dtype={self.dtype.short}, device={self.device})")

    def __len__(self) -> int:
        self._check_usable("take its length")
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]
