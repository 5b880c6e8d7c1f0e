"""The skinny path of ``matmul``: ``out = a @ b`` for M = 1-16 rows (a decode step's linear
layers), where the weight is read once and the time is the weight's bytes over the memory
bandwidth.

Each program owns a block of ``BN`` output columns for all M rows and loops over K in chunks of
``BK``; the weight tile is the only large read. Two inner products, chosen by M:

* M = 1 (f16/bf16): elementwise multiply into an f32 ``(BN, BK)`` accumulator, reduced over K
  once at the end. One conversion and one FMA per weight element keeps the f32 pipes at a
  small fraction of their rate at HBM speed, and nothing is padded.
* M = 2-16 (and the 8-bit floats at any M <= 16): ``mma`` with the rows padded to 16 on load
  (zeros, which add nothing). Elementwise work would grow with M up to the whole f32 rate at
  M = 16, while the tensor cores do the padded product for free next to the memory time.

At M = 1 the default is ``gemv_rows``: the 2-D operands, one program per ``BN`` columns over
all of K, writing the output directly (one launch). The 3-D stacked form below with a single
slice compiles on sm_90 to code that streams 10-20x slower (0.13 against 2.8 TB/s for a
151936 x 1024 weight on the H100), so the stacked kernels always take ``S >= 2`` slices
where K allows it, more when ``N / BN`` programs are too few to keep every SM streaming.

Split-K: the operands are viewed as ``(S, ...)`` stacks of K-slices (views, no copies, so
each slice's edge tile is padded within the slice), program ``(s, j)`` writes its f32 partial
product into row block ``s`` of a workspace, and a second launch sums the slices (and applies
the scales of ``scaled_matmul``) into the output, loading every slice's tile at once (one
round trip to memory, not one per slice). Where K allows no split (``S = 1``) the first
launch writes the output directly.

``gemv_rows_silu_mul`` is ``gemv_rows`` of SwiGLU's gated activations: each program computes
``silu(gate) * up`` for the K chunk it multiplies (rounded as ``silu_mul`` rounds), so the
activations are never stored and their launch disappears (``kernels.matmul.silu_mul_matmul``).
``gemv_rows_normed`` likewise normalizes its row (RMSNorm) as it streams the weight
(``kernels.matmul.rms_norm_matmul``).

An :class:`AccumulatingOutput` (a residual connection, ``out += a @ b``) is summed into by the
launch that writes it (``ACC``), ``gemv_rows``, the one-slice ``gemv`` or the merge: the
product is rounded to the output's dtype, then added and rounded again, as a torch add of the
written product would be.

May import the host and device languages, ``errors``, ``autotune``, ``kernels._rowwise``
(kernel variants by hints), ``kernels.activations`` (the gate's device function) and
``kernels.norms`` (the normalization's device functions); knows nothing of the public
functions in ``kernels.matmul``.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import tilesafe.core as tc

from ..kernel import function as _device_function, kernel as _make_kernel
from ..autotune import autotune
from ..dtypes import DType, float32
from .._callsite import caller_location
from ..errors import ArgumentError
from ._outputs import Output
from ._rowwise import WarpVariants
from .activations import silu_gated
from .norms import _rms_apply, _rms_scale

#: SMs of the GPU the split-K choice plans for (an H100 SXM)
SM_COUNT = 132
#: rows of the mma path's tiles (the rows of a padded to this many)
MMA_ROWS = 16
#: the most columns per program of the merge launch
MERGE_COLUMNS = 128
#: the most float32 values one merge program loads (all its slices' tiles at once)
MERGE_VALUES = 4096
#: the fewest K-slices wherever K allows them (module docstring)
MIN_SLICES = 2


# -- device code --------------------------------------------------------------------------------

@_device_function
def _slice_product(a, b, s, j, BM, BN, BK):
    """f32 ``(BM, BN)``: rows ``0..BM`` of K-slice ``s`` of ``a`` (S, M, Ks) times column tile
    ``j`` of slice ``s`` of ``b`` (S, Ks, N)."""
    pa, pb = a.partition((1, BM, BK)), b.partition((1, BK, BN))
    acc = tc.zeros((BM, BN), tc.f32)
    for k in range(tc.num_tiles(pa, 2)):
        acc = tc.mma(pa.load((s, 0, k)).reshape((BM, BK)),
                     pb.load((s, k, j)).reshape((BK, BN)), acc)
    return acc


@_device_function
def _slice_dot(x, w, s, j, BN, BK):
    """f32 ``(1, BN)``: the one row of K-slice ``s`` of ``x`` (S, 1, Ks) against rows
    ``j*BN..`` of slice ``s`` of the weight ``w`` (S, N, Ks), elementwise."""
    px, pw = x.partition((1, 1, BK)), w.partition((1, BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 2)):
        row = px.load((s, 0, k)).reshape((1, BK)).astype(tc.f32)
        acc = acc + pw.load((s, j, k)).reshape((BN, BK)).astype(tc.f32) * row
    return acc.sum(1).reshape((1, BN))


@_device_function
def _store_sum(z, total, ACC):
    """Store the f32 tile ``total`` into ``z`` rounded to its dtype; with ``ACC``, add it to
    the values ``z`` holds: ``round(z + round(total))``, the rounding of a product written
    out and then added by a torch add (a residual connection)."""
    result = total.astype(z.dtype)
    if ACC:
        result = (z.load().astype(tc.f32) + result.astype(tc.f32)).astype(z.dtype)
    z.store(result)


@_device_function
def scale_product(scale_a, scale_b):
    """The product of the two per-tensor scales, as a (1, 1) f32 tile."""
    one = (1,)
    return (scale_a.partition(one).load((0,)) * scale_b.partition(one).load((0,))).reshape((1, 1))


@_make_kernel(examples=[{"T": tc.f16, "TO": tc.f16, "BM": 16, "BN": 64, "BK": 256}])
def skinny_mma(z: tc.MutTensor["TO", ("BM", "BN")], a: tc.Tensor["T", (-1, -1, -1)],
               b: tc.Tensor["T", (-1, -1, -1)], BK: tc.Const[int]):
    s, j, _ = tc.get_tile_block_id()
    z.store(_slice_product(a, b, s, j, BM, BN, BK).astype(z.dtype))


@_make_kernel(examples=[{"T": tc.f8e4m3fn, "TO": tc.bf16, "BM": 16, "BN": 64, "BK": 256}])
def skinny_mma_scaled(z: tc.MutTensor["TO", ("BM", "BN")], a: tc.Tensor["T", (-1, -1, -1)],
                      b: tc.Tensor["T", (-1, -1, -1)], scale_a: tc.Tensor[tc.f32, (1,)],
                      scale_b: tc.Tensor[tc.f32, (1,)], BK: tc.Const[int]):
    s, j, _ = tc.get_tile_block_id()
    acc = _slice_product(a, b, s, j, BM, BN, BK)
    z.store((acc * scale_product(scale_a, scale_b)).astype(z.dtype))


@_make_kernel(examples=[{"T": tc.bf16, "TO": tc.bf16, "BN": 32, "BK": 256, "ACC": False}])
def gemv(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, 1, -1)],
         w: tc.Tensor["T", (-1, -1, -1)], BK: tc.Const[int], ACC: tc.Const[bool]):
    s, j, _ = tc.get_tile_block_id()
    _store_sum(z, _slice_dot(x, w, s, j, BN, BK), ACC)


@_make_kernel(examples=[{"T": tc.bf16, "TO": tc.bf16, "BN": 16, "BK": 512, "ACC": False}])
def gemv_rows(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, -1)],
              w: tc.Tensor["T", (-1, -1)], BK: tc.Const[int], ACC: tc.Const[bool]):
    """``z`` = rows ``j*BN..`` of the weight ``w`` (N, K) times the one row of ``x`` (1, K),
    elementwise into an f32 (BN, BK) accumulator reduced once at the end (no split); with
    ``ACC`` added to ``z`` (``_store_sum``)."""
    _, j, _ = tc.get_tile_block_id()
    px, pw = x.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        acc = acc + pw.load((j, k)).astype(tc.f32) * px.load((0, k)).astype(tc.f32)
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)


@_make_kernel(examples=[{"T": tc.bf16, "TO": tc.bf16, "BN": 16, "BK": 512, "ACC": False}])
def gemv_rows_silu_mul(z: tc.MutTensor["TO", (1, "BN")], gate: tc.Tensor["T", (-1, -1)],
                       up: tc.Tensor["T", (-1, -1)], w: tc.Tensor["T", (-1, -1)],
                       BK: tc.Const[int], ACC: tc.Const[bool]):
    """``gemv_rows`` with the row ``x = round(round(silu(gate)) * up)`` computed per K chunk
    from the gate and up rows (1, K) instead of read: bit-equal to ``silu_mul`` then
    ``gemv_rows`` with the same tiles (and ``ACC`` as there)."""
    _, j, _ = tc.get_tile_block_id()
    pg, pu, pw = gate.partition((1, BK)), up.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        x = silu_gated(pg.load((0, k)), pu.load((0, k)))
        acc = acc + pw.load((j, k)).astype(tc.f32) * x.astype(tc.f32)
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)


@_make_kernel(examples=[{"T": tc.bf16, "TO": tc.bf16, "BN": 16, "BK": 512, "KP": 4096,
                         "WEIGHTED": True}])
def gemv_rows_normed(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, -1)],
                     norm: tc.Tensor["T", (-1,)], w: tc.Tensor["T", (-1, -1)],
                     hidden: float, eps: float, BK: tc.Const[int], KP: tc.Const[int],
                     WEIGHTED: tc.Const[bool]):
    """``gemv_rows`` of the RMS-normalized row: each program first takes the mean square of
    the whole row of ``x`` (1, K) as one (1, KP) tile padded with zeros, exactly as
    ``rms_norm`` does, then normalizes each K chunk as the weight streams by (rounded as
    ``rms_norm`` rounds), so the normalized row is never stored and its launch is gone.
    ``WEIGHTED``: times the norm's weight ``norm`` (K,), gathered per chunk (plain cached
    loads: as a third tile load beside the weight's and the row's it slowed the weight's
    stream by 15-20% on the H100, and gathered still by about 2 us at 6144 x 2560); else a
    unit weight, ``norm`` unread (a projection whose weight holds the norm's)."""
    _, j, _ = tc.get_tile_block_id()
    row = x.partition((1, KP)).load((0, 0), padding=0).astype(tc.f32)
    scale = _rms_scale(row, 1, hidden, eps)
    px, pw = x.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        chunk = px.load((0, k))
        if WEIGHTED:
            columns = (k * BK + tc.arange(BK, tc.i32)).reshape((1, BK))
            weight = tc.gather(norm, columns, padding=0)
            normed = _rms_apply(chunk.astype(tc.f32), scale, weight, chunk.dtype)
        else:
            normed = (chunk.astype(tc.f32) * scale).astype(chunk.dtype)
        acc = acc + pw.load((j, k)).astype(tc.f32) * normed.astype(tc.f32)
    z.store(acc.sum(1).reshape((1, BN)).astype(z.dtype))


@_make_kernel(examples=[{"TO": tc.f16, "BM": 16, "BN": MERGE_COLUMNS, "SP": 4, "ACC": False}])
def merge_slices(z: tc.MutTensor["TO", ("BM", "BN")], parts: tc.Tensor[tc.f32, (-1, -1, -1)],
                 SP: tc.Const[int], ACC: tc.Const[bool]):
    i, j, _ = tc.get_tile_block_id()
    tiles = parts.partition((SP, BM, BN), padding=0.0)  # every slice in one load
    _store_sum(z, tc.reduce_sum(tiles.load((0, i, j)), 0), ACC)


@_make_kernel(examples=[{"TO": tc.bf16, "BM": 16, "BN": MERGE_COLUMNS, "SP": 4}])
def merge_slices_scaled(z: tc.MutTensor["TO", ("BM", "BN")],
                        parts: tc.Tensor[tc.f32, (-1, -1, -1)],
                        scale_a: tc.Tensor[tc.f32, (1,)], scale_b: tc.Tensor[tc.f32, (1,)],
                        SP: tc.Const[int]):
    i, j, _ = tc.get_tile_block_id()
    tiles = parts.partition((SP, BM, BN), padding=0.0)
    acc = tc.reduce_sum(tiles.load((0, i, j)), 0)
    z.store((acc * scale_product(scale_a, scale_b)).astype(z.dtype))


# -- planning -----------------------------------------------------------------------------------

def slices(n: int, k: int, bn: int, bk: int, waves: int, rows: int = 1) -> int:
    """How many K-slices: the smallest power of two, at least 2 (module docstring), giving at
    least ``waves`` programs per SM (``ceil(n / bn)`` column blocks per slice), as long as
    each slice still holds a whole ``bk`` chunk and starts 16-element aligned (``k``
    divisible by ``16 * slices``) and the merge's tile of every slice's ``rows`` x 16 values
    stays within :data:`MERGE_VALUES`; 1 when ``k`` does not allow a split."""
    blocks = -(-n // bn)
    count = 1
    while count < MIN_SLICES or blocks * count < waves * SM_COUNT:
        nxt = count * 2
        if k % (16 * nxt) or k // nxt < bk or nxt * rows * 16 > MERGE_VALUES:
            break
        count = nxt
    return count


def _k_slices(t: Any, count: int) -> Any:
    """``t`` (R, K) viewed as its ``count`` K-slices, (count, R, K / count); no copy."""
    rows, k = t.shape
    return t.reshape(rows, count, k // count).permute(1, 0, 2)


def _slices_kn(b_kn: Any, count: int) -> Any:
    """``b_kn`` (K, N) viewed as (count, K / count, N); no copy."""
    k, n = b_kn.shape
    return b_kn.reshape(count, k // count, n)


def writes_directly(config: dict) -> bool:
    """Whether an M = 1 config is the one-launch ``gemv_rows`` (no split, no merge)."""
    return config.get("slices") == 1


def workspace_size(m: int, n: int, k: int, itemsize: int) -> int:
    """The float32 values the skinny path's split-K may need for an (m, k) x (k, n) product,
    whatever config the tuner picks (0 when m > 16: the other paths need none)."""
    if m > MMA_ROWS:
        return 0
    most = 0
    for configs, rows in ((GEMV_CONFIGS, 1), (SKINNY_CONFIGS, MMA_ROWS)):
        for config in configs:
            if writes_directly(config):
                continue
            bk = int(config["BK"]) * max(1, 2 // itemsize)
            count = slices(n, k, int(config["BN"]), bk, int(config["waves"]), rows)
            if count > 1:
                most = max(most, count * rows * n)
    return most


def m_bucket(m: int) -> int:
    """The power of two at or above ``m``: rows that share a tuned config."""
    return 1 << max(0, int(m) - 1).bit_length()


def problem_key(a: Any, b_kn: Any, out: Any, scale_a: Any, scale_b: Any) -> tuple:
    """The autotune key of every matmul launch: (M bucket, N, K, dtype, scaled), and
    ``"fast accumulation"`` after them where the output asks for it (``Output``)."""
    fast = ("fast accumulation",) if getattr(out, "fast_accumulation", False) else ()
    return (m_bucket(a.shape[0]), b_kn.shape[1], a.shape[1], a.dtype.name,
            scale_a is not None) + fast


#: (BN, BK, waves[, occupancy][, slices]): columns per program, K chunk, programs per SM wanted
#: before splitting K further, the kernel's occupancy hint, and ``"slices": 1`` for the M = 1
#: kernel of 2-D operands with no split (``gemv_rows``) (CTAs per SM tileiras plans registers
#: for; without it sm_90 code takes 255 registers a thread and one or two CTAs per SM)
SKINNY_CONFIGS = (  # (the H100, bf16 16 x 4096 x 4096: 0.64 of the copy rate first, 0.54 next)
    {"BN": 64, "BK": 256, "waves": 1},
    {"BN": 64, "BK": 256, "waves": 2},
    {"BN": 32, "BK": 256, "waves": 2},
    {"BN": 64, "BK": 128, "waves": 4},
    {"BN": 128, "BK": 128, "waves": 2},
    {"BN": 32, "BK": 512, "waves": 2},
    {"BN": 64, "BK": 128, "waves": 2, "occupancy": 2},
)
# (the H100, bf16, two slices: 64/128 with occupancy 2 streams a 151936 x 1024 weight at 2.83
# TB/s and 151936 x 2560 at 3.01, torch's cuBLAS 2.80 and 2.86; 32/256 with occupancy 2 or 4
# leads on the small layers, 1.2 TB/s at 3072 x 1024, 2.0-3.0 at 9728 x 2560 and 4096^2)
# The 2-D kernel with no split (``"slices": 1``) streams as fast as two slices or faster at
# every decode shape measured (H100, bf16, 16/512 with occupancy 2: 3.06 TB/s at 151936 x 2560,
# 2.58 at 19456 x 2560, 2.33 at 6144 x 2560, 2.47 at 2560 x 4096, 2.39 at 2560 x 9728) and
# needs no merge launch; split-K stays a config for few, long rows.
GEMV_CONFIGS = (
    {"BN": 16, "BK": 512, "slices": 1, "occupancy": 2},
    {"BN": 32, "BK": 256, "slices": 1, "occupancy": 2},
    {"BN": 64, "BK": 128, "slices": 1, "occupancy": 2},
    {"BN": 32, "BK": 256, "slices": 1},
    {"BN": 16, "BK": 512, "slices": 1, "occupancy": 4},
    {"BN": 8, "BK": 1024, "slices": 1, "occupancy": 2},
    {"BN": 8, "BK": 1024, "slices": 1, "occupancy": 4},
    {"BN": 8, "BK": 512, "slices": 1, "occupancy": 4},
    {"BN": 32, "BK": 256, "waves": 2, "occupancy": 2},
    {"BN": 64, "BK": 128, "waves": 2, "occupancy": 2},
    # tileiras sizes the weight's TMA pipeline from the occupancy hint and the chunk's bytes:
    # at occupancy 4 a chunk of 8 KB or more gets one buffer, so every chunk waits a whole
    # memory latency, while these two keep about five chunks in flight (shared memory read
    # from the sm_90 cubins). On an H200, streaming from HBM inside the recorded 4b step, the
    # first made the q/k/v and gate/up GEMVs 9% faster than 64 x 128 / 16 x 512 at occupancy
    # 4 (+6% tokens/s); the tuner, timing with the weight in L2 where it fits, cannot see this
    # (benchmarks/results/h200-2026-12-01/gemv_stages/).
    {"BN": 16, "BK": 256, "slices": 1, "occupancy": 3},
    {"BN": 8, "BK": 256, "slices": 1, "occupancy": 4},
)

_VARIANTS: dict = {}


def with_occupancy(kern: Any, config: dict) -> Any:
    """``kern``, or its variant compiled with the config's occupancy hint (no hint when the
    config has none) and, for ``"programmatic": False``, without the grid-dependency wait (so
    launched only once its predecessor has finished), made once by the row-wise kernels'
    :class:`WarpVariants`."""
    variants = _VARIANTS.get(kern.name)
    if variants is None:
        variants = _VARIANTS[kern.name] = WarpVariants(kern)
    return variants.pick((1,), {"warps": 4, "occupancy": config.get("occupancy", 0),
                                "programmatic": config.get("programmatic", True)})


class AccumulatingOutput(Output):
    """An output the product is added to (``out += a @ b``, the caller's tensor, read and
    written in place), not written over. Its tuner's timing runs add into a clone, never
    into the caller's tensor."""

    def tuning_copy(self) -> "AccumulatingOutput":
        """A copy over a clone of the tensor, for the tuner's timing runs."""
        duplicate = copy.copy(self)
        duplicate.value = self.value.clone().sync()
        return duplicate


def accumulates(out: Output) -> bool:
    """Whether the launches add the product to ``out`` (an :class:`AccumulatingOutput`)."""
    return isinstance(out, AccumulatingOutput)


def _merge(parts_op: Any, workspace: Output, out: Output, rows: int, count: int, n: int,
           scales: Optional[tuple]) -> Any:
    """The second launch: the ``count`` slices of the workspace summed into ``out``."""
    columns = min(MERGE_COLUMNS, max(16, MERGE_VALUES // (count * rows)))

    def merge(result: Any) -> Any:
        parts = workspace.tensor(result.z).reshape(count, rows, n)
        target = out.partition((rows, columns))
        if scales is None:
            return merge_slices(target, parts, SP=count, ACC=accumulates(out))
        return merge_slices_scaled(target, parts, *scales, SP=count)
    return parts_op.then(merge)


def launches(a: Any, b_kn: Any, out: Output, scales: Optional[tuple], config: dict, *,
             elementwise: bool) -> Any:
    """The skinny path's launches for ``a`` (M, K) with M <= 16, ``b_kn`` a (K, N) tensor (a
    view of the weight), ``out`` the call's :class:`~tilesafe.kernels._outputs.Output` (M, N),
    ``scales`` None or the two (1,) f32 scale tensors, ``elementwise`` for the M = 1 GEMV
    (else mma): a DeviceOp whose result is the last launch's named tuple (``.z``: the output's
    partition). ``config["BK"]`` counts 16-bit elements: the 8-bit floats take twice as many,
    the same bytes. An accumulating ``out`` is added to by the elementwise path only."""
    m, k = a.shape
    n = b_kn.shape[1]
    bn, bk = int(config["BN"]), int(config["BK"]) * max(1, 2 // a.dtype.itemsize)
    if accumulates(out) and not elementwise:
        raise ArgumentError("matmul: only the one-row GEMV adds into its output",
                            caller_location(), hint="add the product with a second launch")
    if elementwise and writes_directly(config):  # one launch, straight into the output
        return with_occupancy(gemv_rows, config)(out.partition((1, bn)), a, b_kn.T, BK=bk,
                                                 ACC=accumulates(out))
    rows = 1 if elementwise else MMA_ROWS
    count = slices(n, k, bn, bk, int(config["waves"]), rows)
    # the workspace is an output of the call: allocated by torch for a call with torch tensors
    # (so that a torch graph capture holds it), else lazily by tilesafe
    lent = getattr(out, "workspace", None)
    if count == 1:
        workspace = out
    elif lent is not None:  # the caller's scratch (matmul(..., workspace=)): no allocation
        need = count * rows * n
        if lent.size < need:
            raise ArgumentError(f"matmul: workspace holds {lent.size} float32 values; this "
                                f"call needs {need}", caller_location(),
                                hint="allocate it with matmul_workspace(a, b) for these "
                                "operands")
        workspace = Output(lent.reshape(lent.size)[:need].reshape(count * rows, n),
                           (count * rows, n), float32, a.device, name="workspace", op="matmul")
    else:
        workspace = Output(None, (count * rows, n), float32, a.device, name="workspace",
                           op="matmul")
    target = workspace.partition((rows, bn))
    a_slices = _k_slices(a, count)
    if elementwise:
        op = with_occupancy(gemv, config)(target, a_slices, _k_slices(b_kn.T, count), BK=bk,
                                          ACC=count == 1 and accumulates(out))
    elif scales is None or count > 1:
        op = with_occupancy(skinny_mma, config)(target, a_slices, _slices_kn(b_kn, count),
                                                BK=bk)
    else:
        op = with_occupancy(skinny_mma_scaled, config)(target, a_slices,
                                                       _slices_kn(b_kn, count), *scales, BK=bk)
    if count == 1:
        return op
    return _merge(op, workspace, out, rows, count, n, scales)


@autotune(configs=SKINNY_CONFIGS, key=problem_key, kernels=(skinny_mma, skinny_mma_scaled,
                                                           merge_slices, merge_slices_scaled),
          name="tilesafe.kernels.matmul.skinny")
def launch_skinny(a: Any, b_kn: Any, out: Any, scale_a: Any, scale_b: Any, *,
                  config: dict) -> Any:
    """M = 2-16 (any M <= 16 for the 8-bit floats): the mma path (see :func:`launches`)."""
    scales = None if scale_a is None else (scale_a, scale_b)
    return launches(a, b_kn, out, scales, config, elementwise=False)


@autotune(configs=GEMV_CONFIGS, key=problem_key, kernels=(gemv_rows, gemv, merge_slices),
          name="tilesafe.kernels.matmul.gemv")
def launch_gemv(a: Any, b_kn: Any, out: Any, scale_a: Any, scale_b: Any, *,
                config: dict) -> Any:
    """M = 1, f16/bf16: the elementwise path (see :func:`launches`)."""
    return launches(a, b_kn, out, None, config, elementwise=True)


def uses_gemv(m: int, dtype: DType, scaled: bool) -> bool:
    """Whether ``m`` rows of ``dtype`` take the elementwise M = 1 path."""
    return m == 1 and not scaled and dtype.name in ("float16", "bfloat16")
