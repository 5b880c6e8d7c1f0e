"""The prefill kernel with lazy rescaling: the running maximum a block's exponentials are taken
against moves (and the accumulator and sum are rescaled) only when some row's maximum grew by
more than ``GROWTH`` (base-2 units) or is NaN; otherwise the stale maximum stays, so every
exponential is at most 2**GROWTH. The output ``acc / total`` does not depend on which
maximum is used (up to rounding)."""
import tilesafe.core as tc
from tilesafe.kernel import function, kernel

@function
def lazy_step(s, scale, values, index, best, total, acc, growth_limit):
    row_best = tc.maximum(best, tc.reduce_max(s, 1, keepdims=True) * scale)
    growth = tc.reduce_max(row_best - best, 0).reshape(())
    if not (growth <= growth_limit):
        alpha = tc.exp2(best - row_best, flush_to_zero=True)
        acc = acc * alpha
        total = total * alpha
        best = row_best
    p = tc.exp2(tc.fma(s, scale, -best), flush_to_zero=True)
    total = total + tc.reduce_sum(p, 1, keepdims=True)
    vt = values.load(index).reshape((s.shape[1], acc.shape[1]))
    acc = tc.mma(p.astype(vt.dtype), vt, acc)
    return total, acc, best


@kernel
def lazy_flash_kernel(o: tc.MutTensor["T", (1, "BM", "D")],
                      q: tc.Tensor["T", (-1, -1, "D")], k: tc.Tensor["T", (-1, -1, "D")],
                      v: tc.Tensor["T", (-1, -1, "D")], qk_scale: float, q_heads: int,
                      kv_heads: int, BN: tc.Const[int], CAUSAL: tc.Const[bool],
                      GROWTH: tc.Const[float]):
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
        total, acc, best = lazy_step(s, qk_scale, values, (kv_head, j, 0), best, total, acc,
                                      GROWTH)
    rows = (tc.arange(BM) + (first_row + offset)).reshape((BM, 1))
    for j in range(unmasked_end, end):
        kt = keys.load((kv_head, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32))
        cols = (tc.arange(BN) + j * BN).reshape((1, BN))
        visible = cols < seq_kv
        if CAUSAL:
            visible = visible & (cols <= rows)
        s = tc.where(visible, s, float("-inf"))
        total, acc, best = lazy_step(s, qk_scale, values, (kv_head, j, 0), best, total, acc,
                                      GROWTH)
    o.store((acc * (1.0 / total)).astype(T).reshape((1, BM, D)))
