"""Device print/assert and counter-based random numbers (Philox-4x32-10).

Random numbers are checked against a small pure-Python Philox-4x32-10 written here from the
algorithm's definition (not from tilesafe), which is itself checked against Random123's
published known-answer vectors; ``rand`` and ``uint_to_uniform`` against an independent float32
reference of the documented mapping, bit for bit. ``tc.print``'s text is checked through
``capfd`` (the process's stdout), ``tc.assert_`` through the error it raises.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line, poisoned
from tilesafe.backends.tileir.lower.debug import tileir_format
from tilesafe.compiler.ops.debug import format_element, parse_format
from tilesafe.errors import (BroadcastError, CompileError, DeviceAssertionError, DTypeError,
                             KernelNameError, KernelRuntimeError, UnsupportedSyntaxError)

try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
except OSError:
    _LIBC = None

# ---------------------------------------------------------------------------------------------
# an independent reference

M32 = 0xFFFFFFFF


def philox_ref(counter, key, rounds=10):
    """Philox-4x32 on Python ints: counter (4 words), key (2 words) -> 4 words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32)
    return c0, c1, c2, c3


def seed_key(seed: int):
    seed %= 1 << 64
    return seed & M32, seed >> 32


def words_ref(seed: int, offsets) -> np.ndarray:
    """The four words for each offset (counter (lo, hi, 0, 0) of the 64-bit offset)."""
    key = seed_key(seed)
    flat = [philox_ref(((o % 2**64) & M32, (o % 2**64) >> 32, 0, 0), key)
            for o in np.asarray(offsets).ravel().tolist()]
    return np.array(flat, dtype=np.uint32).T.reshape((4,) + np.shape(offsets))


def uniform_ref(words) -> np.ndarray:
    """[0, 1) float32 of u32 words: the i32 reading, negatives to -x-1, times 0x1.fffffep-32."""
    n = np.asarray(words, dtype=np.uint32).view(np.int32).astype(np.int64)
    n = np.where(n < 0, -n - 1, n)
    return (n.astype(np.float32) * np.float32(float.fromhex("0x1.fffffep-32"))).astype(
        np.float32)


# Random123's known-answer vectors for philox4x32_10 (counter, key, result).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_the_reference_reproduces_random123s_known_answers(counter, key, expected):
    assert philox_ref(counter, key) == expected


# ---------------------------------------------------------------------------------------------
# Philox on the device


@ts.function
def _as_vector(w0, w1, w2, w3):
    lane = tc.arange(4, tc.i32)
    return tc.where(lane == 0, w0, tc.where(lane == 1, w1, tc.where(lane == 2, w2, w3)))


@ts.kernel
def philox_kat(z: tc.MutTensor[tc.u32, (4,)], seed: tc.u64, c0: tc.u32, c1: tc.u32,
               c2: tc.u32, c3: tc.u32):
    w0, w1, w2, w3 = tc.philox(seed, c0, c1, c2, c3)
    z.store(_as_vector(w0, w1, w2, w3))


@ts.kernel
def philox_kat_const(z: tc.MutTensor[tc.u32, (4,)]):
    w0, w1, w2, w3 = tc.philox(0x299F31D0A4093822, 0x243F6A88, 0x85A308D3, 0x13198A2E,
                               0x03707344)
    z.store(_as_vector(w0, w1, w2, w3))


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_philox_matches_the_known_answers_with_a_runtime_key(counter, key, expected):
    z = poisoned(4, ts.uint32).partition(4)
    seed = np.uint64(key[0] | key[1] << 32)
    z, = philox_kat(z, seed, *(np.uint32(c) for c in counter)).sync()
    assert z.unpartition().numpy().tolist() == list(expected)


def test_philox_matches_a_known_answer_with_a_compile_time_key():
    z, = philox_kat_const(poisoned(4, ts.uint32).partition(4)).sync()
    assert z.unpartition().numpy().tolist() == list(KAT[2][2])


@ts.kernel
def randint4x_words(a: tc.MutTensor[tc.u32, ("B",)], b: tc.MutTensor[tc.u32, ("B",)],
                    c: tc.MutTensor[tc.u32, ("B",)], d: tc.MutTensor[tc.u32, ("B",)],
                    seed: tc.i32, base: tc.i32, B: tc.Const[int]):
    offs = tc.arange(B, tc.i32) + tc.get_tile_block_id()[0] * B + base
    w0, w1, w2, w3 = tc.randint4x(seed, offs)
    a.store(w0)
    b.store(w1)
    c.store(w2)
    d.store(w3)


