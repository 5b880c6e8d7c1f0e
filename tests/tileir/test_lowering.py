"""Tests of the lowering from tilesafe's typed IR to Tile IR bytecode and of the tileiras driver.

Kernels covering every IR op are compiled to IR on the CPU (``kernel.ir(*args)``), lowered,
checked with ``tileirdisasm`` (expected ops, the token chain, no token on shared loads) and
assembled with ``tileiras --gpu-name sm_90``. Tool-dependent tests skip when tileiras is not
installed (``pip install 'tilesafe[gpu]'``). Assembly runs in a small thread pool; the file
makes about twenty tileiras runs.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe import dtypes as tsd
from tilesafe import backends, pipeline
from tilesafe.backends.tileir import tileiras as driver
from tilesafe.backends.tileir.bytecode import (
    ComparisonOrdering, ComparisonPredicate, RoundingMode, Signedness)
from tilesafe.backends.tileir.bytecode import types as tir
from tilesafe.backends.tileir.lower import (AbiArg, LoweringContext, TensorArg, abi_signature,
                                           lower_kernel, normalize_facts, scalar_type,
                                           waits_for_predecessor)
from tilesafe.compiler import registry
from tilesafe.compiler.ir import Operation, Value as IRValue
from tilesafe.compiler.ops.mapped import mapped_coords
from tilesafe.compiler.types import MappedPartitionType, TileType as IRTile
from tilesafe.errors import CompileError

ALL_DTYPES = (tc.bool_, tc.i8, tc.i16, tc.i32, tc.i64, tc.u8, tc.u16, tc.u32, tc.u64, tc.f16,
              tc.bf16, tc.f32, tc.f64)
FLOATS = (tc.f16, tc.bf16, tc.f32, tc.f64)

# ---------------------------------------------------------------------------------------------
# tools


@pytest.fixture(scope="module")
def tool() -> driver.Tileiras:
    try:
        return driver.find_tileiras()
    except driver.TileirasNotFound:
        pytest.skip("tileiras is not installed")


@pytest.fixture(scope="module")
def disasm_tool(tool) -> str:
    found = driver.find_tileirdisasm()
    if found is None:
        pytest.skip("tileirdisasm is not installed")
    return found


def disasm(tool_path: str, bytecode: bytes, tmp_path: Path, name: str = "k") -> str:
    path = tmp_path / f"{name}.tileirbc"
    path.write_bytes(bytecode)
    done = subprocess.run([tool_path, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assemble_all(tool: driver.Tileiras, kernels: dict[str, tuple], **lowering) -> dict:
    """Lower and assemble ``{label: kernel IR}`` for sm_90 in parallel; returns the bytecode."""
    codes = {label: lower_kernel(ir, **lowering) for label, ir in kernels.items()}

    def run(item):
        label, code = item
        return label, driver.assemble(code, "sm_90", kernel=kernels[label], tool=tool)

    with ThreadPoolExecutor(max_workers=4) as pool:
        for label, cubin in pool.map(run, codes.items()):
            assert cubin[:4] == b"\x7fELF" and len(cubin) > 1000, label
    return codes


def has_op(text: str, mnemonic: str) -> bool:
    return re.search(rf"(^|[=\s]){re.escape(mnemonic)}(\s|$)", text, re.MULTILINE) is not None


def memory_ops(text: str) -> list[tuple[str, str, str]]:
    """``(mnemonic, input token or '', output token)`` of each *_tko op, in program order."""
    out = []
    for line in text.splitlines():
        match = re.search(r"(\w+_tko)\b", line)
        if not match or "=" not in line:
            continue
        results = [r.strip() for r in line.split("=")[0].split(",")]
        token_in = re.search(r"token ?= ?(%[\w]+)", line)
        out.append((match.group(1), token_in.group(1) if token_in else "", results[-1]))
    return out


def vec(n, dtype=ts.float32):
    return ts.zeros(n, dtype=dtype).sync()


# ---------------------------------------------------------------------------------------------
# kernels


@ts.kernel
def vector_add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
               y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


@ts.kernel
def gemm(z: tc.MutTensor[tc.f16, ("BM", "BN")], x: tc.Tensor[tc.f16, (-1, -1)],
         y: tc.Tensor[tc.f16, (-1, -1)], BM: tc.Const[int], BN: tc.Const[int],
         BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), tc.f32)
    for k in range(tc.num_tiles(px, 1)):
        acc = tc.mma(px.load((i, k)), py.load((k, j)), acc)
    z.store(acc.astype(tc.f16))


@ts.kernel
def persistent_gemm(z: tc.MappedPartitionMut[tc.f32, ("BM", "BN"), "M"],
                    x: tc.Tensor[tc.f16, (-1, -1)], y: tc.Tensor[tc.f16, (-1, -1)],
                    BM: tc.Const[int], BN: tc.Const[int], BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for k in range(tc.num_tiles(px, 1)):
            acc = tc.mma(px.load((m, k)), py.load((k, n)), acc)
        z.store(acc, idx)


@ts.kernel
def mapped_increment(z: tc.MappedPartitionMut[tc.i32, "S", "M"]):
    for idx in z.iter_indices():
        z.store(z.load(idx) + 1, idx)


@ts.function
def stable_softmax(row):
    e = tc.exp(row - tc.reduce_max(row, 1, keepdims=True))
    return e / tc.reduce_sum(e, 1, keepdims=True)


@ts.kernel
def softmax(z: tc.MutTensor[tc.f32, (1, "BN")], x: tc.Tensor[tc.f32, (-1, -1)],
            BN: tc.Const[int]):
    z.store(stable_softmax(tc.load_tile_like(x, z, padding=float("-inf"))))


@ts.kernel
def paddings(z: tc.MutTensor[tc.f32, (64,)], x: tc.Tensor[tc.f32, (-1,)],
             b: tc.Tensor[tc.bool_, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    t = tc.load_tile_like(x, z, padding=float("nan")) + tc.load_tile_like(x, z, padding=-0.0)
    t = t + x.partition(64, padding=float("inf")).load(i)
    flags = b.partition(64).load(i.astype(tc.i64)) | tc.load_tile_like(b, z)
    z.store(tc.where(flags, t, 0.0))


@ts.function
def int_arith(a, b):
    r = a // b + a % b + a * b - (a + b)
    r = r + (a & b) + (a | b) + (a ^ b) + (a << 3) + (a >> 2) + ~a + -a + abs(a)
    r = r + tc.maximum(a, b) + tc.minimum(a, b)
    c = (a == b) | (a != b) ^ (a < b) & (a <= b) | (a > b) | (a >= b)
    return tc.where(c, r, b)


@ts.function
def float_arith(a, b):
    r = tc.exp(a) + tc.exp2(a) + tc.log(a) + tc.log2(a) + tc.sqrt(a) + tc.rsqrt(a)
    r = r + tc.sin(a) + tc.cos(a) + tc.tan(a) + tc.sinh(a) + tc.cosh(a) + tc.tanh(a)
    r = r + tc.floor(a) + tc.ceil(a) - a + abs(a) + -b
    r = r + a / b + a // b + a % b + a ** b + tc.maximum(a, b) + tc.minimum(a, b) + a * b
    c = (a == b) | (a != b) ^ (a < b) & (a <= b) | (a > b) | (a >= b)
    return tc.where(c, r, b)


@ts.kernel
def arithmetic(z: tc.MutTensor[tc.f32, (128,)], xi8: tc.Tensor[tc.i8, (-1,)],
               xu16: tc.Tensor[tc.u16, (-1,)], xi32: tc.Tensor[tc.i32, (-1,)],
               xu32: tc.Tensor[tc.u32, (-1,)], xi64: tc.Tensor[tc.i64, (-1,)],
               xu64: tc.Tensor[tc.u64, (-1,)], xf16: tc.Tensor[tc.f16, (-1,)],
               xbf16: tc.Tensor[tc.bf16, (-1,)], xf32: tc.Tensor[tc.f32, (-1,)],
               xf64: tc.Tensor[tc.f64, (-1,)], xb: tc.Tensor[tc.bool_, (-1,)]):
    acc = tc.zeros((128,), tc.f32)
    for x in (xi8, xu16, xi32, xu32, xi64, xu64):
        t = tc.load_tile_like(x, z)
        acc = acc + int_arith(t, t + 1).astype(tc.f32)
    for x in (xf16, xbf16, xf32, xf64):
        t = tc.load_tile_like(x, z)
        acc = acc + float_arith(t, t * 0.5).astype(tc.f32)
    acc = tc.fma(acc, 0.5, tc.load_tile_like(xf32, z))
    b = tc.load_tile_like(xb, z)
    logic = (b & ~b) | (b ^ tc.maximum(b, ~b)) | tc.minimum(b, b) | (b < ~b) | (b >= b)
    z.store(tc.where(logic, acc, 1.0))


@ts.kernel
def convert_all(z: tc.MutTensor[tc.f64, (64,)], xb: tc.Tensor[tc.bool_, (-1,)],
                xi8: tc.Tensor[tc.i8, (-1,)], xi16: tc.Tensor[tc.i16, (-1,)],
                xi32: tc.Tensor[tc.i32, (-1,)], xi64: tc.Tensor[tc.i64, (-1,)],
                xu8: tc.Tensor[tc.u8, (-1,)], xu16: tc.Tensor[tc.u16, (-1,)],
                xu32: tc.Tensor[tc.u32, (-1,)], xu64: tc.Tensor[tc.u64, (-1,)],
                xf16: tc.Tensor[tc.f16, (-1,)], xbf16: tc.Tensor[tc.bf16, (-1,)],
                xf32: tc.Tensor[tc.f32, (-1,)], xf64: tc.Tensor[tc.f64, (-1,)]):
    acc = tc.zeros((64,), tc.f64)
    for x in (xb, xi8, xi16, xi32, xi64, xu8, xu16, xu32, xu64, xf16, xbf16, xf32, xf64):
        t = tc.load_tile_like(x, z)
        for d in ALL_DTYPES:
            acc = acc + t.astype(d).astype(tc.f64)
    z.store(acc)


@ts.kernel
def reductions(z: tc.MutTensor[tc.f32, (16, 32)], xf16: tc.Tensor[tc.f16, (-1, -1)],
               xbf16: tc.Tensor[tc.bf16, (-1, -1)], xf32: tc.Tensor[tc.f32, (-1, -1)],
               xf64: tc.Tensor[tc.f64, (-1, -1)], xi32: tc.Tensor[tc.i32, (-1, -1)],
               xu8: tc.Tensor[tc.u8, (-1, -1)], xi64: tc.Tensor[tc.i64, (-1, -1)]):
    acc = tc.zeros((16, 32), tc.f32)
    for x in (xf16, xbf16, xf32, xf64, xi32, xu8, xi64):
        t = tc.load_tile_like(x, z)
        for r in (t.sum(0), t.prod(0), t.max(0), t.min(0)):
            acc = acc + r.astype(tc.f32)
        for r in (t.sum(1, keepdims=True), t.max(1, keepdims=True), t.min(1, keepdims=True)):
            acc = acc + r.astype(tc.f32)
        acc = acc + tc.reduce_sum(t).astype(tc.f32)
        acc = acc + tc.cumsum(t, 1).astype(tc.f32) + tc.cumprod(t, 0, reverse=True).astype(tc.f32)
        acc = acc + tc.cumsum(t, 0, reverse=True).astype(tc.f32)
    flags = tc.load_tile_like(xi32, z) > 0
    any_row = tc.reduce_max(flags, 1, keepdims=True)
    all_col = tc.reduce_min(flags, 0)
    z.store(tc.where(any_row & all_col, acc, 0.0))


@ts.kernel
def shapes(z: tc.MutTensor[tc.f32, (8, 16)], x: tc.Tensor[tc.f32, (-1, -1)]):
    t = tc.load_tile_like(x, z)
    u = t.transpose().reshape((16, 8)).permute((1, 0))
    row = tc.arange(16, tc.f32)
    col = tc.expand_dims(tc.arange(8, tc.i64).astype(tc.f32), 1)
    c = tc.full((8, 16), 3, tc.u64).astype(tc.f32) + tc.ones((8, 16), tc.bool_).astype(tc.f32)
    d = tc.constant(-2.5, (1, 16), tc.bf16).astype(tc.f32) + tc.arange(16, tc.u8).astype(tc.f32)
    e = tc.broadcast(tc.reduce_max(t), (8, 16)) + tc.zeros((8, 16), tc.f16).astype(tc.f32)
    z.store(u + row + col + c + d + e)


@ts.kernel
def selection(z: tc.MutTensor[tc.f32, (8, 16)], x: tc.Tensor[tc.f32, (-1, -1)]):
    t = tc.load_tile_like(x, z)
    values, indices = tc.topk(t, 4, axis=1)
    best = tc.argmax(t, 1, keepdims=True) + t.argmin(0)
    swapped = tc.cat((t[:, 8:16], t[:, 0:8]), axis=1)
    pair = tc.cat((values, indices.astype(tc.f32)), 1)[:, None, 0:8]
    z.store(swapped + tc.cat((pair, pair), 1).reshape((8, 16)) + best.astype(tc.f32))


@ts.kernel
def grid3(z: tc.MutTensor[tc.i32, (2, 4, 8)], x: tc.Tensor[tc.i32, (-1, 16, -1)]):
    bx, by, bz = tc.get_tile_block_id()
    nx, ny, nz = tc.get_num_tile_blocks()
    d0, d1, d2 = x.shape
    p = x.partition((2, 4, 8))
    t = p.load((bx, by, bz)) + d0 + d1 + d2 + nx * ny * nz + tc.num_tiles(p, 2)
    t = t + p.load((bx.astype(tc.u32), by.astype(tc.i16), bz.astype(tc.i64)))
    z.store(t + tc.num_tiles(p, 0) * tc.num_tiles(p, 1))


@ts.kernel
def mma_kinds(z: tc.MutTensor[tc.f32, (32, 32)], a8: tc.Tensor[tc.i8, (-1, -1)],
              u8: tc.Tensor[tc.u8, (-1, -1)], bf: tc.Tensor[tc.bf16, (-1, -1)],
              f32: tc.Tensor[tc.f32, (-1, -1)], f64: tc.Tensor[tc.f64, (-1, -1)],
              f16: tc.Tensor[tc.f16, (-1, -1)]):
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((32, 32), tc.f32)
    for x, dt in ((a8, tc.i32), (u8, tc.i32), (bf, tc.f32), (f32, tc.f32), (f64, tc.f64),
                  (f16, tc.f16), (f16, tc.f32)):
        a = x.partition((32, 16)).load((i, 0))
        b = x.partition((16, 32)).load((0, j))
        acc = acc + tc.mma(a, b, tc.zeros((32, 32), dt)).astype(tc.f32)
    acc = acc + (f16.partition((32, 16)).load((i, 0)) @ f16.partition((16, 32)).load((0, j))
                 ).astype(tc.f32)
    z.store(acc)


@ts.kernel
def branches(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int, flag: bool):
    t = tc.load_tile_like(x, z)
    if n > 3:
        y = t * 2.0
        k = n + 1
    else:
        y = t - 1.0
        k = n
    if flag:
        z.store(y)
    else:
        z.store(y + k.astype(tc.f32))
    for i in range(k):
        if i % 2 == 0:
            y = y + 1.0
        z.store(y)
    z.store(z.load() * 2.0)


@ts.kernel
def two_stores(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    a = tc.load_tile_like(x, z)
    b = tc.load_tile_like(x, z, padding=float("inf"))
    z.store(a)
    z.store(z.load() + b)


@ts.kernel
def no_memory(seed: tc.u32):
    tc.print("seed %d", seed)


@ts.kernel
def small_loops(z: tc.MutTensor[tc.i16, (16,)], n: tc.i16, m: tc.u32, scale: float):
    t = tc.zeros((16,), tc.i16)
    for i in range(n):
        t = t + i
    u = tc.zeros((16,), tc.f32)
    for j in range(2, m, 3):
        u = u + j.astype(tc.f32) * scale
    z.store(t + u.astype(tc.i16))


@ts.kernel
def raw_pointers(z: tc.MutTensor[tc.f32, (64,)], p: tc.Ptr[tc.f32], q: tc.Ptr[tc.f32],
                 m: tc.Ptr[tc.bool_], idx: tc.Tensor[tc.i32, (-1,)], n: int):
    off = tc.load_tile_like(idx, z)
    mask = off < n
    v = tc.load_ptr(p, off, mask, padding=-1.0)
    tc.store_ptr(q, off, v * 2.0, mask)
    flags = tc.load_ptr(m, off, mask)
    tc.store_ptr(m, off, ~flags, mask)
    u = tc.load_ptr(p, off.astype(tc.u32)) + tc.load_ptr(p, off.astype(tc.i64))
    s = tc.load_ptr(p, n)
    tc.store_ptr(q, off.astype(tc.i8), u)
    z.store(tc.where(flags, v, u + s))


@ts.kernel
def pointer_atomics(z: tc.MutTensor[tc.i64, (64,)], p: tc.Ptr[tc.i64], q: tc.Ptr[tc.f32],
                    n: int):
    off = tc.arange(64)
    old = tc.atomic_cas_ptr(p, off, 0, off.astype(tc.i64), off < n, padding=-1)
    swapped = tc.atomic_exchange_ptr(q, off.astype(tc.u32), 1.5)
    z.store(old + swapped.astype(tc.i64))


@ts.kernel
def early_exits(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int, step: int,
                m: tc.u8):
    t = tc.load_tile_like(x, z)
    k = 0
    while k < n:                      # a while loop with a store and a break
        k = k + 1
        if k == 4:
            break
        z.store(z.load() + 1.0)
    for j in range(m):                # continue only: a counted for over u8 bounds
        if j == 2:
            continue
        t = t * 2.0
    for i in range(k, n, step):       # a runtime step and a break: a loop carrying the token
        z.store(t + i.astype(tc.f32))
        if i > 6:
            break


@ts.kernel
def gathers(z: tc.MutTensor[tc.f32, (4, 8)], x: tc.Tensor[tc.f32, (-1, 8)],
            flags: tc.Tensor[tc.bool_, (-1,)], rows: tc.Tensor[tc.i64, (-1,)], at: tc.u8):
    i, _, _ = tc.get_tile_block_id()
    r = rows.partition((4,)).load(i, padding=0)                 # a padded partition load
    t = tc.gather(x, r.reshape((4, 1)), tc.arange(8).reshape((1, 8)))  # checked, i64 rows
    f = tc.gather(flags, r, padding=True)                          # bool, padded
    s = tc.gather(x, at, 3)                                        # a scalar, u8 index
    z.store(tc.where(f.reshape((4, 1)), t, s))


@ts.kernel
def debug_random(z: tc.MutTensor[tc.f32, "S"], seed: tc.u32):
    t = tc.rand(seed, tc.arange(128, tc.i32))
    tc.print("t = %f", t)
    tc.assert_(t < 1.0, "below one")
    z.store(t)
    tc.print("after %d %lld", tc.umulhi(seed, 3), tc.full((), 5, tc.i64))


@ts.kernel
def atomics(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
            a: tc.AtomicTensor[tc.f32, (-1, 8)], c: tc.AtomicTensor[tc.u32, (-1,)],
            d: tc.AtomicTensor[tc.i64, (16,)], keep: tc.Tensor[tc.bool_, (-1,)]):
    t = tc.load_tile_like(x, z)
    rows = tc.arange(64, tc.i32)
    a.atomic_add(t.reshape((64, 1)), rows.reshape((64, 1)), tc.arange(8, tc.i64).reshape((1, 8)))
    c.atomic_max(t.astype(tc.u32), rows.astype(tc.u16), mask=tc.load_tile_like(keep, z))
    c.atomic_min(t.astype(tc.u32), rows.astype(tc.u64))
    d.atomic_and(7, 3)
    d.atomic_or(t.astype(tc.i64), rows.astype(tc.i8))
    d.atomic_xor(1, rows)
    z.store(t)


@ts.kernel(unchecked_accesses=True)
def unchecked_add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)


def _ir_vector_add(n=5000):
    return vector_add.ir(vec(n).partition(1024), vec(n), vec(n))


def _ir_gemm():
    return gemm.ir(ts.zeros((200, 136), ts.float16).sync().partition((64, 64)),
                   ts.zeros((200, 100), ts.float16).sync(), ts.zeros((100, 136), ts.float16).sync(),
                   64, 64, 32)


def _ir_persistent():
    z = ts.zeros((70, 50), ts.float32).sync().partition((32, 32)).map((2, 1), 2)
    return persistent_gemm.ir(z, ts.zeros((70, 40), ts.float16).sync(),
                              ts.zeros((40, 50), ts.float16).sync(), 32, 32, 16)


def _ir_mapped(shape, tile, mapping, blocks):
    z = ts.zeros(shape, ts.int32).sync().partition(tile).map(mapping, blocks)
    return mapped_increment.ir(z)


def _ir_all():
    """Kernels covering every op of the registry (with the ones built in the tests)."""
    n = 300
    kernels = {
        "vector_add": _ir_vector_add(),
        "gemm": _ir_gemm(),
        "persistent": _ir_persistent(),
        "mapped1": _ir_mapped((100,), (16,), (1,), 3),
        "mapped3": _ir_mapped((3, 20, 30), (1, 8, 8), (1, 2, 2), 5),
        "softmax": softmax.ir(ts.zeros((64, 1000)).sync().partition((1, 1024)),
                              ts.zeros((64, 1000)).sync(), 1024),
        "paddings": paddings.ir(vec(n).partition(64), vec(n), vec(n, ts.bool_)),
        "arithmetic": arithmetic.ir(vec(n).partition(128), *(vec(n, d) for d in (
            ts.int8, ts.uint16, ts.int32, ts.uint32, ts.int64, ts.uint64, ts.float16,
            ts.bfloat16, ts.float32, ts.float64, ts.bool_))),
        "convert_all": convert_all.ir(vec(n, ts.float64).partition(64),
                                      *(vec(n, d) for d in ALL_DTYPES)),
        "reductions": reductions.ir(ts.zeros((40, 70)).sync().partition((16, 32)), *(
            ts.zeros((40, 70), d).sync() for d in (ts.float16, ts.bfloat16, ts.float32,
                                                    ts.float64, ts.int32, ts.uint8, ts.int64))),
        "shapes": shapes.ir(ts.zeros((20, 40)).sync().partition((8, 16)),
                            ts.zeros((20, 40)).sync()),
        "selection": selection.ir(ts.zeros((20, 40)).sync().partition((8, 16)),
                                  ts.zeros((20, 40)).sync()),
        "grid3": grid3.ir(ts.zeros((5, 16, 20), ts.int32).sync().partition((2, 4, 8)),
                          ts.zeros((5, 16, 20), ts.int32).sync()),
        "mma_kinds": mma_kinds.ir(ts.zeros((64, 64)).sync().partition((32, 32)), *(
            ts.zeros((64, 64), d).sync() for d in (ts.int8, ts.uint8, ts.bfloat16, ts.float32,
                                                    ts.float64, ts.float16))),
        "branches": branches.ir(vec(n).partition(128), vec(n), 5, True),
        "small_loops": small_loops.ir(vec(64, ts.int16).partition(16), 7, 9, 0.5),
        "raw_pointers": raw_pointers.ir(vec(n).partition(64), vec(n), vec(n), vec(n, ts.bool_),
                                        vec(n, ts.int32), 10),
        "pointer_atomics": pointer_atomics.ir(vec(64, ts.int64).partition(64), vec(n, ts.int64),
                                              vec(n), 10),
        "early_exits": early_exits.ir(vec(n).partition(128), vec(n), 10, 3, 5),
        "gathers": gathers.ir(ts.zeros((8, 8)).sync().partition((4, 8)),
                              ts.zeros((20, 8)).sync(), vec(20, ts.bool_),
                              vec(8, ts.int64), 3),
        "debug_random": debug_random.ir(vec(n).partition(128), 5),
        "atomics": atomics.ir(vec(n).partition(64), vec(n), ts.atomic(vec((40, 8))),
                              ts.atomic(vec(70, ts.uint32)), ts.atomic(vec(16, ts.int64)),
                              vec(n, ts.bool_)),
    }
    return kernels


# ---------------------------------------------------------------------------------------------
# registry coverage and the driver's error paths (no tools needed)


def test_every_registry_op_has_a_tileir_lowering():
    import tilesafe.compiler.ops  # noqa: F401 (every op declared)
    missing = [name for name, op in registry.OPS.items() if "tileir" not in op.lowerings]
    assert not missing, f"ops without a Tile IR lowering: {missing}"


def test_the_test_kernels_cover_every_op():
    used = {op.name for ir in _ir_all().values() for op in ir.walk()}
    assert set(registry.OPS) - used == set()


def test_missing_lowering_names_the_op_and_line(monkeypatch):
    ir = _ir_vector_add()
    monkeypatch.delitem(registry.OPS["add"].lowerings, "tileir")
    with pytest.raises(CompileError) as info:
        lower_kernel(ir)
    err = info.value
    assert "op 'add' has no Tile IR lowering" in err.message
    assert err.kernel == "vector_add" and err.location is not None
    assert "z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))" in str(err)


def test_abi_signature():
    assert abi_signature(_ir_vector_add()) == [
        AbiArg("z", "ptr", "ptr"), AbiArg("z", "dim0", "i32"), AbiArg("z", "stride0", "i32"),
        AbiArg("x", "ptr", "ptr"), AbiArg("x", "dim0", "i32"), AbiArg("x", "stride0", "i32"),
        AbiArg("y", "ptr", "ptr"), AbiArg("y", "dim0", "i32"), AbiArg("y", "stride0", "i32")]
    ir = _ir_all()["raw_pointers"]
    assert [tuple(a) for a in abi_signature(ir)] == [
        ("z", "ptr", "ptr"), ("z", "dim0", "i32"), ("z", "stride0", "i32"), ("p", "ptr", "ptr"),
        ("q", "ptr", "ptr"), ("m", "ptr", "ptr"), ("idx", "ptr", "ptr"), ("idx", "dim0", "i32"),
        ("idx", "stride0", "i32"), ("n", "value", "i32")]
    branch = _ir_all()["branches"]
    assert abi_signature(branch)[-2:] == [AbiArg("n", "value", "i32"),
                                          AbiArg("flag", "value", "bool")]
    mapped = _ir_persistent()
    assert [a.component for a in abi_signature(mapped)[:5]] == [
        "ptr", "dim0", "dim1", "stride0", "stride1"]


def test_facts_normalize_and_validate():
    facts = {"x": {"strides_div": [16, 1], "ptr_align": 16, "dims_div": (16, None)}}
    key = normalize_facts(facts)
    assert key == (("x", (("dims_div", (16, None)), ("ptr_align", 16),
                          ("strides_div", (16, 1)))),)
    assert normalize_facts(key) == key and hash(key) == hash(normalize_facts(dict(facts)))
    assert normalize_facts(None) == ()
    ir = _ir_vector_add()
    with pytest.raises(CompileError, match="not a runtime parameter"):
        lower_kernel(ir, facts={"w": {"ptr_align": 16}})
    with pytest.raises(CompileError, match="does not apply"):
        lower_kernel(ir, facts={"x": {"div_by": 16}})
    with pytest.raises(CompileError, match="needs 1 entries"):
        lower_kernel(ir, facts={"x": {"dims_div": (16, 16)}})


def test_bad_hints_are_compile_errors():
    with pytest.raises(CompileError, match="occupancy"):
        lower_kernel(_ir_vector_add(), hints={"sm_90": {"occupancy": 99}})


def test_target_names():
    assert [driver.normalize_target(t) for t in ("sm_90", "sm_90a", "90", 100, (12, 0))] == [
        "sm_90", "sm_90", "sm_90", "sm_100", "sm_120"]
    with pytest.raises(ValueError):
        driver.normalize_target("hopper")


def test_missing_tileiras_gives_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setattr(driver, "_candidates", lambda name: [])
    driver._find_tileiras.cache_clear()
    try:
        with pytest.raises(driver.TileirasNotFound) as info:
            driver.find_tileiras()
        assert "pip install 'tilesafe[gpu]'" in str(info.value)
        with pytest.raises(driver.TileirasNotFound):  # the compile pipeline's assemble stage
            pipeline.compile(_ir_vector_add(), backends.by_name("tileir").ahead_of_time("sm_90"))
    finally:
        driver._find_tileiras.cache_clear()


# ---------------------------------------------------------------------------------------------
# disassembly checks and assembly for sm_90


def test_every_kernel_assembles_for_sm_90(tool, disasm_tool, tmp_path):
    kernels = _ir_all()
    codes = assemble_all(tool, kernels)
    text = {label: disasm(disasm_tool, code, tmp_path, label) for label, code in codes.items()}
    expected = {
        "vector_add": ["get_tile_block_id", "make_tensor_view", "make_partition_view", "addf",
                       "load_view_tko", "store_view_tko", "gdc_wait_tko",
                       "gdc_launch_dependents_tko"],
        "gemm": ["for ", "mmaf", "tile<64x32xf16>", "tile<32x64xf16>", "divi", "ftof"],
        "persistent": ["get_num_tile_blocks", "for ", "mmaf", "mini", "remi", "divi"],
        "softmax": ["padding_value = neg_inf", "reduce", "maxf", "exp", "divf"],
        "paddings": ["padding_value = nan", "padding_value = neg_zero",
                     "padding_value = pos_inf", "tensor_view<?xi8", "trunci"],
        "arithmetic": ["shli", "shri", "xori", "remi", "remf", "fpowf", "rsqrt", "tanh",
                       "maxf", "propagate_nan", "absi", "negi", "cmpf", "cmpi", "floor"],
        "convert_all": ["ftoi", "itof", "exti", "trunci", "ftof", "select"],
        "reductions": ["reduce", "scan", "reverse=true", "ori", "andi", "mulf", "muli"],
        "shapes": ["permute", "reshape", "broadcast", "iota", "constant <bf16: -2.500000e+00>"],
        "selection": ["extract", "cat", "reduce", "select", "cmpf", "cmpi"],
        "grid3": ["get_num_tile_blocks", "tensor_view<?x16x?xi32", "exti", "trunci"],
        "mma_kinds": ["mmai", "mmaf", "tile<32x16xi8>", "tile<32x32xf64>", "tile<32x16xbf16>"],
        "branches": ["if ", "else", "for ", "yield", "continue"],
        "small_loops": ["for unsigned", "exti", "trunci", "tile<i16>"],
        "raw_pointers": ["load_ptr_tko", "store_ptr_tko", "offset", "tile<64xptr<f32>>",
                         "tile<64xptr<i8>>"],
        "pointer_atomics": ["atomic_cas_tko acq_rel device", "atomic_rmw_tko acq_rel device",
                            "xchg", "tile<64xptr<i64>>", "tile<64xptr<f32>>", "select"],
        "early_exits": ["loop iter_values", "break", "continue", "for unsigned", "select",
                        "cmpi greater_than", "store_view_tko"],
        "debug_random": ["mulhii", "print_tko", "assert", "below one", "%lld"],
    }
    for label, snippets in expected.items():
        missing = [s for s in snippets if s not in text[label]]
        assert not missing, f"{label}: missing {missing} in\n{text[label]}"
    assert has_op(text["mapped3"], "remi") and has_op(text["mapped1"], "for")


def test_token_chain_and_shared_loads(tool, disasm_tool, tmp_path):
    """13.4: every access depends on the grid-dependency wait; shared loads take only its token
    (free to reorder among themselves), mutable accesses form one chain starting from it."""
    ir = two_stores.ir(vec(300).partition(128), vec(300))
    code = assemble_all(tool, {"two_stores": ir})["two_stores"]
    ops = memory_ops(disasm(disasm_tool, code, tmp_path))
    (wait, wait_in, gate), (launch, launch_in, _) = ops[0], ops[1]
    assert (wait, wait_in, launch, launch_in) == ("gdc_wait_tko", "", "gdc_launch_dependents_tko",
                                                  gate), ops
    accesses = ops[2:]
    shared = [o for o in accesses if o[1] == gate and o[0] == "load_view_tko"]
    chained = [o for o in accesses if o not in shared]
    assert len(shared) == 2, ops  # the two load_tile_like
    assert not {o[2] for o in shared} & {o[1] for o in ops}, ops  # nothing waits on them
    assert [o[0] for o in chained] == ["store_view_tko", "load_view_tko", "store_view_tko"]
    assert chained[0][1] == gate, ops
    for before, after in zip(chained, chained[1:]):  # each consumes the previous one's token
        assert after[1] == before[2], ops


def test_a_kernel_without_memory_accesses_still_waits(tool, disasm_tool, tmp_path):
    """A programmatic dependent that touches no memory still waits for its predecessor: the
    kernel after it waits only for it, so finishing early would let that one read first."""
    ir = no_memory.ir(np.uint32(3), grid=(2, 1, 1))
    text = disasm(disasm_tool, lower_kernel(ir), tmp_path)
    assert has_op(text, "gdc_wait_tko") and has_op(text, "gdc_launch_dependents_tko"), text
    old = disasm(disasm_tool, lower_kernel(ir, version=(13, 3)), tmp_path, "k13_3")
    assert "gdc_" not in old, old  # (13.3: never launched as a programmatic dependent)


def test_bytecode_13_3_has_no_grid_dependency(tool, disasm_tool, tmp_path):
    """Before 13.4 there is no wait: the chain starts from make_token and shared loads take no
    token, and such a kernel must not be launched as a programmatic dependent."""
    ir = two_stores.ir(vec(300).partition(128), vec(300))
    text = disasm(disasm_tool, lower_kernel(ir, version=(13, 3)), tmp_path)
    ops = memory_ops(text)
    assert has_op(text, "make_token") and not any(o[0].startswith("gdc_") for o in ops), text
    assert [o[0] for o in ops if not o[1]] == ["load_view_tko", "load_view_tko"], ops
    assert waits_for_predecessor((13, 4)) and not waits_for_predecessor((13, 3))


def test_programmatic_launch_false_leaves_the_wait_out(tool, disasm_tool, tmp_path):
    """The hint ``programmatic_launch: False`` lowers a 13.4 kernel without the grid-dependency
    ops, and the launch asks the same question (so it is not launched as a dependent)."""
    plain = ts.kernel(two_stores.fn, hints={"programmatic_launch": False})
    ir = plain.ir(vec(300).partition(128), vec(300))
    text = disasm(disasm_tool, lower_kernel(ir, hints=plain.hints), tmp_path)
    assert has_op(text, "make_token") and "gdc_" not in text, text
    assert not waits_for_predecessor((13, 4), plain.hints)
    assert waits_for_predecessor((13, 4), {"programmatic_launch": True})
    assert waits_for_predecessor((13, 4), {"sm_90": {"occupancy": 2}})


def test_token_is_threaded_through_if_and_for(tool, disasm_tool, tmp_path):
    code = lower_kernel(_ir_all()["branches"])
    text = disasm(disasm_tool, code, tmp_path)
    assert re.search(r"= if .*-> \(.*token\)", text) or "-> (token)" in text, text
    assert re.search(r"= for .*iter_values\(.*token", text, re.S), text
    ops = memory_ops(text)
    assert all(o[1] for o in ops if o[0] == "store_view_tko"), ops


def test_prints_join_the_token_chain_in_program_order(disasm_tool, tmp_path):
    """A program's prints and its mutable accesses form one chain, so they keep their order;
    an assert takes no token. Without debug info the assert's message carries the line."""
    text = disasm(disasm_tool, lower_kernel(_ir_all()["debug_random"], debug=False), tmp_path)
    ops = [o for o in memory_ops(text) if not o[0].startswith("gdc_")]
    assert [o[0] for o in ops] == ["print_tko", "store_view_tko", "print_tko"], ops
    for before, after in zip(ops, ops[1:]):
        assert after[1] == before[2], ops
    assert re.search(r'assert %\w+, "[^"]*test_lowering.py:\d+: kernel \'debug_random\': '
                     r'device assertion failed: below one"', text), text


