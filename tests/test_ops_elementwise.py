"""Elementwise ops against independent references: unary math, binary arithmetic, bitwise ops,
shifts and comparisons, ``where``/``select``, ``astype`` between every pair of dtypes, weak
Python scalars, integer wrap-around, Python floor-division/modulo, NaN and f16/bf16 rounding.

References are computed without the interpreter's own helpers: integers with Python ints and an
explicit wrap, float results rounded exactly (``fractions.Fraction``) to the target format, so
f32/f64/f16/bf16 ``+ - * / sqrt`` and every conversion are checked bit for bit. Transcendentals
are checked within a few ulp.
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
import tilesafe.core as tc
from conftest import poisoned, wrap
from tilesafe.errors import DTypeError

SHAPE, TILE = (7, 13), (4, 8)  # 2x2 grid with partial edge tiles on both axes

INT_DTYPES = [ts.int8, ts.int16, ts.int32, ts.int64, ts.uint8, ts.uint16, ts.uint32, ts.uint64]
FLOAT_DTYPES = [ts.float16, ts.bfloat16, ts.float32, ts.float64]
ALL_DTYPES = [ts.bool_] + INT_DTYPES + FLOAT_DTYPES

# (mantissa bits incl. the implicit one, min normal exponent, max exponent)
FLOAT_FORMATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127),
                 "float32": (24, -126, 127), "float64": (53, -1022, 1023)}


# ---------------------------------------------------------------------------------------------
# exact references


def round_exact(value, dtype) -> float:
    """The IEEE round-to-nearest-even of an exact value (int, float or Fraction) in ``dtype``."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return value
    v = Fraction(value)
    if v == 0:
        return math.copysign(0.0, value) if isinstance(value, float) else 0.0
    p, emin, emax = FLOAT_FORMATS[dtype.name]
    sign = -1.0 if v < 0 else 1.0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)  # subnormals share the minimum exponent
    ulp = Fraction(2) ** (e - p + 1)
    r = round(a / ulp) * ulp  # Fraction rounding is half-to-even
    if r >= Fraction(2) ** (emax + 1):
        return sign * math.inf
    return sign * float(r)


def round_array(values, dtype) -> np.ndarray:
    """Exact rounding of an array of float64 (or Python objects) to ``dtype``, as float64."""
    flat = [round_exact(v if isinstance(v, (int, Fraction)) else float(v), dtype)
            for v in np.asarray(values, dtype=object).ravel()]
    return np.array(flat, dtype=np.float64).reshape(np.shape(values))


def bf16_round(a) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), returned as float32."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    r = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return np.where(np.isnan(a), np.float32("nan"), r.view(np.float32))


def ulp_of(expected: np.ndarray, dtype) -> np.ndarray:
    """The spacing of ``dtype`` at each expected value (float64)."""
    p, emin, _ = FLOAT_FORMATS[dtype.name]
    mag = np.abs(expected)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    e = np.maximum(e, emin)
    return np.exp2(e - p + 1)


def assert_within_ulps(actual, expected, dtype, ulps):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    special = ~np.isfinite(expected) | ~np.isfinite(actual)
    np.testing.assert_array_equal(actual[special], expected[special])
    err = np.abs(actual - expected)[~special]
    tol = ulps * ulp_of(expected, dtype)[~special]
    assert np.all(err <= tol), (
        f"max error {np.max(err / tol) * ulps:.2f} ulp > {ulps} ulp "
        f"(at {expected[~special][np.argmax(err / tol)]!r})")


def random_values(rng, dtype, shape=SHAPE, lo=None, hi=None):
    """Random values of ``dtype`` (host numpy array in a dtype ts.tensor accepts)."""
    if dtype.is_bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.is_int:
        info = np.iinfo(dtype.storage)
        lo = int(info.min) if lo is None else lo
        hi = int(info.max) if hi is None else hi
        vals = rng.integers(lo, hi, shape, dtype=dtype.storage, endpoint=True)
        # always include the extremes
        flat = vals.reshape(-1)
        flat[:2] = (lo, hi)
        return vals
    lo = -8.0 if lo is None else lo
    hi = 8.0 if hi is None else hi
    vals = rng.uniform(lo, hi, shape)
    return dtype_values(vals, dtype)


def dtype_values(vals, dtype) -> np.ndarray:
    """``vals`` rounded to ``dtype`` and returned as float64 (exactly representable)."""
    vals = np.asarray(vals, dtype=np.float64)
    if dtype is ts.bfloat16:
        return bf16_round(vals.astype(np.float32)).astype(np.float64)
    with np.errstate(over="ignore"):
        return vals.astype(dtype.storage).astype(np.float64)


def as_host(vals, dtype) -> np.ndarray:
    """A numpy array ``ts.tensor(..., dtype)`` stores without rounding."""
    if dtype is ts.bfloat16:
        return np.asarray(vals, dtype=np.float32)
    return np.asarray(vals).astype(dtype.storage)


def run(kernel, out_dtype, inputs, *extra, shape=SHAPE, tile=TILE):
    """Launch ``kernel(z, *inputs, *extra)`` over a poisoned output; return z as numpy."""
    z = poisoned(shape, out_dtype).partition(tile)
    tensors = [ts.tensor(as_host(a, d), d) for a, d in inputs]
    z, *_ = kernel(z, *tensors, *extra).sync()
    return z.unpartition().numpy()


# ---------------------------------------------------------------------------------------------
# kernels

UNARY_NAMES = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan", "sinh", "cosh",
               "tanh", "floor", "ceil", "negative", "abs", "invert")
UNARY_FNS = (tc.exp, tc.exp2, tc.log, tc.log2, tc.sqrt, tc.rsqrt, tc.sin, tc.cos, tc.tan, tc.sinh,
             tc.cosh, tc.tanh, tc.floor, tc.ceil, tc.negative, tc.abs, tc.invert)


@ts.kernel
def unary_k(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1, -1)], OP: tc.Const[int]):
    z.store(UNARY_FNS[OP](tc.load_tile_like(x, z)))