@pytest.mark.parametrize("seed,base", [(0, 0), (12345, 1000), (-1, -50), (-2**31, 2**31 - 64)])
def test_randint4x_is_philox_of_seed_and_offset(seed, base):
    outs = [poisoned(64, ts.uint32).partition(16) for _ in range(4)]
    outs = randint4x_words(*outs, seed, base, 16).sync()
    got = np.stack([o.unpartition().numpy() for o in outs])
    offsets = (np.arange(64) + base).astype(np.int32).astype(np.int64)  # wraps like the device
    # an i32 offset is its u32 bit pattern in counter word 0 (counter word 1 stays 0); a
    # negative i32 seed is sign-extended into the key's high word
    expected = words_ref(seed, offsets % 2**32)
    np.testing.assert_array_equal(got, expected)


@ts.kernel
def randint_2d(z: tc.MutTensor[tc.u32, (4, 8)], seed: tc.u32):
    rows = tc.reshape(tc.arange(4, tc.i32), (4, 1))
    cols = tc.reshape(tc.arange(8, tc.i32), (1, 8))
    z.store(tc.randint(seed, rows * 8 + cols))


def test_randint_takes_offsets_of_any_shape_and_an_unsigned_seed():
    z, = randint_2d(poisoned((4, 8), ts.uint32).partition((4, 8)), np.uint32(0xDEADBEEF)).sync()
    expected = words_ref(0xDEADBEEF, np.arange(32).reshape(4, 8))[0]
    np.testing.assert_array_equal(z.unpartition().numpy(), expected)


@ts.kernel
def randint_wide(z: tc.MutTensor[tc.u32, (8,)], seed: tc.i64, base: tc.i64):
    z.store(tc.randint(seed, tc.arange(8, tc.i64) + base))


@ts.kernel
def randint_narrow(z: tc.MutTensor[tc.u32, (8,)], offs: tc.Tensor[tc.i8, (8,)]):
    z.store(tc.randint(-7, tc.load_tile_like(offs, z)))


def test_64_bit_seeds_and_offsets_fill_both_key_and_counter_words():
    seed, base = -(2**40) + 12345, 3 * 2**32 + 5
    z, = randint_wide(poisoned(8, ts.uint32).partition(8), seed, base).sync()
    expected = words_ref(seed, np.arange(8, dtype=np.int64) + base)[0]
    np.testing.assert_array_equal(z.unpartition().numpy(), expected)
    # the high word matters: it is not the stream of the low word alone
    assert not np.array_equal(expected, words_ref(seed, np.arange(8) + 5)[0])


def test_narrow_offsets_widen_with_their_sign_and_a_constant_seed_sign_extends():
    offs = np.array([-128, -1, 0, 1, 2, 100, 127, -3], dtype=np.int8)
    z, _ = randint_narrow(poisoned(8, ts.uint32).partition(8), ts.tensor(offs)).sync()
    expected = words_ref(-7, offs.astype(np.int64) % 2**32)[0]
    np.testing.assert_array_equal(z.unpartition().numpy(), expected)


# ---------------------------------------------------------------------------------------------
# rand, randn, uint_to_uniform


@ts.kernel
def uniform_of(z: tc.MutTensor[tc.f32, (8,)], words: tc.Tensor[tc.u32, (8,)]):
    z.store(tc.uint_to_uniform(tc.load_tile_like(words, z)))


def test_uint_to_uniform_is_exact_at_the_extremes_and_never_one():
    words = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x40000000,
                      0xC0000000], dtype=np.uint32)
    z, _ = uniform_of(poisoned(8).partition(8), ts.tensor(words)).sync()
    got = z.unpartition().numpy()
    np.testing.assert_array_equal(got.view(np.uint32), uniform_ref(words).view(np.uint32))
    assert got.max() == np.float32(1 - 2**-24) and got.max() < 1.0
    assert got[0] == 0.0 and got[4] == 0.0  # 0 and 0xFFFFFFFF (-1 -> 0) both map to 0


