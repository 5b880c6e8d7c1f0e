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
