"""Threads and asyncio on the cpu device, where work runs when it is enqueued: work that shares
loans because it is on one stream must still run in that stream's order, one piece at a time,
or a read-modify-write of one thread lands inside another's. Each test makes many threads
enqueue on shared streams and graphs and checks the result exactly (before streams ran their
host work in order, every trial here lost updates)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time

import numpy as np

import tilesafe as ts
import tilesafe.core as tc

THREADS, ROUNDS, N = 8, 25, 64


@ts.kernel
def bump(z: tc.MutTensor[tc.f32, "S"]):
    z.store(z.load() + 1.0)


@contextlib.contextmanager
def _switching_often():
    """Threads switch as often as the interpreter allows, so a kernel run that is not alone on
    its stream is interrupted by another in every trial."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _run_threads(target) -> None:
    errors: list = []

    def guarded(i):
        try:
            target(i)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)
    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(THREADS)]
    with _switching_often():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]


def test_threads_enqueueing_on_one_stream_lose_no_update():
    t = ts.zeros(N, device="cpu").sync()
    stream = ts.Stream("cpu")

    def work(_):
        for _ in range(ROUNDS):  # each step borrows t inside the pipeline running on stream
            ts.value(None).then(lambda _: bump(ts.borrow_mut(t).partition(16))).sync_on(stream)
    _run_threads(work)
    assert np.array_equal(t.numpy(), np.full(N, THREADS * ROUNDS, np.float32))


def test_one_graph_replayed_from_many_threads_loses_no_update():
    t = ts.zeros(N, device="cpu").sync()
    stream = ts.Stream("cpu")
    with ts.CudaGraph.scope(stream) as graph:
        for _ in range(3):
            graph.record(bump(ts.borrow_mut(t).partition(16)))

    def work(_):
        for _ in range(ROUNDS):
            graph.launch(stream).sync()
    _run_threads(work)
    assert np.array_equal(t.numpy(), np.full(N, THREADS * ROUNDS * 3, np.float32))


def test_awaited_pipelines_on_one_stream_lose_no_update():
    t = ts.zeros(N, device="cpu").sync()
    stream = ts.Stream("cpu")

    def pipeline():
        op = ts.value(None)
        for _ in range(ROUNDS):
            op = op.then(lambda _: bump(ts.borrow_mut(t).partition(16)))
        return op

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, pipeline().sync_on, stream)
                               for _ in range(THREADS)))
    with _switching_often():
        asyncio.run(main())
    assert np.array_equal(t.numpy(), np.full(N, THREADS * ROUNDS, np.float32))


def test_a_shared_op_driven_from_many_threads_runs_once():
    runs = []

    def slow(stream):  # long enough for every thread to arrive while it runs
        runs.append(1)
        time.sleep(0.05)
        return len(runs)
    shared = ts.DeviceOp(slow, "count", ts.devices()[0]).shared()
    results = []
    _run_threads(lambda _: results.append(shared.sync()))
    assert runs == [1] and results == [1] * THREADS


