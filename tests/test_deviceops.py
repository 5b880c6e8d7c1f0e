"""DeviceOps on the cpu device: laziness, composition, drive-once, shared ops, asyncio,
streams, and graphs (record, replay, update, rejected allocations)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import BorrowError, DeviceOpError

pytestmark = pytest.mark.usefixtures("launch_path")  # both launch paths


@ts.kernel
def axpy(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], alpha: float):
    z.store(z.load() + tc.load_tile_like(x, z) * alpha)


def _ones(n=64):
    return ts.ones(n).sync()


def _cpu_ones(n=64):
    return ts.ones(n, device="cpu").sync()


def test_nothing_runs_before_a_driver():
    before = axpy.launch_count
    x = _ones()
    op = axpy(ts.zeros(64).partition(16), x, 2.0)
    chained = op.then(lambda res: axpy(res[0], x, 1.0))
    assert axpy.launch_count == before
    z, *_ = chained.sync()
    assert axpy.launch_count == before + 2
    assert np.array_equal(z.unpartition().numpy(), np.full(64, 3.0))


def test_constructors_are_lazy_and_run_once():
    op = ts.arange(8)
    t = op.sync()
    assert np.array_equal(t.numpy(), np.arange(8))
    with pytest.raises(DeviceOpError, match="already driven"):
        op.sync()


def test_driving_a_launch_twice_is_an_error():
    op = axpy(ts.zeros(16).sync().partition(8), _ones(16), 1.0)
    op.sync()
    with pytest.raises(DeviceOpError, match="an op runs once"):
        op.sync()


def test_map_zip_and_then_compose_on_one_stream():
    x = _ones(32)
    a = axpy(ts.zeros(32).partition(8), x, 1.0).map(lambda r: r[0].unpartition())
    b = ts.full(4, 7.0)
    ta, tb = ts.zip(a, b).sync()
    assert np.array_equal(ta.numpy(), np.ones(32)) and np.array_equal(tb.numpy(), np.full(4, 7))
    s = ts.Stream()
    assert ts.value(5).then(lambda v: v + 1).sync_on(s) == 6


def test_shared_executes_once_and_is_read_only():
    runs = []

    def make(stream_result):
        runs.append(1)
        return stream_result
    shared = ts.ones(16).map(make).shared()
    t1 = shared.sync()
    t2 = shared.sync()
    assert t1 is t2 and len(runs) == 1
    z1, _ = axpy(ts.zeros(16).partition(8), shared, 2.0).sync()
    z2, _ = axpy(ts.zeros(16).partition(8), shared, 3.0).sync()
    assert np.array_equal(z2.unpartition().numpy(), np.full(16, 3.0))
    with pytest.raises(BorrowError, match="shared, read-only"):
        ts.borrow_mut(t1).partition(8)
    with pytest.raises(BorrowError, match="shared, read-only"):
        t1.partition(8)


def test_asyncio_runs_two_pipelines_while_other_coroutines_progress():
    ticks = []

    async def ticker():
        for _ in range(5):
            ticks.append(1)
            await asyncio.sleep(0)

    async def pipeline(value):
        x = ts.full(4096, value).sync()
        z = await ts.zeros(4096).partition(256)
        for _ in range(3):
            z, x = await axpy(z, x, 1.0)
        return z.unpartition().numpy()

    async def main():
        return await asyncio.gather(pipeline(1.0), pipeline(2.0), ticker())

    first, second, _ = asyncio.run(main())
    assert np.array_equal(first, np.full(4096, 3.0)) and np.array_equal(second, np.full(4096, 6.0))
    assert len(ticks) == 5


def test_borrows_hold_while_an_awaited_op_is_pending():
    t = ts.zeros(64).sync()
    x = _ones()

    async def main():
        op = axpy(ts.borrow_mut(t).partition(16), x, 1.0)
        task = asyncio.ensure_future(op)
        with pytest.raises(BorrowError):
            t.numpy()  # the launch has not completed
        await task
        return t.numpy()

    assert np.array_equal(asyncio.run(main()), np.ones(64))


def test_an_await_that_only_enqueues_polls_then_hands_the_wait_to_a_thread(monkeypatch):
    """The enqueue-on-the-loop path of ``await`` (taken on cuda for launches that need no
    compiling), driven with a cpu stream and a stand-in for the driver's stream query."""
    from tilesafe.deviceops import awaiting
    from tilesafe.driver.platform import HostPlatform
    for idle_after, waited_on_a_thread in ((3, False), (None, True)):
        # the spin is timed: on a loaded machine it could end before the fourth query
        monkeypatch.setattr(awaiting, "SPIN_SECONDS", 5.0 if idle_after else 50e-6)
        queries, threads = [], []
        monkeypatch.setattr(HostPlatform, "is_idle", lambda self, stream: queries.append(
            stream) or (idle_after is not None and len(queries) > idle_after))
        stream, go_on = ts.Stream("cpu"), threading.Event()
        sync = stream.synchronize

        def synchronize():  # a waiter thread's wait lasts until the test has looked
            threads.append(threading.current_thread())
            if threads[-1] is not threading.main_thread():
                go_on.wait(10)
            sync()
        monkeypatch.setattr(stream, "synchronize", synchronize)
        t, x = ts.zeros(64, device="cpu").sync(), _cpu_ones()
        op = axpy(ts.borrow_mut(t).partition(16), x, 1.0)
        _ready_to_enqueue(op)  # ready to enqueue

        async def main():
            task = asyncio.ensure_future(awaiting.await_on_loop(op, stream, None))
            await asyncio.sleep(0)  # the op is enqueued; its loans last until the wait ends
            if waited_on_a_thread:
                with pytest.raises(BorrowError):
                    t.numpy()
                go_on.set()
            return await task

        result = asyncio.run(main())
        assert result[1] is x and np.array_equal(t.numpy(), np.ones(64))
        assert not t._alloc.loans and not x._alloc.loans
        on_the_loop = threads == [threading.main_thread()]
        assert on_the_loop != waited_on_a_thread, threads
        if idle_after is not None:
            assert len(queries) == idle_after + 1


