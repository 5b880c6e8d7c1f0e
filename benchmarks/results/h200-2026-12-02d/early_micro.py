"""Trial: the M = 1 GEMV with its weight streamed before the grid-dependency wait.

Three kernels at Qwen3-4B's q/k/v, o and gate/up shapes (bf16, 16 x 256 tiles, occupancy 3),
each timed as a chain of back-to-back launches over weight copies rotated past L2 (a CUDA
graph, programmatic launches), against the copy rate measured in the same process:

- ``gemv_rows``: the library's kernel (the row's chunks loaded in the loop);
- ``x_held``: the row loaded whole before the loop (no TMA) and each chunk taken from it in
  registers, so the loop loads only the weight;
- ``x_held early``: the same, lowered with the weight's loads free of the wait (the trial's
  switch ``TS_EARLY=w_early``, ``early_gate_trial.patch``): its TMA producer streams the
  weight from the program's start, while the previous launch finishes.

Every output is checked against a float64 product. Run with TS_EARLY=w_early.
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tilesafe as ts  # noqa: E402
from tilesafe.kernels import gemv as G  # noqa: E402
from tilesafe.kernel import kernel  # noqa: E402
import early_gemv as E  # noqa: E402

assert os.environ.get("TS_EARLY") == "w_early", "run with TS_EARLY=w_early"
BN, BK, OCC = 16, 256, 3
SHAPES = {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560)}
STREAM_BYTES = 400e6
keep = []


def copy_rate():
    n = 1 << 29
    a = torch.empty(n, dtype=torch.float16, device="cuda"); b = torch.empty_like(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        b.copy_(a)
    best = 1e9
    for _ in range(5):
        s.record(); b.copy_(a); e.record(); e.synchronize(); best = min(best, s.elapsed_time(e) * 1e-3)
    return 4 * n / best


def main():
    rate = copy_rate()
    print(f"copy rate {rate / 1e12:.3f} TB/s", flush=True)
    kernels = {"gemv_rows": kernel(G.gemv_rows.fn, hints={"default": {"occupancy": OCC}}),
               "x_held": kernel(E.gemv_rows_x_held.fn, hints={"default": {"occupancy": OCC}}),
               "x_held early": kernel(E.gemv_rows_x_held_early.fn,
                                      hints={"default": {"occupancy": OCC}})}
    for label, (n, k) in SHAPES.items():
        kc = 1 << (-(-k // BK) - 1).bit_length()
        copies = max(2, int(STREAM_BYTES // (n * k * 2)))
        ws_t = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05 for _ in range(copies)]
        x_t = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        ws = [ts.from_dlpack(w) for w in ws_t]
        x = ts.from_dlpack(x_t)
        xs = x.reshape((k // BK, BK)) if k % BK == 0 else None
        want = (x_t.double() @ ws_t[-1].double().T).cpu().numpy()
        mb = n * k * 2 / 1e6
        results = {}
        for name, kern in kernels.items():
            outs = [ts.zeros((1, n), ts.bfloat16, device="cuda:0").sync() for _ in range(copies)]

            def make(i, kern=kern, name=name, outs=outs):
                part = ts.borrow_mut(outs[i]).partition((1, BN))
                if name == "gemv_rows":
                    return kern(part, x, ws[i], BK=BK, ACC=False)
                return kern(part, xs, ws[i], BK=BK, KC=kc, ACC=False)
            make(copies - 1).sync()
            got = outs[-1].numpy().astype(np.float64)
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            reps = 4
            with ts.CudaGraph.scope() as g:
                for _ in range(reps):
                    for i in range(copies):
                        g.record(make(i))
            g.replay(); torch.cuda.synchronize()
            best = 1e9
            for _ in range(9):
                t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize()
                best = min(best, (time.perf_counter() - t0) / (reps * copies))
            results[name] = best * 1e6
            print(f"{label:8s} {n:6d}x{k:5d} {name:14s} {best * 1e6:7.2f} us  "
                  f"{mb / (best * 1e6) / (rate / 1e12):.3f} of copy  (max rel error {err:.1e})",
                  flush=True)
        print(f"{label:8s} early / library {results['x_held early'] / results['gemv_rows']:.3f}, "
              f"early / x_held {results['x_held early'] / results['x_held']:.3f}", flush=True)
        keep.clear(); del ws_t, ws; torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
