"""TextArena's games as llmgym environments: single-player as Gymnasium, multi-player as PettingZoo AEC.

Holds :class:`TextArenaEnv` (``llmgym/ta-<Game>-v0``, an :class:`~llmgym.LLMEnv`),
:func:`make_game`, :func:`render_messages`, :data:`NLTK_DATA` and
:data:`UNSUPPORTED`, and what both adapters use to play a game:
:func:`is_invalid_move_notice`, :func:`as_reward`, :func:`format_action` and
:class:`IsolatedRandom`. The multi-player games are in :mod:`.textarena_aec`
(PettingZoo AEC). Needs the ``textarena`` extra (``pip install textarena``).

What the adapter does beyond calling TextArena:

- **Make once, reset many.** Each llmgym env makes its TextArena game once
  (``ta.make`` loads dictionaries for some games) and resets that game on
  every ``reset``.
- **No history across episodes.** TextArena's ``LLMObservationWrapper``
  keeps every message of every episode (an observation grew from 915 to
  272,700 characters over 300 episodes). The adapter makes the raw game
  (``<id>-raw``) and shows each turn only the messages that turn produced;
  the chat (``info["messages"]``) starts afresh at ``reset``.
- **Seeded.** TextArena draws from the global ``random`` module. The adapter
  gives each env a private ``random`` state, seeded from ``reset(seed)``, and
  swaps it in around every call into the game (and the caller's state back
  out), so episodes are reproducible and the caller's ``random`` is untouched.
- **NLTK data.** Some games call ``nltk.download`` when imported and need
  corpora at run time. The adapter checks :data:`NLTK_DATA` before importing
  such a game and raises a ``RuntimeError`` naming the missing data (and any
  other ``LookupError`` from NLTK is turned into the same message).
- **Incremental rewards.** Each step pays what it earned: an invalid move
  costs ``invalid_penalty`` on that step, TextArena's outcome is paid on the
  last step (per agent in the AEC env).
"""

from __future__ import annotations

import os
import random
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llmgym.env import LLMEnv
from llmgym.envs.adapters import TA_DEFAULT_GAMES
from llmgym.envs.multiagent.base import without_thinking
from llmgym.rubric import Reward, Rubric, TurnContext

__all__ = [
    "TextArenaEnv",
    "make_game",
    "render_messages",
    "is_invalid_move_notice",
    "as_reward",
    "format_action",
    "IsolatedRandom",
    "NLTK_DATA",
    "UNSUPPORTED",
    "TA_DEFAULT_GAMES",
]

#: NLTK data each TextArena game (its folder in ``textarena/envs``) needs: checked before the game is imported.
NLTK_DATA: dict[str, tuple[str, ...]] = {
    "Codenames": ("corpora/words", "taggers/averaged_perceptron_tagger_eng"),
    "DontSayIt": ("corpora/words", "taggers/averaged_perceptron_tagger_eng"),
    "Wordle": ("corpora/words", "taggers/averaged_perceptron_tagger_eng"),
    "Hangman": ("corpora/words",),
    "LetterAuction": ("corpora/words",),
    "SpellingBee": ("corpora/words",),
    "WordChains": ("corpora/words",),
    "WordLadder": ("corpora/words",),
    "WordSearch": ("corpora/words",),
}

#: Games the adapter refuses (folder -> why), found with TextArena 0.7.4: they would hang the caller.
UNSUPPORTED: dict[str, str] = {
    "Stratego": "its board set-up (rejection sampling in reset) can loop forever",
}

_NLTK_RESOURCE = re.compile(r"Resource\s+'?([\w./-]+?)'?\s+not found")
_INVALID = "invalid move"
_random_lock = threading.RLock()


def _textarena() -> Any:
    try:
        import textarena
    except ImportError as err:
        raise ImportError("the TextArena adapter needs textarena: pip install 'llmgym[textarena]'") from err
    return textarena


def _missing_nltk(paths: tuple[str, ...]) -> list[str]:
    import nltk

    missing = []
    for path in paths:
        try:
            nltk.data.find(path)
        except LookupError:
            missing.append(path)
    return missing


def _nltk_error(game: str, names: list[str]) -> RuntimeError:
    downloads = " ".join(name.rsplit("/", 1)[-1] for name in names)
    return RuntimeError(
        f"TextArena game {game!r} needs NLTK data that is not installed: {', '.join(names)}. "
        f"Install it where there is network access with `python -m nltk.downloader {downloads}` "
        "(or copy an nltk_data folder to one of nltk.data.path)."
    )