def _ready_to_enqueue(op):
    """Make a cpu launch's plan look like a GPU launch's after its first run: its backend
    launch is bound, and running it only enqueues device work."""
    bound = op._kernel._bound(op._early)
    if not bound.enqueues_only:  # (a GPU launch's packed arguments only enqueue already)
        bound.enqueues_only = True


def test_only_launches_ready_to_enqueue_are_awaited_on_the_loop():
    x, stream = _ones(), ts.Stream("cpu")
    op = axpy(ts.zeros(64).sync().partition(16), x, 1.0)
    assert not op._only_enqueues(stream)  # not yet packed for a driver (its first launch compiles)
    _ready_to_enqueue(op)
    assert op._only_enqueues(stream)
    pending = axpy(ts.zeros(64).partition(16), x, 1.0)  # an argument still to be produced
    assert not pending._only_enqueues(stream)
    assert not op.then(lambda r: r)._only_enqueues(stream)  # a chain is judged step by step
    del op, pending


def _await_on_loop_with_stand_in_queries(monkeypatch, op, stream):
    """Await ``op`` through the cuda await path on a cpu stream (the driver's stream query
    stands in as always idle); returns the result and the threads each step ran on."""
    from tilesafe.deviceops import awaiting
    from tilesafe.driver.platform import HostPlatform
    monkeypatch.setattr(HostPlatform, "is_idle", lambda self, stream: True)

    async def main():
        return await awaiting.await_on_loop(op, stream, None)
    return asyncio.run(main())


def test_an_awaited_chain_enqueues_on_the_loop_while_its_steps_only_enqueue(monkeypatch):
    x, stream, threads = _cpu_ones(), ts.Stream("cpu"), []
    first = axpy(ts.zeros(64, device="cpu").sync().partition(16), x, 1.0)
    _ready_to_enqueue(first)  # the plan every step's launch reuses

    def step(result):
        threads.append(threading.current_thread())
        return axpy(result[0], x, 1.0)
    op = first
    for _ in range(4):
        op = op.then(step)
    z, *_ = _await_on_loop_with_stand_in_queries(monkeypatch, op, stream)
    assert threads == [threading.main_thread()] * 4
    assert not x._alloc.loans
    assert np.array_equal(z.unpartition().numpy(), np.full(64, 5.0))
    with pytest.raises(DeviceOpError, match="an op runs once"):
        op.sync()