@ts.kernel
def rand_tiles(z: tc.MutTensor[tc.f32, ("B",)], seed: int, B: tc.Const[int]):
    z.store(tc.rand(seed, tc.arange(B, tc.i32) + tc.get_tile_block_id()[0] * B))


@ts.kernel
def randn_tiles(z: tc.MutTensor[tc.f32, ("B",)], seed: int, B: tc.Const[int]):
    z.store(tc.randn(seed, tc.arange(B, tc.i32) + tc.get_tile_block_id()[0] * B))


N = 1 << 16


def _rand(seed: int, n: int = N) -> np.ndarray:
    z, = rand_tiles(poisoned(n).partition(1024), seed, 1024).sync()
    return z.unpartition().numpy()


def test_rand_is_bit_identical_to_the_documented_mapping():
    got = _rand(2024, 4096)
    expected = uniform_ref(words_ref(2024, np.arange(4096))[0])
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_rand_is_uniform_on_0_1():
    x = _rand(7).astype(np.float64)
    assert 0.0 <= x.min() and x.max() < 1.0
    # sd of the mean is 0.289/256 = 0.0011; of the variance about 0.0003
    assert abs(x.mean() - 0.5) < 0.005, x.mean()
    assert abs(x.var() - 1 / 12) < 0.002, x.var()
    counts, _ = np.histogram(x, bins=16, range=(0.0, 1.0))
    assert np.all(np.abs(counts - N / 16) < 350), counts  # sd per bin about 62
    # neighbouring offsets are uncorrelated
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.02


def test_randn_is_standard_normal_and_bounded():
    z, = randn_tiles(poisoned(N).partition(1024), 11, 1024).sync()
    x = z.unpartition().numpy().astype(np.float64)
    assert abs(x.mean()) < 0.02, x.mean()  # sd of the mean 0.004
    assert abs(x.var() - 1.0) < 0.03, x.var()
    assert abs(np.mean(np.abs(x) < 1.0) - 0.6827) < 0.01
    assert np.abs(x).max() < 5.68
    # Box-Muller on the first two words' uniforms, in float64: the float32 steps agree closely
    w = words_ref(11, np.arange(N))
    u1 = np.maximum(uniform_ref(w[0]).astype(np.float64), 1e-7)
    ref = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * uniform_ref(w[1]).astype(np.float64))
    np.testing.assert_allclose(x, ref, rtol=0, atol=2e-6)


def test_streams_differ_between_seeds_and_offsets():
    a, b = _rand(1, 4096), _rand(2, 4096)
    assert np.mean(a == b) < 0.001
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05
    outs = [poisoned(4096, ts.uint32).partition(1024) for _ in range(4)]
    outs = randint4x_words(*outs, 5, 0, 1024).sync()
    words = np.stack([o.unpartition().numpy() for o in outs], axis=1)
    assert len({tuple(w) for w in words.tolist()}) == 4096  # a bijection of the counter
    # the same seed and offsets give the same numbers in another launch
    np.testing.assert_array_equal(_rand(1, 4096), a)


@ts.kernel
def dropout(z: tc.MutTensor[tc.f32, ("B",)], x: tc.Tensor[tc.f32, (-1,)], p: float,
            seed: tc.i64, B: tc.Const[int]):
    offs = tc.arange(B, tc.i32) + tc.get_tile_block_id()[0] * B
    keep = tc.rand(seed, offs) >= p
    z.store(tc.load_tile_like(x, z) * keep.astype(tc.f32) / (1.0 - p))


def test_dropout_keeps_elements_by_rand_and_rescales(rng):
    n, p, seed = 3000, 0.25, 2**33 + 17
    x = rng.standard_normal(n).astype(np.float32) + 3.0  # no zeros of its own
    z, _ = dropout(poisoned(n).partition(256), ts.tensor(x), p, seed, 256).sync()
    out = z.unpartition().numpy()
    keep = uniform_ref(words_ref(seed, np.arange(n))[0]) >= np.float32(p)
    # p is an f32 at run time: 1 - p = 0.75 exactly, and each kept x is divided once
    np.testing.assert_array_equal(out, np.where(keep, x / np.float32(0.75), np.float32(0.0)))
    assert abs(np.mean(out == 0) - p) < 0.03


# ---------------------------------------------------------------------------------------------
# umulhi


