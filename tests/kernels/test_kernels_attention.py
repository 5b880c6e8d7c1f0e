"""tilesafe.kernels' attention: ``flash_attention`` (prefill) and ``decode_attention`` (one
token against a KV cache, split-K) against float64 numpy attention, on the default device;
every ArgumentError of their argument checks."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import decode_attention, flash_attention
from tilesafe.kernels.decode_attention import choose_splits

from conftest import poisoned

NP_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: f16 output rounding (2**-11 relative) and f16/bf16 probabilities in the second mma
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}


def reference(q, k, v, *, causal=False, scale=None, lengths=None):
    """Attention in float64: q (B, Hq, Sq, D), k/v (B, Hkv, Skv, D); causal bottom-right
    aligned; ``lengths`` (B,) limits each sequence's keys (0 gives zeros)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    seq_q, seq_kv = s.shape[-2:]
    keep = np.ones(s.shape, dtype=bool)
    if causal:
        keep &= np.arange(seq_kv)[None, :] <= np.arange(seq_q)[:, None] + seq_kv - seq_q
    if lengths is not None:
        keep &= np.arange(seq_kv)[None, None, None, :] < np.asarray(lengths)[:, None, None, None]
    s = np.where(keep, s, -np.inf)
    top = s.max(-1, keepdims=True)
    p = np.where(keep, np.exp(s - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = p.sum(-1, keepdims=True)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def _random(rng, shape, dtype):
    return rng.standard_normal(shape).astype(NP_DTYPES[dtype])


def _tensor(array):
    return ts.tensor(array).sync()


def _assert_close(got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    err = np.max(np.abs(got - want))
    assert err <= TOLERANCE[dtype], f"max abs error {err} vs float64"


# --- flash_attention -------------------------------------------------------------------------

FLASH_CASES = [
    # dtype, batch, q_heads, kv_heads, S_q, S_kv, d, causal
    pytest.param("float16", 2, 4, 2, 37, 37, 64, True, id="f16-gqa2-causal-odd-d64"),
    pytest.param("float16", 1, 2, 2, 150, 150, 128, True, id="f16-causal-multitile-d128"),
    pytest.param("bfloat16", 1, 4, 1, 20, 90, 64, False, id="bf16-gqa4-sq<skv-d64"),
    pytest.param("bfloat16", 1, 2, 1, 30, 100, 128, True, id="bf16-causal-bottom-right-d128"),
]


@pytest.mark.parametrize("dtype, batch, q_heads, kv_heads, seq_q, seq_kv, d, causal",
                         FLASH_CASES)
def test_flash_attention_matches_float64(rng, dtype, batch, q_heads, kv_heads, seq_q, seq_kv,
                                         d, causal):
    q = _random(rng, (batch, q_heads, seq_q, d), dtype)
    k = _random(rng, (batch, kv_heads, seq_kv, d), dtype)
    v = _random(rng, (batch, kv_heads, seq_kv, d), dtype)
    out = flash_attention(_tensor(q), _tensor(k), _tensor(v), causal=causal).sync()
    assert out.dtype.name == dtype and tuple(out.shape) == (batch, q_heads, seq_q, d)
    _assert_close(out.numpy(), reference(q, k, v, causal=causal), dtype)


def test_flash_attention_writes_out_with_a_scale(rng):
    q = _random(rng, (2, 2, 40, 64), "bfloat16")
    k = _random(rng, (2, 1, 70, 64), "bfloat16")
    v = _random(rng, (2, 1, 70, 64), "bfloat16")
    out = poisoned((2, 2, 40, 64), ts.bfloat16)
    result = flash_attention(_tensor(q), _tensor(k), _tensor(v), scale=0.3, out=out).sync()
    assert result is out
    _assert_close(out.numpy(), reference(q, k, v, scale=0.3), "bfloat16")


def test_flash_attention_scores_below_f32s_normal_range_drop_out(rng):
    """Exponentials in f32's subnormal range (base-2 logits -127 ... -149, where the kernel's
    exponentials flush to zero) and below it, beside large values at those keys: the output
    is still the float64 one (their weights times the values are far below f16's rounding)."""
    logits = np.array([0.0, -126.5, -127.5, -130.0, -140.0, -148.0, -10.0, -200.0] * 9)
    d = 64
    q = np.zeros((1, 1, 3, d), np.float16)
    q[..., 0] = 1.0
    k = np.zeros((1, 1, logits.size, d), np.float16)
    k[0, 0, :, 0] = logits * np.log(2.0)
    v = rng.standard_normal((1, 1, logits.size, d)).astype(np.float16)
    v[0, 0, (logits < -120) & (logits > -150)] = 60000.0
    out = flash_attention(_tensor(q), _tensor(k), _tensor(v), scale=1.0).sync()
    got = out.numpy()
    assert np.isfinite(got).all()
    _assert_close(got, reference(q, k, v, scale=1.0), "float16")


def test_flash_attention_reads_an_engines_token_major_layout(rng):
    """(tokens, heads, d) buffers viewed as (1, heads, tokens, d): no copy."""
    q = _random(rng, (37, 4, 64), "float16")
    k = _random(rng, (37, 2, 64), "float16")
    v = _random(rng, (37, 2, 64), "float16")
    views = [_tensor(x).reshape((1,) + x.shape).permute((0, 2, 1, 3)) for x in (q, k, v)]
    out = flash_attention(*views, causal=True).sync()
    want = reference(*(x.transpose(1, 0, 2)[None] for x in (q, k, v)), causal=True)
    _assert_close(out.numpy(), want, "float16")


def test_causal_flash_attention_never_reads_key_tiles_above_the_diagonal(rng):
    """Values past row block 0's last visible key tile are NaN: rows of block 0 (128 rows,
    64-key tiles) stay exact, so those tiles were skipped, not multiplied by zero."""
    q = _random(rng, (1, 2, 150, 128), "float16")
    k = _random(rng, (1, 2, 150, 128), "float16")
    v = _random(rng, (1, 2, 150, 128), "float16")
    want = reference(q, k, v, causal=True)
    v[:, :, 128:] = np.nan
    out = flash_attention(_tensor(q), _tensor(k), _tensor(v), causal=True).sync().numpy()
    _assert_close(out[:, :, :128], want[:, :, :128], "float16")
    assert np.isnan(out[:, :, 128:].astype(np.float32)).all()


# --- decode_attention ------------------------------------------------------------------------

DECODE_CASES = [
    # dtype, batch, q_heads, kv_heads, max_len, d, lengths, num_splits
    pytest.param("float16", 4, 6, 2, 150, 64, [1, 64, 150, 77], None,
                 id="f16-gqa3-default-splits-d64"),
    pytest.param("bfloat16", 3, 4, 4, 100, 128, [100, 0, 65], 3, id="bf16-mha-3-splits-d128"),
    pytest.param("float16", 2, 8, 2, 90, 64, [90, 33], 4, id="f16-gqa4-4-splits-d64"),
]


@pytest.mark.parametrize("dtype, batch, q_heads, kv_heads, max_len, d, lengths, num_splits",
                         DECODE_CASES)
def test_decode_attention_matches_float64(rng, dtype, batch, q_heads, kv_heads, max_len, d,
                                          lengths, num_splits):
    q = _random(rng, (batch, q_heads, d), dtype)
    k = _random(rng, (batch, kv_heads, max_len, d), dtype)
    v = _random(rng, (batch, kv_heads, max_len, d), dtype)
    want = reference(q[:, :, None], k, v, lengths=lengths)[:, :, 0]
    for b, n in enumerate(lengths):  # what lies past a length is never used
        k[b, :, n:] = np.nan
        v[b, :, n:] = np.nan
    seq_lens = _tensor(np.array(lengths, dtype=np.int32))
    out = decode_attention(_tensor(q), _tensor(k), _tensor(v), seq_lens,
                           num_splits=num_splits).sync()
    assert out.dtype.name == dtype and tuple(out.shape) == (batch, q_heads, d)
    _assert_close(out.numpy(), want, dtype)


def test_decode_attention_reads_a_token_major_cache_through_a_permuted_view(rng):
    """A (batch, max_len, kv_heads, d) cache (kv_cache_update's "nhd" layout) viewed as
    (batch, kv_heads, max_len, d): strided keys, the same result bit for bit as the
    head-major copy of the same cache."""
    batch, q_heads, kv_heads, max_len, d = 3, 8, 2, 70, 64
    q = _random(rng, (batch, q_heads, d), "bfloat16")
    k = _random(rng, (batch, max_len, kv_heads, d), "bfloat16")
    v = _random(rng, (batch, max_len, kv_heads, d), "bfloat16")
    lengths = np.array([70, 1, 33], np.int32)
    heads_first = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (k, v)]
    want = decode_attention(_tensor(q), *map(_tensor, heads_first), _tensor(lengths),
                            num_splits=4).sync()
    kt, vt = _tensor(k).permute((0, 2, 1, 3)), _tensor(v).permute((0, 2, 1, 3))
    assert not kt.is_contiguous
    got = decode_attention(_tensor(q), kt, vt, _tensor(lengths), num_splits=4).sync()
    assert np.array_equal(got.numpy(), want.numpy())
    _assert_close(got.numpy(), reference(q[:, :, None], *heads_first,
                                         lengths=list(lengths))[:, :, 0], "bfloat16")


def test_decode_attention_writes_out_and_reads_lengths_on_the_device(rng):
    q = _random(rng, (2, 8, 64), "float16")
    k = _random(rng, (2, 2, 90, 64), "float16")
    v = _random(rng, (2, 2, 90, 64), "float16")
    out = poisoned((2, 8, 64), ts.float16)
    inputs = [_tensor(x) for x in (q, k, v)]
    for lengths in ([90, 33], [7, 89]):  # one lengths tensor changed in place between calls
        seq_lens = _tensor(np.array(lengths, dtype=np.int32))
        result = decode_attention(*inputs, seq_lens, scale=0.2, num_splits=4, out=out).sync()
        assert result is out
        want = reference(q[:, :, None], k, v, scale=0.2, lengths=lengths)[:, :, 0]
        _assert_close(out.numpy(), want, "float16")


def test_decode_attention_with_a_workspace_records_into_a_graph(rng):
    """With ``out=`` and a workspace the two launches record into a graph; each replay reads
    the lengths of the moment (changed in place between replays)."""
    from tilesafe.kernels import decode_attention_workspace
    q = _random(rng, (2, 8, 64), "float16")
    k = _random(rng, (2, 2, 90, 64), "float16")
    v = _random(rng, (2, 2, 90, 64), "float16")
    qt, kt, vt = (_tensor(x) for x in (q, k, v))
    out = poisoned((2, 8, 64), ts.float16)
    workspace = decode_attention_workspace(qt, kt, num_splits=3).sync()
    seq_lens = _tensor(np.array([90, 33], dtype=np.int32))
    with ts.CudaGraph.scope() as graph:
        graph.record(decode_attention(qt, kt, vt, seq_lens, num_splits=3, out=out,
                                      workspace=workspace))
    assert np.isnan(out.numpy().astype(np.float32)).all()  # recorded, nothing ran
    for lengths in ([90, 33], [5, 61]):
        seq_lens.copy_(_tensor(np.array(lengths, dtype=np.int32))).sync()
        graph.replay()
        want = reference(q[:, :, None], k, v, lengths=lengths)[:, :, 0]
        _assert_close(out.numpy(), want, "float16")
    small = ts.zeros((10,)).sync()
    with pytest.raises(ts.ArgumentError, match=r"workspace holds 10 float32 values; this "
                       r"call needs \d+"):
        decode_attention(qt, kt, vt, seq_lens, num_splits=3, workspace=small)


def test_decode_attention_refuses_an_out_over_its_workspace_before_writing_anything(rng):
    """An ``out=`` that overlaps the workspace (or an input) is refused before the first of
    the two launches runs: the merge's own check would come after the partial launch had
    written the workspace, and with it ``out``."""
    from tilesafe.kernels import decode_attention_workspace, paged_decode_attention
    q = _tensor(_random(rng, (1, 2, 64), "float16"))
    k = _tensor(_random(rng, (1, 2, 32, 64), "float16"))
    v = _tensor(_random(rng, (1, 2, 32, 64), "float16"))
    seq_lens = _tensor(np.array([32], dtype=np.int32))
    size = decode_attention_workspace(q, k, num_splits=2).sync().size
    raw = np.full(size + 64, 7.0, np.float32)
    workspace = ts.from_dlpack(raw[:size])
    out = ts.from_dlpack(raw[:64].view(np.float16).reshape(1, 2, 64))  # (the workspace's start)
    with pytest.raises(ts.AliasingError, match="decode_attention: out and workspace overlap "
                       "in memory, and out is written"):
        decode_attention(q, k, v, seq_lens, num_splits=2, workspace=workspace, out=out)
    assert (raw == 7.0).all()
    with pytest.raises(ts.AliasingError, match="out and q overlap"):
        decode_attention(q, k, v, seq_lens, out=q)
    pool_k = _tensor(_random(rng, (2, 16, 2, 64), "float16"))
    pool_v = _tensor(_random(rng, (2, 16, 2, 64), "float16"))
    table = _tensor(np.array([[1, 0]], dtype=np.int32))
    with pytest.raises(ts.AliasingError, match="paged_decode_attention: out and v_cache "
                       "overlap"):
        paged_decode_attention(q, pool_k, pool_v, seq_lens, table,
                               out=pool_v[0, 0].reshape(1, 2, 64))


def test_decode_attention_length_past_the_cache_is_an_index_error(rng):
    q, k = _random(rng, (1, 4, 64), "float16"), _random(rng, (1, 1, 90, 64), "float16")
    seq_lens = _tensor(np.array([91], dtype=np.int32))
    with pytest.raises(ts.IndexOutOfRangeError, match="gather index 90 along axis 2 is "
                       r"outside \[0, 90\)"):
        decode_attention(_tensor(q), _tensor(k), _tensor(k), seq_lens).sync()


@pytest.mark.parametrize("programs, max_len, block, sms, want", [
    (1, 32768, 64, 132, 64),      # one sequence, one head: as many splits as allowed
    (8, 1024, 64, 132, 16),       # capped by the key tiles
    (32, 32768, 64, 132, 8),      # 2 programs per SM (9), rounded down to a power of two
    (512, 32768, 64, 132, 1),     # the batch fills the GPU
    (4, 10, 64, 132, 1),          # one key tile
])
def test_split_count_follows_batch_against_the_sm_count(programs, max_len, block, sms, want):
    assert choose_splits(programs, max_len, block, sms) == want


# --- misuse ----------------------------------------------------------------------------------

def _flash_inputs(q_shape=(1, 2, 8, 64), kv_shape=(1, 1, 8, 64), dtype=ts.float16,
                  v_shape=None, k_dtype=None):
    return (ts.zeros(q_shape, dtype).sync(), ts.zeros(kv_shape, k_dtype or dtype).sync(),
            ts.zeros(v_shape or kv_shape, dtype).sync())


FLASH_MISUSE = [
    (lambda: flash_attention(np.zeros((1, 2, 8, 64)), *_flash_inputs()[1:]),
     r"flash_attention: q must be a tilesafe tensor \(batch, heads, seq, head_dim\), got "
     "ndarray"),
    (lambda: flash_attention(*_flash_inputs(q_shape=(2, 8, 64))),
     r"flash_attention: q must have 4 dimensions \(batch, heads, seq, head_dim\), got shape "
     r"\(2, 8, 64\)"),
    (lambda: flash_attention(*_flash_inputs(dtype=ts.float32)),
     "flash_attention: q has dtype float32; supported: float16, bfloat16"),
    (lambda: flash_attention(*_flash_inputs(k_dtype=ts.bfloat16)),
     "flash_attention: k has dtype bfloat16, q has float16"),
    (lambda: flash_attention(*_flash_inputs(v_shape=(1, 1, 9, 64))),
     r"flash_attention: k has shape \(1, 1, 8, 64\), v \(1, 1, 9, 64\)"),
    (lambda: flash_attention(*_flash_inputs(kv_shape=(2, 1, 8, 64))),
     r"flash_attention: q has shape \(1, 2, 8, 64\), k and v \(2, 1, 8, 64\): batch and head "
     "dimension must agree"),
    (lambda: flash_attention(*_flash_inputs((1, 2, 8, 32), (1, 1, 8, 32))),
     "flash_attention: head dimension 32 is not supported; supported: 64, 128"),
    (lambda: flash_attention(*_flash_inputs((1, 3, 8, 64), (1, 2, 8, 64))),
     "flash_attention: q has 3 heads, k and v 2: the query heads must be a multiple of the "
     "key/value heads"),
    (lambda: flash_attention(*_flash_inputs((1, 2, 0, 64))),
     r"flash_attention: empty input: q \(1, 2, 0, 64\), k \(1, 1, 8, 64\)"),
    (lambda: flash_attention(*_flash_inputs((1, 2, 9, 64)), causal=True),
     "flash_attention: causal with 9 queries but 8 keys"),
    (lambda: flash_attention(*_flash_inputs(), scale=float("nan")),
     "flash_attention: scale must be a finite positive number, got nan"),
    (lambda: flash_attention(*_flash_inputs(), scale=-1.0),
     "flash_attention: scale must be a finite positive number, got -1.0"),
    # a multiplier that rounds to float32 zero would make the masked keys' -inf * 0 a NaN
    (lambda: flash_attention(*_flash_inputs(), scale=1e-47),
     r"flash_attention: scale 1e-47 times log2\(e\) is outside float32's normal range"),
    (lambda: flash_attention(*_flash_inputs(), scale=1e39),
     r"flash_attention: scale 1e\+39 times log2\(e\) is outside float32's normal range"),
    (lambda: flash_attention(ts.zeros((8, 2, 2, 64), ts.float16).sync().permute((2, 1, 0, 3)),
                             *_flash_inputs((2, 2, 8, 64), (2, 1, 8, 64))[1:]),
     r"flash_attention: q of shape \(2, 2, 8, 64\) and strides \(64, 128, 256, 1\) cannot "
     r"merge its leading dimensions into \(4, 8, 64\) without a copy"),
    (lambda: flash_attention(*_flash_inputs(), out=ts.zeros((1, 2, 8, 64), ts.float32).sync()),
     r"flash_attention: out= has shape \(1, 2, 8, 64\) and dtype float32; this call writes "
     r"shape \(1, 2, 8, 64\), dtype float16"),
]


@pytest.mark.parametrize("call, message", FLASH_MISUSE)
def test_flash_attention_refuses_bad_arguments(call, message):
    with pytest.raises(ts.ArgumentError, match=message) as info:
        call()
    assert info.value.location.file == __file__
    assert info.value.hint


def _decode_inputs(q_shape=(2, 4, 64), cache_shape=(2, 2, 16, 64), dtype=ts.float16,
                   lens=None, v_shape=None):
    lens = ts.tensor(np.full(q_shape[0], 3, np.int32)).sync() if lens is None else lens
    return (ts.zeros(q_shape, dtype).sync(), ts.zeros(cache_shape, dtype).sync(),
            ts.zeros(v_shape or cache_shape, dtype).sync(), lens)


DECODE_MISUSE = [
    (lambda: decode_attention(*_decode_inputs(q_shape=(2, 1, 4, 64))),
     r"decode_attention: q must have 3 dimensions \(batch, q_heads, head_dim\), got shape "
     r"\(2, 1, 4, 64\)"),
    (lambda: decode_attention(*_decode_inputs(dtype=ts.float32)),
     "decode_attention: q has dtype float32; supported: float16, bfloat16"),
    (lambda: decode_attention(*_decode_inputs(v_shape=(2, 2, 8, 64))),
     r"decode_attention: k_cache has shape \(2, 2, 16, 64\), v_cache \(2, 2, 8, 64\)"),
    (lambda: decode_attention(*_decode_inputs(cache_shape=(3, 2, 16, 64))),
     r"decode_attention: q has shape \(2, 4, 64\), the caches \(3, 2, 16, 64\): batch and "
     "head dimension must agree"),
    (lambda: decode_attention(*_decode_inputs(q_shape=(2, 3, 64))),
     "decode_attention: q has 3 heads, k and v 2: the query heads must be a multiple"),
    (lambda: decode_attention(*_decode_inputs(cache_shape=(2, 2, 0, 64))),
     r"decode_attention: empty input: q \(2, 4, 64\), caches \(2, 2, 0, 64\)"),
    (lambda: decode_attention(*_decode_inputs(lens=ts.zeros((2,), ts.int64).sync())),
     r"decode_attention: seq_lens must be an int32 tensor of shape \(2,\), got int64 \(2,\)"),
    (lambda: decode_attention(*_decode_inputs(lens=ts.zeros((3,), ts.int32).sync())),
     r"decode_attention: seq_lens must be an int32 tensor of shape \(2,\), got int32 \(3,\)"),
    (lambda: decode_attention(*_decode_inputs(), num_splits=0),
     r"decode_attention: num_splits must be an int in 1..1024, got 0"),
    (lambda: decode_attention(*_decode_inputs(), out=ts.zeros((2, 4, 32), ts.float16).sync()),
     r"decode_attention: out= has shape \(2, 4, 32\) and dtype float16; this call writes "
     r"shape \(2, 4, 64\), dtype float16"),
]


@pytest.mark.parametrize("call, message", DECODE_MISUSE)
def test_decode_attention_refuses_bad_arguments(call, message):
    with pytest.raises(ts.ArgumentError, match=message) as info:
        call()
    assert info.value.location.file == __file__
    assert info.value.hint
