"""In-process A/B of the 4b decode step: GEMV configs of the warm-tuned (shipped) table or the cold-tuned one."""
import json, sys, time, numpy as np, torch
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.engine import Qwen3Engine
from tilesafe.kernels import gemv as skinny
name = sys.argv[1]; rounds = int(sys.argv[2])
hot = {tuple(v["full_key"]["key"]): v["config"] for v in json.load(open(".gpu/hot_table.json"))["entries"].values()
       if v["full_key"]["function"] == "tilesafe.kernels.matmul.gemv"}
directory = write_random(name, progress=False)
engine = Qwen3Engine(directory, device="cuda:0", max_seq=512 + 1100)
prompt = np.random.default_rng(0).integers(0, engine.config.vocab_size, 512).tolist()
cold = skinny.launch_gemv.config_for
def warm(*a, **k):
    return hot.get(tuple(skinny.problem_key(*a))) or cold(*a, **k)
results = {"warm": [], "cold": []}
for rnd in range(rounds):
    for label, config_for in (("warm", warm), ("cold", cold)):
        skinny.launch_gemv.config_for = config_for
        engine._steps.clear(); engine.lengths = [0]; engine.draws = 0
        first = int(np.argmax(engine.prefill(prompt)))
        engine.greedy(first, 2)
        engine.lengths = [0]; engine.draws = 0
        first = int(np.argmax(engine.prefill(prompt)))
        torch.cuda.synchronize(); t0 = time.perf_counter()
        engine.greedy(first, 1024)
        dt = time.perf_counter() - t0
        results[label].append(1023 / dt)
        print(f"round {rnd} {label}: {1023 / dt:.1f} tokens/s", flush=True)
skinny.launch_gemv.config_for = cold
for label, r in results.items():
    print(f"{name} {label}: best {max(r):.1f} median {np.median(r):.1f} tokens/s ({', '.join(f'{x:.1f}' for x in r)})")
