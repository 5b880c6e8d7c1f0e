"""Qwen3-4B's o and gated down projections (2560 x 4096 accumulating, 2560 x 9728 with the
SwiGLU gating), the GEMVs furthest from the copy rate in the 4b step, over more configs than
``../h200-2026-12-01/gemv_stages/gemv_stages.py`` tried: fewer columns per program (4 and 2:
640 and 1280 programs, where 16 columns give 160 programs on 132 SMs) with chunks small
enough for several TMA buffers at the occupancy. Weights stream from HBM (copies rotated past
L2), CUDA-graph replays, one process; the functions are those of gemv_stages.py.

    python gemv_sweep.py micro            # the table
    python gemv_sweep.py engine ROUNDS TOKENS   # 4b step: shipped vs $CUSTOM (JSON)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "h200-2026-12-01" / "gemv_stages"))
import gemv_stages as GS  # noqa: E402

GS.SHAPES = {"qwen3-4b": [("acc", 2560, 4096), ("silu", 2560, 9728)]}
GS.CONFIGS = [(16, 256, 3), (16, 512, 2), (8, 512, 3), (8, 256, 4), (8, 256, 3), (8, 256, 6),
              (16, 128, 4), (16, 128, 6), (4, 1024, 3), (4, 512, 4), (4, 512, 6), (4, 512, 8),
              (4, 256, 8), (2, 1024, 4), (2, 1024, 6), (2, 2048, 3), (2, 512, 8)]

if __name__ == "__main__":
    if sys.argv[1] == "micro":
        GS.micro(["qwen3-4b"])
    else:
        GS.engine("qwen3-4b", int(sys.argv[2]), int(sys.argv[3]))
