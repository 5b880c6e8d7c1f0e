"""Does programmatic dependent launch place a small GEMV's programs unevenly?

A kernel compiled with the grid-dependency wait is launched as a programmatic dependent: its
programs are scheduled while the previous kernel's last programs still run, and wait on the
SMs they landed on. A GEMV of fewer programs than the GPU has slots (the 4b o projection at
16 x 256: 160 programs) may then sit three to an SM on some SMs and leave others empty. The
observation this tests: that config was the fastest alone (7.86 us) and took 16.1 us inside
the step (benchmarks/results/h200-2026-12-01/SUMMARY.md).

    python pdl_step.py micro              # 4b GEMVs per config, with and without the wait
    python pdl_step.py engine ROUNDS TOKENS  # the 4b step, variants interleaved ($VARIANTS)
    python pdl_step.py marginal           # each kernel's marginal time per variant

Variants are tables "NxK" -> GEMV config (``"programmatic": False`` compiles the kernel without
the wait) plus ``splits`` (the decode attention's split count, else the heuristic's).
"""
import collections, json, os, sys, tempfile, time
from pathlib import Path
import numpy as np, torch
import tilesafe as ts
from tilesafe.kernels import gemv as G
import importlib
DA = importlib.import_module("tilesafe.kernels.decode_attention")

MODEL = os.environ.get("MODEL", "qwen3-4b")
SHAPES = {"qwen3-4b": [("normed", 6144, 2560), ("acc", 2560, 4096), ("normed", 19456, 2560),
                       ("silu", 2560, 9728)],
          "qwen3-8b": [("normed", 6144, 4096), ("acc", 4096, 4096), ("normed", 24576, 4096),
                       ("silu", 4096, 12288)]}
CONFIGS = [(8, 512, 4), (8, 512, 3), (16, 512, 4), (16, 512, 3), (16, 512, 2), (8, 256, 4),
           (16, 256, 3), (64, 128, 2), (8, 1024, 3), (32, 256, 3)]
STREAM_BYTES = 400e6
keep = []


def cfg(bn, bk, occ, pdl=True):
    c = {"BN": bn, "BK": bk, "occupancy": occ, "slices": 1}
    if not pdl:
        c["programmatic"] = False
    return c


O4, DOWN4 = "2560x4096", "2560x9728"
QKV4, GU4 = "6144x2560", "19456x2560"
VARIANTS = {
    "shipped": {},
    "nopdl_all": "nopdl",  # every GEMV of the shipped table without the wait
    "o16_pdl": {O4: cfg(16, 256, 3)},
    "o16_nopdl": {O4: cfg(16, 256, 3, False)},
    "o8_nopdl": {O4: cfg(8, 512, 4, False)},
    "down8_nopdl": {DOWN4: cfg(8, 512, 3, False)},
    "down16_nopdl": {DOWN4: cfg(16, 512, 2, False)},
    "o16_down8_nopdl": {O4: cfg(16, 256, 3, False), DOWN4: cfg(8, 512, 3, False)},
    "splits8": {"splits": 8}, "splits16": {"splits": 16},
}
if os.environ.get("CUSTOM"):
    VARIANTS["custom"] = json.loads(os.environ["CUSTOM"])
CHOSEN = os.environ.get("VARIANTS", " ".join(VARIANTS)).split()
shipped_config_for = G.launch_gemv.config_for
heuristic_splits = DA.choose_splits


def apply(label):
    table = VARIANTS[label]

    def choose(*a, **kw):
        key = G.problem_key(*a)
        config = shipped_config_for(*a, **kw)
        if table == "nopdl":
            return {**config, "programmatic": False}
        return table.get(f"{key[1]}x{key[2]}") or config
    G.launch_gemv.config_for = choose
    splits = table.get("splits") if isinstance(table, dict) else None
    DA.choose_splits = (lambda *a: splits) if splits else heuristic_splits


