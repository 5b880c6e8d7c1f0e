import tilesafe.core as tc
from tilesafe.kernel import kernel, function
from tilesafe.kernels.gemv import _store_sum
LOG2E = 1.4426950408889634

@function
def fast_silu_gated(g, u):
    gf = g.astype(tc.f32)
    a = tc.exp2(-tc.abs(gf) * LOG2E, flush_to_zero=True)
    act = tc.truediv(tc.where(gf < 0.0, gf * a, gf), 1.0 + a, rounding="approx", flush_to_zero=True)
    return (act.astype(g.dtype).astype(tc.f32) * u.astype(tc.f32)).astype(g.dtype)

@kernel
def fast_gemv_rows_silu_mul(z: tc.MutTensor["TO", (1, "BN")], gate: tc.Tensor["T", (-1, -1)],
                            up: tc.Tensor["T", (-1, -1)], w: tc.Tensor["T", (-1, -1)],
                            BK: tc.Const[int], ACC: tc.Const[bool]):
    _, j, _ = tc.get_tile_block_id()
    pg, pu, pw = gate.partition((1, BK)), up.partition((1, BK)), w.partition((BN, BK))
    acc = tc.zeros((BN, BK), tc.f32)
    for k in range(tc.num_tiles(pw, 1)):
        x = fast_silu_gated(pg.load((0, k)), pu.load((0, k)))
        acc = acc + pw.load((j, k)).astype(tc.f32) * x.astype(tc.f32)
    _store_sum(z, acc.sum(1).reshape((1, BN)), ACC)
