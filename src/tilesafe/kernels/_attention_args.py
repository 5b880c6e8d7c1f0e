"""Host-side checks and layout helpers shared by the attention functions (``attention`` and
``decode_attention``): the supported dtypes and head dimensions, the softmax scale, the
flattening of ``(batch, heads, ...)`` tensors into the 3-D views the kernels read, and the
output partition over such a view.

May import the host layer, ``errors``, ``_callsite`` and ``kernels._outputs``."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from .._callsite import caller_location
from ..dtypes import DType, bfloat16, float16
from ..errors import ArgumentError
from ..host.partition import Partition
from ..host.tensor import Tensor, borrow_mut
from ._outputs import Output

#: the element types the attention kernels accept (their f32 accumulators need no more)
DTYPES = (float16, bfloat16)
#: the head dimensions the attention kernels are tuned and tested for
HEAD_DIMS = (64, 128)
#: log2(e): the kernels compute softmax in exp2 with this folded into the scale
LOG2E = 1.4426950408889634
#: float32's smallest normal and largest finite numbers
F32_SMALLEST_NORMAL, F32_LARGEST = 2.0 ** -126, 3.4028234663852886e38


def fail(op: str, message: str, hint: str) -> ArgumentError:
    """The ArgumentError for a bad argument of ``op``, located at the user's call."""
    return ArgumentError(f"{op}: {message}", caller_location(), hint=hint)


def check_tensor(op: str, name: str, value: Any, rank: int, layout: str) -> Tensor:
    """``value`` as a tensor of ``rank`` dimensions (``layout`` names them in the message)."""
    if not isinstance(value, Tensor):
        raise fail(op, f"{name} must be a tilesafe tensor {layout}, got {type(value).__name__}",
                   "pass a ts.Tensor (run a lazy op with .sync() first, or import with "
                   "ts.from_dlpack)")
    if value.ndim != rank:
        raise fail(op, f"{name} must have {rank} dimensions {layout}, got shape "
                   f"{tuple(value.shape)}", f"reshape {name} to {layout}")
    return value


def check_dtype(op: str, name: str, value: Tensor, dtype: Optional[DType] = None) -> DType:
    """The dtype of ``value``: one of :data:`DTYPES`, and ``dtype`` when given."""
    if value.dtype not in DTYPES:
        raise fail(op, f"{name} has dtype {value.dtype.name}; supported: "
                   f"{', '.join(d.name for d in DTYPES)}",
                   f"convert {name} to float16 or bfloat16")
    if dtype is not None and value.dtype != dtype:
        raise fail(op, f"{name} has dtype {value.dtype.name}, q has {dtype.name}",
                   "give q, k and v one dtype")
    return value.dtype


def check_device(op: str, tensors: dict) -> Any:
    """The one device of ``tensors`` (a name -> tensor dict)."""
    (first, t0), *rest = tensors.items()
    for name, t in rest:
        if str(t.device) != str(t0.device):
            raise fail(op, f"{name} is on {t.device}, {first} on {t0.device}",
                       "move every input to one device")
    return t0.device


def check_head_dim(op: str, d: int) -> int:
    if d not in HEAD_DIMS:
        raise fail(op, f"head dimension {d} is not supported; supported: "
                   f"{', '.join(map(str, HEAD_DIMS))}",
                   "pad the heads to a supported dimension")
    return d


def check_heads(op: str, q_heads: int, kv_heads: int) -> int:
    """The GQA group size: query heads per key/value head."""
    if kv_heads < 1 or q_heads % kv_heads:
        raise fail(op, f"q has {q_heads} heads, k and v {kv_heads}: the query heads must be "
                   "a multiple of the key/value heads",
                   "give k and v a number of heads dividing q's (grouped-query attention)")
    return q_heads // kv_heads


def softmax_scale(op: str, scale: Optional[float], d: int) -> float:
    """``scale`` (default ``1/sqrt(d)``), checked finite and positive, and such that the
    kernels' multiplier ``scale * log2(e)`` is a normal float32 (a multiplier that rounds to
    zero or infinity makes the masked keys' ``-inf`` scores NaN)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) \
            or not math.isfinite(scale) or scale <= 0:
        raise fail(op, f"scale must be a finite positive number, got {scale!r}",
                   "leave scale out for 1/sqrt(head dimension)")
    if not F32_SMALLEST_NORMAL <= scale * LOG2E <= F32_LARGEST:
        raise fail(op, f"scale {scale!r} times log2(e) is outside float32's normal range "
                   "(1.2e-38 ... 3.4e38), where the kernels compute with it",
                   "use a scale between 1e-38 and 1e38 (leave it out for 1/sqrt(head "
                   "dimension))")
    return float(scale)


def flat_view(op: str, name: str, value: Tensor, shape: Sequence[int]) -> Tensor:
    """``value`` viewed as ``shape`` (its leading dimensions merged), without a copy."""
    try:
        return value.reshape(tuple(shape))
    except ValueError:
        raise fail(op, f"{name} of shape {tuple(value.shape)} and strides "
                   f"{tuple(value.strides)} cannot merge its leading dimensions into "
                   f"{tuple(shape)} without a copy",
                   f"pass {name}.clone(), or a view whose batch stride is heads x head "
                   "stride") from None


def output_partition(op: str, out: Any, shape: Sequence[int], flat: Sequence[int],
                     tile: Sequence[int], dtype: DType, device: Any) -> Partition:
    """The partition (tiles ``tile``) of the ``flat`` view of the output: the caller's
    ``out`` (checked against ``shape``) or a new tensor."""
    if out is None:
        return Output(None, flat, dtype, device, name="out", op=op).partition(tile)
    Output(out, shape, dtype, device, name="out", op=op)  # checks shape, dtype, device
    return borrow_mut(flat_view(op, "out", out, flat)).partition(tuple(tile))


def next_power_of_two(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()
