"""A kernel compiled for one GPU: its loaded cubin, and the launch argument packing.

The argument list follows the lowering's ABI (``lower.abi_signature``): for each tensor,
partition and mapped partition parameter the address of element 0, then every extent and every
stride in elements as i32; scalars by value in their dtype; raw pointers as an address; and,
for a kernel with bounds-checked accesses, its fault record's address (``faults.py``).
``bind`` packs a launch once per launch plan into a ``driver.cuda.PackedLaunch``, which a
repeated launch enqueues with one driver call. It reads the arguments of a validated launch, so
it cannot disagree with the ownership checks that ran before it.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ...driver import cuda
from ...errors import ArgumentError
from ..base import KernelArg
from .faults import FaultRecords

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
        _pack_i32(packed, arg.name, (*arg.shape, *arg.strides))
        if arg.positions is not None:  # an indexed partition: its (n, rank) positions
            positions = arg.positions
            packed.append(positions.address())
            _pack_i32(packed, positions.name, (positions.shape[0], *positions.strides))
    return packed


def _pack_i32(packed: list, name: str, values: Sequence[int]) -> None:
    for n in values:
        if not -_I32_MAX - 1 <= n <= _I32_MAX:
            raise ArgumentError(f"argument '{name}': extent or stride {n} does not fit "
                                "the i32 kernel ABI", hint="split the tensor into smaller "
                                "views")
        packed.append(np.int32(n))


class TileIRExecutable:
    """A loaded cubin for one specialization on one device. ``programmatic``: the kernel waits
    for its predecessor before touching memory, so it may be launched as a programmatic
    dependent of the previous kernel on its stream."""

    def __init__(self, name: str, cubin: bytes, device_index: int, programmatic: bool = False,
                 fault_records: Optional[FaultRecords] = None):
        self.cubin = cubin
        self.device_index = device_index
        self.handle = cuda.load_kernel(cubin, name, device_index)
        self.programmatic = programmatic
        self.fault_records = fault_records

    def bind(self, args: Sequence[KernelArg], grid: tuple[int, int, int]) -> cuda.PackedLaunch:
        """The launch packed once; a kernel with checked accesses gets a fault record of its
        own, its address as the last parameter, and each launch lends it the record
        (``PackedLaunch.fault_record``)."""
        packed = pack_arguments(args)
        record = self.fault_records.new() if self.fault_records is not None else None
        if record is not None:
            packed.append(record.address)
        launch = cuda.PackedLaunch(self.handle, grid, packed, self.device_index,
                                   self.programmatic)
        launch.fault_record = record
        return launch
