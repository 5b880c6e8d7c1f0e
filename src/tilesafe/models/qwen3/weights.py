"""The weights of a Qwen3 checkpoint: their Hugging Face names and shapes, and how random ones
are drawn (for checkpoints of a real model's size when no real one is at hand).

Imports ``config`` only."""

from __future__ import annotations

from typing import Iterator

from .config import Qwen3Config

#: the standard deviation of random matrices (transformers' initializer_range for Qwen3)
RANDOM_STD = 0.02


def weight_shapes(config: Qwen3Config) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of every weight, in checkpoint order; no ``lm_head.weight`` when the
    head is tied to the embedding."""
    h, i, d = config.hidden_size, config.intermediate_size, config.head_dim
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    yield "model.embed_tokens.weight", (config.vocab_size, h)
    for layer in range(config.num_hidden_layers):
        at = f"model.layers.{layer}."
        yield at + "self_attn.q_proj.weight", (q, h)
        yield at + "self_attn.k_proj.weight", (kv, h)
        yield at + "self_attn.v_proj.weight", (kv, h)
        yield at + "self_attn.o_proj.weight", (h, q)
        yield at + "self_attn.q_norm.weight", (d,)
        yield at + "self_attn.k_norm.weight", (d,)
        yield at + "mlp.gate_proj.weight", (i, h)
        yield at + "mlp.up_proj.weight", (i, h)
        yield at + "mlp.down_proj.weight", (h, i)
        yield at + "input_layernorm.weight", (h,)
        yield at + "post_attention_layernorm.weight", (h,)
    yield "model.norm.weight", (h,)
    if not config.tie_word_embeddings:
        yield "lm_head.weight", (config.vocab_size, h)


def is_norm(name: str) -> bool:
    """Whether the weight scales a normalized vector (random ones are drawn near 1)."""
    return name.endswith("norm.weight")
