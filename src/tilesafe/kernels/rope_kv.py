"""Rotary embedding and the KV-cache write together: ``rope_kv_cache_update`` rotates each
token's query and key heads (after their QK-norms, when given) as ``rope`` does, writes the
queries to ``q_out`` and the rotated keys and the values straight into the token's cache slot,
as ``kv_cache_update`` with ``layout="nhd"`` does; the rotated keys are never stored anywhere
else.

Program ``p`` takes key/value head ``h = p % kv_heads`` of token ``t = p // kv_heads``: its
group of query heads (one ``q_out`` tile of a ``(tokens * kv_heads, group, head_dim)`` view),
its key and its value, the heads read as ``rope``'s copying kernels read them (each column's
pair gathered) and computed by the same device functions, so on the interpreter the results
are bit for bit ``rope(..., q_out=, k_out=)`` then ``kv_cache_update``. The caches are viewed
as ``(num_slots * kv_heads, head_dim)`` rows, written through indexed partitions at the heads'
rows ``slots[t] * kv_heads + h``: every launch proves them distinct and inside the caches before
any program writes, and otherwise writes nothing (``q_out`` included) and raises
``PositionsError``. A first launch (``cache_head_rows``) computes those rows from the slots
into a workspace; a decode step writes every layer's caches at the same slots, so its later
layers pass ``rows_in_workspace`` and skip it.

On the H100 (qwen3-4b shapes, one token) the launch takes 5.7 us against 6.4 us for ``rope``
then ``kv_cache_update``, but the 4b decode step recorded with it ran at 228.7 tokens/s against
243.2 with the two launches (same process, interleaved): the engine keeps the two launches.

May import the host layer, ``kernel``, ``autotune``, ``core``, ``kernels.rope`` (its device
functions and argument checks) and ``kernels.kv_cache`` (its argument checks)."""

from __future__ import annotations

from typing import Optional

from .. import core as tc
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..host.tensor import Tensor, borrow_mut
from ..kernel import kernel
from . import _token_args as args
from ._outputs import Output, check_disjoint
from ._torch import accepts_torch
from .kv_cache import checked_arguments as update_arguments, contiguous
from .rope import _normalized_rotated_copy, _pair_columns, _rotated_copy
from .rope import checked_arguments as rope_arguments


#: a Qwen3 decode step's shapes (a group of 4 query heads per key/value head of 128), for
#: ``tilesafe check``
_EXAMPLE = {"T": tc.bf16, "C": tc.f32, "P": tc.i32, "G": 4, "DP": 128, "NEOX": True}


@kernel(examples=[{"S": tc.i32, "N": 1, "HP": 8}])
def cache_head_rows(rows: tc.MutTensor["S", ("N", "HP")], slots: tc.Tensor["S", (-1,)],
                    kv_heads: int):
    """``rows[t, h] = slots[t] * kv_heads + h``: the row of key/value head ``h`` of token
    ``t`` in a cache viewed as ``(num_slots * kv_heads, head_dim)`` (``HP``: ``kv_heads``
    padded to a power of two, the padding columns masked)."""
    i, _, _ = tc.get_tile_block_id()
    slot = slots.partition((N,)).load(i, padding=0).reshape((N, 1))
    rows.store(slot * kv_heads + tc.arange(HP, slot.dtype).reshape((1, HP)))


@kernel(examples=[_EXAMPLE])  # (no occupancy hint: refused with indexed partitions)
def rope_kv_write(q_out: tc.MutTensor["T", (1, "G", "DP")],
                  cache_k: tc.MutTensor["T", ("DP",)], cache_v: tc.MutTensor["T", ("DP",)],
                  q: tc.Tensor["T", (-1, -1, -1)], k: tc.Tensor["T", (-1, -1, -1)],
                  v: tc.Tensor["T", (-1, -1, -1)], cache: tc.Tensor["C", (-1, -1)],
                  positions: tc.Tensor["P", (-1,)], kv_heads: int, half: int,
                  NEOX: tc.Const[bool]):
    """Program ``p``: key/value head ``h = p % kv_heads`` of token ``t = p // kv_heads``: its
    ``G`` query heads rotated into its ``q_out`` tile, its key rotated and its value copied
    into its rows of the caches."""
    p, _, _ = tc.get_tile_block_id()
    t, h = p // kv_heads, p % kv_heads
    _, pair, freq, first = _pair_columns(half, DP, NEOX)
    q_out.store(_rotated_copy(q, t, h, 1, G, DP, pair, cache, positions, half, freq, first))
    key = _rotated_copy(k, t, h, 1, 1, DP, pair, cache, positions, half, freq, first)
    cache_k.store(key.reshape((DP,)))
    cache_v.store(v.partition((1, 1, DP)).load((t, h, 0)).reshape((DP,)))


