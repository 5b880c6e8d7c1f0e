"""What each kernel of the Qwen3 engine's recorded decode step adds to the step: the step is
replayed under ``torch.profiler`` (CUPTI's records of every kernel of the graph), and a
kernel's *marginal time* is its end minus the end of the kernel before it. With programmatic
dependent launch a kernel starts before its predecessor ends, so its own duration overlaps;
the marginal times do not, and they add up to the step.

    python -m benchmarks.decode_marginal --model qwen3-4b [--device cuda:0] [--out DIR]

Prints, per kernel name, the launches per step and their marginal time (the median over the
profiled replays of each launch, summed), then the first layer's kernels in order. Random bf16
weights of the named shape, a 512-token prompt, batch 1. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

#: replays profiled, and the first ones left out of the medians (warm-up)
REPLAYS, WARM = 10, 2


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_marginal",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen3-4b")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default=None, help="also write the table and the trace here")
    args = parser.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3 import engine as qwen3
    engine = qwen3.Qwen3Engine(write_random(args.model, progress=False), device=args.device,
                               max_seq=2048)
    prompt = np.random.default_rng(0).integers(0, engine.config.vocab_size, 512).tolist()
    token = int(np.argmax(engine.prefill(prompt)))
    step = qwen3._DecodeStep(engine, qwen3.GREEDY)

    engine.lengths = [len(prompt) + 8]
    step.at = None
    step.start(engine, [token])
    step.launch(16).sync()  # (warm)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step.launch(REPLAYS).sync()
        torch.cuda.synchronize()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / "trace.json"))
    kernels = sorted((e for e in json.loads((out / "trace.json").read_text())["traceEvents"]
                      if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    per_step = len(kernels) // REPLAYS
    marginal: dict = collections.defaultdict(list)
    duration: dict = collections.defaultdict(list)
    for r in range(WARM, REPLAYS):
        last_end = None
        for i, k in enumerate(kernels[r * per_step:(r + 1) * per_step]):
            end = k["ts"] + k["dur"]
            marginal[(i, k["name"])].append(k["dur"] if last_end is None else end - last_end)
            duration[(i, k["name"])].append(k["dur"])
            last_end = end if last_end is None else max(end, last_end)
    total: dict = collections.defaultdict(float)
    count: collections.Counter = collections.Counter()
    for (_, name), times in marginal.items():
        total[name] += float(np.median(times))
        count[name] += 1
    lines = [f"# {args.model} on {args.device}: {per_step} kernels per step, step from the "
             f"marginal times {sum(total.values()) / 1e3:.3f} ms"]
    for name in sorted(total, key=lambda n: -total[n]):
        lines.append(f"{name[:40]:40s} n={count[name]:4d}  marginal {total[name] / 1e3:7.3f} ms"
                     f"  mean {total[name] / count[name]:6.2f} us")
    lines.append("# the first kernels in order: index, name, marginal us, duration us")
    for i, name in sorted(marginal)[:16]:
        lines.append(f"{i:3d} {name[:40]:40s} {np.median(marginal[(i, name)]):7.2f} "
                     f"{np.median(duration[(i, name)]):7.2f}")
    text = "\n".join(lines)
    print(text)
    (out / "marginal.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