def test_loops_that_leave_early_thread_the_token(disasm_tool, tmp_path):
    """A for that breaks becomes a Tile IR loop; every exit of a loop whose body stores passes
    the token on, so the stores after the loops wait for the ones inside."""
    text = disasm(disasm_tool, lower_kernel(_ir_all()["early_exits"]), tmp_path)
    assert len(re.findall(r"= loop iter_values\(", text)) == 2, text
    assert re.search(r"= loop iter_values\(.*\) : .*token.* -> .*token", text), text
    breaks = re.findall(r"^\s*break .*$", text, re.M)
    assert len(breaks) >= 3 and all("token" in b for b in breaks), breaks
    continues = re.findall(r"^\s*continue .*$", text, re.M)
    assert any("token" in c for c in continues) and not all("token" in c for c in continues)
    assert re.search(r"= for unsigned .*iter_values", text), text
    ops = memory_ops(text)
    assert all(o[1] for o in ops if o[0] == "store_view_tko"), ops


@ts.kernel
def static_step(z: tc.MutTensor[tc.i32, (8,)], n: int, STEP: tc.Const[int]):
    acc = tc.zeros((8,), tc.i32)
    for i in range(0, n, STEP):
        acc = acc + i
    z.store(acc)


def test_the_forms_of_a_counted_loop(disasm_tool, tmp_path):
    """A step of 1 is Tile IR's for; another compile-time step counts trips (an unsigned
    division, no guard); only a runtime step is guarded (compared with 0)."""
    texts = {}
    for step in (1, 3):
        ir = static_step.ir(vec(8, ts.int32).partition(8), 5, step)
        assert [op.attrs for op in ir.walk() if op.name == "for"] == [{"step": step}]
        texts[step] = disasm(disasm_tool, lower_kernel(ir), tmp_path, f"s{step}")
    assert not any(m in texts[1] for m in ("select", "divi", "greater_than")), texts[1]
    assert "divi" in texts[3] and "unsigned" in texts[3] and "greater_than" not in texts[3]
    assert not has_op(texts[1], "loop") and not has_op(texts[3], "loop")
    runtime = early_exits.ir(vec(300).partition(128), vec(300), 10, 3, 5)
    steps = [op.attrs for op in runtime.walk() if op.name == "for"]
    assert steps == [{"step": 1}, {"runtime_step": True}]


