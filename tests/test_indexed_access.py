"""Data-dependent indices are checked on every device (safety rule 10): ``tc.gather`` with
numpy's advanced-indexing semantics, ``padding=`` on gathers and partition loads, the errors an
index outside its tensor raises (naming the kernel, the line and the index), which accesses the
GPU must check at run time (``compiler.bounds``: what the compiler proves in range is not
checked), the fault record a GPU kernel reports to (decoded on the CPU here, from a record as
the kernel writes it), and a stream handing back everything its work borrowed even when one of
them raises.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line
from tilesafe.backends.tileir.faults import FaultRecord
from tilesafe.backends.tileir.lower import abi_signature
from tilesafe.backends.tileir.lower.checks import (FAULT_WORDS, REPORTED_AXES, WORD_AXES,
                                                   WORD_BOUND,
                                                   WORD_INDEX, WORD_PROGRAM, WORD_SITE)
from tilesafe.compiler.bounds import checked_accesses
from tilesafe.errors import DTypeError, IndexOutOfRangeError, SafetyError, ShapeError

pytestmark = pytest.mark.interpreter_only("interpreter diagnostics and the compiler's proofs")
FILE = os.path.abspath(__file__)


def here(tag: str) -> int:
    return marker_line(__file__, tag)


def on(array) -> ts.Tensor:
    return ts.tensor(np.asarray(array)).sync()


# =============================================================================================
# gather: numpy's advanced indexing


@ts.kernel
def embed(z: tc.MutTensor[tc.f32, (4, 16)], table: tc.Tensor[tc.f32, (-1, 16)],
          ids: tc.Tensor[tc.i32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    rows = ids.partition((4,)).load(i)
    z.store(tc.gather(table, rows.reshape((4, 1)), tc.arange(16).reshape((1, 16))))  # <- embed


def test_embedding_lookup_reads_the_rows_numpy_reads(rng):
    table = rng.standard_normal((50, 16)).astype(np.float32)
    ids = rng.integers(0, 50, 12).astype(np.int32)
    z = ts.zeros((12, 16), ts.float32).partition((4, 16))
    out = embed(z, on(table), on(ids)).sync().z.unpartition().numpy()
    assert np.array_equal(out, table[ids])


@ts.kernel
def gather2d(z: tc.MutTensor["T", (8, 8)], x: tc.Tensor["T", (-1, -1)],
             rows: tc.Tensor["I", (-1,)], cols: tc.Tensor["I", (-1,)]):
    r = rows.partition((8,)).load(0)
    c = cols.partition((8,)).load(0)
    z.store(tc.gather(x, r.reshape((8, 1)), c.reshape((1, 8))))


@pytest.mark.parametrize("dtype, idx", [(np.float32, np.int32), (np.float16, np.int64),
                                        (np.int32, np.uint8), (np.bool_, np.int16)])
def test_gather_broadcasts_its_index_tiles_like_numpy(rng, dtype, idx):
    x = (rng.standard_normal((9, 13)) * 10).astype(dtype)
    rows = rng.integers(0, 9, 8).astype(idx)
    cols = rng.integers(0, 13, 8).astype(idx)
    z = ts.zeros((8, 8), ts.dtypes.from_numpy(np.dtype(dtype))).partition((8, 8))
    out = gather2d(z, on(x), on(rows), on(cols)).sync().z.unpartition().numpy()
    assert np.array_equal(out, x[rows[:, None], cols[None, :]])


@ts.kernel
def gather_scalar(z: tc.MutTensor[tc.f32, (1,)], x: tc.Tensor[tc.f32, (-1, -1)], i: int, j: int):
    z.store(tc.gather(x, i, j))


def test_a_gather_of_scalar_indices_is_one_element():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    z = ts.zeros((1,), ts.float32).partition((1,))
    assert gather_scalar(z, on(x), 3, 2).sync().z.unpartition().numpy()[0] == 17.0


@ts.kernel
def embed_or_pad(z: tc.MutTensor[tc.f32, (4, 16)], table: tc.Tensor[tc.f32, (-1, 16)],
                 ids: tc.Tensor[tc.i64, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    rows = ids.partition((4,)).load(i)
    z.store(tc.gather(table, rows.reshape((4, 1)), tc.arange(16).reshape((1, 16)),
                      padding=-1.0))


def test_a_gather_with_padding_reads_it_outside_the_tensor(rng):
    table = rng.standard_normal((10, 16)).astype(np.float32)
    ids = np.array([3, 10, -1, 1 << 40, 0, 9, -(1 << 40), 5], np.int64)
    z = ts.zeros((8, 16), ts.float32).partition((4, 16))
    out = embed_or_pad(z, on(table), on(ids)).sync().z.unpartition().numpy()
    inside = (ids >= 0) & (ids < 10)
    assert np.array_equal(out[inside], table[ids[inside]])
    assert np.all(out[~inside] == -1.0)


# =============================================================================================
# an index outside the tensor is an error, naming the kernel, the line and the index


def test_a_gather_outside_the_tensor_names_kernel_line_and_index(rng):
    table = rng.standard_normal((50, 16)).astype(np.float32)
    ids = np.array([1, 2, 3, 4, 5, 50, -7, 49], np.int32)
    z = ts.zeros((8, 16), ts.float32).partition((4, 16))
    with pytest.raises(IndexOutOfRangeError) as info:
        embed(z, on(table), on(ids)).sync()
    message = str(info.value)
    assert f"{FILE}:{here('embed')}" in message
    assert "kernel 'embed', tile program (1, 0, 0)" in message
    assert "gather index 50 along axis 0 is outside [0, 50)" in message
    assert isinstance(info.value, IndexError) and isinstance(info.value, ts.KernelRuntimeError)


def test_a_negative_gather_index_is_outside_too(rng):
    table = rng.standard_normal((50, 16)).astype(np.float32)
    ids = np.array([1, 2, -3, 4], np.int32)
    z = ts.zeros((4, 16), ts.float32).partition((4, 16))
    with pytest.raises(IndexOutOfRangeError, match=r"gather index -3 along axis 0 is outside "
                       r"\[0, 50\)"):
        embed(z, on(table), on(ids)).sync()


@ts.kernel
def pick_tile(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)], at: int):
    z.store(x.partition((4,)).load(at))  # <- pick


@ts.kernel
def pick_block(z: tc.MutTensor[tc.f32, (2, 4)], x: tc.Tensor[tc.f32, (-1, -1, -1, -1)],
               b: int):
    """A tile of a 4-D tensor (a paged cache's block) at a run-time block index."""
    z.store(x.partition((1, 2, 1, 4)).load((b, 0, 0, 0)).reshape((2, 4)))  # <- block


@ts.kernel
def pick_or_pad(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)], at: int):
    z.store(x.partition((4,)).load(at, padding=7.5))


