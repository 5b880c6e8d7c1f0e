"""Safety rule 10 on cuda:0: data-dependent indices are checked on the GPU as on the
interpreter. A gather or partition load outside its tensor reads padding on the device (no
memory outside the tensor is touched: the output's other rows stay exact) and raises
IndexOutOfRangeError when the launch's stream is synchronized, naming the kernel, the line and
the index as the interpreter does; inside a CUDA graph too, where the indices change between
replays through device memory; and the error is reported once. ``padding=`` and
``unchecked_accesses`` read padding without a word; a checked launch's results are otherwise
bit-identical to the interpreter's."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line
from tilesafe.errors import IndexOutOfRangeError

GPU = "cuda:0"
FILE = os.path.abspath(__file__)


def here(tag: str) -> int:
    return marker_line(__file__, tag)


@ts.kernel
def embed(z: tc.MutTensor[tc.f32, (4, 64)], table: tc.Tensor[tc.f32, (-1, 64)],
          ids: tc.Tensor[tc.i32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    rows = ids.partition((4,)).load(i)
    z.store(tc.gather(table, rows.reshape((4, 1)), tc.arange(64).reshape((1, 64))))  # <- gather


@ts.kernel
def pick(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)], at: int):
    z.store(x.partition((8,)).load(at))  # <- pick


@ts.kernel
def pick_or_pad(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)], at: int):
    z.store(x.partition((8,)).load(at, padding=-2.0))


def _table(device, rows=100):
    data = np.random.default_rng(3).standard_normal((rows, 64)).astype(np.float32)
    return data, ts.tensor(data, device=device).sync()


def _poisoned(shape, device):
    return ts.full(shape, float("nan"), ts.float32, device=device).sync()


def test_a_gather_on_the_gpu_equals_the_interpreter_bit_for_bit():
    data, table = _table(GPU)
    ids = np.random.default_rng(4).integers(0, 100, 64).astype(np.int32)
    z = _poisoned((64, 64), GPU).partition((4, 64))
    out = embed(z, table, ts.tensor(ids, device=GPU).sync()).sync().z.unpartition().numpy()
    cpu = embed(_poisoned((64, 64), "cpu").partition((4, 64)),
                ts.tensor(data, device="cpu").sync(),
                ts.tensor(ids, device="cpu").sync()).sync().z.unpartition().numpy()
    assert np.array_equal(out, data[ids]) and np.array_equal(out, cpu)


def test_a_gather_outside_the_table_raises_at_the_sync_and_touches_nothing_else():
    data, table = _table(GPU)
    ids = np.arange(64, dtype=np.int32)
    ids[21] = 100  # program 5
    out_t = _poisoned((64, 64), GPU)
    with pytest.raises(IndexOutOfRangeError) as info:
        embed(ts.borrow_mut(out_t).partition((4, 64)), table,
              ts.tensor(ids, device=GPU).sync()).sync()
    message = str(info.value)
    assert f"{FILE}:{here('gather')}: in kernel 'embed', tile program (5, 0, 0): gather index " \
           "100 along axis 0 is outside [0, 100)" in message
    out = out_t.numpy()  # the borrow ended with the launch: readable
    good = np.arange(64) != 21
    assert np.array_equal(out[good], data[ids[good]])
    assert np.all(out[21] == 0.0)  # the masked row read padding
    # reported once: the next launch of the kernel is clean
    z = _poisoned((64, 64), GPU).partition((4, 64))
    ok = embed(z, table, ts.tensor(np.arange(64, dtype=np.int32), device=GPU).sync()).sync()
    assert np.array_equal(ok.z.unpartition().numpy(), data[:64])


def test_a_partition_index_outside_the_grid_raises_on_the_gpu_as_on_the_interpreter():
    x = np.arange(20, dtype=np.float32)
    messages = []
    for device in ("cpu", GPU):
        xt = ts.tensor(x, device=device).sync()
        with pytest.raises(IndexOutOfRangeError) as info:
            pick(_poisoned((8,), device).partition((8,)), xt, 3).sync()
        messages.append(str(info.value))
    want = (f"{FILE}:{here('pick')}: in kernel 'pick', tile program (0, 0, 0): partition index "
            "(3,) is outside the tile grid (3,)")
    assert all(m.startswith(want) for m in messages), messages
    xt = ts.tensor(x, device=GPU).sync()
    for at, want_values in [(2, [16, 17, 18, 19, 0, 0, 0, 0]), (3, [-2.0] * 8), (-1, [-2.0] * 8)]:
        z = pick_or_pad(_poisoned((8,), GPU).partition((8,)), xt, at).sync().z
        assert z.unpartition().numpy().tolist() == want_values


@ts.kernel
def pick_block(z: tc.MutTensor[tc.f32, (2, 4)], x: tc.Tensor[tc.f32, (-1, -1, -1, -1)],
               b: int):
    z.store(x.partition((1, 2, 1, 4)).load((b, 0, 0, 0)).reshape((2, 4)))  # <- block


def test_a_4d_partition_index_outside_the_grid_names_the_whole_grid_on_the_gpu():
    """A 4-D tile grid (a paged cache's blocks): the record names every axis's index and bound
    (its fourth index used to overwrite the first bound)."""
    x = np.zeros((37, 2, 8, 4), np.float32)
    messages = []
    for device in ("cpu", GPU):
        xt = ts.tensor(x, device=device).sync()
        with pytest.raises(IndexOutOfRangeError) as info:
            pick_block(_poisoned((2, 4), device).partition((2, 4)), xt, 40).sync()
        messages.append(str(info.value))
    want = (f"{FILE}:{here('block')}: in kernel 'pick_block', tile program (0, 0, 0): "
            "partition index (40, 0, 0, 0) is outside the tile grid (37, 1, 8, 1)")
    assert all(m.startswith(want) for m in messages), messages


def test_an_unchecked_kernel_reads_padding_without_a_word():
    @ts.kernel(unchecked_accesses=True)
    def pick_unchecked(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)], at: int):
        z.store(x.partition((8,)).load(at))
    xt = ts.tensor(np.arange(20, dtype=np.float32), device=GPU).sync()
    with ts.unsafe():
        z = pick_unchecked(_poisoned((8,), GPU).partition((8,)), xt, 5).sync().z
    assert np.all(z.unpartition().numpy() == 0.0)


def test_a_graph_replay_reports_an_index_the_device_changed_between_replays():
    data, table = _table(GPU)
    ids = ts.tensor(np.arange(16, dtype=np.int32), device=GPU).sync()
    out = ts.zeros((16, 64), ts.float32, device=GPU).sync()
    graph = ts.CudaGraph.capture(embed(ts.borrow_mut(out).partition((4, 64)), table, ids))
    graph.replay()
    assert np.array_equal(out.numpy(), data[:16])
    bad = np.arange(16, dtype=np.int32)
    bad[9] = -5
    ids.copy_(ts.tensor(bad, device=GPU).sync()).sync()
    with pytest.raises(IndexOutOfRangeError, match=r"tile program \(2, 0, 0\): gather index -5 "
                       r"along axis 0 is outside \[0, 100\)"):
        graph.replay()
    good = np.arange(16) != 9
    assert np.array_equal(out.numpy()[good], data[:16][good])
    ids.copy_(ts.tensor(np.arange(16, dtype=np.int32), device=GPU).sync()).sync()
    graph.replay()  # reported once; the graph replays cleanly again
    assert np.array_equal(out.numpy(), data[:16])


def test_an_awaited_launch_raises_the_report_in_the_coroutine():
    import asyncio
    data, table = _table(GPU)
    ids = np.arange(8, dtype=np.int32)
    ids[6] = 1000

    async def main():
        out = _poisoned((8, 64), GPU)
        op = embed(ts.borrow_mut(out).partition((4, 64)), table,
                   ts.tensor(ids, device=GPU).sync())
        with pytest.raises(IndexOutOfRangeError, match=r"tile program \(1, 0, 0\): gather "
                           r"index 1000 along axis 0"):
            await op
        return out.numpy()  # usable again: the loans ended with the launch

    out = asyncio.run(main())
    good = np.arange(8) != 6
    assert np.array_equal(out[good], data[ids[good]])
