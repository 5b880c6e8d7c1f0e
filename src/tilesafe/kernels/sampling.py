"""Choosing tokens from logits: ``argmax`` (greedy) and ``sample`` (temperature, top-k,
top-p), both ``(rows, vocab) -> (rows,)`` int32 token ids.

``argmax`` has two schedules, both giving ``torch.argmax``'s answer (the first index of the
row's maximum, the first NaN if the row holds any):

- many rows, or a short vocabulary (``argmax_rows``): one program per ``rows`` rows (default
  1) walks the vocabulary in column tiles, keeping per column lane of the tile a running
  maximum and the tile it came from: a value replaces the lane's only if it is strictly
  larger (or the lane's first NaN), so each lane keeps its first maximum, and the loop does no
  reduction across lanes. At the end the row's index is the smallest column among the lanes
  holding the row's maximum (or a NaN).
- at most :data:`SPLIT_MAX_ROWS` rows of at least :data:`SPLIT_MIN_VOCAB` columns (a decode
  step's logits), split so that every SM has work: launch 1 (``argmax_chunk_maxima``), one
  program per (row, chunk of ``C`` columns), stores each chunk's maximum as float32 (NaN if
  the chunk holds one) into a ``(rows, chunks)`` scratch tensor; launch 2
  (``argmax_merge_rows``), one program per row, takes the row's maximum ``top`` over its chunk
  maxima (NaN if any is NaN), the first chunk ``c*`` whose maximum is ``top`` (or NaN), and the
  first column of chunk ``c*`` holding ``top`` (or a NaN): ``c* * C + column``. Every chunk
  before ``c*`` holds only values below ``top`` (and no NaN when ``top`` is NaN), so that is
  the row's first maximum: ties across chunks go to the earlier chunk, a NaN anywhere beats
  every number, an all ``-inf`` row gives 0 (padding past the row is ``-inf`` and comes after
  every column). The scratch is allocated per call, or lent by the caller (``workspace=``,
  from ``argmax_workspace``) so that the call allocates nothing and records into a graph.

``sample`` (exact sampling, no sort of the vocabulary):

- ``temperature == 0``: ``argmax``.
- no top-k, no top-p: Gumbel-max over the whole row, ``argmax_j(logits[j] / temperature -
  log(-log(u[j])))``, which draws ``j`` with probability ``softmax(logits / temperature)[j]``.
  Few rows of a long vocabulary split as ``argmax`` does (``gumbel_chunk_maxima`` then
  ``gumbel_merge_rows``, which computes the winning chunk's noisy logits again from the same
  counters): the token of one program per row walking tiles of the chunk's width.
- ``top_k = k``: one pass over the row keeps a running top-``K`` set (``K`` = k rounded up to
  a power of two, at most ``MAX_TOP_K``): a column tile whose maximum does not beat the set's
  smallest value is skipped, otherwise its own ``tc.topk`` is merged into the set. The set is
  then cut to the ``k`` largest (equal values: lower index first, so exactly ``k`` tokens;
  transformers' TopKLogitsWarper also keeps further ties of the ``k``-th value). ``top_p = p``
  then keeps, in that order, the tokens whose preceding probability mass (softmax of the
  scaled top-k logits) is below ``p`` (at least one: transformers' TopPLogitsWarper), and
  Gumbel-max picks among the kept tokens. ``top_p < 1`` needs ``top_k`` (an exact top-p over
  the whole vocabulary would need a sort of it).

Random numbers: column ``j`` of row ``r`` uses word ``j % 4`` of the Philox-4x32-10 block
``tc.randint4x(seed, (offset + r) * ceil(vocab / 4) + j // 4)`` (64-bit counters) mapped by
``tc.uint_to_uniform``: one Philox evaluation per four columns, and the same number for a
token on the full-vocabulary and the top-k paths. A result depends only on (logits, options,
seed, offset), on every device. An
engine advances ``offset`` by the batch size (or more) per step; a device-resident ``offset``
tensor lets a CUDA graph replay draw new numbers.

May import the host layer, ``kernel``, ``autotune``, ``core`` and the library's helpers.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import numpy as np

from .. import core as tc
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..dtypes import float32, int32
from ..host.factory import empty
from ..host.factory import tensor as host_tensor
from ..host.tensor import Tensor, borrow_mut
from ..kernel import function, kernel
from . import _token_args as args
from ._outputs import Output, check_disjoint
from ._torch import accepts_torch, workspace_accepts_torch

LOGIT_DTYPES = ("float16", "bfloat16", "float32")
#: the largest top_k (the running top-k set is a tile of this many candidates at most)
MAX_TOP_K = 256
NEG_INF = float("-inf")
POS_INF = float("inf")
#: the largest int32 (no column index is larger)
LAST_INDEX = 2 ** 31 - 1
#: argmax's split schedule (chunk maxima, then a merge per row) serves at most this many rows
#: ... (more rows fill the GPU with one program per row; bf16 x 151936 on the H100, split
#: against one program per row: 3.2 / 15.9 us at 1 row, 8.3 / 16.3 at 32, 14.2 / 16.4 at 64)
SPLIT_MAX_ROWS = 64
#: ... of at least this many columns (a shorter row is a few tiles: one program is enough)
SPLIT_MIN_VOCAB = 16384
#: ... and at most this many chunks per row (the merge loads a row's chunk maxima as one tile)
SPLIT_MAX_CHUNKS = 1024


@kernel
def argmax_rows(out: tc.MutTensor[tc.i32, ("R",)], logits: tc.Tensor["T", (-1, -1)],
                C: tc.Const[int]):
    """The first index of each of R rows' maximum, C columns at a time (see ``argmax``)."""
    i, _, _ = tc.get_tile_block_id()
    tiles = logits.partition((R, C), padding=NEG_INF)
    best = tc.full((R, C), NEG_INF, tc.f32)  # per column lane: its first maximum ...
    best_tile = tc.zeros((R, C), tc.i32)  # ... and the tile it was in
    for j in range(tiles.num_tiles(1)):
        x = tiles.load((i, j)).astype(tc.f32)
        better = (x > best) | ((x != x) & (best == best))
        best = tc.where(better, x, best)
        best_tile = tc.where(better, j, best_tile)
    top = tc.reduce_max(best, 1).reshape((R, 1))  # (NaN if any lane holds one)
    hit = (best == top) | ((best != best) & (top != top))
    column = best_tile * C + tc.arange(C).reshape((1, C))
    out.store(tc.reduce_min(tc.where(hit, column, LAST_INDEX), 1))


