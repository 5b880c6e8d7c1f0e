"""``tilesafe generate``: load a Qwen3 checkpoint (or write one of random weights for a named
size) into the engine, run a prompt and generate greedy tokens, with progress bars, and report
the start-up apart from the weights and what compiling took in it (every graph is recorded
before the prompt runs), the time to first token, tokens per second and, on a GPU, the share of
the memory roofline (weight bytes plus the mean key/value bytes read per token, over the
device-to-device copy rate measured in the same run).

Imports the host API, the driver's streams and events, graphs, the kernel decorator, the
compile pipeline's meter, the device language (the copy kernel of the roofline's copy rate)
and the model modules; the ``--check`` path imports torch and transformers."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from .. import core as tc
from ..deviceops.graph import CudaGraph
from ..driver.stream import Event, Stream
from ..dtypes import as_dtype
from ..errors import ArgumentError, TilesafeError
from ..host.factory import empty
from ..host.tensor import borrow_mut
from ..kernel import kernel
from ..pipeline import CompileTotals, compile_totals
from .checkpoint import write_random
from .qwen3.config import NAMED_CONFIGS, Qwen3Config
from .qwen3.engine import MAX_BATCH, Qwen3Engine, Sampling


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
    p.add_argument("--batch", type=int, default=1,
                   help="sequences decoded together, 1-32 (each its own random prompt; a "
                   "text prompt is repeated)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 (default): greedy; else sample at this temperature")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k largest logits")
    p.add_argument("--top-p", type=float, default=1.0,
                   help="sample among the top-k tokens holding this much probability")
    p.add_argument("--sample-seed", type=int, default=0, help="the sampling's seed")
    p.add_argument("--device", default=None, help="cpu or cuda:N (default: the default device)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--seed", type=int, default=0, help="the random prompts' seed")
    p.add_argument("--check", action="store_true",
                   help="compare the greedy tokens of each sequence with transformers' "
                   "(needs torch and transformers; greedy only)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--tp", type=int, default=1,
                   help="split the model over this many ranks (tensor parallel), one process "
                   "each: start them with torchrun --nproc-per-node N (cuda:LOCAL_RANK and "
                   "NCCL, or the cpu and gloo with --device cpu); rank 0 reports")
    p.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    finished = False
    try:
        status = _run(args)
        finished = True
        return status
    except (TilesafeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        _leave_ranks(args, finished)


def _run(args: argparse.Namespace) -> int:
    if not 1 <= args.batch <= MAX_BATCH:
        raise ArgumentError(f"--batch {args.batch}: the engine decodes 1 to {MAX_BATCH} "
                            "sequences")
    if args.check and args.temperature != 0:
        raise ArgumentError("--check compares greedy tokens: leave --temperature out")
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.sample_seed)
    if args.prompt_tokens < 1 or args.tokens < 1:
        raise ArgumentError("--prompt-tokens and --tokens must be at least 1")
    rank = _join_ranks(args)
    progress = not args.quiet and rank == 0
    directory = args.model
    if args.random:
        if rank == 0:  # (one writer; the other ranks wait for it)
            directory = write_random(args.random, dtype=args.dtype, progress=progress)
        directory = _from_rank_0(args, directory)
    config = Qwen3Config.from_dir(directory)
    tokenizer = _tokenizer(directory) if args.prompt is not None else None
    if tokenizer is not None:
        prompt = tokenizer.encode(args.prompt).ids
        if not prompt:
            raise ArgumentError("--prompt: the text encodes to no token")
        args.prompt_tokens = len(prompt)
        prompts = [prompt] * args.batch
    else:
        rng = np.random.default_rng(args.seed)
        prompts = [rng.integers(0, config.vocab_size, args.prompt_tokens).tolist()
                   for _ in range(args.batch)]
    started, before = time.perf_counter(), compile_totals()
    engine = Qwen3Engine(directory, device=args.device, dtype=args.dtype,
                         max_seq=args.prompt_tokens + args.tokens, batch=args.batch,
                         progress=progress, tensor_parallel=args.tp)
    engine.prepare([len(p) for p in prompts], sampling)  # (the first launches' compilation)
    start_up = time.perf_counter() - started - engine.weights_seconds
    compiled = compile_totals() - before
    started, before = time.perf_counter(), compile_totals()
    tokens = [[t] for t in engine.begin(prompts, sampling)]
    first = time.perf_counter() - started
    first_compiled = compile_totals() - before
    bar = _bar(args.tokens - 1, "generating", progress)
    started = time.perf_counter()
    with bar:
        while len(tokens[0]) < args.tokens:  # graph replays back to back, 64 per host wait
            n = min(64, args.tokens - len(tokens[0]))
            made = engine.continue_from([t[-1] for t in tokens], n + 1, sampling=sampling)
            tokens = [t + m[1:] for t, m in zip(tokens, made)]
            bar.update(n)
    decode_seconds = time.perf_counter() - started
    rate = (args.tokens - 1) / decode_seconds if args.tokens > 1 else float("nan")
    if rank != 0:
        return 0
    split = f", split over {args.tp} ranks" if args.tp > 1 else ""
    print(f"model      {directory} ({config.parameter_count() / 1e9:.2f}B parameters, "
          f"{args.dtype}, device {engine.device_name}{split})")
    print(f"loading    {engine.weights_seconds:.2f} s (weights)")
    print(f"start-up   {start_up:.2f} s weights aside (the prefill and decode graphs recorded)")
    print(f"compile    {describe_compiled(compiled)}")
    how = "greedy" if sampling.greedy else (f"sampled: temperature {sampling.temperature}, "
                                            f"top-k {sampling.top_k}, top-p {sampling.top_p}")
    during = (f" (of which compiling: {describe_compiled(first_compiled)})"
              if first_compiled.compiled else "")
    print(f"prompt     {args.prompt_tokens} tokens x {args.batch} sequence(s), time to first "
          f"token {first * 1e3:.1f} ms{during}")
    print(f"decode     {args.tokens - 1} tokens per sequence in {decode_seconds:.2f} s: "
          f"{rate:.1f} tokens/s per sequence, {rate * args.batch:.1f} in all ({how})")
    print(f"roofline   {_roofline(engine, config, args, rate)}")
    print(f"memory     {_memory(engine) / 2**30:.2f} GiB of weights and key/value cache")
    for b, made in enumerate(tokens[:4]):
        print(f"tokens     [{b}] {made[:16]}{' ...' if len(made) > 16 else ''}")
    if tokenizer is not None:
        print(f"text       {tokenizer.decode(tokens[0])!r}")
    if args.check:
        same = _check(directory, prompts, tokens, args.dtype)
        print(f"check      greedy tokens {'match' if same else 'DIFFER from'} transformers'")
        return 0 if same else 1
    return 0


def describe_compiled(totals: CompileTotals) -> str:
    """One line of what a span of compiling cost: kernels, seconds, disk-cache use."""
    if not totals.compiled:
        return "nothing compiled"
    slowest = max(totals.seconds, key=totals.seconds.get)
    return (f"{totals.compiled} kernel(s) in {totals.total_seconds:.2f} s ({totals.fresh} "
            f"built afresh, {totals.compiled - totals.fresh} from the disk cache; most in "
            f"'{slowest}': {totals.seconds[slowest]:.2f} s)")


def _join_ranks(args: argparse.Namespace) -> int:
    """With ``--tp N`` above 1, this process's rank in torchrun's process group of N (joined
    here: NCCL for cuda devices, this rank's ``cuda:LOCAL_RANK`` unless ``--device`` names
    one; gloo for ``--device cpu``); else 0."""
    import os
    if args.tp < 1:
        raise ArgumentError(f"--tp {args.tp}: give the number of ranks, at least 1")
    if args.tp == 1:
        return 0
    world = os.environ.get("WORLD_SIZE")
    if world != str(args.tp):
        raise ArgumentError(f"--tp {args.tp} needs {args.tp} processes started by torchrun "
                            f"(WORLD_SIZE is {world})",
                            hint=f"torchrun --nproc-per-node {args.tp} -m tilesafe generate ...")
    import torch.distributed as dist
    on_cpu = args.device == "cpu"
    if args.device is None:
        args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    if not on_cpu:
        import torch
        torch.cuda.set_device(torch.device(args.device))  # (NCCL's device for this rank)
    if not dist.is_initialized():
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # (NVLink multicast stays off)
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        dist.init_process_group("gloo" if on_cpu else "nccl")
    return dist.get_rank()


def _leave_ranks(args: argparse.Namespace, finished: bool) -> None:
    """With ``--tp``: wait for every rank (rank 0 reports last), then leave the group (a
    process that exits while still in it can abort its peers). A rank that failed does not
    wait: the others may be inside a collective it will never join."""
    if getattr(args, "tp", 1) == 1:
        return
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        try:
            if finished:
                dist.barrier()
        finally:
            dist.destroy_process_group()


def _from_rank_0(args: argparse.Namespace, directory: Any) -> Any:
    """Rank 0's ``directory``, once it is written (every rank waits for it)."""
    if args.tp == 1:
        return directory
    import torch.distributed as dist
    box = [str(directory) if directory is not None else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _memory(engine: Qwen3Engine) -> int:
    """Bytes of the engine's weights (each once) and key/value caches."""
    seen = {id(t): t for t in engine.weights.values()}
    caches = [t for pair in engine.cache for t in pair]
    return sum(t.nbytes for t in (*seen.values(), *caches))


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
    """The share of the memory roofline a decode rate reaches (on a GPU): the bytes one step
    reads (``bytes_per_step``: every weight once, one embedding row per sequence, each
    sequence's mean key/value cache)
    over the device-to-device copy rate measured now."""
    if not engine.device_name.startswith("cuda") or not rate == rate:
        return "n/a (measured on a GPU only)"
    if engine.ranks > 1:
        return "n/a (one GPU's roofline; the ranks' bytes are not modelled)"
    per_step = bytes_per_step(config, args.prompt_tokens + args.tokens / 2, args.batch)
    copy = _copy_rate(engine.device_name)
    ideal = copy / per_step
    return (f"{rate / ideal:.1%} ({per_step / 1e9:.2f} GB read per step, copy rate "
            f"{copy / 1e12:.2f} TB/s: {ideal:.1f} steps/s at the roofline)")


def bytes_per_step(config: Qwen3Config, context: float, batch: int = 1,
                   itemsize: int = 2) -> float:
    """Bytes one decode step must read: every weight the step multiplies by once (the lm
    head's matrix once, tied to the embedding or not), one embedding row per sequence (the
    lookup reads the rows of the step's tokens, not the table) and the key/value cache of
    ``context`` positions for each of ``batch`` sequences."""
    table = config.vocab_size * config.hidden_size
    weights = config.parameter_count()
    if not config.tie_word_embeddings:  # (a separate table, of which the lookup reads rows)
        weights -= table
    weights += batch * config.hidden_size
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim
    return (weights + batch * kv * context) * itemsize


#: elements of float32 per program of the copy kernel (the tile of the f32 add that streamed
#: at the H100's bandwidth, ``benchmarks/results/h100-2026-11-22``)
COPY_TILE = 4096
#: copies per timed graph replay of the copy kernel (so the replay's host cost is a
#: fraction of a percent of what is timed)
KERNEL_COPIES = 5


@kernel
def _copy_tiles(z: tc.MutTensor[tc.f32, (COPY_TILE,)], x: tc.Tensor[tc.f32, (-1,)]):
    """One ``COPY_TILE`` of a streaming copy: the roofline's second copy (``_copy_rate``)."""
    z.store(tc.load_tile_like(x, z))


def fastest_seconds(timed: Any) -> float:
    """The fastest of 5 runs of ``timed`` (a function returning the seconds one run took),
    after runs for a fifth of a second wake the GPU: the rate a copy sustains, not an idle
    or throttled moment's."""
    warm = time.perf_counter()
    while time.perf_counter() - warm < 0.2:
        timed()
    return min(timed() for _ in range(5))


def _copy_rate(device: str, nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy of ``nbytes`` (read plus written): the
    faster of the driver's copy and a tile kernel's (``_copy_tiles``, timed as graph replays
    of ``KERNEL_COPIES`` copies), each timed by :func:`fastest_seconds` (the median after one
    copy ranged over 1.7-2.8 TB/s on one H100). A slow reference would inflate every share
    of the roofline: on an H200 the driver's copy moved 3.82 TB/s, torch's 4.2, and this
    rate with the kernel 4.07-4.13 (benchmarks/results/h200-2026-12-01)."""
    n = nbytes // 4
    src = empty((n,), as_dtype("float32"), device=device).sync()
    dst = empty((n,), as_dtype("float32"), device=device).sync()
    stream = Stream(device)
    with CudaGraph.scope(stream) as graph:
        for _ in range(KERNEL_COPIES):
            graph.record(_copy_tiles(borrow_mut(dst).partition((COPY_TILE,)), src))

    def timed(make: Any, copies: int) -> float:
        start, end = Event(timing=True), Event(timing=True)
        start.record(stream)
        make().then(lambda _: end.record(stream)).sync_on(stream)
        end.synchronize()
        return start.elapsed_ms(end) * 1e-3 / copies
    fastest = min(fastest_seconds(lambda: timed(lambda: dst.copy_(src), 1)),
                  fastest_seconds(lambda: timed(lambda: graph.launch(stream), KERNEL_COPIES)))
    return 2 * n * 4 / fastest


def _check(directory: Any, prompts: list, tokens: list, dtype: str) -> bool:
    """Whether transformers' greedy tokens (same weights, same dtype, on the CPU) are ours,
    for every sequence (the model loaded once)."""
    import torch
    import transformers
    model = transformers.Qwen3ForCausalLM.from_pretrained(
        directory, dtype=getattr(torch, dtype)).eval()
    for prompt, ours in zip(prompts, tokens):
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=len(ours),
                                 do_sample=False)
        if out[0, len(prompt):].tolist() != ours:
            return False
    return True
