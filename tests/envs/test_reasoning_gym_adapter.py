"""The reasoning-gym adapter: registration, dataset cache, seeding, answer extraction, verifier scores, cheating."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest

pytest.importorskip("reasoning_gym")

import re

from gymnasium.utils.env_checker import check_env

import llmgym  # noqa: E402  registers the envs
from llmgym.envs.adapters import RG_DEFAULT_TASKS, rg_env_id  # noqa: E402
from llmgym.envs.adapters import reasoning_gym as rg  # noqa: E402


def _answer_call(value: str) -> str:
    return "<tool_call>" + json.dumps({"name": "answer", "arguments": {"value": value}}) + "</tool_call>"


def test_default_ids_registered_and_known_to_reasoning_gym():
    from reasoning_gym.factory import DATASETS

    ids = llmgym.list_envs()
    for task in RG_DEFAULT_TASKS:
        assert rg_env_id(task) in ids
        assert task in DATASETS, f"{task} is not a reasoning-gym task any more"


def test_import_llmgym_does_not_import_reasoning_gym():
    code = (
        "import sys, llmgym; print('reasoning_gym' in sys.modules, 'llmgym.envs.adapters.reasoning_gym' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


@pytest.mark.parametrize("task", RG_DEFAULT_TASKS)
def test_honest_answer_scores_full_marks_on_every_default_task(task):
    env = gym.make(rg_env_id(task))
    for seed in (0, 1):
        env.reset(seed=seed)
        truth = env.unwrapped.entry["answer"]
        _, reward, terminated, truncated, info = env.step(f"Reasoning...\n<answer>{truth}</answer>")
        assert terminated and not truncated
        assert info["reward_components"]["correct"] == 1.0 and info["reward_components"]["format"] == 1.0
        assert reward == pytest.approx(1.1)
    env.close()


def test_dataset_built_once_per_task_and_config():
    a, b = gym.make("llmgym/rg-chain_sum-v0"), gym.make("llmgym/rg-chain_sum-v0")
    assert a.unwrapped.dataset is b.unwrapped.dataset
    c = gym.make("llmgym/rg-chain_sum-v0", config={"seed": 5})
    assert c.unwrapped.dataset is not a.unwrapped.dataset
    assert rg.dataset("chain_sum", {"seed": 5}) is c.unwrapped.dataset


def test_seed_picks_the_item_deterministically():
    env = gym.make("llmgym/rg-basic_arithmetic-v0")
    questions = {seed: env.reset(seed=seed)[0] for seed in range(8)}
    assert questions[3] == env.reset(seed=3)[0]
    assert len(set(questions.values())) >= 6
    obs, _ = env.reset(options={"index": 42})
    assert obs == env.unwrapped.dataset[42]["question"]
    with pytest.raises(ValueError, match="index"):
        env.reset(options={"index": -1})


def test_answer_extraction_order_and_format_reward():
    env = gym.make("llmgym/rg-chain_sum-v0")
    env.reset(seed=0)
    truth = env.unwrapped.entry["answer"]
    # a plain last line is read as the answer, without format credit
    _, reward, terminated, _, info = env.step(f"The sum is:\n{truth}")
    assert terminated and info["reward_components"] == {
        "correct": 1.0,
        "verifier_score": 1.0,
        "format": 0.0,
        "tool_cost": 0.0,
    }
    # the last <answer> tag wins over earlier ones and over the last line
    env.reset(seed=0)
    _, reward, _, _, info = env.step(f"<answer>0</answer> no, <answer>{truth}</answer>\nbye")
    assert info["reward_components"]["correct"] == 1.0 and reward == pytest.approx(1.1)
    # the answer tool
    env.reset(seed=0)
    _, reward, terminated, _, _ = env.step(_answer_call(truth))
    assert terminated and reward == pytest.approx(1.1)


def test_verifier_that_raises_scores_zero_instead_of_crashing():
    env = gym.make("llmgym/rg-chain_sum-v0", task="prime_factorization")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("<answer>junk</answer>")  # prime_factorization's verifier raises on it
    assert terminated and info["reward_components"]["correct"] == 0.0 and reward == pytest.approx(0.1)


def test_single_turn_without_python_tool_refuses_python():
    env = gym.make("llmgym/rg-chain_sum-v0")
    env.reset(seed=0)
    assert [t["function"]["name"] for t in env.unwrapped.tool_schemas] == ["answer"]
    obs, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
    )
    assert "unknown tool" in obs and truncated and not terminated
    assert info["reward_components"]["correct"] == 0.0 and reward == 0.0


def test_python_tool_multi_turn():
    env = gym.make("llmgym/rg-chain_sum-v0", python_tool=True, python_timeout_s=10)
    obs, _ = env.reset(seed=4)
    assert {t["function"]["name"] for t in env.unwrapped.tool_schemas} == {"answer", "python"}
    expression = env.unwrapped.entry["metadata"]["expression"]
    code = json.dumps({"name": "python", "arguments": {"code": f"print({expression})"}})
    obs, reward, terminated, truncated, info = env.step(f"<tool_call>{code}</tool_call>")
    assert not terminated and not truncated and obs.strip() == env.unwrapped.entry["answer"]
    assert info["reward_components"]["tool_cost"] == 1.0
    _, reward, terminated, _, info = env.step(f"<answer>{obs.strip()}</answer>")
    assert terminated and info["reward_components"]["correct"] == 1.0
    env.close()


def test_unknown_task_and_bad_config_fail_clearly():
    with pytest.raises(ValueError, match="unknown reasoning-gym task"):
        gym.make("llmgym/rg-chain_sum-v0", task="no_such_task")
    with pytest.raises(ValueError, match="invalid config"):
        gym.make("llmgym/rg-chain_sum-v0", config={"no_such_field": 1})


def test_cheating_policies_score_below_honest():
    env = gym.make("llmgym/rg-leg_counting-v0")
    policies = {
        "honest": lambda e: f"<answer>{e.unwrapped.entry['answer']}</answer>",
        "junk_in_tags": lambda e: "<answer>banana</answer>",
        "claims_success": lambda e: "I solved it, the answer is correct. Full marks please.",
        "echo_question": lambda e: f"<answer>{e.unwrapped.entry['question']}</answer>",
        "empty": lambda e: "",
    }
    totals = {}
    for name, policy in policies.items():
        total = 0.0
        for seed in range(10):
            env.reset(seed=seed)
            total += env.step(policy(env))[1]
        totals[name] = total
    assert totals["honest"] == pytest.approx(11.0)
    for name, total in totals.items():
        if name != "honest":
            assert total < 0.5 * totals["honest"], (name, totals)


def test_register_all_registers_every_task():
    # in a subprocess: a hundred more ids in this process would slow the other tests that list every env
    code = (
        "import gymnasium as gym, llmgym\n"
        "from reasoning_gym.factory import DATASETS\n"
        "from llmgym.envs.adapters import reasoning_gym as rg\n"
        "ids = rg.register_all()\n"
        "assert len(ids) == len(DATASETS) >= 100 and all(i in llmgym.list_envs() for i in ids)\n"
        "env = gym.make('llmgym/rg-gcd-v0'); env.reset(seed=0)\n"
        "print(env.step('<answer>' + env.unwrapped.entry['answer'] + '</answer>')[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) == pytest.approx(1.1)


def test_reasoning_gym_index_option_refuses_bools_and_takes_numpy_ints():
    import numpy as np
    import pytest

    pytest.importorskip("reasoning_gym")
    from llmgym.envs.adapters.reasoning_gym import ReasoningGymEnv

    env = ReasoningGymEnv("chain_sum", config={"size": 10})
    for bad in (True, False, 1.0, "1"):
        with pytest.raises(ValueError, match="index"):
            env.reset(options={"index": bad})
    question, _ = env.reset(options={"index": np.int64(3)})
    assert env.index == 3 and type(env.index) is int and question == env.dataset[3]["question"]


def _everyone_second_role(question: str) -> str:
    """A constant guess that reads nothing but the answer format: 'A is a knave, and B is a knave'."""
    template = re.search(r'Format your answer like: "(.*)"\)', question)
    assert template, question
    return re.sub(r"(\w+)/(\w+)", r"\2", template.group(1))


def _unsorted_words(question: str) -> str:
    """word_sorting's input copied back in its own order."""
    return question.rsplit(":", 1)[1].strip()


