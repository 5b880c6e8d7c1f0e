"""Decode attention: ``decode_attention``, one query token per sequence against its KV cache,
the cache length of each sequence read on the device (``seq_lens``, which a CUDA-graph replay
changes every token), split across programs along the keys (split-K) and merged safely.

Two kernels. ``decode_attention_partial_kernel``: program ``(b*kv_heads + h, split)`` takes
all the query heads of key/value head ``h`` (the GQA group, padded to at least 16 rows, is the
M dimension of its mma) and
its share of the sequence's key tiles (the tiles are dealt out from the device's length, so
the work follows the real length, not the cache's capacity), and writes into the scratch tiles
it owns its normalized partial output and the log2-sum-exp of its scores (``-inf`` and zeros
for a split with no keys). ``decode_attention_merge_kernel``: program ``(b*kv_heads + h, c)``
combines every split of a block of output columns at once, one load of the splits' tiles (a
split with no keys weighs zero; a sequence of length 0 gives zeros).

A paged cache (``(num_blocks, block_size, kv_heads, d)`` blocks found through a block table) is
read by ``paged_decode_attention`` (:mod:`.paged_decode_attention`): its own partial kernel,
this module's merge kernel and split heuristics; nothing here changes for it.

May import the host layer, ``kernel``, ``autotune``, ``core`` and ``kernels._*``."""

from __future__ import annotations

from typing import Any, Callable, Optional

import tilesafe.core as tc

from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..dtypes import float32, int32
from ..host.factory import empty
from ..host.tensor import Tensor, borrow_mut
from ..kernel import kernel
from . import _attention_args as args
from ._online_softmax import online_softmax_step
from ._outputs import Output, check_disjoint
from ._rowwise import WarpVariants
from ._torch import accepts_torch, workspace_accepts_torch

OP = "decode_attention"
#: the streaming multiprocessors assumed where the device cannot say (an H100 SXM has 132)
DEFAULT_SM_COUNT = 132
#: programs per SM the split count aims for
PROGRAMS_PER_SM = 2
#: the most splits the heuristic picks (each split reads at least one key tile)
MAX_SPLITS = 64
#: the fewest query rows an mma gets (the group is padded with zero rows): with 4 rows the
#: sm_90 cubin spills 1 KB a thread at BN 64, with 16 it keeps to registers
MIN_GROUP_ROWS = 16


@kernel(examples=[{"G": 4, "D": 128, "BN": 64, "T": tc.f16},
                  {"G": 8, "D": 64, "BN": 64, "T": tc.bf16}])
