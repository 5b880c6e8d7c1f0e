"""Every script under examples/ runs and checks its own result."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()


def test_examples_exist():
    assert {p.stem for p in EXAMPLES} >= {"vector_add", "gemm", "softmax", "persistent_gemm"}
