"""tilesafe.kernels.kv_cache_update: new keys and values land in their slots (the head-major
cache decode_attention reads; flat and paged token-major caches, rows that are and are not a
power of two; int32/int64 slots, every dtype), repeated or out-of-range slots raise
PositionsError and write nothing, and each argument error. Device-neutral: the same tests run
on a GPU with TILESAFE_DEVICE=cuda:0 (a GPU kernel names a repeat's partner "another row")."""

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
def test_token_major_update_writes_each_token_to_its_slot(rng, dtype, cache_shape, tokens,
                                                          index_dtype):
    cache_k, cache_v = caches(cache_shape, dtype)
    row = cache_shape[-2:]
    num_slots = int(np.prod(cache_shape[:-2]))
    k = rng.standard_normal((tokens,) + row).astype(NP_DTYPES[dtype])
    v = rng.standard_normal((tokens,) + row).astype(NP_DTYPES[dtype])
    slots = rng.choice(num_slots, tokens, replace=False).astype(index_dtype)
    got_k, got_v = kv_cache_update(cache_k, cache_v, on(k), on(v), on(slots),
                                   layout="nhd").sync()
    assert got_k is cache_k and got_v is cache_v
    want_k = np.full((num_slots,) + row, -1.0)
    want_v = np.full((num_slots,) + row, -2.0)
    want_k[slots], want_v[slots] = k, v
    assert np.array_equal(cache_k.numpy().reshape(want_k.shape).astype(np.float64), want_k)
    assert np.array_equal(cache_v.numpy().reshape(want_v.shape).astype(np.float64), want_v)


