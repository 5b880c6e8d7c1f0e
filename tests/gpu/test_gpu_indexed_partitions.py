"""Safety rule 11 on cuda:0: an indexed partition writes each program's tile where its
position says, equal to the interpreter; positions that repeat or leave the tile grid, even
ones a kernel produced on the device a moment before, are refused with nothing written
(PositionsError at the sync, naming the row); inside a CUDA graph too, replayed with positions
changed in device memory; and many positions (several validation chunks) still work. Each
test runs twice: the positions validated by every program of the write, and by a launch of
one program before it (``validated_first``, chosen by the launch facts above
``VALIDATE_FIRST_ABOVE`` positions, here forced either way)."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import BorrowError, CudaError, PositionsError

GPU = "cuda:0"
SENTINEL = -7.0


@pytest.fixture(autouse=True, params=["in each program", "validated first"])
def validation(request, monkeypatch):
    """Both ways of validating the positions on the GPU (the interpreter checks on the host)."""
    from tilesafe.backends.tileir import facts
    monkeypatch.setattr(facts, "VALIDATE_FIRST_ABOVE",
                        1 << 30 if request.param == "in each program" else 0)
    return request.param


@ts.kernel
def write_rows(cache: tc.MutTensor[tc.f32, (64,)], rows: tc.Tensor[tc.f32, (-1,)]):
    """A KV-cache update on a flat cache of 64-element rows: program i writes row i."""
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((64,)).load(i))


@ts.kernel(hints={"sm_90": {"num_cta_in_cga": 2}})  # (an occupancy hint is refused: rule 11)
def write_rows_in_clusters(cache: tc.MutTensor[tc.f32, (64,)], rows: tc.Tensor[tc.f32, (-1,)]):
    """``write_rows`` launched in clusters of two programs."""
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((64,)).load(i))


@ts.kernel
def bump_rows(cache: tc.MutTensor[tc.f32, (64,)]):
    """Add one to the row a program owns (a lost or doubled update shows in the sum)."""
    cache.store(cache.load() + 1.0)


@ts.kernel
def make_positions(out: tc.MutTensor[tc.i32, (8,)], base: int, step: int):
    """Positions computed on the device: base + step * i (step 0 repeats one row)."""
    out.store(base + step * tc.arange(8, tc.i32))


def _cache(device, rows=64):
    return ts.full((rows * 64,), SENTINEL, ts.float32, device=device).sync()


def _rows(n, device):
    data = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
    return data, ts.tensor(data.reshape(-1), device=device).sync()


def _table(cache):
    return cache.numpy().reshape(-1, 64)


def test_an_indexed_partition_writes_where_its_positions_say_as_on_the_interpreter():
    positions = np.random.default_rng(5).permutation(64)[:24].astype(np.int32)
    results = []
    for device in ("cpu", GPU):
        data, rows = _rows(24, device)
        cache = _cache(device)
        pos = ts.tensor(positions, device=device).sync()
        write_rows(ts.borrow_mut(cache).partition(64, at=pos), rows).sync()
        results.append(_table(cache))
    want = np.full((64, 64), SENTINEL, np.float32)
    want[positions] = data
    assert np.array_equal(results[0], want) and np.array_equal(results[1], want)


def test_many_positions_are_validated_across_chunks():
    n = 1000  # 16 chunks of 64
    data, rows = _rows(n, GPU)
    cache = _cache(GPU, rows=1024)
    order = np.random.default_rng(6).permutation(1024)[:n].astype(np.int64)
    write_rows(ts.borrow_mut(cache).partition(64, at=ts.tensor(order, device=GPU).sync()),
               rows).sync()
    assert np.array_equal(_table(cache)[order], data)
    repeated = order.copy()
    repeated[937] = repeated[70]  # a repeat far apart, in different chunks
    cache2 = _cache(GPU, rows=1024)
    with pytest.raises(PositionsError, match=rf"positions\[937\] = \({order[70]},\) names the "
                       "same tile"):
        write_rows(ts.borrow_mut(cache2).partition(
            64, at=ts.tensor(repeated, device=GPU).sync()), rows).sync()
    assert np.all(cache2.numpy() == SENTINEL)


def test_the_launch_facts_choose_the_validating_launch(validation):
    """Forced to 'validated first', a write binds to the validating launch and the kernel; in
    each program, to the kernel alone; either writes the same rows."""
    from tilesafe.backends.tileir.executable import ValidatedLaunch
    data, rows = _rows(8, GPU)
    cache = _cache(GPU)
    at = ts.tensor(np.array([9, 3, 7, 1, 0, 2, 60, 33], np.int32), device=GPU).sync()
    write_rows._plans.clear()
    write_rows(ts.borrow_mut(cache).partition(64, at=at), rows).sync()
    bound = [plan.bound for plan in write_rows._plans.values() if plan.bound is not None]
    assert len(bound) == 1
    assert isinstance(bound[0], ValidatedLaunch) == (validation == "validated first")
    assert np.array_equal(_table(cache)[[9, 3, 7, 1, 0, 2, 60, 33]], data)


def test_increasing_positions_take_the_one_pass_check_and_others_the_full_one():
    """Strictly increasing positions are proven distinct row by row; a pair out of order
    (adjacent equal rows, or a last row equal to the first) sends the check to the full
    comparison, which finds the repeat."""
    n = 3000
    data, rows = _rows(n, GPU)
    order = np.sort(np.random.default_rng(8).permutation(4096)[:n]).astype(np.int32)
    cache = _cache(GPU, rows=4096)
    write_rows(ts.borrow_mut(cache).partition(64, at=ts.tensor(order, device=GPU).sync()),
               rows).sync()
    assert np.array_equal(_table(cache)[order], data)
    # (1024, 1023): equal rows on either side of the one pass's chunk boundary
    for where, source in ((1501, 1500), (1024, 1023), (n - 1, 0)):
        repeated = order.copy()
        repeated[where] = repeated[source]
        fresh = _cache(GPU, rows=4096)
        with pytest.raises(PositionsError, match=rf"positions\[{where}\] = "
                           rf"\({order[source]},\) names the same tile"):
            write_rows(ts.borrow_mut(fresh).partition(
                64, at=ts.tensor(repeated, device=GPU).sync()), rows).sync()
        assert np.all(fresh.numpy() == SENTINEL)
    past = order.copy()
    past[-1] = 4096  # still increasing, but past the grid, in the pass's third chunk
    fresh = _cache(GPU, rows=4096)
    with pytest.raises(PositionsError, match=rf"positions\[{n - 1}\] = \(4096,\) is outside "
                       r"the tile grid \(4096,\)"):
        write_rows(ts.borrow_mut(fresh).partition(64, at=ts.tensor(past, device=GPU).sync()),
                   rows).sync()
    assert np.all(fresh.numpy() == SENTINEL)


def test_a_device_produced_repeat_is_refused_with_nothing_written():
    positions = ts.zeros((8,), ts.int32, device=GPU).sync()
    make_positions(ts.borrow_mut(positions).partition(8), 3, 0).sync()  # all 3: repeats
    data, rows = _rows(8, GPU)
    cache = _cache(GPU)
    with pytest.raises(PositionsError, match=r"kernel 'write_rows', the indexed partition "
                       r"'cache': positions\[1\] = \(3,\) names the same tile as (another row|"
                       r"positions\[0\])"):
        write_rows(ts.borrow_mut(cache).partition(64, at=positions), rows).sync()
    assert np.all(cache.numpy() == SENTINEL)
    make_positions(ts.borrow_mut(positions).partition(8), 60, 1).sync()  # 60..67: outside
    with pytest.raises(PositionsError, match=r"positions\[4\] = \(64,\) is outside the tile "
                       r"grid \(64,\)"):
        write_rows(ts.borrow_mut(cache).partition(64, at=positions), rows).sync()
    assert np.all(cache.numpy() == SENTINEL)
    make_positions(ts.borrow_mut(positions).partition(8), 10, 2).sync()  # fine: 10, 12, ...
    write_rows(ts.borrow_mut(cache).partition(64, at=positions), rows).sync()
    assert np.array_equal(_table(cache)[10:26:2], data)


@ts.kernel
def write_rows_and_copy(cache: tc.MutTensor[tc.f32, (64,)], copy: tc.MutTensor[tc.f32, (64,)],
                        rows: tc.Tensor[tc.f32, (-1,)]):
    """An indexed partition beside an ordinary one: program i writes row i to its slot of the
    cache and to row i of ``copy``."""
    i, _, _ = tc.get_tile_block_id()
    row = rows.partition((64,)).load(i)
    cache.store(row)
    copy.store(row * 2.0)


def test_failed_positions_leave_every_output_of_the_launch_unwritten():
    """Rule 11's "nothing written" covers the launch's other outputs too, as on the
    interpreter: the kernel's body runs only where the positions passed."""
    for device in ("cpu", GPU):
        data, rows = _rows(8, device)
        cache = _cache(device)
        copy = ts.full((8 * 64,), SENTINEL, ts.float32, device=device).sync()
        bad = ts.tensor(np.array([1, 2, 3, 2, 5, 6, 7, 0], np.int32), device=device).sync()
        with pytest.raises(PositionsError, match="names the same tile"):
            write_rows_and_copy(ts.borrow_mut(cache).partition(64, at=bad),
                                ts.borrow_mut(copy).partition(64), rows).sync()
        assert np.all(cache.numpy() == SENTINEL) and np.all(copy.numpy() == SENTINEL), device
        good = ts.tensor(np.arange(8, dtype=np.int32)[::-1].copy(), device=device).sync()
        write_rows_and_copy(ts.borrow_mut(cache).partition(64, at=good),
                            ts.borrow_mut(copy).partition(64), rows).sync()
        assert np.array_equal(_table(cache)[7::-1], data)
        assert np.array_equal(copy.numpy().reshape(8, 64), data * 2)


