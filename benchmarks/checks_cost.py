"""What the run-time checks cost in the library's own kernels: ``kernels.flash_attention``
(its key/value tile loads are checked: the loop bounds come from the sequence lengths) and the
persistent GEMM of ``kernels.matmul`` (its operand tile loads are checked: the tile row of
``a`` comes from the output's mapped partition), each against the same kernel compiled with
``unchecked_accesses`` (launched in ``ts.unsafe()``), on torch tensors through the library's
public calls, with the configs the library picks.

Each variant is a torch CUDA graph of a few calls, replayed in interleaved rounds (a new
random order each round). The ratio is taken within each round, safe time over unchecked
time (above 1: the checks cost), and its median and quartiles are reported beside an A/A
ratio: a second graph of the same safe kernel against the first, which shows how large a
difference this method can resolve. Every variant's output is poisoned (NaN) and checked
against a float64 reference (attention) or torch (GEMM) before timing.

    python -m benchmarks checks_cost --device cuda:0 --out DIR [--quick]
"""

from __future__ import annotations

import importlib
import statistics
from pathlib import Path
from typing import Any, Callable

import tilesafe as ts

from . import _harness as h

HEADS, KV_HEADS, DIM = 32, 8, 128
SEQS = (4096,)
GEMM_SIZES = (4096, 8192)
ROUNDS = 41
#: replays are this many calls, so one replay takes a few milliseconds
ATTENTION_REPS, GEMM_REPS = 5, 4


def _quartiles(values: list) -> tuple:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def _rounds(graphs: dict, stream: Any, rounds: int) -> dict:
    """Milliseconds of each graph per round, the order shuffled each round."""
    import random

    import torch
    times: dict = {name: [] for name in graphs}
    order = list(graphs)
    shuffle = random.Random(0)
    for graph in graphs.values():
        graph.replay()
    stream.synchronize()
    for _ in range(rounds):
        shuffle.shuffle(order)
        for name in order:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record(stream)
                graphs[name].replay()
                end.record(stream)
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return times


def _graph(stream: Any, call: Callable[[], Any], reps: int) -> Any:
    import torch
    with torch.cuda.stream(stream):
        call()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                call()
    stream.synchronize()
    return graph


def _report(rows: list, lines: list, benchmark: str, dtype: str, size: str, times: dict,
            reps: int, work: float, unit: str) -> None:
    safe, again, unchecked = times["safe"], times["safe again"], times["unchecked"]
    cost = [s / u for s, u in zip(safe, unchecked)]
    noise = [a / s for a, s in zip(again, safe)]
    for name, t in times.items():
        ms = statistics.median(t) / reps
        rows.append(h.Row(benchmark, dtype, size, name, work / ms / 1e9, unit, "unchecked",
                          work / (statistics.median(unchecked) / reps) / 1e9))
    c, n = _quartiles(cost), _quartiles(noise)
    lines.append(f"{benchmark} {size}: safe/unchecked time {c[1]:.4f} (quartiles {c[0]:.4f}-"
                 f"{c[2]:.4f}); A/A {n[1]:.4f} ({n[0]:.4f}-{n[2]:.4f}); safe "
                 f"{work / (statistics.median(safe) / reps) / 1e9:.0f} {unit}")
    print(lines[-1], flush=True)


