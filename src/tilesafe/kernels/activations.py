"""Activations: ``softmax`` over the last axis, ``silu_mul`` (SwiGLU's gate) and ``gelu``, for
float16, bfloat16 and float32 tensors of any rank (leading dimensions are rows) and any row
length. The math is float32 whatever the storage type, with ``exp`` as ``exp2`` of a scaled
argument.

Softmax has two schedules: a row of up to :data:`SOFTMAX_MAX_TILE` elements is one tile
(several short rows per program); a longer row is cut into column chunks, and two launches
work on them in parallel: the first writes each chunk's maximum and sum of exponentials, the
second combines a row's chunk statistics (the online-softmax rescaling) and writes its chunk.
The elementwise ones tile rows and columns freely.

May import every layer below the public surface, ``tilesafe.core`` (the device language) and
the library's own helpers."""

from __future__ import annotations

from typing import Any, Optional

import tilesafe.core as tc

from .._callsite import caller_location
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..dtypes import float32
from ..errors import ArgumentError
from ..host.tensor import Tensor
from ..kernel import function, kernel
from ._outputs import Output
from ._rowwise import (RowsOutput, WarpVariants, as_rows, check_like, check_tensor,
                       chunk_columns, finish, matrix_tile, next_pow2, row_tile, rows_bucket)
from ._torch import accepts_torch

LOG2E = 1.4426950408889634
#: the longest softmax row kept whole in one program's tile; longer rows are chunked
SOFTMAX_MAX_TILE = 16384
#: elements of one program's tile (rows x padded row) a softmax launch aims at most for
TILE_BUDGET = 8192
#: softmax configs: rows per program for rows that fit a tile, the chunk for longer ones (and
#: optionally ``"warps"``, as for the norms)
SOFTMAX_CONFIGS = ({"rows": 4, "chunk": 4096}, {"rows": 4, "chunk": 4096, "programmatic": False},
                   {"rows": 1, "chunk": 4096}, {"rows": 8, "chunk": 8192},
                   {"rows": 2, "chunk": 2048}, {"rows": 4, "chunk": 4096, "occupancy": 0},
                   {"rows": 16, "chunk": 16384})
#: elementwise configs: a (rows, columns) tile (and the hints of ``WarpVariants.pick``); the
#: occupancy-8 ones are for math-heavy kernels (GELU over 16384 x 4096 bf16 on the H100: 109 us
#: at occupancy 8 against 130 us at the automatic 4)
ELEMENTWISE_CONFIGS = ({"rows": 2, "cols": 1024}, {"rows": 4, "cols": 1024},
                       {"rows": 1, "cols": 2048}, {"rows": 8, "cols": 512},
                       {"rows": 1, "cols": 512}, {"rows": 4, "cols": 2048},
                       {"rows": 2, "cols": 1024, "occupancy": 0},
                       {"rows": 4, "cols": 1024, "occupancy": 8},
                       {"rows": 1, "cols": 2048, "occupancy": 8})


# -- device side ---------------------------------------------------------------------------

@kernel
def softmax_rows(z: tc.MutTensor["T", ("R", "BH")], x: tc.Tensor["T", (-1, -1)]):  # noqa: F821
    """``z`` = softmax of the whole rows of ``x`` it covers (padding reads as -inf)."""
    xf = tc.load_tile_like(x, z, padding=float("-inf")).astype(tc.f32)
    # rows past the tensor's end are all padding: keep their arithmetic finite (never stored)
    top = tc.maximum(tc.reduce_max(xf, 1, keepdims=True), -3.0e38)
    e = tc.exp2((xf - top) * LOG2E)
    # a real row's sum is >= 1 (its maximum contributes exp(0)), so this changes no real row
    total = tc.maximum(tc.reduce_sum(e, 1, keepdims=True), 1.0)
    z.store((e / total).astype(z.dtype))


@kernel
def softmax_chunk_stats(top: tc.MutTensor[tc.f32, (1, 1)], total: tc.MutTensor[tc.f32, (1, 1)],
                        x: tc.Tensor["T", (-1, -1)], BC: tc.Const[int]):  # noqa: F821
    """For chunk ``(row, c)`` of ``x`` (``BC`` columns): its maximum and the sum of
    ``exp(x - maximum)`` over it."""
    row, chunk, _ = tc.get_tile_block_id()
    xf = x.partition((1, BC), padding=float("-inf")).load((row, chunk)).astype(tc.f32)
    best = tc.maximum(tc.reduce_max(xf, 1, keepdims=True), -3.0e38)  # finite, as in rows
    top.store(best)
    total.store(tc.reduce_sum(tc.exp2((xf - best) * LOG2E), 1, keepdims=True))