@ts.kernel
def write_two_caches(first: tc.MutTensor[tc.f32, (64,)], second: tc.MutTensor[tc.f32, (64,)],
                     rows: tc.Tensor[tc.f32, (-1,)]):
    """Two indexed partitions at positions of their own."""
    i, _, _ = tc.get_tile_block_id()
    row = rows.partition((64,)).load(i)
    first.store(row)
    second.store(row + 1.0)


def test_one_failing_indexed_partition_stops_the_other_one_too():
    """The first partition's positions are fine, the second's repeat: neither is written, on
    the GPU as on the interpreter."""
    for device in ("cpu", GPU):
        data, rows = _rows(4, device)
        one, two = _cache(device), _cache(device)
        fine = ts.tensor(np.array([3, 1, 2, 0], np.int32), device=device).sync()
        repeats = ts.tensor(np.array([5, 6, 5, 7], np.int32), device=device).sync()
        with pytest.raises(PositionsError, match="'second'.*names the same tile"):
            write_two_caches(ts.borrow_mut(one).partition(64, at=fine),
                             ts.borrow_mut(two).partition(64, at=repeats), rows).sync()
        assert np.all(one.numpy() == SENTINEL) and np.all(two.numpy() == SENTINEL), device


def test_a_graph_replay_validates_the_positions_each_time():
    data, rows = _rows(8, GPU)
    cache = _cache(GPU)
    positions = ts.zeros((8,), ts.int32, device=GPU).sync()
    make_positions(ts.borrow_mut(positions).partition(8), 0, 1).sync()
    graph = ts.CudaGraph.capture(write_rows(ts.borrow_mut(cache).partition(64, at=positions),
                                            rows))
    graph.replay()
    assert np.array_equal(_table(cache)[:8], data)
    make_positions(ts.borrow_mut(positions).partition(8), 5, 0).sync()
    cache.copy_(_cache(GPU)).sync()
    with pytest.raises(PositionsError, match="names the same tile"):
        graph.replay()
    assert np.all(cache.numpy() == SENTINEL)
    make_positions(ts.borrow_mut(positions).partition(8), 20, 3).sync()
    graph.replay()
    assert np.array_equal(_table(cache)[20:44:3], data)


