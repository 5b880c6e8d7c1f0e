"""What the token-level kernels (``rope``, ``embedding``, ``sampling``, ``kv_cache``) share:
host-side argument checks, each raising ``ArgumentError`` at the user's call site (naming the
operation, the argument and the fix) before anything is launched, and the compile hints of
their memory-bound kernels.

May import the host layer, ``dtypes`` and ``errors``."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .._callsite import caller_location
from ..errors import ArgumentError
from ..host.tensor import Tensor

FLOATS = ("float16", "bfloat16", "float32")
#: the hints of the memory-bound copy kernels (embedding, rope, KV writes): plan for several
#: CTAs per SM, so that the GPU compiler does not give a small-tile kernel all the registers
#: and one CTA per SM (which halves the bandwidth of such kernels on an H100)
MEMORY_BOUND_HINTS = {"default": {"occupancy": 4}}
INDEX_DTYPES = ("int32", "int64")


def fail(op: str, message: str, hint: str) -> ArgumentError:
    """The error to raise for a bad argument of ``op``."""
    return ArgumentError(f"{op}: {message}", caller_location(), hint=hint)


def tensor(op: str, name: str, value: Any, dtypes: Sequence[str], rank: "int | None" = None,
           min_rank: int = 1) -> Tensor:
    """``value`` checked to be a tilesafe tensor of one of ``dtypes`` and of ``rank`` (or at
    least ``min_rank``) dimensions."""
    if not isinstance(value, Tensor):
        raise fail(op, f"{name} must be a tilesafe tensor, got {type(value).__name__}",
                   "pass a ts.Tensor (ts.tensor(array).sync(), or ts.from_dlpack(x))")
    if value.dtype.name not in dtypes:
        raise fail(op, f"{name} has dtype {value.dtype.name}; supported: {', '.join(dtypes)}",
                   f"convert {name} to one of {', '.join(dtypes)}")
    if rank is not None and value.ndim != rank:
        raise fail(op, f"{name} has shape {tuple(value.shape)}; it must have {rank} "
                   "dimensions", f"reshape {name} to {rank} dimensions")
    if value.ndim < min_rank:
        raise fail(op, f"{name} has shape {tuple(value.shape)}; it must have at least "
                   f"{min_rank} dimension(s)", f"reshape {name}")
    return value


def same_device(op: str, named: Iterable[tuple[str, Tensor]]) -> Any:
    """The device every named tensor is on; an error naming the first that differs."""
    named = list(named)
    first_name, first = named[0]
    for name, value in named[1:]:
        if str(value.device) != str(first.device):
            raise fail(op, f"{name} is on {value.device}, {first_name} on {first.device}",
                       "move every input to one device (t.to(device))")
    return first.device


def nonempty(op: str, name: str, value: Tensor) -> None:
    """An error if ``value`` has no elements."""
    if value.size == 0:
        raise fail(op, f"{name} has shape {tuple(value.shape)}, no elements",
                   f"pass a non-empty {name}")


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())

