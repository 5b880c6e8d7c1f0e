"""Batch-1 decode of Qwen3 shapes (random bfloat16 weights, the loading path of a real
checkpoint): the tilesafe engine against transformers in the same process, on one GPU.

For each model: the engine's load time, first-use compile time, time to first token (the
prompt's prefill, cold and warm) and tokens/s over the generated length (every chunk of
replays of the recorded decode step timed); the share of the memory roofline per length:
(weight bytes + mean key/value bytes read per token) / the device-to-device copy rate measured
in the same run (the fastest of tilesafe's driver copy, its copy kernel and torch's copy).
Then transformers eager (over at most ``EAGER_TOKENS`` tokens) and transformers with a static cache and ``torch.compile(mode="reduce-overhead")`` generating
greedy tokens from the same prompt (their prefill timed apart and taken out).

``--check`` compares logits with transformers in float32 on the same GPU (the reference):
the prompt's, then ``CHECK_STEPS`` decode steps fed the reference's greedy tokens; the engine's
error is reported next to transformers' bfloat16 error, and its greedy tokens against the
reference's.

    python -m benchmarks decode --device cuda:0 --out DIR
    python -m benchmarks.decode --models qwen3-0.6b --lengths 1024 --references eager,compiled
                                --check --out DIR
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

MODELS = ("qwen3-0.6b", "qwen3-4b", "qwen3-8b")
LENGTHS = (1024, 8192)
PROMPT = 512
CHUNK = 64
CHECK_STEPS = 32
REFERENCES = ("eager", "compiled")
#: the most tokens transformers eager generates per measurement (about 10 tokens/s on the H100
#: host: its rate is flat over the length, so 256 tokens measure it)
EAGER_TOKENS = 256


def run(out: Path, device: str, quick: bool) -> None:
    """The suite's entry: every model at 1024 tokens (8192 for the 4b one), references at
    1024; ``quick``: the 0.6b model only."""
    models = MODELS[:1] if quick else MODELS
    measure(out, device, models, LENGTHS[:1], REFERENCES, check=False)
    if not quick:
        measure(out, device, ("qwen3-4b",), LENGTHS[1:], (), check=False)


def measure(out: Path, device: str, models: Sequence[str], lengths: Sequence[int],
            references: Sequence[str], check: bool, prompt_tokens: int = PROMPT) -> list[dict]:
    from tilesafe.models.checkpoint import write_random
    from tilesafe.models.generate import _copy_rate
    from tilesafe.models.qwen3.config import named
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    curves: dict = {}
    ours, theirs = _copy_rate(device), _torch_copy_rate(device)
    copy = max(ours, theirs)
    print(f"device-to-device copy: {ours / 1e12:.3f} TB/s (tilesafe: the driver's copy or a "
          f"copy kernel), torch {theirs / 1e12:.3f} TB/s; the roofline uses the faster",
          flush=True)
    rows += [dict(model="device", system="tilesafe", metric="copy_TBps", value=ours / 1e12),
             dict(model="device", system="torch", metric="copy_TBps", value=theirs / 1e12)]
    for name in models:
        config = named(name)
        started = time.perf_counter()
        directory = write_random(name, progress=False)
        print(f"\n{name}: checkpoint {directory} ({time.perf_counter() - started:.0f} s)",
              flush=True)
        prompt = np.random.default_rng(0).integers(0, config.vocab_size, prompt_tokens).tolist()
        most = max(lengths)
        ours = _ours(directory, device, prompt, lengths, most, config, copy, name, curves)
        rows += ours["rows"]
        if check:
            rows += _check(directory, device, prompt, ours["engine"], name)
        del ours
        gc.collect()
        for reference in references:
            length = min(lengths) if reference != "eager" else min(min(lengths), EAGER_TOKENS)
            rows += _transformers(directory, device, prompt, length, reference, name, config,
                                  copy)
            gc.collect()
    _write(out, rows, curves)
    return rows


def _torch_copy_rate(device: str) -> float:
    """Bytes per second (read plus written) of torch's ``copy_`` of 1 GiB on ``device``,
    timed by ``fastest_seconds`` as ``_copy_rate`` times its own (on an H200 torch's copy
    moved 4.2 TB/s where the driver's moved 3.8)."""
    import torch

    from tilesafe.models.generate import fastest_seconds
    with torch.cuda.device(device):  # (events and the current stream of that device)
        src = torch.empty(1 << 28, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)

        def timed() -> float:
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3
        rate = 2 * src.numel() * 4 / fastest_seconds(timed)
        del src, dst
        torch.cuda.empty_cache()
    return rate


def _roofline(config: Any, prompt: int, generated: int, rate: float, copy: float) -> float:
    from tilesafe.models.generate import bytes_per_step
    return rate * bytes_per_step(config, prompt + generated / 2) / copy


def _ours(directory: Path, device: str, prompt: list, lengths: Sequence[int], most: int,
          config: Any, copy: float, name: str, curves: dict) -> dict:
    from tilesafe.models.qwen3.engine import Qwen3Engine
    started = time.perf_counter()
    engine = Qwen3Engine(directory, device=device, max_seq=len(prompt) + most)
    load = time.perf_counter() - started
    started = time.perf_counter()
    first = engine.prefill(prompt)
    ttft_cold = time.perf_counter() - started
    started = time.perf_counter()
    engine.greedy(int(np.argmax(first)), 2)  # the decode step recorded (and compiled)
    record = time.perf_counter() - started
    started = time.perf_counter()
    first = engine.prefill(prompt)
    ttft = time.perf_counter() - started
    token = int(np.argmax(first))
    points, made, elapsed = [], 1, 0.0
    tokens = [token]
    while made < most:
        n = min(CHUNK, most - made)
        started = time.perf_counter()
        tokens += engine.greedy(tokens[-1], n + 1)[1:]
        elapsed += time.perf_counter() - started
        made += n
        points.append((made, (made - 1) / elapsed))
    curves[f"tilesafe {name}"] = points
    print(f"  tilesafe: load {load:.1f} s, first prefill {ttft_cold:.2f} s (compiles), "
          f"decode graph recorded in {record:.2f} s, TTFT {ttft * 1e3:.1f} ms", flush=True)
    rows = [dict(model=name, system="tilesafe", metric="load_s", value=load),
            dict(model=name, system="tilesafe", metric="first_prefill_s", value=ttft_cold),
            dict(model=name, system="tilesafe", metric="decode_record_s", value=record),
            dict(model=name, system="tilesafe", metric="ttft_ms", value=ttft * 1e3)]
    for length in lengths:
        rate = next(r for m, r in points if m >= length) if length > 1 else float("nan")
        share = _roofline(config, len(prompt), length, rate, copy)
        print(f"  tilesafe {length} tokens: {rate:.1f} tokens/s, {share:.1%} of the roofline",
              flush=True)
        rows += [dict(model=name, system="tilesafe", metric=f"tokens_per_s@{length}",
                      value=rate),
                 dict(model=name, system="tilesafe", metric=f"roofline@{length}", value=share)]
    return dict(rows=rows, engine=engine, tokens=tokens)


def _hf_model(directory: Path, device: str, dtype: Any) -> Any:
    import transformers
    model = transformers.Qwen3ForCausalLM.from_pretrained(directory, dtype=dtype)
    return model.to(device).eval()


def _transformers(directory: Path, device: str, prompt: list, length: int, how: str,
                  name: str, config: Any, copy: float) -> list[dict]:
    import torch
    model = _hf_model(directory, device, torch.bfloat16)
    ids = torch.tensor([prompt], device=device)
    mask = torch.ones_like(ids)
    kwargs: dict = dict(do_sample=False, attention_mask=mask, pad_token_id=0)
    compile_s = 0.0
    if how == "compiled":  # (generate compiles the decode forward itself for a static cache)
        from transformers import CompileConfig
        kwargs.update(cache_implementation="static",
                      compile_config=CompileConfig(fullgraph=True, mode="reduce-overhead"))
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=length, min_new_tokens=length, **kwargs)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - started

    def timed(n: int) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kwargs)
        torch.cuda.synchronize()
        return time.perf_counter() - started
    timed(2)
    ttft = min(timed(1) for _ in range(2))
    whole = timed(length)
    rate = (length - 1) / (whole - ttft)
    share = _roofline(config, len(prompt), length, rate, copy)
    print(f"  transformers {how}: {rate:.1f} tokens/s at {length}, {share:.1%} of the "
          f"roofline, TTFT {ttft * 1e3:.1f} ms"
          + (f", first generate (compiles) {compile_s:.0f} s" if compile_s else ""), flush=True)
    system = f"transformers-{how}"
    del model
    torch.cuda.empty_cache()
    return [dict(model=name, system=system, metric=f"tokens_per_s@{length}", value=rate),
            dict(model=name, system=system, metric=f"roofline@{length}", value=share),
            dict(model=name, system=system, metric="ttft_ms", value=ttft * 1e3)]