def test_an_awaited_chain_hands_the_rest_to_a_thread_at_a_step_that_does_more(monkeypatch):
    """A step whose launch is not ready to enqueue (a new specialization, which compiles on a
    GPU) and every step after it run on a waiter thread, after the steps enqueued before."""
    x, y, stream, threads = _cpu_ones(), _cpu_ones(32), ts.Stream("cpu"), []
    first = axpy(ts.zeros(64, device="cpu").sync().partition(16), x, 1.0)
    _ready_to_enqueue(first)
    other = ts.zeros(32, device="cpu").sync()

    def same_plan(result):
        threads.append(threading.current_thread())
        return axpy(result[0], x, 1.0)

    def new_plan(result):
        threads.append(threading.current_thread())
        return axpy(ts.borrow_mut(other).partition(32), y, 2.0).map(lambda _: result)
    op = first.then(same_plan).then(new_plan).then(same_plan).then(same_plan)
    z, *_ = _await_on_loop_with_stand_in_queries(monkeypatch, op, stream)
    main = threading.main_thread()
    assert threads[:2] == [main, main] and all(t is not main for t in threads[2:]), threads
    assert np.array_equal(z.unpartition().numpy(), np.full(64, 4.0))
    assert np.array_equal(other.numpy(), np.full(32, 2.0))
    assert not x._alloc.loans and not y._alloc.loans and not other._alloc.loans


def test_an_error_in_an_awaited_chain_ends_the_loans_of_what_it_enqueued(monkeypatch):
    x, stream = _cpu_ones(), ts.Stream("cpu")
    z = ts.zeros(64, device="cpu").sync()
    first = axpy(ts.borrow_mut(z).partition(16), x, 1.0)
    _ready_to_enqueue(first)

    def failing(result):
        raise ValueError("a host step failed")
    with pytest.raises(ValueError, match="a host step failed"):
        _await_on_loop_with_stand_in_queries(monkeypatch, first.then(failing), stream)
    assert not x._alloc.loans and not z._alloc.loans
    assert np.array_equal(z.numpy(), np.ones(64))


def test_a_graph_launch_waits_for_the_stream_it_replays_on():
    """``.sync()`` and ``await`` replay on the launch's stream, else the recording stream, and
    wait for that stream; a drive that names a stream replays there."""
    x, z = _cpu_ones(32), ts.zeros(32, device="cpu").sync()
    recorded_on, chosen, named = ts.Stream("cpu"), ts.Stream("cpu"), ts.Stream("cpu")
    with ts.CudaGraph.scope(recorded_on) as graph:
        graph.record(axpy(ts.borrow_mut(z).partition(8), x, 1.0))
    graph.launch().sync()
    assert np.array_equal(z.numpy(), np.ones(32))  # complete: its loans ended
    graph.launch(chosen).sync()
    asyncio.run(_awaited(graph.launch()))
    graph.launch(chosen).sync_on(named)
    graph.replay()
    assert np.array_equal(z.numpy(), np.full(32, 5.0))
    assert not recorded_on._pending and not chosen._pending and not named._pending
    op = graph.launch()
    op.sync()
    with pytest.raises(DeviceOpError, match="an op runs once"):
        op.sync()


async def _awaited(op):
    return await op


def test_streams_pool_and_wrapping():
    a, b = ts.next_stream(), ts.next_stream()
    assert a is not b or ts.exec.stream.POOL_SIZE == 1

    class Foreign:
        def __cuda_stream__(self):
            return (0, 1234)
    assert ts.Stream.wrap(Foreign()).handle == 1234
    e = ts.Event().record(a)
    assert e.query()
    e.synchronize()


def test_graph_record_replay_and_update():
    x = ts.tensor(np.arange(32, dtype=np.float32)).sync()
    z = ts.zeros(32).sync().partition(8)
    before = axpy.launch_count
    with ts.CudaGraph.scope() as graph:
        graph.record(axpy(z, x, 1.0))
        graph.record(axpy(z, x, 1.0))
    assert axpy.launch_count == before  # recording runs nothing
    for _ in range(3):
        graph.launch().sync()
    assert axpy.launch_count == before + 6
    assert np.array_equal(z.unpartition().numpy(), 6 * np.arange(32))
    w = ts.zeros(32).sync().partition(8)
    x2 = ts.ones(32).sync()
    with graph.update() as g:
        g.record(axpy(w, x2, 2.0))
        g.record(axpy(w, x2, 2.0))
    graph.replay()
    assert np.array_equal(w.unpartition().numpy(), np.full(32, 4.0))


def test_a_graph_compiles_its_kernels_before_its_first_replay():
    """``CudaGraph.compile`` builds every recorded launch's kernel and runs nothing; the first
    replay then compiles nothing. It is refused inside the ``with`` block."""
    @ts.kernel
    def scale_into(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],  # noqa: F821
                   a: float):
        z.store(tc.load_tile_like(x, z) * a)
    x = ts.tensor(np.arange(16, dtype=np.float32)).sync()
    out = ts.zeros(16).sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(scale_into(ts.borrow_mut(out).partition(8), x, 3.0))
        with pytest.raises(DeviceOpError, match="not complete; compile it after its 'with'"):
            graph.compile()
    assert scale_into.compile_count == 0
    graph.compile()
    assert scale_into.compile_count == 1 and scale_into.launch_count == 0
    assert np.array_equal(out.numpy(), np.zeros(16))  # nothing ran
    graph.replay()
    assert scale_into.compile_count == 1
    assert np.array_equal(out.numpy(), 3 * np.arange(16))


