"""The one progress bar (``llmgym.progress.ProgressBar``): what it draws on stderr; a hidden one draws nothing."""

from __future__ import annotations

from llmgym.policy import Generation, Policy
from llmgym.progress import ProgressBar
from llmgym.rollout import rollout


def test_the_bar_counts_on_stderr_with_its_metric(capsys):
    with ProgressBar("episodes", total=3, completed=1, metric="mean reward") as bar:
        bar.advance(value=0.25)
        bar.update(3, value=0.5)
    assert bar.completed == 3
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout stays clean for --json and printed metrics
    assert "episodes" in captured.err and "3/3" in captured.err and "mean reward 0.500" in captured.err


def test_a_bar_without_a_metric_shows_the_count_only(capsys):
    with ProgressBar("SFT", total=2) as bar:
        bar.advance(2)
    err = capsys.readouterr().err
    assert "SFT" in err and "2/2" in err and "reward" not in err


def test_a_hidden_bar_counts_and_draws_nothing(capsys):
    bar = ProgressBar("GRPO", total=4, completed=2, metric="reward", shown=False)
    bar.advance(value=1.0)
    bar.close()
    bar.close()  # twice is harmless
    assert bar.completed == 3 and capsys.readouterr() == ("", "")


class _Crane(Policy):
    async def agenerate(self, request):
        return Generation({"role": "assistant", "content": "crane"})


def test_a_rollout_shows_its_episodes_and_their_mean_reward(capsys):
    episodes = rollout("llmgym/Wordle-v0", _Crane(), seeds=2, progress=True)
    mean = sum(e.total_reward for e in episodes) / len(episodes)
    err = capsys.readouterr().err
    assert "episodes" in err and "2/2" in err and f"mean reward {mean:.3f}" in err
