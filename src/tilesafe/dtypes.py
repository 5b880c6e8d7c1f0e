"""Element types: the one table of dtypes shared by the host API, the device language and the backends.

A :class:`DType` knows its numpy *storage* type (what a host buffer holds), its numpy *compute*
type (what the interpreter computes in), how to round a computed array to the type's precision,
and its DLPack code. ``bfloat16`` has no numpy type: it is stored as ``uint16`` bit patterns and
computed as ``float32`` values rounded to bf16 (round-to-nearest-even) after every operation, which
gives the correctly rounded bf16 result for ``+ - * / sqrt`` because float32 carries more than
twice bf16's precision.

This module must not import anything else from tilesafe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math
import struct
from typing import Any

import numpy as np

__all__ = [
    "DType", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "ALL_DTYPES", "as_dtype", "from_numpy",
    "b1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
]

# DLPack type codes (dlpack.h: kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool).
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6


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
        if self is bfloat16:
            return _round_to_bf16(np.asarray(values))
        arr = np.asarray(values)
        if arr.dtype == self.compute:
            return arr
        if self.is_int and arr.dtype.kind in "iub":
            # Wrap modulo 2**bits like the GPU's integer truncation.
            return arr.astype(self.compute, casting="unsafe")
        return arr.astype(self.compute)

    def to_compute(self, stored: np.ndarray) -> np.ndarray:
        """View host storage (numpy storage dtype) as compute values."""
        if self is bfloat16:
            return (np.asarray(stored, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        return stored

    def to_storage(self, values: np.ndarray) -> np.ndarray:
        """Convert compute values (already rounded) to host storage."""
        if self is bfloat16:
            bits = np.ascontiguousarray(_round_to_bf16(values), dtype=np.float32).view(np.uint32)
            return (bits >> 16).astype(np.uint16)
        return np.asarray(values, dtype=self.storage)

    def fits(self, value: Any) -> bool:
        """Whether a Python scalar can be represented in this dtype without changing kind."""
        if isinstance(value, bool):
            return True
        if isinstance(value, int):
            if self.is_bool:
                return value in (0, 1)
            if self.is_float:
                return True
            info = np.iinfo(self.compute)
            return int(info.min) <= value <= int(info.max)
        if isinstance(value, float):
            return self.is_float
        return False

    def __repr__(self) -> str:
        return f"tilesafe.{self.name}"

    def __str__(self) -> str:
        return self.short

    def __reduce__(self):  # pickles as a reference to the singleton
        return (as_dtype, (self.name,))


def _round_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round to bfloat16 precision (nearest even), returned as float32 values.

    float64 inputs are first narrowed to float32 with round-to-odd so that the result is the
    correctly rounded bf16 of the original value (no double-rounding error).
    """
    arr = np.asarray(values)
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 8:
        # 64-bit integers do not fit float64 exactly: round each to odd from the exact value.
        arr = np.vectorize(int_to_float64_odd, otypes=[np.float64])(arr.astype(object))
    if arr.dtype == np.float64 or arr.dtype.kind in "iu" and arr.dtype.itemsize >= 4:
        wide = arr.astype(np.float64)
        narrow = wide.astype(np.float32)
        with np.errstate(invalid="ignore"):
            inexact = np.isfinite(narrow) & (narrow.astype(np.float64) != wide)
        if np.any(inexact):
            bits = narrow.view(np.uint32).copy()
            too_big = np.abs(narrow.astype(np.float64)) > np.abs(wide)
            bits = np.where(inexact & too_big, bits - 1, bits)
            bits = np.where(inexact, bits | 1, bits)
            narrow = bits.astype(np.uint32).view(np.float32)
        f32 = narrow
    else:
        f32 = arr.astype(np.float32)
    f32 = np.ascontiguousarray(f32)
    bits = f32.view(np.uint32)
    bias = np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    rounded = ((bits + bias) >> 16) << 16
    rounded = np.where(np.isnan(f32), np.uint32(0x7FC00000), rounded).astype(np.uint32)
    return rounded.view(np.float32).reshape(np.shape(values))


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
bfloat16 = _make("bfloat16", "bf16", "f", 16, "uint16", "float32", _DL_BFLOAT)
float32 = _make("float32", "f32", "f", 32, "float32", "float32", _DL_FLOAT)
float64 = _make("float64", "f64", "f", 64, "float64", "float64", _DL_FLOAT)

b1, i8, i16, i32, i64 = bool_, int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
f16, bf16, f32, f64 = float16, bfloat16, float32, float64

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64,
)

_BY_NAME: dict[str, DType] = {}
for _dt in ALL_DTYPES:
    _BY_NAME[_dt.name] = _dt
    _BY_NAME[_dt.short] = _dt
_BY_NAME["bool_"] = bool_

_FROM_NUMPY: dict[np.dtype, DType] = {
    dt.storage: dt for dt in ALL_DTYPES if dt is not bfloat16
}


def from_numpy(np_dtype: Any) -> DType:
    """The tilesafe dtype of a numpy dtype (``uint16`` maps to ``uint16``, never ``bfloat16``)."""
    key = np.dtype(np_dtype)
    try:
        return _FROM_NUMPY[key]
    except KeyError:
        if key.name == "bfloat16":  # ml_dtypes' bfloat16, if the user has it
            return bfloat16
        raise TypeError(f"numpy dtype {key} has no tilesafe equivalent; supported: "
                        + ", ".join(d.name for d in ALL_DTYPES)) from None


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
