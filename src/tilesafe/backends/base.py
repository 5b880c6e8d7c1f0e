"""The backend interface: what a backend implements to run kernels on one kind of device.

A backend turns a verified :class:`~tilesafe.compiler.ir.KernelIR` into something that runs,
in stages (``stages``, run in order by ``tilesafe.pipeline``), and marshals a launch's
arguments for it (``Executable.bind``) once per launch plan. What it is given of a launch's
arguments is a :class:`KernelArg` per non-constant parameter: a neutral description of the
memory (the allocation's data, element offset, shape, strides, dtype) or the scalar, so a
backend never sees the host's tensors, partitions or ownership state.

The two backends are ``interp`` (the numpy interpreter, for ``cpu``) and ``tileir`` (Tile IR
bytecode, ``tileiras``, cubins, for ``cuda``); ``tilesafe.backends`` registers them by device
kind. This module may import the compiler's IR types, ``dtypes`` and the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional, Protocol, Sequence

from ..compiler.ir import KernelIR
from ..driver.device import Device
from ..driver.platform import Platform
from ..driver.stream import Stream
from ..dtypes import DType


@dataclass(frozen=True)
class Target:
    """What a kernel is compiled for: a backend, an architecture (``"sm_90"``; ``"numpy"`` for
    the interpreter) and the device it is loaded on (None: compile ahead of time only)."""

    backend: str
    arch: str
    device: Optional[Device] = None


@dataclass(frozen=True, eq=False)
class KernelArg:
    """One non-constant launch argument as a backend sees it.

    ``kind`` is the IR parameter kind: ``"tensor"`` (a shared input), ``"partition"`` (the
    partitioned output a ``tc.MutTensor`` names), ``"mapped"`` (a mapped partition),
    ``"atomic"`` (the whole tensor a ``tc.AtomicTensor`` updates), ``"pointer"`` (a raw
    pointer) or ``"scalar"``. For memory, ``data`` is the allocation's
    storage (a 1-D numpy array on ``cpu``, a device buffer on ``cuda``), ``offset`` the view's
    element offset, ``shape``/``strides`` in elements; partitions add their tile shape,
    mapped partitions their map shape, an indexed partition its ``positions`` (an ``(n, rank)``
    integer tensor argument). A scalar has its ``value``."""

    name: str
    kind: str
    dtype: DType
    value: Any = None
    data: Any = None
    platform: Optional[Platform] = None
    offset: int = 0
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    tile_shape: tuple[int, ...] = ()
    map_shape: tuple[int, ...] = ()
    positions: Optional["KernelArg"] = None

    def array(self) -> Any:
        """A writable strided numpy view of the elements (where the host can address them)."""
        return self.platform.host_array(self.data, self.offset, self.shape, self.strides)

    def address(self) -> int:
        """The device address of element 0."""
        return self.platform.address(self.data, self.offset * self.dtype.itemsize)


class BoundLaunch(Protocol):
    """A launch with its arguments marshalled, ready to run any number of times."""

    #: whether running it only enqueues device work (nothing runs on the host)
    enqueues_only: bool
    #: an object the launch lends and the stream hands back when the launch completes
    #: (``_spend(why, where)``, like a borrowed partition), where the backend reads what the
    #: kernel reported (a failed bounds check), or None
    fault_record: Any

    def launch(self, stream: Stream) -> None:
        """Run (or enqueue) the launch on ``stream``."""


class Executable(Protocol):
    """A kernel compiled and loaded for one target."""

    def bind(self, args: Sequence[KernelArg], grid: tuple[int, int, int]) -> BoundLaunch:
        """Marshal a launch's arguments (one per non-constant parameter, in order)."""


Stage = Callable[[Any], Any]


class Backend(Protocol):
    """A way to run kernels on one kind of device (``device_kind``)."""

    name: str
    device_kind: str

    def target(self, device: Device) -> Target:
        """The target that kernels launched on ``device`` are compiled for."""

    def ahead_of_time(self, arch: str) -> Target:
        """A target for compiling without a device (``tilesafe check --target``)."""

    def launch_facts(self, ir: KernelIR, args: Sequence[KernelArg]) -> Hashable:
        """What the compiled code may assume about these arguments (alignment, ...): part of
        the executable's cache key; ``()`` when the backend assumes nothing."""

    def stages(self, target: Target, *, hints: dict, facts: Hashable,
               on_compiled: Callable[[], None]) -> list[tuple[str, Stage]]:
        """The compile stages after the front end, in order, each a named function of the
        previous stage's result (the first takes the verified IR). The last returns an
        :class:`Executable` when ``target`` has a device, else the compiled artifact (a
        cubin). ``on_compiled`` is called when a stage really compiled (not a cache hit)."""

    def kernel_probe(self) -> Optional[Callable[[], str]]:
        """For devices that need a compiler: a function that says with what kernels compile,
        or raises why they cannot (``driver.device.register_kernel_probe``); else None."""
