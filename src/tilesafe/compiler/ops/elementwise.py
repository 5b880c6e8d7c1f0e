"""Elementwise ops: unary math, binary arithmetic and comparisons, ``where``, ``astype``.

Semantics (the interpreter's, and what every backend must match):

* Integer arithmetic wraps modulo 2**bits. ``//`` and ``%`` follow Python (floor division, the
  remainder has the sign of the divisor). Integer division by zero, shifts by at least the bit
  width, and float->int conversion of NaN or out-of-range values are unspecified (the
  interpreter gives numpy's answer; a GPU may differ).
* Float ops are IEEE round-to-nearest-even in the tile's dtype (f16/bf16 are computed in f32
  and rounded, which is the correctly rounded result for ``+ - * / sqrt``). Transcendentals
  (exp, log, sin, ...) are accurate to a few ulp on the GPU, correctly rounded here.
* ``maximum``/``minimum`` propagate NaN. Comparisons with NaN are False except ``!=``.
* ``fma(a, b, c)`` is ``a * b + c`` rounded once (f32 tiles): a GPU's fused multiply-add,
  which ``a * b + c`` never becomes by itself (that rounds twice, on every device).

Python numbers and weak runtime scalars (``float``/``int`` parameters) adapt to the dtype of
the tile they meet (``compiler.builder`` states the rule); the scalar result of an op on weak
operands only is weak again (comparisons give strong bools).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...errors import DTypeError
from ..registry import builtin, op
from ..types import TileType, broadcast_shapes
from ._rules import arithmetic, same_type, tiles

# ---------------------------------------------------------------------------------------------
# unary


def _unary_rule(name: str, accepts: str) -> Callable:
    def infer(types, attrs):
        (t,) = tiles(name, types, 1)
        arithmetic(name, t)
        if t.dtype.kind not in accepts:
            wanted = {"f": "float", "i": "signed integer", "u": "unsigned integer", "b": "bool"}
            allowed = ", ".join(wanted[k] for k in accepts)
            raise DTypeError(f"{name} does not accept {t.dtype.short} tiles (accepts: {allowed})",
                             hint=f"convert first, e.g. {name}(x.astype(tc.f32))"
                             if "f" in accepts else "")
        return (t,)
    return infer


def _float_eval(fn: Callable) -> Callable:
    """Evaluate a float function in float64 and round once to the tile's dtype afterwards, so
    f16/bf16/f32 results are the correctly rounded values (up to float64's own accuracy)."""
    def evaluate(ctx, attrs, x):
        return fn(x.astype(np.float64))
    return evaluate


def _declare_unary(name: str, doc: str, fn: Callable, accepts: str, *, float_eval: bool,
                   method: str | None = None) -> None:
    op(name, doc, _unary_rule(name, accepts), _float_eval(fn) if float_eval
       else (lambda ctx, attrs, x: fn(x)))
    if name in _MODE_KEYWORDS:
        return  # (declared below with its keywords)

    def build(b, x):
        (v,) = b.coerce([x], name)
        return b.weak_result(b.emit1(name, (v,)), (x,))
    methods = (("tile", method),) if method else ()
    builtin(name, f"{name}(x) -> tile\n\n{doc}", build, methods=methods)


# ---------------------------------------------------------------------------------------------
# float modes: what a GPU may do faster, chosen per op by the kernel's author (never a default)

#: ops that take float-mode keywords (their builtins are declared with them, below)
_MODE_KEYWORDS = ("exp", "exp2", "truediv", "maximum", "minimum")
#: the smallest normal f32 magnitude: flush-to-zero treats anything below as zero
_F32_TINY = np.float64(np.finfo(np.float32).tiny)
DIVISION_ROUNDINGS = ("nearest_even", "full", "approx")


def flush_f32_subnormals(x: np.ndarray) -> np.ndarray:
    """``x`` with the magnitudes below f32's smallest normal replaced by a zero of the same
    sign (what a flush-to-zero f32 operation does to its inputs and results)."""
    return np.where(np.abs(x) < _F32_TINY, np.copysign(0.0, x), x) if x.dtype.kind == "f" else x


def _check_flush(b, name: str, value, flush_to_zero) -> bool:
    if not isinstance(flush_to_zero, bool):
        raise b.error(DTypeError, f"{name}: flush_to_zero must be True or False, got "
                      f"{flush_to_zero!r}")
    if flush_to_zero and b.tile(value).type.dtype.bits == 64:
        raise b.error(DTypeError, f"{name}: flush_to_zero applies to f32 (and f16/bf16, which "
                      "are computed in f32), not to f64 tiles",
                      hint="leave flush_to_zero out for f64 tiles")
    return flush_to_zero


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x.astype(np.float64))


