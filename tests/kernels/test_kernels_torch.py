"""The library's torch surface (``kernels._torch.accepts_torch``) on torch's CPU build: torch
tensors in, torch tensors out, zero-copy both ways, outputs allocated by torch, ``out=`` written
in place, tilesafe tensors still giving a DeviceOp, and misuse refused with nothing written;
and ``Stream.mark`` / ``release_completed``, which end a marked launch's loans once it completed."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.kernels._outputs import Output
from tilesafe.kernels._torch import accepts_torch

torch = pytest.importorskip("torch")


@ts.kernel
def _scaled(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, -1)], s: float):  # noqa: F821
    z.store(tc.load_tile_like(x, z) * s)


@accepts_torch
def scaled(x, *, scale: float = 2.0, out=None):
    """A library-shaped function: ``x * scale`` by rows."""
    result = Output(out, x.shape, ts.float32, x.device, op="scaled")
    rows, n = x.shape
    tile = 1 << (n - 1).bit_length()
    return _scaled(result.partition((1, tile)), x, scale).then(lambda r: result.tensor(r.z))


def test_torch_in_torch_out_without_copies():
    x = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    y = scaled(x, scale=3.0)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (3, 5)
    assert torch.equal(y, x * 3)
    out = torch.full((3, 5), float("nan"))
    got = scaled(x, out=out)
    assert got is out and torch.equal(out, x * 2)


def test_tilesafe_tensors_still_give_a_device_op():
    x = ts.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).sync()
    op = scaled(x)
    assert isinstance(op, ts.DeviceOp)
    assert np.array_equal(op.sync().numpy(), np.arange(6).reshape(2, 3) * 2)
    out = ts.zeros((2, 3)).sync()
    assert scaled(x, out=out).sync() is out
    assert np.array_equal(out.numpy(), np.arange(6).reshape(2, 3) * 2)


def test_mixed_kinds_are_refused():
    x = torch.ones((2, 3))
    with pytest.raises(ts.ArgumentError, match="torch tensors and tilesafe tensors in one call"):
        scaled(x, out=ts.zeros((2, 3)).sync())


def test_a_bad_out_is_refused_with_nothing_written():
    x = torch.ones((2, 3))
    out = torch.full((2, 4), 7.0)
    with pytest.raises(ts.ArgumentError, match=r"out= has shape \(2, 4\)") as info:
        scaled(x, out=out)
    assert "test_kernels_torch.py" in str(info.value)
    assert torch.equal(out, torch.full((2, 4), 7.0))


def test_a_marked_launch_keeps_its_loans_until_released():
    """``mark`` hands the loans to an event; until ``release_completed`` runs, host access to
    the written memory is refused as for pending work."""
    stream = ts.Stream("cpu")
    x = ts.ones((2, 4)).sync()
    z = ts.zeros((2, 4)).sync()
    op = _scaled(ts.borrow_mut(z).partition((1, 4)), x, 5.0)
    op._enqueue(stream, None)
    stream.mark()
    assert not stream._pending
    stream.synchronize()  # does not end marked loans
    with pytest.raises(ts.BorrowError):
        z.numpy()
    stream.release_completed()
    assert np.array_equal(z.numpy(), np.full((2, 4), 5.0, np.float32))


def test_a_borrow_blocked_by_marked_work_says_how_to_wait_for_it():
    """Marked work cannot be driven from the host (it belongs to another library's stream): the
    error says to wait for that stream, not to ``.sync()`` a launch the caller never held."""
    stream = ts.Stream("cpu")
    z = ts.zeros((2, 4)).sync()
    _scaled(ts.borrow_mut(z).partition((1, 4)), ts.ones((2, 4)).sync(), 1.0)._enqueue(stream, None)
    stream.mark()
    with pytest.raises(ts.BorrowError, match="not completed") as info:
        z.numpy()
    assert "torch.cuda.synchronize()" in str(info.value)
    assert ".sync() or await" not in str(info.value)
    assert "test_kernels_torch.py" in str(info.value)
    stream.release_completed()
    z.numpy()


def test_completed_work_on_every_torch_stream_of_the_device_is_released(monkeypatch):
    """A call with torch tensors releases the completed marked work of every torch stream of
    its device, not only its own (two streams stand in for torch's default and side streams;
    ``tests/gpu/test_gpu_kernels_torch.py`` runs the real ones), and only of that device."""
    from tilesafe.kernels import _torch
    default, side, other = ts.Stream("cpu"), ts.Stream("cpu"), ts.Stream("cpu")
    monkeypatch.setattr(_torch, "_STREAMS", {(0, 1): default, (0, 2): side, (1, 3): other})
    written = []
    for stream in (default, other):
        z = ts.zeros((2, 4)).sync()
        _scaled(ts.borrow_mut(z).partition((1, 4)), ts.ones((2, 4)).sync(), 1.0)._enqueue(
            stream, None)
        stream.mark()
        written.append(z)
    with pytest.raises(ts.BorrowError):
        written[0].numpy()
    _torch._release_completed(0)  # (a call on the side stream of device 0)
    assert np.array_equal(written[0].numpy(), np.ones((2, 4), np.float32))
    with pytest.raises(ts.BorrowError):  # device 1's work is left to its own calls
        written[1].numpy()
    _torch.release_completed()
    written[1].numpy()


def test_release_recorded_ends_loans_and_keeps_selected_items():
    stream = ts.Stream("cpu")
    z = ts.zeros((2, 4)).sync()
    _scaled(ts.borrow_mut(z).partition((1, 4)), ts.ones((2, 4)).sync(), 1.0)._enqueue(stream, None)
    kept = stream._release_recorded(keep=lambda item: True)
    assert len(kept) == 1 and isinstance(kept[0], ts.Partition)  # the borrowed partition
    assert np.array_equal(z.numpy(), np.ones((2, 4), np.float32))  # its loan has ended
    _scaled(ts.borrow_mut(z).partition((1, 4)), ts.ones((2, 4)).sync(), 1.0)._enqueue(stream, None)
    assert stream._release_recorded() == []  # handed back: spent
    z.numpy()


def test_a_library_call_with_its_output_given_records_into_a_graph():
    x = ts.tensor(np.arange(8, dtype=np.float32).reshape(2, 4)).sync()
    out = ts.zeros((2, 4)).sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(scaled(x, scale=3.0, out=out))
    assert np.array_equal(out.numpy(), np.zeros((2, 4)))  # recorded, nothing ran
    graph.replay()
    assert np.array_equal(out.numpy(), 3 * np.arange(8).reshape(2, 4))


def test_marked_loans_cover_every_import_of_the_written_memory():
    """Two DLPack imports of one numpy buffer, and an overlapping slice: while a launch that
    writes through one is marked (not yet released), the others cannot read or lend the
    memory; after ``release_completed`` they can."""
    stream = ts.Stream("cpu")
    host = np.zeros((4, 8), np.float32)
    writer, twin, rows = ts.from_dlpack(host), ts.from_dlpack(host), ts.from_dlpack(host[1:3])
    x = ts.ones((4, 8)).sync()
    _scaled(ts.borrow_mut(writer).partition((1, 8)), x, 2.0)._enqueue(stream, None)
    stream.mark()
    for other in (twin, rows):
        with pytest.raises(ts.BorrowError):
            other.numpy()
        with pytest.raises(ts.BorrowError):
            ts.borrow_mut(other).partition((1, 8))
    stream.release_completed()
    assert np.array_equal(twin.numpy(), np.full((4, 8), 2.0, np.float32))
    assert np.array_equal(rows.numpy(), np.full((2, 8), 2.0, np.float32))


def test_threads_releasing_marks_hand_each_back_once():
    """Two threads ending the same marks: every loan ends and every borrowed partition is
    handed back exactly once (a second spend would raise)."""
    import threading
    stream = ts.Stream("cpu")
    x = ts.ones((2, 4)).sync()
    targets = [ts.zeros((2, 4)).sync() for _ in range(40)]
    for t in targets:
        _scaled(ts.borrow_mut(t).partition((1, 4)), x, 3.0)._enqueue(stream, None)
        stream.mark()
    errors = []

    def release():
        try:
            stream.release_completed()
        except Exception as err:  # noqa: BLE001 (collected for the assertion)
            errors.append(err)
    threads = [threading.Thread(target=release) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and not stream._marks
    for t in targets:
        assert np.array_equal(t.numpy(), np.full((2, 4), 3.0, np.float32))


def test_workspaces_for_torch_operands_are_torch_tensors_the_calls_take():
    import tilesafe.kernels as K
    x = torch.randn(1, 512, dtype=torch.bfloat16)
    w = torch.randn(40, 512, dtype=torch.bfloat16)
    work = K.matmul_workspace(x, w)
    assert isinstance(work, torch.Tensor) and work.dtype == torch.float32
    y = torch.full((1, 40), float("nan"), dtype=torch.bfloat16)
    assert K.matmul(x, w, out=y, workspace=work) is y
    want = x.double() @ w.double().t()
    assert float((y.double() - want).abs().max()) <= 2 ** -7 * float(want.abs().max())
    q = torch.randn(1, 4, 64, dtype=torch.bfloat16)
    k_cache = torch.randn(1, 2, 32, 64, dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    lens = torch.tensor([20], dtype=torch.int32)
    work = K.decode_attention_workspace(q, k_cache)
    assert isinstance(work, torch.Tensor) and work.dtype == torch.float32
    out = torch.full_like(q, float("nan"))
    assert K.decode_attention(q, k_cache, v_cache, lens, out=out, workspace=work) is out
    group = q.double().view(2, 2, 64)
    scores = torch.einsum("hgd,hnd->hgn", group, k_cache[0, :, :20].double()) / 8.0
    want = torch.einsum("hgn,hnd->hgd", scores.softmax(-1), v_cache[0, :, :20].double())
    assert float((out.double().view(2, 2, 64) - want).abs().max()) < 2e-2


def test_a_capture_is_asked_of_the_calls_own_device(monkeypatch):
    """torch capturing a graph on cuda:1 (the current device) does not make a call on cuda:0
    tensors count as recorded: that call's launches run eagerly on cuda:0's stream, and
    releasing their loans as if nothing ran would let the host touch memory the GPU still
    writes. The CUDA side is simulated (no GPU needed): one current device, capturing on
    device 1 only."""
    from tilesafe.kernels import _torch
    state = {"current": 1, "capturing": {0: False, 1: True}}

    class device:  # torch.cuda.device: the current device within the block
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.saved, state["current"] = state["current"], self.index

        def __exit__(self, *exc):
            state["current"] = self.saved

    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing",
                        lambda: state["capturing"][state["current"]])
    monkeypatch.setattr(torch.cuda, "device", device)
    assert _torch._capturing(torch.device("cuda", 1)) is True
    assert _torch._capturing(torch.device("cuda", 0)) is False
    assert state["current"] == 1  # (the current device is left as it was)
    state["current"] = 0
    assert _torch._capturing(torch.device("cuda", 1)) is True


def test_allocations_made_for_a_recorded_call_are_kept_and_imports_are_not():
    """What a call recorded into a torch graph keeps for good: each allocation of tilesafe's
    own memory made inside ``retaining_new_allocations`` (a value the launch reads on every
    replay), not the imports of foreign memory (torch keeps those, as it keeps any graph's
    tensors), and nothing made outside the block."""
    import numpy as np

    from tilesafe.driver.ledger import retaining_new_allocations
    outside = ts.tensor(np.arange(4, dtype=np.int64)).sync()
    with retaining_new_allocations() as kept:
        own = ts.tensor(np.array([7], np.int64)).sync()
        imported = ts.from_dlpack(torch.arange(3))
        with retaining_new_allocations() as inner:  # (a nested block keeps its own)
            nested = ts.zeros((2,)).sync()
    assert [a for a in kept] == [own._alloc] and inner == [nested._alloc]
    assert outside._alloc not in kept and imported._alloc not in kept
    after = ts.zeros((2,)).sync()
    assert after._alloc not in kept


def test_memory_a_call_makes_is_kept_for_a_capture_and_held_until_eager_work_completes(
        monkeypatch):
    """The two cuda branches of a call with torch tensors, run on a cpu stream standing in for
    torch's: recorded into a (simulated) torch capture, the device value ``sample`` makes of
    an int offset is kept for good; run eagerly, the stream holds it with the call's work and
    lets it go once that work is seen complete."""
    import gc
    import weakref

    from tilesafe import kernels as K
    from tilesafe.kernels import _torch
    stream = ts.Stream("cpu")
    state = {"capturing": True}
    monkeypatch.setattr(_torch, "_stream_of", lambda device: stream)
    monkeypatch.setattr(_torch, "_capturing", lambda device: state["capturing"])
    monkeypatch.setattr(_torch, "_release_completed", lambda index=None: None)
    monkeypatch.setattr(_torch, "reserve_fault_records", lambda count, device=None: None)
    monkeypatch.setattr(_torch, "_RECORDED_ALLOCATIONS", [])
    logits = torch.randn(2, 300, generator=torch.Generator().manual_seed(1))
    want = K.sample(logits, temperature=1.0, top_k=5, seed=9, offset=torch.tensor([7]))
    got = K.sample(logits, temperature=1.0, top_k=5, seed=9, offset=7)
    assert torch.equal(got, want)
    (kept,) = _torch._RECORDED_ALLOCATIONS  # the offset's device value, and only it
    kept_ref = weakref.ref(kept)
    del kept
    for offset in range(20):  # (new plans: the first call's plan is dropped)
        K.sample(logits, temperature=1.0, top_k=5, seed=9, offset=offset)
    gc.collect()
    assert kept_ref() is not None
    state["capturing"] = False
    monkeypatch.setattr(_torch, "_RECORDED_ALLOCATIONS", [])
    K.sample(logits, temperature=1.0, top_k=5, seed=9, offset=7)
    assert _torch._RECORDED_ALLOCATIONS == []
    from tilesafe.driver.stream import HeldUntilComplete
    holders = [item for _, _, spent in stream._marks for item, _ in spent
               if isinstance(item, HeldUntilComplete)]
    assert {type(held).__name__ for h in holders for held in h.held} == {"Allocation", "Tensor"}
    stream.release_completed()
    assert all(h.held is None for h in holders)


def test_a_pending_eager_call_keeps_its_imports_so_a_new_import_sees_its_loans(monkeypatch):
    """The imports of a call's torch tensors are held with its work: after many more calls of
    the same kernel (whose plan cache let the first call's imports go), a new import of an
    input still sees the pending call's loan, so a host write through it is refused until the
    work is seen complete. (A cpu stream stands in for torch's; its marked work counts as
    pending until ``release_completed``.)"""
    import gc

    from tilesafe import kernels as K
    from tilesafe.kernels import _torch
    stream = ts.Stream("cpu")
    monkeypatch.setattr(_torch, "_stream_of", lambda device: stream)
    monkeypatch.setattr(_torch, "_capturing", lambda device: False)
    monkeypatch.setattr(_torch, "_release_completed", lambda index=None: None)
    monkeypatch.setattr(_torch, "reserve_fault_records", lambda count, device=None: None)
    x, w = torch.randn(4, 64), torch.ones(64)
    K.rms_norm(x, w)
    for _ in range(12):  # (other inputs: the plan cache drops the first call's plans)
        K.rms_norm(torch.randn(4, 64), w)
    gc.collect()
    again = ts.from_dlpack(x)
    with pytest.raises(ts.BorrowError):
        again.copy_(ts.zeros((4, 64)).sync()).sync()
    stream.release_completed()
    again.copy_(ts.zeros((4, 64)).sync()).sync()
    assert bool((x == 0).all())


def test_memory_a_call_made_is_held_when_its_enqueue_fails_part_way(monkeypatch):
    """A call whose first launch is enqueued and whose next step then fails: what the call
    allocated for itself, and its imports, are handed to the stream with the enqueued work
    (which may still read them), not dropped with the error."""
    import numpy as np

    from tilesafe.driver.stream import HeldUntilComplete
    from tilesafe.kernels import _torch
    stream = ts.Stream("cpu")
    monkeypatch.setattr(_torch, "_stream_of", lambda device: stream)
    monkeypatch.setattr(_torch, "_capturing", lambda device: False)
    monkeypatch.setattr(_torch, "_release_completed", lambda index=None: None)
    monkeypatch.setattr(_torch, "reserve_fault_records", lambda count, device=None: None)
    made = []

    def failing_step(result):
        raise RuntimeError("the second step failed")

    @accepts_torch
    def scaled_then_fail(x, *, out=None):
        scratch = ts.tensor(np.full((1, 1), 3.0, np.float32)).sync()  # (the call's own memory)
        made.append(scratch._alloc)
        result = Output(out, x.shape, ts.float32, x.device, op="scaled_then_fail")
        return _scaled(result.partition((1, 128)), x, 2.0).then(failing_step)
    x = torch.ones(2, 100)
    with pytest.raises(RuntimeError, match="the second step failed"):
        scaled_then_fail(x)
    holders = [item for item, _ in stream._spent if isinstance(item, HeldUntilComplete)]
    assert len(holders) == 1 and made[0] in holders[0].held
    stream.synchronize()
    assert holders[0].held is None
