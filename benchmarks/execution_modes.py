"""Launch-mode sweep (the paper's execution-model experiment): a small element-wise kernel
repeated N times, driven per-op with .sync(), as one chained pipeline with a final sync, awaited
in asyncio, and replayed from a recorded graph. Reports microseconds per op.

Run: ``python -m benchmarks modes [--device cuda:0] [--out DIR]`` (or this file as a script).
Each mode has a same-process torch reference on tensors of the same size: per-op sync against
torch.add followed by a device synchronize, chained and async against N torch.add calls and one
synchronize, graph replay against a torch CUDA graph of N torch.add calls. At N=1000 the graph
is also timed with CUDA events in interleaved rounds, launched as programmatic dependents (the
default) and fully serialized, against torch's graph. On the cpu device there is no torch
reference. Not a test: it prints a table and writes CSV and a PNG plot.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import tilesafe as ts
import tilesafe.core as tc

if __package__ in (None, ""):  # run as a script: make the suite's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import _harness as h  # noqa: E402

SIZES = (1, 10, 100, 1000)
LENGTH = 2048
MODES = ("per_op_sync", "chained_sync", "async", "graph_replay")


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


def _torch_references(device, n, repeats):
    """Seconds per pipeline of n torch.add calls, for each mode (None without torch/cuda)."""
    try:
        import torch
    except ImportError:
        return None
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    a = torch.randn(LENGTH, dtype=torch.float16, device=device)
    b = torch.randn(LENGTH, dtype=torch.float16, device=device)
    out = torch.empty_like(a)

    def per_op():
        for _ in range(n):
            torch.add(a, b, out=out)
            torch.cuda.synchronize()

    def chained():
        for _ in range(n):
            torch.add(a, b, out=out)
        torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    chained()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(n):
            torch.add(a, b, out=out)

    def replay():
        graph.replay()
        torch.cuda.synchronize()
    per_op(), replay()
    chain_s = _time(chained, repeats)
    return {"per_op_sync": _time(per_op, repeats), "chained_sync": chain_s, "async": chain_s,
            "graph_replay": _time(replay, repeats)}


def _driver_floor(z, x, y, results_at_1000: dict) -> list:
    """What the driver alone costs on this host: the kernel's packed launch (the one tilesafe
    enqueues) called in a bare loop, with one synchronize at the end and with one after each
    launch, through the compiled launcher (when built) and through cuda.bindings. The
    difference to the modes is tilesafe's host work per launch."""
    from tilesafe.driver.stream import next_stream
    from tilesafe.driver import cuda
    add(z, x, y).sync()
    packed = next(p.bound for p in add._plans.values() if p.bound is not None)
    stream = next_stream(x.device)
    handle, n = stream.native_address, SIZES[-1]

    def chained():
        for _ in range(n):
            cuda.launch_packed(handle, packed)
        cuda.synchronize(handle)

    def per_op():
        for _ in range(n):
            cuda.launch_packed(handle, packed)
            cuda.synchronize(handle)
    rows = []
    for native in (False, True):
        if cuda.use_native_launcher(native) != native:
            continue  # the compiled launcher was not built
        via = "native launcher" if native else "cuda.bindings"
        floors = {"chained_sync": _time(chained, 3) / n * 1e6,
                  "per_op_sync": _time(per_op, 3) / n * 1e6}
        print(f"driver floor at N={n} via {via}: bare launches "
              f"{floors['chained_sync']:.3f} us/op, launch+sync {floors['per_op_sync']:.3f} us/op")
        if native:  # the native wait polls the stream before blocking: the same without it
            from tilesafe.driver import _launcher
            polled = _launcher.poll(0)
            blocking = _time(per_op, 3) / n * 1e6
            _launcher.poll(polled)
            print(f"  launch+sync with the driver's blocking wait alone: {blocking:.3f} us/op")
        rows += [h.Row("execution_modes", "f16", str(n), mode, results_at_1000[mode], "us/op",
                       f"bare launch{'+sync' if mode == 'per_op_sync' else ''} via {via}",
                       floors[mode], lower_is_better=True) for mode in floors]
    cuda.use_native_launcher(True)
    return rows