def test_a_partition_index_outside_the_grid_is_an_index_error():
    x = on(np.arange(10, dtype=np.float32))
    with pytest.raises(IndexOutOfRangeError,
                       match=rf"{FILE}:{here('pick')}: in kernel 'pick_tile', tile program "
                       r"\(0, 0, 0\): partition index \(3,\) is outside the tile grid \(3,\)"):
        pick_tile(ts.zeros((4,), ts.float32).partition((4,)), x, 3).sync()


def test_a_partition_load_with_padding_reads_it_for_a_tile_outside_the_grid():
    x = on(np.arange(10, dtype=np.float32))
    for at, want in [(2, [8, 9, 0, 0]), (3, [7.5] * 4), (-1, [7.5] * 4), (0, [0, 1, 2, 3])]:
        z = pick_or_pad(ts.zeros((4,), ts.float32).partition((4,)), x, at).sync().z
        assert z.unpartition().numpy().tolist() == want, at


def test_the_arguments_are_usable_after_an_out_of_range_index(rng):
    table, ids = on(rng.standard_normal((50, 16)).astype(np.float32)), on(np.full(4, 99, np.int32))
    with pytest.raises(IndexOutOfRangeError) as info:
        embed(ts.zeros((4, 16), ts.float32).partition((4, 16)), table, ids).sync()
    z = info.value.arguments[0]
    ids2 = on(np.arange(4, dtype=np.int32))
    out = embed(z, table, ids2).sync().z.unpartition().numpy()
    assert np.array_equal(out, table.numpy()[:4])


