"""The Qwen3 engine on cuda:0 with a small random checkpoint (head_dim 128, GQA): greedy tokens
of prompts of different lengths equal transformers' float32 run of each prompt, the prompt's
logits are as close to that run as transformers' own bfloat16 run, and sampled tokens equal
``sample`` of the teacher-forced logits with their random stream, and a batch of the three
prompts decodes each as it decodes alone."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.kernels as K
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.config import Qwen3Config
from tilesafe.models.qwen3.engine import Qwen3Engine

GPU = "cuda:0"
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = Qwen3Config(vocab_size=1000, hidden_size=256, intermediate_size=512,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=128)
PROMPTS = [[3, 17, 99, 4, 60, 21, 7, 500, 999, 12], [5, 9, 31, 77], [100, 2, 8]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random(SMALL, tmp_path_factory.mktemp("qwen3-gpu") / "small", seed=3,
                        progress=False)


def _hf(directory, dtype):
    return transformers.Qwen3ForCausalLM.from_pretrained(directory, dtype=dtype).eval()


def test_the_engine_on_the_gpu_matches_transformers(checkpoint):
    reference, theirs = _hf(checkpoint, torch.float32), _hf(checkpoint, torch.bfloat16)
    engine = Qwen3Engine(checkpoint, device=GPU, max_seq=64)
    ours = engine.prefill(PROMPTS[0], all_positions=True)
    with torch.no_grad():
        want = reference(torch.tensor([PROMPTS[0]])).logits[0].float().numpy()
        bf16 = theirs(torch.tensor([PROMPTS[0]])).logits[0].float().numpy()
    scale = np.abs(want).max()
    assert np.abs(ours - want).max() / scale <= 2 * np.abs(bf16 - want).max() / scale + 2 ** -8
    made = [engine.generate([prompt], 8)[0] for prompt in PROMPTS]
    for prompt, tokens in zip(PROMPTS, made):
        with torch.no_grad():
            out = reference.generate(torch.tensor([prompt]), max_new_tokens=8,
                                     min_new_tokens=8, do_sample=False, pad_token_id=0)
        assert tokens == out[0, len(prompt):].tolist()


def test_sampling_on_the_gpu_follows_its_streams(checkpoint):
    options = dict(temperature=0.8, top_k=40, top_p=0.95, seed=77)
    engine = Qwen3Engine(checkpoint, device=GPU, max_seq=64)
    made = engine.generate(PROMPTS[:1], 6, **options)[0]
    assert engine.generate(PROMPTS[:1], 6, **options)[0] == made
    forced = Qwen3Engine(checkpoint, device=GPU, max_seq=64)
    logits = forced.prefill(PROMPTS[0])[None]
    for g in range(6):
        rows = ts.tensor(np.atleast_2d(logits), device=GPU).sync()
        want = K.sample(rows, offset=g, **options).sync().numpy()
        assert made[g] == int(want[0])
        logits = forced.decode([made[g]])


def test_a_batch_on_the_gpu_decodes_each_prompt_as_alone(checkpoint):
    """Three prompts of different lengths in one engine (batch 3: one KV-cache write of the
    three slots per layer and step, one recorded step for all): each sequence's greedy
    tokens are those of the batch-1 engine."""
    alone = Qwen3Engine(checkpoint, device=GPU, max_seq=64)
    want = [alone.generate([prompt], 8)[0] for prompt in PROMPTS]
    engine = Qwen3Engine(checkpoint, device=GPU, max_seq=64, batch=3)
    assert engine.generate(PROMPTS, 8) == want


def test_the_recorded_step_at_4b_shapes_is_deterministic(tmp_path):
    """Two layers of Qwen3-4B's shapes (the shipped GEMV configs of its projections and LM
    head): 64 greedy tokens twice from one recorded step, then from an engine recorded anew,
    are the same tokens. Random weights leave the logits nearly tied, so a result that
    changed between replays (a race) would change the tokens within a few steps: a GEMV
    variant whose loop trip count was compiled in did, inside the 4b step
    (benchmarks/results/h200-2026-12-02b/)."""
    import dataclasses
    from tilesafe.models.qwen3.config import named
    config = dataclasses.replace(named("qwen3-4b"), num_hidden_layers=2)
    directory = write_random(config, tmp_path / "two-layers", seed=4, progress=False)
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, config.vocab_size, 64)]
    engine = Qwen3Engine(directory, device=GPU, max_seq=256)
    first = engine.generate([prompt], 64)[0]
    assert engine.generate([prompt], 64)[0] == first
    assert Qwen3Engine(directory, device=GPU, max_seq=256).generate([prompt], 64)[0] == first