@ts.kernel
def mulhi(z: tc.MutTensor["T", (16,)], a: tc.Tensor["T", (16,)], b: tc.Tensor["T", (16,)]):
    z.store(tc.umulhi(tc.load_tile_like(a, z), tc.load_tile_like(b, z)))


@pytest.mark.parametrize("dtype,bits", [(ts.uint8, 8), (ts.uint16, 16), (ts.uint32, 32),
                                        (ts.uint64, 64)])
def test_umulhi_is_the_high_half_of_the_exact_product(rng, dtype, bits):
    top = 2**bits - 1
    a = [top, top, 0, 1, 2**(bits - 1)] + [int(v) for v in rng.integers(0, top, 11,
                                                                        dtype=np.uint64)]
    b = [top, 2, top, top, 2] + [int(v) for v in rng.integers(0, top, 11, dtype=np.uint64)]
    np_dtype = dtype.storage
    z, _, _ = mulhi(poisoned(16, dtype).partition(16), ts.tensor(np.array(a, np_dtype)),
                    ts.tensor(np.array(b, np_dtype))).sync()
    expected = [(x * y) >> bits for x, y in zip(a, b)]
    assert [int(v) for v in z.unpartition().numpy()] == expected


# ---------------------------------------------------------------------------------------------
# print


@ts.kernel
def printer(z: tc.MutTensor[tc.i32, (4,)], scale: float):
    bid = tc.get_tile_block_id()[0]
    t = tc.arange(4, tc.i32) + bid * 4
    tc.print("program %d of %d: %5.2f", bid, 2, t.astype(tc.f32) * scale)
    tc.print("hex %x|%X|%u|%o", t - 2, tc.full((), 255, tc.i32), (t - 3).astype(tc.i8), 8)
    tc.print("%-4d|%+d|% d|%04d|%.3d|100%%", bid, bid, bid, bid, bid, end=" <end>\n")
    tc.print("wide %lld %d %e %g", tc.full((), -2**40, tc.i64), tc.full((), 2**64 - 1, tc.u64),
             scale * 1000.0, tc.full((), 0.0001, tc.f64))
    tc.print("grid %d", tc.reshape(t, (2, 2)) > 5)
    tc.print("narrow %hhu %hd", (t - 3).astype(tc.i8), tc.full((), -2, tc.i16))
    tc.print("halves %.2f %.3f", t.astype(tc.f16) * 0.5, tc.full((), 1.5, tc.bf16), end="")
    tc.print("")
    z.store(t)


@pytest.mark.interpreter_only("the interpreter's print order (tests/gpu: a GPU interleaves)")
def test_print_writes_c_printf_text_per_program_in_grid_order(capfd):
    z, = printer(poisoned(8, ts.int32).partition(4), 0.5).sync()
    out, err = capfd.readouterr()
    expected = []
    for bid in (0, 1):
        t = np.arange(4) + bid * 4
        expected += [
            f"program {bid} of 2: [{', '.join(f'{v * 0.5:5.2f}' for v in t)}]",
            "hex [" + ", ".join(f"{(v - 2) % 2**32:x}" for v in t) + f"]|FF|["
            + ", ".join(str((v - 3) % 2**32) for v in t) + "]|10",
            f"{bid:<4d}|+{bid}| {bid}|{bid:04d}|{bid:03d}|100% <end>",
            f"wide -1099511627776 -1 {500.0:e} 0.0001",
            "grid [[" + ", ".join(str(int(v > 5)) for v in t[:2]) + "], ["
            + ", ".join(str(int(v > 5)) for v in t[2:]) + "]]",
            "narrow [" + ", ".join(str((v - 3) % 256) for v in t) + "] -2",
            "halves [" + ", ".join(f"{v * 0.5:.2f}" for v in t) + "] 1.500",
        ]
    assert out.splitlines() == expected, out
    assert err == ""
    np.testing.assert_array_equal(z.unpartition().numpy(), np.arange(8))


@ts.kernel
def print_in_loop(z: tc.MutTensor[tc.f32, (2,)], n: int):
    acc = tc.zeros((2,), tc.f32)
    for i in range(n):
        acc = acc + 1.0
        if i % 2 == 0:
            tc.print("step %d: %.1f", i, acc)
    z.store(acc)
    tc.print("stored %g", z.load())


