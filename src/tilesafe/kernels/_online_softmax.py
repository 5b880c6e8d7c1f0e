"""The online-softmax step the attention kernels share (a device function, inlined): fold one
tile of base-2 scores into a running maximum, sum of exponentials and weighted values.

May import the kernel decorator and the device language."""

from __future__ import annotations

import tilesafe.core as tc

from ..kernel import function


@function
def online_softmax_step(s, values, index, best, total, acc):
    """Fold scores ``s`` (rows x keys, already times ``scale * log2(e)``, masked keys
    ``-inf``) and the value tile at ``index`` of the partition ``values`` (1 x keys x D
    tiles, read after the exponentials) into the running row maximum ``best``, sum ``total``
    and accumulator ``acc`` (f32): returns the new ``(total, acc, best)``."""
    new_best = tc.maximum(best, tc.reduce_max(s, 1, keepdims=True))
    p = tc.exp2(s - new_best)
    alpha = tc.exp2(best - new_best)
    total = total * alpha + tc.reduce_sum(p, 1, keepdims=True)
    vt = values.load(index).reshape((s.shape[1], acc.shape[1]))
    acc = tc.mma(p.astype(vt.dtype), vt, acc * alpha)
    return total, acc, new_best