def test_pointer_accesses_are_chained(disasm_tool, tmp_path):
    text = disasm(disasm_tool, lower_kernel(_ir_all()["raw_pointers"]), tmp_path)
    gate = memory_ops(text)[0][2]
    ops = [o for o in memory_ops(text)[2:] if o[0] != "load_view_tko" or o[1] != gate]
    assert ops[0][1] == gate, ops
    assert [o[0] for o in ops] == ["load_ptr_tko", "store_ptr_tko", "load_ptr_tko",
                                   "store_ptr_tko", "load_ptr_tko", "load_ptr_tko",
                                   "load_ptr_tko", "store_ptr_tko", "store_view_tko"]
    for before, after in zip(ops, ops[1:]):
        assert after[1] == before[2], ops


def test_atomics_are_masked_relaxed_device_rmws_in_program_order(disasm_tool, tmp_path):
    text = disasm(disasm_tool, lower_kernel(_ir_all()["atomics"]), tmp_path)
    rmws = [line for line in text.splitlines() if "atomic_rmw_tko" in line]
    modes = [re.search(r"atomic_rmw_tko relaxed device %\w+, (\w+),", line).group(1)
             for line in rmws]
    assert modes == ["addf", "umax", "umin", "and", "or", "xor"]
    for line in rmws:  # every lane masked in bounds
        assert "xi1>" in line or "tile<i1>" in line, line
    # one program's updates happen in its program order (a max then an add of one element
    # is not an add then a max): each atomic takes the token of the mutable access before it,
    # and the MutTensor's store follows the last one
    chain = [o for o in memory_ops(text) if o[0] in ("atomic_rmw_tko", "store_view_tko")]
    assert [o[0] for o in chain] == ["atomic_rmw_tko"] * 6 + ["store_view_tko"]
    for before, after in zip(chain, chain[1:]):
        assert after[1] == before[2], chain
    assert text.count("cmpi less_than") >= 6 and "unsigned" in text


