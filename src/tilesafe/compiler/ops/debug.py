"""Debugging ops: ``tc.print`` (formatted device output) and ``tc.assert_`` (a device check).

``print(fmt, *values, end="\\n")``
    ``fmt`` is a compile-time string with C ``printf`` conversions, one per value:
    ``%[flags][width][.precision][length]conversion`` with flags from ``-+ 0``, conversions
    ``d i u o x X`` for integer and bool values and ``f F e E g G`` for float values, and ``%%``
    for a literal percent sign. The length modifier (``hh h l ll j z t L``) may be left out:
    the value's dtype decides it (a 64-bit integer is printed as ``ll``); if written, it is
    checked against the dtype (``l``/``ll``/``j``/``z``/``t`` for 64-bit integers, ``l`` for
    floats, ``h``/``hh`` for integers of at most 16/8 bits, which they read as C does: ``%hhu``
    of an i8 -1 is 255). A conversion that does not fit its value's dtype (``%d`` of a
    float, ``%f`` of an integer), a width or precision given as ``*``, ``#`` and the other
    conversions (``c s p n a A``) are compile errors.

    Each conversion formats its value's every element: a rank-0 tile (a scalar) prints as the
    element alone, a tile of rank n as nested brackets in row-major order with ``", "``
    between elements (``[[0, 1], [2, 3]]``), each element formatted by the whole conversion
    (width included). Integers print with C's rules: ``d``/``i`` read the value as signed,
    ``u o x X`` as unsigned, at 32 bits (narrower integers and bools are widened first, with
    their own signedness) or at 64 bits. Bool values print as 0/1. Floats print their exact
    value (f16/bf16 widened); NaN prints as ``nan`` (a GPU may print ``-nan`` for a NaN whose
    sign bit is set). ``end`` (a compile-time string, default a newline) is printed after the
    format, as Python's ``print`` does.

    On the interpreter each print writes its text to the process's ``sys.stdout`` when the op
    runs: in program order within a tile program, and one program after another in grid order.
    On a GPU the text reaches the process's stdout through the driver's printf buffer when the
    stream synchronizes; prints of one program keep their program order (they are ordered by
    the kernel's memory token chain), but programs run concurrently, so their text interleaves
    in no particular order, even within a line (a tile prints element by element). Printing is
    slow on a GPU: it is for debugging.

``assert_(cond, message)``
    ``cond`` is a bool tile (every element must be true) or a bool scalar; ``message`` a
    compile-time string. On the interpreter a false element raises
    :class:`~tilesafe.errors.DeviceAssertionError` naming the kernel, the tile program, the
    source line, the message and the failing elements' indices. On a GPU a false element
    prints the message (with the element's index and the source line) and traps: the launch
    fails with a CUDA error, and the CUDA context is unusable afterwards (every later call in
    the process fails) — that is the hardware's behaviour, so device asserts are a debugging
    tool, not error handling.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...errors import CompileError, DeviceAssertionError, DTypeError
from ..builder import describe, is_py_scalar
from ..ir import Value
from ..registry import builtin, op
from ..types import TileType

__all__ = ["FormatSpec", "PrintFormat", "parse_format", "printf_length", "format_element",
           "format_tile"]

_INT_CONVERSIONS = "diuoxX"
_UNSIGNED_CONVERSIONS = "uoxX"
_FLOAT_CONVERSIONS = "fFeEgG"
_SPEC = re.compile(r"%(?P<flags>[-+ 0#]*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d*))?"
                   r"(?P<length>hh|h|ll|l|j|z|t|L)?(?P<conv>.?)", re.DOTALL)

FORMAT_HINT = ("write C printf conversions, one per value: %d %i %u %x %X %o for integers and "
               "bools, %f %e %g (%F %E %G) for floats, with optional flags (-+ 0), width and "
               ".precision, and %% for a literal percent sign")


@dataclass(frozen=True)
class FormatSpec:
    """One conversion of a print format (its length modifier is implied by the dtype)."""

    flags: str
    width: Optional[int]
    precision: Optional[int]
    conv: str

    @property
    def is_int(self) -> bool:
        return self.conv in _INT_CONVERSIONS

    def c_text(self, length: str = "") -> str:
        """The conversion as C printf text, with the ``length`` modifier given."""
        width = "" if self.width is None else str(self.width)
        precision = "" if self.precision is None else f".{self.precision}"
        return f"%{self.flags}{width}{precision}{length}{self.conv}"

    def __str__(self) -> str:
        return self.c_text()


@dataclass(frozen=True)
class PrintFormat:
    """A print op's format: its pieces (literal strings and ``(FormatSpec, length)``
    conversions, the end text included). Shown in the IR as the C text it stands for."""

    pieces: tuple

    def __str__(self) -> str:
        return repr("".join(p.replace("%", "%%") if isinstance(p, str) else p[0].c_text(p[1])
                            for p in self.pieces))


def parse_format(text: str) -> tuple:
    """``text`` as a tuple of pieces: literal strings and :class:`FormatSpec` s.

    Each conversion is returned as ``(spec, length)``: the length modifier as written (``""``
    when left out), checked against the value's dtype by :func:`check_specs`. Raises
    CompileError (without a location: the builder adds it) for a conversion tilesafe cannot
    print.
    """
    pieces: list = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "%":
            literal.append(ch)
            i += 1
            continue
        if text.startswith("%%", i):
            literal.append("%")
            i += 2
            continue
        m = _SPEC.match(text, i)
        assert m is not None  # the pattern matches any '%'
        spec_text = m.group(0)
        conv = m.group("conv")
        if not conv:
            raise CompileError(f"print: the format ends inside the conversion {spec_text!r}",
                               hint=FORMAT_HINT)
        if "*" in (m.group("width") or "") + (m.group("precision") or ""):
            raise CompileError(f"print: {spec_text!r}: a width or precision given as '*' is "
                               "not supported", hint="write the number into the format")
        if "#" in m.group("flags"):
            raise CompileError(f"print: {spec_text!r}: the '#' flag is not supported",
                               hint=FORMAT_HINT)
        if conv not in _INT_CONVERSIONS + _FLOAT_CONVERSIONS:
            raise CompileError(f"print: {spec_text!r}: the conversion '%{conv}' is not "
                               "supported (tiles hold numbers only)", hint=FORMAT_HINT)
        flags = m.group("flags")
        if conv in _UNSIGNED_CONVERSIONS:
            flags = flags.replace("+", "").replace(" ", "")  # C ignores them there
        flags = "".join(sorted(set(flags), key=flags.index))
        precision = m.group("precision")
        if literal:
            pieces.append("".join(literal))
            literal = []
        spec = FormatSpec(flags, int(m.group("width")) if m.group("width") else None,
                          None if precision is None else int(precision or 0), conv)
        pieces.append((spec, m.group("length") or ""))
        i = m.end()
    if literal:
        pieces.append("".join(literal))
    return tuple(pieces)


def _check_spec(spec: FormatSpec, length: str, dtype: DType, index: int) -> None:
    what = f"print: value {index} ({dtype.short})"
    if dtype.is_float and spec.is_int:
        raise DTypeError(f"{what} is a float, but its conversion is {spec.c_text(length)!r}",
                         hint="use %f, %e or %g for floats, or convert the value with "
                         ".astype(tc.i32)")
    if not dtype.is_float and not spec.is_int:
        kind = "bool" if dtype.is_bool else "an integer"
        raise DTypeError(f"{what} is {kind}, but its conversion is {spec.c_text(length)!r}",
                         hint="use %d, %u or %x for integers and bools, or convert the value "
                         "with .astype(tc.f32)")
    if not length:
        return
    if dtype.is_float:
        fits = length == "l"  # a float reaches printf as a double; 'L' would be long double
    elif dtype.bits == 64:
        fits = length in ("l", "ll", "j", "z", "t")
    else:
        fits = length in ("hh", "h") and dtype.bits <= {"hh": 8, "h": 16}[length]
    if not fits:
        raise DTypeError(f"{what}: the length modifier '{length}' in "
                         f"{spec.c_text(length)!r} does not fit a {dtype.short} value",
                         hint=f"leave the length modifier out (write {spec.c_text()!r}): "
                         "tilesafe picks the one the dtype needs")


def check_specs(pieces: Sequence, types: Sequence[TileType]) -> None:
    """Raise if the conversions of ``pieces`` do not match the value types one for one."""
    specs = [p for p in pieces if not isinstance(p, str)]
    if len(specs) != len(types):
        raise CompileError(f"print: the format has {len(specs)} conversion(s) but "
                           f"{len(types)} value(s) were given",
                           hint="give one value per conversion; write %% for a literal '%'")
    for i, ((spec, length), t) in enumerate(zip(specs, types)):
        _check_spec(spec, length, t.dtype, i)


# ---------------------------------------------------------------------------------------------
# the interpreter's text (C printf rules)


def _format_int(spec: FormatSpec, value: int) -> str:
    base = {"d": 10, "i": 10, "u": 10, "o": 8, "x": 16, "X": 16}[spec.conv]
    negative = value < 0
    digits = np.base_repr(abs(value), base) if value else "0"
    digits = digits.lower() if spec.conv != "X" else digits.upper()
    if spec.precision is not None:
        digits = "" if spec.precision == 0 and value == 0 else digits.rjust(spec.precision, "0")
    sign = "-" if negative else "+" if "+" in spec.flags else " " if " " in spec.flags else ""
    width = spec.width or 0
    if "-" in spec.flags:
        return (sign + digits).ljust(width)
    if "0" in spec.flags and spec.precision is None:
        return sign + digits.rjust(width - len(sign), "0")
    return (sign + digits).rjust(width)


def _format_float(spec: FormatSpec, value: float) -> str:
    flags = spec.flags if np.isfinite(value) else spec.flags.replace("0", "")
    text = FormatSpec(flags, spec.width, spec.precision, spec.conv).c_text()
    return text % value


def printf_length(length: str, dtype: DType) -> str:
    """The length modifier a conversion of a ``dtype`` value is printed with: ``ll`` for 64-bit
    integers, ``h``/``hh`` as written (they narrow the value, as in C), else none."""
    if dtype.is_int and dtype.bits == 64:
        return "ll"
    return length if length in ("h", "hh") else ""


def format_element(spec: FormatSpec, value, dtype: DType, length: str = "") -> str:
    """One element as C's printf formats it (after the device's widening of ``dtype``), with
    the conversion's length modifier ``length`` as written."""
    if dtype.is_float:
        return _format_float(spec, float(value))
    bits = {"ll": 64, "h": 16, "hh": 8}.get(printf_length(length, dtype), 32)
    v = int(value)  # bools are 0/1; narrow integers widen with their own signedness
    if spec.conv in _UNSIGNED_CONVERSIONS:
        v %= 1 << bits
    elif v >= 1 << (bits - 1):
        v -= 1 << bits
    return _format_int(spec, v)


