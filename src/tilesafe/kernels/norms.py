"""Normalizations over the last axis: ``rms_norm``, ``add_rms_norm`` (the residual add fused in,
written in place) and ``layer_norm``, for float16, bfloat16 and float32 tensors of any rank
(leading dimensions are rows) and any hidden size up to :data:`MAX_HIDDEN`.

Each program owns a tile of whole rows (``(rows, next power of two of hidden)``: the row is
padded with zeros on load, and the store is masked); the statistics are accumulated in float32
whatever the storage type. Rounding follows transformers' modules (Llama/Qwen3 ``RMSNorm``,
``torch.nn.LayerNorm``) step for step, so a decode engine matches them token for token: see
each function.

May import every layer below the public surface, ``tilesafe.core`` (the device language) and
the library's own helpers."""

from __future__ import annotations

from typing import Any, Optional

import tilesafe.core as tc

from .._callsite import caller_location
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..errors import ArgumentError
from ..host.tensor import Tensor, borrow_mut
from ..kernel import function, kernel
from ._rowwise import (RowsOutput, as_rows, check_like, check_tensor, check_vector, finish,
                       next_pow2, row_tile, rows_bucket)
from ._torch import accepts_torch

#: the longest row a normalization takes: the whole row is one tile of a program
MAX_HIDDEN = 32768
#: elements of one program's tile (rows x padded hidden) a launch aims at most for
TILE_BUDGET = 8192
#: rows per program, in the order the tuner tries them (the first is the default)
ROW_CONFIGS = ({"rows": 4}, {"rows": 8}, {"rows": 2}, {"rows": 16}, {"rows": 1})


# -- device side ---------------------------------------------------------------------------

@function
def _rms_normalize(xf, w, hidden, eps, dtype):
    """Qwen3/Llama RMSNorm of the f32 rows ``xf``: ``x * rsqrt(mean(x^2) + eps)`` rounded to
    ``dtype``, then times the weight ``w`` (f32 product, one more rounding)."""
    mean_square = tc.reduce_sum(xf * xf, 1, keepdims=True) / hidden
    normed = (xf * tc.rsqrt(mean_square + eps)).astype(dtype)
    return (normed.astype(tc.f32) * w.astype(tc.f32)).astype(dtype)


@kernel
def rms_norm_rows(z: tc.MutTensor["T", ("R", "BH")], x: tc.Tensor["T", (-1, -1)],  # noqa: F821
                  w: tc.Tensor["T", (1, -1)], hidden: float, eps: float):  # noqa: F821
    """``z`` = RMSNorm of the rows of ``x`` it covers, times ``w`` (see ``rms_norm``)."""
    weight = w.partition((1, BH)).load((0, 0))  # noqa: F821
    z.store(_rms_normalize(tc.load_tile_like(x, z).astype(tc.f32), weight, hidden, eps,
                           z.dtype))


@kernel
def add_rms_norm_rows(z: tc.MutTensor["T", ("R", "BH")],  # noqa: F821
                      residual: tc.MutTensor["T", ("R", "BH")],  # noqa: F821
                      x: tc.Tensor["T", (-1, -1)], w: tc.Tensor["T", (1, -1)],  # noqa: F821
                      hidden: float, eps: float):
    """``residual += x`` (rounded to the storage type), then ``z`` = RMSNorm of the new
    residual times ``w``."""
    summed = (tc.load_tile_like(x, z).astype(tc.f32) + residual.load().astype(tc.f32))
    summed = summed.astype(z.dtype)
    residual.store(summed)
    weight = w.partition((1, BH)).load((0, 0))  # noqa: F821
    z.store(_rms_normalize(summed.astype(tc.f32), weight, hidden, eps, z.dtype))


