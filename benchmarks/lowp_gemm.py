"""Low-precision GEMM on the tensor cores: f8e4m3fn and tf32.

1. **f8**: C = (A @ B) * scale_a * scale_b with A (M x K) and B (K x N) in f8e4m3fn, f32
   accumulation, the two per-tensor f32 scales applied in the epilogue, C in bf16; against
   ``torch._scaled_mm(a, b_nk.t(), scale_a, scale_b, out_dtype=torch.bfloat16)`` in the same
   process and on the same memory. ``_scaled_mm`` wants B column-major, so B is stored as
   ``b_nk`` (N x K, row-major) and both libraries read its transpose: tilesafe as the strided
   view ``b_nk.T`` (K x N with strides (1, K)), which is also the operand layout Hopper's f8
   tensor cores need (K-major). A row-major copy of B is searched too (``brow``).
2. **tf32**: C = A @ B with A, B and C in f32, the kernel converting the loaded tiles with
   ``.astype(tc.tf32)`` (round to nearest even) and accumulating in f32; against
   ``torch.matmul`` with ``torch.backends.cuda.matmul.allow_tf32 = True``.

Both kernels have the shape of ``benchmarks/gemm.py``'s (the persistent kernel over a
``MappedPartitionMut`` walking bands of GROUP_ROWS tile rows, and the tiled kernel), with tile
shapes and hints searched per problem (``lowp_gemm_search.csv``; winners as
``lowp_gemm_config`` rows of ``lowp_gemm.csv``). Before timing, every variant's output is
checked against a float64 reference (on a sample of rows at full size), and a small odd-sized
problem (``CHECK_SHAPE``) is checked in full. TFLOP/s counts 2·M·N·K operations.

``python -m benchmarks lowp_gemm --device cuda:0 --out DIR``; on a machine without a GPU,
``python -m benchmarks.lowp_gemm --compile-only`` compiles every configuration for sm_90 and
runs both kernels on the interpreter against float64.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

import tilesafe as ts
import tilesafe.core as tc

from . import _harness as h

SHAPES = ((8192, 8192, 8192),)
QUICK_SHAPES = ((8192, 8192, 8192),)
CHECK_SHAPE = (1000, 776, 1040)  # not multiples of the tiles: edge tiles are masked/padded
GROUP_ROWS = 8
SCALE_A, SCALE_B = 0.75, 2.0 ** -3
# (style, BM, BN, BK, hints, B layout). f8 tiles carry twice the K of f16 ones per byte.
F8_CONFIGS = (
    ("persistent", 128, 256, 128, (("num_worker_warps_per_cta", 8),), "bcol"),
    ("persistent", 128, 256, 64, (("num_worker_warps_per_cta", 8),), "bcol"),
    ("persistent", 128, 128, 128, (), "bcol"),
    ("persistent", 128, 128, 128, (("num_cta_in_cga", 2),), "bcol"),
    ("persistent", 256, 128, 128, (("num_worker_warps_per_cta", 8),), "bcol"),
    ("tiled", 128, 256, 128, (("num_worker_warps_per_cta", 8),), "bcol"),
    ("tiled", 128, 128, 128, (("occupancy", 2),), "bcol"),
    ("persistent", 128, 256, 128, (("num_worker_warps_per_cta", 8),), "brow"),
    ("persistent", 128, 128, 128, (), "brow"),
)
TF32_CONFIGS = (  # (B is f32, row-major: the layout field does not apply)
    ("persistent", 128, 256, 32, (("num_worker_warps_per_cta", 8),), ""),
    ("persistent", 128, 128, 32, (), ""),
    ("persistent", 128, 128, 64, (), ""),
    ("persistent", 128, 256, 16, (("num_worker_warps_per_cta", 8),), ""),
    ("tiled", 128, 256, 32, (("num_worker_warps_per_cta", 8),), ""),
    ("tiled", 128, 128, 32, (("occupancy", 2),), ""),
)
VARIANTS = ("f8 persistent", "f8 tiled", "torch._scaled_mm", "tf32 persistent", "tf32 tiled",
            "torch.matmul tf32")


# -- the kernels --------------------------------------------------------------------------------

def _f8_tiled(z: tc.MutTensor[tc.bf16, ("BM", "BN")], x: tc.Tensor[tc.f8e4m3fn, (-1, -1)],
              y: tc.Tensor[tc.f8e4m3fn, (-1, -1)], scale_a: float, scale_b: float,
              BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), tc.f32)
    for k in range(tc.num_tiles(px, 1)):
        acc = tc.mma(px.load((i, k)), py.load((k, j)), acc)
    z.store((acc * (scale_a * scale_b)).astype(tc.bf16))


def _f8_persistent(z: tc.MappedPartitionMut[tc.bf16, ("BM", "BN"), "G"],
                   x: tc.Tensor[tc.f8e4m3fn, (-1, -1)], y: tc.Tensor[tc.f8e4m3fn, (-1, -1)],
                   scale_a: float, scale_b: float, BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for k in range(tc.num_tiles(px, 1)):
            acc = tc.mma(px.load((m, k)), py.load((k, n)), acc)
        z.store((acc * (scale_a * scale_b)).astype(tc.bf16), idx)


def _tf32_tiled(z: tc.MutTensor[tc.f32, ("BM", "BN")], x: tc.Tensor[tc.f32, (-1, -1)],
                y: tc.Tensor[tc.f32, (-1, -1)], BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    i, j, _ = tc.get_tile_block_id()
    acc = tc.zeros((BM, BN), tc.f32)
    for k in range(tc.num_tiles(px, 1)):
        acc = tc.mma(px.load((i, k)).astype(tc.tf32), py.load((k, j)).astype(tc.tf32), acc)
    z.store(acc)


def _tf32_persistent(z: tc.MappedPartitionMut[tc.f32, ("BM", "BN"), "G"],
                     x: tc.Tensor[tc.f32, (-1, -1)], y: tc.Tensor[tc.f32, (-1, -1)],
                     BK: tc.Const[int]):
    px, py = x.partition((BM, BK)), y.partition((BK, BN))
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for k in range(tc.num_tiles(px, 1)):
            acc = tc.mma(px.load((m, k)).astype(tc.tf32), py.load((k, n)).astype(tc.tf32),
                         acc)
        z.store(acc, idx)


_FUNCTIONS = {("f8", "tiled"): _f8_tiled, ("f8", "persistent"): _f8_persistent,
              ("tf32", "tiled"): _tf32_tiled, ("tf32", "persistent"): _tf32_persistent}
_KERNELS: dict = {}


def kernel(kind: str, style: str, hints: tuple) -> Any:
    """The ``kind`` ("f8" or "tf32") GEMM kernel of ``style`` with ``hints``."""
    key = (kind, style, hints)
    if key not in _KERNELS:
        _KERNELS[key] = ts.kernel(_FUNCTIONS[(kind, style)],
                                  hints={"default": dict(hints)} if hints else None)
    return _KERNELS[key]


def describe(config: tuple) -> str:
    style, bm, bn, bk, hints, layout = config
    return (f"{style} {bm}x{bn}x{bk}" + "".join(f",{k}={v}" for k, v in hints)
            + (",brow" if layout == "brow" else ""))


def programs(config: tuple, shape: tuple, sms: int) -> int:
    _, bm, bn, _, hints, _ = config
    tiles = -(-shape[0] // bm) * -(-shape[1] // bn)
    cluster = dict(hints).get("num_cta_in_cga", 1)
    return max(cluster, min(tiles, sms) // cluster * cluster)


def output_of(config: tuple, out: Any, shape: tuple, sms: int) -> Any:
    """``out`` (an M x N tensor) partitioned (and mapped) as ``config``'s kernel takes it."""
    style, bm, bn = config[:3]
    part = out.partition((bm, bn))
    return part.map((GROUP_ROWS, 1), programs(config, shape, sms)) if style == "persistent" \
        else part


