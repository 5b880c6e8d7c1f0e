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


def test_positions_facts_are_refused_on_a_parameter_that_is_not_an_indexed_partition():
    with pytest.raises(CompileError, match="fact 'validated_first' applies only to an indexed "
                       "partition.*'rows' is not one"):
        lower_kernel(_ir(), debug=False, facts={"rows": {"validated_first": True}})
    with pytest.raises(CompileError, match="fact 'positions_of' applies only"):
        lower_kernel(_ir(), debug=False, facts={"rows": {"positions_of": 0}})


def test_twin_partitions_count_their_shared_positions_once():
    """Two partitions over the very same positions are validated once, so the threshold
    counts those positions once; over distinct positions, both count."""
    above = launch_facts_module.VALIDATE_FIRST_ABOVE
    n = above // 2 + 1
    twins = _args(n, n)
    twins[1] = _partition("b", _positions(n), 1 << 22)  # (a's positions: the same address)
    facts = dict(launch_facts(_ir(), twins))
    assert dict(facts["b"]).get("positions_of") == 0 and not validates_first(tuple(facts.items()))
    assert validates_first(launch_facts(_ir(), _args(n, n)))


class _Handle:
    def __init__(self, cubin):
        self.handle = {b"main": 0x1000, b"check": 0x2000}[cubin]


class _Records:
    """Fault records of fake memory: a record's address and its verdict word's."""

    def new(self):
        from tilesafe.backends.tileir.faults import FaultRecord

        class Memory:
            address, verdict, words = 0xA000, 0xB000, np.zeros(8, np.int64)
        return FaultRecord(_ir(), Memory())


def test_a_validated_launch_enqueues_the_validation_then_the_kernel_as_ordinary_launches(
        monkeypatch):
    """Bound on a device that allows programmatic launches, a kernel validated first still
    binds two ordinary launches: the validation as one program, then the kernel over its grid,
    with the same arguments ending in the fault record and the verdict word, enqueued in that
    order on the one stream the launch is given."""
    from tilesafe.backends.tileir import executable
    from tilesafe.driver import cuda
    monkeypatch.setattr(cuda, "load_kernel", lambda cubin, name, index: _Handle(cubin))
    enqueued = []
    monkeypatch.setattr(cuda, "launch_packed",
                        lambda stream, packed: enqueued.append((stream, packed)))
    exe = executable.TileIRExecutable("write_pair", b"main", 0, programmatic=True,
                                      fault_records=_Records(), validating_cubin=b"check")
    bound = exe.bind(_args(300, 300), (300, 1, 1))
    assert isinstance(bound, executable.ValidatedLaunch) and bound.driver_launch is None
    check, kernel = bound.validation, bound.kernel
    assert (check.function, check.grid, check.programmatic) == (0x2000, (1, 1, 1), False)
    assert (kernel.function, kernel.grid, kernel.programmatic) == (0x1000, (300, 1, 1), False)
    assert [int(v) for v in kernel.values[-2:]] == [0xA000, 0xB000]
    assert [v.tobytes() for v in check.values] == [v.tobytes() for v in kernel.values]
    assert bound.fault_record is kernel.fault_record and kernel.fault_record is not None

    class Stream:
        native_address = 77
    bound.launch(Stream())
    assert [(s, p.function) for s, p in enqueued] == [(77, 0x2000), (77, 0x1000)]
    plain = executable.TileIRExecutable("write_pair", b"main", 0, programmatic=True,
                                        fault_records=_Records())
    alone = plain.bind(_args(3, 3), (3, 1, 1))
    assert alone.programmatic and [int(v) for v in alone.values[-1:]] == [0xA000]


def test_the_validating_launch_drops_the_kernels_cluster_and_occupancy_hints():
    """The validating launch is one program: the kernel's cluster hint (a cluster of two
    cannot launch as a grid of one) and occupancy hint are not written into it."""
    ir = _ir()
    facts = {"a": {"validated_first": True}, "b": {"validated_first": True}}
    hints = {"sm_90": {"num_cta_in_cga": 2, "occupancy": 2}}
    plain = lower_kernel(ir, debug=False, facts=facts, positions_only=True)
    assert lower_kernel(ir, debug=False, facts=facts, positions_only=True, hints=hints) == plain
    assert lower_kernel(ir, debug=False, facts=facts, hints=hints) != lower_kernel(
        ir, debug=False, facts=facts)
