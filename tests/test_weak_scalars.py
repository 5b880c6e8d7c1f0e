"""Weakly typed runtime scalars: a kernel parameter declared ``float`` or ``int`` adapts to the
dtype of the tile it meets, as a Python number does (the rule: ``compiler/builder.py``). A
``float`` meeting an f16/bf16/f64 tile is converted to that dtype (rounded to nearest even
from its f32 value), an ``int`` meeting a narrow or unsigned int tile wraps into it, an ``int``
meeting a float tile is rounded into it; a ``float`` with an int tile stays an error, as a float
literal is, and a scalar declared with a dtype (``tc.f32``) stays strong. Every weak kernel is
checked against the same kernel with the conversion written out (``.astype``), which must give
bit-identical results; the suite's last test compiles all of them for sm_90.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line, poisoned, wrap
from tilesafe.errors import DTypeError

FLOATS = (ts.float16, ts.bfloat16, ts.float32, ts.float64)
INTS = (ts.int8, ts.int16, ts.int32, ts.int64, ts.uint8, ts.uint16, ts.uint32, ts.uint64)


def run(kernel, dtype, x: np.ndarray, *scalars) -> np.ndarray:
    z = poisoned(x.shape[0], dtype).partition(8)
    z, *_ = kernel(z, ts.tensor(x, dtype=dtype), *scalars).sync()
    return z.unpartition().numpy()


# ---------------------------------------------------------------------------------------------
# float parameters with float tiles


@ts.kernel
def float_weak(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], eps: float, s: float):
    t = tc.load_tile_like(x, z)
    inv = 1.0 / s                             # weak op weak: still weak
    y = (t + eps) * inv - tc.maximum(t, -eps)
    z.store(tc.where(t > eps, y, y * s) + (eps if s > 0 else -eps))


@ts.kernel
def float_explicit(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], eps: float, s: float):
    t = tc.load_tile_like(x, z)
    T = z.dtype
    e, sv = eps.astype(T), s.astype(T)
    inv = (1.0 / s).astype(T)
    y = (t + e) * inv - tc.maximum(t, -e)
    z.store(tc.where(t > e, y, y * sv) + (e if s > 0 else -e))


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short)
@pytest.mark.parametrize("eps,s", [(1e-5, 3.0), (0.1, -0.7), (1 + 2**-11 + 2**-30, 1e3)])
def test_float_parameter_adapts_to_float_tiles(rng, dtype, eps, s):
    x = rng.standard_normal(20).astype(np.float32)
    weak = run(float_weak, dtype, x, eps, s)
    explicit = run(float_explicit, dtype, x, eps, s)
    np.testing.assert_array_equal(weak.view(np.uint8), explicit.view(np.uint8))
    assert float_weak.compile_count == float_explicit.compile_count


@ts.kernel
def f16_add(z: tc.MutTensor[tc.f16, "S"], x: tc.Tensor[tc.f16, (-1,)], eps: float):
    z.store(tc.load_tile_like(x, z) + eps)


def test_float_parameter_is_an_f32_rounded_to_nearest_even_into_f16():
    x = np.zeros(8, np.float16)
    eps = 1 + 2**-11 + 2**-30   # as f32 exactly halfway between two f16s: rounds to even (1.0)
    got = run(f16_add, ts.float16, x, eps)
    assert (got == np.float16(np.float32(eps))).all() and (got == 1.0).all()
    assert np.float16(eps) != 1.0                # (a literal rounds from the double instead)
    ops = [op.name for op in f16_add.ir(poisoned(8, ts.float16).partition(8),
                                        ts.tensor(x), eps).walk()]
    assert "convert" in ops
    text = f16_add.ir_text(poisoned(8, ts.float16).partition(8), ts.tensor(x), eps)
    assert "weak tile<f32>" in text


@ts.kernel
def f64_mul(z: tc.MutTensor[tc.f64, "S"], x: tc.Tensor[tc.f64, (-1,)], eps: float):
    z.store(tc.load_tile_like(x, z) * eps)


def test_float_parameter_widens_exactly_into_f64():
    x = np.linspace(-3, 3, 8)
    got = run(f64_mul, ts.float64, x, 0.1)
    np.testing.assert_array_equal(got, x * np.float64(np.float32(0.1)))


# ---------------------------------------------------------------------------------------------
# int parameters with int and float tiles


@ts.kernel
def int_weak(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], n: int, m: int):
    t = tc.load_tile_like(x, z)
    k = n * m + 1                             # weak i32 arithmetic, then wrapped into T
    z.store(((t + n) * m - (t ^ k)) % 7 + tc.where(t < n, n, t // 3))


@ts.kernel
def int_explicit(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], n: int, m: int):
    t = tc.load_tile_like(x, z)
    T = z.dtype
    nv, mv = n.astype(T), m.astype(T)
    k = (n * m + 1).astype(T)
    z.store(((t + nv) * mv - (t ^ k)) % 7 + tc.where(t < nv, nv, t // 3))


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.short)
@pytest.mark.parametrize("n,m", [(3, 5), (300, -2), (-1, 70000), (2**31 - 1, -(2**31))])
def test_int_parameter_wraps_into_int_tiles(rng, dtype, n, m):
    info = np.iinfo(dtype.storage)
    x = rng.integers(max(info.min, -100), min(info.max, 100), 24).astype(dtype.storage)
    weak = run(int_weak, dtype, x, n, m)
    explicit = run(int_explicit, dtype, x, n, m)
    np.testing.assert_array_equal(weak, explicit)


@ts.kernel
def u8_add(z: tc.MutTensor[tc.u8, "S"], x: tc.Tensor[tc.u8, (-1,)], n: int):
    z.store(tc.load_tile_like(x, z) + n)


def test_int_parameter_wraps_like_astype():
    x = np.arange(8, dtype=np.uint8)
    for n in (300, -1, 255):
        got = run(u8_add, ts.uint8, x, n)
        assert got.tolist() == [wrap(int(v) + n, ts.uint8) for v in x]


@ts.kernel
def int_into_float(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], n: int):
    t = tc.load_tile_like(x, z)
    z.store(t * n + n)


@ts.kernel
def int_into_float_explicit(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], n: int):
    t = tc.load_tile_like(x, z)
    nv = n.astype(z.dtype)
    z.store(t * nv + nv)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short)
def test_int_parameter_rounds_into_float_tiles(dtype):
    x = np.ones(8, np.float32)
    for n in (2049, -7, 2**31 - 1):               # 2049 is no f16: it rounds to 2048 (even)
        weak = run(int_into_float, dtype, x, n)
        explicit = run(int_into_float_explicit, dtype, x, n)
        np.testing.assert_array_equal(weak.view(np.uint8), explicit.view(np.uint8))
        if dtype is ts.float16 and n == 2049:
            assert (weak == 4096).all()


# ---------------------------------------------------------------------------------------------
# weak values in branches, loops and stores


@ts.kernel
def weak_merges(z: tc.MutTensor[tc.f16, (8,)], w: tc.MutTensor[tc.f16, (1,)],
                h: tc.f16, eps: float, flag: bool, n: int):
    if flag:
        m = h
    else:
        m = eps                                   # takes the other branch's dtype: f16
    acc = tc.zeros((), tc.f16)
    for i in range(n):
        acc = eps                                 # takes the carried variable's dtype
    z.store(tc.full((8,), m + acc))
    w.store(eps)                                  # a weak scalar stored: converted to f16


@pytest.mark.parametrize("flag,n", [(True, 0), (False, 0), (True, 2), (False, 1)])
def test_weak_scalars_in_if_merges_loops_and_stores(flag, n):
    z, w = poisoned(8, ts.float16).partition(8), poisoned(1, ts.float16).partition(1)
    z, w, *_ = weak_merges(z, w, 0.5, 0.3, flag, n).sync()
    eps16 = np.float16(np.float32(0.3))
    m = np.float16(0.5) if flag else eps16
    acc = eps16 if n else np.float16(0)
    assert (z.unpartition().numpy() == m + acc).all()
    assert w.unpartition().numpy().tolist() == [eps16]


# ---------------------------------------------------------------------------------------------
# what stays an error


@ts.kernel
def float_with_int_tile(z: tc.MutTensor[tc.i32, "S"], x: tc.Tensor[tc.i32, (-1,)],
                        eps: float):
    z.store(tc.load_tile_like(x, z) * eps)  # <- float-int


@ts.kernel
def strong_f32_with_f16(z: tc.MutTensor[tc.f16, "S"], x: tc.Tensor[tc.f16, (-1,)],
                        eps: tc.f32):
    z.store(tc.load_tile_like(x, z) * eps)  # <- strong-f32


@ts.kernel
def int_with_bool_tile(z: tc.MutTensor[tc.bool_, "S"], x: tc.Tensor[tc.bool_, (-1,)],
                       n: int):
    z.store(tc.load_tile_like(x, z) & n)  # <- int-bool


@ts.kernel
def float_stored_into_int(z: tc.MutTensor[tc.i32, (1,)], eps: float):
    z.store(eps)  # <- float-store


@pytest.mark.parametrize("kernel,args,phrase,hint,tag", [
    (float_with_int_tile, (ts.int32, 0.5), "the runtime float 'eps' (f32) cannot be combined "
     "with a i32 tile", "eps.astype(tc.i32)", "float-int"),
    (strong_f32_with_f16, (ts.float16, 0.5), "element types differ (f16 and f32)", "astype",
     "strong-f32"),
    (int_with_bool_tile, (ts.bool_, 1), "the runtime int 'n' (i32) cannot be combined with a "
     "bool tile", "n.astype(tc.bool_)", "int-bool"),
], ids=["float-int", "strong-f32", "int-bool"])
def test_weak_scalars_keep_the_literal_errors(kernel, args, phrase, hint, tag):
    dtype, scalar = args
    z = poisoned(8, dtype).partition(8)
    with pytest.raises(DTypeError) as info:
        kernel.ir(z, ts.zeros(8, dtype).sync(), scalar)
    err = info.value
    assert phrase in err.message, err.message
    assert hint in err.hint, err.hint
    assert os.path.samefile(err.location.file, __file__)
    assert err.location.line == marker_line(__file__, tag)


def test_a_float_literal_with_an_int_tile_is_the_same_error_class():
    with pytest.raises(DTypeError, match="float constant 0.5 cannot be combined with a i32"):
        ts_literal.ir(poisoned(8, ts.int32).partition(8), ts.zeros(8, ts.int32).sync())
    with pytest.raises(DTypeError, match="store: the runtime float 'eps'") as info:
        float_stored_into_int.ir(poisoned(1, ts.int32).partition(1), 0.5)
    assert info.value.location.line == marker_line(__file__, "float-store")


@ts.kernel
def ts_literal(z: tc.MutTensor[tc.i32, "S"], x: tc.Tensor[tc.i32, (-1,)]):
    z.store(tc.load_tile_like(x, z) * 0.5)
