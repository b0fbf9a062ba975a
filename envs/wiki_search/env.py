"""``llmgym/WikiSearch-v0``: answer multi-hop questions by searching and reading a generated wiki.

Holds :class:`WikiSearchEnv`; its docstring documents the environment in Gymnasium's
sections (the answer check and how it could be gamed included).
"""

from __future__ import annotations

import re
from typing import Any

import bm25s

from llmgym.env import LLMEnv
from llmgym.envs.wiki_search.world import QUESTION_KINDS, Question, World, generate_world, make_question
from llmgym.rubric import Reward, Rubric, TurnContext, format_error
from llmgym.tools import ToolError, tool

__all__ = ["WikiSearchEnv", "answer_matches", "normalize"]

_WORD = re.compile(r"[a-z0-9]+")


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation, dropping a leading "the"."""
    words = _WORD.findall(text.lower())
    return words[1:] if words[:1] == ["the"] else words


def answer_matches(given: str, gold: str, slack: int = 4) -> bool:
    """True when ``gold``'s words (without a trailing "river") appear in order in a short ``given``.

    Example:
        >>> answer_matches("the Dorun River", "Dorun River"), answer_matches("1203", "1203")
        (True, True)
        >>> answer_matches("Dorun, Keltin, Osmira, Varo, Lumen, Zard", "Dorun River")
        False
    """
    words, target = normalize(given), normalize(gold)
    if target[-1:] == ["river"] and len(target) > 1:
        target = target[:-1]
    if not target or len(words) > len(target) + slack:
        return False
    return any(words[i : i + len(target)] == target for i in range(len(words) - len(target) + 1))


class WikiSearchEnv(LLMEnv):
    """Answer a multi-hop question about a generated wiki with search and read tools.

    ## Description

    Every episode generates a small wiki about fictional people, cities and
    organisations (:mod:`.world`; names from random syllables, so nothing can be
    answered from memory) and indexes its passages with BM25 (``bm25s``). The
    question needs two or three facts from different articles ("In what year was
    the city where X was born founded?"). Tools: ``search`` (BM25, top-k passage
    ids with their titles), ``read`` (one passage in full) and ``answer``.

    ## Action Space

    ``Text``: assistant text with ``<tool_call>`` blocks, or an OpenAI assistant
    message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the question, then search results (ids and titles) or a passage.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``correct`` | 1.0 | end | 1 when the answer names the gold answer (see below) |
    | ``evidence`` | 0.1 | turn | evidence passages (holding a needed fact) read for the first time this turn |
    | ``tool_cost`` | -0.01 | turn | tool calls made this turn |
    | ``format_error`` | -0.1 | turn | 1 when the turn's action was malformed |

    The turn-level ``evidence`` reward credits a useful intermediate step: a
    ``read`` that retrieved a passage holding a needed fact, as the seed paper's
    turn-level credit suggests. Search results show titles only, so evidence is
    paid for reading, once per passage.

    Answer check: case, punctuation and a leading "the" are ignored; the gold
    answer's words must appear in order, and the answer may be at most four words
    longer than the gold one ("Dorun", "the Dorun River" are right for "Dorun
    River"). An answer that also names another candidate of the wiki (a country,
    city, river, person, organisation, occupation or year other than the gold
    one) is wrong, so neither listing every name nor a short hedge ("Keltia
    Varonia Dorunia" for a question with three possible countries) pays.

    How it could be gamed, and why that does not pay: reading every passage to
    farm ``evidence`` earns at most 0.3 and pays ``tool_cost`` for each of the 56
    reads (8 cities, 14 people and 6 organisations, two passages each); stuffing
    the answer with many candidates fails the length rule; a short hedge naming
    two or more candidates is wrong; guessing a name from the question is wrong.
    ``tests/envs/test_wiki_search.py`` checks that such policies score clearly
    below the scripted honest solver.

    ## Starting State

    A wiki and a question of one of ``kinds``, generated with ``self.np_random``.

    ## Episode End

    - Terminated: the agent called ``answer``.
    - Truncated: ``max_turns`` turns or the token budget ran out.

    ## Arguments

    Args:
        max_turns: turn budget.
        kinds: question kinds to draw from (default: all of :data:`~.world.QUESTION_KINDS`).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = "Multi-hop questions over a generated wiki of fictional entities; BM25 search and read tools."
    system_prompt = (
        "Answer the question using the wiki. search(query) lists matching passages (id and title); "
        "read(doc_id) shows a passage in full. The wiki is about fictional entities: look facts up, do not guess. "
        "Finish with answer(text), a short answer. Call tools as "
        '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>.'
    )

    def __init__(self, max_turns: int = 12, kinds: tuple[str, ...] | list[str] | None = None, **kwargs: Any):
        super().__init__(max_turns=max_turns, **kwargs)
        self.kinds = tuple(kinds) if kinds else QUESTION_KINDS
        unknown = set(self.kinds) - set(QUESTION_KINDS)
        if unknown:
            raise ValueError(f"unknown question kinds {sorted(unknown)}; choose from {QUESTION_KINDS}")
        self.world: World | None = None
        self.question: Question | None = None
        self.given_answer: str | None = None
        self.reads: list[tuple[int, str]] = []  # (turn, doc_id)
        self._by_id: dict[str, int] = {}
        self._retriever: bm25s.BM25 | None = None

    def setup(self, options: dict[str, Any] | None) -> str:
        self.world = generate_world(self.np_random)
        kind = self.kinds[int(self.np_random.integers(len(self.kinds)))]
        self.question = make_question(self.world, self.np_random, kind)
        self.given_answer, self.reads = None, []
        self._by_id = {p.doc_id: i for i, p in enumerate(self.world.passages)}
        texts = [f"{p.title}. {p.text}" for p in self.world.passages]
        self._retriever = bm25s.BM25()
        self._retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        return f"Question: {self.question.text}"

    @tool
    def search(self, query: str, k: int = 5) -> str:
        """Search the wiki (BM25); returns passage ids and titles, best first.

        Args:
            query: words to look for, e.g. a name.
            k: how many results (1 to 10).
        """
        assert self.world is not None and self._retriever is not None
        if not 1 <= k <= 10:
            raise ToolError("k must be between 1 and 10")
        tokens = bm25s.tokenize([query[:500]], stopwords="en", show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            raise ToolError("the query has no searchable words")
        k = min(k, len(self.world.passages))
        ids, scores = self._retriever.retrieve(tokens, k=k, show_progress=False)
        hits = [self.world.passages[int(i)] for i, s in zip(ids[0], scores[0]) if s > 0]
        if not hits:
            return "No passage matches."
        return "\n".join(f"[{p.doc_id}] {p.title}" for p in hits)

    @tool
    def read(self, doc_id: str) -> str:
        """Read one passage in full.

        Args:
            doc_id: a passage id from search, e.g. "Varo Keltin#0".
        """
        assert self.world is not None
        index = self._by_id.get(doc_id.strip())
        if index is None:
            raise ToolError(f"no passage {doc_id[:80]!r}; use an id from search results, like 'Title#0'")
        passage = self.world.passages[index]
        self.reads.append((len(self.turn_contexts) + 1, passage.doc_id))
        return f"{passage.title} ({passage.doc_id}): {passage.text}"

    @tool
    def answer(self, text: str) -> str:
        """Give the final answer (ends the episode).

        Args:
            text: a short answer: a name, a year, a place.
        """
        if not text.strip():
            raise ToolError("the answer is empty")
        self.given_answer = text[:300]
        return "Answer recorded."

    def is_done(self) -> bool:
        return self.given_answer is not None

    @property
    def correct(self) -> bool:
        """True when the given answer matches the gold one."""
        if self.given_answer is None or self.question is None or self.world is None:
            return False
        if not answer_matches(self.given_answer, self.question.answer):
            return False
        # a short hedge ("Keltia Varonia Dorunia") names the gold answer among others: wrong
        words, gold = normalize(self.given_answer), normalize(self.question.answer)
        return not any(_contains(words, other) and not _contains(gold, other) for other in _candidates(self.world))

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(lambda ctx: 1.0 if self.correct else 0.0, weight=1.0, when="end", name="correct"),
                Reward(self._evidence, weight=0.1, name="evidence"),
                Reward(lambda ctx: float(len(ctx.tool_results)), weight=-0.01, name="tool_cost"),
                Reward(format_error, weight=-0.1),
            ]
        )

    def _evidence(self, ctx: TurnContext) -> float:
        if self.question is None:
            return 0.0
        needed = set(self.question.evidence)
        before = {doc for turn, doc in self.reads if turn < ctx.turn}
        now = {doc for turn, doc in self.reads if turn == ctx.turn}
        return float(len((now - before) & needed))


def _contains(words: list[str], part: list[str]) -> bool:
    return bool(part) and any(words[i : i + len(part)] == part for i in range(len(words) - len(part) + 1))


def _candidates(world: World) -> list[list[str]]:
    """Every answer-like value of ``world`` (names, occupations, years), normalized."""
    values: set[str] = set()
    for name, city in world.cities.items():
        values.update((name, city["country"], city["river"], str(city["founded"])))
    for name, person in world.people.items():
        values.update((name, person["occupation"], str(person["born"])))
    for name, org in world.orgs.items():
        values.update((name, str(org["founded"])))
    return [normalize(value) for value in sorted(values)]
