"""Element types: names, numpy mapping, and exact bf16 rounding."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
from tilesafe import dtypes as dt


def _bf16_reference(x: float) -> float:
    """Round a float to the nearest bfloat16 (ties to even) by exhaustive neighbour search."""
    f = np.float32(x)
    if np.isnan(f):
        return float("nan")
    bits = int(np.array(f).view(np.uint32))
    lo = bits & 0xFFFF0000
    candidates = [lo, (lo + 0x10000) & 0xFFFFFFFF]
    vals = [np.array(c, dtype=np.uint32).view(np.float32).item() for c in candidates]
    # Overflow: infinity sits where the next binade would start (2**128), as in IEEE rounding.
    dist = [abs((2.0 ** 128 if abs(v) == float("inf") else abs(v)) - abs(float(x)))
            for v in vals]
    best = min(range(2), key=lambda i: (dist[i], (candidates[i] >> 16) & 1))
    return vals[best]


def test_names_and_aliases():
    assert dt.as_dtype("f32") is ts.float32 and dt.as_dtype("float32") is ts.float32
    assert dt.as_dtype(int) is ts.int32 and dt.as_dtype(float) is ts.float32
    assert dt.as_dtype(np.int8) is ts.int8 and dt.from_numpy(np.uint16) is ts.uint16
    with pytest.raises(TypeError, match="unknown dtype"):
        dt.as_dtype("f33")


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_bf16_round_to_nearest_even(x):
    got = dt.bfloat16.round(np.float32(x)).item()
    assert got == _bf16_reference(x)


def test_bf16_from_float64_avoids_double_rounding():
    # 1 + 2**-8 is a bf16 tie; a float64 value just above it must round up, although rounding
    # it to float32 first would land exactly on the tie and round down to even.
    above_tie = 1.0 + 2.0 ** -8 + 2.0 ** -40
    assert dt.bfloat16.round(np.float64(above_tie)).item() == 1.0 + 2.0 ** -7
    assert dt.bfloat16.round(np.float64(1.0 + 2.0 ** -8)).item() == 1.0


def test_bf16_storage_round_trip():
    values = np.array([1.0, -2.5, 3.140625, 65280.0], dtype=np.float32)
    stored = dt.bfloat16.to_storage(values)
    assert stored.dtype == np.dtype(ml_dtypes.bfloat16)  # a real typed array, not bit patterns
    assert stored.view(np.uint16).tolist() == [0x3F80, 0xC020, 0x4049, 0x477F]
    assert np.array_equal(dt.bfloat16.to_compute(stored), values)
    assert dt.bfloat16.to_compute(stored).dtype == np.float32


def test_integer_round_wraps():
    assert dt.int8.round(np.array([127 + 1, -129], dtype=np.int64)).tolist() == [-128, 127]
    assert dt.uint8.round(np.array([256 + 5], dtype=np.int64)).tolist() == [5]
