"""A kernel known to hang on the GPU is refused before it is compiled: one that writes an
indexed partition and has an occupancy hint (such kernels never finished on the H100; the same
kernels without the hint did). The refusal is the Tile IR backend's first stage, so no GPU and
no tileiras are needed to check it."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.backends.tileir.backend import refuse_hanging_kernel
from tilesafe.errors import PartitionError


@ts.kernel(hints={"default": {"occupancy": 4}})
def rows_with_occupancy(cache: tc.MutTensor[tc.f32, (4,)], rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((4,)).load(i))


@ts.kernel
def rows_without_hints(cache: tc.MutTensor[tc.f32, (4,)], rows: tc.Tensor[tc.f32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((4,)).load(i))


def _ir(kernel, indexed=True):
    """The kernel's IR as a launch on the interpreter specialized it."""
    cache = ts.zeros((32,), ts.float32, device="cpu").sync()
    rows = ts.tensor(np.arange(8, dtype=np.float32), device="cpu").sync()
    at = ts.tensor(np.array([5, 1], np.int32), device="cpu").sync() if indexed else None
    target = (ts.borrow_mut(cache).partition(4, at=at) if indexed
              else ts.borrow_mut(cache[:8]).partition(4))
    kernel(target, rows).sync()
    return list(kernel._ir_cache.values())[-1]


def test_an_indexed_partition_with_an_occupancy_hint_is_refused_with_the_fix():
    from tilesafe import backends, pipeline
    ir = _ir(rows_with_occupancy)
    target = backends.by_name("tileir").ahead_of_time("sm_90")
    with pytest.raises(PartitionError, match=r"kernel 'rows_with_occupancy' writes the indexed "
                       r"partition 'cache' and has an occupancy hint \(under 'default'\).*never "
                       r"finished on the GPU.*\n  fix: drop the occupancy hint"):
        pipeline.compile(ir, target, hints=rows_with_occupancy.hints)


def test_without_the_hint_or_without_positions_the_kernel_passes():
    refuse_hanging_kernel(_ir(rows_without_hints), rows_without_hints.hints)
    refuse_hanging_kernel(_ir(rows_with_occupancy, indexed=False), rows_with_occupancy.hints)