def test_hints_facts_debug_info_and_inbounds(tool, disasm_tool, tmp_path):
    ir = _ir_vector_add()
    facts = {"x": {"ptr_align": 16, "dims_div": (16,), "strides": (1,)},
             "y": {"strides_div": (4,)}}
    code = lower_kernel(ir, hints={"sm_90": {"num_cta_in_cga": 2, "occupancy": 2}},
                        facts=facts)
    text = disasm(disasm_tool, code, tmp_path)
    assert "optimization_hints=<sm_90 = {num_cta_in_cga = 2, occupancy = 2}>" in text
    assert "assume div_by<16>" in text and "assume bounded<0, ?>" in text
    assert "assume div_by<4>" in text and "strides=[1]" in text
    located = subprocess.run([disasm_tool, "-g", str(tmp_path / "k.tileirbc")],
                             capture_output=True, text=True).stdout
    line = vector_add.fn.__code__.co_firstlineno + 3
    assert f'test_lowering.py":{line}:' in located, located
    assert driver.assemble(code, "sm_90", lineinfo=True, tool=tool)[:4] == b"\x7fELF"
    plain = lower_kernel(ir, debug=False)
    assert len(plain) < len(code) and "test_lowering.py" not in disasm(disasm_tool, plain,
                                                                      tmp_path, "plain")
    unchecked = unchecked_add.ir(vec(300).partition(128), vec(300))
    checked_text = disasm(disasm_tool, lower_kernel(ir, debug=False), tmp_path, "c")
    unchecked_text = disasm(disasm_tool, lower_kernel(unchecked, debug=False), tmp_path, "u")
    assert "inbounds" not in checked_text  # all false: bounds-checked (printed only if true)
    assert "inbounds" not in unchecked_text  # unchecked kernels keep edge masking too
    promised = disasm(disasm_tool, lower_kernel(unchecked, debug=False, inbounds=True), tmp_path,
                      "p")
    assert promised.count("inbounds = [true]") == 2


