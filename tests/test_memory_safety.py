"""Attacks on the safety model through memory itself, as a real program would make them, each
refused before anything runs: tensors over the same bytes reached by different paths (DLPack
imports, numpy's array interface, slices imported separately), outputs whose layout reaches one
address from several indices, explicit grids that give a tile several owners, read-only memory
used as an output, ``.shared()`` results written through another path, and metadata edits.

Each test failed on the code before these rules were enforced (the launch was accepted and the
programs raced, or the write went through)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import (AliasingError, ArgumentError, BorrowError, PartitionError,
                             PartitionRankError)

from conftest import marker_line


@ts.kernel
def inc(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


@ts.kernel
def inc_mapped(z: tc.MappedPartitionMut[tc.f32, "S", "M"]):
    for idx in z.iter_indices():
        z.store(z.load(idx) + 1.0, idx)


def _ones(n=16):
    return ts.ones(n, device="cpu").sync()


def _at(tag: str) -> str:
    return f"test_memory_safety.py:{marker_line(__file__, tag)}"


# -- one memory, two tensors ------------------------------------------------------------------

def test_a_dlpack_twin_of_a_tensor_cannot_be_read_while_the_tensor_is_written():
    t = ts.arange(16, device="cpu").sync()
    twin = ts.from_dlpack(t)
    with pytest.raises(AliasingError, match=rf"{_at('twin')}: arguments 'z' and 'x' of 'inc' "
                                            "overlap in memory"):
        inc(t.partition(4), twin)  # <- twin


def test_one_numpy_array_imported_twice_is_one_memory():
    a = np.arange(16, dtype=np.float32)
    with pytest.raises(AliasingError, match="overlap in memory"):
        inc(ts.from_dlpack(a).partition(4), ts.from_dlpack(a))
    assert np.array_equal(a, np.arange(16))  # nothing ran


def test_slices_imported_separately_conflict_where_they_overlap():
    b = np.arange(200, dtype=np.float32)
    with pytest.raises(AliasingError, match="overlap in memory"):
        inc(ts.from_dlpack(b[0:100]).partition(4), ts.from_dlpack(b[50:150]))
    out, x = inc(ts.from_dlpack(b[0:100]).partition(4), ts.from_dlpack(b[100:200])).sync()
    assert np.array_equal(b[:100], np.arange(100, 200) + 1.0)  # disjoint: accepted, exact


def test_memory_reached_through_the_array_interface_is_the_same_memory():
    class Interface:  # only __array_interface__, no DLPack
        def __init__(self, array):
            self.array, self.__array_interface__ = array, array.__array_interface__
    c = np.arange(16, dtype=np.float32)
    with pytest.raises(AliasingError, match="overlap in memory"):
        inc(ts.from_dlpack(Interface(c)).partition(4), ts.from_dlpack(c))


def test_while_a_launch_writes_an_import_its_twin_cannot_be_read_or_written():
    arr = np.zeros(16, np.float32)
    t1, t2 = ts.from_dlpack(arr), ts.from_dlpack(arr)
    op = inc(ts.borrow_mut(t1).partition(4), _ones())
    with pytest.raises(BorrowError, match="mutably borrowed by the pending launch of 'inc'"):
        t2.numpy()
    with pytest.raises(BorrowError, match="mutably borrowed"):
        ts.borrow_mut(t2[4:8]).partition(4)
    op.sync()
    assert np.array_equal(t2.numpy(), np.full(16, 2.0))  # inc wrote x + 1


def test_an_export_refused_inside_torch_names_the_users_call_not_torchs_code():
    """``torch.from_dlpack(t)`` calls the tensor's ``__dlpack__`` from torch's own Python
    code; the BorrowError it raises while a launch writes ``t`` names the user's line, as
    ``t.numpy()`` would."""
    torch = pytest.importorskip("torch")
    t = ts.zeros(16, device="cpu").sync()
    op = inc(ts.borrow_mut(t).partition(4), _ones())
    with pytest.raises(BorrowError, match=rf"{_at('torch import')}: cannot export it through "
                                          "DLPack: its memory is mutably borrowed"):
        torch.from_dlpack(t)  # <- torch import
    op.sync()
    assert torch.from_dlpack(t).tolist() == [2.0] * 16


def test_memory_imported_for_two_devices_is_one_memory():
    """Host and device addresses are one space (CUDA's unified addressing), so memory a GPU
    reaches at its host address (pinned or managed memory), imported once as ``cpu`` and once
    as ``cuda:0``, is one region with one loan book: while a launch writes it through one
    import, the other cannot be read (they were two memories before). Shown on the ledger,
    with the ``cuda:0`` import's record made by hand (no GPU needed)."""
    from tilesafe.driver.device import Device
    from tilesafe.driver.ledger import Allocation
    host = np.zeros(16, np.float32)
    t = ts.from_dlpack(host)
    address = host.__array_interface__["data"][0]
    as_cuda = Allocation(host, Device("cuda", 0), base=address, nbytes=host.nbytes)
    assert as_cuda.loans is t._alloc.loans
    pending = inc(ts.borrow_mut(t).partition(4), _ones())
    with pytest.raises(BorrowError, match="mutably borrowed by the pending launch of 'inc'"):
        as_cuda.check(address, address + 4, write=False, action="read it", where=None)
    pending.sync()
    as_cuda.check(address, address + 4, write=False, action="read it", where=None)


def test_an_import_overlapping_two_imports_joins_their_loans():
    a = np.zeros(32, np.float32)
    left, right = ts.from_dlpack(a[:16]), ts.from_dlpack(a[16:])
    pending = inc(ts.borrow_mut(right).partition(4), _ones())  # right lent before the union
    whole = ts.from_dlpack(a)  # overlaps both: one book from now on
    with pytest.raises(BorrowError, match="mutably borrowed"):
        whole.numpy()
    with pytest.raises(AliasingError, match="overlap in memory"):
        inc(ts.borrow_mut(left).partition(4), whole)
    pending.sync()
    assert np.array_equal(whole.numpy(), np.r_[np.zeros(16), np.full(16, 2.0)])


# -- one output, several writers ----------------------------------------------------------------

def test_an_output_whose_elements_share_an_address_is_refused():
    base = np.zeros(16, np.float32)
    zero_stride = ts.from_dlpack(np.lib.stride_tricks.as_strided(base, (16,), (0,)))
    with pytest.raises(AliasingError, match=rf"{_at('stride0')}: the layout of 'z' of 'inc' "
                                            r"\(shape \(16,\), strides \(0,\)\) reaches one "
                                            "address from several indices"):
        inc(zero_stride.partition(4), _ones())  # <- stride0
    rows = ts.from_dlpack(np.lib.stride_tricks.as_strided(base, (4, 4), (4, 4)))  # (1, 1)
    with pytest.raises(AliasingError, match="reaches one address"):
        copy_rows(rows.partition((1, 4)), ts.ones((4, 4), device="cpu").sync())
    assert np.array_equal(base, np.zeros(16))


@ts.kernel
def copy_rows(z: tc.MutTensor[tc.f32, (1, 4)], x: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.load_tile_like(x, z))


def test_an_explicit_grid_must_be_the_partitions_own():
    z = ts.zeros(16, device="cpu").sync().partition(4)
    with pytest.raises(PartitionError, match=r"explicit grid \(4, 3\) differs from the grid"):
        inc.launch(z, _ones(), grid=(4, 3))
    with pytest.raises(PartitionError, match="differs from the grid"):
        inc.launch(z, _ones(), grid=(2,))
    mapped = ts.zeros(16, device="cpu").sync().partition(4).map(1, 2)
    with pytest.raises(PartitionError, match=r"explicit grid \(2, 2\) differs"):
        inc_mapped.launch(mapped, grid=(2, 2))
    z, x = inc.launch(z, _ones(), grid=(4, 1, 1)).sync()  # the same grid spelled out
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 2.0))


