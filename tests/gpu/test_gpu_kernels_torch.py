"""The library's torch surface on cuda:0: a call with torch tensors enqueues on torch's current
stream and returns without waiting; its loans end once the work completed (the next call, or
``release_completed``); it runs on a torch side stream, and inside a torch CUDA graph capture
(recorded, replayed by torch)."""

from __future__ import annotations

import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.kernels._outputs import Output
from tilesafe.kernels._torch import accepts_torch, release_completed

torch = pytest.importorskip("torch")


@ts.kernel
def _scaled(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, -1)],  # noqa: F821
            s: float):
    z.store(tc.load_tile_like(x, z) * s)


@accepts_torch
def scaled(x, *, scale: float = 2.0, out=None):
    result = Output(out, x.shape, ts.float32, x.device, op="scaled")
    tile = 1 << (x.shape[1] - 1).bit_length()
    return _scaled(result.partition((1, tile)), x, scale).then(lambda r: result.tensor(r.z))


def test_eager_calls_chain_on_the_current_stream():
    x = torch.randn(512, 1000, device="cuda")
    y = x
    for _ in range(20):  # each reads the previous output, enqueued back to back
        y = scaled(y, scale=1.5)
    torch.cuda.synchronize()
    assert torch.allclose(y, x * 1.5 ** 20, rtol=1e-5)
    release_completed()


def test_a_side_stream_is_used_and_ordered():
    side = torch.cuda.Stream()
    x = torch.randn(256, 300, device="cuda")
    with torch.cuda.stream(side):
        y = scaled(x, scale=3.0)
        z = scaled(y, scale=2.0)
    side.synchronize()
    assert torch.allclose(z, x * 6.0, rtol=1e-6)


def test_loans_end_once_the_work_completed():
    x = torch.randn(64, 64, device="cuda")
    out = torch.empty_like(x)
    scaled(x, out=out)
    torch.cuda.synchronize()
    release_completed()
    view = ts.from_dlpack(out)  # no loan left on the memory: a tilesafe borrow is allowed
    ts.borrow_mut(view)
    assert torch.allclose(out, x * 2)


def test_completed_work_on_one_stream_does_not_block_a_call_on_another():
    """Work enqueued on torch's default stream, synchronized, then a call on a side stream
    writing the same tensor: the finished work's loans end at that call (they used to stay
    until a call on the first stream)."""
    x = torch.randn(256, 512, device="cuda")
    out = torch.empty_like(x)
    for _ in range(3):
        scaled(x, out=out)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        scaled(x, scale=5.0, out=out)
    side.synchronize()
    assert torch.allclose(out, x * 5.0, rtol=1e-6)


def test_pending_work_on_one_stream_blocks_a_write_on_another():
    """The same, not synchronized: the default stream is held up by a spin kernel, so the first
    call is still pending; writing its output from a side stream would race, and is refused
    with a hint to wait for the stream."""
    x = torch.randn(64, 64, device="cuda")
    out = torch.empty_like(x)
    torch.cuda._sleep(200_000_000)  # (about 0.1 s of device time ahead of the call)
    scaled(x, out=out)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        with pytest.raises(ts.BorrowError, match="torch.cuda.synchronize"):
            scaled(x, scale=7.0, out=out)
    torch.cuda.synchronize()
    assert torch.allclose(out, x * 2.0, rtol=1e-6)  # the refused call wrote nothing
    release_completed()


def test_inside_a_torch_cuda_graph():
    x = torch.randn(128, 96, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        scaled(x)  # compile and load outside the capture
    s.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        y = scaled(x, scale=4.0)
    x.copy_(torch.ones_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.full_like(x, 4.0))


def _made_here():
    """A kernel and its torch-callable launch that only the caller's references keep."""
    @ts.kernel
    def doubled(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, -1)]):  # noqa: F821
        z.store(tc.load_tile_like(x, z) * 2.0)

    @accepts_torch
    def call(x, *, out=None):
        result = Output(out, x.shape, ts.float32, x.device, op="doubled")
        tile = 1 << (x.shape[1] - 1).bit_length()
        return doubled(result.partition((1, tile)), x).then(lambda r: result.tensor(r.z))
    return call