def test_a_verdict_word_says_failed_until_a_validation_writes_it(validation, monkeypatch):
    """Defence in depth: the verdict words of a new slab hold "failed", so a kernel that ran
    before any validation wrote its word (which a validated launch never enqueues) would write
    nothing; the first validated launch then writes "passed" into its record's word."""
    if validation != "validated first":
        pytest.skip("only a kernel validated first has a verdict word")
    from tilesafe.backends.tileir import faults
    monkeypatch.setattr(faults, "_FREE", {})  # a fresh slab for this test's records
    fresh = faults._take(0)
    assert fresh.device_slab.read().tolist() == [faults.VERDICT_UNVALIDATED] * faults.SLAB
    data, rows = _rows(8, GPU)
    cache = _cache(GPU)
    at = ts.tensor(np.array([5, 3, 7, 1, 0, 2, 60, 33], np.int32), device=GPU).sync()
    write_rows._plans.clear()
    write_rows(ts.borrow_mut(cache).partition(64, at=at), rows).sync()
    assert np.array_equal(_table(cache)[[5, 3, 7, 1, 0, 2, 60, 33]], data)
    (bound,) = [plan.bound for plan in write_rows._plans.values() if plan.bound is not None]
    memory = bound.fault_record._memory  # (the record's slice of its slabs)
    at_word = (bound.fault_record.verdict_address - memory.device_slab.address) // 4
    assert 0 <= at_word < faults.SLAB and memory.device_slab.read()[at_word] == 0