def make_game(game: str, **kwargs: Any) -> Any:
    """Make TextArena's raw game ``game`` (``"TicTacToe-v0"``): no observation wrapper, no history.

    Raises:
        ValueError: unknown game, or one in :data:`UNSUPPORTED`.
        RuntimeError: the game needs NLTK data that is not installed (named in the message),
            or its code does not compile on this Python.
    """
    ta = _textarena()
    from textarena.envs.registration import ENV_REGISTRY

    raw = f"{game}-raw"
    if raw not in ENV_REGISTRY:
        # what this function can make
        known = sorted(i.removesuffix("-raw") for i in ENV_REGISTRY if i.endswith("-raw"))
        raise ValueError(f"unknown TextArena game {game!r}; known: {', '.join(known)}")
    entry = ENV_REGISTRY[raw].entry_point
    folder = entry.split(".")[2] if isinstance(entry, str) and entry.startswith("textarena.envs.") else ""
    if folder in UNSUPPORTED:
        raise ValueError(f"TextArena game {game!r} is not supported: {UNSUPPORTED[folder]}")
    missing = _missing_nltk(NLTK_DATA[folder]) if folder in NLTK_DATA else []
    if missing:  # checked before importing the game: its import calls nltk.download, which needs the network
        raise _nltk_error(game, missing)
    try:
        return ta.make(raw, **kwargs)
    except SyntaxError as err:  # the game's module uses syntax newer than this Python's (Chess, Checkers... need 3.12)
        raise RuntimeError(
            f"TextArena game {game!r} cannot be imported on Python {sys.version_info.major}.{sys.version_info.minor}: "
            f"its code has a SyntaxError ({err.msg}, {os.path.basename(err.filename or '?')} line {err.lineno}); "
            "it needs a newer Python"
        ) from err
    except LookupError as err:
        names = _NLTK_RESOURCE.findall(str(err))
        raise _nltk_error(game, names or [str(err).strip()[:200]]) from err


def render_messages(messages: list[tuple[int, str, Any]], player_id: int, roles: dict[int, str]) -> str:
    """TextArena messages as the text ``player_id`` reads; its own echoed actions are left out (the chat has them).

    A message is ``(sender, text, ObservationType)``; a few games pass the
    three in another order, so each part is recognised by its type.
    """
    lines = []
    for parts in messages:
        kind = next((p for p in parts if hasattr(p, "name")), None)
        text = next((p for p in parts if isinstance(p, str)), "").strip()
        sender = next((p for p in parts if isinstance(p, int) and not isinstance(p, bool)), -1)
        if not text or (sender == player_id and getattr(kind, "name", "") == "PLAYER_ACTION"):
            continue
        lines.append(text if sender < 0 else f"[{roles.get(sender, f'Player {sender}')}] {text}")
    return "\n\n".join(lines)


def is_invalid_move_notice(parts: tuple[Any, ...]) -> bool:
    """True for TextArena's notice of an invalid move (a GAME_ADMIN message saying so)."""
    kind = next((p for p in parts if hasattr(p, "name")), None)
    return getattr(kind, "name", "") == "GAME_ADMIN" and any(
        isinstance(p, str) and _INVALID in p.lower() for p in parts
    )


