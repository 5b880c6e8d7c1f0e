"""Float modes an op may ask for: ``exp2(x, flush_to_zero=True)``, ``exp(x, approx=True)``,
``truediv(x, y, rounding=..., flush_to_zero=...)``, ``maximum``/``minimum(...,
propagate_nan=False)``. Each is opt-in: the defaults (and the operators) keep IEEE semantics.
On the interpreter a flushed op treats f32 subnormal inputs and results as zero, a NaN-ignoring
extremum is numpy's ``fmax``/``fmin``, and the fast division and exponential compute the exact
values (a GPU's differ in the last bits: tests/gpu checks them). The lowering writes each mode
into the bytecode, and misuse is a compile error naming the line."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import DTypeError

TINY = np.finfo(np.float32).tiny


@ts.kernel
def modes(z: tc.MutTensor[tc.f32, (4, "S")], x: tc.Tensor[tc.f32, (-1,)],
          y: tc.Tensor[tc.f32, (-1,)]):
    a = x.partition((S,)).load((0,))  # noqa: F821
    b = y.partition((S,)).load((0,))  # noqa: F821
    z.store(tc.cat([tc.exp2(a, flush_to_zero=True).reshape((1, S)),  # noqa: F821
                    tc.truediv(a, b, rounding="approx", flush_to_zero=True).reshape((1, S)),  # noqa: F821,E501
                    tc.maximum(a, b, propagate_nan=False).reshape((1, S)),  # noqa: F821
                    tc.minimum(a, b, propagate_nan=False).reshape((1, S))], 0))  # noqa: F821


@ts.kernel
def defaults(z: tc.MutTensor[tc.f32, (4, "S")], x: tc.Tensor[tc.f32, (-1,)],
             y: tc.Tensor[tc.f32, (-1,)]):
    a = x.partition((S,)).load((0,))  # noqa: F821
    b = y.partition((S,)).load((0,))  # noqa: F821
    z.store(tc.cat([tc.exp2(a).reshape((1, S)), (a / b).reshape((1, S)),  # noqa: F821
                    tc.maximum(a, b).reshape((1, S)),  # noqa: F821
                    tc.exp(a, approx=False).reshape((1, S))], 0))  # noqa: F821


X = np.array([-130, -1, 0, 2, np.nan, 1e-39, 3, -1e-39], np.float32)
Y = np.array([1, 2, 3, np.nan, 1, 1, 1e-39, 4], np.float32)


def _run(kernel):
    z = ts.full((4, 8), 7.0).sync()
    out, *_ = kernel(z.partition((4, 8)), ts.tensor(X).sync(), ts.tensor(Y).sync()).sync()
    return out.unpartition().numpy()


def _flush(v):
    v = np.asarray(v, np.float64)
    return np.where(np.abs(v) < TINY, np.copysign(0.0, v), v)


@pytest.mark.interpreter_only("the interpreter's exact values of the fast forms")
def test_the_modes_compute_what_they_say():
    got = _run(modes)
    fx, fy = _flush(X), _flush(Y)
    with np.errstate(all="ignore"):
        want = np.stack([_flush(np.exp2(fx)), _flush(fx / fy), np.fmax(X, Y), np.fmin(X, Y)])
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert got[0, 0] == 0.0 and got[1, 6] == np.inf and got[1, 5] == 0.0  # flushed
    assert got[2, 4] == 1.0 and got[3, 3] == 2.0  # NaN ignored


def test_the_defaults_keep_ieee_semantics():
    got = _run(defaults)
    with np.errstate(all="ignore"):
        assert got[0, 0] == np.float32(np.exp2(np.float64(-130)))  # a subnormal, kept
        assert got[0, 0] > 0
        assert got[1, 6] == np.float32(3 / np.float64(1e-39).astype(np.float32))  # not flushed
    assert np.isnan(got[2, 4]) and np.isnan(got[2, 3])  # NaN propagates


@pytest.mark.parametrize("body, says", [
    ("tc.exp2(a, flush_to_zero=1)", "exp2: flush_to_zero must be True or False, got 1"),
    ("tc.truediv(a, a, rounding='fast')",
     "truediv: rounding must be one of 'nearest_even', 'full', 'approx', got 'fast'"),
    ("tc.maximum(a, a, propagate_nan=None)",
     "maximum: propagate_nan must be True or False, got None"),
    ("tc.exp(a, approx='yes')", "exp: approx must be True or False, got 'yes'"),
])
def test_misuse_is_a_compile_error_at_the_line(tmp_path, body, says):
    path = tmp_path / "bad_modes.py"
    path.write_text(
        "import tilesafe as ts\nimport tilesafe.core as tc\n\n"
        "@ts.kernel\n"
        "def bad(z: tc.MutTensor[tc.f32, 'S'], x: tc.Tensor[tc.f32, (-1,)]):\n"
        "    a = tc.load_tile_like(x, z)\n"
        f"    z.store({body})\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(DTypeError) as info:
        namespace["bad"].ir(ts.zeros(8).sync().partition(8), ts.zeros(8).sync())
    assert says in str(info.value)
    assert "bad_modes.py:7" in str(info.value)


@ts.kernel
def flushed_f64(z: tc.MutTensor[tc.f64, "S"], x: tc.Tensor[tc.f64, (-1,)]):
    z.store(tc.exp2(tc.load_tile_like(x, z), flush_to_zero=True))


def test_flush_to_zero_refuses_f64():
    with pytest.raises(DTypeError, match="flush_to_zero applies to f32"):
        flushed_f64.ir(ts.zeros(8, ts.float64).sync().partition(8), ts.zeros(8, ts.float64).sync())


def test_the_lowering_writes_each_mode():
    pytest.importorskip("tilesafe.backends.tileir.lower")
    import subprocess
    from tilesafe.backends.tileir import tileiras
    from tilesafe.backends.tileir.lower import lower_kernel
    tool = tileiras.find_tileirdisasm()
    if tool is None:
        pytest.skip("tileirdisasm is not installed")
    ir = modes.ir(ts.zeros((4, 8)).sync().partition((4, 8)), ts.tensor(X).sync(),
                  ts.tensor(Y).sync())
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".tileirbc") as f:
        f.write(lower_kernel(ir))
        f.flush()
        text = subprocess.run([tool, f.name], capture_output=True, text=True).stdout
    lines = text.splitlines()

    def line_of(mnemonic):
        return next(line for line in lines if f"= {mnemonic} " in line)
    assert "flush_to_zero" in line_of("exp2"), text
    assert "rounding<approx> flush_to_zero" in line_of("divf"), text
    assert "propagate_nan" not in line_of("maxf") + line_of("minf"), text


# -- fast accumulation of f8 products ----------------------------------------------------------

@ts.kernel
def f8_product(z: tc.MutTensor[tc.f32, (16, 16)], a: tc.Tensor[tc.f8e4m3fn, (16, 64)],
               b: tc.Tensor[tc.f8e4m3fn, (64, 16)], FAST: tc.Const[bool]):
    """Two K tiles accumulated, with or without the GPU's fast accumulation."""
    pa, pb = a.partition((16, 32)), b.partition((32, 16))
    acc = tc.zeros((16, 16), tc.f32)
    for k in range(2):
        acc = tc.mma(pa.load((0, k)), pb.load((k, 0)), acc, fast_accumulation=FAST)
    z.store(acc)


