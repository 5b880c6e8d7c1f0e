"""The normalizations of ``tilesafe.kernels.norms`` against torch and the copy bandwidth of the
same bytes, on one GPU, in one process (method: ``benchmarks/_rowwise.py``):

* ``rms_norm`` against ``torch.nn.functional.rms_norm``;
* ``add_rms_norm`` (the residual written in place) against torch's ``residual.add_(x)``
  followed by ``rms_norm`` (what an unfused engine runs);
* ``layer_norm`` against ``torch.nn.functional.layer_norm`` (with a bias);

rows x hidden over (1, 32, 1024, 16384) x (1024, 4096, 5120, 8192, 16384), f16 and bf16.
Targets on an H100: at least torch's speed at every shape and 0.85 of the copy bandwidth
where the launch moves enough bytes to be bandwidth-bound.

    python -m benchmarks kernels --device cuda:0 --out DIR   (with the other families)
    python -m benchmarks.kernels_norms --device cuda:0 --out DIR [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from . import _harness as h
from . import _rowwise as rw

ROWS = (1, 32, 1024, 16384)
HIDDEN = (1024, 4096, 5120, 8192, 16384)
QUICK_ROWS, QUICK_HIDDEN = (32, 16384), (4096,)
DTYPES = ("float16", "bfloat16")
QUICK_DTYPES = ("bfloat16",)
EPS = 1e-6


def _reference_rms(x: Any, w: Any) -> Any:
    """transformers' RMSNorm in float64 (the rounding order of the library is checked by the
    tests; here the float64 value bounds the error)."""
    import torch
    x64 = x.to(torch.float64)
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w.to(torch.float64)


def rms_norm_case(dtype: str, rows: int, hidden: int, device: str, generator: Any) -> rw.Case:
    import torch.nn.functional as F

    from tilesafe.kernels import rms_norm
    moved = rw.bytes_of(dtype, 2 * rows * hidden, hidden)
    count = rw.set_count(moved)
    xs = [rw.randn((rows, hidden), dtype, device, generator) for _ in range(count)]
    ys = [rw.randn((rows, hidden), dtype, device, generator) for _ in range(count)]
    w = rw.randn((hidden,), dtype, device, generator, 0.5) + 1
    return rw.Case("rms_norm", dtype, rw.size_label(rows, hidden), moved, count,
                   ours=lambda j: rms_norm(xs[j], w, eps=EPS, out=ys[j]),
                   theirs=lambda j: F.rms_norm(xs[j], (hidden,), w, EPS),
                   result=lambda: ys[0], expected=lambda: _reference_rms(xs[0], w),
                   poison=lambda: ys[0].fill_(float("nan")))


def add_rms_norm_case(dtype: str, rows: int, hidden: int, device: str,
                      generator: Any) -> rw.Case:
    import torch
    import torch.nn.functional as F

    from tilesafe.kernels import add_rms_norm
    moved = rw.bytes_of(dtype, 4 * rows * hidden, hidden)  # x, residual in and out, normed
    count = rw.set_count(moved)
    xs = [rw.randn((rows, hidden), dtype, device, generator, 0.01) for _ in range(count)]
    residuals = [rw.randn((rows, hidden), dtype, device, generator) for _ in range(count)]
    ys = [rw.randn((rows, hidden), dtype, device, generator) for _ in range(count)]
    w = rw.randn((hidden,), dtype, device, generator, 0.5) + 1
    first = residuals[0].to(torch.float64) + xs[0].to(torch.float64)

    def theirs(j: int) -> Any:
        residuals[j].add_(xs[j])
        return F.rms_norm(residuals[j], (hidden,), w, EPS)
    return rw.Case("add_rms_norm", dtype, rw.size_label(rows, hidden), moved, count,
                   ours=lambda j: add_rms_norm(xs[j], residuals[j], w, eps=EPS, out=ys[j]),
                   theirs=theirs, result=lambda: ys[0],
                   expected=lambda: _reference_rms(first, w),
                   poison=lambda: ys[0].fill_(float("nan")), reference="torch add+rms_norm")


def layer_norm_case(dtype: str, rows: int, hidden: int, device: str,
                    generator: Any) -> rw.Case:
    import torch
    import torch.nn.functional as F

    from tilesafe.kernels import layer_norm
    moved = rw.bytes_of(dtype, 2 * rows * hidden, 2 * hidden)
    count = rw.set_count(moved)
    xs = [rw.randn((rows, hidden), dtype, device, generator) for _ in range(count)]
    ys = [rw.randn((rows, hidden), dtype, device, generator) for _ in range(count)]
    w = rw.randn((hidden,), dtype, device, generator, 0.5) + 1
    b = rw.randn((hidden,), dtype, device, generator)

    def expected() -> Any:
        x64 = xs[0].to(torch.float64)
        return F.layer_norm(x64, (hidden,), w.to(torch.float64), b.to(torch.float64), 1e-5)
    return rw.Case("layer_norm", dtype, rw.size_label(rows, hidden), moved, count,
                   ours=lambda j: layer_norm(xs[j], w, b, out=ys[j]),
                   theirs=lambda j: F.layer_norm(xs[j], (hidden,), w, b, 1e-5),
                   result=lambda: ys[0], expected=expected,
                   poison=lambda: ys[0].fill_(float("nan")))


CASES = (rms_norm_case, add_rms_norm_case, layer_norm_case)


def cases(device: str, quick: bool) -> Iterator[rw.Case]:
    import torch
    generator = torch.Generator(device=device).manual_seed(11)
    for make in CASES:
        for dtype in (QUICK_DTYPES if quick else DTYPES):
            for rows, hidden in rw.shapes(quick, ROWS, HIDDEN, QUICK_ROWS, QUICK_HIDDEN):
                yield make(dtype, rows, hidden, device, generator)


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    """Measure every case; write kernels_norms.csv and the plots under ``out``."""
    rows = rw.measure(cases(device, quick), device, "norms")
    rw.report(rows, out, "norms", "norms (GB/s; ratio = tilesafe / reference, same run)")
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "kernels_norms", argv)


if __name__ == "__main__":
    raise SystemExit(main())