@pytest.mark.parametrize("dtype, cache_shape, tokens, index_dtype", [
    ("bfloat16", (3, 2, 5, 8), 4, np.int32),   # (batch, kv_heads, max_len, head_dim)
    ("float32", (2, 3, 7, 4), 1, np.int64),    # kv_heads not a power of two: a padded tile
    ("float16", (1, 1, 9, 16), 9, np.int32),   # a whole sequence at once
])
def test_head_major_update_writes_each_tokens_heads(rng, dtype, cache_shape, tokens,
                                                    index_dtype):
    batch, heads, max_len, d = cache_shape
    cache_k, cache_v = caches(cache_shape, dtype)
    k = rng.standard_normal((tokens, heads, d)).astype(NP_DTYPES[dtype])
    v = rng.standard_normal((tokens, heads, d)).astype(NP_DTYPES[dtype])
    slots = rng.choice(batch * max_len, tokens, replace=False).astype(index_dtype)
    got_k, got_v = kv_cache_update(cache_k, cache_v, on(k), on(v), on(slots)).sync()
    assert got_k is cache_k and got_v is cache_v
    want_k, want_v = np.full(cache_shape, -1.0), np.full(cache_shape, -2.0)
    for i, slot in enumerate(slots):
        want_k[slot // max_len, :, slot % max_len, :] = k[i]
        want_v[slot // max_len, :, slot % max_len, :] = v[i]
    assert np.array_equal(cache_k.numpy().astype(np.float64), want_k)
    assert np.array_equal(cache_v.numpy().astype(np.float64), want_v)


@pytest.mark.parametrize("slots, words", [
    ([4, 1, 4], r"positions\[2\] = \(0, 0, 4\) names the same tile as "
     r"(positions\[0\]|another row)"),
    ([4, 10, 1], r"positions\[1\] = \(2, 0, 0\) is outside the tile grid \(2, 1, 5\)"),
    ([-1, 2, 3], r"positions\[0\] = \(-1, 0, 4\) is outside the tile grid"),
])
def test_head_major_repeated_or_outside_slots_write_nothing(rng, slots, words):
    cache_k, cache_v = caches((2, 2, 5, 4))
    k = on(rng.standard_normal((3, 2, 4)).astype(np.float32))
    with pytest.raises(ts.PositionsError, match=rf"kernel 'kv_write_heads', the indexed "
                       rf"partition 'cache_k': {words}.*wrote nothing"):
        kv_cache_update(cache_k, cache_v, k, k, on(np.array(slots, np.int32))).sync()
    assert np.all(cache_k.numpy() == -1.0) and np.all(cache_v.numpy() == -2.0)


@pytest.mark.parametrize("cache_shape", [(10, 2, 8), (10, 3, 8)])
@pytest.mark.parametrize("slots, words", [
    ([4, 1, 4], r"positions\[2\] = \(4,( 0)?\) names the same tile as "
     r"(positions\[0\]|another row)"),
    ([4, 10, 1], r"positions\[1\] = \(10,( 0)?\) is outside the tile grid \(10,( 1)?\)"),
    ([-1, 2, 3], r"positions\[0\] = \(-1,( 0)?\) is outside the tile grid"),
])
def test_token_major_repeated_or_outside_slots_write_nothing(rng, cache_shape, slots, words):
    cache_k, cache_v = caches(cache_shape)
    k = on(rng.standard_normal((3,) + cache_shape[1:]).astype(np.float32))
    v = on(rng.standard_normal((3,) + cache_shape[1:]).astype(np.float32))
    with pytest.raises(ts.PositionsError, match=rf"the indexed partition 'cache_k': {words}.*"
                       "wrote nothing"):
        kv_cache_update(cache_k, cache_v, k, v, on(np.array(slots, np.int32)),
                        layout="nhd").sync()
    assert np.all(cache_k.numpy() == -1.0) and np.all(cache_v.numpy() == -2.0)


def test_the_slots_are_read_when_the_update_runs(rng):
    cache_k, cache_v = caches((6, 2, 4))
    slots = on(np.array([5, 0], np.int32))
    k = rng.standard_normal((2, 2, 4)).astype(np.float32)
    op = kv_cache_update(cache_k, cache_v, on(k), on(k), slots, layout="nhd")
    op.sync()
    slots.copy_(on(np.array([1, 2], np.int32))).sync()  # the next step's slots, same tensor
    kv_cache_update(cache_k, cache_v, on(k + 1), on(k + 1), slots, layout="nhd").sync()
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
        (dict(layout="bhsd"), "kv_cache_update: layout='bhsd' is not one of 'hnd', 'nhd'"),
        (dict(layout="hnd"), r"kv_cache_update: cache_k has shape \(6, 2, 4\); layout 'hnd' "
         r"is \(batch, kv_heads, max_len, head_dim\)"),
        (dict(layout="hnd", cache_k=caches((2, 2, 3, 4))[0], cache_v=caches((2, 2, 3, 4))[1],
              k=on(np.zeros((2, 3, 4), np.float32)), v=on(np.zeros((2, 3, 4), np.float32))),
         r"kv_cache_update: k has shape \(2, 3, 4\); the cache holds rows of \(kv_heads, "
         r"head_dim\) = \(2, 4\)"),
        (dict(layout="hnd", cache_k=caches((2, 2, 3, 6))[0], cache_v=caches((2, 2, 3, 6))[1],
              k=on(np.zeros((2, 2, 6), np.float32)), v=on(np.zeros((2, 2, 6), np.float32))),
         "kv_cache_update: head_dim=6 is not a power of two"),
        (dict(layout="hnd", cache_k=caches((2, 2, 3, 4))[0], cache_v=caches((2, 2, 3, 4))[1],
              workspace=ts.zeros((2, 2), ts.int32).sync()),
         r"kv_cache_update: workspace= has shape \(2, 2\) and dtype int32; this call writes "
         r"shape \(2, 3\), dtype int32"),
        (dict(cache_k=ts.zeros((2, 6, 2, 4)).sync().permute(1, 0, 2, 3),
              cache_v=ts.zeros((6, 2, 2, 4)).sync(),
              k=on(np.zeros((2, 2, 4), np.float32)), v=on(np.zeros((2, 2, 4), np.float32))),
         r"kv_cache_update: cache_k is not contiguous"),
        (dict(k=np.zeros((2, 2, 4), np.float32)),
         "kv_cache_update: k must be a tilesafe tensor, got ndarray"),
    ]
    base = dict(cache_k=cache_k, cache_v=cache_v, k=k, v=k, slots=slots, layout="nhd")
    for change, words in cases:
        with pytest.raises(ts.ArgumentError, match=words) as info:
            kv_cache_update(**{**base, **change})
        assert "test_kernels_kv_cache.py" in str(info.value)
    assert np.all(cache_k.numpy() == -1.0)


def test_a_decode_step_records_into_a_graph_and_replays_with_new_device_inputs(rng):
    """What a decode engine records once and replays per token: embedding of the fed token,
    rope of q/k at the fed positions, the KV-cache write at the fed slots, and the next token
    (greedy and sampled with a device offset), every input and output allocated beforehand."""
    from tilesafe.kernels import argmax, embedding, rope, rope_cache, sample
    vocab, hidden, heads, kv_heads, d, batch, slots_n = 23, 16, 2, 1, 8, 2, 12
    table = rng.standard_normal((vocab, hidden)).astype(np.float32)
    q_np = rng.standard_normal((batch, heads, d)).astype(np.float32)
    k_np = rng.standard_normal((batch, kv_heads, d)).astype(np.float32)
    logits_np = rng.standard_normal((batch, vocab)).astype(np.float32)
    cos_sin = rope_cache(slots_n, d).sync()
    ids, positions = on(np.array([3, 7], np.int32)), on(np.array([0, 0], np.int32))
    slots, offset = on(np.array([0, 6], np.int32)), on(np.array([0], np.int64))
    hidden_out = ts.zeros((batch, hidden)).sync()
    q, k, v = on(q_np), on(k_np), on(k_np)
    cache_k, cache_v = caches((batch, kv_heads, slots_n // batch, d))  # decode_attention's
    logits = on(logits_np)
    greedy, sampled = ts.zeros((batch,), ts.int32).sync(), ts.zeros((batch,), ts.int32).sync()
    workspace = ts.zeros((batch, 3), ts.int32).sync()  # the slots' tile coordinates
    with ts.CudaGraph.scope() as graph:
        graph.record(embedding(ids, on(table), out=hidden_out))
        graph.record(rope(q, k, cos_sin, positions))
        graph.record(kv_cache_update(cache_k, cache_v, k, v, slots, workspace=workspace))
        graph.record(argmax(logits, out=greedy))
        graph.record(sample(logits, temperature=1.0, top_k=4, seed=9, offset=offset,
                            out=sampled))
    assert np.all(cache_k.numpy() == -1.0)  # recorded, nothing ran
    draws = []
    for step in range(2):
        ids.copy_(on(np.array([step, 20 - step], np.int32))).sync()
        positions.copy_(on(np.array([step, step + 1], np.int32))).sync()
        slots.copy_(on(np.array([step, 6 + step], np.int32))).sync()
        offset.copy_(on(np.array([2 * step], np.int64))).sync()
        graph.replay()
        assert np.array_equal(hidden_out.numpy(), table[[step, 20 - step]])
        assert np.array_equal(greedy.numpy(), np.argmax(logits_np, 1))
        draws.append(sampled.numpy().tolist())
        assert all(t in np.argsort(-logits_np[r])[:4] for r, t in enumerate(draws[-1]))
    got = cache_k.numpy()  # slots 0, 1 are sequence 0's positions 0, 1; 6, 7 sequence 1's
    assert np.all(got[:, :, :2] != -1.0) and np.all(got[:, :, 2:] == -1.0)
    # the second replay drew with offset 2: what a direct call with offset 2 draws
    direct = sample(on(logits_np), temperature=1.0, top_k=4, seed=9, offset=2).sync()
    assert draws[1] == direct.numpy().tolist()


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    cache_k = torch.full((6, 2, 4), -1.0)
    cache_v = torch.full((6, 2, 4), -2.0)
    k = torch.randn(2, 2, 4, generator=torch.Generator().manual_seed(0))
    got_k, got_v = kv_cache_update(cache_k, cache_v, k, k * 2, torch.tensor([5, 1]),
                                   layout="nhd")
    assert got_k is cache_k and got_v is cache_v
    assert torch.equal(cache_k[[5, 1]], k) and torch.equal(cache_v[[5, 1]], k * 2)
    assert bool((cache_k[[0, 2, 3, 4]] == -1.0).all())


def test_torch_tensors_with_rows_that_are_not_a_power_of_two():
    torch = pytest.importorskip("torch")
    cache_k, cache_v = torch.full((5, 3, 4), -1.0), torch.full((5, 3, 4), -2.0)
    k = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    kv_cache_update(cache_k, cache_v, k, -k, torch.tensor([4, 0], dtype=torch.int32),
                    layout="nhd")
    assert torch.equal(cache_k[[4, 0]], k) and torch.equal(cache_v[[4, 0]], -k)
    assert bool((cache_k[1:4] == -1.0).all()) and bool((cache_v[1:4] == -2.0).all())


def test_coordinates_already_in_the_workspace_skip_their_launch_and_stay_validated(
        rng, monkeypatch):
    """Two layers' caches written at the same slots: the second update reuses the coordinates
    the first wrote into the workspace (one launch fewer); coordinates that no longer fit are
    still refused with nothing written."""
    shape = (2, 2, 5, 4)
    slots = on(np.array([7, 1], np.int32))  # sequence 1 position 2, sequence 0 position 1
    workspace = ts.zeros((2, 3), ts.int32).sync()
    k = rng.standard_normal((2, 2, 4)).astype(np.float32)
    first, second = caches(shape), caches(shape)
    import importlib
    module = importlib.import_module("tilesafe.kernels.kv_cache")
    launched = []

    def counted(*a, **kw):
        launched.append(1)
        return original(*a, **kw)
    original = module.head_major_coordinates
    monkeypatch.setattr(module, "head_major_coordinates", counted)
    kv_cache_update(*first, on(k), on(k), slots, workspace=workspace).sync()
    assert len(launched) == 1
    kv_cache_update(*second, on(k), on(k), slots, workspace=workspace,
                    coordinates_in_workspace=True).sync()
    assert len(launched) == 1  # reused
    for a, b in zip(first, second):
        assert np.array_equal(a.numpy(), b.numpy())
    assert second[0].numpy()[1, :, 2].tolist() == k[0].tolist()
    workspace.copy_(on(np.array([[0, 0, 1], [0, 0, 1]], np.int32))).sync()  # a repeat
    third = caches(shape)
    # (the interpreter names the earlier row, a GPU kernel "another row")
    with pytest.raises(ts.PositionsError,
                       match=r"names the same tile as (positions\[0\]|another row)"):
        kv_cache_update(*third, on(k), on(k), slots, workspace=workspace,
                        coordinates_in_workspace=True).sync()
    assert np.all(third[0].numpy() == -1.0)
    with pytest.raises(ts.ArgumentError, match="coordinates_in_workspace=True needs "
                       "layout='hnd' and the workspace="):
        kv_cache_update(*third, on(k), on(k), slots, coordinates_in_workspace=True)
