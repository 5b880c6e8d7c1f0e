"""Does a GEMV whose K extent is named in its signature (so its loop's trip count is compiled
in, as the ``static_shape`` patch did) give the same bits on every replay of a graph, right
after a kernel that writes its input? (The static o projection did not, in the 4b step.)

    python named_extent_race.py [DEVICE]     # cuda:0 by default; cpu for a dry run

Graph: REPS times [write the accumulator row z_r, write the input row x (a short kernel), z_r
+= W @ x]. Replayed 5 times; every z_r of every replay is compared with the eager result,
for the K loop compiled in (named extent) and left dynamic (the library's ``gemv_rows``).
"""
from __future__ import annotations

import sys
import numpy as np
import tilesafe as ts
import tilesafe.core as tc
from tilesafe.kernels import gemv as G

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
N, K, BN, BK, REPS = (2560, 4096, 8, 512, 24) if DEVICE != "cpu" else (64, 1024, 8, 512, 2)


@ts.kernel
def write_row(x: tc.MutTensor[tc.bf16, (1, "BC")], seed: float, ITERS: tc.Const[int]):
    j, _, _ = tc.get_tile_block_id()
    v = (tc.arange(BC, tc.i32) + j * BC).astype(tc.f32).reshape((1, BC)) * 0.0003 + seed  # noqa: F821,E501
    for _ in range(ITERS):
        v = v * 0.9995 + 0.0005
    x.store(v.astype(x.dtype))


def gemv_named(z: tc.MutTensor["TO", (1, "BN")], x: tc.Tensor["T", (-1, "K")],
               w: tc.Tensor["T", (-1, "K")], BK: tc.Const[int], ACC: tc.Const[bool]):
    _, j, _ = tc.get_tile_block_id()
    px, pw = x.partition((1, BK)), w.partition((BN, BK))  # noqa: F821
    acc = tc.zeros((BN, BK), tc.f32)  # noqa: F821
    for k in range(tc.num_tiles(pw, 1)):
        acc = acc + pw.load((j, k)).astype(tc.f32) * px.load((0, k)).astype(tc.f32)
    G._store_sum(z, acc.sum(1).reshape((1, BN)), ACC)  # noqa: F821


NAMED = ts.kernel(gemv_named, hints={"default": {"occupancy": 4}})
DYNAMIC = G.with_occupancy(G.gemv_rows, {"occupancy": 4})


def main():
    rng = np.random.default_rng(0)
    import ml_dtypes
    w = ts.tensor((rng.standard_normal((N, K)) * 0.02).astype(ml_dtypes.bfloat16),
                  device=DEVICE).sync()
    for label, kern in (("named K", NAMED), ("dynamic K", DYNAMIC)):
        x = ts.zeros((1, K), ts.bfloat16, device=DEVICE).sync()
        zs = [ts.zeros((1, N), ts.bfloat16, device=DEVICE).sync() for _ in range(REPS)]

        def layer(r):
            yield write_row(ts.borrow_mut(zs[r]).partition((1, 512)), 0.5 + r, ITERS=64)
            yield write_row(ts.borrow_mut(x).partition((1, 512)), 0.25 * r, ITERS=16)
            yield kern(ts.borrow_mut(zs[r]).partition((1, BN)), x, w, BK=BK, ACC=True)
        for r in range(REPS):  # eager reference
            for op in layer(r):
                op.sync()
        want = [z.numpy().view(np.uint16).copy() for z in zs]
        with ts.CudaGraph.scope() as g:
            for r in range(REPS):
                for op in layer(r):
                    g.record(op)
        differing = []
        for replay in range(5):
            g.replay()
            got = [z.numpy().view(np.uint16) for z in zs]
            differing.append(sum(int((a != b).sum()) for a, b in zip(got, want)))
        print(f"{label}: outputs differing from eager per replay (of {REPS * N}): {differing}",
              flush=True)


if __name__ == "__main__":
    main()
