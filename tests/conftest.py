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


def pytest_configure(config):
    config.addinivalue_line("markers", "interpreter_only(reason): checks a property only the "
                            "cpu interpreter has (its out-of-bounds diagnostics, correctly "
                            "rounded transcendentals, cpu memory); skipped when the suite runs "
                            "on a GPU (TILESAFE_DEVICE=cuda:0)")


def pytest_collection_modifyitems(config, items):
    """tests/gpu runs only where a CUDA device and tileiras are usable; interpreter_only tests
    run only when the default device is the cpu."""
    from tilesafe.runtime.device import default_device, probe_gpu
    probe = probe_gpu()
    gpu_usable = probe.available and "compile with" in probe.reason
    on_gpu = default_device().kind != "cpu"
    for item in items:
        if not gpu_usable and "/tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.skip(reason=f"no usable GPU: {probe.reason}"))
        marker = item.get_closest_marker("interpreter_only")
        if marker is not None and on_gpu:
            why = marker.args[0] if marker.args else "interpreter semantics"
            item.add_marker(pytest.mark.skip(reason=f"interpreter only: {why}"))
