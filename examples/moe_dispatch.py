"""Mixture-of-experts token dispatch: route every token to its top-k experts, sort the
(token, choice) pairs by expert into one buffer (each expert's rows contiguous, ready for a
grouped matmul), run the experts, and combine their outputs back per token. Every step is a
safe kernel: no raw pointers, no unchecked accesses.

The steps, one kernel each:

1. ``top_k_route``: a token's ``k`` largest router logits (``tc.topk``) name its experts; its
   gates are the softmax over those ``k`` logits.
2. ``count_tokens``: how many pairs each expert receives, by atomic adds of 1 at the expert
   ids into an int32 ``tc.AtomicTensor`` (``ts.atomic(counts)``).
3. ``exclusive_scan``: each expert's first row in the sorted buffer, the exclusive prefix sum
   of the counts (one program).
4. ``destination_rows``: each pair's row in the sorted buffer, ``start[expert] + rank``, where
   ``rank`` is the number of pairs *before it* (token-major order: pair ``n = token * k +
   choice``) routed to the same expert. Atomics in this language return nothing, so a rank
   cannot be taken from a counter (a fetch-and-add); and an arrival order would not be
   deterministic anyway. The rank is computed instead: program ``b`` owns a tile of pairs;
   it counts, per expert, the pairs of the tiles before its own (a one-hot sum of each earlier
   tile, a loop of ``b`` loads of a shared input) and, inside its own tile, the earlier pairs
   of the same expert (an exclusive ``cumsum`` of the tile's one-hot matrix down the pairs).
   That is a stable counting sort: the result equals ``numpy.argsort(experts.ravel(),
   kind="stable")`` inverted, the same on every device and every run. Program ``b`` reads
   ``b`` earlier tiles, so the work grows with the square of the number of tiles: a few
   thousand tokens cost nothing, and a table of per-tile counts, scanned once, would remove
   the square for far larger batches.
5. ``scatter_rows``: program ``n`` copies pair ``n``'s token row to its destination row,
   through an *indexed partition* of the sorted buffer, ``ts.borrow_mut(sorted).partition((1,
   HP), at=positions)``, whose positions the previous kernel wrote on the device. Nothing in
   the kernels' types ties the ranks of step 4 to the counts of step 2, so it is the launch
   that makes this scatter safe: it proves the positions distinct and inside the buffer
   before any program writes (on the host for host memory; on a GPU by a validation step in
   the kernel), and otherwise writes nothing and raises ``PositionsError``. A routing bug
   shows as that error, never as two tokens racing for a row
   (``tests/test_moe_dispatch.py`` makes one). The proof has a price on a GPU: every
   program reads all ``n = tokens * k`` positions, and positions that are not increasing (a
   permutation is not) are compared pair by pair, so the scatter's work grows as ``n**3``
   in all. On an H200 it took 0.5 ms for 128 pairs, 1.6 ms for 1024, 60 ms for 4096 and
   3.4 s for 16384, while every other step stayed under 1.2 ms: this dispatch suits the
   pairs of a decode step or a small prefill chunk.
6. ``scale_experts`` and ``combine_rows``: a stand-in for the expert networks (expert ``e``
   maps a row ``x`` to ``tanh(x * w[e])``; each row finds its expert from the starts, since
   the rows of one expert are contiguous), then ``out[t] = sum_c gate[t, c] *
   y[dest[t, c]]``, the expert outputs read back with ``tc.gather``.

Sizes: any number of tokens, experts and hidden features; ``k`` a power of two (``tc.topk``
asks for one) no larger than the number of experts. Tiles are powers of two, so expert
and hidden extents are padded up to one inside the kernels (masked, never read or written
outside the tensors). ``python examples/moe_dispatch.py`` runs on the default device (a GPU
when one is usable, else the interpreter; ``TILESAFE_DEVICE=cpu`` picks the interpreter) and
checks every step against numpy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

import tilesafe as ts
import tilesafe.core as tc


def pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (tile extents are powers of two)."""
    return 1 << max(0, int(n) - 1).bit_length()


# ---------------------------------------------------------------------------------------------
# the kernels