@pytest.mark.interpreter_only("the interpreter's print order (tests/gpu: a GPU interleaves)")
def test_prints_keep_program_order_through_loops_and_branches(capfd):
    z, = print_in_loop(poisoned(2).partition(2), 5).sync()
    out, _ = capfd.readouterr()
    assert out == ("step 0: [1.0, 1.0]\nstep 2: [3.0, 3.0]\nstep 4: [5.0, 5.0]\n"
                   "stored [5, 5]\n")
    np.testing.assert_array_equal(z.unpartition().numpy(), [5.0, 5.0])


def _c_snprintf(fmt: str, value) -> str:
    buf = ctypes.create_string_buffer(1024)
    assert 0 <= _LIBC.snprintf(buf, 1024, fmt.encode(), value) < 1024
    return buf.value.decode()


@pytest.mark.skipif(_LIBC is None, reason="no C library to compare with")
def test_the_interpreters_text_is_c_printfs():
    """Each conversion formats an element as the C library's printf does (after the device's
    widening: narrow ints and bools to int, 64-bit ints as long long, floats as double)."""
    int_specs = ["%d", "%i", "%u", "%x", "%X", "%o", "%5d", "%-5d|", "%05d", "%+d", "% d",
                 "%.3d", "%.0d", "%8.3x", "%-+6d|", "%+05d", "%0-4u|", "%hhu", "%hhd", "%hx",
                 "%hd", "%lld", "%llu", "%lx"]
    float_specs = ["%f", "%.0f", "%10.3f", "%-10.2e|", "%+g", "%G", "%E", "% .4f", "%012.5f",
                   "%g", "%.10g", "%F", "%08.2f"]
    ints = {ts.int8: [-128, -1, 0, 7, 127], ts.int32: [-2**31, -5, 0, 42, 2**31 - 1],
            ts.uint32: [0, 1, 2**31, 2**32 - 1], ts.int64: [-2**63, -3, 0, 2**40, 2**63 - 1],
            ts.uint64: [0, 2**63, 2**64 - 1], ts.bool_: [False, True], ts.uint8: [0, 200, 255]}
    floats = [0.0, -0.0, 1.5, -2.25, 1e-7, 123456.789, 3.0e38, -1e300, float("inf"),
              -float("inf"), 2.0**-1074]
    checked = 0
    for dtype, values in ints.items():
        for text in int_specs:
            ((spec, length),) = [p for p in parse_format(text) if not isinstance(p, str)]
            if length and ({"hh": 8, "h": 16}.get(length, 64) < dtype.bits
                           or (length in "llj" and dtype.bits != 64)):
                continue  # a compile error (checked in the misuse tests)
            for v in values:
                if dtype.bits == 64:
                    c_text, c_value = spec.c_text("ll"), ctypes.c_longlong(v % 2**64 - (
                        2**64 if v % 2**64 >= 2**63 else 0))
                else:
                    wide = int(v)  # widened with the dtype's signedness
                    c_text, c_value = spec.c_text(length), ctypes.c_int(wide % 2**32 - (
                        2**32 if wide % 2**32 >= 2**31 else 0))
                got = format_element(spec, np.asarray(v, dtype.compute), dtype, length)
                assert got == _c_snprintf(c_text, c_value), (text, dtype, v, got)
                checked += 1
    for text in float_specs:
        ((spec, _),) = [p for p in parse_format(text) if not isinstance(p, str)]
        for dtype in (ts.float32, ts.float64):
            for v in floats:
                with np.errstate(over="ignore"):  # -1e300 is -inf as an f32
                    element = np.asarray(v, dtype.compute)
                got = format_element(spec, element, dtype)
                assert got == _c_snprintf(spec.c_text(), ctypes.c_double(float(element))), \
                    (text, v, got)
                checked += 1
    assert checked > 500


def test_the_gpu_format_has_the_length_modifier_the_dtype_needs():
    pieces = parse_format("a %d b %lld c %5.1f %x 100%%\n")
    fmt = tileir_format(pieces, [ts.int64, ts.int64, ts.float32, ts.uint8])
    assert fmt == "a %lld b %lld c %5.1f %x 100%%\n"
    assert tileir_format(parse_format("%+d %u"), [ts.int32, ts.uint32]) == "%+d %u"
    assert tileir_format(parse_format("%hhu %hd %lf"), [ts.int8, ts.int16, ts.float64]) == \
        "%hhu %hd %f"
    # '+' and ' ' mean nothing to unsigned conversions in C: they are dropped
    assert tileir_format(parse_format("%+x % u"), [ts.uint32, ts.uint32]) == "%x %u"


