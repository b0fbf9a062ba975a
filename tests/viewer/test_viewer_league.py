"""``llmgym view`` of an ``llmgym league --out`` folder in headless Chromium: the standings and the score matrix."""

from __future__ import annotations

import pytest

pytest.importorskip("playwright.sync_api")
pytest.importorskip("openskill")
pytest.importorskip("pettingzoo")

from llmgym.cli import main  # noqa: E402
from llmgym.viewer.app import export_html  # noqa: E402
from llmgym.viewer.sources import Viewer  # noqa: E402
from tests.viewer.test_viewer_browser import browser, page  # noqa: E402, F401  the browser fixtures


def test_a_league_folder_shows_its_standings_above_the_games(page, tmp_path):  # noqa: F811
    out = tmp_path / "league"
    flags = ["--player", "best=scripted:minimax", "--player", "rnd=scripted:random", "-n", "2", "--no-progress"]
    assert main(["league", "llmgym/ma-TicTacToe-v0", *flags, "--out", str(out)]) == 0
    html = tmp_path / "league.html"
    export_html(Viewer([out]).start(), html)
    page.goto(html.as_uri())
    page.wait_for_selector("#league-table tbody tr")
    standings = page.locator("#league-table tbody tr").all_inner_texts()
    assert [row.split("\t")[1] for row in standings] == ["best", "rnd"]
    assert standings[0].split("\t")[5] == "4/0/0"
    scores = page.locator("#league-scores tbody tr").all_inner_texts()
    assert scores == ["best\t–\t1", "rnd\t0\t–"]
    assert len(page.locator("#episodes-table tbody tr").all_inner_texts()) == 8
