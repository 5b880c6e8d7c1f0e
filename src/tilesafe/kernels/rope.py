"""Rotary position embeddings: ``rope`` rotates queries and keys by their tokens' positions,
``rope_cache`` builds the cos/sin table it reads (once per model).

The math is transformers' (Llama/Qwen3 ``apply_rotary_pos_emb``) carried out in float32:
``inv_freq[i] = 1 / base**(float32(2i) / d)``, ``freqs = float32(position) * inv_freq``,
``emb = cat(freqs, freqs)``, ``out = x*cos(emb) + rotate_half(x)*sin(emb)``, rounded once to
the input dtype. Two layouts: ``"neox"`` rotates the two halves of a head (``rotate_half``,
Qwen3, Llama), ``"gptj"`` rotates interleaved pairs ``(x[2i], x[2i+1])``.

The table is ``(max_positions, head_dim)``: columns ``[0, d/2)`` hold ``cos(freqs)``,
``[d/2, d)`` hold ``sin(freqs)`` (the duplicated half of ``emb`` is not stored). A launch reads
the row of each token's position with ``tc.gather``, so a position outside the table raises
``IndexOutOfRangeError``.

May import the host layer, ``kernel``, ``autotune``, ``core`` and the library's helpers.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import core as tc
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..dtypes import as_dtype
from ..host.factory import tensor as host_tensor
from ..host.tensor import Tensor, borrow_mut
from ..kernel import function, kernel
from . import _token_args as args
from ._token_args import MEMORY_BOUND_HINTS
from ._outputs import Output
from ._torch import accepts_torch
from .norms import _rms_apply, _rms_normalize, _rms_scale

LAYOUTS = ("neox", "gptj")


def rope_cache(max_positions: int, head_dim: int, *, base: float = 1_000_000.0,
               dtype: Any = "float32", device: Any = None) -> DeviceOp:
    """The cos/sin table ``rope`` reads: a lazy tensor of shape ``(max_positions,
    head_dim)`` holding ``cos(freqs)`` in its first ``head_dim/2`` columns and ``sin(freqs)``
    in the rest, ``freqs[p, i] = float32(p) * inv_freq[i]``, ``inv_freq`` computed in float32
    as transformers does. The values are computed in float64 from those float32 frequencies
    and rounded once to ``dtype``.

    Args:
        max_positions: the number of positions (rows); positions ``0..max_positions-1``.
        head_dim: the rotated head size ``d`` (even).
        base: the rotary base (``rope_theta``: 1e6 for Qwen3, 1e4 for Llama 2).
        dtype: ``float32`` (exact transformers math) or the model's ``float16``/``bfloat16``.
        device: where the table lives (default: the default device).

    Raises:
        ArgumentError: a non-positive size, an odd ``head_dim``, a non-positive base or an
            unsupported dtype.
    """
    op = "rope_cache"
    if int(max_positions) < 1:
        raise args.fail(op, f"max_positions={max_positions} must be at least 1",
                        "pass the model's maximum sequence length")
    if int(head_dim) < 2 or int(head_dim) % 2:
        raise args.fail(op, f"head_dim={head_dim} must be an even number >= 2",
                        "pass the rotated part of the head size (an even number)")
    if not float(base) > 0:
        raise args.fail(op, f"base={base} must be positive", "pass the model's rope_theta")
    dt = as_dtype(dtype)
    if dt.name not in args.FLOATS:
        raise args.fail(op, f"dtype {dt.name} is not supported; supported: "
                        f"{', '.join(args.FLOATS)}", "pass dtype='float32'")
    half = int(head_dim) // 2
    exponents = np.arange(0, int(head_dim), 2, dtype=np.int64).astype(np.float32) \
        / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(base), exponents)).astype(np.float32)
    positions = np.arange(int(max_positions), dtype=np.float32)
    freqs = (positions[:, None] * inv_freq[None, :]).astype(np.float32).astype(np.float64)
    table = np.empty((int(max_positions), 2 * half), np.float64)
    table[:, :half] = np.cos(freqs)
    table[:, half:] = np.sin(freqs)
    host = table.astype(np.float32)
    if dt.name != "float32":
        host = _round_to(table, dt.name)
    return host_tensor(host, device=device)


def _round_to(table: np.ndarray, dtype_name: str) -> np.ndarray:
    if dtype_name == "float16":
        return table.astype(np.float16)
    import ml_dtypes
    return table.astype(ml_dtypes.bfloat16)


@function
def _rotate(t, cache, positions, i, half, TT, ROWS, COLS, HALFP, NEOX):
    """The rotated (TT, ROWS, COLS) tile ``t`` (TT tokens from token ``i*TT``), in t's dtype."""
    pos = positions.partition((TT,)).load(i, padding=0).reshape((TT, 1))
    col = tc.minimum(tc.arange(HALFP, tc.i32), half - 1).reshape((1, HALFP))
    cos = tc.gather(cache, pos, col).astype(tc.f32)
    sin = tc.gather(cache, pos, col + half).astype(tc.f32)
    if NEOX:
        x = t.astype(tc.f32).reshape((TT, ROWS // 2, 2, HALFP))
        c = cos.reshape((TT, 1, 1, HALFP))
        s = sin.reshape((TT, 1, 1, HALFP))
        x1 = x[:, :, 0:1, :]
        x2 = x[:, :, 1:2, :]
        y = tc.cat((x1 * c - x2 * s, x2 * c + x1 * s), axis=2)
    else:
        x = t.astype(tc.f32).reshape((TT, ROWS, HALFP, 2))
        c = cos.reshape((TT, 1, HALFP, 1))
        s = sin.reshape((TT, 1, HALFP, 1))
        x1 = x[:, :, :, 0:1]
        x2 = x[:, :, :, 1:2]
        y = tc.cat((x1 * c - x2 * s, x2 * c + x1 * s), axis=3)
    return y.reshape((TT, ROWS, COLS)).astype(t.dtype)


@function
def _normalize_heads(t, weight, hidden, eps, TT, ROWS, COLS, HALFP, NEOX):
    """RMSNorm of each head of the (TT, ROWS, COLS) tile ``t`` with ``weight`` (viewed (2, d/2)
    for NeoX, (1, d) for GPT-J), rounded as ``rms_norm`` rounds; NeoX heads are row pairs."""
    if NEOX:
        w = weight.partition((2, HALFP)).load((0, 0), padding=0).reshape((1, COLS * 2))
        heads = t.astype(tc.f32).reshape((TT * (ROWS // 2), COLS * 2))
    else:
        w = weight.partition((1, COLS)).load((0, 0), padding=0)
        heads = t.astype(tc.f32).reshape((TT * ROWS, COLS))
    return _rms_normalize(heads, w, hidden, eps, t.dtype).reshape((TT, ROWS, COLS))


@kernel(hints=MEMORY_BOUND_HINTS)
def rope_norm_inplace(q: tc.MutTensor["T", ("TT", "QR", "COLS")],
                      k: tc.MutTensor["T", ("TT", "KR", "COLS")],
                      cache: tc.Tensor["C", (-1, -1)], positions: tc.Tensor["P", (-1,)],
                      q_norm: tc.Tensor["T", (-1, -1)], k_norm: tc.Tensor["T", (-1, -1)],
                      hidden: float, eps: float, half: int, HALFP: tc.Const[int],
                      NEOX: tc.Const[bool]):
    """RMS-normalize TT tokens' query and key heads, then rotate them, in place."""
    i, _, _ = tc.get_tile_block_id()
    qn = _normalize_heads(q.load(), q_norm, hidden, eps, TT, QR, COLS, HALFP, NEOX)
    kn = _normalize_heads(k.load(), k_norm, hidden, eps, TT, KR, COLS, HALFP, NEOX)
    q.store(_rotate(qn, cache, positions, i, half, TT, QR, COLS, HALFP, NEOX))
    k.store(_rotate(kn, cache, positions, i, half, TT, KR, COLS, HALFP, NEOX))


@kernel(hints=MEMORY_BOUND_HINTS)
def rope_inplace(q: tc.MutTensor["T", ("TT", "QR", "COLS")],
                 k: tc.MutTensor["T", ("TT", "KR", "COLS")],
                 cache: tc.Tensor["C", (-1, -1)], positions: tc.Tensor["P", (-1,)],
                 half: int, HALFP: tc.Const[int], NEOX: tc.Const[bool]):
    """Rotate TT tokens' query and key heads in place (see ``rope``)."""
    i, _, _ = tc.get_tile_block_id()
    q.store(_rotate(q.load(), cache, positions, i, half, TT, QR, COLS, HALFP, NEOX))
    k.store(_rotate(k.load(), cache, positions, i, half, TT, KR, COLS, HALFP, NEOX))


@function
def _pair_columns(half, DP, NEOX):
    """For each of the DP columns of a head: the column it rotates with, the frequency it
    rotates by, and whether it is the first of its pair (whose sine term is subtracted).
    Padding columns (from ``2 * half``) name column 0: read, never stored."""
    col = tc.arange(DP, tc.i32)
    if NEOX:  # (c, c + half)
        first = col < half
        pair = tc.where(first, col + half, col - half)
        freq = tc.where(first, col, col - half)
    else:  # (2i, 2i + 1)
        first = (col % 2) == 0
        pair = tc.where(first, col + 1, col - 1)
        freq = col // 2
    inside = col < 2 * half
    return (col, tc.where(inside, pair, 0), tc.where(inside, freq, 0), first)


@function
def _rotate_heads(x, partner, cache, positions, i, half, freq, first, TT, DP):
    """The (TT, heads, DP) f32 tile ``x`` (TT tokens from token ``i*TT``) rotated, ``partner``
    holding each column's pair: ``x * cos - partner * sin`` for the first of a pair,
    ``x * cos + partner * sin`` for the second (f32, as ``_rotate``)."""
    pos = positions.partition((TT,)).load(i, padding=0).reshape((TT, 1, 1))
    f = freq.reshape((1, 1, DP))
    cos = tc.gather(cache, pos, f).astype(tc.f32)
    sin = tc.gather(cache, pos, f + half).astype(tc.f32)
    return x * cos + partner * tc.where(first.reshape((1, 1, DP)), -sin, sin)


@function
def _head_pairs(x, i, j, TT, HP, DP, pair):
    """The (TT, HP, DP) tile of heads ``j*HP..`` of tokens ``i*TT..`` of the input ``x``, and
    the same tile with each column replaced by its pair's (read again, through a gather)."""
    tokens = (i * TT + tc.arange(TT, tc.i32)).reshape((TT, 1, 1))
    heads = (j * HP + tc.arange(HP, tc.i32)).reshape((1, HP, 1))
    tile = x.partition((TT, HP, DP)).load((i, j, 0), padding=0)
    return tile, tc.gather(x, tokens, heads, pair.reshape((1, 1, DP)), padding=0)


@kernel(hints=MEMORY_BOUND_HINTS)
def rope_heads_copy(q_out: tc.MutTensor["T", ("TT", "QH", "DP")],
                    k_out: tc.MutTensor["T", ("TT", "KH", "DP")],
                    q: tc.Tensor["T", (-1, -1, -1)], k: tc.Tensor["T", (-1, -1, -1)],
                    cache: tc.Tensor["C", (-1, -1)], positions: tc.Tensor["P", (-1,)],
                    half: int, NEOX: tc.Const[bool]):
    """Write the rotated query heads ``j*QH..`` and key heads ``j*KH..`` of tokens ``i*TT..``
    to ``q_out``/``k_out`` (program ``(i, j)``; each column's pair read from the input)."""
    i, j, _ = tc.get_tile_block_id()
    _, pair, freq, first = _pair_columns(half, DP, NEOX)
    q_out.store(_rotated_copy(q, i, j, TT, QH, DP, pair, cache, positions, half, freq, first))
    k_out.store(_rotated_copy(k, i, j, TT, KH, DP, pair, cache, positions, half, freq, first))


@function
def _rotated_copy(x, i, j, TT, HP, DP, pair, cache, positions, half, freq, first):
    """The rotated (TT, HP, DP) tile of ``x`` at tile ``(i, j, 0)``, in x's dtype."""
    tile, partner = _head_pairs(x, i, j, TT, HP, DP, pair)
    return _rotate_heads(tile.astype(tc.f32), partner.astype(tc.f32), cache, positions, i,
                         half, freq, first, TT, DP).astype(tile.dtype)


@kernel(hints=MEMORY_BOUND_HINTS)
def rope_norm_heads_copy(q_out: tc.MutTensor["T", ("TT", "QH", "DP")],
                         k_out: tc.MutTensor["T", ("TT", "KH", "DP")],
                         q: tc.Tensor["T", (-1, -1, -1)], k: tc.Tensor["T", (-1, -1, -1)],
                         cache: tc.Tensor["C", (-1, -1)], positions: tc.Tensor["P", (-1,)],
                         q_norm: tc.Tensor["T", (-1,)], k_norm: tc.Tensor["T", (-1,)],
                         hidden: float, eps: float, half: int, NEOX: tc.Const[bool]):
    """As ``rope_heads_copy``, each head RMS-normalized first (its pair scaled by the head's
    own factor, so both equal ``rms_norm``'s values bit for bit)."""
    i, j, _ = tc.get_tile_block_id()
    col, pair, freq, first = _pair_columns(half, DP, NEOX)
    q_out.store(_normalized_rotated_copy(q, q_norm, hidden, eps, i, j, TT, QH, DP, col, pair,
                                         cache, positions, half, freq, first))
    k_out.store(_normalized_rotated_copy(k, k_norm, hidden, eps, i, j, TT, KH, DP, col, pair,
                                         cache, positions, half, freq, first))


@function
def _normalized_rotated_copy(x, weight, hidden, eps, i, j, TT, HP, DP, col, pair, cache,
                             positions, half, freq, first):
    """The RMS-normalized, rotated (TT, HP, DP) tile of ``x`` at tile ``(i, j, 0)``."""
    tile, partner = _head_pairs(x, i, j, TT, HP, DP, pair)
    xf, pf = tile.astype(tc.f32), partner.astype(tc.f32)
    scale = _rms_scale(xf, 2, hidden, eps)
    w = tc.gather(weight, col.reshape((1, 1, DP)), padding=0)
    w_pair = tc.gather(weight, pair.reshape((1, 1, DP)), padding=0)
    xn = _rms_apply(xf, scale, w, tile.dtype).astype(tc.f32)
    pn = _rms_apply(pf, scale, w_pair, tile.dtype).astype(tc.f32)
    return _rotate_heads(xn, pn, cache, positions, i, half, freq, first, TT,
                         DP).astype(tile.dtype)


def _layout_view(x: Tensor, neox: bool) -> Tensor:
    """(tokens, heads, d) as the kernel sees it: (tokens, 2*heads, d/2) for NeoX (row 2h holds
    head h's first half), unchanged for GPT-J."""
    tokens, heads, d = x.shape
    return x.reshape(tokens, 2 * heads, d // 2) if neox else x


def _tiles(x: Tensor, tokens_per_program: int, neox: bool) -> tuple:
    tokens, heads, d = x.shape
    half_p = args.pow2(d // 2)
    if neox:
        return (tokens_per_program, 2 * args.pow2(heads), half_p)
    return (tokens_per_program, args.pow2(heads), 2 * half_p)


def _tokens_per_program(config: dict, tokens: int) -> int:
    return min(config["tokens"], args.pow2(tokens))


@autotune(configs=[{"tokens": 1}, {"tokens": 2}, {"tokens": 4}],
          key=lambda q, k, cache, positions, neox, q_out, k_out, norms: (
              q.shape[1], k.shape[1], q.shape[2], q.dtype.name, q_out is None,
              norms is not None),
          kernels=(rope_inplace, rope_heads_copy, rope_norm_inplace, rope_norm_heads_copy),
          mutates=("q", "k", "q_out", "k_out"))
def _launch(q: Tensor, k: Tensor, cache: Tensor, positions: Tensor, neox: bool,
            q_out: Optional[Output], k_out: Optional[Output], norms: Optional[tuple], *,
            config: dict) -> DeviceOp:
    tt = _tokens_per_program(config, q.shape[0])
    d = q.shape[2]
    consts = dict(half=d // 2, HALFP=args.pow2(d // 2), NEOX=neox)
    normed = ()
    if norms is not None:  # (q_norm, k_norm, eps): weights viewed as the heads' rows
        shape = (2, d // 2) if neox else (1, d)
        normed = (norms[0].reshape(*shape), norms[1].reshape(*shape), float(d), norms[2])
    if q_out is None:
        kernel_ = rope_norm_inplace if normed else rope_inplace
        return kernel_(borrow_mut(_layout_view(q, neox)).partition(_tiles(q, tt, neox)),
                       borrow_mut(_layout_view(k, neox)).partition(_tiles(k, tt, neox)),
                       cache, positions, *normed, **consts).then(lambda r: (q, k))
    q_heads, k_heads = _heads_per_program(q.shape[1], k.shape[1])
    dp = args.pow2(d)
    if normed:  # (the weights as they are: gathered by column)
        normed = (norms[0], norms[1], float(d), norms[2])
    kernel_ = rope_norm_heads_copy if normed else rope_heads_copy
    return kernel_(q_out.partition((tt, q_heads, dp)), k_out.partition((tt, k_heads, dp)),
                   q, k, cache, positions, *normed, half=d // 2, NEOX=neox).then(
                       lambda r: (q_out.tensor(r.q_out), k_out.tensor(r.k_out)))


def _heads_per_program(q_heads: int, kv_heads: int) -> tuple[int, int]:
    """The query and key heads of one program of the copying kernels: one key head and its
    group of query heads when the group is a power of two (``kv_heads`` programs per token
    block), else every head (one program)."""
    group = q_heads // kv_heads
    if q_heads % kv_heads == 0 and group == args.pow2(group):
        return group, 1
    return args.pow2(q_heads), args.pow2(kv_heads)


def checked_arguments(op: str, q: Any, k: Any, cos_sin_cache: Any, positions: Any, layout: str,
                      q_norm: Any, k_norm: Any, eps: float) -> tuple:
    """``rope``'s arguments checked (what its docstring says of each), each failure an
    ``ArgumentError`` naming ``op``: ``(q, k, cos_sin_cache, positions, device, norms)``,
    ``norms`` None or ``(q_norm, k_norm, eps)``."""
    if layout not in LAYOUTS:
        raise args.fail(op, f"layout={layout!r} is not one of {', '.join(map(repr, LAYOUTS))}",
                        "pass layout='neox' (rotate halves) or layout='gptj' (pairs)")
    q = args.tensor(op, "q", q, args.FLOATS, rank=3)
    k = args.tensor(op, "k", k, args.FLOATS, rank=3)
    cache = args.tensor(op, "cos_sin_cache", cos_sin_cache, args.FLOATS, rank=2)
    positions = args.tensor(op, "positions", positions, args.INDEX_DTYPES, rank=1)
    device = args.same_device(op, [("q", q), ("k", k), ("cos_sin_cache", cache),
                                   ("positions", positions)])
    if k.dtype != q.dtype:
        raise args.fail(op, f"k has dtype {k.dtype.name}, q {q.dtype.name}",
                        "convert q and k to one dtype")
    tokens, _, d = q.shape
    if k.shape[0] != tokens or k.shape[2] != d:
        raise args.fail(op, f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}: they must "
                        "agree on tokens (dim 0) and head_dim (dim 2)",
                        "pass q as (tokens, heads, head_dim), k as (tokens, kv_heads, head_dim)")
    if d % 2:
        raise args.fail(op, f"head_dim={d} is odd", "rotary embedding needs an even head_dim")
    if cache.shape[1] != d:
        raise args.fail(op, f"cos_sin_cache has shape {tuple(cache.shape)}; its width must be "
                        f"head_dim={d}", f"build it with rope_cache(max_positions, {d}, ...)")
    if positions.shape[0] != tokens:
        raise args.fail(op, f"positions has {positions.shape[0]} entries for {tokens} tokens",
                        "pass one position per token")
    for name, x in (("q", q), ("k", k)):
        args.nonempty(op, name, x)
        # (a dimension of extent 1 has no stride to speak of: a single head may have any)
        if x.strides[2] != 1 or (x.shape[1] > 1 and x.strides[1] != d):
            raise args.fail(op, f"{name}'s heads are not contiguous (strides "
                            f"{tuple(x.strides)})", f"pass a copy: {name}.clone()")
    norms = None
    if (q_norm is None) != (k_norm is None):
        raise args.fail(op, "q_norm= and k_norm= go together: one of them is missing",
                        "pass both (normalize, then rotate) or neither")
    if q_norm is not None:
        weights = []
        for name, weight in (("q_norm", q_norm), ("k_norm", k_norm)):
            weight = args.tensor(op, name, weight, args.FLOATS, rank=1)
            args.same_device(op, [("q", q), (name, weight)])
            if weight.dtype != q.dtype or weight.shape[0] != d or not weight.is_contiguous:
                raise args.fail(op, f"{name} has shape {tuple(weight.shape)} and dtype "
                                f"{weight.dtype.name}; it must be a contiguous ({d},) "
                                f"{q.dtype.name} tensor", f"pass the head's norm weight as "
                                f"a ({d},) {q.dtype.name} tensor")
            weights.append(weight)
        if not float(eps) > 0:
            raise args.fail(op, f"eps={eps} must be positive", "pass the model's rms_norm_eps")
        norms = (weights[0], weights[1], float(eps))
    return q, k, cache, positions, device, norms


@accepts_torch
def rope(q: Tensor, k: Tensor, cos_sin_cache: Tensor, positions: Tensor, *,
         layout: str = "neox", q_out: Optional[Tensor] = None,
         k_out: Optional[Tensor] = None, q_norm: Optional[Tensor] = None,
         k_norm: Optional[Tensor] = None, eps: float = 1e-6) -> DeviceOp:
    """Rotate query and key heads by their tokens' positions (rotary embedding).

    By default ``q`` and ``k`` are rotated in place (one pass over them, what a decode step
    wants) and the op's result is ``(q, k)`` themselves; with ``q_out=`` and ``k_out=`` they
    are only read and the rotated heads are written to ``q_out``/``k_out``. One launch rotates
    both, one program per token (the autotuned config may give several tokens per program).

    Args:
        q: queries, ``(tokens, heads, head_dim)``, float16/bfloat16/float32; the last two
            dimensions must be contiguous (a view of a fused QKV buffer whose rows are
            strided is fine).
        k: keys, ``(tokens, kv_heads, head_dim)``, same dtype, tokens and head_dim as ``q``.
        cos_sin_cache: the table of ``rope_cache(max_positions, head_dim, ...)``
            (``(max_positions, head_dim)``, any float dtype: read in float32).
        positions: each token's position, ``(tokens,)`` int32 or int64, on the device (a
            CUDA graph replay reads the values of the moment). A position outside the table
            raises ``IndexOutOfRangeError`` (on a GPU when the stream is synchronized).
        layout: ``"neox"`` (rotate halves: Qwen3, Llama, transformers' ``rotate_half``) or
            ``"gptj"`` (rotate interleaved pairs).
        q_out, k_out: both ``None`` (in place), or both given: tensors shaped and typed like
            ``q`` and ``k`` to write instead.
        q_norm, k_norm: both ``None``, or both given: ``(head_dim,)`` weights of an RMSNorm
            applied to each query / key head before it is rotated (Qwen3's QK-norm), in the
            same launch. The result equals ``rms_norm`` of the heads with ``eps`` followed by
            ``rope``, bit for bit.
        eps: the RMSNorm's epsilon (used only with ``q_norm``/``k_norm``).

    Returns:
        A DeviceOp whose result is ``(q, k)`` rotated (or ``(q_out, k_out)``).

    Raises:
        ArgumentError: a dtype, rank, shape, device or layout that does not fit (the message
            says which); only one of ``q_out``/``k_out``, or one that does not fit.
    """
    op = "rope"
    q, k, cache, positions, device, norms = checked_arguments(
        op, q, k, cos_sin_cache, positions, layout, q_norm, k_norm, eps)
    neox = layout == "neox"
    if q_out is None and k_out is None:
        return _launch(q, k, cache, positions, neox, None, None, norms)
    if (q_out is None) != (k_out is None):
        raise args.fail(op, "q_out= and k_out= go together: one of them is missing",
                        "pass both (out of place) or neither (in place)")
    q_out = Output(q_out, q.shape, q.dtype, device, name="q_out", op=op)
    k_out = Output(k_out, k.shape, k.dtype, device, name="k_out", op=op)
    return _launch(q, k, cache, positions, neox, q_out, k_out, norms)
