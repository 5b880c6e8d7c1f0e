"""Element types: the one table of dtypes shared by the host API, the device language and the backends.

A :class:`DType` knows its numpy *storage* type (what a host buffer holds), its numpy *compute*
type (what the interpreter computes in), how to round a computed array to the type's precision,
and its DLPack code.

Low-precision floats have no numpy type of their own; their host storage is the ``ml_dtypes``
type of the same format (``ml_dtypes.bfloat16``, ``float8_e4m3fn``, ``float8_e5m2``), so a
tensor's ``numpy()`` is a real typed array. They compute as ``float32`` values rounded to the
format after every operation: for bf16 that is the correctly rounded result of ``+ - * / sqrt``
(float32 carries more than twice bf16's precision).

* ``bfloat16`` (bf16): f32's range, 8 significant bits; overflow rounds to inf.
* ``float8_e4m3fn`` (f8e4m3fn): 4 exponent bits, 4 significant bits, largest finite 448, no inf,
  one NaN pattern per sign (``0x7F``/``0xFF``).
* ``float8_e5m2`` (f8e5m2): 5 exponent bits, 3 significant bits, largest finite 57344, has inf.
* ``tfloat32`` (tf32): f32's range and 11 significant bits (10 stored), round-to-nearest-even
  (the GPU's ``cvt.rn.tf32.f32``); overflow rounds to inf. It is a *tile* element type only,
  the operand type of tensor-core ``mma`` on f32 data: no tensor, scalar parameter or host
  array holds tf32 (its 19 bits have no memory layout a host library shares; Tile IR's
  constants store it in 3 bytes), so ``x.astype(tc.tf32)`` of an f32 tile is how it is made.

Two roundings to the 8-bit floats exist, and both are round-to-nearest-even from the exact value:

* :meth:`DType.round` (host constructors and copies, the interpreter's storage) rounds as
  ``ml_dtypes`` does: a value beyond the largest finite one becomes inf (e5m2) or NaN (e4m3fn);
  it is the identity on every value the format holds. A compile-time constant that does not fit
  is a compile error (:meth:`DType.fits`).
* :meth:`DType.convert` (a kernel's ``x.astype(tc.f8e4m3fn)``) **saturates**: a finite value
  beyond the largest finite one, and +-inf, become +-448 (+-57344); NaN stays NaN. This is what
  the GPU does: for sm_90, tileiras lowers Tile IR's ``ftof`` to an 8-bit float to PTX's
  ``cvt.rn.satfinite``.

The 8-bit floats and tf32 are *storage and mma* types: tiles of them can be converted,
reshaped, selected and multiplied with ``mma`` (and f8 tiles loaded and stored), but not used
in arithmetic, comparisons or reductions (Tile IR has none on them); convert to f32 first
(:attr:`DType.arithmetic`).

Rounding is done once from the exact value: float64 (and 64-bit integer) sources are first
narrowed to float32 with round-to-odd, which makes the final rounding to the narrow format
correct (no double rounding).

This module must not import anything else from tilesafe; its one third-party import besides
numpy is ``ml_dtypes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math
import struct
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "DType", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "tfloat32",
    "ALL_DTYPES", "as_dtype", "as_strided", "memory_dtype", "from_numpy",
    "b1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
    "f8e4m3fn", "f8e5m2", "tf32",
]

# DLPack type codes (dlpack.h: kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool,
# kDLFloat8_e4m3fn, kDLFloat8_e5m2). tf32 has none (it is never in memory).
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6
_DL_F8E4M3FN, _DL_F8E5M2, _DL_NONE = 10, 12, -1


@dataclass(frozen=True, eq=False)
class DType:
    """An element type of tensors and tiles (``tc.f32``, ``ts.float32``, ...).

    Attributes:
        name: canonical name, e.g. ``"float32"``.
        short: the device-language spelling, e.g. ``"f32"``.
        kind: ``"f"`` (float), ``"i"`` (signed int), ``"u"`` (unsigned int) or ``"b"`` (bool).
        bits: width in bits.
    """

    name: str
    short: str
    kind: str
    bits: int
    storage: np.dtype = field(repr=False)
    compute: np.dtype = field(repr=False)
    dlpack_code: int = field(repr=False)
    #: False for the storage-and-mma types (f8e4m3fn, f8e5m2, tf32): no arithmetic on them.
    arithmetic: bool = field(default=True, repr=False)
    #: True for tf32: a tile element type only (no tensor, scalar or host array holds it).
    tile_only: bool = field(default=False, repr=False)

    # -- classification -------------------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("i", "u")

    @property
    def is_signed(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def itemsize(self) -> int:
        """Bytes per element in memory."""
        return self.storage.itemsize

    # -- numpy conversions ------------------------------------------------------------------
    def round(self, values: Any) -> np.ndarray:
        """Convert computed values to this dtype's compute representation, rounding as the
        dtype does (integers wrap, floats round to nearest even)."""
        rounder = _ROUNDERS.get(self.name)
        if rounder is not None:
            return rounder(np.asarray(values))
        arr = np.asarray(values)
        if arr.dtype == self.compute:
            return arr
        if self.is_int and arr.dtype.kind in "iub":
            # Wrap modulo 2**bits like the GPU's integer truncation.
            return arr.astype(self.compute, casting="unsafe")
        return arr.astype(self.compute)

    def convert(self, values: Any) -> np.ndarray:
        """The values of a kernel's ``astype`` to this float dtype: :meth:`round`, except that
        the 8-bit floats saturate as the GPU's conversion does (a finite value beyond the
        largest finite value, and +-inf, become +-that value; NaN stays NaN)."""
        if self.is_float and self.bits == 8:
            arr = np.asarray(values)
            if arr.dtype.kind == "f":
                top = self.finite_max
                with np.errstate(invalid="ignore"):
                    arr = np.where(np.isnan(arr), arr, np.clip(arr, -top, top))
            return self.round(arr)
        return self.round(values)

    def to_compute(self, stored: np.ndarray) -> np.ndarray:
        """View host storage (numpy storage dtype) as compute values."""
        if self.storage != self.compute:
            return np.asarray(stored).astype(self.compute)  # exact: every value fits f32
        return stored

    def to_storage(self, values: np.ndarray) -> np.ndarray:
        """Convert compute values to host storage (rounded to this dtype first)."""
        if self.storage != self.compute:
            return np.asarray(self.round(values)).astype(self.storage)
        return np.asarray(values, dtype=self.storage)

    @property
    def finite_max(self) -> float:
        """The largest finite value of a float dtype."""
        if not self.is_float:
            raise TypeError(f"{self.short} is not a float dtype")
        if self.tile_only:
            return (2.0 - 2.0 ** -10) * 2.0 ** 127
        return float(ml_dtypes.finfo(self.storage).max)

    def fits(self, value: Any) -> bool:
        """Whether a Python scalar can be represented in this dtype without changing kind."""
        if isinstance(value, bool):
            return True
        if isinstance(value, int):
            if self.is_bool:
                return value in (0, 1)
            if self.is_float:
                return self.bits != 8 or self.fits(float(int_to_float64_odd(value)))
            info = np.iinfo(self.compute)
            return int(info.min) <= value <= int(info.max)
        if isinstance(value, float):
            if self.is_float and self.bits == 8 and not math.isnan(value):
                # an 8-bit float holds a value only up to its largest finite one (e5m2: and inf)
                return bool(np.isfinite(self.round(np.float64(value)))) or \
                    (math.isinf(value) and self is float8_e5m2)
            return self.is_float
        return False

    def __repr__(self) -> str:
        return f"tilesafe.{self.name}"

    def __str__(self) -> str:
        return self.short

    def __reduce__(self):  # pickles as a reference to the singleton
        return (as_dtype, (self.name,))


def _narrow_to_f32_odd(values: np.ndarray) -> np.ndarray:
    """float32 values that round like ``values`` to any format of at most 22 significant bits.

    float64 (and 32/64-bit integer) inputs are narrowed with round-to-odd (an inexact result
    gets its last bit set), so the later rounding to bf16/f8/tf32 is correct (no double
    rounding); float16/float32 inputs are exact in float32.
    """
    arr = np.asarray(values)
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 8:
        # 64-bit integers do not fit float64 exactly: round each to odd from the exact value.
        arr = np.vectorize(int_to_float64_odd, otypes=[np.float64])(arr.astype(object))
    if arr.dtype == np.float64 or arr.dtype.kind in "iu" and arr.dtype.itemsize >= 4:
        wide = arr.astype(np.float64)
        with np.errstate(over="ignore"):
            narrow = wide.astype(np.float32)
        with np.errstate(invalid="ignore"):
            inexact = np.isfinite(narrow) & (narrow.astype(np.float64) != wide)
        if np.any(inexact):
            bits = narrow.view(np.uint32).copy()
            too_big = np.abs(narrow.astype(np.float64)) > np.abs(wide)
            bits = np.where(inexact & too_big, bits - 1, bits)
            bits = np.where(inexact, bits | 1, bits)
            narrow = bits.astype(np.uint32).view(np.float32)
        return np.ascontiguousarray(narrow)
    return np.ascontiguousarray(arr.astype(np.float32))


def _round_mantissa(values: np.ndarray, dropped: int) -> np.ndarray:
    """Round to float32's exponent range with ``23 - dropped`` stored mantissa bits (nearest
    even; overflow becomes inf, NaN the quiet NaN), returned as float32 values."""
    f32 = _narrow_to_f32_odd(values)
    bits = f32.view(np.uint32)
    bias = np.uint32((1 << (dropped - 1)) - 1) + ((bits >> dropped) & np.uint32(1))
    rounded = ((bits + bias) >> dropped) << dropped
    rounded = np.where(np.isnan(f32), np.uint32(0x7FC00000), rounded).astype(np.uint32)
    return rounded.view(np.float32).reshape(np.shape(values))


def _round_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round to bfloat16 precision (nearest even), returned as float32 values."""
    return _round_mantissa(values, 16)


