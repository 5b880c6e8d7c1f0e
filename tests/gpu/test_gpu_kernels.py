"""Kernels on cuda:0 agree with the interpreter and with float64 references; outputs are
poisoned before every checked run. Tolerances: integer and element-wise f32 results bit-exact;
f16/bf16 mma with f32 accumulation <= 1e-2 relative to float64; f32 reductions <= 1e-5."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc

GPU = "cuda:0"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _example(name):
    spec = importlib.util.spec_from_file_location(f"gpu_example_{name}",
                                                  ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def poisoned(shape, dtype=ts.float32, device=GPU):
    value = float("nan") if ts.dtypes.as_dtype(dtype).is_float else -123
    return ts.full(shape, value, dtype, device=device).sync()


def run_both(kernel, make_args):
    """Run ``kernel`` on cpu and on the GPU with the same inputs; return both outputs."""
    outs = []
    for device in ("cpu", GPU):
        results = kernel(*make_args(device)).sync()
        outs.append(results[0].unpartition().numpy())
    return outs


@ts.kernel
def add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


@pytest.mark.parametrize("n,tile", [(1 << 20, 1024), (1000, 256), (7, 8)])
def test_vector_add_bit_exact(rng, n, tile):
    xs, ys = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    z, x, y = add(poisoned(n).partition(tile), ts.tensor(xs, device=GPU),
                  ts.tensor(ys, device=GPU)).sync()
    assert np.array_equal(z.unpartition().numpy(), xs + ys)


@ts.kernel
def int_ops(z: tc.MutTensor[tc.i32, "S"], x: tc.Tensor[tc.i32, (-1, -1)],
            y: tc.Tensor[tc.i32, (-1, -1)]):
    a, b = tc.load_tile_like(x, z), tc.load_tile_like(y, z)
    safe_b = tc.where(b == 0, 1, b)
    z.store(a * b + (a // safe_b) - (a % safe_b) + (a >> 3) + tc.maximum(a, b) + (a ^ b)
            + tc.reduce_sum(a, 1, keepdims=True))


def test_integer_ops_match_the_interpreter_bit_for_bit(rng):
    xs = rng.integers(-2**31, 2**31 - 1, size=(37, 50), dtype=np.int32)
    ys = rng.integers(-1000, 1000, size=(37, 50), dtype=np.int32)

    def args(device):
        return (ts.zeros((37, 50), ts.int32, device=device).sync().partition((16, 64)),
                ts.tensor(xs, device=device), ts.tensor(ys, device=device))
    cpu, gpu = run_both(int_ops, args)
    assert np.array_equal(cpu, gpu)


@ts.kernel
def elementwise_f32(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1, -1)]):
    a = tc.load_tile_like(x, z)
    z.store(tc.where(a > 0, a * 3.0 - 1.5, a / 7.0) + tc.sqrt(tc.abs(a)) + tc.floor(a)
            + a.astype(tc.f16).astype(tc.f32) + a.astype(tc.i32).astype(tc.f32))


def test_elementwise_f32_bit_exact(rng):
    xs = (rng.standard_normal((64, 96)) * 100).astype(np.float32)

    def args(device):
        return (ts.zeros((64, 96), device=device).sync().partition((32, 32)),
                ts.tensor(xs, device=device))
    cpu, gpu = run_both(elementwise_f32, args)
    assert np.array_equal(cpu, gpu)


@pytest.mark.parametrize("dtype", [ts.float16, ts.bfloat16])
@pytest.mark.parametrize("m,n,k", [(256, 256, 256), (200, 136, 100)])
def test_tiled_gemm_low_precision(rng, dtype, m, n, k):
    gemm = _example("gemm").gemm
    a = ts.tensor(rng.standard_normal((m, k)), dtype=dtype, device=GPU).sync()
    b = ts.tensor(rng.standard_normal((k, n)), dtype=dtype, device=GPU).sync()
    z, _, _ = gemm(poisoned((m, n), dtype).partition((64, 64)), a, b, BK=32).sync()
    out = z.unpartition().numpy().astype(np.float64)
    ref = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(300, 200, 130), (512, 512, 512)])
def test_persistent_gemm_non_divisible(rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    persistent_gemm = _example("persistent_gemm").persistent_gemm
    z = poisoned((m, n), ts.float16).partition((64, 64)).map((4, 1), 7)
    out, _, _ = persistent_gemm(z, ts.tensor(a, device=GPU), ts.tensor(b, device=GPU),
                                BK=32).sync()
    got = out.unpartition().numpy().astype(np.float64)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert not np.isnan(got).any()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-2


def test_softmax_rows(rng):
    module = _example("softmax")
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    z, _ = module.softmax(poisoned((64, 1000)).partition((1, 1024)),
                          ts.tensor(x, device=GPU)).sync()
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(z.unpartition().numpy(), ref, rtol=1e-5, atol=1e-6)


def test_torch_dlpack_round_trip_shares_memory():
    torch = pytest.importorskip("torch")
    t = torch.arange(16, dtype=torch.float32, device="cuda")
    mine = ts.from_dlpack(t)
    assert mine.device.name == GPU
    t[3] = 100.0
    torch.cuda.synchronize()
    assert mine.numpy()[3] == 100.0
    back = torch.from_dlpack(mine)
    back[5] = -1.0
    torch.cuda.synchronize()
    assert t[5].item() == -1.0 and mine.numpy()[5] == -1.0
    z, _, _ = add(ts.borrow_mut(mine).partition(8), ts.tensor(np.ones(16, np.float32),
                                                               device=GPU),
                  ts.tensor(np.ones(16, np.float32), device=GPU)).sync()
    torch.cuda.synchronize()
    assert t[0].item() == 2.0


def test_ownership_rules_hold_on_cuda():
    t = ts.zeros(64, device=GPU).sync()
    op = add(ts.borrow_mut(t).partition(16), ts.ones(64, device=GPU).sync(),
             ts.ones(64, device=GPU).sync())
    with pytest.raises(ts.BorrowError):
        t.numpy()
    op.sync()
    assert np.array_equal(t.numpy(), np.full(64, 2.0))
    with pytest.raises(ts.AliasingError):
        add(ts.borrow_mut(t[0:32]).partition(16), t[16:48], t[32:64])
    with pytest.raises(ts.ArgumentError, match="different devices"):
        add(ts.borrow_mut(t).partition(16), ts.ones(64, device="cpu").sync(),
            ts.ones(64, device="cpu").sync())


def test_disk_cache_second_process_compiles_nothing(tmp_path):
    script = (
        "import numpy as np, tilesafe as ts, tilesafe.core as tc\n"
        "@ts.kernel\n"
        "def inc(z: tc.MutTensor[tc.f32, 'S']):\n"
        "    z.store(z.load() + 1.0)\n"
        "z, = inc(ts.zeros(100, device='cuda:0').sync().partition(64)).sync()\n"
        "assert np.array_equal(z.unpartition().numpy(), np.ones(100))\n"
        "print('compiles', inc.compile_count)\n")
    path = tmp_path / "k.py"
    path.write_text(script)
    env = dict(__import__("os").environ, TILESAFE_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                           env=env, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert "compiles 1" in runs[0].stdout and "compiles 0" in runs[1].stdout
    for entry in (tmp_path / "cache").glob("*.cubin"):
        entry.write_bytes(entry.read_bytes()[:-10] + b"corrupted!")
    third = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                           env=env, timeout=300)
    assert third.returncode == 0, third.stderr
    assert "compiles 1" in third.stdout


def test_const_grid_persistent_gemm_is_exact_and_bitwise_equal_to_the_dynamic_grid(rng):
    """The grid compiled in (const_grid=True) changes the cubin, not the results: the same
    persistent GEMM with and without it agree bit for bit, and with the float64 reference."""
    module = _example("persistent_gemm")
    static = ts.kernel(module.persistent_gemm.fn, const_grid=True)
    a = rng.integers(-3, 4, (300, 130)).astype(np.float16)  # small ints: the f32 sums are exact
    b = rng.integers(-3, 4, (130, 200)).astype(np.float16)
    x, y = ts.tensor(a, device=GPU).sync(), ts.tensor(b, device=GPU).sync()
    outs = []
    for kernel in (module.persistent_gemm, static):
        z = poisoned((300, 200), ts.float16).partition((64, 64)).map((4, 1), 7)
        z, x, y = kernel(z, x, y, BK=32).sync()
        outs.append(z.unpartition().numpy())
    assert np.array_equal(outs[0], outs[1])
    assert np.array_equal(outs[1].astype(np.float64), a.astype(np.float64) @ b)
    z = poisoned((300, 200), ts.float16).partition((64, 64)).map((4, 1), 7)
    cubins = [k.compile(z, x, y, BK=32, target="sm_90") for k in (module.persistent_gemm, static)]
    assert cubins[0] != cubins[1]
