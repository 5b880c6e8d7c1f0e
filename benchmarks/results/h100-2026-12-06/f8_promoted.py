"""The f8 persistent GEMM at N^3 (argv[1], default 8192) against torch._scaled_mm, in one
process, with torch timed without a copy (its output is allocated inside the graph, from the
graph's pool). Variants: the library's precise path (tileiras promotes every K tile), its fast
accumulation, and an experiment: accumulation promoted in the kernel's own code every G K
tiles (G fast-accumulating mmas into a fresh f32 tile, then one add into the f32 accumulator),
G = 1, 2, 4. Every variant's output is poisoned (NaN) first and checked against a float64
product of the same operands (max error over the max |value|). Each variant is a torch CUDA
graph of REPS calls, replayed in interleaved rounds; ratios are taken within a round, against
torch's precise path (a fast variant also against torch's fast path)."""
import importlib
import statistics
import sys

import torch

import tilesafe.core as tc
from tilesafe import kernels as K
from tilesafe.kernels._torch import reserve_fault_records
from tilesafe.kernels.gemv import scale_product

MM = importlib.import_module("tilesafe.kernels.matmul")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
ROUNDS, REPS = 5, 10






def persistent_promoted_1(z: tc.MappedPartitionMut["TO", ("BM", "BN"), "G"],
                          a: tc.Tensor["T", (-1, -1)], b: tc.Tensor["T", (-1, -1)],
                          scale_a: tc.Tensor[tc.f32, (1,)], scale_b: tc.Tensor[tc.f32, (1,)],
                          BK: tc.Const[int], FAST: tc.Const[bool]):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
    scale = scale_product(scale_a, scale_b)
    nk = tc.num_tiles(pa, 1)
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for k in range(nk):
            part = tc.mma(pa.load((m, k)), pb.load((k, n)), tc.zeros((BM, BN), tc.f32),
                          fast_accumulation=True)
            acc = acc + part
        z.store((acc * scale).astype(z.dtype), idx)


