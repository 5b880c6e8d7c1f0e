"""``tilesafe generate`` on the interpreter with a small random checkpoint: it reports the
start-up and its compiling apart from the time to first token and tokens/s, its greedy tokens
match transformers' (``--check``), and bad arguments fail with a message and status 1."""

from __future__ import annotations

import pytest

from tilesafe.cli import main
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.config import Qwen3Config

TINY = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random(TINY, tmp_path_factory.mktemp("generate") / "tiny", seed=5,
                        progress=False)


def test_generate_reports_and_matches_transformers(checkpoint, capsys):
    pytest.importorskip("transformers")
    status = main(["generate", "--model", str(checkpoint), "--prompt-tokens", "5",
                   "--tokens", "4", "--quiet", "--check"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "time to first token" in out and "tokens/s" in out
    assert "greedy tokens match transformers'" in out
    assert "start-up " in out and "s weights aside" in out and "\ncompile    " in out
    # every kernel is compiled before the prompt runs (Qwen3Engine.prepare)
    assert "of which compiling" not in out
    assert "roofline   n/a (measured on a GPU only)" in out


def test_a_batch_generates_and_each_sequence_matches_transformers(checkpoint, capsys):
    pytest.importorskip("transformers")
    status = main(["generate", "--model", str(checkpoint), "--prompt-tokens", "5",
                   "--tokens", "4", "--batch", "3", "--quiet", "--check"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "5 tokens x 3 sequence(s)" in out and "tokens/s per sequence" in out
    assert "tokens     [2]" in out and "greedy tokens match transformers'" in out


def test_sampling_from_the_command_line(checkpoint, capsys):
    args = ["generate", "--model", str(checkpoint), "--prompt-tokens", "5", "--tokens", "6",
            "--batch", "2", "--quiet", "--temperature", "0.8", "--top-k", "16",
            "--top-p", "0.9", "--sample-seed", "3"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "sampled: temperature 0.8, top-k 16, top-p 0.9" in first
    assert main(args) == 0
    again = capsys.readouterr().out
    tokens = [line for line in first.splitlines() if line.startswith("tokens")]
    assert tokens and tokens == [line for line in again.splitlines()
                                 if line.startswith("tokens")]


def test_generate_refuses_bad_arguments(checkpoint, capsys):
    assert main(["generate", "--model", str(checkpoint), "--batch", "33", "--quiet"]) == 1
    assert "--batch 33: the engine decodes 1 to 32 sequences" in capsys.readouterr().err
    assert main(["generate", "--model", str(checkpoint), "--temperature", "1", "--check",
                 "--quiet"]) == 1
    assert "--check compares greedy tokens" in capsys.readouterr().err
    assert main(["generate", "--model", str(checkpoint), "--top-k", "999", "--temperature",
                 "1", "--quiet", "--tokens", "2", "--prompt-tokens", "2"]) == 1
    assert "top_k=999 must be an int in [0, 256]" in capsys.readouterr().err
    assert main(["generate", "--model", str(checkpoint.parent / "missing"), "--quiet"]) == 1
    assert "config.json: no such file" in capsys.readouterr().err


def test_a_text_prompt_goes_through_the_tokenizer(checkpoint, tmp_path, capsys):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    tok = tokenizers.Tokenizer(WordLevel({f"w{i}": i for i in range(TINY.vocab_size)},
                                         unk_token="w0"))
    tok.pre_tokenizer = WhitespaceSplit()
    directory = tmp_path / "with_tokenizer"
    directory.mkdir()
    for f in checkpoint.iterdir():
        (directory / f.name).write_bytes(f.read_bytes())
    tok.save(str(directory / "tokenizer.json"))
    assert main(["generate", "--model", str(directory), "--prompt", "w3 w17 w99",
                 "--tokens", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "prompt     3 tokens" in out and "text       'w" in out
    assert main(["generate", "--model", str(checkpoint), "--prompt", "hello", "--quiet"]) == 1
    assert "tokenizer.json, which does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("tied", [True, False])
def test_the_roofline_counts_each_matrix_the_step_reads_once(tied):
    """The bytes of a decode step: every checkpoint weight once, except that the lookup
    reads only the step's rows of an untied embedding table (a tied one is the lm head's
    matrix, read whole once), plus each sequence's key/value cache."""
    import dataclasses
    from math import prod

    from tilesafe.models.generate import bytes_per_step
    from tilesafe.models.qwen3.weights import weight_shapes
    config = dataclasses.replace(TINY, tie_word_embeddings=tied)
    batch, context = 3, 10.5
    read = 0
    for name, shape in weight_shapes(config):
        if name == "model.embed_tokens.weight" and not tied:
            read += batch * shape[1]  # (the rows of the step's tokens)
        else:
            read += prod(shape)
    if tied:
        read += batch * config.hidden_size  # (the lookup's rows, beside the head's whole read)
    cache = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim
    assert bytes_per_step(config, context, batch) == 2 * (read + batch * cache * context)


def test_the_copy_rate_times_the_driver_copy_and_a_copy_kernel():
    """The roofline's copy rate runs both of its copies (on the interpreter here, where the
    rate means nothing but must be a rate), and the kernel copy copies exactly."""
    import math

    import numpy as np

    import tilesafe as ts
    from tilesafe.models.generate import COPY_TILE, _copy_rate, _copy_tiles
    rate = _copy_rate("cpu", 1 << 16)
    assert math.isfinite(rate) and rate > 0
    values = np.random.default_rng(3).standard_normal(3 * COPY_TILE - 5).astype(np.float32)
    src, dst = ts.tensor(values).sync(), ts.full(values.shape, np.nan, ts.float32).sync()
    _copy_tiles(ts.borrow_mut(dst).partition((COPY_TILE,)), src).sync()
    assert np.array_equal(dst.numpy(), values)
