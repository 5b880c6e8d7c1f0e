"""A/B in one process: element-wise add with the grid-dependency gate and programmatic launch
(default), gate but serialized launches, no gate (old code), and torch.add."""
import sys
sys.path.insert(0, ".")
import torch
import tilesafe as ts
from benchmarks import _harness as h
from benchmarks.elementwise import _Sets, _tilesafe_run, _torch_run, _add
from tilesafe.backends.tileir import lower

stream = torch.cuda.Stream()
ts_stream = ts.Stream.wrap(stream, "cuda:0")
gen = torch.Generator(device="cuda:0").manual_seed(0)

def serialize(kernel):
    for exe in kernel._gpu_cache.values():
        exe.programmatic = False
    for plan in kernel._plans.values():
        if "packed" in plan.backend:
            plan.backend["packed"].programmatic = False

for n, occ in ((1 << 20, 2), (1 << 24, 2), (1 << 28, 4)):
    sets = _Sets(n, "cuda:0", gen)
    reps = h.repetitions(12 * n / 2.5e12)
    reps = max(sets.count, reps - reps % sets.count)
    parts = [z.partition(1024) for z, _ in sets.z]
    runs = {}
    with torch.cuda.stream(stream):
        runs["torch.add"] = _torch_run(sets, stream, reps, lambda j: lambda: torch.add(
            sets.x[j][1], sets.y[j][1], out=sets.z[j][1]), "torch.add")
    hints = {"default": {"occupancy": occ}}
    k_pdl = ts.kernel(_add, hints=hints)
    runs["gate+programmatic"] = _tilesafe_run(sets, parts, k_pdl, ts_stream, reps, "a")
    k_ser = ts.kernel(_add, hints=hints)
    h.poison(sets.z[0][1]); k_ser(parts[0], sets.x[0][0], sets.y[0][0]).sync_on(ts_stream)
    serialize(k_ser)
    runs["gate, serialized"] = _tilesafe_run(sets, parts, k_ser, ts_stream, reps, "b")
    lower.GRID_DEPENDENCY_SINCE = (99, 0)
    k_old = ts.kernel(_add, hints=hints)
    runs["no gate, serialized"] = _tilesafe_run(sets, parts, k_old, ts_stream, reps, "c")
    lower.GRID_DEPENDENCY_SINCE = (13, 4)
    serialize(k_old)
    for r in runs.values():
        r(lambda: None)  # capture now
    times = h.interleaved_ms(runs, stream, rounds=21)
    line = ", ".join(f"{k} {12 * n * reps / (t[0] * 1e-3) / 1e12:.3f} TB/s (spread "
                     f"{(t[2] - t[1]) / t[0] * 100:.1f}%)" for k, t in times.items())
    print(f"n=2^{n.bit_length() - 1}: {line}", flush=True)
    sets.z = [(p.unpartition(), v) for p, (_, v) in zip(parts, sets.z)]
    del sets
