"""``llmgym/rg-<task>-v0``: reasoning-gym's procedural tasks as llmgym environments.

Holds :class:`ReasoningGymEnv`, :func:`dataset` (the per-process dataset
cache), :func:`extract_answer`, :func:`register_all` and :data:`FULL_SCORE`
(the verifier score that counts as correct). Needs the
``reasoning-gym`` extra (``pip install reasoning-gym``).

:class:`ReasoningGymEnv`'s docstring has where the answer is read from, the rewards and
why they are all or nothing by default, in Gymnasium's sections.

Registration: importing reasoning_gym builds every task module (3.5 s here),
so ``import llmgym`` registers only :data:`~llmgym.envs.adapters.RG_DEFAULT_TASKS` by name, without
importing it; :func:`register_all` registers every task.
"""

from __future__ import annotations

import json
import numbers
import re
import threading
from typing import Any

from llmgym.env import LLMEnv
from llmgym.envs.adapters import RG_DEFAULT_TASKS, register_rg, rg_env_id
from llmgym.rubric import Reward, Rubric, TurnContext
from llmgym.sandbox import LazySandbox, SandboxLimits
from llmgym.tools import ToolError, tool

__all__ = ["ReasoningGymEnv", "RG_DEFAULT_TASKS", "FULL_SCORE", "dataset", "extract_answer", "register_all"]

#: Items per dataset: reasoning-gym datasets are virtual (item ``i`` is made from ``seed + i`` on demand).
DATASET_SIZE = 100_000

#: The verifier score from which an answer is fully correct (verifiers return exactly 1.0 for it; the
#: margin keeps a full score summed in floats, such as 0.3 + 0.7 * n / n, from being read as partial).
FULL_SCORE = 1.0 - 1e-9

_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
_datasets: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()

SYSTEM_PROMPT = (
    "Solve the problem. Think step by step, then give only the final answer between <answer> and </answer> "
    "tags (or call the answer tool). Do not explain your reasoning inside the answer tags; when the question "
    "shows an answer format or an example, follow it exactly."
)
PYTHON_PROMPT = (
    " You may run Python with the python tool "
    '(<tool_call>{"name": "python", "arguments": {"code": "print(2 + 2)"}}</tool_call>) before answering; '
    "a reply without a tool call is taken as your final answer."
)


def dataset(task: str, config: dict[str, Any] | None = None) -> Any:
    """The reasoning-gym dataset of ``task`` with ``config``, built once per process.

    Args:
        task: a reasoning-gym task name (``reasoning_gym.factory.DATASETS``).
        config: the task's config fields (``seed`` defaults to 0, ``size`` to :data:`DATASET_SIZE`).

    Raises:
        ImportError: reasoning-gym is not installed.
        ValueError: unknown task or invalid config.
    """
    config = {"seed": 0, "size": DATASET_SIZE, **(config or {})}
    key = (task, json.dumps(config, sort_keys=True, default=str))
    with _lock:
        if key not in _datasets:
            try:
                import reasoning_gym
                from reasoning_gym.factory import DATASETS
            except ImportError as err:
                raise ImportError(
                    "the reasoning-gym adapter needs reasoning-gym: pip install 'llmgym[reasoning-gym]'"
                ) from err
            if task not in DATASETS:
                raise ValueError(f"unknown reasoning-gym task {task!r}; known: {', '.join(sorted(DATASETS))}")
            try:
                _datasets[key] = reasoning_gym.create_dataset(task, **config)
            except (TypeError, AssertionError) as err:
                raise ValueError(f"invalid config for reasoning-gym task {task!r}: {err}") from err
        return _datasets[key]


def extract_answer(text: str) -> tuple[str | None, bool]:
    """``(answer, tagged)`` from a reply: the last ``<answer>`` tag, else the last non-empty line.

    Example:
        >>> extract_answer("2 + 2 is 4.\\n<answer> 4 </answer>")
        ('4', True)
        >>> extract_answer("Let me think.\\nThe result: 4\\n")
        ('The result: 4', False)
        >>> extract_answer("   ")
        (None, False)
    """
    matches = _ANSWER_TAG.findall(text)
    if matches:
        return matches[-1].strip(), True
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1], False) if lines else (None, False)


