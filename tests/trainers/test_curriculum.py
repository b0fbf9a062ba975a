"""The difficulty curriculum: level logic by hand, then in the GRPO trainer with a toy env's ``difficulty``."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from llmgym.episode import Episode
from llmgym.trainers import grpo
from llmgym.trainers.config import GRPOConfig
from llmgym.trainers.curriculum import Curriculum, group_solve_rates
from tests.trainers.toy_env import ENV_REF


def test_group_solve_rates_count_solved_episodes_per_group():
    episodes = [
        Episode(env_id="x", group=g, turn_rewards=[r]) for g, r in [(0, 1.0), (0, 0.4), (1, 0.0), (1, 0.2), (0, 1.2)]
    ]
    assert group_solve_rates(episodes, solve_threshold=1.0) == pytest.approx([2 / 3, 0.0])
    assert group_solve_rates(episodes, solve_threshold=0.2) == pytest.approx([1.0, 0.5])


def test_promotes_only_on_a_full_window_and_empties_it():
    curriculum = Curriculum("difficulty", [1, 2, 3], promote_at=0.8, window=3)
    first = curriculum.update([1.0, 1.0])  # 2 of 3 groups: no decision yet, however good
    assert first["curriculum/change"] == 0 and curriculum.level == 1 and first["curriculum/window_groups"] == 2
    second = curriculum.update([0.5])  # window [1, 1, 0.5]: mean 0.833 >= 0.8
    assert second["curriculum/change"] == 1 and second["curriculum/level"] == 1 and second["curriculum/next_level"] == 2
    assert second["curriculum/solve_rate"] == pytest.approx(2.5 / 3)
    assert curriculum.recent == []  # the next decision is made on groups of level 2 only
    curriculum.update([1.0, 0.0, 0.5])  # mean 0.5: stays
    assert curriculum.level == 2
    curriculum.update([1.0, 1.0])  # window slides to [0.5, 1, 1]: mean 0.833
    assert curriculum.level == 3
    curriculum.update([1.0, 1.0, 1.0])  # the last level stays
    assert curriculum.level == 3 and curriculum.index == 2


def test_demotes_below_demote_at_but_never_below_the_first_level():
    curriculum = Curriculum("size", ["small", "large"], promote_at=0.9, demote_at=0.2, window=2)
    assert curriculum.update([0.0, 0.0])["curriculum/change"] == 0  # already at the first level
    curriculum.update([1.0, 0.9])
    assert curriculum.level == "large"
    result = curriculum.update([0.1, 0.2])
    assert result["curriculum/change"] == -1 and curriculum.level == "small"
    assert curriculum.env_kwargs({"size": "ignored", "turns": 2}) == {"size": "small", "turns": 2}


def test_state_round_trip_and_mismatch():
    curriculum = Curriculum("difficulty", [1, 2], promote_at=1.0, window=4)
    curriculum.update([1.0, 0.5])
    restored = Curriculum("difficulty", [1, 2], promote_at=1.0, window=4)
    restored.load_state_dict(json.loads(json.dumps(curriculum.state_dict())))
    assert (restored.index, restored.recent) == (0, [1.0, 0.5])
    with pytest.raises(ValueError, match="differs"):
        Curriculum("difficulty", [1, 2, 3]).load_state_dict(curriculum.state_dict())


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(curriculum_levels=[]), "at least one level"),
        (dict(curriculum_levels=[1, 2], curriculum_promote_at=1.5), "promote_at"),
        (dict(curriculum_levels=[1, 2], curriculum_demote_at=0.9), "demote_at"),
        (dict(curriculum_levels=[1, 2], curriculum_window=0), "window"),
        (dict(curriculum_levels=[1, 2], env_kwargs={"difficulty": 2}), "curriculum controls"),
    ],
)
def test_config_rejects_bad_curriculum_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(curriculum_kwarg="difficulty", **settings)


@pytest.mark.parametrize(
    "field, value",
    [
        ("curriculum_levels", [1, 2]),
        ("curriculum_promote_at", 0.5),
        ("curriculum_demote_at", 0.1),
        ("curriculum_window", 4),
    ],
)
def test_curriculum_settings_without_curriculum_kwarg_are_refused(field, value):
    with pytest.raises(ValueError, match=re.escape(f"{field}={value!r} needs curriculum_kwarg")):
        GRPOConfig(**{field: value})
    GRPOConfig(curriculum_kwarg="difficulty", **{field: value, "curriculum_levels": [1, 2]})


# -- in the trainer -------------------------------------------------------------------


def curriculum_config(out, **overrides) -> GRPOConfig:
    from tests.trainers.toy_env import ENV_REF

    settings = dict(
        env_id=ENV_REF,
        model="tiny-random",
        out=str(out),
        steps=3,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=4,
        learning_rate=1e-2,
        progress=False,
        plot=False,
        save_every=1,
        torch_threads=1,
        curriculum_kwarg="difficulty",
        curriculum_levels=[1, 2, 3],
        curriculum_promote_at=0.0,
        curriculum_window=2,
        solve_threshold=0.5,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def test_trainer_plays_the_current_level_logs_it_and_resumes_it(tmp_path):
    pytest.importorskip("transformers")
    from llmgym.trainers.grpo import GRPOTrainer

    # promote_at = 0 with a 2-group window: every step (2 groups) promotes, until the last level
    trainer = GRPOTrainer(curriculum_config(tmp_path, steps=2))
    trainer.train()
    trainer.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["curriculum/level"] for m in lines] == [1, 2]
    assert [m["curriculum/next_level"] for m in lines] == [2, 3]
    for m in lines:
        assert m["groups/all_solved"] + m["groups/all_failed"] <= 2 and "groups/zero_signal" in m
    state = json.loads((tmp_path / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert state["curriculum"]["index"] == 2

    resumed = GRPOTrainer(curriculum_config(tmp_path, steps=3), resume=True)
    assert resumed.curriculum.level == 3
    rollouts = resumed.collector.collect(resumed.step)  # the envs are made at the restored level
    resumed.close()
    episodes = rollouts.episodes
    assert rollouts.curriculum["curriculum/level"] == 3
    assert {e.messages[0]["content"] for e in episodes if e.messages[0]["role"] == "user"} <= {
        "Write some letters (difficulty 3)."
    }
    assert any("difficulty 3" in m["content"] for e in episodes for m in e.messages)


def config_with_levels(tmp_path, levels) -> GRPOConfig:
    return GRPOConfig(
        env_id=ENV_REF,
        model="tiny-random",
        out=str(tmp_path),
        prompts_per_step=1,
        group_size=2,
        curriculum_kwarg="difficulty",
        curriculum_levels=levels,
        progress=False,
    )


def test_a_curriculum_level_the_env_refuses_is_a_config_error_at_start(tmp_path, monkeypatch):
    """Regression: a level the env refuses used to pass at start and fail only when the curriculum reached it."""
    monkeypatch.setattr(grpo, "load_policy_model", lambda *a: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match=r"curriculum_levels: difficulty=0 is refused by .*difficulty must be >= 1"):
        grpo.GRPOTrainer(config_with_levels(tmp_path, [1, 0]))


def test_the_cli_reports_a_bad_curriculum_level_in_one_line_with_exit_2(tmp_path, capsys):
    (tmp_path / "cfg.toml").write_text(
        f'env_id = "{ENV_REF}"\nmodel = "tiny-random"\nout = "{tmp_path / "run"}"\n'
        "prompts_per_step = 1\ngroup_size = 2\n"
        'curriculum_kwarg = "difficulty"\ncurriculum_levels = [1, 2, 0]\n'
    )
    with pytest.raises(SystemExit) as exited:
        grpo.main(["--config", str(tmp_path / "cfg.toml")])
    assert exited.value.code == 2
    assert "difficulty=0" in capsys.readouterr().err.strip().splitlines()[-1]


def resume_with(tmp_path, monkeypatch, saved_curriculum, config_curriculum):
    """A trainer resumed from a checkpoint saved with or without a curriculum, configured with or without one."""
    pytest.importorskip("transformers")
    from llmgym.trainers.curriculum import Curriculum

    folder = tmp_path / "checkpoints" / "step_000001"
    folder.mkdir(parents=True)
    state = {"step": 1, "episodes_seen": 4, "seed_sampler": np.random.default_rng(0).bit_generator.state}
    if saved_curriculum:
        state["curriculum"] = Curriculum("difficulty", [1, 2]).state_dict()
    (folder / "trainer_state.json").write_text("{}")
    monkeypatch.setattr(grpo, "load_checkpoint", lambda folder, model, optimizer: state)
    curriculum = dict(curriculum_kwarg="difficulty", curriculum_levels=[1, 2]) if config_curriculum else {}
    config = GRPOConfig(env_id=ENV_REF, model="tiny-random", out=str(tmp_path), progress=False, **curriculum)
    trainer = grpo.GRPOTrainer(config, resume=True)
    trainer.close()
    return trainer


@pytest.mark.parametrize("saved, configured", [(True, False), (False, True)])
def test_resume_with_or_without_a_curriculum_the_checkpoint_lacks_is_an_error(tmp_path, monkeypatch, saved, configured):
    """docs/training.md: resuming with another curriculum kwarg is an error (none counts as another)."""
    with pytest.raises(ValueError, match="curriculum"):
        resume_with(tmp_path, monkeypatch, saved, configured)
    trainer = resume_with(tmp_path / "same", monkeypatch, saved, saved)  # the same settings resume
    assert trainer.step == 1
