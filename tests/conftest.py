"""Shared test helpers: a seeded RNG and poisoned outputs (NaN or a sentinel), so an element a
kernel fails to write is caught."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def poisoned(shape, dtype=ts.float32):
    """A tensor filled with a value no kernel in the tests produces (NaN, or -123 for ints)."""
    dtype = ts.dtypes.as_dtype(dtype)
    value = float("nan") if dtype.is_float else (True if dtype.is_bool else -123
                                                 if dtype.is_signed else 123)
    return ts.full(shape, value, dtype).sync()


def pytest_collection_modifyitems(config, items):
    """tests/gpu runs only where a CUDA device and tileiras are usable."""
    from tilesafe.runtime.device import probe_gpu
    probe = probe_gpu()
    if probe.available and "compile with" in probe.reason:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {probe.reason}")
    for item in items:
        if "/tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