def _f8_operands():
    rng = np.random.default_rng(11)
    return (ts.tensor(rng.standard_normal((16, 64)).astype(np.float32), ts.float8_e4m3fn).sync(),
            ts.tensor(rng.standard_normal((64, 16)).astype(np.float32), ts.float8_e4m3fn).sync())


def test_fast_accumulation_is_the_same_exact_sum_on_the_interpreter():
    a, b = _f8_operands()
    want = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
    for fast in (False, True):
        z = ts.zeros((16, 16)).sync()
        f8_product(ts.borrow_mut(z).partition((16, 16)), a, b, FAST=fast).sync()
        assert np.array_equal(z.numpy(), want.astype(np.float32)), fast


def test_the_lowering_writes_fast_accumulation_only_where_asked():
    import subprocess
    import tempfile
    from tilesafe.backends.tileir import tileiras
    from tilesafe.backends.tileir.lower import lower_kernel
    tool = tileiras.find_tileirdisasm()
    if tool is None:
        pytest.skip("tileirdisasm is not installed")
    a, b = _f8_operands()
    for fast in (False, True):
        ir = f8_product.ir(ts.zeros((16, 16)).sync().partition((16, 16)), a, b, FAST=fast)
        with tempfile.NamedTemporaryFile(suffix=".tileirbc") as f:
            f.write(lower_kernel(ir))
            f.flush()
            text = subprocess.run([tool, f.name], capture_output=True, text=True).stdout
        (line,) = [line for line in text.splitlines() if "= mmaf " in line]
        assert ("fast_acc" in line) == fast, line


@pytest.mark.parametrize("operands, flag, says", [
    ("tc.f16", "True", "mma: fast_accumulation applies to f8e4m3fn and f8e5m2 operands, not f16"),
    ("tc.f8e5m2", "1", "mma: fast_accumulation must be True or False, got 1"),
])
def test_fast_accumulation_misuse_is_a_compile_error_at_the_line(tmp_path, operands, flag, says):
    path = tmp_path / "bad_mma.py"
    path.write_text(
        "import tilesafe as ts\nimport tilesafe.core as tc\n\n"
        "@ts.kernel\n"
        "def bad(z: tc.MutTensor[tc.f32, (16, 16)]):\n"
        f"    t = tc.zeros((16, 16), {operands})\n"
        f"    z.store(tc.mma(t, t, tc.zeros((16, 16), tc.f32), fast_accumulation={flag}))\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(DTypeError) as info:
        namespace["bad"].ir(ts.zeros((16, 16)).sync().partition((16, 16)))
    assert says in str(info.value) and "bad_mma.py:7" in str(info.value)
