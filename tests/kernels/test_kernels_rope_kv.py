"""tilesafe.kernels.rope_kv_cache_update: one launch equals rope (with and without QK-norms,
both layouts) then kv_cache_update bit for bit, on views of a fused QKV row and paged caches;
repeated or outside slots raise PositionsError and write nothing (q_out included); the
positions and slots are read when the op runs (a recorded graph replays with new ones); the
outputs may not alias the inputs; each argument error. Device-neutral (TILESAFE_DEVICE)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import kv_cache_update, rope, rope_cache, rope_kv_cache_update

NP = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}


def on(array) -> ts.Tensor:
    return ts.tensor(array).sync()


def fused_qkv(rng, tokens, heads, kv_heads, d, dtype):
    """q, k, v as the row-strided views of one (tokens, (heads + 2 kv_heads) d) buffer."""
    qkv = on(rng.standard_normal((tokens, (heads + 2 * kv_heads) * d)).astype(NP[dtype]))
    q = qkv[:, :heads * d].reshape(tokens, heads, d)
    k = qkv[:, heads * d:(heads + kv_heads) * d].reshape(tokens, kv_heads, d)
    v = qkv[:, (heads + kv_heads) * d:].reshape(tokens, kv_heads, d)
    return q, k, v


def caches(shape, dtype):
    return (ts.full(shape, -1.0, getattr(ts, dtype)).sync(),
            ts.full(shape, -2.0, getattr(ts, dtype)).sync())


def norms(rng, d, dtype):
    return dict(q_norm=on(rng.standard_normal(d).astype(NP[dtype])),
                k_norm=on(rng.standard_normal(d).astype(NP[dtype])), eps=1e-5)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("normed", [False, True])
@pytest.mark.parametrize("dtype, tokens, heads, kv_heads, d, cache_shape", [
    ("bfloat16", 1, 8, 2, 16, (12, 2, 16)),      # one decode token, a GQA group of 4
    ("float32", 3, 6, 3, 8, (4, 3, 3, 8)),       # 3 key/value heads, paged cache
    ("bfloat16", 2, 4, 4, 32, (9, 4, 32)),       # no grouping
])
def test_one_launch_equals_rope_then_kv_cache_update(rng, layout, normed, dtype, tokens, heads,
                                                     kv_heads, d, cache_shape):
    q, k, v = fused_qkv(rng, tokens, heads, kv_heads, d, dtype)
    table = rope_cache(16, d, dtype=dtype).sync()
    num_slots = int(np.prod(cache_shape[:-2]))
    positions = on(rng.choice(16, tokens, replace=False).astype(np.int32))
    slots = on(rng.choice(num_slots, tokens, replace=False).astype(np.int64))
    extra = norms(rng, d, dtype) if normed else {}
    want_q = ts.empty((tokens, heads, d), getattr(ts, dtype)).sync()
    keys = ts.empty((tokens, kv_heads, d), getattr(ts, dtype)).sync()
    want_k, want_v = caches(cache_shape, dtype)
    rope(q, k, table, positions, layout=layout, q_out=want_q, k_out=keys, **extra).sync()
    kv_cache_update(want_k, want_v, keys, v.clone().sync(), slots, layout="nhd").sync()

    got_q = ts.full((tokens, heads, d), 7.0, getattr(ts, dtype)).sync()  # poisoned
    cache_k, cache_v = caches(cache_shape, dtype)
    rows = ts.full((tokens, kv_heads), -5, ts.int64).sync()
    result = rope_kv_cache_update(q, k, v, table, positions, cache_k, cache_v, slots,
                                  q_out=got_q, layout=layout, workspace=rows, **extra).sync()
    assert result[0] is got_q and result[1] is cache_k and result[2] is cache_v
    for got, want in ((got_q, want_q), (cache_k, want_k), (cache_v, want_v)):
        assert np.array_equal(got.numpy(), want.numpy())
    untouched = np.setdiff1d(np.arange(num_slots), slots.numpy())
    assert np.all(cache_k.numpy().reshape(num_slots, -1)[untouched] == -1.0)
    # the heads' rows: each token's slot times kv_heads, plus the head
    assert np.array_equal(rows.numpy(), slots.numpy()[:, None] * kv_heads
                          + np.arange(kv_heads)[None, :])


def test_a_second_layer_reuses_the_rows_in_the_workspace(rng):
    """Two layers' caches at the same slots: the second call skips the rows' launch and writes
    what the first would; rows that no longer fit the caches are still refused, nothing
    written."""
    q, k, v = fused_qkv(rng, 2, 4, 2, 8, "bfloat16")
    table = rope_cache(8, 8, dtype="bfloat16").sync()
    positions, slots = on(np.array([3, 5], np.int32)), on(np.array([4, 1], np.int32))
    rows = ts.zeros((2, 2), ts.int32).sync()
    first, second = caches((6, 2, 8), "bfloat16"), caches((6, 2, 8), "bfloat16")
    rope_kv_cache_update(q, k, v, table, positions, *first, slots, workspace=rows).sync()
    launched = []
    import tilesafe.kernels.rope_kv as module
    original = module.cache_head_rows
    try:
        module.cache_head_rows = lambda *a, **kw: launched.append(1) or original(*a, **kw)
        rope_kv_cache_update(q, k, v, table, positions, *second, slots, workspace=rows,
                             rows_in_workspace=True).sync()
    finally:
        module.cache_head_rows = original
    assert not launched
    for a, b in zip(first, second):
        assert np.array_equal(a.numpy(), b.numpy())
    small = caches((2, 2, 8), "bfloat16")  # rows 8, 9, 2, 3 of 4: outside
    with pytest.raises(ts.PositionsError, match="outside the tile grid"):
        rope_kv_cache_update(q, k, v, table, positions, *small, slots, workspace=rows,
                             rows_in_workspace=True).sync()
    assert np.all(small[0].numpy() == -1.0) and np.all(small[1].numpy() == -2.0)


def test_q_out_is_allocated_when_left_out(rng):
    q, k, v = fused_qkv(rng, 2, 4, 2, 8, "float32")
    table = rope_cache(8, 8).sync()
    cache_k, cache_v = caches((5, 2, 8), "float32")
    positions, slots = on(np.array([1, 2], np.int32)), on(np.array([3, 0], np.int32))
    got_q, _, _ = rope_kv_cache_update(q, k, v, table, positions, cache_k, cache_v,
                                       slots).sync()
    want_q, _ = rope(q, k, table, positions, q_out=ts.empty((2, 4, 8)).sync(),
                     k_out=ts.empty((2, 2, 8)).sync()).sync()
    assert got_q.shape == (2, 4, 8) and np.array_equal(got_q.numpy(), want_q.numpy())


@pytest.mark.parametrize("slots, words", [  # (named by their heads' rows: slot * 2 + head)
    ([4, 1, 4], r"positions\[4\] = \(8,?\) names the same tile as "
     r"(positions\[0\]|another row)"),
    ([4, 10, 1], r"positions\[2\] = \(20,?\) is outside the tile grid \(20,?\)"),
    ([-1, 2, 3], r"positions\[0\] = \(-2,?\) is outside the tile grid"),
])
def test_repeated_or_outside_slots_write_nothing_not_even_q_out(rng, slots, words):
    q, k, v = fused_qkv(rng, 3, 4, 2, 8, "float32")
    cache_k, cache_v = caches((10, 2, 8), "float32")
    q_out = ts.full((3, 4, 8), 7.0).sync()
    with pytest.raises(ts.PositionsError, match=rf"the indexed partition 'cache_k': {words}.*"
                       "wrote nothing"):
        rope_kv_cache_update(q, k, v, rope_cache(8, 8).sync(), on(np.zeros(3, np.int32)),
                             cache_k, cache_v, on(np.array(slots, np.int32)),
                             q_out=q_out).sync()
    assert np.all(cache_k.numpy() == -1.0) and np.all(cache_v.numpy() == -2.0)
    assert np.all(q_out.numpy() == 7.0)


def test_a_position_outside_the_table_raises(rng):
    q, k, v = fused_qkv(rng, 1, 2, 1, 8, "float32")
    cache_k, cache_v = caches((4, 1, 8), "float32")
    with pytest.raises(ts.IndexOutOfRangeError):
        rope_kv_cache_update(q, k, v, rope_cache(4, 8).sync(), on(np.array([4], np.int32)),
                             cache_k, cache_v, on(np.array([0], np.int32))).sync()


def test_recorded_once_and_replayed_with_new_positions_and_slots(rng):
    """A decode step's use: recorded into a graph, then each replay reads the position and the
    slot of the moment."""
    d, steps = 8, 3
    q, k, v = fused_qkv(rng, 1, 4, 2, d, "float32")
    table = rope_cache(8, d).sync()
    cache_k, cache_v = caches((6, 2, d), "float32")
    q_out = ts.empty((1, 4, d)).sync()
    position, slot = on(np.zeros(1, np.int32)), on(np.zeros(1, np.int32))
    with ts.CudaGraph.scope() as graph:
        graph.record(rope_kv_cache_update(q, k, v, table, position, cache_k, cache_v, slot,
                                          q_out=q_out,
                                          workspace=ts.zeros((1, 2), ts.int32).sync()))
    assert np.all(cache_k.numpy() == -1.0)  # recorded, nothing ran
    keys = ts.empty((1, 2, d)).sync()
    want_q = ts.empty((1, 4, d)).sync()
    for step in range(steps):
        position.copy_(on(np.array([step + 2], np.int32))).sync()
        slot.copy_(on(np.array([5 - step], np.int32))).sync()
        graph.replay()
        rope(q, k, table, position, q_out=want_q, k_out=keys).sync()
        assert np.array_equal(q_out.numpy(), want_q.numpy())
        assert np.array_equal(cache_k.numpy()[5 - step], keys.numpy()[0])
        assert np.array_equal(cache_v.numpy()[5 - step], v.numpy()[0])
    assert np.all(cache_k.numpy()[:6 - steps] == -1.0)


def test_outputs_that_alias_the_inputs_are_refused(rng):
    """q_out over q, or a cache whose memory holds k: a program would read what another one
    writes. Refused before anything runs, nothing written."""
    q, k, v = fused_qkv(rng, 1, 2, 2, 8, "float32")
    table, positions, slots = rope_cache(8, 8).sync(), on([0]), on([1])
    cache_k, cache_v = caches((4, 2, 8), "float32")
    before = q.numpy().copy()
    with pytest.raises(ts.AliasingError, match="q_out and q overlap in memory"):
        rope_kv_cache_update(q, k, v, table, positions, cache_k, cache_v, slots,
                             q_out=q).sync()
    keys_in_cache = cache_k[1:2]  # the keys read from the slot the op writes
    with pytest.raises(ts.AliasingError, match="cache_k and k overlap in memory"):
        rope_kv_cache_update(q, keys_in_cache, v, table, positions, cache_k, cache_v,
                             slots).sync()
    assert np.array_equal(q.numpy(), before) and np.all(cache_k.numpy() == -1.0)


def test_other_paths_to_the_outputs_are_refused_and_a_failed_launch_leaves_them_usable(rng):
    """Attacks a real program makes by accident: ``q_out`` and a cache imported twice over one
    buffer (DLPack), a read-only ``.shared()`` result as a cache; and after a launch refused
    at run time (repeated slots) the same tensors take the next update."""
    q, k, v = fused_qkv(rng, 2, 4, 2, 8, "float32")
    table = rope_cache(8, 8).sync()
    positions, slots = on(np.array([1, 2], np.int32)), on(np.array([3, 0], np.int32))
    base = ts.full((4 * 2 * 8,), -1.0).sync()
    cache_k, cache_v = ts.from_dlpack(base).reshape(4, 2, 8), ts.full((4, 2, 8), -2.0).sync()
    q_out = ts.from_dlpack(base)[:2 * 4 * 8].reshape(2, 4, 8)
    with pytest.raises(ts.AliasingError, match="q_out and cache_k overlap in memory"):
        rope_kv_cache_update(q, k, v, table, positions, cache_k, cache_v, slots,
                             q_out=q_out).sync()
    assert np.all(base.numpy() == -1.0)
    read_only = ts.value(ts.full((4, 2, 8), -1.0).sync()).shared().sync()
    with pytest.raises(ts.BorrowError, match=r"read-only result of \.shared\(\)"):
        rope_kv_cache_update(q, k, v, table, positions, read_only, cache_v, slots).sync()
    assert np.all(read_only.numpy() == -1.0) and np.all(cache_v.numpy() == -2.0)
    q_out = ts.full((2, 4, 8), 7.0).sync()
    with pytest.raises(ts.PositionsError):
        rope_kv_cache_update(q, k, v, table, positions, cache_k, cache_v,
                             on(np.array([3, 3], np.int32)), q_out=q_out).sync()
    rope_kv_cache_update(q, k, v, table, positions, cache_k, cache_v, slots,
                         q_out=q_out).sync()
    assert np.array_equal(cache_v.numpy()[[3, 0]], v.numpy()) and np.all(q_out.numpy() != 7.0)


def test_two_threads_on_one_pair_of_caches_are_refused_never_raced(rng):
    """Two threads update the same caches at their own slots: a launch while the other
    thread's is pending is refused (BorrowError) and retried; every row ends right."""
    import threading
    import time
    q, k, v = fused_qkv(rng, 1, 4, 2, 8, "float32")
    table = rope_cache(16, 8).sync()
    cache_k, cache_v = caches((16, 2, 8), "float32")
    failures: list = []

    def work(slots):
        for slot in slots:
            at = on(np.array([slot], np.int32))
            for _ in range(1000):
                try:
                    rope_kv_cache_update(q, k, v, table, at, cache_k, cache_v, at).sync()
                    break
                except ts.BorrowError:
                    time.sleep(0.001)
            else:
                failures.append(slot)
    threads = [threading.Thread(target=work, args=(range(i, 16, 2),)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    keys = ts.empty((1, 2, 8)).sync()
    for slot in range(16):
        rope(q, k, table, on(np.array([slot], np.int32)), q_out=ts.empty((1, 4, 8)).sync(),
             k_out=keys).sync()
        assert np.array_equal(cache_k.numpy()[slot], keys.numpy()[0])
    assert np.array_equal(cache_v.numpy(), np.repeat(v.numpy(), 16, axis=0))


def test_argument_errors(rng):
    q, k, v = fused_qkv(rng, 2, 4, 2, 8, "float32")
    table = rope_cache(8, 8).sync()
    cache_k, cache_v = caches((6, 2, 8), "float32")
    positions, slots = on(np.array([0, 1], np.int32)), on(np.array([2, 3], np.int32))
    q3, k3, v3 = fused_qkv(rng, 2, 6, 2, 8, "float32")
    cases = [
        (dict(q=q3, k=k3, v=v3),
         r"rope_kv_cache_update: 6 query heads over 2 key/value heads of 8: one launch needs "
         r"a power-of-two head_dim and group"),
        (dict(q_out=ts.empty((2, 8, 4)).sync().permute(0, 2, 1)),
         r"rope_kv_cache_update: q_out is not contiguous"),
        (dict(workspace=ts.zeros((2, 3), ts.int32).sync()), r"workspace"),
        (dict(rows_in_workspace=True),
         "rope_kv_cache_update: rows_in_workspace=True needs the workspace= an earlier call"),
        (dict(cache_v=caches((6, 2, 8), "bfloat16")[1]),
         "rope_kv_cache_update: cache_v has dtype bfloat16, cache_k float32"),
        (dict(slots=on(np.array([0, 1, 2], np.int32))),
         "rope_kv_cache_update: slots has 3 entries for 2 tokens"),
        (dict(positions=on(np.array([0], np.int32))),
         "rope_kv_cache_update: positions has 1 entries for 2 tokens"),
        (dict(layout="bhsd"), "rope_kv_cache_update: layout='bhsd' is not one of"),
        (dict(q_out=ts.empty((2, 4, 4)).sync()), r"q_out"),
        (dict(q_norm=on(np.ones(8, np.float32))),
         "rope_kv_cache_update: q_norm= and k_norm= go together"),
        (dict(cache_k=ts.zeros((2, 6, 2, 8)).sync().permute(1, 0, 2, 3),
              cache_v=ts.zeros((6, 2, 2, 8)).sync()),
         "rope_kv_cache_update: cache_k is not contiguous"),
    ]
    base = dict(q=q, k=k, v=v, cos_sin_cache=table, positions=positions, cache_k=cache_k,
                cache_v=cache_v, slots=slots)
    for change, words in cases:
        with pytest.raises(ts.ArgumentError, match=words) as info:
            rope_kv_cache_update(**{**base, **change})
        assert "test_kernels_rope_kv.py" in str(info.value)
    assert np.all(cache_k.numpy() == -1.0)


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(1, 8 * 8, generator=gen)
    q, k, v = (qkv[:, :32].reshape(1, 4, 8), qkv[:, 32:48].reshape(1, 2, 8),
               qkv[:, 48:].reshape(1, 2, 8))
    table = torch.from_numpy(rope_cache(8, 8).sync().numpy())
    cache_k, cache_v = torch.full((4, 2, 8), -1.0), torch.full((4, 2, 8), -2.0)
    got_q, got_k, got_v = rope_kv_cache_update(q, k, v, table, torch.tensor([3]), cache_k,
                                               cache_v, torch.tensor([2]))
    assert got_k is cache_k and got_v is cache_v and isinstance(got_q, torch.Tensor)
    assert torch.equal(cache_v[2], v[0]) and bool((cache_k[[0, 1, 3]] == -1.0).all())
    want_q, want_k = rope(q, k, table, torch.tensor([3]), q_out=torch.empty(1, 4, 8),
                          k_out=torch.empty(1, 2, 8))
    assert torch.equal(got_q, want_q) and torch.equal(cache_k[2], want_k[0])
