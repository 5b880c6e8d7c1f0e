"""Experiment kernels: ``gemv_rows`` with the activation row loaded without TMA (so the TMA
producer only streams the weight), for the weight-before-the-grid-dependency-wait trial."""
import tilesafe.core as tc
from tilesafe.kernel import kernel
from tilesafe.kernels.gemv import _store_sum


@kernel
def gemv_rows_plain_x(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, -1)],
                      w: tc.Tensor["T", (-1, -1)], BK: tc.Const[int], ACC: tc.Const[bool]):
    """gemv_rows with x's chunks loaded by the consumer warps (allow_tma=False)."""
    _, j, _ = tc.get_tile_block_id()
    px, pw = x.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        acc = acc + pw.load((j, k)).astype(tc.f32) * px.load((0, k), allow_tma=False).astype(tc.f32)
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)


@kernel
def gemv_rows_x_first(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, -1)],
                      w: tc.Tensor["T", (-1, -1)], BK: tc.Const[int], KP: tc.Const[int],
                      ACC: tc.Const[bool]):
    """gemv_rows with the whole row of x (1, KP) loaded first and the K loop unrolled (static
    slices of the row), so the loop's weight loads depend on nothing the wait gates."""
    _, j, _ = tc.get_tile_block_id()
    row = x.partition((1, KP)).load((0, 0), padding=0).astype(tc.f32)
    pw = w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in CHUNKS:
        acc = acc + pw.load((j, k)).astype(tc.f32) * row[:, k * BK:(k + 1) * BK]
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)


@kernel
def gemv_rows_x_held(z: tc.MutTensor["TO", (1, "BN")], xs: tc.Tensor["T", (-1, -1)],
                     w: tc.Tensor["T", (-1, -1)], BK: tc.Const[int], KC: tc.Const[int],
                     ACC: tc.Const[bool]):
    """gemv_rows with the row x loaded whole before the loop, as a (KC, BK) tile of its
    (K / BK, BK) view ``xs``, and each chunk taken from it in registers (a select and a sum
    over the KC rows): the loop itself loads only the weight."""
    _, j, _ = tc.get_tile_block_id()
    held = xs.partition((KC, BK)).load((0, 0), padding=0, allow_tma=False).astype(tc.f32)
    rows = tc.arange(KC, tc.i32).reshape((KC, 1))
    pw = w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        chunk = tc.where(rows == k, held, 0.0).sum(0).reshape((1, BK))
        acc = acc + pw.load((j, k)).astype(tc.f32) * chunk
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)


@kernel
def gemv_rows_x_held_early(z: tc.MutTensor["TO", (1, "BN")], xs: tc.Tensor["T", (-1, -1)],
                           w_early: tc.Tensor["T", (-1, -1)], BK: tc.Const[int],
                           KC: tc.Const[int], ACC: tc.Const[bool]):
    """gemv_rows_x_held, its weight parameter named for the trial's lowering switch
    (``TS_EARLY=w_early``: the weight's loads do not wait for the predecessor)."""
    _, j, _ = tc.get_tile_block_id()
    held = xs.partition((KC, BK)).load((0, 0), padding=0, allow_tma=False).astype(tc.f32)
    rows = tc.arange(KC, tc.i32).reshape((KC, 1))
    pw = w_early.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        chunk = tc.where(rows == k, held, 0.0).sum(0).reshape((1, BK))
        acc = acc + pw.load((j, k)).astype(tc.f32) * chunk
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)
