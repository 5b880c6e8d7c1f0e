"""tilesafe.kernels.norms on the default device: rms_norm, add_rms_norm and layer_norm against
float64 numpy references for every dtype they accept, odd hidden sizes and leading axes,
transformers' rounding order, out= given or not, torch tensors in and out, and every misuse
refused with its message and the caller's line, nothing written."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import _rowwise
from tilesafe.kernels import add_rms_norm, layer_norm, rms_norm
from tilesafe.kernels import norms

DTYPES = (ts.float32, ts.float16, ts.bfloat16)
#: the relative size of one rounding to each dtype (its unit roundoff); float32 results carry
#: the float32 sums' error instead
ROUNDOFF = {"float32": 1e-6, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


@pytest.fixture(autouse=True)
def tiles_as_on_a_large_problem(monkeypatch):
    """Launches keep their configs' tiles (several rows per program) although the test
    problems are small: otherwise tiles shrink to spread a small launch over the GPU."""
    monkeypatch.setattr(_rowwise, "MIN_PROGRAMS", 1)


def tensor(values: np.ndarray, dtype) -> ts.Tensor:
    return ts.tensor(values.astype(np.float32), dtype=dtype).sync()


def f64(t: ts.Tensor) -> np.ndarray:
    return t.numpy().astype(np.float64)


def assert_close(got: np.ndarray, ref: np.ndarray, dtype, roundings: int = 1) -> None:
    """Within ``roundings`` roundings to ``dtype`` of the float64 reference (each at most one
    unit roundoff relative, plus float32's own error), and no NaN anywhere."""
    u = ROUNDOFF[dtype.name]
    bound = roundings * u * np.abs(ref) + 4e-6 * np.abs(ref) + 1e-6 * np.abs(ref).max()
    assert np.all(np.isfinite(got))
    excess = np.abs(got - ref) - bound
    assert np.all(excess <= 0), f"max excess {excess.max():.3g} at {np.argmax(excess)}"


def rms_reference(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_rms_norm_matches_float64_for_every_dtype(dtype, rng):
    x = tensor(rng.standard_normal((5, 37)) * 3, dtype)
    w = tensor(rng.standard_normal(37), dtype)
    y = rms_norm(x, w, eps=1e-5).sync()
    assert y.shape == (5, 37) and y.dtype == dtype
    # the normalized value is rounded before the weight is applied: two roundings
    assert_close(f64(y), rms_reference(f64(x), f64(w), 1e-5), dtype, roundings=2)


def test_rms_norm_flattens_leading_axes_and_writes_a_given_out(rng):
    x = tensor(rng.standard_normal((2, 3, 96)), ts.float32)
    w = tensor(rng.standard_normal(96), ts.float32)
    out = ts.full((2, 3, 96), float("nan"), ts.float32).sync()
    y = rms_norm(x, w, out=out).sync()
    assert y is out
    assert_close(f64(out), rms_reference(f64(x), f64(w), 1e-6), ts.float32)


def test_rms_norm_rounds_as_transformers_qwen3_rmsnorm(rng):
    """transformers: ``weight * (x.float() * rsqrt(mean(x.float()**2) + eps)).to(bf16)``; the
    same order here (a product rounded once from the float32 sum would differ)."""
    torch = pytest.importorskip("torch")
    values = rng.standard_normal((7, 96)).astype(np.float32) * 2
    weight = (1 + rng.standard_normal(96) * 0.3).astype(np.float32)
    xt = torch.tensor(values).to(torch.bfloat16)
    wt = torch.tensor(weight).to(torch.bfloat16)
    h = xt.float()
    expected = wt * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    got = rms_norm(xt, wt)
    assert got.dtype == torch.bfloat16
    same = (got == expected).float().mean().item()
    # the float32 sums' order differs from torch's, which can move a rounding by one ulp
    assert same >= 0.98, same
    ulp = torch.abs(expected.float()) * 2.0 ** -7
    assert bool(torch.all(torch.abs(got.float() - expected.float()) <= ulp))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_add_rms_norm_updates_the_residual_in_place(dtype, rng):
    x = tensor(rng.standard_normal((3, 37)), dtype)
    residual = tensor(rng.standard_normal((3, 37)) * 2, dtype)
    w = tensor(rng.standard_normal(37), dtype)
    before = f64(residual)
    normed, res = add_rms_norm(x, residual, w).sync()
    assert res is residual and normed.shape == (3, 37) and normed.dtype == dtype
    summed = f64(residual)
    assert_close(summed, before + f64(x), dtype)
    # the rounded residual is what is normalized
    assert_close(f64(normed), rms_reference(summed, f64(w), 1e-6), dtype, roundings=2)


def test_add_rms_norm_writes_a_given_out_over_leading_axes(rng):
    x = tensor(rng.standard_normal((2, 2, 37)), ts.float32)
    residual = tensor(rng.standard_normal((2, 2, 37)), ts.float32)
    w = tensor(rng.standard_normal(37), ts.float32)
    out = ts.full((2, 2, 37), float("nan"), ts.float32).sync()
    summed = f64(residual) + f64(x)
    normed, res = add_rms_norm(x, residual, w, out=out).sync()
    assert normed is out and res is residual
    assert_close(f64(res), summed, ts.float32)
    assert_close(f64(out), rms_reference(summed, f64(w), 1e-6), ts.float32)


def layer_reference(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * w
    return y if b is None else y + b


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_layer_norm_with_and_without_bias(dtype, rng):
    x = tensor(rng.standard_normal((5, 37)) * 2 + 3, dtype)  # a mean far from 0
    w = tensor(rng.standard_normal(37), dtype)
    b = tensor(rng.standard_normal(37), dtype)
    y = layer_norm(x, w, b).sync()
    assert y.shape == (5, 37) and y.dtype == dtype
    assert_close(f64(y), layer_reference(f64(x), f64(w), f64(b), 1e-5), dtype)
    out = ts.full((5, 37), float("nan"), dtype).sync()
    assert layer_norm(x, w, eps=1e-3, out=out).sync() is out
    assert_close(f64(out), layer_reference(f64(x), f64(w), None, 1e-3), dtype)


@pytest.mark.parametrize("dtype", (ts.float32, ts.bfloat16), ids=lambda d: d.name)
def test_rows_longer_than_a_tile_combine_chunk_statistics(dtype, rng, monkeypatch):
    """With the largest tile made 16 columns, rows of 37 take the chunked schedule (chunk
    statistics, then each chunk normalized from its row's): the same results."""
    monkeypatch.setattr(norms, "MAX_ROW_TILE", 16)
    x = tensor(rng.standard_normal((3, 37)) * 2 + 3, dtype)
    w = tensor(rng.standard_normal(37), dtype)
    b = tensor(rng.standard_normal(37), dtype)
    y = rms_norm(x, w).sync()
    assert_close(f64(y), rms_reference(f64(x), f64(w), 1e-6), dtype, roundings=2)
    for bias in (b, None):
        y = layer_norm(x, w, bias).sync()
        ref = layer_reference(f64(x), f64(w), None if bias is None else f64(bias), 1e-5)
        assert_close(f64(y), ref, dtype)
    residual = tensor(rng.standard_normal((3, 37)), dtype)
    summed = f64(residual) + f64(x)
    normed, res = add_rms_norm(x, residual, w).sync()
    assert res is residual
    assert_close(f64(residual), summed, dtype)
    assert_close(f64(normed), rms_reference(f64(residual), f64(w), 1e-6), dtype, roundings=2)


def test_a_row_longer_than_the_largest_tile(rng):
    x = tensor(rng.standard_normal((2, 16411)), ts.float32)
    w = tensor(rng.standard_normal(16411), ts.float32)
    assert_close(f64(rms_norm(x, w).sync()), rms_reference(f64(x), f64(w), 1e-6), ts.float32)


def _hints(kernel):
    return kernel.hints.get("default", {}), kernel.hints.get("programmatic_launch", True)


def test_wide_rows_run_eight_warps_per_program(rng):
    """A whole-row tile of 8192 elements (hidden 4100) takes the 8-warp variant of each
    whole-row kernel, planned for 2 CTAs per SM; a small tile 4 warps and 4 CTAs; a config
    may fix warps, occupancy and the grid-dependency wait; the results are the same."""
    from tilesafe.kernels import activations
    for variants in (norms._RMS_ROWS, norms._ADD_RMS_ROWS, norms._LAYER_ROWS,
                     activations._SOFTMAX_ROWS):
        wide = variants.pick((1, 8192), norms.ROW_CONFIGS[0])
        assert _hints(wide) == ({"num_worker_warps_per_cta": 8, "occupancy": 2}, True)
        assert variants.pick((1, 8192), norms.ROW_CONFIGS[0]) is wide  # made once
        assert _hints(variants.pick((4, 512), norms.ROW_CONFIGS[0])) == ({"occupancy": 4},
                                                                         True)
        assert _hints(variants.pick((4, 512), {"warps": 8, "occupancy": 0,
                                               "programmatic": False})) == \
            ({"num_worker_warps_per_cta": 8}, False)
        assert variants.pick((1, 65536), {"occupancy": "auto", "warps": 4}) is \
            variants.narrow
    x = tensor(rng.standard_normal((2, 4100)), ts.bfloat16)
    w = tensor(rng.standard_normal(4100), ts.bfloat16)
    assert_close(f64(rms_norm(x, w).sync()), rms_reference(f64(x), f64(w), 1e-6), ts.bfloat16,
                 roundings=2)
    assert_close(f64(layer_norm(x, w, w).sync()), layer_reference(f64(x), f64(w), f64(w), 1e-5),
                 ts.bfloat16)
    residual = tensor(rng.standard_normal((2, 4100)), ts.bfloat16)
    normed, _ = add_rms_norm(x, residual, w).sync()
    assert_close(f64(normed), rms_reference(f64(residual), f64(w), 1e-6), ts.bfloat16,
                 roundings=2)
    y = f64(activations.softmax(x).sync())
    e = np.exp(f64(x) - f64(x).max(-1, keepdims=True))
    assert_close(y, e / e.sum(-1, keepdims=True), ts.bfloat16)


def test_torch_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    x = torch.tensor(rng.standard_normal((2, 3, 37)), dtype=torch.float32)
    w = torch.tensor(rng.standard_normal(37), dtype=torch.float32)
    y = layer_norm(x, w)
    assert isinstance(y, torch.Tensor) and y.shape == (2, 3, 37)
    expected = torch.nn.functional.layer_norm(x, (37,), w)
    assert torch.allclose(y, expected, rtol=1e-5, atol=1e-5)
    residual = torch.tensor(rng.standard_normal((2, 3, 37)), dtype=torch.float32)
    summed = residual + x
    normed, res = add_rms_norm(x, residual, w)
    assert res is residual and torch.equal(residual, summed)
    assert torch.allclose(normed, torch.nn.functional.rms_norm(summed, (37,), w, 1e-6),
                          rtol=1e-5, atol=1e-5)


# -- misuse ------------------------------------------------------------------------------------

def refused(call, message: str) -> ts.ArgumentError:
    with pytest.raises(ts.ArgumentError, match=message) as info:
        call()
    assert "test_kernels_norms.py" in str(info.value), str(info.value)
    return info.value


def test_misuse_is_refused_with_what_where_and_how(rng):
    x = tensor(rng.standard_normal((3, 8)), ts.float32)
    w = tensor(rng.standard_normal(8), ts.float32)
    refused(lambda: rms_norm(ts.ones((3, 8)), w), "rms_norm: x must be a tilesafe tensor, got")
    ints = ts.ones((3, 8), dtype=ts.int32).sync()
    refused(lambda: rms_norm(ints, w), "rms_norm: x has dtype int32; supported are float16, "
            "bfloat16 and float32")
    refused(lambda: rms_norm(x, tensor(np.ones(9), ts.float32)),
            r"rms_norm: weight has shape \(9,\); x's last axis has 8 elements")
    refused(lambda: rms_norm(x, tensor(np.ones(8), ts.float16)),
            "rms_norm: weight has dtype float16, x float32; they must agree")
    refused(lambda: rms_norm(x, w, eps=0.0), "rms_norm: eps=0.0 must be a finite positive")
    refused(lambda: rms_norm(x, w, eps="1e-6"), "rms_norm: eps='1e-6' must be")
    refused(lambda: layer_norm(ts.ones((3, 0)).sync(), ts.ones(0).sync()),
            r"layer_norm: x of shape \(3, 0\) has an empty last axis")
    refused(lambda: layer_norm(x, w, tensor(np.ones(4), ts.float32)),
            r"layer_norm: bias has shape \(4,\)")
    out = ts.full((3, 9), 7.0).sync()
    refused(lambda: rms_norm(x, w, out=out), r"rms_norm: out= has shape \(3, 9\)")
    assert np.all(out.numpy() == 7.0)
    residual = ts.full((3, 4), 7.0).sync()
    refused(lambda: add_rms_norm(x, residual, w),
            r"add_rms_norm: residual has shape \(3, 4\), x \(3, 8\); they must agree")
    assert np.all(residual.numpy() == 7.0)
    half = ts.full((3, 8), 7.0, ts.float16).sync()
    refused(lambda: add_rms_norm(x, half, w), "add_rms_norm: residual has dtype float16")
    strided = ts.ones((4, 6, 8)).sync().permute(1, 0, 2)
    refused(lambda: rms_norm(strided, w), r"rms_norm: x of shape \(6, 4, 8\) and strides")


def test_a_residual_that_is_also_the_input_is_refused_by_the_launch(rng):
    x = tensor(rng.standard_normal((3, 8)), ts.float32)
    w = tensor(rng.standard_normal(8), ts.float32)
    before = x.numpy().copy()
    with pytest.raises(ts.AliasingError, match="overlap in memory"):
        add_rms_norm(x, x, w).sync()
    assert np.array_equal(x.numpy(), before)


def test_the_benchmark_cases_check_on_the_cpu():
    """``benchmarks/kernels_norms.py``'s cases, at a small shape on torch's CPU: the library
    call passes the check the GPU run makes before timing, and the torch reference runs."""
    torch = pytest.importorskip("torch")
    from benchmarks import _rowwise, kernels_norms
    generator = torch.Generator().manual_seed(0)
    for make in kernels_norms.CASES:
        case = make("bfloat16", 3, 37, "cpu", generator)
        assert 0 < _rowwise.check(case) <= _rowwise.TOLERANCE["bfloat16"]
        assert case.theirs(0).shape == (3, 37)


def test_small_launches_spread_over_more_programs(monkeypatch):
    """Tile choices (configs[0] adapted to the shape): rows per program, elementwise tiles
    and softmax chunks shrink while a launch would have fewer than MIN_PROGRAMS programs."""
    monkeypatch.setattr(_rowwise, "MIN_PROGRAMS", 256)
    assert _rowwise.row_tile(4, 4096, 1024, 8192) == 4      # 1024 programs: as configured
    assert _rowwise.row_tile(4, 32, 4096, 8192) == 1        # decode batch: a row each
    assert _rowwise.row_tile(16, 1024, 1024, 8192) == 4     # 256 programs
    assert _rowwise.matrix_tile(2, 1024, 16384, 4096) == (2, 1024)
    assert _rowwise.matrix_tile(2, 1024, 1, 12288) == (1, 256)   # 48 programs at most
    assert _rowwise.chunk_columns(4096, 32, 151936, 16384) == 4096
    assert _rowwise.chunk_columns(4096, 1, 151936, 16384) == 1024


def test_layer_norm_with_and_without_a_bias_is_tuned_apart():
    """HAS_BIAS specializes the kernel: the two forms are timed and stored apart."""
    x = ts.tensor(np.zeros((4, 64), np.float32)).sync()
    w = ts.tensor(np.ones(64, np.float32)).sync()
    key = norms._launch_layer_norm.key
    assert key(x, w, None, None, 1e-5) != key(x, w, w, None, 1e-5)