def test_a_replay_refused_at_a_later_node_runs_no_node():
    """A replay checks every node before it runs any: the second node's input mutably
    borrowed by pending work refuses the replay with the first node not run (on the cpu
    device the nodes run one by one; on a GPU the graph is one launch)."""
    x, y = _ones(32), _ones(32)
    first, second = ts.zeros(32).sync(), ts.zeros(32).sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(axpy(ts.borrow_mut(first).partition(8), x, 1.0))
        graph.record(axpy(ts.borrow_mut(second).partition(8), y, 1.0))
    pending = axpy(ts.borrow_mut(y).partition(8), x, 1.0)  # writes y, not driven yet
    with pytest.raises(ts.BorrowError, match="mutably borrowed by the pending launch"):
        graph.launch().sync()
    assert np.array_equal(first.numpy(), np.zeros(32))
    pending.sync()
    graph.launch().sync()
    assert np.array_equal(first.numpy(), np.ones(32))
    assert np.array_equal(second.numpy(), np.full(32, 2.0))


def test_a_recorded_copy_reads_what_an_earlier_node_wrote():
    """A copy node runs in the replay's stream order: the launch before it in the graph (or
    in a chain) wrote its source on that stream, so that launch's loan does not block it."""
    a, b, x = ts.zeros(32).sync(), ts.zeros(32).sync(), _ones(32)
    with ts.CudaGraph.scope() as graph:
        graph.record(axpy(ts.borrow_mut(a).partition(8), x, 1.0))
        graph.record(b.copy_(a))
    for replay in range(1, 3):
        graph.launch().sync()
        assert np.array_equal(b.numpy(), np.full(32, float(replay)))
    axpy(ts.borrow_mut(a).partition(8), x, 1.0).then(lambda r: b.copy_(a)).sync()
    assert np.array_equal(b.numpy(), np.full(32, 3.0))


def test_a_launch_made_in_a_step_and_driven_later_is_checked_again():
    """A launch made inside a pipeline step is validated for the step's stream at once, and
    work already enqueued there does not block it. One kept and driven later, after the
    pipeline made what it writes the read-only result of ``.shared()`` or moved it, is
    checked again and refused (it used to write the read-only or moved tensor)."""
    x = _ones(32)
    for change in ("shared", "moved"):
        t = ts.zeros(32).sync()
        stream, kept, moved = ts.Stream(t.device), [], []

        def step(tensor):
            kept.append(axpy(ts.borrow_mut(tensor).partition(8), x, 5.0))  # not driven here
            if change == "moved":
                moved.append(tensor.partition(8))
            return tensor
        op = ts.value(t).then(step)
        (op.shared() if change == "shared" else op).sync_on(stream)
        error = ts.BorrowError if change == "shared" else ts.MovedError
        with pytest.raises(error):
            kept.pop().sync_on(stream)
        data = t if change == "shared" else moved.pop().unpartition()
        assert np.array_equal(data.numpy(), np.zeros(32))


def test_graph_rejects_allocating_ops_at_record_time():
    with ts.CudaGraph.scope() as graph:
        with pytest.raises(DeviceOpError, match="allocates memory"):
            graph.record(ts.zeros(16))
        with pytest.raises(DeviceOpError, match="allocates memory"):
            graph.record(axpy(ts.zeros(16).partition(8), _ones(16), 1.0))
    t = _ones(8)
    dst = ts.zeros(8).sync()
    copy = ts.CudaGraph.capture(dst.copy_(t))
    copy.launch().sync()
    assert np.array_equal(dst.numpy(), np.ones(8))


def test_a_chain_of_launches_records_step_by_step():
    """A chain whose steps build launches on what the previous launch hands back records
    like those launches one after the other: each step is called with the handed-back
    arguments (known without running), after the previous launch's loans ended, and a last
    step that returns a value (not an op) just ends it."""
    x = ts.tensor(np.arange(16, dtype=np.float32)).sync()
    t, u = ts.zeros(16).sync(), ts.zeros(16).sync()
    seen = []

    def second(handed_back):
        seen.append(handed_back)
        return axpy(ts.borrow_mut(u).partition(8), t, 2.0)  # reads what the first wrote
    op = axpy(ts.borrow_mut(t).partition(8), x, 1.0).then(second).then(lambda r: "done")
    before = axpy.launch_count
    with ts.CudaGraph.scope() as graph:
        graph.record(op)
    assert axpy.launch_count == before and len(graph.nodes) == 2
    assert seen[0].x is x  # the first launch's arguments, handed back while recording
    for _ in range(2):
        graph.replay()
    assert np.array_equal(t.numpy(), 2 * np.arange(16))
    assert np.array_equal(u.numpy(), 2 * (np.arange(16) + 2 * np.arange(16)))