@kernel
def softmax_chunk_apply(z: tc.MutTensor["T", (1, "BC")], x: tc.Tensor["T", (-1, -1)],  # noqa: F821
                        top: tc.Tensor[tc.f32, (-1, -1)], total: tc.Tensor[tc.f32, (-1, -1)],
                        CP: tc.Const[int]):
    """``z`` = one chunk of a softmax row, from the row's chunk statistics (``CP`` >= the
    chunk count, a power of two): the row maximum is the chunks' maximum, the row sum the
    chunks' sums rescaled to it."""
    row, _, _ = tc.get_tile_block_id()
    tops = top.partition((1, CP), padding=float("-inf")).load((row, 0))
    best = tc.reduce_max(tops, 1, keepdims=True)
    sums = total.partition((1, CP)).load((row, 0)) * tc.exp2((tops - best) * LOG2E)
    # >= 1 for a real row (its maximum's chunk contributes exp(0)); 0 only if all are -inf
    row_total = tc.maximum(tc.reduce_sum(sums, 1, keepdims=True), 1.0)
    xf = tc.load_tile_like(x, z, padding=float("-inf")).astype(tc.f32)
    z.store((tc.exp2((xf - best) * LOG2E) / row_total).astype(z.dtype))


@function
def _silu(g):
    """``g * sigmoid(g)`` of an f32 tile: ``g / (1 + exp(-g))`` as ``g * a / (1 + a)`` with
    ``a = exp(-|g|)`` (``exp2``) for negative ``g``, so the divisor stays in [1, 2], where
    the GPU's fast division holds (within 2 ulp); exponentials and division flush f32
    subnormals (what is lost is below ``|g| * 2**-126``)."""
    a = tc.exp2(tc.abs(g) * -LOG2E, flush_to_zero=True)
    return tc.truediv(tc.where(g < 0.0, g * a, g), 1.0 + a, rounding="approx",
                      flush_to_zero=True)


@kernel
def silu_mul_tiles(z: tc.MutTensor["T", ("R", "BC")], gate: tc.Tensor["T", (-1, -1)],  # noqa: F821
                   up: tc.Tensor["T", (-1, -1)]):  # noqa: F821
    """``z = round(round(silu(gate)) * up)``: the two roundings of transformers' MLP."""
    z.store(silu_gated(tc.load_tile_like(gate, z), tc.load_tile_like(up, z)))


@function
def silu_gated(g, u):
    """SwiGLU's gating of the tiles ``g`` and ``u``, rounded as transformers' MLP rounds:
    ``round(round(silu(g)) * u)`` in ``g``'s dtype (``silu_mul``, and the down projection's
    GEMV that computes its own activations, ``kernels.gemv.gemv_rows_silu_mul``)."""
    activated = _silu(g.astype(tc.f32)).astype(g.dtype)
    return (activated.astype(tc.f32) * u.astype(tc.f32)).astype(g.dtype)


SQRT_HALF = 0.7071067811865476
TANH_SCALE = 0.7978845608028654  # sqrt(2 / pi)
#: the tanh form's exponent ``-2 log2(e) sqrt(2/pi) (x + 0.044715 x**3)`` as
#: ``x * (_TANH_LINEAR + _TANH_CUBIC * x * x)``
_TANH_LINEAR = -2.0 * LOG2E * TANH_SCALE
_TANH_CUBIC = _TANH_LINEAR * 0.044715
#: the Chebyshev fit of ``log(erfc(a) / t) + a*a`` in ``t = 1 / (1 + a/2)`` (lowest power
#: first; relative error of ``erfc`` below 1.2e-7 for every ``a >= 0``)
_ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
             -1.13520398, 1.48851587, -0.82215223, 0.17087277)
#: the fit times log2(e), its constant term lowered by 1: ``exp2`` of it is ``erfc / (2 t)``
#: before the ``-a*a`` term, so the fit's polynomial feeds ``exp2`` directly and the halving
#: of ``Phi(-a) = erfc(a / sqrt 2) / 2`` costs no multiply
_HALF_ERFC_LOG2 = tuple(c * LOG2E - (1.0 if i == 0 else 0.0) for i, c in enumerate(_ERFC_FIT))