def test_compile_to_cubin_and_tileiras_errors(tool, monkeypatch):
    ir = _ir_vector_add()
    cubin = driver.assemble(lower_kernel(ir, version=(13, 3)), "sm_90", kernel=ir, tool=tool)
    assert cubin[:4] == b"\x7fELF"
    ir = _ir_vector_add()
    broken = lower_kernel(ir)[:-1] + b"\x07"
    with pytest.raises(CompileError) as info:
        driver.assemble(broken, "sm_90", kernel=ir, tool=tool)
    assert "tileiras" in info.value.message and info.value.kernel == "vector_add"
    assert info.value.location == ir.location
    assert tool.release >= (13, 3) and tool.version.startswith(f"{tool.release[0]}.")


def test_env_override_is_searched_first(monkeypatch, tool, tmp_path):
    monkeypatch.setenv("TILESAFE_TILEIRAS", tool.path)
    assert driver._candidates("tileiras")[0] == (tool.path, "TILESAFE_TILEIRAS")
    monkeypatch.setenv("TILESAFE_TILEIRAS", str(tmp_path / "missing"))
    driver._find_tileiras.cache_clear()
    try:
        with pytest.raises(driver.TileirasNotFound, match="TILESAFE_TILEIRAS=.*missing"):
            driver.find_tileiras()
    finally:
        monkeypatch.delenv("TILESAFE_TILEIRAS")
        driver._find_tileiras.cache_clear()


