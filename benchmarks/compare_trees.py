"""Launch-mode sweeps of two trees run interleaved in the same calls (``gpu_checks.sh modes
modes_old ...``, gathered into a folder's ``sweeps.csv``): medians at N = 1000 of each mode,
their ratio, the host work above the driver floor measured in the same sweep, and the same
over the faster processes only. From the repository root:
python benchmarks/compare_trees.py benchmarks/results/<gpu>-<date>/<folder> [--plot]"""
import csv
import statistics
import sys
from pathlib import Path

HERE = Path(next(a for a in sys.argv[1:] if not a.startswith("--")))
MODES = ("per_op_sync", "chained_sync", "async", "graph_replay")
FLOOR = {"per_op_sync": "driver_launch_sync", "chained_sync": "driver_bare_launch",
         "async": "driver_bare_launch"}

rows = [r for r in csv.DictReader(open(HERE / "sweeps.csv"))  # one row per sweep and mode:
        if r["n"] == "1000" and r["variant"] in MODES  # the one against torch in the same sweep
        and r["torch_or_reference"].startswith("torch")]
torch = {(tree, mode): [] for tree in ("before", "after") for mode in MODES}
for r in rows:
    torch[r["tree"], r["variant"]].append(float(r["reference_us_per_op"]))
values = {(tree, mode): [] for tree in ("before", "after") for mode in MODES}
above = {(tree, mode): [] for tree in ("before", "after") for mode in FLOOR}
for r in rows:
    values[r["tree"], r["variant"]].append(float(r["us_per_op"]))
    if r["variant"] in FLOOR:
        above[r["tree"], r["variant"]].append(float(r["us_per_op"]) -
                                              float(r[FLOOR[r["variant"]]]))
print(f"{'mode (N=1000, us/op)':24s} {'before':>8s} {'after':>8s} {'after/before':>13s}  "
      f"{'torch, same sweeps':>18s}  sweeps")
for mode in MODES:
    b, a = (statistics.median(values[t, mode]) for t in ("before", "after"))
    tb, ta = (statistics.median(torch[t, mode]) for t in ("before", "after"))
    print(f"{mode:24s} {b:8.3f} {a:8.3f} {a / b:13.3f}  {tb:8.3f} / {ta:7.3f}  "
          f"{len(values['before', mode])}+{len(values['after', mode])}")
print("host work above the driver floor of the same sweep:")
for mode in FLOOR:
    b, a = (statistics.median(above[t, mode]) for t in ("before", "after"))
    print(f"  {mode:22s} {b:8.3f} {a:8.3f} {a / b:13.3f}")

# The machine's processes come in two speeds (torch.add + sync per op near 14 us in some, near
# 21 us in others, in both trees): the same comparison over the processes of the faster kind.
fast = {(r["call"], r["sweep"]) for r in rows
        if r["variant"] == "per_op_sync" and float(r["reference_us_per_op"]) < 17}
print(f"the {len(fast)} sweeps whose torch per-op reference ran under 17 us:")
for mode in MODES:
    picked = {t: [float(r["us_per_op"]) for r in rows if r["tree"] == t and r["variant"] == mode
                  and (r["call"], r["sweep"]) in fast] for t in ("before", "after")}
    b, a = statistics.median(picked["before"]), statistics.median(picked["after"])
    print(f"  {mode:22s} {b:8.3f} {a:8.3f} {a / b:13.3f}  {len(picked['before'])}+"
          f"{len(picked['after'])}")

if "--plot" in sys.argv:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    for ax, mode in zip(axes, MODES):
        ax.boxplot([values["before", mode], values["after", mode]], tick_labels=["before", "after"])
        ax.set_title(mode)
        ax.set_ylabel("us/op (N = 1000)")
    fig.suptitle(f"launch modes before/after ({HERE.name}), interleaved sweeps")
    fig.tight_layout()
    fig.savefig(HERE / "before_after.png", dpi=80)