@kernel
def layer_norm_rows(z: tc.MutTensor["T", ("R", "BH")], x: tc.Tensor["T", (-1, -1)],  # noqa: F821
                    w: tc.Tensor["T", (1, -1)], b: tc.Tensor["T", (1, -1)],  # noqa: F821
                    hidden: float, columns: int, eps: float, HAS_BIAS: tc.Const[bool]):
    """``z`` = LayerNorm of the rows of ``x`` it covers: ``(x - mean) * rsqrt(var + eps) * w
    (+ b)`` in f32 (biased variance, two passes over the tile), rounded once."""
    xf = tc.load_tile_like(x, z).astype(tc.f32)
    mean = tc.reduce_sum(xf, 1, keepdims=True) / hidden
    inside = tc.arange(BH).reshape((1, BH)) < columns  # noqa: F821
    centered = tc.where(inside, xf - mean, 0.0)
    variance = tc.reduce_sum(centered * centered, 1, keepdims=True) / hidden
    weight = w.partition((1, BH)).load((0, 0)).astype(tc.f32)  # noqa: F821
    y = centered * tc.rsqrt(variance + eps) * weight
    if HAS_BIAS:
        y = y + b.partition((1, BH)).load((0, 0)).astype(tc.f32)  # noqa: F821
    z.store(y.astype(z.dtype))


# -- launches (tile choices) -----------------------------------------------------------------

def _key(x: Tensor, *rest: Any, **_: Any) -> tuple:
    return (rows_bucket(x.shape[0]), x.shape[1], x.dtype.name)


def _tile(x: Tensor, config: dict) -> tuple[int, int]:
    block = next_pow2(x.shape[1])
    return row_tile(config["rows"], x.shape[0], block, TILE_BUDGET), block


@autotune(configs=ROW_CONFIGS, key=_key, kernels=(rms_norm_rows,))
def _launch_rms_norm(x: Tensor, w: Tensor, out: RowsOutput, eps: float, *,
                     config: dict) -> DeviceOp:
    return rms_norm_rows(out.partition(_tile(x, config)), x, w, float(x.shape[1]), eps)


@autotune(configs=ROW_CONFIGS, key=_key, kernels=(add_rms_norm_rows,), mutates=("residual",))
def _launch_add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, out: RowsOutput, eps: float,
                         *, config: dict) -> DeviceOp:
    tile = _tile(x, config)
    return add_rms_norm_rows(out.partition(tile), borrow_mut(residual).partition(tile), x, w,
                             float(x.shape[1]), eps)


@autotune(configs=ROW_CONFIGS, key=_key, kernels=(layer_norm_rows,))
def _launch_layer_norm(x: Tensor, w: Tensor, b: Optional[Tensor], out: RowsOutput, eps: float,
                       *, config: dict) -> DeviceOp:
    hidden = x.shape[1]
    return layer_norm_rows(out.partition(_tile(x, config)), x, w, w if b is None else b,
                           float(hidden), hidden, eps, HAS_BIAS=b is not None)


# -- public functions -------------------------------------------------------------------------

def _check_x(x: Any, op: str) -> Tensor:
    x = check_tensor(x, "x", op)
    hidden = x.shape[-1]
    if not 1 <= hidden <= MAX_HIDDEN:
        raise ArgumentError(f"{op}: x's last axis has {hidden} elements; {op} takes rows of "
                            f"1 to {MAX_HIDDEN} elements (a row is one tile)", caller_location(),
                            hint="normalize over a shorter last axis (reshape the tensor)")
    return x


def _check_eps(eps: Any, op: str) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or \
            eps != eps or eps == float("inf"):
        raise ArgumentError(f"{op}: eps={eps!r} must be a finite positive number",
                            caller_location(), hint="e.g. eps=1e-6")
    return float(eps)


@accepts_torch
def rms_norm(x: Tensor, weight: Tensor, *, eps: float = 1e-6,
             out: Optional[Tensor] = None) -> DeviceOp:
    """RMSNorm over the last axis, rounded as transformers' Llama/Qwen3 ``RMSNorm``.

    For each row (every index of the leading axes), in float32: ``normed = x * rsqrt(mean(x**2)
    + eps)``; ``normed`` is rounded to ``x``'s dtype *before* the weight is applied, then
    ``y = round(float32(normed) * float32(weight))`` (transformers computes ``weight *
    hidden_states.to(input_dtype)``). For float32 inputs the first rounding changes nothing.

    Args:
        x: float16, bfloat16 or float32 tensor of shape ``(..., hidden)``, ``1 <= hidden <=
            MAX_HIDDEN``.
        weight: the scale, shape ``(hidden,)``, ``x``'s dtype and device.
        eps: added to the mean square (a finite positive number).
        out: optional output of ``x``'s shape and dtype (else a new tensor).

    Returns:
        A DeviceOp whose result is the output tensor (``x``'s shape and dtype).

    Raises:
        ArgumentError: a non-tensor, an unsupported dtype, a weight of the wrong shape, dtype
            or device, a row too long, a bad ``eps``, or an ``out`` that does not match.
    """
    op = "rms_norm"
    x = _check_x(x, op)
    w = check_vector(weight, "weight", x, op)
    eps = _check_eps(eps, op)
    output = RowsOutput(out, x.shape, x.dtype, x.device, op=op)
    launch = _launch_rms_norm(as_rows(x, "x", op), w, output, eps)
    return finish(launch, lambda r: output.result(r.z))