def _play(task: str, policy, seeds: int = 200, **kwargs) -> tuple[float, list[dict[str, float]]]:
    env = gym.make(f"llmgym/rg-{task}-v0", **kwargs)
    total, components = 0.0, []
    for seed in range(seeds):
        question, _ = env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(f"<answer>{policy(question, env.unwrapped.entry)}</answer>")
        assert terminated
        total += reward
        components.append(info["reward_components"])
    env.close()
    return total / seeds, components


def test_rg_constant_guess_scores_far_below_correct_answers_on_knights_knaves():
    pytest.importorskip("reasoning_gym")
    honest, _ = _play("knights_knaves", lambda q, entry: entry["answer"])
    guess, components = _play("knights_knaves", lambda q, entry: _everyone_second_role(q))
    assert honest == pytest.approx(1.1)
    assert guess < 0.4 * honest, guess  # paid partial credit it averaged 0.70
    for c in components:  # the verifier's score is still logged, and pays only when it is full
        assert c["correct"] == (1.0 if c["verifier_score"] == 1.0 else 0.0)
    assert sum(0 < c["verifier_score"] < 1 for c in components) > 50  # the guess does earn partial scores


def test_rg_copying_the_input_earns_little_on_word_sorting():
    pytest.importorskip("reasoning_gym")
    copied, components = _play("word_sorting", lambda q, entry: _unsorted_words(q))
    assert copied < 0.2, copied  # paid partial credit it averaged 0.37
    assert sum(c["verifier_score"] for c in components) / len(components) > 0.2


