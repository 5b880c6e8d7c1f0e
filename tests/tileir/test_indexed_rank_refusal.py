"""A launch known to hang on the GPU is refused before it is enqueued: a rank-3 indexed
partition of a tensor whose first extent is above 1 (one such kernel spun forever on the
H100). Rank 1 and 2, and rank 3 with a first extent of 1, pass. Checked on the launch's
arguments as the GPU backend sees them, so no GPU is needed."""

from __future__ import annotations

import pytest

import tilesafe as ts
from tilesafe.backends.base import KernelArg
from tilesafe.backends.tileir.backend import refuse_hanging_launch
from tilesafe.errors import PartitionRankError


class _Kernel:
    name = "kv_write_heads"


def _indexed(shape, tile):
    positions = KernelArg("positions", "tensor", ts.int32, shape=(4, len(shape)),
                          strides=(len(shape), 1))
    return KernelArg("cache_k", "partition", ts.bfloat16, shape=shape, tile_shape=tile,
                     positions=positions)


def test_a_rank_3_indexed_partition_of_a_batch_is_refused_with_the_fix():
    args = [_indexed((3, 2, 8192), (1, 2, 128)), KernelArg("n", "scalar", ts.int32, value=3)]
    with pytest.raises(PartitionRankError, match=r"test_indexed_rank_refusal.py:\d+: kernel "
                       r"'kv_write_heads': its indexed partition 'cache_k' is a rank-3 tensor "
                       r"of shape \(3, 2, 8192\).*can hang on the GPU.*\n  fix: view the "
                       r"output with fewer axes"):
        refuse_hanging_launch(_Kernel(), args)


@pytest.mark.parametrize("shape, tile", [((1, 2, 8192), (1, 2, 128)), ((6, 8192), (2, 128)),
                                         ((8192,), (128,))])
def test_lower_ranks_and_a_single_leading_row_pass(shape, tile):
    refuse_hanging_launch(_Kernel(), [_indexed(shape, tile)])


def test_plain_partitions_of_any_rank_pass():
    plain = KernelArg("out", "partition", ts.float32, shape=(3, 2, 8192), tile_shape=(1, 2, 128))
    refuse_hanging_launch(_Kernel(), [plain])
