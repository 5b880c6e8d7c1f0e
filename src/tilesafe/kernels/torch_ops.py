"""The library as torch custom operators: ``import tilesafe.kernels.torch_ops`` registers each
function as ``torch.ops.tilesafe.<name>`` (``torch.library.custom_op``), with a fake
(meta) implementation giving the output's shape and dtype, so the kernels work inside
``torch.compile`` graphs and torch CUDA graphs. Each runs the library function through its
torch surface (``_torch``): DLPack in and out, torch's current stream, no host wait.

Ops that write their arguments in place declare them (``mutates_args``): ``add_rms_norm``
(the residual), ``rope`` (q and k), ``kv_cache_update`` and ``rope_kv_cache_update`` (the
caches), ``matmul_accumulate`` (``matmul(a, b, out=residual, accumulate=True)``: the
residual).

Imports torch (this module is only imported by users who want the operators)."""

from __future__ import annotations

from typing import Optional

import torch

from . import (add_rms_norm, argmax, decode_attention, embedding, flash_attention, gelu,
               kv_cache_update, layer_norm, matmul, paged_decode_attention, rms_norm,
               rms_norm_matmul, rope, rope_kv_cache_update, sample, scaled_matmul, silu_mul,
               silu_mul_matmul, softmax)
from ..dtypes import as_dtype

LIBRARY = "tilesafe"


def _op(name: str, mutates: tuple = ()):
    return torch.library.custom_op(f"{LIBRARY}::{name}", mutates_args=mutates)


def _tilesafe_dtype(dtype: Optional[torch.dtype]):
    return None if dtype is None else as_dtype(str(dtype).removeprefix("torch."))


@_op("rms_norm")
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm(x, weight, eps=eps)


@rms_norm_op.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@_op("add_rms_norm", mutates=("residual",))
def add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                    eps: float) -> torch.Tensor:
    normed, _ = add_rms_norm(x, residual, weight, eps=eps)
    return normed


@add_rms_norm_op.register_fake
def _(x, residual, weight, eps):
    return torch.empty_like(x)


@_op("layer_norm")
def layer_norm_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                  eps: float) -> torch.Tensor:
    return layer_norm(x, weight, bias, eps=eps)


@layer_norm_op.register_fake
def _(x, weight, bias, eps):
    return torch.empty_like(x)


@_op("softmax")
def softmax_op(x: torch.Tensor) -> torch.Tensor:
    return softmax(x)


@softmax_op.register_fake
def _(x):
    return torch.empty_like(x)


@_op("silu_mul")
def silu_mul_op(gate: torch.Tensor, up: Optional[torch.Tensor]) -> torch.Tensor:
    return silu_mul(gate, up)