@function
def _normal_tail(xf):
    """``Phi(-|x|)``, the standard normal's lower tail at ``-|x|``, for an f32 tile ``xf``
    (relative error within about 2e-7, up to a few 1e-6 past |x| = 8 where f32's ``x*x``
    rounds): ``erfc(|x| / sqrt 2) / 2`` from the fit above. The reciprocal ``t`` is the GPU's
    fast division (within 2 ulp; it moves the tail by less than the fit's own error; its
    divisor is at least 1, so flushing subnormals changes nothing), the polynomial's steps are
    fused multiply-adds (one rounding each, ``tc.fma``), and the exponential flushes results
    below 2**-126 to zero (past ``|x|`` of about 13.08, where the tail is near 2e-39). GELU
    over a large tensor is bound by its instructions, not by memory: compiled for sm_90 (a
    4 x 1024 tile), the whole element costs 28 instructions this way, 37 with the exponential
    and division handling subnormals, and 48 with each polynomial step written ``c + t * p``
    (a multiply and an add: Tile IR never fuses them by itself)."""
    t = tc.truediv(1.0, tc.fma(tc.abs(xf), 0.5 * SQRT_HALF, 1.0), rounding="approx",
                   flush_to_zero=True)
    p = _HALF_ERFC_LOG2[9]
    for c in (_HALF_ERFC_LOG2[8], _HALF_ERFC_LOG2[7], _HALF_ERFC_LOG2[6], _HALF_ERFC_LOG2[5],
              _HALF_ERFC_LOG2[4], _HALF_ERFC_LOG2[3], _HALF_ERFC_LOG2[2], _HALF_ERFC_LOG2[1],
              _HALF_ERFC_LOG2[0]):
        p = tc.fma(t, p, c)
    return t * tc.exp2(tc.fma(xf * (-0.5 * LOG2E), xf, p), flush_to_zero=True)


@kernel
def gelu_tiles(z: tc.MutTensor["T", ("R", "BC")], x: tc.Tensor["T", (-1, -1)],  # noqa: F821
               TANH: tc.Const[bool]):
    """``z = gelu(x)``: exact (``x * Phi(x)``, the normal CDF from ``_normal_tail``) or the
    tanh approximation (``x * sigmoid(2u)``, with the GPU's fast division and f32 subnormals
    flushed: 18 sm_90 instructions an element, 27 with the division's full range and
    subnormals)."""
    xf = tc.load_tile_like(x, z).astype(tc.f32)
    if TANH:
        # x / (1 + 2**w), as x * a / (1 + a) with a = 2**-w where w > 0 (x < 0): the divisor
        # stays in [1, 2], where the fast division holds
        w = xf * tc.fma(xf * xf, _TANH_CUBIC, _TANH_LINEAR)
        a = tc.exp2(-tc.abs(w), flush_to_zero=True)
        y = tc.truediv(tc.where(w > 0.0, xf * a, xf), 1.0 + a, rounding="approx",
                       flush_to_zero=True)
    else:
        below = xf * _normal_tail(xf)  # x * Phi(-|x|)
        y = tc.where(xf < 0.0, below, xf - below)  # Phi(x) = 1 - Phi(-x) for x >= 0
    z.store(y.astype(z.dtype))


# -- launches (tile choices) -----------------------------------------------------------------

#: the whole-row softmax, also compiled for 8 warps per program (wide tiles)
_SOFTMAX_ROWS = WarpVariants(softmax_rows)


def _rows_key(x: Tensor, *rest: Any, **_: Any) -> tuple:
    return (rows_bucket(x.shape[0]), x.shape[1], x.dtype.name)


@autotune(configs=SOFTMAX_CONFIGS, key=_rows_key,
          kernels=(*_SOFTMAX_ROWS.kernels, softmax_chunk_stats, softmax_chunk_apply))
