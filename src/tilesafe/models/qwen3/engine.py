"""A Qwen3 model run by the kernel library: weights from a checkpoint directory on a device, a
key/value cache per layer, prefill of a prompt and decode steps of one token per sequence.

The q, k and v projections are loaded as one matrix (their rows stacked), and so are the gate
and up projections: the decode step runs one GEMV for each group (the prefill multiplies by
row views of them). Every layer runs through ``tilesafe.kernels`` (safe kernels only):
``embedding``, ``rms_norm``
(also the per-head q/k norms), ``matmul``, ``rope``, ``kv_cache_update`` (an indexed partition:
the writes at the sequence's slots are proven distinct), ``flash_attention`` (prefill),
``decode_attention``, ``add_rms_norm``, ``silu_mul``, ``argmax``.

The prefill drives each launch in turn (``.sync()``); the decode step is recorded once into a
``ts.CudaGraph`` (every output, workspace and input preallocated: the token, position and
length are device tensors, the position and length advanced by the step's last kernel) and
replayed per token. Batch 1.

Imports the host API, the kernel library and the model's config and checkpoint modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

import tilesafe.core as tc

from ... import kernels as K
from ...deviceops.graph import CudaGraph
from ...driver.device import as_device
from ...dtypes import DType, as_dtype, bfloat16, float32, int32
from ...errors import ArgumentError
from ...host.factory import arange, empty, tensor, zeros
from ...host.tensor import borrow_mut
from ...kernel import kernel
from ...kernels.gemv import workspace_size
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


class Qwen3Engine:
    """A Qwen3 model on ``device`` in ``dtype`` (bfloat16 or float16), with room for
    ``max_seq`` positions of one sequence.

    Args:
        directory: a Hugging Face-format checkpoint (``config.json``, ``*.safetensors``).
        device: where to run (default: the default device).
        dtype: the run dtype; weights are converted to it once, on the host.
        max_seq: the key/value cache's length (prompt plus generated tokens).
        progress: show a progress bar while the weights load.
    """

    def __init__(self, directory: "str | Path", *, device: Any = None,
                 dtype: "DType | str" = bfloat16, max_seq: int = 4096, progress: bool = False):
        self.config = config = Qwen3Config.from_dir(directory)
        self.dtype = as_dtype(dtype)
        if self.dtype.name not in ("bfloat16", "float16"):
            raise ArgumentError(f"Qwen3Engine: dtype {self.dtype.name} is not supported "
                                "(bfloat16 or float16: the attention kernels' types)")
        if config.head_dim not in (64, 128):
            raise ArgumentError(f"Qwen3Engine: head_dim {config.head_dim} is not supported "
                                "(64 or 128)")
        self.device = device
        self.device_name = str(as_device(device))
        self.max_seq = int(max_seq)
        checkpoint = Checkpoint(directory)
        checkpoint.check(weight_shapes(config))
        from tqdm import tqdm
        self.weights = {}
        for name, sources in tqdm(_load_plan(config), desc="loading", unit="weight",
                                  disable=not progress, dynamic_ncols=True):
            arrays = [checkpoint.get(source) for source in sources]
            self.weights[name] = self._upload(arrays[0] if len(arrays) == 1
                                              else np.concatenate(arrays, axis=0))
        if config.tie_word_embeddings:
            self.weights["lm_head.weight"] = self.weights["model.embed_tokens.weight"]
        self.rope_table = K.rope_cache(self.max_seq, config.head_dim, base=config.rope_theta,
                                       device=device).sync()
        kv = (1, config.num_key_value_heads, self.max_seq, config.head_dim)
        self.cache = [(empty(kv, self.dtype, device=device).sync(),
                       empty(kv, self.dtype, device=device).sync())
                      for _ in range(config.num_hidden_layers)]
        self.length = 0

    def _upload(self, array: np.ndarray) -> Any:
        """A weight converted once to the run dtype (on the host) and copied to the device."""
        host = np.ascontiguousarray(array).astype(_numpy_dtype(self.dtype), copy=False)
        return tensor(host, device=self.device).sync()

    # -- the model --------------------------------------------------------------------------
    def prefill(self, ids: Sequence[int], *, all_positions: bool = False) -> np.ndarray:
        """Run the prompt ``ids`` from position 0 (the cache is reset) and return the logits of
        its last position, ``(vocab,)`` float32, or with ``all_positions`` of every position,
        ``(len(ids), vocab)``."""
        if not len(ids):
            raise ArgumentError("Qwen3Engine.prefill: the prompt has no token",
                                hint="pass at least one token id")
        self.length = 0
        logits = self._forward(list(ids), all_positions)
        return logits if all_positions else logits[-1]

    def decode(self, token: int) -> np.ndarray:
        """Append one token at the next position (a replay of the recorded decode step);
        returns its logits, ``(vocab,)`` float32."""
        if self.length + 1 > self.max_seq:
            raise ArgumentError(f"Qwen3Engine: {self.length + 1} positions exceed max_seq "
                                f"{self.max_seq}", hint="make the engine with a larger max_seq")
        step = self._decode_step()
        step.token.copy_(self._int32(token)).sync()
        if step.at != self.length:  # (after a prefill: the graph advances them itself)
            step.position.copy_(self._int32(self.length)).sync()
            step.length.copy_(self._int32(self.length + 1)).sync()
        step.graph.replay()
        self.length += 1
        step.at = self.length
        return step.logits.numpy()[0].astype(np.float32)

    def _int32(self, value: int) -> Any:
        return tensor(np.array([value], np.int32), device=self.device).sync()

    def _decode_step(self) -> "_DecodeStep":
        if getattr(self, "_step", None) is None:
            self._step = _DecodeStep(self)
        return self._step

    def generate(self, ids: Sequence[int], steps: int) -> list[int]:
        """Greedy decoding: the ``steps`` tokens after the prompt ``ids`` (``prefill``, then
        :meth:`greedy` from its last position's argmax)."""
        if len(ids) + steps > self.max_seq:
            raise ArgumentError(f"Qwen3Engine: {len(ids) + steps} positions exceed max_seq "
                                f"{self.max_seq}", hint="make the engine with a larger max_seq")
        logits = self.prefill(ids)
        return self.greedy(int(np.argmax(logits)), steps)[:steps]

    def greedy(self, token: int, steps: int, chunk: int = 64) -> list[int]:
        """``token`` (at the next position) and the ``steps - 1`` greedy tokens after it: the
        decode step's graph replayed back to back, ``chunk`` replays per host wait; each
        replay's argmax feeds the next and is kept on the device, read once per chunk."""
        if self.length + steps > self.max_seq:
            raise ArgumentError(f"Qwen3Engine: {self.length + steps} positions exceed max_seq "
                                f"{self.max_seq}", hint="make the engine with a larger max_seq")
        out = [int(token)]
        step = self._decode_step()
        step.token.copy_(self._int32(token)).sync()
        step.position.copy_(self._int32(self.length)).sync()
        step.length.copy_(self._int32(self.length + 1)).sync()
        start, left = self.length, steps - 1
        while left > 0:
            n = min(chunk, left)
            op = step.graph.launch()
            for _ in range(n - 1):
                op = op.then(lambda _result: step.graph.launch())
            op.sync()
            left -= n
        made = step.tokens.numpy()[start:start + steps - 1]
        self.length += steps - 1
        step.at = self.length
        return out + [int(t) for t in made]

    def _forward(self, ids: list[int], all_positions: bool) -> np.ndarray:
        c, w = self.config, self.weights
        t, start = len(ids), self.length
        if start + t > self.max_seq:
            raise ArgumentError(f"Qwen3Engine: {start + t} positions exceed max_seq "
                                f"{self.max_seq}", hint="make the engine with a larger max_seq")
        hq, hkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        device = self.device
        ids_t = tensor(np.asarray(ids, np.int32), device=device).sync()
        positions = arange(start, start + t, dtype=int32, device=device).sync()
        x = K.embedding(ids_t, w["model.embed_tokens.weight"]).sync()
        h = K.rms_norm(x, w["model.layers.0.input_layernorm.weight"], eps=c.rms_norm_eps).sync()
        for layer in range(c.num_hidden_layers):
            at = f"model.layers.{layer}."
            qkv = w[at + "self_attn.qkv_proj.weight"]  # (the rows of q, k and v: views)
            q = K.matmul(h, qkv[:hq * d]).sync()
            k = K.matmul(h, qkv[hq * d:(hq + hkv) * d]).sync()
            v = K.matmul(h, qkv[(hq + hkv) * d:]).sync()
            q = K.rms_norm(q.reshape(t * hq, d), w[at + "self_attn.q_norm.weight"],
                           eps=c.rms_norm_eps).sync().reshape(t, hq, d)
            k = K.rms_norm(k.reshape(t * hkv, d), w[at + "self_attn.k_norm.weight"],
                           eps=c.rms_norm_eps).sync().reshape(t, hkv, d)
            v = v.reshape(t, hkv, d)
            K.rope(q, k, self.rope_table, positions).sync()
            cache_k, cache_v = self.cache[layer]
            K.kv_cache_update(cache_k, cache_v, k, v, positions).sync()
            attended = empty((t, hq, d), self.dtype, device=device).sync()
            keys = cache_k[:, :, :start + t]
            values = cache_v[:, :, :start + t]
            K.flash_attention(_heads_first(q), keys, values, causal=True,
                              out=_heads_first(attended)).sync()
            o = K.matmul(attended.reshape(t, hq * d), w[at + "self_attn.o_proj.weight"]).sync()
            h, x = K.add_rms_norm(o, x, w[at + "post_attention_layernorm.weight"],
                                  eps=c.rms_norm_eps).sync()
            gate_up = w[at + "mlp.gate_up_proj.weight"]  # (two row views: two GEMMs)
            gate = K.matmul(h, gate_up[:c.intermediate_size]).sync()
            up = K.matmul(h, gate_up[c.intermediate_size:]).sync()
            act = K.silu_mul(gate, up).sync()
            mlp = K.matmul(act, w[at + "mlp.down_proj.weight"]).sync()
            following = (f"model.layers.{layer + 1}.input_layernorm.weight"
                         if layer + 1 < c.num_hidden_layers else "model.norm.weight")
            h, x = K.add_rms_norm(mlp, x, w[following], eps=c.rms_norm_eps).sync()
        logits = K.matmul(h if all_positions else h[t - 1:], w["lm_head.weight"]).sync()
        self.length = start + t
        return logits.numpy().astype(np.float32)


@kernel
def _advance(position: tc.MutTensor[tc.i32, (1,)], length: tc.MutTensor[tc.i32, (1,)]):
    """The next decode step's position and length (one more of each)."""
    position.store(position.load() + 1)
    length.store(length.load() + 1)


@kernel
def _keep_token(slot: tc.MutTensor[tc.i32, (1,)], token: tc.Tensor[tc.i32, (1,)]):
    """Copy the step's token into its slot of the generated tokens."""
    slot.store(token.partition((1,)).load((0,)))


class _DecodeStep:
    """The decode step of one token, recorded into a graph over preallocated buffers: ``token``
    (the input id, then the greedy next one), ``position`` and ``length`` (advanced by the
    step), ``logits``, ``tokens`` (each step's greedy token at its position)."""

    def __init__(self, engine: "Qwen3Engine"):
        c, w, dev, dt = engine.config, engine.weights, engine.device, engine.dtype
        hq, hkv, d, hid = (c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                           c.hidden_size)

        def buffer(*shape, dtype=dt):
            return empty(shape, dtype, device=dev).sync()
        self.token = zeros((1,), int32, device=dev).sync()
        #: the token each replay makes, at its position (an indexed partition: one slot)
        self.tokens = zeros((engine.max_seq,), int32, device=dev).sync()
        self.position = zeros((1,), int32, device=dev).sync()
        self.length = zeros((1,), int32, device=dev).sync()
        self.at = -1  # the engine length the device position and length stand for
        x, h, o, mlp = (buffer(1, hid) for _ in range(4))
        qkv = buffer(1, (hq + 2 * hkv) * d)
        q = qkv[:, :hq * d].reshape(hq, d)
        k = qkv[:, hq * d:(hq + hkv) * d].reshape(hkv, d)
        v = qkv[:, (hq + hkv) * d:].reshape(1, hkv, d)
        qn, kn = buffer(hq, d), buffer(hkv, d)
        attended = buffer(1, hq, d)
        gate_up, act = buffer(1, 2 * c.intermediate_size), buffer(1, c.intermediate_size)
        self.logits = buffer(1, c.vocab_size)
        shapes = {((hq + 2 * hkv) * d, hid), (hid, hq * d), (2 * c.intermediate_size, hid),
                  (hid, c.intermediate_size), (c.vocab_size, hid)}
        size = max(workspace_size(1, n, k_, dt.itemsize) for n, k_ in shapes)
        mm_work = buffer(max(1, size), dtype=float32)
        cache_k0 = engine.cache[0][0]
        attn_work = K.decode_attention_workspace(attended, cache_k0).sync()
        kv_work = zeros((1, 3), int32, device=dev).sync()
        eps = c.rms_norm_eps

        def mm(a, name, out):
            return K.matmul(a, w[name], out=out, workspace=mm_work)
        with CudaGraph.scope() as graph:
            graph.record(K.embedding(self.token, w["model.embed_tokens.weight"], out=x))
            graph.record(K.rms_norm(x, w["model.layers.0.input_layernorm.weight"], eps=eps,
                                    out=h))
            for layer in range(c.num_hidden_layers):
                at = f"model.layers.{layer}."
                cache_k, cache_v = engine.cache[layer]
                graph.record(mm(h, at + "self_attn.qkv_proj.weight", qkv))
                graph.record(K.rms_norm(q, w[at + "self_attn.q_norm.weight"], eps=eps, out=qn))
                graph.record(K.rms_norm(k, w[at + "self_attn.k_norm.weight"], eps=eps, out=kn))
                graph.record(K.rope(qn.reshape(1, hq, d), kn.reshape(1, hkv, d),
                                    engine.rope_table, self.position))
                graph.record(K.kv_cache_update(cache_k, cache_v, kn.reshape(1, hkv, d),
                                               v, self.position,
                                               workspace=kv_work))
                graph.record(K.decode_attention(qn.reshape(1, hq, d), cache_k, cache_v,
                                                self.length, out=attended,
                                                workspace=attn_work))
                graph.record(mm(attended.reshape(1, hq * d), at + "self_attn.o_proj.weight", o))
                graph.record(K.add_rms_norm(o, x, w[at + "post_attention_layernorm.weight"],
                                            eps=eps, out=h))
                graph.record(mm(h, at + "mlp.gate_up_proj.weight", gate_up))
                graph.record(K.silu_mul(gate_up, out=act))
                graph.record(mm(act, at + "mlp.down_proj.weight", mlp))
                following = (f"model.layers.{layer + 1}.input_layernorm.weight"
                             if layer + 1 < c.num_hidden_layers else "model.norm.weight")
                graph.record(K.add_rms_norm(mlp, x, w[following], eps=eps, out=h))
            graph.record(mm(h, "lm_head.weight", self.logits))
            graph.record(K.argmax(self.logits, out=self.token))  # (the next step's input)
            graph.record(_keep_token(borrow_mut(self.tokens).partition(1, at=self.position),
                                     self.token))
            graph.record(_advance(_borrowed(self.position), _borrowed(self.length)))
        self.graph = graph


def _borrowed(t: Any) -> Any:
    return borrow_mut(t).partition(1)


def _heads_first(t: Any) -> Any:
    """A ``(tokens, heads, d)`` tensor viewed as ``(1, heads, tokens, d)`` (no copy)."""
    return t.reshape((1,) + tuple(t.shape)).permute((0, 2, 1, 3))


def _numpy_dtype(dtype: DType) -> Any:
    import ml_dtypes
    return {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype.name]