def test_a_chain_that_allocates_or_runs_host_work_is_not_recorded():
    x = _ones(16)
    t = ts.zeros(16).sync()
    allocating = axpy(ts.borrow_mut(t).partition(8), x, 1.0).then(
        lambda r: axpy(ts.zeros(16).partition(8), x, 1.0))
    with ts.CudaGraph.scope() as graph:
        with pytest.raises(DeviceOpError, match="cannot be recorded"):
            graph.record(allocating)
    t.numpy()  # the first launch's loans ended with the failed recording
    mapped = axpy(ts.borrow_mut(t).partition(8), x, 1.0).map(lambda r: r)
    with ts.CudaGraph.scope() as graph:
        with pytest.raises(DeviceOpError, match="cannot be recorded"):
            graph.record(mapped)


def test_a_chain_step_that_writes_a_shared_result_or_a_moved_tensor_is_refused():
    """Recording runs each step's checks: a step writing a ``.shared()`` result (read-only for
    good) or a tensor moved into a partition is refused as the launch would be, nothing of
    the chain is recorded, and the memory the first launch borrowed is free again."""
    x = _ones(16)
    t = ts.zeros(16).sync()
    frozen = ts.ones(16).shared().sync()
    moved = ts.zeros(16).sync()
    moved.partition(8)
    for target, error in ((frozen, BorrowError), (moved, ts.MovedError)):
        op = axpy(ts.borrow_mut(t).partition(8), x, 1.0).then(
            lambda r, target=target: axpy(ts.borrow_mut(target).partition(8), x, 1.0))
        with ts.CudaGraph.scope() as graph:
            with pytest.raises(error):
                graph.record(op)
        assert graph.nodes == []
        t.numpy()  # the first launch's loans ended
    assert np.array_equal(frozen.numpy(), np.ones(16, np.float32))


def test_graph_update_rejects_a_different_shape():
    z = ts.zeros(32).sync().partition(8)
    graph = ts.CudaGraph.capture(axpy(z, _ones(32), 1.0))
    with pytest.raises(DeviceOpError, match="differ"):
        graph.update(axpy(ts.zeros(32).sync().partition(16), _ones(32), 1.0))


def test_recording_releases_the_launch_borrows_and_replay_takes_them():
    t = ts.zeros(16).sync()
    graph = ts.CudaGraph.capture(axpy(ts.borrow_mut(t).partition(8), _ones(16), 1.0))
    t.numpy()  # recorded, not running: t is readable
    graph.replay()
    assert np.array_equal(t.numpy(), np.ones(16))


def test_a_long_then_chain_runs_as_a_loop_on_one_stream():
    x = _ones(32)
    op = axpy(ts.zeros(32).sync().partition(8), x, 1.0)
    for _ in range(1999):  # deeper than Python's recursion limit
        op = op.then(lambda res: axpy(*res[:2], 1.0))
    z, *_ = op.sync()
    assert np.array_equal(z.unpartition().numpy(), np.full(32, 2000.0))


def test_loans_of_a_pipeline_end_when_its_stream_is_synchronized():
    t = ts.zeros(16).sync()
    seen = []

    def check(res):
        with pytest.raises(BorrowError):  # the first launch has not been observed complete
            t.numpy()
        seen.append(1)
        return res
    axpy(ts.borrow_mut(t).partition(8), _ones(16), 1.0).then(check).sync()
    assert seen and np.array_equal(t.numpy(), np.ones(16))


def test_an_op_driven_inside_a_chain_records_the_driving_line():
    x = _ones(16)
    inner = []

    def step(res):
        inner.append(axpy(res[0], x, 1.0))
        return inner[-1]
    chain = axpy(ts.zeros(16).sync().partition(8), x, 1.0).then(step)
    drive_line = _line_of_next_statement()
    chain.sync()
    with pytest.raises(DeviceOpError) as err:
        inner[0].sync()
    assert f"already driven at {__file__}:{drive_line}" in str(err.value)