# =============================================================================================
# misuse of gather is a compile error at the user's line


def compile_error(kernel, *args):
    with pytest.raises(ts.CompileError) as info:
        kernel.ir(*args)
    return info.value


def test_gather_from_an_output_is_refused():
    @ts.kernel
    def bad(z: tc.MutTensor[tc.f32, (4,)], i: int):
        z.store(tc.gather(z, i))  # <- gather-output
    err = compile_error(bad, ts.zeros((8,), ts.float32).partition((4,)), 1)
    assert isinstance(err, SafetyError) and "safety rule 1" in str(err)
    assert f":{here('gather-output')}" in str(err)


def test_gather_needs_one_integer_index_per_axis():
    @ts.kernel
    def too_few(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1, -1)]):
        z.store(tc.gather(x, tc.arange(4)))

    @ts.kernel
    def float_index(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)]):
        z.store(tc.gather(x, tc.arange(4).astype(tc.f32)))

    @ts.kernel
    def clash(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1, -1)]):
        z.store(tc.gather(x, tc.arange(4), tc.arange(8)))

    @ts.kernel
    def bad_padding(z: tc.MutTensor[tc.i32, (4,)], x: tc.Tensor[tc.i32, (-1,)]):
        z.store(tc.gather(x, tc.arange(4), padding=0.5))

    z = ts.zeros((4,), ts.float32).partition((4,))
    x2, x1 = on(np.zeros((4, 4), np.float32)), on(np.zeros(4, np.float32))
    assert isinstance(compile_error(too_few, z, x2), ShapeError)
    assert "1 index tile(s) for the rank-2 tensor 'x'" in str(compile_error(too_few, z, x2))
    assert isinstance(compile_error(float_index, z, x1), DTypeError)
    assert "cannot be broadcast together" in str(compile_error(clash, z, x2))
    zi = ts.zeros((4,), ts.int32).partition((4,))
    assert isinstance(compile_error(bad_padding, zi, on(np.zeros(4, np.int32))), DTypeError)


# =============================================================================================
# which accesses a GPU checks at run time (the compiler proves the rest)


def _checked(kernel, *args, **kwargs) -> list[int]:
    """The source lines of the accesses the GPU code of this specialization checks."""
    return [op.location.line for op in checked_accesses(kernel.ir(*args, **kwargs))]


@ts.kernel
def tiled_sum(z: tc.MutTensor[tc.f32, (4, 4)], x: tc.Tensor[tc.f32, (-1, -1)],
              y: tc.Tensor[tc.f32, (-1, -1)]):
    px, py = x.partition((4, 4)), y.partition((4, 4))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((4, 4), tc.f32)
    for r in range(tc.num_tiles(px, 0)):
        for k in range(1, tc.num_tiles(px, 1)):
            acc = acc + px.load((r, k))  # <- k-same-tensor
            acc = acc + px.load((r, k - 1))  # <- k-minus-one
            acc = acc + py.load((k, r))  # <- k-other-tensor
            acc = acc + px.load((0, k))  # <- zero-rows
    for k in range(tc.num_tiles(px, 1)):
        acc = acc + px.load((i, k))  # <- i-from-block-id
    z.store(acc)


def test_a_loop_over_a_partitions_tile_count_needs_no_check_on_that_partition():
    x = on(np.ones((8, 8), np.float32))
    z = ts.zeros((8, 8), ts.float32).partition((4, 4))
    lines = _checked(tiled_sum, z, x, x)
    assert here("k-same-tensor") not in lines  # r, k < px's tile counts: proven
    assert here("k-minus-one") not in lines  # 1 <= k, so 0 <= k - 1 < k
    assert here("k-other-tensor") in lines  # y's tile counts are another tensor's
    assert here("zero-rows") in lines  # x may have no rows: index 0 is not proven
    assert here("i-from-block-id") in lines  # the grid is z's, not x's


