"""Rule 11's "nothing written" on the GPU covers a launch's other outputs: in a kernel with an
indexed partition, an ordinary partition's store moves off its grid when the positions failed
(the bounds-checked view masks it), and a kernel that also writes through an atomic tensor
runs its body only where the positions passed. Checked on the lowered bytecode and by
assembling for sm_90 (no GPU needed); the GPU run is ``tests/gpu/test_gpu_indexed_partitions``."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.backends.tileir import tileiras as driver
from tilesafe.backends.tileir.lower import lower_kernel


@ts.kernel
def indexed_and_plain(cache: tc.MutTensor[tc.f32, (4,)], copy: tc.MutTensor[tc.f32, (4,)],
                      rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    row = rows.partition((4,)).load(i)
    cache.store(row)
    copy.store(row * 2.0)


@ts.kernel
def indexed_and_atomic(cache: tc.MutTensor[tc.f32, (4,)], total: tc.AtomicTensor[tc.f32, (-1,)],
                       rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    row = rows.partition((4,)).load(i)
    cache.store(row)
    total.atomic_add(row, tc.zeros((4,), tc.i32))


@ts.kernel
def indexed_and_cas(cache: tc.MutTensor[tc.f32, (4,)], flags: tc.Ptr[tc.i32],
                    rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((4,)).load(i))
    tc.atomic_cas_ptr(flags, i, 0, 1)


def _ir(kern, indexed, second):
    cache = ts.zeros((32,), ts.float32, device="cpu").sync()
    rows = ts.tensor(np.arange(12, dtype=np.float32), device="cpu").sync()
    at = ts.tensor(np.array([5, 1, 2], np.int32), device="cpu").sync()
    first = ts.borrow_mut(cache).partition(4, at=at) if indexed else \
        ts.borrow_mut(cache[:12]).partition(4)
    with ts.unsafe():  # (the pointer kernel; the safe ones need no permission)
        kern(first, second(), rows).sync()
    return list(kern._ir_cache.values())[-1]


def _flags():
    return ts.zeros((4,), ts.int32, device="cpu").sync()


def _copy():
    return ts.borrow_mut(ts.zeros((12,), ts.float32, device="cpu").sync()).partition(4)


@ts.kernel
def indexed_only(cache: tc.MutTensor[tc.f32, (4,)], copy: tc.Tensor[tc.f32, (-1,)],
                 rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((4,)).load(i))


def _selects(monkeypatch, ir) -> tuple[int, int]:
    """(select ops, if ops) the lowering of ``ir`` emits."""
    from tilesafe.backends.tileir.bytecode import ops_arith, ops_control
    counts = {"select": 0, "if_": 0}
    for module, name in ((ops_arith.ArithmeticOps, "select"), (ops_control.ControlFlowOps, "if_")):
        original = getattr(module, name)

        def counted(self, *a, original=original, name=name, **k):
            counts[name] += 1
            return original(self, *a, **k)
        monkeypatch.setattr(module, name, counted)
    lower_kernel(ir, debug=False)
    monkeypatch.undo()
    return counts["select"], counts["if_"]


def test_the_ordinary_store_of_an_indexed_kernel_takes_the_verdict(monkeypatch):
    """One select per axis of the ordinary partition's store more than the indexed store
    alone, and no whole-body branch; an atomic write beside the indexed one takes the branch."""
    alone = _selects(monkeypatch, _ir(indexed_only, True,
                                      lambda: ts.zeros((12,), ts.float32, device="cpu").sync()))
    both = _selects(monkeypatch, _ir(indexed_and_plain, True, _copy))
    assert both == (alone[0] + 1, alone[1])
    atomic = _selects(monkeypatch, _ir(indexed_and_atomic, True, lambda: ts.atomic(
        ts.zeros((4,), ts.float32, device="cpu").sync())))
    assert atomic[1] == alone[1] + 1
    # a raw-pointer compare-and-swap writes outside the partitions too: the same branch
    assert _selects(monkeypatch, _ir(indexed_and_cas, True, _flags))[1] == alone[1] + 1


@pytest.mark.parametrize("kern, second", [
    (indexed_and_plain, _copy),
    (indexed_and_atomic, lambda: ts.atomic(ts.zeros((4,), ts.float32, device="cpu").sync())),
    (indexed_and_cas, _flags),
])
def test_indexed_kernels_with_other_outputs_assemble_for_sm_90(kern, second):
    try:
        tool = driver.find_tileiras()
    except driver.TileirasNotFound:
        pytest.skip("tileiras is not installed")
    ir = _ir(kern, True, second)
    cubin = driver.assemble(lower_kernel(ir), "sm_90", kernel=ir, tool=tool)
    assert cubin[:4] == b"\x7fELF"
