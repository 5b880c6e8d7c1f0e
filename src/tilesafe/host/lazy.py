"""DeviceOps that make a tensor, and know before they run what it will be.

A constructor (``ts.zeros``, ``ts.tensor``, ...), a copy (``t.clone()``) and their
``.partition(tile)`` are :class:`TensorOp` / :class:`PartitionOp`: their ``shape``, ``dtype``
and ``device`` (and ``tile_shape``) are known at once, so a kernel can be specialized and
compiled for them without running them (``Kernel.compile``, ``Kernel.ir``). What needs the
tensor itself (its memory, its numbers) says to call ``.sync()`` first.

This module imports the DeviceOp machinery and ``shapes``; tensors are made by the function a
TensorOp is given (``host.tensor`` builds on this module).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp
from ..driver.device import Device
from ..dtypes import DType
from ..errors import ArgumentError, DeviceOpError, Location
from ..shapes import normalize_shape, tile_grid


def not_run_yet(what: str, op: DeviceOp, where: Location, fix: str) -> ArgumentError:
    """The error for an API that needs a tensor and got a DeviceOp (``what``: "borrow_mut
    takes a tensor", ...): it says to call ``.sync()`` first, with ``fix`` as the example."""
    return ArgumentError(f"{what}, got {op.label}, a DeviceOp not run yet", where,
                         hint=f"call .sync() first{fix}")


class _Described(DeviceOp):
    """A DeviceOp whose result is described before it runs."""

    __slots__ = ()

    def numpy(self) -> Any:
        """Not yet: the tensor is made when the op runs."""
        raise DeviceOpError(f"{caller_location()}: {self.label} has not run, so it has no "
                            "values yet\n  fix: call .sync() first (or pass the op straight "
                            "to a launch)")


class TensorOp(_Described):
    """A DeviceOp producing a tensor of a known ``shape``, ``dtype`` and ``device``."""

    __slots__ = ("shape", "dtype")

    def __init__(self, run: Callable, label: str, device: Device, shape: Sequence[int],
                 dtype: DType):
        super().__init__(run, label, device)
        self.shape = normalize_shape(shape)
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def partition(self, tile_shape: "int | Sequence[int]", *,
                  at: Any = None) -> "PartitionOp":
        """Partition the tensor this op makes (see ``Tensor.partition``; ``at``: the positions
        of an indexed partition), lazily."""
        tile = (tile_shape,) if isinstance(tile_shape, int) else tuple(tile_shape)
        return PartitionOp(self, tile, at)  # checked by Tensor.partition when the op runs


class PartitionOp(_Described):
    """The partition of a :class:`TensorOp`'s tensor into ``tile_shape`` tiles (indexed by
    ``positions`` when given)."""

    __slots__ = ("source", "tile_shape", "positions")

    def __init__(self, source: TensorOp, tile_shape: tuple, positions: Any = None):
        super().__init__(lambda stream: source._execute(stream).partition(tile_shape,
                                                                          at=positions),
                         f"{source.label}.partition({tile_shape})", source.device)
        self.source, self.tile_shape, self.positions = source, tile_shape, positions

    @property
    def shape(self) -> tuple[int, ...]:
        return self.source.shape

    @property
    def dtype(self) -> DType:
        return self.source.dtype

    @property
    def grid(self) -> tuple[int, ...]:
        """The launch grid the partition will have: its tiles per axis, or one program per
        position."""
        if self.positions is not None:
            return (self.positions.shape[0],)
        return tile_grid(self.shape, self.tile_shape)