_FLOAT_MATH = {
    "exp": (np.exp, "e**x, elementwise (float tiles)."),
    "exp2": (np.exp2, "2**x, elementwise (float tiles)."),
    "log": (np.log, "Natural logarithm, elementwise (float tiles); log(0) = -inf, log(<0) = nan."),
    "log2": (np.log2, "Base-2 logarithm, elementwise (float tiles)."),
    "sqrt": (np.sqrt, "Square root, elementwise (float tiles), correctly rounded."),
    "rsqrt": (_rsqrt, "1 / sqrt(x), elementwise (float tiles)."),
    "sin": (np.sin, "Sine (radians), elementwise (float tiles)."),
    "cos": (np.cos, "Cosine (radians), elementwise (float tiles)."),
    "tan": (np.tan, "Tangent (radians), elementwise (float tiles)."),
    "sinh": (np.sinh, "Hyperbolic sine, elementwise (float tiles)."),
    "cosh": (np.cosh, "Hyperbolic cosine, elementwise (float tiles)."),
    "tanh": (np.tanh, "Hyperbolic tangent, elementwise (float tiles)."),
    "floor": (np.floor, "Largest integer value <= x, elementwise (float tiles)."),
    "ceil": (np.ceil, "Smallest integer value >= x, elementwise (float tiles)."),
}

def _flushing(fn: Callable) -> Callable:
    """``fn`` in float64, flushing f32 subnormal inputs and results when ``attrs["ftz"]``."""
    def evaluate(*args: np.ndarray, ftz: bool = False) -> np.ndarray:
        if not ftz:
            return fn(*args)
        return flush_f32_subnormals(fn(*(flush_f32_subnormals(a) for a in args)))
    return evaluate


for _name, (_fn, _doc) in _FLOAT_MATH.items():
    if _name == "exp2":
        _fn = _flushing(_fn)
        op(_name, _doc, _unary_rule(_name, "f"),
           lambda ctx, attrs, x, f=_fn: f(x.astype(np.float64), ftz=attrs.get("ftz", False)))
        continue
    _declare_unary(_name, _doc, _fn, "f", float_eval=True)


def _build_exp2(b, x, flush_to_zero=False):
    """exp2(x, flush_to_zero=False) -> tile

    2**x, elementwise (float tiles). ``flush_to_zero=True`` lets the GPU use its fastest form
    (``ex2.approx.ftz``): inputs and results below f32's smallest normal (about 1.2e-38) are
    zero, so ``exp2(x)`` for ``x < -126`` is 0 instead of a subnormal; the interpreter does
    the same. The default keeps subnormals.
    """
    flush = _check_flush(b, "exp2", x, flush_to_zero)
    (v,) = b.coerce([x], "exp2")
    return b.weak_result(b.emit1("exp2", (v,), {"ftz": True} if flush else None), (x,))