class ReasoningGymEnv(LLMEnv):
    """One reasoning-gym task: answer a generated question, scored by the task's own verifier.

    ## Description

    Each episode is one item of a reasoning-gym dataset; the reply is scored by the
    task's own verifier (``dataset.score_answer(answer, entry)``), and by default only
    a fully correct answer (verifier score 1) is paid. Single-turn by default; with
    ``python_tool=True`` the agent may run Python in :mod:`llmgym.sandbox` for several
    turns before answering.

    ## Action Space

    ``Text``: the reply. The answer is read from, first match wins:

    1. an ``answer`` tool call (``{"name": "answer", "arguments": {"value": ...}}``);
    2. the last ``<answer>...</answer>`` in the reply (reasoning-gym's own convention);
    3. the last non-empty line of a reply without tool calls (no ``format`` credit).

    ## Observation Space

    ``Text``: the task's question, then (``python_tool``) what a program printed.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``correct`` | 1.0 | end | 1 when the verifier's score is 1, else 0 (``partial_credit=True``: the score) |
    | ``verifier_score`` | 0 | end | metric: the verifier's score in [0, 1] (0: no answer, or it raised) |
    | ``format`` | 0.1 | end | 1 when the answer came from the ``answer`` tool or ``<answer>`` tags |
    | ``tool_cost`` | -0.02 | turn | python calls this turn (``python_tool=True`` only) |

    Why all or nothing by default: many verifiers give partial credit that a
    constant policy collects without solving anything. Paid as is, the
    ``knights_knaves`` verifier's 0.3 + 0.7 x (share of people right) made
    "everyone is the second role" average 0.70 over 200 seeds against 1.1 for
    correct answers, and copying ``word_sorting``'s words back unsorted 0.37;
    ``gsm_symbolic`` and ``power_function`` give 0.01 to any wrong number, and
    reasoning-gym's default verifier pays len(gold) / len(answer) to an answer
    that merely contains the gold one. Under GRPO that slope is learnt instead of
    the task. ``partial_credit=True`` pays the raw score, for those who want
    reasoning-gym's shaping.

    How it could be gamed, and why that does not pay: with the default, a junk
    or constant answer in tags earns ``format`` (0.1) plus 1 only when the guess
    happens to be fully right: "everyone is the second role" now averages 0.39 on
    knights_knaves (the items where everyone is a knave), the input order 0.14 on
    word_sorting. The question holds no answer to copy, and the python sandbox
    sees neither the dataset nor llmgym's sources.
    ``tests/envs/test_reasoning_gym_adapter.py`` checks that such policies score
    far below an honest one.

    ## Starting State

    ``reset(seed=s)`` picks an item of the dataset with ``self.np_random``;
    ``reset(options={"index": i})`` picks item ``i``. The dataset is shared by every
    env of the process with the same task and config (:func:`dataset`).

    ## Episode End

    - Terminated: an answer was given (single-turn: the first reply).
    - Truncated: ``max_turns`` turns or the token budget ran out without an answer.

    ## Arguments

    Args:
        task: the reasoning-gym task name (``"chain_sum"``).
        config: the task's config (plain data; ``seed`` picks the dataset, default 0).
        python_tool: offer the ``python`` tool and several turns (default: single turn).
        partial_credit: pay the verifier's score as ``correct`` (reasoning-gym's partial
            credit); by default only a fully correct answer is paid.
        max_turns: turn budget, at least 1 (default ``None``: 1, or 8 with ``python_tool``).
        sandbox_backend: ``"subprocess"``, ``"docker"`` or ``"auto"`` for the python tool.
        python_timeout_s: wall-clock limit of one python call.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    Raises:
        ValueError: ``max_turns < 1``, an unknown task or an invalid config.

    The sandbox starts on the first python call; :meth:`close` releases it.

    ## Version History

    - v0: initial release (one id per task, ``llmgym/rg-<task>-v0``).
    """

    description = "A reasoning-gym task; the answer is scored by reasoning-gym's own verifier."

    def __init__(
        self,
        task: str,
        config: dict[str, Any] | None = None,
        python_tool: bool = False,
        partial_credit: bool = False,
        max_turns: int | None = None,
        sandbox_backend: str = "subprocess",
        python_timeout_s: float = 5.0,
        **kwargs: Any,
    ):
        if config is not None and not isinstance(config, dict):
            raise TypeError(f"config must be a dict of the task's config fields, got {type(config).__name__}")
        if max_turns is not None and max_turns < 1:  # 0 is not "the default": say so before building the dataset
            raise ValueError(f"max_turns must be >= 1 (or None for the default), got {max_turns}")
        self.task = task
        self.config = dict(config or {})
        self.dataset = dataset(task, self.config)
        self.python_tool = bool(python_tool)
        self.partial_credit = bool(partial_credit)
        if max_turns is None:
            max_turns = 8 if self.python_tool else 1
        super().__init__(max_turns=max_turns, **kwargs)
        if not self.python_tool:
            del self.tools["python"]
            self.tool_schemas = [t.schema for t in self.tools.values()]
        self.system_prompt = SYSTEM_PROMPT + (PYTHON_PROMPT if self.python_tool else "")
        self.sandbox_backend = sandbox_backend
        options = {"pool_size": 2} if sandbox_backend == "subprocess" else {}
        limits = SandboxLimits(wall_time_s=python_timeout_s, cpu_time_s=python_timeout_s, memory_mb=1024)
        self._sandbox = LazySandbox(sandbox_backend, limits, role="reasoning_gym", **options)
        self.index = 0
        self.entry: dict[str, Any] = {}
        self.given_answer: str | None = None
        self.tagged = False
        self.answered = False
        self._score: float | None = None

    def setup(self, options: dict[str, Any] | None) -> str:
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.dataset)))
        elif isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= index < len(self.dataset):
            raise ValueError(f"options['index'] must be an int in [0, {len(self.dataset)}), got {index!r}")
        self.index = index = int(index)  # a numpy integer is fine; True is not item 1
        self.entry = self.dataset[index]
        self.given_answer, self.tagged, self.answered = None, False, False
        self._score: float | None = None
        return self.entry["question"]

    # -- tools -------------------------------------------------------------------

    @tool
    def answer(self, value: str) -> str:
        """Give the final answer (ends the episode).

        Args:
            value: the answer, in the format the question asks for.
        """
        self._record(value.strip(), tagged=True)
        return f"Answer recorded: {value.strip()[:200]}"

    @tool(max_output_chars=4096)
    def python(self, code: str) -> str:
        """Run a Python program in a sandbox (no network, a few seconds) and return what it prints.

        Args:
            code: the program; print the values you need.
        """
        result = self._sandbox.run(code)
        if not result.ok:
            raise ToolError(result.to_text(3000))
        return result.to_text(3000)

    def on_text(self, text: str) -> str:
        answer, tagged = extract_answer(text)
        self._record(answer, tagged)
        shown = "(none)" if answer is None else answer[:200]
        return f"Answer recorded: {shown}"

    def _record(self, answer: str | None, tagged: bool) -> None:
        self.given_answer, self.tagged, self.answered = answer, tagged, True

    def is_done(self) -> bool:
        return self.answered

    @property
    def score(self) -> float:
        """The verifier's score of the given answer (0 when none, or when the verifier raises)."""
        if self._score is None:
            self._score = 0.0
            if self.given_answer is not None:
                try:
                    self._score = min(1.0, max(0.0, float(self.dataset.score_answer(self.given_answer, self.entry))))
                except Exception:  # a verifier that chokes on a malformed answer scores it 0
                    self._score = 0.0
        return self._score

    @property
    def solved(self) -> bool:
        """True when the verifier scores the given answer as fully correct (see :data:`FULL_SCORE`)."""
        return self.score >= FULL_SCORE

    def close(self) -> None:
        self._sandbox.close()
        super().close()

    # -- rewards -----------------------------------------------------------------

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(self._correct, weight=1.0, when="end", name="correct"),
                Reward(lambda ctx: self.score if self.answered else 0.0, weight=0.0, when="end", name="verifier_score"),
                Reward(
                    lambda ctx: 1.0 if self.answered and self.tagged and self.given_answer else 0.0,
                    weight=0.1,
                    when="end",
                    name="format",
                ),
                Reward(self._python_calls, weight=-0.02, name="tool_cost"),
            ]
        )

    def _correct(self, ctx: TurnContext) -> float:
        if not self.answered:
            return 0.0
        return self.score if self.partial_credit else float(self.solved)

    def _python_calls(self, ctx: TurnContext) -> float:
        return float(sum(1 for name, _ in ctx.tool_results if name == "python")) if self.python_tool else 0.0


def register_all() -> list[str]:
    """Register every reasoning-gym task (imports reasoning_gym: a few seconds); returns the ids.

    ``composite`` (a mix of other tasks that needs a config) is registered too;
    make it with ``gym.make(id, config={...})``.
    """
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError as err:
        raise ImportError("the reasoning-gym adapter needs reasoning-gym: pip install 'llmgym[reasoning-gym]'") from err
    for task in sorted(DATASETS):
        register_rg(task)
    return [rg_env_id(task) for task in sorted(DATASETS)]
