"""tilesafe.kernels.argmax and sample: argmax as torch's (first index on ties, NaN first,
several column tiles), on both schedules (one program per row; chunk maxima then a merge per
row for few rows of a long vocabulary, with the caller's workspace too, recorded into a
graph, its misuse refused), sample's choices against a float64 reference fed the same Philox
uniforms (full vocabulary, top-k, top-k then top-p), reproducibility by (seed, offset) with
the offset an int or a device tensor, the sampled distribution against the exact one (a
chi-square bound that a wrong algorithm fails), and each argument error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.kernels import argmax, argmax_workspace, sample
from tilesafe.kernels import sampling

from conftest import poisoned

NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def on(array) -> ts.Tensor:
    return ts.tensor(array).sync()


@ts.kernel
def philox_uniforms(out: tc.MutTensor[tc.f32, (1, "VP")], seed: int, offset: tc.i64,
                    vocab: tc.i64):
    """The numbers ``sample`` draws, as documented: column j of row r is word j % 4 of
    ``randint4x(seed, (offset + r) * ceil(vocab / 4) + j // 4)``, mapped to [0, 1)."""
    i, _, _ = tc.get_tile_block_id()
    first = (offset + tc.astype(i, tc.i64)) * ((vocab + 3) // 4)
    columns = tc.arange(VP, tc.i64)
    words = tc.randint4x(seed, first + columns // 4)
    lane = columns % 4
    word = tc.where(lane == 0, words[0], tc.where(lane == 1, words[1],
                                                  tc.where(lane == 2, words[2], words[3])))
    out.store(tc.uint_to_uniform(word).reshape((1, VP)))


def uniforms(rows: int, vocab: int, seed: int, offset: int) -> np.ndarray:
    width = 1 << (vocab - 1).bit_length()
    out = ts.zeros((rows, width), ts.float32).sync()
    philox_uniforms(ts.borrow_mut(out).partition((1, width)), seed, offset, vocab).sync()
    return out.numpy()[:, :vocab].astype(np.float64)


def reference(logits: np.ndarray, u: np.ndarray, temperature: float, top_k: int,
              top_p: float) -> np.ndarray:
    """The documented algorithm in float64: Gumbel-max over the kept tokens."""
    choices = []
    for x, row_u in zip(logits.astype(np.float64), u):
        scaled = x / temperature
        gumbel = -np.log(-np.log(row_u))
        if top_k == 0:
            choices.append(int(np.argmax(scaled + gumbel)))
            continue
        order = np.argsort(-x, kind="stable")[:min(top_k, x.size)]
        values = scaled[order]
        weights = np.exp(values - values[0])
        keep = np.cumsum(weights) - weights < top_p * weights.sum()
        choices.append(int(order[np.argmax(np.where(keep, values + gumbel[order], -np.inf))]))
    return np.array(choices)


def kept_probabilities(x: np.ndarray, temperature: float, top_k: int,
                       top_p: float) -> np.ndarray:
    """The exact distribution ``sample`` draws from for one row (float64)."""
    scaled = x.astype(np.float64) / temperature
    keep = np.ones(x.size, bool)
    if top_k:
        order = np.argsort(-x, kind="stable")[:top_k]
        weights = np.exp(scaled[order] - scaled[order][0])
        kept = order[np.cumsum(weights) - weights < top_p * weights.sum()]
        keep = np.isin(np.arange(x.size), kept)
    p = np.where(keep, np.exp(scaled - scaled.max()), 0.0)
    return p / p.sum()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_argmax_is_torchs_first_index_on_ties(rng, dtype):
    x = rng.standard_normal((5, 5000)).astype(np.float32)
    x[0, 10] = x[0, 4500] = 9.0       # a tie across column tiles: the first wins
    x[1, 4999] = 9.0                  # the last column
    x[2] = -np.abs(x[2]) - 1.0        # every logit negative (past the row reads -inf)
    x[3, 77] = x[3, 4100] = np.nan    # NaN counts as the largest, the first one
    x = x.astype(NP_DTYPES[dtype])
    got = argmax(on(x)).sync()
    assert got.dtype == ts.int32 and got.shape == (5,)
    want = [10, 4999, int(np.argmax(x[2])), 77, int(np.argmax(x[4]))]
    assert got.numpy().tolist() == want


@pytest.mark.parametrize("rows_per_program, columns", [(1, 4), (1, 16), (2, 8), (4, 32)])
def test_argmax_kernel_keeps_the_first_maximum_of_every_lane(rng, rows_per_program, columns):
    """The kernel's per-lane running maxima, merged at the end, against numpy's first index:
    many ties (small integers) within a lane across tiles and across lanes, NaN in a later
    tile at a smaller lane than an earlier NaN, rows all -inf, and a ragged last tile."""
    from tilesafe.kernels.sampling import argmax_rows
    vocab = 5 * columns + 3
    x = rng.integers(0, 4, (8, vocab)).astype(np.float32)
    x[1, [columns + 1, 2]] = 9.0                        # a later tile's lower lane loses
    x[2, [columns + 2, 2 * columns + 1]] = 9.0          # the earlier tile's higher lane wins
    x[3] = -np.inf                                      # every logit -inf: index 0
    x[4, [2 * columns + 1, columns + 3]] = np.nan       # the first NaN (later lane) wins
    x[5, [vocab - 1]] = np.nan                          # a NaN in the ragged last tile
    x[6, [3, columns + 3, 3 * columns + 3]] = 9.0       # one lane, three tiles: the first
    z = ts.full((8,), -1, ts.int32).sync()
    z, _ = argmax_rows(z.partition((rows_per_program,)), on(x), C=columns).sync()
    assert z.unpartition().numpy().tolist() == np.argmax(x, 1).tolist()


def test_argmax_of_short_odd_rows_into_out(rng):
    x = rng.standard_normal((37, 3)).astype(np.float32) - 5.0
    x[5] = [-1.0, -1.0, -1.0]
    out = ts.full((37,), -7, ts.int32).sync()
    got = argmax(on(x), out=out).sync()
    assert np.array_equal(out.numpy(), np.argmax(x, 1)) and out.numpy()[5] == 0
    assert np.array_equal(got.numpy(), np.argmax(x, 1))


# --- argmax's split schedule (chunk maxima, then one merge program per row) -----------------

#: the chunk of the split schedule's first config (the one the interpreter uses)
CHUNK = sampling.SPLIT_CONFIGS[0]["chunk"]


def split_argmax(x: np.ndarray, columns: int) -> np.ndarray:
    """The two launches of the split schedule, ``columns`` columns a chunk."""
    from tilesafe.kernels.sampling import argmax_chunk_maxima, argmax_merge_rows
    rows, vocab = x.shape
    chunks = -(-vocab // columns)
    maxima = poisoned((rows, chunks))
    maxima, _ = argmax_chunk_maxima(maxima.partition((1, 1)), on(x), C=columns).sync()
    maxima = maxima.unpartition()
    want_maxima = np.full((rows, chunks * columns), -np.inf, np.float32)
    want_maxima[:, :vocab] = x.astype(np.float32)
    assert np.array_equal(maxima.numpy(), want_maxima.reshape(rows, chunks, columns).max(2),
                          equal_nan=True)  # (np.max propagates NaN too)
    z = ts.full((rows,), -1, ts.int32).sync()
    z, _, _ = argmax_merge_rows(z.partition((1,)), on(x), maxima, C=columns,
                                CP=1 << (chunks - 1).bit_length()).sync()
    return z.unpartition().numpy()


def hard_rows(rows: int, vocab: int, columns: int, rng) -> np.ndarray:
    """``rows`` (8 at most) rows of small integers (ties everywhere) with the cases the merge
    must get right, ``columns`` columns a chunk (at least 4 chunks, a ragged last one)."""
    x = rng.integers(0, 4, (rows, vocab)).astype(np.float32)
    cases = [
        lambda r: r.__setitem__([2 * columns + 1, columns - 1], 9.0),  # chunk 0 beats chunk 2
        lambda r: r.__setitem__([5, 3 * columns + 2], [9.0, np.nan]),  # a later NaN wins
        lambda r: r.__setitem__([3 * columns, columns + 3, 1], np.nan),  # the first of NaNs
        lambda r: r.fill(-np.inf),                                     # all -inf: index 0
        lambda r: r.__setitem__([3, 2 * columns + 2, 3 * columns], [9.0, np.inf, np.inf]),
        lambda r: r.__setitem__([vocab - 1], np.nan),                  # NaN in the last chunk
        lambda r: r.__setitem__([vocab - 1], 9.0),                     # max in the ragged end
        lambda r: r.__setitem__(slice(None), -5.0),                    # one value everywhere
    ]
    for row, case in zip(x, cases[:rows]):
        case(row)
    return x


@pytest.mark.parametrize("columns, vocab", [(4, 5 * 4 + 3), (16, 7 * 16 + 1), (32, 4 * 32)])
def test_split_kernels_give_the_first_maximum(rng, columns, vocab):
    """The two kernels against numpy's first index: ties within and across chunks (the
    earlier chunk wins), a NaN in a later chunk than the maximum, several NaNs, rows all -inf
    or all one value, +inf, the maximum or a NaN in a ragged last chunk."""
    x = hard_rows(8, vocab, columns, rng)
    assert split_argmax(x, columns).tolist() == np.argmax(x, 1).tolist()


def no_rows_path(*args, **kwargs):
    raise AssertionError("argmax took the one-program-per-row schedule")


@pytest.mark.parametrize("rows, vocab, dtype", [
    (1, 151936, "bfloat16"),          # a Qwen3 decode step
    (3, 20001, "float16"),            # a ragged last chunk
    (8, 151936, "float32"),
    (8, 20001, "bfloat16"),
])
def test_argmax_splits_few_rows_of_a_long_vocabulary(rng, monkeypatch, rows, vocab, dtype):
    """Random rows (in bf16/f16 many values repeat: ties) and the hard cases at the chunk
    size the call uses, through ``argmax``, which takes the split schedule here."""
    monkeypatch.setattr(sampling, "argmax_rows", no_rows_path)
    x = (3 * rng.standard_normal((rows, vocab))).astype(NP_DTYPES[dtype])
    got = argmax(on(x)).sync()
    assert got.dtype == ts.int32 and got.shape == (rows,)
    assert got.numpy().tolist() == np.argmax(x.astype(np.float32), 1).tolist()
    hard = hard_rows(rows, vocab, CHUNK, rng).astype(NP_DTYPES[dtype])
    out = poisoned((rows,), ts.int32)
    assert argmax(on(hard), out=out).sync() is out
    assert out.numpy().tolist() == np.argmax(hard.astype(np.float32), 1).tolist()


def test_split_schedule_serves_few_rows_of_a_long_vocabulary_only():
    def splits(rows, vocab):
        return sampling._splits(ts.zeros((rows, vocab), ts.bfloat16).sync())
    assert splits(1, 151936) and splits(64, sampling.SPLIT_MIN_VOCAB)
    assert not splits(65, 151936) and not splits(1, sampling.SPLIT_MIN_VOCAB - 1)
    assert not splits(1, sampling.SPLIT_MAX_CHUNKS * 1024 + 1)  # (the merge's one tile)


@pytest.mark.parametrize("rows", [1, 8])
def test_argmax_with_a_workspace_records_into_a_graph(rng, monkeypatch, rows):
    """With ``out=`` and a workspace from ``argmax_workspace`` the split schedule allocates
    nothing: it records into a graph, and each replay reads the logits of the moment."""
    monkeypatch.setattr(sampling, "argmax_rows", no_rows_path)
    vocab = 20001
    logits = on(rng.standard_normal((rows, vocab)).astype(np.float32))
    workspace = argmax_workspace(logits).sync()
    assert workspace.dtype == ts.float32 and workspace.device == logits.device
    assert workspace.size >= rows * -(-vocab // min(c["chunk"] for c in
                                                    sampling.SPLIT_CONFIGS))
    out = poisoned((rows,), ts.int32)
    with ts.CudaGraph.scope() as graph:
        graph.record(argmax(logits, out=out, workspace=workspace))
    assert np.all(out.numpy() == -123)  # recorded, nothing ran
    for step in range(2):
        x = hard_rows(rows, vocab, CHUNK, rng) if step else \
            rng.standard_normal((rows, vocab)).astype(np.float32)
        logits.copy_(on(x)).sync()
        graph.replay()
        assert out.numpy().tolist() == np.argmax(x, 1).tolist()


def test_argmax_uses_the_workspace_it_is_lent(rng):
    """A larger workspace of any shape works (its first values are used); a workspace on the
    one-program-per-row schedule is unused; torch tensors work as well."""
    x = rng.standard_normal((2, 40000)).astype(np.float16)
    big = ts.full((3, 1000), 7.0, ts.float32).sync()
    assert argmax(on(x), workspace=big).sync().numpy().tolist() == np.argmax(x, 1).tolist()
    assert not np.all(big.numpy() == 7.0)  # (the chunk maxima went there)
    small = rng.standard_normal((20, 40)).astype(np.float32)  # 20 rows: no split
    assert argmax(on(small), workspace=argmax_workspace(on(small)).sync()).sync().numpy() \
        .tolist() == np.argmax(small, 1).tolist()
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.astype(np.float32))
    work = argmax_workspace(t)
    assert isinstance(work, torch.Tensor) and work.dtype == torch.float32
    assert torch.equal(argmax(t, workspace=work).long(), torch.argmax(t, -1))


def test_argmax_workspace_errors(rng):
    logits = on(rng.standard_normal((2, 20001)).astype(np.float32))
    need = 2 * -(-20001 // min(c["chunk"] for c in sampling.SPLIT_CONFIGS))  # (any config)
    cases = [
        (ts.zeros((3,)).sync(), rf"argmax: workspace has shape \(3,\): it holds 3 float32 "
         rf"values; this call needs {need}"),
        (ts.zeros((64,), ts.float16).sync(), r"argmax: workspace has shape \(64,\) and dtype "
         "float16; it must be float32"),
        (np.zeros(64, np.float32), "argmax: workspace must be a float32 tilesafe tensor, got "
         "ndarray"),
        (ts.zeros((16, 8)).sync()[:, :4], r"argmax: workspace of shape \(16, 4\) and "
         r"strides \(8, 1\) cannot be viewed as one row"),
    ]
    for workspace, words in cases:
        with pytest.raises(ts.ArgumentError, match=words) as info:
            argmax(logits, workspace=workspace)
        assert "test_kernels_sampling.py" in str(info.value)
        assert "argmax_workspace(logits)" in str(info.value)


def test_two_threads_lending_one_workspace_are_refused_never_mixed(rng):
    """Two threads draw greedy and sampled tokens from their own logits through one lent
    workspace: a split launched while the other thread's is pending is refused (BorrowError)
    and retried, and no thread ever reads the other's chunk maxima (every token is its own
    logits' argmax, or its own reference draw)."""
    import threading
    import time
    vocab, seed, temperature = 20001, 4, 0.9
    rows = [(3 * rng.standard_normal((2, vocab))).astype(np.float32) for _ in range(2)]
    logits = [on(x) for x in rows]
    workspace = argmax_workspace(logits[0]).sync()
    outs = [ts.zeros((2,), ts.int32).sync() for _ in range(2)]
    wrong: list = []

    def work(i):
        want_greedy = np.argmax(rows[i], 1).tolist()
        want_drawn = reference(rows[i], uniforms(2, vocab, seed, 0), temperature, 0, 1.0)
        for step in range(12):
            for _ in range(1000):
                try:
                    if step % 2:
                        sample(logits[i], temperature=temperature, seed=seed, offset=0,
                               out=outs[i], workspace=workspace).sync()
                        want = want_drawn.tolist()
                    else:
                        argmax(logits[i], out=outs[i], workspace=workspace).sync()
                        want = want_greedy
                    break
                except ts.BorrowError:
                    time.sleep(0.001)
            else:
                wrong.append((i, step, "never ran"))
                continue
            if outs[i].numpy().tolist() != want:
                wrong.append((i, step, outs[i].numpy().tolist(), want))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


def test_a_workspace_sharing_memory_with_logits_or_out_is_refused(rng):
    """A workspace over the logits or over ``out`` is refused by the call, before anything
    runs, so ``out`` keeps its values (DLPack imports of one buffer included)."""
    x = rng.standard_normal((2, 20001)).astype(np.float32)
    logits, out = on(x), ts.zeros((2,), ts.int32).sync()  # (out given: no tuning on a GPU)
    with pytest.raises(ts.AliasingError, match="argmax: workspace and logits overlap in "
                       "memory, and workspace is written"):
        argmax(logits, out=out, workspace=logits).sync()
    with pytest.raises(ts.AliasingError):
        argmax(logits, out=out, workspace=logits.reshape(2 * 20001)[20001:]).sync()
    logits = ts.tensor(x, device="cpu").sync()  # (the buffer below is numpy's: cpu memory)
    memory = np.full(64, 7, np.int32)  # one buffer imported twice: int32 out, f32 workspace
    out, workspace = ts.from_dlpack(memory[:2]), ts.from_dlpack(memory.view(np.float32))
    with pytest.raises(ts.AliasingError, match="argmax: workspace and out overlap in memory"
                       ) as info:
        argmax(logits, out=out, workspace=workspace).sync()
    assert "test_kernels_sampling.py" in str(info.value)
    assert memory.tolist() == [7] * 64  # nothing written
    beside = ts.from_dlpack(memory.view(np.float32)[2:])  # the rest of the buffer: disjoint
    assert argmax(logits, out=out, workspace=beside).sync().numpy().tolist() == \
        np.argmax(x, 1).tolist()


@pytest.mark.parametrize("dtype, vocab, top_k, top_p", [
    ("float32", 300, 0, 1.0),
    ("bfloat16", 300, 5, 1.0),
    ("float32", 5000, 16, 0.8),      # two column tiles: the running top-k set is merged
    ("float16", 37, 64, 0.5),        # top_k above the vocabulary: clamped to it
])
def test_sample_makes_the_references_choices_from_the_same_uniforms(rng, dtype, vocab, top_k,
                                                                    top_p):
    rows, seed, offset, temperature = 6, 1234, 17, 0.75
    x = (2 * rng.standard_normal((rows, vocab))).astype(NP_DTYPES[dtype])
    got = sample(on(x), temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                 offset=offset).sync().numpy()
    u = uniforms(rows, vocab, seed, offset)
    want = reference(x.astype(np.float32), u, temperature, top_k, top_p)
    assert got.tolist() == want.tolist()
    # the same (seed, offset) gives the same tokens, with the offset a device tensor too
    again = sample(on(x), temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                   offset=on(np.array([offset], np.int64))).sync().numpy()
    assert again.tolist() == want.tolist()
    # another offset draws other numbers (6 rows agreeing by chance is improbable here)
    other = sample(on(x), temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                   offset=offset + rows).sync().numpy()
    assert other.tolist() == reference(x.astype(np.float32), uniforms(rows, vocab, seed,
                                       offset + rows), temperature, top_k, top_p).tolist()


def no_gumbel_rows(*args, **kwargs):
    raise AssertionError("sample took the one-program-per-row schedule")


@pytest.mark.parametrize("rows, vocab, dtype", [(1, 20001, "bfloat16"), (3, 16384, "float32"),
                                                (2, 20001, "float16")])
def test_a_split_draw_is_the_one_program_per_row_draw(rng, monkeypatch, rows, vocab, dtype):
    """Few rows of a long vocabulary draw through chunk maxima and a merge: the tokens of
    ``gumbel_rows`` with tiles of the chunk's width, bit for bit (the same noisy logits,
    the same first maximum), hard rows included: ties, a NaN chunk (never chosen, as there),
    all -inf (token 0), +inf; the documented reference agrees on the plain rows."""
    seed, offset, temperature = 99, 5, 0.8
    x = (2 * rng.standard_normal((rows, vocab))).astype(NP_DTYPES[dtype])
    hard = hard_rows(rows, vocab, CHUNK, rng).astype(NP_DTYPES[dtype])
    for logits in (x, hard):
        want = poisoned((rows,), ts.int32)
        offsets = on(np.array([offset], np.int64))
        sampling.gumbel_rows(ts.borrow_mut(want).partition((1,)), on(logits), offsets, seed,
                             temperature, C=CHUNK).sync()
        with monkeypatch.context() as patch:
            patch.setattr(sampling, "gumbel_rows", no_gumbel_rows)
            got = sample(on(logits), temperature=temperature, seed=seed, offset=offset).sync()
        assert got.numpy().tolist() == want.numpy().tolist()
    u = uniforms(rows, vocab, seed, offset)
    assert got_plain(x, seed, offset, temperature).tolist() == \
        reference(x.astype(np.float32), u, temperature, 0, 1.0).tolist()


def got_plain(x, seed, offset, temperature):
    return sample(on(x), temperature=temperature, seed=seed, offset=offset).sync().numpy()


def test_a_split_draw_records_into_a_graph_with_its_workspace(rng, monkeypatch):
    """With ``out=``, a workspace and a device offset, the split draw allocates nothing: it
    records into a graph, and each replay draws from the stream the offset holds then."""
    monkeypatch.setattr(sampling, "gumbel_rows", no_gumbel_rows)
    rows, vocab, seed, temperature = 2, 20001, 7, 1.1
    x = (2 * rng.standard_normal((rows, vocab))).astype(np.float32)
    logits, offset = on(x), on(np.array([0], np.int64))
    workspace, out = argmax_workspace(logits).sync(), poisoned((rows,), ts.int32)
    with ts.CudaGraph.scope() as graph:
        graph.record(sample(logits, temperature=temperature, seed=seed, offset=offset,
                            out=out, workspace=workspace))
    assert np.all(out.numpy() == -123)
    for stream in (0, 40):
        offset.copy_(on(np.array([stream], np.int64))).sync()
        graph.replay()
        want = reference(x, uniforms(rows, vocab, seed, stream), temperature, 0, 1.0)
        assert out.numpy().tolist() == want.tolist()
    cpu_logits = ts.tensor(x, device="cpu").sync()  # (the buffer below is numpy's)
    memory = np.full(64, 7, np.int32)  # one buffer imported twice: int32 out, f32 workspace
    out, workspace = ts.from_dlpack(memory[:2]), ts.from_dlpack(memory.view(np.float32))
    with pytest.raises(ts.AliasingError, match="sample: workspace and out overlap"):
        sample(cpu_logits, temperature=temperature, seed=seed, offset=0, out=out,
               workspace=workspace)
    assert memory.tolist() == [7] * 64  # nothing written


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (4, 1.0), (8, 0.7)])
def test_sampled_frequencies_follow_the_kept_distribution(top_k, top_p):
    logits = np.array([1.0, 0.2, -0.5, 2.0, 0.9, -3.0, 1.7], np.float32)
    temperature, rows = 1.5, 1000
    p = kept_probabilities(logits, temperature, top_k, top_p)
    counts = np.zeros(logits.size)
    for seed in (1, 2):  # several seeds, each row its own stream
        x = on(np.tile(logits, (rows, 1)))
        tokens = sample(x, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                        offset=0).sync().numpy()
        counts += np.bincount(tokens, minlength=logits.size)
    n = counts.sum()
    assert np.all(counts[p == 0] == 0)  # never a token outside the kept set
    expected = n * p[p > 0]
    chi2 = float(((counts[p > 0] - expected) ** 2 / expected).sum())
    # df <= 6: P(chi2 > 35) < 1e-5 for the right distribution; a wrong temperature, top-k
    # or top-p moves the counts by hundreds
    assert chi2 < 35.0, (chi2, counts, expected)


def test_temperature_zero_is_argmax(rng):
    x = rng.standard_normal((4, 50)).astype(np.float32)
    got = sample(on(x), temperature=0.0, top_k=3, seed=5, offset=0).sync()
    assert np.array_equal(got.numpy(), np.argmax(x, 1))


def test_sample_argument_errors(rng):
    x = on(rng.standard_normal((2, 10)).astype(np.float32))
    base = dict(temperature=1.0, seed=1, offset=0)
    cases = [
        (dict(temperature=-1.0), "sample: temperature=-1.0 must be >= 0 and finite"),
        (dict(top_k=1000), r"sample: top_k=1000 must be an int in \[0, 256\]"),
        (dict(top_k=2.5), r"sample: top_k=2.5 must be an int"),
        (dict(top_p=0.0), r"sample: top_p=0.0 must be in \(0, 1\]"),
        (dict(top_p=0.9), "sample: top_p=0.9 needs top_k > 0"),
        (dict(seed=-1), r"sample: seed=-1 must be an int in \[0, 2\*\*32\)"),
        (dict(offset=-3), r"sample: offset=-3 must be an int in \[0, 2\*\*62\) or a \(1,\) "
         "int64 tensor"),
        (dict(offset=on(np.array([1, 2], np.int64))),
         r"sample: offset has shape \(2,\); it must be \(1,\)"),
        (dict(offset=on(np.array([1], np.int32))),
         "sample: offset has dtype int32; supported: int64"),
        (dict(out=ts.zeros((2,), ts.int64).sync()),
         r"sample: out= has shape \(2,\) and dtype int64; this call writes shape \(2,\), "
         "dtype int32"),
    ]
    for change, words in cases:
        with pytest.raises(ts.ArgumentError, match=words) as info:
            sample(x, **{**base, **change})
        assert "test_kernels_sampling.py" in str(info.value)
    with pytest.raises(ts.ArgumentError, match=r"argmax: logits has shape \(20,\); it must "
                       "have 2 dimensions"):
        argmax(x.reshape(20))
    with pytest.raises(ts.ArgumentError, match="argmax: logits has dtype int32"):
        argmax(on(np.zeros((2, 3), np.int32)))


def test_torch_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng.standard_normal((3, 40)).astype(np.float32))
    got = argmax(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int32
    assert torch.equal(got.long(), torch.argmax(x, -1))
    drawn = sample(x, temperature=0.5, top_k=3, seed=1, offset=torch.tensor([7]))
    want = reference(x.numpy(), uniforms(3, 40, 1, 7), 0.5, 3, 1.0)
    assert drawn.tolist() == want.tolist()