def _launch_softmax(x: Tensor, out: RowsOutput, *, config: dict) -> DeviceOp:
    rows, columns = x.shape
    block = next_pow2(columns)
    if block <= SOFTMAX_MAX_TILE:
        tile = (row_tile(config["rows"], rows, block, TILE_BUDGET), block)
        return _SOFTMAX_ROWS.pick(tile, config)(out.partition(tile), x)
    chunk = chunk_columns(config["chunk"], rows, columns, SOFTMAX_MAX_TILE)
    chunks = -(-columns // chunk)
    top = Output(None, (rows, chunks), float32, x.device, name="chunk maxima", op="softmax")
    total = Output(None, (rows, chunks), float32, x.device, name="chunk sums", op="softmax")
    stats = softmax_chunk_stats(top.partition((1, 1)), total.partition((1, 1)), x, BC=chunk)

    return stats.then(lambda r: softmax_chunk_apply(
        out.partition((1, chunk)), x, top.tensor(r.top), total.tensor(r.total),
        CP=next_pow2(chunks)))


def _tiles_key(x: Tensor, *rest: Any, **_: Any) -> tuple:
    return (rows_bucket(x.shape[0]), next_pow2(x.shape[1]), x.dtype.name)


def _elementwise_tile(x: Tensor, config: dict) -> tuple[int, int]:
    return matrix_tile(config["rows"], config["cols"], *x.shape)


_SILU_MUL = WarpVariants(silu_mul_tiles)
_GELU = WarpVariants(gelu_tiles)


@autotune(configs=ELEMENTWISE_CONFIGS, key=_tiles_key, kernels=(silu_mul_tiles,))
def _launch_silu_mul(gate: Tensor, up: Tensor, out: RowsOutput, *, config: dict) -> DeviceOp:
    tile = _elementwise_tile(gate, config)
    return _SILU_MUL.pick(tile, {"warps": 4, **config})(out.partition(tile), gate, up)


def _gelu_key(x: Tensor, out: Any, tanh: bool, **_: Any) -> tuple:
    # the two forms are two kernels (18 and 28 instructions an element): each its own winner
    return _tiles_key(x) + (bool(tanh),)


@autotune(configs=ELEMENTWISE_CONFIGS, key=_gelu_key, kernels=(gelu_tiles,))
def _launch_gelu(x: Tensor, out: RowsOutput, tanh: bool, *, config: dict) -> DeviceOp:
    tile = _elementwise_tile(x, config)
    return _GELU.pick(tile, {"warps": 4, **config})(out.partition(tile), x, TANH=tanh)


# -- public functions -------------------------------------------------------------------------

@accepts_torch
def softmax(x: Tensor, *, axis: int = -1, out: Optional[Tensor] = None) -> DeviceOp:
    """Softmax over the last axis, as ``torch.softmax(x, -1)``: in float32, ``exp(x - max) /
    sum(exp(x - max))`` per row, rounded once to ``x``'s dtype.

    Rows of up to ``SOFTMAX_MAX_TILE`` elements are each one tile (several per program when
    short); longer rows (vocabularies) are split into chunks, reduced to per-chunk maxima and
    sums by one launch and normalized by a second (the online-softmax combination), so any row
    length works. A row whose elements are all ``-inf`` gives zeros (torch gives NaN).

    Args:
        x: float16, bfloat16 or float32 tensor of shape ``(..., n)``, ``n >= 1``.
        axis: the axis to normalize over; only the last (``-1`` or ``x.ndim - 1``).
        out: optional output of ``x``'s shape and dtype (else a new tensor).

    Returns:
        A DeviceOp whose result is the output tensor.

    Raises:
        ArgumentError: a non-tensor, an unsupported dtype, another axis, an empty row, or an
            ``out`` that does not match.
    """
    op = "softmax"
    x = check_tensor(x, "x", op)
    rank = len(x.shape)
    if isinstance(axis, bool) or not isinstance(axis, int) or axis not in (-1, rank - 1):
        raise ArgumentError(f"{op}: axis={axis!r}; only the last axis (-1) is supported",
                            caller_location(), hint="move the axis last (x.permute(...)."
                            "clone()) and pass axis=-1")
    _check_row_length(x, op)
    output = RowsOutput(out, x.shape, x.dtype, x.device, op=op)
    return finish(_launch_softmax(as_rows(x, "x", op), output), lambda r: output.result(r.z))


@accepts_torch
def silu_mul(x: Tensor, up: Optional[Tensor] = None, *,
             out: Optional[Tensor] = None) -> DeviceOp:
    """SwiGLU's gating: ``silu(gate) * up``.

    Two forms, one kernel: ``silu_mul(gate_up)`` takes the output of a merged gate/up
    projection (last axis ``2 * I``: the gate's ``I`` columns first, then up's, as vLLM's
    ``silu_and_mul``), which is what an engine should use (one GEMM instead of two); and
    ``silu_mul(gate, up)`` takes the two projections (transformers' ``gate_proj`` and
    ``up_proj``) as tensors of one shape. Rounding follows transformers' Qwen3/Llama MLP
    (``act_fn(gate) * up``): ``silu`` is computed in float32 and rounded to the dtype, then
    the product is computed in float32 and rounded again (for float32 the same as one rounding).

    Args:
        x: the merged ``(..., 2 * I)`` tensor, or the gate ``(..., I)`` when ``up`` is given;
            float16, bfloat16 or float32.
        up: optional up projection, ``x``'s shape, dtype and device.
        out: optional output of shape ``(..., I)`` and ``x``'s dtype (else a new tensor).

    Returns:
        A DeviceOp whose result is the ``(..., I)`` output tensor.

    Raises:
        ArgumentError: a non-tensor, an unsupported dtype, an odd last axis (merged form), an
            ``up`` of another shape, dtype or device, or an ``out`` that does not match.
    """
    op = "silu_mul"
    x = check_tensor(x, "x", op)
    if up is None:
        width = x.shape[-1]
        if width % 2:
            raise ArgumentError(f"{op}: x's last axis has {width} elements; the merged form "
                                "needs an even count (gate's columns, then up's)",
                                caller_location(), hint="pass silu_mul(gate, up) for separate "
                                "tensors, or the (..., 2 * I) output of a merged projection")
        rows = as_rows(x, "x", op)
        half = width // 2
        gate, up_rows = rows[:, :half], rows[:, half:]
        shape = tuple(x.shape[:-1]) + (half,)
    else:
        up = check_tensor(up, "up", op)
        if tuple(up.shape) != tuple(x.shape):
            raise ArgumentError(f"{op}: up has shape {tuple(up.shape)}, the gate "
                                f"{tuple(x.shape)}; they must agree", caller_location(),
                                hint="pass the gate and up projections of one input")
        check_like(up, "up", x, "gate", op)
        gate, up_rows = as_rows(x, "gate", op), as_rows(up, "up", op)
        shape = tuple(x.shape)
    if shape[-1] == 0:
        raise ArgumentError(f"{op}: the gate has no columns (x of shape {tuple(x.shape)})",
                            caller_location(), hint="pass a non-empty last axis")
    output = RowsOutput(out, shape, x.dtype, x.device, op=op)
    return finish(_launch_silu_mul(gate, up_rows, output), lambda r: output.result(r.z))


@accepts_torch
def gelu(x: Tensor, *, approximate: str = "none", out: Optional[Tensor] = None) -> DeviceOp:
    """GELU, as ``torch.nn.functional.gelu(x, approximate=...)``, in float32 and rounded once.

    ``"none"``: ``x * Phi(x)`` with the normal CDF from an ``erfc`` approximation of relative
    error about 2e-7 (also in the negative tail, where ``1 + erf`` would cancel; a few 1e-6
    past ``|x| = 8``, where float32's ``x * x`` rounds); ``"tanh"``: ``0.5 * x * (1 + tanh(
    sqrt(2 / pi) * (x + 0.044715 * x**3)))``, computed as ``x * sigmoid(2 * ...)``. Both use
    the GPU's fast division (within 2 ulp), so a GPU's float32 results can differ from the
    interpreter's in the last bits. Both flush float32 subnormals (magnitudes below 2**-126)
    to zero in their exponentials (and the tanh form in its division), on every device, so
    what is lost is below ``|x| * 2**-126``: the exact form's negative tail reaches zero
    below about ``x = -13.08`` (a float32 ``1 + erf(x / sqrt 2)`` is zero from about -5.7),
    the tanh form's below about -10.0; a subnormal float32 or bfloat16 ``x`` gives zero in
    the tanh form.

    Args:
        x: float16, bfloat16 or float32 tensor of any shape (rank >= 1).
        approximate: ``"none"`` or ``"tanh"``.
        out: optional output of ``x``'s shape and dtype (else a new tensor).

    Returns:
        A DeviceOp whose result is the output tensor.

    Raises:
        ArgumentError: a non-tensor, an unsupported dtype, another ``approximate``, or an
            ``out`` that does not match.
    """
    op = "gelu"
    x = check_tensor(x, "x", op)
    if approximate not in ("none", "tanh"):
        raise ArgumentError(f"{op}: approximate={approximate!r}; use 'none' or 'tanh'",
                            caller_location(), hint="approximate='none' is the exact GELU")
    _check_row_length(x, op)
    output = RowsOutput(out, x.shape, x.dtype, x.device, op=op)
    launch = _launch_gelu(as_rows(x, "x", op), output, approximate == "tanh")
    return finish(launch, lambda r: output.result(r.z))


def _check_row_length(x: Tensor, op: str) -> None:
    if x.shape[-1] == 0:
        raise ArgumentError(f"{op}: x of shape {tuple(x.shape)} has an empty last axis",
                            caller_location(), hint="pass a non-empty last axis")
