"""Both launch paths on cuda:0 (the compiled launcher and cuda.bindings) run the same chains of
dependent launches, per-op synchronized and as one pipeline, and come out exact; the compiled
launcher is the one in use wherever it was built."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import tilesafe as ts
import tilesafe.core as tc
from tilesafe.driver import cuda

GPU = "cuda:0"
N, TILE = 1 << 20, 1024
BUILT = importlib.util.find_spec("tilesafe.driver._launcher") is not None


@ts.kernel
def step(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


@pytest.fixture
def launcher():
    """Switch launch paths for one test; the compiled launcher (when built) afterwards."""
    yield cuda.use_native_launcher
    cuda.use_native_launcher(True)


def test_the_compiled_launcher_is_used_where_it_was_built(launcher):
    assert launcher(True) == BUILT
    assert launcher(False) is False


@pytest.mark.parametrize("native", [True, False], ids=["compiled", "bindings"])
def test_dependent_launches_are_exact_on_either_path(launcher, native):
    if native and not BUILT:
        pytest.skip("the compiled launcher was not built")
    assert launcher(native) == native
    a = ts.zeros(N, device=GPU).sync()
    b = ts.full(N, float("nan"), ts.float32, device=GPU).sync()
    for _ in range(20):  # per-op: each launch synchronized before the next
        b, a = step(b.partition(TILE), a).sync()
        a, b = step(a.partition(TILE), b.unpartition()).sync()
        a = a.unpartition()
    assert np.array_equal(a.numpy(), np.full(N, 40.0, np.float32))
    op = step(b.partition(TILE), a)  # one pipeline of 100 launches, one sync
    for _ in range(99):
        op = op.then(lambda r: step(r[1].partition(TILE), r[0].unpartition()))
    out, source = op.sync()
    assert np.array_equal(out.unpartition().numpy(), np.full(N, 140.0, np.float32))
    assert np.array_equal(source.numpy(), np.full(N, 139.0, np.float32))


def test_graph_update_rewrites_the_executable_graph_in_place():
    a = ts.full(N, 1.0, ts.float32, device=GPU).sync()
    b = ts.full(N, 5.0, ts.float32, device=GPU).sync()
    out = ts.full(N, float("nan"), ts.float32, device=GPU).sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(step(ts.borrow_mut(out).partition(TILE), a))
    graph.replay()
    assert np.array_equal(out.numpy(), np.full(N, 2.0, np.float32))
    executable = graph._captured[1]
    graph.update(step(ts.borrow_mut(out).partition(TILE), b))
    graph.replay()
    assert np.array_equal(out.numpy(), np.full(N, 6.0, np.float32))
    assert graph._captured[1] == executable  # updated, not instantiated again
    graph.replay()
    assert np.array_equal(out.numpy(), np.full(N, 6.0, np.float32))


@ts.kernel
def accumulate(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(z.load() + tc.load_tile_like(x, z))


def test_repeated_launches_are_exact_on_the_compiled_and_python_paths(launch_path, monkeypatch):
    """Launches repeating the same argument objects hit the cached plan, which the compiled
    fast path (tilesafe._fastpath) runs without the Python launch steps (tests/gpu runs on the
    Python path too: benchmarks/gpu_checks.sh, stage gpu)."""
    runs = []
    run_prepared = accumulate._run_prepared
    monkeypatch.setattr(accumulate, "_run_prepared",
                        lambda *a, **k: runs.append(1) or run_prepared(*a, **k), raising=False)
    x = ts.full(N, 1.0, ts.float32, device=GPU).sync()
    z = ts.zeros(N, device=GPU).sync().partition(TILE)
    for _ in range(50):  # per-op
        z, x = accumulate(z, x).sync()
    op = accumulate(z, x)  # one pipeline
    for _ in range(199):
        op = op.then(lambda r: accumulate(*r))
    z, x = op.sync()
    assert np.array_equal(z.unpartition().numpy(), np.full(N, 250.0, np.float32))
    # on the compiled path only the first launch (no packed launch yet) runs as Python
    assert len(runs) == {"compiled": 1, "python": 250}[launch_path]
