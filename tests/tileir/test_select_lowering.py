"""The Tile IR lowerings of argmax/argmin, topk, static slices and cat, run on a numpy model
of the bytecode builder (``test_lowering._ModelBuilder`` extended with the shape ops and a
``reduce`` that combines in a random tree order, identities mixed in) and compared with the
registry's numpy semantics. The compile suite checks that tileiras accepts the bytecode; this
checks what it computes, without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from test_lowering import _decode, _ModelBuilder, _V
from tilesafe import dtypes as tsd
from tilesafe.backends.tileir.bytecode import types as tir
from tilesafe.backends.tileir.lower import LoweringContext, scalar_type
from tilesafe.backends.tileir.lower import tile as tile_lowering
from tilesafe.compiler import registry
from tilesafe.compiler.ir import Operation, Value as IRValue
from tilesafe.compiler.types import TileType as IRTile


class _SelectModel(_ModelBuilder):
    """The builder calls the selection lowerings make, over numpy."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self._yielded: list = []

    def iota(self, length, element=tir.I32):
        return _V(tir.TileType(element, (length,)), np.arange(length))

    def reshape(self, x, shape):
        return _V(tir.TileType(x.type.element, tuple(shape)), x.data.reshape(tuple(shape)))

    def broadcast(self, x, shape):
        return _V(tir.TileType(x.type.element, tuple(shape)),
                  np.broadcast_to(x.data, tuple(shape)))

    def cat(self, a, c, dim):
        data = np.concatenate((a.data, c.data), axis=dim)
        return _V(tir.TileType(a.type.element, data.shape), data)

    def extract(self, x, indices, shape):
        starts = [int(i.data) * n for i, n in zip(indices, shape)]
        window = tuple(slice(s, s + n) for s, n in zip(starts, shape))
        return _V(tir.TileType(x.type.element, tuple(shape)), x.data[window])

    def yield_(self, values=()):
        self._yielded = list(values)

    def reduce(self, operands, dim, identities, body):
        """Combine each line's (element...) tuples in a random order and tree shape, with a
        few identity tuples mixed in: a lowering is right only if neither matters."""
        scalars = [tir.TileType(v.type.element, ()) for v in operands]
        lines = [np.moveaxis(v.data, dim, -1) for v in operands]
        out_shape = lines[0].shape[:-1]
        outs = [np.empty(out_shape, dtype=object) for _ in operands]
        for pos in np.ndindex(*out_shape):
            items = [[line[pos][i] for line in lines] for i in range(lines[0].shape[-1])]
            items += [[ident.value for ident in identities]] * int(self.rng.integers(0, 3))
            self.rng.shuffle(items)
            while len(items) > 1:
                i = int(self.rng.integers(0, len(items) - 1))
                args = []
                for t, e, acc in zip(scalars, items[i], items[i + 1]):
                    args += [_V(t, e), _V(t, acc)]
                body(*args)
                items[i:i + 2] = [[v.data.item() for v in self._yielded]]
            for out, value in zip(outs, items[0]):
                out[pos] = value
        return [_V(tir.TileType(v.type.element, out_shape), out)
                for v, out in zip(operands, outs)]


def run_lowering(name, attrs, x, dtype, seed=0):
    """Lower op ``name`` of one ``dtype`` operand on the model; its results as numpy."""
    lw = LoweringContext(None, None, _SelectModel(np.random.default_rng(seed)), inbounds=False,
                         debug=False)
    operand = IRValue(IRTile(dtype, x.shape))
    results = tuple(IRValue(t) for t in registry.OPS[name].infer((operand.type,), attrs))
    lw.set(operand, _V(tir.TileType(scalar_type(dtype), x.shape), x))
    registry.OPS[name].lowerings["tileir"](lw, Operation(name, (operand,), results, attrs, None))
    return [_decode(lw.get(r), r.type.dtype) for r in results]


def sample(rng, dtype, shape):
    """Ties, and for floats NaN, infinities and signed zeros, in random places."""
    if dtype.is_float:
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3.0, 3.0, -2.0])
        return dtype.round(rng.choice(pool, shape))
    info = np.iinfo(dtype.compute)
    pool = np.array([info.min, info.max, 0, 1, 1, info.max, info.min + 1], dtype=object)
    return rng.choice(pool, shape).astype(dtype.compute)


