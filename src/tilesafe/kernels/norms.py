"""Normalizations over the last axis: ``rms_norm``, ``add_rms_norm`` (the residual add fused in,
written in place) and ``layer_norm``, for float16, bfloat16 and float32 tensors of any rank
(leading dimensions are rows) and any hidden size.

A row of up to :data:`MAX_ROW_TILE` elements is one tile: each program owns a tile of whole
rows (``(rows, next power of two of hidden)``: the row is padded with zeros on load, and the
store is masked). A longer row is cut into column chunks and takes two launches: the first
writes each chunk's statistics (and, for ``add_rms_norm``, the chunk's new residual), the
second combines a row's chunk statistics and writes its chunk. The statistics are accumulated
in float32 whatever the storage type. Rounding follows transformers' modules (Llama/Qwen3
``RMSNorm``, ``torch.nn.LayerNorm``) step for step, so a decode engine matches them token for
token: see each function.

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
from ..host.tensor import Tensor, borrow_mut
from ..kernel import function, kernel
from ._outputs import Output
from ._rowwise import (RowsOutput, WarpVariants, as_rows, check_like, check_tensor,
                       check_vector, chunk_columns, finish, next_pow2, row_tile, rows_bucket)
from ._torch import accepts_torch

#: the longest row kept whole in one program's tile; longer rows are chunked
MAX_ROW_TILE = 16384
#: elements of one program's tile (rows x padded hidden) a launch aims at most for
TILE_BUDGET = 8192
#: rows per program for rows that fit a tile, the chunk for longer ones, in the order the
#: tuner tries them (the first is the default); a config may also fix ``"warps"`` (4 or 8) of
#: a whole-row program, else tiles of ``_rowwise.WIDE_TILE`` elements or more run 8, and the
#: ``"occupancy"`` and ``"programmatic"`` hints (``_rowwise.WarpVariants``); the last two are
#: LayerNorm's (16384 x 4096 bf16 on the H100: 102 us, against 139 us for the first)
ROW_CONFIGS = ({"rows": 4, "chunk": 4096}, {"rows": 4, "chunk": 4096, "programmatic": False},
               {"rows": 1, "chunk": 4096}, {"rows": 8, "chunk": 8192},
               {"rows": 2, "chunk": 2048}, {"rows": 4, "chunk": 4096, "occupancy": 0},
               {"rows": 16, "chunk": 16384},
               {"rows": 2, "chunk": 4096, "occupancy": 4, "warps": 4},
               {"rows": 4, "chunk": 4096, "occupancy": 4, "warps": 4})


# -- device side ---------------------------------------------------------------------------

@function
def _rms_normalize(xf, w, hidden, eps, dtype):
    """Qwen3/Llama RMSNorm of the f32 rows ``xf``: ``x * rsqrt(mean(x^2) + eps)`` rounded to
    ``dtype``, then times the weight ``w`` (f32 product, one more rounding)."""
    return _rms_apply(xf, _rms_scale(xf, 1, hidden, eps), w, dtype)


@function
def _rms_scale(xf, axis, hidden, eps):
    """``rsqrt(mean(x^2) + eps)`` of the f32 tile ``xf`` along ``axis`` (kept, size 1)."""
    mean_square = tc.reduce_sum(xf * xf, axis, keepdims=True) / hidden
    return tc.rsqrt(mean_square + eps)


@function
def _rms_apply(xf, scale, w, dtype):
    """``xf * scale`` rounded to ``dtype``, times the weight ``w`` (f32 product, rounded
    again): the rest of ``_rms_normalize`` once the scale is known."""
    normed = (xf * scale).astype(dtype)
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


@kernel
def rms_chunk_stats(squares: tc.MutTensor[tc.f32, (1, 1)],
                    x: tc.Tensor["T", (-1, -1)], BC: tc.Const[int]):  # noqa: F821
    """The sum of squares of chunk ``(row, c)`` of ``x`` (``BC`` columns)."""
    row, chunk, _ = tc.get_tile_block_id()
    xf = x.partition((1, BC)).load((row, chunk)).astype(tc.f32)
    squares.store(tc.reduce_sum(xf * xf, 1, keepdims=True))


@kernel
def add_rms_chunk_stats(squares: tc.MutTensor[tc.f32, (1, 1)],
                        residual: tc.MutTensor["T", (1, "BC")],  # noqa: F821
                        x: tc.Tensor["T", (-1, -1)]):  # noqa: F821
    """``residual += x`` on one chunk (rounded to the storage type), and the sum of squares
    of the new residual's chunk."""
    summed = tc.load_tile_like(x, residual).astype(tc.f32) + residual.load().astype(tc.f32)
    summed = summed.astype(residual.dtype)
    residual.store(summed)
    sf = summed.astype(tc.f32)
    squares.store(tc.reduce_sum(sf * sf, 1, keepdims=True))


