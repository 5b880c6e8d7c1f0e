"""The interpreter as a backend: kernels for the ``cpu`` device run on the numpy executor.

Its one compile stage prepares the IR for the executor (``executor.InterpretedKernel``); a
launch's arguments are marshalled into the bindings the ops' numpy semantics read
(``compiler.bindings``), once per launch plan. It imports the compiler, the driver and the
backend interface.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional, Sequence

import numpy as np

from ...compiler.bindings import (MappedBinding, MutTensorBinding, PointerBinding,
                                  TensorBinding)
from ...compiler.bounds import positions_problem
from ...compiler.ir import KernelIR
from ...driver.device import Device
from ...driver.stream import Stream
from ...errors import PositionsError
from ..base import KernelArg, Stage, Target
from .executor import InterpretedKernel


def binding(arg: KernelArg) -> Any:
    """What the numpy semantics read for one argument."""
    if arg.kind == "scalar":
        return arg.dtype.round(np.asarray(arg.value))
    if arg.kind == "pointer":
        return PointerBinding(arg.data, arg.offset, arg.dtype)
    if arg.kind == "mapped":
        return MappedBinding(arg.array(), arg.dtype, arg.tile_shape, map_shape=arg.map_shape)
    if arg.kind == "partition":
        positions = arg.positions.array() if arg.positions is not None else None
        return MutTensorBinding(arg.array(), arg.dtype, arg.tile_shape, positions)
    return TensorBinding(arg.array(), arg.dtype)  # a shared input or an atomic tensor


def check_positions(kernel_name: str, bindings: Sequence[Any], names: Sequence[str]) -> None:
    """Refuse a launch whose indexed partition's positions leave the tile grid or repeat,
    before any program runs (the positions are read as they are when the launch runs)."""
    for b, name in zip(bindings, names):
        if isinstance(b, MutTensorBinding) and b.positions is not None:
            problem = positions_problem(b.positions, b.grid())
            if problem:
                raise PositionsError(f"kernel '{kernel_name}', the indexed partition "
                                     f"'{name}': {problem}",
                                     hint="give each program a distinct tile inside the "
                                     "partition's tile grid")


class InterpretedLaunch:
    """A launch on the interpreter with its bindings made: running it runs every program."""

    enqueues_only = False

    def __init__(self, kernel: InterpretedKernel, bindings: list, grid: tuple[int, int, int],
                 names: Sequence[str]):
        self.kernel, self.bindings, self.grid, self.names = kernel, bindings, grid, names

    def launch(self, stream: Stream) -> None:
        with stream.order_lock:  # the host runs a stream's work in order, one at a time
            check_positions(self.kernel.kernel.name, self.bindings, self.names)
            self.kernel.run(self.bindings, self.grid)


class InterpretedExecutable:
    """A kernel ready for the interpreter."""

    def __init__(self, kernel: InterpretedKernel):
        self.kernel = kernel

    def bind(self, args: Sequence[KernelArg], grid: tuple[int, int, int]) -> InterpretedLaunch:
        return InterpretedLaunch(self.kernel, [binding(a) for a in args], grid,
                                 [a.name for a in args])


class InterpreterBackend:
    """Kernels on the ``cpu`` device, run exactly by numpy."""

    name = "interp"
    device_kind = "cpu"

    def target(self, device: Device) -> Target:
        return Target(self.name, "numpy", device)

    def ahead_of_time(self, arch: str) -> Target:
        return Target(self.name, "numpy")

    def launch_facts(self, ir: KernelIR, args: Sequence[KernelArg]) -> Hashable:
        return ()

    def stages(self, target: Target, *, hints: dict, facts: Hashable,
               on_compiled: Callable[[], None]) -> list[tuple[str, Stage]]:
        def build(ir: KernelIR) -> InterpretedExecutable:
            on_compiled()
            return InterpretedExecutable(InterpretedKernel(ir))
        return [("build", build)]

    def kernel_probe(self) -> Optional[Callable[[], str]]:
        return None
