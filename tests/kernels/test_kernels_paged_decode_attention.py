"""tilesafe.kernels' ``paged_decode_attention`` (one query token against a paged KV cache,
split-K) on the default device: against float64 numpy attention and against the contiguous
``decode_attention`` over the same keys (the paged pool is the contiguous cache scattered
through a random permutation of blocks); the block ids and lengths read on the device; a block
id outside the pool and a length past the table raising; every ArgumentError of its checks."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import (decode_attention, kv_cache_update, paged_decode_attention,
                              paged_decode_attention_workspace)
from tilesafe.kernels.paged_decode_attention import _launch_paged, key_tile

from conftest import poisoned

NP_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: f16 output rounding (2**-11 relative) and f16/bf16 probabilities in the second mma
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}


def reference(q, k, v, lengths, scale=None):
    """Decode attention in float64: q (B, Hq, D), k/v (B, Hkv, S, D), sequence b's first
    ``lengths[b]`` keys (0 gives zeros)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = np.einsum("bhd,bhkd->bhk", q, k) * scale
    keep = np.arange(k.shape[2])[None, None, :] < np.asarray(lengths)[:, None, None]
    s = np.where(keep, s, -np.inf)
    top = s.max(-1, keepdims=True)
    p = np.where(keep, np.exp(s - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = p.sum(-1, keepdims=True)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    return np.einsum("bhk,bhkd->bhd", p, v)


def _tensor(array):
    return ts.tensor(array).sync()


def _assert_close(got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    err = np.max(np.abs(got - want))
    assert err <= TOLERANCE[dtype], f"max abs error {err} vs float64"


def paged(rng, cache, block_size, spare=3, fill=np.nan):
    """The contiguous ``cache`` (B, Hkv, S, D), S a multiple of ``block_size``, scattered into
    a pool (num_blocks, block_size, Hkv, D) through a random permutation of its blocks (with
    ``spare`` blocks no sequence owns, filled with ``fill``): (pool, block_table)."""
    batch, heads, max_len, d = cache.shape
    per_seq = max_len // block_size
    num_blocks = batch * per_seq + spare
    table = rng.permutation(num_blocks)[:batch * per_seq].reshape(batch, per_seq)
    pool = np.full((num_blocks, block_size, heads, d), fill, dtype=cache.dtype)
    blocks = cache.reshape(batch, heads, per_seq, block_size, d).transpose(0, 2, 3, 1, 4)
    pool[table] = blocks
    return pool, table.astype(np.int32)


def _problem(rng, dtype, batch, q_heads, kv_heads, max_len, d, lengths):
    """Queries and contiguous caches, the keys past each length NaN (never read)."""
    q = rng.standard_normal((batch, q_heads, d)).astype(NP_DTYPES[dtype])
    k = rng.standard_normal((batch, kv_heads, max_len, d)).astype(NP_DTYPES[dtype])
    v = rng.standard_normal((batch, kv_heads, max_len, d)).astype(NP_DTYPES[dtype])
    want = reference(q, k, v, lengths)
    for b, n in enumerate(lengths):
        k[b, :, n:] = np.nan
        v[b, :, n:] = np.nan
    return q, k, v, want


PAGED_CASES = [
    # dtype, batch, q_heads, kv_heads, max_len, d, block_size, lengths, num_splits
    pytest.param("float16", 4, 6, 2, 160, 64, 16, [0, 1, 160, 77], None,
                 id="f16-gqa3-block16-default-splits-d64"),
    pytest.param("bfloat16", 3, 4, 4, 128, 128, 64, [100, 0, 65], 3,
                 id="bf16-mha-block64-3-splits-d128"),
    pytest.param("float16", 2, 8, 2, 96, 64, 32, [96, 33], 4, id="f16-gqa4-block32-4-splits"),
    pytest.param("bfloat16", 2, 8, 1, 72, 64, 24, [50, 24], 2,
                 id="bf16-gqa8-block24-not-a-power-of-two"),
    pytest.param("float16", 2, 2, 2, 64, 128, 1, [64, 5], None, id="f16-block1"),
]


@pytest.mark.parametrize("dtype, batch, q_heads, kv_heads, max_len, d, block_size, lengths, "
                         "num_splits", PAGED_CASES)
def test_paged_decode_attention_matches_float64_and_the_contiguous_cache(
        rng, dtype, batch, q_heads, kv_heads, max_len, d, block_size, lengths, num_splits):
    q, k, v, want = _problem(rng, dtype, batch, q_heads, kv_heads, max_len, d, lengths)
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(7), x, block_size)
                                    for x in (k, v))
    seq_lens = _tensor(np.array(lengths, dtype=np.int32))
    got = paged_decode_attention(_tensor(q), _tensor(k_pool), _tensor(v_pool), seq_lens,
                                 _tensor(table), num_splits=num_splits).sync()
    assert got.dtype.name == dtype and tuple(got.shape) == (batch, q_heads, d)
    _assert_close(got.numpy(), want, dtype)
    contiguous = decode_attention(_tensor(q), _tensor(k), _tensor(v), seq_lens,
                                  num_splits=num_splits).sync()
    if key_tile(_launch_paged.configs[0]["BN"], block_size)[0] == 32:
        # the contiguous path's key tile (its first config's): the same tiles in the same
        # order, the same result bit for bit
        assert np.array_equal(got.numpy(), contiguous.numpy())
    else:
        _assert_close(got.numpy(), contiguous.numpy().astype(np.float64), dtype)


@pytest.mark.parametrize("widest, block_size, want", [
    (32, 16, (32, True)),      # a tile of two blocks
    (128, 16, (128, True)),    # of eight
    (32, 256, (32, True)),     # several tiles per block
    (64, 48, (16, True)),      # the largest power of two dividing the block
    (32, 24, (32, False)),     # no power of two of 16 or more divides 24: gathered keys
    (128, 1, (128, False)),
])
def test_key_tile_follows_the_block_size(widest, block_size, want):
    assert key_tile(widest, block_size) == want


@pytest.mark.parametrize("block_size", [16, 128])
def test_every_key_tile_reads_the_paged_cache(rng, block_size):
    """Each tuning config (key tiles of 32-128: inside one block, or spanning several) gives
    the float64 result."""
    lengths = [256, 130, 1]
    q, k, v, want = _problem(rng, "float16", 3, 4, 2, 256, 64, lengths)
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(3), x, block_size)
                                    for x in (k, v))
    q3 = _tensor(q).reshape(3 * 2, 2, 64)
    for config in {c["BN"]: c for c in _launch_paged.configs}.values():
        got = _launch_paged.fn(q3, _tensor(k_pool), _tensor(v_pool),
                               _tensor(np.array(lengths, np.int32)), _tensor(table), None,
                               (3, 4, 64), 64 ** -0.5 * 1.4426950408889634, 2, 3,
                               config=config).sync()
        _assert_close(got.numpy(), want, "float16")


