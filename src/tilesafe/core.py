"""The device language: what a kernel body may use (``import tilesafe.core as tc``).

Parameter annotations (``Tensor``, ``MutTensor``, ``AtomicTensor``, ``Const``, ``Ptr``),
element types (``f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool_``, and the
storage-and-mma types ``f8e4m3fn f8e5m2 tf32``: see ``tilesafe.dtypes``) and the tile
functions. Each function here is a stub generated from the op registry, carrying the op's documentation: it
is compiled when called inside a ``@ts.kernel`` or ``@ts.function`` and raises if called
anywhere else. Tiles also have methods (``t.astype``, ``t.reshape``, ``t.sum``, ...), a
``MutTensor`` has ``load()``/``store(tile)``, a ``Tensor`` has ``partition(tile_shape)`` and
``shape``, a partition has ``load(index)`` and ``num_tiles(axis)``, and an ``AtomicTensor``
has ``atomic_add(value, *indices)`` and its siblings (``atomic_max``, ``atomic_min``,
``atomic_and``, ``atomic_or``, ``atomic_xor``) and ``shape``.
"""

from __future__ import annotations

import builtins as _builtins
import inspect as _inspect

from .compiler import ops as _ops  # noqa: F401 (importing declares every op in the registry)
from .compiler import registry as _registry
from .compiler.signature import (AtomicTensor, Const, MappedPartitionMut, MutTensor, Ptr,
                                 Tensor)
from .dtypes import (DType, b1, bf16, bfloat16, bool_, f8e4m3fn, f8e5m2, f16, f32, f64,
                     float8_e4m3fn, float8_e5m2, float16, float32, float64, i8, i16, i32, i64,
                     int8, int16, int32, int64, tf32, tfloat32, u8, u16, u32, u64, uint8, uint16,
                     uint32, uint64)
from .errors import CompileError as _CompileError


def _make_stub(entry: _registry.Builtin):
    def stub(*args, **kwargs):
        raise _CompileError(f"tilesafe.core.{entry.name}() can only be called inside a "
                            "@ts.kernel or @ts.function body",
                            hint="tile functions are compiled, not run on the host; for host "
                            "arrays use numpy or tilesafe tensors")
    signature = _inspect.signature(entry.build)
    stub.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    stub.__name__ = stub.__qualname__ = entry.name
    stub.__doc__ = entry.doc
    stub.__module__ = __name__
    stub.__tilesafe_builtin__ = entry.name
    return stub


_FUNCTIONS = sorted(name for name, entry in _registry.BUILTINS.items() if entry.public)
for _name in _FUNCTIONS:
    globals()[_name] = _make_stub(_registry.BUILTINS[_name])

# ``from tilesafe.core import *`` must not hide Python's own ``print``, ``abs`` or ``pow`` on
# the host: those stay ``tc.print``, ``tc.abs``, ``tc.pow`` (kernels see them either way).
_SHADOWS_A_PYTHON_BUILTIN = frozenset(n for n in _FUNCTIONS if hasattr(_builtins, n))

__all__ = [
    "Tensor", "MutTensor", "MappedPartitionMut", "AtomicTensor", "Const", "Ptr", "DType",
    "bool_", "b1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
    "f64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "bfloat16", "float32", "float64", "f8e4m3fn", "f8e5m2", "tf32", "float8_e4m3fn",
    "float8_e5m2", "tfloat32",
] + [n for n in _FUNCTIONS if n not in _SHADOWS_A_PYTHON_BUILTIN]