def format_tile(spec: FormatSpec, values: np.ndarray, dtype: DType, length: str = "") -> str:
    """A tile as the device prints it: a scalar alone, else nested ``[a, b]`` lists."""
    values = np.asarray(values)
    if values.ndim == 0:
        return format_element(spec, values[()], dtype, length)
    return "[" + ", ".join(format_tile(spec, row, dtype, length) for row in values) + "]"


# ---------------------------------------------------------------------------------------------
# print


def _print_rule(types, attrs):
    for t in types:
        if not isinstance(t, TileType):
            raise CompileError(f"print: values must be tiles or scalars, got {t}")
    check_specs(attrs["format"].pieces, types)
    return ()


def _print_eval(ctx, attrs, *values):
    out: list[str] = []
    it = iter(zip(values, attrs["dtypes"]))
    for piece in attrs["format"].pieces:
        if isinstance(piece, str):
            out.append(piece)
        else:
            value, dtype = next(it)
            out.append(format_tile(piece[0], value, dtype, piece[1]))
    sys.stdout.write("".join(out))
    sys.stdout.flush()


op("print", "Formatted output of tiles (attrs: format, a PrintFormat: the literal strings and "
   "(FormatSpec, length) conversions, the end text included; dtypes, the values' dtypes). "
   "Ordered with the other prints and memory accesses of its program.",
   _print_rule, _print_eval, effect="io")


