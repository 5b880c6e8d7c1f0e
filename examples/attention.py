"""Attention forward (flash style): each tile program owns BM query rows of one head and walks
the keys and values BN at a time with an online softmax (running maximum and sum, rescaling the
accumulator), in exp2 with the scale folded in. Inputs are (heads, S, D) f16 (batch and heads
flattened); the output has their shape.

The key and value tiles are read through partitions at data-dependent tile coordinates: the
head comes from the block id (the grid is the output's, so a key tensor with fewer heads would
be out of range) and the key block from a loop over the keys' own tile count. The first is
checked at run time on a GPU (an error, not a read of other memory, if it fails), the second
the compiler proves in range; ``benchmarks/attention.py`` measures what the checks cost.
S must be a multiple of BN (key tiles past the end would be scored as zeros).
"""

from __future__ import annotations

import numpy as np

import tilesafe as ts
import tilesafe.core as tc

LOG2E = 1.4426950408889634


@ts.kernel(examples=[{"BM": 128, "D": 128, "BN": 64}])
def attention(o: tc.MutTensor[tc.f16, (1, "BM", "D")], q: tc.Tensor[tc.f16, (-1, -1, "D")],
              k: tc.Tensor[tc.f16, (-1, -1, "D")], v: tc.Tensor[tc.f16, (-1, -1, "D")],
              scale: float, BN: tc.Const[int]):
    head, _, _ = tc.get_tile_block_id()
    queries = tc.load_tile_like(q, o).reshape((BM, D))
    keys, values = k.partition((1, BN, D)), v.partition((1, BN, D))
    qk_scale = scale * LOG2E
    best = tc.full((BM, 1), -1e30, tc.f32)
    total = tc.zeros((BM, 1), tc.f32)
    acc = tc.zeros((BM, D), tc.f32)
    for j in range(tc.num_tiles(keys, 1)):
        kt = keys.load((head, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32)) * qk_scale
        new_best = tc.maximum(best, tc.reduce_max(s, 1, keepdims=True))
        p = tc.exp2(s - new_best)
        alpha = tc.exp2(best - new_best)
        total = total * alpha + tc.reduce_sum(p, 1, keepdims=True)
        vt = values.load((head, j, 0)).reshape((BN, D))
        acc = tc.mma(p.astype(tc.f16), vt, acc * alpha)
        best = new_best
    o.store((acc / total).astype(tc.f16).reshape((1, BM, D)))


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Softmax attention in float64."""
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", p, v.astype(np.float64))


def main(heads: int = 2, seq: int = 64, dim: int = 16, bm: int = 16, bn: int = 16) -> float:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads, seq, dim)).astype(np.float16) for _ in range(3))
    scale = dim ** -0.5
    out = ts.zeros((heads, seq, dim), ts.float16).partition((1, bm, dim))
    out = attention(out, ts.tensor(q), ts.tensor(k), ts.tensor(v), scale, BN=bn).sync().o
    err = float(np.max(np.abs(out.unpartition().numpy() - reference(q, k, v, scale))))
    assert err < 2e-3, err
    return err


if __name__ == "__main__":
    print(f"max abs error vs float64: {main():.2e}")