def test_table_entries_past_the_length_are_never_read(rng):
    """A sequence's table row past its last block holds -1 and ids past the pool: unread."""
    lengths = [40, 17]
    q, k, v, want = _problem(rng, "bfloat16", 2, 4, 2, 64, 64, lengths)
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(5), x, 16) for x in (k, v))
    table[0, 3:] = -1
    table[1, 2:] = 10_000
    got = paged_decode_attention(_tensor(q), _tensor(k_pool), _tensor(v_pool),
                                 _tensor(np.array(lengths, np.int32)), _tensor(table),
                                 num_splits=2).sync()
    _assert_close(got.numpy(), want, "bfloat16")


def test_reads_what_kv_cache_update_writes_into_a_paged_cache(rng):
    """Tokens written by ``kv_cache_update(layout="nhd")`` at slots ``blk * block_size + j``
    of the blocks a table gives are the keys the attention reads."""
    batch, q_heads, kv_heads, d, block_size, num_blocks = 2, 4, 2, 64, 8, 7
    table = np.array([[5, 1, 3], [0, 6, 2]], np.int32)
    lengths = [20, 9]
    k_pool = ts.full((num_blocks, block_size, kv_heads, d), np.nan, ts.float16).sync()
    v_pool = ts.full((num_blocks, block_size, kv_heads, d), np.nan, ts.float16).sync()
    k = rng.standard_normal((batch, kv_heads, 24, d)).astype(np.float16)
    v = rng.standard_normal((batch, kv_heads, 24, d)).astype(np.float16)
    for b, n in enumerate(lengths):
        positions = np.arange(n)
        slots = (table[b, positions // block_size] * block_size + positions % block_size)
        kv_cache_update(k_pool, v_pool, _tensor(np.ascontiguousarray(k[b, :, :n].swapaxes(0, 1))),
                        _tensor(np.ascontiguousarray(v[b, :, :n].swapaxes(0, 1))),
                        _tensor(slots.astype(np.int32)), layout="nhd").sync()
    q = rng.standard_normal((batch, q_heads, d)).astype(np.float16)
    got = paged_decode_attention(_tensor(q), k_pool, v_pool,
                                 _tensor(np.array(lengths, np.int32)), _tensor(table)).sync()
    _assert_close(got.numpy(), reference(q, k, v, lengths), "float16")


def test_writes_out_and_reads_lengths_and_table_on_the_device(rng):
    q, k, v, _ = _problem(rng, "float16", 2, 8, 2, 96, 64, [96, 96])
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(9), x, 32) for x in (k, v))
    inputs = [_tensor(x) for x in (q, k_pool, v_pool)]
    seq_lens, table_t = _tensor(np.array([96, 33], np.int32)), _tensor(table)
    out = poisoned((2, 8, 64), ts.float16)
    for lengths in ([96, 33], [7, 89]):  # tensors changed in place between calls
        seq_lens.copy_(_tensor(np.array(lengths, np.int32))).sync()
        result = paged_decode_attention(*inputs, seq_lens, table_t, scale=0.2, num_splits=4,
                                        out=out).sync()
        assert result is out
        _assert_close(out.numpy(), reference(q, k, v, lengths, scale=0.2), "float16")
    swapped = table[::-1].copy()  # sequence 0 now reads sequence 1's blocks and back
    table_t.copy_(_tensor(swapped)).sync()
    paged_decode_attention(*inputs, seq_lens, table_t, scale=0.2, num_splits=4, out=out).sync()
    _assert_close(out.numpy(), reference(q, k[::-1], v[::-1], [7, 89], scale=0.2), "float16")


