"""The memory and thread attacks of tests/test_memory_safety.py and tests/test_threads.py on
cuda:0, through torch's and tilesafe's own DLPack exports: tensors over one device memory
reached by different paths conflict, outputs that reach one address twice and grids that give
a tile several owners are refused, and threads enqueueing on one stream and replaying one graph
lose no update."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import AliasingError, BorrowError, MovedError, PartitionError

GPU = "cuda:0"
torch = pytest.importorskip("torch")


@ts.kernel
def inc(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


@ts.kernel
def bump(z: tc.MutTensor[tc.f32, "S"]):
    z.store(z.load() + 1.0)


def _ones(n=1024):
    return ts.ones(n, device=GPU).sync()


def test_a_tilesafe_tensor_and_its_dlpack_twin_are_one_memory_on_the_gpu():
    t = ts.arange(1024, device=GPU).sync()
    twin = ts.from_dlpack(t)
    with pytest.raises(AliasingError, match="overlap in memory"):
        inc(t.partition(256), twin)


def test_one_torch_tensor_imported_twice_and_overlapping_slices_conflict():
    base = torch.zeros(2048, device="cuda")
    with pytest.raises(AliasingError, match="overlap in memory"):
        inc(ts.from_dlpack(base).partition(256), ts.from_dlpack(base))
    with pytest.raises(AliasingError, match="overlap in memory"):
        inc(ts.from_dlpack(base[0:1024]).partition(256), ts.from_dlpack(base[512:1536]))
    out, _ = inc(ts.from_dlpack(base[0:1024]).partition(256),
                 ts.from_dlpack(base[1024:2048])).sync()  # disjoint: accepted
    torch.cuda.synchronize()
    assert torch.equal(base[:1024], torch.ones(1024, device="cuda"))
    t1, t2 = ts.from_dlpack(base), ts.from_dlpack(base)
    pending = inc(ts.borrow_mut(t1[:1024]).partition(256), _ones())
    with pytest.raises(BorrowError, match="mutably borrowed"):
        t2.numpy()
    pending.sync()


def test_outputs_reaching_one_address_twice_and_foreign_grids_are_refused():
    base = torch.zeros(1024, device="cuda")
    repeated = ts.from_dlpack(base.as_strided((1024,), (0,)))
    with pytest.raises(AliasingError, match="reaches one address from several indices"):
        inc(repeated.partition(256), _ones())
    z = ts.zeros(1024, device=GPU).sync().partition(256)
    with pytest.raises(PartitionError, match="differs from the grid"):
        inc.launch(z, _ones(), grid=(4, 3))
    torch.cuda.synchronize()
    assert torch.count_nonzero(base) == 0


def test_threads_on_one_stream_and_one_graph_lose_no_update():
    t = ts.zeros(4096, device=GPU).sync()
    stream = ts.Stream(GPU)
    with ts.CudaGraph.scope(stream) as graph:
        graph.record(bump(ts.borrow_mut(t).partition(1024)))
    errors = []

    def work():
        try:
            for _ in range(20):
                ts.value(None).then(
                    lambda _: bump(ts.borrow_mut(t).partition(1024))).sync_on(stream)
                graph.launch(stream).sync()
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[0]
    assert np.array_equal(t.numpy(), np.full(4096, 8 * 20 * 2, np.float32))


def test_device_copies_check_both_tensors_and_stay_on_the_device():
    src = ts.arange(4096, device=GPU).sync()
    dst = ts.zeros(4096, device=GPU).sync()
    dst.copy_(src).sync()
    np.testing.assert_array_equal(dst.numpy(), np.arange(4096, dtype=np.float32))
    pending = bump(ts.borrow_mut(dst).partition(256))  # validated: dst is lent to it until it runs
    with pytest.raises(BorrowError):
        dst.copy_(src).sync()
    pending.sync()
    pending = bump(ts.borrow_mut(src).partition(256))  # a pending writer of the source
    with pytest.raises(BorrowError):
        dst.copy_(src).sync()
    del pending
    twin = ts.from_dlpack(src)  # one memory, overlapping ranges: copied through the host
    twin[1:].copy_(src[:-1]).sync()
    np.testing.assert_array_equal(src.numpy()[1:], np.arange(4095, dtype=np.float32))
    strided = ts.zeros(2048, device=GPU).sync()
    strided.copy_(src[::2]).sync()
    np.testing.assert_array_equal(strided.numpy(), src.numpy()[::2])


def test_device_copies_refuse_shared_moved_and_twin_borrowed_memory_and_keep_threads_apart():
    """copy_ on the device path, attacked as a program would: into a ``.shared()`` result,
    from a moved tensor, through a second DLPack import of memory a pending launch writes
    (either side of the copy), and two threads copying into halves of one tensor."""
    src = ts.arange(4096, device=GPU).sync()
    shared = ts.zeros(4096, device=GPU).shared().sync()
    with pytest.raises(BorrowError, match="shared"):
        shared.copy_(src).sync()
    moved = ts.zeros(4096, device=GPU).sync()
    moved.partition(256)
    with pytest.raises(MovedError):
        src.copy_(moved).sync()
    buffer = torch.zeros(4096, device=GPU)
    one, two = ts.from_dlpack(buffer), ts.from_dlpack(buffer)
    pending = bump(ts.borrow_mut(one).partition(256))
    with pytest.raises(BorrowError):
        two.copy_(src).sync()
    with pytest.raises(BorrowError):
        src.copy_(two).sync()
    pending.sync()
    dst = ts.zeros(4096, device=GPU).sync()

    def copy_half(i):
        for _ in range(20):
            dst[i * 2048:(i + 1) * 2048].copy_(src[i * 2048:(i + 1) * 2048]).sync()
    threads = [threading.Thread(target=copy_half, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(dst.numpy(), np.arange(4096, dtype=np.float32))
