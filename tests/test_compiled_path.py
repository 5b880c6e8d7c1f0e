"""The compiled fast path of a repeated launch (``tilesafe._fastpath``) against its Python
definition, without a GPU: tensors in cpu memory are relabelled ``cuda:7`` and the driver's
launch and stream wait are stand-ins that record what they receive, so a launch from a cached
plan takes the path it takes on a GPU. Every scenario runs on both paths (the Python path in a
second process, with ``TILESAFE_COMPILED_PATH=0``: see the end of this module) and must
observe the same driver calls, loans, errors and source lines."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe import _callsite, _compiled
from tilesafe.errors import BorrowError, DeviceOpError, MovedError
from tilesafe.driver import stream as streams
from tilesafe.driver import cuda
from tilesafe.driver.device import Device

from conftest import marker_line

STAND_IN = Device("cuda", 7)
LENGTH = 64
CUDA_ERROR_ILLEGAL_ADDRESS = 700


@ts.kernel
def add(z: tc.MutTensor[tc.f16, "S"], x: tc.Tensor[tc.f16, (-1,)], y: tc.Tensor[tc.f16, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


class StandInDriver:
    """Records the driver calls of the launch path; ``fail_launch`` / ``fail_wait`` make the
    next call return a CUresult error."""

    def __init__(self):
        self.launches: list[tuple] = []
        self.waits: list[int] = []
        self.fail_launch = self.fail_wait = 0

    def launch(self, function, gx, gy, gz, stream, address, programmatic):
        self.launches.append((function, (gx, gy, gz), stream, address, programmatic))
        err, self.fail_launch = self.fail_launch, 0
        return err

    def synchronize(self, stream):
        self.waits.append(stream)
        err, self.fail_wait = self.fail_wait, 0
        return err


def _packed(grid) -> cuda.PackedLaunch:
    """A packed launch with made-up driver handles (no module is loaded)."""
    packed = cuda.PackedLaunch.__new__(cuda.PackedLaunch)
    packed.function, packed.grid, packed.index = 0xF00, tuple(grid), STAND_IN.index
    packed.values, packed.pointers, packed.address, packed.programmatic = [], None, 0xA77, True
    return packed


@pytest.fixture
def driver(monkeypatch):
    """The stand-in driver, a filled stream pool for the stand-in device (streams with made-up
    handles) and its context marked current on this thread."""
    stand_in = StandInDriver()
    calls = vars(cuda._DRIVER_CALLS)
    monkeypatch.setitem(calls, "launch", stand_in.launch)
    monkeypatch.setitem(calls, "synchronize", stand_in.synchronize)
    monkeypatch.setattr(cuda._THREAD, "index", STAND_IN.index, raising=False)
    equal_device = Device("cuda", STAND_IN.index)  # equal to the tensors' device, not it
    pool = [ts.Stream(equal_device) for _ in range(streams.POOL_SIZE)]
    for i, s in enumerate(pool):
        s._native, s._native_address = object(), 0x5000 + i
    key = (STAND_IN.kind, STAND_IN.index)
    streams._POOL._streams[key] = list(pool)
    streams._POOL._cycles[key] = iter(pool * 1000)
    stand_in.pool = pool
    yield stand_in
    streams._POOL._streams.pop(key)
    streams._POOL._cycles.pop(key)


@pytest.fixture
def python_steps(monkeypatch):
    """Counts of the Python launch steps that ran (``launch``: a launch op built and
    validated; ``_run_prepared``: a launch run), to tell which path served."""
    counts = {"launch": 0, "_run_prepared": 0}
    for name in counts:
        method = getattr(add, name)

        def counted(*args, _method=method, _name=name, **kwargs):
            counts[_name] += 1
            return _method(*args, **kwargs)
        monkeypatch.setattr(add, name, counted, raising=False)
    return counts


def _on_stand_in(array):
    t = ts.tensor(array, device="cpu").sync()
    t._alloc.device = STAND_IN
    return t


def _arguments(kernel=add):
    """Relabelled tensors and a first (Python, validating) launch whose plan is then given a
    packed launch, as a first GPU launch leaves it: the next launches hit the plan."""
    z = _on_stand_in(np.zeros(LENGTH, np.float16)).partition(LENGTH)
    x = _on_stand_in(np.ones(LENGTH, np.float16))
    y = _on_stand_in(np.ones(LENGTH, np.float16))
    first = kernel(z, x, y)
    first._early.plan.bound = _packed(first._early.grid)
    return first, x, y


def test_repeated_launches_make_one_driver_call_each_and_end_their_loans_at_the_sync(
        launch_path, driver, python_steps):
    z, x, y = _arguments()[0].sync()
    python_steps.update(launch=0, _run_prepared=0)
    assert len(driver.launches) == 1 and x._alloc.loans == []
    before = add.launch_count
    for i in range(5):
        op = add(z, x, y)
        assert len(driver.launches) == 1 + i  # lazy: nothing runs before the drive
        assert {loan.mutable for loan in x._alloc.loans} == {False}
        z, x, y = op.sync()
        assert x._alloc.loans == [] and y._alloc.loans == []
    assert add.launch_count - before == 5
    assert len(driver.launches) == 6 and len(driver.waits) == 6
    handles = {s._native_address for s in driver.pool}
    for function, grid, stream, address, programmatic in driver.launches:
        assert (function, grid, address, programmatic) == (0xF00, (1, 1, 1), 0xA77, True)
        assert stream in handles
    assert [w for w in driver.waits] == [launch[2] for launch in driver.launches]
    python_runs = {"compiled": 0, "python": 5}[launch_path]  # the compiled path ran in C throughout
    assert python_steps == {"launch": python_runs, "_run_prepared": python_runs}


def test_a_chain_enqueues_every_launch_on_one_stream_and_waits_once(
        launch_path, driver, python_steps):
    z, x, y = _arguments()[0].sync()
    driver.launches.clear(), driver.waits.clear()
    python_steps.update(launch=0, _run_prepared=0)
    op = add(z, x, y)
    for _ in range(9):
        op = op.then(lambda args: add(*args))
    assert driver.launches == []
    z, x, y = op.sync()
    assert len(driver.launches) == 10 and len({launch[2] for launch in driver.launches}) == 1
    assert driver.waits == [driver.launches[0][2]]
    assert x._alloc.loans == [] and y._alloc.loans == []
    python_runs = {"compiled": 0, "python": 10}[launch_path]
    assert python_steps == {"launch": python_runs, "_run_prepared": python_runs}


def test_an_awaited_chain_enqueues_every_launch_from_the_loop_and_waits_once(
        launch_path, driver, python_steps, monkeypatch):
    monkeypatch.setitem(vars(cuda._DRIVER_CALLS), "query", lambda stream: 0)  # idle at once
    z, x, y = _arguments()[0].sync()
    driver.launches.clear(), driver.waits.clear()
    python_steps.update(launch=0, _run_prepared=0)
    threads = []

    def step(args):
        threads.append(threading.current_thread())
        return add(*args)
    op = add(z, x, y)
    for _ in range(9):
        op = op.then(step)

    async def main():
        return await op
    z, x, y = asyncio.run(main())
    assert threads == [threading.main_thread()] * 9
    assert len(driver.launches) == 10 and len({launch[2] for launch in driver.launches}) == 1
    assert driver.waits == [driver.launches[0][2]]
    assert x._alloc.loans == [] and y._alloc.loans == []
    python_runs = {"compiled": 0, "python": 10}[launch_path]
    assert python_steps == {"launch": python_runs, "_run_prepared": python_runs}


def test_loans_of_enqueued_work_last_until_its_stream_is_synchronized(launch_path, driver):
    z, x, y = _arguments()[0].sync()
    stream = driver.pool[0]
    op = add(z, x, y)
    z2, x2, y2 = op._execute(stream)  # enqueued (as inside a pipeline), not yet waited for
    assert len(driver.launches) == 2 and x._alloc.loans
    with pytest.raises(BorrowError, match="shared borrowed by the pending launch"):
        ts.borrow_mut(x).partition(LENGTH)
    with pytest.raises(BorrowError, match="mutably borrowed by the pending launch"):
        add(z, x, y)
    stream.synchronize()
    assert x._alloc.loans == []
    ts.borrow_mut(x).partition(LENGTH)  # writable again
    add(z2, x2, y2).sync()


def test_a_dropped_undriven_launch_gives_its_loans_back(launch_path, driver):
    z, x, y = _arguments()[0].sync()
    op = add(z, x, y)
    assert x._alloc.loans
    del op
    assert x._alloc.loans == [] and driver.launches == [driver.launches[0]]
    z, x, y = add(z, x, y).sync()  # the partition was never consumed
    assert len(driver.launches) == 2


def test_driving_a_launch_twice_is_refused_at_the_second_drive(launch_path, driver):
    z, x, y = _arguments()[0].sync()
    op = add(z, x, y)
    op.sync()  # <- first drive
    first, second = marker_line(__file__, "first drive"), marker_line(__file__, "second drive")
    with pytest.raises(DeviceOpError, match=rf"test_compiled_path.py:{second}: .* already "
                       rf"driven at \S*test_compiled_path.py:{first}; an op runs once"):
        op.sync()  # <- second drive
    assert len(driver.launches) == 2


def test_a_failed_launch_reports_the_line_that_drove_it_and_ends_its_loans(launch_path, driver):
    z, x, y = _arguments()[0].sync()
    op = add(z, x, y)
    driver.fail_launch = CUDA_ERROR_ILLEGAL_ADDRESS
    line = marker_line(__file__, "failing drive")
    with pytest.raises(cuda.CudaError, match=rf"test_compiled_path.py:{line}: cuLaunchKernelEx"):
        op.sync()  # <- failing drive
    assert x._alloc.loans == [] and y._alloc.loans == []


def test_a_failed_stream_wait_keeps_the_loans_of_the_work_it_did_not_see_complete(
        launch_path, driver):
    z, x, y = _arguments()[0].sync()
    stream = driver.pool[1]
    add(z, x, y)._execute(stream)
    driver.fail_wait = CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(cuda.CudaError, match="cuStreamSynchronize failed"):
        stream.synchronize()
    assert x._alloc.loans and stream._pending
    stream.synchronize()
    assert x._alloc.loans == [] and stream._pending == []


def test_a_launch_created_on_the_wrong_thread_context_makes_it_current(
        launch_path, driver, monkeypatch):
    z, x, y = _arguments()[0].sync()
    made_current = []
    monkeypatch.setattr(cuda, "make_current", lambda index: made_current.append(index)
                        or setattr(cuda._THREAD, "index", index))
    cuda._THREAD.index = None
    add(z, x, y).sync()
    assert made_current == [STAND_IN.index] and len(driver.launches) == 2


def test_a_chain_step_that_makes_another_context_current_is_followed_by_a_switch_back(
        launch_path, driver, monkeypatch):
    z, x, y = _arguments()[0].sync()
    made_current = []

    def make_current(index):  # what runtime.cuda.make_current records, without a driver
        made_current.append(index)
        cuda._THREAD.index = index
        cuda._CONTEXT_SWITCHES[0] += 1
    monkeypatch.setattr(cuda, "make_current", make_current)

    def step(args):
        if len(driver.launches) == 3:
            cuda.make_current(3)  # e.g. work on another GPU inside the step
        return add(*args)
    op = add(z, x, y)
    for _ in range(4):
        op = op.then(step)
    op.sync()
    assert made_current == [3, STAND_IN.index] and len(driver.launches) == 6


def test_looking_up_a_device_leaves_the_thread_context_to_make_current(monkeypatch):
    """Only make_current changes the thread's context, and it records the change: a lookup
    that made another device current unrecorded would send the next launch on the recorded
    device into the wrong context."""
    made_current = []

    class FakeDevice:
        def __init__(self, index):
            self.index = index
            self.compute_capability = type("CC", (), {"major": 9, "minor": 0})

        def set_current(self):
            made_current.append(self.index)
    monkeypatch.setattr(cuda, "_core", lambda: type("core", (), {"Device": FakeDevice}))
    monkeypatch.setattr(cuda._THREAD, "index", 0, raising=False)
    cuda.device.cache_clear()
    try:
        assert cuda.compute_capability(3) == (9, 0)
        assert made_current == [] and cuda._THREAD.index == 0
        switches = cuda._CONTEXT_SWITCHES[0]
        cuda.make_current(3)
        assert made_current == [3] and cuda._THREAD.index == 3
        assert cuda._CONTEXT_SWITCHES[0] == switches + 1
    finally:
        cuda.device.cache_clear()


def test_borrow_conflicts_on_a_cached_plan_are_reported_at_the_launch_line(launch_path, driver):
    z, x, y = _arguments()[0].sync()
    writer = add(ts.borrow_mut(x).partition(LENGTH), y, y)  # x lent exclusively, pending
    line = marker_line(__file__, "conflicting launch")
    with pytest.raises(BorrowError, match=rf"test_compiled_path.py:{line}: .*mutably borrowed"):
        add(z, x, y)  # <- conflicting launch
    del writer
    add(z, x, y).sync()  # the dropped writer gave x back


@pytest.fixture
def captured_graphs(monkeypatch, driver):
    """Graph capture and launch stand in too: capturing records nothing, the executable graph
    is a made-up handle, and each graph launch is recorded in ``driver.graph_launches``."""
    from tilesafe.launch.op import KernelNode

    class Executable:
        handle = 0x6000
    driver.graph_launches = []
    monkeypatch.setattr(cuda, "graph_builder", lambda native: None)
    monkeypatch.setattr(cuda, "finish_graph", lambda builder, previous: Executable())
    monkeypatch.setattr(KernelNode, "capture", lambda node, builder: None)
    monkeypatch.setitem(vars(cuda._DRIVER_CALLS), "launch_graph",
                        lambda graph, stream: driver.graph_launches.append((graph, stream)) or 0)
    return driver


def test_graph_replays_borrow_once_each_share_loans_on_one_stream_and_see_moves(
        launch_path, captured_graphs):
    driver = captured_graphs
    z, x, y = _arguments()[0].sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(add(z, x, y))
    before = add.launch_count
    for _ in range(3):
        graph.launch().sync()
        assert x._alloc.loans == [] and z._tensor._alloc.loans == []
    assert add.launch_count - before == 3
    assert [g for g, _ in driver.graph_launches] == [0x6000] * 3
    assert driver.waits[-3:] == [stream for _, stream in driver.graph_launches]
    stream = driver.pool[0]
    graph._run_on(stream), graph._run_on(stream)  # back to back, not yet waited for
    assert [loan.count for loan in x._alloc.loans] == [2]
    with pytest.raises(BorrowError, match="mutably borrowed by a replay"):
        graph._run_on(driver.pool[1])  # another stream must wait for those replays
    stream.synchronize()
    assert x._alloc.loans == [] and z._tensor._alloc.loans == []
    x.partition(LENGTH)  # <- move x
    moved_at = marker_line(__file__, "move x")
    with pytest.raises(MovedError, match=f"replay a graph that reads it: this tensor was "
                                         f"moved at .*:{moved_at}"):
        graph.launch().sync()
    assert z._tensor._alloc.loans == [] and len(driver.graph_launches) == 5


def test_a_replay_launches_before_another_thread_can_update_the_graph_under_it(
        launch_path, captured_graphs, monkeypatch):
    """A replay takes the captured graph's borrows and launches it as one step: an update
    replayed by another thread (which rewrites the executable graph in place) waits until the
    first replay is enqueued, so no replay runs new work holding loans on the old arguments."""
    import threading
    driver = captured_graphs
    z, x, y = _arguments()[0].sync()
    z2 = _on_stand_in(np.zeros(LENGTH, np.float16)).partition(LENGTH)
    with ts.CudaGraph.scope() as graph:
        graph.record(add(z, x, y))
    graph.launch().sync()  # (captured once)
    events, other = [], []

    def finish(builder, previous):
        events.append("capture")
        return type("Executable", (), {"handle": 0x6000})()
    monkeypatch.setattr(cuda, "finish_graph", finish)

    def update_and_replay():
        graph.update(add(z2, x, y))
        graph.launch().sync()

    def launch(graph_handle, stream):
        if not other:  # the first replay: another thread updates and replays meanwhile
            other.append(threading.Thread(target=update_and_replay))
            other[0].start()
            other[0].join(0.3)
            events.append("first launch enqueued")
        driver.graph_launches.append((graph_handle, stream))
        return 0
    monkeypatch.setitem(vars(cuda._DRIVER_CALLS), "launch_graph", launch)
    graph.launch().sync()
    other[0].join(5)
    assert not other[0].is_alive()
    assert events == ["first launch enqueued", "capture"]


def test_an_update_while_a_replay_captures_leaves_the_capture_of_one_node_list(
        launch_path, captured_graphs, monkeypatch):
    """An update landing while a replay captures (a node compiling on a first replay) must not
    mix lists: the graph built, its borrows and records are all the old list's, and the next
    replay captures the new list."""
    from tilesafe.launch.op import KernelNode
    z, x, y = _arguments()[0].sync()
    z2 = _on_stand_in(np.zeros(LENGTH, np.float16)).partition(LENGTH)
    with ts.CudaGraph.scope() as graph:
        graph.record(add(z, x, y))
    old = graph.nodes
    captured = []

    def capture(node, builder):
        captured.append(node)
        if len(captured) == 1:  # (as if another thread's update landed meanwhile)
            graph.update(add(z2, x, y))
    monkeypatch.setattr(KernelNode, "capture", capture)
    graph.launch().sync()
    assert captured == old and graph._captured_nodes is old and graph.nodes is not old
    graph.launch().sync()  # the new list is captured now
    assert captured[1:] == graph.nodes and graph._captured_nodes is graph.nodes


def test_the_compiled_and_python_callsite_walks_agree():
    fast = _compiled.FASTPATH
    if fast is None:
        pytest.skip("the compiled fast path is not in use")
    here = [_callsite._python_caller_location(), fast.caller_location()]  # <- both here
    line = marker_line(__file__, "both here")
    assert [(w.file, w.line) for w in here] == [(__file__, line)] * 2

    def nested():  # frames inside the package are skipped; this test file is not inside
        return fast.caller_location(), _callsite._python_caller_location()
    compiled, python = nested()
    assert (compiled.file, compiled.line) == (python.file, python.line)


def _definitions():
    """(Python definition, name of the C type) of every object the fast path owns."""
    import importlib
    kernel = importlib.import_module("tilesafe.kernel")  # (tilesafe.kernel is the decorator)
    from tilesafe.deviceops import deviceop
    from tilesafe.driver import ledger, stream
    from tilesafe.launch import checks, op
    return [(ledger._LoanState, "Loan"), (stream._StreamState, "StreamCore"),
            (deviceop._OpState, "OpCore"), (deviceop._ChainState, "ChainCore"),
            (checks._LaunchPlanState, "LaunchPlan"),
            (checks._PreparedLaunchState, "PreparedLaunch"), (op._LaunchState, "LaunchCore"),
            (kernel._KernelState, "KernelCore")]


def test_the_fast_path_types_are_the_bases_and_have_their_definitions_fields_and_methods():
    fast = _compiled.FASTPATH
    if fast is None:
        pytest.skip("the compiled fast path is not in use")
    for python, name in _definitions():
        compiled = getattr(fast, name)
        fields = set(python.__slots__) - {"__weakref__"}
        methods = {k for k, v in vars(python).items() if callable(v) and k != "__init__"}
        missing = (fields | methods) - set(dir(compiled))
        assert not missing, f"{name} lacks {missing} of its Python definition"
    assert issubclass(ts.Kernel, fast.KernelCore) and issubclass(ts.Stream, fast.StreamCore)
    assert issubclass(ts.DeviceOp, fast.OpCore)
    from tilesafe.launch.op import LaunchOp
    assert LaunchOp.__mro__[1] is fast.LaunchCore  # its sync and _execute are the C ones
    assert type(vars(fast.LaunchCore)["sync"]).__name__ == "method_descriptor"


def test_the_environment_switch_keeps_the_python_path_from_import():
    code = textwrap.dedent("""
        import tilesafe
        from tilesafe import _callsite, _compiled
        from tilesafe.driver import ledger
        print(_compiled.FASTPATH is None,
              _callsite.caller_location is _callsite._python_caller_location,
              type(ledger.LEDGER).__module__, tilesafe.Kernel.__mro__[1].__name__)
    """)
    env = dict(os.environ, TILESAFE_COMPILED_PATH="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True", "_thread", "_KernelState"]


def _ledger_type():
    try:
        from tilesafe.driver import _ledger
    except ImportError:
        pytest.skip("the ledger's C lock was not built (no C compiler at install)")
    return _ledger.Ledger


def test_the_ledger_lock_is_reentrant_and_only_its_owner_releases_it():
    ledger = _ledger_type()()
    assert ledger.acquire() is True and ledger.acquire() is True
    with ledger:
        assert ledger._is_owned()
    failures = []

    def other_thread():
        try:
            ledger.release()
        except RuntimeError as err:
            failures.append(str(err))
    thread = threading.Thread(target=other_thread)
    thread.start(), thread.join()
    assert failures == ["cannot release the ledger: this thread does not hold it"]
    ledger.release(), ledger.release()
    assert not ledger._is_owned()
    with pytest.raises(RuntimeError, match="does not hold it"):
        ledger.release()
    with pytest.raises(TypeError, match="takes no arguments"):
        _ledger_type()(1)


def test_the_ledger_lock_makes_other_threads_wait_without_holding_the_gil():
    ledger = _ledger_type()()
    order = []
    ledger.acquire()

    def waiter():
        with ledger:
            order.append("waiter")
    thread = threading.Thread(target=waiter)
    thread.start()
    thread.join(0.2)  # the waiter blocks in acquire with the GIL released: this thread runs
    order.append("holder")
    assert thread.is_alive()
    ledger.release()
    thread.join(5)
    assert order == ["holder", "waiter"] and not thread.is_alive()


def test_the_ledger_lock_excludes_other_threads_across_gil_switches():
    ledger = _ledger_type()()  # (with no exclusion, this test sees hundreds of overlaps)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible inside held sections
    inside, entries, overlaps = [0], [0], []

    def worker():
        for _ in range(300):
            with ledger:
                with ledger:  # re-entrant
                    inside[0] += 1
                    if inside[0] != 1:
                        overlaps.append(inside[0])
                    sum(range(200))  # bytecode between the steps: the GIL changes hands
                    entries[0] += 1
                    inside[0] -= 1
    try:
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(previous)
    assert not any(thread.is_alive() for thread in threads)
    assert overlaps == [] and entries == [1200] and not ledger._is_owned()


def test_the_ledger_is_the_c_lock_wherever_it_was_built():
    if os.environ.get("TILESAFE_COMPILED_PATH", "1") == "0":
        pytest.skip("TILESAFE_COMPILED_PATH=0 keeps threading.RLock")
    from tilesafe.driver import ledger as allocation
    assert type(allocation.LEDGER) is _ledger_type()


def test_the_compiled_path_is_built_wherever_a_c_compiler_is():
    from test_native_launcher import _can_build_extensions
    if not _can_build_extensions():
        pytest.skip("no C compiler or Python headers: those methods run as Python")
    assert _compiled.built("tilesafe._fastpath") is not None, (
        "a C compiler is present but tilesafe._fastpath was not built: reinstall with "
        "pip install -e . and read the build output")


BOTH_PATHS = ["test_compiled_path.py", "test_deviceops.py", "test_ownership.py",
              "test_launch_errors.py", "test_partitions.py", "test_atomics.py"]


def test_the_launch_path_modules_pass_on_the_python_path_too():
    """The Python definitions of the fast path's types are the launch path wherever the module
    was not built: the modules that test the launch path run on them in a second process."""
    if os.environ.get("TILESAFE_COMPILED_PATH", "1") == "0":
        pytest.skip("this process already runs the Python path")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TILESAFE_COMPILED_PATH="0")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *[os.path.join(here, name) for name in BOTH_PATHS]],
                          env=env, capture_output=True, text=True, cwd=here, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
