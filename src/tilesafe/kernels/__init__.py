"""tilesafe.kernels: a library of safe kernels for transformer inference.

Every kernel here is an ordinary safe ``@ts.kernel`` (no ``unchecked_accesses``, no
``tc.Ptr``). Each public function takes tilesafe tensors (or lazy ops making them) and returns
a DeviceOp whose result is the output tensor; given torch tensors it runs on torch's current
stream and returns torch tensors (``tilesafe.kernels.torch_ops`` also registers each as a
torch custom op).

Layer: above ``kernel`` and ``autotune``; may import every layer below the public surface.
"""

from __future__ import annotations

from .activations import gelu, silu_mul, softmax
from .attention import flash_attention
from .decode_attention import decode_attention, decode_attention_workspace
from ._torch import release_completed, reserve_fault_records
from .embedding import embedding
from .kv_cache import kv_cache_update
from .matmul import (matmul, matmul_workspace, rms_norm_matmul, scaled_matmul,
                     silu_mul_matmul)
from .norms import add_rms_norm, layer_norm, rms_norm
from .paged_decode_attention import paged_decode_attention, paged_decode_attention_workspace
from .rope import rope, rope_cache
from .rope_kv import rope_kv_cache_update
from .sampling import argmax, argmax_workspace, sample

__all__: list[str] = []
__all__ += ["rms_norm", "add_rms_norm", "layer_norm"]  # norms
__all__ += ["softmax", "silu_mul", "gelu"]  # activations
__all__ += ["matmul", "scaled_matmul", "matmul_workspace", "silu_mul_matmul",
            "rms_norm_matmul"]  # products
__all__ += ["flash_attention", "decode_attention", "decode_attention_workspace",
            "paged_decode_attention", "paged_decode_attention_workspace"]  # attention
__all__ += ["rope", "rope_cache", "embedding", "kv_cache_update", "rope_kv_cache_update",
            "argmax", "argmax_workspace", "sample"]  # tokens
__all__ += ["release_completed", "reserve_fault_records"]  # the torch surface