def test_a_second_await_names_the_awaiting_line_not_the_waiter_thread():
    """On the cpu device an await drives the op on a waiter thread: the error of awaiting it
    again named that thread's frame (concurrent/futures/thread.py), not the user's line."""
    op = axpy(ts.zeros(16, device="cpu").sync().partition(8), _cpu_ones(16), 1.0)

    async def twice():
        await op
        try:
            second = _line_of_next_statement()
            await op
        except DeviceOpError as err:
            return second, str(err)
    second, message = asyncio.run(twice())
    assert message.startswith(f"{__file__}:{second}: this DeviceOp"), message


def test_a_timed_out_await_leaves_the_launch_running_and_its_result_reachable():
    """asyncio's own pattern: ``wait_for(shield(task))`` times out while the launch goes on,
    and awaiting the task later hands back its result, so a tensor moved into the launch comes
    back (a plain cancel would drop the result; ``ts.borrow_mut`` keeps the tensor instead)."""
    x = _cpu_ones(1 << 14)
    z = ts.zeros(1 << 14, device="cpu").sync()

    async def serve():
        task = asyncio.ensure_future(axpy(z.partition(1024), x, 2.0))  # z moved in
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await asyncio.wait_for(asyncio.shield(task), timeout=1e-9)
        return await task
    result = asyncio.run(serve())
    assert np.array_equal(result.z.unpartition().numpy(), np.full(1 << 14, 2.0))


def test_a_borrow_blocked_by_work_another_task_runs_says_to_wait_for_it():
    """After an await timed out the launch goes on: the error of touching its tensor says to
    wait for the work already running, not only to drive it."""
    import threading
    x = _cpu_ones(16)
    z = ts.zeros(16, device="cpu").sync()
    release = threading.Event()

    def slow(r):  # (a step before the drive synchronizes: the loans stay)
        release.wait(5)
        return r
    op = axpy(ts.borrow_mut(z).partition(8), x, 1.0).then(slow)

    async def serve():
        task = asyncio.ensure_future(op)
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await asyncio.wait_for(asyncio.shield(task), timeout=0.05)
        try:
            with pytest.raises(BorrowError, match="another thread or task already runs it"):
                z.numpy()
        finally:
            release.set()
        await task
    asyncio.run(serve())
    assert np.array_equal(z.numpy(), np.ones(16))


def test_a_cancelled_await_leaves_no_loan_and_no_partial_write():
    """Cancelling the awaiting task either stops the launch before it runs or lets it finish:
    the borrowed tensor is usable afterwards (no loan left behind) and is all old or all new."""
    x = _cpu_ones(1 << 14)
    for delay in (0, 1, 3):
        z = ts.zeros(1 << 14, device="cpu").sync()

        async def cancel_after(steps):
            task = asyncio.ensure_future(axpy(ts.borrow_mut(z).partition(1024), x, 2.0))
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            for _ in range(200):  # (a drive already on a waiter thread finishes there)
                try:
                    return z.numpy()
                except ts.BorrowError:
                    await asyncio.sleep(0.005)
            return z.numpy()
        values = asyncio.run(cancel_after(delay))
        assert np.all(values == values[0]) and values[0] in (0.0, 2.0)
        ts.borrow_mut(z)  # no loan is left: it can be lent again


class _EnqueuedOp:
    """A stand-in op for ``awaiting.await_on_loop``: enqueued whole at once."""

    def _enqueue(self, stream, where, only_enqueueing):
        return True, object()

    def _enqueue_while_only_enqueueing(self):
        return True


class _BusyStream:
    """A stand-in stream that is never idle; its synchronize waits for ``done`` (an event),
    then records itself in ``synchronized``."""

    class _Platform:
        def is_idle(self, stream):
            return False
    _platform = _Platform()

    def __init__(self, done, synchronized):
        self.done, self.synchronized = done, synchronized

    def synchronize(self):
        self.done.wait(5)
        self.synchronized.append(self)


def _collected(ref, seconds: float = 1.0) -> bool:
    """Whether the weakly referenced object is collected within ``seconds``."""
    import gc
    import time
    deadline = time.perf_counter() + seconds
    while True:
        gc.collect()
        if ref() is None or time.perf_counter() > deadline:
            return ref() is None
        time.sleep(0.01)


