"""The online-softmax steps of the attention kernels (device functions, inlined): fold one
tile of base-2 scores into a running maximum, sum of exponentials and weighted values, and
store a split's normalized partial result.

``online_softmax_step`` loads its value tile from a partition; ``rescaled_scores`` is its
first half, for kernels that read their values otherwise (a paged cache's blocks), then
``tc.mma(p, values, acc * alpha)``. (The decode kernels keep ``online_softmax_step`` as it is:
its source is part of their shipped tuning entries' key.) ``online_softmax_step_unscaled``
folds scores not yet scaled, the multiply inside the exponent's fma and the exponentials
flushing subnormals (the prefill kernel's: one multiply and the subnormal handling fewer a
score).

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


@function
def online_softmax_step_unscaled(s, scale, values, index, best, total, acc):
    """``online_softmax_step`` for scores ``s`` not yet multiplied by ``scale`` (the softmax
    scale times log2(e), positive; masked keys ``-inf``): the multiply is folded into the
    exponent's fused multiply-add, ``exp2(s * scale - best)`` rounded once, and the row
    maximum is taken before scaling (equal, since rounding a product by a positive number
    keeps its order). The exponentials flush results below f32's smallest normal (2**-126)
    to zero, one instruction each instead of four: with the running maximum subtracted every
    exponential is at most 1 (a few ulp above it, from the product's rounding) and the sum
    at least 1, so what is dropped changes the output by less than ``keys * 2**-126`` times
    the largest value's magnitude. ``scale`` must round to a positive f32 (a zero would make
    the masked keys' ``-inf * 0`` a NaN; ``_attention_args.softmax_scale`` refuses smaller
    scales). Returns the new ``(total, acc, best)``."""
    new_best = tc.maximum(best, tc.reduce_max(s, 1, keepdims=True) * scale)
    p = tc.exp2(tc.fma(s, scale, -new_best), flush_to_zero=True)
    alpha = tc.exp2(best - new_best, flush_to_zero=True)
    total = total * alpha + tc.reduce_sum(p, 1, keepdims=True)
    vt = values.load(index).reshape((s.shape[1], acc.shape[1]))
    acc = tc.mma(p.astype(vt.dtype), vt, acc * alpha)
    return total, acc, new_best


@function
def rescaled_scores(s, best, total):
    """The exponentials of scores ``s`` (as for ``online_softmax_step``) against the running
    row maximum ``best``: returns ``(p, alpha, new_best, new_total)``, ``alpha`` the factor
    that rescales what was summed before; the caller folds its values in as ``tc.mma(p,
    values, acc * alpha)``, reading them after the exponentials."""
    new_best = tc.maximum(best, tc.reduce_max(s, 1, keepdims=True))
    p = tc.exp2(s - new_best)
    alpha = tc.exp2(best - new_best)
    return p, alpha, new_best, total * alpha + tc.reduce_sum(p, 1, keepdims=True)


@function
def store_split(o, lse, acc, total, best):
    """Store a split's normalized output ``acc / total`` into ``o`` (1, G, D) (zeros for a
    split with no keys) and the log2-sum-exp ``best + log2(total)`` into ``lse`` (1, G, 1)."""
    has_keys = total > 0.0
    rows, columns = acc.shape
    o.store(tc.where(has_keys, acc * (1.0 / tc.where(has_keys, total, 1.0)), 0.0)
            .reshape((1, rows, columns)))
    lse.store((best + tc.log2(total)).reshape((1, rows, 1)))
