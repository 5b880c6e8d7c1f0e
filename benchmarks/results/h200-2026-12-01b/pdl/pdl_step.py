"""Does programmatic dependent launch place a small GEMV's programs unevenly?

A kernel compiled with the grid-dependency wait is launched as a programmatic dependent: its
programs are scheduled while the previous kernel's last programs still run, and wait on the
SMs they landed on. A GEMV of fewer programs than the GPU has slots (the 4b o projection at
16 x 256: 160 programs) may then sit three to an SM on some SMs and leave others empty. The
observation this tests: that config was the fastest alone (7.86 us) and took 16.1 us inside
the step (benchmarks/results/h200-2026-12-01/SUMMARY.md).

    python pdl_step.py micro              # 4b GEMVs per config, with and without the wait
    python pdl_step.py engine ROUNDS TOKENS  # the 4b step, variants interleaved ($VARIANTS)

Variants are tables "NxK" -> GEMV config (``"programmatic": False`` compiles the kernel without
the wait) plus ``splits`` (the decode attention's split count, else the heuristic's).
"""
import json, os, sys, time
import numpy as np, torch
import tilesafe as ts
from tilesafe.kernels import gemv as G
import importlib
DA = importlib.import_module("tilesafe.kernels.decode_attention")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "h200-2026-12-01", "gemv_stages"))
from gemv_stages import SHAPES, copy_rate, time_launches  # noqa: E402 (that run's)

MODEL = os.environ.get("MODEL", "qwen3-4b")
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


if __name__ == "__main__":
    if sys.argv[1] == "micro":
        micro()
    elif sys.argv[1] == "engine":
        engine(int(sys.argv[2]), int(sys.argv[3]))