def copy_rate():
    n = 1 << 29
    a = torch.empty(n, dtype=torch.float16, device="cuda"); b = torch.empty_like(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    while time.perf_counter() - t < 0.3:
        b.copy_(a)
    best = 1e9
    for _ in range(5):
        s.record(); b.copy_(a); e.record(); e.synchronize()
        best = min(best, s.elapsed_time(e) * 1e-3)
    return 4 * n / best


def launcher(variant, n, k, config):
    copies = max(2, int(STREAM_BYTES // (n * k * 2)))
    ws = []
    for _ in range(copies):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        keep.append(w); ws.append(ts.from_dlpack(w))
    x = torch.randn(1, 2 * k, device="cuda", dtype=torch.bfloat16); keep.append(x)
    xt = ts.from_dlpack(x)
    out = ts.zeros((1, n), ts.bfloat16, device="cuda:0").sync()
    bn, bk = config["BN"], config["BK"]
    if variant == "normed":
        kern = G.with_occupancy(G.gemv_rows_normed, config)
        row = xt[:, :k]
        kp = 1 << (k - 1).bit_length()
        return [lambda w=w: kern(ts.borrow_mut(out).partition((1, bn)), row, row.reshape((k,)),
                                 w, float(k), 1e-6, BK=bk, KP=kp, WEIGHTED=False) for w in ws]
    if variant == "acc":
        kern = G.with_occupancy(G.gemv_rows, config)
        row = xt[:, :k]
        return [lambda w=w: kern(ts.borrow_mut(out).partition((1, bn)), row, w, BK=bk, ACC=True)
                for w in ws]
    kern = G.with_occupancy(G.gemv_rows_silu_mul, config)
    gate, up = xt[:, :k], xt[:, k:]
    return [lambda w=w: kern(ts.borrow_mut(out).partition((1, bn)), gate, up, w, BK=bk,
                             ACC=True) for w in ws]


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


def micro():
    rate = copy_rate()
    print(f"copy rate {rate / 1e12:.3f} TB/s", flush=True)
    for variant, n, k in SHAPES[MODEL]:
        mb = n * k * 2 / 1e6
        for bn, bk, occ in CONFIGS:
            if n % bn or k % bk:
                continue
            times = {}
            for pdl in (True, False, True, False):  # interleaved
                try:
                    makes = launcher(variant, n, k, cfg(bn, bk, occ, pdl))
                    t = time_launches(makes)
                except Exception as err:  # noqa: BLE001
                    print(f"{variant} {n}x{k} {bn}x{bk} occ{occ} pdl={pdl}: FAILED "
                          f"{type(err).__name__}: {str(err)[:160]}", flush=True)
                    t = float("nan")
                finally:
                    keep.clear(); torch.cuda.empty_cache()
                times[pdl] = min(times.get(pdl, 1e9), t)
            print(f"{variant:6s} {n:6d}x{k:5d} {mb:6.1f} MB {bn:3d}x{bk:4d} occ{occ}  "
                  f"{-(-n // bn):5d} programs  wait {times[True]:7.2f} us  "
                  f"no wait {times[False]:7.2f} us  ({mb / times[True] / (rate / 1e12):.2f} / "
                  f"{mb / times[False] / (rate / 1e12):.2f} of copy)", flush=True)


def make_engine(max_seq):
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3.engine import Qwen3Engine
    return Qwen3Engine(write_random(MODEL, progress=False), device="cuda:0", max_seq=max_seq)


def engine(rounds, steps):
    eng = make_engine(512 + steps + 100)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    results = {label: [] for label in CHOSEN}
    reference = None
    for rnd in range(rounds):
        for label in CHOSEN:
            apply(label)
            eng._steps.clear(); eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            eng.greedy(first, 2)
            eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            torch.cuda.synchronize(); t0 = time.perf_counter()
            tokens = list(eng.greedy(first, steps))
            dt = time.perf_counter() - t0
            reference = reference or tokens
            same = sum(a == b for a, b in zip(tokens, reference))
            results[label].append((steps - 1) / dt)
            print(f"round {rnd} {label}: {(steps - 1) / dt:.1f} tokens/s  "
                  f"tokens equal to the first run's: {same}/{len(tokens)}", flush=True)
    apply("shipped")
    for label, r in results.items():
        print(f"{MODEL} {label}: best {max(r):.1f} median {np.median(r):.1f} tokens/s "
              f"({', '.join(f'{x:.1f}' for x in r)})")
    print(f"copy rate {copy_rate() / 1e12:.3f} TB/s")


def marginal():
    from torch.profiler import ProfilerActivity, profile
    from tilesafe.models.qwen3 import engine as qwen3
    eng = make_engine(2048)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    token = int(np.argmax(eng.prefill(prompt)))
    for label in CHOSEN:
        apply(label)
        step = qwen3._DecodeStep(eng, qwen3.GREEDY)
        apply("shipped")
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
        print(f"# {MODEL} {label}: {per_step} kernels, step {sum(total.values()) / 1e3:.3f} ms",
              flush=True)
        for name in sorted(total, key=lambda n: -total[n]):
            print(f"  {name[:34]:34s} n={count[name]:3d} {total[name] / 1e3:7.3f} ms "
                  f"mean {total[name] / count[name]:6.2f} us", flush=True)
        del step


if __name__ == "__main__":
    {"micro": micro, "marginal": marginal}.get(sys.argv[1], lambda: None)()
    if sys.argv[1] == "engine":
        engine(int(sys.argv[2]), int(sys.argv[3]))