def test_a_cancelled_await_holds_the_op_until_its_work_is_complete():
    """An await whose wait went to a waiter thread and was then cancelled drops its own
    references to the op at once; the waiter thread holds the op and what it hands back until
    the stream's work is complete, so their memory is not freed under running work."""
    import threading
    import weakref

    from tilesafe.deviceops import awaiting
    done, synchronized, refs = threading.Event(), [], []

    async def cancelled():
        op = _EnqueuedOp()
        refs.append(weakref.ref(op))
        task = asyncio.ensure_future(awaiting.await_on_loop(op, _BusyStream(done, synchronized),
                                                            None))
        del op
        await asyncio.sleep(0.05)  # (spun for its 50 us, now waiting on a waiter thread)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(cancelled())
    assert not _collected(refs[0], 0.05)  # held by the waiter thread while the work runs
    done.set()
    assert _collected(refs[0])  # and let go once the stream was synchronized


def test_a_cancelled_await_still_queued_for_a_waiter_thread_still_waits_for_its_work():
    """With every waiter thread busy, an await cancelled while its wait is still queued must
    not drop the wait: the stream is still synchronized and the op held until then."""
    import threading
    import time
    import weakref

    from tilesafe.deviceops import awaiting
    done, synchronized, refs = threading.Event(), [], []
    busy = awaiting.waiters()._max_workers

    async def saturate_then_cancel():
        blockers = [asyncio.ensure_future(awaiting.await_on_loop(
            _EnqueuedOp(), _BusyStream(done, synchronized), None)) for _ in range(busy)]
        await asyncio.sleep(0.05)  # (every waiter thread now waits)
        op = _EnqueuedOp()
        refs.append(weakref.ref(op))
        queued = asyncio.ensure_future(awaiting.await_on_loop(
            op, _BusyStream(done, synchronized), None))
        del op
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        done.set()
        await asyncio.gather(*blockers)
    asyncio.run(saturate_then_cancel())
    for _ in range(200):
        if len(synchronized) == busy + 1:
            break
        time.sleep(0.01)
    assert len(synchronized) == busy + 1  # the cancelled one's stream too
    assert _collected(refs[0])


def _line_of_next_statement() -> int:
    import sys
    return sys._getframe(1).f_lineno + 1


def test_a_chain_extended_twice_is_an_error_and_keeps_its_label():
    x = _ones(16)
    chain = axpy(ts.zeros(16).sync().partition(8), x, 1.0).then(lambda r: r)
    longer = chain.then(lambda r: r)
    with pytest.raises(DeviceOpError, match=r"then\(\.\.\.\); an op runs once|already extended"):
        chain.then(lambda r: r)
    assert longer.label.count(".then(...)") == 2 and chain.label.count(".then(...)") == 1
    z, *_ = longer.sync()
    assert np.array_equal(z.unpartition().numpy(), np.ones(16))


def test_repeated_launches_with_an_explicit_grid_list_reuse_the_plan():
    @ts.kernel
    def fill(z: tc.MutTensor[tc.f32, (4,)], v: float):
        z.store(tc.full((4,), v, tc.f32))
    z = ts.zeros(16).sync().partition(4)
    for v in (1.0, 2.0):
        (z,) = fill.launch(z, v, grid=[4]).sync()
    with pytest.raises(ts.errors.PartitionError, match="differs from the grid"):
        fill.launch(z, 3.0, grid=[2]).sync()
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 2.0))


def test_a_pipeline_repeating_one_launch_keeps_its_loans_until_the_sync():
    x = _ones(64)
    seen = []

    def step(res):
        # x is lent (shared) to the launches still pending: work writing it on another stream
        # is refused (on the pipeline's own stream it would run after them)
        writer = axpy(ts.borrow_mut(x).partition(16), _ones(64), 1.0)
        with pytest.raises(BorrowError, match="shared borrowed by the pending launch"):
            writer.sync_on(ts.Stream())
        seen.append(len(x._alloc.loans))
        return axpy(res[0], x, 1.0)
    op = axpy(ts.zeros(64).sync().partition(16), x, 1.0)
    for _ in range(4):
        op = op.then(step)
    z, *_ = op.sync_on(ts.Stream())
    assert seen == [1, 1, 1, 1]  # repeated launches share one counted loan per range
    assert x._alloc.loans == []
    t = z.unpartition()
    assert t._alloc.loans == [] and np.array_equal(t.numpy(), np.full(64, 5.0))
    ts.borrow_mut(x).partition(16)  # free again once the pipeline has completed


