"""The float modes on cuda:0 against the interpreter: flushed results are zero where the
interpreter's are, NaN-ignoring extrema are exact, and the fast division and exponentials
agree within a few ulp."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc

GPU = "cuda:0"
N = 4096


@ts.kernel
def fast(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
         y: tc.Tensor[tc.f32, (-1,)], MODE: tc.Const[int]):
    a = tc.load_tile_like(x, z)
    b = tc.load_tile_like(y, z)
    if MODE == 0:
        z.store(tc.exp2(a, flush_to_zero=True))
    elif MODE == 1:
        z.store(tc.truediv(a, b, rounding="approx", flush_to_zero=True))
    elif MODE == 2:
        z.store(tc.truediv(a, b, rounding="full"))
    elif MODE == 3:
        z.store(tc.maximum(a, b, propagate_nan=False))
    else:
        z.store(tc.exp(a, approx=True))


def _inputs():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(N) * 40).astype(np.float32)
    y = (rng.standard_normal(N) * 10).astype(np.float32)
    x[:8] = [-130, -127, 1e-39, -1e-39, np.nan, 0, 3, -149]
    y[:8] = [1, np.nan, 1, 2, 1, 1e-39, 1e-39, 1]
    return x, y


def _run(device, mode):
    x, y = _inputs()
    z = ts.full(N, np.nan, ts.float32, device=device).sync()
    out, *_ = fast(z.partition(1024), ts.tensor(x, device=device).sync(),
                   ts.tensor(y, device=device).sync(), mode).sync()
    return out.unpartition().numpy()


@pytest.mark.parametrize("mode, ulps", [(0, 2), (1, 2), (2, 2), (3, 0), (4, None)])
def test_gpu_modes_agree_with_the_interpreter(mode, ulps):
    """``ulps``: the agreement allowed; the fast exp (``2**(x*log2 e)``) inherits the error of
    the product ``x * log2(e)`` (up to one unit in its last place: a relative error up to
    ``|x| * 2**-23`` of the result, ``2 |x|`` ulp at the bottom of a binade) besides its own 2."""
    want, got = _run("cpu", mode), _run(GPU, mode)
    same_nan = np.isnan(want) == np.isnan(got)
    assert same_nan.all(), np.nonzero(~same_nan)
    ok = ~np.isnan(want)
    w, g = want[ok].astype(np.float64), got[ok].astype(np.float64)
    x = _inputs()[0][ok].astype(np.float64)
    allowed = np.full(w.shape, float(ulps)) if ulps is not None else 2 + 2 * np.abs(x)
    assert np.array_equal(w == 0, g == 0)  # flushed (or exact zero) on both
    assert np.array_equal(np.isinf(w), np.isinf(g))
    tiny = float(np.finfo(np.float32).tiny)
    normal = np.isfinite(w) & (np.abs(w) >= tiny)
    spacing = np.spacing(np.abs(w[normal]).astype(np.float32)).astype(np.float64)
    bound = allowed[normal] * spacing
    diff = np.abs(g[normal] - w[normal])
    excess = np.divide(diff, bound, out=np.where(diff > 0, np.inf, 0.0), where=bound > 0)
    worst = int(np.argmax(excess)) if excess.size else 0
    assert not excess.size or excess[worst] <= 1, (
        f"worst: x={x[normal][worst]!r} interpreter {w[normal][worst]!r} gpu {g[normal][worst]!r}"
        f" ({excess[worst]:.2f} of the allowed {allowed[normal][worst]:.1f} ulp)")
    subnormal = np.isfinite(w) & (w != 0) & ~normal  # (the fast forms keep no precision there)
    assert (np.abs(g[subnormal] - w[subnormal]) <= tiny).all()


@ts.kernel
def fused(z: tc.MutTensor[tc.f32, "S"], a: tc.Tensor[tc.f32, (-1,)], b: tc.Tensor[tc.f32, (-1,)],
          c: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.fma(tc.load_tile_like(a, z), tc.load_tile_like(b, z), tc.load_tile_like(c, z)))


def test_fma_on_the_gpu_is_the_interpreters_bit_for_bit():
    """One rounding on both devices, over wide magnitudes (subnormal products, overflow) and
    at sums a float64 sum would round onto an f32 halfway point; ``a * b + c`` written out
    rounds twice and differs from it somewhere in these inputs."""
    rng = np.random.default_rng(11)
    a, b, c = ((rng.uniform(-1, 1, N) * np.exp2(rng.integers(-90, 64, N))).astype(np.float32)
               for _ in range(3))
    a[:3] = [2.0 ** -24 * (1 - 2.0 ** -18), -2.0 ** -24 * (1 - 2.0 ** -18), 3.0]
    b[:3] = [1 + 2.0 ** -18, 1 + 2.0 ** -18, np.inf]
    c[:3] = [1 + 2.0 ** -23, -1 - 2.0 ** -23, 1.0]

    def run(device):
        z = ts.full(N, np.nan, ts.float32, device=device).sync()
        out, *_ = fused(z.partition(1024), *(ts.tensor(v, device=device).sync()
                                             for v in (a, b, c))).sync()
        return out.unpartition().numpy()
    want, got = run("cpu"), run(GPU)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    assert np.array_equal(got[keep].view(np.uint32), want[keep].view(np.uint32))
    assert got[0] == np.float32(1 + 2.0 ** -23)
    with np.errstate(all="ignore"):
        twice = (a * b + c)[keep]  # (numpy: f32 products and sums, each rounded)
    assert not np.array_equal(twice.view(np.uint32), want[keep].view(np.uint32))