@ts.kernel
def static_rows(z: tc.MutTensor[tc.f32, (4, 4)], x: tc.Tensor[tc.f32, (8, 8)]):
    px = x.partition((4, 4))
    i, j, _ = tc.get_tile_block_id()
    z.store(px.load((i, j)))  # <- static


@ts.kernel(const_grid=True)
def static_rows_const_grid(z: tc.MutTensor[tc.f32, (4, 4)], x: tc.Tensor[tc.f32, (8, 8)]):
    px = x.partition((4, 4))
    i, j, _ = tc.get_tile_block_id()
    z.store(px.load((i, (j + 1) % 2)))


def test_static_extents_and_a_compiled_in_grid_prove_block_id_indices():
    x = on(np.ones((8, 8), np.float32))
    z = ts.zeros((8, 8), ts.float32).partition((4, 4))
    assert _checked(static_rows, z, x) == [here("static")]  # the grid is not compiled in
    z = ts.zeros((8, 8), ts.float32).partition((4, 4))
    assert _checked(static_rows_const_grid, z, x) == []


@ts.kernel
def wrapping_index(z: tc.MutTensor[tc.f32, (1, 4)], x: tc.Tensor[tc.f32, (256, 4)]):
    p = x.partition((1, 4))
    i, _, _ = tc.get_tile_block_id()
    acc = tc.zeros((1, 4), tc.f32)
    acc = acc + p.load((tc.minimum(i * 1073741824, 3), 0))  # <- i32-wraps
    for k in range(0, 28):
        acc = acc + p.load((k.astype(tc.i8) + tc.constant(101, (), tc.i8), 0))  # <- i8-wraps
        u = k.astype(tc.u32) - tc.constant(5, (), tc.u32)
        acc = acc + p.load((tc.maximum(u, tc.constant(0, (), tc.u32)), 0))  # <- u32-wraps
    ub = tc.constant(3, (), tc.u32) - tc.constant(5, (), tc.u32)
    for k in range(tc.constant(0, (), tc.u32), ub):
        acc = acc + p.load((k, 0))  # <- u32-bound
        break
    acc = acc + p.load((tc.minimum(i, 3) * 2 + 1, 0))  # <- fits
    z.store(acc)


def test_an_index_whose_arithmetic_may_wrap_is_checked():
    """The proof knows nothing of a value whose exact range leaves its dtype: it may have
    wrapped (``i * 2**30`` of an i32 is negative at i = 2, and ``minimum`` with 3 then says
    nothing; ``k + 101`` of an i8 is -128 at k = 27; ``k - 5`` of a u32 is huge at k = 0,
    however ``maximum`` clamps it; a loop up to ``3 - 5`` in u32 runs past the tile grid).
    Each such load keeps its check; an index that stays in range is still proven. The
    interpreter refuses them too."""
    x = on(np.ones((256, 4), np.float32))

    def z():
        return ts.zeros((4, 4), ts.float32).sync().partition((1, 4))
    lines = _checked(wrapping_index, z(), x)
    for tag in ("i32-wraps", "i8-wraps", "u32-wraps", "u32-bound"):
        assert here(tag) in lines, tag
    assert here("fits") not in lines
    with pytest.raises(ts.IndexOutOfRangeError, match="outside the tile grid"):
        wrapping_index(z(), x).sync()


def test_padding_and_unchecked_kernels_need_no_check():
    x = on(np.ones(8, np.float32))
    z = ts.zeros((4,), ts.float32).partition((4,))
    assert _checked(pick_or_pad, z, x, 1) == []
    assert _checked(pick_tile, z, x, 1) == [here("pick")]

    @ts.kernel(unchecked_accesses=True)
    def unchecked(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)], at: int):
        z.store(x.partition((4,)).load(at))
    with ts.unsafe():
        assert _checked(unchecked, z, x, 1) == []