# ---------------------------------------------------------------------------------------------
# assert


@ts.kernel
def checked(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)], limit: float):
    t = tc.load_tile_like(x, z)
    tc.assert_(t < limit, "x must stay below the limit")  # <- tile-assert
    tc.assert_(tc.reduce_sum(t, 0) > -100.0, "sum too small")  # <- scalar-assert
    z.store(t)


def test_assert_passes_silently_when_it_holds(capfd):
    x = np.arange(8, dtype=np.float32)
    z, _ = checked(poisoned(8).partition(4), ts.tensor(x), 100.0).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x)
    assert capfd.readouterr() == ("", "")


@pytest.mark.interpreter_only("a failed assert traps a GPU, ending its context (tests/gpu)")
def test_a_failed_tile_assert_names_kernel_program_line_message_and_elements():
    x = np.array([0, 1, 2, 3, 4, 9, 6, 9], dtype=np.float32)
    with pytest.raises(DeviceAssertionError) as info:
        checked(poisoned(8).partition(4), ts.tensor(x), 8.0).sync()
    text = str(info.value)
    assert f"test_ops_debug_random.py:{marker_line(__file__, 'tile-assert')}" in text, text
    assert "kernel 'checked'" in text and "tile program (1, 0, 0)" in text
    assert "device assertion failed: x must stay below the limit" in text
    assert "false at 2 of 4 elements: (1,), (3,)" in text
    assert isinstance(info.value, KernelRuntimeError)
    assert ts.DeviceAssertionError is DeviceAssertionError
    assert info.value.arguments is not None  # the launch hands its arguments back


@pytest.mark.interpreter_only("a failed assert traps a GPU, ending its context (tests/gpu)")
def test_a_failed_scalar_assert_raises_with_its_message():
    x = np.full(8, -30.0, dtype=np.float32)
    with pytest.raises(DeviceAssertionError, match="sum too small$") as info:
        checked(poisoned(8).partition(4), ts.tensor(x), 0.0).sync()
    text = str(info.value)
    assert f":{marker_line(__file__, 'scalar-assert')}:" in text
    assert "tile program (0, 0, 0)" in text


# ---------------------------------------------------------------------------------------------
# misuse


def _compile_error(tmp_path, body: str, cls, match: str) -> CompileError:
    """Compile a kernel whose second line is ``body`` (from a module of its own); expect
    exactly ``cls`` matching ``match``, at that line, naming the kernel, with a fix."""
    path = tmp_path / "misuse_kernel.py"
    path.write_text("def bad(z: tc.MutTensor[tc.f32, (4,)], s: tc.i32, f: float):\n"
                    f"    {body}\n    z.store(tc.zeros((4,), tc.f32))\n")
    namespace = {"tc": tc}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    kernel = ts.kernel(namespace["bad"])
    with pytest.raises(CompileError, match=match) as info:
        kernel(poisoned(4).partition(4), 1, 1.0).sync()
    err = info.value
    assert type(err) is cls, f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    assert err.location is not None and err.location.line == 2, err
    assert f"{path}:2" in str(err), str(err)
    assert err.kernel == "bad" and err.hint, str(err)
    return err


@ts.kernel
def bad_format(z: tc.MutTensor[tc.f32, (4,)]):
    t = z.load()
    tc.print(t, t)  # <- tile-format
    z.store(t)


def test_a_format_that_is_not_a_compile_time_string_is_refused_at_its_line():
    with pytest.raises(CompileError, match="print: the format must be a compile-time "
                       "string, got tile<4xf32>") as info:
        bad_format(poisoned(4).partition(4)).sync()
    assert f":{marker_line(__file__, 'tile-format')}" in str(info.value)
    assert "kernels have no strings at run time" in str(info.value)