def test_a_kernel_launched_in_clusters_is_validated_by_one_program():
    """The validating launch of a clustered kernel is one program, without the cluster (a
    cluster of two cannot launch as a grid of one), and the kernel then writes its rows."""
    data, rows = _rows(8, GPU)
    cache = _cache(GPU)
    where = [9, 3, 7, 1, 0, 2, 60, 33]
    at = ts.tensor(np.array(where, np.int32), device=GPU).sync()
    write_rows_in_clusters(ts.borrow_mut(cache).partition(64, at=at), rows).sync()
    assert np.array_equal(_table(cache)[where], data)
    repeated = ts.tensor(np.array([9, 3, 7, 1, 0, 2, 9, 33], np.int32), device=GPU).sync()
    fresh = _cache(GPU)
    with pytest.raises(PositionsError, match=r"positions\[[06]\] = \(9,\) names the same tile"):
        write_rows_in_clusters(ts.borrow_mut(fresh).partition(64, at=repeated), rows).sync()
    assert np.all(fresh.numpy() == SENTINEL)


def test_positions_imported_twice_through_torch_conflict_with_pending_work_on_the_other():
    """One torch buffer imported twice: a pending write through one import blocks a scatter
    whose positions are the other, and a pending scatter blocks a write of its positions
    through the other import (the positions cannot change between validation and use)."""
    torch = pytest.importorskip("torch")
    buffer = torch.tensor([9, 3, 7, 1, 0, 2, 60, 33], dtype=torch.int32, device="cuda")
    writer, positions = ts.from_dlpack(buffer), ts.from_dlpack(buffer)
    data, rows = _rows(8, GPU)
    cache = _cache(GPU)
    writing = make_positions(ts.borrow_mut(writer).partition(8), 10, 1)  # pending
    with pytest.raises(BorrowError, match="mutably borrowed"):
        write_rows(ts.borrow_mut(cache).partition(64, at=positions), rows)
    writing.sync()  # the positions are now 10, ..., 17
    scatter = write_rows(ts.borrow_mut(cache).partition(64, at=positions), rows)  # pending
    with pytest.raises(BorrowError):
        make_positions(ts.borrow_mut(writer).partition(8), 0, 0)  # (would repeat row 0)
    scatter.sync()
    assert np.array_equal(_table(cache)[10:18], data)
    assert np.all(np.delete(_table(cache), np.s_[10:18], axis=0) == SENTINEL)