def test_threads_that_first_use_a_stream_together_share_one_native_stream():
    """A stream makes its native stream on first use. Threads racing to that first use must
    all get the one it keeps: a second one, dropped by the race, would be destroyed by its
    garbage collection while a thread still launches on its handle (a crash on the GPU)."""
    made = []

    class SlowPlatform:  # stands in for the GPU platform: making a native stream takes time
        def native_stream(self, device, foreign):
            time.sleep(0.01)
            made.append(type("Native", (), {"handle": 1000 + len(made)})())
            return made[-1]

    for _ in range(5):
        made.clear()
        stream = ts.Stream("cpu")
        stream._platform = SlowPlatform()
        seen, start = [], threading.Barrier(THREADS)

        def first_use():
            start.wait()
            seen.append((stream.native, stream.native_address))

        threads = [threading.Thread(target=first_use) for _ in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(made) == 1 and len(seen) == THREADS
        assert all(native is made[0] and address == 1000 for native, address in seen)


def _drive_from_two_threads(make_op, drive, trials: int) -> int:
    """How many of ``trials`` ops, each driven by two threads at once, ran twice."""
    twice = 0
    with _switching_often():
        for _ in range(trials):
            op, ran = make_op()
            barrier = threading.Barrier(2)

            def attempt():
                barrier.wait()
                try:
                    drive(op)
                except ts.DeviceOpError:
                    pass
            threads = [threading.Thread(target=attempt) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            twice += ran() > 1
    return twice


def test_an_op_driven_by_two_threads_at_once_runs_once():
    """The second drive is an error however the two threads interleave: an op's check that it
    is unused and its mark are one step (without it, 8 of 3000 ops ran twice here). Launches,
    which check and mark on their own paths (compiled and Python), are driven the same way."""
    from tilesafe.deviceops.deviceop import DeviceOp

    def make_op():
        runs: list = []
        return DeviceOp(lambda stream: runs.append(1), "probe", None), lambda: len(runs)
    assert _drive_from_two_threads(make_op, lambda op: op._consume("driven"), 3000) == 0

    def make_launch():
        z = ts.zeros(4, device="cpu").sync()
        return bump(ts.borrow_mut(z).partition(4)), lambda: int(z.numpy()[0])  # 1 per run
    assert _drive_from_two_threads(make_launch, lambda op: op.sync(), 300) == 0


def test_a_graph_replay_op_driven_by_two_threads_at_once_runs_once(monkeypatch):
    """``graph.launch().sync()`` from two threads at once replays the graph once and refuses
    the other drive. The window between a drive's check and its mark is widened here (the
    call-site lookup that sat between them sleeps), so without the one-step claim both
    threads would replay in every trial."""
    from tilesafe.deviceops import graph as graph_module
    z = ts.zeros(4, device="cpu").sync()
    with ts.CudaGraph.scope() as g:
        g.record(bump(ts.borrow_mut(z).partition(4)))
    where = graph_module.caller_location

    def slow_location(*args, **kwargs):
        time.sleep(0.02)
        return where(*args, **kwargs)
    monkeypatch.setattr(graph_module, "caller_location", slow_location)
    for trial in range(1, 6):
        op, barrier, refused = g.launch(), threading.Barrier(2), []

        def attempt():
            barrier.wait()
            try:
                op.sync()
            except ts.DeviceOpError as err:
                refused.append(err)
        threads = [threading.Thread(target=attempt) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(refused) == 1 and "already" in str(refused[0])
        assert z.numpy()[0] == trial


def test_a_borrowed_partition_is_spent_before_its_loans_end(monkeypatch):
    """When a launch's stream is synchronized, the borrowed partition it used is spent before
    its loans end. Another thread launching with that partition in between is refused either
    way: by the loans while they last, then as moved. (With the loans ended first, a launch
    made at the moment the partition is spent ran on it: about 1 in 1000 tries at full
    speed.) Each other-thread launch here runs just before the spend."""
    from tilesafe.host.partition import Partition
    z = ts.zeros(4, device="cpu").sync()
    p = ts.borrow_mut(z).partition(4)
    outcomes: list = []
    spend = Partition._spend

    def launch_meanwhile(self, why, where):
        if self is p and not outcomes:
            def other():
                try:
                    bump(p).sync()
                    outcomes.append("ran")
                except (ts.BorrowError, ts.MovedError) as err:
                    outcomes.append(type(err).__name__)
            thread = threading.Thread(target=other)
            thread.start()
            thread.join(30)
        return spend(self, why, where)
    monkeypatch.setattr(Partition, "_spend", launch_meanwhile)
    bump(p).sync()
    assert outcomes == ["BorrowError"]
    assert z.numpy()[0] == 1


def test_a_graph_updated_while_other_threads_replay_it_runs_whole_replays_only():
    """Each replay runs the work of one update, node by node in order, its checks and loans
    taken once for all nodes: a thread updating the graph meanwhile never makes a replay run
    one update's first node with another's second (each second node copies what the first
    wrote, so every pair ends equal)."""
    @ts.kernel
    def copy_from(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
        z.store(tc.load_tile_like(x, z))

    stream = ts.Stream("cpu")
    pairs = [(ts.zeros(N, device="cpu").sync(), ts.zeros(N, device="cpu").sync())
             for _ in range(ROUNDS + 1)]

    def record(into, pair):
        first, second = pair
        into.record(bump(ts.borrow_mut(first).partition(16)))
        into.record(copy_from(ts.borrow_mut(second).partition(16), first))
    with ts.CudaGraph.scope(stream) as graph:
        record(graph, pairs[0])
    done = threading.Event()

    def work(i):
        if i == 0:
            try:
                for pair in pairs[1:]:
                    with graph.update() as g:
                        record(g, pair)
            finally:
                done.set()
            return
        while not done.is_set():
            graph.launch(stream).sync()
    _run_threads(work)
    for first, second in pairs:
        assert np.array_equal(first.numpy(), second.numpy())
