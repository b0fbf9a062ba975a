"""What limits a Wordle player: its guesses sorted by which part of the feedback they ignore.

Holds :func:`diagnose`, which reads an evaluation's ``episodes.jsonl`` (``llmgym eval`` on a Wordle id)
and returns, over every reply after the first:

- ``invalid``: replies that are not a dictionary word (vocabulary recall: the player could not name
  a word at all);
- ``repeated``: valid words guessed before;
- ``consistent``: valid words that fit every earlier feedback line (could be the answer);
- ``inconsistent``: the other valid words, and among them the share that break each kind of clue
  (one guess may break several): ``grey`` (uses a letter shown absent), ``green`` (moves a letter
  off a green spot), ``yellow_missing`` (leaves out a letter shown present), ``yellow_spot`` (puts a
  letter back where it was yellow);
- ``candidates_median``: the median number of common answers (all 2,000) still possible when the
  player guessed, for its consistent and for its inconsistent guesses: whether it fails where
  few words remain or everywhere;
- ``consistent_by_candidates``: per range of that number (``"1"``, ``"2-3"``, ... ``">100"``), how
  many replies were made there and the share that fit the feedback (non-words and repeats count as
  not fitting).

Run: ``python benchmarks/wordle_diagnosis.py runs/wordle_agent/eval-sft/episodes.jsonl [...]``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from llmgym.envs.wordle.env import fits_feedback, load_words, plain_guess, score_guess
from llmgym.episode import iter_jsonl

__all__ = ["broken_clues", "diagnose", "game_of"]

CLUES = ("grey", "green", "yellow_missing", "yellow_spot")
#: The ranges of ``consistent_by_candidates``: (label, fewest, most) common answers still possible.
RANGES = (("1", 1, 1), ("2-3", 2, 3), ("4-10", 4, 10), ("11-30", 11, 30), ("31-100", 31, 100), (">100", 101, 10**6))


def game_of(messages: list[dict[str, Any]]) -> tuple[str | None, list[str | None]]:
    """An episode's answer (from its last observation) and the word each reply named (``None``: no word)."""
    last = messages[-1]["content"] if messages else ""
    found = re.search(r"(?m)^([A-Z]{5}) G G G G G$|The word was ([A-Z]{5})", last)
    answer = (found.group(1) or found.group(2)).lower() if found else None
    return answer, [plain_guess(m["content"] or "") for m in messages if m["role"] == "assistant"]


def broken_clues(word: str, history: list[tuple[str, str]]) -> set[str]:
    """Which kinds of clue in ``history`` (``(guess, "GYx..")`` pairs) ``word`` breaks."""
    broken = set()
    for guess, feedback in history:
        present = {g for g, mark in zip(guess, feedback) if mark in "GY"}
        for position, (letter, mark) in enumerate(zip(guess, feedback)):
            if mark == "G" and word[position] != letter:
                broken.add("green")
            elif mark == "Y" and word[position] == letter:
                broken.add("yellow_spot")
            elif mark == "x" and letter not in present and letter in word:
                broken.add("grey")
        if any(letter not in word for letter in present):
            broken.add("yellow_missing")
    return broken


def diagnose(path: Path) -> dict[str, Any]:
    """Counts and shares of every reply after the first, by kind (see the module docstring)."""
    answers, valid_words = load_words()
    counts = {"replies": 0, "invalid": 0, "repeated": 0, "consistent": 0, "inconsistent": 0}
    clues = dict.fromkeys(CLUES, 0)
    remaining: dict[str, list[int]] = {"consistent": [], "inconsistent": []}
    by_range = {label: [0, 0] for label, _, _ in RANGES}  # replies made there, of them fitting
    for episode in iter_jsonl(path):
        answer, words = game_of(episode.messages)
        if answer is None:
            continue
        history: list[tuple[str, str]] = []
        for index, word in enumerate(words):
            valid = word is not None and word in valid_words
            if index > 0 and history:
                kind = _kind(word, valid, history)
                counts["replies"] += 1
                counts[kind] += 1
                possible = sum(fits_feedback(a, history) for a in answers)
                label = next(label for label, low, high in RANGES if low <= possible <= high)
                by_range[label][0] += 1
                by_range[label][1] += kind == "consistent"
                if kind in remaining:
                    remaining[kind].append(possible)
                if kind == "inconsistent":
                    for clue in broken_clues(word, history):
                        clues[clue] += 1
            if valid and word not in {g for g, _ in history}:
                history.append((word, score_guess(word, answer)))
    replies, inconsistent = max(counts["replies"], 1), max(counts["inconsistent"], 1)
    return {
        "replies_after_first": counts["replies"],
        **{kind: counts[kind] / replies for kind in ("invalid", "repeated", "consistent", "inconsistent")},
        "inconsistent_breaking": {clue: clues[clue] / inconsistent for clue in CLUES},
        "candidates_median": {kind: statistics.median(v) if v else None for kind, v in remaining.items()},
        "consistent_by_candidates": {
            label: {"replies": made, "consistent": fitting / made if made else None}
            for label, (made, fitting) in by_range.items()
        },
    }


def _kind(word: str | None, valid: bool, history: list[tuple[str, str]]) -> str:
    if not valid:
        return "invalid"
    if word in {g for g, _ in history}:
        return "repeated"
    return "consistent" if fits_feedback(word, history) else "inconsistent"


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        print(argument, json.dumps(diagnose(Path(argument)), indent=1))
