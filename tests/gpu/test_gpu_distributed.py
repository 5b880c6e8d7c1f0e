"""tilesafe.distributed on cuda tensors (NCCL), one process on one GPU (world size 1): a
collective runs in the order of the tilesafe stream it is driven on, after a slow kernel that
writes its input and before a kernel that reads its output, with no host wait in between; the
data arrive (bf16 too); the loans end only when the stream is synchronized. Several GPUs were
not available: what crosses GPUs is not tested here, and with one rank an all-reduce and a
broadcast leave their buffer as it was (only the gather and the reduce-scatter move data)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
import tilesafe.distributed as D

GPU = "cuda:0"
torch = pytest.importorskip("torch")
SLOW = 200_000  # iterations of the slow kernel: milliseconds of device time


@ts.kernel
def slow_fill(z: tc.MutTensor[tc.f32, (256,)], value: float, n: int):
    """``z`` = ``value`` after ``n`` halving steps towards it (exact once converged)."""
    acc = tc.zeros((256,), tc.f32)
    for _ in range(n):
        acc = acc * 0.5 + value * 0.5
    z.store(acc)


@ts.kernel
def twice(z: tc.MutTensor[tc.f32, (256,)], x: tc.Tensor[tc.f32, (-1,)]):
    (i, _, _) = tc.get_tile_block_id()
    z.store(x.partition((256,)).load((i,)) * 2.0)


@pytest.fixture(scope="module")
def nccl(tmp_path_factory):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_nccl_available():
        pytest.skip("torch has no NCCL")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    init = tmp_path_factory.mktemp("nccl") / "init"
    dist.init_process_group("nccl", init_method=f"file://{init}", rank=0, world_size=1,
                            device_id=torch.device(GPU))
    yield dist
    dist.destroy_process_group()


def test_a_collective_runs_in_its_streams_order(nccl):
    x = ts.zeros((1024,), ts.float32, device=GPU).sync()
    out = ts.full((1024,), float("nan"), ts.float32, device=GPU).sync()
    doubled = ts.full((1024,), float("nan"), ts.float32, device=GPU).sync()
    op = (slow_fill(ts.borrow_mut(x).partition((256,)), 3.0, SLOW)
          .then(lambda _r: D.all_gather(out, x))
          .then(lambda _r: twice(ts.borrow_mut(doubled).partition((256,)), out)))
    op.sync()
    assert x.numpy().tolist() == [3.0] * 1024
    assert out.numpy().tolist() == [3.0] * 1024  # gathered after the slow write, not before
    assert doubled.numpy().tolist() == [6.0] * 1024  # read after the gather wrote


@pytest.mark.parametrize("dtype", [ts.float32, ts.bfloat16])
def test_every_collective_moves_its_data(nccl, dtype):
    values = np.arange(12, dtype=np.float32) - 4.0
    t = ts.tensor(values, dtype=dtype, device=GPU).sync()
    assert D.all_reduce(t, "sum").sync() is t
    assert D.broadcast(t, src=0).sync() is t
    gathered = ts.zeros((12,), dtype, device=GPU).sync()
    D.all_gather(gathered, t).sync()
    scattered = ts.zeros((12,), dtype, device=GPU).sync()
    D.reduce_scatter(scattered, gathered, "max").sync()
    for result in (t, gathered, scattered):
        assert result.numpy().astype(np.float32).tolist() == values.tolist()


def test_loans_last_until_the_stream_is_synchronized(nccl):
    x = ts.zeros((1024,), ts.float32, device=GPU).sync()
    out = ts.full((1024,), float("nan"), ts.float32, device=GPU).sync()
    stream = ts.Stream(GPU)
    op = slow_fill(ts.borrow_mut(x).partition((256,)), 1.0, SLOW).then(
        lambda _r: D.all_gather(out, x))
    op._enqueue(stream, None)  # enqueued behind the slow kernel, the host not waiting
    with pytest.raises(ts.BorrowError):
        out.numpy()  # only the gather borrows it: its loan outlives the op's return
    stream.synchronize()
    assert out.numpy().tolist() == [1.0] * 1024
    with pytest.raises(ts.AliasingError):
        D.all_gather(x, x)
    pending = D.all_reduce(x)
    with pytest.raises(ts.BorrowError):
        x.numpy()  # created, not run: borrowed
    del pending  # dropped without being driven: its loan goes back
    assert x.numpy().tolist() == [1.0] * 1024


def test_collectives_chain_on_one_stream_without_waits(nccl):
    """An op made outside any chain, then ops made in its steps: once it runs, its loans are
    its stream's, so the next collective on that stream is not refused by them."""
    t = ts.ones((1 << 16,), ts.bfloat16, device=GPU).sync()
    op = D.all_reduce(t)
    for _ in range(4):
        op = op.then(lambda r: D.all_reduce(r))
    assert op.sync() is t
    assert t.numpy().astype(np.float32).tolist() == [1.0] * (1 << 16)
