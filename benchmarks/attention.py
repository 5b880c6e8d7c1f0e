"""What the run-time bounds checks cost in attention: ``examples/attention.py`` (the key/value
tiles read at a head taken from the block id: checked on the GPU) against the same kernel with
``unchecked_accesses``, and ``torch.nn.functional.scaled_dot_product_attention`` for scale,
f16, 32 heads, S = 4096, D = 128, measured in one process (CUDA graphs, interleaved rounds).

    python -m benchmarks attention --device cuda:0 --out DIR
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tilesafe as ts
from examples.attention import attention

from . import _harness as h

HEADS, SEQ, DIM = 32, 4096, 128
CONFIGS = ((128, 64, ()), (128, 64, (("occupancy", 2),)))


def _kernel(hints: tuple, unchecked: bool) -> Any:
    return ts.kernel(attention.fn, unchecked_accesses=unchecked,
                     hints={"default": dict(hints)} if hints else None)


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    import torch
    import torch.nn.functional as F
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    generator = torch.Generator(device=device).manual_seed(5)
    (q, qv), (k, kv), (v, vv) = (h.shared((HEADS, SEQ, DIM), "float16", device)
                                 for _ in range(3))
    for view in (qv, kv, vv):
        h.fill_random(view, generator)
    scale = DIM ** -0.5
    want = F.scaled_dot_product_attention(qv[None], kv[None], vv[None], scale=scale)[0]
    flops = 4 * HEADS * SEQ * SEQ * DIM
    rows: list = []
    reps = 3
    with torch.cuda.stream(stream), ts.unsafe():  # (for the unchecked variant)
        for bm, bn, hints in (CONFIGS[:1] if quick else CONFIGS):
            runs = {}
            for name, unchecked in (("safe", False), ("unchecked", True)):
                kernel = _kernel(hints, unchecked)
                o, ov = h.shared((HEADS, SEQ, DIM), "float16", device)
                h.poison(ov)
                kernel(ts.borrow_mut(o).partition((1, bm, DIM)), q, k, v, scale,
                       BN=bn).sync_on(ts_stream)
                err = h.relative_error(ov, want)
                if not err < 5e-3:
                    raise AssertionError(f"attention {name}: relative error {err} vs SDPA")
                runs[name] = h.tilesafe_graph(ts_stream, lambda kk=kernel, oo=o: (
                    kk(ts.borrow_mut(oo).partition((1, bm, DIM)), q, k, v, scale, BN=bn)
                    for _ in range(reps)))
            def sdpa():
                for _ in range(reps):
                    F.scaled_dot_product_attention(qv[None], kv[None], vv[None], scale=scale)
            runs["sdpa"] = h.torch_graph(stream, sdpa)
            timed = h.interleaved_ms(runs, stream, rounds=31)
            tflops = {n: flops * reps / (t[0] * 1e-3) / 1e12 for n, t in timed.items()}
            config = f"{bm}x{bn}" + "".join(f",{k}={v}" for k, v in hints)
            rows.append(h.Row("attention_checks", "f16", config, "safe", tflops["safe"],
                              "TFLOP/s", "unchecked", tflops["unchecked"]))
            rows.append(h.Row("attention", "f16", config, "safe", tflops["safe"], "TFLOP/s",
                              "sdpa", tflops["sdpa"]))
            print(f"  attention {config}: safe {tflops['safe']:.0f}, unchecked "
                  f"{tflops['unchecked']:.0f}, sdpa {tflops['sdpa']:.0f} TFLOP/s",
                  flush=True)
    out.mkdir(parents=True, exist_ok=True)
    h.write_csv(rows, out / "attention.csv")
    h.print_table("Attention f16, 32 heads, S=4096, D=128 (same run)", rows)
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "attention", argv)


if __name__ == "__main__":
    raise SystemExit(main())