@ts.function
def apply_binary(op, a, b):
    if op == "+":
        r = a + b
    elif op == "-":
        r = a - b
    elif op == "*":
        r = a * b
    elif op == "/":
        r = a / b
    elif op == "//":
        r = a // b
    elif op == "%":
        r = a % b
    elif op == "**":
        r = a ** b
    elif op == "&":
        r = a & b
    elif op == "|":
        r = a | b
    elif op == "^":
        r = a ^ b
    elif op == "<<":
        r = a << b
    elif op == ">>":
        r = a >> b
    elif op == "==":
        r = a == b
    elif op == "!=":
        r = a != b
    elif op == "<":
        r = a < b
    elif op == "<=":
        r = a <= b
    elif op == ">":
        r = a > b
    elif op == ">=":
        r = a >= b
    elif op == "maximum":
        r = tc.maximum(a, b)
    else:
        r = tc.minimum(a, b)
    return r


FUNCTION_FORMS_NAMES = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "bitwise_and",
                        "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "equal",
                        "not_equal", "less", "less_equal", "greater", "greater_equal")


@ts.kernel
def binary_k(z: tc.MutTensor["R", "S"], x: tc.Tensor["T", (-1, -1)],
             y: tc.Tensor["T", (-1, -1)], OP: tc.Const[str]):
    z.store(apply_binary(OP, tc.load_tile_like(x, z), tc.load_tile_like(y, z)))


@ts.kernel
def binary_fn_k(z: tc.MutTensor["R", "S"], x: tc.Tensor["T", (-1, -1)],
                y: tc.Tensor["T", (-1, -1)], I: tc.Const[int]):
    z.store(BINARY_FNS[I](tc.load_tile_like(x, z), tc.load_tile_like(y, z)))


BINARY_FNS = (tc.add, tc.sub, tc.mul, tc.truediv, tc.floordiv, tc.mod, tc.pow, tc.bitwise_and,
              tc.bitwise_or, tc.bitwise_xor, tc.left_shift, tc.right_shift, tc.equal,
              tc.not_equal, tc.less, tc.less_equal, tc.greater, tc.greater_equal)

# ---------------------------------------------------------------------------------------------
# unary

UNARY_FLOAT_DOMAIN = {
    "exp": (-9.0, 9.0), "exp2": (-12.0, 12.0), "log": (0.01, 200.0), "log2": (0.01, 200.0),
    "sqrt": (0.0, 500.0), "rsqrt": (0.01, 500.0), "sin": (-3.0, 3.0), "cos": (-3.0, 3.0),
    "tan": (-1.4, 1.4), "sinh": (-5.0, 5.0), "cosh": (-5.0, 5.0), "tanh": (-5.0, 5.0),
    "floor": (-100.0, 100.0), "ceil": (-100.0, 100.0), "negative": (-100.0, 100.0),
    "abs": (-100.0, 100.0),
}
NP_REF = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
          "rsqrt": lambda v: 1.0 / np.sqrt(v), "sin": np.sin, "cos": np.cos, "tan": np.tan,
          "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "floor": np.floor,
          "ceil": np.ceil, "negative": np.negative, "abs": np.abs}
EXACT_UNARY = {"sqrt", "floor", "ceil", "negative", "abs"}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY_FLOAT_DOMAIN))
def test_unary_float(rng, name, dtype):
    lo, hi = UNARY_FLOAT_DOMAIN[name]
    x = random_values(rng, dtype, lo=lo, hi=hi)
    out = run(unary_k, dtype, [(x, dtype)], UNARY_NAMES.index(name))
    expected = round_array(NP_REF[name](x), dtype)  # f64 reference, rounded once
    if name in EXACT_UNARY:
        np.testing.assert_array_equal(out, expected)
    else:
        # numpy's f64 functions are within 1 ulp of the truth; a narrower result rounded from
        # them is at most ~1 ulp of its own dtype away, plus the documented few-ulp slack.
        assert_within_ulps(out, expected, dtype, 4 if dtype is ts.float32 else 1)


@pytest.mark.parametrize("dtype", [
    pytest.param(d, marks=pytest.mark.interpreter_only(
        "correctly rounded f64 transcendentals (log2(8) == 3 exactly)")) if d is ts.float64
    else d for d in FLOAT_DTYPES], ids=str)
def test_unary_float_special_values(dtype):
    inf, nan = math.inf, math.nan
    cases = {
        "exp": ([inf, -inf, nan, 0.0], [inf, 0.0, nan, 1.0]),
        "log": ([0.0, -1.0, inf, 1.0], [-inf, nan, inf, 0.0]),
        "log2": ([0.0, -1.0, 8.0, 0.5], [-inf, nan, 3.0, -1.0]),
        "sqrt": ([-1.0, inf, 0.0, 4.0], [nan, inf, 0.0, 2.0]),
        "rsqrt": ([0.0, 4.0, inf, 0.25], [inf, 0.5, 0.0, 2.0]),
        "exp2": ([-inf, 3.0, 10.0, nan], [0.0, 8.0, 1024.0, nan]),
        "floor": ([-0.5, 2.5, -inf, nan], [-1.0, 2.0, -inf, nan]),
        "ceil": ([-0.5, 2.5, inf, nan], [-0.0, 3.0, inf, nan]),
        "tanh": ([inf, -inf, 0.0, nan], [1.0, -1.0, 0.0, nan]),
        "abs": ([-inf, -0.0, nan, -2.0], [inf, 0.0, nan, 2.0]),
        "negative": ([inf, 0.0, nan, -2.0], [-inf, -0.0, nan, 2.0]),
    }
    for name, (x, want) in cases.items():
        out = run(unary_k, dtype, [(np.array([x]), dtype)], UNARY_NAMES.index(name),
                  shape=(1, 4), tile=(1, 4))[0]
        out = out.astype(np.float64)  # exact; numpy's NaN-aware compare needs a numpy float
        np.testing.assert_array_equal(out, np.array(want), err_msg=name)
        real = ~np.isnan(np.array(want))
        np.testing.assert_array_equal(np.signbit(out[real]), np.signbit(np.array(want)[real]),
                                      err_msg=f"{name}: sign of zero")


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["negative", "abs", "invert"])
def test_unary_int_wraps(rng, name, dtype):
    x = random_values(rng, dtype)
    info = np.iinfo(dtype.storage)
    x.reshape(-1)[2:6] = (info.min, info.max, 0, 1)
    out = run(unary_k, dtype, [(x, dtype)], UNARY_NAMES.index(name))
    fn = {"negative": lambda v: -v, "abs": abs, "invert": lambda v: ~v}[name]
    expected = np.array([wrap(fn(int(v)), dtype) for v in x.ravel()],
                        dtype=object).reshape(x.shape).astype(dtype.storage)
    np.testing.assert_array_equal(out, expected)