def test_read_only_memory_is_refused_as_an_output():
    ro = np.zeros(16, np.float32)
    ro.setflags(write=False)
    t = ts.from_dlpack(ro)
    with pytest.raises(BorrowError, match="cannot partition this tensor: its memory was "
                                          "imported read-only"):
        t.partition(4)
    with pytest.raises(BorrowError, match="imported read-only"):
        ts.borrow_mut(t).partition(4)
    with pytest.raises(BorrowError, match="imported read-only"):
        t.copy_(_ones()).sync()
    assert np.array_equal(t.numpy(), np.zeros(16))  # still readable, and an input
    z, _ = inc(ts.zeros(16, device="cpu").sync().partition(4), t).sync()
    assert np.array_equal(z.unpartition().numpy(), np.ones(16))


# -- shared results --------------------------------------------------------------------------

def test_a_shared_result_is_read_only_through_every_path():
    x = _ones()
    p, _ = inc(ts.zeros(16, device="cpu").sync().partition(4), x).shared().sync()
    with pytest.raises(BorrowError, match="read-only result of .shared()"):
        inc(p, x)  # the shared partition is not an output any more
    t = ts.zeros(16, device="cpu").sync()
    before = t[0:8]  # a view taken before the tensor is shared
    ts.value(t).shared().sync()
    with pytest.raises(BorrowError, match="read-only result of .shared()"):
        ts.borrow_mut(before).partition(4)
    exported = np.from_dlpack(t)
    assert not exported.flags.writeable
    with pytest.raises(ValueError):
        exported[0] = 5.0
    twin = ts.from_dlpack(exported)  # read-only twice over: a read-only import of it
    with pytest.raises(BorrowError, match="read-only"):
        inc(ts.borrow_mut(twin).partition(4), x)
    address = exported.__array_interface__["data"][0]  # the same bytes, writable in numpy
    writable_twin = ts.from_dlpack(np.ctypeslib.as_array((ctypes.c_float * 16).from_address(
        address)))
    with pytest.raises(BorrowError, match="read-only result of .shared()"):
        inc(ts.borrow_mut(writable_twin).partition(4), x)  # the memory says so all the same
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()  # a consumer of DLPack before 1.0 cannot be told
    assert inc(ts.borrow_mut(ts.zeros(16, device="cpu").sync()).partition(4), twin).sync()


