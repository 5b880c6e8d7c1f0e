"""What the grid-dependency wait (programmatic dependent launch) does to register-heavy kernels:
row softmax (f32, 16384 x 4096) and RMSNorm (f16, 16384 x 4096) at 1, 4 and 16 rows per
program, and ``examples/attention.py`` (f16, 32 heads, S = 4096, d = 128), each compiled with
the wait (the default) and without it (``hints={"programmatic_launch": False}``), against torch
in the same process (CUDA-graph replays, interleaved rounds), with the threads per block and
registers per thread that the GPU compiler chose for each cubin (``cuobjdump -elf``, when the
machine has it). Each variant also runs with the ``occupancy`` hint (2, 4, 8 CTAs per SM).

    python -m benchmarks grid_dependency --device cuda:0 --out DIR
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import tilesafe as ts
import tilesafe.core as tc
from examples.attention import attention

from . import _harness as h

ROWS, COLS = 16384, 4096
HEADS, SEQ, DIM = 32, 4096, 128


def _softmax_fn(z: tc.MutTensor[tc.f32, ("R", "N")], x: tc.Tensor[tc.f32, (-1, -1)]):
    row = tc.load_tile_like(x, z, padding=float("-inf"))
    e = tc.exp(row - tc.reduce_max(row, 1, keepdims=True))
    z.store(e / tc.reduce_sum(e, 1, keepdims=True))


def _rms_fn(z: tc.MutTensor[tc.f16, ("R", "N")], x: tc.Tensor[tc.f16, (-1, -1)],
            w: tc.Tensor[tc.f16, (-1,)], eps: float):
    row = tc.load_tile_like(x, z).astype(tc.f32)
    inv = tc.rsqrt(tc.reduce_sum(row * row, 1, keepdims=True) * (1.0 / N) + eps)  # noqa: F821
    weight = w.partition((N,)).load((0,)).astype(tc.f32)  # noqa: F821
    z.store((row * inv * weight.reshape((1, N))).astype(tc.f16))  # noqa: F821


def resources(cubin: bytes) -> str:
    """``threads=..., regs=...`` of a cubin's kernel (``cuobjdump -elf``), or why not known."""
    tool = shutil.which("cuobjdump") or ("/usr/local/cuda/bin/cuobjdump"
                                         if Path("/usr/local/cuda/bin/cuobjdump").exists()
                                         else None)
    if tool is None:
        return "cuobjdump not found"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-elf", f.name], capture_output=True, text=True).stdout
        usage = subprocess.run([tool, "-res-usage", f.name], capture_output=True,
                               text=True).stdout
    threads = re.search(r"EIATTR_REQNTID\s*\n.*?\n\s*Value:\s*(0x\w+)", text)
    regs = re.search(r"REG:(\d+)", usage)
    spill = re.search(r"STACK:(\d+)", usage)
    return (f"threads={int(threads.group(1), 16) if threads else '?'} "
            f"regs={regs.group(1) if regs else '?'} stack={spill.group(1) if spill else '?'}")


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    import torch
    import torch.nn.functional as F
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    gen = torch.Generator(device=device).manual_seed(3)
    rows: list = []
    notes: list = []
    variants = {"wait": ts.kernel, "no_wait": lambda f: ts.kernel(
        f, hints={"programmatic_launch": False})}
    for occupancy in (2, 4, 8):  # how many CTAs per SM the GPU compiler should plan for
        variants[f"no_wait_occ{occupancy}"] = lambda f, o=occupancy: ts.kernel(
            f, hints={"programmatic_launch": False, "default": {"occupancy": o}})
        variants[f"wait_occ{occupancy}"] = lambda f, o=occupancy: ts.kernel(
            f, hints={"default": {"occupancy": o}})

    def measure(label: str, dtype: str, make, reference, check, bytes_moved: float,
                per_rows: tuple) -> None:
        runs, cubins = {}, {}
        for r in per_rows:
            for vname, build in variants.items():
                kernel, launch, out_view = make(build, r)
                h.poison(out_view)
                launch().sync_on(ts_stream)
                err = check(out_view)
                if not err < 5e-3:
                    raise AssertionError(f"{label} rows={r} {vname}: relative error {err}")
                name = f"{r}_{vname}"
                cubins[name] = next(iter(kernel._executables.values())).cubin
                runs[name] = h.tilesafe_graph(ts_stream, lambda launch=launch: (
                    launch() for _ in range(5)))
        runs["torch"] = h.torch_graph(stream, lambda: [reference() for _ in range(5)])
        timed = h.interleaved_ms(runs, stream, rounds=21)
        ref = bytes_moved * 5 / (timed["torch"][0] * 1e-3) / 1e9
        for name, (ms, _, _) in timed.items():
            if name == "torch":
                continue
            gbs = bytes_moved * 5 / (ms * 1e-3) / 1e9
            res = resources(cubins[name])
            rows.append(h.Row(f"grid_dependency_{label}", dtype, f"rows={name.split('_')[0]}",
                              name.split("_", 1)[1], gbs, "GB/s", "torch", ref))
            notes.append(f"{label} rows/program {name}: {gbs:.0f} GB/s ({gbs / ref:.3f}x "
                         f"torch), {res}")
            print("  " + notes[-1], flush=True)

    x, xv = h.shared((ROWS, COLS), "float32", device)
    h.fill_random(xv, gen)

    def make_softmax(build, r):
        kernel = build(_softmax_fn)
        z, zv = h.shared((ROWS, COLS), "float32", device)
        return kernel, lambda: kernel(ts.borrow_mut(z).partition((r, COLS)), x), zv
    want = torch.softmax(xv, 1)
    measure("softmax", "f32", make_softmax, lambda: torch.softmax(xv, 1),
            lambda zv: h.relative_error(zv, want), 2 * ROWS * COLS * 4,
            (1, 4) if quick else (1, 4, 16))

    a, av = h.shared((ROWS, COLS), "float16", device)
    w, wv = h.shared((COLS,), "float16", device)
    h.fill_random(av, gen)
    h.fill_random(wv, gen)

    def make_rms(build, r):
        kernel = build(_rms_fn)
        z, zv = h.shared((ROWS, COLS), "float16", device)
        return kernel, lambda: kernel(ts.borrow_mut(z).partition((r, COLS)), a, w, 1e-6), zv
    want_rms = F.rms_norm(av.float(), (COLS,), wv.float(), 1e-6)
    measure("rms_norm", "f16", make_rms, lambda: F.rms_norm(av, (COLS,), wv, 1e-6),
            lambda zv: h.relative_error(zv, want_rms), 2 * ROWS * COLS * 2,
            (1, 4) if quick else (1, 4, 16))

    (q, qv), (k, kv), (v, vv) = (h.shared((HEADS, SEQ, DIM), "float16", device)
                                 for _ in range(3))
    for view in (qv, kv, vv):
        h.fill_random(view, gen)
    scale = DIM ** -0.5
    want_att = F.scaled_dot_product_attention(qv[None], kv[None], vv[None], scale=scale)[0]
    runs, cubins = {}, {}
    for vname, build in variants.items():
        kernel = build(attention.fn)
        o, ov = h.shared((HEADS, SEQ, DIM), "float16", device)
        h.poison(ov)

        def launch(kernel=kernel, o=o):
            return kernel(ts.borrow_mut(o).partition((1, 128, DIM)), q, k, v, scale, BN=64)
        launch().sync_on(ts_stream)
        err = h.relative_error(ov, want_att)
        if not err < 5e-3:
            raise AssertionError(f"attention {vname}: relative error {err}")
        cubins[vname] = next(iter(kernel._executables.values())).cubin
        runs[vname] = h.tilesafe_graph(ts_stream, lambda launch=launch: (launch(),))
    runs["sdpa"] = h.torch_graph(stream, lambda: F.scaled_dot_product_attention(
        qv[None], kv[None], vv[None], scale=scale))
    timed = h.interleaved_ms(runs, stream, rounds=21)
    flops = 4 * HEADS * SEQ * SEQ * DIM
    sdpa = flops / (timed["sdpa"][0] * 1e-3) / 1e12
    for vname in variants:
        tf = flops / (timed[vname][0] * 1e-3) / 1e12
        rows.append(h.Row("grid_dependency_attention", "f16", "128x64", vname, tf, "TFLOP/s",
                          "sdpa", sdpa))
        notes.append(f"attention {vname}: {tf:.0f} TFLOP/s ({tf / sdpa:.3f}x SDPA), "
                     f"{resources(cubins[vname])}")
        print("  " + notes[-1], flush=True)
    out.mkdir(parents=True, exist_ok=True)
    h.write_csv(rows, out / "grid_dependency.csv")
    (out / "grid_dependency.txt").write_text("\n".join(notes) + "\n")
    h.print_table("The grid-dependency wait, with and without (same run)", rows)
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "grid_dependency", argv)


if __name__ == "__main__":
    raise SystemExit(main())
