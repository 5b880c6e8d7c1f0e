"""Tests of the Tile IR bytecode encoder.

Primitive encodings and whole files are compared with known byte strings of the Tile IR
bytecode format (including the first 221 bytes of a real cuTile Python vector add). Hand-built kernels,
one per op family, are checked with ``tileirdisasm`` (expected mnemonics and types) and
compiled with ``tileiras --gpu-name sm_90``; those tests skip when the tools are not installed
(``pip install nvidia-cuda-tileiras nvidia-cuda-nvcc nvidia-nvvm``).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from tilesafe.backends.tileir.bytecode._encoding import (
    ByteWriter, SectionId, append_section, encode_offset_table, encode_signed_varint, encode_varint,
)
from tilesafe.backends.tileir.bytecode.attributes import (
    FloatAttr, IntegerAttr, encode_attribute, encode_hints,
)
from tilesafe.backends.tileir.bytecode import (
    BF16, F8E4M3FN, F16, F32, F64, I1, I4, I8, I16, I32, I64, TF32, TOKEN, AtomicMode, Bounded,
    ComparisonPredicate as Cmp, DivBy, FunctionType, IntegerOverflow, MemoryOrdering,
    MemoryScope, ModuleBuilder, PaddingValue, PartitionViewType, PointerType, RoundingMode,
    SameElements, Signedness, SourceLocation, TensorViewType, TileType, Value,
)
from tilesafe.backends.tileir.bytecode.constants import dense_buffer
from tilesafe.backends.tileir.bytecode.types import encode_type

SIGNED = Signedness.SIGNED
PTR_F32 = TileType(PointerType(F32))
PTR_F16 = TileType(PointerType(F16))
PTR_I32 = TileType(PointerType(I32))
SCALAR_I32 = TileType(I32)


# ---------------------------------------------------------------------------------------------
# tools


def _find_tool(name: str) -> Optional[str]:
    """``name`` on PATH, else in the ``nvidia-cuda-tileiras`` wheel (``nvidia/cu13/bin``)."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(root) / "cu13" / "bin" / name
        if candidate.is_file():
            return str(candidate)
    return None


@pytest.fixture(scope="session")
def tileirdisasm() -> str:
    tool = _find_tool("tileirdisasm")
    if tool is None:
        pytest.skip("tileirdisasm is not installed")
    return tool


@pytest.fixture(scope="session")
def tileiras() -> str:
    tool = _find_tool("tileiras")
    if tool is None:
        pytest.skip("tileiras is not installed")
    return tool