def _build_exp(b, x, approx=False):
    """exp(x, approx=False) -> tile

    e**x, elementwise (float tiles). ``approx=True`` lets the GPU compute it as ``exp2(x *
    log2(e))`` with its fast approximation (relative error within a few ulp, larger for
    |x| > 80), where the default is the accurate form; the interpreter computes e**x
    correctly rounded either way, so expect a GPU's ``approx`` results to differ from the
    interpreter's in the last bits.
    """
    if not isinstance(approx, bool):
        raise b.error(DTypeError, f"exp: approx must be True or False, got {approx!r}")
    (v,) = b.coerce([x], "exp")
    return b.weak_result(b.emit1("exp", (v,), {"approx": True} if approx else None), (x,))


builtin("exp2", _build_exp2.__doc__, _build_exp2)
builtin("exp", _build_exp.__doc__, _build_exp)

_declare_unary("negative", "-x, elementwise (integers wrap: -INT_MIN == INT_MIN).",
               np.negative, "fiu", float_eval=False)
_declare_unary("abs", "|x|, elementwise (integers wrap: abs(INT_MIN) == INT_MIN).",
               np.abs, "fiu", float_eval=False, method="abs")
_declare_unary("invert", "~x: bitwise not of integers, logical not of bool tiles.",
               np.invert, "iub", float_eval=False)

# ---------------------------------------------------------------------------------------------
# binary


def _floor_true_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.floor(np.true_divide(a, b))
    return np.floor_divide(a, b)


def _left_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.left_shift(a, b.astype(a.dtype))


def _right_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.right_shift(a, b.astype(a.dtype))


def _binary_rule(name: str, accepts: str, result: DType | None) -> Callable:
    def infer(types, attrs):
        t = same_type(name, tiles(name, types, 2))
        arithmetic(name, t)
        if t.dtype.kind not in accepts:
            kinds = {"f": "float", "i": "int", "u": "unsigned", "b": "bool"}
            raise DTypeError(
                f"{name} does not accept {t.dtype.short} tiles "
                f"(accepts {', '.join(kinds[k] for k in accepts)})",
                hint="convert with .astype(...) first" + (
                    "; for integer division use //" if name == "truediv" else ""))
        return (TileType(result, t.shape) if result else t,)
    return infer


_BINARY = {
    # name: (numpy fn, accepted kinds, result dtype (None: same), doc, python operator)
    "add": (np.add, "fiu", None, "a + b, elementwise with broadcasting.", "+"),
    "sub": (np.subtract, "fiu", None, "a - b, elementwise with broadcasting.", "-"),
    "mul": (np.multiply, "fiu", None, "a * b, elementwise with broadcasting.", "*"),
    "truediv": (np.true_divide, "f", None, "a / b for float tiles (IEEE division).", "/"),
    "floordiv": (_floor_true_divide, "fiu", None,
                 "a // b: floor division (Python semantics); floats: floor(a / b).", "//"),
    "mod": (np.mod, "fiu", None,
            "a % b: remainder with the sign of b (Python semantics).", "%"),
    "pow": (np.power, "f", None, "a ** b for float tiles.", "**"),
    "maximum": (np.maximum, "fiub", None, "Elementwise maximum; NaN propagates.", None),
    "minimum": (np.minimum, "fiub", None, "Elementwise minimum; NaN propagates.", None),
    "bitwise_and": (np.bitwise_and, "iub", None, "a & b: bitwise/logical and.", "&"),
    "bitwise_or": (np.bitwise_or, "iub", None, "a | b: bitwise/logical or.", "|"),
    "bitwise_xor": (np.bitwise_xor, "iub", None, "a ^ b: bitwise/logical xor.", "^"),
    "left_shift": (_left_shift, "iu", None, "a << b for integers (wraps).", "<<"),
    "right_shift": (_right_shift, "iu", None,
                    "a >> b: arithmetic for signed, logical for unsigned integers.", ">>"),
    "equal": (np.equal, "fiub", dt.bool_, "a == b, elementwise; a bool tile.", "=="),
    "not_equal": (np.not_equal, "fiub", dt.bool_, "a != b, elementwise; a bool tile.", "!="),
    "less": (np.less, "fiub", dt.bool_, "a < b, elementwise; a bool tile.", "<"),
    "less_equal": (np.less_equal, "fiub", dt.bool_, "a <= b, elementwise; a bool tile.", "<="),
    "greater": (np.greater, "fiub", dt.bool_, "a > b, elementwise; a bool tile.", ">"),
    "greater_equal": (np.greater_equal, "fiub", dt.bool_,
                      "a >= b, elementwise; a bool tile.", ">="),
}

