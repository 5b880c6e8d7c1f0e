"""Prototype: warm L2 with the o projection's weight on a graph branch beside rope/KV/attention.
Variants interleaved in one process; tokens/s over 1024 greedy tokens after a 512-token prompt."""
import sys, time, numpy as np, torch
from cuda.bindings import driver as cu
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3 import engine as q3
from tilesafe import kernels as K
from tilesafe.host.factory import zeros, empty
from tilesafe.dtypes import bfloat16

name = sys.argv[1] if len(sys.argv) > 1 else "qwen3-4b"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
directory = write_random(name, progress=False)
engine = q3.Qwen3Engine(directory, device="cuda:0", max_seq=512 + 1100)
prompt = np.random.default_rng(0).integers(0, engine.config.vocab_size, 512).tolist()
c, w = engine.config, engine.weights
MODE = {"v": None}
_SIDE = {}

def side_stream():
    if "s" not in _SIDE:
        err, s = cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
        assert err == 0, err
        _SIDE["s"] = s
    return _SIDE["s"]

class _B:
    def __init__(self, h):
        class S: pass
        self.stream = S(); self.stream.handle = h

class Fork:
    def __init__(self, inner_nodes, key):
        self.inner, self.key = inner_nodes, key
        self.where = inner_nodes[0].where; self.label = "fork"; self.launch_counter = None
        self.join_event = None
    borrow_key = property(lambda self: ("fork",) + tuple(n.borrow_key for n in self.inner))
    def borrows(self):
        return [b for n in self.inner for b in n.borrows()]
    def fault_records(self):
        return [r for n in self.inner if hasattr(n, "fault_records") for r in n.fault_records()]
    def replay(self, stream):
        for n in self.inner: n.replay(stream)
    def capture(self, builder):
        main = cu.CUstream(int(builder.stream.handle)); side = side_stream()
        e1 = cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING.value)[1]
        assert cu.cuEventRecord(e1, main)[0] == 0
        assert cu.cuStreamWaitEvent(side, e1, 0)[0] == 0
        for n in self.inner: n.capture(_B(int(side)))
        self.join_event = cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING.value)[1]
        assert cu.cuEventRecord(self.join_event, side)[0] == 0

class Join:
    def __init__(self, fork):
        self.fork = fork; self.where = fork.where; self.label = "join"; self.launch_counter = None
    borrow_key = property(lambda self: ("join", id(self)))
    def borrows(self): return []
    def replay(self, stream): pass
    def capture(self, builder):
        main = cu.CUstream(int(builder.stream.handle))
        assert cu.cuStreamWaitEvent(main, self.fork.join_event, 0)[0] == 0

_orig_init = q3._DecodeStep.__init__
def patched(self, engine, sampling):
    _orig_init(self, engine, sampling)
    v = MODE["v"]
    if v is None:
        return
    hid, hq, d = c.hidden_size, engine.heads, c.head_dim
    nodes = self.graph.nodes
    names = [getattr(getattr(n, "kernel", None), "name", "?") for n in nodes]
    o_at = [i for i, nm in enumerate(names) if nm == "gemv_rows"]
    assert len(o_at) == c.num_hidden_layers, (len(o_at), names[:12])
    self._pf_keep = []
    out_nodes = list(nodes)
    for layer in reversed(range(c.num_hidden_layers)):
        i = o_at[layer]
        q = max(j for j in range(i) if names[j] == "gemv_rows_normed")
        at = f"model.layers.{layer}."
        ops = []
        dummy = zeros((1, hq * d), bfloat16, device=engine.device).sync()
        scratch = empty((1, hid), bfloat16, device=engine.device).sync()
        ops.append(K.matmul(dummy, w[at + "self_attn.o_proj.weight"], out=scratch))
        self._pf_keep += [dummy, scratch]
        if v == "o+gu":
            rows = min(2048, w[at + "mlp.gate_up_proj.weight"].shape[0] // 2)
            d2 = zeros((1, hid), bfloat16, device=engine.device).sync()
            s2 = empty((1, rows), bfloat16, device=engine.device).sync()
            ops.append(K.matmul(d2, w[at + "mlp.gate_up_proj.weight"][:rows], out=s2))
            self._pf_keep += [d2, s2]
        inner = [n for op in ops for n in op.graph_nodes()]
        for op in ops: op._consume("recorded")
        f = Fork(inner, layer)
        out_nodes[i:i] = [Join(f)]
        out_nodes[q + 1:q + 1] = [f]
    self.graph.nodes = out_nodes
q3._DecodeStep.__init__ = patched

VARIANTS = [None, "o", "o+gu"]
results = {v: [] for v in VARIANTS}
tokens_of = {}
for rnd in range(rounds):
    for v in VARIANTS:
        MODE["v"] = v
        engine._steps.clear(); engine.lengths = [0]; engine.draws = 0
        first = int(np.argmax(engine.prefill(prompt)))
        engine.greedy(first, 2)
        engine.lengths = [0]; engine.draws = 0
        first = int(np.argmax(engine.prefill(prompt)))
        torch.cuda.synchronize(); t0 = time.perf_counter()
        made = engine.greedy(first, 1024)
        dt = time.perf_counter() - t0
        results[v].append(1023 / dt); tokens_of[v] = made
        (step,) = engine._steps.values()
        print(f"round {rnd} {v}: {1023 / dt:.1f} tokens/s ({len(step.graph.nodes)} nodes)", flush=True)
for v, r in results.items():
    print(f"{name} {v}: best {max(r):.1f} median {np.median(r):.1f} ({', '.join(f'{x:.1f}' for x in r)})")
for v in VARIANTS[1:]:
    same = next((i for i, (x, y) in enumerate(zip(tokens_of[v], tokens_of[None])) if x != y), 1024)
    print(f"{v}: greedy tokens equal to baseline for the first {same} of 1024")
# profile one replay set of the 'o' variant: the o GEMV's duration
if len(sys.argv) > 3:
    from torch.profiler import ProfilerActivity, profile
    import json, collections
    for v in [None, "o"]:
        MODE["v"] = v
        engine._steps.clear(); engine.lengths = [0]; engine.draws = 0
        first = int(np.argmax(engine.prefill(prompt)))
        engine.greedy(first, 20)
        step = next(iter(engine._steps.values()))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step.launch(4).sync(); torch.cuda.synchronize()
        prof.export_chrome_trace(f"/tmp/tr_{v}.json")
        ks = [e for e in json.load(open(f"/tmp/tr_{v}.json"))["traceEvents"] if e.get("cat") == "kernel"]
        ks.sort(key=lambda e: e["ts"])
        dur = collections.defaultdict(list)
        for e in ks: dur[e["name"][:30]].append(e["dur"])
        span = (ks[-1]["ts"] + ks[-1]["dur"] - ks[0]["ts"]) / 4
        print(f"profile {v}: step span {span:.0f} us; " + "; ".join(f"{k} n={len(x)} med {np.median(x):.1f}" for k, x in sorted(dur.items())))
        # first layer timeline
        t0 = ks[0]["ts"]
        for e in ks[:12]:
            print(f"   {e['name'][:28]:28s} start {e['ts']-t0:8.1f} dur {e['dur']:6.1f} stream {e['args'].get('stream')}")
