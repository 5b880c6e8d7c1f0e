"""The low-precision floats on cuda:0: conversions bit-exact against the interpreter (all 256
patterns of each 8-bit float, f32 -> f8 with ties and saturation, f32 -> tf32), f8 and tf32
``mma`` (2-D and batched 3-D) against float64, and DLPack exchange of bf16/f8 with torch on the
GPU. Tolerances: an mma result is within 2**-12 (f32 accumulator) or 2**-9 (f16 accumulator)
of the sum of the absolute values of its terms (Hopper's f8 tensor cores accumulate with
reduced precision); conversions are exact."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc

GPU = "cuda:0"


def poisoned(shape, dtype, device):
    return ts.full(shape, float("nan"), dtype, device=device).sync()


@ts.kernel
def to_f32_and_back(w: tc.MutTensor[tc.f32, "S"], z: tc.MutTensor["T", "S"],
                    x: tc.Tensor["T", (-1, -1)], y: tc.Tensor[tc.f32, (-1, -1)]):
    w.store(tc.load_tile_like(x, w).astype(tc.f32))
    z.store(tc.load_tile_like(y, z).astype(z.dtype))


@ts.kernel
def via_tf32(w: tc.MutTensor[tc.f32, "S"], y: tc.Tensor[tc.f32, (-1, -1)]):
    w.store(tc.load_tile_like(y, w).astype(tc.tf32).astype(tc.f32))


def _both(make):
    return [make(device) for device in ("cpu", GPU)]


@pytest.mark.parametrize("dtype", [ts.float8_e4m3fn, ts.float8_e5m2], ids=str)
def test_f8_conversions_match_the_interpreter(rng, dtype):
    patterns = np.arange(256, dtype=np.uint8).view(dtype.storage).reshape(2, 128)
    top = float(ml_dtypes.finfo(dtype.storage).max)
    y = np.concatenate([rng.uniform(-1.2 * top, 1.2 * top, 100), rng.standard_normal(100),
                        [np.inf, -np.inf, np.nan, top * 1.01, -top * 3, 0.0, -0.0,
                         1e-30, 2.0 ** -12, 3 * 2.0 ** -10] + [0.0] * 46]).astype(np.float32)
    y = y.reshape(2, 128)

    def run(device):
        w = poisoned((2, 128), ts.float32, device).partition((2, 128))
        z = poisoned((2, 128), dtype, device).partition((2, 128))
        w, z, *_ = to_f32_and_back(w, z, ts.tensor(patterns, device=device),
                                   ts.tensor(y, device=device)).sync()
        return w.unpartition().numpy(), z.unpartition().numpy()
    (cw, cz), (gw, gz) = _both(run)
    assert np.array_equal(cw, gw, equal_nan=True)
    nan = np.isnan(cz.astype(np.float32))
    assert np.array_equal(np.isnan(gz.astype(np.float32)), nan)
    assert np.array_equal(cz.view(np.uint8)[~nan], gz.view(np.uint8)[~nan])


def test_tf32_conversion_matches_the_interpreter(rng):
    y = (rng.standard_normal((4, 256)) * 10.0 ** rng.integers(-30, 30, (4, 256)))
    y = y.astype(np.float32)
    y[0, :4] = [1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, np.finfo(np.float32).max, np.nan]

    def run(device):
        w = poisoned((4, 256), ts.float32, device).partition((4, 256))
        w, _ = via_tf32(w, ts.tensor(y, device=device)).sync()
        return w.unpartition().numpy()
    cpu, gpu = _both(run)
    assert np.array_equal(cpu, gpu, equal_nan=True)


@ts.kernel
def f8_gemm(z: tc.MutTensor["C", ("BM", "BN")], x: tc.Tensor["A", (-1, -1)],
            y: tc.Tensor["A", (-1, -1)], BK: tc.Const[int], AS: tc.Const[str]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), z.dtype)
    for k in range(tc.num_tiles(px, 1)):
        a, b = px.load((i, k)), py.load((k, j))
        if AS == "tf32":
            a, b = a.astype(tc.tf32), b.astype(tc.tf32)
        acc = tc.mma(a, b, acc)
    z.store(acc)


def _within(got, a, b, accumulator):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    bound = (np.abs(a64) @ np.abs(b64)) * (2.0 ** -12 if accumulator is ts.float32
                                           else 2.0 ** -9)
    assert (np.abs(got.astype(np.float64) - exact) <= bound).all()


@pytest.mark.parametrize("ab,acc", [(ts.float8_e4m3fn, ts.float32),
                                    (ts.float8_e5m2, ts.float32),
                                    (ts.float8_e4m3fn, ts.float16)], ids=str)
def test_f8_gemm_against_float64(rng, ab, acc):
    m, n, k = 300, 200, 520
    a = rng.standard_normal((m, k)).astype(ab.storage)
    b = rng.standard_normal((k, n)).astype(ab.storage)
    z = poisoned((m, n), acc, GPU).partition((128, 128))
    z, *_ = f8_gemm(z, ts.tensor(a, device=GPU), ts.tensor(b, device=GPU), 64, "").sync()
    _within(z.unpartition().numpy(), a, b, acc)


@ts.kernel
def f8_gemm_fast(z: tc.MutTensor[tc.f32, ("BM", "BN")], x: tc.Tensor["A", (-1, -1)],
                 y: tc.Tensor["A", (-1, -1)], BK: tc.Const[int]):
    """``f8_gemm`` with the tensor cores' fast accumulation across the K loop."""
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), tc.f32)
    for k in range(tc.num_tiles(px, 1)):
        acc = tc.mma(px.load((i, k)), py.load((k, j)), acc, fast_accumulation=True)
    z.store(acc)


