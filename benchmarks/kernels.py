"""The kernel library against torch: every family of ``tilesafe.kernels`` that has a benchmark
module (``benchmarks/kernels_<family>.py``, each with ``run(out, device, quick) -> rows``), every
ratio against a reference measured in the same process.

    python -m benchmarks kernels --device cuda:0 --out DIR
"""

from __future__ import annotations

import importlib
import traceback
from pathlib import Path

FAMILIES = ("norms", "activations", "positional", "attention", "matmul")


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    rows: list = []
    failed = []
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"benchmarks.kernels_{family}")
        except ModuleNotFoundError as err:
            if err.name != f"benchmarks.kernels_{family}":
                raise
            continue
        print(f"-- kernels: {family} --", flush=True)
        try:
            rows += module.run(out, device, quick) or []
        except Exception as err:  # noqa: BLE001 (one family failing keeps the others)
            traceback.print_exc()
            failed.append(f"{family}: {type(err).__name__}: {err}")
    if failed:
        raise RuntimeError("; ".join(failed))
    return rows
