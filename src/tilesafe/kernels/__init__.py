"""tilesafe.kernels: a library of safe kernels for transformer inference.

Every kernel here is an ordinary safe ``@ts.kernel`` (no ``unchecked_accesses``, no
``tc.Ptr``). Each public function takes tilesafe tensors (or lazy ops making them) and returns
a DeviceOp whose result is the output tensor; given torch tensors it runs on torch's current
stream and returns torch tensors (``tilesafe.kernels.torch_ops`` also registers each as a
torch custom op).

Layer: above ``kernel`` and ``autotune``; may import every layer below the public surface.
"""

from __future__ import annotations

__all__: list[str] = []

from .attention import flash_attention  # noqa: E402
from .decode_attention import decode_attention  # noqa: E402

__all__ += ["flash_attention", "decode_attention"]