# ---------------------------------------------------------------------------------------------
# lowering semantics on a numpy model of the Tile IR ops
#
# The lowerings of the ops whose semantics are subtle (floor division, modulo, conversions,
# comparisons, the mapped-partition schedule) are run on a tiny numpy model of the Tile IR ops
# they emit (signless integers reinterpreted per ``signedness``, ``divi`` rounding modes,
# ``remi``/``remf`` with the sign of the dividend) and compared with the registry's numpy
# semantics, the interpreter's oracle. This checks the lowering logic, not tileiras.

_NP = {tir.I1: np.bool_, tir.I8: np.int8, tir.I16: np.int16, tir.I32: np.int32,
       tir.I64: np.int64, tir.F16: np.float16, tir.BF16: np.float32, tir.F32: np.float32,
       tir.F64: np.float64}


class _V:
    """A model value: a Tile IR type and a numpy array (signless ints as signed numpy)."""

    def __init__(self, type_, data):
        self.type = type_
        data = np.asarray(data)
        if type_.element == tir.BF16:
            data = tsd.bfloat16.round(data.astype(np.float64)).reshape(data.shape)
        elif type_.element.is_float:
            data = data.astype(_NP[type_.element])
        elif type_.element != tir.I1:
            bits = type_.element.bits
            data = np.asarray((data.astype(object) + (1 << (bits - 1))) % (1 << bits)
                              - (1 << (bits - 1))).astype(_NP[type_.element])
        self.data = np.broadcast_to(data, type_.shape).copy()


def _ints(v, signedness):
    unsigned = signedness == Signedness.UNSIGNED
    return [int(x) % (1 << v.type.element.bits) if unsigned else int(x) for x in v.data.flat]


def _div(a, b, rounding):
    q = abs(a) // abs(b) if b else 0
    exact = b and q * abs(b) == abs(a)
    if (a < 0) != (b < 0) and q:
        q = -q
    if rounding == RoundingMode.NEGATIVE_INF and not exact and (a < 0) != (b < 0):
        q -= 1
    if rounding == RoundingMode.POSITIVE_INF and not exact and (a < 0) == (b < 0):
        q += 1
    return q


