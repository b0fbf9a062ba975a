"""``llmgym view`` in a real headless Chromium, driven by Playwright: the page as a person uses it.

The browser is Debian's ``chromium`` (Playwright's own download needs its CDN): ``$LLMGYM_CHROMIUM``
names it, else ``.ci/chromium`` fetches it into a cache without root. The tests skip, saying why,
only when neither gives a browser that starts.

``LLMGYM_SCREENSHOTS=docs/img`` writes the screenshots of the main views there (the ones in
docs/viewer.md); otherwise they go to the test's temporary folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from llmgym.viewer.app import create_app, export_html  # noqa: E402
from llmgym.viewer.sources import Viewer  # noqa: E402
from tests.viewer.conftest import HOSTILE  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _chromium() -> str:
    given = os.environ.get("LLMGYM_CHROMIUM")
    if given:
        return given
    try:
        done = subprocess.run(["bash", str(REPO / ".ci" / "chromium")], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"no headless Chromium: .ci/chromium could not run ({err})")
    if done.returncode != 0:
        pytest.skip(f"no headless Chromium: .ci/chromium failed: {done.stderr.strip()[-300:]}")
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    with sync_api.sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        except sync_api.Error as err:
            pytest.skip(f"Chromium at {executable} does not start: {str(err).splitlines()[0]}")
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    yield page
    context.close()
    assert not errors, f"the page raised: {errors}"


class Served:
    """``llmgym view PATHS`` on a free loopback port, in a thread."""

    def __init__(self, *paths: Path):
        self.viewer = Viewer(list(paths)).start()
        config = uvicorn.Config(create_app(self.viewer), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the viewer did not start"
            time.sleep(0.02)
        self.viewer.wait()
        return f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}/"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("LLMGYM_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _rows(page) -> list[str]:
    return page.locator("#episodes-table tbody tr").all_inner_texts()


def _rewards_once_sorted(page, descending: bool, count: int = 24, timeout_s: float = 10.0) -> list[float]:
    """The reward column once the table shows ``count`` rows in that order (or whatever it shows at the timeout).

    The header marks the new order before the page has fetched and drawn the rows, so reading
    the rows right after the header changes can find the table empty (seen once in CI).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        rewards = [float(row.split("\t")[4]) for row in _rows(page)]
        if len(rewards) == count and rewards == sorted(rewards, reverse=descending):
            return rewards
        if time.monotonic() > deadline:
            return rewards
        page.wait_for_timeout(50)


def test_filter_an_eval_open_an_episode_and_read_its_turns(page, eval_folder, shots):
    with Served(eval_folder) as url:
        page.goto(url)
        page.wait_for_selector("#episodes-table tbody tr")
        assert len(_rows(page)) == 24
        assert page.inner_text("#page-info") == "1–24 of 24"
        assert "mean reward" in page.inner_text(".summary")
        # sort by reward: highest first, then lowest first
        page.click("th:has-text('reward')")
        page.wait_for_selector("th.sorted:has-text('▼')")
        rewards = _rewards_once_sorted(page, descending=True)
        assert len(rewards) == 24 and rewards == sorted(rewards, reverse=True) and rewards[0] > rewards[-1]
        page.click("th:has-text('reward')")
        page.wait_for_selector("th.sorted:has-text('▲')")
        assert _rewards_once_sorted(page, descending=False) == sorted(rewards)
        page.click("th:has-text('reward')")
        page.wait_for_selector("th.sorted:has-text('▼')")
        page.screenshot(path=str(shots / "viewer-episodes.png"), full_page=True)
        # filter: reward range and a word from the transcripts
        page.fill("#f-min-reward", "1.5")
        page.click("#f-apply")
        sync_api.expect(page.locator("#page-info")).not_to_have_text(re.compile(" of 24$"))
        high = _rows(page)
        assert high and all(float(r.split("\t")[4]) >= 1.5 for r in high)
        page.fill("#f-min-reward", "")
        page.fill("#f-text", "SOLVED IN 5")
        page.click("#f-apply")
        sync_api.expect(page.locator("#page-info")).to_have_text(re.compile(" of 2$"))
        assert all(r.split("\t")[10] == "5" for r in _rows(page))  # the turns column: solved on the fifth
        # open one: its transcript, tool calls and turn rewards
        page.click("#episodes-table tbody tr >> nth=0")
        page.wait_for_selector(".transcript")
        assert page.locator(".msg.assistant").count() == 5
        assert page.locator(".msg.tool").count() == 5
        assert "→ guess" in page.inner_text(".msg.assistant >> nth=0")
        assert '"word"' in page.inner_text(".toolcall >> nth=0")
        assert "<tool_call>" not in page.inner_text(".transcript")  # shown as a formatted call instead
        panel = page.inner_text(".msg.assistant >> nth=-1 >> aside.turn")
        assert panel.startswith("reward ") and "solved\t1\n" in panel
        assert page.locator(".msg.system details").count() == 1  # the system prompt starts collapsed
        assert "Solved in 5 guesses" in page.inner_text(".msg.tool >> nth=-1")
        page.screenshot(path=str(shots / "viewer-episode.png"), full_page=True)


