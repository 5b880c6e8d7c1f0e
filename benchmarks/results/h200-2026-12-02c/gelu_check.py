"""GELU (exact and tanh) against F.gelu and the copy rate after its tail polynomial moved to
tc.fma (method: benchmarks/_rowwise.py).

    python benchmarks/results/h200-2026-12-02c/gelu_check.py OUTDIR
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks import _rowwise as rw  # noqa: E402
from benchmarks.kernels_activations import gelu_case  # noqa: E402


def cases(device):
    import torch
    generator = torch.Generator(device=device).manual_seed(12)
    for dtype in ("bfloat16", "float16"):
        for approximate in ("none", "tanh"):
            for rows, length in ((32, 16384), (1024, 16384), (16384, 4096), (16384, 16384)):
                yield gelu_case(dtype, rows, length, device, generator, approximate)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    rows = rw.measure(cases("cuda:0"), "cuda:0", "activations")
    rw.report(rows, out, "gelu", "gelu (GB/s; ratio = tilesafe / reference, same run)")
