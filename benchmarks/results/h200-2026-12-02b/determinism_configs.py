"""Is the 4b step deterministic with other *dynamic* GEMV configs, ones that change its
timing as the static ones did? (Tells a race of the static kernels apart from one elsewhere
in the step that another timing exposes.) Runs on the tree without the static-shape patch.

    python determinism_configs.py MODEL

Per variant (a table "NxK" -> config over the shipped one): the step recorded once, 64 greedy
tokens twice from the same prompt, then recorded anew and once more; against shipped.
"""
import sys
import numpy as np
from tilesafe.kernels import gemv as G

MODEL = sys.argv[1] if len(sys.argv) > 1 else "qwen3-4b"
SHIPPED = G.launch_gemv.config_for


def cfg(bn, bk, occ):
    return {"BN": bn, "BK": bk, "occupancy": occ, "slices": 1}


VARIANTS = {
    "shipped": {},
    "o 16x256 occ3": {"2560x4096": cfg(16, 256, 3)},      # slow in the step (16 us)
    "o 16x512 occ2": {"2560x4096": cfg(16, 512, 2)},
    "gate/up 8x512 occ3": {"19456x2560": cfg(8, 512, 3)},
    "o 32x256 occ3, gate/up 8x512 occ4": {"2560x4096": cfg(32, 256, 3),
                                         "19456x2560": cfg(8, 512, 4)},
}


def run(eng, prompt, table, steps=64):
    def choose(*a, **kw):
        key = G.problem_key(*a)
        return table.get(f"{key[1]}x{key[2]}") or SHIPPED(*a, **kw)
    G.launch_gemv.config_for = choose
    eng._steps.clear()
    out = []
    for again in range(3):
        if again == 2:
            eng._steps.clear()
        eng.lengths = [0]; eng.draws = 0
        first = int(np.argmax(eng.prefill(prompt)))
        out.append(list(eng.greedy(first, steps)))
    G.launch_gemv.config_for = SHIPPED
    return out


def main():
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.qwen3.engine import Qwen3Engine
    eng = Qwen3Engine(write_random(MODEL, progress=False), device="cuda:0", max_seq=1024)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    reference = run(eng, prompt, {})[0]
    for label, table in VARIANTS.items():
        runs = run(eng, prompt, table)
        agree = [sum(a == b for a, b in zip(r, reference)) for r in runs]
        print(f"  {label:36s}: tokens equal to shipped's {agree}; runs 1 and 2 (one "
              f"recording) {'equal' if runs[0] == runs[1] else 'DIFFER'}, run 3 (recorded "
              f"anew) {'equal to run 1' if runs[2] == runs[0] else 'DIFFERS from run 1'}",
              flush=True)


if __name__ == "__main__":
    main()