def _attention(rows: list, lines: list, stream: Any, seq: int, causal: bool) -> None:
    import torch
    import torch.nn.functional as F

    from tilesafe import kernels as K
    A = importlib.import_module("tilesafe.kernels.attention")
    gen = torch.Generator(device="cuda").manual_seed(seq + causal)
    q = torch.randn(1, HEADS, seq, DIM, device="cuda", generator=gen).half()
    k = torch.randn(1, KV_HEADS, seq, DIM, device="cuda", generator=gen).half()
    v = torch.randn(1, KV_HEADS, seq, DIM, device="cuda", generator=gen).half()
    group = HEADS // KV_HEADS
    want = F.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1),
        is_causal=causal)
    unchecked: dict = {}
    safe_kernel_for = A.kernel_for

    def unchecked_for(hints: Any) -> Any:
        key = tuple(sorted((hints or {}).items()))
        if key not in unchecked:
            unchecked[key] = ts.kernel(A.flash_attention_kernel.fn, unchecked_accesses=True,
                                       hints={"default": dict(hints)} if hints else None)
        return unchecked[key]

    graphs = {}
    for name in ("safe", "safe again", "unchecked"):
        out = torch.full_like(q, float("nan"))
        A.kernel_for = unchecked_for if name == "unchecked" else safe_kernel_for
        try:
            with ts.unsafe():
                K.flash_attention(q, k, v, causal=causal, out=out)
                torch.cuda.synchronize()
                err = ((out.double() - want).norm() / want.norm()).item()
                if not err < 2e-3:
                    raise AssertionError(f"attention {name}: relative error {err:.2e}")
                graphs[name] = _graph(stream, lambda: K.flash_attention(q, k, v, causal=causal,
                                                                         out=out),
                                      ATTENTION_REPS)
        finally:
            A.kernel_for = safe_kernel_for
        graphs[name].out = out  # (kept alive with the graph)
    flop = 4.0 * HEADS * seq * seq * DIM * (0.5 if causal else 1.0)
    size = f"S{seq} d{DIM} GQA{group}" + (" causal" if causal else "")
    _report(rows, lines, "flash_attention", "f16", size, _rounds(graphs, stream, ROUNDS),
            ATTENTION_REPS, flop, "TFLOP/s")


def _gemm(rows: list, lines: list, stream: Any, n: int) -> None:
    import torch

    from tilesafe import kernels as K
    MM = importlib.import_module("tilesafe.kernels.matmul")
    gen = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=gen).half()
    b = torch.randn(n, n, device="cuda", generator=gen).half()
    want = (a.float() @ b.float().t())
    safe_tile_kernel = MM.tile_kernel
    unchecked: dict = {}

    def unchecked_tile_kernel(style: str, scaled: bool, warps: int = 4, cga: int = 1) -> Any:
        key = (style, scaled, warps, cga)
        if key not in unchecked:
            safe = safe_tile_kernel(*key)
            unchecked[key] = ts.kernel(safe.fn, unchecked_accesses=True, hints=safe.hints)
        return unchecked[key]

    graphs = {}
    for name in ("safe", "safe again", "unchecked"):
        out = torch.full((n, n), float("nan"), dtype=torch.float16, device="cuda")
        MM.tile_kernel = unchecked_tile_kernel if name == "unchecked" else safe_tile_kernel
        try:
            with ts.unsafe():
                K.matmul(a, b, out=out)
                torch.cuda.synchronize()
                err = ((out.float() - want).norm() / want.norm()).item()
                if not err < 2e-3:
                    raise AssertionError(f"matmul {name}: relative error {err:.2e}")
                graphs[name] = _graph(stream, lambda: K.matmul(a, b, out=out), GEMM_REPS)
        finally:
            MM.tile_kernel = safe_tile_kernel
        graphs[name].out = out
    _report(rows, lines, "matmul", "f16", f"{n}^3", _rounds(graphs, stream, ROUNDS),
            GEMM_REPS, 2.0 * n ** 3, "TFLOP/s")


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    import torch

    from tilesafe.kernels._torch import reserve_fault_records
    torch.cuda.set_device(torch.device(device))
    reserve_fault_records(128, device)
    stream = torch.cuda.Stream()
    rows: list = []
    lines: list = []
    for seq in SEQS:
        for causal in (False, True):
            _attention(rows, lines, stream, seq, causal)
    for n in GEMM_SIZES[:1] if quick else GEMM_SIZES:
        _gemm(rows, lines, stream, n)
    h.write_csv(rows, out / "checks_cost.csv")
    (out / "checks_cost.txt").write_text("\n".join(lines) + "\n")
    h.print_table("run-time checks: library kernels, safe against unchecked", rows)
    return rows


if __name__ == "__main__":
    import sys
    sys.exit(h.standalone(run, __doc__, "checks_cost"))