def test_a_checked_kernel_takes_its_fault_record_and_an_unchecked_one_does_not():
    x = on(np.ones(8, np.float32))
    z = ts.zeros((4,), ts.float32).partition((4,))
    checked = abi_signature(pick_tile.ir(z, x, 1))
    padded = abi_signature(pick_or_pad.ir(z, x, 1))
    assert checked[-1].param == "<fault record>" and checked[-1].dtype == "ptr"
    assert all(a.param != "<fault record>" for a in padded)
    assert checked[:-1] == padded


def test_the_checks_are_in_the_gpu_code_and_unchecked_accesses_removes_them():
    pytest.importorskip("tilesafe.backends.tileir.tileiras")

    @ts.kernel(unchecked_accesses=True)
    def pick_unchecked(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)], at: int):
        z.store(x.partition((4,)).load(at))
    x = on(np.ones(8, np.float32))
    z = ts.zeros((4,), ts.float32).partition((4,))
    try:
        safe = pick_tile.compile(z, x, 1, target="sm_90")
        with ts.unsafe():
            unsafe = pick_unchecked.compile(z, x, 1, target="sm_90")
    except ts.TileirasNotFound as err:
        pytest.skip(str(err))
    assert safe != unsafe and len(safe) > len(unsafe)


# =============================================================================================
# the fault record: what a GPU kernel writes, read on the host


class _Words:
    """Host memory standing in for a mapped record."""

    def __init__(self):
        self.words = np.zeros(FAULT_WORDS, np.int64)
        self.address = 0


def _record(kernel, *args):
    return FaultRecord(kernel.ir(*args), _Words())


def test_a_fault_record_reads_as_the_interpreters_error():
    table, ids = on(np.zeros((50, 16), np.float32)), on(np.zeros(8, np.int32))
    record = _record(embed, ts.zeros((8, 16), ts.float32).partition((4, 16)), table, ids)
    assert record.take() is None  # nothing reported
    assert [op.name for op in record.sites] == ["partition_load", "gather"]  # sites 1, 2
    words = record._memory.words
    words[WORD_SITE] = 2
    words[WORD_PROGRAM:WORD_PROGRAM + 3] = (1, 0, 0)
    words[WORD_INDEX:WORD_INDEX + 2] = (50, -(1 << 63))
    words[WORD_BOUND:WORD_BOUND + 2] = (50, 16)
    words[WORD_AXES] = 0b01
    error = record.take()
    assert isinstance(error, IndexOutOfRangeError)
    assert str(error).startswith(f"{FILE}:{here('embed')}: in kernel 'embed', tile program "
                                 "(1, 0, 0): gather index 50 along axis 0 is outside [0, 50) ")
    assert not words.any()  # cleared: the next launch starts afresh
    assert record.take() is None


def test_a_fault_record_names_a_partition_index_like_the_interpreter():
    x = on(np.zeros(10, np.float32))
    record = _record(pick_tile, ts.zeros((4,), ts.float32).partition((4,)), x, 3)
    words = record._memory.words
    words[WORD_SITE] = 1
    words[WORD_INDEX] = 3
    words[WORD_BOUND] = 3
    words[WORD_AXES] = 1
    assert (f"{FILE}:{here('pick')}: in kernel 'pick_tile', tile program (0, 0, 0): partition "
            "index (3,) is outside the tile grid (3,)") in str(record.take())


def test_the_fault_record_has_distinct_words_for_the_axes_of_a_4d_access():
    """Every named axis has its own index and bound word, apart from the mask, inside the
    record: with three axes a 4-D access's fourth index overwrote its first bound (a GPU
    error named a 37-block grid as (0, 1, 2, 1))."""
    assert REPORTED_AXES >= 4
    words = [WORD_SITE, *range(WORD_PROGRAM, WORD_PROGRAM + 3),
             *(WORD_INDEX + a for a in range(REPORTED_AXES)),
             *(WORD_BOUND + a for a in range(REPORTED_AXES)), WORD_AXES]
    assert len(set(words)) == len(words) and max(words) < FAULT_WORDS