@ts.kernel
def add_one_atomically(h: tc.AtomicTensor[tc.f32, (-1,)]):
    h.atomic_add(1.0, 0)


def test_every_tensor_and_borrow_in_a_shared_result_is_read_only():
    """``.shared()`` marks what its result holds at any depth of tuples, lists and dicts, and
    the memory of a partition, mapped partition, mutable or atomic borrow in it (each was
    writable when not at the result's top level or not a tensor)."""
    x = _ones()

    def fresh():
        return ts.zeros(16, device="cpu").sync()
    (listed,) = ts.value(fresh()).then(lambda t: [t]).shared().sync()
    _, (nested,) = ts.value(fresh()).then(lambda t: (0, (t,))).shared().sync()
    keyed = ts.value(fresh()).then(lambda t: {"t": t}).shared().sync()["t"]
    for t in (listed, nested, keyed):
        assert t.is_read_only
        with pytest.raises(BorrowError, match="read-only result of .shared()"):
            ts.borrow_mut(t).partition(4)
    mapped = ts.value(fresh().partition(4).map(1, 2)).shared().sync()
    with pytest.raises(BorrowError, match="read-only"):
        inc_mapped(mapped)
    borrowed = ts.value(ts.borrow_mut(fresh())).shared().sync()
    with pytest.raises(BorrowError, match="read-only"):
        borrowed.partition(4)
    h = fresh()
    atomic = ts.value(ts.atomic(h)).shared().sync()
    with pytest.raises(BorrowError, match="read-only"):
        add_one_atomically(atomic, grid=(3,))
    assert np.array_equal(h.numpy(), np.zeros(16)) and listed.numpy().sum() == 0
    assert inc(ts.borrow_mut(fresh()).partition(4), listed).sync()  # still an input


def test_memory_pending_work_still_writes_cannot_become_a_shared_result():
    # a launch made but not driven writes t: sharing t now would hand out "read-only" memory
    # that the launch then writes
    x = _ones()
    t = ts.zeros(16, device="cpu").sync()
    twin = ts.from_dlpack(np.from_dlpack(t[0:8]))  # the same memory, imported again
    pending = inc(ts.borrow_mut(t).partition(4), x)
    for target in (t, twin):
        with pytest.raises(BorrowError, match=r"cannot make it the shared, read-only result "
                           r"of \.shared\(\): its memory is mutably borrowed by the pending "
                           r"launch of 'inc'"):
            ts.value(target).shared().sync()
    pending.sync()
    shared = ts.value(t).shared().sync()  # once the writer completed
    assert shared.is_read_only and shared.numpy().tolist() == [2.0] * 16
    # a pending reader does not stop it
    u = ts.zeros(16, device="cpu").sync()
    reader = inc(ts.borrow_mut(ts.zeros(16, device="cpu").sync()).partition(4), u)
    assert ts.value(u).shared().sync().is_read_only
    reader.sync()


