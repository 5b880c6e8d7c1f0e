"""A kernel compiled for one GPU: cubin loading and argument packing (``runtime.cuda.
PackedLaunch`` lays the packed arguments out once per launch plan and launches them).

The argument list follows the lowering's ABI (``abi_signature``): for each tensor, partition
and mapped partition parameter the base address (plus the view's byte offset), then every
extent and every stride in elements as i32; scalars by value in their dtype; raw pointers as
an address. Packing reads the host objects of a validated launch, so it cannot disagree with
the ownership checks that ran before it.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...compiler.ir import KernelIR
from ...compiler.signature import ConstSpec, Param
from ...errors import ArgumentError
from ...runtime import cuda
from ...runtime.partition import MappedPartition, Partition
from ...runtime.tensor import Tensor

_I32_MAX = (1 << 31) - 1


def _tensor_of(value: Any) -> Tensor:
    if isinstance(value, MappedPartition):
        return value.partition._tensor
    if isinstance(value, Partition):
        return value._tensor
    return value


class TileIRExecutable:
    """A loaded cubin for one specialization on one device. ``programmatic``: the kernel waits
    for its predecessor before touching memory, so it may be launched as a programmatic
    dependent of the previous kernel on its stream (``runtime.cuda.PackedLaunch``)."""

    def __init__(self, kernel: KernelIR, params: Sequence[Param], cubin: bytes,
                 device_index: int, programmatic: bool = False):
        self.params = [p for p in params if not isinstance(p.spec, ConstSpec)]
        self.kinds = {p.name: p.kind for p in kernel.params}
        self.cubin = cubin
        self.handle = cuda.load_kernel(cubin, kernel.name, device_index)
        self.programmatic = programmatic

    def pack(self, args: Sequence[Any], all_params: Sequence[Param]) -> list[Any]:
        packed: list[Any] = []
        values = [a for p, a in zip(all_params, args) if not isinstance(p.spec, ConstSpec)]
        for param, value in zip(self.params, values):
            kind = self.kinds[param.name]
            if kind == "scalar":
                packed.append(np.asarray(value, dtype=param.spec.dtype.storage)[()]
                              if not param.spec.dtype.name == "bfloat16" else
                              param.spec.dtype.to_storage(np.asarray(value))[()])
                continue
            t = _tensor_of(value)
            item = t.dtype.itemsize
            packed.append(t._alloc.data.ptr + t._offset * item)
            if kind == "pointer":
                continue
            for n in (*t.shape, *t.strides):
                if not -_I32_MAX - 1 <= n <= _I32_MAX:
                    raise ArgumentError(f"argument '{param.name}': extent or stride {n} does "
                                        "not fit the i32 kernel ABI",
                                        hint="split the tensor into smaller views")
                packed.append(np.int32(n))
        return packed
