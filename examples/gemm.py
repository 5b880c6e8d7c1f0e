"""A tiled GEMM: f16 or bf16 inputs (the dtype name ``T``), f32 accumulation on the K loop with
``mma``, output in the input dtype.

Each tile program owns one BM x BN tile of the output (the names bind from the partition's tile
shape and are compile-time constants in the body); the inputs are shared and read through
partitions. Extents need not divide the tiles: edge tiles are padded with zeros on load (which
adds nothing to the dot products) and masked on store.
"""

from __future__ import annotations

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel(examples=[{"T": ts.float16, "BM": 64, "BN": 64, "BK": 32},
                     {"T": ts.bfloat16, "BM": 64, "BN": 64, "BK": 32}])
def gemm(z: tc.MutTensor["T", ("BM", "BN")], x: tc.Tensor["T", (-1, -1)],
         y: tc.Tensor["T", (-1, -1)], BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), tc.f32)
    for k in range(tc.num_tiles(px, 1)):
        acc = tc.mma(px.load((i, k)), py.load((k, j)), acc)
    z.store(acc.astype(z.dtype))


def main(m: int = 200, n: int = 136, k: int = 100, tiles=(64, 64, 32)) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    z = ts.zeros((m, n), ts.float16).partition(tiles[:2])
    z = gemm(z, ts.tensor(a), ts.tensor(b), BK=tiles[2]).sync().z  # BM, BN: from z's tiles
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.max(np.abs(z.unpartition().numpy() - ref) / (np.abs(ref) + 1)))
    assert err < 1e-2, err
    return err


if __name__ == "__main__":
    print(f"max relative error vs float64: {main():.2e}")
