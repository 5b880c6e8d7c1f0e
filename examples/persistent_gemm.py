"""A persistent GEMM: a fixed number of tile programs, each owning several output tiles.

The output is partitioned into BM x BN tiles and *mapped* over ``num_tile_blocks`` programs
(``.map((GM, 1), n)``: bands of GM tile rows, walked column by column, for L2 reuse of the
inputs). Each program iterates the tiles it owns with ``z.iter_indices()`` and may store only
at those indices, so programs stay disjoint by construction.
"""

from __future__ import annotations

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel(examples=[{"T": ts.float16, "BM": 64, "BN": 64, "BK": 32, "M": (2, 1)}])
def persistent_gemm(z: tc.MappedPartitionMut["T", ("BM", "BN"), "M"],
                    x: tc.Tensor["T", (-1, -1)], y: tc.Tensor["T", (-1, -1)],
                    BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for k in range(tc.num_tiles(px, 1)):
            acc = tc.mma(px.load((m, k)), py.load((k, n)), acc)
        z.store(acc.astype(z.dtype), idx)


def main(m: int = 200, n: int = 136, k: int = 100, programs: int = 5) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    z = ts.zeros((m, n), ts.float16).sync().partition((64, 64)).map((2, 1), programs)
    z = persistent_gemm(z, ts.tensor(a), ts.tensor(b), BK=32).sync().z
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.linalg.norm(z.unpartition().numpy() - ref) / np.linalg.norm(ref))
    assert err < 1e-2, err
    return err


if __name__ == "__main__":
    print(f"relative error vs float64: {main():.2e}")
