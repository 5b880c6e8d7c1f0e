"""Decode attention over a paged KV cache: ``paged_decode_attention``, one query token per
sequence against keys and values kept in fixed-size blocks of a shared pool, found through a
block table on the device.

The cache is what ``kv_cache_update(layout="nhd")`` writes into a paged cache: ``k_cache`` and
``v_cache`` of shape ``(num_blocks, block_size, kv_heads, head_dim)``, slot ``blk * block_size
+ j`` being row ``j`` of physical block ``blk``. ``block_table[b, i]`` is the physical block
holding sequence ``b``'s logical block ``i``, so its token ``t`` lies at row ``t %
block_size`` of block ``block_table[b, t // block_size]``.

Structure: the split-K of :mod:`.decode_attention`. A partial kernel (program ``(b*kv_heads +
h, split)``: the GQA group of key/value head ``h`` against its share of the key tiles, dealt
out from the length read on the device) writes normalized partial outputs and log2-sum-exps,
and the contiguous path's ``decode_attention_merge_kernel`` merges them. Only the reads
differ. The block ids are read from the table with ``tc.gather``, and the entries read are
only those below ``ceil(seq_len / block_size)`` (key indices are clamped to the last key), so
the rest of a row may hold anything (-1, stale ids). The last key's entry is read first, so a
length past the table fails that read whatever the length (the key tile count wraps in int32
near 2**31); a negative length counts as 0.
Then the keys and values, by one of two kernels, chosen on the host by :func:`key_tile`:

- ``paged_decode_attention_partial_kernel``, where a power of two of at least
  :data:`MIN_KEY_ROWS` divides the block size (16, 32, ... 256, and 48, 96, ...): a key tile
  of ``BN`` keys is made of ``(1, ROWS, 1, d)`` tiles of the pool's partition, ``ROWS =
  min(BN, block_size)``: one tile of one block (a block of 256 holds 8 tiles of 32), or whole
  blocks joined (a tile of 64 keys is 4 blocks of 16), each loaded at a block id read from
  the device. Such a ``load(index)`` is bounds-checked on every device like a gather (safety
  rule 10), and it is the contiguous kernel's load; the first block id of the next tile is
  read one iteration ahead.
- ``paged_decode_attention_gather_kernel``, for every other block size (1, 8, 24, ...): each
  of the tile's keys reads its own block id and its row with ``tc.gather``.

Measured on an H200 (32 query heads over 8, d 128, f16, batch 1-32 at 4k-16k keys, the first
config's tile of 32 with its occupancy hint; K/V bandwidth against the contiguous kernel in the
same run): blocks of 256 at 0.87-0.92 of it, blocks of 16 (tiles of two blocks) at 0.63-0.83.
Gathering the same rows element by element instead ran at 0.56-0.75 and 0.19-0.25, and tiles
of 16 keys (one block each) at 0.14-0.18.

With either kernel a block id outside ``[0, num_blocks)`` is an ``IndexOutOfRangeError`` (on a GPU
when the stream is synchronized), never a read of other memory. The block size is a shape name
of the kernels (``BS``): they are compiled per block size, their ``//`` and ``%`` by a
constant.

Why a function of its own rather than a ``block_table=`` keyword of ``decode_attention``: the
four dimensions of the caches mean different things in the two layouts, so a forgotten
keyword would read a paged pool as ``(batch, kv_heads, max_len, d)`` caches whenever the
extents happen to agree; here the table is a required argument, the messages name the paged
layout, and the contiguous path (its function, kernels and tuned configs) is left exactly as
it was.

May import the host layer, ``kernel``, ``autotune``, ``core`` and the library's modules."""

from __future__ import annotations

from typing import Any, Optional

import tilesafe.core as tc

from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..dtypes import float32, int32
from ..host.factory import empty
from ..host.tensor import Tensor
from ..kernel import function, kernel
from . import _attention_args as args
from ._online_softmax import rescaled_scores, store_split
from ._outputs import check_disjoint
from ._rowwise import WarpVariants
from ._torch import accepts_torch, workspace_accepts_torch
from .decode_attention import (choose_splits, decode_attention_merge_kernel, group_rows,
                               sm_count, split_and_merge)

