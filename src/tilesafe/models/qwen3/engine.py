"""A Qwen3 model run by the kernel library: weights from a checkpoint directory on a device, a
key/value cache per layer with one row per sequence of a batch (1 to ``MAX_BATCH``), prefill
of each sequence's prompt and decode steps of one token per sequence. The caches are
token-major (``(batch, max_seq, kv_heads, head_dim)``: a token's heads are one row, written by
a rank-1 indexed partition in one launch) and read by the attention kernels through
head-major views.

The q, k and v projections are loaded as one matrix (their rows stacked), and so are the gate
and up projections: at batch 1 the decode step runs one GEMV for each group (at larger batches
and in the prefill it multiplies by row views of them). Every layer runs through
``tilesafe.kernels`` (safe kernels only): ``embedding``, ``rms_norm``, ``matmul``, ``rope``
(with the per-head q/k norms in the same launch), ``kv_cache_update`` (an indexed partition:
the writes at the sequences' slots are proven distinct), ``flash_attention`` (prefill),
``decode_attention``, ``add_rms_norm``, ``silu_mul`` (in the decode step inside the down
projection's GEMV: ``silu_mul_matmul``), ``argmax`` or ``sample``.

The prefill of a sequence is recorded once per prompt length bucket (the next power of two)
into a ``ts.CudaGraph`` and replayed for every prompt of that bucket, padded
(:class:`_Prefill`; ``all_positions=True`` or ``record_prefill = False`` runs the same
launches as they are made instead). The decode step is recorded once per :class:`Sampling` (every
output, workspace and input preallocated: the tokens, positions, cache slots, lengths and
the random stream are device tensors, advanced by the step's last kernels) and replayed per
token.

At batch 1 on one rank the decode step has no norm launches and no residual adds of its own:
each projection reading a norm's output normalizes its input row itself (``rms_norm_matmul``)
and the o and down projections add into the residual stream in their own stores
(``accumulate=True``), 8 launches a layer. The decoder layers' norm weights are folded into
the q/k/v and gate/up columns once at load (:data:`FOLDED_NORMS`; ``fold_norms=False`` keeps
transformers' rounding step for step). Larger batches and tensor-parallel steps (whose o and
down products are summed over the ranks before the residual add) keep ``add_rms_norm``.

Tensor parallelism (``tensor_parallel=N``, one process per rank of an initialized
``torch.distributed`` group of N): each rank holds ``1/N`` of the query and key/value heads
(their q/k/v rows, the o projection's columns, their cache) and of the MLP's intermediate
rows (gate/up rows, down columns); embeddings, norms and the LM head are whole on every rank.
The o and down projections' partial products are summed by an ``all_reduce``
(``tilesafe.distributed``: one per projection, two per layer), so every rank holds the same
residual stream and logits and chooses the same tokens. A collective cannot be recorded
into a graph: the decode step is then graphs between the collectives, replayed in turn.

Imports the host API, the kernel library and the model's config and checkpoint modules."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

import tilesafe.core as tc

from ... import distributed as collectives
from ... import kernels as K
from ...deviceops.deviceop import DeviceOp
from ...deviceops.graph import CudaGraph
from ...driver.device import as_device
from ...dtypes import DType, as_dtype, bfloat16, float32, int32, int64
from ...errors import ArgumentError
from ...host.factory import arange, empty, full, tensor, zeros
from ...host.tensor import borrow_mut
from ...kernel import kernel
from ...kernels.gemv import workspace_size
from ...kernels.sampling import check_options
from ..checkpoint import Checkpoint
from .config import Qwen3Config
from .weights import weight_shapes


#: matrices loaded as one, their parts' rows stacked (one GEMV instead of three or two in the
#: decode step): the engine's name and its parts' checkpoint names, within a layer
FUSED = {"self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                       "self_attn.v_proj.weight"),
         "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight")}


def _load_plan(config: Qwen3Config) -> list[tuple[str, list[str]]]:
    """``(engine weight name, checkpoint names stacked into it)`` for every weight."""
    plan = []
    for name, _ in weight_shapes(config):
        stem, _, local = name.partition("layers.")
        layer, _, within = local.partition(".")
        for fused, parts in FUSED.items():
            if within == parts[0]:
                prefix = f"{stem}layers.{layer}."
                plan.append((prefix + fused, [prefix + part for part in parts]))
        if not any(within in parts for parts in FUSED.values()):
            plan.append((name, [name]))
    return plan


#: the RMSNorms whose weight is folded into the projection that reads their output: within a
#: layer, the engine's projection and its norm. Once loaded, the projection's column ``k`` is
#: multiplied by the norm's element ``k`` on the device (``_scale_columns``: a float32
#: product rounded once to the run dtype) and the norm's weight becomes ones, so the decode
#: step's GEMVs normalize their input row with no scale to read (``rms_norm_matmul(x, None,
#: ...)``; reading it per K chunk slowed those GEMVs by 2-3 us each on the H100). Equal in
#: real arithmetic; in bfloat16 the normalized value skips its rounding after the scale and
#: the weight takes one instead
FOLDED_NORMS = {"self_attn.qkv_proj.weight": "input_layernorm.weight",
                "mlp.gate_up_proj.weight": "post_attention_layernorm.weight"}


#: checkpoint weights split by rows (output features) or columns (input features) across the
#: ranks of a tensor-parallel engine, within a layer
ROW_PARALLEL = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "mlp.gate_proj.weight", "mlp.up_proj.weight")
COLUMN_PARALLEL = ("self_attn.o_proj.weight", "mlp.down_proj.weight")


def _rank_part(name: str, array: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """Rank ``rank``'s part of checkpoint weight ``name``: a block of rows or columns, or the
    whole weight (embeddings, norms, the LM head)."""
    within = name.partition("layers.")[2].partition(".")[2]
    if ranks == 1 or within not in ROW_PARALLEL + COLUMN_PARALLEL:
        return array
    axis = 0 if within in ROW_PARALLEL else 1
    block = array.shape[axis] // ranks
    return array[rank * block:(rank + 1) * block] if axis == 0 else \
        array[:, rank * block:(rank + 1) * block]


#: the most sequences one engine decodes together
MAX_BATCH = 32
#: decode steps kept recorded per engine (one per sampling setting in use)
RECORDED_STEPS = 4
#: the fewest positions a recorded prefill covers (prompts are padded up to a power of two)
PREFILL_MIN_BUCKET = 16
#: recorded prefills kept (the least recently used goes), each with its own buffers
RECORDED_PREFILLS = 2


@dataclass(frozen=True)
class Sampling:
    """How the decode step picks each next token: ``temperature`` 0 is greedy (``argmax``),
    else ``sample`` with ``top_k`` / ``top_p`` and the Philox ``seed`` (step ``s`` of the
    generation draws sequence ``b``'s token from stream ``batch * s + b``)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:  # (ArgumentError before anything is loaded or run)
        check_options(self.temperature, self.top_k, self.top_p, self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = Sampling()


class Qwen3Engine:
    """A Qwen3 model on ``device`` in ``dtype`` (bfloat16 or float16), with room for
    ``max_seq`` positions of each of ``batch`` sequences.

    Args:
        directory: a Hugging Face-format checkpoint (``config.json``, ``*.safetensors``).
        device: where to run (default: the default device).
        dtype: the run dtype; weights are converted to it once, on the host.
        max_seq: the key/value cache's length per sequence (prompt plus generated tokens).
        batch: sequences decoded together (1 to :data:`MAX_BATCH`): each has its own cache
            rows, length and prompt; one replay of the decode step advances all of them.
        progress: show a progress bar while the weights load.
        tensor_parallel: the ranks the model is split over (module docstring); above 1, this
            process is rank ``torch.distributed.get_rank(group)`` of an initialized process
            group of that size, and every rank makes the engine and calls it the same way.
        group: the ``torch.distributed`` process group of the ranks (default: the world).
        fold_norms: fold each decoder layer's two RMSNorm weights into the projections that
            read them (:data:`FOLDED_NORMS`: 5-6% more tokens/s at the 4b shape on an H100,
            with one bfloat16 rounding moved); False keeps transformers' rounding step for
            step (the decode step's GEMVs then read the norm's weight per K chunk).
    """

    def __init__(self, directory: "str | Path", *, device: Any = None,
                 dtype: "DType | str" = bfloat16, max_seq: int = 4096, batch: int = 1,
                 progress: bool = False, tensor_parallel: int = 1, group: Any = None,
                 fold_norms: bool = True):
        self.config = config = Qwen3Config.from_dir(directory)
        self.ranks, self.rank, self.group = _tensor_parallel(config, tensor_parallel, group)
        #: this rank's query heads, key/value heads and MLP intermediate rows
        self.heads = config.num_attention_heads // self.ranks
        self.kv_heads = config.num_key_value_heads // self.ranks
        self.intermediate = config.intermediate_size // self.ranks
        self.dtype = as_dtype(dtype)
        if self.dtype.name not in ("bfloat16", "float16"):
            raise ArgumentError(f"Qwen3Engine: dtype {self.dtype.name} is not supported "
                                "(bfloat16 or float16: the attention kernels' types)")
        if config.head_dim not in (64, 128):
            raise ArgumentError(f"Qwen3Engine: head_dim {config.head_dim} is not supported "
                                "(64 or 128)")
        if not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise ArgumentError(f"Qwen3Engine: batch={batch!r} must be an int in "
                                f"[1, {MAX_BATCH}]")
        self.device = device
        self.device_name = str(as_device(device))
        self.max_seq = int(max_seq)
        self.batch = batch
        checkpoint = Checkpoint(directory)
        checkpoint.check(weight_shapes(config))
        from tqdm import tqdm
        started = time.perf_counter()
        self.weights = {}
        for name, sources in tqdm(_load_plan(config), desc="loading", unit="weight",
                                  disable=not progress, dynamic_ncols=True):
            arrays = [_rank_part(source, checkpoint.get(source), self.rank, self.ranks)
                      for source in sources]
            self.weights[name] = self._upload(arrays[0] if len(arrays) == 1
                                              else np.concatenate(arrays, axis=0))
        if config.tie_word_embeddings:
            self.weights["lm_head.weight"] = self.weights["model.embed_tokens.weight"]
        #: seconds spent reading the checkpoint and moving its weights to the device
        self.weights_seconds = time.perf_counter() - started
        #: whether the norms of FOLDED_NORMS are folded into their projections
        self.folded_norms = bool(fold_norms)
        if self.folded_norms:
            self._fold_norms()
        self.rope_table = K.rope_cache(self.max_seq, config.head_dim, base=config.rope_theta,
                                       device=device).sync()
        # token-major caches: a token's key (value) heads are one row of slot
        # ``b * max_seq + position``, written by one rank-1 indexed partition; the attention
        # kernels read them through head-major views (``_heads_view``)
        kv = (batch, self.max_seq, self.kv_heads, config.head_dim)
        self.cache = [(empty(kv, self.dtype, device=device).sync(),
                       empty(kv, self.dtype, device=device).sync())
                      for _ in range(config.num_hidden_layers)]
        #: each sequence's length (prompt plus tokens decoded so far)
        self.lengths = [0] * batch
        self._steps: dict = {}  # Sampling -> its recorded _DecodeStep
        self._prefills: dict = {}  # (bucket, sequence) -> its recorded _Prefill
        #: record each prompt length bucket's prefill into a graph (False: every prefill
        #: drives its launches one by one)
        self.record_prefill = True
        #: the generation index of the tokens last chosen (0: the tokens after the prompts);
        #: the tokens of index ``g`` are drawn from random streams ``batch * g + b``
        self.draws = 0

    def _fold_norms(self) -> None:
        """Apply :data:`FOLDED_NORMS`: each projection's columns scaled by its norm's weight
        in place, then the norm's weight replaced by ones (one tensor, shared)."""
        hidden = self.config.hidden_size
        ones = full((hidden,), 1.0, dtype=self.dtype, device=self.device).sync()
        columns = min(1024, 1 << (hidden - 1).bit_length())
        for layer in range(self.config.num_hidden_layers):
            at = f"model.layers.{layer}."
            for projection, norm in FOLDED_NORMS.items():
                weight = self.weights[at + projection]
                _scale_columns(borrow_mut(weight).partition((4, columns)),
                               self.weights[at + norm].reshape(1, hidden)).sync()
                self.weights[at + norm] = ones

    @property
    def length(self) -> int:
        """The first sequence's length (the length, at batch 1)."""
        return self.lengths[0]

    def _upload(self, array: np.ndarray) -> Any:
        """A weight converted once to the run dtype (on the host) and copied to the device."""
        host = np.ascontiguousarray(array).astype(_numpy_dtype(self.dtype), copy=False)
        return tensor(host, device=self.device).sync()

    def _room(self, more: int, sequence: Optional[int] = None) -> None:
        """ArgumentError if a sequence (every one by default) has no room for ``more``."""
        lengths = self.lengths if sequence is None else [self.lengths[sequence]]
        if max(lengths) + more > self.max_seq:
            raise ArgumentError(f"Qwen3Engine: {max(lengths) + more} positions exceed "
                                f"max_seq {self.max_seq}",
                                hint="make the engine with a larger max_seq")

    # -- the model --------------------------------------------------------------------------
    def prefill(self, ids: Sequence[int], *, sequence: int = 0,
                all_positions: bool = False) -> np.ndarray:
        """Run the prompt ``ids`` of sequence ``sequence`` from position 0 (its cache is
        reset) and return the logits of its last position, ``(vocab,)`` float32, or with
        ``all_positions`` of every position, ``(len(ids), vocab)``."""
        if not len(ids):
            raise ArgumentError("Qwen3Engine.prefill: the prompt has no token",
                                hint="pass at least one token id")
        if not isinstance(sequence, int) or not 0 <= sequence < self.batch:
            raise ArgumentError(f"Qwen3Engine.prefill: sequence={sequence!r} is not in "
                                f"[0, {self.batch})")
        if len(ids) > self.max_seq:
            raise ArgumentError(f"Qwen3Engine.prefill: {len(ids)} prompt tokens exceed "
                                f"max_seq {self.max_seq}",
                                hint="make the engine with a larger max_seq")
        self.lengths[sequence] = 0
        ids = list(ids)
        if self.record_prefill and not all_positions:
            logits = self._prefill_graph(len(ids), sequence).run(self, ids)
        else:  # (its launches run as they are made)
            logits = _Prefill(self, len(ids), sequence, driven_ids=ids,
                              all_positions=all_positions).logits_now()
        self.lengths[sequence] = len(ids)
        return logits if all_positions else logits[0]

    def _prefill_graph(self, tokens: int, sequence: int) -> "_Prefill":
        """The recorded prefill of ``sequence`` whose bucket holds ``tokens`` positions (the
        next power of two, at least :data:`PREFILL_MIN_BUCKET`, at most ``max_seq``); the
        :data:`RECORDED_PREFILLS` most recently used are kept."""
        bucket = min(self.max_seq, max(PREFILL_MIN_BUCKET, 1 << (tokens - 1).bit_length()))
        key = (bucket, sequence)
        graph = self._prefills.pop(key, None)
        if graph is None:
            while len(self._prefills) >= RECORDED_PREFILLS:
                self._prefills.pop(next(iter(self._prefills)))
            graph = _Prefill(self, bucket, sequence)
        self._prefills[key] = graph
        return graph

    def prepare(self, prompt_tokens: Sequence[int], sampling: Sampling = GREEDY) -> None:
        """Record now what prompts of these lengths (one per sequence) and decoding with
        ``sampling`` will replay: each sequence's prefill graph for its prompt's bucket and the
        decode step, and compile (or load from the disk cache) every kernel they launch. This
        runs nothing and changes no sequence; the first prompt's time and the decode's tokens
        per second then hold no compilation. (A sampled first token is drawn by ``sample``
        outside the graphs: its kernels compile on first use. Only the
        :data:`RECORDED_PREFILLS` most recent prefill graphs are kept, so at a larger batch the
        prompts record the earlier sequences' graphs again, over kernels compiled here.)"""
        if len(prompt_tokens) != self.batch:
            raise ArgumentError(f"Qwen3Engine.prepare: {len(prompt_tokens)} prompt length(s) "
                                f"for an engine of batch {self.batch}",
                                hint="pass one length per sequence")
        for sequence, tokens in enumerate(prompt_tokens):
            if not 1 <= int(tokens) <= self.max_seq:
                raise ArgumentError(f"Qwen3Engine.prepare: a prompt of {tokens} tokens does "
                                    f"not fit max_seq {self.max_seq}")
            if self.record_prefill:
                _compile(self._prefill_graph(int(tokens), sequence).parts)
        _compile(self._decode_step(sampling).parts)

    def decode(self, tokens: "int | Sequence[int]") -> np.ndarray:
        """Append one token to every sequence (``tokens``: an int at batch 1, else one per
        sequence) in one replay of the recorded decode step; returns their logits,
        ``(vocab,)`` float32 at batch 1, else ``(batch, vocab)``."""
        ids = self._batch_tokens(tokens)
        self._room(1)
        step = self._decode_step(GREEDY)
        step.start(self, ids)
        step.launch().sync()
        self.lengths = [n + 1 for n in self.lengths]
        self.draws += 1
        step.at = (tuple(self.lengths), self.draws)
        logits = step.logits.numpy().astype(np.float32)
        return logits[0] if isinstance(tokens, (int, np.integer)) else logits

    def _batch_tokens(self, tokens: "int | Sequence[int]") -> list[int]:
        ids = [int(tokens)] if isinstance(tokens, (int, np.integer)) else [int(t) for t in tokens]
        if len(ids) != self.batch:
            raise ArgumentError(f"Qwen3Engine: {len(ids)} token(s) for {self.batch} "
                                "sequence(s)", hint="pass one token per sequence")
        vocab = self.config.vocab_size
        if any(not 0 <= t < vocab for t in ids):
            raise ArgumentError(f"Qwen3Engine: token ids {ids} are not all in [0, {vocab})")
        return ids

    def _decode_step(self, sampling: Sampling) -> "_DecodeStep":
        """The decode step recorded for ``sampling`` (every greedy setting shares one); the
        :data:`RECORDED_STEPS` most recently used are kept, each with its own buffers."""
        if sampling.greedy:
            sampling = GREEDY
        step = self._steps.pop(sampling, None)
        if step is None:
            while len(self._steps) >= RECORDED_STEPS:  # (the least recently used goes)
                self._steps.pop(next(iter(self._steps)))
            step = _DecodeStep(self, sampling)
        self._steps[sampling] = step
        return step

    def generate(self, prompts: "Sequence[int] | Sequence[Sequence[int]]", steps: int, *,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 seed: int = 0) -> "list[int] | list[list[int]]":
        """The ``steps`` tokens after each prompt: the prompts' prefill, then the decode step
        replayed, each replay's tokens feeding the next on the device. Greedy with
        ``temperature`` 0, else sampled (``tilesafe.kernels.sample``: top-k, top-p, from
        ``seed``; the same arguments give the same tokens). ``prompts``: one list of ids at
        batch 1, else one per sequence; returns a list of tokens (batch 1) or one list per
        sequence."""
        single = len(prompts) > 0 and isinstance(prompts[0], (int, np.integer))
        batch = [list(prompts)] if single else [list(p) for p in prompts]
        if steps < 1:
            raise ArgumentError(f"Qwen3Engine.generate: steps={steps} must be at least 1")
        sampling = Sampling(float(temperature), int(top_k), float(top_p), int(seed))
        if max(map(len, batch)) + steps - 1 > self.max_seq:  # (the last token is not stored)
            raise ArgumentError(f"Qwen3Engine: {max(map(len, batch)) + steps - 1} positions "
                                f"exceed max_seq {self.max_seq}",
                                hint="make the engine with a larger max_seq")
        first = self.begin(batch, sampling)
        made = self.continue_from(first, steps, sampling=sampling)
        return made[0] if single else made

    def begin(self, prompts: Sequence[Sequence[int]], sampling: Sampling = GREEDY) -> list[int]:
        """Prefill one prompt per sequence and return the token after each, chosen from its
        last logits as the decode step chooses (generation index 0: random stream ``b`` for
        sequence ``b``); :meth:`continue_from` goes on from them."""
        if len(prompts) != self.batch:
            raise ArgumentError(f"Qwen3Engine: {len(prompts)} prompt(s) for an engine "
                                f"of batch {self.batch}", hint="pass one prompt per sequence")
        logits = np.stack([self.prefill(ids, sequence=b) for b, ids in enumerate(prompts)])
        self.draws = 0
        if sampling.greedy:
            return [int(t) for t in np.argmax(logits, axis=-1)]
        rows = tensor(logits, device=self.device).sync()
        return [int(t) for t in K.sample(rows, temperature=sampling.temperature,
                                         top_k=sampling.top_k, top_p=sampling.top_p,
                                         seed=sampling.seed, offset=0).sync().numpy()]

    def greedy(self, token: int, steps: int, chunk: int = 64) -> list[int]:
        """Batch 1: ``token`` (at the next position) and the ``steps - 1`` greedy tokens
        after it (:meth:`continue_from`)."""
        return self.continue_from([token], steps, chunk=chunk)[0]

    def continue_from(self, tokens: Sequence[int], steps: int, *, chunk: int = 64,
                      sampling: Sampling = GREEDY) -> list[list[int]]:
        """Each sequence's ``tokens[b]`` (at its next position) and the ``steps - 1`` tokens
        after it: the decode step's graph replayed back to back, ``chunk`` replays per host
        wait; each replay's tokens feed the next and are kept on the device, read once at the
        end. A sampled token of generation index ``g`` (:attr:`draws`) comes from random
        stream ``batch * g + b``."""
        ids = self._batch_tokens(list(tokens))
        if not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ArgumentError(f"Qwen3Engine: steps={steps!r} must be an int >= 1")
        self._room(steps - 1)  # (the replays write positions length .. length + steps - 2)
        step = self._decode_step(sampling)
        step.start(self, ids)
        left = steps - 1
        while left > 0:
            n = min(chunk, left)
            step.launch(n).sync()
            left -= n
        kept = step.tokens.numpy().reshape(self.batch, self.max_seq)
        made = [[ids[b]] + [int(t) for t in kept[b, n:n + steps - 1]]
                for b, n in enumerate(self.lengths)]
        self.lengths = [n + steps - 1 for n in self.lengths]
        self.draws += steps - 1
        step.at = (tuple(self.lengths), self.draws)
        return made


def _tensor_parallel(config: Qwen3Config, ranks: Any, group: Any) -> tuple[int, int, Any]:
    """``(ranks, this rank, group)`` of a tensor-parallel engine, checked."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ArgumentError(f"Qwen3Engine: tensor_parallel={ranks!r} must be an int >= 1")
    if ranks == 1:
        return 1, 0, None
    for what, count in (("query heads", config.num_attention_heads),
                        ("key/value heads", config.num_key_value_heads),
                        ("intermediate rows", config.intermediate_size)):
        if count % ranks:
            raise ArgumentError(f"Qwen3Engine: tensor_parallel={ranks} does not divide the "
                                f"model's {count} {what}",
                                hint="use a number of ranks that divides the heads, the "
                                     "key/value heads and the MLP's intermediate size")
    try:
        import torch.distributed as dist
    except ImportError:
        raise ArgumentError("Qwen3Engine: tensor_parallel needs torch (torch.distributed)",
                            hint="pip install torch") from None
    if not dist.is_available() or not dist.is_initialized():
        raise ArgumentError("Qwen3Engine: tensor_parallel > 1 needs an initialized "
                            "torch.distributed process group",
                            hint="start one process per rank with torchrun, or call "
                                 "torch.distributed.init_process_group first")
    size = dist.get_world_size(group)
    if size != ranks:
        raise ArgumentError(f"Qwen3Engine: tensor_parallel={ranks}, but the process group has "
                            f"{size} ranks", hint="make them equal (torchrun --nproc-per-node)")
    return ranks, dist.get_rank(group), group


@kernel(examples=[{"T": tc.bf16, "R": 4, "C": 1024}])
def _scale_columns(w: tc.MutTensor["T", ("R", "C")], scale: tc.Tensor["T", (1, -1)]):  # noqa: F821
    """``w = round(w * scale)`` in place: each column of the rows it covers times the
    column's element of ``scale`` (a float32 product, rounded once)."""
    _, j, _ = tc.get_tile_block_id()
    factor = scale.partition((1, C)).load((0, j), padding=0)  # noqa: F821
    w.store((w.load().astype(tc.f32) * factor.astype(tc.f32)).astype(w.dtype))


@kernel
def _advance(position: tc.MutTensor[tc.i32, (1,)], slot: tc.MutTensor[tc.i32, (1,)],
             length: tc.MutTensor[tc.i32, (1,)]):
    """One sequence's next position, cache slot and length (one more of each)."""
    position.store(position.load() + 1)
    slot.store(slot.load() + 1)
    length.store(length.load() + 1)


@kernel
def _advance_draws(offset: tc.MutTensor[tc.i64, (1,)], batch: int):
    """The next step's first random stream (``batch`` more)."""
    offset.store(offset.load() + batch)


@kernel
def _keep_tokens(slot: tc.MutTensor[tc.i32, (1,)], tokens: tc.Tensor[tc.i32, (-1,)]):
    """Copy sequence ``b``'s new token into its slot of the generated tokens."""
    b, _, _ = tc.get_tile_block_id()
    slot.store(tokens.partition((1,)).load((b,)))


class _DecodeStep:
    """The decode step of one token per sequence, recorded into a graph over preallocated
    buffers: ``token`` (the input ids, then the chosen next ones), ``position``, ``slot``
    (``b * max_seq + position``) and ``length`` of each sequence (advanced by the step),
    ``offset`` (the first random stream, advanced by ``batch``), ``logits``, ``tokens`` (each
    chosen token at its sequence's slot: an indexed partition, one slot per sequence)."""

    def __init__(self, engine: "Qwen3Engine", sampling: Sampling):
        c, w, dev, dt = engine.config, engine.weights, engine.device, engine.dtype
        hq, hkv, d, hid = engine.heads, engine.kv_heads, c.head_dim, c.hidden_size
        inter = engine.intermediate
        n = engine.batch
        self.batch = n

        def buffer(*shape, dtype=dt):
            return empty(shape, dtype, device=dev).sync()
        self.token = zeros((n,), int32, device=dev).sync()
        self.tokens = zeros((n * engine.max_seq,), int32, device=dev).sync()
        self.position = zeros((n,), int32, device=dev).sync()
        self.slot = zeros((n,), int32, device=dev).sync()
        self.length = zeros((n,), int32, device=dev).sync()
        self.offset = zeros((1,), int64, device=dev).sync()
        #: the engine state (lengths, draws) the device inputs stand for after the last replay
        self.at: Any = None
        x, h = buffer(n, hid), buffer(n, hid)
        if n == 1:  # one GEMV of the stacked q/k/v rows; the heads are views of its output
            qkv = buffer(1, (hq + 2 * hkv) * d)
            q = qkv[:, :hq * d].reshape(hq, d)
            k = qkv[:, hq * d:(hq + hkv) * d].reshape(hkv, d)
            v = qkv[:, (hq + hkv) * d:].reshape(1, hkv, d)
        else:  # (rows of a stacked output are not contiguous: three products)
            q3, k3, v3 = buffer(n, hq * d), buffer(n, hkv * d), buffer(n, hkv * d)
            q, k, v = q3.reshape(n * hq, d), k3.reshape(n * hkv, d), v3.reshape(n, hkv, d)
        qn, kn = buffer(n * hq, d), buffer(n * hkv, d)
        attended = buffer(n, hq, d)
        gate_up, act = buffer(n, 2 * inter), buffer(n, inter)
        self.logits = buffer(n, c.vocab_size)
        shapes = {((hq + 2 * hkv) * d, hid), (hq * d, hid), (hkv * d, hid), (hid, hq * d),
                  (2 * inter, hid), (hid, inter),
                  (c.vocab_size, hid)}
        size = max(workspace_size(n, cols, rows, dt.itemsize) for cols, rows in shapes)
        mm_work = buffer(max(1, size), dtype=float32)
        attn_work = K.decode_attention_workspace(attended,
                                                 _heads_view(engine.cache[0][0])).sync()
        argmax_work = K.argmax_workspace(self.logits).sync()
        eps = c.rms_norm_eps

        def mm(a, weight, out):
            return K.matmul(a, weight, out=out, workspace=mm_work)

        def normed_mm(scale, weight, out):  # (x normalized by the product's launch)
            return K.rms_norm_matmul(x, scale, weight, eps=eps, out=out, normed=h,
                                     workspace=mm_work)

        def norm_scale(name):  # (None: folded into the projection, FOLDED_NORMS)
            return None if engine.folded_norms else w[name]
        # one sequence on one rank: the residual adds are the o and down projections' own
        # stores (accumulate) and each norm is taken by the projection that reads it (``h``
        # only the scratch of a two-launch GEMV config), so there are no add + norm launches;
        # otherwise (a batch's mma path, or partial products summed over the ranks first)
        # add_rms_norm does both, into ``o`` and ``mlp``
        fused = n == 1 and engine.ranks == 1
        o, mlp = (None, None) if fused else (buffer(n, hid), buffer(n, hid))
        graph = _Recorder(engine)
        graph.record(K.embedding(self.token, w["model.embed_tokens.weight"], out=x))
        if not fused:
            graph.record(K.rms_norm(x, w["model.layers.0.input_layernorm.weight"], eps=eps,
                                    out=h))
        for layer in range(c.num_hidden_layers):
            at = f"model.layers.{layer}."
            cache_k, cache_v = engine.cache[layer]
            stacked = w[at + "self_attn.qkv_proj.weight"]
            if fused:
                graph.record(normed_mm(norm_scale(at + "input_layernorm.weight"),
                                       stacked, qkv))
            elif n == 1:
                graph.record(mm(h, stacked, qkv))
            else:
                graph.record(mm(h, stacked[:hq * d], q3))
                graph.record(mm(h, stacked[hq * d:(hq + hkv) * d], k3))
                graph.record(mm(h, stacked[(hq + hkv) * d:], v3))
            graph.record(K.rope(q.reshape(n, hq, d), k.reshape(n, hkv, d),
                                engine.rope_table, self.position,
                                q_out=qn.reshape(n, hq, d), k_out=kn.reshape(n, hkv, d),
                                q_norm=w[at + "self_attn.q_norm.weight"],
                                k_norm=w[at + "self_attn.k_norm.weight"], eps=eps))
            graph.record(K.kv_cache_update(cache_k, cache_v, kn.reshape(n, hkv, d), v,
                                           self.slot, layout="nhd"))
            graph.record(K.decode_attention(qn.reshape(n, hq, d), _heads_view(cache_k),
                                            _heads_view(cache_v), self.length,
                                            out=attended, workspace=attn_work))
            if fused:
                graph.record(K.matmul(attended.reshape(n, hq * d),
                                      w[at + "self_attn.o_proj.weight"], out=x,
                                      accumulate=True, workspace=mm_work))
                graph.record(normed_mm(norm_scale(at + "post_attention_layernorm.weight"),
                                       w[at + "mlp.gate_up_proj.weight"], gate_up))
                graph.record(K.silu_mul_matmul(gate_up, w[at + "mlp.down_proj.weight"],
                                               activations=act, out=x, workspace=mm_work,
                                               accumulate=True))
                continue
            graph.record(mm(attended.reshape(n, hq * d), w[at + "self_attn.o_proj.weight"],
                            o))
            graph.sum_over_ranks(o)
            graph.record(K.add_rms_norm(o, x, w[at + "post_attention_layernorm.weight"],
                                        eps=eps, out=h))
            graph.record(mm(h, w[at + "mlp.gate_up_proj.weight"], gate_up))
            graph.record(K.silu_mul_matmul(gate_up, w[at + "mlp.down_proj.weight"],
                                           activations=act, out=mlp, workspace=mm_work))
            graph.sum_over_ranks(mlp)
            following = (f"model.layers.{layer + 1}.input_layernorm.weight"
                         if layer + 1 < c.num_hidden_layers else "model.norm.weight")
            graph.record(K.add_rms_norm(mlp, x, w[following], eps=eps, out=h))
        if fused:
            graph.record(normed_mm(w["model.norm.weight"], w["lm_head.weight"], self.logits))
        else:
            graph.record(mm(h, w["lm_head.weight"], self.logits))
        if sampling.greedy:  # the next step's input
            graph.record(K.argmax(self.logits, out=self.token, workspace=argmax_work))
        else:
            graph.record(K.sample(self.logits, temperature=sampling.temperature,
                                  top_k=sampling.top_k, top_p=sampling.top_p,
                                  seed=sampling.seed, offset=self.offset, out=self.token,
                                  workspace=argmax_work))
            graph.record(_advance_draws(_borrowed(self.offset), n))
        graph.record(_keep_tokens(borrow_mut(self.tokens).partition(1, at=self.slot),
                                  self.token))
        graph.record(_advance(_borrowed(self.position), _borrowed(self.slot),
                              _borrowed(self.length)))
        #: the step's work: graphs, and between them (tensor parallel) collectives to make
        self.parts = graph.close()
        #: the recorded step's one graph (None when collectives split it)
        self.graph = self.parts[0] if len(self.parts) == 1 else None

    def launch(self, replays: int = 1) -> DeviceOp:
        """``replays`` replays of the step back to back, not yet run: its graph launched, or
        its graphs and collectives in turn, each replay after the one before (one chain, one
        stream)."""
        return _in_turn(self.parts * replays)

    def start(self, engine: "Qwen3Engine", tokens: list[int]) -> None:
        """Set the step's inputs: ``tokens`` at each sequence's next position (its length),
        and the first random stream of the next tokens (generation index ``draws + 1``).
        Positions, slots, lengths and the stream are written only when the engine's state
        is not the one the step's own replays left (:attr:`at`)."""
        dev, n = engine.device, self.batch
        inputs = [(self.token, np.asarray(tokens, np.int32))]
        if self.at != (tuple(engine.lengths), engine.draws):
            lengths = np.asarray(engine.lengths, np.int32)
            slots = lengths + np.arange(n, dtype=np.int32) * engine.max_seq
            inputs += [(self.position, lengths), (self.slot, slots), (self.length, lengths + 1),
                       (self.offset, np.array([n * (engine.draws + 1)], np.int64))]
        for target, values in inputs:
            target.copy_(tensor(values, device=dev).sync()).sync()
        self.at = None  # (until the replays that follow succeed: the caller sets it)


class _Prefill:
    """The prefill of the first ``n`` positions of one sequence over preallocated buffers,
    either recorded once into a graph (the default: replayed by :meth:`run` for every prompt
    of up to ``n`` tokens, a bucket) or, with ``driven_ids``, run launch by launch as it is
    made (a prompt of exactly ``n`` tokens; ``all_positions``: the logits of every position).
    Driven one by one, a prompt's launches cost about 1 ms of host time each, a hundred times
    their device time at a few hundred tokens.

    A shorter prompt is padded with token 0. Each position's work is its own row of every
    product and norm, and causal attention lets no real position see a later one, so the
    padding changes no logit of the prompt; it writes its keys and values to the cache
    positions after the prompt, which the decode steps overwrite before any attention reads
    them (a step reads positions below the sequence's length only). The inputs are device
    tensors written before each replay: the ids (``ids``), and ``last``, the prompt's last
    position, whose row of the final hidden states the LM head multiplies."""

    def __init__(self, engine: "Qwen3Engine", n: int, sequence: int, *,
                 driven_ids: Optional[list[int]] = None, all_positions: bool = False):
        c, w, dev, dt = engine.config, engine.weights, engine.device, engine.dtype
        hq, hkv, d, hid = engine.heads, engine.kv_heads, c.head_dim, c.hidden_size
        inter, eps = engine.intermediate, c.rms_norm_eps
        self.bucket = n

        def buffer(*shape, dtype=dt):
            return empty(shape, dtype, device=dev).sync()
        self.ids = zeros((n,), int32, device=dev).sync()
        self.last = zeros((1,), int32, device=dev).sync()
        positions = arange(0, n, dtype=int32, device=dev).sync()
        first = sequence * engine.max_seq
        slots = arange(first, first + n, dtype=int32, device=dev).sync()
        x, h, o, mlp = buffer(n, hid), buffer(n, hid), buffer(n, hid), buffer(n, hid)
        q, k, v = buffer(n, hq * d), buffer(n, hkv * d), buffer(n, hkv * d)
        attended = buffer(n, hq, d)
        gate, up, act = buffer(n, inter), buffer(n, inter), buffer(n, inter)
        self.logits = buffer(n if all_positions else 1, c.vocab_size)
        shapes = {(hq * d, hid), (hkv * d, hid), (hid, hq * d), (inter, hid), (hid, inter)}
        size = max(workspace_size(n, cols, rows, dt.itemsize) for cols, rows in shapes)
        size = max(size, workspace_size(self.logits.shape[0], c.vocab_size, hid, dt.itemsize))
        work = buffer(max(1, size), dtype=float32)

        def mm(a, weight, out):
            return K.matmul(a, weight, out=out, workspace=work)
        if driven_ids is not None:
            self._set_inputs(engine, driven_ids)  # (read by the launches as they are made)
        graph = _Recorder(engine) if driven_ids is None else _Driver(engine)
        graph.record(K.embedding(self.ids, w["model.embed_tokens.weight"], out=x))
        graph.record(K.rms_norm(x, w["model.layers.0.input_layernorm.weight"], eps=eps, out=h))
        for layer in range(c.num_hidden_layers):
            at = f"model.layers.{layer}."
            stacked = w[at + "self_attn.qkv_proj.weight"]  # (the rows of q, k and v: views)
            graph.record(mm(h, stacked[:hq * d], q))
            graph.record(mm(h, stacked[hq * d:(hq + hkv) * d], k))
            graph.record(mm(h, stacked[(hq + hkv) * d:], v))
            q3, k3, v3 = q.reshape(n, hq, d), k.reshape(n, hkv, d), v.reshape(n, hkv, d)
            graph.record(K.rope(q3, k3, engine.rope_table, positions,
                                q_norm=w[at + "self_attn.q_norm.weight"],
                                k_norm=w[at + "self_attn.k_norm.weight"], eps=eps))
            cache_k, cache_v = engine.cache[layer]
            graph.record(K.kv_cache_update(cache_k, cache_v, k3, v3, slots, layout="nhd"))
            graph.record(K.flash_attention(
                _heads_first(q3), _heads_view(cache_k[sequence:sequence + 1, :n]),
                _heads_view(cache_v[sequence:sequence + 1, :n]), causal=True,
                out=_heads_first(attended)))
            graph.record(mm(attended.reshape(n, hq * d), w[at + "self_attn.o_proj.weight"], o))
            graph.sum_over_ranks(o)
            graph.record(K.add_rms_norm(o, x, w[at + "post_attention_layernorm.weight"],
                                        eps=eps, out=h))
            gate_up = w[at + "mlp.gate_up_proj.weight"]  # (two row views: two GEMMs)
            graph.record(mm(h, gate_up[:inter], gate))
            graph.record(mm(h, gate_up[inter:], up))
            graph.record(K.silu_mul(gate, up, out=act))
            graph.record(mm(act, w[at + "mlp.down_proj.weight"], mlp))
            graph.sum_over_ranks(mlp)
            following = (f"model.layers.{layer + 1}.input_layernorm.weight"
                         if layer + 1 < c.num_hidden_layers else "model.norm.weight")
            graph.record(K.add_rms_norm(mlp, x, w[following], eps=eps, out=h))
        if all_positions:
            graph.record(mm(h, w["lm_head.weight"], self.logits))
        else:
            final = buffer(1, hid)
            graph.record(K.embedding(self.last, h, out=final))  # (the prompt's last row)
            graph.record(mm(final, w["lm_head.weight"], self.logits))
        self.parts = graph.close()

    def _set_inputs(self, engine: "Qwen3Engine", ids: list[int]) -> None:
        """Write the ids (padded with token 0) and the last position's index."""
        padded = np.zeros(self.bucket, np.int32)
        padded[:len(ids)] = ids
        for target, values in ((self.ids, padded),
                               (self.last, np.array([len(ids) - 1], np.int32))):
            target.copy_(tensor(values, device=engine.device).sync()).sync()

    def run(self, engine: "Qwen3Engine", ids: list[int]) -> np.ndarray:
        """One replay of the recorded prefill for ``ids`` (at most ``bucket`` tokens): the
        logits of its last position, ``(1, vocab)`` float32 (the cache positions ``0 ..
        bucket`` written)."""
        self._set_inputs(engine, ids)
        _in_turn(self.parts).sync()
        return self.logits_now()

    def logits_now(self) -> np.ndarray:
        """The logits the launches wrote, float32 (one row, or every position's)."""
        return self.logits.numpy().astype(np.float32)


class _Driver:
    """``_Recorder``'s counterpart that runs each op as it is given (and each sum over the
    ranks at once): the same launches, driven one by one."""

    def __init__(self, engine: "Qwen3Engine"):
        self.engine = engine

    def record(self, op: DeviceOp) -> None:
        op.sync()

    def sum_over_ranks(self, partial: Any) -> None:
        if self.engine.ranks > 1:
            collectives.all_reduce(partial, group=self.engine.group).sync()

    def close(self) -> list:
        return []


class _Recorder:
    """Records a decode step: ops into a graph, and at each sum over the ranks (tensor
    parallel) the graph so far is closed and an ``all_reduce`` made at each replay follows."""

    def __init__(self, engine: "Qwen3Engine"):
        self.engine = engine
        self.parts: list = []
        self._graph: Any = None  # (the graph being recorded: its ``with`` block entered)

    def record(self, op: DeviceOp) -> None:
        if self._graph is None:
            self._graph = CudaGraph.scope().__enter__()
        try:
            self._graph.record(op)
        except BaseException as err:
            self._graph.__exit__(type(err), err, err.__traceback__)
            self._graph = None
            raise

    def sum_over_ranks(self, partial: Any) -> None:
        if self.engine.ranks == 1:
            return
        self._end_graph()
        group = self.engine.group
        self.parts.append(lambda: collectives.all_reduce(partial, group=group))

    def _end_graph(self) -> None:
        if self._graph is not None:
            self._graph.__exit__(None, None, None)
            self.parts.append(self._graph)
            self._graph = None

    def close(self) -> list:
        self._end_graph()
        return self.parts


def _in_turn(parts: list) -> DeviceOp:
    """Recorded graphs and collectives (``_Recorder.close``) run one after another: one chain,
    each part started when the one before has been enqueued."""
    first, *rest = parts
    op = _started(first)
    for part in rest:
        op = op.then(lambda _result, part=part: _started(part))
    return op


def _compile(parts: list) -> None:
    """Compile every kernel of the recorded graphs among ``parts`` (``_Recorder.close``)."""
    for part in parts:
        if isinstance(part, CudaGraph):
            part.compile()


def _started(part: Any) -> DeviceOp:
    """A recorded graph's launch, or a collective made now (a DeviceOp runs once)."""
    return part.launch() if isinstance(part, CudaGraph) else part()


def _borrowed(t: Any) -> Any:
    return borrow_mut(t).partition(1)


def _heads_view(cache: Any) -> Any:
    """A token-major cache ``(batch, len, kv_heads, d)`` viewed head-major, ``(batch,
    kv_heads, len, d)`` (no copy: what the attention kernels take)."""
    return cache.permute((0, 2, 1, 3))


def _heads_first(t: Any) -> Any:
    """A ``(tokens, heads, d)`` tensor viewed as ``(1, heads, tokens, d)`` (no copy)."""
    return _heads_view(t.reshape((1,) + tuple(t.shape)))


def _numpy_dtype(dtype: DType) -> Any:
    import ml_dtypes
    return {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype.name]
