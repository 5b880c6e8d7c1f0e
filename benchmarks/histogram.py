"""Histogram of 2^24 int32 values into 256 and 4096 bins: tilesafe's atomic-tensor kernels
(``examples/histogram.py``: ``atomic``, one atomic add per value straight into the bins, and
``onehot``, each program counting its tile per bin first and adding one count per bin) against
``torch.bincount`` and torch's own atomic scatter (``scatter_add_`` of ones), measured in the
same process on the same input.

Every variant produces a fresh histogram per run: the tilesafe kernels and ``scatter_add_``
zero their output first (a memset on the same stream, inside the timing), ``torch.bincount``
allocates a zeroed one. ``torch.bincount`` also reads the input's maximum back to the host (a
synchronization), inside its timing as a user sees it; it cannot be captured in a CUDA graph,
so every variant is timed per run (CUDA events, median of interleaved rounds: see
``_harness.interleaved_ms``), launch included. Before timing, each variant's histogram is
checked equal to ``torch.bincount``'s. Throughput counts input elements per second.

Tile sizes are chosen per bin count by a small search (``histogram_search.csv``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tilesafe as ts
from examples.histogram import histogram, histogram_onehot

from . import _harness as h

N = 1 << 24
BINS = (256, 4096)
ATOMIC_TILES = (1024, 4096)
#: onehot tiles per bin count: a (tile, bins) comparison per program, 2^16 to 2^17 lanes
ONEHOT_TILES = {256: (256, 512), 4096: (16, 32)}
VARIANTS = ("atomic", "onehot", "torch.bincount", "torch.scatter_add")


class _Problem:
    """The input (shared by tilesafe and torch), its int64 copy for ``scatter_add_``, and one
    output per variant."""

    def __init__(self, n: int, bins: int, device: str, generator: Any):
        import torch
        self.n, self.bins, self.device = n, bins, device
        self.x, self.xv = h.shared((n,), "int32", device)
        self.xv.copy_(torch.randint(0, bins, (n,), device=device, generator=generator,
                                    dtype=torch.int32))
        self.x64 = self.xv.long()
        self.ones = torch.ones(n, dtype=torch.int32, device=device)
        self.expected = torch.bincount(self.xv, minlength=bins).to(torch.int32)
        self.outputs: dict = {}
        torch.cuda.synchronize()  # filled on the default stream; measured on another

    def output(self, name: str) -> tuple:
        if name not in self.outputs:
            self.outputs[name] = h.shared((self.bins,), "int32", self.device)
        return self.outputs[name]

    def check(self, name: str, counts: Any) -> None:
        import torch
        if not torch.equal(counts.to(torch.int32), self.expected):
            wrong = int((counts.to(torch.int32) != self.expected).sum())
            raise AssertionError(f"histogram {name} (n={self.n}, bins={self.bins}): {wrong} "
                                 "bins differ from torch.bincount")


def _tilesafe_run(problem: _Problem, kernel: Any, tile: int, ts_stream: Any, stream: Any,
                  slot: str) -> Any:
    """Check the kernel with ``tile`` on its own output, then return a ``run(mark_end)`` that
    zeroes the output and launches once."""
    import torch
    hist, view = problem.output(slot)
    borrow = ts.atomic(hist)  # one borrow for every launch: the launch plan is reused
    grid = (-(-problem.n // tile),)
    with torch.cuda.stream(stream):
        view.zero_()
    kernel(borrow, problem.x, tile, grid=grid).sync_on(ts_stream)
    problem.check(f"{slot} tile={tile}", view)

    def run(mark_end):
        with torch.cuda.stream(stream):
            view.zero_()
        kernel(borrow, problem.x, tile, grid=grid).then(lambda _: mark_end()).sync_on(ts_stream)
    return run


def _torch_runs(problem: _Problem, stream: Any) -> dict:
    import torch
    _, scattered = problem.output("torch.scatter_add")

    def bincount(mark_end):
        with torch.cuda.stream(stream):
            problem.outputs["bincount"] = torch.bincount(problem.xv, minlength=problem.bins)
        mark_end()

    def scatter_add(mark_end):
        with torch.cuda.stream(stream):
            scattered.zero_()
            scattered.scatter_add_(0, problem.x64, problem.ones)
        mark_end()

    for name, run in (("torch.bincount", bincount), ("torch.scatter_add", scatter_add)):
        run(lambda: None)
        stream.synchronize()
        problem.check(name, problem.outputs["bincount"] if name == "torch.bincount"
                      else scattered)
    return {"torch.bincount": bincount, "torch.scatter_add": scatter_add}


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    """Measure both bin counts; write histogram.csv and histogram_search.csv."""
    import torch
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    generator = torch.Generator(device=device).manual_seed(0)
    rows: list = []
    search_rows: list = []
    skipped: dict = {}
    samples = 5 if quick else 9
    for bins in BINS:
        problem = _Problem(N, bins, device, generator)
        size = f"n=2^24,bins={bins}"
        runs = _torch_runs(problem, stream)
        bincount_ms = h.median_ms(runs["torch.bincount"], stream, samples=samples)
        for variant, kernel, tiles in (("atomic", histogram, ATOMIC_TILES),
                                       ("onehot", histogram_onehot, ONEHOT_TILES[bins])):
            best = None
            for tile in tiles:
                label = f"{variant} tile={tile}"
                try:
                    candidate = _tilesafe_run(problem, kernel, tile, ts_stream, stream,
                                              f"{variant}/{tile}")
                except Exception as err:  # noqa: BLE001 (recorded; the search goes on)
                    skipped[f"{label} bins={bins}"] = f"{type(err).__name__}: {err}"[:300]
                    continue
                t = h.median_ms(candidate, stream, samples=samples)
                search_rows.append(h.Row("histogram_search", "i32", size, label, N / t / 1e6,
                                         "Gelem/s", "torch.bincount", N / bincount_ms / 1e6))
                if best is None or t < best[0]:
                    best = (t, tile, candidate)
            if best is not None:
                runs[variant] = best[2]
                rows.append(h.Row("histogram_config", "i32", size, f"{variant} tile={best[1]}",
                                  N / best[0] / 1e6, "Gelem/s"))
        timed = h.interleaved_ms(runs, stream, rounds=11 if quick else 21)
        gelems = {k: N / v[0] / 1e6 for k, v in timed.items()}
        spread = {k: (v[2] - v[1]) / v[0] for k, v in timed.items()}
        h.compare(rows, "histogram", "i32", size, "Gelem/s", gelems, "torch.bincount",
                  VARIANTS)
        h.compare(rows, "histogram", "i32", size, "Gelem/s", gelems, "torch.scatter_add",
                  ("atomic", "onehot"))
        print(f"  bins={bins}: " + ", ".join(f"{k} {v:.1f} Gelem/s ({timed[k][0] * 1e3:.0f} us)"
                                             for k, v in gelems.items())
              + "; spread (max-min)/median: "
              + ", ".join(f"{k} {v:.1%}" for k, v in spread.items()), flush=True)
        del problem, runs
        torch.cuda.empty_cache()
    for name, why in skipped.items():
        print(f"  (config {name} skipped: {why})")
    h.print_table("histogram (Gelem/s, higher is better)", rows)
    h.write_csv(rows, out / "histogram.csv")
    h.write_csv(search_rows, out / "histogram_search.csv")
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "histogram", argv)


if __name__ == "__main__":
    raise SystemExit(main())
