"""Counter-based random numbers (Philox-4x32-10) and the high half of an integer product.

``umulhi(a, b)`` is the one new IR op: the high half of the double-width product of two
unsigned integer tiles. Everything else here is a builtin composed of existing integer and
float ops, so the interpreter and the GPU run the same steps and agree bit for bit on the
integer stream and on ``rand``.

The generator (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC 2011) maps a 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key ``(k0, k1)`` to four
32-bit words by ten rounds of::

    hi0:lo0 = 0xD2511F53 * c0          (the 64-bit product's halves)
    hi1:lo1 = 0xCD9E8D57 * c2
    c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    k0, k1 = k0 + 0x9E3779B9, k1 + 0xBB67AE85      (mod 2**32, between rounds)

It is the same function as Random123's ``philox4x32_10`` (whose published known-answer vectors
the tests check) and cuRAND's Philox4_32_10.

The layout of the device functions (for 32-bit offsets it is the layout of Triton's ``tl.rand``
family, so the same seed and offsets give the same numbers as there):

* the key is the seed as a 64-bit integer: ``k0`` its low and ``k1`` its high 32 bits (a
  signed seed is sign-extended, an unsigned one zero-extended; a compile-time int is taken
  modulo 2**64);
* the counter is ``(offset, 0, 0, 0)`` for offsets of up to 32 bits (narrower offsets are
  widened with their own signedness, then read as u32), and ``(low 32 bits, high 32 bits, 0,
  0)`` for 64-bit offsets.

So ``randint(seed, offsets)`` is the first word, and each offset gives an independent number:
a kernel gives every element a distinct offset (its global index, say) and every launch that
must differ a distinct seed (or a disjoint range of offsets).

``rand`` maps the word ``x`` to a float32 in [0, 1): ``x`` is read as an i32, a negative one
replaced by ``-x - 1`` (``~x``), giving ``n`` in [0, 2**31); then ``f32(n) * 0x1.fffffep-32``
(the float32 just below 2**-31), computed in float32. The largest result is ``1 - 2**-24``,
never 1.0; 0.0 is possible. ``randn`` is Box-Muller on the first two words' uniforms:
``sqrt(-2 log(max(u1, 1e-7))) * cos(2 pi u2)`` in float32 (so ``|randn| < 5.68``), the
mappings Triton's ``tl.rand``/``tl.randn`` use. The integer words and ``rand`` are identical
on every backend; ``randn`` uses ``log`` and ``cos``, which a GPU computes to within a few ulp,
so its values agree with the interpreter's to about 1e-5 absolute.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...errors import BroadcastError, DTypeError
from ..builder import describe, is_py_scalar
from ..ir import Value
from ..registry import builtin, op
from ..types import TileType, broadcast_shapes
from ._rules import same_type, tiles

__all__ = ["PHILOX_M0", "PHILOX_M1", "PHILOX_W0", "PHILOX_W1", "PHILOX_ROUNDS",
           "UNIFORM_SCALE"]

PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUNDS = 10
#: The float32 just below 2**-31: ``f32(2**31 - 1) * UNIFORM_SCALE`` is ``1 - 2**-24`` < 1.
UNIFORM_SCALE = float.fromhex("0x1.fffffep-32")
_MASK32 = 0xFFFFFFFF

# ---------------------------------------------------------------------------------------------
# umulhi


def _umulhi_rule(types, attrs):
    t = same_type("umulhi", tiles("umulhi", types, 2))
    if t.dtype.kind != "u":
        raise DTypeError(f"umulhi takes unsigned integer tiles, got {t.dtype.short}",
                         hint="convert the operands, e.g. a.astype(tc.u32) (the product of "
                         "the bit patterns is what you get)")
    return (t,)


def _umulhi_eval(ctx, attrs, a, b):
    a, b = np.asarray(a), np.asarray(b)
    bits = a.dtype.itemsize * 8
    if bits < 64:
        wide = a.astype(np.uint64) * b.astype(np.uint64)
        return (wide >> np.uint64(bits)).astype(a.dtype)
    low = np.uint64(_MASK32)
    half = np.uint64(32)
    al, ah, bl, bh = a & low, a >> half, b & low, b >> half
    lh, hl = al * bh, ah * bl
    mid = ((al * bl) >> half) + (lh & low) + (hl & low)
    return ah * bh + (lh >> half) + (hl >> half) + (mid >> half)


op("umulhi", "The high half of the double-width product of two unsigned integer tiles (the "
   "bits a full multiply puts above the dtype's width).", _umulhi_rule, _umulhi_eval)


def _build_umulhi(b, x, y):
    """umulhi(x, y) -> tile

    The most significant half of the double-width product of ``x`` and ``y``, unsigned
    integer tiles of one dtype (u8, u16, u32, u64), elementwise with broadcasting: for u32,
    ``(x * y) >> 32`` computed exactly. ``x * y`` gives the low half. Python ints adapt to the
    tile's dtype.
    """
    vx, vy = b.coerce([x, y], "umulhi")
    return b.emit1("umulhi", (vx, vy))


builtin("umulhi", _build_umulhi.__doc__, _build_umulhi)

# ---------------------------------------------------------------------------------------------
# Philox-4x32-10, composed of IR ops


def _convert(b, v: Value, dtype: DType) -> Value:
    return v if v.type.dtype is dtype else b.emit1("convert", (v,), {"dtype": dtype})


def _int_tile(b, x: Any, what: str) -> Value:
    """``x`` as an integer tile (Python ints become i32, or i64 when they need it)."""
    if is_py_scalar(x) and not isinstance(x, bool) and isinstance(x, int):
        return b.constant(x, dt.int32 if -2**31 <= x < 2**31 else dt.int64)
    if isinstance(x, Value) and isinstance(x.type, TileType):
        if x.type.dtype.is_int:
            return x
        raise b.error(DTypeError, f"{what} must be an integer tile, got {x.type}",
                      "counters and offsets are integers: build them with tc.arange and "
                      "integer arithmetic, or convert with .astype(tc.i32)")
    raise b.error(DTypeError, f"{what} must be an integer tile or int, got {describe(x)}",
                  "pass an integer tile, e.g. tc.arange(n, tc.i32) + base")


def _u32_words(b, x: Value) -> tuple[Value, Value]:
    """The low and high 32 bits of an integer tile as u32 (the high word of a value of at most
    32 bits is None: it is the counter's constant 0)."""
    if x.type.dtype.bits < 64:
        return _convert(b, x, dt.uint32), None
    shift = b.constant(32, x.type.dtype, x.type.shape)
    high = b.emit1("right_shift", (x, shift))
    return _convert(b, x, dt.uint32), _convert(b, high, dt.uint32)


def _key(b, seed: Any, what: str) -> tuple:
    """The Philox key ``(k0, k1)`` of ``seed``: Python ints for a compile-time seed, else
    rank-0 u32 values."""
    if isinstance(seed, bool) or (is_py_scalar(seed) and not isinstance(seed, int)):
        raise b.error(DTypeError, f"{what}: the seed must be an integer, got {describe(seed)}",
                      "pass an int, or a runtime integer scalar (tc.i32, tc.u32, tc.i64, "
                      "tc.u64, int)")
    if isinstance(seed, int):
        if not -2**63 <= seed < 2**64:
            raise b.error(DTypeError, f"{what}: the seed {seed} does not fit in 64 bits",
                          "use a seed in [-2**63, 2**64)")
        seed %= 1 << 64
        return seed & _MASK32, seed >> 32
    if not (isinstance(seed, Value) and isinstance(seed.type, TileType)
            and seed.type.is_scalar and seed.type.dtype.is_int):
        raise b.error(DTypeError, f"{what}: the seed must be an integer scalar, got "
                      f"{describe(seed)}", "pass an int or a runtime integer scalar parameter "
                      "(tc.i32, tc.u32, tc.i64, tc.u64, int): one seed per launch, with the "
                      "offsets telling the elements apart")
    dtype = seed.type.dtype
    if dtype.bits == 64:
        return _u32_words(b, seed)
    low = _convert(b, seed, dt.uint32)
    if not dtype.is_signed:
        return low, 0
    negative = b.emit1("less", (seed, b.constant(0, dtype)))
    high = b.emit1("select", (negative, b.constant(_MASK32, dt.uint32),
                              b.constant(0, dt.uint32)))
    return low, high


def _word(b, value, shape) -> Value:
    """A u32 tile of ``shape``: a Python int becomes a splat constant, a scalar is broadcast."""
    if isinstance(value, int):
        return b.constant(value, dt.uint32, shape)
    return b.broadcast_to(value, shape)


def _bump(b, key, increment: int):
    if isinstance(key, int):
        return (key + increment) & _MASK32
    return b.emit1("add", (key, b.constant(increment, dt.uint32)))


def philox(b, seed: Any, counters, what: str = "philox") -> tuple[Value, Value, Value, Value]:
    """The four Philox-4x32-10 words for ``seed`` and the counter words ``counters`` (four
    u32 tiles of one shape, or None for a zero word), emitted as IR."""
    shape = next(c.type.shape for c in counters if c is not None)
    k0, k1 = _key(b, seed, what)
    c = [_word(b, 0, shape) if w is None else w for w in counters]
    m0 = b.constant(PHILOX_M0, dt.uint32, shape)
    m1 = b.constant(PHILOX_M1, dt.uint32, shape)
    for round_ in range(PHILOX_ROUNDS):
        if round_:
            k0, k1 = _bump(b, k0, PHILOX_W0), _bump(b, k1, PHILOX_W1)
        hi0 = b.emit1("umulhi", (m0, c[0]))
        lo0 = b.emit1("mul", (m0, c[0]))
        hi1 = b.emit1("umulhi", (m1, c[2]))
        lo1 = b.emit1("mul", (m1, c[2]))
        x0 = b.emit1("bitwise_xor", (b.emit1("bitwise_xor", (hi1, c[1])), _word(b, k0, shape)))
        x2 = b.emit1("bitwise_xor", (b.emit1("bitwise_xor", (hi0, c[3])), _word(b, k1, shape)))
        c = [x0, lo1, x2, lo0]
    return tuple(c)


def _offset_counter(b, offsets, what: str) -> list:
    x = _int_tile(b, offsets, f"{what}: offsets")
    low, high = _u32_words(b, x)
    return [low, high, None, None]


def _build_philox(b, seed, c0, c1=0, c2=0, c3=0):
    """philox(seed, c0, c1=0, c2=0, c3=0) -> (u32 tile, u32 tile, u32 tile, u32 tile)

    The four 32-bit words of Philox-4x32-10 for the 128-bit counter ``(c0, c1, c2, c3)``
    (integer tiles or ints, broadcast together; each is read as u32, wider ones truncated to
    their low 32 bits) and the key given by ``seed`` (an int or a runtime integer scalar: its
    low 32 bits are key word 0, its high 32 bits key word 1; a signed seed is sign-extended to
    64 bits). This is Random123's ``philox4x32_10``; ``randint4x`` is
    ``philox(seed, offsets)`` for 32-bit offsets.
    """
    words = [_convert(b, _int_tile(b, c, f"philox: counter word {i}"), dt.uint32)
             for i, c in enumerate((c0, c1, c2, c3))]
    shape: tuple = ()
    for w in words:
        new = broadcast_shapes(shape, w.type.shape)
        if new is None:
            raise b.error(BroadcastError, "philox: the counter words' shapes "
                          f"{', '.join(str(w.type.shape) for w in words)} cannot be broadcast "
                          "together", "numpy rules apply: each dimension equal or 1")
        shape = new
    return philox(b, seed, [b.broadcast_to(w, shape) for w in words])


builtin("philox", _build_philox.__doc__, _build_philox)


def _build_randint4x(b, seed, offsets):
    """randint4x(seed, offsets) -> (u32 tile, u32 tile, u32 tile, u32 tile)

    Four independent random u32 tiles of ``offsets``' shape: the four Philox-4x32-10 words for
    the counter ``(offset, 0, 0, 0)`` (a 64-bit offset fills the first two words with its low
    and high halves) and the key ``seed`` (an int or a runtime integer scalar; 64 bits: low
    half key word 0, high half key word 1). The cheapest way to draw four numbers per offset.
    ``randint(seed, offsets)`` is the first of them.
    """
    return philox(b, seed, _offset_counter(b, offsets, "randint4x"), "randint4x")


builtin("randint4x", _build_randint4x.__doc__, _build_randint4x)


def _build_randint(b, seed, offsets):
    """randint(seed, offsets) -> u32 tile

    A random u32 for each element of ``offsets`` (an integer tile of any shape, or an int):
    the first Philox-4x32-10 word for the counter ``(offset, 0, 0, 0)`` and the key ``seed``
    (an int or a runtime integer scalar, i32/u32/i64/u64). The same seed and offset give the
    same number on every backend and in every launch; distinct offsets (or seeds) give
    independent numbers. Convert with ``.astype(tc.i32)`` for signed words.
    """
    return philox(b, seed, _offset_counter(b, offsets, "randint"), "randint")[0]


builtin("randint", _build_randint.__doc__, _build_randint)


def uniform(b, word: Value) -> Value:
    """The float32 in [0, 1) of a u32 word (the module docstring's mapping)."""
    shape = word.type.shape
    n = _convert(b, word, dt.int32)
    negative = b.emit1("less", (n, b.constant(0, dt.int32, shape)))
    n = b.emit1("select", (negative, b.emit1("invert", (n,)), n))
    f = _convert(b, n, dt.float32)
    return b.emit1("mul", (f, b.constant(UNIFORM_SCALE, dt.float32, shape)))


def _build_uint_to_uniform(b, x):
    """uint_to_uniform(x) -> f32 tile

    Map random 32-bit words (a u32 or i32 tile, e.g. from ``randint4x``) to float32 values in
    [0, 1), as ``rand`` does: the word is read as an i32, a negative one replaced by
    ``-x - 1``, and the result scaled in float32 by the float32 just below 2**-31 (so the
    largest value is ``1 - 2**-24``; 1.0 never occurs). Use it to get four uniforms per
    offset from ``randint4x``.
    """
    v = b.tile(x, "uint_to_uniform operand")
    if v.type.dtype not in (dt.uint32, dt.int32):
        raise b.error(DTypeError, f"uint_to_uniform takes u32 or i32 words, got "
                      f"{v.type.dtype.short}", "pass the words of tc.randint/tc.randint4x, or "
                      "convert with .astype(tc.u32)")
    return uniform(b, _convert(b, v, dt.uint32))


builtin("uint_to_uniform", _build_uint_to_uniform.__doc__, _build_uint_to_uniform)


def _build_rand(b, seed, offsets):
    """rand(seed, offsets) -> f32 tile

    Uniform random float32 values in [0, 1), one per element of ``offsets`` (an integer tile
    of any shape, or an int), for the key ``seed`` (an int or a runtime integer scalar).
    Counter-based: the value depends only on (seed, offset), identically on the interpreter
    and a GPU, bit for bit. The word ``x = randint(seed, offsets)`` is read as an i32, a
    negative one replaced by ``-x - 1``, and scaled in float32 by the float32 just below
    2**-31, so the largest value is ``1 - 2**-24`` and 1.0 never occurs. Dropout:
    ``tc.where(tc.rand(seed, offs) >= p, x / (1 - p), 0.0)``.
    """
    return uniform(b, philox(b, seed, _offset_counter(b, offsets, "rand"), "rand")[0])


builtin("rand", _build_rand.__doc__, _build_rand)


def _build_randn(b, seed, offsets):
    """randn(seed, offsets) -> f32 tile

    Standard normal float32 values, one per element of ``offsets`` (an integer tile of any
    shape, or an int), for the key ``seed``: Box-Muller on the uniforms ``u1``, ``u2`` of the
    first two Philox words, ``sqrt(-2 * log(max(u1, 1e-7))) * cos(2 * pi * u2)`` in float32
    (so every value is below 5.68 in magnitude). The integer words are identical on every
    backend; ``log`` and ``cos`` are accurate to a few ulp on a GPU, so GPU values agree with
    the interpreter's to about 1e-5 absolute, not bit for bit.
    """
    w = philox(b, seed, _offset_counter(b, offsets, "randn"), "randn")
    u1, u2 = uniform(b, w[0]), uniform(b, w[1])
    shape = u1.type.shape

    def f32(value):
        return b.constant(value, dt.float32, shape)
    u1 = b.emit1("maximum", (u1, f32(1.0e-7)))
    theta = b.emit1("mul", (f32(6.283185307179586), u2))
    radius = b.emit1("sqrt", (b.emit1("mul", (f32(-2.0), b.emit1("log", (u1,)))),))
    return b.emit1("mul", (radius, b.emit1("cos", (theta,))))


builtin("randn", _build_randn.__doc__, _build_randn)