def test_with_a_workspace_records_into_a_graph(rng):
    """With ``out=`` and a workspace the two launches record into a graph; each replay reads
    the lengths and block table of the moment."""
    q, k, v, _ = _problem(rng, "float16", 2, 8, 2, 96, 64, [96, 96])
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(11), x, 16) for x in (k, v))
    qt, kt, vt, table_t = (_tensor(x) for x in (q, k_pool, v_pool, table))
    out = poisoned((2, 8, 64), ts.float16)
    workspace = paged_decode_attention_workspace(qt, kt, table_t, num_splits=3).sync()
    seq_lens = _tensor(np.array([96, 33], np.int32))
    with ts.CudaGraph.scope() as graph:
        graph.record(paged_decode_attention(qt, kt, vt, seq_lens, table_t, num_splits=3,
                                            out=out, workspace=workspace))
    assert np.isnan(out.numpy().astype(np.float32)).all()  # recorded, nothing ran
    for lengths in ([96, 33], [5, 61]):
        seq_lens.copy_(_tensor(np.array(lengths, np.int32))).sync()
        graph.replay()
        _assert_close(out.numpy(), reference(q, k, v, lengths), "float16")
    small = ts.zeros((10,)).sync()
    with pytest.raises(ts.ArgumentError, match=r"workspace holds 10 float32 values; this "
                       r"call needs \d+"):
        paged_decode_attention(qt, kt, vt, seq_lens, table_t, num_splits=3, workspace=small)