def test_a_torch_graph_replays_a_kernel_whose_objects_are_gone():
    """A torch graph holds the launches recorded into it, not tilesafe's objects: after the
    kernel and everything over it are dropped, a replay still runs its code (the module
    stays loaded) and writes the right values, many times."""
    import gc
    call = _made_here()
    x = torch.randn(64, 96, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        call(x)  # compile and load outside the capture
    s.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        y = call(x)
    del call
    gc.collect()
    for value in (1.0, -3.0, 0.5):
        x.fill_(value)
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, torch.full_like(x, 2.0 * value))


def test_a_tilesafe_graph_replays_a_kernel_whose_objects_are_gone():
    """The same for a tilesafe CUDA graph: the kernel object the recording launched is
    dropped before the replays."""
    import gc
    import numpy as np

    @ts.kernel
    def tripled(z: tc.MutTensor[tc.f32, (64,)], x: tc.Tensor[tc.f32, (-1,)]):
        z.store(tc.load_tile_like(x, z) * 3.0)
    x = ts.tensor(np.arange(256, dtype=np.float32), device="cuda:0").sync()
    z = ts.full(256, np.nan, dtype=ts.float32, device="cuda:0").sync()
    stream = ts.Stream("cuda:0")
    with ts.CudaGraph.scope(stream) as graph:
        graph.record(tripled(ts.borrow_mut(z).partition(64), x))
    del tripled
    gc.collect()
    graph.launch(stream).sync_on(stream)
    assert np.array_equal(z.numpy(), np.arange(256, dtype=np.float32) * 3.0)


def test_a_recorded_sample_keeps_the_offset_it_made_for_itself():
    """``sample`` with an int offset makes a device value of it for its launch; recorded into
    a torch graph, that value is read on every replay, so it is kept for good: after many
    more calls (whose plans would have dropped it) the replays still draw the same tokens
    as the eager call with that offset."""
    from tilesafe import kernels as K
    logits = torch.randn(4, 1000, device="cuda")
    want = K.sample(logits, temperature=0.9, top_k=50, seed=11, offset=5)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        K.sample(logits, temperature=0.9, top_k=50, seed=11, offset=5)
    s.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s, capture_error_mode="relaxed"):
        got = K.sample(logits, temperature=0.9, top_k=50, seed=11, offset=5)
    for offset in range(100, 120):  # (new plans, and pool memory freed and reused)
        K.sample(logits, temperature=0.9, top_k=50, seed=11, offset=offset)
    torch.cuda.synchronize()
    for _ in range(3):
        got.fill_(-1)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got, want)


def test_eager_samples_behind_slow_work_each_read_their_own_offset():
    """Each eager ``sample`` with an int offset makes a device value of it; queued behind slow
    work, forty such calls outlive the kernel's plan cache (eight plans) before any runs, so
    without the stream holding each value until its launch completed the early values would
    be freed, and their memory reused, before they were read. Every call must draw what the
    same offset given as a tensor draws."""
    from tilesafe import kernels as K
    logits = torch.randn(2, 4096, device="cuda")
    big = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    for _ in range(40):  # (tens of milliseconds of work ahead of the samples)
        big = big @ big * 1e-3
    drawn = [K.sample(logits, temperature=1.0, top_k=0, seed=3, offset=i) for i in range(40)]
    torch.cuda.synchronize()
    for i, got in enumerate(drawn):
        offset = torch.tensor([i], dtype=torch.int64, device="cuda")
        want = K.sample(logits, temperature=1.0, top_k=0, seed=3, offset=offset)
        torch.cuda.synchronize()
        assert torch.equal(got, want), i
