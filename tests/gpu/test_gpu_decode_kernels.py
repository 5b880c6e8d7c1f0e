"""The decode step's fused launches on cuda:0, against the interpreter: ``rope`` with the
per-head RMSNorm in the same launch (Qwen3's QK-norm), and ``kv_cache_update`` reusing the
coordinates an earlier update left in its workspace (batch 1: the GPU refuses a batch)."""

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