def test_int_min_negation_and_abs_wrap():
    for dtype in (ts.int8, ts.int32, ts.int64):
        lo = int(np.iinfo(dtype.storage).min)
        x = np.full((1, 4), lo, dtype.storage)
        for name in ("negative", "abs"):
            out = run(unary_k, dtype, [(x, dtype)], UNARY_NAMES.index(name), shape=(1, 4),
                      tile=(1, 4))
            assert (out == lo).all(), (dtype, name, out)


def test_invert_of_bool_is_logical_not():
    x = np.array([[True, False, True, False]])
    out = run(unary_k, ts.bool_, [(x, ts.bool_)], UNARY_NAMES.index("invert"), shape=(1, 4),
              tile=(1, 4))
    np.testing.assert_array_equal(out, ~x)


@ts.kernel
def unary_spellings(z: tc.MutTensor[tc.i32, (4, 8)], x: tc.Tensor[tc.i32, (-1, -1)]):
    t = tc.load_tile_like(x, z)
    z.store(-t + abs(t) * 3 + t.abs() * 5 + (~t) * 7 + (+t) * 11)


def test_unary_operator_spellings(rng):
    x = random_values(rng, ts.int32, lo=-1000, hi=1000)
    out = run(unary_spellings, ts.int32, [(x, ts.int32)])
    np.testing.assert_array_equal(out, -x + np.abs(x) * 3 + np.abs(x) * 5 + (~x) * 7 + x * 11)


@ts.kernel
def python_spellings(z: tc.MutTensor[tc.f32, (4, 8)], x: tc.Tensor[tc.f32, (-1, -1)],
                     y: tc.Tensor[tc.f32, (-1, -1)]):
    a = tc.load_tile_like(x, z)
    b = tc.load_tile_like(y, z)
    m = min(a, b, 0.5) + max(a, 0.0)          # Python min/max on tiles: minimum/maximum
    inside = 0.0 < a < 0.5                    # a chained comparison: (0 < a) & (a < 0.5)
    h = tc.f16(a).astype("f32")               # calling a dtype converts; dtype names work
    z.store(tc.where(inside, m, h) + tc.arange(8, tc.f32))


def test_python_builtins_and_chained_comparisons_on_tiles(rng):
    x = rng.uniform(-1, 1, (4, 8)).astype(np.float32)
    y = rng.uniform(-1, 1, (4, 8)).astype(np.float32)
    out = run(python_spellings, ts.float32, [(x, ts.float32), (y, ts.float32)], shape=(4, 8),
              tile=(4, 8))
    m = np.minimum(np.minimum(x, y), np.float32(0.5)) + np.maximum(x, np.float32(0))
    h = x.astype(np.float16).astype(np.float32)
    expected = np.where((x > 0) & (x < 0.5), m, h) + np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("name", ["exp", "sqrt", "floor", "sin"])
@pytest.mark.parametrize("dtype", [ts.int32, ts.uint8, ts.bool_], ids=str)
def test_float_math_rejects_integer_tiles(name, dtype):
    z = ts.zeros(SHAPE, dtype).sync().partition(TILE)
    with pytest.raises(DTypeError, match=f"{name} does not accept"):
        unary_k(z, ts.zeros(SHAPE, dtype), UNARY_NAMES.index(name)).sync()


@pytest.mark.interpreter_only("correctly rounded transcendentals")
def test_f32_transcendentals_are_correctly_rounded_as_documented(rng):
    """elementwise.py: transcendentals are "correctly rounded here" (in the interpreter)."""
    x = random_values(rng, ts.float32, shape=(16, 64), lo=-9.0, hi=9.0)
    out = run(unary_k, ts.float32, [(x, ts.float32)], UNARY_NAMES.index("exp"),
              shape=(16, 64), tile=(16, 64))
    # numpy's f64 exp is within 1 ulp of f64, far below f32's rounding ambiguity here
    np.testing.assert_array_equal(out, np.exp(x).astype(np.float32))


# ---------------------------------------------------------------------------------------------
# binary: integers

INT_OPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "<<": operator.lshift, ">>": operator.rshift, "maximum": max, "minimum": min,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}


def int_operands(rng, op, dtype):
    x = random_values(rng, dtype)
    y = random_values(rng, dtype)
    if op in ("//", "%"):
        y[y == 0] = 1
        small = random_values(rng, dtype, lo=-7 if dtype.is_signed else 1, hi=7)
        small[small == 0] = -1 if dtype.is_signed else 1
        y[::2] = small[::2]  # small divisors, both signs
    if op in ("<<", ">>"):
        y = rng.integers(0, dtype.bits, SHAPE).astype(dtype.storage)
    if op in COMPARISONS or op in ("maximum", "minimum"):
        y[::3] = x[::3]  # equal elements
    return x, y


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(INT_OPS))
def test_binary_int_matches_python_ints_wrapped(rng, op, dtype):
    x, y = int_operands(rng, op, dtype)
    out_dtype = ts.bool_ if op in COMPARISONS else dtype
    out = run(binary_k, out_dtype, [(x, dtype), (y, dtype)], op)
    fn = INT_OPS[op]
    ref = [fn(int(a), int(b)) for a, b in zip(x.ravel(), y.ravel())]
    if op in COMPARISONS:
        expected = np.array(ref, dtype=bool).reshape(SHAPE)
    else:
        expected = np.array([wrap(v, dtype) for v in ref], dtype=object).reshape(SHAPE)
        expected = expected.astype(dtype.storage)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [ts.int8, ts.int32, ts.uint8, ts.int64], ids=str)