def disassemble(tool: str, module: ModuleBuilder, path: Path, *, debug: bool = False) -> str:
    path.write_bytes(module.to_bytes())
    command = [tool, *(["-g"] if debug else []), str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assemble(tool: str, bytecode: Path, *extra: str) -> bytes:
    """Compile with tileiras for sm_90; CUDA_HOME is the toolkit holding tileiras (for ptxas)."""
    cubin = bytecode.with_suffix(".cubin")
    env = dict(os.environ, CUDA_HOME=str(Path(tool).resolve().parent.parent))
    done = subprocess.run([tool, str(bytecode), "-o", str(cubin), "--gpu-name", "sm_90", "-O3",
                           *extra], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return cubin.read_bytes()


def check_kernel(disasm_tool: str, assembler: str, module: ModuleBuilder, path: Path,
                 expected: list[str], *extra: str) -> str:
    """Disassemble (every ``expected`` snippet must appear) and compile to a non-empty cubin."""
    text = disassemble(disasm_tool, module, path)
    missing = [snippet for snippet in expected if snippet not in text]
    assert not missing, f"missing {missing} in:\n{text}"
    cubin = assemble(assembler, path, *extra)
    assert cubin[:4] == b"\x7fELF" and len(cubin) > 1000
    return text


def has_op(text: str, mnemonic: str) -> bool:
    return re.search(rf"(^|[=\s]){re.escape(mnemonic)}(\s|$)", text, re.MULTILINE) is not None


# ---------------------------------------------------------------------------------------------
# primitives (varints, offsets, sections)


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**64 - 1, "ffffffffffffffffff01"),
])
def test_varint(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded


@pytest.mark.parametrize("value, encoded", [(0, "00"), (-1, "01"), (1, "02"), (-2, "03")])
def test_signed_varint(value: int, encoded: str) -> None:
    assert encode_signed_varint(value).hex() == encoded


def test_varint_range() -> None:
    with pytest.raises(ValueError):
        encode_varint(-1)
    with pytest.raises(ValueError):
        encode_signed_varint(2**63)


def test_section_padding_is_relative_to_the_file() -> None:
    out = bytearray(12)
    append_section(out, SectionId.FUNC, b"\x00", alignment=8)
    assert out[12:].hex() == "820108cb00"
    append_section(out, SectionId.STRING, encode_offset_table([], 4), alignment=4)
    assert out[17:].hex() == "81040400cbcbcb"
    with pytest.raises(ValueError):
        append_section(out, SectionId.TYPE, b"", alignment=3)


def test_offset_table_layout() -> None:
    assert encode_offset_table([b"ab", b"c"], 4).hex() == "02cbcbcb" "00000000" "02000000" "616263"
    assert encode_offset_table([b"\x04\x01\x00\x00\x00"], 8).hex() == (
        "01" + "cb" * 7 + "00" * 8 + "0401000000")


def test_empty_module_is_the_smallest_file() -> None:
    expected = "7f54696c654952000d040000" "820108cb00" "81040400cbcbcb" "00"
    assert ModuleBuilder().to_bytes().hex() == expected


def _attribute_bytes(attr) -> str:
    """``attr`` encoded against a fresh module (its type, if any, gets index 0)."""
    writer = ByteWriter()
    encode_attribute(attr, writer, ModuleBuilder())
    return writer.to_bytes().hex()


def test_scalar_attribute_payloads() -> None:
    # Float: type idx, zigzag of the bit pattern (f64 as signed int64); Integer: masked varint.
    assert _attribute_bytes(FloatAttr(-math.inf, F32)) == "0200" "808080f81f"
    assert _attribute_bytes(FloatAttr(-math.inf, F64)) == "0200" "ffffffffffffff0f"
    assert _attribute_bytes(IntegerAttr(-1, I32)) == "0100" "ffffffff0f"
    assert _attribute_bytes(IntegerAttr(1, I1)) == "0100" "01"
    assert _attribute_bytes(DivBy(16)) == "081000"
    assert _attribute_bytes(DivBy(8, every=4, along=0)) == "08080308" "00"
    assert _attribute_bytes(Bounded(lower=0)) == "0c0100"
    assert _attribute_bytes(Bounded(lower=-1, upper=5)) == "0c03010a"
    assert _attribute_bytes(SameElements((1, 4))) == "0902" "0100000000000000" "0400000000000000"


def test_hint_dictionaries() -> None:
    tables = ModuleBuilder()
    default, allow_tma, latency = (
        tables.intern_string(key) for key in ("default", "allow_tma", "latency"))
    i32 = tables.intern_type(I32)
    writer = ByteWriter()
    encode_hints({"default": {"allow_tma": False, "latency": 3}}, writer, tables, tagged=False)
    assert list(writer.to_bytes()) == [1, default, 0x0A, 2, allow_tma, 3, 0, latency, 1, i32, 3]
    writer = ByteWriter()
    encode_hints({"default": {}}, writer, tables, tagged=True)
    assert list(writer.to_bytes()) == [0x0B, 1, default, 0x0A, 0]


def test_dense_buffers() -> None:
    assert dense_buffer(1.0, TileType(F32, (1024,))).hex() == "0000803f"  # splat
    assert dense_buffer([1, 2], TileType(I16, (2,))).hex() == "01000200"
    assert dense_buffer(True, TileType(I1, (8,))).hex() == "ff"
    assert dense_buffer([1, 0, 1, 1], TileType(I1, (4,))).hex() == "0d"  # bit-packed, LSB first
    assert dense_buffer([1.0, -2.0], TileType(BF16, (2,))).hex() == "803f00c0"
    assert dense_buffer(-1, TileType(I64)).hex() == "ff" * 8
    with pytest.raises(ValueError):
        dense_buffer(300, TileType(I8))
    with pytest.raises(ValueError):
        dense_buffer([1.0, 2.0, 3.0], TileType(F32, (2,)))


# ---------------------------------------------------------------------------------------------
# types


_VIEW = TensorViewType(F32, (None,), (1,))


def _type_bytes(type_, version=(13, 4)) -> str:
    """``type_`` encoded in a module where i1, i32, f32 and ``_VIEW`` have
    indices 0, 1, 2 and 3 (as in the sheet's vadd, where f32 is type 2)."""
    module = ModuleBuilder(version)
    for known in (I1, I32, F32, _VIEW):
        module.intern_type(known)
    return encode_type(type_, module.version, module.intern_type).hex()


def test_type_encodings() -> None:
    assert _type_bytes(TileType(F32, (1024,))) == "0d02010004000000000000"
    assert _type_bytes(TileType(PointerType(F32))) == "0d0400"  # ptr<f32> becomes type 4
    assert _type_bytes(_VIEW) == "0e000201" "0000000000000080" "01" "0100000000000000"
    assert _type_bytes(PartitionViewType((1024,), _VIEW)) == "0f00010004000003" "0100000000"
    assert _type_bytes(PointerType(F32)) == "0c0002"
    assert _type_bytes(FunctionType((TileType(I32),), ())) == "10010400"
    assert _type_bytes(TOKEN) == "11"


def test_version_dependent_type_encodings() -> None:
    padded = PartitionViewType((16,), _VIEW, padding=PaddingValue.NEG_INF)
    assert _type_bytes(PointerType(F32), (13, 3)) == "0c02"
    assert _type_bytes(_VIEW, (13, 3)) == "0e0201" "0000000000000080" "01" "0100000000000000"
    assert _type_bytes(padded, (13, 2)) == "0f0110000000" "03" "0100000000" "0104"
    assert _type_bytes(padded, (13, 3)) == "0f01" "0110000000" "03" "0100000000" "04"
    with pytest.raises(ValueError, match="13.3"):
        _type_bytes(TileType(I4, (2,)), (13, 2))


def test_type_rules() -> None:
    with pytest.raises(ValueError):
        TileType(F32, (3,))
    with pytest.raises(ValueError):
        TileType(F32, (1 << 13, 1 << 12))
    with pytest.raises(ValueError):
        PartitionViewType((16, 16), TensorViewType(F32, (None,), (1,)))
    transposed = PartitionViewType((16, 8), TensorViewType(F16, (None, None), (None, 1)), (1, 0))
    assert str(transposed) == (
        "partition_view<tile=(16x8), dim_map=[1, 0], tensor_view<?x?xf16, strides=[?,1]>>")


# ---------------------------------------------------------------------------------------------
# whole files, byte for byte

_CUTILE_NAME = "vadd_Kt1_A1f32_1i16t1_p16_A1f32_1i16t1_p16_A1f32_1i16t1_p16_I1024"

# First 0xdd bytes of cuTile Python's 13.4 vadd file: header, Func section, Constant section.
_CUTILE_VADD_PREFIX = bytes.fromhex("""
    7f54 696c 6549 5200 0d04 0000 82ae 0108 0103 0606 010b 0105 0a00 a201 4407 0604
    0810 0000 0605 0810 0001 0604 0810 0003 0605 0810 0004 0604 0810 0006 0605 0810
    0007 1005 0010 0500 1005 0006 050c 0100 0b06 0508 1000 1343 0108 0a01 1400 0605
    0c01 000d 0605 0810 0016 4301 080c 0117 0006 050c 0100 0f06 0508 1000 1943 0108
    0e01 1a00 3005 0505 4209 153e 020a 0704 0001 001f 011c 0942 0918 3e02 0a07 0400
    0100 2201 1c09 020a 0000 2023 4209 1b66 0107 0400 0100 2526 011c 095c 0000 8415
    08cb cbcb cbcb cbcb 01cb cbcb cbcb cbcb 0000 0000 0000 0000 0401 0000 00
""")

# The documented lines of the sheet's own 238-byte reconstruction (offsets 0x00-0x7f, 0xd0-0xed).
_SHEET_VADD_HEAD = bytes.fromhex("""
    7f54 696c 6549 5200 0d04 0000 8258 08cb 0100 0602 0051 4402 3005 0505 4301 0700
    0103 0043 0107 0101 0300 4301 0702 0103 0042 0808 4208 0942 080a 3e02 0902 0400
    0100 0b01 0504 3e02 0902 0400 0100 0c01 0504 0209 0000 0e10 6601 0204 0001 0012
    0d01 0504 5c00 00cb 856c 04cb 0acb cbcb 0000 0000 0100 0000 0200 0000 0300 0000
""")
_SHEET_VADD_TAIL = bytes.fromhex("""
    0004 0000 0000 0000 8111 04cb 01cb cbcb 0000 0000 7661 6464 5f68 616e 6400
""")


def build_cutile_vadd() -> ModuleBuilder:
    """cuTile's vadd: assumes on parameters, three constants, views, loads, addf, store."""
    module = ModuleBuilder((13, 4))
    for text in ("kern.py", "/src", "vadd", _CUTILE_NAME, "/src/kern.py"):
        module.intern_string(text)
    module.intern_type(I1)
    module.intern_type(I32)
    fn = module.entry(_CUTILE_NAME, [PTR_F32, SCALAR_I32, SCALAR_I32] * 3,
                      hints={"default": {}}, location=SourceLocation("/src/kern.py", 3, 1))
    params = fn.params
    token = fn.make_token()
    assumed = [fn.assume(params[i], DivBy(16)) for i in (0, 1, 3, 4, 6, 7)]
    for _ in range(3):
        fn.constant(1, SCALAR_I32)
    views = []
    for array in range(3):
        size = fn.assume(fn.assume(assumed[2 * array + 1], Bounded(lower=0)), DivBy(16))
        views.append(fn.make_tensor_view(assumed[2 * array], [size], [1]))
    block_x, _, _ = fn.get_tile_block_id()
    a, _ = fn.load_view_tko(fn.make_partition_view(views[0], [1024]), [block_x], token=token)
    b, _ = fn.load_view_tko(fn.make_partition_view(views[1], [1024]), [block_x], token=token)
    total = fn.addf(a, b)
    fn.store_view_tko(total, fn.make_partition_view(views[2], [1024]), [block_x], token=token)
    fn.return_()
    return module


def test_cutile_vadd_prefix_is_byte_identical() -> None:
    data = build_cutile_vadd().to_bytes()
    assert data[:len(_CUTILE_VADD_PREFIX)] == _CUTILE_VADD_PREFIX
    assert data[0xDD] == 0x83 and data[0xE0] == 0x08  # then the Debug section, aligned to 8


def build_vadd(version: tuple[int, int], name: str = "vadd_hand") -> ModuleBuilder:
    module = ModuleBuilder(version)
    for type_ in (F32, I32, TOKEN, PointerType(F32)):
        module.intern_type(type_)
    fn = module.entry(name, [PTR_F32, PTR_F32, PTR_F32, SCALAR_I32])
    a, b, c, n = fn.params
    token = fn.make_token()
    block_x, _, _ = fn.get_tile_block_id()
    tensor_views = [fn.make_tensor_view(pointer, [n], [1]) for pointer in (a, b, c)]
    views = [fn.make_partition_view(view, [1024]) for view in tensor_views]
    x, _ = fn.load_view_tko(views[0], [block_x], token=token)
    y, _ = fn.load_view_tko(views[1], [block_x], token=token)
    fn.store_view_tko(fn.addf(x, y), views[2], [block_x], token=token)
    fn.return_()
    return module


def test_sheet_vadd_reconstruction() -> None:
    """Same bytes as the sheet's hand-built vadd, except that the sheet's encoder padded the
    Func payload to 8 bytes (88 instead of 87; 0xCB after ``return``), which cuTile does not."""
    data = build_vadd((13, 4)).to_bytes()
    head = _SHEET_VADD_HEAD
    assert len(data) == 238
    assert data[:0x0D] == head[:0x0D] and data[0x0D] == 0x57 and head[0x0D] == 0x58
    assert data[0x0E:0x67] == head[0x0E:0x67]
    assert data[0x67:0x6C].hex() == "856c04cbcb" and head[0x67:0x6C].hex() == "cb856c04cb"
    assert data[0x6C:0x80] == head[0x6C:0x80]
    assert data[0xD0:] == _SHEET_VADD_TAIL


# ---------------------------------------------------------------------------------------------
# builder rules (no tools needed)


def test_version_gates() -> None:
    module = ModuleBuilder((13, 3))
    fn = module.entry("k", [SCALAR_I32])
    x = fn.itof(fn.params[0], F32, signedness=SIGNED)
    with pytest.raises(ValueError, match="'fpowi' requires Tile IR bytecode 13.4"):
        fn.fpowi(x, fn.params[0])
    with pytest.raises(ValueError, match="13.4"):
        fn.ftoi(x, I32, signedness=SIGNED, saturating=True)
    with pytest.raises(ValueError, match="13.3"):
        ModuleBuilder((13, 2)).entry("k", [], hints={"default": {"occupancy": 2}})
    with pytest.raises(ValueError, match="unsupported"):
        ModuleBuilder((13, 5))
    with pytest.raises(ValueError, match="producer"):
        ModuleBuilder((13, 2), producer="me")


def test_inbounds_needs_13_4() -> None:
    module = ModuleBuilder((13, 3))
    fn = module.entry("k", [PTR_F32, SCALAR_I32])
    view = fn.make_partition_view(fn.make_tensor_view(fn.params[0], [fn.params[1]], [1]), [16])
    with pytest.raises(ValueError, match="inbounds"):
        fn.load_view_tko(view, [fn.params[1]], inbounds=[True])
    fn.load_view_tko(view, [fn.params[1]], inbounds=[False])


def test_hint_validation() -> None:
    module = ModuleBuilder()
    with pytest.raises(ValueError, match="num_cta_in_cga"):
        module.entry("a", [], hints={"sm_90": {"num_cta_in_cga": 3}})
    with pytest.raises(ValueError, match="unknown kernel hint"):
        module.entry("b", [], hints={"sm_90": {"latency": 3}})
    with pytest.raises(ValueError, match="architecture"):
        module.entry("c", [], hints={"hopper": {}})
    fn = module.entry("d", [PTR_F32])
    pointers = fn.params[0]
    with pytest.raises(ValueError, match="allow_tma"):
        fn.load_ptr_tko(pointers, hints={"sm_90": {"allow_tma": True}})
    with pytest.raises(ValueError, match="latency"):
        fn.load_ptr_tko(pointers, hints={"sm_90": {"latency": 11}})


def test_value_scoping_and_terminators() -> None:
    module = ModuleBuilder()
    fn = module.entry("k", [SCALAR_I32])
    n = fn.params[0]
    zero, one = fn.constant(0, SCALAR_I32), fn.constant(1, SCALAR_I32)
    leaked: list[Value] = []

    def body(index: Value, total: Value) -> None:
        leaked.append(index)
        fn.continue_([fn.addi(total, index)])

    (result,) = fn.for_(zero, n, one, [zero], body)
    assert result.type == SCALAR_I32
    with pytest.raises(ValueError, match="not visible"):
        fn.addi(leaked[0], one)
    with pytest.raises(ValueError, match="must end with a terminator"):
        fn.for_(zero, n, one, [], lambda index: None)
    with pytest.raises(ValueError, match="types"):
        fn.for_(zero, n, one, [zero], lambda index, total: fn.continue_([]))
    with pytest.raises(ValueError, match="'yield' cannot terminate"):
        fn.for_(zero, n, one, [], lambda index: fn.yield_())
    with pytest.raises(ValueError, match="'break' must be inside a loop"):
        fn.for_(zero, n, one, [], lambda index: fn.break_())
    with pytest.raises(ValueError, match="entries without return"):
        module.to_bytes()
    fn.return_()
    with pytest.raises(ValueError, match="already terminated"):
        fn.make_token()
    module.to_bytes()


def test_failed_region_leaves_builder_consistent() -> None:
    """A body that raises commits nothing: numbering continues as if it was never called."""
    module = ModuleBuilder()
    fn = module.entry("k", [SCALAR_I32])
    n = fn.params[0]
    one = fn.constant(1, SCALAR_I32)

    def failing(index: Value) -> None:
        fn.addi(index, one)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fn.for_(one, n, one, [], failing)
    assert fn.addi(n, one).index == 2
    fn.return_()


def test_shape_checks() -> None:
    fn = ModuleBuilder().entry("k", [])
    tile = fn.constant(0.0, TileType(F32, (4, 8)))
    with pytest.raises(ValueError):
        fn.broadcast(tile, (8, 8))
    with pytest.raises(ValueError):
        fn.reshape(tile, (64,))
    with pytest.raises(ValueError):
        fn.addf(tile, fn.constant(0.0, TileType(F32, (8, 4))))
    with pytest.raises(ValueError, match="float tile"):
        fn.addf(fn.constant(0, TileType(I32, (4,))), fn.constant(0, TileType(I32, (4,))))
    with pytest.raises(ValueError):
        fn.mmaf(tile, tile, tile)
    assert fn.permute(tile, (1, 0)).type == TileType(F32, (8, 4))
    assert fn.cat(tile, tile, 0).type == TileType(F32, (8, 8))
    (row_sums,) = fn.reduce([tile], 1, [0.0], lambda x, acc: fn.yield_([fn.addf(x, acc)]))
    assert row_sums.type == TileType(F32, (4,))


# ---------------------------------------------------------------------------------------------
# kernels checked with tileirdisasm and tileiras


@pytest.mark.parametrize("version", [(13, 1), (13, 2), (13, 3), (13, 4)])
def test_vadd_views_and_tokens(version, tileirdisasm, tileiras, tmp_path) -> None:
    text = check_kernel(tileirdisasm, tileiras, build_vadd(version), tmp_path / "vadd.tileirbc", [
        "make_token", "get_tile_block_id", "make_tensor_view", "make_partition_view",
        "load_view_tko weak", "store_view_tko weak", "addf", "tensor_view<?xf32, strides=[1]>",
        "-> tile<1024xf32>, token"])
    assert text.count("load_view_tko") == 2


def test_cutile_vadd_with_debug_info(tileirdisasm, tileiras, tmp_path) -> None:
    module = build_cutile_vadd()
    path = tmp_path / "vadd.tileirbc"
    text = disassemble(tileirdisasm, module, path, debug=True)
    assert "optimization_hints=<default = {}>" in text
    assert "assume bounded<0, ?>" in text and "assume div_by<16>" in text
    assert "constant <i32: 1> : tile<i32>" in text
    assert 'di_file<"kern.py" in "/src">' in text and "di_subprogram" in text
    assert 'loc("/src/kern.py":3:1)' in text
    assert assemble(tileiras, path, "--lineinfo")


def build_gemm(version: tuple[int, int]) -> ModuleBuilder:
    """C = A @ B with f16 inputs and an f32 accumulator carried through a for loop."""
    module = ModuleBuilder(version)
    arch = "default" if version >= (13, 3) else "sm_90"
    entry_hints = {"sm_90": {"num_cta_in_cga": 2, "occupancy": 2}}
    if version >= (13, 3):
        entry_hints["sm_90"]["num_worker_warps_per_cta"] = 4
    fn = module.entry("gemm", [PTR_F16, PTR_F16, PTR_F32, SCALAR_I32, SCALAR_I32, SCALAR_I32],
                      hints=entry_hints)
    a_ptr, b_ptr, c_ptr, m, n, k = fn.params
    token = fn.make_token()
    a_view = fn.make_partition_view(fn.make_tensor_view(a_ptr, [m, k], [k, 1]), [64, 32])
    b_view = fn.make_partition_view(fn.make_tensor_view(b_ptr, [k, n], [n, 1]), [32, 64])
    c_view = fn.make_partition_view(fn.make_tensor_view(c_ptr, [m, n], [n, 1]), [64, 64])
    block_x, block_y, _ = fn.get_tile_block_id()
    zero, one = fn.constant(0, SCALAR_I32), fn.constant(1, SCALAR_I32)
    k_tiles = fn.divi(k, fn.constant(32, SCALAR_I32), signedness=SIGNED,
                      rounding=RoundingMode.POSITIVE_INF)
    load_hints = {arch: {"latency": 3, "allow_tma": True}}

    def step(kk: Value, acc: Value) -> None:
        a, _ = fn.load_view_tko(a_view, [block_x, kk], token=token, hints=load_hints)
        b, _ = fn.load_view_tko(b_view, [kk, block_y], token=token)
        fn.continue_([fn.mmaf(a, b, acc)])

    (acc,) = fn.for_(zero, k_tiles, one, [fn.constant(0.0, TileType(F32, (64, 64)))], step)
    fn.store_view_tko(acc, c_view, [block_x, block_y], token=token,
                      hints={arch: {"allow_tma": False}})
    fn.return_()
    return module


@pytest.mark.parametrize("version", [(13, 3), (13, 4)])
def test_gemm_for_loop_mmaf_and_hints(version, tileirdisasm, tileiras, tmp_path) -> None:
    check_kernel(tileirdisasm, tileiras, build_gemm(version), tmp_path / "gemm.tileirbc", [
        "for ", "continue", "mmaf", "tile<64x32xf16>", "tile<32x64xf16>", "tile<64x64xf32>",
        "num_cta_in_cga = 2", "occupancy = 2", "latency = 3", "allow_tma = true",
        "tensor_view<?x?xf16, strides=[?,1]>", "divi"])


def test_reduce_scan_softmax(tileirdisasm, tileiras, tmp_path) -> None:
    """Row softmax (max and sum reductions), a two-operand argmax reduce and a cumulative sum."""
    module = ModuleBuilder((13, 4))
    fn = module.entry("softmax", [PTR_F32, PTR_F32, PTR_I32, SCALAR_I32])
    src, dst, argmax_out, rows = fn.params
    token = fn.make_token()
    block_x, _, _ = fn.get_tile_block_id()
    in_view = fn.make_partition_view(fn.make_tensor_view(src, [rows, 128], [128, 1]), [64, 128],
                                     padding=PaddingValue.NEG_INF)
    x, _ = fn.load_view_tko(in_view, [block_x, fn.constant(0, SCALAR_I32)], token=token)
    (row_max,) = fn.reduce([x], 1, [-math.inf], lambda e, acc: fn.yield_([fn.maxf(e, acc)]))
    spread = fn.broadcast(fn.reshape(row_max, (64, 1)), (64, 128))
    e = fn.exp(fn.subf(x, spread), rounding=RoundingMode.APPROX)
    (row_sum,) = fn.reduce([e], 1, [0.0], lambda v, acc: fn.yield_([fn.addf(v, acc)]))
    y = fn.divf(e, fn.broadcast(fn.reshape(row_sum, (64, 1)), (64, 128)))
    (prefix,) = fn.scan([y], 1, [0.0], lambda v, acc: fn.yield_([fn.addf(v, acc)]), reverse=False)
    out_view = fn.make_partition_view(fn.make_tensor_view(dst, [rows, 128], [128, 1]), [64, 128])
    fn.store_view_tko(prefix, out_view, [block_x, fn.constant(0, SCALAR_I32)], token=token)

    columns = fn.broadcast(fn.reshape(fn.iota(128), (1, 128)), (64, 128))

    def argmax(value: Value, best: Value, index: Value, best_index: Value) -> None:
        better = fn.cmpf(Cmp.GT, value, best)
        fn.yield_([fn.select(better, value, best), fn.select(better, index, best_index)])

    _, indices = fn.reduce([x, columns], 1, [-math.inf, 0], argmax)
    index_view = fn.make_partition_view(fn.make_tensor_view(argmax_out, [rows], [1]), [64])
    fn.store_view_tko(indices, index_view, [block_x], token=token)
    fn.return_()
    text = check_kernel(tileirdisasm, tileiras, module, tmp_path / "softmax.tileirbc", [
        "reduce", "scan", "maxf", "yield", "broadcast", "reshape", "exp", "rounding<approx>",
        "iota", "select", "cmpf", "tile<64xf32>", "padding_value = neg_inf", "0xFF800000"])
    assert text.count("= reduce ") == 3


def test_if_else_loop_break_continue(tileirdisasm, tileiras, tmp_path) -> None:
    module = ModuleBuilder((13, 4))
    fn = module.entry("control", [PTR_I32, SCALAR_I32])
    out, n = fn.params
    block_x, _, _ = fn.get_tile_block_id()
    zero, one, two = (fn.constant(v, SCALAR_I32) for v in (0, 1, 2))
    ten = fn.constant(10, SCALAR_I32)
    (start,) = fn.if_(fn.cmpi(Cmp.LT, block_x, n, signedness=SIGNED),
                      lambda: fn.yield_([fn.addi(block_x, one)]),
                      lambda: fn.yield_([zero]), result_types=[SCALAR_I32])

    def loop_body(value: Value, count: Value) -> None:
        fn.if_(fn.cmpi(Cmp.GE, count, ten, signedness=SIGNED), lambda: fn.break_([value]))
        fn.continue_([fn.muli(value, two, overflow=IntegerOverflow.NSW), fn.addi(count, one)])

    (doubled,) = fn.loop([start, zero], loop_body, result_types=[SCALAR_I32])

    def odd_sum(index: Value, total: Value) -> None:
        is_even = fn.cmpi(Cmp.EQ, fn.remi(index, two, signedness=SIGNED), zero, signedness=SIGNED)
        fn.if_(is_even, lambda: fn.continue_([total]))
        fn.continue_([fn.addi(total, index)])

    (total,) = fn.for_(zero, n, one, [doubled], odd_sum, unsigned_compare=True)
    fn.store_ptr_tko(out, total)
    fn.return_()
    check_kernel(tileirdisasm, tileiras, module, tmp_path / "control.tileirbc", [
        "if ", "} else {", "yield", "loop iter_values", "break", "continue", "for unsigned",
        "cmpi", "remi", "muli", "overflow<no_signed_wrap>", "store_ptr_tko"])


@pytest.mark.parametrize("version", [(13, 3), (13, 4)])
def test_pointer_loads_stores_offset_mask_atomics(version, tileirdisasm, tileiras,
                                                  tmp_path) -> None:
    module = ModuleBuilder(version)
    fn = module.entry("gather", [PTR_F32, PTR_F32, PTR_I32, SCALAR_I32])
    src, dst, counter, n = fn.params
    token = fn.make_token()
    block_x, _, _ = fn.get_tile_block_id()
    lanes = TileType(I32, (256,))
    start = fn.muli(block_x, fn.constant(256, SCALAR_I32))
    offsets = fn.addi(fn.iota(256), fn.broadcast(fn.reshape(start, (1,)), (256,)))
    mask = fn.cmpi(Cmp.LT, offsets, fn.broadcast(fn.reshape(n, (1,)), (256,)), signedness=SIGNED)

    def pointers(base: Value) -> Value:
        return fn.offset(fn.broadcast(fn.reshape(base, (1,)), (256,)), offsets)

    values, loaded = fn.load_ptr_tko(pointers(src), mask=mask,
                                     padding=fn.constant(0.0, TileType(F32, (256,))),
                                     token=token, hints={"sm_90": {"latency": 2}})
    stored = fn.store_ptr_tko(pointers(dst), fn.mulf(values, values), mask=mask, token=loaded)
    _, added = fn.atomic_rmw_tko(pointers(dst), values, AtomicMode.ADDF,
                                 ordering=MemoryOrdering.RELAXED, scope=MemoryScope.DEVICE,
                                 mask=mask, token=stored)
    fn.atomic_cas_tko(counter, fn.constant(0, SCALAR_I32), fn.constant(1, SCALAR_I32),
                      ordering=MemoryOrdering.ACQ_REL, scope=MemoryScope.DEVICE,
                      token=fn.join_tokens([added, loaded]))
    fn.load_ptr_tko(counter, ordering=MemoryOrdering.ACQUIRE, scope=MemoryScope.DEVICE)
    assert lanes == offsets.type
    fn.return_()
    check_kernel(tileirdisasm, tileiras, module, tmp_path / "gather.tileirbc", [
        "load_ptr_tko weak", "store_ptr_tko weak", "offset", "iota",
        "atomic_rmw_tko relaxed device",
        "atomic_cas_tko acq_rel device", "join_tokens", "load_ptr_tko acquire device",
        "tile<256xptr<f32>>", "latency = 2"])


@pytest.mark.parametrize("version", [(13, 3), (13, 4)])
def test_conversions(version, tileirdisasm, tileiras, tmp_path) -> None:
    module = ModuleBuilder(version)
    fn = module.entry("convert", [PTR_F32, PTR_F32, PTR_F16])
    src, dst, half_dst = fn.params
    x, _ = fn.load_ptr_tko(src)
    saturating = {"saturating": True} if version >= (13, 4) else {}
    as_int = fn.ftoi(x, I32, signedness=SIGNED, **saturating)
    wide = fn.exti(as_int, I64, signedness=SIGNED)
    narrow = fn.trunci(wide, I16)
    back = fn.itof(narrow, F32, signedness=Signedness.UNSIGNED)
    via_bits = fn.bitcast(fn.bitcast(back, I32), F32)
    via_bf16 = fn.ftof(fn.ftof(fn.ftof(fn.ftof(x, BF16), F32), F8E4M3FN), F32)
    half = fn.ftof(fn.addf(via_bits, via_bf16), F16, rounding=RoundingMode.ZERO)
    fn.store_ptr_tko(half_dst, half)
    address = fn.ptr_to_int(dst)
    fn.store_ptr_tko(fn.ptr_to_ptr(fn.int_to_ptr(address, I32), F32), fn.ftof(half, F32))
    fn.return_()
    expected = ["ftoi", "exti", "trunci", "itof", "bitcast", "ftof", "ptr_to_int", "int_to_ptr",
                "ptr_to_ptr", "tile<bf16>", "tile<i16>", "tile<i64>", "tile<f8E4M3FN>"]
    if version >= (13, 4):
        expected.append("saturat")
    check_kernel(tileirdisasm, tileiras, module, tmp_path / "convert.tileirbc", expected)


_FLOAT_UNARY = ["absf", "negf", "ceil", "floor", "sin", "cos", "tan", "sinh", "cosh", "log", "log2",
                "exp", "exp2", "sqrt", "rsqrt", "tanh"]
_INT_BINARY = ["addi", "subi", "muli", "mulhii", "andi", "ori", "xori", "shli"]
_SIGNED_BINARY = ["divi", "remi", "maxi", "mini", "shri"]


def test_math_ops(tileirdisasm, tileiras, tmp_path) -> None:
    module = ModuleBuilder((13, 4))
    fn = module.entry("math", [PTR_F32, PTR_I32])
    float_ptr, int_ptr = fn.params
    token = fn.make_token()
    block_x, _, _ = fn.get_tile_block_id()
    float_view = fn.make_partition_view(fn.make_tensor_view(float_ptr, [4096], [1]), [128])
    int_view = fn.make_partition_view(fn.make_tensor_view(int_ptr, [4096], [1]), [128])
    x, _ = fn.load_view_tko(float_view, [block_x], token=token, inbounds=[True])
    i, _ = fn.load_view_tko(int_view, [block_x], token=token)
    acc = x
    for name in _FLOAT_UNARY:
        acc = fn.addf(acc, getattr(fn, name)(x))
    acc = fn.fma(fn.fpowf(x, acc), fn.atan2(x, acc), fn.remf(acc, x))
    acc = fn.maxf(fn.minf(acc, x, propagate_nan=True), fn.mulf(acc, x, flush_to_zero=True))
    acc = fn.fpowi(fn.divf(fn.subf(acc, x), x, rounding=RoundingMode.FULL), i)
    total = fn.absi(fn.negi(i, overflow=IntegerOverflow.NSW))
    for name in _INT_BINARY:
        total = getattr(fn, name)(total, i)
    for name in _SIGNED_BINARY:
        total = getattr(fn, name)(total, i, signedness=SIGNED)
    result = fn.select(fn.cmpi(Cmp.NE, total, i, signedness=Signedness.UNSIGNED), acc, x)
    fn.store_view_tko(result, float_view, [block_x], token=token, inbounds=[True])
    fn.return_()
    text = check_kernel(tileirdisasm, tileiras, module, tmp_path / "math.tileirbc", [
        "fma", "fpowf", "fpowi", "atan2", "remf", "propagate_nan", "flush_to_zero"])
    for name in [*_FLOAT_UNARY, *_INT_BINARY, *_SIGNED_BINARY, "absi", "negi", "select"]:
        assert has_op(text, name), name


def test_constants_and_identities_round_trip(tileirdisasm, tmp_path) -> None:
    """Dense constants of each numeric format and float/int reduction identities."""
    module = ModuleBuilder((13, 4))
    fn = module.entry("constants", [])
    for element in (TF32, BF16, F16, F64):
        fn.constant([1.5, -2.0], TileType(element, (2,)))
    fn.constant([-1, 3], TileType(I8, (2,)))
    fn.constant(-1, TileType(I64, (2,)))
    for element, identity in ((F64, -math.inf), (F16, -math.inf), (I16, -32768)):
        values = fn.constant([1, 2], TileType(element, (2,)))
        if element.is_float:
            fn.reduce([values], 0, [identity], lambda e, acc: fn.yield_([fn.maxf(e, acc)]))
        else:
            fn.reduce([values], 0, [identity],
                      lambda e, acc: fn.yield_([fn.maxi(e, acc, signedness=SIGNED)]))
    fn.return_()
    text = disassemble(tileirdisasm, module, tmp_path / "constants.tileirbc")
    for element in ("tf32", "bf16", "f16", "f64"):
        assert f"constant <{element}: [1.500000e+00, -2.000000e+00]>" in text
    assert "constant <i8: [-1, 3]>" in text and "constant <i64: -1> : tile<2xi64>" in text
    assert "identities=[0xFFF0000000000000 : f64]" in text
    assert "identities=[0xFC00 : f16]" in text and "identities=[-32768 : i16]" in text


def test_shape_ops_constants_and_misc(tileirdisasm, tileiras, tmp_path) -> None:
    """permute, cat, extract, insert, non-splat constants, mmai, assume, assert, print_tko,
    globals, shape queries, a producer string and per-op source locations."""
    module = ModuleBuilder((13, 4), producer="tilesafe tests")
    module.add_global("table", np.arange(8, dtype=np.float32), TileType(F32, (8,)), constant=True)
    fn = module.entry("shapes", [PTR_F32, SCALAR_I32], location=SourceLocation("/k/shapes.py", 10))
    out, n = fn.params
    token = fn.make_token()
    fn.set_location(SourceLocation("/k/shapes.py", 11, 5))
    matrix = fn.constant(np.arange(32).reshape(4, 8), TileType(I32, (4, 8)))
    transposed = fn.permute(matrix, (1, 0))
    joined = fn.cat(transposed, transposed, 1)
    zero = fn.constant(0, SCALAR_I32)
    part = fn.extract(joined, [zero, fn.constant(1, SCALAR_I32)], (4, 4))
    replaced = fn.insert(part, joined, [fn.constant(1, SCALAR_I32), zero])
    flags = fn.constant([True, False] * 4, TileType(I1, (8,)))
    halves = fn.constant(np.linspace(0, 1, 16), TileType(F16, (16,)))
    fn.set_location(None)
    products = fn.mmai(fn.constant(1, TileType(I8, (16, 32))),
                       fn.constant(2, TileType(I8, (32, 16))),
                       fn.constant(0, TileType(I32, (16, 16))),
                       lhs_signedness=SIGNED, rhs_signedness=SIGNED)
    fn.assert_(fn.cmpi(Cmp.GE, fn.assume(n, SameElements(())), zero, signedness=SIGNED),
               "n must be non-negative")
    printed = fn.print_tko("%d %f\n", [replaced, fn.ftof(halves, F32)], token=token)
    table_pointers = fn.broadcast(fn.reshape(fn.get_global("table"), (1,)), (8,))
    table, _ = fn.load_ptr_tko(fn.offset(table_pointers, fn.iota(8)), token=printed)
    view = fn.make_partition_view(fn.make_tensor_view(out, [n], [1]), [8])
    (grid,) = fn.get_index_space_shape(view)
    (length,) = fn.get_tensor_shape(fn.make_tensor_view(out, [n], [1]), I64)
    picked = fn.select(flags, table, fn.itof(fn.extract(fn.reshape(products, (256,)), [zero], (8,)),
                                              F32, signedness=SIGNED))
    fn.store_view_tko(picked, view, [fn.subi(grid, fn.trunci(length, I32))], token=printed)
    fn.return_()
    path = tmp_path / "shapes.tileirbc"
    text = check_kernel(tileirdisasm, tileiras, module, path, [
        "permute", "cat", "extract", "insert", "mmai", "assume same_elements", "assert",
        "n must be non-negative", "print_tko", "get_global @table", "global",
        "get_index_space_shape",
        "get_tensor_shape", "tile<16xf16>", "tile<8xi1>", "tile<4x8xi32>"], "--lineinfo")
    assert "dense<" in text or "constant <i32:" in text
    located = disassemble(tileirdisasm, module, path, debug=True)
    assert 'loc("/k/shapes.py":11:5)' in located and 'loc("/k/shapes.py":10:0)' in located