def _round_to_tf32(values: np.ndarray) -> np.ndarray:
    """Round to tf32 precision (10 stored mantissa bits, nearest even), as float32 values."""
    return _round_mantissa(values, 13)


def _f8_rounder(storage: Any):
    """Round to an 8-bit float format as ``ml_dtypes`` does, but from the exact value: nearest
    even; beyond the largest finite value, inf (e5m2) or NaN (e4m3fn, which has no inf).
    Returned as float32 values."""
    def round_f8(values: np.ndarray) -> np.ndarray:
        f32 = _narrow_to_f32_odd(values)
        return f32.astype(storage).astype(np.float32).reshape(np.shape(values))
    return round_f8


def int_to_float64_odd(value: int) -> float:
    """A float64 that rounds like the exact integer ``value`` to any narrower float type:
    exact when representable, else truncated toward zero with the last bit set (round to
    odd), which makes the later rounding to f32/f16/bf16 correct (no double rounding)."""
    f = float(value)
    if abs(value) <= 1 << 53 or int(f) == value or math.isinf(f):
        return f
    if abs(int(f)) > abs(value):
        f = math.nextafter(f, 0.0)
    bits = struct.unpack("<Q", struct.pack("<d", f))[0] | 1
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def constant_source(value: Any, dtype: "DType") -> Any:
    """The number to round when a compile-time ``value`` becomes a ``dtype`` constant: an exact
    Python int bound for a float narrower than f64 goes through :func:`int_to_float64_odd`, so
    it is rounded once; anything else is returned unchanged."""
    if dtype.is_float and dtype.bits < 64 and isinstance(value, int) \
            and not isinstance(value, bool):
        return int_to_float64_odd(value)
    return value


