"""Prefill attention: ``flash_attention``, softmax(q k^T * scale) v over whole sequences, in one
pass over the keys (flash style: an online softmax in exp2 with the scale and log2(e) folded
into one multiplier, applied in the exponent's fused multiply-add; f32 running maximum, sum and
accumulator).

Each tile program owns ``BM`` query rows of one (batch, query head) and reads the keys and
values ``BN`` rows at a time from its key/value head (grouped-query attention: the head comes
from the block id, no copy of K/V). Key tiles wholly inside the sequence (and, causal, wholly
visible to every row of the block) are scored without a mask; only the last partial tile and
the causal diagonal tiles are masked (-inf), and tiles that no row of the block may see are
never loaded.

May import the host layer, ``kernel``, ``autotune``, ``core`` and ``kernels._*``."""

from __future__ import annotations

from typing import Any, Optional

import tilesafe.core as tc

from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..kernel import kernel
from ..host.tensor import Tensor
from . import _attention_args as args
from ._online_softmax import online_softmax_step_unscaled
from ._torch import accepts_torch

OP = "flash_attention"


@kernel(examples=[{"BM": 128, "BN": 64, "D": 128, "T": tc.f16, "CAUSAL": True},
                  {"BM": 128, "BN": 64, "D": 64, "T": tc.bf16, "CAUSAL": False}])
