"""tilesafe.distributed: collectives over tilesafe tensors through torch.distributed (gloo, two
processes), driven by sync, a .then chain and await, and the ownership rules they keep: a pending collective borrows its buffers like a
launch (from its creation until it completes), so the host, another thread and a DLPack import
of the same memory are refused while a peer has not joined yet; a buffer written and another
argument may not overlap; read-only tensors are sent, never written; a collective inside
torch's coalescing context (which would run after the op returned) is refused; a dropped op
gives its loans back; each argument error.

The processes are spawned once for the whole module (torch's start-up is the cost)."""

from __future__ import annotations

import threading
import time
import traceback

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe import distributed as D

torch = pytest.importorskip("torch")

WORLD = 2


@ts.kernel
def fill(z: tc.MutTensor[tc.f32, (256,)], value: float):
    z.store(tc.zeros((256,), tc.f32) + value)


def _checks(rank: int) -> None:
    """Every two-process check; runs in each process (the ranks meet at each collective)."""
    # all_reduce: lazy until driven, then the sum of every rank's values, in place
    t = ts.tensor(np.full(6, rank + 1.0, np.float32), device="cpu").sync()
    op = D.all_reduce(t)
    assert np.array_equal(op.sync().numpy(), np.full(6, 3.0, np.float32))
    m = ts.tensor(np.array([rank, 10 - rank], np.int32), device="cpu").sync()
    assert D.all_reduce(m, "max").sync().numpy().tolist() == [1, 10]
    # broadcast from rank 1
    b = ts.tensor(np.arange(4, dtype=np.float64) * (rank + 1), device="cpu").sync()
    assert D.broadcast(b, src=1).sync().numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
    # all_gather: rank order along the first axis; the input is only read
    part = ts.tensor(np.full((2, 3), rank, np.float32), device="cpu").sync()
    whole = ts.zeros((4, 3), ts.float32, device="cpu").sync()
    assert D.all_gather(whole, part).sync().numpy()[:, 0].tolist() == [0, 0, 1, 1]
    assert np.array_equal(part.numpy(), np.full((2, 3), rank, np.float32))
    # reduce_scatter: block `rank` of the sum
    src = ts.tensor(np.arange(8, dtype=np.float32).reshape(4, 2) * (rank + 1),
                    device="cpu").sync()
    out = ts.zeros((2, 2), ts.float32, device="cpu").sync()
    got = D.reduce_scatter(out, src).sync().numpy()
    assert np.array_equal(got, 3 * np.arange(8, dtype=np.float32).reshape(4, 2)[2 * rank:
                                                                                 2 * rank + 2])
    # send / recv, bf16 (DLPack carries it)
    if rank == 0:
        D.send(ts.tensor(np.array([1.5, -2.0], np.float32), dtype=ts.bfloat16,
                         device="cpu").sync(), dst=1).sync()
    else:
        r = ts.zeros((2,), ts.bfloat16, device="cpu").sync()
        assert D.recv(r, src=0).sync().numpy().astype(np.float32).tolist() == [1.5, -2.0]

    # composed: a chain (.then) and an awaited op
    c = ts.tensor(np.full(2, rank + 1.0, np.float32), device="cpu").sync()
    chained = D.all_reduce(c).then(lambda summed: D.all_reduce(summed, "product"))
    assert chained.sync().numpy().tolist() == [9.0, 9.0]
    # a launch writing the buffer, then the collective, in one chain with no wait between:
    # the launch's pending loan is on the chain's stream, where the collective runs after it
    f = ts.zeros((256,), ts.float32, device="cpu").sync()
    after = fill(ts.borrow_mut(f).partition((256,)), rank + 1.0).then(
        lambda _r: D.all_reduce(f))
    assert after.sync().numpy().tolist() == [3.0] * 256

    async def awaited():
        return await D.broadcast(c, src=0)
    import asyncio
    assert asyncio.run(awaited()).numpy().tolist() == [9.0, 9.0]

    # -- ownership while a collective is in flight: rank 1 joins late -----------------------
    x = ts.tensor(np.ones(8, np.float32), device="cpu").sync()
    imported = ts.from_dlpack(torch.from_dlpack(x))  # the same memory, imported again
    pending = D.all_reduce(x)
    for access in (lambda: x.numpy(), lambda: imported.numpy(),
                   lambda: D.all_reduce(x), lambda: x.copy_(x.clone().sync()).sync()):
        with pytest.raises(ts.BorrowError, match="pending all_reduce created at"):
            access()
    if rank == 0:
        seen: list = []

        def other_thread() -> None:  # while the reduction waits for rank 1
            time.sleep(0.5)
            try:
                x.numpy()
                seen.append("read")
            except ts.BorrowError as err:
                seen.append(str(err))
        thread = threading.Thread(target=other_thread)
        thread.start()
        pending.sync()
        thread.join()
        assert "all_reduce" in seen[0] and seen[0] != "read", seen
    else:
        time.sleep(1.5)
        pending.sync()
    assert x.numpy().tolist() == [2.0] * 8  # usable again once complete
    # made in a chain step, a collective's loans exempt later work on the chain's stream; but
    # while it runs, work another thread puts on that stream would not run after it: refused
    lane = ts.Stream("cpu")
    g = ts.zeros((256,), ts.float32, device="cpu").sync()
    if rank == 0:
        refused: list = []

        def same_stream_writer() -> None:  # while the chain's all_reduce waits for rank 1
            time.sleep(0.5)
            try:
                ts.value(None).then(lambda _r: fill(ts.borrow_mut(g).partition((256,)),
                                                    100.0)).sync_on(lane)
                refused.append("wrote")
            except ts.BorrowError as err:
                refused.append(str(err))
        thread = threading.Thread(target=same_stream_writer)
        thread.start()
        fill(ts.borrow_mut(g).partition((256,)), 1.0).then(
            lambda _r: D.all_reduce(g)).sync_on(lane)
        thread.join()
        assert "running all_reduce" in refused[0], refused
    else:
        time.sleep(1.5)
        fill(ts.borrow_mut(g).partition((256,)), 1.0).then(
            lambda _r: D.all_reduce(g)).sync_on(lane)
    assert g.numpy().tolist() == [2.0] * 256
    # a group this process is not in: refused (torch would skip it), the loans given back
    import torch.distributed as dist
    only_0 = dist.new_group([0])
    alone = ts.ones((4,), ts.float32, device="cpu").sync()
    if rank == 0:
        assert D.all_reduce(alone, group=only_0).sync().numpy().tolist() == [1.0] * 4
    else:
        with pytest.raises(ts.ArgumentError, match=r"rank 1\) is not in the process group"):
            D.all_reduce(alone, group=only_0).sync()
        assert alone.numpy().tolist() == [1.0] * 4
    # a shared read lets other readers in, not writers
    y = ts.tensor(np.ones(4, np.float32), device="cpu").sync()
    gathered = ts.zeros((8,), ts.float32, device="cpu").sync()
    op = D.all_gather(gathered, y)
    assert y.numpy().tolist() == [1.0] * 4
    with pytest.raises(ts.BorrowError):
        y.copy_(y.clone().sync()).sync()
    with pytest.raises(ts.BorrowError):
        gathered.numpy()
    op.sync()
    # a dropped op gives its loans back
    z = ts.zeros((3,), ts.float32, device="cpu").sync()
    dropped = D.all_reduce(z)
    del dropped
    assert z.numpy().tolist() == [0.0] * 3
    # a written buffer overlapping another argument is refused before anything is sent
    buffer = ts.zeros((8,), ts.float32, device="cpu").sync()
    with pytest.raises(ts.AliasingError, match="'output' \\(written\\) and 'input' overlap"):
        D.all_gather(buffer, buffer[0:4])
    # read-only tensors (a .shared() result) can be sent and gathered, never written
    ro = ts.tensor(np.full(2, rank, np.float32), device="cpu").shared().sync()
    both = ts.zeros((4,), ts.float32, device="cpu").sync()
    assert D.all_gather(both, ro).sync().numpy().tolist() == [0.0, 0.0, 1.0, 1.0]
    with pytest.raises(ts.BorrowError, match="read-only result of .shared()"):
        D.all_reduce(ro)
    # inside torch's coalescing context a collective would run after the op returned: refused
    from torch.distributed.distributed_c10d import _coalescing_manager
    w = ts.zeros((2,), ts.float32, device="cpu").sync()
    op = D.all_reduce(w)
    with _coalescing_manager():
        with pytest.raises(ts.ArgumentError, match="coalescing context"):
            op.sync()
    assert w.numpy().tolist() == [0.0, 0.0]  # refused before anything was queued
    # a collective torch refuses when it runs gives its loans back
    bad = D.broadcast(z, src=WORLD + 3)
    with pytest.raises(Exception):
        bad.sync()
    assert z.numpy().tolist() == [0.0] * 3
    assert D.all_reduce(z).sync() is z  # the ranks still agree on the collectives run


