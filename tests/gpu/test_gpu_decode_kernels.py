"""The decode step's fused launches on cuda:0, against the interpreter: ``rope`` with the
per-head RMSNorm in the same launch (Qwen3's QK-norm), ``kv_cache_update`` reusing the
coordinates an earlier update left in its workspace (batch 1: the GPU refuses a batch), and
``paged_decode_attention`` reading a paged cache through its block table (every key tile,
against the interpreter, float64 and the contiguous cache; a block id outside the pool)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import kv_cache_update, rms_norm, rope, rope_cache

GPU = "cuda:0"


def _run_rope(device, q, k, wq, wk, positions, fused):
    on = lambda a: ts.tensor(a, device=device).sync()  # noqa: E731
    table = rope_cache(64, q.shape[-1], device=device).sync()
    qt, kt = on(q), on(k)
    if fused:
        rope(qt, kt, table, on(positions), q_norm=on(wq), k_norm=on(wk), eps=1e-6).sync()
        return qt.numpy().astype(np.float64), kt.numpy().astype(np.float64)
    d = q.shape[-1]
    qn = rms_norm(qt.reshape(-1, d), on(wq), eps=1e-6).sync().reshape(*q.shape)
    kn = rms_norm(kt.reshape(-1, d), on(wk), eps=1e-6).sync().reshape(*k.shape)
    rope(qn, kn, table, on(positions)).sync()
    return qn.numpy().astype(np.float64), kn.numpy().astype(np.float64)


@pytest.mark.parametrize("tokens", [1, 5])
def test_rope_with_qk_norm_on_the_gpu(rng, tokens):
    bf16 = ml_dtypes.bfloat16
    q = (3 * rng.standard_normal((tokens, 32, 128))).astype(bf16)
    k = (3 * rng.standard_normal((tokens, 8, 128))).astype(bf16)
    wq, wk = rng.standard_normal(128).astype(bf16), rng.standard_normal(128).astype(bf16)
    positions = rng.choice(64, tokens, replace=False).astype(np.int32)
    oracle = _run_rope("cpu", q, k, wq, wk, positions, fused=True)
    fused = _run_rope(GPU, q, k, wq, wk, positions, fused=True)
    unfused = _run_rope(GPU, q, k, wq, wk, positions, fused=False)
    for want, got, two_launches in zip(oracle, fused, unfused):
        # the GPU's exp2/rsqrt may round the float32 normalization differently: a result
        # may then land on the neighbouring bfloat16 value (one ulp: 2**-7 relative at most)
        assert np.all(np.abs(got - want) <= 2.0 ** -7 * np.abs(want) + 1e-6)
        assert np.all(np.abs(got - two_launches) <= 2.0 ** -7 * np.abs(two_launches) + 1e-6)


def test_kv_cache_update_reusing_coordinates_on_the_gpu(rng):
    shape = (1, 8, 32, 128)
    k = rng.standard_normal((3, 8, 128)).astype(np.float32)
    caches = [tuple(ts.full(shape, -1.0, ts.float32, device=GPU).sync() for _ in range(2))
              for _ in range(2)]
    slots = ts.tensor(np.array([4, 5, 6], np.int32), device=GPU).sync()
    workspace = ts.zeros((3, 3), ts.int32, device=GPU).sync()
    kt = ts.tensor(k, device=GPU).sync()
    kv_cache_update(*caches[0], kt, kt, slots, workspace=workspace).sync()
    kv_cache_update(*caches[1], kt, kt, slots, workspace=workspace,
                    coordinates_in_workspace=True).sync()
    want = np.full(shape, -1.0, np.float32)
    want[0, :, 4:7] = k.transpose(1, 0, 2)
    for cache_k, cache_v in caches:
        assert np.array_equal(cache_k.numpy(), want) and np.array_equal(cache_v.numpy(), want)


def test_silu_mul_matmul_on_the_gpu(rng):
    """The down projection of the 4b shape with its gating inside the GEMV, against the
    interpreter and against the two launches on the GPU."""
    from tilesafe.kernels import matmul, silu_mul, silu_mul_matmul
    bf16 = ml_dtypes.bfloat16
    gate_up = rng.standard_normal((1, 2 * 9728)).astype(bf16)
    weight = (rng.standard_normal((2560, 9728)) / 64).astype(bf16)
    results = {}
    for device in ("cpu", GPU):
        gu, w = ts.tensor(gate_up, device=device).sync(), ts.tensor(weight, device=device).sync()
        out = ts.full((1, 2560), np.nan, ts.bfloat16, device=device).sync()
        silu_mul_matmul(gu, w, out=out).sync()
        results[device] = out.numpy().astype(np.float64)
        if device == GPU:
            results["two"] = matmul(silu_mul(gu).sync(), w).sync().numpy().astype(np.float64)
    act = np.abs(silu_mul(ts.tensor(gate_up).sync()).sync().numpy().astype(np.float64))
    scale = act @ np.abs(weight.astype(np.float64)).T  # (1, 2560): the sum of |terms|
    for got in (results[GPU], results["two"]):
        assert np.all(np.abs(got - results["cpu"]) <= 2.0 ** -7 * np.abs(results["cpu"])
                      + 2.0 ** -12 * scale)


def test_rms_norm_matmul_on_the_gpu(rng):
    """The 4b shape's q/k/v projection with the input RMSNorm inside the GEMV (every program
    takes the row's mean square), against the interpreter and the two launches on the GPU;
    the output poisoned first."""
    from tilesafe.kernels import matmul, rms_norm_matmul
    bf16 = ml_dtypes.bfloat16
    x = (4 * rng.standard_normal((1, 2560))).astype(bf16)
    g = (1 + rng.standard_normal(2560) / 4).astype(bf16)
    weight = (rng.standard_normal((6144, 2560)) / 64).astype(bf16)
    results = {}
    for device in ("cpu", GPU):
        xt, gt = ts.tensor(x, device=device).sync(), ts.tensor(g, device=device).sync()
        w = ts.tensor(weight, device=device).sync()
        out = ts.full((1, 6144), np.nan, ts.bfloat16, device=device).sync()
        rms_norm_matmul(xt, gt, w, eps=1e-6, out=out).sync()
        results[device] = out.numpy().astype(np.float64)
        if device == GPU:
            normed = rms_norm(xt, gt, eps=1e-6).sync()
            results["two"] = matmul(normed, w).sync().numpy().astype(np.float64)
    normed = np.abs(rms_norm(ts.tensor(x).sync(), ts.tensor(g).sync(), eps=1e-6).sync()
                    .numpy().astype(np.float64))
    scale = normed @ np.abs(weight.astype(np.float64)).T
    for got in (results[GPU], results["two"]):
        # a normalized value may land on the neighbouring bfloat16 (the GPU's rsqrt)
        assert np.all(np.abs(got - results["cpu"]) <= 2.0 ** -7 * np.abs(results["cpu"])
                      + 2.0 ** -7 * scale)


@pytest.mark.parametrize("case", ["o_proj", "down"])
def test_accumulating_products_on_the_gpu(rng, case):
    """The 4b shape's o projection (``matmul(..., accumulate=True)``: whichever GEMV config
    the table holds, split-K with its merge or one launch) and down projection
    (``silu_mul_matmul``) adding into the residual, against the interpreter."""
    from tilesafe.kernels import matmul, silu_mul_matmul
    bf16 = ml_dtypes.bfloat16
    k = 4096 if case == "o_proj" else 2 * 9728
    a = rng.standard_normal((1, k)).astype(bf16)
    weight = (rng.standard_normal((2560, 4096 if case == "o_proj" else 9728)) / 64).astype(bf16)
    residual = (8 * rng.standard_normal((1, 2560))).astype(bf16)
    results = {}
    for device in ("cpu", GPU):
        at, w = ts.tensor(a, device=device).sync(), ts.tensor(weight, device=device).sync()
        out = ts.tensor(residual, device=device).sync()
        if case == "o_proj":
            matmul(at, w, out=out, accumulate=True).sync()
        else:
            silu_mul_matmul(at, w, out=out, accumulate=True).sync()
        results[device] = out.numpy().astype(np.float64)
    got, want = results[GPU], results["cpu"]
    # the product may round to a neighbouring bfloat16, and the sum after it
    bound = 2.0 ** -7 * (np.abs(want) + np.abs(want - residual.astype(np.float64))) + 1e-2
    assert np.all(np.abs(got - want) <= bound)
    assert np.abs(got - residual.astype(np.float64)).max() > 0.1  # (something was added)


def _paged_problem(rng, dtype, batch, q_heads, kv_heads, max_len, d, block_size, lengths):
    """Queries, contiguous caches (NaN past each length) and their paged pools: the
    contiguous blocks scattered through a random permutation, spare blocks NaN."""
    npd = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    q = rng.standard_normal((batch, q_heads, d)).astype(npd)
    k, v = (rng.standard_normal((batch, kv_heads, max_len, d)).astype(npd) for _ in range(2))
    for b, n in enumerate(lengths):
        k[b, :, n:] = np.nan
        v[b, :, n:] = np.nan
    per_seq = max_len // block_size
    num_blocks = batch * per_seq + 5
    table = rng.permutation(num_blocks)[:batch * per_seq].reshape(batch, per_seq)
    pools = []
    for x in (k, v):
        pool = np.full((num_blocks, block_size, kv_heads, d), np.nan, dtype=npd)
        pool[table] = x.reshape(batch, kv_heads, per_seq, block_size, d).transpose(0, 2, 3, 1, 4)
        pools.append(pool)
    return q, k, v, pools[0], pools[1], table.astype(np.int32)


def _decode_reference(q, k, v, lengths):
    q, k, v = (np.nan_to_num(np.asarray(x, dtype=np.float64)) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhd,bhkd->bhk", q, k) / np.sqrt(q.shape[-1])
    keep = np.arange(k.shape[2])[None, None, :] < np.asarray(lengths)[:, None, None]
    s = np.where(keep, s, -np.inf)
    top = np.max(s, -1, keepdims=True)
    p = np.where(keep, np.exp(s - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = p.sum(-1, keepdims=True)
    return np.einsum("bhk,bhkd->bhd", np.divide(p, total, out=np.zeros_like(p),
                                                  where=total > 0), v)


@pytest.mark.parametrize("dtype, d, q_heads, kv_heads, block_size", [
    ("float16", 128, 32, 8, 16),     # key tiles spanning several blocks (vLLM's block size)
    ("bfloat16", 128, 16, 2, 256),   # key tiles inside one block
    ("float16", 64, 8, 8, 24),       # a block size that is not a power of two
])
def test_paged_decode_attention_on_the_gpu(rng, dtype, d, q_heads, kv_heads, block_size):
    """Each key tile of the configs on cuda:0 against the interpreter's result (the same
    arithmetic: a few float32 ulps apart), float64, and the contiguous ``decode_attention``
    on the GPU."""
    from tilesafe.kernels import decode_attention, paged_decode_attention
    from tilesafe.kernels.paged_decode_attention import _launch_paged
    lengths = [1536, 0, 1, 1000]
    q, k, v, k_pool, v_pool, table = _paged_problem(rng, dtype, 4, q_heads, kv_heads, 1536, d,
                                                    block_size, lengths)
    want = _decode_reference(q, k, v, lengths)
    tol = 2e-3 if dtype == "float16" else 1.6e-2

    def inputs(device):
        on = lambda a: ts.tensor(a, device=device).sync()  # noqa: E731
        return [on(x) for x in (q, k_pool, v_pool, np.array(lengths, np.int32), table)]
    oracle = paged_decode_attention(*inputs("cpu"), num_splits=4).sync().numpy()
    gpu = inputs(GPU)
    got = paged_decode_attention(*gpu, num_splits=4).sync().numpy().astype(np.float64)
    assert np.abs(got - want).max() <= tol
    assert np.abs(got - oracle.astype(np.float64)).max() <= tol / 4
    contiguous = decode_attention(*(ts.tensor(x, device=GPU).sync() for x in (q, k, v)), gpu[3],
                                  num_splits=4).sync().numpy().astype(np.float64)
    assert np.abs(got - contiguous).max() <= tol / 4
    q3 = gpu[0].reshape(4 * kv_heads, q_heads // kv_heads, d)
    first_of_tile = {c["BN"]: c for c in reversed(_launch_paged.configs)}.values()
    for config in first_of_tile:  # each key tile (its first hints), splits from the device
        out = _launch_paged.fn(q3, *gpu[1:], None, tuple(q.shape), d ** -0.5 * 1.4426950408889634,
                               kv_heads, None, config=config).sync().numpy().astype(np.float64)
        assert np.abs(out - want).max() <= tol, config


@pytest.mark.parametrize("bad", [-1, 10_000])
def test_paged_decode_attention_block_id_outside_the_pool_on_the_gpu(rng, bad):
    from tilesafe.kernels import paged_decode_attention
    q, _, _, k_pool, v_pool, table = _paged_problem(rng, "float16", 2, 8, 2, 256, 128, 16,
                                                    [256, 100])
    table[1, 100 // 16] = bad
    on = lambda a: ts.tensor(a, device=GPU).sync()  # noqa: E731
    with pytest.raises(ts.IndexOutOfRangeError, match=rf"partition index \({bad}, 0, \d, 0\) "
                       r"is outside the tile grid"):
        paged_decode_attention(on(q), on(k_pool), on(v_pool), on(np.array([256, 100], np.int32)),
                               on(table), num_splits=2).sync()
