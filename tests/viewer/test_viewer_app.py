"""``llmgym view``'s API, command line and export, without a browser."""

from __future__ import annotations

import json
import re

import pytest

from llmgym.cli import main
from llmgym.viewer.app import export_html
from llmgym.viewer.sources import Viewer, ViewerError
from tests.viewer.conftest import HOSTILE

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from llmgym.viewer.app import create_app  # noqa: E402


def test_the_api_pages_filters_and_opens_episodes(eval_folder):
    client = TestClient(create_app(Viewer([eval_folder]).start().wait()))
    info = client.get("/api/info").json()
    assert info["sources"][0]["kind"] == "eval" and info["sources"][0]["episodes"]["episodes"] == 24
    page = client.get("/api/episodes", params={"sort": "reward", "desc": "true", "limit": 5}).json()
    assert page["total"] == 24 and len(page["rows"]) == 5
    assert client.get("/api/episodes", params={"q": "solved in 5"}).json()["total"] == 2
    assert client.get("/api/episode", params={"index": 3}).json()["seed"] == 1
    assert client.get("/api/episode", params={"index": 99}).status_code == 404
    bad = client.get("/api/episodes", params={"sort": "nope"})
    assert bad.status_code == 400 and "cannot sort" in bad.json()["detail"]
    home = client.get("/")
    assert "script-src 'self'" in home.headers["content-security-policy"] and 'src="static/app.js"' in home.text
    assert client.get("/static/uPlot.iife.min.js").status_code == 200
    assert client.get("/static/..%2Fapp.py").status_code == 404


def test_compare_puts_the_seeds_that_differ_most_first(eval_folder, short_eval_folder):
    compared = Viewer([short_eval_folder, eval_folder]).start().wait().compare()
    assert compared["total"] == 12 and compared["only_first"] == compared["only_second"] == 0
    diffs = [abs(r["diff"]) for r in compared["rows"]]
    assert diffs == sorted(diffs, reverse=True) and diffs[0] > 1
    assert compared["rows"][0]["a"]["solved"] == 0 and compared["rows"][0]["b"]["solved"] == 1


def test_the_export_is_one_file_whose_data_cannot_end_its_script(hostile_file, tmp_path):
    out = tmp_path / "report.html"
    export_html(Viewer([hostile_file]), out)
    html = out.read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html)  # nothing loaded from elsewhere
    data = re.search(r'<script type="application/json" id="llmgym-data">(.*?)</script>', html, re.S).group(1)
    assert "<" not in data and json.loads(data)["sources"][0]["episodes"][0]["messages"][1]["content"] == HOSTILE[0]


def test_the_command_refuses_what_it_cannot_show(tmp_path, capsys):
    assert main(["view", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["view", str(tmp_path)]) == 2
    assert "neither episodes.jsonl" in capsys.readouterr().err
    assert main(["view", "a", "b", "c"]) == 2
    (tmp_path / "file").write_text("")
    assert main(["view", str(tmp_path / "file"), "--export", str(tmp_path / "file" / "x.html")]) == 2
    with pytest.raises(ViewerError):
        Viewer([])


def test_the_command_exports(eval_folder, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["view", str(eval_folder), "--export", str(out), "--export-episodes", "5"]) == 0
    assert "5 episodes (the first 5 of 24)" in capsys.readouterr().out
    assert (
        len(
            json.loads(re.search(r'id="llmgym-data">(.*?)</script>', out.read_text(), re.S).group(1))["sources"][0][
                "rows"
            ]
        )
        == 5
    )
