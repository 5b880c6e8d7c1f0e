"""The prefill kernel before and after the fused-multiply-add change, timed in one process
against SDPA (H200): the previous source (scores scaled, exp2 with subnormal handling) is kept
here as ``previous_flash_kernel``; the library's is ``kernels.attention.flash_attention_kernel``.

    python benchmarks/results/h200-2026-12-02c/flash_fma.py OUTDIR
"""
import importlib
import sys
from pathlib import Path

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.kernel import kernel
from tilesafe.kernels._online_softmax import online_softmax_step

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks import _harness as h  # noqa: E402
from benchmarks.kernels_attention import Q_HEADS, _check, _sdpa, prefill_flops  # noqa: E402

prefill = importlib.import_module("tilesafe.kernels.attention")
args = importlib.import_module("tilesafe.kernels._attention_args")


@kernel
def previous_flash_kernel(o: tc.MutTensor["T", (1, "BM", "D")],
                           q: tc.Tensor["T", (-1, -1, "D")], k: tc.Tensor["T", (-1, -1, "D")],
                           v: tc.Tensor["T", (-1, -1, "D")], qk_scale: float, q_heads: int,
                           kv_heads: int, BN: tc.Const[int], CAUSAL: tc.Const[bool]):
    """One block of ``BM`` query rows of one (batch x query head) row of ``q`` (shape
    ``(batch*q_heads, S_q, D)``) against ``k``/``v`` (``(batch*kv_heads, S_kv, D)``);
    ``qk_scale`` is the softmax scale times log2(e). Causal: query row ``r`` sees keys
    ``c <= r + S_kv - S_q`` (aligned to the end)."""
    bh, row_block, _ = tc.get_tile_block_id()
    kv_head = (bh // q_heads) * kv_heads + (bh % q_heads) // (q_heads // kv_heads)
    seq_q = q.shape[1]
    seq_kv = k.shape[1]
    keys = k.partition((1, BN, D))
    values = v.partition((1, BN, D))
    queries = tc.load_tile_like(q, o).reshape((BM, D))
    first_row = row_block * BM
    offset = seq_kv - seq_q
    unmasked_end = seq_kv // BN
    end = tc.num_tiles(keys, 1)
    if CAUSAL:
        unmasked_end = tc.minimum(unmasked_end, (first_row + offset + 1) // BN)
        end = tc.minimum(end, (first_row + BM - 1 + offset) // BN + 1)
    best = tc.full((BM, 1), float("-inf"), tc.f32)
    total = tc.zeros((BM, 1), tc.f32)
    acc = tc.zeros((BM, D), tc.f32)
    for j in range(unmasked_end):
        kt = keys.load((kv_head, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32)) * qk_scale
        total, acc, best = online_softmax_step(s, values, (kv_head, j, 0), best, total, acc)
    rows = (tc.arange(BM) + (first_row + offset)).reshape((BM, 1))
    for j in range(unmasked_end, end):
        kt = keys.load((kv_head, j, 0)).reshape((BN, D))
        s = tc.mma(queries, tc.transpose(kt), tc.zeros((BM, BN), tc.f32)) * qk_scale
        cols = (tc.arange(BN) + j * BN).reshape((1, BN))
        visible = cols < seq_kv
        if CAUSAL:
            visible = visible & (cols <= rows)
        s = tc.where(visible, s, float("-inf"))
        total, acc, best = online_softmax_step(s, values, (kv_head, j, 0), best, total, acc)
    o.store((acc * (1.0 / total)).astype(T).reshape((1, BM, D)))




_OLD = {}


def old_for(hints):
    if not hints:
        return previous_flash_kernel
    key = tuple(sorted(hints.items()))
    if key not in _OLD:
        _OLD[key] = kernel(previous_flash_kernel.fn, hints={"default": dict(hints)})
    return _OLD[key]


CONFIGS = [(128, 64, {"occupancy": 2}), (128, 64, None), (128, 128, {"num_worker_warps_per_cta": 8}),
           (128, 128, None), (64, 64, None), (128, 64, {"occupancy": 1})]
SOURCES = ("new", "old")
if len(sys.argv) > 2 and sys.argv[2] == "pipelined":  # the second call: the pipelined variant
    from flash_pipelined import pipelined_flash_kernel
    _PIPE = {}

    def pipe_for(hints):
        key = tuple(sorted((hints or {}).items()))
        if key not in _PIPE:
            _PIPE[key] = kernel(pipelined_flash_kernel.fn, hints={"default": dict(hints)}) \
                if hints else pipelined_flash_kernel
        return _PIPE[key]
    CONFIGS = [("new", 128, 64, {"occupancy": 2}), ("old", 128, 64, {"occupancy": 2}),
               ("new", 128, 128, {"num_worker_warps_per_cta": 8}),
               ("pipe", 128, 64, {"occupancy": 2}), ("pipe", 128, 64, {"occupancy": 1}),
               ("pipe", 128, 128, {"num_worker_warps_per_cta": 8}),
               ("new", 128, 32, {"occupancy": 2}), ("pipe", 128, 32, {"occupancy": 2})]
elif len(sys.argv) > 2 and sys.argv[2] == "lazy":  # the third call: lazy rescaling
    from flash_lazy import lazy_flash_kernel
    _LAZY = {}

    def lazy_factory(growth):
        def make(hints):
            key = (growth, tuple(sorted((hints or {}).items())))
            if key not in _LAZY:
                base = kernel(lazy_flash_kernel.fn, hints={"default": dict(hints)}) \
                    if hints else lazy_flash_kernel
                _LAZY[key] = lambda *a, **kw: base(*a, GROWTH=growth, **kw)
            return _LAZY[key]
        return make
    FACTORIES = {"lazy0": lazy_factory(0.0), "lazy8": lazy_factory(8.0)}
    CONFIGS = [(w, bm, bn, hints) for bm, bn, hints in
               ((128, 64, {"occupancy": 2}), (128, 128, {"num_worker_warps_per_cta": 8}))
               for w in ("new", "lazy0", "lazy8")]
else:
    CONFIGS = [(w, bm, bn, hints) for bm, bn, hints in CONFIGS for w in SOURCES]
CASES = [(4096, 128, 4, False), (4096, 128, 4, True), (2048, 128, 8, False), (8192, 128, 4, True),
         (4096, 64, 4, False), (4096, 64, 4, True), (16384, 128, 4, True)]


def main(out):
    import torch
    import torch.nn.functional as F
    device = "cuda:0"
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    rows = []
    for seq, d, group, causal in CASES:
        batch, kv_heads = max(1, 16384 // seq), Q_HEADS // group
        gen = torch.Generator(device=device).manual_seed(seq + d)
        (q, qv), (k, kv), (v, vv) = (h.shared(s, "float16", device) for s in (
            (batch, Q_HEADS, seq, d), (batch, kv_heads, seq, d), (batch, kv_heads, seq, d)))
        for view in (qv, kv, vv):
            h.fill_random(view, gen)
        sdpa = _sdpa(F, qv, kv, vv, causal)
        with torch.cuda.stream(stream):
            want = sdpa()
        o, ov = h.shared((batch, Q_HEADS, seq, d), "float16", device)
        flops = prefill_flops(batch, seq, d, causal)
        reps = h.repetitions(flops / 400e12)
        q3, k3, v3 = (t.reshape((t.shape[0] * t.shape[1], seq, d)) for t in (q, k, v))
        o3 = o.reshape(q3.shape)
        qk_scale = d ** -0.5 * args.LOG2E
        runs = {}
        for which, bm, bn, hints in CONFIGS:
            factory = {"new": prefill.kernel_for, "old": old_for}.get(which) \
                or globals().get("FACTORIES", {}).get(which) or pipe_for
            if True:
                name = f"{which} {bm}x{bn}" + "".join(f",{a}={b}" for a, b in (hints or {}).items())

                def launch(bm=bm, bn=bn, hints=hints, factory=factory):
                    return factory(hints)(ts.borrow_mut(o3).partition((1, bm, d)), q3, k3, v3,
                                          qk_scale, Q_HEADS, kv_heads, BN=bn, CAUSAL=causal)
                h.poison(ov)
                try:
                    launch().sync_on(ts_stream)
                    _check(name, ov, want)
                except Exception as err:  # noqa: BLE001
                    print(f"  {name}: {type(err).__name__}: {str(err)[:200]}", flush=True)
                    continue
                runs[name] = h.tilesafe_graph(ts_stream, lambda f=launch: (f() for _ in range(reps)))

        def body():
            for _ in range(reps):
                sdpa()
        runs["sdpa"] = h.torch_graph(stream, body)
        timed = h.interleaved_ms(runs, stream, rounds=15)
        tf = {n: flops * reps / (t[0] * 1e-3) / 1e12 for n, t in timed.items()}
        size = f"S{seq} d{d} g{group}" + (" causal" if causal else "")
        for n in runs:
            if n != "sdpa":
                rows.append(h.Row("flash_fma", "f16", size, n, tf[n], "TFLOP/s", "sdpa", tf["sdpa"]))
        print(f"{size}: sdpa {tf['sdpa']:.0f} | " + ", ".join(
            f"{n} {tf[n]:.0f} ({tf[n] / tf['sdpa']:.3f})" for n in runs if n != "sdpa"), flush=True)
        del runs
        torch.cuda.empty_cache()
    tag = f"_{sys.argv[2]}" if len(sys.argv) > 2 else ""
    h.write_csv(rows, Path(out) / f"flash_fma{tag}.csv")


if __name__ == "__main__":
    main(sys.argv[1])