def _check(directory: Path, device: str, prompt: list, engine: Any, name: str) -> list[dict]:
    """The engine's logits against transformers in float32 (module docstring)."""
    import torch
    reference = _hf_model(directory, device, torch.float32)
    bf16 = _hf_model(directory, device, torch.bfloat16)
    with torch.no_grad():
        out = reference.generate(torch.tensor([prompt], device=device),
                                 max_new_tokens=CHECK_STEPS, min_new_tokens=CHECK_STEPS,
                                 do_sample=False, pad_token_id=0)
    greedy = out[0, len(prompt):].tolist()
    with torch.no_grad():
        want = reference(out).logits[0, len(prompt) - 1:-1].float().cpu().numpy()
        theirs = bf16(out).logits[0, len(prompt) - 1:-1].float().cpu().numpy()
        want_prompt = reference(out[:, :len(prompt)]).logits[0].float().cpu().numpy()
        theirs_prompt = bf16(out[:, :len(prompt)]).logits[0].float().cpu().numpy()
    ours_prompt = engine.prefill(prompt, all_positions=True)
    ours = [ours_prompt[-1]]
    for token in greedy[:-1]:
        ours.append(engine.decode(token))
    ours = np.stack(ours)
    scale = float(np.abs(want).max())

    def error(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.abs(a - b).max()) / scale
    ours_greedy = ours.argmax(-1).tolist()
    theirs_greedy = theirs.argmax(-1).tolist()
    rows = [dict(model=name, system="tilesafe", metric="prompt_logit_error",
                 value=error(ours_prompt, want_prompt)),
            dict(model=name, system="transformers-bf16", metric="prompt_logit_error",
                 value=error(theirs_prompt, want_prompt)),
            dict(model=name, system="tilesafe", metric="decode_logit_error",
                 value=error(ours, want)),
            dict(model=name, system="transformers-bf16", metric="decode_logit_error",
                 value=error(theirs, want)),
            dict(model=name, system="tilesafe", metric="greedy_agreement",
                 value=sum(a == b for a, b in zip(ours_greedy, greedy)) / len(greedy)),
            dict(model=name, system="transformers-bf16", metric="greedy_agreement",
                 value=sum(a == b for a, b in zip(theirs_greedy, greedy)) / len(greedy))]
    for row in rows:
        print(f"  check {row['system']:>18} {row['metric']:>20}: {row['value']:.5f}",
              flush=True)
    del reference, bf16
    torch.cuda.empty_cache()
    return rows


def _write(out: Path, rows: list[dict], curves: dict) -> None:
    with (out / "decode.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=("model", "system", "metric", "value"))
        writer.writeheader()
        for row in rows:
            writer.writerow(dict(row, value=f"{row['value']:.6g}"))
    (out / "decode_curves.json").write_text(json.dumps(curves) + "\n")
    series = dict(curves)
    for row in rows:
        if row["system"].startswith("transformers") and row["metric"].startswith("tokens_per"):
            length = int(row["metric"].split("@")[1])
            series[f"{row['system']} {row['model']}"] = [(length, row["value"])]
    from ._harness import plot
    plot(out / "decode_tokens_per_s.png", "batch-1 decode (bf16)", series,
         "generated tokens", "tokens/s (cumulative)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default="benchmarks/results/latest")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--lengths", default="1024")
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT)
    parser.add_argument("--references", default=",".join(REFERENCES),
                        help="transformers configurations (eager, compiled; empty: none)")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    split = (lambda s: [x for x in s.split(",") if x])
    measure(Path(args.out), args.device, split(args.models),
            [int(x) for x in split(args.lengths)], split(args.references), args.check,
            args.prompt_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