def _worker(rank: int, init_file: str, failures) -> None:
    try:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=WORLD)
        try:
            _checks(rank)
        finally:
            dist.destroy_process_group()
    except BaseException:
        failures.put(f"rank {rank}:\n{traceback.format_exc()}")
        raise


def test_collectives_and_their_borrows_across_two_processes(tmp_path, run_ranks):
    errors, exits = run_ranks(_worker, (str(tmp_path / "init"),), WORLD, timeout=240)
    assert not errors, "\n".join(errors)
    assert exits == [0] * WORLD


# -- in this process: argument errors (no process group needed) -------------------------------

def test_arguments_are_checked_when_the_op_is_made():
    t = ts.zeros((4,), ts.float32, device="cpu").sync()
    with pytest.raises(ts.ArgumentError, match="unknown reduction 'mean'.*\n  fix: one of sum"):
        D.all_reduce(t, "mean")
    with pytest.raises(ts.ArgumentError, match="'tensor' is a ndarray, not a tilesafe Tensor"):
        D.all_reduce(np.zeros(4))
    with pytest.raises(ts.ArgumentError, match="'tensor' is not contiguous"):
        D.all_reduce(ts.zeros((4, 4), ts.float32, device="cpu").sync()[:, 1])
    with pytest.raises(ts.ArgumentError, match=r"'output' of shape \(5, 2\) cannot hold "):
        D.all_gather(ts.zeros((5, 2), device="cpu").sync(), ts.zeros((2, 2), device="cpu").sync())
    # two DLPack imports of one buffer, overlapping: refused as a launch's arguments are
    buffer = np.zeros(8, np.float32)
    with pytest.raises(ts.AliasingError, match="'output' \\(written\\) and 'input' overlap"):
        D.all_gather(ts.from_dlpack(buffer), ts.from_dlpack(buffer[2:6]))
    with pytest.raises(ts.ArgumentError, match="'output' is float16, 'input' float32"):
        D.all_gather(ts.zeros((4,), ts.float16, device="cpu").sync(),
                     ts.zeros((2,), device="cpu").sync())


