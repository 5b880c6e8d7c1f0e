"""tilesafe: memory-safe, data-race-free tile kernels for GPUs, with an exact numpy interpreter.

Host side (this module, ``import tilesafe as ts``): kernels, tensors, partitions, DeviceOps.
Device side: ``import tilesafe.core as tc``.
"""

from . import errors
from .dtypes import (DType, bfloat16, bool_, float8_e4m3fn, float8_e5m2, float16, float32,
                     float64, int8, int16, int32, int64, tfloat32, uint8, uint16, uint32, uint64)
from .errors import (AliasingError, ArgumentError, BorrowError, BroadcastError, CompileError,
                     CudaError, DeviceError, DeviceMismatchError, DeviceOpError, DTypeError,
                     DTypeMismatchError, ExtentMismatchError, KernelNameError, KernelRuntimeError,
                     IndexOutOfRangeError,
                     LaunchError, MovedError, OwnershipError, PartitionError, PartitionRankError,
                     PositionsError,
                     RankMismatchError, SafetyError, ShapeError, SignatureError, TileirasNotFound,
                     TilesafeError, TileShapeError, TileShapeMismatchError, UnsafeError,
                     UnsupportedSyntaxError)
from .errors import DeviceAssertionError
from .deviceops.deviceop import DeviceOp, SharedOp, value, zip
from .deviceops.graph import CudaGraph
from .driver.device import Device, default_device, devices
from .driver.stream import Event, Stream, next_stream
from .compiler.ops.atomic import interpreter_atomic_order
from .host.atomic import AtomicBorrow, atomic
from .host.factory import arange, empty, eye, full, linspace, ones, rand, randn, tensor, zeros
from .host.interop import from_dlpack
from .host.partition import BorrowMut, MappedPartition, Partition
from .host.tensor import Tensor, borrow_mut
from .kernel import Kernel, compile, function, kernel, unsafe
from .autotune import Tuned, TunedKernel, autotune
from .errors import TuningError

from ._version import __version__

__all__ = [
    "kernel", "function", "unsafe", "compile", "Kernel", "DeviceOp", "SharedOp", "zip", "value",
    "CudaGraph", "Stream", "Event", "next_stream", "Tensor", "Partition", "Device",
    "devices", "default_device", "zeros", "ones", "full", "empty", "arange", "linspace", "eye",
    "rand", "randn", "tensor", "from_dlpack", "borrow_mut", "BorrowMut", "atomic", "AtomicBorrow",
    "interpreter_atomic_order",
    "MappedPartition",
    "DType", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "tfloat32",
    "errors", "TilesafeError", "CompileError",
    "SafetyError", "LaunchError", "ArgumentError", "PartitionError", "MovedError",
    "AliasingError", "BorrowError", "UnsafeError", "KernelRuntimeError", "IndexOutOfRangeError",
    "PositionsError", "DTypeMismatchError",
    "RankMismatchError", "ExtentMismatchError", "DeviceMismatchError", "PartitionRankError", "TileShapeMismatchError",
    "UnsupportedSyntaxError", "KernelNameError", "DTypeError", "ShapeError", "BroadcastError",
    "TileShapeError", "SignatureError", "OwnershipError", "DeviceOpError", "CudaError",
    "TileirasNotFound", "DeviceError", "__version__",
    "DeviceAssertionError",
    "autotune", "Tuned", "TunedKernel", "TuningError",
]
