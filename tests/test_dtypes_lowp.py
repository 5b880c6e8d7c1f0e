"""The low-precision floats: bf16 and the 8-bit floats on the host (``ml_dtypes`` storage, DLPack),
the device types ``tc.f8e4m3fn``/``tc.f8e5m2``/``tc.tf32`` (conversions, constants, ``mma``
operand rules, batched 3-D ``mma``) and their misuse.

References are independent of the implementation: roundings are checked against an exhaustive
nearest-neighbour search over all 256 decoded bit patterns (ties to the even pattern,
saturating beyond the largest finite value), tf32 against integer arithmetic on the f32 bits,
and ``mma`` against exact rational products (``fractions.Fraction``). Conversions are exact
on every device (the GPU's f32 -> f8 is ``cvt.rn.satfinite``, f32 -> tf32 ``cvt.rn.tf32``). An
``mma`` result on the interpreter must be the correctly rounded value of the exact sum; on a GPU
(``TILESAFE_DEVICE=cuda:0``), which sums on tensor cores in its own order (Hopper's f8 path
with a reduced-precision accumulator), it must be within ``2**-12`` (f32 accumulator) or
``2**-9`` (f16 accumulator) of the sum of the absolute values of the terms. Host and DLPack
tests use the cpu device. Every kernel here is also compiled for sm_90 by
``tests/tileir/test_zz_compile_suite.py``.
"""

from __future__ import annotations

import os
import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe import dtypes as dt
from tilesafe.errors import DTypeError, ShapeError, SignatureError
from tilesafe.host.dlpack_dtypes import capsule_dtype

from conftest import marker_line, poisoned

F8 = [ts.float8_e4m3fn, ts.float8_e5m2]
ON_GPU = ts.default_device().kind != "cpu"
CPU = "cpu"
LARGEST = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# the pattern and value one step beyond the largest finite value (NaN / inf in the format)
BEYOND = {"float8_e4m3fn": (0x7F, 480.0), "float8_e5m2": (0x7C, 65536.0)}


def decoded(dtype) -> np.ndarray:
    """The value of every bit pattern 0..255 of an 8-bit float dtype, as float64."""
    return np.arange(256, dtype=np.uint8).view(dtype.storage).astype(np.float64)


def f8_reference(x: float, dtype, saturate: bool = True) -> float:
    """Round ``x`` to ``dtype`` by searching all finite patterns: nearest, ties to the even
    pattern. ``saturate`` (a kernel's astype): beyond the largest finite value (infinities
    too) gives that value. Otherwise (the host, as ml_dtypes): the next value up is a candidate
    too (pattern 0x7F of e4m3fn, 0x7C of e5m2), and rounding to it gives NaN (e4m3fn) or inf
    (e5m2); inf stays inf in e5m2."""
    x = float(x)
    if np.isnan(x):
        return np.nan
    top = LARGEST[dtype.name]
    if saturate and abs(x) >= top:
        return float(np.copysign(top, x))
    if np.isinf(x):
        return x if dtype is ts.float8_e5m2 else np.nan
    values = decoded(dtype)
    candidates = {p: Fraction(values[p]) for p in range(128) if np.isfinite(values[p])}
    beyond, next_up = BEYOND[dtype.name]
    if not saturate:
        candidates[beyond] = Fraction(next_up)
    best = min(candidates, key=lambda p: (abs(candidates[p] - Fraction(abs(x))), p % 2))
    if best == beyond and not saturate:
        return float(np.copysign(np.inf, x)) if dtype is ts.float8_e5m2 else np.nan
    return float(np.copysign(values[best], x))


def tf32_reference(x: np.float32) -> float:
    """Round an f32 to tf32 (10 mantissa bits) with integer arithmetic on its bits."""
    if np.isnan(x):
        return np.nan
    bits = int(np.float32(x).view(np.uint32))
    low, high = bits & 0x1FFF, bits >> 13
    if low > 0x1000 or low == 0x1000 and high & 1:
        high += 1
    return float(np.uint32(high << 13).view(np.float32))


