"""tilesafe: memory-safe, data-race-free tile kernels for GPUs, with an exact numpy interpreter.

Host side (this module, ``import tilesafe as ts``): kernels, tensors, partitions, DeviceOps.
Device side: ``import tilesafe.core as tc``.
"""

from . import errors
from .dtypes import (DType, bfloat16, bool_, float16, float32, float64, int8, int16, int32,
                     int64, uint8, uint16, uint32, uint64)
from .errors import (AliasingError, ArgumentError, BorrowError, CompileError, DeviceMismatchError,
                     DTypeMismatchError, KernelRuntimeError, PartitionRankError, RankMismatchError,
                     TileShapeMismatchError,
                     LaunchError, MovedError, PartitionError, SafetyError, TilesafeError,
                     UnsafeError)
from .exec.deviceop import DeviceOp, SharedOp, value, zip
from .exec.graph import CudaGraph
from .exec.stream import Event, Stream, next_stream
from .kernel import Kernel, compile, function, kernel, unsafe
from .exec import hotpath as _hotpath  # noqa: F401,E402 (installs the compiled launch path)
from .runtime.device import Device, default_device, devices
from .runtime.factory import arange, empty, eye, full, linspace, ones, rand, randn, tensor, zeros
from .runtime.interop import from_dlpack
from .runtime.partition import BorrowMut, MappedPartition, Partition, borrow_mut
from .runtime.tensor import Tensor

__version__ = "0.1.0"

__all__ = [
    "kernel", "function", "unsafe", "compile", "Kernel", "DeviceOp", "SharedOp", "zip", "value",
    "CudaGraph", "Stream", "Event", "next_stream", "Tensor", "Partition", "Device",
    "devices", "default_device", "zeros", "ones", "full", "empty", "arange", "linspace", "eye",
    "rand", "randn", "tensor", "from_dlpack", "borrow_mut", "BorrowMut",
    "MappedPartition",
    "DType", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "errors", "TilesafeError", "CompileError",
    "SafetyError", "LaunchError", "ArgumentError", "PartitionError", "MovedError",
    "AliasingError", "BorrowError", "UnsafeError", "KernelRuntimeError", "DTypeMismatchError",
    "RankMismatchError", "DeviceMismatchError", "PartitionRankError", "TileShapeMismatchError",
    "__version__",
]
