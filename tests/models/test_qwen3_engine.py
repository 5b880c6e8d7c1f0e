"""The Qwen3 engine against transformers, same random weights: prefill logits and greedy decode
steps (replays of the recorded decode graph) agree with transformers' bfloat16 run as closely
as that run agrees with its own float32 run (the reference), and the greedy tokens are the
same."""

from __future__ import annotations

import numpy as np
import pytest

from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.config import Qwen3Config
from tilesafe.models.qwen3.engine import Qwen3Engine

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64)
PROMPT = [3, 17, 99, 4, 60, 21, 7]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random(TINY, tmp_path_factory.mktemp("qwen3") / "tiny", seed=11,
                        progress=False)


def _hf(directory, dtype):
    model = transformers.Qwen3ForCausalLM.from_pretrained(directory, dtype=dtype)
    return model.eval()


def _hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def test_prefill_and_decode_match_transformers(checkpoint):
    engine = Qwen3Engine(checkpoint, max_seq=32)
    reference, hf_bf16 = _hf(checkpoint, torch.float32), _hf(checkpoint, torch.bfloat16)
    ours = engine.prefill(PROMPT, all_positions=True)
    want = _hf_logits(reference, PROMPT)
    theirs = _hf_logits(hf_bf16, PROMPT)
    assert ours.shape == want.shape == (len(PROMPT), TINY.vocab_size)
    scale = np.abs(want).max()
    our_error = np.abs(ours - want).max() / scale
    their_error = np.abs(theirs - want).max() / scale
    assert our_error <= 2 * their_error + 2 ** -8, (our_error, their_error)
    tokens = list(PROMPT)
    for _ in range(3):  # greedy decode steps, the cache growing by one each time
        nxt = int(np.argmax(ours[-1]))
        tokens.append(nxt)
        ours = engine.decode(nxt)[None]
        want = _hf_logits(reference, tokens)[-1:]
        theirs = _hf_logits(hf_bf16, tokens)[-1:]
        our_error = np.abs(ours - want).max() / scale
        their_error = np.abs(theirs - want).max() / scale
        assert our_error <= 2 * their_error + 2 ** -8, (our_error, their_error)
        assert int(np.argmax(ours[-1])) == int(np.argmax(want[-1]))
    graph = engine._step.graph  # one recorded step, replayed for every token
    assert len(graph.nodes) > 10 * TINY.num_hidden_layers
    # replayed back to back, the argmax kept on the device: the same greedy tokens
    assert engine.generate(PROMPT, 4) == tokens[len(PROMPT):] + [int(np.argmax(ours[-1]))]