def test_compare_two_runs_on_the_same_seeds(page, eval_folder, short_eval_folder, shots):
    with Served(short_eval_folder, eval_folder) as url:
        page.goto(url + "#compare")
        page.wait_for_selector("#compare-table tbody tr")
        assert "12 seeds in both" in page.inner_text("body")
        diffs = [abs(float(r.split("\t")[6])) for r in page.locator("#compare-table tbody tr").all_inner_texts()]
        assert diffs == sorted(diffs, reverse=True) and diffs[0] > 0  # where they differ most first
        page.screenshot(path=str(shots / "viewer-compare.png"), full_page=True)
        page.click("#compare-table tbody tr >> nth=0")
        page.wait_for_selector(".pair-column .transcript >> nth=1")
        assert page.locator(".pair-column").count() == 2


def test_a_training_run_shows_curves_and_tokens_coloured_by_advantage(page, run_folder, shots):
    with Served(run_folder) as url:
        page.goto(url + "#run")
        page.wait_for_selector("#charts .uplot")
        titles = page.locator(".u-title").all_inner_texts()
        assert {"reward", "KL to the reference", "clip fraction", "entropy", "tokens / s"} <= set(titles)
        page.wait_for_selector("#samples-table tbody tr")
        assert len(page.locator("#samples-table tbody tr").all_inner_texts()) == 8  # 2 groups of 4
        page.screenshot(path=str(shots / "viewer-run.png"), full_page=True)
        # the sample with the largest advantage: its policy tokens are coloured by it
        page.click("#samples-table tbody tr >> nth=0")
        page.click("#view-tokens")
        page.wait_for_selector(".tok.policy")
        assert page.locator("#token-colour").input_value() == "advantage"
        assert page.locator(".transcript").is_hidden()
        colours = page.eval_on_selector_all(".tok.policy", "spans => spans.map(s => s.style.backgroundColor)")
        assert colours and all(c.startswith("rgba(") for c in colours)
        masked = page.eval_on_selector_all(".tok.masked", "spans => spans.map(s => s.style.backgroundColor)")
        assert masked and not any(masked)
        assert "advantage" in page.get_attribute(".tok.policy >> nth=0", "title")
        page.screenshot(path=str(shots / "viewer-tokens.png"), full_page=True)


def test_episode_text_is_shown_as_text_never_run(page, hostile_file, tmp_path):
    exported = tmp_path / "report.html"
    export_html(Viewer([hostile_file]), exported)
    with Served(hostile_file) as url:
        for address in (url, exported.as_uri()):
            page.goto(address)
            page.wait_for_selector("#episodes-table tbody tr")
            assert HOSTILE[0] in page.inner_text("#episodes-table")  # the policy name, as text
            page.click("#episodes-table tbody tr >> nth=0")
            page.wait_for_selector(".transcript")
            page.click(".msg.system summary")
            for details in page.locator("details").all():
                details.evaluate("d => d.open = true")
            shown = page.inner_text("#episode")
            for text in HOSTILE:
                assert text in shown, text
            page.click("#view-tokens")
            page.wait_for_selector(".tok.policy")
            assert page.inner_text(".tokens") == HOSTILE[0] + HOSTILE[1]
            assert page.evaluate("window.__pwned") is None
            assert page.locator("#episode img, #episode script, #episode [onerror]").count() == 0
            assert page.locator("b", has_text="bold?").count() == 0


def test_the_exported_file_filters_and_opens_episodes_offline(page, eval_folder, tmp_path):
    exported = tmp_path / "report.html"
    export_html(Viewer([eval_folder]), exported)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(exported.as_uri())
    page.wait_for_selector("#episodes-table tbody tr")
    page.fill("#f-text", "solved in 5")
    page.click("#f-apply")
    sync_api.expect(page.locator("#page-info")).to_have_text(re.compile(" of 2$"))
    page.click("#episodes-table tbody tr >> nth=0")
    page.wait_for_selector(".msg.assistant")
    assert requests == [exported.as_uri()]  # everything was inside the file


def test_lines_that_are_not_episodes_are_named_above_the_table(page, eval_folder, tmp_path):
    lines = (eval_folder / "episodes.jsonl").read_bytes().splitlines()
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(b"\n".join([lines[0], b'{"env_id": "x", "seed": 1e400}', *lines[1:]]) + b"\n")
    exported = tmp_path / "report.html"
    export_html(Viewer([path]), exported)
    with Served(path) as url:
        for address in (url, exported.as_uri()):
            page.goto(address)
            page.wait_for_selector("#episodes-table tbody tr")
            assert page.inner_text("#page-info") == "1–24 of 24"
            note = page.inner_text("header .status")
            assert "1 line skipped, not episodes: line 2 (seed is out of range: reads as inf)" in note
