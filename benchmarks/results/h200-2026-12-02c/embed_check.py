"""embedding against F.embedding with the shipped tuning entries, Qwen3's contiguous tables
(151936 x 2560 and x 4096, bf16), tokens 1-4096 (method: benchmarks/_rowwise.py).

    python benchmarks/results/h200-2026-12-02c/embed_check.py OUTDIR
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks import _rowwise as rw  # noqa: E402
from benchmarks.kernels_positional import VOCAB, embedding_case  # noqa: E402


def cases(device):
    import torch
    generator = torch.Generator(device=device).manual_seed(3)
    for hidden in (2560, 4096):
        table = rw.randn((VOCAB, hidden), "bfloat16", device, generator)
        for tokens in (1, 32, 512, 4096):
            yield embedding_case(tokens, hidden, device, generator, table)
        del table


if __name__ == "__main__":
    out = Path(sys.argv[1])
    rows = rw.measure(cases("cuda:0"), "cuda:0", "positional")
    rw.report(rows, out, "embedding", "embedding (GB/s; ratio = tilesafe / reference, same run)")
