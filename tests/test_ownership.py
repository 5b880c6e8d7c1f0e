"""The host half of the safety model (moves, aliasing, borrows in flight) on the cpu device: partitions,
moves, exclusive borrows, aliasing through views, loans of pending work, and rejected launches
that leave everything unchanged and usable."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import (AliasingError, ArgumentError, BorrowError, MovedError,
                             PartitionError)

pytestmark = pytest.mark.usefixtures("launch_path")  # both launch paths


@ts.kernel
def increment(z: tc.MutTensor[tc.f32, "S"]):
    z.store(z.load() + 1.0)


@ts.kernel
def copy2d(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.load_tile_like(x, z))


@ts.kernel
def scale1d(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], alpha: float):
    z.store(tc.load_tile_like(x, z) * alpha)


# -- partitions: exact cover and disjointness -------------------------------------------------

pow2 = st.sampled_from([1, 2, 4, 8, 16])


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3), data=st.data())
def test_partition_tiles_cover_every_element_exactly_once(shape, data):
    tile = tuple(data.draw(pow2) for _ in shape)
    p = ts.zeros(tuple(shape)).sync().partition(tile)
    assert p.grid == tuple(-(-d // t) for d, t in zip(shape, tile))
    p, = increment(p).sync()  # each program adds 1 to its own tile only
    assert np.array_equal(p.unpartition().numpy(), np.ones(shape, np.float32))


def test_partition_grid_non_divisible():
    assert ts.zeros((100, 33)).sync().partition((32, 32)).grid == (4, 2)
    assert ts.zeros((7, 5)).sync().partition((4, 2)).grid == (2, 3)


# -- moves ------------------------------------------------------------------------------------

def test_partition_moves_the_tensor_and_views_of_it():
    t = ts.zeros(64).sync()
    view = t[8:16]
    p = t.partition(16)
    line = inspect.currentframe().f_lineno - 1  # the line of the move
    for use in (t.numpy, view.numpy, lambda: t.partition(8), lambda: t[0:2]):
        with pytest.raises(MovedError, match=f"moved at .*test_ownership.py:{line}"):
            use()
    with pytest.raises(MovedError):
        increment(t.partition(16)).sync()
    back = p.unpartition()
    assert np.array_equal(back.numpy(), np.zeros(64, np.float32))
    with pytest.raises(MovedError, match="unpartitioned"):
        p.unpartition()


# -- borrow_mut -------------------------------------------------------------------------------

def test_borrowed_partition_writes_in_place_and_ends_at_completion():
    t = ts.zeros((6, 10)).sync()
    op = increment(ts.borrow_mut(t).partition((4, 4)))
    with pytest.raises(BorrowError, match="mutably borrowed"):
        t.numpy()  # the launch is pending
    p, = op.sync()
    assert np.array_equal(t.numpy(), np.ones((6, 10), np.float32))  # changed in place
    with pytest.raises(MovedError, match="borrowed by a launch that completed"):
        increment(p)
    increment(ts.borrow_mut(t).partition((4, 4))).sync()  # borrow again
    assert np.array_equal(t.numpy(), np.full((6, 10), 2, np.float32))


def test_borrowed_partition_of_a_slice_changes_only_that_slice():
    t = ts.zeros((8, 8)).sync()
    increment(ts.borrow_mut(t[2:5, 1:7]).partition((2, 4))).sync()
    expected = np.zeros((8, 8), np.float32)
    expected[2:5, 1:7] = 1
    assert np.array_equal(t.numpy(), expected)


def test_pending_launch_blocks_other_borrows_and_moves_until_it_completes():
    t = ts.zeros(32).sync()
    op = increment(ts.borrow_mut(t).partition(8))
    with pytest.raises(BorrowError):
        ts.borrow_mut(t).partition(8)
    with pytest.raises(BorrowError):
        t.partition(8)
    with pytest.raises(BorrowError):
        increment(ts.borrow_mut(t[0:8]).partition(8))
    op.sync()
    p = ts.borrow_mut(t).partition(8)
    assert p.unpartition() is t
    t.numpy()


def test_borrowed_partition_of_a_moved_tensor_cannot_launch():
    t = ts.zeros(32).sync()
    p = ts.borrow_mut(t).partition(8)
    t.partition(8)
    with pytest.raises(MovedError, match="moved at"):
        increment(p)


# -- loans of pending work ------------------------------------------------------------------

def test_shared_input_of_a_pending_launch_can_be_read_but_not_written():
    x = ts.tensor(np.arange(16, dtype=np.float32)).sync()
    op = scale1d(ts.zeros(16).sync().partition(8), x, 2.0)
    assert np.array_equal(x.numpy(), np.arange(16))  # shared reads are fine
    with pytest.raises(BorrowError, match="shared borrowed"):
        ts.borrow_mut(x).partition(8)
    with pytest.raises(BorrowError):
        x.copy_(ts.zeros(16).sync()).sync()
    z, _ = op.sync()
    assert np.array_equal(z.unpartition().numpy(), 2 * np.arange(16))
    ts.borrow_mut(x).partition(8).unpartition()  # free again


def test_dropping_an_undriven_launch_returns_its_loans():
    t = ts.zeros(16).sync()
    op = increment(ts.borrow_mut(t).partition(8))
    del op
    t.numpy()


# -- rejected launches leave everything unchanged -------------------------------------------

def _assert_unchanged_and_usable(out_tensor, expected):
    assert np.array_equal(out_tensor.numpy(), expected)
    increment(ts.borrow_mut(out_tensor).partition((4,) * out_tensor.ndim)).sync()
    assert np.array_equal(out_tensor.numpy(), expected + 1)


def test_aliasing_through_overlapping_slices_is_rejected():
    base = ts.tensor(np.arange(20, dtype=np.float32)).sync()
    with pytest.raises(AliasingError, match="overlap"):
        scale1d(ts.borrow_mut(base[0:10]).partition(4), base[5:15], 2.0)
    _assert_unchanged_and_usable(base, np.arange(20, dtype=np.float32))
    # disjoint slices of one allocation are fine
    scale1d(ts.borrow_mut(base[0:10]).partition(4), base[10:20], 2.0).sync()
    assert np.array_equal(base.numpy()[:10], 2 * (np.arange(10, 20) + 1))


def test_transposed_view_of_the_output_as_input_is_rejected():
    t = ts.tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).sync()
    with pytest.raises(AliasingError, match="'z' and 'x'"):
        copy2d(ts.borrow_mut(t).partition((2, 2)), t.T)
    _assert_unchanged_and_usable(t, np.arange(16, dtype=np.float32).reshape(4, 4))


@pytest.mark.parametrize("case", ["rank4", "tile_shape", "dtype", "moved", "pending"])
def test_rejected_launches(case):
    x = ts.tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).sync()
    out = ts.zeros((4, 4)).sync()
    if case == "rank4":
        with pytest.raises(PartitionError, match="rank 4"):
            copy2d(ts.borrow_mut(out.reshape(1, 1, 4, 4)).partition((1, 1, 2, 2)), x)
    elif case == "tile_shape":
        @ts.kernel
        def fixed(z: tc.MutTensor[tc.f32, (2, 2)], x: tc.Tensor[tc.f32, (-1, -1)]):
            z.store(tc.load_tile_like(x, z))
        with pytest.raises(PartitionError, match=r"tile shape \(4, 4\) differs"):
            fixed(ts.borrow_mut(out).partition((4, 4)), x)
    elif case == "dtype":
        with pytest.raises(ArgumentError, match="dtype f32, got f64"):
            copy2d(ts.borrow_mut(out).partition((2, 2)),
                   ts.tensor(np.ones((4, 4))).sync())
    elif case == "moved":
        moved = ts.zeros((4, 4)).sync()
        moved.partition((2, 2))
        with pytest.raises(MovedError):
            copy2d(ts.borrow_mut(out).partition((2, 2)), moved)
    elif case == "pending":
        pending = copy2d(ts.borrow_mut(x).partition((2, 2)), out)
        with pytest.raises(BorrowError):
            copy2d(ts.borrow_mut(out).partition((2, 2)), x)
        pending.sync()
        x = ts.tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).sync()
    # every rejected launch left the tensors unchanged and usable
    assert np.array_equal(x.numpy(), np.arange(16).reshape(4, 4))
    _assert_unchanged_and_usable(out, np.zeros((4, 4), np.float32))


# -- zero-copy views ---------------------------------------------------------------------------

def test_kernel_reads_a_slice_without_copying():
    base = np.arange(200, dtype=np.float32).reshape(10, 20)
    t = ts.tensor(base).sync()
    view = t[2:9, 3:18:2]
    assert view.shape == (7, 8) and view.strides == (20, 2)
    z, _ = copy2d(ts.zeros((7, 8)).sync().partition((4, 4)), view).sync()
    assert np.array_equal(z.unpartition().numpy(), base[2:9, 3:18:2])


def test_views_reshape_permute_and_slice():
    t = ts.arange(24).sync()
    m = t.view(4, 6)
    assert np.array_equal(m.numpy(), np.arange(24).reshape(4, 6))
    assert np.array_equal(m.T.numpy(), np.arange(24).reshape(4, 6).T)
    assert np.array_equal(m.slice(range(1, 3), (2, 6)).numpy(),
                          np.arange(24).reshape(4, 6)[1:3, 2:6])
    assert np.array_equal(m[:, ::2].numpy(), np.arange(24).reshape(4, 6)[:, ::2])
    assert np.array_equal(m.permute(1, 0).numpy(), np.arange(24).reshape(4, 6).T)
    with pytest.raises(ValueError, match="without a copy"):
        m.T.reshape(24)
    assert np.array_equal(m.T.clone().sync().reshape(24).numpy(),
                          np.arange(24).reshape(4, 6).T.reshape(24))


# -- interop -----------------------------------------------------------------------------------

def test_from_dlpack_shares_memory_with_numpy():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ts.from_dlpack(arr)
    increment(ts.borrow_mut(t).partition((2, 2))).sync()
    assert np.array_equal(arr, np.arange(12).reshape(3, 4) + 1)  # written through
    arr[0, 0] = 100
    assert t.numpy()[0, 0] == 100
    back = np.from_dlpack(t)
    back[2, 3] = -1
    assert arr[2, 3] == -1


def test_constructors():
    assert np.array_equal(ts.eye(3).sync().numpy(), np.eye(3))
    assert np.allclose(ts.linspace(0, 1, 5).sync().numpy(), np.linspace(0, 1, 5))
    a, b = ts.randn((4, 4), seed=3).sync().numpy(), ts.randn((4, 4), seed=3).sync().numpy()
    assert np.array_equal(a, b) and a.std() > 0
    r = ts.rand(1000, seed=1).sync().numpy()
    assert r.min() >= 0 and r.max() < 1
    t = ts.full((2, 3), 7, ts.int16).sync()
    assert t.numpy().dtype == np.int16 and t.nbytes == 12 and t.is_contiguous


# -- what a captured graph borrows per replay (deviceops.graph.ReplayBorrows) --------------

def ReplayBorrows(launches):
    """What a captured graph of these ``(kernel, args)`` launches borrows per replay."""
    from types import SimpleNamespace
    from tilesafe.deviceops.graph import ReplayBorrows as of_nodes
    from tilesafe.launch.checks import replay_borrows
    return of_nodes([SimpleNamespace(borrows=lambda k=k, a=a: replay_borrows(k.params, a))
                     for k, a in launches])


def test_replay_borrows_lend_each_tensor_once_mutable_if_any_launch_writes_it():
    from tilesafe.driver.ledger import release_all
    x = ts.tensor(np.arange(16, dtype=np.float32)).sync()
    z = ts.zeros(16).sync()
    launches = [(scale1d, (ts.borrow_mut(z).partition(8), x, 2.0)),
                (scale1d, (ts.borrow_mut(z).partition(8), x, 3.0))]
    borrows = ReplayBorrows(launches)
    assert [(lo, hi, mutable) for _, lo, hi, mutable in borrows.ranges] == \
        [(*z.span(), True), (*x.span(), False)]  # device addresses of 64 bytes each
    assert z.span()[1] - z.span()[0] == 64 == x.span()[1] - x.span()[0]
    loans = borrows.lend("a replay", None, None)
    assert x.numpy()[3] == 3.0  # shared: the host may read
    with pytest.raises(BorrowError, match="mutably borrowed by a replay"):
        z.numpy()
    with pytest.raises(BorrowError, match="shared borrowed by a replay"):
        ts.borrow_mut(x).partition(8)
    with pytest.raises(BorrowError, match="cannot replay the graph"):
        borrows.lend("another replay", None, None)  # the first replay has not completed
    release_all(loans)
    assert not x._alloc.loans and not z._alloc.loans
    release_all(borrows.lend("a replay", None, None))  # free again: a new replay may borrow


def test_replay_borrows_refuse_a_moved_input_or_a_spent_output_at_every_replay():
    from tilesafe.driver.ledger import release_all
    x, z = ts.zeros(16).sync(), ts.zeros(16).sync()
    out = ts.borrow_mut(z).partition(8)
    borrows = ReplayBorrows([(scale1d, (out, x, 2.0))])
    release_all(borrows.lend("a replay", None, None))
    x.partition(8)  # moves x away
    with pytest.raises(MovedError, match="cannot replay a graph that reads it"):
        borrows.lend("a replay", None, None)
    assert not z._alloc.loans  # nothing was lent by the refused replay
    y, w = ts.zeros(16).sync(), ts.zeros(16).sync()
    out = ts.borrow_mut(w).partition(8)
    borrows = ReplayBorrows([(scale1d, (out, y, 2.0))])
    w.partition(8)  # moves the tensor the borrowed output partition is of
    with pytest.raises(MovedError, match="moved at"):
        borrows.lend("a replay", None, None)


def test_replays_on_one_stream_share_their_loans_until_the_last_ends():
    """Back-to-back replays on one stream share the loans of the first (one more use each);
    a replay on another stream is still refused while they live."""
    from tilesafe.driver.ledger import release_all
    x, z = ts.ones(16).sync(), ts.zeros(16).sync()
    borrows = ReplayBorrows([(scale1d, (ts.borrow_mut(z).partition(8), x, 2.0))])
    one, other = ts.Stream("cpu"), ts.Stream("cpu")
    first = borrows.lend("a replay", None, one)
    second = borrows.lend("a replay", None, one)
    assert [id(loan) for loan in first] == [id(loan) for loan in second]
    assert all(loan.count == 2 for loan in first)
    kept = list(first)
    with pytest.raises(BorrowError, match="cannot replay the graph"):
        borrows.lend("a replay", None, other)
    release_all(first)
    with pytest.raises(BorrowError, match="mutably borrowed by a replay"):
        z.numpy()  # the second replay still borrows it
    release_all(second)
    assert not x._alloc.loans and not z._alloc.loans
    third = borrows.lend("a replay", None, one)  # the shared loans ended: new ones
    assert all(loan.count == 1 for loan in third) and third[0] is not kept[0]
    release_all(third)


# -- ownership steps are atomic across threads (runtime.allocation.LEDGER) -------------------

def _rival_inside(monkeypatch, owner, name, rival):
    """Patch ``owner.name`` so that its first call starts ``rival`` on another thread and gives
    it half a second; returns what happened: whether the rival finished inside the call, and
    the error it raised (if any) once it did finish."""
    import threading
    original, seen = getattr(owner, name), {}

    def patched(*args, **kwargs):
        if not seen:
            seen["started"] = True

            def run():
                try:
                    seen["result"] = rival()
                except Exception as error:  # noqa: BLE001 (the test inspects it)
                    seen["error"] = error
            seen["thread"] = threading.Thread(target=run)
            seen["thread"].start()
            seen["thread"].join(0.5)
            seen["finished_inside"] = not seen["thread"].is_alive()
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, patched)
    return seen


def test_no_launch_slips_between_another_launchs_checks_and_loans(monkeypatch):
    from tilesafe.driver import ledger
    t, x = ts.zeros(64).sync(), ts.ones(64).sync()
    seen = _rival_inside(monkeypatch, ledger, "lend",
                         lambda: scale1d(ts.borrow_mut(t).partition(16), x, 1.0))
    op = scale1d(ts.borrow_mut(t).partition(16), x, 2.0)  # checks t is free, then lends it
    seen["thread"].join(5)
    assert not seen["finished_inside"]  # the rival waited for the whole step
    assert isinstance(seen.get("error"), BorrowError)  # and then found t borrowed
    z, _ = op.sync()
    assert np.array_equal(t.numpy(), np.full(64, 2.0))


def test_no_launch_starts_writing_a_tensor_while_the_host_copies_it(monkeypatch):
    from tilesafe.driver.platform import platform_of
    t, x = ts.zeros(64).sync(), ts.ones(64).sync()
    seen = _rival_inside(monkeypatch, type(platform_of(t.device)), "read",
                         lambda: scale1d(ts.borrow_mut(t).partition(16), x, 1.0).sync())
    assert np.array_equal(t.numpy(), np.zeros(64))  # the copy is made before the rival runs
    seen["thread"].join(5)
    assert not seen["finished_inside"] and "error" not in seen
    assert np.array_equal(t.numpy(), np.ones(64))  # the rival ran once the read was done
