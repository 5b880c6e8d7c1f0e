"""The Qwen3 engine split over two ranks (two processes, gloo, the interpreter): each holds half
of the heads and of the MLP, the o and down projections' partial products are summed by
``tilesafe.distributed.all_reduce`` (in the prefill and between the recorded graphs of the
decode step), and both ranks compute the same logits and tokens as each other, as close to
transformers' float32 run as the single-process engine is, and the same greedy tokens as it.
Wrong splits and a missing process group are refused before anything is loaded."""

from __future__ import annotations

import traceback

import numpy as np
import pytest

from tilesafe.errors import ArgumentError
from tilesafe.models.checkpoint import write_random
from tilesafe.models.qwen3.config import Qwen3Config
from tilesafe.models.qwen3.engine import Qwen3Engine

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SPLIT = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64)
PROMPT = [3, 17, 99, 4, 60, 21, 7]
RANKS, STEPS = 2, 5


def _run(engine):
    """What the test compares: the prompt's logits, greedy tokens (the recorded decode step
    replayed), and one more step's logits through ``decode``."""
    logits = engine.prefill(PROMPT, all_positions=True)
    tokens = engine.generate(PROMPT, STEPS)
    after = engine.decode(tokens[-1])
    return logits, tokens, after


def _rank(rank: int, directory: str, init_file: str, results) -> None:
    try:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=RANKS)
        try:
            engine = Qwen3Engine(directory, max_seq=32, tensor_parallel=RANKS)
            assert (engine.heads, engine.kv_heads, engine.intermediate) == (2, 1, 48)
            outcome = _run(engine)
            (step,) = engine._steps.values()  # graphs between the two sums of each layer
            assert step.graph is None and len(step.parts) == 4 * SPLIT.num_hidden_layers + 1
            results.put((rank, outcome))
        finally:
            dist.destroy_process_group()
    except BaseException:
        results.put((rank, traceback.format_exc()))
        raise


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random(SPLIT, tmp_path_factory.mktemp("qwen3-tp") / "split", seed=5,
                        progress=False)


def test_two_ranks_compute_what_one_process_does(checkpoint, tmp_path, run_ranks):
    results, exits = run_ranks(_rank, (str(checkpoint), str(tmp_path / "init")), RANKS)
    got = {}
    for rank, value in results:
        assert not isinstance(value, str), f"rank {rank}:\n{value}"
        got[rank] = value
    assert sorted(got) == [0, 1] and exits == [0, 0]
    (logits, tokens, after), (logits1, tokens1, after1) = got[0], got[1]
    # the ranks hold the same sums: the same logits, bit for bit, and the same tokens
    assert np.array_equal(logits, logits1) and tokens == tokens1 and np.array_equal(after,
                                                                                    after1)
    single = Qwen3Engine(checkpoint, max_seq=32)
    want_logits, want_tokens, _ = _run(single)
    assert tokens == want_tokens
    reference = transformers.Qwen3ForCausalLM.from_pretrained(checkpoint,
                                                              dtype=torch.float32).eval()
    theirs = transformers.Qwen3ForCausalLM.from_pretrained(checkpoint,
                                                           dtype=torch.bfloat16).eval()
    with torch.no_grad():
        want = reference(torch.tensor([PROMPT])).logits[0].float().numpy()
        bf16 = theirs(torch.tensor([PROMPT])).logits[0].float().numpy()
    scale = np.abs(want).max()
    their_error = np.abs(bf16 - want).max() / scale
    for ours in (logits, want_logits):  # split or not, as close as transformers' bf16 run
        assert np.abs(ours - want).max() / scale <= 2 * their_error + 2 ** -8


def test_splits_that_do_not_divide_the_model_and_a_missing_group_are_refused(checkpoint):
    with pytest.raises(ArgumentError, match="tensor_parallel=3 does not divide the model's 4 "
                                            "query heads"):
        Qwen3Engine(checkpoint, tensor_parallel=3)
    with pytest.raises(ArgumentError, match="tensor_parallel=0 must be an int >= 1"):
        Qwen3Engine(checkpoint, tensor_parallel=0)
    with pytest.raises(ArgumentError, match="needs an initialized torch.distributed process "
                                            "group"):
        Qwen3Engine(checkpoint, tensor_parallel=2)


def test_generate_split_over_two_torchrun_ranks_makes_the_single_process_tokens(checkpoint,
                                                                                 capsys):
    import os
    import subprocess
    import sys
    from tilesafe.cli import main
    command = ["generate", "--model", str(checkpoint), "--device", "cpu", "--prompt-tokens",
               "5", "--tokens", "6", "--quiet"]
    assert main(command) == 0
    alone = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tokens")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                          "2", "-m", "tilesafe", *command, "--tp", "2"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "split over 2 ranks" in run.stdout
    assert [line for line in run.stdout.splitlines() if line.startswith("tokens")] == alone
    assert main(command + ["--tp", "2"]) == 1  # not under torchrun: refused, with the fix
    assert "needs 2 processes started by torchrun" in capsys.readouterr().err