@silu_mul_op.register_fake
def _(gate, up):
    if up is not None:
        return torch.empty_like(gate)
    return gate.new_empty((*gate.shape[:-1], gate.shape[-1] // 2))


@_op("gelu")
def gelu_op(x: torch.Tensor, approximate: str) -> torch.Tensor:
    return gelu(x, approximate=approximate)


@gelu_op.register_fake
def _(x, approximate):
    return torch.empty_like(x)


@_op("rope", mutates=("q", "k"))
def rope_op(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor,
            positions: torch.Tensor, layout: str, q_norm: Optional[torch.Tensor] = None,
            k_norm: Optional[torch.Tensor] = None, eps: float = 1e-6) -> None:
    rope(q, k, cos_sin_cache, positions, layout=layout, q_norm=q_norm, k_norm=k_norm,
         eps=eps)  # (in place)


@rope_op.register_fake
def _(q, k, cos_sin_cache, positions, layout, q_norm=None, k_norm=None, eps=1e-6):
    return None


@_op("embedding")
def embedding_op(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return embedding(ids, table)


@embedding_op.register_fake
def _(ids, table):
    return table.new_empty((*ids.shape, table.shape[1]))


@_op("argmax")
def argmax_op(logits: torch.Tensor) -> torch.Tensor:
    return argmax(logits)


@argmax_op.register_fake
def _(logits):
    return logits.new_empty((logits.shape[0],), dtype=torch.int32)


@_op("sample")
def sample_op(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, seed: int,
              offset: torch.Tensor) -> torch.Tensor:
    return sample(logits, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                  offset=offset)


@sample_op.register_fake
def _(logits, temperature, top_k, top_p, seed, offset):
    return logits.new_empty((logits.shape[0],), dtype=torch.int32)


@_op("kv_cache_update", mutates=("cache_k", "cache_v"))
def kv_cache_update_op(cache_k: torch.Tensor, cache_v: torch.Tensor, k: torch.Tensor,
                       v: torch.Tensor, slots: torch.Tensor, layout: str) -> None:
    kv_cache_update(cache_k, cache_v, k, v, slots, layout=layout)


@kv_cache_update_op.register_fake
def _(cache_k, cache_v, k, v, slots, layout):
    return None


@_op("rope_kv_cache_update", mutates=("cache_k", "cache_v"))
def rope_kv_cache_update_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            cos_sin_cache: torch.Tensor, positions: torch.Tensor,
                            cache_k: torch.Tensor, cache_v: torch.Tensor, slots: torch.Tensor,
                            layout: str, q_norm: Optional[torch.Tensor] = None,
                            k_norm: Optional[torch.Tensor] = None,
                            eps: float = 1e-6) -> torch.Tensor:
    q_out, _, _ = rope_kv_cache_update(q, k, v, cos_sin_cache, positions, cache_k, cache_v,
                                       slots, layout=layout, q_norm=q_norm, k_norm=k_norm,
                                       eps=eps)
    return q_out


@rope_kv_cache_update_op.register_fake
def _(q, k, v, cos_sin_cache, positions, cache_k, cache_v, slots, layout, q_norm=None,
      k_norm=None, eps=1e-6):
    return torch.empty_like(q)


@_op("flash_attention")
def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       scale: Optional[float]) -> torch.Tensor:
    return flash_attention(q, k, v, causal=causal, scale=scale)


@flash_attention_op.register_fake
def _(q, k, v, causal, scale):
    return torch.empty_like(q)


@_op("decode_attention")
def decode_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        seq_lens: torch.Tensor, scale: Optional[float]) -> torch.Tensor:
    return decode_attention(q, k_cache, v_cache, seq_lens, scale=scale)


@decode_attention_op.register_fake
def _(q, k_cache, v_cache, seq_lens, scale):
    return torch.empty_like(q)


@_op("paged_decode_attention")
def paged_decode_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              seq_lens: torch.Tensor, block_table: torch.Tensor,
                              scale: Optional[float]) -> torch.Tensor:
    return paged_decode_attention(q, k_cache, v_cache, seq_lens, block_table, scale=scale)


@paged_decode_attention_op.register_fake
def _(q, k_cache, v_cache, seq_lens, block_table, scale):
    return torch.empty_like(q)


@_op("matmul")
def matmul_op(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype]
              ) -> torch.Tensor:
    return matmul(a, b, out_dtype=_tilesafe_dtype(out_dtype))


@matmul_op.register_fake
def _(a, b, out_dtype):
    return a.new_empty((*a.shape[:-1], b.shape[0]), dtype=out_dtype or a.dtype)


@_op("matmul_accumulate", mutates=("residual",))
def matmul_accumulate_op(a: torch.Tensor, b: torch.Tensor, residual: torch.Tensor) -> None:
    matmul(a, b, out=residual, accumulate=True)


@matmul_accumulate_op.register_fake
def _(a, b, residual):
    return None


@_op("silu_mul_matmul")
def silu_mul_matmul_op(gate_up: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return silu_mul_matmul(gate_up, b)


@silu_mul_matmul_op.register_fake
def _(gate_up, b):
    return gate_up.new_empty((gate_up.shape[0], b.shape[0]))


@_op("rms_norm_matmul")
def rms_norm_matmul_op(x: torch.Tensor, norm_weight: Optional[torch.Tensor], b: torch.Tensor,
                       eps: float) -> torch.Tensor:
    return rms_norm_matmul(x, norm_weight, b, eps=eps)


@rms_norm_matmul_op.register_fake
def _(x, norm_weight, b, eps):
    return x.new_empty((x.shape[0], b.shape[0]))


@_op("scaled_matmul")
def scaled_matmul_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                     scale_b: torch.Tensor, out_dtype: torch.dtype,
                     fast_accumulation: bool = False) -> torch.Tensor:
    return scaled_matmul(a, b, scale_a, scale_b, out_dtype=_tilesafe_dtype(out_dtype),
                         fast_accumulation=fast_accumulation)


@scaled_matmul_op.register_fake
def _(a, b, scale_a, scale_b, out_dtype, fast_accumulation=False):
    return a.new_empty((*a.shape[:-1], b.shape[0]), dtype=out_dtype)