# Python operator -> builtin name, read by the front end.
BINARY_OPERATORS: dict[str, str] = {}


def _declare_binary(name: str, fn: Callable, accepts: str, result: DType | None, doc: str,
                    symbol: str | None) -> None:
    if name == "truediv":
        evaluate = _flushing(fn)
        op(name, doc, _binary_rule(name, accepts, result),
           lambda ctx, attrs, a, b: evaluate(a, b, ftz=attrs.get("ftz", False)))
    elif name in ("maximum", "minimum"):
        ignoring = np.fmax if name == "maximum" else np.fmin
        op(name, doc, _binary_rule(name, accepts, result),
           lambda ctx, attrs, a, b: (fn if attrs.get("propagate_nan", True) else ignoring)(a, b))
    else:
        op(name, doc, _binary_rule(name, accepts, result), lambda ctx, attrs, a, b: fn(a, b))
    if symbol:
        BINARY_OPERATORS[symbol] = name
    if name in _MODE_KEYWORDS:
        return  # (declared below with its keywords)

    def build(b, x, y):
        vx, vy = b.coerce([x, y], name)
        r = b.emit1(name, (vx, vy))
        return r if result else b.weak_result(r, (x, y))
    usage = f"x {symbol} y, or " if symbol else ""
    builtin(name, f"{usage}{name}(x, y) -> tile\n\n{doc} Python scalars adapt to the tile's "
            "dtype; two tiles must share a dtype.", build)


for _name, (_fn, _acc, _res, _doc, _sym) in _BINARY.items():
    _declare_binary(_name, _fn, _acc, _res, _doc, _sym)


def _build_truediv(b, x, y, rounding="nearest_even", flush_to_zero=False):
    """x / y, or truediv(x, y, rounding="nearest_even", flush_to_zero=False) -> tile

    a / b for float tiles. ``rounding="nearest_even"`` (the default, and what ``/`` does) is
    IEEE division, correctly rounded. ``"full"`` and ``"approx"`` let the GPU use its fast
    division (within 2 ulp; ``approx`` for divisors up to 2**126 in magnitude, ``full`` for the
    whole range): the interpreter divides exactly, so expect a GPU's results to differ from it
    in the last bits. ``flush_to_zero=True`` treats f32 subnormal inputs and results as zero,
    on every device. Python scalars adapt to the tile's dtype; two tiles must share a dtype.
    """
    if rounding not in DIVISION_ROUNDINGS:
        raise b.error(DTypeError, f"truediv: rounding must be one of "
                      f"{', '.join(map(repr, DIVISION_ROUNDINGS))}, got {rounding!r}")
    vx, vy = b.coerce([x, y], "truediv")
    flush = _check_flush(b, "truediv", vx, flush_to_zero)
    attrs = {}
    if rounding != "nearest_even":
        attrs["rounding"] = rounding
    if flush:
        attrs["ftz"] = True
    return b.weak_result(b.emit1("truediv", (vx, vy), attrs or None), (x, y))


