"""Runs examples/grpo_minimal.py with a tiny budget: rollout, advantages and the clipped loss work end to end."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
TWO_TURN_VOWELS = "llmgym-test/Vowels-2turns-v0"


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    monkeypatch.syspath_prepend(str(REPO))  # for tests.trainers.toy_env
    sys.modules.pop("grpo_minimal", None)
    import grpo_minimal
    import gymnasium as gym

    from tests.trainers.toy_env import VowelsEnv

    if TWO_TURN_VOWELS not in gym.registry:  # the vowel fraction of random tokens varies: every group has signal
        gym.register(TWO_TURN_VOWELS, entry_point=VowelsEnv, kwargs={"turns": 2})
    return grpo_minimal


def test_two_steps_on_a_tiny_random_model_log_finite_numbers_and_change_the_weights(example, capsys):
    from llmgym.wrappers.models import TINY_RANDOM_SEED, tiny_random_model

    args = example.parse_args(
        [
            "--env-id",
            TWO_TURN_VOWELS,
            "--model",
            "tiny-random",
            "--steps",
            "2",
            "--prompts-per-step",
            "2",
            "--group-size",
            "2",
            "--max-new-tokens",
            "6",
            "--learning-rate",
            "1e-2",
        ]
    )
    assert (args.steps, args.group_size, args.learning_rate, args.turn_lambda) == (2, 2, 1e-2, 1.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two shared cores: one thread is several times faster for a tiny model
    try:
        model, history = example.main(args)
    finally:
        torch.set_num_threads(threads)

    assert [m["step"] for m in history] == [1, 2]
    for metrics in history:
        assert all(math.isfinite(value) for value in metrics.values()), metrics
        assert 0.0 <= metrics["reward_mean"] <= 2.0 and 0.0 <= metrics["clip_fraction"] <= 1.0
        assert metrics["episodes_kept"] > 0 and metrics["tokens_per_s"] > 0
    assert any(m["loss"] != 0.0 for m in history)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
    assert len(lines) == 2 and all("reward" in line and "tokens/s" in line for line in lines)

    untrained, _ = tiny_random_model(TINY_RANDOM_SEED)
    before, after = untrained.state_dict(), model.state_dict()
    assert any(not torch.equal(before[name], after[name].cpu()) for name in before)