def test_binary_function_forms_equal_operators(rng, dtype):
    for i, name in enumerate(FUNCTION_FORMS_NAMES):
        if name in ("truediv", "pow"):
            continue
        op = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%",
              "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "left_shift": "<<",
              "right_shift": ">>", "equal": "==", "not_equal": "!=", "less": "<",
              "less_equal": "<=", "greater": ">", "greater_equal": ">="}[name]
        x, y = int_operands(rng, op, dtype)
        out_dtype = ts.bool_ if op in COMPARISONS else dtype
        a = run(binary_fn_k, out_dtype, [(x, dtype), (y, dtype)], i)
        b = run(binary_k, out_dtype, [(x, dtype), (y, dtype)], op)
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("dtype,a,b", [
    (ts.int8, 127, 1), (ts.int8, -128, -1), (ts.int8, 100, 100), (ts.int32, 2**31 - 1, 1),
    (ts.int32, 65536, 65536), (ts.uint8, 255, 1), (ts.uint8, 0, 255), (ts.uint8, 16, 16),
])
def test_integer_overflow_wraps(dtype, a, b):
    x, y = np.full((1, 4), a, dtype.storage), np.full((1, 4), b, dtype.storage)
    for op, fn in (("+", operator.add), ("-", operator.sub), ("*", operator.mul)):
        out = run(binary_k, dtype, [(x, dtype), (y, dtype)], op, shape=(1, 4), tile=(1, 4))
        assert (out == wrap(fn(a, b), dtype)).all(), (op, out)


def test_python_floor_division_and_modulo_for_negative_ints():
    a = np.array([[-7, 7, -7, 7, -1, 0, -128, -128]], np.int8)
    b = np.array([[2, -2, -2, 2, 3, -3, -1, 127]], np.int8)
    q = run(binary_k, ts.int8, [(a, ts.int8), (b, ts.int8)], "//", shape=(1, 8), tile=(1, 8))
    r = run(binary_k, ts.int8, [(a, ts.int8), (b, ts.int8)], "%", shape=(1, 8), tile=(1, 8))
    np.testing.assert_array_equal(q[0], [-4, -4, 3, 3, -1, 0, -128, -2])  # -128 // -1 wraps
    np.testing.assert_array_equal(r[0], [1, -1, -1, 1, 2, 0, 0, 126])


def test_signed_right_shift_is_arithmetic_unsigned_is_logical():
    a = np.array([[-128, -1, 64, -7]], np.int8)
    s = np.array([[1, 7, 6, 1]], np.int8)
    out = run(binary_k, ts.int8, [(a, ts.int8), (s, ts.int8)], ">>", shape=(1, 4), tile=(1, 4))
    np.testing.assert_array_equal(out[0], [-64, -1, 1, -4])
    u = a.view(np.uint8)
    out = run(binary_k, ts.uint8, [(u, ts.uint8), (s.view(np.uint8), ts.uint8)], ">>",
              shape=(1, 4), tile=(1, 4))
    np.testing.assert_array_equal(out[0], [64, 1, 1, 124])
    out = run(binary_k, ts.int8, [(np.array([[1, 3, -1, 5]], np.int8), ts.int8),
                                  (np.array([[7, 6, 7, 0]], np.int8), ts.int8)], "<<",
              shape=(1, 4), tile=(1, 4))
    np.testing.assert_array_equal(out[0], [-128, -64, -128, 5])


@pytest.mark.parametrize("op", ["&", "|", "^", "==", "!=", "maximum", "minimum", "<", ">="])
def test_binary_bool(op):
    x = np.array([[True, True, False, False]])
    y = np.array([[True, False, True, False]])
    out = run(binary_k, ts.bool_, [(x, ts.bool_), (y, ts.bool_)], op, shape=(1, 4), tile=(1, 4))
    fn = INT_OPS[op]
    np.testing.assert_array_equal(out[0], [bool(fn(bool(a), bool(b))) for a, b in
                                           zip(x[0], y[0])])


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**", "<<"])
def test_binary_bool_rejects_arithmetic(op):
    z = ts.zeros((1, 4), ts.bool_).sync().partition((1, 4))
    with pytest.raises(DTypeError, match="does not accept bool"):
        binary_k(z, ts.zeros((1, 4), ts.bool_), ts.zeros((1, 4), ts.bool_), op).sync()


@pytest.mark.parametrize("op", ["/", "**"])
def test_true_division_and_pow_reject_integers(op):
    z = ts.zeros((1, 4), ts.int32).sync().partition((1, 4))
    with pytest.raises(DTypeError, match="does not accept i32"):
        binary_k(z, ts.ones((1, 4), ts.int32), ts.ones((1, 4), ts.int32), op).sync()


@pytest.mark.parametrize("op", ["&", "<<", ">>"])
def test_bitwise_ops_reject_floats(op):
    z = ts.zeros((1, 4), ts.float32).sync().partition((1, 4))
    with pytest.raises(DTypeError):
        binary_k(z, ts.ones((1, 4)), ts.ones((1, 4)), op).sync()


# ---------------------------------------------------------------------------------------------
# binary: floats


def py_mod(a: float, b: float) -> float:
    return a % b  # Python float semantics: the result has the sign of b