def _extremum_builder(name: str) -> Callable:
    def build(b, x, y, propagate_nan=True):
        if not isinstance(propagate_nan, bool):
            raise b.error(DTypeError, f"{name}: propagate_nan must be True or False, got "
                          f"{propagate_nan!r}")
        vx, vy = b.coerce([x, y], name)
        attrs = None if propagate_nan else {"propagate_nan": False}
        return b.weak_result(b.emit1(name, (vx, vy), attrs), (x, y))
    which = "larger" if name == "maximum" else "smaller"
    build.__doc__ = (
        f"{name}(x, y, propagate_nan=True) -> tile\n\nThe {which} of ``x`` and ``y``, "
        "elementwise with broadcasting. With floats, a NaN operand gives NaN (as numpy's "
        f"``{name}``); ``propagate_nan=False`` gives the other operand instead (numpy's "
        f"``f{name[:3]}``), which a GPU computes in fewer instructions. Python scalars adapt to "
        "the tile's dtype; two tiles must share a dtype.")
    return build


builtin("truediv", _build_truediv.__doc__, _build_truediv)
for _name in ("maximum", "minimum"):
    _builder = _extremum_builder(_name)
    builtin(_name, _builder.__doc__, _builder)

# ---------------------------------------------------------------------------------------------
# fused multiply-add


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` for f32 arrays, rounded once to f32 (to nearest, ties to even).

    The product of two f32 values is exact in f64. The f64 sum ``s`` is rounded, and its error
    ``e`` (``s + e`` is the exact sum, ``TwoSum``) decides the one case where rounding ``s`` to
    f32 could differ from rounding the exact sum: ``s`` exactly halfway between two f32 values,
    where the exact sum lies on ``e``'s side of it. Overflow to infinity follows the same rule,
    with 2**128 as the value past f32's largest."""
    a64, b64, c64 = (np.asarray(v, np.float64) for v in (a, b, c))
    with np.errstate(all="ignore"):
        p = a64 * b64
        s = p + c64
        virtual = s - p
        e = (p - (s - virtual)) + (c64 - virtual)
        r = s.astype(np.float32)
        near = np.where(np.isinf(r) & np.isfinite(s), np.copysign(2.0 ** 128, s),
                        r.astype(np.float64))
        toward = np.where(s > near, np.inf, -np.inf).astype(np.float32)
        other = np.where(np.isinf(r), np.copysign(np.finfo(np.float32).max, s),
                         np.nextafter(r, toward)).astype(np.float32)  # (r's neighbour by s)
        halfway = (s != near) & (s == (near + other.astype(np.float64)) / 2)
        beyond = np.sign(e) == np.sign(other.astype(np.float64) - near)
        fixed = halfway & (e != 0) & beyond & np.isfinite(e)
        return np.where(fixed, other, r).astype(np.float32)


def _fma_rule(types, attrs):
    t = same_type("fma", tiles("fma", types, 3))
    if t.dtype is not dt.float32:
        raise DTypeError(f"fma does not accept {t.dtype.short} tiles (f32 only)",
                         hint="convert first, e.g. tc.fma(a.astype(tc.f32), b.astype(tc.f32), "
                         "c.astype(tc.f32)), or write a * b + c (two roundings)")
    return (t,)


op("fma", "a * b + c with one rounding (f32).", _fma_rule,
   lambda ctx, attrs, a, b, c: fma_f32(a, b, c))


def _build_fma(b, x, y, z):
    """fma(a, b, c) -> tile

    ``a * b + c`` rounded once, elementwise with broadcasting, for f32 tiles: the GPU's fused
    multiply-add, one instruction where ``a * b + c`` takes two and rounds twice. The result
    can differ from ``a * b + c`` in the last bit (it is the more accurate of the two); the
    interpreter computes the same single rounding, so both devices agree. Python scalars adapt
    to the tiles' dtype; the tiles must share one (convert 16-bit tiles with .astype(tc.f32)).
    """
    vx, vy, vz = b.coerce([x, y, z], "fma")
    return b.weak_result(b.emit1("fma", (vx, vy, vz)), (x, y, z))


builtin("fma", _build_fma.__doc__, _build_fma)

# ---------------------------------------------------------------------------------------------
# select


def _select_rule(types, attrs):
    cond, a, b = tiles("where", types, 3)
    if not cond.dtype.is_bool:
        raise DTypeError(f"where: the condition must be a bool tile, got {cond.dtype.short}",
                         hint="compare to build a condition, e.g. tc.where(x > 0, x, 0.0)")
    t = same_type("where", (a, b))
    if cond.shape != t.shape:
        raise DTypeError(f"where: condition shape {cond.shape} differs from {t.shape}")
    return (t,)


op("select", "Elementwise choice: cond ? a : b.", _select_rule,
   lambda ctx, attrs, c, a, b: np.where(c, a, b))


def _build_where(b, cond, x, y):
    """where(cond, x, y) -> tile

    Elementwise ``x`` where ``cond`` is True, else ``y`` (numpy broadcasting; Python scalars
    adapt to the other operand's dtype). ``cond`` must be a bool tile.
    """
    vx, vy = b.coerce([x, y], "where")
    c = b.tile(cond, "condition") if not isinstance(cond, bool) else b.constant(cond, dt.bool_)
    full = broadcast_shapes(vx.type.shape, c.type.shape)
    if full is None:
        b.coerce([c, vx], "where")  # raises the broadcast error with both shapes
    vx, vy = b.broadcast_to(vx, full), b.broadcast_to(vy, full)
    c = b.broadcast_to(c, full)
    return b.weak_result(b.emit1("select", (c, vx, vy)), (x, y))


builtin("where", _build_where.__doc__, _build_where)
builtin("select", "select(cond, x, y) -> tile\n\nSame as where(cond, x, y).", _build_where)

# ---------------------------------------------------------------------------------------------
# conversion


def convert_values(x: np.ndarray, target: DType) -> np.ndarray:
    """numpy semantics of a dtype conversion (floats to ints truncate toward zero)."""
    if target.is_bool:
        return x != 0
    if target.is_int and x.dtype.kind == "f":
        return np.trunc(x).astype(target.compute, casting="unsafe")
    return target.convert(x)  # (8-bit floats saturate, as the GPU's conversion does)


#: what the storage-and-mma types convert to and from (Tile IR's ftof, through f32).
_LOWP_PARTNERS = ("float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2", "tfloat32")


def _convert_rule(types, attrs):
    (t,) = tiles("astype", types, 1)
    source, target = t.dtype, attrs["dtype"]
    for this, other in ((source, target), (target, source)):
        if not this.arithmetic and other.name not in _LOWP_PARTNERS:
            raise DTypeError(f"astype: {source.short} -> {target.short} is not supported: "
                             f"{this.short} converts only to and from f16, bf16, f32, "
                             "f8e4m3fn, f8e5m2 and tf32",
                             hint=f"convert through f32, e.g. x.astype(tc.f32)"
                             f".astype(tc.{target.short})")
    return (TileType(target, t.shape),)


op("convert", "Convert a tile to another element type.", _convert_rule,
   lambda ctx, attrs, x: convert_values(x, attrs["dtype"]))


def _build_astype(b, x, dtype):
    """astype(x, dtype) -> tile   (also the method x.astype(dtype))

    Convert to ``dtype``: floats round to nearest even, float -> int truncates toward zero,
    int -> int wraps, anything -> bool tests ``!= 0``. Converting NaN or out-of-range floats to
    integers is unspecified. Conversions to the 8-bit floats (``tc.f8e4m3fn``, ``tc.f8e5m2``)
    saturate: values beyond the largest finite value (448 and 57344) and infinities become
    that value with their sign, NaN stays NaN. ``x.astype(tc.tf32)`` rounds an f32 tile to
    tf32 (10 mantissa bits) for ``mma``. The 8-bit floats and tf32 convert only to and from
    f16, bf16, f32 and each other.
    """
    target = b.dtype_arg(dtype, "astype")
    v = b.tile(x, "astype operand")
    if v.type.dtype is target:
        return v
    return b.emit1("convert", (v,), {"dtype": target})


builtin("astype", _build_astype.__doc__, _build_astype, methods=(("tile", "astype"),))
