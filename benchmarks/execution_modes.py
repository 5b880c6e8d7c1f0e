"""Launch-mode sweep (the paper's execution-model experiment): a small element-wise kernel
repeated N times, driven per-op with .sync(), as one chained pipeline with a final sync, awaited
in asyncio, and replayed from a recorded graph. Reports microseconds per op.

Run: ``python benchmarks/execution_modes.py [--device cuda:0] [--out DIR]``. The reference
measured in the same process is torch.add on the same tensors (per op, one sync at the end),
when torch can see the device. Not a test: it prints a table and writes CSV (and a PNG plot if
matplotlib is installed).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import statistics
import time
from pathlib import Path

import numpy as np

import tilesafe as ts
import tilesafe.core as tc

SIZES = (1, 10, 100, 1000)
LENGTH = 2048
COLUMNS = ("benchmark", "dtype", "size", "variant", "value", "unit", "reference",
           "reference_value", "ratio")


@ts.kernel
def add(z: tc.MutTensor[tc.f16, "S"], x: tc.Tensor[tc.f16, (-1,)], y: tc.Tensor[tc.f16, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def _tensors(device):
    rng = np.random.default_rng(0)
    x = ts.tensor(rng.standard_normal(LENGTH).astype(np.float16), device=device).sync()
    y = ts.tensor(rng.standard_normal(LENGTH).astype(np.float16), device=device).sync()
    z = ts.zeros(LENGTH, ts.float16, device=device).sync().partition(LENGTH)
    return z, x, y


def per_op_sync(n, z, x, y):
    for _ in range(n):
        z, x, y = add(z, x, y).sync()


def _chain(n, z, x, y):
    op = add(z, x, y)
    for _ in range(n - 1):
        op = op.then(lambda args: add(*args))
    return op


def chained_sync(n, z, x, y):
    _chain(n, z, x, y).sync()


def awaited_timing(n, z, x, y, repeats):
    """Median seconds of ``await`` on an n-op pipeline, timed inside one running event loop
    (an async host keeps its loop; starting one per pipeline would be measured otherwise)."""
    async def timed():
        await _chain(n, z, x, y)  # warm
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            await _chain(n, z, x, y)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)
    return asyncio.run(timed())


def graph_builder(n, z, x, y):
    with ts.CudaGraph.scope() as graph:
        for _ in range(n):
            graph.record(add(z, x, y))
    return graph


def _time(fn, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _torch_reference(device, n, repeats):
    try:
        import torch
    except ImportError:
        return None
    if device.startswith("cuda") and not torch.cuda.is_available():
        return None
    a = torch.randn(LENGTH, dtype=torch.float16, device=device)
    b = torch.randn(LENGTH, dtype=torch.float16, device=device)
    out = torch.empty_like(a)

    def run():
        for _ in range(n):
            torch.add(a, b, out=out)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    run()
    return _time(run, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default=str(ts.default_device()))
    parser.add_argument("--out", default=None, help="directory for CSV and plot")
    args = parser.parse_args()
    z, x, y = _tensors(args.device)
    rows = []
    per_op_sync(3, z, x, y)  # warm up: compile and load
    modes = {"per_op_sync": per_op_sync, "chained_sync": chained_sync}
    for n in SIZES:
        repeats = 5 if n <= 100 else 3
        ref = _torch_reference(args.device, n, repeats)
        results = {name: _time(lambda: fn(n, z, x, y), repeats) for name, fn in modes.items()}
        results["async"] = awaited_timing(n, z, x, y, repeats)
        graph = graph_builder(n, z, x, y)
        graph.replay()
        results["graph_replay"] = _time(graph.replay, repeats)
        for name, seconds in results.items():
            us = seconds / n * 1e6
            ref_us = ref / n * 1e6 if ref is not None else None
            rows.append(dict(benchmark="execution_modes", dtype="f16", size=n, variant=name,
                             value=f"{us:.3f}", unit="us/op",
                             reference="torch.add" if ref_us else "",
                             reference_value=f"{ref_us:.3f}" if ref_us else "",
                             ratio=f"{ref_us / us:.3f}" if ref_us else ""))
    print(f"execution modes on {args.device} (length {LENGTH}, f16), microseconds per op")
    print(f"{'N':>6} " + " ".join(f"{m:>14}" for m in
                                  ("per_op_sync", "chained_sync", "async", "graph_replay",
                                   "torch.add")))
    for n in SIZES:
        cells = {r["variant"]: r for r in rows if r["size"] == n}
        ref = cells["per_op_sync"]["reference_value"] or "-"
        print(f"{n:>6} " + " ".join(f"{cells[m]['value']:>14}" for m in
                                    ("per_op_sync", "chained_sync", "async", "graph_replay"))
              + f" {ref:>14}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "execution_modes.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(6, 4))
            for mode in ("per_op_sync", "chained_sync", "async", "graph_replay"):
                pts = [(r["size"], float(r["value"])) for r in rows if r["variant"] == mode]
                ax.plot(*zip(*pts), marker="o", label=mode)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("ops per pipeline (N)")
            ax.set_ylabel("us per op")
            ax.set_title(f"tilesafe execution modes ({args.device})")
            ax.legend()
            fig.tight_layout()
            fig.savefig(out / "execution_modes.png", dpi=120)
        except ImportError:
            print("matplotlib not installed: no plot")


if __name__ == "__main__":
    main()
