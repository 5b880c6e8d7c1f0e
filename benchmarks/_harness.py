"""What every benchmark of the suite shares: tensors allocated by tilesafe and viewed by torch
(one buffer, two names), output poisoning and the float64 check, CUDA-event timing of graph
replays, result rows, CSV, the printed table and the plot.

Method (the device tool's METHOD.md): inputs are fresh random numbers, never zeros; before a
variant is timed its output is poisoned with NaN, it runs once, and the result is checked
against a float64 reference; the timing is the median of many CUDA-event-timed replays of a
CUDA graph holding ``reps`` launches (which removes host launch gaps from the comparison; the
launch path itself is measured by ``execution_modes``). Inputs rotate over several sets when
one set would fit in L2, so small sizes measure memory, not the cache.
"""

from __future__ import annotations

import csv
import datetime
import math
import platform
import random
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

COLUMNS = ("benchmark", "dtype", "size", "variant", "value", "unit", "reference",
           "reference_value", "ratio")
L2_BYTES = 50 * 2**20


@dataclass
class Row:
    """One measured number and its same-run reference (``ratio``: higher is better)."""

    benchmark: str
    dtype: str
    size: str
    variant: str
    value: float
    unit: str
    reference: str = ""
    reference_value: Optional[float] = None
    lower_is_better: bool = False

    @property
    def ratio(self) -> Optional[float]:
        if self.reference_value is None or not self.value or not self.reference_value:
            return None
        if self.lower_is_better:
            return self.reference_value / self.value
        return self.value / self.reference_value

    def as_csv(self) -> dict:
        ratio = self.ratio
        return dict(benchmark=self.benchmark, dtype=self.dtype, size=self.size,
                    variant=self.variant, value=f"{self.value:.6g}", unit=self.unit,
                    reference=self.reference,
                    reference_value="" if self.reference_value is None
                    else f"{self.reference_value:.6g}",
                    ratio="" if ratio is None else f"{ratio:.4f}")


def compare(rows: list, benchmark: str, dtype: str, size: str, unit: str,
            measured: dict, reference: str, variants: Sequence[str]) -> None:
    """Append a row for each of ``variants`` measured, against ``measured[reference]``."""
    ref = measured.get(reference)
    for name in variants:
        if name in measured and name != reference:
            rows.append(Row(benchmark, dtype, size, name, measured[name], unit, reference, ref))


def write_csv(rows: Sequence[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_csv())


def print_table(title: str, rows: Sequence[Row]) -> None:
    """A table of every row: value, reference and ratio."""
    print(f"\n{title}")
    print(f"{'dtype':>6} {'size':>18} {'variant':>24} {'value':>10} {'unit':>7} "
          f"{'reference':>14} {'ref value':>10} {'ratio':>7}")
    for r in rows:
        ratio = r.ratio
        ref = "" if r.reference_value is None else f"{r.reference_value:.4g}"
        print(f"{r.dtype:>6} {r.size:>18} {r.variant:>24} {r.value:>10.4g} {r.unit:>7} "
              f"{r.reference:>14} {ref:>10} {'' if ratio is None else f'{ratio:.3f}':>7}")


def plot(path: Path, title: str, series: dict, xlabel: str, ylabel: str,
         log_x: bool = True) -> None:
    """A line plot of ``series`` ({name: [(x, y), ...]}); skipped without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib not installed: no plot {path.name})")
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, points in series.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", label=name)
    if log_x:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def environment() -> dict:
    """GPU, driver, date and library versions, for the results' README."""
    facts = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "python": platform.python_version()}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip()
        facts["gpu"], facts["driver"] = [s.strip() for s in out.split(",")[:2]]
    except Exception as err:  # noqa: BLE001 (facts are best effort)
        facts["gpu"] = f"unknown ({err})"
    for name in ("torch", "triton", "cuda.tile"):
        try:
            module = __import__(name, fromlist=["__version__"])
            facts[name] = getattr(module, "__version__", "?")
        except Exception:  # noqa: BLE001
            facts[name] = "not installed"
    try:
        from tilesafe.backends.tileir.tileiras import find_tileiras
        facts["tileiras"] = find_tileiras().version
    except Exception as err:  # noqa: BLE001
        facts["tileiras"] = f"not found ({err})"
    return facts


# -- device memory shared by tilesafe and torch ---------------------------------------------

def shared(shape: Sequence[int], dtype: str, device: str) -> tuple[Any, Any]:
    """A tilesafe tensor and a torch view of the same memory (bf16 and the 8-bit floats go
    through their bits: the CUDA array interface describes them as unsigned integers)."""
    import torch

    import tilesafe as ts
    t = ts.empty(tuple(shape), getattr(ts, dtype), device=device).sync()
    view = torch.as_tensor(t, device=device)
    if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        view = view.view(getattr(torch, dtype))
    return t, view