def test_a_fault_record_names_a_4d_partition_index_like_the_interpreter():
    """The same words as the launch's own error on the default device (on a GPU that error
    is read from the record the kernel wrote)."""
    x = on(np.zeros((37, 2, 8, 4), np.float32))
    z = ts.zeros((2, 4), ts.float32).partition((2, 4))
    expected = "partition index (40, 0, 0, 0) is outside the tile grid (37, 1, 8, 1)"
    with pytest.raises(IndexOutOfRangeError) as launched:
        pick_block(z, x, 40).sync()
    assert expected in str(launched.value)
    record = _record(pick_block, ts.zeros((2, 4), ts.float32).partition((2, 4)), x, 40)
    words = record._memory.words
    words[WORD_SITE] = 1
    words[WORD_INDEX:WORD_INDEX + 4] = (40, 0, 0, 0)
    words[WORD_BOUND:WORD_BOUND + 4] = (37, 1, 8, 1)
    words[WORD_AXES] = 1
    assert (f"{FILE}:{here('block')}: in kernel 'pick_block', tile program (0, 0, 0): "
            f"{expected}") in str(record.take())


@ts.kernel
def gather_6d(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1, -1, -1, -1, -1, -1)],
              at: int):
    z.store(tc.gather(x, 0, 0, 0, 0, 0, tc.arange(4, tc.i32) + at))  # <- gather6


def test_a_fault_record_names_a_failed_axis_past_the_reported_ones_as_unknown():
    """A gather of rank 6 failing on its sixth axis: the record has no words for that axis'
    index and bound, only its bit in the mask. The error still names the axis (with ``?``);
    it named no index at all ("gather index " and nothing after it)."""
    x = on(np.zeros((1, 1, 1, 1, 1, 8), np.float32))
    with pytest.raises(IndexOutOfRangeError, match=r"gather index 10 along axis 5 is outside "
                       r"\[0, 8\)"):
        gather_6d(ts.zeros((4,), ts.float32).partition((4,)), x, 7).sync()
    assert REPORTED_AXES < 6
    record = _record(gather_6d, ts.zeros((4,), ts.float32).partition((4,)), x, 7)
    words = record._memory.words
    words[WORD_SITE] = 1
    words[WORD_AXES] = 1 << 5  # (what report_lanes writes for an axis past REPORTED_AXES)
    assert (f"{FILE}:{here('gather6')}: in kernel 'gather_6d', tile program (0, 0, 0): "
            "gather index ? along axis 5 is outside [0, ?) (found by the GPU") \
        in str(record.take())


# =============================================================================================
# a stream hands back everything its work borrowed, whatever one of them raises


class _Borrowed:
    def __init__(self, error=None):
        self.error, self.spent = error, 0

    def _spend(self, why, where):
        self.spent += 1
        if self.error is not None:
            raise self.error


def test_a_synchronize_hands_back_every_borrowed_item_and_raises_the_first_error():
    stream = ts.Stream("cpu")
    first, second = IndexOutOfRangeError("first"), IndexOutOfRangeError("second")
    items = [_Borrowed(), _Borrowed(first), _Borrowed(), _Borrowed(second), _Borrowed()]
    stream.on_complete([], items, None)
    with pytest.raises(IndexOutOfRangeError, match="first"):
        stream.synchronize()
    assert [i.spent for i in items] == [1] * 5
    stream.synchronize()  # nothing is left pending
    assert [i.spent for i in items] == [1] * 5


