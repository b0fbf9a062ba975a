"""Episode records round-trip JSONL."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmgym.episode import Episode, JSONLWriter, load_jsonl, save_jsonl


def _episode(seed: int) -> Episode:
    return Episode(
        env_id="llmgym/Wordle-v0",
        seed=seed,
        messages=[{"role": "user", "content": "héllo 🙂"}, {"role": "assistant", "content": "crane"}],
        turn_rewards=[0.25, 1.5],
        reward_components=[{"a": 1.0}, {"a": 0.5, "solved": 1.0}],
        terminated=True,
        token_ids=[1, 2, 3],
        mask=[0, 1, 1],
        logprobs=[0.0, -0.5, -1.25],
        turn_spans=[(1, 3)],
        group=seed // 2,
        policy="p",
        timing={"wall": 0.5},
        metadata={"model": "m"},
    )


def test_jsonl_round_trip_is_exact(tmp_path):
    episodes = [_episode(s) for s in range(5)]
    save_jsonl(episodes, tmp_path / "e.jsonl")
    assert load_jsonl(tmp_path / "e.jsonl") == episodes
    assert episodes[0].component_totals() == {"a": 1.5, "solved": 1.0}


def test_a_half_written_last_line_is_skipped(tmp_path):
    path = tmp_path / "e.jsonl"
    with JSONLWriter(path) as writer:
        writer.write(_episode(0))
    with open(path, "a") as file:
        file.write('{"env_id": "llmgym/Wor')
    assert [e.seed for e in load_jsonl(path)] == [0]


def test_corruption_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"env_id": "x", "bogus": 1}\n' + _episode(1).to_json() + "\n")
    with pytest.raises(ValueError, match="e.jsonl:1"):
        load_jsonl(path)


def test_a_complete_last_line_that_is_not_an_episode_is_an_error(tmp_path):
    # only a line cut short (never valid JSON) is skipped; a whole line of other data was silently dropped
    path = tmp_path / "e.jsonl"
    path.write_text(_episode(0).to_json() + "\n" + '{"env_id": "x", "bogus": 1}\n')
    with pytest.raises(ValueError, match="e.jsonl:2"):
        load_jsonl(path)
    path.write_text('{"step": 1, "loss": 0.5}\n')  # not an episode file at all
    with pytest.raises(ValueError, match="e.jsonl:1"):
        load_jsonl(path)


def test_env_episode_record(wordle):
    wordle.reset(seed=4)
    wordle.step("crane")
    episode = wordle.unwrapped.episode()
    assert episode.env_id == "llmgym/Wordle-v0" and episode.seed == 4
    assert episode.num_turns == 1 and len(episode.messages) == 4
    assert Episode.from_json(episode.to_json()) == episode


def test_lone_surrogates_from_an_agent_round_trip(tmp_path):
    episode = Episode("llmgym/Wordle-v0", messages=[{"role": "assistant", "content": "bad \ud800 text é"}])
    save_jsonl([episode], tmp_path / "e.jsonl")
    assert load_jsonl(tmp_path / "e.jsonl") == [episode]
    (tmp_path / "e.jsonl").read_text(encoding="utf-8")  # still valid UTF-8


def test_episode_to_json_turns_numpy_bools_and_arrays_into_plain_values():
    metadata = {"a": np.False_, "arr": np.array([[1, 2]]), "f": np.array([np.nan])}
    episode = Episode("x", terminated=np.bool_(True), metadata=metadata)
    data = json.loads(episode.to_json())
    assert data["terminated"] is True and data["metadata"] == {"a": False, "arr": [[1, 2]], "f": [None]}