# -- metadata cannot be edited into a lie -------------------------------------------------------

def test_shape_strides_and_dtype_are_read_only():
    t = ts.zeros(16, device="cpu").sync()
    for name, value in (("shape", (4096,)), ("strides", (0,)), ("dtype", ts.float64)):
        with pytest.raises(AttributeError):
            setattr(t, name, value)
    p = t.partition(4)
    with pytest.raises(AttributeError):
        p.tile_shape = (1,)
    mapped = p.map(1, 2)
    with pytest.raises(AttributeError):
        mapped.num_tile_blocks = 4


def test_partitions_are_refused_where_they_are_made():
    with pytest.raises(PartitionRankError, match="rank 0"):
        ts.full((), 1.0, device="cpu").sync().partition(())
    with pytest.raises(PartitionError, match="an int between 1"):
        ts.zeros(16, device="cpu").sync().partition(4).map(1, True)
    t = ts.zeros((2, 2, 2, 2), device="cpu").sync()
    with pytest.raises(PartitionRankError, match="rank 4"):
        t.partition((1, 1, 1, 1))
    assert t.numpy().shape == (2, 2, 2, 2)  # a refused partition moves nothing


def test_extents_beyond_the_32_bit_kernel_abi_are_refused_before_the_launch():
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (1 << 31,), (0,),
                                          writeable=False)
    with pytest.raises(ArgumentError, match="beyond the kernel ABI's 32-bit integers"):
        inc(ts.zeros(16, device="cpu").sync().partition(4), ts.from_dlpack(big))


# -- numpy's array protocol -------------------------------------------------------------------

def test_np_asarray_copies_the_values_and_never_views_the_memory():
    """``np.asarray(t)`` gave an object array of 0-d tensors; it is now a copy of the values
    (so writing the array cannot reach the tensor past its loans), read under the same check
    as ``t.numpy()``; ``copy=False`` (a view) is refused with the fix."""
    t = ts.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device="cpu").sync()
    values = np.asarray(t)
    assert values.dtype == np.float32 and values.shape == (2, 3)
    assert np.array_equal(values, np.arange(6).reshape(2, 3))
    values[0, 0] = 99.0
    assert t.numpy()[0, 0] == 0.0
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match=r"test_memory_safety.py:\d+: a tilesafe tensor cannot "
                                         r"be viewed as a numpy array without a copy"):
        np.array(t, copy=False)
    z = ts.zeros(16, device="cpu").sync()
    pending = inc(ts.borrow_mut(z).partition(4), _ones())  # not run yet: z is lent
    with pytest.raises(BorrowError, match="mutably borrowed by the pending launch of 'inc'"):
        np.asarray(z)
    pending.sync()
    assert np.array_equal(np.asarray(z), np.full(16, 2.0))  # (inc: x + 1)


def test_np_asarray_is_checked_through_every_path_to_the_memory():
    """``np.asarray`` of a DLPack twin of a tensor a pending launch writes is refused as the
    tensor's own read is; of a moved tensor it names the move; of a ``.shared()`` result it is a
    copy, and writing that copy leaves the read-only result as it was."""
    from tilesafe.errors import MovedError
    z = ts.zeros(16, device="cpu").sync()
    twin = ts.from_dlpack(z)
    pending = inc(ts.borrow_mut(z).partition(4), _ones())
    with pytest.raises(BorrowError, match="mutably borrowed by the pending launch of 'inc'"):
        np.asarray(twin)
    pending.sync()
    moved = ts.zeros(16, device="cpu").sync()
    moved.partition(4)
    with pytest.raises(MovedError, match="was moved at"):
        np.asarray(moved)
    shared = inc(ts.zeros(16, device="cpu").sync().partition(4), _ones()).shared().sync()
    result = shared.z.unpartition()
    copy = np.asarray(result)
    copy[:] = -5.0
    assert np.array_equal(np.asarray(result), np.full(16, 2.0))  # (inc: x + 1)
