"""The 4b decode step under several tile choices, interleaved in one process (tokens/s at
batch 1 after a 512-token prompt, greedy): the shipped table against variants that change the
o projection's GEMV config (with and without the grid-dependency wait), the down projection's,
and decode attention's. "shipped" is what the process would pick: the shipped table, after
any winner in the local store (run after ``tune_decode.py``: decode attention's H200 winner). Each variant re-records the step (the configs are read at recording).

    python engine_ab.py ROUNDS TOKENS
"""
import sys
import time

import numpy as np
import torch

import importlib
DA = importlib.import_module("tilesafe.kernels.decode_attention")
from tilesafe.kernels import gemv as G
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.engine import Qwen3Engine

O, DOWN = (2560, 4096), (2560, 9728)


def gemv(bn, bk, occ, programmatic=True):
    cfg = {"BN": bn, "BK": bk, "occupancy": occ, "slices": 1}
    if not programmatic:
        cfg["programmatic"] = False
    return cfg


VARIANTS = {
    "shipped": {},
    "o 16x256 occ3": {O: gemv(16, 256, 3)},
    "o 16x256 occ3 no wait": {O: gemv(16, 256, 3, False)},
    "o 8x512 occ4 no wait": {O: gemv(8, 512, 4, False)},
    "o 8x256 occ3": {O: gemv(8, 256, 3)},
    "down 8x512 occ3": {DOWN: gemv(8, 512, 3)},
    "decode BN128 (H100 entry)": {"decode": {"BN": 128}},
    "decode BN32 occ4": {"decode": {"BN": 32, "hints": {"occupancy": 4}}},
    "decode BN64 occ2": {"decode": {"BN": 64, "hints": {"occupancy": 2}}},
}


def main(rounds, steps):
    eng = Qwen3Engine(write_random("qwen3-4b", progress=False), device="cuda:0",
                      max_seq=512 + steps + 16)
    prompt = np.random.default_rng(0).integers(0, eng.config.vocab_size, 512).tolist()
    shipped_gemv, shipped_decode = G.launch_gemv.config_for, DA._launch_decode.config_for

    def install(table):
        def choose(*a, **kw):
            key = G.problem_key(*a)
            return table.get((key[1], key[2])) or shipped_gemv(*a, **kw)
        G.launch_gemv.config_for = choose
        decode = table.get("decode")
        DA._launch_decode.config_for = ((lambda *a, **kw: decode) if decode
                                        else shipped_decode)
    results = {label: [] for label in VARIANTS}
    for rnd in range(rounds):
        for label, table in VARIANTS.items():
            install(table)
            eng._steps.clear(); eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            eng.greedy(first, 2)
            eng.lengths = [0]; eng.draws = 0
            first = int(np.argmax(eng.prefill(prompt)))
            torch.cuda.synchronize(); t0 = time.perf_counter()
            tokens = eng.greedy(first, steps)
            dt = time.perf_counter() - t0
            results[label].append((steps - 1) / dt)
            print(f"round {rnd} {label}: {(steps - 1) / dt:.1f} tokens/s, first tokens "
                  f"{list(tokens)[:3]}", flush=True)
    install({})
    base = np.median(results["shipped"])
    for label, r in results.items():
        print(f"{label:24s} median {np.median(r):6.1f} tokens/s ({np.median(r) / base:.3f} of "
              f"shipped)  [{', '.join(f'{x:.1f}' for x in r)}]")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
