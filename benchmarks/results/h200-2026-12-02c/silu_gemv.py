"""The down projection's GEMV with its SwiGLU gating computed per K chunk (the library's
``gemv_rows_silu_mul``: IEEE division, exponential with subnormal handling) against the same
kernel with the gating's division fast and subnormals flushed (``silu_variant.py``), and
against the plain GEMV of the same weight on a stored activation row (``gemv_rows``): the
gating's share of the GEMV's time. Qwen3-4B's shape (2560 x 9728, bf16), several weight
copies rotated past L2, graph replays, one process.

    python benchmarks/results/h200-2026-12-02c/silu_gemv.py
"""
import importlib
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import tilesafe as ts  # noqa: E402
from tilesafe.kernel import kernel  # noqa: E402
from benchmarks import _harness as h  # noqa: E402
import silu_variant as SV  # noqa: E402

G = importlib.import_module("tilesafe.kernels.gemv")


def main():
    import torch
    device = "cuda:0"
    n, k, sets, reps = 2560, 9728, 8, 50
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    ws = [ts.randn((n, k), dtype=ts.bfloat16, seed=i, device=device).sync() for i in range(sets)]
    x = ts.randn((1, 2 * k), dtype=ts.bfloat16, seed=99, device=device).sync()
    row = ts.randn((1, k), dtype=ts.bfloat16, seed=98, device=device).sync()
    outs = {}
    runs = {}
    for bn, bk, occ in ((16, 512, 2), (8, 512, 4), (16, 256, 3)):
        variants = {
            "library silu": (G.with_occupancy(G.gemv_rows_silu_mul, {"occupancy": occ}), "silu"),
            "fast silu": (kernel(SV.fast_gemv_rows_silu_mul.fn,
                                 hints={"default": {"occupancy": occ}}), "silu"),
            "no silu (gemv_rows)": (G.with_occupancy(G.gemv_rows, {"occupancy": occ}), "rows")}
        for name, (kern, form) in variants.items():
            label = f"{name} {bn}x{bk} occ{occ}"
            out = outs[label] = ts.zeros((1, n), ts.bfloat16, device=device).sync()

            def launch(i, kern=kern, form=form, out=out, bn=bn, bk=bk):
                part = ts.borrow_mut(out).partition((1, bn))
                if form == "silu":
                    return kern(part, x[:, :k], x[:, k:], ws[i % sets], BK=bk, ACC=False)
                return kern(part, row, ws[i % sets], BK=bk, ACC=False)
            launch(0).sync_on(ts_stream)
            runs[label] = h.tilesafe_graph(ts_stream, lambda f=launch: (f(i) for i in range(reps)))
    srcs = [torch.empty(n * k, dtype=torch.bfloat16, device=device) for _ in range(sets)]
    dsts = [torch.empty_like(s) for s in srcs]

    def copy_body():
        for i in range(reps):
            dsts[i % sets].copy_(srcs[i % sets])
    runs["copy"] = h.torch_graph(stream, copy_body)
    timed = h.interleaved_ms(runs, stream, rounds=21)
    weight = n * k * 2
    copy_us = timed["copy"][0] * 1e3 / reps
    print(f"copy of the weight's bytes (read + write): {copy_us:.2f} us, "
          f"{2 * weight / copy_us / 1e3:.0f} GB/s")
    for label, t in timed.items():
        if label != "copy":
            us = t[0] * 1e3 / reps
            print(f"{label}: {us:.2f} us, {weight / us / 1e3:.0f} GB/s of weight "
                  f"({weight / us / (2 * weight / copy_us):.3f} of copy)")
    a = outs["library silu 16x512 occ2"].numpy().astype(np.float64)
    b = outs["fast silu 16x512 occ2"].numpy().astype(np.float64)
    print("fast vs library outputs: equal", float(np.mean(a == b)),
          "max rel diff", float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-3))))


if __name__ == "__main__":
    main()