def persistent_promoted_2(z: tc.MappedPartitionMut["TO", ("BM", "BN"), "G"],
                          a: tc.Tensor["T", (-1, -1)], b: tc.Tensor["T", (-1, -1)],
                          scale_a: tc.Tensor[tc.f32, (1,)], scale_b: tc.Tensor[tc.f32, (1,)],
                          BK: tc.Const[int], FAST: tc.Const[bool]):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
    scale = scale_product(scale_a, scale_b)
    nk = tc.num_tiles(pa, 1)
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for kk in range(nk // 2):
            part = tc.mma(pa.load((m, 2 * kk)), pb.load((2 * kk, n)),
                          tc.zeros((BM, BN), tc.f32), fast_accumulation=True)
            part = tc.mma(pa.load((m, 2 * kk + 1)), pb.load((2 * kk + 1, n)), part,
                          fast_accumulation=True)
            acc = acc + part
        for k in range(nk // 2 * 2, nk):
            acc = tc.mma(pa.load((m, k)), pb.load((k, n)), acc)
        z.store((acc * scale).astype(z.dtype), idx)


def persistent_promoted_4(z: tc.MappedPartitionMut["TO", ("BM", "BN"), "G"],
                          a: tc.Tensor["T", (-1, -1)], b: tc.Tensor["T", (-1, -1)],
                          scale_a: tc.Tensor[tc.f32, (1,)], scale_b: tc.Tensor[tc.f32, (1,)],
                          BK: tc.Const[int], FAST: tc.Const[bool]):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
    scale = scale_product(scale_a, scale_b)
    nk = tc.num_tiles(pa, 1)
    for idx in z.iter_indices():
        m, n = idx.coords()
        acc = tc.zeros((BM, BN), tc.f32)
        for kk in range(nk // 4):
            part = tc.zeros((BM, BN), tc.f32)
            for g in range(4):
                part = tc.mma(pa.load((m, 4 * kk + g)), pb.load((4 * kk + g, n)), part,
                              fast_accumulation=True)
            acc = acc + part
        for k in range(nk // 4 * 4, nk):
            acc = tc.mma(pa.load((m, k)), pb.load((k, n)), acc)
        z.store((acc * scale).astype(z.dtype), idx)


PROMOTED = {1: persistent_promoted_1, 2: persistent_promoted_2, 4: persistent_promoted_4}
#: (BM, BN, BK for 16-bit inputs, warps, mode): mode "precise", "fast" or a promotion group G
CONFIGS = [(128, 128, 64, 4, "precise"), (128, 256, 64, 8, "fast"), (128, 128, 64, 8, 2),
           (128, 256, 64, 8, 4), (256, 128, 64, 8, 2)]
torch.manual_seed(0)
a = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn)
sa = torch.tensor([0.5], device="cuda")
sb = torch.tensor([0.25], device="cuda")
want = (a.double() @ b.double().t()) * 0.125
scale = want.abs().max().item()
reserve_fault_records(256)
stream = torch.cuda.Stream()


def check(out):
    return ((out.double() - want).abs().max() / scale).item()


def graph_of(call, into):
    """into: a preallocated output (tilesafe) or None (torch: allocated in the graph)."""
    if into is not None:
        into.fill_(float("nan"))
    with torch.cuda.stream(stream):
        res = call(into)
    torch.cuda.synchronize()
    err = check(res if into is None else into)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        call(into)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(REPS):
                call(into)
    torch.cuda.synchronize()
    return graph, err


variants = {}
variants["torch._scaled_mm"] = graph_of(
    lambda out: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16), None)
variants["torch._scaled_mm fast"] = graph_of(
    lambda out: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16,
                                 use_fast_accum=True), None)
original = MM._FUNCTIONS[("persistent", True)]
for bm, bn, bk, warps, mode in CONFIGS:
    config = {"BM": bm, "BN": bn, "BK": bk, "warps": warps, "cga": 1}
    MM.launch_persistent.config_for = lambda *args, _c=config, **kw: _c
    MM._KERNELS.clear()
    if isinstance(mode, int):
        MM._FUNCTIONS[("persistent", True)] = (PROMOTED[mode], original[1])
    else:
        MM._FUNCTIONS[("persistent", True)] = original
    name = f"{bm}x{bn}x{2 * bk} {warps}w " + (mode if isinstance(mode, str) else f"promoted G{mode}")
    out = torch.empty(N, N, dtype=torch.bfloat16, device="cuda")
    try:
        variants[name] = graph_of(
            lambda o, _f=(mode == "fast"): K.scaled_matmul(a, b, sa, sb, out=o,
                                                            fast_accumulation=_f), out)
    except Exception as err:  # noqa: BLE001 (reported, the others still run)
        print(f"{name} failed: {str(err)[:400]}", flush=True)
MM._FUNCTIONS[("persistent", True)] = original
MM._KERNELS.clear()
del MM.launch_persistent.config_for
times = {name: [] for name in variants}
ratios = {name: [] for name in variants}
fast_ratios = {name: [] for name in variants}
events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]


def timed(graph):
    events[0].record(stream)
    graph.replay()
    events[1].record(stream)
    torch.cuda.synchronize()
    return events[0].elapsed_time(events[1]) / REPS


with torch.cuda.stream(stream):
    for r in range(ROUNDS):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        got = {name: timed(variants[name][0]) for name in order}
        for name, ms in got.items():
            times[name].append(ms)
            ratios[name].append(got["torch._scaled_mm"] / ms)
            fast_ratios[name].append(got["torch._scaled_mm fast"] / ms)
flop = 2.0 * N ** 3
print(f"N={N}, {ROUNDS} rounds of {REPS} calls, torch timed with no copy")
print("variant,median_ms,tflops,ratio_to_precise_median,min,max,ratio_to_fast_median,"
      "max_rel_err")
for name, (graph, err) in variants.items():
    ms = statistics.median(times[name])
    r = ratios[name]
    print(f"{name},{ms:.4f},{flop / ms / 1e9:.0f},{statistics.median(r):.3f},{min(r):.3f},"
          f"{max(r):.3f},{statistics.median(fast_ratios[name]):.3f},{err:.2e}", flush=True)