@ts.kernel(examples=[{"ROWS": 32, "K": 2, "EP": 8}])
def top_k_route(experts: tc.MutTensor[tc.i32, ("ROWS", "K")],
                gates: tc.MutTensor[tc.f32, ("ROWS", "K")],
                logits: tc.Tensor[tc.f32, (-1, -1)], EP: tc.Const[int]):
    """Program ``b`` routes tokens ``b*ROWS ...``: their ``K`` largest logits name their
    experts (ties: the lower expert id first) and the softmax over those logits is the gate."""
    b, _, _ = tc.get_tile_block_id()
    x = logits.partition((ROWS, EP)).load((b, 0))
    expert = tc.arange(EP, tc.i32).reshape((1, EP))
    x = tc.where(expert < logits.shape[1], x, float("-inf"))  # padded experts: never chosen
    top, ids = tc.topk(x, K, axis=1)  # largest first
    e = tc.exp(top - top.max(axis=1, keepdims=True))
    experts.store(ids)
    gates.store(e / e.sum(axis=1, keepdims=True))


@ts.kernel(examples=[{"K": 2, "ROWS": 32}])
def count_tokens(counts: tc.AtomicTensor[tc.i32, (-1,)],
                 experts: tc.Tensor[tc.i32, (-1, "K")], ROWS: tc.Const[int]):
    """``counts[e] += 1`` for every (token, choice) routed to expert ``e``: every program adds
    into the one tensor of counts, by atomic adds only."""
    b, _, _ = tc.get_tile_block_id()
    ids = experts.partition((ROWS, K)).load(b, 0)
    token = b * ROWS + tc.arange(ROWS, tc.i32).reshape((ROWS, 1))
    counts.atomic_add(1, ids, mask=token < experts.shape[0])  # the last tile may be partial


@ts.kernel(examples=[{"EP": 8}])
def exclusive_scan(starts: tc.MutTensor[tc.i32, ("EP",)], counts: tc.Tensor[tc.i32, (-1,)]):
    """``starts[e] = counts[0] + ... + counts[e-1]`` (one program; padding counts as 0)."""
    c = counts.partition((EP,)).load(0)
    starts.store(tc.cumsum(c) - c)


@ts.function
def one_hot(ids, EP):
    """The ``(n, EP)`` i32 matrix with a 1 at ``(i, ids[i])`` (none for an id outside
    ``[0, EP)``), from an ``(n, 1)`` tile of ids."""
    return (ids == tc.arange(EP, tc.i32).reshape((1, EP))).astype(tc.i32)


@ts.kernel(examples=[{"ROWS": 32, "K": 2, "PAIRS": 64, "EP": 8}])
def destination_rows(dest: tc.MutTensor[tc.i32, ("ROWS", "K")],
                     positions: tc.MutTensor[tc.i32, ("PAIRS", 2)],
                     experts: tc.Tensor[tc.i32, (-1, "K")], starts: tc.Tensor[tc.i32, (-1,)],
                     EP: tc.Const[int]):
    """Program ``b`` gives each of its ``PAIRS = ROWS * K`` pairs its row in the expert-sorted
    buffer: the expert's start, plus the pairs of that expert in earlier tiles, plus those
    before it in this tile (a stable counting sort). ``dest`` is ``(tokens, K)``;
    ``positions`` the same rows as tile coordinates ``(row, 0)`` of the sorted buffer."""
    b, _, _ = tc.get_tile_block_id()
    tiles = experts.partition((ROWS, K))
    base = starts.partition((EP,)).load(0)  # (EP,): the first row of each expert
    for j in range(b):  # the tiles before this one are full: no mask
        base = base + one_hot(tiles.load(j, 0).reshape((PAIRS, 1)), EP).sum(axis=0)
    token = b * ROWS + tc.arange(ROWS, tc.i32).reshape((ROWS, 1))
    ids = tc.where(token < experts.shape[0], tiles.load(b, 0), -1)  # past the end: no expert
    hot = one_hot(ids.reshape((PAIRS, 1)), EP)
    before = tc.cumsum(hot, axis=0) - hot  # earlier pairs of this tile, per expert
    row = ((before + base.reshape((1, EP))) * hot).sum(axis=1)  # (PAIRS,): its own expert's
    dest.store(row.reshape((ROWS, K)))
    positions.store(tc.cat((row.reshape((PAIRS, 1)), tc.zeros((PAIRS, 1), tc.i32)), axis=1))