def test_driving_without_a_process_group_says_how_to_start_one():
    t = ts.zeros((4,), ts.float32, device="cpu").sync()
    op = D.all_reduce(t)
    with pytest.raises(ts.ArgumentError, match="no torch.distributed process group is "
                       "initialized.*\n  fix: start the processes with torchrun"):
        op.sync()
    assert t.numpy().tolist() == [0.0] * 4  # the failed op gave its loans back


def test_a_collective_is_not_recorded_into_a_graph():
    t = ts.zeros((4,), ts.float32, device="cpu").sync()
    op = D.all_reduce(t)
    with ts.CudaGraph.scope() as graph:
        with pytest.raises(ts.DeviceOpError, match="all_reduce.*cannot be recorded into a "
                           "graph"):
            graph.record(op)
    with pytest.raises(ts.ArgumentError, match="no torch.distributed process group"):
        op.sync()  # (still pending until driven: driving it ends its loans)
    assert t.numpy().tolist() == [0.0] * 4


def test_a_collective_made_in_a_chain_step_but_driven_on_another_stream_is_checked_again():
    """Made inside a step of a chain, a collective's loans are valid on the chain's stream
    only, where the launch before it runs first; driven on another stream it is checked again,
    and the launch's pending write of its buffer refuses it (before any process group is
    needed)."""
    x = ts.zeros((256,), ts.float32, device="cpu").sync()
    other = ts.Stream("cpu")
    refused = []

    def step(result):
        op = D.all_reduce(x)  # lent for the chain's stream
        with pytest.raises(ts.BorrowError, match="pending launch of 'fill'"):
            op.sync_on(other)
        refused.append(True)
        return result

    fill(ts.borrow_mut(x).partition((256,)), 2.0).then(step).sync()
    assert refused == [True] and x.numpy().tolist() == [2.0] * 256


@pytest.fixture
def one_rank(tmp_path):
    """A gloo process group of this process alone (torch.distributed's default group)."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0,
                            world_size=1)
    yield dist
    dist.destroy_process_group()


class _FailingWork:
    def wait(self):
        raise RuntimeError("the communicator was aborted")


def test_a_collective_that_fails_before_or_after_torch_starts_it(one_rank, monkeypatch):
    """Refused before torch has it: the loans go back. Failed after torch started it: whether
    the collective still touches the buffers is unknown, so they stay borrowed for good."""
    t = ts.ones((4,), ts.float32, device="cpu").sync()
    op = D.all_reduce(t)
    monkeypatch.setattr(op, "_call", lambda dist, views: (_ for _ in ()).throw(
        RuntimeError("torch refused it")))
    with pytest.raises(RuntimeError, match="torch refused it"):
        op.sync()
    assert t.numpy().tolist() == [1.0] * 4  # nothing started: the loans went back
    op = D.all_reduce(t)
    monkeypatch.setattr(op, "_call", lambda dist, views: _FailingWork())
    with pytest.raises(ts.DeviceOpError, match="failed after torch started it.*borrowed for "
                                               "good"):
        op.sync()
    with pytest.raises(ts.BorrowError, match="running all_reduce"):
        t.numpy()


class _Done:
    def wait(self):
        return True


def test_a_collective_lends_into_the_book_its_memory_has_when_it_runs(one_rank, monkeypatch):
    """An import overlapping two tensors merges their memory's loan books after the
    collective was made: while it runs, every tensor over its buffer (the merged import too)
    still sees its loans, so a host read or write of the buffer is refused (the collective lent
    into the emptied book it had noted at creation, which no memory pointed to)."""
    big = np.zeros(16, np.float32)
    x, _ = ts.from_dlpack(big[:8]), ts.from_dlpack(big[8:])  # (two regions, two books)
    op = D.all_reduce(x)
    whole = ts.from_dlpack(big)  # overlaps both: the books merge
    seen = []

    def running(dist, views):
        for name, access in (("read x", x.numpy), ("read whole", whole.numpy)):
            try:
                access()
                seen.append(f"{name} allowed")
            except ts.BorrowError:
                seen.append(f"{name} refused")
        return _Done()
    monkeypatch.setattr(op, "_call", running)
    op.sync()
    assert seen == ["read x refused", "read whole refused"]
    assert x.numpy().tolist() == [0.0] * 8  # (and free again once it completed)
