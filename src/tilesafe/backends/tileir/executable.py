"""A kernel compiled for one GPU: its loaded cubin, and the launch argument packing.

The argument list follows the lowering's ABI (``lower.abi_signature``): for each tensor,
partition and mapped partition parameter the address of element 0, then every extent and every
stride in elements as i32; scalars by value in their dtype; raw pointers as an address.
``bind`` packs a launch once per launch plan into a ``driver.cuda.PackedLaunch``, which a
repeated launch enqueues with one driver call. It reads the arguments of a validated launch, so
it cannot disagree with the ownership checks that ran before it.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...driver import cuda
from ...errors import ArgumentError
from ..base import KernelArg

_I32_MAX = (1 << 31) - 1


def pack_arguments(args: Sequence[KernelArg]) -> list[Any]:
    """The entry parameters of a launch, in ABI order (ints are addresses)."""
    packed: list[Any] = []
    for arg in args:
        if arg.kind == "scalar":
            packed.append(arg.dtype.to_storage(np.asarray(arg.value))[()])
            continue
        packed.append(arg.address())
        if arg.kind == "pointer":
            continue
        for n in (*arg.shape, *arg.strides):
            if not -_I32_MAX - 1 <= n <= _I32_MAX:
                raise ArgumentError(f"argument '{arg.name}': extent or stride {n} does not fit "
                                    "the i32 kernel ABI", hint="split the tensor into smaller "
                                    "views")
            packed.append(np.int32(n))
    return packed


class TileIRExecutable:
    """A loaded cubin for one specialization on one device. ``programmatic``: the kernel waits
    for its predecessor before touching memory, so it may be launched as a programmatic
    dependent of the previous kernel on its stream."""

    def __init__(self, name: str, cubin: bytes, device_index: int, programmatic: bool = False):
        self.cubin = cubin
        self.device_index = device_index
        self.handle = cuda.load_kernel(cubin, name, device_index)
        self.programmatic = programmatic

    def bind(self, args: Sequence[KernelArg], grid: tuple[int, int, int]) -> cuda.PackedLaunch:
        return cuda.PackedLaunch(self.handle, grid, pack_arguments(args), self.device_index,
                                 self.programmatic)