@ts.kernel(examples=[{"HP": 64, "K": 2}])
def scatter_rows(rows: tc.MutTensor[tc.f32, (1, "HP")], hidden: tc.Tensor[tc.f32, (-1, -1)],
                 K: tc.Const[int]):
    """Program ``n`` (pair ``n``: token ``n // K``) writes its token's row into the sorted
    buffer's row it owns (an indexed partition: the launch proved the rows distinct)."""
    n, _, _ = tc.get_tile_block_id()
    rows.store(hidden.partition((1, HP)).load(n // K, 0))


@ts.kernel(examples=[{"HP": 64, "EP": 8}])
def scale_experts(y: tc.MutTensor[tc.f32, (1, "HP")], x: tc.Tensor[tc.f32, (-1, -1)],
                  starts: tc.Tensor[tc.i32, (-1,)], w: tc.Tensor[tc.f32, (-1, -1)],
                  EP: tc.Const[int]):
    """A stand-in for the experts: row ``r`` of the sorted buffer belongs to the last expert
    whose start is at most ``r`` (the starts do not decrease), and becomes ``tanh(x[r] *
    w[e])``."""
    r, _, _ = tc.get_tile_block_id()
    first = starts.partition((EP,)).load(0)
    live = tc.arange(EP, tc.i32) < starts.shape[0]
    e = (live & (first <= r)).astype(tc.i32).sum() - 1
    y.store(tc.tanh(tc.load_tile_like(x, y) * w.partition((1, HP)).load(e, 0)))


@ts.kernel(examples=[{"ROWS": 32, "HT": 64, "K": 2}])
def combine_rows(out: tc.MutTensor[tc.f32, ("ROWS", "HT")], y: tc.Tensor[tc.f32, (-1, -1)],
                 dest: tc.Tensor[tc.i32, (-1, "K")], gates: tc.Tensor[tc.f32, (-1, "K")]):
    """``out[t] = sum_c gates[t, c] * y[dest[t, c]]`` for a ``(ROWS, HT)`` tile of ``out``:
    the ``K`` expert rows of each token gathered (shared reads: they never race) and
    weighted."""
    b, h, _ = tc.get_tile_block_id()
    token = b * ROWS + tc.arange(ROWS, tc.i32).reshape((ROWS, 1))
    live = token < dest.shape[0]
    d = tc.where(live, dest.partition((ROWS, K)).load(b, 0), 0)  # padded tokens: row 0
    g = gates.partition((ROWS, K)).load(b, 0)
    col = h * HT + tc.arange(HT, tc.i32).reshape((1, 1, HT))
    picked = tc.gather(y, d.reshape((ROWS, K, 1)), col, padding=0.0)  # (ROWS, K, HT)
    out.store((picked * g.reshape((ROWS, K, 1))).sum(axis=1))


# ---------------------------------------------------------------------------------------------
# the host side: one function per step, tensors in and out


def route(logits: ts.Tensor, k: int, rows: int = 32) -> tuple[ts.Tensor, ts.Tensor]:
    """``(experts, gates)``, each ``(tokens, k)``: every token's top-``k`` expert ids (int32,
    largest logit first) and their softmax gates (float32)."""
    tokens, num_experts = logits.shape
    if not (k & (k - 1) == 0 and 1 <= k <= num_experts):
        raise ValueError(f"k={k}: top-k routing takes a power of two k from 1 to the number "
                         f"of experts ({num_experts})")
    experts = ts.zeros((tokens, k), dtype=ts.int32).sync()
    gates = ts.zeros((tokens, k), dtype=ts.float32).sync()
    top_k_route(ts.borrow_mut(experts).partition((rows, k)),
                ts.borrow_mut(gates).partition((rows, k)), logits, pow2(num_experts)).sync()
    return experts, gates


def count(experts: ts.Tensor, num_experts: int, rows: int = 32) -> ts.Tensor:
    """The ``(num_experts,)`` int32 tensor of how many pairs each expert receives."""
    counts = ts.zeros(num_experts, dtype=ts.int32).sync()
    grid = (-(-experts.shape[0] // rows),)
    counts, _ = count_tokens(ts.atomic(counts), experts, rows, grid=grid).sync()
    return counts  # (the launch hands the atomic tensor itself back)


def expert_starts(counts: ts.Tensor) -> ts.Tensor:
    """Each expert's first row in the sorted buffer (the exclusive prefix sum of ``counts``)."""
    starts = ts.zeros(counts.shape[0], dtype=ts.int32).sync()
    exclusive_scan(ts.borrow_mut(starts).partition(pow2(counts.shape[0])), counts).sync()
    return starts


def destinations(experts: ts.Tensor, starts: ts.Tensor,
                 rows: int = 32) -> tuple[ts.Tensor, ts.Tensor]:
    """``(dest, positions)``: pair ``(t, c)``'s row of the sorted buffer, as a ``(tokens, k)``
    tensor and as the ``(tokens * k, 2)`` tile coordinates ``(row, 0)`` an indexed partition
    of the buffer takes (row ``t * k + c``)."""
    tokens, k = experts.shape
    dest = ts.zeros((tokens, k), dtype=ts.int32).sync()
    positions = ts.zeros((tokens * k, 2), dtype=ts.int32).sync()
    destination_rows(ts.borrow_mut(dest).partition((rows, k)),
                     ts.borrow_mut(positions).partition((rows * k, 2)), experts, starts,
                     pow2(starts.shape[0])).sync()
    return dest, positions


def scatter(hidden: ts.Tensor, positions: ts.Tensor, k: int,
            into: ts.Tensor | None = None) -> ts.Tensor:
    """The ``(tokens * k, hidden)`` expert-sorted buffer: pair ``n``'s token row at the row
    ``positions[n, 0]`` (written into ``into`` when given). Raises ``PositionsError``, having
    written nothing, if two pairs name one row or a row is outside the buffer."""
    tokens, width = hidden.shape
    if into is None:
        into = ts.zeros((tokens * k, width), dtype=ts.float32).sync()
    scatter_rows(ts.borrow_mut(into).partition((1, pow2(width)), at=positions), hidden,
                 k).sync()
    return into


def run_experts(sorted_rows: ts.Tensor, starts: ts.Tensor, w: ts.Tensor) -> ts.Tensor:
    """The stand-in experts on the sorted buffer: row ``r`` of expert ``e`` becomes
    ``tanh(sorted_rows[r] * w[e])``."""
    y = ts.zeros(sorted_rows.shape, dtype=ts.float32).sync()
    scale_experts(ts.borrow_mut(y).partition((1, pow2(sorted_rows.shape[1]))), sorted_rows,
                  starts, w, pow2(starts.shape[0])).sync()
    return y


def combine(y: ts.Tensor, dest: ts.Tensor, gates: ts.Tensor, rows: int = 32,
            hidden_tile: int = 64) -> ts.Tensor:
    """``(tokens, hidden)``: each token's expert outputs ``y[dest[t, c]]`` weighted by its
    gates and summed."""
    tokens, width = dest.shape[0], y.shape[1]
    out = ts.zeros((tokens, width), dtype=ts.float32).sync()
    combine_rows(ts.borrow_mut(out).partition((rows, min(hidden_tile, pow2(width)))), y, dest,
                 gates).sync()
    return out


class Dispatch(NamedTuple):
    """Every intermediate of one MoE layer's dispatch, as numpy arrays."""
    experts: np.ndarray  # (tokens, k) int32: chosen experts, best first
    gates: np.ndarray    # (tokens, k) float32: softmax over the chosen logits
    counts: np.ndarray   # (experts,) int32: pairs per expert
    starts: np.ndarray   # (experts,) int32: each expert's first sorted row
    dest: np.ndarray     # (tokens, k) int32: each pair's sorted row
    sorted: np.ndarray   # (tokens * k, hidden) float32: token rows grouped by expert
    y: np.ndarray        # (tokens * k, hidden) float32: the experts' outputs
    out: np.ndarray      # (tokens, hidden) float32: the combined outputs


def moe_dispatch(logits: np.ndarray, hidden: np.ndarray, w: np.ndarray, k: int = 2,
                 rows: int = 32) -> Dispatch:
    """Route, count, scan, place, scatter, run the stand-in experts and combine, on the
    default device: ``logits`` ``(tokens, experts)``, ``hidden`` ``(tokens, hidden)``, ``w``
    ``(experts, hidden)``, all float32; ``rows`` tokens per tile (a power of two)."""
    logits_t, hidden_t, w_t = (ts.tensor(np.asarray(a, np.float32)).sync()
                               for a in (logits, hidden, w))
    experts, gates = route(logits_t, k, rows)
    counts = count(experts, logits.shape[1], rows)
    starts = expert_starts(counts)
    dest, positions = destinations(experts, starts, rows)
    sorted_rows = scatter(hidden_t, positions, k)
    y = run_experts(sorted_rows, starts, w_t)
    out = combine(y, dest, gates, rows)
    return Dispatch(*(t.numpy() for t in (experts, gates, counts, starts, dest, sorted_rows,
                                          y, out)))


def reference(logits: np.ndarray, hidden: np.ndarray, w: np.ndarray, k: int = 2) -> Dispatch:
    """The same dispatch in numpy (float64 arithmetic): a stable sort of the pairs by
    expert."""
    tokens, num_experts = logits.shape
    experts = np.argsort(-logits, axis=1, kind="stable")[:, :k].astype(np.int32)
    top = np.take_along_axis(logits.astype(np.float64), experts, axis=1)
    gates = np.exp(top - top.max(axis=1, keepdims=True))
    gates /= gates.sum(axis=1, keepdims=True)
    counts = np.bincount(experts.ravel(), minlength=num_experts).astype(np.int32)
    starts = (np.cumsum(counts) - counts).astype(np.int32)
    order = np.argsort(experts.ravel(), kind="stable")  # sorted row r holds pair order[r]
    dest = np.empty(tokens * k, np.int32)
    dest[order] = np.arange(tokens * k)
    sorted_rows = hidden[order // k]
    y = np.tanh(sorted_rows.astype(np.float64) * w[experts.ravel()[order]])
    out = (gates[:, :, None] * y[dest.reshape(tokens, k)]).sum(axis=1)
    return Dispatch(experts, gates, counts, starts, dest.reshape(tokens, k), sorted_rows, y,
                    out)


def inputs(tokens: int = 64, experts: int = 8, hidden: int = 64,
           seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random float32 ``(logits, hidden, w)`` for a dispatch."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((tokens, experts)).astype(np.float32),
            rng.standard_normal((tokens, hidden)).astype(np.float32),
            rng.uniform(0.5, 1.5, (experts, hidden)).astype(np.float32))


def check(got: Dispatch, want: Dispatch) -> None:
    """Raise AssertionError where the dispatch differs from the reference: integers and the
    copied rows exactly, float results within float32 rounding."""
    for name in ("experts", "counts", "starts", "dest", "sorted"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    for name in ("gates", "y", "out"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-5,
                                   atol=1e-5, err_msg=name)


def main(tokens: int = 64, experts: int = 8, k: int = 2, hidden: int = 64,
         seed: int = 0) -> Dispatch:
    logits, x, w = inputs(tokens, experts, hidden, seed)
    got = moe_dispatch(logits, x, w, k)
    check(got, reference(logits, x, w, k))
    return got


if __name__ == "__main__":
    result = main()
    print(f"device {ts.default_device()}: 64 tokens, top-2 of 8 experts, hidden 64")
    print(f"tokens per expert: {result.counts.tolist()}")
    print(f"expert starts:     {result.starts.tolist()}")
    print("OK: routing, counts, destinations, sorted buffer and combine match numpy")
