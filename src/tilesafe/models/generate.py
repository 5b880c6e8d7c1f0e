"""``tilesafe generate``: load a Qwen3 checkpoint (or write one of random weights for a named
size) into the engine, run a prompt and generate greedy tokens, with progress bars, and report
the time to first token, tokens per second and, on a GPU, the share of the memory roofline
(weight bytes plus the mean key/value bytes read per token, over the device-to-device copy rate
measured in the same run).

Imports the host API, the driver's streams and events, and the model modules; the
``--check`` path imports torch and transformers."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from ..driver.stream import Event, Stream
from ..dtypes import as_dtype
from ..errors import ArgumentError, TilesafeError
from ..host.factory import empty
from .checkpoint import write_random
from .qwen3.config import NAMED_CONFIGS, Qwen3Config
from .qwen3.engine import Qwen3Engine


def add_parser(sub: Any) -> None:
    """The ``generate`` subcommand of the ``tilesafe`` command line."""
    p = sub.add_parser("generate", help="run a Qwen3 model (a checkpoint, or random weights "
                       "of a named size) and report tokens/s")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a Hugging Face-format Qwen3 directory (config.json, "
                        "*.safetensors)")
    source.add_argument("--random", choices=sorted(NAMED_CONFIGS),
                        help="random weights of this size, written once under the cache "
                        "directory")
    p.add_argument("--prompt", default=None,
                   help="a text prompt (needs the model directory's tokenizer.json); default: "
                   "random token ids")
    p.add_argument("--prompt-tokens", type=int, default=512,
                   help="length of the random, seeded prompt (default 512)")
    p.add_argument("--tokens", type=int, default=1024, help="tokens to generate (default 1024)")
    p.add_argument("--batch", type=int, default=1, help="sequences (only 1 so far)")
    p.add_argument("--device", default=None, help="cpu or cuda:N (default: the default device)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--seed", type=int, default=0, help="the prompt's seed")
    p.add_argument("--check", action="store_true",
                   help="compare the greedy tokens with transformers' (needs torch and "
                   "transformers)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (TilesafeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.batch != 1:
        raise ArgumentError(f"--batch {args.batch}: the engine runs batch 1 so far",
                            hint="leave --batch out")
    if args.prompt_tokens < 1 or args.tokens < 1:
        raise ArgumentError("--prompt-tokens and --tokens must be at least 1")
    progress = not args.quiet
    directory = args.model
    if args.random:
        directory = write_random(args.random, dtype=args.dtype, progress=progress)
    config = Qwen3Config.from_dir(directory)
    tokenizer = _tokenizer(directory) if args.prompt is not None else None
    if tokenizer is not None:
        prompt = tokenizer.encode(args.prompt).ids
        if not prompt:
            raise ArgumentError("--prompt: the text encodes to no token")
        args.prompt_tokens = len(prompt)
    else:
        prompt = np.random.default_rng(args.seed).integers(0, config.vocab_size,
                                                           args.prompt_tokens).tolist()
    started = time.perf_counter()
    engine = Qwen3Engine(directory, device=args.device, dtype=args.dtype,
                         max_seq=args.prompt_tokens + args.tokens, progress=progress)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    logits = engine.prefill(prompt)
    first = time.perf_counter() - started
    first_token = int(np.argmax(logits))
    bar = _bar(args.tokens - 1, "generating", progress)
    started = time.perf_counter()
    tokens = [first_token]
    with bar:
        while len(tokens) < args.tokens:  # graph replays back to back, 64 per host wait
            n = min(64, args.tokens - len(tokens))
            tokens += engine.greedy(tokens[-1], n + 1)[1:]
            bar.update(n)
    decode_seconds = time.perf_counter() - started
    rate = (args.tokens - 1) / decode_seconds if args.tokens > 1 else float("nan")
    print(f"model      {directory} ({config.parameter_count() / 1e9:.2f}B parameters, "
          f"{args.dtype}, device {engine.device_name})")
    print(f"loading    {loaded:.2f} s (weights and first use)")
    print(f"prompt     {args.prompt_tokens} tokens, time to first token {first * 1e3:.1f} ms")
    print(f"decode     {args.tokens - 1} tokens in {decode_seconds:.2f} s: {rate:.1f} tokens/s")
    print(f"roofline   {_roofline(engine, config, args, rate)}")
    print(f"tokens     {tokens[:16]}{' ...' if len(tokens) > 16 else ''}")
    if tokenizer is not None:
        print(f"text       {tokenizer.decode(tokens)!r}")
    if args.check:
        same = _check(directory, prompt, tokens, args.dtype)
        print(f"check      greedy tokens {'match' if same else 'DIFFER from'} transformers'")
        return 0 if same else 1
    return 0


def _tokenizer(directory: Any) -> Any:
    """The checkpoint's ``tokenizer.json`` (ArgumentError if it has none)."""
    from pathlib import Path
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise ArgumentError(f"--prompt needs {path}, which does not exist",
                            hint="leave --prompt out for a random prompt of --prompt-tokens ids")
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(path))


def _bar(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="tok", disable=not enabled, dynamic_ncols=True)


def _roofline(engine: Qwen3Engine, config: Qwen3Config, args: argparse.Namespace,
              rate: float) -> str:
    """The share of the memory roofline a decode rate reaches (on a GPU): the bytes a token
    reads (every weight once, the lm head included, and the mean key/value cache) over the
    device-to-device copy rate measured now."""
    if not engine.device_name.startswith("cuda") or not rate == rate:
        return "n/a (measured on a GPU only)"
    itemsize = 2
    weights = config.parameter_count() * itemsize
    if config.tie_word_embeddings:
        weights += config.vocab_size * config.hidden_size * itemsize  # (read twice)
    mean_len = args.prompt_tokens + args.tokens / 2
    kv = (2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim
          * mean_len * itemsize)
    per_token = weights + kv
    copy = _copy_rate(engine.device_name)
    ideal = copy / per_token
    return (f"{rate / ideal:.1%} ({per_token / 1e9:.2f} GB read per token, copy rate "
            f"{copy / 1e12:.2f} TB/s: {ideal:.1f} tokens/s at the roofline)")


def _copy_rate(device: str) -> float:
    """Bytes per second of a device-to-device copy (read plus written) of 1 GiB, median of 5."""
    n = 1 << 29
    src = empty((n,), as_dtype("float16"), device=device).sync()
    dst = empty((n,), as_dtype("float16"), device=device).sync()
    stream = Stream(device)
    times = []
    for _ in range(6):
        start, end = Event(timing=True), Event(timing=True)
        start.record(stream)
        dst.copy_(src).then(lambda _: end.record(stream)).sync_on(stream)
        end.synchronize()
        times.append(start.elapsed_ms(end) * 1e-3)
    return 2 * n * 2 / float(np.median(times[1:]))


def _check(directory: Any, prompt: list, tokens: list, dtype: str) -> bool:
    """Whether transformers' greedy tokens (same weights, same dtype, on the CPU) are ours."""
    import torch
    import transformers
    model = transformers.Qwen3ForCausalLM.from_pretrained(
        directory, dtype=getattr(torch, dtype)).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=len(tokens),
                             do_sample=False)
    theirs = out[0, len(prompt):].tolist()
    return theirs == tokens
