"""tilesafe.kernels.kv_cache_update: new keys and values land in their slots (flat and paged
caches, rows that are and are not a power of two, int32/int64 slots, every dtype), repeated
or out-of-range slots raise PositionsError and write nothing, and each argument error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import kv_cache_update

NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def on(array) -> ts.Tensor:
    return ts.tensor(array).sync()


def caches(shape, dtype="float32"):
    return (ts.full(shape, -1.0, getattr(ts, dtype)).sync(),
            ts.full(shape, -2.0, getattr(ts, dtype)).sync())


@pytest.mark.parametrize("dtype, cache_shape, tokens, index_dtype", [
    ("float32", (10, 2, 8), 3, np.int64),      # a row of 16: one launch, slots as coordinates
    ("bfloat16", (12, 3, 8), 5, np.int32),     # a row of 24: padded tile, coordinates kernel
    ("float16", (4, 3, 1, 8), 4, np.int32),    # paged: 4 blocks of 3 slots
    ("float32", (17, 1, 12), 1, np.int64),     # one decode token, a row of 12
])
def test_kv_cache_update_writes_each_token_to_its_slot(rng, dtype, cache_shape, tokens,
                                                       index_dtype):
    cache_k, cache_v = caches(cache_shape, dtype)
    row = cache_shape[-2:]
    num_slots = int(np.prod(cache_shape[:-2]))
    k = rng.standard_normal((tokens,) + row).astype(NP_DTYPES[dtype])
    v = rng.standard_normal((tokens,) + row).astype(NP_DTYPES[dtype])
    slots = rng.choice(num_slots, tokens, replace=False).astype(index_dtype)
    got_k, got_v = kv_cache_update(cache_k, cache_v, on(k), on(v), on(slots)).sync()
    assert got_k is cache_k and got_v is cache_v
    want_k = np.full((num_slots,) + row, -1.0)
    want_v = np.full((num_slots,) + row, -2.0)
    want_k[slots], want_v[slots] = k, v
    assert np.array_equal(cache_k.numpy().reshape(want_k.shape).astype(np.float64), want_k)
    assert np.array_equal(cache_v.numpy().reshape(want_v.shape).astype(np.float64), want_v)


@pytest.mark.parametrize("cache_shape", [(10, 2, 8), (10, 3, 8)])
@pytest.mark.parametrize("slots, words", [
    ([4, 1, 4], r"positions\[2\] = \(4,( 0)?\) names the same tile as positions\[0\]"),
    ([4, 10, 1], r"positions\[1\] = \(10,( 0)?\) is outside the tile grid \(10,( 1)?\)"),
    ([-1, 2, 3], r"positions\[0\] = \(-1,( 0)?\) is outside the tile grid"),
])
def test_repeated_or_outside_slots_raise_and_write_nothing(rng, cache_shape, slots, words):
    cache_k, cache_v = caches(cache_shape)
    k = on(rng.standard_normal((3,) + cache_shape[1:]).astype(np.float32))
    v = on(rng.standard_normal((3,) + cache_shape[1:]).astype(np.float32))
    with pytest.raises(ts.PositionsError, match=rf"the indexed partition 'cache_k': {words}.*"
                       "wrote nothing"):
        kv_cache_update(cache_k, cache_v, k, v, on(np.array(slots, np.int32))).sync()
    assert np.all(cache_k.numpy() == -1.0) and np.all(cache_v.numpy() == -2.0)


def test_the_slots_are_read_when_the_update_runs(rng):
    cache_k, cache_v = caches((6, 2, 4))
    slots = on(np.array([5, 0], np.int32))
    k = rng.standard_normal((2, 2, 4)).astype(np.float32)
    op = kv_cache_update(cache_k, cache_v, on(k), on(k), slots)
    op.sync()
    slots.copy_(on(np.array([1, 2], np.int32))).sync()  # the next step's slots, same tensor
    kv_cache_update(cache_k, cache_v, on(k + 1), on(k + 1), slots).sync()
    got = cache_k.numpy()
    assert np.array_equal(got[[5, 0]], k) and np.array_equal(got[[1, 2]], k + 1)
    assert np.all(got[[3, 4]] == -1.0)


def test_kv_cache_update_argument_errors(rng):
    cache_k, cache_v = caches((6, 2, 4))
    k = on(rng.standard_normal((2, 2, 4)).astype(np.float32))
    slots = on(np.array([0, 1], np.int32))
    cases = [
        (dict(cache_v=caches((6, 2, 4), "float16")[1]),
         "kv_cache_update: cache_v has dtype float16, cache_k float32"),
        (dict(cache_v=caches((7, 2, 4))[1]),
         r"kv_cache_update: cache_v has shape \(7, 2, 4\), cache_k \(6, 2, 4\)"),
        (dict(k=on(np.zeros((2, 4, 2), np.float32)), v=on(np.zeros((2, 4, 2), np.float32))),
         r"kv_cache_update: k has shape \(2, 4, 2\); the cache holds rows of "
         r"\(kv_heads, head_dim\) = \(2, 4\)"),
        (dict(v=on(np.zeros((3, 2, 4), np.float32))),
         r"kv_cache_update: v has shape \(3, 2, 4\), k \(2, 2, 4\)"),
        (dict(slots=on(np.array([0, 1, 2], np.int32))),
         "kv_cache_update: slots has 3 entries for 2 tokens"),
        (dict(slots=on(np.array([0.0, 1.0], np.float32))),
         "kv_cache_update: slots has dtype float32; supported: int32, int64"),
        (dict(cache_k=ts.zeros((6, 8)).sync()),
         r"kv_cache_update: cache_k has shape \(6, 8\); it must have at least 3 dimension"),
        (dict(cache_k=ts.zeros((2, 6, 2, 4)).sync().permute(1, 0, 2, 3),
              cache_v=ts.zeros((6, 2, 2, 4)).sync(),
              k=on(np.zeros((2, 2, 4), np.float32)), v=on(np.zeros((2, 2, 4), np.float32))),
         r"kv_cache_update: cache_k is not contiguous"),
        (dict(k=np.zeros((2, 2, 4), np.float32)),
         "kv_cache_update: k must be a tilesafe tensor, got ndarray"),
    ]
    base = dict(cache_k=cache_k, cache_v=cache_v, k=k, v=k, slots=slots)
    for change, words in cases:
        with pytest.raises(ts.ArgumentError, match=words) as info:
            kv_cache_update(**{**base, **change})
        assert "test_kernels_kv_cache.py" in str(info.value)
    assert np.all(cache_k.numpy() == -1.0)
