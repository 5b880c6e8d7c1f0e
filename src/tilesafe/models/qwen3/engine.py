"""A Qwen3 model run by the kernel library: weights from a checkpoint directory on a device, a
key/value cache per layer, prefill of a prompt and decode steps of one token per sequence.

Every layer runs through ``tilesafe.kernels`` (safe kernels only): ``embedding``, ``rms_norm``
(also the per-head q/k norms), ``matmul``, ``rope``, ``kv_cache_update`` (an indexed partition:
the writes at the sequence's slots are proven distinct), ``flash_attention`` (prefill),
``decode_attention``, ``add_rms_norm``, ``silu_mul``, ``argmax``.

This first version drives each launch to completion in turn (``.sync()``) and runs batch 1;
recording the decode step into a CUDA graph is the next step.

Imports the host API, the kernel library and the model's config and checkpoint modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ... import kernels as K
from ...dtypes import DType, as_dtype, bfloat16, int32
from ...errors import ArgumentError
from ...host.factory import arange, empty, tensor
from ..checkpoint import Checkpoint
from .config import Qwen3Config
from .weights import weight_shapes


class Qwen3Engine:
    """A Qwen3 model on ``device`` in ``dtype`` (bfloat16 or float16), with room for
    ``max_seq`` positions of one sequence.

    Args:
        directory: a Hugging Face-format checkpoint (``config.json``, ``*.safetensors``).
        device: where to run (default: the default device).
        dtype: the run dtype; weights are converted to it once, on the host.
        max_seq: the key/value cache's length (prompt plus generated tokens).
    """

    def __init__(self, directory: "str | Path", *, device: Any = None,
                 dtype: "DType | str" = bfloat16, max_seq: int = 4096):
        self.config = config = Qwen3Config.from_dir(directory)
        self.dtype = as_dtype(dtype)
        if self.dtype.name not in ("bfloat16", "float16"):
            raise ArgumentError(f"Qwen3Engine: dtype {self.dtype.name} is not supported "
                                "(bfloat16 or float16: the attention kernels' types)")
        if config.head_dim not in (64, 128):
            raise ArgumentError(f"Qwen3Engine: head_dim {config.head_dim} is not supported "
                                "(64 or 128)")
        self.device = device
        self.max_seq = int(max_seq)
        checkpoint = Checkpoint(directory)
        checkpoint.check(weight_shapes(config))
        self.weights = {name: self._upload(checkpoint.get(name))
                        for name, _ in weight_shapes(config)}
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
    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        """Run the prompt ``ids`` from position 0 (the cache is reset) and return the logits of
        every position, ``(len(ids), vocab)`` float32."""
        self.length = 0
        return self._forward(list(ids))

    def decode(self, token: int) -> np.ndarray:
        """Append one token at the next position; returns its logits, ``(vocab,)`` float32."""
        return self._forward([int(token)])[0]

    def generate(self, ids: Sequence[int], steps: int) -> list[int]:
        """Greedy decoding: the ``steps`` tokens after the prompt ``ids``."""
        logits = self.prefill(ids)
        out = [int(np.argmax(logits[-1]))]
        for _ in range(steps - 1):
            out.append(int(np.argmax(self.decode(out[-1]))))
        return out

    def _forward(self, ids: list[int]) -> np.ndarray:
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
            q = K.matmul(h, w[at + "self_attn.q_proj.weight"]).sync()
            k = K.matmul(h, w[at + "self_attn.k_proj.weight"]).sync()
            v = K.matmul(h, w[at + "self_attn.v_proj.weight"]).sync()
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
            gate = K.matmul(h, w[at + "mlp.gate_proj.weight"]).sync()
            up = K.matmul(h, w[at + "mlp.up_proj.weight"]).sync()
            act = K.silu_mul(gate, up).sync()
            mlp = K.matmul(act, w[at + "mlp.down_proj.weight"]).sync()
            following = (f"model.layers.{layer + 1}.input_layernorm.weight"
                         if layer + 1 < c.num_hidden_layers else "model.norm.weight")
            h, x = K.add_rms_norm(mlp, x, w[following], eps=c.rms_norm_eps).sync()
        logits = K.matmul(h, w["lm_head.weight"]).sync()
        self.length = start + t
        return logits.numpy().astype(np.float32)


def _heads_first(t: Any) -> Any:
    """A ``(tokens, heads, d)`` tensor viewed as ``(1, heads, tokens, d)`` (no copy)."""
    return t.reshape((1,) + tuple(t.shape)).permute((0, 2, 1, 3))


def _numpy_dtype(dtype: DType) -> Any:
    import ml_dtypes
    return {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype.name]