@kernel(examples=[_EXAMPLE])  # (no occupancy hint: refused with indexed partitions)
def rope_norm_kv_write(q_out: tc.MutTensor["T", (1, "G", "DP")],
                       cache_k: tc.MutTensor["T", ("DP",)], cache_v: tc.MutTensor["T", ("DP",)],
                       q: tc.Tensor["T", (-1, -1, -1)], k: tc.Tensor["T", (-1, -1, -1)],
                       v: tc.Tensor["T", (-1, -1, -1)], cache: tc.Tensor["C", (-1, -1)],
                       positions: tc.Tensor["P", (-1,)], q_norm: tc.Tensor["T", (-1,)],
                       k_norm: tc.Tensor["T", (-1,)], hidden: float, eps: float,
                       kv_heads: int, half: int, NEOX: tc.Const[bool]):
    """As ``rope_kv_write``, each query and key head RMS-normalized first (``rope``'s
    ``q_norm``/``k_norm``)."""
    p, _, _ = tc.get_tile_block_id()
    t, h = p // kv_heads, p % kv_heads
    col, pair, freq, first = _pair_columns(half, DP, NEOX)
    q_out.store(_normalized_rotated_copy(q, q_norm, hidden, eps, t, h, 1, G, DP, col, pair,
                                         cache, positions, half, freq, first))
    key = _normalized_rotated_copy(k, k_norm, hidden, eps, t, h, 1, 1, DP, col, pair, cache,
                                   positions, half, freq, first)
    cache_k.store(key.reshape((DP,)))
    cache_v.store(v.partition((1, 1, DP)).load((t, h, 0)).reshape((DP,)))


@autotune(configs=[{}], key=lambda q, k, v, cache, positions, cache_k, cache_v, slots, neox,
          q_out, norms, rows, reuse: (q.shape[1], k.shape[1], q.shape[2], q.dtype.name,
                                      norms is not None),
          kernels=(cache_head_rows, rope_kv_write, rope_norm_kv_write),
          mutates=("cache_k", "cache_v", "q_out"))
