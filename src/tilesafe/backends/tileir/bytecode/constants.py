"""Bit patterns of numeric values: dense constant-pool buffers and scalar attribute payloads.

Integers are stored masked to their width (two's complement); floats as IEEE bit patterns.
``bf16`` and ``tf32`` values are rounded to nearest-even from float32 (tf32 takes 3 bytes in a
dense buffer: its 19 bits are the top of the f32 pattern, shifted down by 13). ``f8E4M3FN`` and
``f8E5M2`` values are one byte each, rounded to nearest-even; a finite value beyond the format's
largest (or an infinity in f8E4M3FN, which has none) is rejected rather than saturated: callers
round to the format first. ``f8E8M0FNU``, 4-bit floats and ``i4`` are rejected.

Part of the standalone ``bytecode`` package: it imports only its sibling modules, numpy and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .types import BF16, F8E4M3FN, F8E5M2, F16, F32, F64, I1, TF32, ScalarType, TileType

__all__ = ["scalar_bits", "dense_buffer"]

_TRUE_SPLAT = b"\xff"
_FALSE_SPLAT = b"\x00"


def _f8_magnitudes(exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """The value of every 8-bit pattern with the sign bit clear (index = pattern), as float64
    (the top patterns decode as if finite; the caller bounds them)."""
    bias = (1 << (exponent_bits - 1)) - 1
    codes = np.arange(1 << (exponent_bits + mantissa_bits))
    exponent, mantissa = codes >> mantissa_bits, codes & ((1 << mantissa_bits) - 1)
    scale = 2.0 ** (np.maximum(exponent, 1) - bias - mantissa_bits)
    return (np.where(exponent > 0, mantissa + (1 << mantissa_bits), mantissa) * scale)


# (magnitudes, largest finite pattern, NaN pattern, inf pattern or None) per 8-bit format
_F8 = {
    F8E4M3FN: (_f8_magnitudes(4, 3), 0x7E, 0x7F, None),
    F8E5M2: (_f8_magnitudes(5, 2), 0x7B, 0x7E, 0x7C),
}


def _f8_bits(values: np.ndarray, element: ScalarType) -> np.ndarray:
    """Bit patterns of ``values`` in an 8-bit float format (round to nearest even)."""
    magnitudes, largest, nan, inf = _F8[element]
    finite = magnitudes[:largest + 1]
    flat = values.astype(np.float64).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint64)
    for i, v in enumerate(flat):
        if np.isnan(v):
            out[i] = nan
            continue
        a = abs(v)
        if np.isinf(a):
            if inf is None:
                raise ValueError(f"{element} has no infinity")
            code = inf
        elif a > finite[-1]:
            raise ValueError(f"{v} is out of the range of {element} (largest {finite[-1]})")
        else:
            hi = int(np.searchsorted(finite, a))
            code = hi
            if finite[hi] != a:
                lo = hi - 1
                below, above = a - finite[lo], finite[hi] - a
                code = lo if below < above or below == above and lo % 2 == 0 else hi
        out[i] = code | (0x80 if np.signbit(v) else 0)
    return out.reshape(values.shape)


def _float_bits(values: np.ndarray, element: ScalarType) -> np.ndarray:
    """IEEE bit patterns (as uint64) of float ``values`` in the ``element`` format."""
    if element == F64:
        return values.astype(np.float64).view(np.uint64).copy()
    if element == F16:
        return values.astype(np.float16).view(np.uint16).astype(np.uint64)
    if element in (F32, BF16, TF32):
        bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
        if element == F32:
            return bits
        dropped = 16 if element == BF16 else 13
        nan = np.isnan(values.astype(np.float32))
        halfway = (1 << (dropped - 1)) - 1
        rounded = (bits + halfway + ((bits >> dropped) & 1)) >> dropped
        quiet_nan = (bits >> dropped) | (1 << (22 - dropped))
        return np.where(nan, quiet_nan, rounded)
    if element in _F8:
        return _f8_bits(values, element)
    raise ValueError(f"constants of type {element} are not supported")


def _integer_bits(values: np.ndarray, element: ScalarType) -> np.ndarray:
    """Two's-complement bit patterns (as uint64) of integer ``values`` masked to ``element``."""
    if element.bits < 8 and element != I1:
        raise ValueError(f"constants of type {element} are not supported")
    if values.dtype.kind == "f":
        if not np.all(np.mod(values, 1) == 0):
            raise ValueError(f"{element} constant needs integer values")
        values = values.astype(np.int64)
    if values.size:
        low, high = int(values.min()), int(values.max())
        lowest = 0 if element == I1 else -(1 << (element.bits - 1))
        if low < lowest or high >= (1 << element.bits):
            raise ValueError(f"constant values [{low}, {high}] do not fit in {element}")
    if values.dtype.kind == "u":
        as_unsigned = values.astype(np.uint64)
    else:
        as_unsigned = values.astype(np.int64).view(np.uint64)
    return as_unsigned & np.uint64((1 << element.bits) - 1)


def _bit_patterns(value: Any, element: ScalarType) -> np.ndarray:
    values = np.asarray(value)
    if element.is_float:
        if values.dtype.kind not in "biuf":
            raise ValueError(f"{element} constant needs numeric values, got {values.dtype}")
        return _float_bits(values.astype(np.float64), element)
    if values.dtype.kind not in "biuf":
        raise ValueError(f"{element} constant needs integer values, got {values.dtype}")
    return _integer_bits(values, element)


def scalar_bits(value: Any, element: ScalarType) -> int:
    """The bit pattern of one scalar ``value`` in ``element`` (unsigned, ``element.bits`` wide)."""
    bits = _bit_patterns(value, element)
    if bits.shape != ():
        raise ValueError(f"expected one scalar value, got shape {bits.shape}")
    return int(bits)


def _pack_elements(bits: np.ndarray, element: ScalarType) -> bytes:
    width = element.storage_bytes
    if width == 3:
        return bits.astype("<u4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    return bits.astype(f"<u{width}").tobytes()


def dense_buffer(value: Any, tile: TileType) -> bytes:
    """The raw constant-pool buffer of a constant ``tile`` holding ``value``.

    ``value`` is a scalar (a splat) or an array-like of exactly ``tile.shape``. A tile whose
    elements are all equal is written as a splat (one element); ``i1`` splats are ``0xFF`` or
    ``0x00`` and non-splat ``i1`` tiles are bit-packed, least significant bit first.
    """
    if not isinstance(tile.element, ScalarType):
        raise ValueError(f"constants of pointer tiles are not supported ({tile})")
    element = tile.element
    bits = _bit_patterns(value, element)
    if bits.shape not in ((), tile.shape):
        raise ValueError(f"constant of shape {bits.shape} does not match {tile}")
    flat = bits.reshape(-1)
    if flat.size == 0:
        raise ValueError(f"constant for {tile} has no elements")
    if np.all(flat == flat[0]):
        if element == I1:
            return _TRUE_SPLAT if flat[0] else _FALSE_SPLAT
        return _pack_elements(flat[:1], element)
    if element == I1:
        return np.packbits(flat.astype(np.uint8), bitorder="little").tobytes()
    return _pack_elements(flat, element)
