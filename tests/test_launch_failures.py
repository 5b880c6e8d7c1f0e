"""A launch that fails loses nothing: whatever error it raises (refused before it runs, failed
while compiling or running), the arguments come back with it (``err.arguments``), so a
partition made inline is not lost with the moved tensor; and the permission of
``with ts.unsafe():`` cannot be carried out of its block."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import (AliasingError, ArgumentError, BorrowError, CompileError,
                             DeviceOpError, DTypeMismatchError, KernelRuntimeError,
                             MovedError, PartitionError, RankMismatchError, TilesafeError,
                             TileShapeMismatchError, UnsafeError)

VALUES = np.arange(16, dtype=np.float32)


@ts.kernel
def inc(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


@ts.kernel
def inc4(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


@ts.kernel
def past_the_end(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    z.store(x.partition((4,)).load(i + 1))


@ts.kernel
def broken(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.zeros((3,), tc.f32))  # no broadcast: a compile error


@ts.kernel(unchecked_accesses=True)
def fast_inc(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


def _fresh():
    return ts.tensor(VALUES, device="cpu").sync()


def _x(n=16, dtype=ts.float32):
    return ts.ones(n, dtype, device="cpu").sync()


def _pending_writer(x):
    """x lent exclusively to a launch not yet driven."""
    return inc(ts.borrow_mut(x).partition(4), _x())


CASES = {  # error class -> a failing launch whose first argument is a partition made inline
    ArgumentError: lambda: inc(_fresh().partition(4)),
    DTypeMismatchError: lambda: inc(_fresh().partition(4), _x(dtype=ts.float16)),
    RankMismatchError: lambda: inc(_fresh().partition(4), ts.ones((4, 4), device="cpu").sync()),
    TileShapeMismatchError: lambda: inc4(_fresh().partition(8), _x()),
    PartitionError: lambda: inc.launch(_fresh().partition(4), _x(), grid=(8,)),
    MovedError: lambda: (lambda x: (x.partition(4), inc(_fresh().partition(4), x)))(_x()),
    AliasingError: lambda: (lambda t, twin: inc(t.partition(4), twin))(
        *(lambda t: (t, ts.from_dlpack(t)))(_fresh())),
    BorrowError: lambda: (lambda x: (_pending_writer(x), inc(_fresh().partition(4), x)))(_x()),
    UnsafeError: lambda: fast_inc(_fresh().partition(4), _x()),
    CompileError: lambda: broken(_fresh().partition(4), _x()).sync(),
    KernelRuntimeError: lambda: past_the_end(_fresh().partition(4), _x()).sync(),
}


@pytest.mark.parametrize("error", list(CASES), ids=lambda e: e.__name__)
def test_a_failed_launch_hands_its_arguments_back(error):
    with pytest.raises(error) as info:
        CASES[error]()
    partition = info.value.arguments[0]
    assert isinstance(partition, ts.Partition)
    t = partition.unpartition()  # the moved tensor is not lost
    if error is KernelRuntimeError:  # it ran: some programs wrote, the tensor is usable
        assert t.numpy().shape == (16,)
    else:  # refused before anything ran: unchanged
        assert np.array_equal(t.numpy(), VALUES)


def test_errors_other_than_launches_carry_no_arguments():
    assert TilesafeError("x").arguments == ()


# -- with ts.unsafe(): the permission stays in its block ---------------------------------------

def test_the_unsafe_permission_holds_inside_the_block_and_what_it_calls():
    def launch():
        return fast_inc(ts.zeros(16, device="cpu").sync().partition(4), _x())
    with ts.unsafe():
        op = launch()
    z, _ = op.sync()  # driven outside: the launch was created inside
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 2.0))
    with pytest.raises(UnsafeError, match="outside 'with ts.unsafe\\(\\):'"):
        launch()


def test_a_generator_suspended_inside_the_block_does_not_lend_the_permission():
    def holder():
        with ts.unsafe():
            yield  # suspended here, inside its block

    gen = holder()
    next(gen)
    with pytest.raises(UnsafeError):
        fast_inc(ts.zeros(16, device="cpu").sync().partition(4), _x())
    gen.close()


def test_a_task_started_inside_the_block_does_not_carry_the_permission_away():
    async def later():
        await asyncio.sleep(0)
        return fast_inc(ts.zeros(16, device="cpu").sync().partition(4), _x())

    async def main():
        with ts.unsafe():
            task = asyncio.ensure_future(later())
        with pytest.raises(UnsafeError):
            await task
    asyncio.run(main())


def test_compiling_an_unsafe_kernel_for_launching_needs_the_block_too():
    args = (ts.zeros(16, device="cpu").sync().partition(4), _x())
    with pytest.raises(UnsafeError, match="compiled for launching"):
        fast_inc.compile(*args)
    with ts.unsafe():
        assert fast_inc.compile(*args) is not None


# -- events and shared ops ---------------------------------------------------------------------

def test_an_event_never_recorded_refuses_to_wait_forever():
    event = ts.Event()
    assert not event.query()
    with pytest.raises(DeviceOpError, match="never recorded"):
        event.synchronize()
    event.record(ts.Stream("cpu"))
    event.synchronize()
    assert event.query()