def test_a_pipeline_may_partition_what_its_earlier_launches_read():
    """Ping-pong inside one pipeline: each launch writes the tensor the previous one read.
    Moving a tensor into a partition (or borrowing it mutably) only hands out a handle, and
    anything launched with it on the pipeline's stream runs after the earlier work."""
    a, b = ts.zeros(32).sync(), _ones(32)
    op = axpy(b.partition(8), a, 1.0)  # b = b + a
    for _ in range(5):  # then a = a + b, b = b + a, ... alternating
        op = op.then(lambda r: axpy(r[1].partition(8), r[0].unpartition(), 1.0))
    out, source = op.sync()
    # (b, a): (1, 0) -> b=1 -> a=1 -> b=2 -> a=3 -> b=5 -> a=8
    assert np.array_equal(out.unpartition().numpy(), np.full(32, 8.0))
    assert np.array_equal(source.numpy(), np.full(32, 5.0))


def test_a_graph_replays_its_borrowed_partitions_every_time():
    t = ts.zeros(16).sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(axpy(ts.borrow_mut(t).partition(8), _ones(16), 1.0))
    for _ in range(3):
        graph.replay()
    assert np.array_equal(t.numpy(), np.full(16, 3.0))


def test_map_runs_after_completion_so_it_may_read_the_results():
    x = _ones(16)
    op = axpy(ts.zeros(16).partition(8), x, 2.0).map(lambda r: r[0].unpartition().numpy())
    then_read = ts.zip(op, ts.full(2, 1.0)).then(lambda r: r[0].sum() + r[1].numpy().sum())
    assert then_read.sync() == 34.0


def test_a_recaptured_graph_updates_the_previous_executable_when_the_driver_allows():
    from tilesafe.driver import cuda

    class Builder:
        def end_building(self):
            self.ended = True

        def complete(self):
            return "instantiated"

    class Executable:
        def __init__(self, refuse):
            self.refuse, self.sources = refuse, []

        def update(self, source):
            if self.refuse:
                raise RuntimeError("CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE")
            self.sources.append(source)

    builder, accepting = Builder(), Executable(refuse=False)
    assert cuda.finish_graph(builder, accepting) is accepting
    assert accepting.sources == [builder] and builder.ended
    assert cuda.finish_graph(Builder(), Executable(refuse=True)) == "instantiated"
    assert cuda.finish_graph(Builder()) == "instantiated"


def test_a_stream_wait_ends_only_the_loans_of_work_enqueued_before_it(monkeypatch):
    """Another thread may enqueue on a shared pool stream while this one waits for it: the
    loans of that work must outlive this wait (the driver's wait need not cover it)."""
    from tilesafe.driver import cuda
    from tilesafe.driver.ledger import Allocation, lend
    from tilesafe.driver.device import Device
    stream = ts.Stream(Device("cuda", 0))
    stream._native_address = 0x99
    alloc = Allocation(None, Device("cuda", 0))
    before = lend(alloc.loans, 0, 64, mutable=True, holder="work enqueued before", where=None)
    late = lend(alloc.loans, 64, 128, mutable=True, holder="work enqueued during the wait",
                where=None)
    stream.on_complete([before], [], None)

    def wait(handle):  # a concurrent launch registers its loans while the driver waits
        assert handle == 0x99
        stream.on_complete([late], [], None)
        return 0  # CUDA_SUCCESS
    driver_calls = vars(cuda._DRIVER_CALLS)  # the driver's stream wait, as Stream makes it
    monkeypatch.setitem(driver_calls, "synchronize", wait)
    stream.synchronize()
    assert alloc.loans == [late] and stream._pending == [late]

    monkeypatch.setitem(driver_calls, "synchronize", lambda handle: 700)  # a kernel fault
    with pytest.raises(cuda.CudaError, match="cuStreamSynchronize failed"):
        stream.synchronize()
    assert alloc.loans == [late] and stream._pending == [late]  # a failed wait ends nothing


def test_a_graph_update_refused_for_a_used_op_keeps_the_recorded_work():
    """An op already driven cannot update a graph, and the refusal changes nothing: replays
    still run the recorded launch, never the other memory of the refused op."""
    z, other = ts.zeros(16).sync(), ts.zeros(16).sync()
    graph = ts.CudaGraph.capture(axpy(ts.borrow_mut(z).partition(8), _ones(16), 1.0))
    used = axpy(other.partition(8), _ones(16), 1.0)
    result = used.sync()
    with pytest.raises(DeviceOpError, match=r"already driven at .*test_deviceops.py:\d+") \
            as refused:
        graph.update(used)
    graph.replay()  # the recorded launch, not the refused op's
    assert np.array_equal(z.numpy(), np.ones(16))
    assert np.array_equal(result.z.unpartition().numpy(), np.ones(16))  # written once only
    assert "update() cannot take axpy" in str(refused.value)
    assert "the graph keeps its recorded work" in str(refused.value)
