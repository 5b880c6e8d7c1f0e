"""The README example: a safe element-wise add over a partitioned output."""

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


@ts.kernel(examples=[{"S": (1024,)}])
def add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def main(n: int = 1 << 20) -> np.ndarray:
    x = ts.arange(n, dtype=ts.float32)
    y = ts.ones(n, dtype=ts.float32)
    z = ts.zeros(n, dtype=ts.float32).partition(1024)
    z, x, y = add(z, x, y).sync()
    result = z.unpartition().numpy()
    assert np.array_equal(result, np.arange(n, dtype=np.float32) + 1)
    return result


if __name__ == "__main__":
    print(main()[:8])
