"""Command line of the benchmark suite.

    python -m benchmarks all --out benchmarks/results/h100-2026-11-22
    python -m benchmarks elementwise gemm modes lowp_gemm histogram indexed attention
                         checks_cost kernels
                         decode
                         [--quick]
                         [--device cuda:0] [--out DIR]
    python -m benchmarks summary DIR      (the Markdown headline tables of a results DIR)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import _harness as h

BENCHMARKS = ("elementwise", "gemm", "modes", "lowp_gemm", "histogram", "indexed", "attention",
              "checks_cost", "kernels", "grid_dependency", "decode")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["summary"]:
        from . import summary
        return summary.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", nargs="+", choices=("all",) + BENCHMARKS)
    parser.add_argument("--out", default="benchmarks/results/latest",
                        help="directory for CSV files, plots and env.json")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    args = parser.parse_args(argv)
    if not args.device.startswith("cuda"):
        parser.error("the suite measures GPUs: pass --device cuda:N (the interpreter has "
                     "benchmarks/interp_vector_add.py)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = h.environment()
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    chosen = BENCHMARKS if "all" in args.which else tuple(args.which)
    failed = []
    for name in chosen:
        start = time.perf_counter()
        print(f"\n== {name} ==", flush=True)
        try:
            if name == "elementwise":
                from . import elementwise
                elementwise.run(out, args.device, args.quick)
            elif name == "gemm":
                from . import gemm
                gemm.run(out, args.device, args.quick)
            elif name == "lowp_gemm":
                from . import lowp_gemm
                lowp_gemm.run(out, args.device, args.quick)
            elif name == "histogram":
                from . import histogram
                histogram.run(out, args.device, args.quick)
            elif name == "indexed":
                from . import indexed
                indexed.run(out, args.device, args.quick)
            elif name == "attention":
                from . import attention
                attention.run(out, args.device, args.quick)
            elif name == "checks_cost":
                from . import checks_cost
                checks_cost.run(out, args.device, args.quick)
            elif name == "grid_dependency":
                from . import grid_dependency
                grid_dependency.run(out, args.device, args.quick)
            elif name == "decode":
                from . import decode
                decode.run(out, args.device, args.quick)
            elif name == "kernels":
                from . import kernels
                kernels.run(out, args.device, args.quick)
            else:
                from . import execution_modes
                execution_modes.run(out, args.device, args.quick)
        except Exception as err:  # noqa: BLE001 (one benchmark failing keeps the others)
            import traceback
            traceback.print_exc()
            failed.append(f"{name}: {type(err).__name__}: {err}")
        print(f"== {name}: {time.perf_counter() - start:.0f} s ==", flush=True)
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