@kernel
def rms_chunk_apply(z: tc.MutTensor["T", (1, "BC")], x: tc.Tensor["T", (-1, -1)],  # noqa: F821
                    w: tc.Tensor["T", (1, -1)], squares: tc.Tensor[tc.f32, (-1, -1)],  # noqa: F821
                    hidden: float, eps: float, CP: tc.Const[int]):
    """``z`` = one chunk of an RMSNorm row, from the row's chunk sums of squares (``CP`` >=
    the chunk count, a power of two)."""
    row, chunk, _ = tc.get_tile_block_id()
    total = tc.reduce_sum(squares.partition((1, CP)).load((row, 0)), 1, keepdims=True)
    normed = (tc.load_tile_like(x, z).astype(tc.f32) * tc.rsqrt(total / hidden + eps))
    normed = normed.astype(z.dtype)
    weight = w.partition((1, BC)).load((0, chunk))  # noqa: F821
    z.store((normed.astype(tc.f32) * weight.astype(tc.f32)).astype(z.dtype))


@kernel
def layer_chunk_stats(sums: tc.MutTensor[tc.f32, (1, 1)], spreads: tc.MutTensor[tc.f32, (1, 1)],
                      x: tc.Tensor["T", (-1, -1)], columns: int, BC: tc.Const[int]):  # noqa: F821
    """Chunk ``(row, c)`` of ``x``: its sum, and the sum of squared deviations from its own
    mean (to be combined exactly, Chan's parallel variance)."""
    row, chunk, _ = tc.get_tile_block_id()
    xf = x.partition((1, BC)).load((row, chunk)).astype(tc.f32)
    count = tc.minimum(columns - chunk * BC, BC).astype(tc.f32)  # noqa: F821
    total = tc.reduce_sum(xf, 1, keepdims=True)
    inside = tc.arange(BC).reshape((1, BC)) < columns - chunk * BC  # noqa: F821
    centered = tc.where(inside, xf - total / count, 0.0)
    sums.store(total)
    spreads.store(tc.reduce_sum(centered * centered, 1, keepdims=True))


@kernel
def layer_chunk_apply(z: tc.MutTensor["T", (1, "BC")], x: tc.Tensor["T", (-1, -1)],  # noqa: F821
                      w: tc.Tensor["T", (1, -1)], b: tc.Tensor["T", (1, -1)],  # noqa: F821
                      sums: tc.Tensor[tc.f32, (-1, -1)], spreads: tc.Tensor[tc.f32, (-1, -1)],
                      hidden: float, columns: int, eps: float, HAS_BIAS: tc.Const[bool],
                      CP: tc.Const[int]):
    """``z`` = one chunk of a LayerNorm row, from the row's chunk sums and spreads: the mean
    is the sums' total over ``hidden``, the variance the spreads plus each chunk's count times
    its mean's squared distance to the row mean, over ``hidden``."""
    row, chunk, _ = tc.get_tile_block_id()
    chunk_sums = sums.partition((1, CP)).load((row, 0))
    starts = tc.arange(CP).reshape((1, CP)) * BC  # noqa: F821
    counts = tc.maximum(tc.minimum(columns - starts, BC), 0).astype(tc.f32)  # noqa: F821
    mean = tc.reduce_sum(chunk_sums, 1, keepdims=True) / hidden
    apart = chunk_sums / tc.maximum(counts, 1.0) - mean
    spread = spreads.partition((1, CP)).load((row, 0)) + counts * apart * apart
    variance = tc.reduce_sum(spread, 1, keepdims=True) / hidden
    weight = w.partition((1, BC)).load((0, chunk)).astype(tc.f32)  # noqa: F821
    y = (tc.load_tile_like(x, z).astype(tc.f32) - mean) * tc.rsqrt(variance + eps) * weight
    if HAS_BIAS:
        y = y + b.partition((1, BC)).load((0, chunk)).astype(tc.f32)  # noqa: F821
    z.store(y.astype(z.dtype))


# -- launches (tile choices) -----------------------------------------------------------------

#: the whole-row kernels, each also compiled for 8 warps per program (wide tiles)
_RMS_ROWS = WarpVariants(rms_norm_rows)
_ADD_RMS_ROWS = WarpVariants(add_rms_norm_rows)
_LAYER_ROWS = WarpVariants(layer_norm_rows)


def _key(x: Tensor, *rest: Any, **_: Any) -> tuple:
    return (rows_bucket(x.shape[0]), x.shape[1], x.dtype.name)


def _tile(x: Tensor, config: dict) -> tuple[int, int]:
    block = next_pow2(x.shape[1])
    return row_tile(config["rows"], x.shape[0], block, TILE_BUDGET), block