def _launch(q: Tensor, k: Tensor, v: Tensor, cache: Tensor, positions: Tensor,
            cache_k: Tensor, cache_v: Tensor, slots: Tensor, neox: bool, q_out: Output,
            norms: Optional[tuple], rows: Output, reuse: bool, *,
            config: dict) -> DeviceOp:
    """``q_out`` viewed ``(tokens * kv_heads, group, head_dim)`` (one tile per program);
    ``rows`` the heads' cache rows, ``(tokens, kv_heads)``, written first unless ``reuse``."""
    tokens, kv_heads, d = k.shape
    group = q.shape[1] // kv_heads
    flat = (cache_k.size,)  # (rows of d: the caches' last axis)
    consts = dict(kv_heads=kv_heads, half=d // 2, NEOX=neox)

    def write(at: Tensor) -> DeviceOp:
        heads = (borrow_mut(cache_k.reshape(*flat)).partition(d, at=at),
                 borrow_mut(cache_v.reshape(*flat)).partition(d, at=at))
        inputs = (q, k, v, cache, positions)
        if norms is None:
            return rope_kv_write(q_out.partition((1, group, d)), *heads, *inputs, **consts)
        return rope_norm_kv_write(q_out.partition((1, group, d)), *heads, *inputs, norms[0],
                                  norms[1], float(d), norms[2], **consts)

    if reuse:  # the workspace holds these slots' head rows already
        return write(rows.value.reshape(tokens * kv_heads))
    n = min(1024, args.pow2(tokens))
    return cache_head_rows(rows.partition((n, args.pow2(kv_heads))), slots, kv_heads).then(
        lambda r: write(rows.tensor(r.rows).reshape(tokens * kv_heads)))


@accepts_torch
def rope_kv_cache_update(q: Tensor, k: Tensor, v: Tensor, cos_sin_cache: Tensor,
                         positions: Tensor, cache_k: Tensor, cache_v: Tensor, slots: Tensor, *,
                         q_out: Optional[Tensor] = None, layout: str = "neox",
                         q_norm: Optional[Tensor] = None, k_norm: Optional[Tensor] = None,
                         eps: float = 1e-6, workspace: Optional[Tensor] = None,
                         rows_in_workspace: bool = False) -> DeviceOp:
    """Rotate the query and key heads by their tokens' positions and write the queries to
    ``q_out``, the rotated keys and the values ``v`` into the cache slots ``slots``:
    ``rope(q, k, ..., q_out=q_out, k_out=keys)`` then ``kv_cache_update(cache_k, cache_v,
    keys, v, slots, layout="nhd")``, without storing ``keys``. Two launches: the cache rows of
    every token's heads (``slots[t] * kv_heads + h``) into ``workspace``, then the rotation and
    the writes; one with ``rows_in_workspace`` (a decode step writes every layer's caches at
    the same slots, so only its first layer computes the rows).

    Args:
        q, k, cos_sin_cache, positions, layout, q_norm, k_norm, eps: as for ``rope`` (``q``
            and ``k`` are only read; their rows may be strided views of a fused QKV buffer).
            The query heads per key/value head (the GQA group) must be a power of two.
        v: new values, ``(tokens, kv_heads, head_dim)`` like ``k`` (any strides).
        cache_k, cache_v: token-major caches as ``kv_cache_update``'s ``layout="nhd"``:
            ``(num_slots, kv_heads, head_dim)`` or paged ``(num_blocks, block_size, kv_heads,
            head_dim)``, contiguous, of ``k``'s dtype, ``head_dim`` a power of two.
        slots: the cache slot of each token, ``(tokens,)`` int32 or int64 on the device (a
            CUDA graph replay reads the values of the moment); ``positions`` gives the
            rotation, ``slots`` the row (``b * max_len + position`` for sequence ``b``).
        q_out: where the rotated queries go, a contiguous tensor shaped and typed like ``q``;
            allocated when left out.
        workspace: ``(tokens, kv_heads)`` of the slots' dtype on their device, where the cache
            rows of the heads go; allocated per call when left out. A call that allocates
            (``q_out`` or ``workspace`` left out) cannot be recorded into a tilesafe CUDA
            graph.
        rows_in_workspace: ``True`` when ``workspace`` already holds the rows of these
            ``slots`` for caches of this many slots and heads, written by an earlier call on
            the same stream: the first launch is skipped. The rows are still proven distinct
            and inside the caches before anything is written, so stale rows write the wrong
            rows of these caches, never outside them.

    Returns:
        A DeviceOp whose result is ``(q_out, cache_k, cache_v)``.

    Raises:
        ArgumentError: what ``rope`` and ``kv_cache_update`` raise for their arguments, a
            ``head_dim`` or GQA group that is not a power of two, or a ``q_out`` or
            ``workspace`` that does not fit.
        PositionsError: (when the op runs) two tokens with one slot, or a slot outside the
            cache (named by the row of one of its heads in the ``(num_slots * kv_heads,
            head_dim)`` view); nothing is written then, ``q_out`` included.
        IndexOutOfRangeError: (when the op runs) a position outside the table.
    """
    op = "rope_kv_cache_update"
    q, k, table, positions, device, norms = rope_arguments(
        op, q, k, cos_sin_cache, positions, layout, q_norm, k_norm, eps)
    cache_k, cache_v, k, v, slots, _ = update_arguments(op, cache_k, cache_v, k, v, slots,
                                                          "nhd")
    # (both checks hold k to their tensors' device: every tensor is on one device)
    tokens, kv_heads, d = k.shape
    group = q.shape[1] // kv_heads
    if d != args.pow2(d) or q.shape[1] % kv_heads or group != args.pow2(group):
        raise args.fail(op, f"{q.shape[1]} query heads over {kv_heads} key/value heads of "
                        f"{d}: one launch needs a power-of-two head_dim and group",
                        "call rope(..., q_out=, k_out=keys) then kv_cache_update(cache_k, "
                        "cache_v, keys, v, slots, layout='nhd')")
    if q_out is not None:
        Output(q_out, q.shape, q.dtype, device, name="q_out", op=op)
        contiguous(op, (("q_out", q_out),))
    if rows_in_workspace and workspace is None:
        raise args.fail(op, "rows_in_workspace=True needs the workspace= an earlier call "
                        "filled", "pass that workspace, or leave rows_in_workspace=False")
    rows = Output(workspace, (tokens, kv_heads), slots.dtype, device, name="workspace", op=op)
    check_disjoint(op, {"q_out": q_out, "cache_k": cache_k, "cache_v": cache_v,
                        "workspace": workspace},
                   {"q": q, "k": k, "v": v, "cos_sin_cache": table, "positions": positions,
                    "slots": slots, **{f"norm {i}": n for i, n in enumerate(norms or ())}})
    grouped = (tokens * kv_heads, group, d)  # (one tile per program)
    viewed = Output(None if q_out is None else q_out.reshape(*grouped), grouped, q.dtype,
                    device, name="q_out", op=op)
    return _launch(q, k, v, table, positions, cache_k, cache_v, slots, layout == "neox",
                   viewed, norms, rows, bool(rows_in_workspace)).then(
        lambda r: (q_out if q_out is not None else viewed.tensor(r.q_out).reshape(*q.shape),
                   cache_k, cache_v))
