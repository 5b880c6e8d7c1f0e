"""tilesafe.kernels.embedding: rows of the table for ids of any shape (int32/int64), every
table dtype, out= given and not, an id outside the table, and each argument error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import embedding

NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def on(array) -> ts.Tensor:
    return ts.tensor(array).sync()


@pytest.mark.parametrize("dtype, vocab, hidden, ids_shape, index_dtype", [
    ("float32", 37, 19, (2, 3), np.int64),
    ("bfloat16", 50, 96, (13,), np.int32),
    ("float16", 9, 8, (1,), np.int32),
    ("float32", 11, 40, (), np.int64),
    ("bfloat16", 30, 192, (5,), np.int32),  # (three whole 64-column tiles)
    ("float16", 12, 2560, (3, 2), np.int64),  # (Qwen3-4B's width: five of 512)
])
def test_embedding_copies_the_rows_of_the_ids(rng, dtype, vocab, hidden, ids_shape,
                                              index_dtype):
    table = rng.standard_normal((vocab, hidden)).astype(NP_DTYPES[dtype])
    ids = rng.integers(0, vocab, ids_shape).astype(index_dtype)
    got = embedding(on(ids), on(table)).sync()
    assert got.shape == ids_shape + (hidden,) and got.dtype.name == dtype
    assert np.array_equal(got.numpy(), table[ids])


@pytest.mark.parametrize("widest, hidden, tile", [
    (1024, 4096, (1024, True)), (1024, 2560, (512, True)), (1024, 192, (64, True)),
    (1024, 8, (8, True)), (1024, 96, (128, False)), (1024, 19, (32, False)),
    (256, 1000, (256, False)), (8192, 1024, (1024, True)),
])
def test_the_column_tile_divides_the_width_where_a_wide_enough_one_does(widest, hidden, tile):
    """Consecutive columns (no clamp: ``WHOLE``) wherever a power-of-two tile of at least
    64 columns, or the whole row, divides the width; else the config's width, clamped."""
    from tilesafe.kernels.embedding import column_tile
    assert column_tile(widest, hidden) == tile


def test_embedding_writes_out_and_hands_it_back(rng):
    table = rng.standard_normal((21, 24)).astype(np.float32)
    ids = np.array([[20, 0, 5], [5, 5, 1]], np.int32)
    out = ts.full((2, 3, 24), np.nan, ts.float32).sync()
    got = embedding(on(ids), on(table), out=out).sync()
    assert np.array_equal(out.numpy(), table[ids])
    assert got.shape == (2, 3, 24) and np.array_equal(got.numpy(), table[ids])


@pytest.mark.parametrize("bad", [21, -1])
def test_an_id_outside_the_table_raises(rng, bad):
    table = on(rng.standard_normal((21, 8)).astype(np.float32))
    with pytest.raises(ts.IndexOutOfRangeError, match=rf"kernel 'embedding_rows'.*gather index "
                       rf"{bad} along axis 0 is outside \[0, 21\)"):
        embedding(on(np.array([3, bad, 4], np.int64)), table).sync()


def test_embedding_argument_errors(rng):
    table = on(rng.standard_normal((21, 8)).astype(np.float32))
    ids = on(np.array([1, 2], np.int32))
    cases = [
        (dict(ids=on(np.array([1.0])), table=table),
         "embedding: ids has dtype float64; supported: int32, int64"),
        (dict(ids=ids, table=on(np.zeros((4, 8), np.int32))),
         "embedding: table has dtype int32; supported: float16, bfloat16, float32"),
        (dict(ids=ids, table=table.reshape(21, 2, 4)),
         r"embedding: table has shape \(21, 2, 4\); it must have 2 dimensions"),
        (dict(ids=on(np.zeros((0,), np.int32)), table=table),
         r"embedding: ids has shape \(0,\), no elements"),
        (dict(ids=[1, 2], table=table), "embedding: ids must be a tilesafe tensor, got list"),
        (dict(ids=ids, table=table, out=ts.zeros((2, 9)).sync()),
         r"embedding: out= has shape \(2, 9\) and dtype float32; this call writes shape "
         r"\(2, 8\), dtype float32"),
        (dict(ids=on(np.zeros((2, 2), np.int32)), table=table,
              out=ts.zeros((2, 8, 2)).sync().permute(0, 2, 1)),
         r"embedding: out \(shape \(2, 2, 8\), strides \(16, 1, 2\)\) cannot be viewed as "
         r"\(4, 8\)"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ts.ArgumentError, match=words) as info:
            embedding(**kwargs)
        assert "test_kernels_embedding.py" in str(info.value)


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    table = torch.randn(30, 12, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[29, 0], [4, 4]])
    got = embedding(ids, table)
    assert isinstance(got, torch.Tensor) and got.shape == (2, 2, 12)
    assert torch.equal(got, torch.nn.functional.embedding(ids, table))