def _chunking(x: Tensor, config: dict) -> Optional[tuple[int, int]]:
    """``(chunk, chunk count)`` when ``x``'s rows are too long for one tile, else None."""
    if next_pow2(x.shape[1]) <= MAX_ROW_TILE:
        return None
    chunk = chunk_columns(config["chunk"], x.shape[0], x.shape[1], MAX_ROW_TILE)
    return chunk, -(-x.shape[1] // chunk)


def _statistics(x: Tensor, chunks: int, name: str) -> Output:
    return Output(None, (x.shape[0], chunks), float32, x.device, name=name, op="norm")


@autotune(configs=ROW_CONFIGS, key=_key, kernels=(*_RMS_ROWS.kernels, rms_chunk_stats,
                                                  rms_chunk_apply))
def _launch_rms_norm(x: Tensor, w: Tensor, out: RowsOutput, eps: float, *,
                     config: dict) -> DeviceOp:
    hidden = float(x.shape[1])
    chunking = _chunking(x, config)
    if chunking is None:
        tile = _tile(x, config)
        return _RMS_ROWS.pick(tile, config)(out.partition(tile), x, w, hidden, eps)
    chunk, chunks = chunking
    squares = _statistics(x, chunks, "chunk sums of squares")
    stats = rms_chunk_stats(squares.partition((1, 1)), x, BC=chunk)
    return stats.then(lambda r: rms_chunk_apply(out.partition((1, chunk)), x, w,
                                                squares.tensor(r.squares), hidden, eps,
                                                CP=next_pow2(chunks)))


@autotune(configs=ROW_CONFIGS, key=_key, kernels=(*_ADD_RMS_ROWS.kernels, add_rms_chunk_stats,
                                                  rms_chunk_apply), mutates=("residual",))
def _launch_add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, out: RowsOutput, eps: float,
                         *, config: dict) -> DeviceOp:
    hidden = float(x.shape[1])
    chunking = _chunking(x, config)
    if chunking is None:
        tile = _tile(x, config)
        return _ADD_RMS_ROWS.pick(tile, config)(out.partition(tile),
                                                borrow_mut(residual).partition(tile), x, w,
                                                hidden, eps)
    chunk, chunks = chunking
    squares = _statistics(x, chunks, "chunk sums of squares")
    stats = add_rms_chunk_stats(squares.partition((1, 1)),
                                borrow_mut(residual).partition((1, chunk)), x)
    return stats.then(lambda r: rms_chunk_apply(out.partition((1, chunk)), residual, w,
                                                squares.tensor(r.squares), hidden, eps,
                                                CP=next_pow2(chunks)))


def _layer_key(x: Tensor, w: Tensor, b: Optional[Tensor], *rest: Any, **_: Any) -> tuple:
    # with and without a bias are two specializations of the kernel: each its own winner
    return _key(x) + (b is not None,)


@autotune(configs=ROW_CONFIGS, key=_layer_key,
          kernels=(*_LAYER_ROWS.kernels, layer_chunk_stats, layer_chunk_apply))
def _launch_layer_norm(x: Tensor, w: Tensor, b: Optional[Tensor], out: RowsOutput, eps: float,
                       *, config: dict) -> DeviceOp:
    hidden = x.shape[1]
    bias = w if b is None else b
    chunking = _chunking(x, config)
    if chunking is None:
        tile = _tile(x, config)
        return _LAYER_ROWS.pick(tile, config)(out.partition(tile), x, w, bias, float(hidden),
                                              hidden, eps, HAS_BIAS=b is not None)
    chunk, chunks = chunking
    sums = _statistics(x, chunks, "chunk sums")
    spreads = _statistics(x, chunks, "chunk spreads")
    stats = layer_chunk_stats(sums.partition((1, 1)), spreads.partition((1, 1)), x, hidden,
                              BC=chunk)
    return stats.then(lambda r: layer_chunk_apply(
        out.partition((1, chunk)), x, w, bias, sums.tensor(r.sums), spreads.tensor(r.spreads),
        float(hidden), hidden, eps, HAS_BIAS=b is not None, CP=next_pow2(chunks)))


# -- public functions -------------------------------------------------------------------------

def _check_x(x: Any, op: str) -> Tensor:
    x = check_tensor(x, "x", op)
    if x.shape[-1] == 0:
        raise ArgumentError(f"{op}: x of shape {tuple(x.shape)} has an empty last axis; "
                            "there is nothing to normalize", caller_location(),
                            hint="pass a non-empty last axis")
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
        x: float16, bfloat16 or float32 tensor of shape ``(..., hidden)``, ``hidden >= 1``.
        weight: the scale, shape ``(hidden,)``, ``x``'s dtype and device.
        eps: added to the mean square (a finite positive number).
        out: optional output of ``x``'s shape and dtype (else a new tensor).

    Returns:
        A DeviceOp whose result is the output tensor (``x``'s shape and dtype).

    Raises:
        ArgumentError: a non-tensor, an unsupported dtype, a weight of the wrong shape, dtype
            or device, an empty last axis, a bad ``eps``, or an ``out`` that does not match.
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
        x: float16, bfloat16 or float32 tensor of shape ``(..., hidden)``, ``hidden >= 1``.
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