@kernel
def argmax_chunk_maxima(maxima: tc.MutTensor[tc.f32, (1, 1)], logits: tc.Tensor["T", (-1, -1)],
                        C: tc.Const[int]):
    """The maximum of chunk ``(row, c)`` of ``logits`` (``C`` columns; NaN if it holds one)."""
    row, chunk, _ = tc.get_tile_block_id()
    x = logits.partition((1, C), padding=NEG_INF).load((row, chunk)).astype(tc.f32)
    maxima.store(tc.reduce_max(x, 1, keepdims=True))  # (reduce_max propagates NaN)


@function
def _first_at(x, top, positions):
    """The smallest of ``positions`` where the f32 tile ``x`` holds ``top`` (or a NaN, when
    ``top`` is NaN); ``LAST_INDEX`` if none."""
    hit = (x == top) | ((x != x) & (top != top))
    return tc.reduce_min(tc.where(hit, positions, LAST_INDEX))


@kernel
def argmax_merge_rows(out: tc.MutTensor[tc.i32, (1,)], logits: tc.Tensor["T", (-1, -1)],
                      maxima: tc.Tensor[tc.f32, (-1, -1)], C: tc.Const[int],
                      CP: tc.Const[int]):
    """The first index of one row's maximum, from its chunk maxima (``maxima``, ``(rows,
    chunks)``; ``CP`` >= chunks, a power of two) and the first chunk holding it."""
    row, _, _ = tc.get_tile_block_id()
    tops = maxima.partition((1, CP), padding=NEG_INF).load((row, 0)).reshape((CP,))
    top = tc.reduce_max(tops)  # (NaN if any chunk holds one)
    chunk = _first_at(tops, top, tc.arange(CP))
    x = logits.partition((1, C), padding=NEG_INF).load((row, chunk)).astype(tc.f32)
    column = _first_at(x.reshape((C,)), top, tc.arange(C))
    out.store((chunk * C + column).reshape((1,)))


