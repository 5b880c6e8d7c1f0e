"""What the benchmarks of the row-wise kernel families (``kernels_norms``,
``kernels_activations``) share: a *case* (one function, dtype and shape: its inputs in several
sets, the library call, the torch reference call, the float64 check) and its measurement
against torch and against a device-to-device copy of the same number of bytes, in one process.

Method (as ``_harness``): inputs are fresh random numbers; before timing, the library's output
is poisoned with NaN, the call runs once and is checked against a float64 reference; then the
library call, the torch reference and a ``copy_`` moving the same bytes (half read, half
written) are each captured in a torch CUDA graph of ``reps`` launches rotating over the input
sets (enough sets that they do not fit in L2 together), and replayed in interleaved rounds
timed with CUDA events. The library is called with torch tensors (its torch surface: zero-copy,
on torch's current stream), so the graphs hold the very kernels an engine's graphs would.
Bandwidth counts the bytes that must move: every input read once, every output written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from . import _harness as h

SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
#: the relative error a result rounded to the dtype may carry (two roundings' worth, plus the
#: float32 arithmetic), as a norm-wise bound
TOLERANCE = {"float16": 2 * 2.0 ** -11 + 1e-5, "bfloat16": 2 * 2.0 ** -8 + 1e-5,
             "float32": 1e-5}


@dataclass
class Case:
    """One measured configuration.

    ``ours(j)`` / ``theirs(j)`` enqueue the library call / the torch reference on input set
    ``j`` (torch tensors, torch's current stream); ``result()`` and ``expected()`` give the
    library's output of set 0 and its float64 reference; ``poison()`` fills that output with
    NaN."""

    benchmark: str
    dtype: str
    size: str
    bytes_moved: int
    sets: int
    ours: Callable[[int], Any]
    theirs: Callable[[int], Any]
    result: Callable[[], Any]
    expected: Callable[[], Any]
    poison: Callable[[], None]
    reference: str = "torch"


def set_count(bytes_moved: int) -> int:
    """Input sets to rotate over so that together they overflow L2 (at most 8)."""
    return max(1, min(8, math.ceil(2 * h.L2_BYTES / max(1, bytes_moved))))


def randn(shape: tuple, dtype: str, device: str, generator: Any, scale: float = 1.0) -> Any:
    """A torch tensor of fresh normal values (never zeros) of ``dtype``."""
    import torch
    values = torch.randn(shape, device=device, generator=generator, dtype=torch.float32)
    return (values * scale).to(getattr(torch, dtype))


def measure(cases: Iterable[Case], device: str, family: str) -> list:
    """Check and time every case (built one at a time, so only one case's tensors are alive);
    returns the rows: each against torch, and against the copy of the same bytes."""
    import torch
    stream = torch.cuda.Stream(device=device)
    rows: list = []
    with torch.cuda.stream(stream):
        for case in cases:
            rows += _measure_one(case, stream, device)
            del case
            torch.cuda.empty_cache()
    return rows


def check(case: Case, wait: Callable[[], None] = lambda: None) -> float:
    """Run the library call once on set 0 into a poisoned output (``wait`` waits for it) and
    return its relative error against float64; AssertionError beyond the dtype's tolerance."""
    case.poison()
    case.ours(0)
    wait()
    err = h.relative_error(case.result(), case.expected())
    if not err <= TOLERANCE[case.dtype]:
        raise AssertionError(f"{case.benchmark} {case.dtype} {case.size}: relative error "
                             f"{err:.3g} against float64 (tolerance {TOLERANCE[case.dtype]:.3g})")
    return err


def _measure_one(case: Case, stream: Any, device: str) -> list:
    import torch
    torch.cuda.synchronize()  # inputs were made on the default stream
    err = check(case, stream.synchronize)
    reps = h.repetitions(case.bytes_moved / 2.5e12)
    reps = max(case.sets, reps - reps % case.sets)
    half = max(1, case.bytes_moved // 2)
    sources = [torch.empty(half, dtype=torch.uint8, device=device) for _ in range(case.sets)]
    targets = [torch.empty(half, dtype=torch.uint8, device=device) for _ in range(case.sets)]

    def repeat(launch: Callable[[int], Any]) -> Callable[[], None]:
        def body() -> None:
            for i in range(reps):
                launch(i % case.sets)
        return body
    runs = {"tilesafe": h.torch_graph(stream, repeat(case.ours)),
            case.reference: h.torch_graph(stream, repeat(case.theirs)),
            "d2d_copy": h.torch_graph(stream, repeat(lambda j: targets[j].copy_(sources[j])))}
    timed = h.interleaved_ms(runs, stream)
    gbs = {name: case.bytes_moved * reps / (t[0] * 1e-3) / 1e9 for name, t in timed.items()}
    short = SHORT[case.dtype]
    rows = [h.Row(case.benchmark, short, case.size, "tilesafe", gbs["tilesafe"], "GB/s",
                  case.reference, gbs[case.reference]),
            h.Row(case.benchmark, short, case.size, "tilesafe", gbs["tilesafe"], "GB/s",
                  "d2d_copy", gbs["d2d_copy"]),
            h.Row(case.benchmark, short, case.size, case.reference, gbs[case.reference],
                  "GB/s", "d2d_copy", gbs["d2d_copy"])]
    print(f"  {case.benchmark} {short} {case.size}: tilesafe {gbs['tilesafe']:.0f} GB/s, "
          f"{case.reference} {gbs[case.reference]:.0f}, copy {gbs['d2d_copy']:.0f} "
          f"(x{gbs['tilesafe'] / gbs[case.reference]:.2f} {case.reference}, "
          f"x{gbs['tilesafe'] / gbs['d2d_copy']:.2f} copy; error {err:.2g})", flush=True)
    return rows


def report(rows: list, out: Any, family: str, title: str) -> None:
    """CSV, the printed table and one plot per benchmark and dtype (ratio to torch against
    the row count, a line per row length)."""
    out.mkdir(parents=True, exist_ok=True)
    h.write_csv(rows, out / f"kernels_{family}.csv")
    h.print_table(title, rows)
    mine = [r for r in rows if r.variant == "tilesafe" and r.reference != "d2d_copy"]
    for benchmark, dtype in sorted({(r.benchmark, r.dtype) for r in mine}):
        series: dict = {}
        for r in mine:
            if (r.benchmark, r.dtype) == (benchmark, dtype):
                count, length = r.size.split("x")
                series.setdefault(f"row {length}", []).append((int(count), r.ratio or 0.0))
        h.plot(out / f"kernels_{family}_{benchmark}_{dtype}.png",
               f"{benchmark} {dtype}: tilesafe / torch (higher is better)",
               {k: sorted(v) for k, v in series.items()}, "rows", "ratio to torch")


def shapes(quick: bool, rows: tuple, cols: tuple, quick_rows: tuple,
           quick_cols: tuple) -> list[tuple[int, int]]:
    """The (rows, row length) grid of a run."""
    return [(r, c) for c in (quick_cols if quick else cols) for r in
            (quick_rows if quick else rows)]


def size_label(rows: int, cols: int) -> str:
    return f"{rows}x{cols}"


def bytes_of(dtype: str, *element_counts: int) -> int:
    return ITEMSIZE[dtype] * sum(element_counts)