def launch(kind: str, config: tuple, out: Any, a: Any, b: Any) -> Any:
    """The launch (a DeviceOp) of ``config``'s kernel on the prepared output ``out``."""
    style, _, _, bk, hints, _ = config
    k = kernel(kind, style, hints)
    if kind == "f8":
        return k(out, a, b, SCALE_A, SCALE_B, BK=bk)
    return k(out, a, b, BK=bk)


def unpartitioned(out: Any) -> Any:
    part = out.partition if hasattr(out, "map_shape") else out
    return part.unpartition()


# -- references -------------------------------------------------------------------------------

def f8_reference(a: np.ndarray, b_kn: np.ndarray) -> np.ndarray:
    """float64 ``(a @ b) * scale_a * scale_b`` of the f8 operands (exact products)."""
    return (a.astype(np.float64) @ b_kn.astype(np.float64)) * (SCALE_A * SCALE_B)


def relative_error(result: np.ndarray, reference: np.ndarray) -> float:
    r = np.asarray(result, dtype=np.float64)
    if not np.isfinite(r).all():
        return float("inf")
    return float(np.linalg.norm(r - reference) / np.linalg.norm(reference))


# bf16 output rounding (2**-9 relative) plus Hopper's reduced-precision f8 accumulation;
# tf32: operand rounding (2**-11 relative each) of an f32-accumulated product.
LIMITS = {"f8": 8e-3, "tf32": 2e-3}


