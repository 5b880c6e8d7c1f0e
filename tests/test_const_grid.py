"""``@ts.kernel(const_grid=True)``: the launch grid is compiled in as a constant.

Each grid is its own specialization (a launch can only run the executable compiled for its own
grid); ``get_num_tile_blocks()`` reads constants and the block ids carry their bounds in the
GPU code, so the cubin changes while every result stays exactly what the same kernel without
the option computes."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.backends.tileir import tileiras as driver
from tilesafe.backends.tileir.lower import lower_kernel
from tilesafe.cli import main


def _gemm(z: tc.MutTensor[tc.f32, ("BM", "BN")], x: tc.Tensor[tc.f32, (-1, -1)],
          y: tc.Tensor[tc.f32, (-1, -1)], BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))  # noqa: F821 (bound from z)
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), tc.f32)  # noqa: F821
    for k in range(tc.num_tiles(px, 1)):
        acc = tc.mma(px.load((i, k)), py.load((k, j)), acc)
    z.store(acc)


gemm = ts.kernel(_gemm)
gemm_const = ts.kernel(_gemm, const_grid=True)


def _grid_sum(z: tc.MutTensor[tc.i32, (1, 4)]):
    """Each program writes what it knows of the grid: (x, y, nx, ny)."""
    i, j, _ = tc.get_tile_block_id()
    nx, ny, nz = tc.get_num_tile_blocks()
    z.store(tc.reshape(tc.where(tc.arange(4, tc.i32) == 0, i,
                                tc.where(tc.arange(4, tc.i32) == 1, j,
                                         tc.where(tc.arange(4, tc.i32) == 2, nx, ny * nz))),
                       (1, 4)))


grid_probe = ts.kernel(_grid_sum)
grid_probe_const = ts.kernel(_grid_sum, const_grid=True)


def _operands(m=48, n=40, k=36):
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    return a, b


def _run(kernel, a, b, tiles=(16, 8)):
    z = ts.full((a.shape[0], b.shape[1]), np.nan, device="cpu").sync().partition(tiles)
    z, _, _ = kernel(z, ts.tensor(a, device="cpu"), ts.tensor(b, device="cpu"), BK=8).sync()
    return z.unpartition().numpy()


def test_results_are_exact_and_equal_to_the_dynamic_grid_kernel():
    a, b = _operands()
    got = _run(gemm_const, a, b)
    assert np.array_equal(got, (a.astype(np.float64) @ b).astype(np.float32))
    assert np.array_equal(got, _run(gemm, a, b))


def test_each_grid_is_its_own_specialization():
    a, b = _operands()
    before = gemm_const.compile_count
    _run(gemm_const, a, b, (16, 8))
    _run(gemm_const, a, b, (16, 8))
    assert gemm_const.compile_count <= before + 1  # the same grid: compiled once at most
    counted = gemm_const.compile_count
    _run(gemm_const, a, b, (8, 8))  # another grid: another specialization
    assert gemm_const.compile_count == counted + 1
    z = ts.zeros((48, 40), device="cpu").sync().partition((16, 8))
    x, y = ts.tensor(a, device="cpu"), ts.tensor(b, device="cpu")
    assert gemm_const.ir(z, x, y, BK=8).grid == (3, 5, 1)
    assert gemm.ir(z, x, y, BK=8).grid is None
    assert "grid=[3, 5, 1]" in gemm_const.ir_text(z, x, y, BK=8).splitlines()[0]


def test_the_grid_a_program_reads_is_the_launch_grid():
    for kernel in (grid_probe, grid_probe_const):
        z = ts.zeros((3, 8), ts.int32, device="cpu").sync().partition((1, 4))
        z, = kernel(z).sync()
        got = z.unpartition().numpy().reshape(3, 2, 4)
        for i in range(3):
            for j in range(2):
                assert list(got[i, j]) == [i, j, 3, 2], kernel.name


def test_the_gpu_code_reads_the_grid_as_constants_with_bounded_block_ids(tmp_path):
    tool = driver.find_tileirdisasm()
    if tool is None:
        pytest.skip("tileirdisasm is not installed")
    texts = {}
    for kernel in (grid_probe, grid_probe_const):
        z = ts.zeros((3, 8), ts.int32, device="cpu").sync().partition((1, 4))
        path = tmp_path / f"{kernel.name}{len(texts)}.tileirbc"
        path.write_bytes(lower_kernel(kernel.ir(z)))
        done = subprocess.run([tool, str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        texts[kernel is grid_probe_const] = done.stdout
    assert "get_num_tile_blocks" in texts[False] and "get_num_tile_blocks" not in texts[True]
    assert "bounded" not in re.sub(r"assume bounded<0, \?>.*", "", texts[False])
    assert re.search(r"assume bounded<0, 2>", texts[True])  # x: 3 programs
    assert re.search(r"assume bounded<0, 1>", texts[True])  # y: 2 programs


def _persistent(z: tc.MappedPartitionMut[tc.f16, ("BM", "BN"), (2, 1)],
                x: tc.Tensor[tc.f16, (-1, -1)], y: tc.Tensor[tc.f16, (-1, -1)],
                BK: tc.Const[int]):
    """A persistent GEMM: its tile loop strides by get_num_tile_blocks()."""
    px, py = x.partition((BM, BK)), y.partition((BK, BN))  # noqa: F821 (bound from z)
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)  # noqa: F821
        for k in range(tc.num_tiles(px, 1)):
            acc = tc.mma(px.load((m, k)), py.load((k, n)), acc)
        z.store(acc.astype(tc.f16), idx)


persistent = ts.kernel(_persistent)
persistent_const = ts.kernel(_persistent, const_grid=True)


def _persistent_args(programs=3):
    a, b = (t.astype(np.float16) for t in _operands(64, 48, 40))
    z = ts.full((64, 48), np.nan, ts.float16, device="cpu").sync()
    return (z.partition((16, 16)).map((2, 1), programs), ts.tensor(a, device="cpu"),
            ts.tensor(b, device="cpu"), a, b)


def test_a_persistent_gemm_with_the_grid_compiled_in_is_exact():
    for kernel in (persistent, persistent_const):
        z, x, y, a, b = _persistent_args()
        z, _, _ = kernel(z, x, y, BK=8).sync()
        # small integers: the f32-accumulated f16 product is exact
        assert np.array_equal(z.unpartition().numpy(), (a.astype(np.float64) @ b)), kernel.name


def test_the_cubin_of_a_persistent_gemm_changes():
    try:
        driver.find_tileiras()
    except driver.TileirasNotFound:
        pytest.skip("tileiras is not installed")
    z, x, y, _, _ = _persistent_args()
    dynamic = persistent.compile(z, x, y, BK=8, target="sm_90")
    static = persistent_const.compile(z, x, y, BK=8, target="sm_90")
    assert dynamic[:4] == static[:4] == b"\x7fELF" and dynamic != static


CHECKED = '''
import tilesafe as ts
import tilesafe.core as tc

@ts.kernel(const_grid=True, examples=[{"S": (64,), "grid": (16,)}])
def fixed(z: tc.MutTensor[tc.f32, "S"]):
    z.store(z.load() + 1.0)

@ts.kernel(const_grid=True, examples=[{"S": (64,)}])
def no_grid(z: tc.MutTensor[tc.f32, "S"]):
    z.store(z.load() + 1.0)
'''


def test_tilesafe_check_compiles_the_example_grid_and_asks_for_a_missing_one(tmp_path, capsys):
    path = tmp_path / "grids.py"
    path.write_text(CHECKED)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "ok      fixed (example 1)" in out
    assert "nothing binds launch grid 'grid'" in out and '"grid": (132, 1, 1)' in out