def _compile_time_string(b, x, what: str, example: str) -> str:
    if not isinstance(x, str):
        raise b.error(CompileError, f"{what} must be a compile-time string, got {describe(x)}",
                      f"write a string literal (or a module-level string constant), e.g. "
                      f"{example}; kernels have no strings at run time")
    return x


def _build_print(b, fmt, *values, end="\n"):
    """print(fmt, *values, end="\\n") -> None

    Print ``values`` (tiles or scalars) from the device with the C printf format ``fmt``, a
    compile-time string with one conversion per value (``%d %i %u %x %X %o`` for integers and
    bools, ``%f %e %g %F %E %G`` for floats, with flags ``-+ 0``, width and precision; ``%%``
    is a percent sign), followed by ``end``. A tile prints as nested brackets,
    ``[[0, 1], [2, 3]]``, each element formatted by its conversion; a scalar prints alone.
    The length modifier is implied by the dtype (writing ``%lld`` for an i64 is allowed, not
    needed). Example: ``tc.print("block %d: x = %.3f", tc.get_tile_block_id()[0], x)``.

    The interpreter writes the text to ``sys.stdout`` when the print runs (in program order,
    programs in grid order); a GPU writes it when the stream synchronizes, the programs' text
    interleaved even within lines. For debugging: printing is slow on a GPU.
    """
    fmt = _compile_time_string(b, fmt, "print: the format", 'tc.print("x = %f", x)')
    end = _compile_time_string(b, end, "print: end", 'end=""')
    try:
        pieces = parse_format(fmt)
    except CompileError as err:
        raise err.with_context(location=b.location, kernel=b.kernel_name)
    if end:
        pieces = pieces[:-1] + (pieces[-1] + end,) if pieces and isinstance(pieces[-1], str) \
            else pieces + (end,)
    operands = []
    for i, v in enumerate(values):
        if not (is_py_scalar(v) or (isinstance(v, Value) and isinstance(v.type, TileType))):
            raise b.error(CompileError, f"print: value {i} is a {describe(v)}, not a tile or "
                          "a scalar", "print tiles and scalars; load a tensor's tile first")
        operands.append(b.tile(v, f"print value {i}"))
    b.emit("print", operands, {"format": PrintFormat(pieces),
                               "dtypes": tuple(v.type.dtype for v in operands)})
    return None


