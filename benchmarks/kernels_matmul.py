"""``tilesafe.kernels.matmul`` and ``scaled_matmul`` against torch, called as a model calls them:
torch tensors in and out (``y = matmul(x, weight, out=y)``), so every launch of a call (the
split-K merge included) is in the measured CUDA graph.

1. GEMM sweep (f16, bf16; ``y = a @ w.T`` with the weight (N, K)): M = N = K = 1024 ... 8192
   and two non-square shapes, against ``torch.matmul(a, w.t())`` (cuBLAS), in TFLOP/s.
2. Decode (M in {1, 4, 16}, bf16) on the linear layers of common models: the weight's bytes
   over the time (TB/s) against ``torch.matmul`` and a device-to-device copy of the weight
   (``copy_``, read + written bytes over its time): the target is 80% of the copy's rate.
   The weights rotate over enough copies to overflow L2, so the memory is measured.
3. ``scaled_matmul`` (f8e4m3fn, per-tensor scales, bf16 out) against ``torch._scaled_mm`` at
   4096^3 and 8192^3, in TFLOP/s.

Each variant's output is poisoned with NaN, computed once and checked against float64 (on a
sample of rows) before it is timed; timings are medians of CUDA-event-timed replays of CUDA
graphs, in interleaved rounds. Every config of the path a shape takes is also timed
(``kernels_matmul_search.csv``: what the tuner would choose between), and at M = 1 the mma
path is timed beside the elementwise GEMV (the variant ``skinny mma``).

    python -m benchmarks kernels --device cuda:0 --out DIR
    python -m benchmarks.kernels_matmul --cpu-check     (no GPU: every path, small, on torch's
                                                         CPU tensors against float64)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from . import _harness as h

SWEEP = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
         (4096, 8192, 1024), (8192, 1024, 8192))
QUICK_SWEEP = ((1024, 1024, 1024), (8192, 8192, 8192))
DTYPES = ("float16", "bfloat16")
SHORT = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "f8"}
DECODE_ROWS = (1, 4, 16)
DECODE_WEIGHTS = ((4096, 4096), (12288, 4096), (4096, 12288), (151936, 4096), (2560, 9728))
QUICK_DECODE = ((1, 16), ((4096, 4096), (2560, 9728)))
SCALED = ((4096, 4096, 4096), (8192, 8192, 8192))
QUICK_SCALED = ((4096, 4096, 4096),)
SCALE_A, SCALE_B = 0.75, 2.0 ** -3
#: the small problems of ``--cpu-check``: every path (gemv, split-K, skinny, tiled, persistent)
CPU_CHECKS = ((1, 40, 1024), (3, 37, 99), (16, 40, 1024), (33, 40, 99), (300, 200, 64),
              (1536, 1408, 24))


def _module():
    # (the package's ``matmul`` is the function: the module by its full name)
    return importlib.import_module("tilesafe.kernels.matmul")


# -- problems -------------------------------------------------------------------------------------

class _Problem:
    """One product: a (M, K), ``count`` copies of the weight (N, K) (rotated, to overflow L2),
    scales for the 8-bit case, outputs per variant, and the float64 reference of a sample of
    rows."""

    def __init__(self, m: int, n: int, k: int, dtype: str, device: str, generator: Any,
                 copies: int = 1):
        import torch
        self.shape, self.dtype, self.device = (m, n, k), dtype, device
        make = getattr(torch, dtype)
        self.a = torch.randn((m, k), device=device, generator=generator).to(make)
        first = torch.randn((n, k), device=device, generator=generator).to(make)
        self.weights = [first] + [first.clone() for _ in range(copies - 1)]
        self.scaled = dtype.startswith("float8")
        self.out_dtype = torch.bfloat16 if self.scaled else make
        self.scale_a = torch.tensor(SCALE_A, device=device, dtype=torch.float32)
        self.scale_b = torch.tensor(SCALE_B, device=device, dtype=torch.float32)
        self.rows = torch.arange(0, m, max(1, m // 256), device=device)
        self.expected = self.a[self.rows].to(torch.float64) @ first.to(torch.float64).t()
        if self.scaled:
            self.expected = self.expected * (SCALE_A * SCALE_B)
        self.outputs: dict = {}
        self.flops = 2.0 * m * n * k
        self.weight_bytes = n * k * first.element_size()

    def output(self, name: str) -> Any:
        import torch
        if name not in self.outputs:
            self.outputs[name] = torch.empty(self.shape[:2], dtype=self.out_dtype,
                                             device=self.device)
        return self.outputs[name]

    def check(self, name: str, view: Any) -> None:
        err = h.relative_error(view[self.rows], self.expected)
        # the output's rounding of an f32-accumulated product (bf16 2**-9 on average per
        # element, f16 2**-12), Hopper's f8 accumulation on top for the scaled product
        limit = {"float16": 1e-3, "bfloat16": 8e-3, "float8_e4m3fn": 8e-3}[self.dtype]
        if not err <= limit:
            raise AssertionError(f"kernels_matmul {name} {self.shape} {self.dtype}: relative "
                                 f"error {err:.3g} over {limit}")

    # the calls each variant makes, on weight copy ``j``
    def tilesafe(self, name: str) -> Callable[[int], Callable[[], Any]]:
        from tilesafe.kernels import matmul, scaled_matmul
        out = self.output(name)
        if self.scaled:
            return lambda j: lambda: scaled_matmul(self.a, self.weights[j], self.scale_a,
                                                   self.scale_b, out=out)
        return lambda j: lambda: matmul(self.a, self.weights[j], out=out)

    def torch_reference(self) -> Callable[[int], Callable[[], Any]]:
        import torch
        out = self.output("torch")
        if self.scaled:
            args = (self.a, self.weights[0].t(), self.scale_a, self.scale_b)
            try:  # into the output directly where this torch takes ``out=``
                torch._scaled_mm(*args, out_dtype=torch.bfloat16, out=out)
                direct = True
            except (TypeError, RuntimeError):
                direct = False

            def scaled_mm(j):
                args = (self.a, self.weights[j].t(), self.scale_a, self.scale_b)
                if direct:
                    return lambda: torch._scaled_mm(*args, out_dtype=torch.bfloat16, out=out)
                return lambda: out.copy_(torch._scaled_mm(*args, out_dtype=torch.bfloat16))
            return scaled_mm
        return lambda j: lambda: torch.matmul(self.a, self.weights[j].t(), out=out)

    def weight_copy(self) -> Callable[[int], Callable[[], Any]]:
        import torch
        dst = torch.empty_like(self.weights[0])
        return lambda j: lambda: dst.copy_(self.weights[j])


def _copies(weight_bytes: int) -> int:
    """Weight copies that together overflow L2 twice (at most 8)."""
    return max(1, min(8, math.ceil(2 * h.L2_BYTES / weight_bytes)))


def _run_of(problem: _Problem, stream: Any, call_for: Callable[[int], Callable[[], Any]],
            reps: int, name: str, view: Any = None) -> Any:
    """Check ``call_for(0)`` (poisoned output) unless ``view`` is None, then capture ``reps``
    calls rotating over the weight copies into a torch graph; returns ``run(mark_end)``."""
    import torch
    with torch.cuda.stream(stream):
        if view is not None:
            h.poison(view)
            call_for(0)()
            stream.synchronize()
            problem.check(name, view)
    count = len(problem.weights)

    def body():
        # every call on ``stream`` (also the warm-up torch_graph makes outside the capture):
        # a library call ends the loans of completed work on its own stream only
        with torch.cuda.stream(stream):
            for i in range(reps):
                call_for(i % count)()
    return h.torch_graph(stream, body)


@contextlib.contextmanager
def _forced(tuned: Any, config: dict) -> Iterator[None]:
    """Calls of the tuned launch ``tuned`` use ``config`` (an instance attribute shadows the
    tuner's choice) while the block runs: for the config search only."""
    tuned.config_for = lambda *args, **kwargs: config
    try:
        yield
    finally:
        del tuned.config_for


@contextlib.contextmanager
def _path_replaced(path: str, launcher: Any) -> Iterator[None]:
    """Shapes of ``path`` take ``launcher`` while the block runs (M = 1 through the mma path)."""
    module = _module()
    saved = module._LAUNCHERS[path]
    module._LAUNCHERS[path] = launcher
    try:
        yield
    finally:
        module._LAUNCHERS[path] = saved


def _tuned_for(problem: _Problem) -> Any:
    import tilesafe as ts
    module = _module()
    m, n, _ = problem.shape
    path = module.path_of(m, n, getattr(ts, problem.dtype), problem.scaled)
    return path, module._LAUNCHERS[path]


def _describe(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _search(problem: _Problem, stream: Any, reps: int, search_rows: list, unit: str,
            value_of: Callable[[float], float], reference: str, ref_value: float,
            skipped: dict) -> None:
    """Time every config of the path ``problem`` takes (briefly: one median each)."""
    path, tuned = _tuned_for(problem)
    size = "x".join(map(str, problem.shape))
    for config in tuned.configs:
        label = f"{path} {_describe(config)}"
        try:
            with _forced(tuned, config):
                run = _run_of(problem, stream, problem.tilesafe("search"), reps, label,
                              problem.output("search"))
        except Exception as err:  # noqa: BLE001 (recorded; the search goes on)
            skipped[f"{label} {size}"] = f"{type(err).__name__}: {err}"[:300]
            continue
        ms = h.median_ms(run, stream, samples=9) / reps
        search_rows.append(h.Row("kernels_matmul_search", SHORT[problem.dtype], size, label,
                                 value_of(ms), unit, reference, ref_value))


# -- the three measurements -----------------------------------------------------------------------

def _gemm(problem: _Problem, stream: Any, rows: list, search_rows: list, skipped: dict,
          bench: str, reference: str) -> dict:
    reps = h.repetitions(problem.flops / 5e14, target=4e-3, most=20)
    runs = {"tilesafe": _run_of(problem, stream, problem.tilesafe("tilesafe"), reps, "tilesafe",
                                problem.output("tilesafe")),
            reference: _run_of(problem, stream, problem.torch_reference(), reps, reference,
                               problem.output("torch"))}
    timed = h.interleaved_ms(runs, stream, rounds=41)
    tflops = {k: problem.flops / (v[0] / reps) / 1e9 for k, v in timed.items()}
    size = "x".join(map(str, problem.shape))
    h.compare(rows, bench, SHORT[problem.dtype], size, "TFLOP/s", tflops, reference,
              ("tilesafe",))
    _search(problem, stream, reps, search_rows, "TFLOP/s", lambda ms: problem.flops / ms / 1e9,
            reference, tflops[reference], skipped)
    print(f"  {bench} {SHORT[problem.dtype]} {size}: " + ", ".join(
        f"{k} {v:.0f}" for k, v in sorted(tflops.items())) + " TFLOP/s", flush=True)
    return tflops


def _decode(problem: _Problem, stream: Any, rows: list, search_rows: list,
            skipped: dict) -> dict:
    m = problem.shape[0]
    reps = h.repetitions(problem.weight_bytes / 3e12, target=2e-3, most=100)
    runs = {"tilesafe": _run_of(problem, stream, problem.tilesafe("tilesafe"), reps, "tilesafe",
                                problem.output("tilesafe")),
            "torch.matmul": _run_of(problem, stream, problem.torch_reference(), reps, "torch",
                                    problem.output("torch")),
            "d2d_copy": _run_of(problem, stream, problem.weight_copy(), reps, "copy")}
    if m == 1:
        gemv = _module()._skinny
        with _path_replaced("gemv", gemv.launch_skinny):
            runs["skinny mma"] = _run_of(problem, stream, problem.tilesafe("mma"), reps,
                                         "skinny mma", problem.output("mma"))
    timed = h.interleaved_ms(runs, stream, rounds=41)
    tbs = {k: (2 if k == "d2d_copy" else 1) * problem.weight_bytes / (v[0] / reps) / 1e9
           for k, v in timed.items()}
    size = "x".join(map(str, problem.shape))
    h.compare(rows, "kernels_matmul_decode", SHORT[problem.dtype], size, "TB/s", tbs,
              "d2d_copy", ("tilesafe", "torch.matmul", "skinny mma"))
    h.compare(rows, "kernels_matmul_decode", SHORT[problem.dtype], size, "TB/s", tbs,
              "torch.matmul", ("tilesafe", "skinny mma"))
    _search(problem, stream, reps, search_rows, "TB/s",
            lambda ms: problem.weight_bytes / ms / 1e9, "d2d_copy", tbs["d2d_copy"], skipped)
    print(f"  decode {size}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(tbs.items()))
          + " TB/s (weight bytes read; the copy: read + written)", flush=True)
    return tbs


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    """Measure the GEMM sweep, the decode shapes and the scaled product; write
    kernels_matmul.csv, kernels_matmul_search.csv and kernels_matmul.png."""
    import torch
    stream = torch.cuda.Stream(device)
    generator = torch.Generator(device=device).manual_seed(3)
    rows: list = []
    search_rows: list = []
    skipped: dict = {}
    sweep = {}
    for dtype in (DTYPES[:1] if quick else DTYPES):
        for (m, n, k) in (QUICK_SWEEP if quick else SWEEP):
            problem = _Problem(m, n, k, dtype, device, generator)
            sweep[(dtype, m, n, k)] = _gemm(problem, stream, rows, search_rows, skipped,
                                            "kernels_matmul", "torch.matmul")
            del problem
    decode_rows, weights = QUICK_DECODE if quick else (DECODE_ROWS, DECODE_WEIGHTS)
    for n, k in weights:
        copies = _copies(n * k * 2)
        for m in decode_rows:
            problem = _Problem(m, n, k, "bfloat16", device, generator, copies)
            _decode(problem, stream, rows, search_rows, skipped)
            del problem
    for (m, n, k) in (QUICK_SCALED if quick else SCALED):
        problem = _Problem(m, n, k, "float8_e4m3fn", device, generator)
        _gemm(problem, stream, rows, search_rows, skipped, "kernels_scaled_matmul",
              "torch._scaled_mm")
        del problem
    torch.cuda.empty_cache()
    for name, why in skipped.items():
        print(f"  (skipped {name}: {why})")
    h.write_csv(rows, out / "kernels_matmul.csv")
    h.write_csv(search_rows, out / "kernels_matmul_search.csv")
    series: dict = {}
    for (dtype, m, n, k), tflops in sweep.items():
        if m == n == k:
            for variant, value in tflops.items():
                series.setdefault(f"{variant} {SHORT[dtype]}", []).append((m, value))
    h.plot(out / "kernels_matmul.png", "matmul y = a @ w.T, M = N = K (TFLOP/s)", series,
           "M = N = K", "TFLOP/s")
    h.print_table("kernels.matmul (ratio = value / reference, same run)", rows)
    return rows


# -- without a GPU --------------------------------------------------------------------------------

def cpu_check() -> None:
    """Every path on torch's CPU tensors (the interpreter), small, against float64; and M = 1
    through the mma path too."""
    import torch
    generator = torch.Generator().manual_seed(3)
    gemv = _module()._skinny
    for dtype in ("bfloat16", "float8_e4m3fn"):
        for m, n, k in CPU_CHECKS:
            problem = _Problem(m, n, k, dtype, "cpu", generator, copies=2)
            path, _ = _tuned_for(problem)
            for j in range(2):
                view = problem.output("tilesafe")
                h.poison(view)
                problem.tilesafe("tilesafe")(j)()
                problem.check(f"{path} (weight copy {j})", view)
            if m == 1:
                with _path_replaced("gemv", gemv.launch_skinny):
                    problem.tilesafe("mma")(0)()
                problem.check("skinny mma", problem.output("mma"))
            _, tuned = _tuned_for(problem)
            for config in tuned.configs[1:]:  # what the search times
                with _forced(tuned, config):
                    problem.tilesafe("search")(0)()
                problem.check(f"{path} {_describe(config)}", problem.output("search"))
            print(f"  {SHORT[dtype]} {m}x{n}x{k} ({path}, {len(tuned.configs)} configs): "
                  "matches float64", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernels_matmul",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-check", action="store_true",
                        help="no GPU: run every path small on the interpreter")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default="benchmarks/results/latest")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.cpu_check:
        cpu_check()
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run(out, args.device, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