# -- without a GPU: compile every configuration for sm_90 and check on the interpreter --------

def compile_only(device: str = "cpu") -> None:
    """Compile every configuration for sm_90 (tileiras, no GPU needed) and run each kernel
    style on the interpreter against float64, at small sizes."""
    rng = np.random.default_rng(0)
    m, n, k = 200, 136, 264
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a8 = ts.tensor(a, ts.float8_e4m3fn).sync()
    b8_nk = ts.tensor(np.ascontiguousarray(b.T), ts.float8_e4m3fn).sync()
    b8_kn = ts.tensor(b, ts.float8_e4m3fn).sync()
    af, bf = ts.tensor(a).sync(), ts.tensor(b).sync()
    for kind, configs in (("f8", F8_CONFIGS), ("tf32", TF32_CONFIGS)):
        for config in configs:
            out = ts.empty((m, n), ts.bfloat16 if kind == "f8" else ts.float32).sync()
            part = output_of(config, out, (m, n, k), 4)
            x, y = (a8, b8_nk.T if config[5] == "bcol" else b8_kn) if kind == "f8" \
                else (af, bf)
            style, _, _, bk, hints, _ = config
            args = (part, x, y, SCALE_A, SCALE_B) if kind == "f8" else (part, x, y)
            cubin = kernel(kind, style, hints).compile(*args, BK=bk, target="sm_90")
            print(f"  {kind} {describe(config)}: sm_90 cubin {len(cubin)} bytes", flush=True)
    for kind, style in _FUNCTIONS:
        config = (style, 64, 64, 32, (), "bcol")
        out = ts.zeros((m, n), ts.bfloat16 if kind == "f8" else ts.float32).sync()
        part = output_of(config, out, (m, n, k), 3)
        if kind == "f8":
            part, *_ = launch(kind, config, part, a8, b8_nk.T).sync()
            ref = f8_reference(a8.numpy(), b8_nk.numpy().T)
        else:
            part, *_ = launch(kind, config, part, af, bf).sync()
            ref = a.astype(np.float64) @ b
        err = relative_error(unpartitioned(part).numpy(), ref)
        print(f"  interpreter {kind} {style}: relative error {err:.2e} vs float64", flush=True)
        if not err <= LIMITS[kind]:
            raise AssertionError(f"{kind} {style} on the interpreter: relative error {err}")


# -- on a GPU -----------------------------------------------------------------------------------