FLOAT_EXACT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "maximum", "minimum"])
def test_binary_float_correctly_rounded(rng, op, dtype):
    x = random_values(rng, dtype, lo=-50, hi=50)
    y = random_values(rng, dtype, lo=-50, hi=50)
    y[y == 0] = 1.5
    y[::3] = x[::3]
    out = run(binary_k, dtype, [(x, dtype), (y, dtype)], op)
    if op in FLOAT_EXACT_OPS:  # the exact result of two representable values, rounded once
        exact = [FLOAT_EXACT_OPS[op](Fraction(a), Fraction(b)) for a, b in zip(x.ravel(),
                                                                              y.ravel())]
        expected = round_array(np.array(exact, dtype=object).reshape(SHAPE), dtype)
    elif op == "/":
        exact = [Fraction(a) / Fraction(b) for a, b in zip(x.ravel(), y.ravel())]
        expected = round_array(np.array(exact, dtype=object).reshape(SHAPE), dtype)
    elif op == "//":  # documented: floor(a / b), the quotient rounded in the tile's dtype
        quotient = round_array(np.array([Fraction(a) / Fraction(b) for a, b in
                                         zip(x.ravel(), y.ravel())], dtype=object)
                               .reshape(SHAPE), dtype)
        expected = np.floor(quotient)
    elif op == "%":
        expected = round_array(np.array([py_mod(a, b) for a, b in zip(x.ravel(), y.ravel())])
                               .reshape(SHAPE), dtype)
    else:
        expected = (np.maximum if op == "maximum" else np.minimum)(x, y)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_pow_float(rng, dtype):
    x = random_values(rng, dtype, lo=0.1, hi=4.0)
    y = random_values(rng, dtype, lo=-3.0, hi=3.0)
    out = run(binary_k, dtype, [(x, dtype), (y, dtype)], "**")
    expected = round_array(np.power(x, y), dtype)
    assert_within_ulps(out, expected, dtype, 4 if dtype is ts.float32 else 1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_float_floor_division_and_modulo_signs(dtype):
    a = np.array([[-7.0, 7.0, -7.0, 7.0, -0.5, 0.5, 6.0, -6.0]])
    b = np.array([[2.0, -2.0, -2.0, 2.0, 4.0, -4.0, 3.0, 3.0]])
    q = run(binary_k, dtype, [(a, dtype), (b, dtype)], "//", shape=(1, 8), tile=(1, 8))
    r = run(binary_k, dtype, [(a, dtype), (b, dtype)], "%", shape=(1, 8), tile=(1, 8))
    np.testing.assert_array_equal(q[0], [-4.0, -4.0, 3.0, 3.0, -1.0, -1.0, 2.0, -2.0])
    np.testing.assert_array_equal(r[0], [1.0, -1.0, -1.0, 1.0, 3.5, -3.5, 0.0, 0.0])
    np.testing.assert_array_equal(r[0], [py_mod(u, v) for u, v in zip(a[0], b[0])])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_nan_propagation_and_comparisons(dtype):
    nan, inf = math.nan, math.inf
    x = np.array([[nan, 1.0, nan, -inf, 0.0, -0.0, 2.0, nan]])
    y = np.array([[1.0, nan, nan, inf, -0.0, 0.0, 2.0, -inf]])
    kw = dict(shape=(1, 8), tile=(1, 8))
    for op in ("maximum", "minimum"):
        out = run(binary_k, dtype, [(x, dtype), (y, dtype)], op, **kw)[0]
        assert np.isnan(out[[0, 1, 2, 7]]).all(), (op, out)
        fn = max if op == "maximum" else min
        np.testing.assert_array_equal(out[3:7], [fn(a, b) for a, b in zip(x[0, 3:7], y[0, 3:7])])
    for op in COMPARISONS:
        out = run(binary_k, ts.bool_, [(x, dtype), (y, dtype)], op, **kw)[0]
        np.testing.assert_array_equal(out, [INT_OPS[op](a, b) for a, b in zip(x[0], y[0])],
                                      err_msg=op)
    for op in ("+", "*", "/", "-"):
        out = run(binary_k, dtype, [(x, dtype), (y, dtype)], op, **kw)[0]
        assert np.isnan(out[[0, 1, 2]]).all(), (op, out)


def test_f16_and_bf16_round_to_nearest_even():
    # f16: ulp(1) = 2**-10; bf16: ulp(1) = 2**-7. Ties go to the even neighbour.
    cases = [(ts.float16, 2.0 ** -10), (ts.bfloat16, 2.0 ** -7)]
    for dtype, u in cases:
        x = np.array([[1.0, 1.0 + u, 1.0, 1.0 + u]])
        y = np.array([[u / 2, u / 2, u / 4 * 3, u / 4]])
        out = run(binary_k, dtype, [(x, dtype), (y, dtype)], "+", shape=(1, 4), tile=(1, 4))
        np.testing.assert_array_equal(out[0], [1.0, 1.0 + 2 * u, 1.0 + u, 1.0 + u], str(dtype))
    # overflow to inf in f16 but not in bf16 (f32's range)
    x = np.array([[300.0, -300.0, 65504.0, 1e-4]])
    y = np.array([[300.0, 300.0, 2.0, 1e-4]])
    out = run(binary_k, ts.float16, [(x, ts.float16), (y, ts.float16)], "*", shape=(1, 4),
              tile=(1, 4))[0]
    assert out[0] == np.inf and out[1] == -np.inf and out[2] == np.inf
    assert out[3] == np.float16(np.float16(1e-4) * np.float16(1e-4))  # subnormal f16
    out = run(binary_k, ts.bfloat16, [(x, ts.bfloat16), (y, ts.bfloat16)], "*", shape=(1, 4),
              tile=(1, 4))[0]
    xb, yb = bf16_round(x.astype(np.float32)), bf16_round(y.astype(np.float32))
    np.testing.assert_array_equal(out, bf16_round(xb * yb)[0])


@settings(max_examples=25, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([ts.float16, ts.bfloat16]),
       op=st.sampled_from(["+", "-", "*", "/"]))
def test_half_precision_arithmetic_property(data, dtype, op):
    floats = st.floats(-1e4, 1e4, allow_nan=False, width=32)
    xs = data.draw(st.lists(floats, min_size=8, max_size=8))
    ys = data.draw(st.lists(floats.filter(lambda v: abs(v) > 1e-3), min_size=8, max_size=8))
    x = dtype_values([xs], dtype)
    y = dtype_values([ys], dtype)
    out = run(binary_k, dtype, [(x, dtype), (y, dtype)], op, shape=(1, 8), tile=(1, 8))
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    exact32 = {"+": x32 + y32, "-": x32 - y32, "*": x32 * y32, "/": x32 / y32}[op]
    # float32 carries more than 2p+2 bits of both formats: rounding its result is exact
    with np.errstate(over="ignore"):
        expected = bf16_round(exact32) if dtype is ts.bfloat16 else exact32.astype(np.float16)
    np.testing.assert_array_equal(out, expected.astype(np.float64))


# ---------------------------------------------------------------------------------------------
# weak Python scalars


@ts.kernel
def weak_int(z: tc.MutTensor["T", (1, 4)], x: tc.Tensor["T", (-1, -1)]):
    t = tc.load_tile_like(x, z)
    z.store((t + 1) * 2 - 3 + (1 - t))


@ts.kernel
def weak_float(z: tc.MutTensor["T", (1, 4)], x: tc.Tensor["T", (-1, -1)]):
    t = tc.load_tile_like(x, z)
    z.store(t * 0.5 + 1 - 0.25 / t)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_weak_int_scalar_keeps_tile_dtype_and_wraps(dtype):
    info = np.iinfo(dtype.storage)
    x = np.array([[info.max, info.min, 0, 5]], dtype.storage)
    text = weak_int.ir_text(ts.zeros((1, 4), dtype).sync().partition((1, 4)), ts.tensor(x))
    assert f"x{dtype.short}>" in text and "i32" not in text.replace(f"{dtype.short}", "")
    out = run(weak_int, dtype, [(x, dtype)], shape=(1, 4), tile=(1, 4))
    expected = [wrap(((int(v) + 1) * 2 - 3) + (1 - int(v)), dtype) for v in x[0]]
    np.testing.assert_array_equal(out[0], expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_weak_float_scalar_keeps_tile_dtype(dtype):
    x = dtype_values([[3.0, -1.5, 0.125, 1000.0 / 3]], dtype)
    z = ts.zeros((1, 4), dtype).sync().partition((1, 4))
    ir = weak_float.ir(z, ts.tensor(as_host(x, dtype), dtype))
    for op in ir.walk():
        for r in op.results:
            if hasattr(r.type, "dtype"):
                assert r.type.dtype is dtype, (op.name, r.type)
    out = run(weak_float, dtype, [(x, dtype)], shape=(1, 4), tile=(1, 4))
    # each intermediate rounds in the tile's dtype
    rnd = (lambda v: round_array(v, dtype))
    expected = rnd(rnd(rnd(x * 0.5) + 1) - rnd(0.25 / x))
    np.testing.assert_array_equal(out, expected)


@ts.kernel
def weak_bad(z: tc.MutTensor["T", (1, 4)], x: tc.Tensor["T", (-1, -1)], V: tc.Const[float]):
    z.store(tc.load_tile_like(x, z) + V)


@ts.kernel
def weak_bad_int(z: tc.MutTensor["T", (1, 4)], x: tc.Tensor["T", (-1, -1)], V: tc.Const[int]):
    z.store(tc.load_tile_like(x, z) + V)


def test_weak_scalars_that_do_not_fit_are_errors():
    def part(dtype):
        return ts.zeros((1, 4), dtype).sync().partition((1, 4))
    with pytest.raises(DTypeError, match="cannot be combined with a i8 tile"):
        weak_bad_int(part(ts.int8), ts.zeros((1, 4), ts.int8), 200).sync()
    with pytest.raises(DTypeError, match="cannot be combined with a u8 tile"):
        weak_bad_int(part(ts.uint8), ts.zeros((1, 4), ts.uint8), -1).sync()
    with pytest.raises(DTypeError, match="cannot be combined with a i32 tile"):
        weak_bad(part(ts.int32), ts.zeros((1, 4), ts.int32), 0.5).sync()
    with pytest.raises(DTypeError, match="cannot be combined with a bool tile"):
        weak_bad_int(part(ts.bool_), ts.zeros((1, 4), ts.bool_), 2).sync()


@ts.kernel
def mixed_dtypes(z: tc.MutTensor[tc.f32, (1, 4)], x: tc.Tensor[tc.f32, (-1, -1)],
                 y: tc.Tensor[tc.f16, (-1, -1)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def test_two_tiles_of_different_dtypes_are_an_error():
    z = ts.zeros((1, 4)).sync().partition((1, 4))
    with pytest.raises(DTypeError, match="element types differ"):
        mixed_dtypes(z, ts.zeros((1, 4)), ts.zeros((1, 4), ts.float16)).sync()


# ---------------------------------------------------------------------------------------------
# where / select


@ts.kernel
def where_k(z: tc.MutTensor["T", (4, 8)], x: tc.Tensor["T", (-1, -1)],
            y: tc.Tensor["T", (-1, -1)]):
    a = tc.load_tile_like(x, z)
    b = tc.load_tile_like(y, z)
    row = tc.reshape(tc.arange(4), (4, 1)) % 2 == 0     # (4, 1) condition broadcasts
    first = tc.where(a > b, a, b)                        # tile, tile
    second = tc.where(row, first, 7)                     # tile, weak scalar
    third = tc.select(a == b, 3, second)                 # weak scalar, tile
    z.store(tc.where(True, third, a))                    # Python bool condition


@pytest.mark.parametrize("dtype", [ts.int8, ts.uint32, ts.float16, ts.bfloat16, ts.float64],
                         ids=str)
def test_where_and_select(rng, dtype):
    x = random_values(rng, dtype, shape=(4, 8), lo=0, hi=100)
    y = random_values(rng, dtype, shape=(4, 8), lo=0, hi=100)
    y[1, :4] = x[1, :4]
    out = run(where_k, dtype, [(x, dtype), (y, dtype)], shape=(4, 8), tile=(4, 8))
    first = np.where(x > y, x, y)
    row = (np.arange(4) % 2 == 0)[:, None]
    expected = np.where(x == y, 3, np.where(row, first, 7))
    np.testing.assert_array_equal(out, expected)


@ts.kernel
def where_scalars(z: tc.MutTensor[tc.i32, (1, 8)], x: tc.Tensor[tc.i32, (-1, -1)]):
    z.store(tc.where(tc.load_tile_like(x, z) > 0, 1, -1))


def test_where_of_two_scalars_broadcasts_to_the_condition():
    x = np.array([[-3, 0, 4, 5, -1, 2, 0, 9]], np.int32)
    out = run(where_scalars, ts.int32, [(x, ts.int32)], shape=(1, 8), tile=(1, 8))
    np.testing.assert_array_equal(out, np.where(x > 0, 1, -1))


@ts.kernel
def where_not_bool(z: tc.MutTensor[tc.i32, (1, 8)], x: tc.Tensor[tc.i32, (-1, -1)]):
    t = tc.load_tile_like(x, z)
    z.store(tc.where(t, t, 0))


def test_where_needs_a_bool_condition():
    z = ts.zeros((1, 8), ts.int32).sync().partition((1, 8))
    with pytest.raises(DTypeError, match="condition must be a bool"):
        where_not_bool(z, ts.zeros((1, 8), ts.int32)).sync()


# ---------------------------------------------------------------------------------------------
# astype: every pair of dtypes


@ts.kernel
def convert_k(z: tc.MutTensor["U", "S"], x: tc.Tensor["T", (-1,)]):
    z.store(tc.load_tile_like(x, z).astype(z.dtype))


@ts.kernel
def convert_fn_k(z: tc.MutTensor["U", "S"], x: tc.Tensor["T", (-1,)], D: tc.Const[tc.DType]):
    z.store(tc.astype(tc.load_tile_like(x, z), D))


def source_values(src, dst) -> list:
    """Values of ``src`` whose conversion to ``dst`` is specified (no NaN/out-of-range -> int)."""
    if src.is_bool:
        return [True, False, True, True, False]
    if src.is_int:
        info = np.iinfo(src.storage)
        vals = [0, 1, -1, 2, -2, 100, -100, 127, -128, 255, 256, 1000, 65504, 65519, 65520,
                2**24 + 1, 2**31 - 1, -(2**31), 2**53 + 1, 2**62 + 2**54 + 1,
                -(2**62 + 2**54 + 1), 2**63 - 1, 2**63 + 2**55 + 1, 2**64 - 1,
                int(info.min), int(info.max)]
        vals += [v | 0x0101 for v in (2**20, 2**40, 2**60) ]
        return [v for v in vals if info.min <= v <= info.max]
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.75, 100.7, -100.7, 127.9, -128.9,
            255.5, 1 / 3, 1e-3, 1e-8, 3e4, 65519.0, 65520.0, 1e10, -1e10, 3e38, 1e-40,
            2.0 ** -24, 2.0 ** -25 * 3, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -9, 1 + 2.0 ** -11,
            math.pi, math.inf, -math.inf, math.nan]
    vals = [float(dtype_values([v], src)[0]) for v in vals]
    if dst.is_int:  # float -> int is specified for in-range, finite values (truncation)
        info = np.iinfo(dst.storage)
        vals = [v for v in vals if math.isfinite(v) and info.min <= math.trunc(v) <= info.max]
    return vals


def reference_convert(v, dst):
    if dst.is_bool:
        return bool(v != 0) or (isinstance(v, float) and math.isnan(v))
    if dst.is_int:
        return wrap(int(v) if not isinstance(v, float) else math.trunc(v), dst)
    if isinstance(v, bool):
        v = int(v)
    return round_exact(v, dst)


@pytest.mark.parametrize("dst", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_astype_every_pair(src, dst):
    vals = source_values(src, dst)
    host = as_host(np.array(vals, dtype=object if src.is_int else None), src)
    z = poisoned(len(vals), dst).partition(4)
    z, _ = convert_k(z, ts.tensor(host, src)).sync()
    out = z.unpartition().numpy()
    expected = [reference_convert(v, dst) for v in vals]
    if dst.is_float:
        np.testing.assert_array_equal(out.astype(np.float64), np.array(expected, np.float64))
        np.testing.assert_array_equal(np.signbit(out), np.signbit(np.array(expected, np.float64)))
    else:
        np.testing.assert_array_equal(out, np.array(expected, dtype=object).astype(dst.storage))


def test_astype_function_form_and_same_dtype_is_identity():
    x = np.array([1.5, -2.5, 3.75, 100.0], np.float32)
    z = poisoned(4, ts.int16).partition(4)
    z, _ = convert_fn_k(z, ts.tensor(x), ts.int16).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), [1, -2, 3, 100])
    z = ts.zeros(4).sync().partition(4)
    text = convert_fn_k.ir_text(z, ts.tensor(x), ts.float32)
    assert "convert(" not in text


@settings(max_examples=30, deadline=None)
@given(src=st.sampled_from([ts.float64, ts.float32]),
       dst=st.sampled_from([ts.float16, ts.bfloat16, ts.float32]),
       values=st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=5,
                       max_size=5))
def test_float_narrowing_is_correctly_rounded_property(src, dst, values):
    vals = [float(dtype_values([v], src)[0]) for v in values]
    z = poisoned(5, dst).partition(4)
    z, _ = convert_k(z, ts.tensor(np.array(vals), src)).sync()
    out = z.unpartition().numpy().astype(np.float64)
    np.testing.assert_array_equal(out, [round_exact(v, dst) for v in vals])


@settings(max_examples=30, deadline=None)
@given(src=st.sampled_from([ts.int64, ts.uint64, ts.int32]),
       dst=st.sampled_from([ts.bfloat16, ts.float32, ts.float16]), data=st.data())
def test_int_to_float_is_correctly_rounded_property(src, dst, data):
    info = np.iinfo(src.storage)
    ints = st.integers(int(info.min), int(info.max))
    vals = data.draw(st.lists(ints, min_size=4, max_size=4))
    z = poisoned(4, dst).partition(4)
    z, _ = convert_k(z, ts.tensor(np.array(vals, dtype=src.storage), src)).sync()
    out = z.unpartition().numpy().astype(np.float64)
    np.testing.assert_array_equal(out, [round_exact(v, dst) for v in vals])


# ---------------------------------------------------------------------------------------------
# fused multiply-add


@ts.kernel
def fma_k(z: tc.MutTensor[tc.f32, "S"], a: tc.Tensor[tc.f32, (-1, -1)],
          b: tc.Tensor[tc.f32, (-1, -1)], c: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.fma(tc.load_tile_like(a, z), tc.load_tile_like(b, z), tc.load_tile_like(c, z)))


@ts.kernel
def fma_scalars_k(z: tc.MutTensor[tc.f32, "S"], a: tc.Tensor[tc.f32, (-1, -1)], k: float):
    z.store(tc.fma(tc.load_tile_like(a, z), k, 0.25))


def _fma_reference(a, b, c) -> np.ndarray:
    """``a * b + c`` of f32 values, exact (Fractions), rounded once to f32; a zero keeps the
    sign IEEE gives an exact zero sum (-0 only when both terms are -0)."""
    out = []
    for x, y, w in zip(np.ravel(a), np.ravel(b), np.ravel(c)):
        x, y, w = float(x), float(y), float(w)
        exact = Fraction(x) * Fraction(y) + Fraction(w)
        if exact == 0:
            product_negative = math.copysign(1.0, x) * math.copysign(1.0, y) < 0
            both_negative = product_negative and math.copysign(1.0, w) < 0
            out.append(-0.0 if both_negative else 0.0)
        else:
            out.append(round_exact(exact, ts.float32))
    return np.array(out, np.float32).reshape(np.shape(a))


def _f32(*values):
    return np.array(values, np.float32).reshape(1, -1)


def test_fma_rounds_once_bit_for_bit(rng):
    """Random operands over wide magnitudes (subnormal products and sums included), and sums
    that a float64 sum would round onto an f32 halfway point: each result is the exact
    ``a * b + c`` rounded once."""
    shape = SHAPE
    scale = np.exp2(rng.integers(-80, 60, (3,) + shape)).astype(np.float64)
    a, b, c = (dtype_values(rng.uniform(-1, 1, shape) * s, ts.float32) for s in scale)
    a[0, :2], b[0, :2], c[0, :2] = 3.0, (0.5, -0.5), (-1.5, 1.5)  # exact zeros
    c[1, :4] = dtype_values(-a[1, :4] * b[1, :4], ts.float32)  # near-cancellations
    got = run(fma_k, ts.float32, [(a, ts.float32), (b, ts.float32), (c, ts.float32)])
    want = _fma_reference(a, b, c)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_fma_decides_the_halfway_points_a_double_rounding_gets_wrong():
    """a * b is 2**-24 - 2**-60 (rounded to float64: 2**-24) and c = 1 + 2**-23: the exact sum
    lies just below the halfway point between 1 + 2**-23 and 1 + 2**-22, so the fused result
    is 1 + 2**-23 (a float64 sum rounded to f32 would tie to 1 + 2**-22). Likewise just above
    a halfway point, and at the threshold past f32's largest value."""
    big = float(np.finfo(np.float32).max)
    a = _f32(2.0 ** -24 * (1 - 2.0 ** -18), -2.0 ** -24 * (1 - 2.0 ** -18), 2.0 ** 103)
    b = _f32(1 + 2.0 ** -18, 1 + 2.0 ** -18, 1 - 2.0 ** -24)
    c = _f32(1 + 2.0 ** -23, -1 - 2.0 ** -23, big)
    z = ts.zeros((1, 3)).sync().partition((1, 4))
    got = fma_k(z, *(ts.tensor(v).sync() for v in (a, b, c))).sync().z.unpartition().numpy()
    assert got[0, 0] == np.float32(1 + 2.0 ** -23) and got[0, 1] == np.float32(-1 - 2.0 ** -23)
    assert np.array_equal(got.view(np.uint32), _fma_reference(a, b, c).view(np.uint32))
    naive = (a.astype(np.float64) * b + c).astype(np.float32)
    assert naive[0, 0] == np.float32(1 + 2.0 ** -22)  # (what the test guards against)


def test_fma_special_values_and_weak_scalars(rng):
    a = _f32(np.inf, np.nan, 0.0, -0.0, 3.0, 1e38)
    b = _f32(0.0, 1.0, -1.0, 1.0, np.inf, 10.0)
    c = _f32(1.0, 1.0, 0.0, -0.0, -np.inf, 0.0)
    z = ts.zeros((1, 6)).sync().partition((1, 8))
    got = fma_k(z, *(ts.tensor(v).sync() for v in (a, b, c))).sync().z.unpartition().numpy()
    # (-0 * 1 + -0 is -0; 0 * -1 + 0 is +0; 1e38 * 10 overflows)
    want = np.array([[np.nan, np.nan, 0.0, -0.0, np.nan, np.inf]], np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(got)
    assert np.array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))
    x = dtype_values(rng.uniform(-8, 8, SHAPE), ts.float32)
    got = run(fma_scalars_k, ts.float32, [(x, ts.float32)], 1.5)
    assert np.array_equal(got, _fma_reference(x, np.full(SHAPE, 1.5), np.full(SHAPE, 0.25)))


@ts.kernel
def fma_typed_k(z: tc.MutTensor["T", "S"], a: tc.Tensor["T", (-1,)]):
    x = tc.load_tile_like(a, z)
    z.store(tc.fma(x, x, x))


@pytest.mark.parametrize("dtype", [ts.float16, ts.bfloat16, ts.float64, ts.int32])
def test_fma_takes_f32_tiles_only(dtype):
    z = ts.zeros((4,), dtype).sync().partition((4,))
    with pytest.raises(DTypeError, match=f"fma does not accept {dtype.short} tiles \\(f32 only\\)"):
        fma_typed_k(z, ts.zeros((4,), dtype).sync()).sync()


_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(_F32, _F32, _F32)
def test_the_interpreters_fma_is_the_exact_result_rounded_once(a, b, c):
    from tilesafe.compiler.ops.elementwise import fma_f32
    got = fma_f32(np.float32(a), np.float32(b), np.float32(c)).reshape(1)
    assert got.view(np.uint32) == _fma_reference([a], [b], [c]).view(np.uint32)
