"""Random numbers, ``tc.print`` and ``tc.assert_`` on cuda:0 against the interpreter.

Tolerances (the documented ones): the Philox words, ``randint``, ``rand``, ``uint_to_uniform``
and ``umulhi`` are bit-exact; ``randn`` (float32 log/cos on the GPU) within 1e-5 absolute.
Printing and a failing assertion run in a subprocess each: device printf reaches the process's
stdout when the stream synchronizes, and a device trap leaves the CUDA context unusable, so it
must not poison this process.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc

GPU = "cuda:0"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _out(n, dtype, device):
    value = float("nan") if ts.dtypes.as_dtype(dtype).is_float else 123
    return ts.full(n, value, dtype, device=device).sync()


@ts.kernel
def streams(a: tc.MutTensor[tc.u32, ("B",)], b: tc.MutTensor[tc.u32, ("B",)],
            u: tc.MutTensor[tc.f32, ("B",)], g: tc.MutTensor[tc.f32, ("B",)],
            seed: tc.i64, B: tc.Const[int]):
    offs = tc.arange(B, tc.i64) + (tc.get_tile_block_id()[0] * B).astype(tc.i64) + 2**32 - 4096
    w0, w1, w2, w3 = tc.randint4x(seed, offs)
    a.store(w0 ^ w3)
    b.store(tc.umulhi(w1, w2))
    u.store(tc.rand(seed, offs))
    g.store(tc.randn(seed, offs))


@pytest.mark.parametrize("seed", [0, -1, 2**40 + 3])
def test_random_streams_match_the_interpreter(seed):
    n, block = 1 << 16, 1024
    results = {}
    for device in ("cpu", GPU):
        outs = [_out(n, d, device).partition(block)
                for d in (ts.uint32, ts.uint32, ts.float32, ts.float32)]
        outs = streams(*outs, seed, block).sync()
        results[device] = [o.unpartition().numpy() for o in outs]
    cpu, gpu = results["cpu"], results[GPU]
    np.testing.assert_array_equal(gpu[0], cpu[0])                      # Philox words
    np.testing.assert_array_equal(gpu[1], cpu[1])                      # umulhi
    np.testing.assert_array_equal(gpu[2].view(np.uint32), cpu[2].view(np.uint32))  # rand
    np.testing.assert_allclose(gpu[3], cpu[3], rtol=0, atol=1e-5)      # randn
    assert gpu[2].max() < 1.0 and gpu[2].min() >= 0.0


@ts.kernel
def wide_mulhi(z: tc.MutTensor[tc.u64, ("B",)], x: tc.Tensor[tc.u64, (-1,)],
               y: tc.Tensor[tc.u64, (-1,)], B: tc.Const[int]):
    z.store(tc.umulhi(tc.load_tile_like(x, z), tc.load_tile_like(y, z)))


def test_u64_umulhi_is_exact(rng):
    n = 4096
    xs = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)
    ys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)
    xs[:2], ys[:2] = 2**64 - 1, 2**64 - 1
    z, _, _ = wide_mulhi(_out(n, ts.uint64, GPU).partition(256), ts.tensor(xs, device=GPU),
                         ts.tensor(ys, device=GPU), 256).sync()
    expected = [(int(a) * int(b)) >> 64 for a, b in zip(xs, ys)]
    assert [int(v) for v in z.unpartition().numpy()] == expected


_SCRIPT = """
import sys
import numpy as np
import tilesafe as ts
import tilesafe.core as tc

@ts.kernel
def printer(z: tc.MutTensor[tc.i32, (4,)], scale: float):
    bid = tc.get_tile_block_id()[0]
    t = tc.arange(4, tc.i32) + bid * 4
    tc.print("p%d a %5.2f", bid, t.astype(tc.f32) * scale)
    tc.print("p%d b %x %u %lld %d 100%%", bid, t - 2, (t - 3).astype(tc.i8),
             tc.full((), -2**40, tc.i64), tc.reshape(t, (2, 2)) > 5)
    tc.print("p%d c %.3f", bid, t.astype(tc.f16) * 0.5, end=" <end>\\n")
    z.store(t)

@ts.kernel
def checked(z: tc.MutTensor[tc.f32, (4,)], x: tc.Tensor[tc.f32, (-1,)]):
    t = tc.load_tile_like(x, z)
    tc.assert_(t < 8.0, "boom: x too big")
    z.store(t)

device = sys.argv[2]
if sys.argv[1] == "print":  # one program: on a GPU, programs' prints interleave mid-line
    printer(ts.zeros(4, ts.int32, device=device).sync().partition(4), 0.5).sync()
    sys.stdout.flush()
else:
    x = ts.tensor(np.array([0, 1, 2, 3, 4, 9, 6, 9], np.float32), device=device)
    try:
        checked(ts.zeros(8, ts.float32, device=device).sync().partition(4), x).sync()
    except Exception as err:
        print("raised", type(err).__name__, flush=True)
    else:
        print("no error", flush=True)
"""


def _run(tmp_path, mode, device):
    path = tmp_path / "debug_script.py"
    path.write_text(textwrap.dedent(_SCRIPT))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, str(path), mode, device], capture_output=True,
                          text=True, env=env, timeout=300)


def test_print_text_on_the_gpu_is_the_interpreters(tmp_path):
    cpu, gpu = _run(tmp_path, "print", "cpu"), _run(tmp_path, "print", GPU)
    assert cpu.returncode == 0 and gpu.returncode == 0, (cpu.stderr, gpu.stderr)
    assert ("p0 b [fffffffe, ffffffff, 0, 1] [4294967293, 4294967294, 4294967295, 0] "
            "-1099511627776 [[0, 0], [0, 0]] 100%\n") in cpu.stdout, cpu.stdout
    # one program: its prints come out whole and in program order (several programs'
    # prints interleave on a GPU, even within a line: measured on an H100)
    assert gpu.stdout == cpu.stdout, gpu.stdout


def test_a_failed_assert_traps_with_its_message(tmp_path):
    cpu = _run(tmp_path, "assert", "cpu")
    assert "raised DeviceAssertionError" in cpu.stdout, cpu.stdout + cpu.stderr
    gpu = _run(tmp_path, "assert", GPU)
    assert "raised" in gpu.stdout, gpu.stdout + gpu.stderr
    assert "boom: x too big" in gpu.stdout + gpu.stderr, gpu.stdout + gpu.stderr