@function
def _first_counter(offset, i, vocab):
    """The Philox counter of row ``i``'s column 0: ``(offset + i) * ceil(vocab / 4)``."""
    return (tc.gather(offset, 0) + tc.astype(i, tc.i64)) * ((tc.astype(vocab, tc.i64) + 3) // 4)


@function
def _uniforms_of(seed, first, columns):
    """The uniform of each column (an i32 tile): word ``column % 4`` of counter ``first +
    column // 4`` (any tile of columns: four words computed, one kept)."""
    w0, w1, w2, w3 = tc.randint4x(seed, first + (columns // 4).astype(tc.i64))
    lane = columns % 4
    word = tc.where(lane == 0, w0, tc.where(lane == 1, w1, tc.where(lane == 2, w2, w3)))
    return tc.uint_to_uniform(word)


@kernel
def gumbel_rows(out: tc.MutTensor[tc.i32, (1,)], logits: tc.Tensor["T", (-1, -1)],
                offset: tc.Tensor[tc.i64, (-1,)], seed: int, temperature: float,
                C: tc.Const[int]):
    """One row's Gumbel-max sample from softmax(logits / temperature) (see ``sample``)."""
    i, _, _ = tc.get_tile_block_id()
    tiles = logits.partition((1, C), padding=NEG_INF)
    first = _first_counter(offset, i, logits.shape[1])
    best = tc.full((1,), NEG_INF, tc.f32)
    best_index = tc.zeros((1,), tc.i32)
    for j in range(tiles.num_tiles(1)):
        noisy = _gumbel_tile(tiles, i, j, first, seed, temperature, C)
        tile_max = tc.reduce_max(noisy, 1)
        better = tile_max > best
        best_index = tc.where(better, tc.argmax(noisy, 1) + j * C, best_index)
        best = tc.where(better, tile_max, best)
    out.store(best_index)


@function
def _gumbel_tile(tiles, i, j, first, seed, temperature, C):
    """Row ``i``'s column tile ``j`` (``C`` columns, of the partition ``tiles``) divided by
    the temperature, minus the log of minus the log of each column's uniform: a ``(1, C)``
    f32 tile whose padding columns stay -inf. The same for every schedule that reads the
    tile (``gumbel_rows``, ``gumbel_chunk_maxima``, ``gumbel_merge_rows``)."""
    # C columns use C/4 counters, all four words of each: column 4q + w is word w of q
    quads = tc.arange(C // 4, tc.i64)
    w0, w1, w2, w3 = tc.randint4x(seed, first + tc.astype(j * (C // 4), tc.i64) + quads)
    u = tc.uint_to_uniform(tc.cat((w0.reshape((C // 4, 1)), w1.reshape((C // 4, 1)),
                                   w2.reshape((C // 4, 1)), w3.reshape((C // 4, 1))),
                                  axis=1))
    x = tiles.load((i, j)).astype(tc.f32).reshape((C,)) / temperature
    return (x - tc.log(-tc.log(u.reshape((C,))))).reshape((1, C))


@kernel
def gumbel_chunk_maxima(maxima: tc.MutTensor[tc.f32, (1, 1)], logits: tc.Tensor["T", (-1, -1)],
                        offset: tc.Tensor[tc.i64, (-1,)], seed: int, temperature: float,
                        C: tc.Const[int]):
    """The largest noisy logit of chunk ``(row, c)`` (``_gumbel_tile``; NaN if it holds one)."""
    row, chunk, _ = tc.get_tile_block_id()
    tiles = logits.partition((1, C), padding=NEG_INF)
    first = _first_counter(offset, row, logits.shape[1])
    noisy = _gumbel_tile(tiles, row, chunk, first, seed, temperature, C)
    maxima.store(tc.reduce_max(noisy, 1, keepdims=True))


@kernel
def gumbel_merge_rows(out: tc.MutTensor[tc.i32, (1,)], logits: tc.Tensor["T", (-1, -1)],
                      offset: tc.Tensor[tc.i64, (-1,)], maxima: tc.Tensor[tc.f32, (-1, -1)],
                      seed: int, temperature: float, C: tc.Const[int], CP: tc.Const[int]):
    """One row's draw from its chunk maxima, as ``gumbel_rows`` chooses with tiles of ``C``
    columns: the first chunk holding the largest maximum that is not NaN (a chunk holding a
    NaN is never chosen there: its maximum compares false), then the first column of that
    chunk's noisy logits at it; 0 when every maximum is -inf or NaN."""
    row, _, _ = tc.get_tile_block_id()
    tops = maxima.partition((1, CP), padding=NEG_INF).load((row, 0)).reshape((CP,))
    top = tc.reduce_max(tc.where(tops == tops, tops, NEG_INF))
    chunk = tc.reduce_min(tc.where(tops == top, tc.arange(CP), LAST_INDEX))
    chunk = tc.where(top > NEG_INF, chunk, 0)
    tiles = logits.partition((1, C), padding=NEG_INF)
    first = _first_counter(offset, row, logits.shape[1])
    noisy = _gumbel_tile(tiles, row, chunk, first, seed, temperature, C)
    index = tc.argmax(noisy, 1) + chunk * C
    out.store(tc.where(top > NEG_INF, index, 0).reshape((1,)))


@kernel
def top_k_rows(out: tc.MutTensor[tc.i32, (1,)], logits: tc.Tensor["T", (-1, -1)],
               offset: tc.Tensor[tc.i64, (-1,)], seed: int, temperature: float, top_k: int,
               top_p: float, C: tc.Const[int], K: tc.Const[int]):
    """One row's sample among its top_k (then top_p) tokens (see ``sample``)."""
    i, _, _ = tc.get_tile_block_id()
    tiles = logits.partition((1, C), padding=NEG_INF)
    vocab = logits.shape[1]
    first = _first_counter(offset, i, vocab)
    rank = tc.arange(K, tc.i32)
    active = rank < top_k
    cols = tc.arange(C, tc.i32)
    # the running top-k set, unordered: slots >= top_k are inactive (never evicted)
    values = tc.full((K,), NEG_INF, tc.f32)
    indices = -1 - rank  # placeholders: below every column, distinct
    smallest = tc.reduce_min(tc.where(active, values, POS_INF))
    for j in range(tiles.num_tiles(1)):
        work = tiles.load((i, j)).astype(tc.f32).reshape((C,))
        while tc.reduce_max(work) > smallest:
            # the tile's best enters, evicting the set's smallest (the highest index of
            # equal ones): exactly the top_k, ties to the lower index
            column = tc.argmax(work)
            entering = tc.reduce_max(work)
            evicted = tc.argmax(tc.where(active & (values == smallest), indices, -2 - K))
            values = tc.where(rank == evicted, entering, values)
            indices = tc.where(rank == evicted, j * C + column, indices)
            work = tc.where(cols == column, NEG_INF, work)
            smallest = tc.reduce_min(tc.where(active, values, POS_INF))
    scaled = tc.where(active, values / temperature, NEG_INF)
    weights = tc.exp(scaled - tc.reduce_max(scaled))
    # top-p: the probability mass ranked before each token (larger, or equal and lower index)
    before = tc.zeros((K,), tc.f32)
    for r in range(top_k):
        value_r = tc.reduce_max(tc.where(rank == r, values, NEG_INF))
        index_r = tc.reduce_max(tc.where(rank == r, indices, -2 - K))
        weight_r = tc.reduce_sum(tc.where(rank == r, weights, 0.0))
        ahead = (value_r > values) | ((value_r == values) & (index_r < indices))
        before = before + tc.where(ahead, weight_r, 0.0)
    keep = active & (before < top_p * tc.reduce_sum(weights))
    noise = tc.log(-tc.log(_uniforms_of(seed, first, tc.maximum(indices, 0))))
    choice = tc.argmax(tc.where(keep, scaled - noise, NEG_INF))
    token = tc.reduce_max(tc.where(rank == choice, indices, 0))
    out.store(tc.maximum(token, 0).reshape((1,)))


def _columns(config: dict, vocab: int) -> int:
    return max(4, min(config["cols"], args.pow2(vocab)))  # (four columns per counter)


@autotune(configs=[{"rows": 1, "cols": 4096}, {"rows": 1, "cols": 8192},
                   {"rows": 2, "cols": 4096}, {"rows": 4, "cols": 2048}],
          key=lambda logits, out: (args.pow2(logits.shape[0]), logits.shape[1],
                                   logits.dtype.name),
          kernels=(argmax_rows,), mutates=("out",))
def _launch_argmax(logits: Tensor, out: Output, *, config: dict) -> DeviceOp:
    rows = min(config["rows"], args.pow2(logits.shape[0]))
    return argmax_rows(out.partition((rows,)), logits, C=_columns(config, logits.shape[1]))


#: the chunk sizes of argmax's split schedule (the first: where nothing is timed, e.g. a call
#: with ``out=``). Measured on the H100 (bf16, 151936 columns, 1-8 rows, graph replays): 1024
#: 3.3-3.9 us a call, 2048 3.5-4.0, 4096 4.4-4.9; one program per row 16 us, torch 9-11 us.
SPLIT_CONFIGS = [{"chunk": 1024}, {"chunk": 2048}, {"chunk": 4096}]


def _split_key(logits: Tensor, *_rest: Any, **_named: Any) -> tuple:
    """Both split schedules' tuning key: the logits' rows, columns and dtype."""
    return (logits.shape[0], logits.shape[1], logits.dtype.name)


@autotune(configs=SPLIT_CONFIGS, key=_split_key,
          kernels=(argmax_chunk_maxima, argmax_merge_rows), mutates=("out",))
def _launch_argmax_split(logits: Tensor, out: Output, workspace: Optional[Tensor], *,
                         config: dict) -> DeviceOp:
    chunk = config["chunk"]
    return _split_launches(
        logits, workspace, chunk, "argmax",
        lambda part: argmax_chunk_maxima(part, logits, C=chunk),
        lambda maxima, chunks: argmax_merge_rows(out.partition((1,)), logits, maxima, C=chunk,
                                                 CP=args.pow2(chunks)))


@autotune(configs=SPLIT_CONFIGS, key=_split_key,
          kernels=(gumbel_chunk_maxima, gumbel_merge_rows), mutates=("out",))
def _launch_sample_split(logits: Tensor, offset: Tensor, out: Output,
                         workspace: Optional[Tensor], seed: int, temperature: float, *,
                         config: dict) -> DeviceOp:
    chunk = config["chunk"]
    return _split_launches(
        logits, workspace, chunk, "sample",
        lambda part: gumbel_chunk_maxima(part, logits, offset, seed, temperature, C=chunk),
        lambda maxima, chunks: gumbel_merge_rows(out.partition((1,)), logits, offset, maxima,
                                                 seed, temperature, C=chunk,
                                                 CP=args.pow2(chunks)))


def _split_launches(logits: Tensor, workspace: Optional[Tensor], chunk: int, op: str,
                    stats: Callable[[Any], DeviceOp],
                    merge: Callable[[Tensor, int], DeviceOp]) -> DeviceOp:
    """A split schedule's two launches: ``stats(partition)`` writes the ``(rows, chunks)``
    chunk maxima through the partition, then ``merge(maxima, chunks)`` reads them; the
    maxima live in the lent ``workspace`` (a flat float32 tensor large enough), else in a
    tensor allocated for the call."""
    rows, vocab = logits.shape
    chunks = -(-vocab // chunk)
    if workspace is None:
        maxima = Output(None, (rows, chunks), float32, logits.device, name="chunk maxima",
                        op=op)
        return stats(maxima.partition((1, 1))).then(
            lambda r: merge(maxima.tensor(r.maxima), chunks))
    lent = workspace[:rows * chunks].reshape(rows, chunks)  # (one row: checked by the caller)
    return stats(borrow_mut(lent).partition((1, 1))).then(lambda r: merge(lent, chunks))


def _splits(logits: Tensor) -> bool:
    """Whether ``argmax`` of ``logits`` (and ``sample`` from its whole vocabulary) takes the
    split schedule (module docstring)."""
    rows, vocab = logits.shape
    smallest = min(c["chunk"] for c in SPLIT_CONFIGS)
    return rows <= SPLIT_MAX_ROWS and SPLIT_MIN_VOCAB <= vocab <= SPLIT_MAX_CHUNKS * smallest


def _split_scratch(logits: Tensor) -> int:
    """The float32 values the split schedule's chunk maxima need at most (the smallest
    chunk's count, so that every config the tuner may pick fits)."""
    rows, vocab = logits.shape
    return rows * max(-(-vocab // c["chunk"]) for c in SPLIT_CONFIGS)


@autotune(configs=[{"cols": 4096}, {"cols": 8192}, {"cols": 2048}],
          key=lambda logits, offset, out, seed, temperature, top_k, top_p: (
              logits.shape[1], logits.dtype.name, args.pow2(top_k)),
          kernels=(gumbel_rows, top_k_rows), mutates=("out",))
def _launch_sample(logits: Tensor, offset: Tensor, out: Output, seed: int, temperature: float,
                   top_k: int, top_p: float, *, config: dict) -> DeviceOp:
    vocab = logits.shape[1]
    if top_k == 0:
        return gumbel_rows(out.partition((1,)), logits, offset, seed, temperature,
                           C=_columns(config, vocab))
    k = args.pow2(top_k)
    return top_k_rows(out.partition((1,)), logits, offset, seed, temperature, top_k, top_p,
                      C=_columns(config, vocab), K=k)


def _logits(op: str, logits: Any) -> Tensor:
    logits = args.tensor(op, "logits", logits, LOGIT_DTYPES, rank=2)
    args.nonempty(op, "logits", logits)
    return logits


def _output(op: str, out: Optional[Tensor], logits: Tensor) -> Output:
    return Output(out, (logits.shape[0],), int32, logits.device, name="out", op=op)


def _workspace(op: str, workspace: Any, logits: Tensor) -> Optional[Tensor]:
    """``workspace`` checked to be a float32 tensor on the logits' device and, where the call
    splits, large enough for every config; as one row (or None)."""
    if workspace is None:
        return None
    if not isinstance(workspace, Tensor):
        raise args.fail(op, f"workspace must be a float32 tilesafe tensor, got "
                        f"{type(workspace).__name__}", "allocate it with argmax_workspace("
                        "logits), or leave it out to allocate one per call")
    if workspace.dtype != float32:
        raise args.fail(op, f"workspace has shape {tuple(workspace.shape)} and dtype "
                        f"{workspace.dtype.name}; it must be float32",
                        "allocate it with argmax_workspace(logits)")
    if str(workspace.device) != str(logits.device):
        raise args.fail(op, f"workspace is on {workspace.device}, logits on {logits.device}",
                        f"allocate it with argmax_workspace(logits) (on {logits.device})")
    need = _split_scratch(logits) if _splits(logits) else 0
    if workspace.size < need:
        raise args.fail(op, f"workspace has shape {tuple(workspace.shape)}: it holds "
                        f"{workspace.size} float32 values; this call needs {need}",
                        "allocate it with argmax_workspace(logits) for these logits")
    try:
        return workspace.reshape(workspace.size)
    except ValueError:
        raise args.fail(op, f"workspace of shape {tuple(workspace.shape)} and strides "
                        f"{tuple(workspace.strides)} cannot be viewed as one row",
                        "pass a contiguous tensor (argmax_workspace(logits))") from None


@workspace_accepts_torch
def argmax_workspace(logits: Tensor) -> Any:
    """A float32 scratch tensor (a lazy constructor: ``.sync()`` it) large enough for
    ``argmax(logits, workspace=...)`` whatever chunk size the tuner picks (and for any logits
    of the same shape); with it and ``out=`` a call allocates nothing and records into a CUDA
    graph. At least one element (a call that does not split leaves it unused)."""
    logits = _logits("argmax_workspace", logits)
    return empty((max(1, _split_scratch(logits)),), float32, device=logits.device)


@accepts_torch
def argmax(logits: Tensor, *, out: Optional[Tensor] = None,
           workspace: Optional[Tensor] = None) -> DeviceOp:
    """The index of each row's largest logit (greedy decoding), as ``torch.argmax(logits,
    -1)`` but int32: the first index on ties, the first NaN if a row holds any.

    At most :data:`SPLIT_MAX_ROWS` rows of at least :data:`SPLIT_MIN_VOCAB` logits (a decode
    step) are split into column chunks over two launches, whose chunk maxima go to a scratch
    tensor (the module docstring); other shapes take one launch and no scratch.

    Args:
        logits: ``(rows, vocab)``, float16/bfloat16/float32 (vocab up to 2**31 - 1).
        out: where to write, ``(rows,)`` int32 (default: a new tensor).
        workspace: a float32 tensor on the logits' device for the chunk maxima (from
            :func:`argmax_workspace`), else one is allocated per call where it is needed;
            with it and ``out`` the call allocates nothing, so it records into a
            ``ts.CudaGraph``. It must not share memory with ``logits`` or ``out`` (refused
            before anything runs).

    Returns:
        A DeviceOp whose result is the ``(rows,)`` int32 token ids.

    Raises:
        ArgumentError: logits not a non-empty 2-D float tensor, an ``out`` of another
            shape, dtype or device, or a ``workspace`` that is not float32, is on another
            device or is smaller than the call needs.
        AliasingError: a ``workspace`` sharing memory with ``logits`` or ``out``.
    """
    op = "argmax"
    logits = _logits(op, logits)
    workspace = _workspace(op, workspace, logits)
    result = _output(op, out, logits)
    check_disjoint(op, {"workspace": workspace, "out": out}, {"logits": logits})
    return _greedy(logits, result, workspace).then(lambda r: result.tensor(r.out))


def _greedy(logits: Tensor, result: Output, workspace: Optional[Tensor]) -> DeviceOp:
    """``argmax``'s launches: split where :func:`_splits` says, else one program per row."""
    if _splits(logits):
        return _launch_argmax_split(logits, result, workspace)
    return _launch_argmax(logits, result)


@accepts_torch
def sample(logits: Tensor, *, temperature: float, top_k: int = 0, top_p: float = 1.0,
           seed: int, offset: Union[int, Tensor], out: Optional[Tensor] = None,
           workspace: Optional[Tensor] = None) -> DeviceOp:
    """Draw one token per row from ``softmax(logits / temperature)``, restricted to the
    ``top_k`` largest logits and then to the smallest prefix of them holding ``top_p`` of the
    probability (transformers' temperature, top-k, top-p warpers, in that order). The draw is
    a function of (seed, offset): the same arguments give the same tokens on every device.

    Args:
        logits: ``(rows, vocab)``, float16/bfloat16/float32.
        temperature: ``0`` for greedy (``argmax``), else a positive divisor of the logits.
        top_k: ``0`` for no top-k, else ``1..MAX_TOP_K`` (clamped to ``vocab``).
        top_p: in ``(0, 1]``; below 1 it needs ``top_k > 0``.
        seed: the Philox key (an int; 0 <= seed < 2**32).
        offset: the first random stream: row ``r`` uses stream ``offset + r`` (an int >= 0,
            or a ``(1,)`` int64 tensor on the device, which a CUDA graph replay reads anew).
        out: where to write, ``(rows,)`` int32 (default: a new tensor).
        workspace: as :func:`argmax`'s (from :func:`argmax_workspace`): the chunk maxima of
            the split schedule that greedy and full-vocabulary draws of few rows take (the
            noisy logits' maxima per chunk, then the winning chunk drawn again: the same
            token as one program per row with chunks of the same width).

    Returns:
        A DeviceOp whose result is the ``(rows,)`` int32 token ids.

    Raises:
        ArgumentError: logits not a non-empty 2-D float tensor; an option out of range (the
            message says which); an ``offset`` tensor that is not ``(1,)`` int64 on the
            logits' device; an ``out`` of another shape, dtype or device; a ``workspace``
            as :func:`argmax` refuses it.
        AliasingError: a ``workspace`` sharing memory with ``logits`` or ``out``.
    """
    op = "sample"
    logits = _logits(op, logits)
    temperature, top_p = float(temperature), float(top_p)
    check_options(temperature, top_k, top_p, seed)
    workspace = _workspace(op, workspace, logits)
    result = _output(op, out, logits)
    check_disjoint(op, {"workspace": workspace, "out": out}, {"logits": logits})
    if temperature == 0:
        return _greedy(logits, result, workspace).then(lambda r: result.tensor(r.out))
    offset = _offset(op, offset, logits)
    top_k = min(int(top_k), logits.shape[1])
    if top_k == 0 and _splits(logits):
        if not isinstance(offset, Tensor):  # (an int's tensor, read by both launches)
            offset = offset.sync()
        launched = _launch_sample_split(logits, offset, result, workspace, int(seed),
                                        temperature)
    else:
        launched = _launch_sample(logits, offset, result, int(seed), temperature, top_k, top_p)
    return launched.then(lambda r: result.tensor(r.out))


def check_options(temperature: float, top_k: int, top_p: float, seed: int) -> None:
    """ArgumentError unless ``sample``'s options are in range (its docstring), e.g. before
    an engine records them into a decode step."""
    op = "sample"
    temperature, top_p = float(temperature), float(top_p)
    if not (temperature >= 0 and np.isfinite(temperature)):
        raise args.fail(op, f"temperature={temperature} must be >= 0 and finite",
                        "pass 0 for greedy decoding or a positive temperature")
    if not isinstance(top_k, (int, np.integer)) or not 0 <= top_k <= MAX_TOP_K:
        raise args.fail(op, f"top_k={top_k!r} must be an int in [0, {MAX_TOP_K}]",
                        f"pass 0 (no top-k) or at most {MAX_TOP_K}")
    if not 0 < top_p <= 1:
        raise args.fail(op, f"top_p={top_p} must be in (0, 1]", "pass 1.0 for no top-p")
    if top_p < 1 and top_k == 0:
        raise args.fail(op, f"top_p={top_p} needs top_k > 0 (top-p is applied to the top-k "
                        "tokens)", f"pass a top_k too (at most {MAX_TOP_K}), e.g. top_k=64")
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise args.fail(op, f"seed={seed!r} must be an int in [0, 2**32)",
                        "pass a non-negative 32-bit seed")


def _offset(op: str, offset: Any, logits: Tensor) -> Any:
    if isinstance(offset, Tensor):
        args.tensor(op, "offset", offset, ("int64",), rank=1)
        args.same_device(op, [("logits", logits), ("offset", offset)])
        if offset.shape != (1,):
            raise args.fail(op, f"offset has shape {tuple(offset.shape)}; it must be (1,)",
                            "pass a one-element int64 tensor")
        return offset
    if not isinstance(offset, (int, np.integer)) or offset < 0 or offset >= 2**62:
        raise args.fail(op, f"offset={offset!r} must be an int in [0, 2**62) or a (1,) int64 "
                        "tensor", "pass the step's first random stream")
    return host_tensor(np.array([offset], np.int64), device=logits.device)
