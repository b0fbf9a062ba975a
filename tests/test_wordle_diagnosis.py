"""benchmarks/wordle_diagnosis.py: which clue a Wordle guess ignores, and the shares over an evaluation's replies."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from llmgym.envs.wordle.env import score_guess

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "wordle_diagnosis.py"


@pytest.fixture(scope="module")
def diagnosis():
    spec = importlib.util.spec_from_file_location("wordle_diagnosis", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["wordle_diagnosis"] = module
    spec.loader.exec_module(module)
    return module


def test_each_kind_of_clue_is_named(diagnosis):
    history = [("arose", score_guess("arose", "chief"))]  # x x x x Y: E somewhere but not last; A R O S absent
    assert diagnosis.broken_clues("thief", history) == set()
    assert diagnosis.broken_clues("quell", history) == set()  # E elsewhere, no absent letter: fits
    assert diagnosis.broken_clues("fiery", history) == {"grey"}  # R was shown absent
    assert diagnosis.broken_clues("lunch", history) == {"yellow_missing"}
    assert diagnosis.broken_clues("prove", history) == {"grey", "yellow_spot"}
    history.append(("widen", score_guess("widen", "chief")))  # x Y x G x
    assert "green" in diagnosis.broken_clues("quell", history)


def game(tmp_path: Path, replies: list[str], answer: str) -> Path:
    messages = [{"role": "user", "content": "Guess."}]
    for reply in replies:
        messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": "feedback"})
    last = f"{answer.upper()} G G G G G" if replies[-1] == answer else f"Out of turns. The word was {answer.upper()}."
    messages[-1] = {"role": "user", "content": last}
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps({"env_id": "llmgym/WordleCompact-v1", "seed": 1, "messages": messages}) + "\n")
    return path


def test_replies_after_the_first_are_sorted_by_kind(diagnosis, tmp_path):
    # arose; then a non-word, a repeat, a word breaking the grey R, one that fits, the answer
    found = diagnosis.diagnose(game(tmp_path, ["arose", "xqzzy", "arose", "fiery", "thief", "chief"], "chief"))
    assert found["replies_after_first"] == 5
    assert found["invalid"] == found["repeated"] == pytest.approx(0.2)
    assert found["inconsistent"] == pytest.approx(0.2) and found["consistent"] == pytest.approx(0.4)
    assert found["inconsistent_breaking"]["grey"] == 1.0 and found["inconsistent_breaking"]["green"] == 0.0
    assert found["candidates_median"]["consistent"] >= 1
    ranges = found["consistent_by_candidates"]
    assert sum(r["replies"] for r in ranges.values()) == 5 and ranges["1"]["consistent"] in (None, 1.0)
