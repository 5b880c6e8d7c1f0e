"""The decode GEMVs compiled for their exact shapes (the ``static_shape`` hint, config key
``"static_shape": True``) against the same configs with dynamic shapes.

Why: with K known, tileiras unrolls the K loop and sizes the weight's TMA pipeline anew. Read
from the sm_90 cubins here (``cuobjdump -res-usage``, ``survey_local.txt``), the 4b o
projection's 8 x 512 at occupancy 4 goes from about 1 K chunk of shared memory to 5.5, and
16 x 256 at occupancy 3 from 5 to 7.7; the gated down projection (19-38 chunks) is unchanged.

    python static_shape.py micro MODEL                # per config: dynamic / static, interleaved
    python static_shape.py engine MODEL ROUNDS TOKENS  # the step: shipped / static / winners
    python static_shape.py marginal MODEL              # each kernel's marginal time in the step

``engine``'s variants: ``shipped`` (the table), ``static`` (the table's configs with the
shapes compiled in), ``winners`` (the fastest static config of each shape in the micro run,
from /tmp/static_winners.json). A label ``NAME@P`` runs variant NAME with every loaded
kernel's preferred shared-memory carveout at P percent (``set_carveout``).
"""
import json, os, sys, time
import numpy as np, torch
import tilesafe as ts
from tilesafe.kernels import gemv as G

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "h200-2026-12-01", "gemv_stages"))
from gemv_stages import SHAPES, copy_rate, time_launches  # noqa: E402 (that run's)

CONFIGS = [(8, 512, 4), (16, 512, 4), (16, 512, 2), (8, 256, 4), (16, 256, 3), (8, 512, 3),
           (8, 1024, 3), (32, 256, 3)]
STREAM_BYTES = 400e6
WINNERS = "/tmp/static_winners.json"
keep = []
SHIPPED = G.launch_gemv.config_for  # (the table's own, before any variant replaces it)


def cfg(bn, bk, occ, static):
    return {"BN": bn, "BK": bk, "occupancy": occ, "slices": 1, "static_shape": static}


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


def micro(model):
    rate = copy_rate()
    print(f"copy rate {rate / 1e12:.3f} TB/s", flush=True)
    winners = json.load(open(WINNERS)) if os.path.exists(WINNERS) else {}
    for variant, n, k in SHAPES[model]:
        mb = n * k * 2 / 1e6
        best = (1e9, None)
        for bn, bk, occ in CONFIGS:
            if n % bn:
                continue
            times = {}
            for static in (False, True, False, True):  # interleaved
                try:
                    t = time_launches(launcher(variant, n, k, cfg(bn, bk, occ, static)))
                except Exception as err:  # noqa: BLE001 (a config that fails is reported)
                    print(f"{variant} {n}x{k} {bn}x{bk} occ{occ} static={static}: FAILED "
                          f"{type(err).__name__}: {str(err)[:160]}", flush=True)
                    t = float("nan")
                finally:
                    keep.clear(); torch.cuda.empty_cache()
                times[static] = min(times.get(static, 1e9), t)
            if times[True] < best[0]:
                best = (times[True], cfg(bn, bk, occ, True))
            print(f"{variant:6s} {n:6d}x{k:5d} {mb:6.1f} MB {bn:3d}x{bk:4d} occ{occ}  "
                  f"dynamic {times[False]:7.2f} us  static {times[True]:7.2f} us  "
                  f"({mb / times[False] / (rate / 1e12):.2f} / "
                  f"{mb / times[True] / (rate / 1e12):.2f} of copy)", flush=True)
        winners[f"{n}x{k}"] = best[1]
        print(f"  fastest static: {best[1]} {best[0]:.2f} us", flush=True)
    json.dump(winners, open(WINNERS, "w"), indent=1)


def set_carveout(percent):
    """Every loaded kernel's preferred shared-memory carveout (percent of the most shared
    memory; -1: the driver's choice), so that consecutive kernels of the step may run on one
    L1/shared split instead of the SM re-partitioning between them. Returns how many."""
    from cuda.bindings import driver
    K = sys.modules["tilesafe.kernel"]  # (the module: ``tilesafe.kernel`` is the decorator)
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    done = 0
    for kern in list(K._LIVE_KERNELS):
        for exe in list(kern._executables.values()):
            handle = getattr(exe, "handle", None)
            if handle is None:
                continue
            (err,) = driver.cuKernelSetAttribute(attribute, int(percent),
                                                 driver.CUkernel(int(handle.handle)),
                                                 driver.CUdevice(0))
            if err != driver.CUresult.CUDA_SUCCESS:
                (err,) = driver.cuFuncSetAttribute(driver.CUfunction(int(handle.handle)),
                                                   attribute, int(percent))
            assert err == driver.CUresult.CUDA_SUCCESS, err
            done += 1
    return done


