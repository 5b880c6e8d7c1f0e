"""The decode GEMVs as the step runs them (normed q/k/v and gate/up, the accumulating o
projection, the gated down projection), timed per config while their weights stream from HBM,
then the 4b decode step with the shipped table against the per-shape winners, interleaved in
one process.

Why: tileiras sizes a view load's pipeline (the number of TMA buffers in flight) from the
occupancy hint and the tile's bytes. At occupancy 4 every tile of 8 KB or more gets a single
buffer, so each K chunk waits a whole memory latency; the shipped configs of the 4b o and
gate/up projections are such tiles (8 x 512 and 16 x 512 at occupancy 4). The shared-memory
size of every config here (``cuobjdump -res-usage``, tileiras 13.4, locally) is in
``stages_local.txt``.

    python gemv_stages.py micro [MODEL...]          # the GEMV table (4b and 8b shapes)
    python gemv_stages.py engine MODEL ROUNDS TOKENS  # the step: shipped vs the winners

``engine`` reads the winners the micro run wrote to /tmp, else ``gemv_winners.json`` beside
this file (those of the first run, ``../run1/gemv_micro.txt``).
"""
import json, sys, time
import numpy as np, torch
import tilesafe as ts
from tilesafe.kernels import gemv as G

SHAPES = {  # (variant, N, K) of a layer's GEMVs, in step order
    "qwen3-4b": [("normed", 6144, 2560), ("acc", 2560, 4096), ("normed", 19456, 2560),
                 ("silu", 2560, 9728)],
    "qwen3-8b": [("normed", 6144, 4096), ("acc", 4096, 4096), ("normed", 24576, 4096),
                 ("silu", 4096, 12288)],
}
CONFIGS = [(8, 512, 4), (8, 512, 3), (8, 512, 2), (16, 512, 4), (16, 512, 3), (16, 512, 2),
           (8, 256, 4), (16, 256, 4), (16, 256, 3), (4, 512, 4), (32, 256, 3), (64, 128, 2),
           (8, 1024, 3), (4, 1024, 4)]
#: the engine's variants to interleave (``$VARIANTS``, space-separated): the shipped table,
#: every micro winner, the winners of the q/k/v and o projections only, the o projection's
#: only, the winners of the two normed projections (q/k/v and gate/up) only
VARIANTS = __import__("os").environ.get("VARIANTS", "shipped winners").split()
STREAM_BYTES = 400e6  # weight copies per shape: enough that none stays in the 50-60 MB L2
keep = []


