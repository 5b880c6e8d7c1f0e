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

    def build(b, x):
        (v,) = b.coerce([x], name)
        return b.weak_result(b.emit1(name, (v,)), (x,))
    methods = (("tile", method),) if method else ()
    builtin(name, f"{name}(x) -> tile\n\n{doc}", build, methods=methods)


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

for _name, (_fn, _doc) in _FLOAT_MATH.items():
    _declare_unary(_name, _doc, _fn, "f", float_eval=True)

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
    op(name, doc, _binary_rule(name, accepts, result), lambda ctx, attrs, a, b: fn(a, b))

    def build(b, x, y):
        vx, vy = b.coerce([x, y], name)
        r = b.emit1(name, (vx, vy))
        return r if result else b.weak_result(r, (x, y))
    usage = f"x {symbol} y, or " if symbol else ""
    builtin(name, f"{usage}{name}(x, y) -> tile\n\n{doc} Python scalars adapt to the tile's "
            "dtype; two tiles must share a dtype.", build)
    if symbol:
        BINARY_OPERATORS[symbol] = name


for _name, (_fn, _acc, _res, _doc, _sym) in _BINARY.items():
    _declare_binary(_name, _fn, _acc, _res, _doc, _sym)

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