@accepts_torch
def add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, *, eps: float = 1e-6,
                 out: Optional[Tensor] = None) -> DeviceOp:
    """The residual add fused with the RMSNorm that follows it (a decoder layer's
    ``residual = residual + x; h = norm(residual)``).

    ``residual`` is updated in place: ``residual = round(float32(residual) + float32(x))`` (the
    sum rounded to the dtype, as a torch add of the two tensors is), and that rounded residual
    is what is normalized, exactly as :func:`rms_norm` does. The launch borrows ``residual``
    exclusively (``ts.borrow_mut``) until it completes.

    Args:
        x: float16, bfloat16 or float32 tensor of shape ``(..., hidden)`` (the block's output).
        residual: the residual stream, ``x``'s shape, dtype and device; written in place. It
            must not share memory with ``x``, ``weight`` or ``out``.
        weight: the scale, shape ``(hidden,)``, ``x``'s dtype and device.
        eps: added to the mean square (a finite positive number).
        out: optional output for the normalized rows (else a new tensor).

    Returns:
        A DeviceOp whose result is the tuple ``(normed, residual)`` (``residual`` the very
        tensor passed, updated).

    Raises:
        ArgumentError: as :func:`rms_norm`, and a residual of another shape, dtype or device
            (a residual sharing memory with another argument is refused by the launch).
    """
    op = "add_rms_norm"
    x = _check_x(x, op)
    residual = check_tensor(residual, "residual", op)
    if tuple(residual.shape) != tuple(x.shape):
        raise ArgumentError(f"{op}: residual has shape {tuple(residual.shape)}, x "
                            f"{tuple(x.shape)}; they must agree", caller_location(),
                            hint="pass the residual stream of x's shape")
    check_like(residual, "residual", x, "x", op)
    w = check_vector(weight, "weight", x, op)
    eps = _check_eps(eps, op)
    output = RowsOutput(out, x.shape, x.dtype, x.device, op=op)
    launch = _launch_add_rms_norm(as_rows(x, "x", op), as_rows(residual, "residual", op), w,
                                  output, eps)
    return finish(launch, lambda r: (output.result(r.z), residual))


@accepts_torch
def layer_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *, eps: float = 1e-5,
               out: Optional[Tensor] = None) -> DeviceOp:
    """LayerNorm over the last axis, as ``torch.nn.functional.layer_norm(x, (hidden,), weight,
    bias, eps)``: in float32, ``(x - mean) * rsqrt(var + eps) * weight + bias`` with the biased
    variance, rounded once to ``x``'s dtype.

    Args:
        x: float16, bfloat16 or float32 tensor of shape ``(..., hidden)``, ``1 <= hidden <=
            MAX_HIDDEN``.
        weight: the scale, shape ``(hidden,)``, ``x``'s dtype and device.
        bias: optional shift, like ``weight``.
        eps: added to the variance (a finite positive number).
        out: optional output of ``x``'s shape and dtype (else a new tensor).

    Returns:
        A DeviceOp whose result is the output tensor.

    Raises:
        ArgumentError: as :func:`rms_norm`, and a bias of the wrong shape, dtype or device.
    """
    op = "layer_norm"
    x = _check_x(x, op)
    w = check_vector(weight, "weight", x, op)
    b = None if bias is None else check_vector(bias, "bias", x, op)
    eps = _check_eps(eps, op)
    output = RowsOutput(out, x.shape, x.dtype, x.device, op=op)
    launch = _launch_layer_norm(as_rows(x, "x", op), w, b, output, eps)
    return finish(launch, lambda r: output.result(r.z))