@pytest.mark.parametrize("block_size", [16, 64, 24])  # a tile a block, tiles, gathered keys
@pytest.mark.parametrize("bad", [-1, 9])
def test_a_block_id_outside_the_pool_is_an_index_error(rng, block_size, bad):
    q, k, v, _ = _problem(rng, "float16", 2, 4, 1, 192, 64, [128, 70])
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(1), x, block_size, spare=1)
                                    for x in (k, v))
    table[1, 70 // block_size] = bad if bad < 0 else k_pool.shape[0] + bad
    blocks = k_pool.shape[0]
    with pytest.raises(ts.IndexOutOfRangeError, match=r"paged_decode_attention_\w+_kernel.*("
                       rf"partition index \(-?\d+, \d+, 0, 0\) is outside the tile grid "
                       rf"\({blocks}, |gather index -?\d+ along axis 0 is outside \[0, "
                       rf"{blocks}\))"):
        paged_decode_attention(_tensor(q), _tensor(k_pool), _tensor(v_pool),
                               _tensor(np.array([128, 70], np.int32)), _tensor(table)).sync()


def test_a_length_past_the_table_is_an_index_error(rng):
    q, k, v, _ = _problem(rng, "float16", 1, 4, 1, 64, 64, [64])
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(2), x, 16, spare=4)
                                    for x in (k, v))
    with pytest.raises(ts.IndexOutOfRangeError, match=r"gather index 4 along axis 1 is "
                       r"outside \[0, 4\)"):
        paged_decode_attention(_tensor(q), _tensor(k_pool), _tensor(v_pool),
                               _tensor(np.array([65], np.int32)), _tensor(table)).sync()


@pytest.mark.parametrize("block_size", [16, 24])  # the block-tile kernel, the gather kernel
@pytest.mark.parametrize("length", [2**31 - 1, 2**31 - 16])
def test_a_length_near_the_int32_limit_is_an_index_error(rng, block_size, length):
    """The key tile count ``(seq_len + BN - 1) // BN`` wraps in int32 for a length this close
    to 2**31: no tile was read, so no read failed and the call gave zeros for a length far
    past the table. The last key's table entry is read first, whatever the length."""
    q, k, v, _ = _problem(rng, "float16", 1, 4, 1, 4 * block_size, 64, [4 * block_size])
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(4), x, block_size, spare=1)
                                    for x in (k, v))
    entry = (length - 1) // block_size
    with pytest.raises(ts.IndexOutOfRangeError, match=rf"gather index {entry} along axis 1 is "
                       r"outside \[0, 4\)"):
        paged_decode_attention(_tensor(q), _tensor(k_pool), _tensor(v_pool),
                               _tensor(np.array([length], np.int32)), _tensor(table)).sync()


@pytest.mark.parametrize("block_size", [16, 24])
@pytest.mark.parametrize("length", [-1, -2**31])
def test_a_negative_length_gives_zeros(rng, block_size, length):
    """With several splits, a length of -2**31 made the later splits read the table at a
    negative index (an IndexOutOfRangeError for a length documented to give zeros)."""
    q, k, v, _ = _problem(rng, "float16", 1, 4, 1, 4 * block_size, 64, [4 * block_size])
    (k_pool, table), (v_pool, _) = (paged(np.random.default_rng(4), x, block_size)
                                    for x in (k, v))
    got = paged_decode_attention(_tensor(q), _tensor(k_pool), _tensor(v_pool),
                                 _tensor(np.array([length], np.int32)), _tensor(table),
                                 num_splits=3)
    assert np.array_equal(got.sync().numpy(), np.zeros((1, 4, 64), np.float16))


# --- misuse ----------------------------------------------------------------------------------

def _inputs(q_shape=(2, 4, 64), pool_shape=(6, 16, 2, 64), table_shape=(2, 3), dtype=ts.float16,
            lens=None, table=None, v_shape=None):
    lens = ts.tensor(np.full(q_shape[0], 3, np.int32)).sync() if lens is None else lens
    table = ts.zeros(table_shape, ts.int32).sync() if table is None else table
    return (ts.zeros(q_shape, dtype).sync(), ts.zeros(pool_shape, dtype).sync(),
            ts.zeros(v_shape or pool_shape, dtype).sync(), lens, table)