def same(a, b) -> bool:
    """Equal as float64, NaN equal to NaN, and zeros of equal sign."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return bool(np.array_equal(a, b, equal_nan=True)
                and np.array_equal(np.signbit(a[a == 0]), np.signbit(b[b == 0])))


# ---------------------------------------------------------------------------------------------
# names, host storage, DLPack


def test_names_and_numpy_mapping():
    assert tc.f8e4m3fn is ts.float8_e4m3fn is tc.float8_e4m3fn
    assert tc.f8e5m2 is ts.float8_e5m2 is tc.float8_e5m2
    assert tc.tf32 is ts.tfloat32 is tc.tfloat32
    assert dt.as_dtype("f8e4m3fn") is tc.f8e4m3fn and dt.as_dtype("tfloat32") is tc.tf32
    assert dt.from_numpy(ml_dtypes.float8_e4m3fn) is ts.float8_e4m3fn
    assert dt.from_numpy(ml_dtypes.float8_e5m2) is ts.float8_e5m2
    assert dt.from_numpy(ml_dtypes.bfloat16) is ts.bfloat16
    assert dt.from_numpy(np.uint16) is ts.uint16 and dt.from_numpy(np.float32) is ts.float32
    assert [d.itemsize for d in (ts.bfloat16, *F8)] == [2, 1, 1]
    assert (ts.bfloat16.dlpack_code, ts.float8_e4m3fn.dlpack_code,
            ts.float8_e5m2.dlpack_code) == (4, 10, 12)
    assert not tc.f8e4m3fn.arithmetic and not tc.tf32.arithmetic and tc.bf16.arithmetic
    assert tc.tf32.tile_only and not tc.f8e5m2.tile_only


@pytest.mark.parametrize("dtype", [ts.bfloat16, *F8], ids=str)
def test_host_round_trip_is_a_typed_array(dtype):
    bits = np.arange(256, dtype=np.uint8) if dtype.itemsize == 1 else \
        np.arange(0, 65536, 97, dtype=np.uint16)
    data = bits.view(dtype.storage).reshape(-1, 1)
    t = ts.tensor(data, device=CPU).sync()
    assert t.dtype is dtype
    out = t.numpy()
    assert out.dtype == np.dtype(dtype.storage)
    # every pattern comes back (NaN patterns included: compare bits, NaNs canonicalised)
    nan = np.isnan(data.astype(np.float32))
    assert np.array_equal(out.view(bits.dtype)[~nan], data.view(bits.dtype)[~nan])
    assert np.isnan(out.astype(np.float32)[nan]).all()


@pytest.mark.parametrize("dtype", F8, ids=str)
def test_host_constructor_rounds_as_ml_dtypes(dtype):
    # on the host, rounding is ml_dtypes': nearest even, overflow to inf (e5m2) / NaN (e4m3fn)
    top = LARGEST[dtype.name]
    x = np.array([1.0, 1.0625, 1.1875, -3.3, top, top * 1.03, top * 1.2, -top * 1.2, 1e30,
                  np.inf, -np.inf, np.nan, -0.0, 2.0 ** -12, 2.0 ** -18], dtype=np.float32)
    got = ts.tensor(x, dtype, device=CPU).sync().numpy()
    assert same(got, [f8_reference(float(v), dtype, saturate=False) for v in x])
    assert same(got, x.astype(dtype.storage))  # what ml_dtypes gives for float32 input
    assert got.astype(np.float64)[5] == top
    assert np.isnan(got.astype(np.float64)[6]) == (dtype is ts.float8_e4m3fn)


def test_host_rounding_from_float64_is_not_double_rounding():
    # 1 + 2**-4 is an e4m3 tie (rounds to 1.0); a float64 just above it must round up,
    # although narrowing it to float32 first would land exactly on the tie.
    above = 1.0 + 2.0 ** -4 + 2.0 ** -40
    assert ts.tensor(np.array([above]), ts.float8_e4m3fn, CPU).sync().numpy()[0] == 1.125
    assert ts.float8_e4m3fn.round(np.float64(1.0 + 2.0 ** -4)) == 1.0
    assert ts.float8_e5m2.round(np.float64(1.0 + 2.0 ** -3 + 2.0 ** -45)) == 1.25
    assert ts.float8_e5m2.round(np.float64(1.0 + 2.0 ** -3)) == 1.0
    assert tc.tf32.round(np.float64(1.0 + 2.0 ** -11 + 2.0 ** -40)) == 1.0 + 2.0 ** -10
    assert tc.tf32.round(np.float64(1.0 + 2.0 ** -11)) == 1.0


def test_tf32_is_a_tile_type_only():
    for make in (lambda: ts.zeros((4,), ts.tfloat32), lambda: ts.full((2,), 1.0, "tf32"),
                 lambda: ts.tensor(np.ones(3, np.float32), ts.tfloat32)):
        with pytest.raises(TypeError, match="tf32 is a tile element type only"):
            make()
    with pytest.raises(TypeError, match="no tilesafe equivalent"):
        dt.from_numpy(np.dtype("V3"))


@pytest.mark.parametrize("dtype", [ts.bfloat16, *F8], ids=str)
def test_dlpack_export_carries_the_dtype_code(dtype):
    t = ts.tensor(np.linspace(-2, 2, 12).reshape(3, 4), dtype, CPU).sync()
    for capsule in (t.__dlpack__(), t.__dlpack__(max_version=(1, 0))):
        assert capsule_dtype(capsule) == (dtype.dlpack_code, dtype.bits, 1)
    back = ts.from_dlpack(t)  # tilesafe -> DLPack -> tilesafe: the same memory
    assert back.dtype is dtype and back._address() == t._address()
    assert back.numpy().dtype == np.dtype(dtype.storage)
    assert np.array_equal(back.numpy().view(np.uint8), t.numpy().view(np.uint8))


@pytest.mark.parametrize("dtype", [ts.bfloat16, *F8], ids=str)
def test_dlpack_import_of_ml_dtypes_arrays_is_zero_copy(dtype):
    host = np.arange(24, dtype=np.float32).reshape(4, 6).astype(dtype.storage)
    view = host[1:, ::2]
    t = ts.from_dlpack(view)
    assert t.dtype is dtype and t.shape == (3, 3) and t.strides == (6, 2)
    assert t._address() == view.ctypes.data
    assert same(t.numpy(), view)
    ro = host.copy()
    ro.flags.writeable = False
    assert ts.from_dlpack(ro).is_read_only


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_dlpack_with_torch(name):
    torch = pytest.importorskip("torch")
    dtype = dt.as_dtype(name)
    src = torch.linspace(-3, 3, 16).to(getattr(torch, name)).reshape(4, 4)
    t = ts.from_dlpack(src)
    assert t.dtype is dtype
    assert np.array_equal(t.numpy().astype(np.float32), src.float().numpy())
    back = torch.from_dlpack(t)
    assert back.dtype == getattr(torch, name) and torch.equal(back.float(), src.float())


# ---------------------------------------------------------------------------------------------
# conversions in kernels


@ts.kernel
def convert_k(z: tc.MutTensor["D", ("M", "N")], x: tc.Tensor["S", (-1, -1)],
              M: tc.Const[int], N: tc.Const[int], VIA: tc.Const[str]):
    t = x.partition((M, N)).load((0, 0))
    if VIA == "tf32":
        t = t.astype(tc.tf32)
    elif VIA == "e4m3":
        t = t.astype(tc.f8e4m3fn)
    z.store(t.astype(z.dtype))


def convert(x: np.ndarray, source, target, via: str = "") -> np.ndarray:
    """``x`` (a 1-D array of ``source`` values) converted in a kernel (one tile, padded to a
    power of two)."""
    n = len(x)
    width = 1 << max(n - 1, 1).bit_length()
    padded = np.zeros((1, width), dtype=np.asarray(x).dtype)
    padded[0, :n] = x
    z = poisoned((1, width), target).partition((1, width))
    z, _ = convert_k(z, ts.tensor(padded, source), 1, width, via).sync()
    return z.unpartition().numpy()[0, :n]


@pytest.mark.parametrize("dtype", F8, ids=str)
def test_every_f8_pattern_survives_f8_to_f32_to_f8(dtype):
    patterns = np.arange(256, dtype=np.uint8).view(dtype.storage)
    wide = convert(patterns, dtype, ts.float32)
    assert same(wide, decoded(dtype))  # f8 -> f32 is exact
    back = convert(wide.astype(np.float32), ts.float32, dtype)
    finite = np.isfinite(decoded(dtype))
    assert np.array_equal(back.view(np.uint8)[finite], np.arange(256)[finite])
    assert np.isnan(back.astype(np.float32)[np.isnan(decoded(dtype))]).all()
    if dtype is ts.float8_e5m2:  # +-inf saturate to +-57344
        inf = np.isinf(decoded(dtype))
        assert back.astype(np.float32)[inf].tolist() == [57344.0, -57344.0]


@pytest.mark.parametrize("dtype", F8, ids=str)
def test_f32_to_f8_rounds_to_nearest_even_and_saturates(dtype, rng):
    values = decoded(dtype)
    finite = np.sort(np.unique(values[np.isfinite(values)]))
    mids = (finite[:-1] + finite[1:]) / 2  # every tie
    top = LARGEST[dtype.name]
    x = np.concatenate([mids, np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
                        np.nextafter(mids.astype(np.float32), np.float32(-np.inf)),
                        rng.uniform(-top * 1.2, top * 1.2, 200), rng.standard_normal(200),
                        [top * 1.07, -top * 1.5, 1e38, -1e38, np.inf, -np.inf, np.nan,
                         0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    got = convert(x, ts.float32, dtype)
    assert got.dtype == np.dtype(dtype.storage)
    assert same(got, [f8_reference(float(v), dtype) for v in x])


def test_e4m3_tie_and_subnormal_cases():
    x = np.array([1.0625, 1.1875, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -10 + 2.0 ** -20, 464.0,
                  465.0, -464.0], dtype=np.float32)
    got = convert(x, ts.float32, ts.float8_e4m3fn).astype(np.float64)
    assert got.tolist() == [1.0, 1.25, 0.0, 2.0 ** -8, 2.0 ** -9, 448.0, 448.0, -448.0]


@pytest.mark.parametrize("source", [ts.float16, ts.bfloat16], ids=str)
@pytest.mark.parametrize("dtype", F8, ids=str)
def test_half_floats_to_f8_and_back(source, dtype, rng):
    x = rng.uniform(-600, 600, 128)
    x[:4] = [np.inf, -np.inf, np.nan, 60000.0 if source is ts.float16 else 1e30]
    halves = source.round(x).astype(np.float64)  # what the input tensor holds
    got = convert(halves, source, dtype)
    assert same(got, [f8_reference(v, dtype) for v in halves])
    back = convert(got.astype(np.float64), dtype, source)  # f8 -> f16/bf16 is exact
    assert same(back, got)


def test_between_the_two_f8_formats():
    e4 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    got = convert(e4.astype(np.float64), ts.float8_e4m3fn, ts.float8_e5m2)
    assert same(got, [f8_reference(v, ts.float8_e5m2) for v in decoded(ts.float8_e4m3fn)])
    e5 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    got = convert(e5.astype(np.float64), ts.float8_e5m2, ts.float8_e4m3fn)
    assert same(got, [f8_reference(v, ts.float8_e4m3fn) for v in decoded(ts.float8_e5m2)])


def test_f32_to_tf32_rounds_to_nearest_even(rng):
    one = np.float32(1.0)
    ulp = 2.0 ** -10
    x = np.concatenate([
        [1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2.0 ** -23, -(1 + ulp / 2),
         np.finfo(np.float32).max, -np.finfo(np.float32).max, np.inf, np.nan, 1e-40, -0.0],
        rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300)]).astype(np.float32)
    got = convert(x, ts.float32, ts.float32, via="tf32")
    assert same(got, [tf32_reference(v) for v in x])
    assert got[0] == one and got[1] == 1 + 2 * ulp and got[2] == 1 + ulp
    assert got[4] == np.inf and got[5] == -np.inf  # overflow rounds to inf (no saturation)


def test_tf32_to_f8_and_f8_constants():
    x = np.array([1.0 + 2.0 ** -11, 300.0, 1000.0], dtype=np.float32)
    got = convert(x, ts.float32, ts.float32, via="e4m3")
    assert got.tolist() == [1.0, 288.0, 448.0]


@ts.kernel
def f8_constants_k(z: tc.MutTensor[tc.f32, (2, 8)], w: tc.MutTensor[tc.f8e5m2, (2, 8)]):
    a = tc.full((2, 8), 0.3, tc.f8e4m3fn).astype(tc.f32)
    ramp = tc.broadcast(tc.arange(8, tc.i32).astype(tc.f32).reshape((1, 8)), (2, 8))
    b = (ramp * 70.0).astype(tc.f8e4m3fn).astype(tc.f32)
    t = tc.full((2, 8), 1.0 + 2.0 ** -11, tc.tf32).astype(tc.f32)
    z.store(a + b + t)
    w.store(tc.where(b > 100.0, tc.full((2, 8), 3.0, tc.f8e5m2),
                     tc.zeros((2, 8), tc.f8e5m2)))


def test_f8_and_tf32_constants_and_a_saturating_astype():
    z = poisoned((2, 8)).partition((2, 8))
    w = poisoned((2, 8), ts.float8_e5m2).partition((2, 8))
    z, w = f8_constants_k(z, w).sync()
    ramp = [0.0, 72.0, 144.0, 208.0, 288.0, 352.0, 416.0, 448.0]  # 490 saturates to 448
    assert ramp == [f8_reference(70.0 * i, ts.float8_e4m3fn) for i in range(8)]
    want = 0.3125 + np.array(ramp) + 1.0  # 0.3 -> 0.3125 in e4m3; 1 + 2**-11 -> 1 in tf32
    assert np.array_equal(z.unpartition().numpy(), np.array([want, want], dtype=np.float32))
    assert w.unpartition().numpy().astype(np.float32)[0].tolist() == [0.0, 0.0] + [3.0] * 6


def test_dense_constant_buffers_of_f8_and_tf32():
    from tilesafe.backends.tileir.bytecode import F8E4M3FN, F8E5M2, TF32, TileType
    from tilesafe.backends.tileir.bytecode.constants import dense_buffer, scalar_bits
    values = np.array([0.5, -2.0, 448.0, -0.0, 2.0 ** -9, 1.0625, np.nan, 3.0])
    want = values.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert dense_buffer(values, TileType(F8E4M3FN, (8,))) == bytes(want)
    assert dense_buffer(1.0, TileType(F8E5M2, (4, 4))) == b"\x3c"  # a splat: one byte
    assert scalar_bits(-np.inf, F8E5M2) == 0xFC and scalar_bits(57344.0, F8E5M2) == 0x7B
    with pytest.raises(ValueError, match="out of the range"):
        scalar_bits(500.0, F8E4M3FN)
    with pytest.raises(ValueError, match="no infinity"):
        scalar_bits(np.inf, F8E4M3FN)
    # tf32: 3 bytes per element, the f32 pattern shifted down by 13 bits, rounded to even
    buf = dense_buffer(np.array([1.0, 1.0 + 2.0 ** -11, -2.0, 1.0 + 3 * 2.0 ** -11]),
                       TileType(TF32, (4,)))
    assert buf == b"".join(v.to_bytes(3, "little") for v in (
        0x3F800000 >> 13, 0x3F800000 >> 13, 0xC0000000 >> 13, (0x3F800000 >> 13) + 2))


# ---------------------------------------------------------------------------------------------
# mma


@ts.kernel
def lowp_mma_k(z: tc.MutTensor["C", ("M", "N")], a: tc.Tensor["A", (-1, -1)],
               b: tc.Tensor["A", (-1, -1)], c: tc.Tensor["C", (-1, -1)], M: tc.Const[int],
               N: tc.Const[int], K: tc.Const[int], AS: tc.Const[str], MODE: tc.Const[str]):
    ta, tb = a.partition((M, K)).load((0, 0)), b.partition((K, N)).load((0, 0))
    if AS == "tf32":
        ta, tb = ta.astype(tc.tf32), tb.astype(tc.tf32)
    elif AS == "e5m2":
        ta, tb = ta.astype(tc.f8e5m2), tb.astype(tc.f8e5m2)
    if MODE == "mma":
        z.store(tc.mma(ta, tb, tc.load_tile_like(c, z)))
    else:
        z.store(ta @ tb)


@ts.kernel
def lowp_bmma_k(z: tc.MutTensor["C", ("B", "M", "N")], a: tc.Tensor["A", (-1, -1, -1)],
                b: tc.Tensor["A", (-1, -1, -1)], c: tc.Tensor["C", (-1, -1, -1)],
                B: tc.Const[int], M: tc.Const[int], N: tc.Const[int], K: tc.Const[int],
                AS: tc.Const[str], MODE: tc.Const[str]):
    ta, tb = a.partition((B, M, K)).load((0, 0, 0)), b.partition((B, K, N)).load((0, 0, 0))
    if AS == "tf32":
        ta, tb = ta.astype(tc.tf32), tb.astype(tc.tf32)
    if MODE == "mma":
        z.store(tc.mma(ta, tb, tc.load_tile_like(c, z)))
    else:
        z.store(tc.matmul(ta, tb))


def exact_mma(a, b, c):
    """The exact ``a @ b + c`` (batched over a leading axis) as Fractions."""
    frac = np.vectorize(lambda v: Fraction(float(v)), otypes=[object])
    A, B, C = frac(a), frac(b), frac(c)
    if A.ndim == 2:
        return A.dot(B) + C
    return np.stack([A[i].dot(B[i]) for i in range(A.shape[0])]) + C


def assert_mma_result(res, a, b, c, dtype):
    """``res`` against the exact ``a @ b + c``: correctly rounded to ``dtype`` on the
    interpreter; on a GPU within 2**-12 (f32) or 2**-9 (f16) of the sum of |terms|."""
    exact = exact_mma(a, b, c)
    res = np.asarray(res).astype(np.float64)
    if ON_GPU:
        f64 = [np.asarray(v).astype(np.float64) for v in (a, b, c)]
        terms = np.abs(f64[0]) @ np.abs(f64[1]) + np.abs(f64[2])
        bound = terms * (2.0 ** -12 if dtype is ts.float32 else 2.0 ** -9)
        error = np.abs(res - exact.astype(np.float64))
        assert (error <= bound).all(), float(np.max(error / np.maximum(bound, 1e-300)))
        return
    spacing = np.spacing(np.abs(res).astype(dtype.storage))
    for r, e, s in zip(res.reshape(-1), exact.reshape(-1), spacing.reshape(-1)):
        assert abs(Fraction(r) - e) <= Fraction(float(s)) / 2, (r, float(e))


def run_mma(a, b, c, ab, acc, as_="", mode="mma"):
    z = poisoned(c.shape, acc).partition(c.shape)
    *batch, m, k = a.shape
    n = b.shape[-1]
    kernel, dims = (lowp_bmma_k, (batch[0], m, n, k)) if batch else (lowp_mma_k, (m, n, k))
    z, *_ = kernel(z, ts.tensor(a, ab), ts.tensor(b, ab), ts.tensor(c, acc), *dims, as_,
                   mode).sync()
    return z.unpartition().numpy()


def f8_operands(rng, dtype, shape):
    """Random finite values of an 8-bit float format (|x| <= 16, so sums stay modest)."""
    values = decoded(dtype)
    pool = values[np.isfinite(values) & (np.abs(values) <= 16)]
    return rng.choice(pool, shape).astype(dtype.storage)


@pytest.mark.parametrize("shape", [(16, 32, 16), (2, 8, 64, 16)], ids=["2d", "3d"])
@pytest.mark.parametrize("ab,acc", [(ts.float8_e4m3fn, ts.float32),
                                    (ts.float8_e4m3fn, ts.float16),
                                    (ts.float8_e5m2, ts.float32),
                                    (ts.float8_e5m2, ts.float16)], ids=str)
def test_f8_mma_against_exact_products(rng, ab, acc, shape):
    *batch, m, k, n = shape
    a, b = f8_operands(rng, ab, (*batch, m, k)), f8_operands(rng, ab, (*batch, k, n))
    c = acc.round(rng.uniform(-4, 4, (*batch, m, n))).astype(acc.storage)
    res = run_mma(a, b, c, ab, acc)
    assert res.dtype == np.dtype(acc.storage)
    assert_mma_result(res, a, b, c, acc)


@pytest.mark.parametrize("shape", [(16, 32, 16), (4, 8, 32, 16)], ids=["2d", "3d"])
def test_tf32_mma_rounds_the_f32_operands(rng, shape):
    *batch, m, k, n = shape
    # 16 significant bits: tf32 (11) must round them, and the exact sums fit float64
    a = (rng.integers(-2 ** 15, 2 ** 15, (*batch, m, k)) * 2.0 ** -12).astype(np.float32)
    b = (rng.integers(-2 ** 15, 2 ** 15, (*batch, k, n)) * 2.0 ** -12).astype(np.float32)
    c = rng.uniform(-4, 4, (*batch, m, n)).astype(np.float32)
    res = run_mma(a, b, c, ts.float32, ts.float32, as_="tf32")
    ta = np.vectorize(tf32_reference)(a)
    tb = np.vectorize(tf32_reference)(b)
    assert_mma_result(res, ta, tb, c, ts.float32)
    assert not np.array_equal(res, (a.astype(np.float64) @ b + c).astype(np.float32))


def test_e5m2_mma_from_f32_inputs(rng):
    a = rng.uniform(-3, 3, (16, 16)).astype(np.float32)
    b = rng.uniform(-3, 3, (16, 16)).astype(np.float32)
    c = np.zeros((16, 16), np.float32)
    res = run_mma(a, b, c, ts.float32, ts.float32, as_="e5m2")
    ra = np.vectorize(lambda v: f8_reference(v, ts.float8_e5m2))(a)
    rb = np.vectorize(lambda v: f8_reference(v, ts.float8_e5m2))(b)
    assert_mma_result(res, ra, rb, c, ts.float32)


@pytest.mark.parametrize("shape", [(16, 32, 8), (2, 16, 16, 32)], ids=["2d", "3d"])
@pytest.mark.parametrize("ab", [ts.float8_e4m3fn, ts.float16], ids=str)
def test_matmul_operator_of_f8_is_f32_and_batched(rng, ab, shape):
    *batch, m, k, n = shape
    if ab is ts.float16:
        a = rng.integers(-8, 8, (*batch, m, k)).astype(np.float16)
        b = rng.integers(-8, 8, (*batch, k, n)).astype(np.float16)
    else:
        a, b = f8_operands(rng, ab, (*batch, m, k)), f8_operands(rng, ab, (*batch, k, n))
    out = ts.float32 if ab is ts.float8_e4m3fn else ts.float16  # f16 @ f16 stays f16
    c = np.zeros((*batch, m, n), out.storage)
    res = run_mma(a, b, c, ab, out, mode="@")
    assert res.dtype == np.dtype(out.storage)
    assert_mma_result(res, a, b, c, out)


def test_batched_mma_matches_each_batch_of_2d(rng):
    a = rng.integers(-4, 4, (4, 16, 8)).astype(np.float16)
    b = rng.integers(-4, 4, (4, 8, 32)).astype(np.float16)
    c = rng.integers(-4, 4, (4, 16, 32)).astype(np.float32)
    res = run_mma(a, b, c, ts.float16, ts.float32)
    for i in range(4):
        two = run_mma(a[i], b[i], c[i], ts.float16, ts.float32)
        assert np.array_equal(res[i], two)
    assert np.array_equal(res, np.matmul(a.astype(np.float64), b) + c)


# ---------------------------------------------------------------------------------------------
# misuse


@ts.kernel
def bad_lowp(z: tc.MutTensor[tc.f32, (16, 16)], CASE: tc.Const[int]):
    e4 = tc.zeros((16, 16), tc.f8e4m3fn)
    e5 = tc.zeros((16, 16), tc.f8e5m2)
    if CASE == 0:
        r = tc.mma(e4, tc.zeros((16, 16), tc.f16), tc.zeros((16, 16)))  # <- mixed
    elif CASE == 1:
        r = tc.mma(e4, e5, tc.zeros((16, 16)))  # <- e4e5
    elif CASE == 2:
        r = tc.mma(e4, e4, tc.zeros((16, 16), tc.i32)).astype(tc.f32)  # <- i32acc
    elif CASE == 3:
        r = tc.mma(e5, e5, tc.zeros((16, 16), tc.bf16)).astype(tc.f32)  # <- bf16acc
    elif CASE == 4:
        t = tc.zeros((16, 16), tc.f32).astype(tc.tf32)
        r = tc.mma(t, t, tc.zeros((16, 16), tc.f16)).astype(tc.f32)  # <- tf32f16
    elif CASE == 5:
        r = (e4 + e4).astype(tc.f32)  # <- add
    elif CASE == 6:
        r = tc.zeros((16, 16)) + tc.reduce_sum(e5, 0).astype(tc.f32)  # <- reduce
    elif CASE == 7:
        r = tc.where(e4 > e4, 1.0, 0.0)  # <- compare
    elif CASE == 8:
        r = e4.astype(tc.i32).astype(tc.f32)  # <- toint
    elif CASE == 9:
        r = tc.zeros((16, 16), tc.f64).astype(tc.f8e4m3fn).astype(tc.f32)  # <- fromf64
    elif CASE == 10:
        r = tc.exp(tc.zeros((16, 16), tc.f32).astype(tc.tf32)).astype(tc.f32)  # <- exp
    elif CASE == 13:
        r = tc.full((16, 16), 1000.0, tc.f8e4m3fn).astype(tc.f32)  # <- bigconst
    elif CASE == 11:
        r = tc.mma(tc.zeros((2, 16, 8), tc.f16), tc.zeros((4, 8, 16), tc.f16),  # <- batch
                   tc.zeros((2, 16, 16))).reshape((2, 256))[0].reshape((16, 16))
    else:
        r = tc.mma(tc.zeros((2, 16, 8), tc.f16), tc.zeros((8, 16), tc.f16),  # <- rank
                   tc.zeros((2, 16, 16)))
    z.store(r)


@pytest.mark.parametrize("case,tag,err,match", [
    (0, "mixed", DTypeError, r"mma: operand types differ \(f8e4m3fn and f16\)"),
    (1, "e4e5", DTypeError, r"operand types differ \(f8e4m3fn and f8e5m2\)"),
    (2, "i32acc", DTypeError, "a i32 accumulator does not fit f8e4m3fn operands"),
    (3, "bf16acc", DTypeError, "a bf16 accumulator does not fit f8e5m2 operands"),
    (4, "tf32f16", DTypeError, "a f16 accumulator does not fit tf32 operands"),
    (5, "add", DTypeError, "add does not accept f8e4m3fn tiles: f8e4m3fn is a storage and mma"),
    (6, "reduce", DTypeError, "reduce_sum does not accept f8e5m2 tiles"),
    (7, "compare", DTypeError, "greater does not accept f8e4m3fn tiles"),
    (8, "toint", DTypeError, r"astype: f8e4m3fn -> i32 is not supported"),
    (9, "fromf64", DTypeError, r"astype: f64 -> f8e4m3fn is not supported"),
    (10, "exp", DTypeError, "exp does not accept tf32 tiles"),
    (11, "batch", ShapeError, "mma batch dimensions differ"),
    (12, "rank", ShapeError, "all of one rank"),
    (13, "bigconst", DTypeError, "constant 1000.0 does not fit in f8e4m3fn"),
])
def test_lowp_misuse_is_a_compile_error_at_the_line(case, tag, err, match):
    with pytest.raises(err, match=match) as info:
        bad_lowp(ts.zeros((16, 16)).sync().partition((16, 16)), case).sync()
    location = info.value.location
    assert location is not None and os.path.samefile(location.file, __file__)
    assert location.line == marker_line(__file__, tag)
    assert info.value.hint  # says how to fix it


@ts.kernel
def f8_padding_k(z: tc.MutTensor[tc.f8e4m3fn, (4, 8)], x: tc.Tensor[tc.f8e4m3fn, (-1, -1)],
                 PAD: tc.Const[float]):
    z.store(x.partition((4, 8), padding=PAD).load((0, 0)))


def test_f8_padding_values():
    x = ts.tensor(np.ones((3, 5), ml_dtypes.float8_e4m3fn)).sync()
    for pad in (0.0, -0.0, float("nan")):
        z, _ = f8_padding_k(poisoned((4, 8), ts.float8_e4m3fn).partition((4, 8)), x,
                            pad).sync()
        got = z.unpartition().numpy().astype(np.float64)
        want = np.full((4, 8), pad)
        want[:3, :5] = 1.0
        assert same(got, want)
    with pytest.raises(DTypeError, match="padding inf: f8e4m3fn has no infinity"):
        f8_padding_k(poisoned((4, 8), ts.float8_e4m3fn).partition((4, 8)), x,
                     float("inf")).sync()


def test_accumulator_hint_names_the_allowed_types():
    with pytest.raises(DTypeError) as info:
        bad_lowp(ts.zeros((16, 16)).sync().partition((16, 16)), 2).sync()
    assert "use an accumulator of f16 or f32" in str(info.value)


def test_tf32_parameters_are_signature_errors():
    with pytest.raises(SignatureError, match="a tensor parameter cannot hold tf32"):
        @ts.kernel
        def k1(x: tc.Tensor[tc.tf32, (-1,)]):
            pass
    with pytest.raises(SignatureError, match="a scalar parameter cannot hold tf32"):
        @ts.kernel
        def k2(z: tc.MutTensor[tc.f32, (4,)], s: tc.tf32):
            z.store(tc.full((4,), s, tc.f32))
        k2(ts.zeros(4).sync().partition(4), 1.0).sync()
    with pytest.raises(SignatureError, match="a raw pointer cannot hold tf32"):
        @ts.kernel
        def k3(p: tc.Ptr[tc.tf32]):
            pass


# ---------------------------------------------------------------------------------------------
# the Tile IR lowering


def _tile_ir_text(kernel, *args) -> str:
    import subprocess
    import tempfile
    from tilesafe.backends.tileir import tileiras
    from tilesafe.backends.tileir.lower import lower_kernel
    disasm = tileiras.find_tileirdisasm()
    if disasm is None:
        pytest.skip("tileirdisasm is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.tileirbc")
        with open(path, "wb") as f:
            f.write(lower_kernel(kernel.ir(*args)))
        done = subprocess.run([disasm, path], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_lowering_converts_through_f32_and_multiplies_f8_natively():
    z = ts.zeros((1, 8), ts.float8_e5m2).sync().partition((1, 8))
    text = _tile_ir_text(convert_k, z, ts.zeros((1, 8), ts.float16).sync(), 1, 8, "")
    ftofs = [line.split(":")[1].strip() for line in text.splitlines() if " ftof " in line]
    assert ftofs == ["tile<1x8xf16> -> tile<1x8xf32>", "tile<1x8xf32> -> tile<1x8xf8E5M2>"]
    z = ts.zeros((16, 16), ts.float32).sync().partition((16, 16))
    text = _tile_ir_text(lowp_mma_k, z, *(ts.zeros((16, 16), d).sync() for d in (
        ts.float32, ts.float32, ts.float32)), 16, 16, 16, "tf32", "mma")
    assert "tile<16x16xf32> -> tile<16x16xtf32>" in text
    assert re.search(r"mmaf .*tile<16x16xtf32>", text)
    z = ts.zeros((2, 8, 16), ts.float16).sync().partition((2, 8, 16))
    e4 = ts.float8_e4m3fn
    text = _tile_ir_text(lowp_bmma_k, z, ts.zeros((2, 8, 64), e4).sync(),
                         ts.zeros((2, 64, 16), e4).sync(), ts.zeros((2, 8, 16), ts.float16).sync(),
                         2, 8, 16, 64, "", "mma")
    assert re.search(r"mmaf .*tile<2x8x64xf8E4M3FN>.*tile<2x8x16xf16>", text)