def fill_random(view: Any, generator: Any) -> None:
    """Fresh standard-normal values (never zeros)."""
    import torch
    view.copy_(torch.randn(view.shape, device=view.device, generator=generator,
                           dtype=torch.float32).to(view.dtype))


def poison(view: Any) -> None:
    view.fill_(float("nan"))


def relative_error(result: Any, reference: Any) -> float:
    """‖result − reference‖ / ‖reference‖ in float64; NaN anywhere gives inf."""
    import torch
    r = result.to(torch.float64)
    if not bool(torch.isfinite(r).all()):
        return math.inf
    ref = reference.to(torch.float64)
    return float(torch.linalg.vector_norm(r - ref) / torch.linalg.vector_norm(ref))


# -- timing ---------------------------------------------------------------------------------

def interleaved_ms(runs: dict, stream: Any, *, rounds: int = 21, warmup: int = 2) -> dict:
    """Median, lowest and highest milliseconds of each ``run(mark_end)`` in ``runs``, timed
    with CUDA events on the torch ``stream``. ``run(mark_end)`` enqueues its work on
    ``stream``, calls ``mark_end()`` right after enqueueing it (before any host
    synchronization) and may then synchronize. The variants are timed in
    rounds that run every variant once, in a new random order each round, so that a drift of
    the GPU's clocks (it throttles under sustained matrix work) and the position in a round
    affect all variants alike."""
    import torch
    for run in runs.values():
        for _ in range(warmup):
            run(lambda: None)
    stream.synchronize()
    times: dict = {name: [] for name in runs}
    names, order = list(runs), random.Random(0)
    for _ in range(rounds):
        order.shuffle(names)  # a new order each round: no variant always follows another
        for name in names:
            run = runs[name]
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            run(lambda: end.record(stream))
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: (statistics.median(t), min(t), max(t)) for name, t in times.items()}


def same_machine_code(safe: Any, unchecked: Any, args: tuple) -> bool:
    """Whether the safe and the unchecked kernel compile to the same cubin for ``args`` (then
    safety costs nothing on the device by construction, whatever the timings' noise says)."""
    return safe.compile(*args).cubin == unchecked.compile(*args).cubin


def median_ms(run: Callable[[Callable[[], None]], None], stream: Any, *, warmup: int = 3,
              samples: int = 25) -> float:
    """Median milliseconds of one ``run(mark_end)``, timed with CUDA events on the torch
    ``stream`` (see :func:`interleaved_ms`)."""
    return interleaved_ms({"run": run}, stream, rounds=samples, warmup=warmup)["run"][0]


def torch_graph(stream: Any, body: Callable[[], None]) -> Callable[[Callable[[], None]], None]:
    """Capture ``body`` (torch, Triton or cuTile launches) into a torch CUDA graph; returns a
    ``run(mark_end)`` that replays it."""
    import torch
    body()  # compile and load outside the capture
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            body()
    stream.synchronize()

    def run(mark_end: Callable[[], None]) -> None:
        with torch.cuda.stream(stream):
            graph.replay()
        mark_end()
    # The graph holds raw addresses of what ``body`` uses; keep it (and the tensors it closes
    # over) alive with the graph, or a tensor only it referenced is freed, and the next capture
    # (which empties torch's cache) unmaps the memory the graph still writes.
    run.body = body  # type: ignore[attr-defined]
    return run


def tilesafe_graph(stream: Any, launches: Callable[[], Any]) -> Callable:
    """Record the DeviceOps ``launches()`` yields into a tilesafe CUDA graph on ``stream`` (a
    ts.Stream), each recorded before the next is made (a launch borrows its output until it is
    recorded); returns a ``run(mark_end)`` that replays the graph once and waits."""
    import tilesafe as ts
    with ts.CudaGraph.scope(stream) as graph:
        for op in launches():
            graph.record(op)

    def run(mark_end: Callable[[], None]) -> None:
        graph.launch(stream).then(lambda _: mark_end()).sync_on(stream)
    return run


def repetitions(seconds_each: float, target: float = 2e-3, most: int = 200) -> int:
    """Launches per graph so that one replay takes about ``target`` seconds."""
    return max(1, min(most, round(target / max(seconds_each, 1e-9))))


def standalone(run: Callable[[Path, str, bool], Any], doc: Optional[str], module: str,
               argv: Optional[Sequence[str]] = None) -> int:
    """The command line of one benchmark module run alone (``python -m benchmarks.<module>
    --device cuda:0 --out DIR [--quick]``): ``run(out, device, quick)``."""
    import argparse
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default="benchmarks/results/latest")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run(out, args.device, args.quick)
    return 0
