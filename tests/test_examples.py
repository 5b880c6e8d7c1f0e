"""Every script under examples/ runs and checks its own result, and every kernel of the
examples and of the README compiles for sm_90 through `tilesafe check`."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

from tilesafe.cli import main

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()


def test_examples_exist():
    assert {p.stem for p in EXAMPLES} >= {"vector_add", "gemm", "softmax", "persistent_gemm",
                                          "histogram", "moe_dispatch"}


def test_moe_dispatch_runs_as_a_script_and_says_ok():
    """`python examples/moe_dispatch.py` checks itself against numpy and says so (its
    functions are tested step by step in tests/test_moe_dispatch.py)."""
    path = EXAMPLES[0].parent / "moe_dispatch.py"
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: routing, counts, destinations, sorted buffer and combine match numpy" in \
        done.stdout


README = pathlib.Path(__file__).parent.parent / "README.md"


def _readme_kernel_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    return [b for b in blocks if "ts.kernel" in b]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_kernels_compile_for_sm_90(path, capsys):
    """`tilesafe check --target sm_90` compiles every kernel of every example to a cubin."""
    assert main(["check", str(path), "--target", "sm_90"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "cubin" in out and "error" not in out.lower()


def test_readme_kernels_compile_for_sm_90(tmp_path, capsys, monkeypatch):
    """The README's kernels pass `tilesafe check --target sm_90` (their blocks run on the
    interpreter while the file is imported)."""
    monkeypatch.setenv("TILESAFE_DEVICE", "cpu")
    blocks = _readme_kernel_blocks()
    assert blocks, "the README shows no kernel"
    for i, block in enumerate(blocks):
        path = tmp_path / f"readme_{i}.py"
        path.write_text(block)
        assert main(["check", str(path), "--target", "sm_90"]) == 0, capsys.readouterr().out
        assert "cubin" in capsys.readouterr().out
