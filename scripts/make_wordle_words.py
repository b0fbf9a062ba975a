"""Generate envs/wordle/data/{answers,guesses}.txt once; the files are committed.

Sources, both maintained and offline:
- Debian's ``wamerican`` dictionary (SCOWL): which five-letter strings are
  real lowercase English words (capitalised entries are proper nouns).
- the ``wordfreq`` package: how common each word is.

Answers: the 2,000 most frequent dictionary words that are not plurals in -s
(Wordle's convention). Guesses: every five-letter lowercase dictionary word
(roman numerals such as xviii dropped).

Run: ``apt-get install wamerican && pip install wordfreq && python scripts/make_wordle_words.py``
"""

from __future__ import annotations

import re
from pathlib import Path

import wordfreq

DICTIONARY = Path("/usr/share/dict/american-english")
OUT = Path(__file__).resolve().parent.parent / "envs" / "wordle" / "data"
NUM_ANSWERS = 2000


def main() -> None:
    words = {
        w
        for w in DICTIONARY.read_text().split()
        if re.fullmatch(r"[a-z]{5}", w) and not re.fullmatch(r"[ivxlcdm]+", w)  # no roman numerals
    }
    ranked = sorted(words, key=lambda w: (-wordfreq.word_frequency(w, "en"), w))
    singular = [w for w in ranked if not w.endswith("s") or w.endswith("ss")]
    answers = sorted(singular[:NUM_ANSWERS])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "answers.txt").write_text("\n".join(answers) + "\n")
    (OUT / "guesses.txt").write_text("\n".join(sorted(words)) + "\n")
    print(f"{len(answers)} answers, {len(words)} guesses -> {OUT}")


if __name__ == "__main__":
    main()
