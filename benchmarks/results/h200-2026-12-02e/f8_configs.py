"""The f8 persistent GEMM's tile configs against torch._scaled_mm at N^3 (argv[1], default
8192), in one process: each variant is a torch CUDA graph of REPS calls (K.scaled_matmul with
the config forced, or torch._scaled_mm), replayed in interleaved rounds; the ratio is taken
within each round, a fast-accumulation variant's against torch's fast accumulation
(use_fast_accum=True), a precise one's against torch's default. Every variant's output is first poisoned (NaN) and checked against a float64
product of the same f8 operands. Config tuples: (BM, BN, BK for 16-bit inputs, worker warps);
the f8 K tile is twice BK."""
import importlib
import statistics
import sys

import torch

from tilesafe import kernels as K
from tilesafe.kernels._torch import reserve_fault_records

MM = importlib.import_module("tilesafe.kernels.matmul")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
ROUNDS, REPS = 5, 10
#: (BM, BN, BK16, warps, fast accumulation)
CONFIGS = [(128, 128, 64, 4, False), (128, 128, 64, 8, False), (256, 128, 64, 8, True),
           (128, 256, 64, 8, True), (128, 256, 32, 8, True), (128, 128, 64, 8, True),
           (128, 128, 64, 4, True)]
torch.manual_seed(0)
a = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn)
sa = torch.tensor([0.5], device="cuda")
sb = torch.tensor([0.25], device="cuda")
want = (a.double() @ b.double().t()) * 0.125
scale = want.abs().max().item()
reserve_fault_records(256)


def graph_of(call):
    out = torch.full((N, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    call(out)
    torch.cuda.synchronize()
    err = ((out.double() - want).abs().max() / scale).item()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream):
        call(out)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(REPS):
                call(out)
    torch.cuda.synchronize()
    return graph, err


variants = {}
variants["torch._scaled_mm"] = graph_of(
    lambda out: out.copy_(torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)))
variants["torch._scaled_mm fast"] = graph_of(
    lambda out: out.copy_(torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16,
                                           use_fast_accum=True)))
# (the copy is the same for both: torch._scaled_mm has no out= on every version)
for bm, bn, bk, warps, fast in CONFIGS:
    config = {"BM": bm, "BN": bn, "BK": bk, "warps": warps, "cga": 1}
    MM.launch_persistent.config_for = lambda *args, _c=config, **kw: _c
    name = f"{bm}x{bn}x{2 * bk} {warps}w" + (" fast" if fast else "")
    try:
        variants[name] = graph_of(
            lambda out, _f=fast: K.scaled_matmul(a, b, sa, sb, out=out, fast_accumulation=_f))
    except Exception as err:  # noqa: BLE001 (reported, the others still run)
        print(f"{name} failed: {str(err)[:300]}", flush=True)
del MM.launch_persistent.config_for
copy = torch.empty(N, N, dtype=torch.bfloat16, device="cuda")
copy_graph, _ = graph_of(lambda out: out.copy_(copy))
times = {name: [] for name in variants}
ratios = {name: [] for name in variants}
events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]


def timed(graph):
    events[0].record()
    graph.replay()
    events[1].record()
    torch.cuda.synchronize()
    return events[0].elapsed_time(events[1]) / REPS


copy_ms = statistics.median(timed(copy_graph) for _ in range(5))
for r in range(ROUNDS):
    order = list(variants) if r % 2 == 0 else list(variants)[::-1]
    got = {name: timed(variants[name][0]) for name in order}
    for name, ms in got.items():
        times[name].append(ms)
        reference = "torch._scaled_mm fast" if name.endswith("fast") else "torch._scaled_mm"
        ratios[name].append(got[reference] / ms)
flop = 2.0 * N ** 3
print(f"N={N}, {ROUNDS} rounds of {REPS} calls; a bf16 {N}x{N} copy (in the torch timing "
      f"too) takes {copy_ms:.3f} ms")
print("variant,median_ms,tflops,ratio_to_scaled_mm_median,ratio_min,ratio_max,max_rel_err"
      "  (a fast variant's ratio is to torch._scaled_mm fast)")
for name, (graph, err) in variants.items():
    ms = statistics.median(times[name])
    print(f"{name},{ms:.4f},{flop / ms / 1e9:.0f},{statistics.median(ratios[name]):.3f},"
          f"{min(ratios[name]):.3f},{max(ratios[name]):.3f},{err:.2e}", flush=True)
