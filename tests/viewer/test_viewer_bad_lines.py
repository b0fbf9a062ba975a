"""Files the viewer must survive: each bad line is skipped and listed, the rest indexed, every answer 2xx."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmgym.cli import main
from llmgym.episode import Episode
from llmgym.viewer.index import EpisodeIndex, Query
from llmgym.viewer.sources import Viewer

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from llmgym.viewer.app import create_app  # noqa: E402

ENV = "llmgym/Wordle-v0"


def _good(seed: int) -> bytes:
    # a surrogate pair escape (how ensure_ascii JSON writes an emoji) is valid and must stay readable
    messages = [{"role": "user", "content": f"needle {seed} \U0001f600"}]
    return json.dumps(Episode(ENV, seed=seed, messages=messages, turn_rewards=[seed / 4]).to_dict()).encode()


def _episode_with(field: str) -> bytes:
    """An episode line whose messages hold the searched text, with ``field`` (raw JSON) added."""
    start = json.dumps({"env_id": ENV, "messages": [{"role": "user", "content": "needle"}]})
    return (start[:-1] + ", " + field + "}").encode()


# each: a line that is not an episode, and what its reason says
BAD_LINES = {
    "nested 5000 deep": (_episode_with('"metadata": {"deep": ' + "[" * 5000 + "]" * 5000 + "}"), "nested more than"),
    "nested 500 deep (readable, too deep to send)": (_episode_with('"x": ' + "[" * 500 + "]" * 500), "nested more"),
    "a 400-digit seed": (_episode_with('"seed": 1' + "0" * 399), "seed is out of range: a 400-digit number"),
    "a 1e400 seed": (_episode_with('"seed": 1e400'), "seed is out of range: reads as inf"),
    "rewards whose total overflows": (_episode_with('"turn_rewards": [1e308, 1e308]'), "total reward is out of range"),
    "binary garbage": (bytes(b for b in range(256) if b not in b"\r\n"), "not UTF-8 text"),
    "a line torn in the middle": (_good(9)[:40], "not JSON"),
    "a JSON array": (b"[1, 2]", "not an episode"),
}


def _write(path: Path, lines: list[bytes], end: bytes = b"\n") -> Path:
    path.write_bytes(b"\n".join(lines) + end)
    return path


def _client(*paths: Path) -> TestClient:
    return TestClient(create_app(Viewer(list(paths)).start().wait()))


def _get(client: TestClient, url: str, **params) -> dict:
    response = client.get(url, params=params)
    assert response.status_code == 200, (url, params, response.text)
    return response.json()


def _exported(out: Path) -> dict:
    return json.loads(re.search(r'id="llmgym-data">(.*?)</script>', out.read_text(), re.S).group(1))


@pytest.mark.parametrize("bad, reason", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_bad_line_is_skipped_listed_and_the_rest_served(tmp_path, capsys, bad, reason):
    path = _write(tmp_path / "episodes.jsonl", [_good(0), _good(1), bad, _good(2), _good(3)])
    client = _client(path)
    for _ in range(2):  # asked again, the index is not restarted: the bad line is not "unread"
        status = _get(client, "/api/info")["sources"][0]["episodes"]
        assert status["indexing"] is False and status["error"] is None and status["episodes"] == 4
    assert status["bad_line_count"] == 1 and len(status["bad_lines"]) == 1
    assert status["bad_lines"][0]["file"] == str(path) and status["bad_lines"][0]["line"] == 3
    assert reason in status["bad_lines"][0]["reason"] and len(status["bad_lines"][0]["reason"]) <= 120
    page = _get(client, "/api/episodes", sort="seed", desc="true")
    assert [row["seed"] for row in page["rows"]] == [3, 2, 1, 0]
    assert _get(client, "/api/episodes", q="needle")["total"] == 4  # a search hit in the bad line is no episode
    assert [_get(client, "/api/episode", index=i)["seed"] for i in range(4)] == [0, 1, 2, 3]

    out = tmp_path / "report.html"
    assert main(["view", str(path), "--export", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "episodes.jsonl: 4 episodes" in printed and "1 line skipped, not episodes: line 3 (" in printed
    data = _exported(out)
    assert [row["seed"] for row in data["sources"][0]["rows"]] == [0, 1, 2, 3]
    assert data["info"]["sources"][0]["episodes"]["bad_lines"][0]["line"] == 3


def test_values_json_cannot_send_are_shown_as_null_and_a_replacement_character(tmp_path, capsys):
    # Episode.to_json writes text that is not Unicode (not UTF-8) with a \\ud800 escape
    odd = Episode(ENV, seed=5, policy="p\ud800", messages=[{"role": "user", "content": "a\udc00b needle"}])
    assert "\\ud800" in odd.to_json()
    huge = _episode_with('"seed": 6, "metadata": {"big": 1e400, "long": 1' + "0" * 400 + '.0, "ok": 2.5}')
    path = _write(tmp_path / "episodes.jsonl", [_good(0), odd.to_json().encode(), huge, _good(1)])
    client = _client(path)
    assert _get(client, "/api/info")["sources"][0]["episodes"]["bad_lines"] == []
    assert [row["policy"] for row in _get(client, "/api/episodes", q="needle")["rows"]] == ["", "p\ufffd", "", ""]
    assert _get(client, "/api/episode", index=1)["messages"][0]["content"] == "a\ufffdb needle"
    assert _get(client, "/api/episode", index=2)["metadata"] == {"big": None, "long": None, "ok": 2.5}
    out = tmp_path / "report.html"
    assert main(["view", str(path), "--export", str(out)]) == 0 and "4 episodes" in capsys.readouterr().out
    records = _exported(out)["sources"][0]["episodes"]
    assert records[1]["policy"] == "p\ufffd" and records[2]["metadata"]["big"] is None


def test_compared_sources_with_bad_lines_pair_their_good_episodes(tmp_path):
    first = _write(tmp_path / "a.jsonl", [_good(0), BAD_LINES["a 1e400 seed"][0], _good(1)])
    second = _write(tmp_path / "b.jsonl", [BAD_LINES["nested 5000 deep"][0], _good(1), _good(0)])
    compared = _get(_client(first, second), "/api/compare")
    assert compared["total"] == 2 and sorted(row["seed"] for row in compared["rows"]) == [0, 1]


def test_a_torn_last_line_is_listed_until_the_file_grows(tmp_path, capsys):
    path = _write(tmp_path / "episodes.jsonl", [_good(0), _good(1), _good(2)[:30]], end=b"")
    viewer = Viewer([path]).start().wait()
    client = TestClient(create_app(viewer))
    for _ in range(2):
        status = _get(client, "/api/info")["sources"][0]["episodes"]
        assert status["indexing"] is False and status["episodes"] == 2 and status["bad_line_count"] == 1
    assert status["bad_lines"][0]["line"] == 3 and status["bad_lines"][0]["reason"].startswith("unfinished last line")
    assert _get(client, "/api/episodes")["total"] == 2
    assert main(["view", str(path), "--export", str(tmp_path / "r.html")]) == 0
    assert "2 episodes" in capsys.readouterr().out

    with open(path, "ab") as file:  # the writer finishes the line
        file.write(_good(2)[30:] + b"\n")
    _get(client, "/api/info")  # sees the file grow and reads on
    viewer.wait()
    status = _get(client, "/api/info")["sources"][0]["episodes"]
    assert status["episodes"] == 3 and status["bad_lines"] == [] and status["bad_line_count"] == 0


def test_a_last_line_without_its_newline_is_an_episode_and_lines_after_it_are_counted_right(tmp_path):
    path = _write(tmp_path / "episodes.jsonl", [_good(0), _good(1)], end=b"")
    index = EpisodeIndex(path).build()
    assert len(index) == 2 and index.bad_lines == []
    with open(path, "ab") as file:
        file.write(b"\n{oops\n" + _good(2) + b"\n")
    index.refresh()
    index.wait()
    assert len(index) == 3 and [bad["line"] for bad in index.bad_lines] == [3]
    assert index.episode(2)["seed"] == 2


def test_a_failure_outside_any_line_is_the_index_error_not_indexing_forever(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path / "episodes.jsonl", [_good(0), _good(1)])

    def fail(self, batch, read_to):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(EpisodeIndex, "_publish", fail)
    viewer = Viewer([path]).start().wait()
    client = TestClient(create_app(viewer))
    for _ in range(2):  # not restarted on every request
        status = _get(client, "/api/info")["sources"][0]["episodes"]
        assert status["indexing"] is False and "RuntimeError: disk on fire" in status["error"]
    assert _get(client, "/api/episodes")["total"] == 0
    assert main(["view", str(path), "--export", str(tmp_path / "r.html")]) == 2
    assert "cannot export episodes.jsonl" in capsys.readouterr().err and not (tmp_path / "r.html").exists()


def test_bad_lines_are_counted_all_but_listed_up_to_a_hundred(tmp_path):
    path = _write(tmp_path / "episodes.jsonl", [b"{not json"] * 150 + [_good(0)])
    index = EpisodeIndex(path).build()
    assert len(index) == 1 and index.bad_line_count == 150 and len(index.bad_lines) == 100
    assert index.page(Query(text="needle"))["total"] == 1


def test_run_metrics_and_summaries_json_cannot_send_are_skipped_or_shown_as_null(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _write(
        run / "metrics.jsonl",
        [b'{"step": 1, "loss": 0.5}', b'{"step": 2, "loss": NaN}', b'{"step": 3, "loss": 1e400}',
         b'{"step": 4, "x": ' + b"[" * 500 + b"]" * 500 + b"}", b"\xff\xfe", b'{"step": 5, "loss": 0.1}'],
    )  # fmt: skip
    (run / "config.json").write_text('{"learning_rate": Infinity, "steps": 5}')
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    _write(evaluation / "episodes.jsonl", [_good(0)])
    (evaluation / "summary.json").write_bytes(b'{"mean_reward": 1e999}')
    client = _client(run)
    rows = _get(client, "/api/metrics")["rows"]
    assert [row["step"] for row in rows] == [1, 2, 3, 5] and rows[1]["loss"] is None and rows[2]["loss"] is None
    assert _get(client, "/api/info")["sources"][0]["config"] == {"learning_rate": None, "steps": 5}
    assert _get(_client(evaluation), "/api/info")["sources"][0]["summary"] == {"mean_reward": None}


def test_an_episode_whose_file_was_removed_is_a_404(tmp_path):
    path = _write(tmp_path / "episodes.jsonl", [_good(0)])
    client = _client(path)
    path.unlink()
    assert client.get("/api/episode", params={"index": 0}).status_code == 404
    assert _get(client, "/api/info")["sources"][0]["episodes"]["bytes"] == 0
