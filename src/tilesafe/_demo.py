"""The README example as a runnable demo (``tilesafe demo``): a safe vector add, timed."""

from __future__ import annotations

import time

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel
def add(z: tc.MutTensor[tc.f32, "S"],
        x: tc.Tensor[tc.f32, (-1,)],
        y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def run_demo(n: int = 1 << 20, tile: int = 1024) -> int:
    """Run z = arange(n) + 1 through the ``add`` kernel; print the result and the time."""
    device = ts.default_device()
    x = ts.arange(n, dtype=ts.float32)
    y = ts.ones(n, dtype=ts.float32)
    z = ts.zeros(n, dtype=ts.float32).partition(tile)
    start = time.perf_counter()
    z, x, y = add(z, x, y).sync()
    elapsed = time.perf_counter() - start
    result = z.unpartition().numpy()
    expected = np.arange(n, dtype=np.float32) + 1
    ok = np.array_equal(result, expected)
    print(f"device: {device}   n = {n}   tile = {tile}   grid = {-(-n // tile)} tile programs")
    print(f"z[:4] = {result[:4]}  z[-2:] = {result[-2:]}")
    print(f"time (compile + run): {elapsed * 1e3:.1f} ms   correct: {ok}")
    return 0 if ok else 1
