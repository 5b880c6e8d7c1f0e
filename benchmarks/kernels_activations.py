"""The activations of ``tilesafe.kernels.activations`` against torch and the copy bandwidth of
the same bytes, on one GPU, in one process (method: ``benchmarks/_rowwise.py``):

* ``softmax`` against ``torch.softmax(x, -1)``: rows x length over (1, 32, 1024, 16384) x
  (1024, 4096, 5120, 8192, 16384) in f16, bf16 and f32 (rows in one tile), and rows of a
  vocabulary (151936: the chunked schedule) for 1, 32 and 256 rows;
* ``silu_mul`` of a merged gate/up projection ``(rows, 2 I)`` against ``F.silu(gate) * up``
  on its two halves, I over the same lengths, f16 and bf16;
* ``gelu`` (exact; tanh too in a full run) against ``F.gelu``, f16 and bf16.

Targets on an H100: at least torch's speed at every shape and 0.85 of the copy bandwidth
where the launch moves enough bytes to be bandwidth-bound.

    python -m benchmarks kernels --device cuda:0 --out DIR   (with the other families)
    python -m benchmarks.kernels_activations --device cuda:0 --out DIR [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from . import _harness as h
from . import _rowwise as rw

ROWS = (1, 32, 1024, 16384)
LENGTHS = (1024, 4096, 5120, 8192, 16384)
QUICK_ROWS, QUICK_LENGTHS = (32, 16384), (4096,)
VOCAB, VOCAB_ROWS, QUICK_VOCAB_ROWS = 151936, (1, 32, 256), (32,)
DTYPES = ("float16", "bfloat16")
SOFTMAX_DTYPES = ("float16", "bfloat16", "float32")
QUICK_DTYPES = ("bfloat16",)


def softmax_case(dtype: str, rows: int, length: int, device: str, generator: Any) -> rw.Case:
    import torch

    from tilesafe.kernels import softmax
    moved = rw.bytes_of(dtype, 2 * rows * length)
    count = rw.set_count(moved)
    xs = [rw.randn((rows, length), dtype, device, generator, 4.0) for _ in range(count)]
    ys = [rw.randn((rows, length), dtype, device, generator) for _ in range(count)]
    return rw.Case("softmax", dtype, rw.size_label(rows, length), moved, count,
                   ours=lambda j: softmax(xs[j], out=ys[j]),
                   theirs=lambda j: torch.softmax(xs[j], -1),
                   result=lambda: ys[0],
                   expected=lambda: torch.softmax(xs[0].to(torch.float64), -1),
                   poison=lambda: ys[0].fill_(float("nan")))


def silu_mul_case(dtype: str, rows: int, inner: int, device: str, generator: Any) -> rw.Case:
    import torch
    import torch.nn.functional as F

    from tilesafe.kernels import silu_mul
    moved = rw.bytes_of(dtype, 3 * rows * inner)
    count = rw.set_count(moved)
    xs = [rw.randn((rows, 2 * inner), dtype, device, generator, 2.0) for _ in range(count)]
    ys = [rw.randn((rows, inner), dtype, device, generator) for _ in range(count)]

    def expected() -> Any:
        x64 = xs[0].to(torch.float64)
        return F.silu(x64[:, :inner]) * x64[:, inner:]
    return rw.Case("silu_mul", dtype, rw.size_label(rows, inner), moved, count,
                   ours=lambda j: silu_mul(xs[j], out=ys[j]),
                   theirs=lambda j: F.silu(xs[j][:, :inner]) * xs[j][:, inner:],
                   result=lambda: ys[0], expected=expected,
                   poison=lambda: ys[0].fill_(float("nan")), reference="torch silu*up")


def gelu_case(dtype: str, rows: int, length: int, device: str, generator: Any,
              approximate: str = "none") -> rw.Case:
    import torch
    import torch.nn.functional as F

    from tilesafe.kernels import gelu
    moved = rw.bytes_of(dtype, 2 * rows * length)
    count = rw.set_count(moved)
    xs = [rw.randn((rows, length), dtype, device, generator, 2.0) for _ in range(count)]
    ys = [rw.randn((rows, length), dtype, device, generator) for _ in range(count)]
    name = "gelu" if approximate == "none" else "gelu_tanh"
    return rw.Case(name, dtype, rw.size_label(rows, length), moved, count,
                   ours=lambda j: gelu(xs[j], approximate=approximate, out=ys[j]),
                   theirs=lambda j: F.gelu(xs[j], approximate=approximate),
                   result=lambda: ys[0],
                   expected=lambda: F.gelu(xs[0].to(torch.float64), approximate=approximate),
                   poison=lambda: ys[0].fill_(float("nan")))


def cases(device: str, quick: bool) -> Iterator[rw.Case]:
    import torch
    generator = torch.Generator(device=device).manual_seed(12)
    grid = rw.shapes(quick, ROWS, LENGTHS, QUICK_ROWS, QUICK_LENGTHS)
    for dtype in (QUICK_DTYPES if quick else SOFTMAX_DTYPES):
        for rows, length in grid:
            yield softmax_case(dtype, rows, length, device, generator)
        for rows in (QUICK_VOCAB_ROWS if quick else VOCAB_ROWS):
            yield softmax_case(dtype, rows, VOCAB, device, generator)
    for dtype in (QUICK_DTYPES if quick else DTYPES):
        for rows, length in grid:
            yield silu_mul_case(dtype, rows, length, device, generator)
        for approximate in (("none",) if quick else ("none", "tanh")):
            for rows, length in grid:
                yield gelu_case(dtype, rows, length, device, generator, approximate)


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    """Measure every case; write kernels_activations.csv and the plots under ``out``."""
    rows = rw.measure(cases(device, quick), device, "activations")
    rw.report(rows, out, "activations",
              "activations (GB/s; ratio = tilesafe / reference, same run)")
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "kernels_activations", argv)


if __name__ == "__main__":
    raise SystemExit(main())
