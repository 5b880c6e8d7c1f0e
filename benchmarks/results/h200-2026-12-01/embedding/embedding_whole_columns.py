"""``embedding`` with whole column tiles (consecutive columns: 16-byte loads) against the
clamped form it replaces (the config's width, each column clamped to the table: 2-byte
loads), each against ``F.embedding`` in the same process, through the library's torch surface
in torch CUDA graphs (``benchmarks/_rowwise.py``: poisoned output, float64 check, interleaved
rounds with a copy of the same bytes).

    PYTHONPATH=src:. python benchmarks/results/h200-2026-12-01/embedding/embedding_whole_columns.py OUT
"""
import sys
from pathlib import Path

import torch

from benchmarks import _rowwise as rw
from benchmarks import kernels_positional as P
import importlib

E = importlib.import_module("tilesafe.kernels.embedding")
SHAPES = [(1, 2560), (32, 2560), (512, 2560), (1, 4096), (32, 4096), (512, 4096),
          (4096, 4096), (32, 1024), (4096, 1024), (32, 8192), (4096, 8192)]


def cases(label):
    generator = torch.Generator(device="cuda:0").manual_seed(12)
    table = rw.randn((P.VOCAB, 8192), "bfloat16", "cuda:0", generator)
    for tokens, hidden in SHAPES:
        case = P.embedding_case(tokens, hidden, "cuda:0", generator, table)
        case.benchmark = f"embedding_{label}"
        yield case


def main(out):
    whole = E.column_tile
    rows = rw.measure(cases("whole"), "cuda:0", "positional")
    E.column_tile = lambda widest, hidden: (min(widest, E.args.pow2(hidden)), False)
    rows += rw.measure(cases("clamped"), "cuda:0", "positional")
    E.column_tile = whole
    rw.report(rows, Path(out), "embedding", "embedding: whole column tiles vs clamped "
              "(GB/s; ratio = tilesafe / reference, same run)")


if __name__ == "__main__":
    main(sys.argv[1])