def _graph_launch_order(z, x, y) -> list:
    """Graph replay at N=1000 with the kernels launched as programmatic dependents (the
    default: each may start while its predecessor finishes, and waits for it before touching
    memory) against the same graph captured with fully serialized launches, and torch's CUDA
    graph: CUDA-event medians over interleaved rounds in one process."""
    import torch
    n = SIZES[-1]
    torch_stream = torch.cuda.Stream()
    stream = ts.Stream.wrap(torch_stream, device=x.device)
    packed = next(p.bound for p in add._plans.values() if p.bound is not None)
    runs = {}
    for name, programmatic in (("programmatic", True), ("serialized", False)):
        packed.programmatic = programmatic  # read when the graph is captured (first replay)
        run = h.tilesafe_graph(stream, lambda: (add(z, x, y) for _ in range(n)))
        run(lambda: None)
        runs[name] = run
    packed.programmatic = True
    a, b = (torch.randn(LENGTH, dtype=torch.float16, device=str(x.device)) for _ in range(2))
    out = torch.empty_like(a)
    runs["torch"] = h.torch_graph(torch_stream, lambda: [torch.add(a, b, out=out)
                                                          for _ in range(n)])
    times = h.interleaved_ms(runs, torch_stream, rounds=21)
    per_op = {name: t[0] * 1e3 / n for name, t in times.items()}
    print(f"graph replay at N={n}, interleaved event timing: programmatic "
          f"{per_op['programmatic']:.3f} us/op, serialized {per_op['serialized']:.3f}, "
          f"torch {per_op['torch']:.3f}")
    return [h.Row("execution_modes", "f16", str(n), f"graph_replay_{name}", per_op[name],
                  "us/op", "torch.add CUDA graph (events)", per_op["torch"],
                  lower_is_better=True) for name in ("programmatic", "serialized")]


def run(out: Path = None, device: str = None, quick: bool = False) -> list:
    """The sweep; returns the rows and writes execution_modes.csv/.png under ``out``."""
    device = device or str(ts.default_device())
    z, x, y = _tensors(device)
    rows = []
    per_op_sync(3, z, x, y)  # warm up: compile and load
    modes = {"per_op_sync": per_op_sync, "chained_sync": chained_sync}
    for n in SIZES:
        repeats = 5 if n <= 100 else 3
        refs = _torch_references(device, n, repeats)
        results = {name: _time(lambda: fn(n, z, x, y), repeats) for name, fn in modes.items()}
        results["async"] = awaited_timing(n, z, x, y, repeats)
        graph = graph_builder(n, z, x, y)
        graph.replay()
        results["graph_replay"] = _time(graph.replay, repeats)
        for name, seconds in results.items():
            ref = refs[name] / n * 1e6 if refs else None
            reference = ("torch.add CUDA graph" if name == "graph_replay" else
                         "torch.add+sync" if name == "per_op_sync" else "torch.add") if refs else ""
            rows.append(h.Row("execution_modes", "f16", str(n), name, seconds / n * 1e6,
                              "us/op", reference, ref, lower_is_better=True))
    if device.startswith("cuda"):
        at_1000 = {r.variant: r.value for r in rows if r.size == str(SIZES[-1])}
        rows.extend(_driver_floor(z, x, y, results_at_1000=at_1000))
        rows.extend(_graph_launch_order(z, x, y))
    print(f"execution modes on {device} (length {LENGTH}, f16), microseconds per op "
          "(torch reference of the same mode in brackets)")
    print(f"{'N':>6} " + " ".join(f"{m:>22}" for m in MODES))
    for n in SIZES:
        cells = {r.variant: r for r in rows if r.size == str(n) and r.variant in MODES
                 and "bare" not in r.reference}
        print(f"{n:>6} " + " ".join(
            f"{cells[m].value:>12.3f} [{cells[m].reference_value or 0:>7.3f}]" for m in MODES))
    if out is not None:
        out = Path(out)
        h.write_csv(rows, out / "execution_modes.csv")
        sweep = [r for r in rows if r.variant in MODES and "bare" not in r.reference]
        series = {m: [(int(r.size), r.value) for r in sweep if r.variant == m] for m in MODES}
        for m in ("per_op_sync", "graph_replay"):
            series[f"torch {m}"] = [(int(r.size), r.reference_value) for r in sweep
                                    if r.variant == m and r.reference_value]
        h.plot(out / "execution_modes.png", f"tilesafe execution modes ({device})", series,
               "ops per pipeline (N)", "us per op")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default=None, help="directory for CSV and plot")
    args = parser.parse_args()
    run(args.out, args.device)


if __name__ == "__main__":
    main()
