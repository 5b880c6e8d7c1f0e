"""tilesafe.kernels.rope: transformers' rotary math (NeoX rotate_half and GPT-J pairs) against
float64 references, in place and out=, positions as int32/int64 device tensors, the cos/sin
table of rope_cache, a position outside the table, and each argument error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import rope, rope_cache

NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
EPS = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}  # half an ulp


def on(array) -> ts.Tensor:
    return ts.tensor(array).sync()


def hf_inv_freq(head_dim: int, base: float) -> np.ndarray:
    """transformers' inv_freq: 1 / base**(float32(arange(0, d, 2)) / d), all in float32."""
    exponents = np.arange(0, head_dim, 2).astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / np.power(np.float32(base), exponents)).astype(np.float32)


def reference(x: np.ndarray, positions: np.ndarray, base: float, layout: str) -> tuple:
    """x rotated in float64 from transformers' float32 frequencies, and the magnitude of
    the products summed for each element (|x1*cos| + |x2*sin| for the first of a pair,
    |x2*cos| + |x1*sin| for the second), which bounds float32's rounding error."""
    d = x.shape[-1]
    freqs = (positions.astype(np.float32)[:, None] * hf_inv_freq(d, base)[None, :])
    freqs = freqs.astype(np.float32).astype(np.float64)
    cos = np.cos(freqs).astype(np.float32).astype(np.float64)[:, None, :]
    sin = np.sin(freqs).astype(np.float32).astype(np.float64)[:, None, :]
    x = x.astype(np.float64)
    out, size = np.empty_like(x), np.empty_like(x)
    first, second = ((slice(0, d // 2), slice(d // 2, d)) if layout == "neox"
                     else (slice(0, d, 2), slice(1, d, 2)))
    x1, x2 = x[..., first], x[..., second]
    out[..., first] = x1 * cos - x2 * sin
    out[..., second] = x2 * cos + x1 * sin
    size[..., first] = np.abs(x1 * cos) + np.abs(x2 * sin)
    size[..., second] = np.abs(x2 * cos) + np.abs(x1 * sin)
    return out, size


def check(got: np.ndarray, want: tuple, dtype: str) -> None:
    """Within float32's roundings of the products and their sum, then one rounding to
    ``dtype`` (the kernel computes in float32 and rounds once)."""
    value, size = want
    err = np.abs(got.astype(np.float64) - value)
    bound = EPS[dtype] * np.abs(value) + 3 * EPS["float32"] * size
    assert np.all(err <= bound), float((err / np.maximum(bound, 1e-300)).max())


def test_rope_cache_holds_cos_then_sin_of_transformers_frequencies():
    table = rope_cache(40, 12, base=10000.0).sync().numpy()
    assert table.shape == (40, 12) and table.dtype == np.float32
    freqs = (np.arange(40, dtype=np.float32)[:, None] * hf_inv_freq(12, 10000.0)[None, :])
    freqs = freqs.astype(np.float32).astype(np.float64)
    assert np.array_equal(table[:, :6], np.cos(freqs).astype(np.float32))
    assert np.array_equal(table[:, 6:], np.sin(freqs).astype(np.float32))
    half = rope_cache(40, 12, base=10000.0, dtype="bfloat16").sync()
    assert half.dtype == ts.bfloat16
    assert np.array_equal(half.numpy()[:, :6], np.cos(freqs).astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("dtype, tokens, heads, kv_heads, head_dim, index_dtype", [
    ("float32", 3, 5, 2, 8, np.int64),
    ("bfloat16", 7, 4, 1, 12, np.int32),
    ("float16", 1, 3, 3, 16, np.int32),
])
def test_rope_in_place_matches_transformers(rng, layout, dtype, tokens, heads, kv_heads,
                                            head_dim, index_dtype):
    base = 1_000_000.0
    table = rope_cache(50, head_dim, base=base).sync()
    q = rng.standard_normal((tokens, heads, head_dim)).astype(NP_DTYPES[dtype])
    k = rng.standard_normal((tokens, kv_heads, head_dim)).astype(NP_DTYPES[dtype])
    positions = rng.choice(50, tokens, replace=False).astype(index_dtype)
    qt, kt = on(q), on(k)
    got_q, got_k = rope(qt, kt, table, on(positions), layout=layout).sync()
    assert got_q is qt and got_k is kt  # rotated in place
    check(qt.numpy(), reference(q, positions, base, layout), dtype)
    check(kt.numpy(), reference(k, positions, base, layout), dtype)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_rope_q_out_k_out_leave_the_inputs_alone(rng, layout):
    q = rng.standard_normal((4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((4, 2, 8)).astype(np.float32)
    positions = np.array([9, 0, 3, 9], np.int32)  # repeated positions are fine
    table = rope_cache(10, 8, base=500.0).sync()
    qt, kt = on(q), on(k)
    q_out = ts.full((4, 3, 8), np.nan, ts.float32).sync()
    k_out = ts.full((4, 2, 8), np.nan, ts.float32).sync()
    got_q, got_k = rope(qt, kt, table, on(positions), layout=layout, q_out=q_out,
                        k_out=k_out).sync()
    assert got_q.shape == (4, 3, 8) and got_k.shape == (4, 2, 8)
    check(q_out.numpy(), reference(q, positions, 500.0, layout), "float32")
    check(k_out.numpy(), reference(k, positions, 500.0, layout), "float32")
    assert np.array_equal(qt.numpy(), q) and np.array_equal(kt.numpy(), k)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("heads, kv_heads, head_dim", [
    (8, 2, 8),    # a power-of-two group: one key head and its 4 query heads per program
    (6, 4, 12),   # no such group: every head in one program; head_dim padded to 16
    (4, 4, 16),   # a group of one
])
@pytest.mark.parametrize("tokens_per_program", [1, 2, 4])
@pytest.mark.parametrize("normed", [False, True])
def test_rope_copy_equals_in_place_for_every_tiling(rng, layout, heads, kv_heads, head_dim,
                                                    tokens_per_program, normed):
    """The copying kernels (each column's pair read again from the input) and the in-place
    ones (the pair taken from the loaded tile) agree bit for bit, whatever the tokens and
    heads per program."""
    import importlib
    rope_module = importlib.import_module("tilesafe.kernels.rope")
    from tilesafe.kernels._outputs import Output
    tokens = 5
    q = (3 * rng.standard_normal((tokens, heads, head_dim))).astype(ml_dtypes.bfloat16)
    k = (3 * rng.standard_normal((tokens, kv_heads, head_dim))).astype(ml_dtypes.bfloat16)
    table = rope_cache(12, head_dim).sync()
    positions = on(np.array([3, 0, 11, 7, 7], np.int32))
    norms = None
    if normed:
        norms = (on(rng.standard_normal(head_dim).astype(ml_dtypes.bfloat16)),
                 on(rng.standard_normal(head_dim).astype(ml_dtypes.bfloat16)), 1e-6)
    want_q, want_k = rope(on(q), on(k), table, positions, layout=layout,
                          **({} if norms is None else dict(q_norm=norms[0], k_norm=norms[1],
                                                           eps=norms[2]))).sync()
    q_out = ts.full(q.shape, np.nan, ts.bfloat16).sync()
    k_out = ts.full(k.shape, np.nan, ts.bfloat16).sync()
    qt, kt = on(q), on(k)
    got_q, got_k = rope_module._launch.fn(
        qt, kt, table, positions, layout == "neox",
        Output(q_out, q.shape, qt.dtype, qt.device, name="q_out", op="rope"),
        Output(k_out, k.shape, kt.dtype, kt.device, name="k_out", op="rope"), norms,
        config={"tokens": tokens_per_program}).sync()
    assert np.array_equal(got_q.numpy(), want_q.numpy())
    assert np.array_equal(got_k.numpy(), want_k.numpy())
    assert np.array_equal(qt.numpy(), q) and np.array_equal(kt.numpy(), k)


def test_rope_on_row_strided_views_and_the_fused_qkv_limit(rng):
    # q as a view of wider rows (a projection's output with padding columns): in place
    wide = rng.standard_normal((3, 40)).astype(np.float32)
    buffer = on(wide)
    q = buffer[:, 0:32].reshape(3, 4, 8)
    k = on(rng.standard_normal((3, 2, 8)).astype(np.float32))
    positions = np.array([1, 2, 3], np.int64)
    rope(q, k, rope_cache(4, 8).sync(), on(positions)).sync()
    got = buffer.numpy()
    check(got[:, :32].reshape(3, 4, 8), reference(wide[:, :32].reshape(3, 4, 8), positions,
                                                  1e6, "neox"), "float32")
    assert np.array_equal(got[:, 32:], wide[:, 32:])  # the padding columns are untouched
    # q and k as interleaved views of one fused QKV buffer: their spans overlap, which the
    # launch's aliasing check (by address range) refuses; nothing is written
    fused = on(wide)
    with pytest.raises(ts.AliasingError, match="arguments 'q' and 'k' of 'rope_inplace' "
                       "overlap in memory"):
        rope(fused[:, 0:16].reshape(3, 2, 8), fused[:, 16:32].reshape(3, 2, 8),
             rope_cache(4, 8).sync(), on(positions)).sync()
    assert np.array_equal(fused.numpy(), wide)


def test_a_position_outside_the_table_raises(rng):
    q = on(rng.standard_normal((2, 3, 8)).astype(np.float32))
    k = on(rng.standard_normal((2, 2, 8)).astype(np.float32))
    with pytest.raises(ts.IndexOutOfRangeError, match=r"gather index 6 along axis 0 is outside "
                       r"\[0, 6\)"):
        rope(q, k, rope_cache(6, 8).sync(), on(np.array([0, 6], np.int32))).sync()


def test_rope_argument_errors(rng):
    table = rope_cache(8, 8).sync()
    q = on(rng.standard_normal((2, 3, 8)).astype(np.float32))
    k = on(rng.standard_normal((2, 1, 8)).astype(np.float32))
    pos = on(np.array([0, 1], np.int32))
    cases = [
        (dict(q=q, k=k, cos_sin_cache=table, positions=pos, layout="llama"),
         "rope: layout='llama' is not one of 'neox', 'gptj'"),
        (dict(q=on(np.zeros((2, 3, 8), np.int32)), k=k, cos_sin_cache=table, positions=pos),
         "rope: q has dtype int32; supported: float16, bfloat16, float32"),
        (dict(q=q, k=on(np.zeros((2, 1, 8), np.float16)), cos_sin_cache=table, positions=pos),
         "rope: k has dtype float16, q float32"),
        (dict(q=q, k=on(np.zeros((3, 1, 8), np.float32)), cos_sin_cache=table, positions=pos),
         r"rope: q has shape \(2, 3, 8\) and k \(3, 1, 8\): they must agree"),
        (dict(q=q.reshape(2, 24), k=k, cos_sin_cache=table, positions=pos),
         r"rope: q has shape \(2, 24\); it must have 3 dimensions"),
        (dict(q=q, k=k, cos_sin_cache=rope_cache(8, 4).sync(), positions=pos),
         r"rope: cos_sin_cache has shape \(8, 4\); its width must be head_dim=8"),
        (dict(q=q, k=k, cos_sin_cache=table, positions=on(np.array([0.0, 1.0]))),
         "rope: positions has dtype float64; supported: int32, int64"),
        (dict(q=q, k=k, cos_sin_cache=table, positions=on(np.array([0, 1, 2], np.int32))),
         "rope: positions has 3 entries for 2 tokens"),
        (dict(q=q, k=k, cos_sin_cache=table, positions=pos, q_out=ts.zeros((2, 3, 8)).sync()),
         "rope: q_out= and k_out= go together: one of them is missing"),
        (dict(q=q, k=k, cos_sin_cache=table, positions=pos,
              q_out=ts.zeros((2, 3, 8), ts.float16).sync(), k_out=ts.zeros((2, 1, 8)).sync()),
         r"rope: q_out= has shape \(2, 3, 8\) and dtype float16"),
        (dict(q=q, k=np.zeros((2, 1, 8), np.float32), cos_sin_cache=table, positions=pos),
         "rope: k must be a tilesafe tensor, got ndarray"),
        (dict(q=on(np.zeros((2, 3, 7), np.float32)), k=on(np.zeros((2, 1, 7), np.float32)),
              cos_sin_cache=table, positions=pos), "rope: head_dim=7 is odd"),
        (dict(q=on(np.zeros((3, 2, 8), np.float32)).transpose(0, 1), k=k,
              cos_sin_cache=table, positions=pos), "rope: q's heads are not contiguous"),
    ]
    before = q.numpy()
    for kwargs, words in cases:
        with pytest.raises(ts.ArgumentError, match=words) as info:
            rope(**kwargs)
        assert "test_kernels_rope.py" in str(info.value)  # the caller's line
    assert np.array_equal(q.numpy(), before)


@pytest.mark.parametrize("kwargs, words", [
    (dict(max_positions=0, head_dim=8), "rope_cache: max_positions=0 must be at least 1"),
    (dict(max_positions=4, head_dim=5), "rope_cache: head_dim=5 must be an even number"),
    (dict(max_positions=4, head_dim=8, base=0.0), "rope_cache: base=0.0 must be positive"),
    (dict(max_positions=4, head_dim=8, dtype="int32"), "rope_cache: dtype int32 is not "
     "supported; supported: float16, bfloat16, float32"),
])
def test_rope_cache_argument_errors(kwargs, words):
    with pytest.raises(ts.ArgumentError, match=words):
        rope_cache(**kwargs)


def test_torch_tensors_rotated_in_place():
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 4, 8, generator=generator), torch.randn(3, 2, 8, generator=generator)
    q_np, k_np = q.numpy().copy(), k.numpy().copy()
    positions = np.array([4, 1, 0], np.int64)
    table = torch.from_dlpack(rope_cache(5, 8).sync())
    got_q, got_k = rope(q, k, table, torch.from_numpy(positions))
    assert got_q is q and got_k is k
    check(q.numpy(), reference(q_np, positions, 1e6, "neox"), "float32")
    check(k.numpy(), reference(k_np, positions, 1e6, "neox"), "float32")


# -- QK-norm in the same launch -----------------------------------------------------------------

def _rms_reference(x: np.ndarray, weight: np.ndarray, eps: float, dtype: str) -> np.ndarray:
    """Qwen3's RMSNorm of each head in float64, rounded as the kernel rounds (to ``dtype``
    after the scaling, and again after the weight)."""
    x64 = x.astype(np.float64)
    normed = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
    normed = normed.astype(NP_DTYPES[dtype]).astype(np.float64)
    return (normed * weight.astype(np.float64)).astype(NP_DTYPES[dtype])


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("dtype, head_dim", [("bfloat16", 128), ("float16", 12),
                                             ("float32", 8)])
@pytest.mark.parametrize("in_place", [True, False])
def test_rope_with_qk_norm_equals_rms_norm_then_rope(rng, layout, dtype, head_dim, in_place):
    from tilesafe.kernels import rms_norm
    tokens, heads, kv_heads, eps = 3, 4, 2, 1e-6
    table = rope_cache(20, head_dim).sync()
    q = (3 * rng.standard_normal((tokens, heads, head_dim))).astype(NP_DTYPES[dtype])
    k = (3 * rng.standard_normal((tokens, kv_heads, head_dim))).astype(NP_DTYPES[dtype])
    wq = rng.standard_normal(head_dim).astype(NP_DTYPES[dtype])
    wk = rng.standard_normal(head_dim).astype(NP_DTYPES[dtype])
    positions = np.array([0, 7, 19], np.int32)
    # the two launches this one replaces
    qn = rms_norm(on(q).reshape(tokens * heads, head_dim), on(wq), eps=eps).sync()
    kn = rms_norm(on(k).reshape(tokens * kv_heads, head_dim), on(wk), eps=eps).sync()
    want_q, want_k = rope(qn.reshape(tokens, heads, head_dim),
                          kn.reshape(tokens, kv_heads, head_dim), table, on(positions),
                          layout=layout).sync()
    qt, kt = on(q), on(k)
    out = {} if in_place else dict(q_out=ts.empty(q.shape, qt.dtype).sync(),
                                   k_out=ts.empty(k.shape, kt.dtype).sync())
    got_q, got_k = rope(qt, kt, table, on(positions), layout=layout, q_norm=on(wq),
                        k_norm=on(wk), eps=eps, **out).sync()
    assert (got_q is qt) == in_place
    assert np.array_equal(got_q.numpy(), want_q.numpy())
    assert np.array_equal(got_k.numpy(), want_k.numpy())
    # and against float64: the heads normalized in float64 and rounded as the kernel rounds,
    # then rotated. The kernel's float32 normalization may differ from it by a few float32
    # ulps, and so round to the neighbouring value of dtype: one ulp of dtype (2 EPS) of the
    # normalized heads, or a few float32 ulps, on top of the rotation's own bound.
    for got, x, w in ((got_q, q, wq), (got_k, k, wk)):
        value, size = reference(_rms_reference(x, w, eps, dtype), positions, 1_000_000.0,
                                layout)
        err = np.abs(got.numpy().astype(np.float64) - value)
        bound = EPS[dtype] * np.abs(value) + (2 * EPS[dtype] + 8 * EPS["float32"]) * size
        assert np.all(err <= bound), float((err / np.maximum(bound, 1e-300)).max())
    if not in_place:
        assert np.array_equal(qt.numpy(), q) and np.array_equal(kt.numpy(), k)


def test_rope_qk_norm_argument_errors(rng):
    table = rope_cache(8, 8).sync()
    q = on(rng.standard_normal((2, 3, 8)).astype(np.float32))
    k = on(rng.standard_normal((2, 1, 8)).astype(np.float32))
    pos = on(np.array([0, 1], np.int32))
    w = on(np.ones(8, np.float32))
    cases = [
        (dict(q_norm=w), "rope: q_norm= and k_norm= go together: one of them is missing"),
        (dict(q_norm=w, k_norm=on(np.ones(6, np.float32))),
         r"rope: k_norm has shape \(6,\) and dtype float32; it must be a contiguous \(8,\) "
         r"float32 tensor"),
        (dict(q_norm=on(np.ones(8, np.float16)), k_norm=w),
         r"rope: q_norm has shape \(8,\) and dtype float16"),
        (dict(q_norm=w, k_norm=w, eps=0.0), "rope: eps=0.0 must be positive"),
    ]
    for extra, words in cases:
        before = (q.numpy().copy(), k.numpy().copy())
        with pytest.raises(ts.ArgumentError, match=words):
            rope(q, k, table, pos, **extra)
        assert np.array_equal(q.numpy(), before[0]) and np.array_equal(k.numpy(), before[1])