OP = "paged_decode_attention"
#: the layout of the paged caches, as the messages name it
CACHE_LAYOUT = "(num_blocks, block_size, kv_heads, head_dim)"


@function
def split_keys(seq_lens, block_table, kv_heads, BN, BS):
    """This program's share of the keys: ``(bh, b, h, seq_len, last, start, end)``, the
    program's row ``bh`` of the queries, its sequence ``b`` and key/value head ``h``, the
    sequence's length (a negative one counts as 0) and last key (0 when it has none), and its
    split's key tiles ``start .. end`` of ``BN`` keys. The table entry of the last key is read
    first, so a length past the table is an IndexOutOfRangeError here whatever the length (the
    tile count wraps in int32 near 2**31, which would leave nothing read, so nothing
    failing)."""
    bh, split, _ = tc.get_tile_block_id()
    _, splits, _ = tc.get_num_tile_blocks()
    b = bh // kv_heads
    h = bh % kv_heads
    seq_len = tc.maximum(tc.gather(seq_lens, b), 0)
    last = tc.maximum(seq_len, 1) - 1
    tc.gather(block_table, b, last // BS)
    tiles = (seq_len + BN - 1) // BN
    per_split = (tiles + splits - 1) // splits
    start = split * per_split
    return bh, b, h, seq_len, last, start, tc.minimum(start + per_split, tiles)


@function
def tile_blocks(first, block_table, b, j, last, BN, BS, ROWS):
    """The block ids of key tile ``j``'s ``BN // ROWS`` pieces of ``ROWS`` keys: ``first``
    (the first piece's, read ahead), then each other piece's, read now (its first key clamped
    to ``last``, so no table entry past the sequence is read)."""
    blocks = (first,)
    for i in (1, 2, 3, 4, 5, 6, 7)[:BN // ROWS - 1]:
        blocks = blocks + (tc.gather(block_table, b, tc.minimum(j * BN + i * ROWS, last) // BS),)
    return blocks


@function
def paged_tile(part, blocks, row, h, ROWS, D):
    """The ``(len(blocks) * ROWS, D)`` key or value tile: the ``(1, ROWS, 1, D)`` tile at row
    tile ``row`` of each block, head ``h`` (a block id outside the pool is outside the
    partition's grid: ``IndexOutOfRangeError``), joined along the keys."""
    pieces = ()
    for block in blocks:
        pieces = pieces + (part.load((block, row, h, 0)).reshape((ROWS, D)),)
    return tc.cat(pieces, axis=0)


@kernel(examples=[{"G": 16, "D": 128, "BN": 32, "BS": 16, "T": tc.f16},
                  {"G": 16, "D": 64, "BN": 32, "BS": 256, "T": tc.bf16},
                  {"G": 16, "D": 128, "BN": 16, "BS": 48, "T": tc.bf16}])
def paged_decode_attention_partial_kernel(o: tc.MutTensor[tc.f32, (1, "G", "D")],
                                          lse: tc.MutTensor[tc.f32, (1, "G", 1)],
                                          q: tc.Tensor["T", (-1, -1, "D")],
                                          k: tc.Tensor["T", (-1, "BS", -1, "D")],
                                          v: tc.Tensor["T", (-1, "BS", -1, "D")],
                                          seq_lens: tc.Tensor[tc.i32, (-1,)],
                                          block_table: tc.Tensor[tc.i32, (-1, -1)],
                                          qk_scale: float, kv_heads: int, BN: tc.Const[int]):
    """Split ``split`` of the keys of sequence ``b = bh // kv_heads``, head ``h = bh %
    kv_heads``, read from the paged ``k``/``v`` (``(num_blocks, BS, kv_heads, D)``, any
    strides) through ``block_table`` (``(batch, max_blocks)``), for the ``G`` (padded) query
    heads of ``q`` (``(batch*kv_heads, group, D)``): key tile ``j`` is ``BN // ROWS`` tiles
    ``(1, ROWS, 1, D)`` of blocks (``ROWS = min(BN, BS)``, dividing both: one tile of one
    block, or whole blocks joined). Writes ``o`` = its softmax-weighted values, normalized,
    and ``lse`` = log2 of its sum of exp2(scores*qk_scale)."""
    bh, b, h, seq_len, last, start, end = split_keys(seq_lens, block_table, kv_heads, BN, BS)
    rows_per = min(BN, BS)
    per_block = BS // rows_per
    keys = k.partition((1, rows_per, 1, D))
    values = v.partition((1, rows_per, 1, D))
    queries = q.partition((1, G, D)).load((bh, 0, 0)).reshape((G, D))
    unmasked_end = tc.minimum(end, seq_len // BN)
    # the block of this split's first key (a length past the table fails here); each
    # iteration reads the next tile's first block id while its own keys load
    block = tc.gather(block_table, b, tc.minimum(start * BN, last) // BS)
    best = tc.full((G, 1), float("-inf"), tc.f32)
    total = tc.zeros((G, 1), tc.f32)
    acc = tc.zeros((G, D), tc.f32)
    for j in range(start, unmasked_end):
        following = tc.gather(block_table, b, tc.minimum((j + 1) * BN, last) // BS)
        blocks = tile_blocks(block, block_table, b, j, last, BN, BS, rows_per)
        kt = paged_tile(keys, blocks, j % per_block, h, rows_per, D)
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((G, BN), tc.f32)) * qk_scale
        p, alpha, new_best, total = rescaled_scores(s, best, total)
        vt = paged_tile(values, blocks, j % per_block, h, rows_per, D)
        acc = tc.mma(p.astype(T), vt, acc * alpha)
        best = new_best
        block = following
    for j in range(tc.maximum(start, unmasked_end), end):
        blocks = tile_blocks(block, block_table, b, j, last, BN, BS, rows_per)
        kt = paged_tile(keys, blocks, j % per_block, h, rows_per, D)
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((G, BN), tc.f32)) * qk_scale
        cols = (tc.arange(BN) + j * BN).reshape((1, BN))
        s = tc.where(cols < seq_len, s, float("-inf"))
        # the rows past the length may hold anything (NaN from a block never written, or the
        # last block read again for pieces past it): 0 * NaN would reach the sum, so the
        # values are masked as well
        stale = (tc.arange(BN) + j * BN).reshape((BN, 1)) >= seq_len
        p, alpha, new_best, total = rescaled_scores(s, best, total)
        vt = tc.where(stale, 0.0, paged_tile(values, blocks, j % per_block, h, rows_per, D))
        acc = tc.mma(p.astype(T), vt, acc * alpha)
        best = new_best
    store_split(o, lse, acc, total, best)


@kernel(examples=[{"G": 16, "D": 128, "BN": 32, "BS": 24, "T": tc.f16},
                  {"G": 16, "D": 64, "BN": 64, "BS": 1, "T": tc.bf16}])
def paged_decode_attention_gather_kernel(o: tc.MutTensor[tc.f32, (1, "G", "D")],
                                         lse: tc.MutTensor[tc.f32, (1, "G", 1)],
                                         q: tc.Tensor["T", (-1, -1, "D")],
                                         k: tc.Tensor["T", (-1, "BS", -1, "D")],
                                         v: tc.Tensor["T", (-1, "BS", -1, "D")],
                                         seq_lens: tc.Tensor[tc.i32, (-1,)],
                                         block_table: tc.Tensor[tc.i32, (-1, -1)],
                                         qk_scale: float, kv_heads: int, BN: tc.Const[int]):
    """As ``paged_decode_attention_partial_kernel`` for any block size ``BS``: each of a key
    tile's ``BN`` keys reads its own block id and row with ``tc.gather`` (keys past the
    length read the last key's, so no table entry past the sequence is read)."""
    bh, b, h, seq_len, last, start, end = split_keys(seq_lens, block_table, kv_heads, BN, BS)
    queries = q.partition((1, G, D)).load((bh, 0, 0)).reshape((G, D))
    columns = tc.arange(D, tc.i32).reshape((1, D))
    offsets = tc.arange(BN, tc.i32).reshape((BN, 1))
    best = tc.full((G, 1), float("-inf"), tc.f32)
    total = tc.zeros((G, 1), tc.f32)
    acc = tc.zeros((G, D), tc.f32)
    for j in range(start, end):
        tokens = tc.minimum(offsets + j * BN, last)
        # a length past the table fails at the block ids, a block id outside the pool at the
        # rows (IndexOutOfRangeError)
        blocks = tc.gather(block_table, b, tokens // BS)
        rows = tokens % BS
        kt = tc.gather(k, blocks, rows, h, columns)
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((G, BN), tc.f32)) * qk_scale
        cols = (tc.arange(BN) + j * BN).reshape((1, BN))
        s = tc.where(cols < seq_len, s, float("-inf"))
        p, alpha, new_best, total = rescaled_scores(s, best, total)
        # (keys past the length are copies of the last key's row: no stale values to mask)
        vt = tc.gather(v, blocks, rows, h, columns)
        acc = tc.mma(p.astype(T), vt, acc * alpha)
        best = new_best
    store_split(o, lse, acc, total, best)


#: the fewest keys of one block-tile load: a block size with no power-of-two divisor this
#: large (1, 8, 24, ...) reads through ``paged_decode_attention_gather_kernel``
MIN_KEY_ROWS = 16


def key_tile(widest: int, block_size: int) -> tuple[int, bool]:
    """The key tile for a config's tile ``widest`` and the cache's ``block_size``, and whether
    the block-tile kernel reads it. With ``p``, the largest power of two dividing
    ``block_size``, at least :data:`MIN_KEY_ROWS`: ``widest`` where the block size is ``p``
    itself (a block holds whole tiles, or a tile whole blocks), else ``min(widest, p)`` (48:
    tiles of 16 keys); otherwise ``widest``, read by the gather kernel."""
    p = block_size & -block_size
    if p < MIN_KEY_ROWS:
        return widest, False
    return (widest if p == block_size else min(widest, p)), True


def _paged_key(q3: Tensor, k4: Tensor, v4: Tensor, seq_lens: Tensor, block_table: Tensor,
               out: Any, shape: tuple, qk_scale: float, kv_heads: int,
               num_splits: Optional[int], workspace: Optional[Tensor] = None) -> tuple:
    capacity = block_table.shape[1] * k4.shape[1]
    return (q3.shape[-1], q3.dtype.name, q3.shape[1], k4.shape[1],
            min(capacity, 8192) > 2048)


_BLOCK_TILES = WarpVariants(paged_decode_attention_partial_kernel)
_GATHERED = WarpVariants(paged_decode_attention_gather_kernel)


def _partial_for(whole: bool, hints: Optional[dict]) -> Any:
    """The block-tile kernel (``whole``) or the gather kernel, or its variant compiled with a
    tuning config's occupancy hint, made once."""
    return (_BLOCK_TILES if whole else _GATHERED).pick(
        (1,), {"warps": 4, "occupancy": (hints or {}).get("occupancy", 0)})


# (the contiguous path's configs: the mma and the registers are the same, the reads differ)
@autotune(configs=[{"BN": 32, "hints": {"occupancy": 4}}, {"BN": 64}, {"BN": 32}, {"BN": 128},
                   {"BN": 32, "hints": {"occupancy": 2}}, {"BN": 64, "hints": {"occupancy": 2}}],
          key=_paged_key,
          kernels=(paged_decode_attention_partial_kernel, paged_decode_attention_gather_kernel,
                   decode_attention_merge_kernel, key_tile),
          name="tilesafe.paged_decode_attention")
def _launch_paged(q3: Tensor, k4: Tensor, v4: Tensor, seq_lens: Tensor, block_table: Tensor,
                  out: Any, shape: tuple, qk_scale: float, kv_heads: int,
                  num_splits: Optional[int], workspace: Optional[Tensor] = None, *,
                  config: dict) -> DeviceOp:
    programs, _, _ = q3.shape
    capacity = block_table.shape[1] * k4.shape[1]
    block, whole = key_tile(config["BN"], k4.shape[1])
    splits = num_splits or choose_splits(programs, capacity, block, sm_count(q3.device))
    partial = _partial_for(whole, config.get("hints"))
    return split_and_merge(
        OP, lambda parts, lses: partial(parts, lses, q3, k4, v4, seq_lens, block_table,
                                        qk_scale, kv_heads, BN=block),
        q3, splits, out, shape, workspace,
        "allocate it with paged_decode_attention_workspace(q, k_cache, block_table, "
        "num_splits=...) and the same num_splits")


@workspace_accepts_torch
def paged_decode_attention_workspace(q: Tensor, k_cache: Tensor, block_table: Tensor, *,
                                     num_splits: Optional[int] = None) -> Any:
    """A float32 scratch tensor (a lazy constructor: ``.sync()`` it) large enough for
    ``paged_decode_attention(q, k_cache, ..., block_table, num_splits=num_splits,
    workspace=...)`` whatever config the tuner picks; with it (and ``out=``) a call records
    into a CUDA graph."""
    batch, q_heads, d = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    capacity = block_table.shape[1] * block_size
    programs, g = batch * kv_heads, group_rows(q_heads // kv_heads)
    splits = max((num_splits or choose_splits(programs, capacity,
                                              key_tile(c["BN"], block_size)[0],
                                              sm_count(q.device))
                  for c in _launch_paged.configs))
    return empty((programs * splits * g * (d + 1),), float32, device=q.device)


def _check_int32(name: str, value: Tensor, shape: tuple, layout: str, hint: str) -> None:
    if value.dtype != int32 or tuple(value.shape) != shape:
        raise args.fail(OP, f"{name} must be an int32 tensor of shape {shape} {layout}, got "
                        f"{value.dtype.name} {tuple(value.shape)}", hint)


@accepts_torch
def paged_decode_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, seq_lens: Tensor,
                           block_table: Tensor, *, scale: Optional[float] = None,
                           num_splits: Optional[int] = None, out: Optional[Tensor] = None,
                           workspace: Optional[Tensor] = None) -> DeviceOp:
    """Attention of one query token per sequence against its keys and values in a paged
    cache (decode): ``decode_attention`` with the cache rows found through a block table.

    Args:
        q: ``(batch, q_heads, d)`` queries, float16 or bfloat16, ``d`` 64 or 128.
        k_cache, v_cache: ``(num_blocks, block_size, kv_heads, d)`` pools of ``q``'s dtype and
            device, any strides: slot ``blk * block_size + j`` (row ``j`` of block ``blk``)
            holds one token's ``kv_heads`` rows, as ``kv_cache_update(layout="nhd")`` writes
            them. Any ``block_size``: one divisible by 16 is read in whole tiles (fast), any
            other (1, 8, 24, ...) key by key (module docstring). ``q_heads`` a multiple of
            ``kv_heads`` (grouped-query attention).
        seq_lens: ``(batch,)`` int32 tensor on ``q``'s device: each sequence's length, read on
            the device (a CUDA-graph replay may change it between replays). A length of 0
            (or less) gives zeros; a length above ``max_blocks_per_seq * block_size`` is an
            ``IndexOutOfRangeError`` (raised when the stream is synchronized on a GPU).
        block_table: ``(batch, max_blocks_per_seq)`` int32 tensor on ``q``'s device, read on
            the device: ``block_table[b, i]`` is the physical block of sequence ``b``'s
            logical block ``i`` (keys ``i * block_size ..``). Only the entries below
            ``ceil(seq_lens[b] / block_size)`` are read; each must lie in ``[0,
            num_blocks)``, else ``IndexOutOfRangeError``. Blocks may be shared between
            sequences (the caches are only read).
        scale: the softmax scale, default ``1/sqrt(d)``.
        num_splits: how many programs share one sequence's keys (split-K), 1-1024; default
            from ``batch * kv_heads`` against the device's SM count and the table's capacity
            (``max_blocks_per_seq * block_size``). Keep it fixed across graph replays.
        out: a ``(batch, q_heads, d)`` tensor of ``q``'s dtype to write, else a new one.
        workspace: a float32 tensor for the splits' partial results (from
            :func:`paged_decode_attention_workspace`), else one is allocated per call; with
            it and ``out`` the call records into a ``ts.CudaGraph``.

    Returns:
        A DeviceOp whose result is the output tensor (``out`` when given).

    Raises:
        ArgumentError: a dtype other than float16/bfloat16 or differing between q and the
            caches; wrong ranks; caches of different shapes; a head dimension that differs or
            is not 64 or 128; ``q_heads`` not a multiple of ``kv_heads``; an empty batch,
            pool, block or table; ``seq_lens`` not an int32 ``(batch,)`` tensor;
            ``block_table`` not an int32 ``(batch, max_blocks_per_seq)`` tensor; devices
            that differ; a bad ``scale``, ``num_splits`` or ``workspace``; an ``out`` of the
            wrong shape, dtype or device.
        AliasingError: an ``out`` or ``workspace`` that overlaps another tensor of the call
            (refused before anything runs).
        IndexOutOfRangeError: (when the op runs) a block id outside the pool, or a length
            past the table's capacity.
    """
    q = args.check_tensor(OP, "q", q, 3, "(batch, q_heads, head_dim)")
    k_cache = args.check_tensor(OP, "k_cache", k_cache, 4, CACHE_LAYOUT)
    v_cache = args.check_tensor(OP, "v_cache", v_cache, 4, CACHE_LAYOUT)
    seq_lens = args.check_tensor(OP, "seq_lens", seq_lens, 1, "(batch,)")
    block_table = args.check_tensor(OP, "block_table", block_table, 2,
                                    "(batch, max_blocks_per_seq)")
    dtype = args.check_dtype(OP, "q", q)
    args.check_dtype(OP, "k_cache", k_cache, dtype)
    args.check_dtype(OP, "v_cache", v_cache, dtype)
    args.check_device(OP, {"q": q, "k_cache": k_cache, "v_cache": v_cache,
                           "seq_lens": seq_lens, "block_table": block_table})
    batch, q_heads, d = q.shape
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise args.fail(OP, f"k_cache has shape {tuple(k_cache.shape)}, v_cache "
                        f"{tuple(v_cache.shape)}", "give the two caches one shape")
    num_blocks, block_size, kv_heads, kv_d = k_cache.shape
    if kv_d != d:
        raise args.fail(OP, f"q has shape {tuple(q.shape)}, the caches "
                        f"{tuple(k_cache.shape)} {CACHE_LAYOUT}: the head dimensions must "
                        "agree", "give q and the caches one head dimension")
    args.check_head_dim(OP, d)
    group = args.check_heads(OP, q_heads, kv_heads)
    max_blocks = block_table.shape[1]
    if batch == 0 or num_blocks == 0 or block_size == 0 or max_blocks == 0:
        raise args.fail(OP, f"empty input: q {tuple(q.shape)}, caches "
                        f"{tuple(k_cache.shape)}, block_table {tuple(block_table.shape)}",
                        "skip the call when there is no sequence or no block")
    _check_int32("seq_lens", seq_lens, (batch,), "(batch,)",
                 "pass one int32 length per sequence")
    _check_int32("block_table", block_table, (batch, max_blocks),
                 "(batch, max_blocks_per_seq)",
                 "pass one int32 row of physical block ids per sequence of q")
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
                        "allocate it with paged_decode_attention_workspace(q, k_cache, "
                        "block_table)")
    check_disjoint(OP, {"out": out, "workspace": workspace},
                   {"q": q, "k_cache": k_cache, "v_cache": v_cache, "seq_lens": seq_lens,
                        "block_table": block_table})
    return _launch_paged(q3, k_cache, v_cache, seq_lens, block_table, out, tuple(q.shape),
                         qk_scale, kv_heads, num_splits, workspace)