def copy_rate() -> float:
    n = 1 << 29
    a = torch.empty(n, dtype=torch.float16, device="cuda"); b = torch.empty_like(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    while time.perf_counter() - t < 0.3:
        b.copy_(a)
    best = 1e9
    for _ in range(5):
        s.record(); b.copy_(a); e.record(); e.synchronize(); best = min(best, s.elapsed_time(e) * 1e-3)
    return 4 * n / best


def launcher(variant, n, k, cfg):
    bn, bk, occ = cfg
    copies = max(2, int(STREAM_BYTES // (n * k * 2)))
    ws = []
    for _ in range(copies):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        keep.append(w); ws.append(ts.from_dlpack(w))
    x = torch.randn(1, 2 * k, device="cuda", dtype=torch.bfloat16); keep.append(x)
    xt = ts.from_dlpack(x)
    out = ts.zeros((1, n), ts.bfloat16, device="cuda:0").sync()
    hints = {"occupancy": occ}
    if variant == "normed":
        kern = G.with_occupancy(G.gemv_rows_normed, hints)
        row = xt[:, :k]
        kp = 1 << (k - 1).bit_length()
        return [lambda w=w: kern(ts.borrow_mut(out).partition((1, bn)), row, row.reshape((k,)), w,
                                 float(k), 1e-6, BK=bk, KP=kp, WEIGHTED=False) for w in ws]
    if variant == "acc":
        kern = G.with_occupancy(G.gemv_rows, hints)
        row = xt[:, :k]
        return [lambda w=w: kern(ts.borrow_mut(out).partition((1, bn)), row, w, BK=bk, ACC=True)
                for w in ws]
    kern = G.with_occupancy(G.gemv_rows_silu_mul, hints)
    gate, up = xt[:, :k], xt[:, k:]
    return [lambda w=w: kern(ts.borrow_mut(out).partition((1, bn)), gate, up, w, BK=bk, ACC=True)
            for w in ws]


def time_launches(makes, reps=4):
    with ts.CudaGraph.scope() as g:
        for _ in range(reps):
            for make in makes:
                g.record(make())
    g.replay(); torch.cuda.synchronize()
    best = 1e9
    for _ in range(7):
        t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / (reps * len(makes)))
    return best * 1e6


def micro(models):
    rate = copy_rate()
    print(f"copy rate {rate / 1e12:.3f} TB/s", flush=True)
    winners = {}
    for model in models:
        for variant, n, k in SHAPES[model]:
            mb = n * k * 2 / 1e6
            results = []
            for cfg in CONFIGS:
                if n % cfg[0] or k % cfg[1]:
                    continue
                try:
                    makes = launcher(variant, n, k, cfg)
                    t = min(time_launches(makes) for _ in range(2))
                except Exception as err:  # noqa: BLE001 (a config that fails is reported)
                    print(f"{model} {variant} {n}x{k} {cfg}: FAILED {type(err).__name__}: "
                          f"{str(err)[:160]}", flush=True)
                    continue
                finally:
                    keep.clear(); torch.cuda.empty_cache()
                results.append((t, cfg))
                print(f"{model} {variant:6s} {n:6d}x{k:5d} {mb:6.1f} MB  {cfg[0]:3d}x{cfg[1]:4d} "
                      f"occ{cfg[2]}  {t:7.2f} us  {mb / t:5.2f} TB/s  {mb / t / (rate / 1e12):.2f} "
                      f"of copy", flush=True)
            best = min(results)
            winners[f"{n}x{k}"] = {"BN": best[1][0], "BK": best[1][1], "occupancy": best[1][2],
                                   "slices": 1}
            print(f"  best {best[1]} {best[0]:.2f} us", flush=True)
    json.dump(winners, open("/tmp/gemv_winners.json", "w"), indent=1)
    print(json.dumps(winners), flush=True)


def engine(model, rounds, steps):
    import os
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3.engine import Qwen3Engine
    path = "/tmp/gemv_winners.json"
    if not os.path.exists(path):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemv_winners.json")
    winners = json.load(open(path))
    directory = write_random(model, progress=False)
    eng = Qwen3Engine(directory, device="cuda:0", max_seq=512 + steps + 100)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    shipped = G.launch_gemv.config_for
    shapes = [f"{n}x{k}" for _, n, k in SHAPES[model]]  # (qkv, o, gate/up, down)
    variants = {"shipped": (), "winners": shapes, "qkv_o": shapes[:2], "o": shapes[1:2],
                "normed": shapes[0:3:2]}
    variants = {label: {s: winners[s] for s in chosen} for label, chosen in variants.items()
                if label in VARIANTS}
    if "custom" in VARIANTS:  # ($CUSTOM: a JSON table of "NxK" -> config)
        variants["custom"] = json.loads(os.environ["CUSTOM"])

    def config_for(table):
        def choose(*a, **kw):
            key = G.problem_key(*a)
            return table.get(f"{key[1]}x{key[2]}") or shipped(*a, **kw)
        return choose
    results = {label: [] for label in variants}
    for rnd in range(rounds):
        for label, table in variants.items():
            G.launch_gemv.config_for = config_for(table)
            eng._steps.clear(); eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            eng.greedy(first, 2)
            eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            torch.cuda.synchronize(); t0 = time.perf_counter()
            tokens = eng.greedy(first, steps)
            dt = time.perf_counter() - t0
            results[label].append((steps - 1) / dt)
            print(f"round {rnd} {label}: {(steps - 1) / dt:.1f} tokens/s  first tokens "
                  f"{list(tokens)[:4]}", flush=True)
    G.launch_gemv.config_for = shipped
    for label, r in results.items():
        print(f"{model} {label}: best {max(r):.1f} median {np.median(r):.1f} tokens/s "
              f"({', '.join(f'{x:.1f}' for x in r)})")
    print(f"copy rate {copy_rate() / 1e12:.3f} TB/s")


def marginal(model):
    """Each kernel's marginal time in the recorded step (as ``benchmarks.decode_marginal``
    computes it) under each variant of ``$VARIANTS``, one engine."""
    import collections, os, tempfile
    from pathlib import Path
    from torch.profiler import ProfilerActivity, profile
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3 import engine as qwen3
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemv_winners.json")
    winners = json.load(open(path))
    eng = qwen3.Qwen3Engine(write_random(model, progress=False), device="cuda:0", max_seq=2048)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    token = int(np.argmax(eng.prefill(prompt)))
    shipped = G.launch_gemv.config_for
    shapes = [f"{n}x{k}" for _, n, k in SHAPES[model]]
    chosen = {"shipped": (), "winners": shapes, "qkv_o": shapes[:2], "o": shapes[1:2],
              "normed": shapes[0:3:2]}
    for label in VARIANTS:
        table = {s: winners[s] for s in chosen[label]}

        def choose(*a, **kw):
            key = G.problem_key(*a)
            return table.get(f"{key[1]}x{key[2]}") or shipped(*a, **kw)
        G.launch_gemv.config_for = choose
        step = qwen3._DecodeStep(eng, qwen3.GREEDY)
        G.launch_gemv.config_for = shipped
        eng.lengths = [len(prompt) + 8]
        step.at = None
        step.start(eng, [token])
        step.launch(16).sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step.launch(10).sync()
            torch.cuda.synchronize()
        trace = Path(tempfile.mkdtemp()) / "trace.json"
        prof.export_chrome_trace(str(trace))
        kernels = sorted((e for e in json.loads(trace.read_text())["traceEvents"]
                          if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        per_step = len(kernels) // 10
        times = collections.defaultdict(list)
        for r in range(2, 10):
            last = None
            for i, k in enumerate(kernels[r * per_step:(r + 1) * per_step]):
                end = k["ts"] + k["dur"]
                times[(i, k["name"])].append(k["dur"] if last is None else end - last)
                last = end if last is None else max(end, last)
        total, count = collections.defaultdict(float), collections.Counter()
        for (_, name), t in times.items():
            total[name] += float(np.median(t)); count[name] += 1
        print(f"# {model} {label}: {per_step} kernels, step {sum(total.values()) / 1e3:.3f} ms",
              flush=True)
        for name in sorted(total, key=lambda n: -total[n]):
            print(f"  {name[:34]:34s} n={count[name]:3d} {total[name] / 1e3:7.3f} ms "
                  f"mean {total[name] / count[name]:6.2f} us", flush=True)
        del step


if __name__ == "__main__":
    if sys.argv[1] == "micro":
        micro(sys.argv[2:] or list(SHAPES))
    elif sys.argv[1] == "marginal":
        marginal(sys.argv[2])
    else:
        engine(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
