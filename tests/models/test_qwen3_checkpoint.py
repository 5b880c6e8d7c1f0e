"""Qwen3 configs and checkpoints: the named sizes have the published parameter counts, a
random checkpoint is written in Hugging Face's format (transformers loads it with no missing or
unexpected weight, sharded with an index or in one file), its values a function of the seed and
shapes (not of the threads drawing them), read back memory-mapped and checked against its
config, and bad directories are refused naming what is wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilesafe.errors import ArgumentError
from tilesafe.models.checkpoint import Checkpoint, random_weights, write_random
from tilesafe.models.qwen3.config import NAMED_CONFIGS, Qwen3Config, named
from tilesafe.models.qwen3.weights import is_norm, weight_shapes

TINY = Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16)


@pytest.mark.parametrize("name, billions", [("qwen3-0.6b", 0.6), ("qwen3-1.7b", 1.7),
                                            ("qwen3-4b", 4.0), ("qwen3-8b", 8.2),
                                            ("qwen3-14b", 14.8), ("qwen3-32b", 32.8)])
def test_named_sizes_have_the_published_parameter_counts(name, billions):
    assert abs(named(name).parameter_count() / 1e9 - billions) < 0.05 * billions


def test_an_unknown_size_lists_the_known_ones():
    with pytest.raises(ArgumentError, match="unknown model size 'qwen3-3b'") as info:
        named("qwen3-3b")
    assert all(n in str(info.value) for n in NAMED_CONFIGS)


@pytest.mark.parametrize("shard_bytes", [1 << 30, 20_000])
def test_a_random_checkpoint_loads_in_transformers_and_back(tmp_path, shard_bytes):
    transformers = pytest.importorskip("transformers")
    root = write_random(TINY, tmp_path / "tiny", seed=3, progress=False,
                        shard_bytes=shard_bytes)
    files = sorted(p.name for p in root.iterdir())
    if shard_bytes < 1 << 30:
        assert "model.safetensors.index.json" in files and len(files) > 3
    else:
        assert files == ["config.json", "model.safetensors"]
    model, info = transformers.Qwen3ForCausalLM.from_pretrained(root, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ckpt = Checkpoint(root)
    ckpt.check(weight_shapes(TINY))
    ours = ckpt.get("model.layers.1.mlp.down_proj.weight").astype(np.float32)
    theirs = model.model.layers[1].mlp.down_proj.weight.float().detach().numpy()
    assert np.array_equal(ours, theirs)
    assert Qwen3Config.from_dir(root) == TINY
    norm = ckpt.get("model.norm.weight").astype(np.float32)
    assert abs(float(norm.mean()) - 1.0) < 0.05  # norm scales near 1, matrices near 0
    assert write_random(TINY, root, seed=3, progress=False) == root  # reused, not rewritten


def test_random_values_depend_on_the_seed_and_shapes_not_on_the_threads(tmp_path):
    """``random_weights`` gives the same values bit for bit whatever the number of threads
    filling the chunks (chunks of 64 here: tensors of several chunks, the last one partial),
    chunk ``c`` of tensor ``i`` drawn by ``default_rng([seed, i, c])`` and rounded to the dtype
    as ``astype`` rounds; another seed gives other values; and ``write_random`` writes the same
    bytes with 1 thread or 3."""
    from ml_dtypes import bfloat16
    shapes = [("a.weight", (7, 50)), ("b_norm.weight", (130,)), ("c.weight", (0, 4)),
              ("d.weight", (64, 3))]

    def draw(dtype, seed=7, workers=1):
        return list(random_weights(shapes, dtype, seed=seed, std=0.02, is_norm=is_norm,
                                   workers=workers, chunk=64))

    def same(a, b):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    one = draw(bfloat16)
    assert [(name, a.shape) for name, a in one] == shapes
    for workers in (2, 3, 8):
        assert all(same(a, b) for (_, a), (_, b) in zip(one, draw(bfloat16, workers=workers)))
    wide = draw(np.float32, workers=3)
    assert all(same(a, b.astype(bfloat16)) for (_, a), (_, b) in zip(one, wide))
    flat = wide[0][1].reshape(-1)  # 350 values: chunks 0..4 full, chunk 5 of 30
    for c, n in ((0, 64), (5, 30)):
        drawn = np.random.default_rng([7, 0, c]).standard_normal(n, dtype=np.float32)
        assert same(flat[64 * c:64 * c + n], drawn * np.float32(0.02))
    norm = wide[1][1]  # (is_norm: 1 + N(0, std))
    assert abs(float(norm.mean()) - 1) < 0.01 and abs(float(wide[3][1].mean())) < 0.01
    assert len({flat[64 * c:64 * c + 30].tobytes() for c in range(6)}) == 6
    other = draw(np.float32, seed=8, workers=2)
    assert not any(np.array_equal(a, b) for (_, a), (_, b) in zip(wide, other) if a.size)
    with pytest.raises(ArgumentError, match="workers=0 must be an int >= 1"):
        draw(np.float32, workers=0)
    files = [write_random(TINY, tmp_path / str(w), seed=3, progress=False, workers=w)
             / "model.safetensors" for w in (1, 3)]
    assert files[0].read_bytes() == files[1].read_bytes()


def test_a_checkpoint_that_does_not_match_its_config_is_refused(tmp_path):
    root = write_random(TINY, tmp_path / "tiny", progress=False)
    bigger = Qwen3Config(**{**TINY.__dict__, "intermediate_size": 64})
    with pytest.raises(ArgumentError, match=r"mlp.gate_proj.weight has shape \(48, 32\), the "
                       r"config says \(64, 32\)"):
        Checkpoint(root).check(weight_shapes(bigger))
    tied = Qwen3Config(**{**TINY.__dict__, "tie_word_embeddings": True})
    tied_root = write_random(tied, tmp_path / "tied", progress=False)
    Checkpoint(tied_root).check(weight_shapes(tied))
    with pytest.raises(ArgumentError, match="lm_head.weight is missing"):
        Checkpoint(tied_root).check(weight_shapes(TINY))


def test_bad_directories_and_configs_say_what_is_wrong(tmp_path):
    with pytest.raises(ArgumentError, match="config.json: no such file"):
        Qwen3Config.from_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ArgumentError, match="model_type is 'llama'"):
        Qwen3Config.from_dir(tmp_path)
    with pytest.raises(ArgumentError, match=r"no \*.safetensors file"):
        Checkpoint(tmp_path)
    data = {**TINY.to_json_dict(), "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    with pytest.raises(ArgumentError, match="RoPE scaling"):
        Qwen3Config.from_dict(data)
    with pytest.raises(ArgumentError, match="hidden_act is 'gelu'"):  # (it ran as SiLU)
        Qwen3Config.from_dict({**TINY.to_json_dict(), "hidden_act": "gelu"})
    plain = {**TINY.to_json_dict(), "rope_scaling": {"rope_type": "default"}}
    assert Qwen3Config.from_dict(plain) == Qwen3Config.from_dict(TINY.to_json_dict())
    with pytest.raises(ArgumentError, match="not a multiple of num_key_value_heads"):
        Qwen3Config(**{**TINY.__dict__, "num_attention_heads": 5})


def test_the_rope_base_is_read_from_either_field():
    data = TINY.to_json_dict()
    del data["rope_theta"]
    data["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e5}
    assert Qwen3Config.from_dict(data).rope_theta == 5e5
