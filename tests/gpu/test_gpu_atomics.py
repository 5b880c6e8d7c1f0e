"""Atomic tensors on cuda:0: many programs updating one tensor concurrently lose no update
(histograms with heavy contention, every integer mode against numpy), float sums stay within
tolerance of float64, and out-of-range lanes never touch memory: the bytes around an atomic
view keep their sentinel values, and the launch raises IndexOutOfRangeError at its sync, as the
interpreter does at the access."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import IndexOutOfRangeError

from examples.histogram import expert_counts, histogram, histogram_onehot
from test_ptr_atomics import cas_loop  # (the interpreter's compare-and-swap loop)

GPU = "cuda:0"


def _tensor(values):
    return ts.tensor(values, device=GPU).sync()


def test_histograms_under_contention_lose_no_update():
    rng = np.random.default_rng(0)
    for bins, tile in ((1, 1024), (256, 1024), (4096, 4096)):
        xs = rng.integers(0, bins, (1 << 22) + 77).astype(np.int32)
        h = ts.zeros(bins, dtype=ts.int32, device=GPU).sync()
        histogram(ts.atomic(h), _tensor(xs), tile, grid=(-(-len(xs) // tile),)).sync()
        assert np.array_equal(h.numpy(), np.bincount(xs, minlength=bins)), bins
    xs = rng.integers(0, 256, 100_000).astype(np.int32)
    h = ts.zeros(256, dtype=ts.int32, device=GPU).sync()
    histogram_onehot(ts.atomic(h), _tensor(xs), 256, grid=(-(-len(xs) // 256),)).sync()
    assert np.array_equal(h.numpy(), np.bincount(xs, minlength=256))
    experts = rng.integers(0, 64, (50_000, 2)).astype(np.int32)
    counts = ts.zeros(64, dtype=ts.int32, device=GPU).sync()
    expert_counts(ts.atomic(counts), _tensor(experts), 64,
                  grid=(-(-len(experts) // 64),)).sync()
    assert np.array_equal(counts.numpy(), np.bincount(experts.ravel(), minlength=64))


@ts.kernel
def combine(h: tc.AtomicTensor["T", (-1,)], v: tc.Tensor["T", (-1,)],
            at: tc.Tensor[tc.i32, (-1,)], MODE: tc.Const[str]):
    bid = tc.get_tile_block_id()[0]
    value = v.partition((256,)).load(bid)
    index = at.partition((256,)).load(bid)
    if MODE == "max":
        h.atomic_max(value, index)
    elif MODE == "min":
        h.atomic_min(value, index)
    elif MODE == "and":
        h.atomic_and(value, index)
    elif MODE == "or":
        h.atomic_or(value, index)
    elif MODE == "xor":
        h.atomic_xor(value, index)
    else:
        h.atomic_add(value, index)


def test_every_integer_mode_matches_numpy():
    rng = np.random.default_rng(1)
    n, bins = 1 << 16, 37
    ufuncs = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
              "or": np.bitwise_or, "xor": np.bitwise_xor}
    for dtype in (ts.int32, ts.uint32, ts.int64, ts.uint64):
        info = np.iinfo(dtype.storage)
        for mode, ufunc in ufuncs.items():
            values = rng.integers(info.min, info.max, n, dtype=dtype.storage, endpoint=True)
            at = rng.integers(0, bins, n).astype(np.int32)
            start = rng.integers(info.min, info.max, bins, dtype=dtype.storage, endpoint=True)
            h = _tensor(start.copy())
            combine(ts.atomic(h), _tensor(values), _tensor(at), mode, grid=(n // 256,)).sync()
            want = start.copy()
            with np.errstate(over="ignore"):
                ufunc.at(want, at, values)
            assert np.array_equal(h.numpy(), want), (dtype, mode)


def test_float_sums_are_within_tolerance_of_float64():
    rng = np.random.default_rng(2)
    n, bins = 1 << 18, 16
    for dtype, eps in ((ts.float32, np.finfo(np.float32).eps),
                       (ts.float64, np.finfo(np.float64).eps)):
        values = rng.standard_normal(n).astype(dtype.storage)
        at = rng.integers(0, bins, n).astype(np.int32)
        h = ts.zeros(bins, dtype=dtype, device=GPU).sync()
        combine(ts.atomic(h), _tensor(values), _tensor(at), "add", grid=(n // 256,)).sync()
        want, mass = np.zeros(bins), np.zeros(bins)
        np.add.at(want, at, values.astype(np.float64))
        np.add.at(mass, at, np.abs(values.astype(np.float64)))
        assert np.all(np.abs(h.numpy() - want) <= n * eps * mass), dtype


@ts.kernel
def scatter_masked_by_bounds(h: tc.AtomicTensor[tc.i32, (-1,)], at: tc.Tensor[tc.i32, (-1,)]):
    h.atomic_add(1, at.partition((16,)).load(0))


def test_out_of_range_lanes_touch_no_memory_and_are_reported():
    base = ts.full(32, 7, dtype=ts.int32, device=GPU).sync()
    view = base[8:16]
    at = np.array([-8, -1, 0, 3, 7, 8, 9, 24, 3, 3, -100, 1000, 0, 7, 8, -2], np.int32)
    with pytest.raises(IndexOutOfRangeError, match=r"tile program \(0, 0, 0\): atomic_add "
                       r"index -?\d+ along axis 0 is outside \[0, 8\) of the atomic tensor "
                       r"'h'") as info:
        scatter_masked_by_bounds(ts.atomic(view), _tensor(at), grid=(1,)).sync()
    reported = int(str(info.value).split("atomic_add index ")[1].split()[0])
    assert reported in at[(at < 0) | (at >= 8)]  # one of the offending lanes (a GPU picks one)
    got = base.numpy()
    want = np.full(32, 7, np.int32)
    for i in at[(at >= 0) & (at < 8)]:
        want[8 + i] += 1
    assert np.array_equal(got, want)  # nothing outside base[8:16] was touched



# ---------------------------------------------------------------------------------------------
# compare-and-swap and exchange through raw pointers (unsafe kernels), against the interpreter:
# exactly where the result does not depend on the order the lanes are served in, else what
# holds in any order (one winner per claimed slot; an exchange hands back what went in)

LANES = 256


def _on(device, values):
    return ts.tensor(values, device=device).sync()


@ts.kernel
def claim_slots(won: tc.MutTensor[tc.i32, (1, LANES)], table: tc.Ptr[tc.i32],
                keys: tc.Tensor[tc.i32, (-1, LANES)]):
    i = tc.get_tile_block_id()[0]
    won.store(tc.atomic_cas_ptr(table, keys.partition((1, LANES)).load(i, 0), 0, i + 1))


def _claims(device, keys, slots):
    table = ts.zeros(slots, dtype=ts.int32, device=device).sync()
    won = ts.full(keys.shape, -7, ts.int32, device=device).sync().partition((1, LANES))
    with ts.unsafe():
        won, table, _ = claim_slots(won, table, _on(device, keys)).sync()
    return table.numpy(), won.unpartition().numpy()


def test_pointer_cas_claims_each_slot_exactly_once():
    rng = np.random.default_rng(3)
    for slots in (1, 97, 1 << 16):
        keys = rng.integers(0, slots, (1024, LANES)).astype(np.int32)
        programs = np.repeat(np.arange(len(keys), dtype=np.int32) + 1,
                             LANES).reshape(keys.shape)
        named = np.unique(keys)
        for device in (GPU, "cpu"):
            table, won = _claims(device, keys, slots)
            winners = won == 0
            assert winners.sum() == named.size, (device, slots)
            assert np.array_equal(np.sort(keys[winners]), named), (device, slots)
            assert np.array_equal(table[keys[winners]], programs[winners]), (device, slots)
            assert np.array_equal(won[~winners], table[keys[~winners]]), (device, slots)
            assert not np.delete(table, named).any(), (device, slots)


@ts.kernel
def exchange_at(old: tc.MutTensor[tc.i64, (1, LANES)], table: tc.Ptr[tc.i64],
                at: tc.Tensor[tc.i32, (-1, LANES)], values: tc.Tensor[tc.i64, (-1, LANES)]):
    i = tc.get_tile_block_id()[0]
    old.store(tc.atomic_exchange_ptr(table, at.partition((1, LANES)).load(i, 0),
                                     values.partition((1, LANES)).load(i, 0)))


def _exchange(device, start, at, values):
    table = _on(device, start)
    old = ts.full(at.shape, -7, ts.int64, device=device).sync().partition((1, LANES))
    with ts.unsafe():
        old, table, _, _ = exchange_at(old, table, _on(device, at), _on(device, values)).sync()
    return table.numpy(), old.unpartition().numpy()


def test_pointer_exchange_hands_back_what_went_in():
    rng = np.random.default_rng(4)
    programs = 512
    values = np.arange(programs * LANES, dtype=np.int64).reshape(programs, LANES) + 10**12
    # every slot named once: the result does not depend on the order, so it is the
    # interpreter's
    slots = programs * LANES
    start = rng.integers(-10**15, 10**15, slots).astype(np.int64)
    at = rng.permutation(slots).astype(np.int32).reshape(programs, LANES)
    (table, old), (want_table, want_old) = (_exchange(GPU, start, at, values),
                                            _exchange("cpu", start, at, values))
    assert np.array_equal(table, want_table) and np.array_equal(old, want_old)
    assert np.array_equal(old, start[at]) and np.array_equal(table[at], values)
    # under contention: per slot, the values at the end and handed back are the one at the
    # start and those that went in
    for slots in (1, 61):
        start = np.arange(slots, dtype=np.int64) - 10**9
        at = rng.integers(0, slots, (programs, LANES)).astype(np.int32)
        for device in (GPU, "cpu"):
            table, old = _exchange(device, start, at, values)
            for slot in range(slots):
                hit = at == slot
                went_in = np.sort(np.concatenate([[start[slot]], values[hit]]))
                came_out = np.sort(np.concatenate([[table[slot]], old[hit]]))
                assert np.array_equal(went_in, came_out), (device, slots, slot)


@ts.kernel
def masked_ptr_atomics(old_cas: tc.MutTensor[tc.f32, (LANES,)],
                       old_xchg: tc.MutTensor[tc.f32, (LANES,)], p: tc.Ptr[tc.f32],
                       q: tc.Ptr[tc.f32], compare: tc.Tensor[tc.f32, (-1,)], n: int):
    off = tc.arange(LANES) * 3 - 7  # distinct offsets, some outside [0, n) (masked off)
    live = (off >= 0) & (off < n)
    want = tc.load_tile_like(compare, old_cas)
    old_cas.store(tc.atomic_cas_ptr(p, off, want, want + 0.5, live, padding=-1.0))
    old_xchg.store(tc.atomic_exchange_ptr(q, off, off.astype(tc.f32), live))


def test_masked_pointer_atomics_match_the_interpreter():
    rng = np.random.default_rng(5)
    n = 600
    start = rng.integers(0, 3, n).astype(np.float32)
    compare = rng.integers(0, 3, LANES).astype(np.float32)
    results = []
    for device in (GPU, "cpu"):
        p, q = _on(device, start), _on(device, start)
        a = ts.zeros(LANES, device=device).sync().partition(LANES)
        b = ts.zeros(LANES, device=device).sync().partition(LANES)
        with ts.unsafe():
            a, b, p, q, _ = masked_ptr_atomics(a, b, p, q, _on(device, compare), n).sync()
        results.append([a.unpartition().numpy(), b.unpartition().numpy(), p.numpy(),
                        q.numpy()])
    for got, want in zip(*results):
        assert np.array_equal(got, want)


@ts.kernel
def cas_bits_f32(old: tc.MutTensor[tc.f32, (4,)], p: tc.Ptr[tc.f32],
                 compare: tc.Tensor[tc.f32, (-1,)]):
    old.store(tc.atomic_cas_ptr(p, tc.arange(4), tc.load_tile_like(compare, old), 5.0))


@ts.kernel
def cas_bits_f64(old: tc.MutTensor[tc.f64, (4,)], p: tc.Ptr[tc.f64],
                 compare: tc.Tensor[tc.f64, (-1,)]):
    old.store(tc.atomic_cas_ptr(p, tc.arange(4), tc.load_tile_like(compare, old), 5.0))


CAS_BITS = {ts.float32: cas_bits_f32, ts.float64: cas_bits_f64}


@pytest.mark.parametrize("dtype", list(CAS_BITS), ids=lambda d: d.short)
def test_float_pointer_cas_compares_bit_patterns_as_the_interpreter(dtype):
    start = np.array([0.0, -0.0, np.nan, 1.0], dtype.storage)
    compare = np.array([0.0, 0.0, np.nan, 1.0], dtype.storage)
    results = []
    for device in (GPU, "cpu"):
        p = _on(device, start)
        old = ts.zeros(4, dtype=dtype, device=device).sync().partition(4)
        with ts.unsafe():
            old, p, _ = CAS_BITS[dtype](old, p, _on(device, compare)).sync()
        bits = f"u{np.dtype(dtype.storage).itemsize}"
        results.append((old.unpartition().numpy().view(bits), p.numpy().view(bits)))
    (old, table), (want_old, want_table) = results
    assert np.array_equal(old, want_old), (old, want_old)
    assert np.array_equal(table, want_table), (table, want_table)


def test_a_pointer_cas_loop_loses_no_increment():
    programs, rounds = 2048, 8
    p = ts.zeros(1, dtype=ts.int32, device=GPU).sync()
    tries = ts.zeros(programs, dtype=ts.int32, device=GPU).sync().partition(1)
    with ts.unsafe():
        tries, p = cas_loop(tries, p, rounds).sync()
    assert p.numpy()[0] == programs * rounds
    assert (tries.unpartition().numpy() >= rounds).all()
