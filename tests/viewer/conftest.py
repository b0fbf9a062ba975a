"""Data the viewer tests show: real eval folders and a real training run, made once per session.

Puts the repository root on ``sys.path`` (the training run plays the trainer tests' toy env,
``tests.trainers.toy_env``), as ``tests/trainers/conftest.py`` does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmgym.episode import Episode, save_jsonl

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

#: Text an LLM could write that a careless page would run as markup.
HOSTILE = [
    '<script>window.__pwned = "script"</script>',
    '<img src="x" onerror="window.__pwned = \'img\'">',
    "</script><b>bold?</b>",
]


def _eval(out: Path, *extra: str) -> Path:
    from llmgym.cli import main

    code = main(["eval", "llmgym/Wordle-v0", "--policy", "scripted:wordle", "-n", "12", "--group-size", "2",
                 "--out", str(out), "--no-progress", *extra])  # fmt: skip
    assert code == 0
    return out


@pytest.fixture(scope="session")
def eval_folder(tmp_path_factory) -> Path:
    """``llmgym eval`` of the scripted Wordle solver: 12 seeds x 2 episodes."""
    return _eval(tmp_path_factory.mktemp("eval") / "solver")


@pytest.fixture(scope="session")
def short_eval_folder(tmp_path_factory) -> Path:
    """The same seeds with 3 guesses instead of 6: the solver fails some, so the two runs differ."""
    return _eval(tmp_path_factory.mktemp("eval") / "three-guesses", "--env-kwargs", '{"max_turns": 3}')


@pytest.fixture(scope="session")
def hostile_file(tmp_path_factory) -> Path:
    """Episodes whose transcript holds HTML and script tags, in every kind of message."""
    path = tmp_path_factory.mktemp("hostile") / "episodes.jsonl"
    call = {"id": "c1", "type": "function", "function": {"name": HOSTILE[1], "arguments": '{"x": "' + "<b>" + '"}'}}
    messages = [
        {"role": "system", "content": HOSTILE[2]},
        {"role": "user", "content": HOSTILE[0]},
        {"role": "assistant", "content": "<think>" + HOSTILE[1] + "</think>" + HOSTILE[0], "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": HOSTILE[0], "content": HOSTILE[1]},
    ]
    episode = Episode(
        "llmgym/Wordle-v0", seed=0, messages=messages, turn_rewards=[0.5],
        reward_components=[{HOSTILE[1]: 0.5}], policy=HOSTILE[0],
        token_ids=[1, 2], mask=[0, 1], logprobs=[0.0, -0.5],
        metadata={"token_text": [HOSTILE[0], HOSTILE[1]], "error": HOSTILE[1], "error_source": "policy"},
    )  # fmt: skip
    save_jsonl([episode], path)
    return path


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory) -> Path:
    """A 3-step GRPO run of a tiny random model on a two-turn toy env, with samples.jsonl."""
    pytest.importorskip("transformers")
    from llmgym.trainers.config import GRPOConfig
    from llmgym.trainers.grpo import GRPOTrainer
    from tests.trainers.toy_env import ENV_REF

    out = tmp_path_factory.mktemp("run") / "vowels"
    config = GRPOConfig(
        env_id=ENV_REF, env_kwargs={"turns": 2}, model="tiny-random", out=str(out), steps=3,
        prompts_per_step=2, group_size=4, max_new_tokens=8, learning_rate=1e-2, progress=False,
        plot=False, torch_threads=1, sample_groups=2,
    )  # fmt: skip
    trainer = GRPOTrainer(config)
    trainer.train()
    trainer.close()
    return out
