"""The embedding's shipped tuned winners against ``F.embedding`` at the token counts whose
ratios were measured only with the first config (512 rows; and 32 / 4096 for contrast), bf16,
151936-row table, ids at random, through ``benchmarks.kernels_positional``'s own case (poisoned
output, float64 check, interleaved CUDA-graph rounds, same process)."""
import sys
from pathlib import Path

import torch

from benchmarks import _rowwise as rw
from benchmarks.kernels_positional import VOCAB, embedding_case


def cases(device):
    generator = torch.Generator(device=device).manual_seed(12)
    table = rw.randn((VOCAB, 4096), "bfloat16", device, generator)
    for tokens, hidden in ((512, 2560), (512, 4096), (512, 1024), (32, 2560), (4096, 4096),
                           (4096, 1024)):
        yield embedding_case(tokens, hidden, device, generator, table)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    rows = rw.measure(cases("cuda:0"), "cuda:0", "embedding_tuned")
    rw.report(rows, out, "embedding_tuned", "embedding, shipped tuned configs (GB/s)")