def test_threads_scattering_on_one_stream_lose_no_update_and_keep_their_verdicts():
    """Eight threads enqueue on one stream, each a scatter into its own rows of one cache and
    a scatter with a repeated row into a cache of its own; their validations and kernels
    interleave on the stream. Every good scatter lands once and every bad one writes nothing
    and raises for the thread that made it."""
    import threading
    stream = ts.Stream(GPU)
    cache = ts.zeros((64 * 64,), ts.float32, device=GPU).sync()
    rounds, errors, refused = 10, [], [0] * 8
    spoiled = [_cache(GPU) for _ in range(8)]

    def work(i):
        mine = ts.tensor(np.arange(8 * i, 8 * i + 8, dtype=np.int32)[::-1].copy(),
                         device=GPU).sync()
        repeat = ts.tensor(np.array([i, 8 + i, i, 20], np.int32), device=GPU).sync()
        try:
            for _ in range(rounds):
                ts.value(None).then(lambda _: bump_rows(ts.borrow_mut(cache).partition(
                    64, at=mine))).sync_on(stream)
                try:
                    ts.value(None).then(lambda _: bump_rows(ts.borrow_mut(spoiled[i]).partition(
                        64, at=repeat))).sync_on(stream)
                except PositionsError as err:
                    assert f"({i},) names the same tile" in str(err), err
                    refused[i] += 1
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[0]
    assert refused == [rounds] * 8
    assert np.array_equal(cache.numpy(), np.full(64 * 64, rounds, np.float32))
    assert all(np.all(c.numpy() == SENTINEL) for c in spoiled)


def test_a_kernel_launch_failing_after_its_validation_hands_everything_back(validation,
                                                                          monkeypatch):
    """The driver refuses the kernel's launch after its validation was enqueued: the error
    reaches the caller with the arguments, nothing is written (repeated positions too: their
    launch raises the failure or the validation's report), the cache is free again, and the
    next launches write or refuse as their positions say, with no report left over."""
    if validation != "validated first":
        pytest.skip("only a kernel validated first has two launches")
    from tilesafe.driver import cuda
    real = cuda.launch_packed

    def failing(stream, packed):
        if packed.grid != (1, 1, 1):  # (the kernel; its validation is one program)
            raise CudaError("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES "
                            "(made to fail by the test)")
        real(stream, packed)
    data, rows = _rows(8, GPU)
    cache = _cache(GPU)
    where = [9, 3, 7, 1, 0, 2, 60, 33]
    at = ts.tensor(np.array(where, np.int32), device=GPU).sync()
    monkeypatch.setattr(cuda, "launch_packed", failing)
    with pytest.raises(CudaError, match="made to fail") as info:
        write_rows(ts.borrow_mut(cache).partition(64, at=at), rows).sync()
    assert len(info.value.arguments) == 2
    repeated = ts.tensor(np.array([9, 3, 9, 1, 0, 2, 60, 33], np.int32), device=GPU).sync()
    with pytest.raises((CudaError, PositionsError)):
        write_rows(ts.borrow_mut(cache).partition(64, at=repeated), rows).sync()
    monkeypatch.setattr(cuda, "launch_packed", real)
    assert np.all(cache.numpy() == SENTINEL)
    write_rows(ts.borrow_mut(cache).partition(64, at=at), rows).sync()  # no stale report
    assert np.array_equal(_table(cache)[where], data)
    with pytest.raises(PositionsError, match="names the same tile"):
        write_rows(ts.borrow_mut(cache).partition(64, at=repeated), rows).sync()
    write_rows(ts.borrow_mut(cache).partition(64, at=at), rows).sync()  # raised once only
