"""A software-pipelined variant of the prefill kernel (the next key tile's scores issued before
this tile's softmax, so the tensor cores may run while the exponentials are computed); the key
tile index is clamped, so the last iteration scores one tile it does not use."""
import tilesafe.core as tc
from tilesafe.kernel import kernel
from tilesafe.kernels._online_softmax import online_softmax_step_unscaled


@kernel
def pipelined_flash_kernel(o: tc.MutTensor["T", (1, "BM", "D")],
                           q: tc.Tensor["T", (-1, -1, "D")], k: tc.Tensor["T", (-1, -1, "D")],
                           v: tc.Tensor["T", (-1, -1, "D")], qk_scale: float, q_heads: int,
                           kv_heads: int, BN: tc.Const[int], CAUSAL: tc.Const[bool]):
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
    last = end - 1
    best = tc.full((BM, 1), float("-inf"), tc.f32)
    total = tc.zeros((BM, 1), tc.f32)
    acc = tc.zeros((BM, D), tc.f32)
    s = tc.mma(queries, tc.transpose(keys.load((kv_head, 0, 0)).reshape((BN, D))),
               tc.zeros((BM, BN), tc.f32))
    for j in range(unmasked_end):
        kt = keys.load((kv_head, tc.minimum(j + 1, last), 0)).reshape((BN, D))
        s_next = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32))
        total, acc, best = online_softmax_step_unscaled(s, qk_scale, values, (kv_head, j, 0),
                                                        best, total, acc)
        s = s_next
    rows = (tc.arange(BM) + (first_row + offset)).reshape((BM, 1))
    for j in range(unmasked_end, end):
        kt = keys.load((kv_head, tc.minimum(j + 1, last), 0)).reshape((BN, D))
        s_next = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32))
        cols = (tc.arange(BN) + j * BN).reshape((1, BN))
        visible = cols < seq_kv
        if CAUSAL:
            visible = visible & (cols <= rows)
        masked = tc.where(visible, s, float("-inf"))
        total, acc, best = online_softmax_step_unscaled(masked, qk_scale, values,
                                                        (kv_head, j, 0), best, total, acc)
        s = s_next
    o.store((acc * (1.0 / total)).astype(T).reshape((1, BM, D)))