def _make(name: str, short: str, kind: str, bits: int, storage: str, compute: str, dl: int) -> DType:
    return DType(name, short, kind, bits, np.dtype(storage), np.dtype(compute), dl)


bool_ = _make("bool", "bool", "b", 8, "bool", "bool", _DL_BOOL)
int8 = _make("int8", "i8", "i", 8, "int8", "int8", _DL_INT)
int16 = _make("int16", "i16", "i", 16, "int16", "int16", _DL_INT)
int32 = _make("int32", "i32", "i", 32, "int32", "int32", _DL_INT)
int64 = _make("int64", "i64", "i", 64, "int64", "int64", _DL_INT)
uint8 = _make("uint8", "u8", "u", 8, "uint8", "uint8", _DL_UINT)
uint16 = _make("uint16", "u16", "u", 16, "uint16", "uint16", _DL_UINT)
uint32 = _make("uint32", "u32", "u", 32, "uint32", "uint32", _DL_UINT)
uint64 = _make("uint64", "u64", "u", 64, "uint64", "uint64", _DL_UINT)
float16 = _make("float16", "f16", "f", 16, "float16", "float16", _DL_FLOAT)
bfloat16 = DType("bfloat16", "bf16", "f", 16, np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32),
                 _DL_BFLOAT)
