"""tilesafe.kernels.activations on the default device: softmax (rows in one tile, several per
program, and rows chunked across programs), silu_mul (merged and separate forms, transformers'
rounding) and gelu (exact and tanh) against float64 numpy references for every dtype they
accept, odd sizes and leading axes, out= given or not, torch tensors in and out, and every
misuse refused with its message and the caller's line, nothing written."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import _rowwise
from tilesafe.kernels import activations, gelu, silu_mul, softmax

DTYPES = (ts.float32, ts.float16, ts.bfloat16)
#: the relative size of one rounding to each dtype (its unit roundoff); float32 results carry
#: float32 arithmetic's own error instead
ROUNDOFF = {"float32": 1e-6, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
#: the spacing of each dtype's smallest (subnormal) numbers: the absolute error of rounding a
#: result that small
TINY = {"float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}


@pytest.fixture(autouse=True)
def tiles_as_on_a_large_problem(monkeypatch):
    """Launches keep their configs' tiles (several rows per program) although the test
    problems are small: otherwise tiles shrink to spread a small launch over the GPU."""
    monkeypatch.setattr(_rowwise, "MIN_PROGRAMS", 1)


def tensor(values: np.ndarray, dtype) -> ts.Tensor:
    return ts.tensor(values.astype(np.float32), dtype=dtype).sync()


def f64(t: ts.Tensor) -> np.ndarray:
    return t.numpy().astype(np.float64)


def assert_close(got: np.ndarray, ref: np.ndarray, dtype, roundings: int = 1,
                 atol: float = 0.0) -> None:
    """Within ``roundings`` roundings to ``dtype`` of the float64 reference (each at most one
    unit roundoff relative, or the subnormal spacing), plus float32's own error and ``atol``;
    no NaN anywhere."""
    u = ROUNDOFF[dtype.name]
    bound = roundings * (u * np.abs(ref) + TINY[dtype.name]) + 4e-6 * np.abs(ref) + atol
    assert np.all(np.isfinite(got))
    excess = np.abs(got - ref) - bound
    assert np.all(excess <= 0), f"max excess {excess.max():.3g} at {np.argmax(excess)}"


def softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_softmax_of_short_rows_for_every_dtype(dtype, rng):
    x = tensor(rng.standard_normal((5, 37)) * 4, dtype)
    y = softmax(x).sync()
    assert y.shape == (5, 37) and y.dtype == dtype
    assert_close(f64(y), softmax_reference(f64(x)), dtype, atol=1e-7)


def test_softmax_over_leading_axes_with_extreme_values_and_a_given_out(rng):
    values = rng.standard_normal((2, 3, 37)) * 3
    values[0, 0, :5] = 3e4      # exp would overflow without the maximum subtracted
    values[1, 2, :] -= 1e4
    values[0, 1, 3] = -np.inf   # a -inf logit (a masked one) gets exactly 0
    values[1, 0, :] = -np.inf   # a fully masked row: zeros (torch: NaN)
    x = tensor(values, ts.float32)
    out = ts.full((2, 3, 37), float("nan")).sync()
    assert softmax(x, axis=2, out=out).sync() is out
    got = f64(out)
    assert got[0, 1, 3] == 0.0 and np.all(got[1, 0] == 0.0)
    assert_close(got[0], softmax_reference(f64(x)[0]), ts.float32, atol=1e-7)
    assert_close(got[1, 1:], softmax_reference(f64(x)[1, 1:]), ts.float32, atol=1e-7)


@pytest.mark.parametrize("dtype", (ts.float32, ts.bfloat16), ids=lambda d: d.name)
def test_softmax_of_rows_longer_than_a_tile_combines_chunks(dtype, rng, monkeypatch):
    """With the largest tile made 16 columns, rows of 37 and 100 take the chunked schedule
    (per-chunk maxima and sums, then the rescaled combination)."""
    monkeypatch.setattr(activations, "SOFTMAX_MAX_TILE", 16)
    for shape in ((3, 37), (2, 100)):
        values = rng.standard_normal(shape) * 5
        values[0, -1] = 40.0  # the row maximum in the last, partial chunk
        values[1, :] = -np.inf  # a fully masked row: zeros, as in a row kept in one tile
        values[-1, :20] = -np.inf
        x = tensor(values, dtype)
        y = f64(softmax(x).sync())
        assert np.all(y[1] == 0)
        keep = np.arange(shape[0]) != 1
        assert_close(y[keep], softmax_reference(f64(x)[keep]), dtype, atol=1e-7)


def test_softmax_of_a_vocabulary_sized_row(rng):
    x = tensor(rng.standard_normal((2, 16411)) * 6, ts.float32)
    y = softmax(x).sync()
    ref = softmax_reference(f64(x))
    assert_close(f64(y), ref, ts.float32, atol=1e-10)
    assert abs(f64(y).sum(-1) - 1).max() < 1e-5


def silu(g: np.ndarray) -> np.ndarray:
    return g / (1 + np.exp(-g))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_silu_mul_of_a_merged_projection(dtype, rng):
    x = tensor(rng.standard_normal((2, 3, 90)) * 3, dtype)
    y = silu_mul(x).sync()
    assert y.shape == (2, 3, 45) and y.dtype == dtype
    v = f64(x)
    # silu is rounded to the dtype before the product (transformers' order): two roundings
    assert_close(f64(y), silu(v[..., :45]) * v[..., 45:], dtype, roundings=2, atol=1e-7)


def test_silu_mul_of_separate_projections_rounds_as_transformers(rng):
    gate = tensor(rng.standard_normal((5, 45)) * 3, ts.bfloat16)
    up = tensor(rng.standard_normal((5, 45)) * 3, ts.bfloat16)
    out = ts.full((5, 45), float("nan"), ts.bfloat16).sync()
    assert silu_mul(gate, up, out=out).sync() is out
    bf16 = ml_dtypes.bfloat16
    activated = silu(f64(gate)).astype(np.float32).astype(bf16).astype(np.float64)
    expected = (activated * f64(up)).astype(np.float32).astype(bf16).astype(np.float64)
    got = f64(out)
    # exp2 vs exp may move the first rounding by one ulp in rare cases
    assert np.mean(got == expected) >= 0.97
    assert np.all(np.abs(got - expected) <= np.abs(expected) * 2.0 ** -6 + 1e-30)


def gelu_reference(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2))


@pytest.mark.parametrize("approximate", ("none", "tanh"))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_gelu_for_every_dtype(dtype, approximate, rng):
    x = tensor(rng.standard_normal((3, 45)) * 3, dtype)
    y = gelu(x, approximate=approximate).sync()
    assert y.shape == (3, 45) and y.dtype == dtype
    ref = gelu_reference(f64(x), approximate)
    # in the negative tail the float32 exponent's own rounding (relative error about
    # |exponent| * 2**-24) dominates; there the values are below 1e-6 * max|ref|
    assert_close(f64(y), ref, dtype, atol=1e-6 * np.abs(ref).max())


def test_exact_gelu_keeps_its_relative_accuracy_in_the_negative_tail():
    values = np.array([[-12.0, -9.5, -7.25, -5.0, -3.0, -1e-3, 0.0, 1e-3, 2.5, 6.0, 11.0]])
    x = tensor(values, ts.float32)
    out = ts.full((2, 11), float("nan")).sync()
    got = f64(gelu(x, out=out[0:1]).sync())
    ref = gelu_reference(f64(x), "none")
    # float32 carries (x / sqrt 2)**2 into exp with a relative error near 2**-23: the
    # result's relative error grows as x**2 * 2**-24 (1e-5 at x = -12), no faster
    bound = (1e-6 + 2.5e-7 * values ** 2 / 2) * np.abs(ref)
    assert np.all(np.abs(got - ref) <= bound)
    assert np.all(np.isnan(out.numpy()[1]))  # the row outside the view is untouched


def test_gelu_flushes_only_results_below_float32s_normal_range():
    """Both forms flush float32 subnormals in their exponentials: the exact form's tail is
    accurate down to x = -13.07 (3e-38) and zero from -13.09; the tanh form's is accurate at
    -10 (1.2e-37) and zero from -10.01 (where its exponential, not yet the result, is
    subnormal: what is lost is below |x| * 2**-126); the positive side is x itself."""
    values = np.array([[-13.07, -13.09, -20.0, 30.0], [-10.0, -10.01, -20.0, 30.0]])
    for row, approximate in enumerate(("none", "tanh")):
        x = tensor(values[row:row + 1], ts.float32)
        got = f64(gelu(x, approximate=approximate).sync())[0]
        x64 = f64(x)[0]
        # (the tanh form as x * sigmoid(2u): 1 + tanh(u) cancels to zero there in float64)
        want = gelu_reference(f64(x), "none")[0] if approximate == "none" else x64 / (
            1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
        assert abs(got[0] - want[0]) <= 1e-5 * abs(want[0]) and got[0] < 0
        assert np.all(got[1:3] == 0.0) and np.all(np.abs(want[1:3]) < 2.0 ** -126 * 20)
        assert got[3] == 30.0
    tiny = tensor(np.array([[1e-39, -1e-39]]), ts.float32)
    assert np.all(f64(gelu(tiny, approximate="tanh").sync()) == 0.0)


def test_torch_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    x = torch.tensor(rng.standard_normal((4, 37)) * 3, dtype=torch.float32)
    assert torch.allclose(softmax(x), torch.softmax(x, -1), rtol=1e-5, atol=1e-7)
    # torch's CPU erf has an absolute error near 2e-7 in the tail (ours is within 1e-6 relative)
    assert torch.allclose(gelu(x), torch.nn.functional.gelu(x), rtol=1e-5, atol=5e-7)
    gate, up = x[:, :18].contiguous(), x[:, 18:36].contiguous()
    expected = torch.nn.functional.silu(gate) * up
    assert torch.allclose(silu_mul(gate, up), expected, rtol=1e-5, atol=1e-6)


# -- misuse ------------------------------------------------------------------------------------

def refused(call, message: str) -> ts.ArgumentError:
    with pytest.raises(ts.ArgumentError, match=message) as info:
        call()
    assert "test_kernels_activations.py" in str(info.value), str(info.value)
    return info.value


def test_misuse_is_refused_with_what_where_and_how(rng):
    x = tensor(rng.standard_normal((3, 8)), ts.float32)
    refused(lambda: softmax(x, axis=0), "softmax: axis=0; only the last axis")
    refused(lambda: softmax(ts.zeros((3, 8))), "softmax: x must be a tilesafe tensor")
    ints = ts.ones((3, 8), dtype=ts.int32).sync()
    refused(lambda: gelu(ints), "gelu: x has dtype int32; supported are float16, bfloat16 and "
            "float32")
    refused(lambda: gelu(x, approximate="erf"), "gelu: approximate='erf'; use 'none' or 'tanh'")
    refused(lambda: softmax(ts.zeros((3, 0)).sync()), r"softmax: x of shape \(3, 0\) has an "
            "empty last axis")
    refused(lambda: silu_mul(tensor(np.ones((3, 7)), ts.float32)),
            "silu_mul: x's last axis has 7 elements; the merged form needs an even count")
    refused(lambda: silu_mul(x, tensor(np.ones((3, 4)), ts.float32)),
            r"silu_mul: up has shape \(3, 4\), the gate \(3, 8\)")
    refused(lambda: silu_mul(x, tensor(np.ones((3, 8)), ts.float16)),
            "silu_mul: up has dtype float16, gate float32")
    out = ts.full((3, 8), 7.0).sync()
    refused(lambda: silu_mul(x, out=out), r"silu_mul: out= has shape \(3, 8\) and dtype "
            r"float32; this call writes shape \(3, 4\)")
    refused(lambda: softmax(x, out=ts.full((3, 8), 7.0, ts.float16).sync()),
            "softmax: out= has shape")
    assert np.all(out.numpy() == 7.0)


def test_the_benchmark_cases_check_on_the_cpu():
    """``benchmarks/kernels_activations.py``'s cases, at a small shape on torch's CPU: the
    library call passes the check the GPU run makes before timing, and torch's runs."""
    torch = pytest.importorskip("torch")
    from benchmarks import _rowwise, kernels_activations as bench
    generator = torch.Generator().manual_seed(0)
    for make in (bench.softmax_case, bench.silu_mul_case, bench.gelu_case):
        case = make("float16", 3, 45, "cpu", generator)
        assert 0 < _rowwise.check(case) <= _rowwise.TOLERANCE["float16"]
        assert case.theirs(0).shape == (3, 45)


def test_the_two_gelu_forms_are_tuned_apart():
    """The exact and tanh forms compile to different kernels whose best tiles differ (on an
    H200 the exact form's bf16 winner ran the tanh form at 0.7x torch): one key each."""
    x = tensor(np.zeros((8, 64)), ts.bfloat16)
    launch = activations._launch_gelu
    assert launch.key(x, None, True) != launch.key(x, None, False)
