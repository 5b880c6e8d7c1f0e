"""Interpreter speed check: a 2**20-element f32 vector add with 1024-element tiles.

Not a test: prints the median wall time of the launch (compile excluded) and whether it meets
the 0.5 s budget on a 2-core machine. Run: ``python benchmarks/interp_vector_add.py``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel
def add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def main(n: int = 1 << 20, tile: int = 1024, repeats: int = 7) -> None:
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    x, y = ts.tensor(xs).sync(), ts.tensor(ys).sync()
    times = []
    for i in range(repeats + 1):
        z = ts.full(n, np.nan, ts.float32).sync().partition(tile)
        start = time.perf_counter()
        z, x, y = add(z, x, y).sync()
        elapsed = time.perf_counter() - start
        assert np.array_equal(z.unpartition().numpy(), xs + ys)
        if i:  # the first launch compiles
            times.append(elapsed)
    median = statistics.median(times)
    print(f"interpreter vector add: n=2**{n.bit_length() - 1} f32, tile={tile}, "
          f"{-(-n // tile)} programs")
    print(f"median {median * 1e3:.1f} ms over {repeats} runs (min {min(times) * 1e3:.1f} ms); "
          f"budget 500 ms: {'met' if median < 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