float32 = _make("float32", "f32", "f", 32, "float32", "float32", _DL_FLOAT)
float64 = _make("float64", "f64", "f", 64, "float64", "float64", _DL_FLOAT)
float8_e4m3fn = DType("float8_e4m3fn", "f8e4m3fn", "f", 8, np.dtype(ml_dtypes.float8_e4m3fn),
                      np.dtype(np.float32), _DL_F8E4M3FN, arithmetic=False)
float8_e5m2 = DType("float8_e5m2", "f8e5m2", "f", 8, np.dtype(ml_dtypes.float8_e5m2),
                    np.dtype(np.float32), _DL_F8E5M2, arithmetic=False)
tfloat32 = DType("tfloat32", "tf32", "f", 19, np.dtype(np.float32), np.dtype(np.float32),
                 _DL_NONE, arithmetic=False, tile_only=True)

_ROUNDERS = {
    "bfloat16": _round_to_bf16,
    "tfloat32": _round_to_tf32,
    "float8_e4m3fn": _f8_rounder(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": _f8_rounder(ml_dtypes.float8_e5m2),
}

b1, i8, i16, i32, i64 = bool_, int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
f16, bf16, f32, f64 = float16, bfloat16, float32, float64
f8e4m3fn, f8e5m2, tf32 = float8_e4m3fn, float8_e5m2, tfloat32

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2, tfloat32,
)

_BY_NAME: dict[str, DType] = {}
for _dt in ALL_DTYPES:
    _BY_NAME[_dt.name] = _dt
    _BY_NAME[_dt.short] = _dt
_BY_NAME["bool_"] = bool_

_FROM_NUMPY: dict[np.dtype, DType] = {
    dt.storage: dt for dt in ALL_DTYPES if not dt.tile_only
}


def from_numpy(np_dtype: Any) -> DType:
    """The tilesafe dtype of a numpy dtype (``ml_dtypes.bfloat16`` -> ``bfloat16``,
    ``ml_dtypes.float8_e4m3fn``/``float8_e5m2`` -> the 8-bit floats; ``uint16`` maps to
    ``uint16``; no numpy dtype maps to tf32)."""
    key = np.dtype(np_dtype)
    try:
        return _FROM_NUMPY[key]
    except KeyError:
        raise TypeError(f"numpy dtype {key} has no tilesafe equivalent; supported: "
                        + ", ".join(d.name for d in ALL_DTYPES if not d.tile_only)) from None


def as_strided(array: np.ndarray, shape: Any, strides: Any, writeable: bool = False) -> np.ndarray:
    """``numpy.lib.stride_tricks.as_strided`` that also works on ``ml_dtypes`` arrays (numpy
    cannot rebuild some of their dtypes from the array interface): the view is made on the
    unsigned integer of the same width and viewed back."""
    if array.dtype.type.__module__ == "numpy":
        return np.lib.stride_tricks.as_strided(array, shape=shape, strides=strides,
                                               writeable=writeable)
    raw = array.view(np.dtype(f"u{array.itemsize}"))
    return np.lib.stride_tricks.as_strided(raw, shape=shape, strides=strides,
                                           writeable=writeable).view(array.dtype)


def memory_dtype(value: Any, what: str) -> DType:
    """:func:`as_dtype`, refusing the tile-only tf32 for ``what`` (a tensor, a scalar, a
    pointer: something that lives in memory) with a TypeError that says how to get tf32."""
    dtype = as_dtype(value)
    if dtype.tile_only:
        raise TypeError(f"{what} cannot hold {dtype.short}: tf32 is a tile element type only "
                        "(it has no memory layout); use float32 data and convert the loaded "
                        "tile with x.astype(tc.tf32) to feed mma")
    return dtype


def as_dtype(value: Any) -> DType:
    """Normalize a dtype given as a :class:`DType`, a name (``"f32"``, ``"float32"``), a numpy
    dtype, or the Python types ``bool``/``int``/``float`` (bool, int32, float32)."""
    if isinstance(value, DType):
        return value
    if value is bool:
        return bool_
    if value is int:
        return int32
    if value is float:
        return float32
    if isinstance(value, str):
        try:
            return _BY_NAME[value]
        except KeyError:
            raise TypeError(f"unknown dtype name {value!r}; known: "
                            + ", ".join(sorted(_BY_NAME))) from None
    return from_numpy(value)