@pytest.mark.parametrize("body,cls,match", [
    ('tc.print("%d %d", s)', CompileError, r"2 conversion\(s\) but 1 value\(s\)"),
    ('tc.print("x", s)', CompileError, r"0 conversion\(s\) but 1 value\(s\)"),
    ('tc.print("%d", f)', DTypeError, r"value 0 \(f32\) is a float, but its conversion is '%d'"),
    ('tc.print("%f", s)', DTypeError, r"value 0 \(i32\) is an integer, but its conversion"),
    ('tc.print("%f", s > 0)', DTypeError, r"value 0 \(bool\) is bool"),
    ('tc.print("%s", s)', CompileError, r"the conversion '%s' is not supported"),
    ('tc.print("%c", s)', CompileError, r"the conversion '%c' is not supported"),
    ('tc.print("%a", f)', CompileError, r"the conversion '%a' is not supported"),
    ('tc.print("%*d", s)', CompileError, r"'\*' is not supported"),
    ('tc.print("%#x", s)', CompileError, r"the '#' flag is not supported"),
    ('tc.print("%", s)', CompileError, r"the format ends inside the conversion '%'"),
    ('tc.print("%hd", s)', DTypeError, r"length modifier 'h' in '%hd' does not fit a i32"),
    ('tc.print("%lld", s)', DTypeError, r"length modifier 'll' in '%lld' does not fit a i32"),
    ('tc.print("%Lf", f)', DTypeError, r"length modifier 'L' in '%Lf' does not fit a f32"),
    ('tc.print("%d", s, end=s)', CompileError, r"print: end must be a compile-time string"),
    ('tc.print("%d", z)', CompileError, r"print: value 0 is a "),
    ('tc.assert_(s, "m")', DTypeError, r"assert_: the condition must be a bool tile or "
     r"scalar, got tile<i32>"),
    ('tc.assert_(s > 0, s)', CompileError, r"assert_: the message must be a compile-time "
     r"string, got tile<i32>"),
    ('tc.assert_(z, "m")', DTypeError, r"the condition must be a bool tile or scalar"),
    ('tc.rand(s, tc.arange(4, tc.f32))', DTypeError, r"rand: offsets must be an integer tile, "
     r"got tile<4xf32>"),
    ('tc.rand(s, 1.5)', DTypeError, r"rand: offsets must be an integer tile or int"),
    ('tc.randn(f, tc.arange(4, tc.i32))', DTypeError, r"randn: the seed must be an integer "
     r"scalar, got tile<f32>"),
    ('tc.randint(tc.arange(4, tc.i32), tc.arange(4, tc.i32))', DTypeError,
     r"randint: the seed must be an integer scalar, got tile<4xi32>"),
    ('tc.rand(1.5, tc.arange(4, tc.i32))', DTypeError, r"the seed must be an integer, got "
     r"float constant 1.5"),
    ('tc.rand(2**64, tc.arange(4, tc.i32))', DTypeError, r"does not fit in 64 bits"),
    ('tc.umulhi(s, s)', DTypeError, r"umulhi takes unsigned integer tiles, got i32"),
    ('tc.umulhi(f, f)', DTypeError, r"umulhi takes unsigned integer tiles, got f32"),
    ('tc.uint_to_uniform(tc.arange(4, tc.i64))', DTypeError, r"takes u32 or i32 words, got i64"),
    ('tc.philox(1, tc.arange(4, tc.i32), tc.arange(2, tc.i32))', BroadcastError,
     r"\(4,\), \(2,\), \(\), \(\) cannot be broadcast"),
])
def test_misuse_is_a_compile_error_at_the_line(tmp_path, body, cls, match):
    _compile_error(tmp_path, body, cls, match)


def test_the_python_assert_statement_on_a_runtime_value_points_to_assert_(tmp_path):
    err = _compile_error(tmp_path, "assert s > 0, 'positive'", UnsupportedSyntaxError,
                         "assert on a runtime value is not supported")
    assert "tc.assert_(cond, message)" in err.hint


def test_pythons_print_in_a_kernel_points_to_tc_print(tmp_path):
    err = _compile_error(tmp_path, 'print("x", s)', KernelNameError,
                         "the Python built-in 'print' is not available in kernels")
    assert "tc.print(fmt, *values)" in err.hint


def test_a_star_import_of_the_device_language_leaves_pythons_print_abs_and_pow():
    namespace: dict = {}
    exec("from tilesafe.core import *", namespace)  # noqa: S102 (what a user script does)
    assert not {"print", "abs", "pow"} & set(namespace)
    assert {"exp", "gather", "rand", "MutTensor"} <= set(namespace)
    assert callable(tc.print) and callable(tc.abs)  # still there as tc.print, tc.abs