class _ModelBuilder:
    """The subset of FunctionBuilder the tested lowerings emit, evaluated with numpy."""

    def _same(self, a, data):
        data = np.array(data, dtype=object) if isinstance(data, list) else np.asarray(data)
        return _V(a.type, data.reshape(a.type.shape))

    def constant(self, data, type_):
        return _V(type_, data)

    def addi(self, a, b, **_):
        return self._same(a, a.data.astype(object) + b.data.astype(object))

    def subi(self, a, b, **_):
        return self._same(a, a.data.astype(object) - b.data.astype(object))

    def muli(self, a, b, **_):
        return self._same(a, a.data.astype(object) * b.data.astype(object))

    def divi(self, a, b, *, signedness, rounding=RoundingMode.ZERO):
        pairs = zip(_ints(a, signedness), _ints(b, signedness))
        return self._same(a, [_div(x, y, rounding) for x, y in pairs])

    def remi(self, a, b, *, signedness):
        pairs = zip(_ints(a, signedness), _ints(b, signedness))
        return self._same(a, [x - _div(x, y, RoundingMode.ZERO) * y if y else 0
                              for x, y in pairs])

    def mini(self, a, b, *, signedness):
        return self._same(a, [min(x, y) for x, y in zip(_ints(a, signedness),
                                                         _ints(b, signedness))])

    def cmpi(self, predicate, a, b, *, signedness):
        ops = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal]
        x = np.array(_ints(a, signedness), dtype=object)
        y = np.array(_ints(b, signedness), dtype=object)
        return _V(a.type.with_element(tir.I1), ops[predicate](x, y).astype(bool)
                  .reshape(a.type.shape))

    def cmpf(self, predicate, a, b, *, ordering=ComparisonOrdering.ORDERED):
        ops = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal]
        with np.errstate(invalid="ignore"):
            if predicate == ComparisonPredicate.NE:
                result = ~np.equal(a.data, b.data)
            else:
                result = ops[predicate](a.data, b.data)
        nan = np.isnan(a.data) | np.isnan(b.data)
        result = (result | nan) if ordering == ComparisonOrdering.UNORDERED else (result & ~nan)
        return _V(a.type.with_element(tir.I1), result)

    def xori(self, a, b):
        return self._same(a, a.data ^ b.data)

    def andi(self, a, b):
        return self._same(a, a.data & b.data)

    def ori(self, a, b):
        return self._same(a, a.data | b.data)

    def select(self, c, a, b):
        return self._same(a, np.where(c.data, a.data, b.data))

    def _float(self, a, fn, *args):
        with np.errstate(all="ignore"):
            return self._same(a, fn(a.data, *(x.data for x in args)))

    def addf(self, a, b, **_):
        return self._float(a, np.add, b)

    def divf(self, a, b, **_):
        return self._float(a, np.true_divide, b)

    def remf(self, a, b):
        return self._float(a, np.fmod, b)

    def floor(self, a):
        return self._float(a, np.floor)

    def ftof(self, a, to, **_):
        return _V(a.type.with_element(to), a.data.astype(np.float64))

    def exti(self, a, to, *, signedness):
        return _V(a.type.with_element(to), np.array(_ints(a, signedness), dtype=object)
                  .reshape(a.type.shape))

    def trunci(self, a, to, **_):
        return _V(a.type.with_element(to), a.data.astype(object))

    def itof(self, a, to, *, signedness, **_):
        return _V(a.type.with_element(to), np.array(_ints(a, signedness), dtype=np.float64)
                  .reshape(a.type.shape))

    def ftoi(self, a, to, *, signedness, **_):
        whole = np.trunc(a.data.astype(np.float64))
        return _V(a.type.with_element(to), np.array([int(x) for x in whole.flat], dtype=object)
                  .reshape(a.type.shape))


class _ModelExit(Exception):
    """A terminator run on the model: ``kind`` is yield, continue or break."""

    def __init__(self, kind, values):
        super().__init__(kind)
        self.kind, self.values = kind, list(values)


class _ModelControlFlow:
    """Tile IR's structured control flow on the model: ``for`` counts ``[lb, ub)`` by a step
    that must be positive (as the spec requires), ``loop`` runs until ``break``; terminators
    raise :class:`_ModelExit` to the region op that owns them."""

    def yield_(self, values=()):
        raise _ModelExit("yield", values)

    def continue_(self, values=()):
        raise _ModelExit("continue", values)

    def break_(self, values=()):
        raise _ModelExit("break", values)

    def if_(self, cond, then_body, else_body=None, *, result_types=()):
        try:
            (then_body if bool(cond.data) else (else_body or self.yield_))()
        except _ModelExit as exit_:
            if exit_.kind != "yield":
                raise
            return exit_.values
        raise AssertionError("an if region without a terminator")

    def for_(self, lb, ub, step, init, body, *, unsigned_compare=False):
        sign = Signedness.UNSIGNED if unsigned_compare else Signedness.SIGNED
        iv, upper, stride = (_ints(v, sign)[0] for v in (lb, ub, step))
        assert stride > 0, f"a Tile IR for with step {stride}"
        values = list(init)
        for _ in range(100_000):
            if iv >= upper:
                return values
            try:
                body(_V(lb.type, iv), *values)
            except _ModelExit as exit_:
                assert exit_.kind == "continue", exit_.kind
                values = exit_.values
            iv = _ints(_V(lb.type, iv + stride), sign)[0]  # wraps, as on the GPU
        raise AssertionError("the for never ends: iv + step wrapped below the bound")

    def loop(self, init, body, *, result_types=()):
        values = list(init)
        for _ in range(100_000):
            try:
                body(*values)
            except _ModelExit as exit_:
                if exit_.kind == "break":
                    return exit_.values
                assert exit_.kind == "continue", exit_.kind
                values = exit_.values
        raise AssertionError("the loop never breaks")


class _ModelWithControlFlow(_ModelControlFlow, _ModelBuilder):
    pass


@ts.kernel
def model_loops(z: tc.MutTensor[tc.i32, (8,)], lb: int, ub: int, step: int, stop: int,
                T: tc.Const[tc.DType], BREAKS: tc.Const[bool], STEP: tc.Const[int]):
    n = 0
    s = tc.zeros((), T)
    for i in range(lb.astype(T), ub.astype(T), step.astype(T) if STEP == 0 else STEP):
        if BREAKS:
            if i == stop:
                break
        n = n + 1
        s = s ^ i
    z.store(tc.full((8,), n) + s.astype(tc.i32))


def _run_model_loop(dtype, breaks, lb, ub, step, stop, constant):
    """Lower a for (its step a runtime value, or the constant ``step``) on the model."""
    ir = model_loops.ir(vec(8, ts.int32).partition(8), 0, 1, 1, 0, dtype, breaks,
                        step if constant else 0)
    (op,) = [op for op in ir.walk() if op.name == "for"]
    assert op.attrs == ({"step": step} if constant else {"runtime_step": True})
    lw = LoweringContext(ir, None, _ModelWithControlFlow(), inbounds=False, debug=False)
    for value, number in zip(op.operands, (lb, ub, step, 0, 0)):
        lw.set(value, _V(tir.TileType(scalar_type(value.type.dtype)), number))
    for param in ir.params:  # the stop value, converted and compared in the body
        if param.name == "stop":
            lw.set(param.value, _V(tir.TileType(tir.I32), stop))
    lw.lower_op(op)
    n, s = (_decode(lw.get(r), r.type.dtype) for r in op.results)
    return int(n), int(s)


LOOP_CASES = [
    (tsd.int32, 2**31 - 10, 2**31 - 1, 4, 0),    # iv + step would overflow past the bound
    (tsd.int32, 2**31 - 10, 2**31 - 1, 4, 2**31 - 6),
    (tsd.int32, -(2**31), -(2**31) + 9, 2**30, 0),
    (tsd.uint32, 2**32 - 10, 2**32 - 1, 4, 0), (tsd.uint32, 2**32 - 10, 2**32 - 1, 4, 2**32 - 6),
    (tsd.int8, 120, 127, 3, 0), (tsd.int8, 120, 127, 3, 123), (tsd.uint8, 250, 255, 2, 0),
    (tsd.int16, -5, 30, 7, 9), (tsd.int64, 2**63 - 7, 2**63 - 1, 5, 0),
    (tsd.int32, 0, 20, 3, 9), (tsd.int32, 5, 5, 1, 0), (tsd.int32, 0, 20, 0, 0),
    (tsd.int32, 0, 20, -3, 0), (tsd.int8, 0, 20, -128, 0), (tsd.int32, 2**31 - 3, 2**31 - 1, 1, 0)]


@pytest.mark.parametrize("dtype,lb,ub,step,stop,constant", [
    case + (constant,) for case in LOOP_CASES for constant in (False, True)
    if case[3] > 0 or not constant])
@pytest.mark.parametrize("breaks", [False, True], ids=["for", "loop"])
def test_loop_trip_counts_on_the_model(dtype, lb, ub, step, stop, constant, breaks):
    """Every lowering of a for (a runtime or constant step; a counted for or, when it breaks,
    a loop) runs exactly Python's range: zero times for a runtime step <= 0, and no iteration
    more near the dtype's limits, where iv + step wraps (Tile IR's for would never end)."""
    got = _run_model_loop(dtype, breaks, lb, ub, step, stop, constant)
    n = s = 0
    for i in (range(lb, ub, step) if step > 0 else ()):
        if breaks and i == stop:
            break
        n, s = n + 1, s ^ i
    assert got == (n, wrap_to(dtype, s)), (got, n, s)