MISUSE = [
    (lambda: paged_decode_attention(*_inputs(table=ts.zeros((2, 3), ts.int64).sync())),
     r"paged_decode_attention: block_table must be an int32 tensor of shape \(2, 3\) "
     r"\(batch, max_blocks_per_seq\), got int64 \(2, 3\)"),
    (lambda: paged_decode_attention(*_inputs(table=ts.zeros((2, 3), ts.float32).sync())),
     r"paged_decode_attention: block_table must be an int32 tensor .* got float32"),
    (lambda: paged_decode_attention(*_inputs(table_shape=(3, 3))),
     r"paged_decode_attention: block_table must be an int32 tensor of shape \(2, 3\) "
     r"\(batch, max_blocks_per_seq\), got int32 \(3, 3\)"),
    (lambda: paged_decode_attention(*_inputs(table_shape=(6,))),
     r"paged_decode_attention: block_table must have 2 dimensions \(batch, "
     r"max_blocks_per_seq\), got shape \(6,\)"),
    (lambda: paged_decode_attention(*_inputs()[:4], np.zeros((2, 3), np.int32)),
     r"paged_decode_attention: block_table must be a tilesafe tensor"),
    (lambda: paged_decode_attention(*_inputs(pool_shape=(2, 2, 16, 64, 1))),
     r"paged_decode_attention: k_cache must have 4 dimensions \(num_blocks, block_size, "
     r"kv_heads, head_dim\)"),
    (lambda: paged_decode_attention(*_inputs(dtype=ts.float32)),
     "paged_decode_attention: q has dtype float32; supported: float16, bfloat16"),
    (lambda: paged_decode_attention(*_inputs(v_shape=(6, 8, 2, 64))),
     r"paged_decode_attention: k_cache has shape \(6, 16, 2, 64\), v_cache \(6, 8, 2, 64\)"),
    (lambda: paged_decode_attention(*_inputs(pool_shape=(6, 16, 2, 128))),
     r"paged_decode_attention: q has shape \(2, 4, 64\), the caches \(6, 16, 2, 128\) "
     r"\(num_blocks, block_size, kv_heads, head_dim\): the head dimensions must agree"),
    (lambda: paged_decode_attention(*_inputs(q_shape=(2, 3, 64))),
     "paged_decode_attention: q has 3 heads, k and v 2: the query heads must be a multiple"),
    (lambda: paged_decode_attention(*_inputs(pool_shape=(6, 0, 2, 64))),
     r"paged_decode_attention: empty input: q \(2, 4, 64\), caches \(6, 0, 2, 64\), "
     r"block_table \(2, 3\)"),
    (lambda: paged_decode_attention(*_inputs(table_shape=(2, 0))),
     r"paged_decode_attention: empty input: .* block_table \(2, 0\)"),
    (lambda: paged_decode_attention(*_inputs(lens=ts.zeros((2,), ts.int64).sync())),
     r"paged_decode_attention: seq_lens must be an int32 tensor of shape \(2,\) \(batch,\), "
     r"got int64 \(2,\)"),
    (lambda: paged_decode_attention(*_inputs(), num_splits=0),
     r"paged_decode_attention: num_splits must be an int in 1..1024, got 0"),
    (lambda: paged_decode_attention(*_inputs(), scale=0.0),
     r"paged_decode_attention: scale must be a finite positive number, got 0.0"),
    (lambda: paged_decode_attention(*_inputs(), workspace=ts.zeros((8,), ts.int32).sync()),
     r"paged_decode_attention: workspace must be a float32 tilesafe tensor"),
    (lambda: paged_decode_attention(*_inputs(),
                                    out=ts.zeros((2, 4, 32), ts.float16).sync()),
     r"paged_decode_attention: out= has shape \(2, 4, 32\) and dtype float16; this call "
     r"writes shape \(2, 4, 64\), dtype float16"),
]


@pytest.mark.parametrize("call, message", MISUSE)
def test_paged_decode_attention_refuses_bad_arguments(call, message):
    with pytest.raises(ts.ArgumentError, match=message) as info:
        call()
    assert info.value.location.file == __file__
    assert info.value.hint