builtin("print", _build_print.__doc__, _build_print)

# ---------------------------------------------------------------------------------------------
# assert


def _assert_rule(types, attrs):
    if len(types) != 1:
        raise CompileError("assert_ takes one condition")
    (t,) = types
    if not (isinstance(t, TileType) and t.dtype.is_bool):
        raise DTypeError(f"assert_: the condition must be a bool tile or scalar, got {t}",
                         hint="compare to build a condition, e.g. tc.assert_(x >= 0, "
                         "\"x is negative\")")
    return ()


def _assert_eval(ctx, attrs, cond):
    cond = np.asarray(cond)
    if cond.all():
        return
    failing = [tuple(int(i) for i in idx) for idx in np.argwhere(~cond)]
    shown = ", ".join(str(i) for i in failing[:8]) + (", ..." if len(failing) > 8 else "")
    where = f"{ctx.location}: " if ctx.location else ""
    at = f" (false at {len(failing)} of {cond.size} elements: {shown})" if cond.ndim else ""
    raise DeviceAssertionError(f"{where}in kernel '{ctx.kernel_name}', tile program "
                               f"{ctx.program_id}: device assertion failed: "
                               f"{attrs['message']}{at}")


op("assert", "Fails the tile program with ``message`` (attr) unless every element of the bool "
   "condition is true.", _assert_rule, _assert_eval, effect="trap")


def _build_assert(b, cond, message="device assertion failed"):
    """assert_(cond, message="device assertion failed") -> None

    Check on the device that ``cond`` (a bool tile: every element, or a bool scalar) holds;
    ``message`` is a compile-time string. On the interpreter a false element raises
    ``ts.DeviceAssertionError`` naming the kernel, the tile program, the line, the message and
    the failing indices. On a GPU it prints the message with the failing index and traps: the
    launch fails with a CUDA error and the CUDA context cannot be used again in this process
    (the hardware's behaviour), so asserts are for debugging. Compile-time conditions are
    checked with Python's ``assert`` statement instead.
    """
    message = _compile_time_string(b, message, "assert_: the message",
                                   'tc.assert_(x > 0, "x must be positive")')
    if isinstance(cond, bool):
        c = b.constant(cond, dt.bool_)
    elif isinstance(cond, Value) and isinstance(cond.type, TileType):
        c = cond
    else:
        raise b.error(DTypeError, f"assert_: the condition must be a bool tile or scalar, got "
                      f"{describe(cond)}", "compare to build a condition, e.g. x >= 0")
    b.emit("assert", (c,), {"message": message})
    return None


builtin("assert_", _build_assert.__doc__, _build_assert)
