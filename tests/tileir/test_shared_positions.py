"""Two indexed partitions at the very same positions (a KV-cache update's key and value caches
at one tensor of slots) over tile grids of the same extents are validated once per program:
the launch facts name the earlier partition (``positions_of``), and the lowering gives the
second partition the first one's validated coordinates instead of a second validation. Other
positions (another tensor, another view of it, another grid) keep their own validation. No
GPU is needed: the facts are computed from the launch's arguments and the bytecode compared."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.backends.base import KernelArg
from tilesafe.backends.tileir import tileiras as driver
from tilesafe.backends.tileir.facts import launch_facts
from tilesafe.backends.tileir.lower import lower_kernel


@ts.kernel
def write_both(a: tc.MutTensor[tc.f32, (4,)], b: tc.MutTensor[tc.f32, (4,)],
               rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    a.store(rows.partition((4,)).load(i))
    b.store(rows.partition((4,)).load(i) * 2.0)


class _Memory:
    """A platform whose addresses are the data's numbers (what facts compare)."""

    def address(self, data, byte_offset):
        return data + byte_offset


def _positions(address, n=3, strides=(1, 1)):
    return KernelArg("positions", "tensor", ts.int32, data=address, platform=_Memory(),
                     shape=(n, 1), strides=strides)


def _partition(name, positions, extent=32, address=1 << 20):
    return KernelArg(name, "partition", ts.float32, data=address, platform=_Memory(),
                     shape=(extent,), strides=(1,), tile_shape=(4,), positions=positions)


def _rows():
    return KernelArg("rows", "tensor", ts.float32, data=1 << 22, platform=_Memory(),
                     shape=(12,), strides=(1,))


def _ir():
    cache = ts.zeros((32,), ts.float32, device="cpu").sync()
    other = ts.zeros((32,), ts.float32, device="cpu").sync()
    at = ts.tensor(np.array([5, 1, 2], np.int32), device="cpu").sync()
    rows = ts.tensor(np.arange(12, dtype=np.float32), device="cpu").sync()
    write_both(ts.borrow_mut(cache).partition(4, at=at), ts.borrow_mut(other).partition(4, at=at),
               rows).sync()
    assert np.array_equal(other.numpy()[20:24], 2 * np.arange(4))  # (program 0, slot 5)
    return list(write_both._ir_cache.values())[-1]


def _twin(facts):
    return dict(dict(facts).get("b", ())).get("positions_of")


def test_the_same_positions_over_the_same_grid_are_named_in_the_facts():
    shared = _positions(4096)
    args = [_partition("a", shared), _partition("b", shared, address=1 << 21), _rows()]
    assert _twin(launch_facts(_ir(), args)) == 0  # parameter 0, 'a'
    same_memory = _positions(4096)  # another argument object, the same memory
    args[1] = _partition("b", same_memory, address=1 << 21)
    assert _twin(launch_facts(_ir(), args)) == 0


@pytest.mark.parametrize("change", ["address", "count", "strides", "grid"])
def test_other_positions_or_another_grid_keep_their_own_validation(change):
    shared = _positions(4096)
    theirs = {"address": _positions(8192), "count": _positions(4096, n=2),
              "strides": _positions(4096, strides=(2, 1))}.get(change, shared)
    b = _partition("b", theirs, extent=64 if change == "grid" else 32, address=1 << 21)
    assert _twin(launch_facts(_ir(), [_partition("a", shared), b, _rows()])) is None


def test_one_validation_is_lowered_for_the_twin():
    ir = _ir()
    alone = lower_kernel(ir, debug=False)
    shared = lower_kernel(ir, debug=False, facts={"b": {"positions_of": 0}})
    assert len(shared) < len(alone)
    # a fact naming no validated partition (here 'rows', a plain input) changes nothing
    assert lower_kernel(ir, debug=False, facts={"b": {"positions_of": 2}}) == alone


def test_the_twin_kernel_assembles_for_sm_90():
    try:
        tool = driver.find_tileiras()
    except driver.TileirasNotFound:
        pytest.skip("tileiras is not installed")
    ir = _ir()
    cubin = driver.assemble(lower_kernel(ir, facts={"b": {"positions_of": 0}}), "sm_90",
                            kernel=ir, tool=tool)
    assert cubin[:4] == b"\x7fELF"


def test_facts_of_real_arguments_follow_the_memory_not_the_tensor_objects():
    """Through the launch's own description of its arguments: two DLPack imports of one
    buffer are the same positions; imports of one buffer at other offsets are not."""
    from tilesafe.launch.checks import kernel_args
    ir = _ir()
    rows = ts.tensor(np.arange(12, dtype=np.float32), device="cpu").sync()

    def twin(first, second):
        args = [ts.borrow_mut(ts.zeros((32,), device="cpu").sync()).partition(4, at=first),
                ts.borrow_mut(ts.zeros((32,), device="cpu").sync()).partition(4, at=second),
                rows]
        return _twin(launch_facts(ir, kernel_args(write_both.rules.params, args)))
    buffer = np.array([0, 5, 1, 2, 0], np.int32)
    assert twin(ts.from_dlpack(buffer[1:4]), ts.from_dlpack(buffer[1:4])) == 0
    assert twin(ts.from_dlpack(buffer[1:4]), ts.from_dlpack(buffer[0:3])) is None  # overlapping
    assert twin(ts.from_dlpack(buffer[1:4]), ts.from_dlpack(buffer[1:4].copy())) is None