def test_each_bound_launch_gets_its_own_record_and_dropped_ones_are_reused(monkeypatch):
    """Two plans of one kernel never share a record (a report reaches the launch that made
    it), though records come in slabs of one page-locked allocation; a dropped plan's record
    memory goes back, zeroed, to its device's pool."""
    import gc

    from tilesafe.backends.tileir import faults

    made, device_made = [], []

    class Mapped:
        def __init__(self, index, count):
            self.words = np.zeros(count, np.int64)
            self.address = 1 << 20
            made.append(self)
    class Device:
        def __init__(self, index, count, initial=0):
            self.address = 1 << 30
            self.initial = initial
            device_made.append(self)

    monkeypatch.setattr(faults.cuda, "MappedWords", Mapped)
    monkeypatch.setattr(faults.cuda, "DeviceWords", Device)
    monkeypatch.setattr(faults, "_FREE", {})
    ir = pick_tile.ir(ts.zeros((4,), ts.float32).partition((4,)), on(np.zeros(8, np.float32)),
                      1)
    records = faults.FaultRecords(ir, 0)
    first, second = records.new(), records.new()
    assert first._memory is not second._memory and len(made) == 1  # one slab of records
    # (a new verdict word says "failed" until a validating launch writes it: fails closed)
    assert [d.initial for d in device_made] == [faults.VERDICT_UNVALIDATED]
    assert abs(first.address - second.address) == 8 * FAULT_WORDS  # distinct words
    assert abs(first.verdict_address - second.verdict_address) == 4  # a verdict word each
    first._memory.words[:] = 5
    assert not second._memory.words.any()
    first._memory.words[:] = 0
    memory = first._memory
    memory.words[WORD_SITE] = 1  # a report nobody read before the plan was dropped
    del first
    gc.collect()
    third = records.new()
    assert third._memory is memory and not memory.words.any() and len(made) == 1
    assert second.take() is None and third.take() is None


def test_no_record_left_while_a_graph_is_captured_says_to_reserve_them(monkeypatch):
    """A fault record's memory cannot be allocated while a CUDA graph is captured: taking one
    then raises a CudaError naming the caller's line and the fix (reserve records first);
    another allocation failure is raised as it is."""
    from tilesafe.backends.tileir import faults

    def capturing(index, count, initial=0):
        raise ts.CudaError("cuMemAlloc failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
    monkeypatch.setattr(faults, "_FREE", {})
    monkeypatch.setattr(faults.cuda, "MappedWords", capturing)
    with pytest.raises(ts.CudaError, match=r"test_indexed_access.py:\d+: a launch with run-time "
                       r"checks needs a fault record.*being captured.*device verdict word"
                       r"(.|\n)*fix: reserve records before the capture: "
                       r"tilesafe.kernels.reserve_fault_records\(n\)"):
        faults._take(0)

    def out_of_memory(index, count, initial=0):
        raise ts.CudaError("cuMemHostAlloc failed: CUDA_ERROR_OUT_OF_MEMORY")
    monkeypatch.setattr(faults.cuda, "MappedWords", out_of_memory)
    with pytest.raises(ts.CudaError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        faults._take(0)


def test_a_report_read_by_two_threads_at_once_is_raised_once():
    import threading
    x = on(np.zeros(10, np.float32))
    for _ in range(50):
        record = _record(pick_tile, ts.zeros((4,), ts.float32).partition((4,)), x, 3)
        words = record._memory.words
        words[WORD_SITE], words[WORD_INDEX], words[WORD_BOUND], words[WORD_AXES] = 1, 3, 3, 1
        got, start = [], threading.Barrier(4)

        def read():
            start.wait()
            got.append(record.take())
        threads = [threading.Thread(target=read) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert sum(error is not None for error in got) == 1


@ts.kernel
def shifted_copy(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z, padding=float("-inf")) + 1.0)


def test_load_tile_like_past_a_smaller_input_reads_padding_on_every_device():
    """``load_tile_like(x, z)`` reads ``x`` where this program's tile of ``z`` sits; where
    ``x`` is smaller, the tiles past its edge are all padding, on the interpreter as in the
    GPU code (a view load, never outside ``x``); the interpreter used to raise there."""
    x = on(np.arange(4, dtype=np.float32) + 10)
    z = ts.zeros(16, ts.float32).sync().partition(4)
    out = shifted_copy(z, x).sync().z.unpartition().numpy()
    assert np.array_equal(out, np.r_[np.arange(4) + 11.0, np.full(12, -np.inf)])
    assert _checked(shifted_copy, ts.zeros(16, ts.float32).sync().partition(4), x) == []
