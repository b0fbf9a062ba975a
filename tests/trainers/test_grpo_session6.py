"""Regression tests for the GRPO trainer bugs of review session 6 (FSDP without seeds, overlong masking,
curriculum levels checked at start, resampling without repeats)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from llmgym.episode import Episode  # noqa: E402
from llmgym.trainers import grpo  # noqa: E402
from llmgym.trainers import advantages as adv  # noqa: E402
from llmgym.trainers.collect import EpisodeCollector  # noqa: E402
from llmgym.trainers.config import GRPOConfig  # noqa: E402
from llmgym.trainers.generation import Generator  # noqa: E402

from tests.trainers.toy_env import ENV_REF  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def reply(group: int, reward: float, finish: str = "stop", seed: int | None = None) -> Episode:
    return Episode("x", seed=group if seed is None else seed, group=group, turn_rewards=[reward], token_ids=[1, 2, 3],
                   mask=[0, 1, 1], metadata={"finish_reasons": [finish]})


# -- 1. FSDP with fewer seeds than ranks ----------------------------------------------------


def test_fsdp_with_fewer_prompts_than_ranks_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(grpo, "init_distributed", lambda need_group=False: (0, 2))
    monkeypatch.setattr(grpo, "load_policy_model", lambda *a: pytest.fail("the model was loaded"))
    config = GRPOConfig(env_id=ENV_REF, model="tiny-random", out=str(tmp_path), fsdp=True, prompts_per_step=1, group_size=2)
    with pytest.raises(ValueError, match=r"prompts_per_step=1 is smaller than the 2 ranks"):
        grpo.GRPOTrainer(config)


@pytest.mark.slow
def test_fsdp_two_ranks_one_prompt_exits_2_instead_of_hanging(tmp_path):
    """The reviewer's repro: before the fix rank 0 and rank 1 waited in different FSDP collectives forever."""
    (tmp_path / "cfg.toml").write_text(
        f'env_id = "{ENV_REF}"\nmodel = "tiny-random"\nout = "{tmp_path / "run"}"\nfsdp = true\nsteps = 1\n'
        "prompts_per_step = 1\ngroup_size = 4\nmax_new_tokens = 6\nprogress = false\ntorch_threads = 1\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "llmgym.trainers.grpo",
         "--config", str(tmp_path / "cfg.toml")], cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode != 0 and "prompts_per_step=1 is smaller than the 2 ranks" in done.stderr
    assert "Traceback" not in done.stderr.split("prompts_per_step=1")[0].split("\n")[-1]


# -- 3. mask_truncated and replies cut at max_new_tokens ------------------------------------------


def test_mask_truncated_leaves_out_replies_cut_at_max_new_tokens():
    episodes = [reply(0, 1.0), reply(0, 0.0, "length"), reply(0, 0.5)]
    assert [adv.cut_short(e) for e in episodes] == [False, True, False]
    masked = adv.compute_advantages(episodes, turn_lambda=0.0, mask_truncated=True)
    assert masked.keep == [True, False, True]
    unmasked = adv.compute_advantages(episodes, turn_lambda=0.0)
    assert unmasked.keep == [True, True, True]
    # the cut reply still counts in its group's mean and std
    assert masked.outcome[0] == pytest.approx(unmasked.outcome[0])


def test_only_the_last_reply_decides_and_env_truncation_still_counts():
    earlier_cut = Episode("x", metadata={"finish_reasons": ["length", "stop"]})
    assert not adv.cut_short(earlier_cut)  # the episode went on after the cut reply
    assert adv.cut_short(Episode("x", truncated=True))
    assert not adv.cut_short(Episode("x"))


# -- 4. curriculum levels checked at start ---------------------------------------------------


def curriculum_config(tmp_path, levels) -> GRPOConfig:
    return GRPOConfig(env_id=ENV_REF, model="tiny-random", out=str(tmp_path), prompts_per_step=1, group_size=2,
                      curriculum_kwarg="difficulty", curriculum_levels=levels, progress=False)


def test_a_curriculum_level_the_env_refuses_is_a_config_error_at_start(tmp_path, monkeypatch):
    monkeypatch.setattr(grpo, "load_policy_model", lambda *a: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match=r"curriculum_levels: difficulty=0 is refused by .*difficulty must be >= 1"):
        grpo.GRPOTrainer(curriculum_config(tmp_path, [1, 0]))


def test_the_cli_reports_a_bad_curriculum_level_in_one_line_with_exit_2(tmp_path, capsys):
    (tmp_path / "cfg.toml").write_text(
        f'env_id = "{ENV_REF}"\nmodel = "tiny-random"\nout = "{tmp_path / "run"}"\nprompts_per_step = 1\ngroup_size = 2\n'
        'curriculum_kwarg = "difficulty"\ncurriculum_levels = [1, 2, 0]\n'
    )
    with pytest.raises(SystemExit) as exited:
        grpo.main(["--config", str(tmp_path / "cfg.toml")])
    assert exited.value.code == 2
    assert "difficulty=0" in capsys.readouterr().err.strip().splitlines()[-1]


# -- 5. zero-signal resampling -------------------------------------------------------------------


class ScriptedGenerator(Generator):
    """Plays no env: every group of the first round has no signal, groups of fresh seeds do."""

    def __init__(self, config: GRPOConfig):
        super().__init__(config, env_id="scripted", curriculum=None, rank=0)
        self.played: list[list[int]] = []

    def rollout(self, seeds, step, attempt=0):
        self.played.append(list(seeds))
        distinct = list(dict.fromkeys(seeds))  # as the real rollout: one group per distinct seed
        return [reply(i, float(attempt > 0 and j == 0), seed=s) for i, s in enumerate(distinct) for j in range(2)]


def collect_step(**settings):
    """Collect step 0 with a :class:`ScriptedGenerator`: ``(rollouts, advantages, metrics, seeds played per round)``."""
    config = GRPOConfig(turn_lambda=0.0, group_size=2, **settings)
    generator = ScriptedGenerator(config)
    rollouts = EpisodeCollector(config, generator).collect(0)
    advantages = rollouts.advantages(config)
    return rollouts, advantages, rollouts.metrics(advantages), generator.played


def test_resampling_plays_distinct_unused_seeds_and_counts_what_it_played():
    rollouts, _, stats, played = collect_step(prompts_per_step=2, seed_pool=3, resample_zero_signal=2)
    first, fresh = played  # only the seed the draw left is fresh; never a played one again, never twice
    assert len(first) == 2 and sorted(first + fresh) == [0, 1, 2]
    assert stats["groups/resampled"] == 1 and len(rollouts.everyone) == 4
    assert {e.seed for e in rollouts.episodes} == {first[1], fresh[0]}


def test_resampled_fresh_seeds_are_distinct_in_a_large_pool():
    rollouts, _, stats, played = collect_step(prompts_per_step=2, seed_pool=2**40, resample_zero_signal=1)
    first, fresh = played
    assert len(set(fresh)) == 2 and not set(fresh) & set(first)
    assert stats["groups/resampled"] == 2 and {e.seed for e in rollouts.episodes} == set(fresh)
    assert len(rollouts.episodes) == 4


def test_zero_signal_count_and_fraction_both_describe_the_first_sampling():
    _, advantages, stats, _ = collect_step(prompts_per_step=2, seed_pool=100, resample_zero_signal=1)
    assert advantages.zero_signal_groups == 0  # the final batch: both groups replaced by groups with signal
    assert stats["groups/zero_signal"] == 2 and stats["groups/zero_signal_fraction"] == 1.0