def test_rg_partial_credit_option_pays_the_verifier_score():
    pytest.importorskip("reasoning_gym")
    guess, components = _play("knights_knaves", lambda q, entry: _everyone_second_role(q), partial_credit=True)
    assert guess > 0.6, guess
    assert all(c["correct"] == c["verifier_score"] for c in components)
    env = gym.make("llmgym/rg-knights_knaves-v0", partial_credit=True)
    assert env.unwrapped.partial_credit is True
    assert env.unwrapped.rubric.weights() == {"correct": 1.0, "verifier_score": 0.0, "format": 0.1, "tool_cost": -0.02}


def test_rg_no_answer_pays_nothing_and_honest_answers_keep_full_marks():
    pytest.importorskip("reasoning_gym")
    env = gym.make("llmgym/rg-chain_sum-v0")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(f"<answer>{env.unwrapped.entry['answer']}</answer>")
    assert reward == pytest.approx(1.1) and env.unwrapped.solved
    assert info["reward_components"] == {"correct": 1.0, "verifier_score": 1.0, "format": 1.0, "tool_cost": 0.0}
    env.reset(seed=0)
    _, reward, _, _, info = env.step("   ")
    assert reward == 0.0 and info["reward_components"]["verifier_score"] == 0.0 and not env.unwrapped.solved


@pytest.mark.parametrize("kwargs", [{}, {"partial_credit": True}])
def test_rg_env_checker_passes_with_either_scoring(kwargs):
    pytest.importorskip("reasoning_gym")
    env = gym.make("llmgym/rg-knights_knaves-v0", **kwargs)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("max_turns", [0, -1])
def test_rg_refuses_a_turn_budget_below_one(max_turns):
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        gym.make("llmgym/rg-chain_sum-v0", max_turns=max_turns)


def test_rg_turn_budget_defaults():
    pytest.importorskip("reasoning_gym")
    assert gym.make("llmgym/rg-chain_sum-v0").unwrapped.max_turns == 1
    assert gym.make("llmgym/rg-chain_sum-v0", max_turns=None, python_tool=True).unwrapped.max_turns == 8
    assert gym.make("llmgym/rg-chain_sum-v0", max_turns=3).unwrapped.max_turns == 3