class _Problem:
    """Operands of one shape for both GEMMs (tilesafe tensors and torch views of the same
    memory), float64 references on a sample of rows, and one output per slot."""

    def __init__(self, shape: tuple, device: str, generator: Any):
        import torch
        m, n, k = shape
        self.shape, self.device = shape, device
        self.flops = 2.0 * m * n * k
        self.reps = h.repetitions(self.flops / 1e15, target=4e-3, most=20)
        # f8 operands: A (M x K) and B as b_nk (N x K) row-major, plus a K x N row-major copy
        self.a8, self.a8v = h.shared((m, k), "float8_e4m3fn", device)
        self.b8, self.b8v = h.shared((n, k), "float8_e4m3fn", device)
        self.b8row, self.b8rowv = h.shared((k, n), "float8_e4m3fn", device)
        h.fill_random(self.a8v, generator)
        h.fill_random(self.b8v, generator)
        self.b8rowv.view(torch.uint8).copy_(self.b8v.view(torch.uint8).t())  # (the bits)
        self.scale_a = torch.tensor(SCALE_A, device=device, dtype=torch.float32)
        self.scale_b = torch.tensor(SCALE_B, device=device, dtype=torch.float32)
        # f32 operands of the tf32 GEMM
        self.af, self.afv = h.shared((m, k), "float32", device)
        self.bf, self.bfv = h.shared((k, n), "float32", device)
        h.fill_random(self.afv, generator)
        h.fill_random(self.bfv, generator)
        self.rows = torch.arange(0, m, max(1, m // 256), device=device)
        self.expected = {
            "f8": (self.a8v[self.rows].to(torch.float64) @ self.b8v.to(torch.float64).t())
            * (SCALE_A * SCALE_B),
            "tf32": self.afv[self.rows].to(torch.float64) @ self.bfv.to(torch.float64)}
        self.outputs: dict = {}
        torch.cuda.synchronize()

    def b_operand(self, layout: str) -> Any:
        return self.b8.T if layout == "bcol" else self.b8row

    def output(self, kind: str, slot: str) -> tuple:
        key = (kind, slot)
        if key not in self.outputs:
            self.outputs[key] = h.shared(self.shape[:2], "bfloat16" if kind == "f8"
                                         else "float32", self.device)
        return self.outputs[key]

    def check(self, kind: str, name: str, view: Any) -> None:
        err = h.relative_error(view[self.rows], self.expected[kind])
        if not err <= LIMITS[kind]:
            raise AssertionError(f"lowp_gemm {name} {self.shape}: relative error {err:.3g} "
                                 f"over {LIMITS[kind]}")


def _tilesafe_run(problem: _Problem, kind: str, config: tuple, ts_stream: Any, sms: int,
                  slot: str) -> tuple:
    """Check one configuration (poisoned output) and return (graph-replay run, give-back)."""
    tensor, view = problem.output(kind, slot)
    out = output_of(config, tensor, problem.shape, sms)
    a, b = (problem.a8, problem.b_operand(config[5])) if kind == "f8" \
        else (problem.af, problem.bf)

    def give_back() -> None:
        problem.outputs[(kind, slot)] = (unpartitioned(out), view)
    try:
        h.poison(view)
        launch(kind, config, out, a, b).sync_on(ts_stream)
        problem.check(kind, f"{kind} {describe(config)}", view)

        def launches():
            for _ in range(problem.reps):
                yield launch(kind, config, out, a, b)
        return h.tilesafe_graph(ts_stream, launches), give_back
    except BaseException:
        give_back()
        raise


def _torch_run(problem: _Problem, kind: str, stream: Any) -> Any:
    import torch
    _, view = problem.output(kind, "torch")
    if kind == "f8":
        args = (problem.a8v, problem.b8v.t(), problem.scale_a, problem.scale_b)
        try:  # write into the output directly where this torch accepts ``out=``
            torch._scaled_mm(*args, out_dtype=torch.bfloat16, out=view)
            direct = True
        except (TypeError, RuntimeError):
            direct = False

        def launch_torch():
            if direct:
                torch._scaled_mm(*args, out_dtype=torch.bfloat16, out=view)
            else:
                view.copy_(torch._scaled_mm(*args, out_dtype=torch.bfloat16))
    else:
        def launch_torch():
            torch.matmul(problem.afv, problem.bfv, out=view)
    h.poison(view)
    launch_torch()
    stream.synchronize()
    problem.check(kind, "torch", view)

    def body():
        for _ in range(problem.reps):
            launch_torch()
    return h.torch_graph(stream, body)


def _check_small(device: str, ts_stream: Any, sms: int) -> None:
    """Both GEMMs (best-guess first configuration of each style) on CHECK_SHAPE, in full,
    against float64."""
    import torch
    generator = torch.Generator(device=device).manual_seed(7)
    problem = _Problem(CHECK_SHAPE, device, generator)
    rows = torch.arange(CHECK_SHAPE[0], device=device)
    problem.rows = rows
    problem.expected = {
        "f8": (problem.a8v.to(torch.float64) @ problem.b8v.to(torch.float64).t())
        * (SCALE_A * SCALE_B),
        "tf32": problem.afv.to(torch.float64) @ problem.bfv.to(torch.float64)}
    for kind, configs in (("f8", F8_CONFIGS), ("tf32", TF32_CONFIGS)):
        for style in ("persistent", "tiled"):
            config = next(c for c in configs if c[0] == style)
            _, give_back = _tilesafe_run(problem, kind, config, ts_stream, sms, "check")
            give_back()
    print(f"  correctness at {CHECK_SHAPE}: f8 and tf32, both styles, within "
          f"{LIMITS} of float64", flush=True)


def _measure(problem: _Problem, kind: str, stream: Any, ts_stream: Any, sms: int,
             rows: list, search_rows: list, skipped: dict) -> dict:
    configs = F8_CONFIGS if kind == "f8" else TF32_CONFIGS
    reference = "torch._scaled_mm" if kind == "f8" else "torch.matmul tf32"
    size = "x".join(map(str, problem.shape))
    runs = {reference: _torch_run(problem, kind, stream)}
    ref_ms = h.median_ms(runs[reference], stream, samples=7) / problem.reps
    best: dict = {}
    for config in configs:
        label = f"{kind} {describe(config)}"
        try:
            run, give_back = _tilesafe_run(problem, kind, config, ts_stream, sms, "search")
        except Exception as err:  # noqa: BLE001 (recorded; the search goes on)
            skipped[label] = f"{type(err).__name__}: {err}"[:300]
            continue
        try:
            t = h.median_ms(run, stream, samples=7) / problem.reps
        finally:
            give_back()
        search_rows.append(h.Row("lowp_gemm_search", kind, size, label, problem.flops / t / 1e9,
                                 "TFLOP/s", reference, problem.flops / ref_ms / 1e9))
        family = f"{kind} {config[0]}"
        if family not in best or t < best[family][0]:
            best[family] = (t, config)
    give_backs = []
    for family, (_, config) in best.items():
        rows.append(h.Row("lowp_gemm_config", kind, size, f"{kind} {describe(config)}",
                          float("nan"), ""))
        run, give_back = _tilesafe_run(problem, kind, config, ts_stream, sms, family)
        runs[family] = run
        give_backs.append(give_back)
    timed = h.interleaved_ms(runs, stream, rounds=41)
    for give_back in give_backs:
        give_back()
    tflops = {name: problem.flops / (v[0] / problem.reps) / 1e9 for name, v in timed.items()}
    for row in rows:
        if row.benchmark == "lowp_gemm_config" and row.dtype == kind and row.size == size \
                and row.value != row.value:
            family = " ".join(row.variant.split(" ")[:2])
            row.value, row.unit = tflops.get(family, float("nan")), "TFLOP/s"
            row.reference, row.reference_value = reference, tflops[reference]
    print(f"  {kind} {size}: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(tflops.items()))
          + " TFLOP/s", flush=True)
    h.compare(rows, "lowp_gemm", kind, size, "TFLOP/s", tflops, reference,
              [f"{kind} persistent", f"{kind} tiled"])
    return tflops


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    """Check, search and time both GEMMs; write lowp_gemm.csv and lowp_gemm_search.csv."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    generator = torch.Generator(device=device).manual_seed(1)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    rows: list = []
    search_rows: list = []
    skipped: dict = {}
    with torch.cuda.stream(stream):
        _check_small(device, ts_stream, sms)
        for shape in (QUICK_SHAPES if quick else SHAPES):
            problem = _Problem(shape, device, generator)
            for kind in ("f8", "tf32"):
                _measure(problem, kind, stream, ts_stream, sms, rows, search_rows, skipped)
            del problem
            torch.cuda.empty_cache()
    for name, why in skipped.items():
        print(f"  (skipped {name}: {why})")
    h.write_csv(rows, out / "lowp_gemm.csv")
    h.write_csv(search_rows, out / "lowp_gemm_search.csv")
    h.print_table("Low-precision GEMM (TFLOP/s; ratio = value / reference, same run)",
                  [r for r in rows if r.benchmark in ("lowp_gemm", "lowp_gemm_config")])
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lowp_gemm",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile-only", action="store_true",
                        help="no GPU: compile every configuration for sm_90 and check the "
                        "kernels on the interpreter")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default="benchmarks/results/latest")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.compile_only:
        compile_only()
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run(out, args.device, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
