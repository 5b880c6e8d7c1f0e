"""Element-wise operations: integer and float arithmetic, math functions, comparisons, ``select``
and numeric conversions.

Every method checks its operand types, infers the result type (same as the operands, an ``i1``
tile for comparisons, the requested element type for conversions) and returns the result.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from ._builder_core import FunctionCore, Value, flag_bits
from .enums import (
    ComparisonOrdering, ComparisonPredicate, IntegerOverflow, RoundingMode, Signedness,
)
from .opcodes import check_version
from .types import I1, I64, PointerType, ScalarType, TileType

__all__ = ["ArithmeticOps"]


class ArithmeticOps(FunctionCore):
    """Element-wise arithmetic, math, comparison and conversion operations."""

    # -- shared layouts ----------------------------------------------------------------------------

    def _rounding(self, mode: RoundingMode) -> int:
        mode = RoundingMode(mode)
        if mode is RoundingMode.NEAREST_AWAY:
            check_version(self.version, (13, 4), "rounding mode nearest_away")
        return int(mode)

    def _float_binary(self, mnemonic: str, lhs: Value, rhs: Value, rounding: RoundingMode,
                      flush_to_zero: bool) -> Value:
        self._float_tile(lhs, f"{mnemonic} lhs")
        result = self._same_types(mnemonic, lhs, rhs)
        return self._simple(mnemonic, result, [lhs, rhs], flags=flag_bits(flush_to_zero),
                            attributes=[self._rounding(rounding)])

    def _float_plain(self, mnemonic: str, *operands: Value) -> Value:
        self._float_tile(operands[0], f"{mnemonic} operand")
        return self._simple(mnemonic, self._same_types(mnemonic, *operands), operands)

    def _int_plain(self, mnemonic: str, *operands: Value,
                   attributes: tuple[int, ...] = ()) -> Value:
        self._int_tile(operands[0], f"{mnemonic} operand")
        return self._simple(mnemonic, self._same_types(mnemonic, *operands), operands,
                            attributes=attributes)

    def _converted(self, src: Value, to: ScalarType, *, want_float_source: bool,
                   want_float_result: bool, mnemonic: str) -> TileType:
        if want_float_source:
            source = self._float_tile(src, mnemonic)
        else:
            source = self._int_tile(src, mnemonic)
        if not isinstance(to, ScalarType) or to.is_float != want_float_result:
            kind = "float" if want_float_result else "integer"
            raise ValueError(f"{mnemonic} converts to a {kind} element type, got {to}")
        return source.with_element(to)

    # -- float arithmetic --------------------------------------------------------------------------

    def addf(self, lhs: Value, rhs: Value, *, rounding: RoundingMode = RoundingMode.NEAREST_EVEN,
             flush_to_zero: bool = False) -> Value:
        """``lhs + rhs`` on float tiles."""
        return self._float_binary("addf", lhs, rhs, rounding, flush_to_zero)

    def subf(self, lhs: Value, rhs: Value, *, rounding: RoundingMode = RoundingMode.NEAREST_EVEN,
             flush_to_zero: bool = False) -> Value:
        """``lhs - rhs`` on float tiles."""
        return self._float_binary("subf", lhs, rhs, rounding, flush_to_zero)

    def mulf(self, lhs: Value, rhs: Value, *, rounding: RoundingMode = RoundingMode.NEAREST_EVEN,
             flush_to_zero: bool = False) -> Value:
        """``lhs * rhs`` on float tiles."""
        return self._float_binary("mulf", lhs, rhs, rounding, flush_to_zero)

    def divf(self, lhs: Value, rhs: Value, *, rounding: RoundingMode = RoundingMode.NEAREST_EVEN,
             flush_to_zero: bool = False) -> Value:
        """``lhs / rhs`` on float tiles (``APPROX``/``FULL`` select fast variants)."""
        return self._float_binary("divf", lhs, rhs, rounding, flush_to_zero)

    def fma(self, a: Value, b: Value, c: Value, *,
            rounding: RoundingMode = RoundingMode.NEAREST_EVEN,
            flush_to_zero: bool = False) -> Value:
        """Fused ``a * b + c``."""
        self._float_tile(a, "fma operand")
        result = self._same_types("fma", a, b, c)
        return self._simple("fma", result, [a, b, c], flags=flag_bits(flush_to_zero),
                            attributes=[self._rounding(rounding)])

    def maxf(self, lhs: Value, rhs: Value, *, propagate_nan: bool = False,
             flush_to_zero: bool = False) -> Value:
        """Element-wise maximum of float tiles."""
        self._float_tile(lhs, "maxf lhs")
        return self._simple("maxf", self._same_types("maxf", lhs, rhs), [lhs, rhs],
                            flags=flag_bits(propagate_nan, flush_to_zero))

    def minf(self, lhs: Value, rhs: Value, *, propagate_nan: bool = False,
             flush_to_zero: bool = False) -> Value:
        """Element-wise minimum of float tiles."""
        self._float_tile(lhs, "minf lhs")
        return self._simple("minf", self._same_types("minf", lhs, rhs), [lhs, rhs],
                            flags=flag_bits(propagate_nan, flush_to_zero))

    def remf(self, lhs: Value, rhs: Value) -> Value:
        """Float remainder with the sign of ``lhs`` (C ``fmod``)."""
        return self._float_plain("remf", lhs, rhs)

    def fpowf(self, base: Value, exponent: Value) -> Value:
        """``base ** exponent`` on float tiles (spelled ``pow`` before 13.4)."""
        return self._float_plain("fpowf", base, exponent)

    def fpowi(self, base: Value, exponent: Value) -> Value:
        """``base ** exponent`` with an integer exponent tile of the same shape (13.4+)."""
        base_tile = self._float_tile(base, "fpowi base")
        exponent_tile = self._int_tile(exponent, "fpowi exponent")
        if exponent_tile.shape != base_tile.shape:
            raise ValueError(f"fpowi exponent {exponent_tile} must have the shape of {base_tile}")
        return self._simple("fpowi", base_tile, [base, exponent])

    def atan2(self, y: Value, x: Value) -> Value:
        """Four-quadrant arctangent of ``y / x`` (13.2+)."""
        return self._float_plain("atan2", y, x)

    # -- float math --------------------------------------------------------------------------------

    def absf(self, src: Value) -> Value:
        """``|src|``."""
        return self._float_plain("absf", src)

    def negf(self, src: Value) -> Value:
        """``-src``."""
        return self._float_plain("negf", src)

    def ceil(self, src: Value) -> Value:
        """Round up to an integral value."""
        return self._float_plain("ceil", src)

    def floor(self, src: Value) -> Value:
        """Round down to an integral value."""
        return self._float_plain("floor", src)

    def sin(self, src: Value) -> Value:
        """Sine."""
        return self._float_plain("sin", src)

    def cos(self, src: Value) -> Value:
        """Cosine."""
        return self._float_plain("cos", src)

    def tan(self, src: Value) -> Value:
        """Tangent."""
        return self._float_plain("tan", src)

    def sinh(self, src: Value) -> Value:
        """Hyperbolic sine."""
        return self._float_plain("sinh", src)

    def cosh(self, src: Value) -> Value:
        """Hyperbolic cosine."""
        return self._float_plain("cosh", src)

    def log(self, src: Value) -> Value:
        """Natural logarithm."""
        return self._float_plain("log", src)

    def log2(self, src: Value) -> Value:
        """Base-2 logarithm."""
        return self._float_plain("log2", src)

    def exp(self, src: Value, *, rounding: RoundingMode = RoundingMode.FULL) -> Value:
        """``e ** src``; the rounding mode (``FULL`` or ``APPROX``) is encoded from 13.3 on."""
        tile = self._float_tile(src, "exp operand")
        if self.version >= (13, 3):
            return self._simple("exp", tile, [src], attributes=[self._rounding(rounding)])
        if rounding != RoundingMode.FULL:
            check_version(self.version, (13, 3), "an exp rounding mode")
        return self._simple("exp", tile, [src])

    def tanh(self, src: Value, *, rounding: RoundingMode = RoundingMode.FULL) -> Value:
        """Hyperbolic tangent; the rounding mode is encoded from 13.2 on."""
        tile = self._float_tile(src, "tanh operand")
        if self.version >= (13, 2):
            return self._simple("tanh", tile, [src], attributes=[self._rounding(rounding)])
        if rounding != RoundingMode.FULL:
            check_version(self.version, (13, 2), "a tanh rounding mode")
        return self._simple("tanh", tile, [src])

    def exp2(self, src: Value, *, flush_to_zero: bool = False) -> Value:
        """``2 ** src``."""
        tile = self._float_tile(src, "exp2 operand")
        return self._simple("exp2", tile, [src], flags=flag_bits(flush_to_zero))

    def rsqrt(self, src: Value, *, flush_to_zero: bool = False) -> Value:
        """``1 / sqrt(src)``."""
        tile = self._float_tile(src, "rsqrt operand")
        return self._simple("rsqrt", tile, [src], flags=flag_bits(flush_to_zero))

    def sqrt(self, src: Value, *, rounding: RoundingMode = RoundingMode.NEAREST_EVEN,
             flush_to_zero: bool = False) -> Value:
        """Square root."""
        tile = self._float_tile(src, "sqrt operand")
        return self._simple("sqrt", tile, [src], flags=flag_bits(flush_to_zero),
                            attributes=[self._rounding(rounding)])

    # -- integer arithmetic ------------------------------------------------------------------------

    def addi(self, lhs: Value, rhs: Value, *,
             overflow: IntegerOverflow = IntegerOverflow.NONE) -> Value:
        """``lhs + rhs`` (wrapping unless ``overflow`` promises otherwise)."""
        return self._int_plain("addi", lhs, rhs, attributes=(int(IntegerOverflow(overflow)),))

    def subi(self, lhs: Value, rhs: Value, *,
             overflow: IntegerOverflow = IntegerOverflow.NONE) -> Value:
        """``lhs - rhs``."""
        return self._int_plain("subi", lhs, rhs, attributes=(int(IntegerOverflow(overflow)),))

    def muli(self, lhs: Value, rhs: Value, *,
             overflow: IntegerOverflow = IntegerOverflow.NONE) -> Value:
        """``lhs * rhs`` (low half)."""
        return self._int_plain("muli", lhs, rhs, attributes=(int(IntegerOverflow(overflow)),))

    def mulhii(self, lhs: Value, rhs: Value) -> Value:
        """High half of the full-width product (unsigned)."""
        return self._int_plain("mulhii", lhs, rhs)

    def divi(self, lhs: Value, rhs: Value, *, signedness: Signedness,
             rounding: RoundingMode = RoundingMode.ZERO) -> Value:
        """Integer division rounding to ``ZERO``, ``NEGATIVE_INF`` (floor) or ``POSITIVE_INF``."""
        return self._int_plain("divi", lhs, rhs, attributes=(int(Signedness(signedness)),
                                                             self._rounding(rounding)))

    def remi(self, lhs: Value, rhs: Value, *, signedness: Signedness) -> Value:
        """Integer remainder (sign of ``lhs`` when signed)."""
        return self._int_plain("remi", lhs, rhs, attributes=(int(Signedness(signedness)),))

    def maxi(self, lhs: Value, rhs: Value, *, signedness: Signedness) -> Value:
        """Element-wise integer maximum."""
        return self._int_plain("maxi", lhs, rhs, attributes=(int(Signedness(signedness)),))

    def mini(self, lhs: Value, rhs: Value, *, signedness: Signedness) -> Value:
        """Element-wise integer minimum."""
        return self._int_plain("mini", lhs, rhs, attributes=(int(Signedness(signedness)),))

    def andi(self, lhs: Value, rhs: Value) -> Value:
        """Bitwise and (also logical and of ``i1`` tiles)."""
        return self._int_plain("andi", lhs, rhs)

    def ori(self, lhs: Value, rhs: Value) -> Value:
        """Bitwise or."""
        return self._int_plain("ori", lhs, rhs)

    def xori(self, lhs: Value, rhs: Value) -> Value:
        """Bitwise exclusive or."""
        return self._int_plain("xori", lhs, rhs)

    def shli(self, lhs: Value, rhs: Value, *,
             overflow: IntegerOverflow = IntegerOverflow.NONE) -> Value:
        """``lhs << rhs``."""
        return self._int_plain("shli", lhs, rhs, attributes=(int(IntegerOverflow(overflow)),))

    def shri(self, lhs: Value, rhs: Value, *, signedness: Signedness) -> Value:
        """``lhs >> rhs``, arithmetic when signed, logical when unsigned."""
        return self._int_plain("shri", lhs, rhs, attributes=(int(Signedness(signedness)),))

    def absi(self, src: Value) -> Value:
        """``|src|`` (signed)."""
        return self._int_plain("absi", src)

    def negi(self, src: Value, *, overflow: IntegerOverflow = IntegerOverflow.NONE) -> Value:
        """``-src``; the overflow promise is encoded from 13.2 on."""
        if self.version >= (13, 2):
            return self._int_plain("negi", src, attributes=(int(IntegerOverflow(overflow)),))
        if overflow != IntegerOverflow.NONE:
            check_version(self.version, (13, 2), "a negi overflow promise")
        return self._int_plain("negi", src)

    # -- comparisons and selection -----------------------------------------------------------------

    def cmpf(self, predicate: ComparisonPredicate, lhs: Value, rhs: Value, *,
             ordering: ComparisonOrdering = ComparisonOrdering.ORDERED) -> Value:
        """Compare float tiles; the result is an ``i1`` tile of the same shape."""
        tile = self._float_tile(lhs, "cmpf lhs")
        self._same_types("cmpf", lhs, rhs)
        return self._simple("cmpf", tile.with_element(I1), [lhs, rhs],
                            attributes=[int(ComparisonPredicate(predicate)),
                                        int(ComparisonOrdering(ordering))])

    def cmpi(self, predicate: ComparisonPredicate, lhs: Value, rhs: Value, *,
             signedness: Signedness) -> Value:
        """Compare integer tiles; the result is an ``i1`` tile of the same shape."""
        tile = self._int_tile(lhs, "cmpi lhs")
        self._same_types("cmpi", lhs, rhs)
        return self._simple("cmpi", tile.with_element(I1), [lhs, rhs],
                            attributes=[int(ComparisonPredicate(predicate)),
                                        int(Signedness(signedness))])

    def select(self, condition: Value, if_true: Value, if_false: Value) -> Value:
        """Element-wise ``condition ? if_true : if_false`` (``condition``: an ``i1`` tile)."""
        self._same_types("select", if_true, if_false)
        result = self._tile(if_true, "select value")
        if self._tile(condition, "select condition") != result.with_element(I1):
            raise ValueError(
                f"select condition must be {result.with_element(I1)}, got {condition.type}")
        return self._simple("select", result, [condition, if_true, if_false])

    # -- conversions -------------------------------------------------------------------------------

    def exti(self, src: Value, to: ScalarType, *, signedness: Signedness) -> Value:
        """Widen integers (sign- or zero-extend)."""
        result = self._converted(src, to, want_float_source=False, want_float_result=False,
                                 mnemonic="exti")
        return self._simple("exti", result, [src], attributes=[int(Signedness(signedness))])

    def trunci(self, src: Value, to: ScalarType, *,
               overflow: IntegerOverflow = IntegerOverflow.NONE) -> Value:
        """Narrow integers, keeping the low bits."""
        result = self._converted(src, to, want_float_source=False, want_float_result=False,
                                 mnemonic="trunci")
        return self._simple("trunci", result, [src], attributes=[int(IntegerOverflow(overflow))])

    def ftof(self, src: Value, to: ScalarType, *,
             rounding: RoundingMode = RoundingMode.NEAREST_EVEN) -> Value:
        """Convert between float formats."""
        result = self._converted(src, to, want_float_source=True, want_float_result=True,
                                 mnemonic="ftof")
        return self._simple("ftof", result, [src], attributes=[self._rounding(rounding)])

    def itof(self, src: Value, to: ScalarType, *, signedness: Signedness,
             rounding: RoundingMode = RoundingMode.NEAREST_EVEN) -> Value:
        """Convert integers to floats."""
        result = self._converted(src, to, want_float_source=False, want_float_result=True,
                                 mnemonic="itof")
        return self._simple("itof", result, [src],
                            attributes=[int(Signedness(signedness)), self._rounding(rounding)])

    def ftoi(self, src: Value, to: ScalarType, *, signedness: Signedness,
             rounding: RoundingMode = RoundingMode.NEAREST_INT_TO_ZERO,
             saturating: bool = False) -> Value:
        """Convert floats to integers (truncating); ``saturating`` clamps (13.4+)."""
        result = self._converted(src, to, want_float_source=True, want_float_result=False,
                                 mnemonic="ftoi")
        attributes = [int(Signedness(signedness)), self._rounding(rounding)]
        if self.version >= (13, 4):
            return self._simple("ftoi", result, [src], flags=flag_bits(saturating),
                                attributes=attributes)
        if saturating:
            check_version(self.version, (13, 4), "saturating ftoi")
        return self._simple("ftoi", result, [src], attributes=attributes)

    def bitcast(self, src: Value, to: ScalarType) -> Value:
        """Reinterpret the bits of each element as ``to`` (same width)."""
        tile = self._tile(src, "bitcast operand")
        if not isinstance(tile.element, ScalarType) or tile.element.bits != to.bits:
            raise ValueError(
                f"bitcast needs scalar elements of equal width, got {tile.element} -> {to}")
        return self._simple("bitcast", tile.with_element(to), [src])

    def ptr_to_int(self, src: Value) -> Value:
        """Pointer tile to an ``i64`` tile of addresses."""
        tile = self._tile(src, "ptr_to_int operand")
        if not isinstance(tile.element, PointerType):
            raise ValueError(f"ptr_to_int needs a pointer tile, got {tile}")
        return self._simple("ptr_to_int", tile.with_element(I64), [src])

    def int_to_ptr(self, src: Value, pointee: ScalarType) -> Value:
        """``i64`` address tile to a tile of pointers to ``pointee``."""
        tile = self._int_tile(src, "int_to_ptr operand")
        return self._simple("int_to_ptr", tile.with_element(PointerType(pointee)), [src])

    def ptr_to_ptr(self, src: Value, pointee: ScalarType) -> Value:
        """Reinterpret a pointer tile as pointers to ``pointee``."""
        tile = self._tile(src, "ptr_to_ptr operand")
        if not isinstance(tile.element, PointerType):
            raise ValueError(f"ptr_to_ptr needs a pointer tile, got {tile}")
        return self._simple("ptr_to_ptr", tile.with_element(PointerType(pointee)), [src])
