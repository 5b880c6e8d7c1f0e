"""In-process A/B of the decode step: rope + KV write as one launch (rope_kv_cache_update) or two,
interleaved rounds; tokens/s over 1024 greedy tokens after a 512-token prompt."""
import sys, time, numpy as np, torch
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.engine import Qwen3Engine
name = sys.argv[1] if len(sys.argv) > 1 else "qwen3-4b"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
directory = write_random(name, progress=False)
engine = Qwen3Engine(directory, device="cuda:0", max_seq=512 + 1100)
prompt = np.random.default_rng(0).integers(0, engine.config.vocab_size, 512).tolist()
VARIANTS = {"two_launch": False, "fused": True}
results = {v: [] for v in VARIANTS}
tokens_of = {}
for rnd in range(rounds):
    for label, fused in VARIANTS.items():
        engine.rope_writes_cache = fused
        engine._steps.clear(); engine.lengths = [0]; engine.draws = 0
        first = int(np.argmax(engine.prefill(prompt)))
        engine.greedy(first, 2)  # record
        engine.lengths = [0]; engine.draws = 0
        first = int(np.argmax(engine.prefill(prompt)))
        torch.cuda.synchronize(); t0 = time.perf_counter()
        made = engine.greedy(first, 1024)
        dt = time.perf_counter() - t0
        results[label].append(1023 / dt)
        tokens_of[label] = made
        (step,) = engine._steps.values()
        print(f"round {rnd} {label}: {1023 / dt:.1f} tokens/s ({len(step.graph.nodes)} launches a step)", flush=True)
for label, r in results.items():
    print(f"{name} {label}: best {max(r):.1f} median {np.median(r):.1f} tokens/s  ({', '.join(f'{x:.1f}' for x in r)})")
same = next((i for i, (x, y) in enumerate(zip(tokens_of["fused"], tokens_of["two_launch"])) if x != y), 1024)
print(f"greedy tokens equal for the first {same} of 1024")