def split_label(label):
    """``label`` and its carveout: ``static@100`` is ``static`` at carveout 100."""
    name, _, carveout = label.partition("@")
    return name, int(carveout) if carveout else -1


def choose_for(label, winners, shapes):
    """``launch_gemv.config_for`` of a variant (module docstring; ``static_nopdl``: the table's
    configs with the shapes compiled in and without the grid-dependency wait;
    ``static_all_but_lm``: static for the layers' GEMVs, not the LM head)."""
    shipped = SHIPPED

    def choose(*a, **kw):
        key = G.problem_key(*a)
        config = shipped(*a, **kw)
        if label == "static":
            return {**config, "static_shape": True}
        if label == "static_nopdl":
            return {**config, "static_shape": True, "programmatic": False}
        if label == "static_all_but_lm":
            return {**config, "static_shape": f"{key[1]}x{key[2]}" in shapes}
        if label == "winners":
            return winners.get(f"{key[1]}x{key[2]}") or config
        return config
    return choose


def marginal(model):
    """Per variant of ``$VARIANTS``: each kernel's marginal time in the recorded step (its end
    minus the previous kernel's end, CUPTI, as ``benchmarks.decode_marginal``), summed by
    name, then the mean of each position in a layer (the kernels after one gated down
    projection up to the next)."""
    import collections, tempfile
    from pathlib import Path
    from torch.profiler import ProfilerActivity, profile
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3 import engine as qwen3
    winners = json.load(open(WINNERS)) if os.path.exists(WINNERS) else {}
    eng = qwen3.Qwen3Engine(write_random(model, progress=False), device="cuda:0", max_seq=2048)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    token = int(np.argmax(eng.prefill(prompt)))
    shipped = SHIPPED
    shapes = {f"{n}x{k}" for _, n, k in SHAPES[model]}
    for label in os.environ.get("VARIANTS", "shipped static").split():
        name, carveout = split_label(label)
        G.launch_gemv.config_for = choose_for(name, winners, shapes)
        step = qwen3._DecodeStep(eng, qwen3.GREEDY)  # (compiles what the variant needs)
        set_carveout(carveout)
        step = qwen3._DecodeStep(eng, qwen3.GREEDY)  # recorded again with it
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
        order = sorted(times)
        ends = [i for i, name in order if name.startswith("gemv_rows_silu")]
        by_position = collections.defaultdict(list)
        for previous, last in zip(ends, ends[1:]):
            for j, (i, name) in enumerate(order[previous + 1:last + 1]):
                by_position[(j, name)].append(float(np.median(times[(i, name)])))
        print("  a layer, in order (mean over layers):", flush=True)
        for (j, name), t in sorted(by_position.items()):
            print(f"    {j:2d} {name[:34]:34s} {np.mean(t):6.2f} us", flush=True)
        del step


def engine(model, rounds, steps):
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3.engine import Qwen3Engine
    winners = json.load(open(WINNERS)) if os.path.exists(WINNERS) else {}
    eng = Qwen3Engine(write_random(model, progress=False), device="cuda:0",
                      max_seq=512 + steps + 100)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    shipped = SHIPPED
    shapes = {f"{n}x{k}" for _, n, k in SHAPES[model]}
    labels = os.environ.get("VARIANTS", "shipped static winners").split()
    results = {label: [] for label in labels}
    reference = None
    for rnd in range(rounds):
        for label in labels:
            name, carveout = split_label(label)
            G.launch_gemv.config_for = choose_for(name, winners, shapes)
            eng._steps.clear(); eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            eng.greedy(first, 2)  # (compiles what the variant needs)
            loaded = set_carveout(carveout)
            eng._steps.clear(); eng.lengths = [0]; eng.draws = 0  # recorded again with it
            first = int(np.argmax(eng.prefill(prompt)))
            eng.greedy(first, 2)
            if rnd == 0:
                print(f"{label}: carveout {carveout} on {loaded} loaded kernels", flush=True)
            eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            torch.cuda.synchronize(); t0 = time.perf_counter()
            tokens = list(eng.greedy(first, steps))
            dt = time.perf_counter() - t0
            reference = reference or tokens
            same = sum(a == b for a, b in zip(tokens, reference))
            results[label].append((steps - 1) / dt)
            print(f"round {rnd} {label}: {(steps - 1) / dt:.1f} tokens/s  tokens equal to the "
                  f"first run's: {same}/{len(tokens)}", flush=True)
    G.launch_gemv.config_for = shipped
    for label, r in results.items():
        print(f"{model} {label}: best {max(r):.1f} median {np.median(r):.1f} tokens/s "
              f"({', '.join(f'{x:.1f}' for x in r)})")
    print(f"copy rate {copy_rate() / 1e12:.3f} TB/s")


if __name__ == "__main__":
    if sys.argv[1] == "micro":
        micro(sys.argv[2])
    elif sys.argv[1] == "marginal":
        marginal(sys.argv[2])
    else:
        engine(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
