"""Many positions are validated by a launch before the kernel (safety rule 11 at scale): above
``facts.VALIDATE_FIRST_ABOVE`` positions the launch facts mark every indexed partition
``validated_first``; the kernel then reads the verdict word its validating launch wrote (one
more entry parameter, after the fault record) instead of reading every position in every
program, and the validating launch is the same kernel lowered ``positions_only``: the same
parameters, the validation and the verdict, none of the body. No GPU is needed: the facts
come from the launch's arguments, the bytecode is compared, and tileiras (where installed)
assembles both for sm_90. ``tests/gpu/test_gpu_indexed_partitions.py`` runs both paths."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.backends.base import KernelArg
from tilesafe.backends.tileir import facts as launch_facts_module
from tilesafe.backends.tileir import tileiras as driver
from tilesafe.backends.tileir.facts import launch_facts
from tilesafe.backends.tileir.lower import abi_signature, lower_kernel, validates_first
from tilesafe.backends.tileir.lower.kernel import FAULT_RECORD, POSITIONS_VERDICT
from tilesafe.errors import CompileError


@ts.kernel
def write_pair(a: tc.MutTensor[tc.f32, (4,)], b: tc.MutTensor[tc.f32, (4,)],
               rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    a.store(rows.partition((4,)).load(i))
    b.store(rows.partition((4,)).load(i) * 2.0)


class _Memory:
    def address(self, data, byte_offset):
        return data + byte_offset


def _positions(n, address=4096):
    return KernelArg("positions", "tensor", ts.int32, data=address, platform=_Memory(),
                     shape=(n, 1), strides=(1, 1))


def _partition(name, positions, address):
    return KernelArg(name, "partition", ts.float32, data=address, platform=_Memory(),
                     shape=(1 << 16,), strides=(1,), tile_shape=(4,), positions=positions)


def _args(n_a, n_b):
    rows = KernelArg("rows", "tensor", ts.float32, data=1 << 24, platform=_Memory(),
                     shape=(4 * max(n_a, n_b),), strides=(1,))
    return [_partition("a", _positions(n_a), 1 << 20),
            _partition("b", _positions(n_b, address=8192), 1 << 22), rows]


def _ir():
    cache, other = (ts.zeros((32,), ts.float32, device="cpu").sync() for _ in range(2))
    at = ts.tensor(np.array([5, 1, 2], np.int32), device="cpu").sync()
    at2 = ts.tensor(np.array([0, 3, 4], np.int32), device="cpu").sync()
    rows = ts.tensor(np.arange(12, dtype=np.float32), device="cpu").sync()
    write_pair(ts.borrow_mut(cache).partition(4, at=at), ts.borrow_mut(other).partition(4, at=at2),
               rows).sync()
    assert np.array_equal(cache.numpy()[20:24], np.arange(4))  # (program 0, slot 5)
    return list(write_pair._ir_cache.values())[-1]


def _marked(facts):
    return {name for name, entries in facts if dict(entries).get("validated_first")}


def test_many_positions_mark_every_indexed_partition_validated_first():
    above = launch_facts_module.VALIDATE_FIRST_ABOVE
    assert _marked(launch_facts(_ir(), _args(above // 2, above // 2))) == set()
    facts = launch_facts(_ir(), _args(above // 2, above // 2 + 1))  # (counted over both)
    assert _marked(facts) == {"a", "b"} and validates_first(facts)
    assert not validates_first(launch_facts(_ir(), _args(3, 3)))


def test_the_kernel_validated_first_takes_the_verdict_and_reads_no_positions_chunks():
    ir = _ir()
    facts = {"a": {"validated_first": True}, "b": {"validated_first": True}}
    inline = lower_kernel(ir, debug=False)
    checked = lower_kernel(ir, debug=False, facts=facts)
    validating = lower_kernel(ir, debug=False, facts=facts, positions_only=True)
    assert len(checked) < len(inline) // 2  # no validation loops: one word read
    assert len(validating) < len(inline)  # the validation without the body
    assert len({inline, checked, validating}) == 3
    assert [a.param for a in abi_signature(ir, True)[-2:]] == [FAULT_RECORD, POSITIONS_VERDICT]
    assert abi_signature(ir)[-1].param == FAULT_RECORD


def test_a_positions_only_lowering_needs_the_fact():
    with pytest.raises(CompileError, match="validated_first"):
        lower_kernel(_ir(), debug=False, positions_only=True)


def test_both_launches_assemble_for_sm_90():
    try:
        tool = driver.find_tileiras()
    except driver.TileirasNotFound:
        pytest.skip("tileiras is not installed")
    ir = _ir()
    facts = {"a": {"validated_first": True}, "b": {"validated_first": True}}
    for positions_only in (False, True):
        cubin = driver.assemble(lower_kernel(ir, facts=facts, positions_only=positions_only),
                                "sm_90", kernel=ir, tool=tool)
        assert cubin[:4] == b"\x7fELF"
