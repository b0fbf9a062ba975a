"""The viewer's byte-offset index: rows, filters, sorting, search, bad lines, a file still being written."""

from __future__ import annotations

import json

import pytest

from llmgym.episode import Episode, save_jsonl
from llmgym.viewer.index import EpisodeIndex, Query


def _episodes() -> list[Episode]:
    words = ["crane", "Crème brûlée", 'say "role"', "plain"]
    return [
        Episode(
            "llmgym/Wordle-v0",
            seed=i,
            messages=[{"role": "user", "content": "guess"}, {"role": "assistant", "content": words[i]}],
            turn_rewards=[i * 0.5],
            reward_components=[{"solved": float(i % 2), "speed": i / 10}],
            terminated=True,
            metadata={"error": "boom"} if i == 3 else {},
        )
        for i in range(4)
    ]


@pytest.fixture
def index(tmp_path) -> EpisodeIndex:
    path = tmp_path / "episodes.jsonl"
    save_jsonl(_episodes(), path)
    return EpisodeIndex(path).build()


def test_rows_filters_and_sorting(index):
    assert len(index) == 4 and index.components == ["solved", "speed"]
    rows = index.page(Query())["rows"]
    assert [r["outcome"] for r in rows] == ["failed", "solved", "failed", "error"]
    assert rows[1]["components"] == {"solved": 1.0, "speed": 0.1}
    assert index.page(Query(min_reward=0.5, max_reward=1.0))["total"] == 2
    assert [r["seed"] for r in index.page(Query(sort="component:speed", descending=True))["rows"]] == [3, 2, 1, 0]
    assert [r["seed"] for r in index.page(Query(component="solved", component_min=1))["rows"]] == [1, 3]
    assert [r["seed"] for r in index.page(Query(outcome="error"))["rows"]] == [3]
    page = index.page(Query(sort="reward", descending=True, offset=1, limit=2))
    assert page["total"] == 4 and [r["seed"] for r in page["rows"]] == [2, 1]
    for bad in (Query(sort="nope"), Query(outcome="won"), Query(component="nope")):
        with pytest.raises(ValueError):
            index.select(bad)
    with pytest.raises(IndexError):
        index.raw(4)


def test_text_search_reads_the_transcript_not_the_json_around_it(index):
    def seeds(text: str) -> list[int]:
        return [r["seed"] for r in index.page(Query(text=text))["rows"]]

    assert seeds("CRANE") == [0]
    assert seeds("crème BRÛLÉE") == [1]  # non-ASCII, any case
    assert seeds('"role"') == [2]  # a quote, escaped in the file
    assert seeds("role") == [2]  # the key "role" of every message is not the transcript
    assert seeds("assistant") == []
    assert seeds("guess") == [0, 1, 2, 3]


def test_lines_that_are_not_episodes_are_reported_and_a_growing_file_is_read_on(tmp_path):
    path = tmp_path / "e.jsonl"
    good = Episode("x", seed=0, turn_rewards=[1.0]).to_json()
    path.write_text(good + "\n{not json\n" + json.dumps([1]) + "\n" + good[:20])  # the last line still being written
    index = EpisodeIndex(path).build()
    assert len(index) == 1 and index.bad_line_count == 3 and [b["line"] for b in index.bad_lines] == [2, 3, 4]
    assert index.bad_lines[0]["reason"].startswith("not JSON") and index.bad_lines[1]["file"] == str(path)
    assert index.bad_lines[2]["reason"].startswith("unfinished last line")  # listed until it is finished
    with open(path, "a") as file:
        file.write(good[20:] + "\n")
    index.refresh()
    index.wait()
    assert len(index) == 2 and index.episode(1)["seed"] == 0
    assert index.bad_line_count == 2 and [b["line"] for b in index.bad_lines] == [2, 3]
    assert EpisodeIndex(tmp_path / "missing.jsonl").build().error.startswith("cannot read")


def test_the_index_is_answered_while_it_is_built_in_the_background(tmp_path):
    path = tmp_path / "e.jsonl"
    save_jsonl([Episode("x", seed=i, turn_rewards=[float(i)]) for i in range(5000)], path)
    index = EpisodeIndex(path).start()
    first = index.page(Query(limit=10))  # whatever has been read so far, never an error
    assert first["total"] <= 5000
    index.wait()
    assert index.page(Query(sort="reward", descending=True, limit=1))["rows"][0]["seed"] == 4999