def flash_attention_kernel(o: tc.MutTensor["T", (1, "BM", "D")],
                           q: tc.Tensor["T", (-1, -1, "D")], k: tc.Tensor["T", (-1, -1, "D")],
                           v: tc.Tensor["T", (-1, -1, "D")], qk_scale: float, q_heads: int,
                           kv_heads: int, BN: tc.Const[int], CAUSAL: tc.Const[bool]):
    """One block of ``BM`` query rows of one (batch x query head) row of ``q`` (shape
    ``(batch*q_heads, S_q, D)``) against ``k``/``v`` (``(batch*kv_heads, S_kv, D)``);
    ``qk_scale`` is the softmax scale times log2(e). Causal: query row ``r`` sees keys
    ``c <= r + S_kv - S_q`` (aligned to the end)."""
    bh, row_block, _ = tc.get_tile_block_id()
    kv_head = (bh // q_heads) * kv_heads + (bh % q_heads) // (q_heads // kv_heads)
    seq_q = q.shape[1]
    seq_kv = k.shape[1]
    keys = k.partition((1, BN, D))
    values = v.partition((1, BN, D))
    queries = tc.load_tile_like(q, o).reshape((BM, D))
    first_row = row_block * BM
    offset = seq_kv - seq_q
    unmasked_end = seq_kv // BN
    end = tc.num_tiles(keys, 1)
    if CAUSAL:
        unmasked_end = tc.minimum(unmasked_end, (first_row + offset + 1) // BN)
        end = tc.minimum(end, (first_row + BM - 1 + offset) // BN + 1)
    best = tc.full((BM, 1), float("-inf"), tc.f32)
    total = tc.zeros((BM, 1), tc.f32)
    acc = tc.zeros((BM, D), tc.f32)
    for j in range(unmasked_end):
        kt = keys.load((kv_head, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32))
        total, acc, best = online_softmax_step_unscaled(s, qk_scale, values, (kv_head, j, 0),
                                                        best, total, acc)
    rows = (tc.arange(BM) + (first_row + offset)).reshape((BM, 1))
    for j in range(unmasked_end, end):
        kt = keys.load((kv_head, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32))
        cols = (tc.arange(BN) + j * BN).reshape((1, BN))
        visible = cols < seq_kv
        if CAUSAL:
            visible = visible & (cols <= rows)
        s = tc.where(visible, s, float("-inf"))
        total, acc, best = online_softmax_step_unscaled(s, qk_scale, values, (kv_head, j, 0),
                                                        best, total, acc)
    o.store((acc * (1.0 / total)).astype(T).reshape((1, BM, D)))


_VARIANTS: dict = {}


def kernel_for(hints: Optional[dict]) -> Any:
    """:func:`flash_attention_kernel`, or its variant compiled with ``hints`` (kernel-wide
    Tile IR hints a tuning config may carry, e.g. ``{"occupancy": 2}``)."""
    if not hints:
        return flash_attention_kernel
    key = tuple(sorted(hints.items()))
    if key not in _VARIANTS:
        _VARIANTS[key] = kernel(flash_attention_kernel.fn, hints={"default": dict(hints)})
    return _VARIANTS[key]


def _tile(configured: int, length: int) -> int:
    """A configured tile length, shortened for a short sequence (never below 64 rows, which
    keeps the specializations few)."""
    return min(configured, max(64, args.next_power_of_two(length)))


def _flash_key(q3: Tensor, k3: Tensor, v3: Tensor, out: Any, shape: tuple, causal: bool,
               qk_scale: float, q_heads: int, kv_heads: int) -> tuple:
    return (q3.shape[-1], q3.dtype.name, causal, min(q3.shape[1], 4096) > 1024,
            q_heads // kv_heads)


# (sm_90 cubins: 128x64 fits 253-254 registers with no stack at d 64 and 128; 128x128 and
# occupancy 2 spill at d 128, 128x128 only with 8 warps at d 64. Measured on the H100 at
# S 4096, d 128, GQA 4: 128x64 with occupancy 2 483 TFLOP/s (455 causal), 128x128 with 8
# warps 432, 128x64 388; SDPA 609 (527). On the H200 with the scale in the exponent's fma:
# 128x64 with occupancy 2 at 0.83-0.89 of SDPA at d 128, 0.89-0.96 at d 64, S 2048-16384.)
@autotune(configs=[{"BM": 128, "BN": 64, "hints": {"occupancy": 2}}, {"BM": 128, "BN": 64},
                   {"BM": 128, "BN": 128, "hints": {"num_worker_warps_per_cta": 8}},
                   {"BM": 64, "BN": 64}, {"BM": 128, "BN": 128}, {"BM": 64, "BN": 128}],
          key=_flash_key, kernels=(flash_attention_kernel,), name="tilesafe.flash_attention")
def _launch_flash(q3: Tensor, k3: Tensor, v3: Tensor, out: Any, shape: tuple, causal: bool,
                  qk_scale: float, q_heads: int, kv_heads: int, *, config: dict) -> DeviceOp:
    d = q3.shape[-1]
    bm, bn = _tile(config["BM"], q3.shape[1]), _tile(config["BN"], k3.shape[1])
    part = args.output_partition(OP, out, shape, q3.shape, (1, bm, d), q3.dtype, q3.device)
    launch = kernel_for(config.get("hints"))(part, q3, k3, v3, qk_scale, q_heads, kv_heads,
                                             BN=bn, CAUSAL=bool(causal))
    return launch.then(lambda r: out if out is not None else r.o.unpartition().reshape(shape))


@accepts_torch
def flash_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                    scale: Optional[float] = None, out: Optional[Tensor] = None) -> DeviceOp:
    """Softmax attention over whole sequences (prefill): ``softmax(q k^T * scale) v``.

    Args:
        q: ``(batch, q_heads, S_q, d)`` queries, float16 or bfloat16, ``d`` 64 or 128. Any
            strides whose ``(batch, q_heads)`` dimensions merge into one without a copy
            (contiguous, or an engine's ``(tokens, heads, d)`` buffer viewed as
            ``(1, heads, tokens, d)`` with ``permute``).
        k, v: ``(batch, kv_heads, S_kv, d)`` keys and values of ``q``'s dtype and device
            (same stride rule); ``q_heads`` a multiple of ``kv_heads`` (grouped-query
            attention: query head ``h`` reads key/value head ``h // (q_heads // kv_heads)``).
        causal: mask the future. Query ``i`` attends keys ``j <= i + S_kv - S_q``: the
            queries are the *last* ``S_q`` positions of the sequence (bottom-right aligned,
            as for a prefill chunk after cached tokens; for ``S_q == S_kv`` it is the usual
            mask, and then equals ``torch``'s ``is_causal``, which aligns top-left).
            Needs ``S_q <= S_kv``.
        scale: the softmax scale, default ``1/sqrt(d)``.
        out: a ``(batch, q_heads, S_q, d)`` tensor of ``q``'s dtype to write, else a new one.

    Returns:
        A DeviceOp whose result is the output tensor (``out`` when given).

    Raises:
        ArgumentError: a dtype other than float16/bfloat16 or differing between q, k, v;
            a rank other than 4; batch, head dimension or key/value lengths that differ;
            ``d`` not 64 or 128; ``q_heads`` not a multiple of ``kv_heads``; an empty
            sequence; causal with ``S_q > S_kv``; a bad ``scale``; a view whose leading
            dimensions cannot merge; an ``out`` of the wrong shape, dtype or device.
    """
    layout = "(batch, heads, seq, head_dim)"
    q = args.check_tensor(OP, "q", q, 4, layout)
    k = args.check_tensor(OP, "k", k, 4, layout)
    v = args.check_tensor(OP, "v", v, 4, layout)
    dtype = args.check_dtype(OP, "q", q)
    args.check_dtype(OP, "k", k, dtype)
    args.check_dtype(OP, "v", v, dtype)
    args.check_device(OP, {"q": q, "k": k, "v": v})
    batch, q_heads, seq_q, d = q.shape
    if tuple(k.shape) != tuple(v.shape):
        raise args.fail(OP, f"k has shape {tuple(k.shape)}, v {tuple(v.shape)}",
                        "give k and v one shape")
    kv_batch, kv_heads, seq_kv, kv_d = k.shape
    if kv_batch != batch or kv_d != d:
        raise args.fail(OP, f"q has shape {tuple(q.shape)}, k and v {tuple(k.shape)}: batch "
                        "and head dimension must agree", "give q, k and v one batch size "
                        "and head dimension")
    args.check_head_dim(OP, d)
    args.check_heads(OP, q_heads, kv_heads)
    if batch == 0 or seq_q == 0 or seq_kv == 0:
        raise args.fail(OP, f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}",
                        "skip the call when there is nothing to attend")
    if causal and seq_q > seq_kv:
        raise args.fail(OP, f"causal with {seq_q} queries but {seq_kv} keys: the queries are "
                        "the last positions of the sequence, so there cannot be more of them",
                        "pass at least as many keys as queries, or causal=False")
    qk_scale = args.softmax_scale(OP, scale, d) * args.LOG2E
    q3 = args.flat_view(OP, "q", q, (batch * q_heads, seq_q, d))
    k3 = args.flat_view(OP, "k", k, (batch * kv_heads, seq_kv, d))
    v3 = args.flat_view(OP, "v", v, (batch * kv_heads, seq_kv, d))
    return _launch_flash(q3, k3, v3, out, tuple(q.shape), bool(causal), qk_scale, q_heads,
                         kv_heads)