def assert_same(got, want, dtype):
    np.testing.assert_array_equal(got, want)
    if dtype.is_float:
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


DTYPES = [tsd.float32, tsd.float16, tsd.bfloat16, tsd.float64, tsd.int32, tsd.uint8,
          tsd.int64, tsd.uint64]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_argreduce_lowering_matches_numpy_in_any_tree_order(dtype, kind, axis):
    rng = np.random.default_rng(11)
    for seed in range(3):
        x = sample(rng, dtype, (4, 16))
        (got,) = run_lowering("argreduce", {"kind": kind, "axis": axis}, x, dtype, seed)
        np.testing.assert_array_equal(got, (np.argmax if kind == "max" else np.argmin)(x, axis))


TOPK_CASES = [((4, 16), 1, 1), ((4, 16), 4, 1), ((4, 16), 16, 1), ((4, 16), 2, 0),
              ((4, 16), 4, 0), ((2, 64), 32, 1), ((2, 8, 4), 8, 1), ((2, 8, 4), 2, 1),
              ((2, 8, 4), 4, -1)]


@pytest.mark.parametrize("method", ["rounds", "sort"])
@pytest.mark.parametrize("shape,k,axis", TOPK_CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_topk_lowering_matches_numpy_in_any_tree_order(monkeypatch, dtype, shape, k, axis,
                                                       method):
    """Both strategies (k reduction rounds; a bitonic sort cut to k), whichever the lowering
    would pick for these sizes."""
    monkeypatch.setattr(tile_lowering, "topk_sorts", lambda n, k: method == "sort")
    rng = np.random.default_rng(12)
    axis %= len(shape)
    for seed in range(2):
        x = sample(rng, dtype, shape)
        got_values, got_indices = run_lowering("topk", {"k": k, "axis": axis}, x, dtype, seed)
        want_values, want_indices = registry.OPS["topk"].evaluate(None, {"k": k, "axis": axis},
                                                                  x)
        np.testing.assert_array_equal(got_indices, want_indices)
        assert_same(got_values, dtype.round(want_values), dtype)


def test_topk_sorts_only_for_a_very_large_k():
    assert not tile_lowering.topk_sorts(16, 16) and not tile_lowering.topk_sorts(1024, 256)
    assert tile_lowering.topk_sorts(1024, 512) and tile_lowering.topk_sorts(512, 512)


@pytest.mark.parametrize("start,shape", [((4, 8), (4, 8)), ((0, 2), (8, 4)), ((3, 5), (2, 8)),
                                         ((7, 1), (1, 8)), ((6, 0), (2, 16)), ((1, 3), (1, 1))])
def test_slice_lowering_aligned_and_in_pieces(start, shape):
    x = np.arange(128, dtype=np.int32).reshape(8, 16)
    (got,) = run_lowering("slice", {"start": start, "shape": shape}, x, tsd.int32)
    window = tuple(slice(s, s + n) for s, n in zip(start, shape))
    np.testing.assert_array_equal(got, x[window])


def test_cat_lowering():
    x = np.arange(128, dtype=np.int32).reshape(8, 16)
    lw = LoweringContext(None, None, _SelectModel(np.random.default_rng(0)), inbounds=False,
                         debug=False)
    a, c = IRValue(IRTile(tsd.int32, (8, 16))), IRValue(IRTile(tsd.int32, (8, 16)))
    (result,) = (IRValue(t) for t in registry.OPS["cat"].infer((a.type, c.type), {"axis": 1}))
    lw.set(a, _V(tir.TileType(tir.I32, (8, 16)), x))
    lw.set(c, _V(tir.TileType(tir.I32, (8, 16)), -x))
    registry.OPS["cat"].lowerings["tileir"](lw, Operation("cat", (a, c), (result,), {"axis": 1},
                                                          None))
    np.testing.assert_array_equal(_decode(lw.get(result), tsd.int32),
                                  np.concatenate((x, -x), 1))