def decode_attention_partial_kernel(o: tc.MutTensor[tc.f32, (1, "G", "D")],
                                    lse: tc.MutTensor[tc.f32, (1, "G", 1)],
                                    q: tc.Tensor["T", (-1, -1, "D")],
                                    k: tc.Tensor["T", (-1, -1, -1, "D")],
                                    v: tc.Tensor["T", (-1, -1, -1, "D")],
                                    seq_lens: tc.Tensor[tc.i32, (-1,)], qk_scale: float,
                                    kv_heads: int, BN: tc.Const[int]):
    """Split ``split`` of the keys of sequence ``b = bh // kv_heads``, head ``h = bh %
    kv_heads`` of ``k``/``v`` (``(batch, kv_heads, max_len, D)``, any strides) for the ``G``
    (padded) query heads of ``q`` (``(batch*kv_heads, group, D)``).
    Writes ``o`` = its softmax-weighted values, normalized, and ``lse`` = log2 of its sum of
    exp2(scores*qk_scale)."""
    bh, split, _ = tc.get_tile_block_id()
    _, splits, _ = tc.get_num_tile_blocks()
    b = bh // kv_heads
    h = bh % kv_heads
    seq_len = tc.gather(seq_lens, b)
    # a length past the cache is an IndexOutOfRangeError here (a partial last tile would
    # otherwise read padding as keys)
    tc.gather(k, b, h, tc.maximum(seq_len, 1) - 1, 0)
    keys = k.partition((1, 1, BN, D))
    values = v.partition((1, 1, BN, D))
    queries = q.partition((1, G, D)).load((bh, 0, 0)).reshape((G, D))
    tiles = (seq_len + BN - 1) // BN
    per_split = (tiles + splits - 1) // splits
    start = split * per_split
    end = tc.minimum(start + per_split, tiles)
    unmasked_end = tc.minimum(end, seq_len // BN)
    best = tc.full((G, 1), float("-inf"), tc.f32)
    total = tc.zeros((G, 1), tc.f32)
    acc = tc.zeros((G, D), tc.f32)
    for j in range(start, unmasked_end):
        kt = keys.load((b, h, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((G, BN), tc.f32)) * qk_scale
        total, acc, best = online_softmax_step(s, values, (b, h, j, 0), best, total, acc)
    for j in range(tc.maximum(start, unmasked_end), end):
        kt = keys.load((b, h, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((G, BN), tc.f32)) * qk_scale
        cols = (tc.arange(BN) + j * BN).reshape((1, BN))
        s = tc.where(cols < seq_len, s, float("-inf"))
        # rows past the length may hold anything (NaN from an uninitialized cache): 0 * NaN
        # would reach the sum, so the last tile's values are masked as well
        stale = (tc.arange(BN) + j * BN).reshape((BN, 1)) >= seq_len
        new_best = tc.maximum(best, tc.reduce_max(s, 1, keepdims=True))
        p = tc.exp2(s - new_best)
        alpha = tc.exp2(best - new_best)
        total = total * alpha + tc.reduce_sum(p, 1, keepdims=True)
        vt = tc.where(stale, 0.0, values.load((b, h, j, 0)).reshape((BN, D)))
        acc = tc.mma(p.astype(T), vt, acc * alpha)
        best = new_best
    has_keys = total > 0.0
    o.store(tc.where(has_keys, acc * (1.0 / tc.where(has_keys, total, 1.0)), 0.0)
            .reshape((1, G, D)))
    lse.store((best + tc.log2(total)).reshape((1, G, 1)))


@kernel(examples=[{"G": 16, "DC": 16, "SP": 16, "T": tc.f16},
                  {"G": 16, "DC": 64, "SP": 4, "T": tc.bf16}])
def decode_attention_merge_kernel(o: tc.MutTensor["T", (1, "G", "DC")],
                                  parts: tc.Tensor[tc.f32, (-1, -1, -1)],
                                  lses: tc.Tensor[tc.f32, (-1, -1, 1)], SP: tc.Const[int]):
    """Columns ``c*DC..`` of row ``bh`` of the output: the splits' partial outputs (``parts``,
    ``(batch*kv_heads, splits*G, D)``) weighed by their log2-sum-exps (``lses``,
    ``(batch*kv_heads, splits*G, 1)``), every split at once (``SP``: the split count rounded
    up to a power of two; the rows past the splits are padding that weighs zero)."""
    bh, _, c = tc.get_tile_block_id()
    lse = lses.partition((1, SP * G, 1), padding=float("-inf")).load((bh, 0, 0))
    lse = lse.reshape((SP, G, 1))
    part = parts.partition((1, SP * G, DC), padding=0.0).load((bh, 0, c)).reshape((SP, G, DC))
    best = tc.reduce_max(lse, 0, keepdims=True)
    shift = tc.where(best == float("-inf"), 0.0, best)  # no keys in any split: weights 0
    weight = tc.exp2(lse - shift)
    total = tc.reduce_sum(weight, 0)
    acc = tc.reduce_sum(weight * part, 0)
    has_keys = total > 0.0
    merged = tc.where(has_keys, acc * (1.0 / tc.where(has_keys, total, 1.0)), 0.0)
    o.store(merged.astype(T).reshape((1, G, DC)))


#: the most float32 values of one merge program's (splits, rows, columns) tile
MERGE_TILE = 4096


def merge_columns(splits: int, rows: int, d: int) -> int:
    """Output columns per merge program: its (splits rounded up, rows, columns) tile holds at
    most :data:`MERGE_TILE` values (a power of two dividing ``d``)."""
    return max(1, min(d, MERGE_TILE // (args.next_power_of_two(splits) * rows)))


def sm_count(device: Any) -> int:
    """The device's multiprocessor count (:data:`DEFAULT_SM_COUNT` off a GPU or when the
    driver cannot say)."""
    index = getattr(device, "index", None)
    if not str(device).startswith("cuda") or index is None:
        return DEFAULT_SM_COUNT
    try:
        from ..driver import cuda
        return int(cuda.device(index).properties.multiprocessor_count)
    except Exception:  # noqa: BLE001 (an estimate is enough to pick a split count)
        return DEFAULT_SM_COUNT


def choose_splits(programs: int, max_len: int, block: int, sms: int) -> int:
    """The split count for ``programs`` (batch x kv_heads) programs over caches of
    ``max_len`` keys read ``block`` at a time: enough programs to fill ``sms`` SMs
    :data:`PROGRAMS_PER_SM` deep, no more splits than key tiles or :data:`MAX_SPLITS`,
    rounded down to a power of two."""
    wanted = -(-PROGRAMS_PER_SM * sms // programs)
    count = max(1, min(wanted, -(-max_len // block), MAX_SPLITS))
    return 1 << (count.bit_length() - 1)  # (a power of two: the merge's tile has no padding)


def group_rows(group: int) -> int:
    """The mma rows (a power of two, at least :data:`MIN_GROUP_ROWS`) for ``group`` query
    heads per key/value head."""
    return max(MIN_GROUP_ROWS, args.next_power_of_two(group))


def _decode_key(q3: Tensor, k4: Tensor, v4: Tensor, seq_lens: Tensor, out: Any, shape: tuple,
                qk_scale: float, kv_heads: int, num_splits: Optional[int],
                workspace: Optional[Tensor] = None) -> tuple:
    return (q3.shape[-1], q3.dtype.name, q3.shape[1], min(k4.shape[2], 8192) > 2048)


_PARTIAL = WarpVariants(decode_attention_partial_kernel)


def _partial_for(hints: Optional[dict]) -> Any:
    """The partial kernel, or its variant compiled with a tuning config's occupancy hint
    (``{"occupancy": 2}``...), made once."""
    return _PARTIAL.pick((1,), {"warps": 4, "occupancy": (hints or {}).get("occupancy", 0)})


# (sm_90, d 128, 16 rows: BN 64 uses 255 registers and 8 stack bytes, BN 32 204 and none,
# BN 128 spills 416 bytes; without an occupancy hint tileiras plans one CTA per SM)
# Measured on the H100 (d 128, 32 query heads over 8): BN 32 with occupancy 4 the fastest at
# batch 1-32 and 4k-32k keys (0.24-1.25 of the copy bandwidth; BN 64 without a hint 0.17-1.20).
@autotune(configs=[{"BN": 32, "hints": {"occupancy": 4}}, {"BN": 64}, {"BN": 32}, {"BN": 128},
                   {"BN": 32, "hints": {"occupancy": 2}}, {"BN": 64, "hints": {"occupancy": 2}}],
          key=_decode_key,
          kernels=(decode_attention_partial_kernel, decode_attention_merge_kernel),
          name="tilesafe.decode_attention")
def _launch_decode(q3: Tensor, k4: Tensor, v4: Tensor, seq_lens: Tensor, out: Any,
                   shape: tuple, qk_scale: float, kv_heads: int, num_splits: Optional[int],
                   workspace: Optional[Tensor] = None, *, config: dict) -> DeviceOp:
    programs, _, _ = q3.shape
    block = config["BN"]
    splits = num_splits or choose_splits(programs, k4.shape[2], block, sm_count(q3.device))
    partial = _partial_for(config.get("hints"))
    return split_and_merge(
        OP, lambda parts, lses: partial(parts, lses, q3, k4, v4, seq_lens, qk_scale, kv_heads,
                                        BN=block),
        q3, splits, out, shape, workspace,
        "allocate it with decode_attention_workspace(q, k_cache, num_splits=...) and the "
        "same num_splits")


def split_and_merge(op: str, launch_partial: Callable[[Any, Any], DeviceOp], q3: Tensor,
                    splits: int, out: Any, shape: tuple, workspace: Optional[Tensor],
                    workspace_fix: str) -> DeviceOp:
    """The split-K launches of a decode attention (this module's and the paged one's):
    ``launch_partial(parts, lses)`` writes each split's normalized partial result and
    log2-sum-exp into the two partitions, then the merge combines the ``splits`` of each
    program into ``out`` (an output of ``shape``, new when None). The partials are the
    caller's ``workspace`` (so that the call records into a graph; too small: an
    ArgumentError with ``workspace_fix``) or new outputs. Returns the DeviceOp whose result is
    the output."""
    programs, group, d = q3.shape
    g = group_rows(group)
    padded = args.next_power_of_two(splits)
    target = args.output_partition(op, out, shape, q3.shape,
                                   (1, g, merge_columns(splits, g, d)), q3.dtype, q3.device)
    if workspace is not None:  # the partials in the caller's memory: recordable into graphs
        need = programs * splits * g * (d + 1)
        if workspace.size < need:
            raise args.fail(op, f"workspace holds {workspace.size} float32 values; this call "
                            f"needs {need}", workspace_fix)
        flat = workspace.reshape(workspace.size)
        parts_t = flat[:programs * splits * g * d].reshape(programs, splits * g, d)
        lses_t = flat[programs * splits * g * d:need].reshape(programs, splits * g, 1)
        partial = launch_partial(borrow_mut(parts_t).partition((1, g, d)),
                                 borrow_mut(lses_t).partition((1, g, 1)))
        merged = partial.then(lambda r: decode_attention_merge_kernel(target, parts_t, lses_t,
                                                                        SP=padded))
    else:
        parts = Output(None, (programs, splits * g, d), float32, q3.device, name="partials",
                       op=op).partition((1, g, d))
        lses = Output(None, (programs, splits * g, 1), float32, q3.device, name="partials",
                      op=op).partition((1, g, 1))
        merged = launch_partial(parts, lses).then(
            lambda r: decode_attention_merge_kernel(target, r.o.unpartition(),
                                                    r.lse.unpartition(), SP=padded))
    return merged.then(lambda r: out if out is not None else r.o.unpartition().reshape(shape))


@workspace_accepts_torch
def decode_attention_workspace(q: Tensor, k_cache: Tensor, *,
                               num_splits: Optional[int] = None) -> Any:
    """A float32 scratch tensor (a lazy constructor: ``.sync()`` it) large enough for
    ``decode_attention(q, k_cache, ..., num_splits=num_splits, workspace=...)`` whatever
    config the tuner picks; with it (and ``out=``) a call records into a CUDA graph."""
    batch, q_heads, d = q.shape
    _, kv_heads, max_len, _ = k_cache.shape
    programs, g = batch * kv_heads, group_rows(q_heads // kv_heads)
    splits = max((num_splits or choose_splits(programs, max_len, c["BN"], sm_count(q.device))
                  for c in _launch_decode.configs))
    return empty((programs * splits * g * (d + 1),), float32, device=q.device)


@accepts_torch
def decode_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, seq_lens: Tensor, *,
                     scale: Optional[float] = None, num_splits: Optional[int] = None,
                     out: Optional[Tensor] = None,
                     workspace: Optional[Tensor] = None) -> DeviceOp:
    """Attention of one query token per sequence against its key/value cache (decode).

    Args:
        q: ``(batch, q_heads, d)`` queries, float16 or bfloat16, ``d`` 64 or 128.
        k_cache, v_cache: ``(batch, kv_heads, max_len, d)`` caches of ``q``'s dtype and
            device, any strides: head-major caches as they are, or token-major ones
            (``(batch, max_len, kv_heads, d)``, what ``kv_cache_update(layout="nhd")``
            writes in one launch) viewed ``.permute(0, 2, 1, 3)``. The first ``seq_lens[b]``
            rows of each sequence are used; the rest is never read. ``q_heads`` a multiple
            of ``kv_heads`` (grouped-query attention).
        seq_lens: ``(batch,)`` int32 tensor on ``q``'s device: each sequence's length, read by
            the kernels on the device (a CUDA-graph replay may change it between replays).
            A length above ``max_len`` is an ``IndexOutOfRangeError`` (raised when the
            stream is synchronized on a GPU); a length of 0 (or less) gives zeros.
        scale: the softmax scale, default ``1/sqrt(d)``.
        num_splits: how many programs share one sequence's keys (split-K), 1-1024; default
            from ``batch * kv_heads`` against the device's SM count and ``max_len``. Keep it
            fixed across graph replays (it sets the scratch shape and the grid).
        out: a ``(batch, q_heads, d)`` tensor of ``q``'s dtype to write, else a new one.
        workspace: a float32 tensor for the splits' partial results (from
            :func:`decode_attention_workspace`), else one is allocated per call; with it and
            ``out`` the call records into a ``ts.CudaGraph``.

    Returns:
        A DeviceOp whose result is the output tensor (``out`` when given).

    Raises:
        ArgumentError: a dtype other than float16/bfloat16 or differing between q and the
            caches; wrong ranks; caches of different shapes; batch or head dimension that
            differ; ``d`` not 64 or 128; ``q_heads`` not a multiple of ``kv_heads``; an
            empty batch or cache; ``seq_lens`` not an int32 ``(batch,)`` tensor; devices that
            differ; a bad ``scale`` or ``num_splits``; an ``out`` of the wrong shape, dtype
            or device.
        AliasingError: an ``out`` or ``workspace`` that overlaps another tensor of the call
            (refused before anything runs).
    """
    q = args.check_tensor(OP, "q", q, 3, "(batch, q_heads, head_dim)")
    layout = "(batch, kv_heads, max_len, head_dim)"
    k_cache = args.check_tensor(OP, "k_cache", k_cache, 4, layout)
    v_cache = args.check_tensor(OP, "v_cache", v_cache, 4, layout)
    seq_lens = args.check_tensor(OP, "seq_lens", seq_lens, 1, "(batch,)")
    dtype = args.check_dtype(OP, "q", q)
    args.check_dtype(OP, "k_cache", k_cache, dtype)
    args.check_dtype(OP, "v_cache", v_cache, dtype)
    args.check_device(OP, {"q": q, "k_cache": k_cache, "v_cache": v_cache,
                           "seq_lens": seq_lens})
    batch, q_heads, d = q.shape
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise args.fail(OP, f"k_cache has shape {tuple(k_cache.shape)}, v_cache "
                        f"{tuple(v_cache.shape)}", "give the two caches one shape")
    kv_batch, kv_heads, max_len, kv_d = k_cache.shape
    if kv_batch != batch or kv_d != d:
        raise args.fail(OP, f"q has shape {tuple(q.shape)}, the caches "
                        f"{tuple(k_cache.shape)}: batch and head dimension must agree",
                        "give q and the caches one batch size and head dimension")
    args.check_head_dim(OP, d)
    group = args.check_heads(OP, q_heads, kv_heads)
    if batch == 0 or max_len == 0:
        raise args.fail(OP, f"empty input: q {tuple(q.shape)}, caches "
                        f"{tuple(k_cache.shape)}", "skip the call when there is no sequence")
    if seq_lens.dtype != int32 or tuple(seq_lens.shape) != (batch,):
        raise args.fail(OP, f"seq_lens must be an int32 tensor of shape ({batch},), got "
                        f"{seq_lens.dtype.name} {tuple(seq_lens.shape)}",
                        "pass one int32 length per sequence")
    if num_splits is not None and (isinstance(num_splits, bool)
                                   or not isinstance(num_splits, int)
                                   or not 1 <= num_splits <= 1024):
        raise args.fail(OP, f"num_splits must be an int in 1..1024, got {num_splits!r}",
                        "leave num_splits out to choose it from the batch and the SM count")
    qk_scale = args.softmax_scale(OP, scale, d) * args.LOG2E
    q3 = args.flat_view(OP, "q", q, (batch * kv_heads, group, d))
    if workspace is not None and (not isinstance(workspace, Tensor)
                                  or workspace.dtype != float32):
        raise args.fail(OP, "workspace must be a float32 tilesafe tensor",
                        "allocate it with decode_attention_workspace(q, k_cache)")
    check_disjoint(OP, {"out": out, "workspace": workspace},
                   {"q": q, "k_cache": k_cache, "v_cache": v_cache, "seq_lens": seq_lens})
    return _launch_decode(q3, k_cache, v_cache, seq_lens, out, tuple(q.shape), qk_scale, kv_heads,
                          num_splits, workspace)
