"""Indexed partitions, the safe scatter (safety rule 11): ``partition(tile, at=positions)``
gives program ``i`` the tile at ``positions[i]``; every launch proves the positions distinct and
inside the tile grid before any program writes, and otherwise writes nothing and raises
PositionsError naming the row. The positions are an input the launch borrows (aliasing and
pending-work rules apply to them), and misuse of ``at=`` is refused where the partition is
made."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.backends.tileir.faults import FaultRecord
from tilesafe.backends.tileir.lower import abi_signature
from tilesafe.backends.tileir.lower.checks import (FAULT_WORDS, WORD_AXES, WORD_BOUND,
                                                   WORD_INDEX, WORD_PROGRAM, WORD_SITE)
from tilesafe.errors import AliasingError, BorrowError, PartitionError, PositionsError

pytestmark = pytest.mark.interpreter_only("the interpreter's view of indexed partitions")


def on(array) -> ts.Tensor:
    return ts.tensor(np.asarray(array)).sync()


@ts.kernel
def write_rows(cache: tc.MutTensor[tc.f32, (1, 8)], rows: tc.Tensor[tc.f32, (-1, 8)]):
    """A KV-cache update: program i writes row i of ``rows`` where its position says."""
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((1, 8)).load((i, 0)))


@ts.kernel
def add_rows(cache: tc.MutTensor[tc.f32, (1, 8)], rows: tc.Tensor[tc.f32, (-1, 8)]):
    i, _, _ = tc.get_tile_block_id()
    cache.store(cache.load() + rows.partition((1, 8)).load((i, 0)))


@ts.kernel
def scatter1d(out: tc.MutTensor[tc.i32, (4,)], src: tc.Tensor[tc.i32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    out.store(src.partition((4,)).load(i))


def _cache(rows=10):
    return ts.full((rows, 8), -1.0, ts.float32).sync()


def test_program_i_owns_the_tile_at_positions_i(rng):
    cache = _cache()
    rows = rng.standard_normal((3, 8)).astype(np.float32)
    positions = on(np.array([[7, 0], [2, 0], [4, 0]], np.int32))
    write_rows(ts.borrow_mut(cache).partition((1, 8), at=positions), on(rows)).sync()
    want = np.full((10, 8), -1.0, np.float32)
    want[[7, 2, 4]] = rows
    assert np.array_equal(cache.numpy(), want)


def test_a_program_reads_its_own_tile_and_load_tile_like_follows_it(rng):
    cache = on(rng.standard_normal((10, 8)).astype(np.float32))
    before = cache.numpy()
    rows = rng.standard_normal((2, 8)).astype(np.float32)
    positions = on(np.array([[9, 0], [0, 0]], np.int64))
    add_rows(ts.borrow_mut(cache).partition((1, 8), at=positions), on(rows)).sync()
    want = before.copy()
    want[[9, 0]] += rows
    assert np.array_equal(cache.numpy(), want)

    @ts.kernel
    def copy_from(z: tc.MutTensor[tc.f32, (1, 8)], x: tc.Tensor[tc.f32, (-1, 8)]):
        z.store(tc.load_tile_like(x, z))
    src = on(np.arange(80, dtype=np.float32).reshape(10, 8))
    dst = _cache()
    copy_from(ts.borrow_mut(dst).partition((1, 8), at=on(np.array([[3, 0]], np.int32))),
              src).sync()
    assert np.array_equal(dst.numpy()[3], src.numpy()[3]) and np.all(dst.numpy()[4] == -1)


def test_rank_one_positions_and_a_moved_tensor():
    out = ts.full((16,), -5, ts.int32).sync()
    partition = out.partition(4, at=on(np.array([3, 0], np.uint8)))
    assert partition.grid == (2,) and "at=2 positions" in repr(partition)
    with pytest.raises(ts.MovedError):
        out.numpy()  # moved into the partition
    result = scatter1d(partition, on(np.arange(8, dtype=np.int32))).sync()
    got = result.out.unpartition().numpy()
    assert got.tolist() == [4, 5, 6, 7] + [-5] * 8 + [0, 1, 2, 3]


@pytest.mark.parametrize("positions, words", [
    ([[7, 0], [2, 0], [7, 0]], r"positions\[2\] = \(7, 0\) names the same tile as positions\[0\]"),
    ([[1, 0], [10, 0]], r"positions\[1\] = \(10, 0\) is outside the tile grid \(10, 1\)"),
    ([[1, 0], [0, -1]], r"positions\[1\] = \(0, -1\) is outside the tile grid \(10, 1\)"),
    ([[1, 0], [0, 1]], r"positions\[1\] = \(0, 1\) is outside the tile grid \(10, 1\)"),
])
def test_repeated_or_outside_positions_write_nothing(rng, positions, words):
    cache = _cache()
    rows = on(rng.standard_normal((len(positions), 8)).astype(np.float32))
    with pytest.raises(PositionsError, match=rf"kernel 'write_rows', the indexed partition "
                       rf"'cache': {words}.*wrote nothing") as info:
        write_rows(ts.borrow_mut(cache).partition((1, 8), at=on(np.array(positions))),
                   rows).sync()
    assert np.all(cache.numpy() == -1.0)  # nothing written, and the cache is usable
    assert info.value.arguments[1] is rows
    if str(cache.device) == "cpu":  # (found before the programs run: it names the launch)
        assert str(info.value).startswith(f"{__file__}:")
        assert "distinct tile" in info.value.hint


def test_every_launch_checks_the_positions_as_they_are_when_it_runs(rng):
    cache, rows = _cache(), on(rng.standard_normal((2, 8)).astype(np.float32))
    positions = on(np.array([[1, 0], [2, 0]], np.int32))
    write_rows(ts.borrow_mut(cache).partition((1, 8), at=positions), rows).sync()
    positions.copy_(on(np.array([[5, 0], [5, 0]], np.int32))).sync()
    with pytest.raises(PositionsError, match="names the same tile"):
        write_rows(ts.borrow_mut(cache).partition((1, 8), at=positions), rows).sync()


def test_the_positions_are_borrowed_by_the_launch_like_an_input(rng):
    cache, rows = _cache(), on(rng.standard_normal((2, 8)).astype(np.float32))
    positions = on(np.array([[1, 0], [2, 0]], np.int32))
    op = write_rows(ts.borrow_mut(cache).partition((1, 8), at=positions), rows)
    with pytest.raises(BorrowError):
        positions.copy_(on(np.array([[3, 0], [4, 0]], np.int32))).sync()
    op.sync()
    assert np.array_equal(cache.numpy()[[1, 2]], rows.numpy())


def test_positions_that_share_memory_with_the_written_tensor_are_refused():
    flat = ts.zeros((16,), ts.int32).sync()
    positions = flat[0:2]
    with pytest.raises(AliasingError, match="arguments 'out' and the positions of 'out' of "
                       "'scatter1d' overlap in memory and 'out' is mutable"):
        scatter1d(ts.borrow_mut(flat).partition(4, at=positions), on(np.zeros(8, np.int32)))


def test_misuse_of_at_is_refused_where_the_partition_is_made():
    t = ts.zeros((8, 8), ts.float32).sync()
    with pytest.raises(PartitionError, match="must hold integers"):
        ts.borrow_mut(t).partition((1, 8), at=on(np.zeros((2, 2), np.float32)))
    with pytest.raises(PartitionError, match=r"positions of shape \(2, 3\) for a rank-2"):
        ts.borrow_mut(t).partition((1, 8), at=on(np.zeros((2, 3), np.int32)))
    with pytest.raises(PartitionError, match="must be a tilesafe tensor"):
        ts.borrow_mut(t).partition((1, 8), at=np.zeros((2, 2), np.int32))
    with pytest.raises(PartitionError, match="cannot be mapped"):
        ts.borrow_mut(t).partition((1, 8), at=on(np.zeros((2, 2), np.int32))).map((1, 1), 1)
    with pytest.raises(PartitionError, match="positions has no rows") as info:
        ts.borrow_mut(t).partition((1, 8), at=on(np.zeros((0, 2), np.int32)))
    assert "skip the launch" in info.value.hint
    t.numpy()  # nothing was moved or borrowed


def test_the_kernel_takes_the_positions_after_the_tensor_and_a_fault_record():
    positions = on(np.array([[1, 0]], np.int16))
    ir = write_rows.ir(ts.borrow_mut(_cache()).partition((1, 8), at=positions),
                       on(np.zeros((1, 8), np.float32)))
    abi = [(a.param, a.component) for a in abi_signature(ir)]
    assert abi[:9] == [("cache", "ptr"), ("cache", "dim0"), ("cache", "dim1"),
                       ("cache", "stride0"), ("cache", "stride1"), ("cache", "positions"),
                       ("cache", "positions_n"), ("cache", "positions_stride0"),
                       ("cache", "positions_stride1")]
    assert abi[-1] == ("<fault record>", "ptr")
    assert "mut_tensor<1x8xf32 at positions<i16>>" in str(ir.params[0].value.type)


def test_a_fault_record_of_repeated_positions_reads_like_the_interpreters_error():
    class Words:
        words, address = np.zeros(FAULT_WORDS, np.int64), 0
    ir = write_rows.ir(ts.borrow_mut(_cache()).partition((1, 8), at=on(np.zeros((2, 2),
                                                                                np.int32))),
                       on(np.zeros((2, 8), np.float32)))
    record = FaultRecord(ir, Words())
    site = [getattr(s, "name", None) for s in record.sites].index("cache") + 1
    w = record._memory.words
    w[WORD_SITE], w[WORD_PROGRAM], w[WORD_AXES] = site, 2, 2
    w[WORD_INDEX:WORD_INDEX + 2] = (7, 0)
    w[WORD_BOUND:WORD_BOUND + 2] = (10, 1)
    error = record.take()
    assert isinstance(error, PositionsError)
    assert ("kernel 'write_rows', the indexed partition 'cache': positions[2] = (7, 0) names "
            "the same tile as another row") in str(error)
    # where: the kernel's definition (the failure is found before any line of its body runs)
    assert str(ir.location).startswith(f"{__file__}:")
    assert str(error).startswith(f"{ir.location}: kernel 'write_rows'")


# =============================================================================================
# attacks through the paths a real program takes


@ts.kernel
def bump_rows(cache: tc.MutTensor[tc.i32, (4,)]):
    cache.store(cache.load() + 1)


def test_positions_imported_twice_from_the_written_buffer_are_refused():
    buffer = np.zeros(16, np.int32)
    cache = ts.from_dlpack(buffer)  # the tensor written...
    positions = ts.from_dlpack(buffer[8:10])  # ...and the positions: one numpy buffer
    with pytest.raises(AliasingError, match="overlap in memory"):
        bump_rows(ts.borrow_mut(cache).partition(4, at=positions))
    assert buffer.tolist() == [0] * 16  # nothing ran


def test_a_launch_refused_after_a_move_hands_the_partition_back_with_nothing_written():
    cache = ts.full((16,), 7, ts.int32).sync()
    partition = cache.partition(4, at=on(np.array([1, 1], np.int32)))  # moves cache
    with pytest.raises(PositionsError) as info:
        bump_rows(partition).sync()
    back = info.value.arguments[0]
    assert back is partition
    assert back.unpartition().numpy().tolist() == [7] * 16


def test_a_shared_result_cannot_be_scattered_into_but_can_give_positions():
    cache = ts.zeros((16,), ts.int32).sync()
    ts.value(cache).shared().sync()  # read-only from now on
    with pytest.raises(BorrowError, match="read-only result of .shared()"):
        ts.borrow_mut(cache).partition(4, at=on(np.array([0], np.int32)))
    positions = on(np.array([2, 0], np.int32))
    ts.value(positions).shared().sync()  # a read-only input is fine as positions
    target = ts.zeros((16,), ts.int32).sync()
    bump_rows(ts.borrow_mut(target).partition(4, at=positions)).sync()
    assert target.numpy().tolist() == [1] * 4 + [0] * 4 + [1] * 4 + [0] * 4


def test_threads_scattering_into_one_cache_on_one_stream_lose_no_update():
    import threading
    cache = ts.zeros((8 * 4,), ts.int32).sync()
    stream = ts.Stream("cpu")
    rounds, errors = 20, []

    def work(i):
        positions = on(np.array([i], np.int32))  # each thread its own row
        try:
            for _ in range(rounds):  # each launch built as a step of work on the stream
                ts.value(None).then(lambda _: bump_rows(ts.borrow_mut(cache).partition(
                    4, at=positions))).sync_on(stream)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    assert cache.numpy().tolist() == [rounds] * 32


def test_an_awaited_launch_with_repeated_positions_raises_in_the_coroutine():
    import asyncio
    cache = ts.zeros((16,), ts.int32).sync()

    async def main():
        with pytest.raises(PositionsError, match="names the same tile"):
            await bump_rows(ts.borrow_mut(cache).partition(4, at=on(np.array([3, 3],
                                                                             np.int32))))
        return cache.numpy()
    assert asyncio.run(main()).tolist() == [0] * 16


def test_a_lazy_tensor_is_partitioned_by_positions_once_it_runs():
    positions = on(np.array([3, 0], np.int32))
    described = bump_rows.ir(ts.zeros((16,), ts.int32).partition(4, at=positions))  # not run
    assert "at positions<i32>" in str(described.params[0].value.type)
    result = bump_rows(ts.zeros((16,), ts.int32).partition(4, at=positions)).sync()
    assert result.cache.unpartition().numpy().tolist() == [1] * 4 + [0] * 8 + [1] * 4


def test_positions_pending_work_writes_are_named_as_the_positions():
    cache, positions = ts.zeros((32,), ts.int32).sync(), on(np.array([0, 2, 4, 6], np.int32))
    writing = bump_rows(ts.borrow_mut(positions).partition(4))  # pending: positions written
    with pytest.raises(BorrowError, match="cannot launch with the positions of 'cache': its "
                       "memory is mutably borrowed by the pending launch of 'bump_rows'"):
        bump_rows(ts.borrow_mut(cache).partition(4, at=positions))
    writing.sync()  # the positions are now 1, 3, 5, 7
    bump_rows(ts.borrow_mut(cache).partition(4, at=positions)).sync()
    assert cache.numpy().tolist() == ([0] * 4 + [1] * 4) * 4


def test_foreign_or_float_positions_are_refused_with_a_fix_that_works():
    cache = ts.zeros((16,), ts.int32).sync()
    foreign = np.array([1, 2], np.int32)
    with pytest.raises(PartitionError, match=r"got numpy.ndarray\n.*at=ts.from_dlpack"):
        ts.borrow_mut(cache).partition(4, at=foreign)
    bump_rows(ts.borrow_mut(cache).partition(4, at=ts.from_dlpack(foreign))).sync()  # the fix
    floats = on(np.array([1.0, 2.0]))
    with pytest.raises(PartitionError, match=r"must hold integers, got f64\n.*"
                       r"ts\.tensor\(positions\.numpy\(\)\.astype\(np\.int32\)\)\.sync\(\)"):
        ts.borrow_mut(cache).partition(4, at=floats)
    fixed = ts.tensor(floats.numpy().astype(np.int32)).sync()  # the fix the hint gives
    bump_rows(ts.borrow_mut(cache).partition(4, at=fixed)).sync()
    assert cache.numpy().tolist() == [0] * 4 + [2] * 8 + [0] * 4
