"""The mixture-of-experts dispatch of ``examples/moe_dispatch.py``, step by step against numpy:
the atomic counts, the destinations (a permutation: a stable counting sort), the expert-sorted
buffer written through an indexed partition whose positions a kernel computed on the device,
the combine; and the safety the scatter rests on: destinations that a kernel produced wrong
(two pairs at one row, or one past the buffer) are refused by the launch, with nothing
written."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import tilesafe as ts
from conftest import poisoned
from tilesafe.errors import PositionsError

_PATH = pathlib.Path(__file__).parent.parent / "examples" / "moe_dispatch.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("example_moe_dispatch_under_test", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


moe = _load_example()

#: (tokens, experts, k, hidden, rows): the example's sizes; a partial last tile, experts and
#: hidden features that are no power of two; four choices of sixteen experts in small tiles
#: (many earlier tiles for the ranks to count); one token
SHAPES = [(64, 8, 2, 64, 32), (50, 6, 2, 40, 16), (100, 16, 4, 96, 8), (1, 3, 2, 8, 32)]


@pytest.fixture(scope="module")
def dispatched():
    """``{(shape, seed): (got, want)}`` for every shape and two seeds (run once per module)."""
    out = {}
    for shape in SHAPES:
        tokens, experts, k, hidden, rows = shape
        for seed in (0, 7):
            logits, x, w = moe.inputs(tokens, experts, hidden, seed)
            out[shape, seed] = (moe.moe_dispatch(logits, x, w, k, rows),
                                moe.reference(logits, x, w, k))
    return out


def _cases():
    return [pytest.param(shape, seed, id=f"{shape[0]}x{shape[1]}-k{shape[2]}-h{shape[3]}-"
                         f"rows{shape[4]}-seed{seed}") for shape in SHAPES for seed in (0, 7)]


@pytest.mark.parametrize("shape, seed", _cases())
def test_routing_picks_the_top_k_experts_and_softmax_gates(dispatched, shape, seed):
    got, want = dispatched[shape, seed]
    np.testing.assert_array_equal(got.experts, want.experts)
    np.testing.assert_allclose(got.gates, want.gates, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.gates.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("shape, seed", _cases())
def test_atomic_counts_equal_bincount_and_starts_their_exclusive_sum(dispatched, shape, seed):
    got, _ = dispatched[shape, seed]
    experts = shape[1]
    counts = np.bincount(got.experts.ravel(), minlength=experts)
    np.testing.assert_array_equal(got.counts, counts)
    assert got.counts.dtype == np.int32
    np.testing.assert_array_equal(got.starts, np.concatenate(([0], np.cumsum(counts)[:-1])))


@pytest.mark.parametrize("shape, seed", _cases())
def test_destinations_are_a_permutation_grouped_by_expert_in_token_order(dispatched, shape,
                                                                        seed):
    got, want = dispatched[shape, seed]
    tokens, _, k, _, _ = shape
    dest = got.dest.ravel()
    np.testing.assert_array_equal(np.sort(dest), np.arange(tokens * k))
    np.testing.assert_array_equal(got.dest, want.dest)  # numpy's stable sort, inverted
    expert = got.experts.ravel()
    for e in np.unique(expert):  # an expert's rows: contiguous from its start, in pair order
        rows = dest[expert == e]
        assert rows[0] == got.starts[e]
        np.testing.assert_array_equal(np.diff(rows), 1)


@pytest.mark.parametrize("shape, seed", _cases())
def test_the_sorted_buffer_is_numpys_stable_sort_of_the_rows_by_expert(dispatched, shape,
                                                                      seed):
    got, _ = dispatched[shape, seed]
    tokens, experts, k, hidden, _ = shape
    _, x, _ = moe.inputs(tokens, experts, hidden, seed)
    order = np.argsort(got.experts.ravel(), kind="stable")
    np.testing.assert_array_equal(got.sorted, x[order // k])


@pytest.mark.parametrize("shape, seed", _cases())
def test_the_experts_and_the_combine_match_numpy(dispatched, shape, seed):
    got, want = dispatched[shape, seed]
    np.testing.assert_allclose(got.y, want.y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.out, want.out, rtol=1e-5, atol=1e-5)


def test_seeds_give_different_routings(dispatched):
    a, _ = dispatched[SHAPES[0], 0]
    b, _ = dispatched[SHAPES[0], 7]
    assert not np.array_equal(a.experts, b.experts)
    assert not np.array_equal(a.counts, b.counts)


def test_the_example_runs_and_checks_itself():
    got = moe.main()
    assert got.counts.sum() == 64 * 2


@pytest.mark.parametrize("wrong", ["two pairs at one row", "a row past the buffer"])
def test_device_produced_wrong_destinations_are_refused_with_nothing_written(wrong):
    """The scatter's safety does not rest on the routing kernels being right: the ranks
    (``destination_rows``) and the starts (``exclusive_scan`` of the atomic counts) come from
    separate kernels, and nothing in their types says the rows they give are distinct. Here
    the destinations kernel runs on the device from starts that are wrong, so the positions
    it writes repeat a row (every expert starting at row 0) or leave the buffer (one extra
    pair counted for expert 0 shifts every later expert down by one: the last row is one
    past the end). The indexed partition's launch proves its positions distinct and in range
    before any program writes: it raises PositionsError and the buffer keeps its poison."""
    tokens, experts, k, hidden, rows = 64, 8, 2, 64, 32
    logits, x, _ = moe.inputs(tokens, experts, hidden, seed=3)
    routed, _ = moe.route(ts.tensor(logits).sync(), k, rows)
    counts = moe.count(routed, experts, rows).numpy()
    if wrong == "two pairs at one row":
        counts[:] = 0
    else:
        counts[0] += 1
    starts = moe.expert_starts(ts.tensor(counts).sync())  # a kernel's output
    _, positions = moe.destinations(routed, starts, rows)  # another kernel's: on the device
    rows_at = positions.numpy()[:, 0]
    if wrong == "two pairs at one row":
        assert len(np.unique(rows_at)) < len(rows_at)
        words = "names the same tile as"
    else:
        assert rows_at.max() == tokens * k
        words = "is outside the tile grid"
    buffer = poisoned((tokens * k, hidden), ts.float32)
    with pytest.raises(PositionsError, match=rf"kernel 'scatter_rows', the indexed partition "
                       rf"'rows': positions\[\d+\] = \(\d+, 0\) {words}.*wrote nothing"):
        moe.scatter(ts.tensor(x).sync(), positions, k, into=buffer)
    assert np.all(np.isnan(buffer.numpy()))  # nothing written, and the buffer is usable again
    # the right destinations then scatter into the same buffer
    starts = moe.expert_starts(moe.count(routed, experts, rows))
    _, positions = moe.destinations(routed, starts, rows)
    moe.scatter(ts.tensor(x).sync(), positions, k, into=buffer)
    order = np.argsort(routed.numpy().ravel(), kind="stable")
    np.testing.assert_array_equal(buffer.numpy(), x[order // k])


def test_the_kernels_as_launched_compile_for_sm_90(tmp_path, monkeypatch):
    """Every kernel of the example, as ``main()`` launches it, compiles to an sm_90 cubin:
    the indexed scatter too, with its on-device validation of the positions (which ``tilesafe
    check`` of the example's ``examples=`` does not build). (A fresh copy of the module, so
    that only ``main()``'s specializations are compiled here; the suite's last test compiles
    the others.)"""
    tileiras = pytest.importorskip("tilesafe.backends.tileir.tileiras")
    try:
        tileiras.find_tileiras()
    except Exception as err:
        pytest.skip(f"tileiras not available: {err}")
    from tilesafe import backends, pipeline
    from tilesafe.kernel import Kernel
    monkeypatch.setenv("TILESAFE_CACHE_DIR", str(tmp_path))
    example = _load_example()
    example.main()
    target = backends.by_name("tileir").ahead_of_time("sm_90")
    kernels = [k for k in vars(example).values() if isinstance(k, Kernel)]
    assert {k.name for k in kernels} >= {"top_k_route", "count_tokens", "exclusive_scan",
                                         "destination_rows", "scatter_rows", "scale_experts",
                                         "combine_rows"}
    compiled = 0
    for kernel in kernels:
        for ir in list(kernel._ir_cache.values()):
            pipeline.compile(ir, target, hints=kernel.hints)
            compiled += 1
    indexed = [ir for ir in example.scatter_rows._ir_cache.values()
               if "at positions" in str(ir.params[0].value.type)]
    assert indexed and compiled >= len(kernels)
