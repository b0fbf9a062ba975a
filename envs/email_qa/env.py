"""``llmgym/EmailQA-v0``: answer a question about a generated inbox (the ART-E task).

Holds :class:`EmailQAEnv`; its docstring documents the environment in Gymnasium's
sections (the answer check and how it could be gamed included).
"""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal
from typing import Any

from llmgym.env import LLMEnv
from llmgym.envs.email_qa.inbox import Inbox, InboxQuestion, generate_inbox, make_question
from llmgym.rubric import Reward, Rubric, TurnContext, format_error, turn_efficiency
from llmgym.tools import ToolError, tool

__all__ = ["EmailQAEnv", "is_abstention", "answer_is_right"]

_IDK = re.compile(
    r"^\s*(i\s*do(?:n'?t| not)\s*know|unknown|not found|no answer|cannot find|can'?t find|n/?a)\b", re.IGNORECASE
)
_TOKEN = re.compile(r"[a-z0-9]+")
_AMOUNT = re.compile(r"\$?\s*(\d[\d,]*(?:\.\d+)?)")  # "$1,204.50", "300", "$ 12.5"


def is_abstention(text: str) -> bool:
    """True for "I don't know" and similar (or an empty answer)."""
    return not text.strip() or bool(_IDK.match(text))


def answer_is_right(text: str, gold: str, max_words: int = 12) -> bool:
    """True when ``text`` contains ``gold`` (case and punctuation ignored) and is short.

    A ``gold`` that is an amount or a number (``"$1204.50"``) is compared as a
    number: some number in ``text`` must equal it (``"$1204.5"`` does).

    Example:
        >>> answer_is_right("The code is QWE123.", "QWE123"), answer_is_right("$1,204.50", "$1204.50")
        (True, True)
        >>> answer_is_right("$300", "$300.00"), answer_is_right("It is $1204.5", "$1204.50")
        (True, True)
        >>> answer_is_right("$1204.05", "$1204.50"), answer_is_right("$1204", "$1204.50")
        (False, False)
        >>> answer_is_right("QWE123 or ABC456 or XYZ789", "QWE123")
        False
        >>> answer_is_right(" ".join(["QWE123"] * 13), "QWE123")
        False
    """
    words = _TOKEN.findall(text.lower().replace(",", ""))
    target = _TOKEN.findall(gold.lower().replace(",", ""))
    if not target or len(words) > max_words or " or " in f" {text.lower()} ":
        return False
    amount = _AMOUNT.fullmatch(gold.strip())
    if amount:  # "$300" is "$300.00": word matching would call it a hallucination
        value = Decimal(amount.group(1).replace(",", ""))
        return any(Decimal(n.replace(",", "")) == value for n in _AMOUNT.findall(text))
    return any(words[i : i + len(target)] == target for i in range(len(words) - len(target) + 1))


