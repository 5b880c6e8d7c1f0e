"""The lowering's side of kernel hints and of static extents bound at launch.

* ``tensor_dim_factor`` becomes an ``assume div_by`` on every dynamic dim it covers (joined
  with the launch facts: the larger power of two), on no static dim;
* per-architecture hints reach the bytecode, and tileiras compiles a target with its own
  architecture's entry, else ``default`` (the cubins show it);
* an input's extent names (``tc.Tensor[tc.f16, ("M", "K")]``) are static in its tensor view.

Tool-dependent tests skip when tileiras / tileirdisasm are not installed."""

from __future__ import annotations

import re
import subprocess

import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.backends.tileir import tileiras as driver
from tilesafe.backends.tileir.lower import lower_kernel
from tilesafe.errors import CompileError


@pytest.fixture(scope="module")
def tool():
    try:
        return driver.find_tileiras()
    except driver.TileirasNotFound:
        pytest.skip("tileiras is not installed")


@pytest.fixture(scope="module")
def disasm_tool(tool):
    found = driver.find_tileirdisasm()
    if found is None:
        pytest.skip("tileirdisasm is not installed")
    return found


def disasm(tool_path, code: bytes, tmp_path, name="k") -> str:
    path = tmp_path / f"{name}.tileirbc"
    path.write_bytes(code)
    done = subprocess.run([tool_path, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assumed(text: str) -> dict[str, int]:
    """``{entry argument: divisor}`` of the ``div_by`` assumptions on the entry's dims (each
    dim gets ``bounded<0, ?>`` first, then ``div_by``)."""
    names = dict(re.findall(r"(%\w+) = assume bounded<0, \?>, (%arg\d+)", text))
    return {names[src]: int(d) for d, src in re.findall(r"assume div_by<(\d+)>, (%\w+)", text)
            if src in names}


def zeros(shape, dtype=ts.float32):
    return ts.zeros(shape, dtype).sync()


@ts.kernel(hints={"tensor_dim_factor": 16, "sm_90": {"occupancy": 2}})
def aligned(z: tc.MutTensor[tc.f32, ("BM", "D")], x: tc.Tensor[tc.f32, (-1, "D")],
            y: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.zeros((BM, D), tc.f32) + tc.load_tile_like(x, z)  # noqa: F821
            + tc.load_tile_like(y, z))


@ts.kernel(hints={"tensor_dim_factor": {"y": 32}})
def aligned_y(z: tc.MutTensor[tc.f32, ("BM", "D")], x: tc.Tensor[tc.f32, (-1, "D")],
              y: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def _ir(kernel):
    return kernel.ir(zeros((32, 64)).partition((16, 64)), zeros((32, 64)), zeros((32, 64)))


# ABI (module docstring of lower.kernel): z = arg0 ptr, arg1-2 dims, arg3-4 strides;
# x = arg5, arg6-7 dims ...; y = arg10, arg11-12 dims ...


def test_the_factor_is_assumed_on_every_dynamic_dim_it_covers(disasm_tool, tmp_path):
    text = disasm(disasm_tool, lower_kernel(_ir(aligned), hints=aligned.hints), tmp_path)
    # z's whole tensor (both dims), x's -1 dim, y's two dims; x's extent D is static (64)
    assert assumed(text) == {"%arg1": 16, "%arg2": 16, "%arg6": 16, "%arg11": 16,
                             "%arg12": 16}, text
    assert "%arg7" not in assumed(text) and re.search(r"shape = \[%\w+, 64\]", text)
    assert "optimization_hints=<sm_90 = {occupancy = 2}>" in text
    assert "tensor_dim_factor" not in text  # a promise, not an entry hint


def test_a_per_parameter_factor_covers_that_parameter_only(disasm_tool, tmp_path):
    text = disasm(disasm_tool, lower_kernel(_ir(aligned_y), hints=aligned_y.hints), tmp_path)
    assert assumed(text) == {"%arg11": 32, "%arg12": 32}, text
    assert "optimization_hints" not in text


def test_the_factor_joins_the_launch_facts(disasm_tool, tmp_path):
    facts = {"y": {"dims_div": (64, None)}, "x": {"dims_div": (8, 16)}}
    text = disasm(disasm_tool, lower_kernel(_ir(aligned), hints=aligned.hints, facts=facts),
                  tmp_path)
    assert assumed(text) == {"%arg1": 16, "%arg2": 16, "%arg6": 16, "%arg11": 64,
                             "%arg12": 16}, text
    plain = disasm(disasm_tool, lower_kernel(_ir(aligned), facts=facts), tmp_path, "plain")
    assert assumed(plain) == {"%arg6": 8, "%arg11": 64}, plain  # without the hint


def test_bad_factors_reaching_the_lowering_are_compile_errors():
    ir = _ir(aligned)
    with pytest.raises(CompileError, match="names 'w', which is not a tensor parameter") as info:
        lower_kernel(ir, hints={"tensor_dim_factor": {"w": 16}})
    assert info.value.kernel == "aligned" and info.value.location == ir.location
    with pytest.raises(CompileError, match="positive power of two"):
        lower_kernel(ir, hints={"tensor_dim_factor": 24})


def test_hinted_kernels_assemble_for_sm_90(tool):
    for kernel in (aligned, aligned_y):
        ir = _ir(kernel)
        cubin = driver.assemble(lower_kernel(ir, hints=kernel.hints), "sm_90", kernel=ir,
                                tool=tool)
        assert cubin[:4] == b"\x7fELF"
        assert kernel.compile(zeros((32, 64)).partition((16, 64)), zeros((32, 64)),
                              zeros((32, 64)), target="sm_90")[:4] == b"\x7fELF"


@ts.kernel
def plain(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


def test_tileiras_uses_the_targets_architecture_else_default(tool):
    """The lowering writes every architecture's entry; compiling for sm_90 uses ``sm_90``'s,
    else ``default``'s, and never another architecture's (the cubins are equal exactly when
    the hints that apply to sm_90 are)."""
    ir = plain.ir(zeros(64).partition(16), zeros(64))

    def cubin(hints):
        return driver.assemble(lower_kernel(ir, hints=hints), "sm_90", kernel=ir, tool=tool)

    none = cubin(None)
    four = cubin({"sm_90": {"num_cta_in_cga": 4}})
    two = cubin({"sm_90": {"num_cta_in_cga": 2}})
    assert four != none and two != four
    assert cubin({"sm_100": {"num_cta_in_cga": 4}, "sm_120": {"num_cta_in_cga": 2}}) == none
    assert cubin({"default": {"num_cta_in_cga": 4}}) == four
    assert cubin({"sm_90": {"num_cta_in_cga": 2}, "default": {"num_cta_in_cga": 4},
                  "sm_100": {"num_cta_in_cga": 8}}) == two


@ts.kernel
def static_input(z: tc.MutTensor[tc.f32, (1, "K")], x: tc.Tensor[tc.f16, ("M", "K")]):
    m, k = x.shape
    z.store(tc.load_tile_like(x, z).astype(tc.f32) * (m + k))


def test_input_extent_names_are_static_in_the_tensor_view(disasm_tool, tool, tmp_path):
    ir = static_input.ir(zeros((4, 32)).partition((1, 32)), zeros((4, 32), ts.float16))
    text = disasm(disasm_tool, lower_kernel(ir), tmp_path)
    assert "tensor_view<4x32xf16" in text, text
    assert "tensor_view<?x?xf32" in text  # the output's whole tensor stays dynamic
    assert driver.assemble(lower_kernel(ir), "sm_90", kernel=ir, tool=tool)[:4] == b"\x7fELF"


@pytest.mark.parametrize("hints, says", [
    ({"programmatic_launch": 0}, "'programmatic_launch' must be True or False, got 0"),
    ({"sm_90": {"programmatic_launch": False}},
     "'programmatic_launch' is not a per-architecture hint (found under 'sm_90')"),
])
def test_programmatic_launch_hint_is_checked(hints, says):
    with pytest.raises(ts.SignatureError) as info:
        ts.kernel(aligned.fn, hints=hints)
    assert says in str(info.value)
    assert "test_kernel_hints.py" in str(info.value)