def wrap_to(dtype, v):
    bits = dtype.bits
    v %= 1 << bits
    return v - (1 << bits) if dtype.is_signed and v >= 1 << (bits - 1) else v


def _model_context() -> LoweringContext:
    return LoweringContext(_ir_vector_add(), None, _ModelBuilder(), inbounds=False, debug=False)


def _run_op(name, attrs, arrays, dtypes, result_dtype):
    """Lower op ``name`` on the model and return its result as a numpy array."""
    lw = _model_context()
    shape = arrays[0].shape
    operands = tuple(IRValue(IRTile(d, shape)) for d in dtypes)
    result = IRValue(IRTile(result_dtype, shape))
    for v, d, array in zip(operands, dtypes, arrays):
        lw.set(v, _V(tir.TileType(scalar_type(d), shape), array))
    op = Operation(name, operands, (result,), attrs, None)
    registry.OPS[name].lowerings["tileir"](lw, op)
    return _decode(lw.get(result), result_dtype)


def _decode(v, d):
    if d.is_bool:
        return v.data.astype(bool)
    if d.is_float:
        return d.round(v.data.astype(np.float64))
    bits = d.bits
    values = [int(x) % (1 << bits) for x in v.data.flat]
    if d.is_signed:
        values = [x - (1 << bits) if x >= 1 << (bits - 1) else x for x in values]
    return np.array(values, dtype=d.compute).reshape(v.data.shape)


def _samples(d, rng, n=512):
    if d.is_bool:
        return rng.integers(0, 2, n).astype(bool)
    if d.is_float:
        values = np.concatenate([rng.standard_normal(n - 16) * 8,
                                 [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 7.0, -7.0,
                                  2.5, -2.5, 3.0, -3.0, 1e30, -1e-30, 0.5]])
        return d.round(values)
    info = np.iinfo(d.compute)
    values = rng.integers(int(info.min), int(info.max), n, endpoint=True, dtype=d.compute)
    values[:4] = [info.min, info.max, 0, 1]
    return values


def _reference(name, attrs, arrays):
    with np.errstate(all="ignore"):
        out = registry.OPS[name].evaluate(None, attrs, *arrays)
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", ["floordiv", "mod"])
@pytest.mark.parametrize("dtype", [tsd.int8, tsd.int16, tsd.int32, tsd.int64, tsd.uint8,
                                   tsd.uint32, tsd.uint64, tsd.float16, tsd.bfloat16,
                                   tsd.float32, tsd.float64])
def test_division_semantics_on_the_model(name, dtype):
    rng = np.random.default_rng(7)
    a, b = _samples(dtype, rng), _samples(dtype, rng)[::-1].copy()
    if not dtype.is_float:
        b[b == 0] = 3
        if dtype.is_signed:  # INT_MIN // -1 overflows: unspecified
            b[(a == np.iinfo(dtype.compute).min) & (b == -1)] = 5
    got = _run_op(name, {}, [a, b], [dtype, dtype], dtype)
    want = dtype.round(_reference(name, {}, [a, b]))
    np.testing.assert_array_equal(got, want)
    if dtype.is_float:  # the sign of zero results matters for %
        assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("source", ALL_DTYPES)
def test_conversion_semantics_on_the_model(source):
    rng = np.random.default_rng(3)
    x = _samples(source, rng)
    for target in ALL_DTYPES:
        values = x
        if source.is_float and target.is_int:  # NaN / out-of-range float -> int: unspecified
            info = np.iinfo(target.compute)
            wide = x.astype(np.float64)
            keep = np.isfinite(wide) & (wide > float(info.min) - 1) & (wide < float(info.max))
            values = np.where(keep, x, 0).astype(x.dtype)
        got = _run_op("convert", {"dtype": target}, [values], [source], target)
        want = target.round(_reference("convert", {"dtype": target}, [values]))
        np.testing.assert_array_equal(got, want, err_msg=f"{source} -> {target}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [tsd.int8, tsd.uint16, tsd.uint64, tsd.bool_, tsd.float16,
                                   tsd.float32])
def test_comparison_semantics_on_the_model(dtype):
    rng = np.random.default_rng(5)
    a, b = _samples(dtype, rng), _samples(dtype, rng)[::-1].copy()
    b[:64] = a[:64]
    for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        got = _run_op(name, {}, [a, b], [dtype, dtype], tsd.bool_)
        np.testing.assert_array_equal(got, _reference(name, {}, [a, b]), err_msg=name)
    if not dtype.is_float:
        got = _run_op("invert", {}, [a], [dtype], dtype)
        np.testing.assert_array_equal(got, dtype.round(_reference("invert", {}, [a])))


@pytest.mark.parametrize("tile_shape, map_shape", [
    ((8,), (1,)), ((4, 4), (1, 1)), ((4, 4), (2, 1)), ((4, 4), (3, 2)), ((4, 8), (1, 4)),
    ((1, 4, 4), (1, 2, 3))])
def test_mapped_schedule_on_the_model(tile_shape, map_shape):
    rng = np.random.default_rng(11)
    for _ in range(6):
        dims = [int(rng.integers(1, 60)) for _ in tile_shape]
        grid = tuple(-(-d // t) for d, t in zip(dims, tile_shape))
        lw = _model_context()
        scalar = tir.TileType(tir.I32)
        z = IRValue(MappedPartitionType(tsd.float32, tile_shape, map_shape, "z"))
        lw.set(z, TensorArg("z", tsd.float32, None, [_V(scalar, d) for d in dims],
                            [1] * len(dims)))
        count = IRValue(IRTile(tsd.int32, ()))
        registry.OPS["mapped_count"].lowerings["tileir"](
            lw, Operation("mapped_count", (z,), (count,), {}, None))
        total = int(lw.get(count).data)
        assert total == int(np.prod(grid))
        coords = []
        for tile_id in range(total):
            t, idx = IRValue(IRTile(tsd.int32, ())), IRValue(None)
            lw.set(t, _V(scalar, tile_id))
            registry.OPS["mapped_index"].lowerings["tileir"](
                lw, Operation("mapped_index", (z, t), (idx,), {}, None))
            coords.append(tuple(int(c.data) for c in lw.get(idx)))
        assert coords == [mapped_coords(i, grid, map_shape) for i in range(total)]


@ts.kernel
def hinted_copy(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z, latency=3, allow_tma=False) + z.load(latency=2),
            allow_tma=True)


def test_load_and_store_hints_reach_the_bytecode(disasm_tool, tmp_path):
    ir = hinted_copy.ir(vec(300).partition(128), vec(300))
    hints = {op.name: dict(op.attrs.get("hints", ())) for op in ir.walk()}
    assert hints["load_like"] == {"latency": 3, "allow_tma": False}
    assert hints["mut_load"] == {"latency": 2} and hints["mut_store"] == {"allow_tma": True}
    text = disasm(disasm_tool, lower_kernel(ir, debug=False), tmp_path, "h")
    assert "latency = 3" in text and "allow_tma = false" in text and "allow_tma = true" in text


def test_unknown_or_bad_access_hints_are_compile_errors():
    @ts.kernel
    def bad_latency(z: tc.MutTensor[tc.f32, "S"]):
        z.store(z.load(latency=11))

    @ts.kernel
    def unknown_hint(z: tc.MutTensor[tc.f32, "S"]):
        z.store(z.load(prefetch=True))

    with pytest.raises(ts.CompileError, match="from 1 to 10"):
        bad_latency.ir(vec(8).partition(8))
    with pytest.raises(ts.CompileError, match="prefetch"):
        unknown_hint.ir(vec(8).partition(8))
