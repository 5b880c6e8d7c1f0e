"""Programmatic dependent launch on cuda:0: each kernel may start while the previous kernel on
its stream finishes, and must still read only what that kernel wrote. Chains of launches that
each read the previous launch's output (on a stream, and replayed from a graph) come out
exact; grids are large so that an early start would overlap the predecessor's work."""

from __future__ import annotations

import numpy as np
import tilesafe as ts
import tilesafe.core as tc
from tilesafe.driver import cuda

GPU = "cuda:0"
N, TILE = 1 << 22, 1024  # 4096 tile programs per launch


@ts.kernel
def step(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


def _buffers(device=GPU):
    return (ts.zeros(N, device=device).sync(),
            ts.full(N, float("nan"), ts.float32, device=device).sync())


def _step(out, source):
    """out = source + 1, recordable any number of times (``out`` is borrowed, not moved)."""
    return step(ts.borrow_mut(out).partition(TILE), source)


def test_launches_are_programmatic_on_hopper():
    a, b = _buffers()
    step(b.partition(TILE), a).sync()
    exes = list(step._executables.values())
    major = cuda.compute_capability(0)[0]
    assert exes and all(e.programmatic == (major >= 9) for e in exes)


def test_chain_on_one_stream_reads_each_predecessor():
    a, b = _buffers()
    steps = 200  # b = a + 1, a = b + 1, ... each launch reads what the previous one wrote
    op = step(b.partition(TILE), a)
    for _ in range(steps - 1):
        op = op.then(lambda r: step(r[1].partition(TILE), r[0].unpartition()))
    out, source = op.sync()
    assert np.array_equal(out.unpartition().numpy(), np.full(N, steps, np.float32))
    assert np.array_equal(source.numpy(), np.full(N, steps - 1, np.float32))


def test_chain_replayed_from_a_graph_reads_each_predecessor():
    a, b = _buffers()
    pairs, replays = 50, 3
    with ts.CudaGraph.scope() as graph:
        for _ in range(pairs):
            graph.record(_step(b, a))
            graph.record(_step(a, b))
    for _ in range(replays):
        graph.replay()
    assert np.array_equal(a.numpy(), np.full(N, 2.0 * pairs * replays, np.float32))
    assert np.array_equal(b.numpy(), np.full(N, 2.0 * pairs * replays - 1, np.float32))


@ts.kernel(hints={"programmatic_launch": False})
def plain_step(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


def test_a_kernel_without_the_wait_is_launched_as_an_ordinary_dependent():
    """``programmatic_launch: False`` leaves the wait out of the cubin, so the launch must not
    be programmatic; a chain alternating both kinds still reads each predecessor."""
    a, b = _buffers()
    plain_step(b.partition(TILE), a).sync()
    exes = list(plain_step._executables.values())
    assert exes and not any(e.programmatic for e in exes)
    a, b = _buffers()
    steps = 100
    kernels = (step, plain_step)
    op = plain_step(b.partition(TILE), a)
    for i in range(steps - 1):
        k = kernels[i % 2]
        op = op.then(lambda r, k=k: k(r[1].partition(TILE), r[0].unpartition()))
    out, source = op.sync()
    assert np.array_equal(out.unpartition().numpy(), np.full(N, steps, np.float32))
