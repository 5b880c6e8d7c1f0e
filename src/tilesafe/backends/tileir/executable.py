"""A kernel compiled for one GPU: its loaded cubin, and the launch argument packing.

The argument list follows the lowering's ABI (``lower.abi_signature``): for each tensor,
partition and mapped partition parameter the address of element 0, then every extent and every
stride in elements as i32; scalars by value in their dtype; raw pointers as an address; and,
for a kernel with bounds-checked accesses, its fault record's address (``faults.py``), and,
for a kernel whose positions a launch before it validates, the address of the record's
verdict word.
``bind`` packs a launch once per launch plan into a ``driver.cuda.PackedLaunch``, which a
repeated launch enqueues with one driver call. It reads the arguments of a validated launch, so
it cannot disagree with the ownership checks that ran before it. A kernel validated first
binds to a :class:`ValidatedLaunch`: the validating launch (one program, the same
arguments) and then the kernel, enqueued together on one stream (a graph capture records
both).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

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


class ValidatedLaunch:
    """A kernel launch whose indexed partitions' positions are validated by a launch of one
    program before it (``lower/positions.py``): both enqueued on one stream, the validating
    one first, as ordinary (not programmatic) launches, so each starts only after everything
    before it on the stream has completed and the kernel reads the verdict its validation
    wrote. What it lends and
    reads back is the kernel's fault record, which the validating launch reports to."""

    __slots__ = ("validation", "kernel", "fault_record")

    #: running it only enqueues device work (see ``backends.base.BoundLaunch``)
    enqueues_only = True
    #: no single driver launch: the compiled fast path runs :meth:`launch`
    driver_launch = None

    def __init__(self, validation: cuda.PackedLaunch, kernel: cuda.PackedLaunch):
        self.validation, self.kernel = validation, kernel
        self.fault_record = kernel.fault_record

    def launch(self, stream: Any) -> None:
        """Enqueue the validation, then the kernel, on the tilesafe stream ``stream``."""
        self.validation.launch(stream)
        self.kernel.launch(stream)


class TileIRExecutable:
    """A loaded cubin for one specialization on one device. ``programmatic``: the kernel waits
    for its predecessor before touching memory, so it may be launched as a programmatic
    dependent of the previous kernel on its stream. ``validating_cubin``: the cubin of the
    launch that validates its positions before it, for a kernel compiled with the fact
    ``validated_first``."""

    def __init__(self, name: str, cubin: bytes, device_index: int, programmatic: bool = False,
                 fault_records: Optional[FaultRecords] = None,
                 validating_cubin: Optional[bytes] = None):
        self.cubin = cubin
        self.device_index = device_index
        self.handle = cuda.load_kernel(cubin, name, device_index)
        self.programmatic = programmatic
        self.fault_records = fault_records
        self.validating_handle = (cuda.load_kernel(validating_cubin, name, device_index)
                                  if validating_cubin is not None else None)

    def bind(self, args: Sequence[KernelArg],
             grid: tuple[int, int, int]) -> Union[cuda.PackedLaunch, ValidatedLaunch]:
        """The launch packed once; a kernel with checked accesses gets a fault record of its
        own, its address as the last parameter, and each launch lends it the record
        (``PackedLaunch.fault_record``); a kernel validated first also passes the record's
        verdict word, and binds to a :class:`ValidatedLaunch`."""
        packed = pack_arguments(args)
        record = self.fault_records.new() if self.fault_records is not None else None
        if record is not None:
            packed.append(record.address)
        if self.validating_handle is not None:
            if record is None or record.verdict_address is None:
                raise ArgumentError("internal error: a kernel validated first has no verdict "
                                    "word")
            packed.append(record.verdict_address)
        if self.validating_handle is None:
            launch = cuda.PackedLaunch(self.handle, grid, packed, self.device_index,
                                       self.programmatic)
            launch.fault_record = record
            return launch
        # both as ordinary launches, never programmatic dependents: each then starts only once
        # all earlier work on its stream has completed, whatever another thread enqueued
        # between the two (a programmatic dependent's wait covers only its direct predecessor,
        # and a kernel between them that never waits would not order the verdict)
        launch = cuda.PackedLaunch(self.handle, grid, packed, self.device_index, False)
        launch.fault_record = record
        validation = cuda.PackedLaunch(self.validating_handle, (1, 1, 1), packed,
                                       self.device_index, False)
        return ValidatedLaunch(validation, launch)
