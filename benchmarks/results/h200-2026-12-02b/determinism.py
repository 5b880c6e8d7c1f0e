"""Are the static-shape GEMVs deterministic? (The 4b step recorded with them gave other greedy
tokens in every round, where the shipped step gave the same 512.)

    python determinism.py MODEL

1. Each decode GEMV of the step alone, eagerly, on the engine's own weights of three layers
   and random rows laid out as the step lays them out: five runs into NaN-poisoned outputs,
   static and dynamic; the bits of every run are compared with the first and with dynamic.
2. The step recorded with static shapes on one kind of GEMV at a time: 64 greedy tokens, twice
   from the same prompt with one recording, then once more recorded anew, against shipped.
"""
import os, sys
import numpy as np, torch
import tilesafe as ts
from tilesafe import kernels as K
from tilesafe.kernels import gemv as G
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from static_shape import SHIPPED  # noqa: E402

MODEL = sys.argv[1] if len(sys.argv) > 1 else "qwen3-4b"


def bits(t):
    return np.ascontiguousarray(t.numpy()).view(np.uint16).copy()


def eager(eng, static):
    G.launch_gemv.config_for = (lambda *a, **kw: {**SHIPPED(*a, **kw), "static_shape": static})
    w, c = eng.weights, eng.config
    hid, inter = c.hidden_size, eng.intermediate
    gen = torch.Generator(device="cuda").manual_seed(0)

    def row(n):
        return ts.from_dlpack(torch.randn(1, n, device="cuda", generator=gen,
                                          dtype=torch.bfloat16))
    x, attended, gate_up = row(hid), row(eng.heads * c.head_dim), row(2 * inter)
    residual = row(hid)
    out = {}
    for layer in (0, 17, c.num_hidden_layers - 1):
        at = f"model.layers.{layer}."
        cases = {
            "qkv": lambda o: K.rms_norm_matmul(x, None if eng.folded_norms else
                                                w[at + "input_layernorm.weight"],
                                                w[at + "self_attn.qkv_proj.weight"], out=o),
            "gate_up": lambda o: K.rms_norm_matmul(x, None if eng.folded_norms else
                                                    w[at + "post_attention_layernorm.weight"],
                                                    w[at + "mlp.gate_up_proj.weight"], out=o),
            "o": lambda o: K.matmul(attended, w[at + "self_attn.o_proj.weight"], out=o,
                                    accumulate=True),
            "down": lambda o: K.silu_mul_matmul(gate_up, w[at + "mlp.down_proj.weight"],
                                                out=o, accumulate=True),
        }
        if layer == c.num_hidden_layers - 1:
            cases["lm"] = lambda o: K.rms_norm_matmul(x, w["model.norm.weight"],
                                                       w["lm_head.weight"], out=o)
        for name, run in cases.items():
            runs = []
            for _ in range(5):
                n = {"qkv": (eng.heads + 2 * eng.kv_heads) * c.head_dim, "gate_up": 2 * inter,
                     "lm": c.vocab_size}.get(name, hid)
                o = (residual.clone().sync() if name in ("o", "down") else
                     ts.full((1, n), float("nan"), ts.bfloat16, device="cuda:0").sync())
                run(o).sync()
                runs.append(bits(o))
            same = all(np.array_equal(r, runs[0]) for r in runs)
            out[(layer, name)] = runs[0]
            print(f"  static={static} layer {layer:2d} {name:7s}: five runs "
                  f"{'equal' if same else 'DIFFER: ' + str([int((r != runs[0]).sum()) for r in runs])}",
                  flush=True)
    G.launch_gemv.config_for = SHIPPED
    return out


def step_tokens(eng, prompt, label, steps=64):
    shapes = {"qkv": "6144x2560", "o": "2560x4096", "gate_up": "19456x2560",
              "down": "2560x9728", "lm": "151936x2560"}

    def choose(*a, **kw):
        key = G.problem_key(*a)
        config = SHIPPED(*a, **kw)
        return {**config, "static_shape": label == "all" or shapes.get(label) == f"{key[1]}x{key[2]}"}
    G.launch_gemv.config_for = choose
    eng._steps.clear()
    results = []
    for again in range(3):
        if again == 2:
            eng._steps.clear()  # recorded anew
        eng.lengths = [0]; eng.draws = 0
        first = int(np.argmax(eng.prefill(prompt)))
        results.append(list(eng.greedy(first, steps)))
    G.launch_gemv.config_for = SHIPPED
    return results


def main():
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3.engine import Qwen3Engine
    eng = Qwen3Engine(write_random(MODEL, progress=False), device="cuda:0", max_seq=1024)
    print("1. each GEMV alone", flush=True)
    dynamic, static = eager(eng, False), eager(eng, True)
    for key in dynamic:
        d = int((dynamic[key] != static[key]).sum())
        print(f"  layer {key[0]:2d} {key[1]:7s}: static against dynamic: "
              f"{'equal' if d == 0 else f'{d} of {dynamic[key].size} outputs differ'}", flush=True)
    print("2. the step, 64 greedy tokens", flush=True)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    (reference, *_) = step_tokens(eng, prompt, "none")
    for label in ("none", "qkv", "o", "gate_up", "down", "lm", "all"):
        runs = step_tokens(eng, prompt, label)
        agree = [sum(a == b for a, b in zip(r, reference)) for r in runs]
        first_diff = [next((i for i, (a, b) in enumerate(zip(r, reference)) if a != b), None)
                      for r in runs]
        print(f"  static {label:7s}: tokens equal to shipped's {agree}, first differing at "
              f"{first_diff}; runs 1 and 2 (one recording) "
              f"{'equal' if runs[0] == runs[1] else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