def as_reward(value: Any) -> float:
    """A TextArena reward as a float; 0.0 when a game put something else there (a few pass the reason as the reward).

    Example:
        >>> as_reward(1), as_reward("timeout"), as_reward(float("nan"))
        (1.0, 0.0, 0.0)
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if number == number else 0.0


def format_action(text: str) -> str:
    """TextArena's ``ActionFormattingWrapper``: wrap a reply without brackets in ``[...]``.

    Example:
        >>> format_action(" 4 "), format_action("I play [4]")
        ('[4]', 'I play [4]')
    """
    return text if "[" in text or "]" in text else f"[{text.strip()}]"


class IsolatedRandom:
    """A ``random`` state of its own, swapped into the global module while TextArena runs.

    A process-wide lock serialises the swaps, so envs stepped from several
    threads never see each other's state (TextArena calls take well under 1 ms).
    """

    def __init__(self) -> None:
        self.state = random.Random(0).getstate()

    def seed(self, seed: int) -> None:
        self.state = random.Random(seed).getstate()

    @contextmanager
    def active(self) -> Iterator[None]:
        with _random_lock:
            outer = random.getstate()
            random.setstate(self.state)
            try:
                yield
            finally:
                self.state = random.getstate()
                random.setstate(outer)


class TextArenaEnv(LLMEnv):
    """A TextArena single-player game as an llmgym env.

    ## Description

    TextArena's game, its rules and its outcome, made once and reset on every
    ``reset``, with what the adapter adds (no history across episodes, a private
    seeded ``random``, the NLTK data check, incremental rewards: see the module
    docstring).

    ## Action Space

    ``Text``: TextArena's actions, the move in square brackets (``[5]``,
    ``[1 2 3 4]``); a reply without brackets is wrapped in them, as TextArena's
    ``ActionFormattingWrapper`` does.

    ## Observation Space

    ``Text``: the messages TextArena produced this turn (never earlier episodes').

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``outcome`` | 1.0 | end | TextArena's reward for the player (1 a win; some games pay a completion fraction) |
    | ``invalid_move`` | -1.0 | turn | ``invalid_penalty`` when TextArena rejected the move, or there was none |

    How it could be gamed, and why that does not pay: every reply is judged by
    the game's own rules; claiming a win or spamming malformed moves is an
    invalid move (penalised; two in a row end the game on TextArena's terms),
    and only TextArena's outcome pays at the end.

    ## Starting State

    TextArena's reset of the game, seeded from ``reset(seed)`` through the env's
    private ``random`` state.

    ## Episode End

    - Terminated: TextArena says the game is over (solved, lost, or its own limits).
    - Truncated: llmgym's ``max_turns`` or the token budget ran out first.

    ## Arguments

    Args:
        game: TextArena's id (``"GuessTheNumber-v0"``).
        game_kwargs: passed to ``ta.make`` (plain data: ``{"max_number": 50}``).
        invalid_penalty: reward charged (as a negative) on each step TextArena calls an invalid move.
        max_turns: llmgym's turn budget (invalid moves and malformed replies count; the game has its own limit too).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release (one id per game, ``llmgym/ta-<Game>-v0``; TextArena's own
      version stays in ``game``).
    """

    description = "A TextArena single-player game."
    system_prompt = (
        "You are playing a text game. Read the rules, then reply with your move in square brackets, "
        "exactly as the game asks (for example [5]). Only the bracketed move is read."
    )

    def __init__(
        self,
        game: str,
        game_kwargs: dict[str, Any] | None = None,
        invalid_penalty: float = 0.1,
        max_turns: int = 100,
        **kwargs: Any,
    ):
        if not 0 <= invalid_penalty < float("inf"):  # NaN or inf would fail the rubric's finite check mid-episode
            raise ValueError(
                f"invalid_penalty is charged as a negative reward; give a finite number >= 0, got {invalid_penalty}"
            )
        self.game = game
        self.game_kwargs = dict(game_kwargs or {})
        self.invalid_penalty = float(invalid_penalty)
        self._random = IsolatedRandom()
        with self._random.active():
            self.ta_env = make_game(game, **self.game_kwargs)
            try:
                self.ta_env.reset(num_players=1, seed=0)
            except AssertionError as err:
                raise ValueError(
                    f"TextArena game {game!r} is not a single-player game ({err}); "
                    "play it with llmgym.envs.adapters.textarena_aec.aec_env"
                ) from err
        super().__init__(max_turns=max_turns, **kwargs)
        self.game_over = False
        self.outcome = 0.0
        self.invalid_turns: set[int] = set()

    def setup(self, options: dict[str, Any] | None) -> str:
        seed = int(self.np_random.integers(2**31))
        self._random.seed(seed)
        with self._random.active():
            self.ta_env.reset(num_players=1, seed=seed)
            _, messages = self.ta_env.get_observation()
        self.game_over, self.outcome = False, 0.0
        self.invalid_turns = set()
        return render_messages(messages, 0, self.ta_env.state.role_mapping)

    def on_text(self, text: str) -> str:
        turn = len(self.turn_contexts) + 1
        text = without_thinking(text)  # a move drafted while reasoning is not the move
        if not text.strip():
            self.invalid_turns.add(turn)
            return "No move found: reply with your move in square brackets, e.g. [5]."
        with self._random.active():
            try:
                done, _ = self.ta_env.step(format_action(text))
            except Exception as err:  # a game bug on odd input ends the episode; it must not crash the caller
                self.game_over = True
                return f"The game could not process this move ({type(err).__name__}: {str(err)[:200]}). Episode over."
            _, messages = self.ta_env.get_observation()
            if done:
                rewards, game_info = self.ta_env.close()
                self.outcome = as_reward((rewards or {}).get(0, 0.0))
                self.game_over = True
                if game_info.get(0, {}).get("invalid_move"):
                    self.invalid_turns.add(turn)
        observation = render_messages(messages, 0, self.ta_env.state.role_mapping)
        if any(is_invalid_move_notice(m) for m in messages):
            self.invalid_turns.add(turn)
        if self.game_over:
            reason = self.ta_env.state.game_info.get(0, {}).get("reason")
            observation = "\n\n".join(
                part for part in (observation, f"Game over: {reason}" if reason else "Game over.") if part
            )
        return observation

    def is_done(self) -> bool:
        return self.game_over

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(lambda ctx: self.outcome, weight=1.0, when="end", name="outcome"),
                Reward(self._invalid, weight=-1.0, name="invalid_move"),
            ]
        )

    def _invalid(self, ctx: TurnContext) -> float:
        bad = ctx.turn in self.invalid_turns or bool(ctx.format_errors) or bool(ctx.parsed.tool_calls)
        return self.invalid_penalty if bad else 0.0
