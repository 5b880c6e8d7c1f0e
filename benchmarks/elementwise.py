"""Element-wise add, f32, N = 2^20 ... 2^28: tilesafe's safe kernel and the same kernel with
``unchecked_accesses`` (launched in ``ts.unsafe()``), against torch.add, Triton, cuTile Python
(when its wheel is installed) and two device-to-device copies (torch's ``copy_`` and a Triton
copy kernel; the faster is ``copy_ceiling``, the bandwidth ceiling).

Bandwidth counts the bytes that must move: two reads and one write per element for add, one
read and one write for the copy. The tile size and kernel hints of the tilesafe kernel are
chosen per size by a small search, recorded in ``elementwise_search.csv``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import tilesafe as ts
import tilesafe.core as tc

from . import _harness as h
from ._references import cutile_add_launcher, triton_add_launcher, triton_copy_launcher

SIZES = tuple(2**p for p in range(20, 29))
QUICK_SIZES = (2**20, 2**24, 2**28)
TILES = (1024, 4096, 8192, 16384)
HINTS = ((), (("occupancy", 2),), (("occupancy", 4),))
VARIANTS = ("safe", "unchecked", "torch.add", "triton", "cutile", "d2d_copy", "copy_kernel",
            "copy_ceiling")


def _add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
         y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


_KERNELS: dict = {}


def add_kernel(hints: tuple, unchecked: bool) -> Any:
    """The add kernel with ``hints`` (e.g. ``(("occupancy", 2),)``), checked or unchecked."""
    key = (hints, unchecked)
    if key not in _KERNELS:
        _KERNELS[key] = ts.kernel(_add, unchecked_accesses=unchecked,
                                  hints={"default": dict(hints)} if hints else None)
    return _KERNELS[key]


def _describe(tile: int, hints: tuple) -> str:
    return f"tile={tile}" + "".join(f",{k}={v}" for k, v in hints)


class _Sets:
    """Input/output sets for one size, enough of them to overflow L2 when rotated."""

    def __init__(self, n: int, device: str, generator: Any):
        import torch
        self.n = n
        self.count = max(1, min(8, math.ceil(2 * h.L2_BYTES / (12 * n))))
        self.x, self.y, self.z = [], [], []
        for _ in range(self.count):
            xs, xv = h.shared((n,), "float32", device)
            ys, yv = h.shared((n,), "float32", device)
            zs, zv = h.shared((n,), "float32", device)
            h.fill_random(xv, generator)
            h.fill_random(yv, generator)
            self.x.append((xs, xv))
            self.y.append((ys, yv))
            self.z.append((zs, zv))
        self.expected = (self.x[0][1].to(torch.float64) + self.y[0][1].to(torch.float64))
        torch.cuda.synchronize()  # filled on the default stream; measured on another

    def check(self, name: str) -> None:
        err = h.relative_error(self.z[0][1], self.expected)
        if not err <= 1e-7:
            raise AssertionError(f"elementwise {name} at n={self.n}: relative error {err:.3g}")


def _tilesafe_run(sets: _Sets, parts: list, kernel: Any, ts_stream: Any, reps: int,
                  name: str) -> Any:
    """Check ``kernel`` on set 0 (poisoned output), then return a graph-replay run of
    ``reps`` launches rotating over the sets."""
    h.poison(sets.z[0][1])
    kernel(parts[0], sets.x[0][0], sets.y[0][0]).sync_on(ts_stream)
    sets.check(name)

    def launches():
        for i in range(reps):
            j = i % sets.count
            yield kernel(parts[j], sets.x[j][0], sets.y[j][0])
    return h.tilesafe_graph(ts_stream, launches)


def _torch_run(sets: _Sets, stream: Any, reps: int, launch_for, name: str,
               check: bool = True) -> Any:
    """Check the launch on set 0 (unless it is the copy), then a torch-graph run of ``reps``
    launches rotating over the sets."""
    launchers = [launch_for(j) for j in range(sets.count)]
    if check:
        h.poison(sets.z[0][1])
        launchers[0]()
        stream.synchronize()
        sets.check(name)

    def body():
        for i in range(reps):
            launchers[i % sets.count]()
    return h.torch_graph(stream, body)


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    """Measure every size; write elementwise.csv, elementwise_search.csv and a plot."""
    import torch
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    generator = torch.Generator(device=device).manual_seed(0)
    rows: list = []
    search_rows: list = []
    skipped: dict = {}
    with ts.unsafe():  # the unchecked variant needs it; the safe one ignores it
        for n in (QUICK_SIZES if quick else SIZES):
            sets = _Sets(n, device, generator)
            add_bytes, copy_bytes = 12 * n, 8 * n
            reps = h.repetitions(add_bytes / 2.5e12)
            reps = max(sets.count, reps - reps % sets.count)
            runs: dict = {}
            with torch.cuda.stream(stream):
                runs["torch.add"] = _torch_run(
                    sets, stream, reps,
                    lambda j: lambda: torch.add(sets.x[j][1], sets.y[j][1], out=sets.z[j][1]),
                    "torch.add")
                runs["d2d_copy"] = _torch_run(
                    sets, stream, reps, lambda j: lambda: sets.z[j][1].copy_(sets.x[j][1]),
                    "copy", check=False)
                try:
                    runs["copy_kernel"] = _torch_run(
                        sets, stream, reps,
                        lambda j: triton_copy_launcher(sets.x[j][1], sets.z[j][1]), "copy",
                        check=False)
                except Exception as err:  # noqa: BLE001 (the column is skipped)
                    skipped["copy_kernel"] = f"{type(err).__name__}: {err}"[:300]
                for name, make in (("triton", triton_add_launcher),
                                   ("cutile", cutile_add_launcher)):
                    try:
                        runs[name] = _torch_run(
                            sets, stream, reps,
                            lambda j, make=make: make(sets.x[j][1], sets.y[j][1], sets.z[j][1]),
                            name)
                    except Exception as err:  # noqa: BLE001 (the column is skipped)
                        skipped[name] = f"{type(err).__name__}: {err}"[:300]
            torch_add_ms = h.median_ms(runs["torch.add"], stream, samples=9)
            best = None
            for tile in TILES:
                parts = [z.partition(tile) for z, _ in sets.z]
                for hints in HINTS:
                    label = "safe " + _describe(tile, hints)
                    run_safe = _tilesafe_run(sets, parts, add_kernel(hints, False), ts_stream,
                                             reps, label)
                    t = h.median_ms(run_safe, stream, samples=9)
                    search_rows.append(h.Row("elementwise_search", "f32", str(n), label,
                                             add_bytes / t / 1e9, "TB/s", "torch.add",
                                             add_bytes / torch_add_ms / 1e9))
                    if best is None or t < best[0]:
                        best = (t, tile, hints)
                sets.z = [(p.unpartition(), view) for p, (_, view) in zip(parts, sets.z)]
            _, tile, hints = best
            parts = [z.partition(tile) for z, _ in sets.z]
            runs["safe"] = _tilesafe_run(sets, parts, add_kernel(hints, False), ts_stream, reps,
                                         "safe")
            runs["unchecked"] = _tilesafe_run(sets, parts, add_kernel(hints, True), ts_stream,
                                              reps, "unchecked")
            same_code = h.same_machine_code(add_kernel(hints, False), add_kernel(hints, True),
                                            (parts[0], sets.x[0][0], sets.y[0][0]))
            timed = h.interleaved_ms(runs, stream)
            sets.z = [(p.unpartition(), view) for p, (_, view) in zip(parts, sets.z)]
            ms = {k: v[0] / reps for k, v in timed.items()}
            spread = {k: (v[2] - v[1]) / v[0] for k, v in timed.items()}
            tbs = {k: (copy_bytes if k in ("d2d_copy", "copy_kernel") else add_bytes) / v / 1e9
                   for k, v in ms.items()}
            tbs["copy_ceiling"] = max(tbs["d2d_copy"], tbs.get("copy_kernel", 0.0))
            size = str(n)
            config = _describe(tile, hints)
            h.compare(rows, "elementwise_add", "f32", size, "TB/s", tbs, "torch.add", VARIANTS)
            h.compare(rows, "elementwise_add", "f32", size, "TB/s", tbs, "copy_ceiling",
                      ("safe", "unchecked", "torch.add"))
            h.compare(rows, "elementwise_add", "f32", size, "TB/s", tbs, "unchecked", ("safe",))
            rows.append(h.Row("elementwise_config", "f32", size, config, tbs["safe"], "TB/s",
                              "torch.add", tbs["torch.add"]))
            rows.append(h.Row("elementwise_safety", "f32", size,
                              "safe and unchecked cubins identical", float(same_code), "bool"))
            print(f"  n=2^{int(math.log2(n))}: safe {tbs['safe']:.3f} TB/s ({config}), "
                  f"unchecked {tbs['unchecked']:.3f}, torch.add {tbs['torch.add']:.3f}, "
                  f"copy_ {tbs['d2d_copy']:.3f}, copy kernel {tbs.get('copy_kernel', 0):.3f}; "
                  "spread (max-min)/median: "
                  + ", ".join(f"{k} {v:.1%}" for k, v in spread.items()), flush=True)
            del sets
            torch.cuda.empty_cache()
    for name, why in skipped.items():
        print(f"  (column {name} skipped: {why})")
    h.write_csv(rows, out / "elementwise.csv")
    h.write_csv(search_rows, out / "elementwise_search.csv")
    series = {v: [(int(r.size), r.value) for r in rows
                  if r.benchmark == "elementwise_add" and r.variant == v
                  and r.reference == "torch.add"] for v in VARIANTS if v != "torch.add"}
    series["torch.add"] = [(int(r.size), r.reference_value) for r in rows
                           if r.benchmark == "elementwise_add" and r.variant == "safe"
                           and r.reference == "torch.add"]
    h.plot(out / "elementwise.png", "f32 element-wise add (TB/s, higher is better)", series,
           "elements", "TB/s")
    h.print_table("element-wise add, f32 (TB/s; ratio = value / reference, same run)",
                  [r for r in rows if r.benchmark == "elementwise_add"])
    return rows
