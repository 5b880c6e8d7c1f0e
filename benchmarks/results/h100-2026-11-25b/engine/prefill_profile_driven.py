"""Where a 512-token prefill of qwen3-4b goes: wall, CUDA kernel time, host functions."""
import cProfile, pstats, time, json, collections, numpy as np, torch
from torch.profiler import ProfilerActivity, profile
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.engine import Qwen3Engine
engine = Qwen3Engine(write_random("qwen3-4b", progress=False), device="cuda:0", max_seq=2048)
prompt = np.random.default_rng(0).integers(0, engine.config.vocab_size, 512).tolist()
for _ in range(2):
    engine.lengths = [0]; t0 = time.perf_counter(); engine.prefill(prompt); print(f"prefill {1e3*(time.perf_counter()-t0):.1f} ms", flush=True)
engine.lengths = [0]
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    t0 = time.perf_counter(); engine.prefill(prompt); wall = time.perf_counter() - t0
prof.export_chrome_trace("/tmp/pp.json")
ks = [e for e in json.load(open("/tmp/pp.json"))["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
tot = collections.defaultdict(float); cnt = collections.Counter()
for e in ks: tot[e["name"][:40]] += e["dur"]; cnt[e["name"][:40]] += 1
print(f"profiled prefill {wall*1e3:.1f} ms; GPU busy {sum(tot.values())/1e3:.1f} ms in {len(ks)} kernels/copies")
for n in sorted(tot, key=lambda n: -tot[n])[:14]:
    print(f"  {n:40s} n={cnt[n]:4d} {tot[n]/1e3:8.2f} ms")
engine.lengths = [0]
pr = cProfile.Profile(); pr.enable(); engine.prefill(prompt); pr.disable()
st = pstats.Stats(pr); st.sort_stats("tottime").print_stats(18)
st.sort_stats("cumulative").print_stats(25)
