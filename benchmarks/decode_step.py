"""Where the Qwen3 engine's decode step spends its time: the recorded step replayed with groups
of kernels left out of the graph (their outputs then stale, which changes no kernel's work),
each variant timed in interleaved rounds in one process. The drop of each group is its cost on
the step's critical path, with the programmatic-launch overlap the real step has.

    python -m benchmarks.decode_step --model qwen3-4b [--device cuda:0] [--out FILE]

Groups: the GEMVs (``gemv``), rope (with the q/k norms), the KV-cache write, decode attention
(partial and merge), the norms; ``all_but_gemv`` leaves only the GEMVs. Random bf16 weights of
the named shape (the loading path of a real checkpoint), a 512-token prompt, batch 1.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from typing import Any, Optional

import numpy as np

#: each group's kernels, by name
GROUPS = {
    "none": None,
    "gemv": r"gemv|matmul|mma|merge_slices",
    "rope": r"rope",
    "kv": r"kv_write|coordinates",
    "attn": r"decode_attention",
    "norm": r"norm",
    "all_but_gemv": r"^(?!.*(gemv|matmul|mma|merge_slices))",
}


def _kernel_name(node: Any) -> str:
    return getattr(getattr(node, "kernel", None), "name", type(node).__name__)


def _step_without(engine: Any, pattern: Optional[str]) -> Any:
    """The engine's greedy decode step recorded without the kernels ``pattern`` matches."""
    from tilesafe.deviceops.graph import CudaGraph
    from tilesafe.models.qwen3 import engine as qwen3
    record = CudaGraph.record

    def leaving_out(graph: Any, op: Any) -> None:
        record(graph, op)
        if pattern is not None:
            graph.nodes[:] = [n for n in graph.nodes if not re.search(pattern, _kernel_name(n))]
    CudaGraph.record = leaving_out
    try:
        return qwen3._DecodeStep(engine, qwen3.GREEDY)
    finally:
        CudaGraph.record = record


def _ms_per_step(engine: Any, step: Any, token: int, start: int, chunks: int = 5,
                 per_chunk: int = 64) -> float:
    """The median over ``chunks`` of back-to-back replays (each chunk from position
    ``start``), in ms per replay."""
    times = []
    for _ in range(chunks + 1):
        engine.lengths = [start]
        step.at = None
        step.start(engine, [token])
        began = time.perf_counter()
        step.launch(per_chunk).sync()
        times.append((time.perf_counter() - began) / per_chunk * 1e3)
    return float(np.median(times[1:]))  # (the first chunk warms up)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_step",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen3-4b")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3.engine import Qwen3Engine
    engine = Qwen3Engine(write_random(args.model, progress=False), device=args.device,
                         max_seq=2048)
    prompt = np.random.default_rng(0).integers(0, engine.config.vocab_size, 512).tolist()
    token = int(np.argmax(engine.prefill(prompt)))
    steps = {name: _step_without(engine, pattern) for name, pattern in GROUPS.items()}
    kernels = collections.Counter(_kernel_name(n) for n in steps["none"].graph.nodes)
    lines = [f"# {args.model} on {args.device}: kernels per step {dict(kernels)}"]
    times: dict = collections.defaultdict(list)
    for _ in range(args.rounds):  # (interleaved: the machine's drift reaches every variant)
        for name, step in steps.items():
            times[name].append(_ms_per_step(engine, step, token, len(prompt) + 8))
    full = float(np.median(times["none"]))
    for name in GROUPS:
        ms = float(np.median(times[name]))
        lines.append(f"{name:14s} {ms:7.3f} ms/step  (group's cost {full - ms:+.3f} ms)  "
                     f"{[round(t, 3) for t in times[name]]}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
