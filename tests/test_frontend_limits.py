"""The front end's limits are compile errors, never a raw Python exception: an expression nested
deeper than the front end's recursion can follow names the kernel's line and says to split it
into smaller statements."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

import tilesafe as ts
from tilesafe.errors import CompileError


def _module(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def _deep_sum(terms: int) -> str:
    return " + ".join(["t"] * terms)


@pytest.mark.parametrize("where", ["kernel", "device function"])
def test_a_deeply_nested_expression_is_a_compile_error(tmp_path, where):
    body = f"z.store({_deep_sum(600)})"
    path, module = _module(tmp_path, "deep_" + where.replace(" ", "_"), f'''
        import tilesafe as ts
        import tilesafe.core as tc

        @ts.function
        def helper(t):
            return {_deep_sum(600) if where == "device function" else "t"}

        @ts.kernel
        def deep(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
            t = helper(tc.load_tile_like(x, z))
            {body if where == "kernel" else "z.store(t)"}
    ''')
    z = ts.zeros(16).sync().partition(8)
    with pytest.raises(CompileError) as info:
        module.deep.ir(z, ts.arange(16, dtype=ts.float32).sync())
    err = info.value
    assert type(err) is CompileError and err.kernel == "deep"
    assert str(err.location.file) == str(path)
    deep_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1)
                     if _deep_sum(600) in line)
    assert err.location.line == deep_line, err.location
    assert "nested too deeply" in err.message
    assert "split" in err.hint and "smaller statements" in err.hint
    assert f"{path}:{err.location.line}" in str(err)


def test_long_kernels_of_moderately_deep_expressions_still_compile(tmp_path):
    """Many statements, the last a sum of 128 terms, compile and run: only an expression
    deeper than the front end's recursion can follow is refused, and the depth is counted per
    expression, not per kernel."""
    body = "".join(f"    t = ({_deep_sum(n)}) * {1 / n}\n" for n in [16] * 40 + [128])
    _, module = _module(tmp_path, "long_kernel", textwrap.dedent('''
        import tilesafe as ts
        import tilesafe.core as tc

        @ts.kernel
        def long(z: tc.MutTensor[tc.f32, "S"]):
            t = z.load() + 1.0
    ''') + body + "    z.store(t)\n")
    z = ts.zeros(16).sync().partition(8)
    out, = module.long(z).sync()
    assert out.unpartition().numpy().tolist() == [1.0] * 16