class EmailQAEnv(LLMEnv):
    """Answer a question about a generated inbox with email search and read tools.

    ## Description

    Every episode generates an inbox (:mod:`.inbox`: senders, threads, dates,
    attachment names; SQLite with an FTS5 index) and asks about one fact in it:
    a confirmation code, an invoice amount, a meeting room, a tracking number, a
    file name. Some questions (``unanswerable_rate``, one in five by default) ask
    for something the inbox does not hold; then "I don't know" is the right answer.
    Tools: ``search_emails(keywords, sender, recipient, before, after)`` (FTS5
    ranked by BM25; ``sender``/``recipient`` stand for ART-E's ``from``/``to``,
    which are Python keywords), ``read_email(email_id)`` and ``answer(text, sources)``.

    ## Action Space

    ``Text``: assistant text with ``<tool_call>`` blocks, or an OpenAI assistant
    message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the question, then search results or an email.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``outcome`` | 1.0 | end | 1 right (see below); 0 "I don't know" or no answer; -1 a wrong answer |
    | ``sources`` | 0.2 | end | when right: 1 if ``sources`` cite the fact's email, at most 3 in all |
    | ``efficiency`` | 0.2 | end | when right: 1.0 answered in one turn, falling linearly to 0 at the turn budget |
    | ``format_error`` | -0.1 | turn | 1 when the turn's action was malformed |

    "I don't know" is the right answer when the inbox does not hold the fact. Otherwise
    an answer is right when, ignoring case and punctuation, it contains the
    gold value (a code, an amount, a room, a file name), no other fact of the
    inbox, and is at most 12 words long. Amounts are compared as numbers
    (``Decimal``): "$300" and "$1,204.5" are right for "$300.00" and "$1204.50",
    "$1204.05" is not. "I don't know" is recognised from a few phrasings, or an
    empty ``text``.

    How it could be gamed, and why that does not pay: guessing costs -1 when
    wrong (a hallucination costs more than abstaining), so it scores below always
    abstaining, which itself earns only on the unanswerable questions; citing every
    email earns no ``sources`` bonus (at most 3 citations), and sources pay only
    with a right answer; an answer listing several of the inbox's codes is wrong,
    and a long one fails the length rule. ``tests/envs/test_email_qa.py`` checks
    these policies against the scripted honest solver.

    ## Starting State

    An inbox and a question generated with ``self.np_random``.

    ## Episode End

    - Terminated: the agent called ``answer``.
    - Truncated: ``max_turns`` turns or the token budget ran out (``outcome`` 0).

    ## Arguments

    Args:
        max_turns: turn budget.
        unanswerable_rate: share of questions the inbox cannot answer.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = (
        "ART-E: answer questions about a generated SQLite/FTS5 inbox; wrong answers cost more than 'I don't know'."
    )
    system_prompt = (
        "You answer questions about the user's email inbox. search_emails finds emails by keywords (and optional "
        "sender, recipient, before/after dates as YYYY-MM-DD); read_email shows one email. Answer with "
        "answer(text, sources) where sources are the ids of the emails holding the answer. If the inbox does not "
        'contain the answer, answer "I don\'t know": a wrong answer is worse than no answer.'
    )

    def __init__(self, max_turns: int = 10, unanswerable_rate: float = 0.2, **kwargs: Any):
        if not 0.0 <= unanswerable_rate <= 1.0:
            raise ValueError(f"unanswerable_rate must be in [0, 1], got {unanswerable_rate}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.unanswerable_rate = unanswerable_rate
        self.inbox: Inbox | None = None
        self.question: InboxQuestion | None = None
        self.given: tuple[str, tuple[int, ...]] | None = None

    def setup(self, options: dict[str, Any] | None) -> str:
        if self.inbox is not None and self.inbox.db is not None:
            self.inbox.db.close()
        self.inbox = generate_inbox(self.np_random)
        self.question = make_question(self.inbox, self.np_random, self.unanswerable_rate)
        self.given = None
        return f"Inbox of {self.inbox.owner}. Question: {self.question.text}"

    @tool
    def search_emails(
        self,
        keywords: list[str],
        sender: str | None = None,
        recipient: str | None = None,
        before: str | None = None,
        after: str | None = None,
        max_results: int = 10,
    ) -> str:
        """Find emails containing all the keywords (subject, body, attachment names), best match first.

        Args:
            keywords: words or phrases that must all appear, e.g. ["invoice", "Brightwave"].
            sender: only emails whose From address contains this.
            recipient: only emails whose To address contains this.
            before: only emails sent before this date (YYYY-MM-DD).
            after: only emails sent after this date (YYYY-MM-DD).
            max_results: at most this many results (1 to 20).
        """
        assert self.inbox is not None and self.inbox.db is not None
        words = [k.strip() for k in keywords if k.strip()][:10]
        if not words:
            raise ToolError("give at least one keyword")
        if not 1 <= max_results <= 20:
            raise ToolError("max_results must be between 1 and 20")
        query = " AND ".join('"' + w[:100].replace('"', '""') + '"' for w in words)
        sql = (
            "SELECT e.id, e.date, e.sender, e.subject, snippet(emails_fts, 1, '', '', '...', 12) FROM emails_fts "
            "JOIN emails e ON e.id = emails_fts.rowid WHERE emails_fts MATCH ?"
        )
        params: list[Any] = [query]
        for column, value in (("e.sender", sender), ("e.recipients", recipient)):
            if value:
                sql += f" AND {column} LIKE ?"
                params.append(f"%{value[:100]}%")
        for op, value in (("<", before), (">", after)):
            if value:
                sql += f" AND e.date {op} ?"
                params.append(_iso_date(value))
        sql += " ORDER BY bm25(emails_fts), e.id LIMIT ?"
        params.append(max_results)
        rows = self.inbox.db.execute(sql, params).fetchall()
        if not rows:
            return "No emails match."
        return "\n".join(f"[{i}] {d} from {s}: {subj} | {snip}" for i, d, s, subj, snip in rows)

    @tool
    def read_email(self, email_id: int) -> str:
        """Show one email in full.

        Args:
            email_id: the id shown in search results.
        """
        assert self.inbox is not None
        if not 1 <= email_id <= len(self.inbox.emails):
            raise ToolError(f"no email {email_id}; ids run from 1 to {len(self.inbox.emails)}")
        e = self.inbox.emails[email_id - 1]
        attachments = ", ".join(e.attachments) or "none"
        return (
            f"Email {e.id} (thread {e.thread})\nFrom: {e.sender}\nTo: {e.recipients}\nDate: {e.date}\n"
            f"Subject: {e.subject}\nAttachments: {attachments}\n\n{e.body}"
        )

    @tool
    def answer(self, text: str, sources: list[int] = []) -> str:  # noqa: B006  a schema default, never mutated
        """Give the final answer (ends the episode).

        Args:
            text: the answer, or "I don't know" when the inbox does not say.
            sources: ids of the emails that hold the answer.
        """
        self.given = (text[:500], tuple(sources[:50]))
        return "Answer recorded."

    def is_done(self) -> bool:
        return self.given is not None

    def outcome(self) -> float:
        """1 right, 0 abstained or no answer, -1 wrong (see the module docstring)."""
        if self.given is None or self.question is None:
            return 0.0
        text = self.given[0]
        if self.question.answer is None:
            return 1.0 if is_abstention(text) else -1.0
        if is_abstention(text):
            return 0.0
        if not answer_is_right(text, self.question.answer):
            return -1.0
        # a hedge listing several of the inbox's facts ("QWE123 ABC456") is wrong even when short
        others = {fact["answer"] for _, fact in (self.inbox.facts if self.inbox else [])} - {self.question.answer}
        return -1.0 if any(answer_is_right(text, other) for other in others) else 1.0

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(lambda ctx: self.outcome(), weight=1.0, when="end", name="outcome"),
                Reward(self._sources, weight=0.2, when="end", name="sources"),
                Reward(
                    lambda ctx: turn_efficiency(ctx) if self.outcome() == 1.0 else 0.0,
                    weight=0.2,
                    when="end",
                    name="efficiency",
                ),
                Reward(format_error, weight=-0.1),
            ]
        )

    def _sources(self, ctx: TurnContext) -> float:
        if self.given is None or self.question is None or self.outcome() != 1.0:
            return 0.0
        cited = set(self.given[1])
        if self.question.answer is None:
            return 1.0 if not cited else 0.0
        return 1.0 if set(self.question.sources) <= cited and len(cited) <= 3 else 0.0

    def close(self) -> None:
        if self.inbox is not None and self.inbox.db is not None:
            self.inbox.db.close()
            self.inbox.db = None
        super().close()


def _iso_date(value: str) -> str:
    try:
        return date.fromisoformat(value.strip()[:10]).isoformat()
    except ValueError:
        raise ToolError(f"dates must be YYYY-MM-DD, got {value[:30]!r}") from None
