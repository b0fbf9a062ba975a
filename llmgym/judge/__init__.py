"""LLM-as-judge rewards: an LLM grades episodes against written criteria.

The modules, each one job:

- :mod:`~llmgym.judge.judges`: :class:`LLMJudge` (grades one episode: a per-episode
  reward), :func:`judge_reward` (an LLMJudge as a rubric :class:`~llmgym.rubric.Reward`),
  :class:`JudgeRubric` (a rubric with the judge and its error metric),
  :class:`GroupJudge` / :func:`group_judge` (grades the G episodes of a GRPO group
  relative to each other in one call, as ART's RULER does);
- :mod:`~llmgym.judge.prompts`: :data:`JUDGE_SYSTEM_PROMPT`,
  :data:`GROUP_JUDGE_SYSTEM_PROMPT`, :func:`render_transcript` and the quoting of
  the untrusted transcript;
- :mod:`~llmgym.judge.verdict`: :class:`Verdict`, :func:`parse_verdict`,
  :func:`parse_group_verdict`;
- :mod:`~llmgym.judge.cache`: :class:`VerdictCache` (in-memory LRU plus an optional
  SQLite file);
- :mod:`~llmgym.judge.backend`: the judge model behind a Policy or an
  OpenAI-compatible endpoint, and :class:`JudgeConfigError`.

The judge is any OpenAI-compatible endpoint (``base_url=``: vLLM, OpenAI,
``llmgym serve``), talked to with the ``openai`` client, or any llmgym
:class:`~llmgym.policy.Policy` (``policy=``). The prompt is documented in
:data:`JUDGE_SYSTEM_PROMPT` and :data:`GROUP_JUDGE_SYSTEM_PROMPT`:

- the criteria and an optional reference answer come from the environment
  author and are trusted;
- the transcript is untrusted: it sits between a begin and an end marker that
  carry a nonce derived from a hash of the transcript itself, so the agent
  cannot write the end marker and step out of the quoted region, and the judge
  is told that everything between the markers is data, never instructions;
- the verdict is one JSON object, ``{"reasoning": str, "score": 0..10}`` (group:
  ``{"reasoning": str, "scores": [G numbers in 0..10]}``), parsed strictly:
  anything else (prose, a missing, extra or repeated key, a score out of range,
  a string score) gives ``fallback_score``, counts in ``stats["parse_errors"]``, is
  logged, and never raises. An unreachable backend does the same
  (``stats["backend_errors"]``).

Rewards are the score divided by 10, in ``[0, 1]``. Verdicts are cached by a
hash of the judge's name, the sampling settings and the full prompt.
"""

from llmgym.judge.backend import JudgeConfigError
from llmgym.judge.cache import VerdictCache
from llmgym.judge.judges import GroupJudge, JudgeRubric, LLMJudge, group_judge, judge_reward
from llmgym.judge.prompts import GROUP_JUDGE_SYSTEM_PROMPT, JUDGE_SYSTEM_PROMPT, render_transcript
from llmgym.judge.verdict import Verdict, parse_group_verdict, parse_verdict

__all__ = [
    "JUDGE_SYSTEM_PROMPT",
    "GROUP_JUDGE_SYSTEM_PROMPT",
    "Verdict",
    "VerdictCache",
    "JudgeConfigError",
    "LLMJudge",
    "GroupJudge",
    "JudgeRubric",
    "judge_reward",
    "group_judge",
    "parse_verdict",
    "parse_group_verdict",
    "render_transcript",
]
