"""Recorded prefill vs driven launch by launch: time and logits, qwen3-4b random, H100."""
import sys, time, numpy as np
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.engine import Qwen3Engine
name = sys.argv[1] if len(sys.argv) > 1 else "qwen3-4b"
engine = Qwen3Engine(write_random(name, progress=False), device="cuda:0", max_seq=2048)
rng = np.random.default_rng(0)
for n in (512, 300, 512, 1000):
    prompt = rng.integers(0, engine.config.vocab_size, n).tolist()
    times = {}
    for mode in (False, True, True, False):
        engine.record_prefill = mode
        t0 = time.perf_counter(); logits = engine.prefill(prompt); dt = time.perf_counter() - t0
        times.setdefault(mode, []).append((dt, logits))
    (d1, eager), (d2, _) = times[False]
    (r1, rec), (r2, rec2) = times[True]
    scale = np.abs(eager).max()
    print(f"{name} prompt {n}: driven {d1*1e3:.1f}/{d2*1e3:.1f} ms, recorded first {r1*1e3:.1f} ms then {r2*1e3:.1f} ms; "
          f"max |diff| / max {np.abs(rec - eager).max() / scale:.2e}, replays equal {np.array_equal(rec, rec2)}, argmax equal {int(np.argmax(rec)) == int(np.argmax(eager))}", flush=True)
# decode after a recorded prefill equals decode after a driven one
prompt = rng.integers(0, engine.config.vocab_size, 200).tolist()
out = {}
for mode in (False, True):
    engine.record_prefill = mode
    first = int(np.argmax(engine.prefill(prompt)))
    out[mode] = engine.greedy(first, 32)
same = next((i for i, (a, b) in enumerate(zip(out[False], out[True])) if a != b), 32)
print(f"greedy after prefill: equal for the first {same} of 32 tokens")