def test_f8_fast_accumulation_against_float64(rng):
    """Fast accumulation over a long K (64 tiles) stays within the error bound of an f16
    accumulator's (the tensor cores keep fewer bits than f32 across the loop)."""
    m, n, k = 256, 256, 4096
    a = rng.standard_normal((m, k)).astype(ts.float8_e4m3fn.storage)
    b = rng.standard_normal((k, n)).astype(ts.float8_e4m3fn.storage)
    z = poisoned((m, n), ts.float32, GPU).partition((128, 128))
    z, *_ = f8_gemm_fast(z, ts.tensor(a, device=GPU), ts.tensor(b, device=GPU), 64).sync()
    _within(z.unpartition().numpy(), a, b, ts.float16)


def test_tf32_gemm_against_float64(rng):
    m, n, k = 256, 384, 300
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    z = poisoned((m, n), ts.float32, GPU).partition((128, 128))
    z, *_ = f8_gemm(z, ts.tensor(a, device=GPU), ts.tensor(b, device=GPU), 32, "tf32").sync()
    got = z.unpartition().numpy().astype(np.float64)
    tf = np.vectorize(lambda v: float(tc.tf32.round(np.float32(v))))
    _within(got, tf(a), tf(b), ts.float32)
    # and it is a tf32 product: farther from the f32 product than f32 accumulation would be
    ref = a.astype(np.float64) @ b
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) > 1e-5


@ts.kernel
def bmma(z: tc.MutTensor[tc.f32, (4, 64, 32)], x: tc.Tensor[tc.f8e4m3fn, (-1, -1, -1)],
         y: tc.Tensor[tc.f8e4m3fn, (-1, -1, -1)]):
    a = x.partition((4, 64, 128)).load((0, 0, 0))
    b = y.partition((4, 128, 32)).load((0, 0, 0))
    z.store(tc.mma(a, b, tc.zeros((4, 64, 32), tc.f32)))


def test_batched_f8_mma(rng):
    a = rng.standard_normal((4, 64, 128)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((4, 128, 32)).astype(ml_dtypes.float8_e4m3fn)
    z = poisoned((4, 64, 32), ts.float32, GPU).partition((4, 64, 32))
    z, *_ = bmma(z, ts.tensor(a, device=GPU), ts.tensor(b, device=GPU)).sync()
    got = z.unpartition().numpy()
    for i in range(4):
        _within(got[i], a[i], b[i], ts.float32)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_torch_dlpack_on_the_gpu(name):
    torch = pytest.importorskip("torch")
    src = torch.linspace(-3, 3, 64, device="cuda").to(getattr(torch, name)).reshape(8, 8)
    mine = ts.from_dlpack(src)
    assert mine.dtype is ts.dtypes.as_dtype(name) and mine.device.name == GPU
    assert np.array_equal(mine.numpy().astype(np.float32), src.float().cpu().numpy())
    back = torch.from_dlpack(mine)
    assert back.dtype == getattr(torch, name) and back.data_ptr() == src.data_ptr()


@ts.kernel
def lowp_scalars(z: tc.MutTensor[tc.f32, (4,)], s: tc.f8e4m3fn, t: tc.bf16, u: tc.f8e5m2):
    e4 = tc.full((4,), s, tc.f8e4m3fn).astype(tc.f32)
    e5 = tc.full((4,), u, tc.f8e5m2).astype(tc.f32)
    z.store(e4 + tc.full((4,), t, tc.bf16).astype(tc.f32) * e5)


def test_low_precision_scalar_parameters():
    def run(device):
        z = poisoned((4,), ts.float32, device).partition(4)
        z, = lowp_scalars(z, 1.3, 2.5, -3.3).sync()
        return z.unpartition().numpy()
    cpu, gpu = _both(run)
    assert np.array_equal(cpu, gpu) and cpu.tolist() == [1.25 + 2.5 * -3.5] * 4
