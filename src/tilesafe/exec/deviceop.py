"""DeviceOp: a lazy description of device work (a tensor constructor, a kernel launch, a copy).

Nothing runs until the op is driven with :meth:`DeviceOp.sync`. An op can be driven once; its
result is the host value it produces (a tensor, a partition, the tuple of a launch's
arguments). Ops compose without running: ``op.then(fn)`` runs ``fn(result)`` (which may return
another op) after it, ``op.map(fn)`` transforms the result on the host, ``op.partition(shape)``
partitions the tensor an op produces.

On the ``cpu`` device work completes when it is driven.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Sequence, TypeVar

from ..errors import DeviceOpError
from .._callsite import caller_location

T = TypeVar("T")
U = TypeVar("U")


class DeviceOp(Generic[T]):
    """A lazy unit of device work producing a value of type ``T`` when driven."""

    __slots__ = ("_run", "label", "_driven_at", "__weakref__")

    def __init__(self, run: Callable[[], T], label: str):
        self._run = run
        self.label = label
        self._driven_at = None

    def sync(self) -> T:
        """Run the op (and everything it depends on) and wait for completion."""
        return self._drive()

    def _drive(self) -> T:
        if self._driven_at is not None:
            raise DeviceOpError(f"{caller_location()}: this DeviceOp ({self.label}) was already "
                                f"driven at {self._driven_at}; an op runs once\n  fix: build a "
                                "new op for each run")
        self._driven_at = caller_location()
        return self._run()

    def then(self, fn: Callable[[T], "DeviceOp[U] | U"]) -> "DeviceOp[U]":
        """After this op, run ``fn(result)``; if it returns a DeviceOp, that op runs next."""
        def run():
            nxt = fn(self._drive())
            return nxt._drive() if isinstance(nxt, DeviceOp) else nxt
        return DeviceOp(run, f"{self.label}.then({getattr(fn, '__name__', 'fn')})")

    def map(self, fn: Callable[[T], U]) -> "DeviceOp[U]":
        """Transform the result on the host after the op completes."""
        return DeviceOp(lambda: fn(self._drive()), f"{self.label}.map")

    def partition(self, tile_shape: "int | Sequence[int]") -> "DeviceOp[Any]":
        """Partition the tensor this op produces (see ``Tensor.partition``)."""
        return DeviceOp(lambda: self._drive().partition(tile_shape),
                        f"{self.label}.partition({tile_shape})")

    def __repr__(self) -> str:
        state = "driven" if self._driven_at else "pending"
        return f"<DeviceOp {self.label} ({state})>"


def resolve(value: Any) -> Any:
    """Drive ``value`` if it is a DeviceOp; otherwise return it unchanged."""
    return value._drive() if isinstance(value, DeviceOp) else value
