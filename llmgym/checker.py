"""Checking an environment against the llmgym contract.

Holds :func:`check_env`, which runs every check below on an environment id
(or an instance) and returns a :class:`CheckReport` of :class:`CheckResult`
lines, each PASS, FAIL or SKIP with the fix to apply when it fails:

- ``gymnasium``: Gymnasium's own ``check_env`` on ``env.unwrapped``.
- ``determinism``: the same seed and the same actions give the same episode,
  and the same environment state (its plain-data attributes); SKIP for an env
  registered with ``nondeterministic=True``.
- ``fuzz``: hostile actions (garbage, malformed and unknown tool calls, wrong
  argument types, 1 MB strings, control characters) never raise and get a
  text observation inside the observation space.
- ``rewards``: rewards are finite floats, explained by their components.
- ``episode_jsonl``: ``LLMEnv.episode()`` survives a JSONL round trip.
- ``budgets``: episodes end by ``max_turns`` and by the token budget.
- ``tool_schemas``: tool schemas are OpenAI function schemas whose
  parameters are valid JSON Schema (Draft 2020-12).
- ``timing``: steps per second (never fails).

``llmgym check ENV_ID`` prints the same report. The checker drives the
environment only through the Gymnasium API plus, for :class:`~llmgym.LLMEnv`
subclasses, their episode record and budgets. What one step and one tool schema
must look like is in :mod:`llmgym.contract`; the env state the ``determinism``
check compares is read by :mod:`llmgym.env_state`.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from llmgym.contract import step_problem, tool_schema_problems
from llmgym.env import LLMEnv
from llmgym.env_state import first_difference, plain_state
from llmgym.episode import load_jsonl, save_jsonl
from llmgym.fuzzing import WORDS, hostile_actions, sample_arguments
from llmgym.parsing import clip_text

__all__ = ["CheckResult", "CheckReport", "check_env", "hostile_actions", "sample_arguments"]

Action = Any
Agent = Callable[[str], Action]


@dataclass
class CheckResult:
    """One check's verdict.

    Attributes:
        name: the check (``determinism``, ``fuzz``...).
        passed: True, False, or None when the check was skipped.
        summary: one line saying what was checked or what went wrong.
        fix: what to change when it failed.
        details: further lines (the failing actions, warnings...).
    """

    name: str
    passed: bool | None
    summary: str
    fix: str = ""
    details: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP``."""
        return {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]


@dataclass
class CheckReport:
    """Every check's verdict for one environment.

    ``assert report.passed, str(report)`` in a test prints the whole report on failure
    (pytest shows a message that is not a ``str`` as a repr cut to about 240 characters).
    """

    env_id: str
    results: list[CheckResult] = field(default_factory=list)
    steps_per_second: float = 0.0

    @property
    def passed(self) -> bool:
        """True when no check failed (skipped checks do not count)."""
        return all(r.passed is not False for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        """The checks that failed."""
        return [r for r in self.results if r.passed is False]

    def __getitem__(self, name: str) -> CheckResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"no check named {name!r}; checks: {[r.name for r in self.results]}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "env_id": self.env_id,
            "passed": self.passed,
            "steps_per_second": self.steps_per_second,
            "results": [
                {"name": r.name, "status": r.status, "summary": r.summary, "fix": r.fix, "details": r.details}
                for r in self.results
            ],
        }

    def __str__(self) -> str:
        lines = [f"llmgym check {self.env_id}"]
        for r in self.results:
            lines.append(f"  {r.status}  {r.name:<14} {r.summary}")
            lines.extend(f"        {d}" for d in r.details[:8])
            if len(r.details) > 8:
                lines.append(f"        ... and {len(r.details) - 8} more")
            if r.passed is False and r.fix:
                lines.append(f"        fix: {r.fix}")
        verdict = "PASSED" if self.passed else f"FAILED ({len(self.failures)} of {len(self.results)} checks)"
        lines.append(f"  {verdict}")
        return "\n".join(lines)


def check_env(
    env: str | gym.Env,
    *,
    episodes: int = 5,
    seed: int = 0,
    agent: Agent | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> CheckReport:
    """Check an environment against the llmgym contract.

    Args:
        env: a registered id (made with ``gymnasium.make``) or an environment.
        episodes: random episodes played for the reward and timing checks.
        seed: the first seed; every episode's seed derives from it.
        agent: optional ``agent(observation) -> action`` (a scripted solver)
            mixed into the random episodes so rewards for success are checked too.
        env_kwargs: keyword arguments for ``gymnasium.make`` when ``env`` is an id.

    Returns:
        the report; ``report.passed`` is False when any check failed.

    Raises:
        gymnasium.error.Error: ``env`` is an id that is not registered.

    Example:
        >>> import llmgym
        >>> report = check_env("llmgym/Wordle-v0", episodes=1)
        >>> report.passed, report["determinism"].status
        (True, 'PASS')
    """
    env_id, make = _env_maker(env, dict(env_kwargs or {}))
    runner = _Runner(make, seed=seed, agent=agent)
    report = CheckReport(env_id)
    checks = [
        ("gymnasium", runner.check_gymnasium),
        ("determinism", runner.check_determinism),
        ("fuzz", runner.check_fuzz),
        ("rewards", lambda: runner.check_rewards(episodes)),
        ("episode_jsonl", runner.check_episode_jsonl),
        ("budgets", runner.check_budgets),
        ("tool_schemas", runner.check_tool_schemas),
    ]
    first_raised: dict[str, str] = {}  # an error's text -> the first check that raised it
    for name, check in checks:
        report.results.append(_run_check(name, check, first_raised))
    report.steps_per_second = runner.steps_per_second()
    report.results.append(_timing(runner, report.steps_per_second))
    runner.close()
    return report


def _env_maker(env: str | gym.Env, kwargs: dict[str, Any]) -> tuple[str, Callable[[], gym.Env]]:
    """The id the report names, and a function making a fresh env (``env`` itself when it has no spec)."""
    if isinstance(env, str):
        env_id = env

        def make() -> gym.Env:
            return gym.make(env_id, **kwargs)

        return env_id, make

    spec = env.spec

    def make_again() -> gym.Env:
        return gym.make(spec, **kwargs) if spec is not None else env

    return (spec.id if spec is not None else type(env.unwrapped).__name__), make_again


def _run_check(name: str, check: Callable[[], CheckResult], first_raised: dict[str, str]) -> CheckResult:
    """``check()``'s result, or a FAIL naming what it raised (the traceback only the first time an error is seen).

    ``first_raised`` maps each error's text to the first check that raised it, and is updated here.
    """
    try:
        return check()
    except Exception as err:  # a check that raises is a finding about the env, not a checker crash
        error = f"{type(err).__name__}: {clip_text(str(err), 200)}"
        if error in first_raised:  # e.g. setup raising fails every check: one traceback is enough
            return CheckResult(
                name,
                False,
                f"raised {error}",
                fix=f"the same error as the {first_raised[error]} check (traceback above)",
            )
        first_raised[error] = name
        return CheckResult(
            name,
            False,
            f"raised {error}",
            fix="the environment raised where the contract says it must not; see the traceback",
            details=traceback.format_exc().strip().splitlines()[-6:],
        )


def _timing(runner: _Runner, steps_per_second: float) -> CheckResult:
    """The ``timing`` line: steps per second over the steps the checks played (SKIP when none were)."""
    if not runner.timed_steps:
        return CheckResult("timing", None, "no steps were played, so nothing was timed")
    return CheckResult(
        "timing",
        True,
        f"{steps_per_second:,.0f} steps/s over {runner.timed_steps} steps (reset {runner.mean_reset_ms():.2f} ms)",
    )


class _Runner:
    """Plays the episodes the checks need, on environments made by ``make``."""

    def __init__(self, make: Callable[[], gym.Env], seed: int, agent: Agent | None):
        self.make, self.seed, self.agent = make, seed, agent
        self.env = make()
        self.rng = np.random.default_rng(seed)
        self.step_seconds = 0.0
        self.timed_steps = 0
        self.reset_seconds: list[float] = []
        self._tool_schemas: list[dict[str, Any]] | None = None

    @property
    def llm_env(self) -> LLMEnv | None:
        unwrapped = self.env.unwrapped
        return unwrapped if isinstance(unwrapped, LLMEnv) else None

    def close(self) -> None:
        self.env.close()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools offered after a reset (read once: later calls must not reset mid-episode)."""
        if self._tool_schemas is None:
            _, info = self.env.reset(seed=self.seed)
            schemas = self.llm_env.tool_schemas if self.llm_env is not None else info.get("tools", [])
            self._tool_schemas = list(schemas)
        return self._tool_schemas

    # -- the checks ------------------------------------------------------------

    def check_gymnasium(self) -> CheckResult:
        from gymnasium.utils.env_checker import check_env as gym_check_env

        made = self.make()
        env = made.unwrapped
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gym_check_env(env, skip_render_check=env.render_mode is None)
        finally:
            made.close()
        notes = sorted({f"warning: {w.message}" for w in caught})
        return CheckResult("gymnasium", True, "gymnasium.utils.env_checker.check_env passed", details=notes)

    def check_determinism(self) -> CheckResult:
        spec = self.env.spec
        if spec is not None and spec.nondeterministic:  # declared honestly at registration (see DESIGN)
            return CheckResult(
                "determinism",
                None,
                f"skipped: {spec.id} is registered with nondeterministic=True, so the same "
                "seed need not give the same episode",
            )
        seed = self.seed + 7
        actions = self.varied_actions(12)
        first_states: list[dict[str, Any]] = []
        second_states: list[dict[str, Any]] = []
        first = self.play(self.make(), seed, actions, first_states)
        second = self.play(self.make(), seed, actions, second_states)
        difference = ""
        if len(first) != len(second):
            difference = f"one run ended after {len(first) - 1} steps, the other after {len(second) - 1}"
        # The env's plain-data attributes are compared too: they catch hidden state the
        # actions did not happen to reveal (a target drawn with `random`).
        for index, (a, b, state_a, state_b) in enumerate(zip(first, second, first_states, second_states)):
            names = ("obs", "info") if index == 0 else ("obs", "reward", "terminated", "truncated", "info")
            where = "reset" if index == 0 else f"step {index}"
            difference = (
                difference
                or next((d for n, x, y in zip(names, a, b) if (d := first_difference(x, y, f"{where} {n}"))), "")
                or next(
                    (
                        d
                        for name in state_a
                        if name in state_b
                        and (d := first_difference(state_a[name], state_b[name], f"{where} self.{name}"))
                    ),
                    "",
                )
            )
        if difference:
            return CheckResult(
                "determinism",
                False,
                f"two runs with seed={seed} and the same actions differ: {difference}",
                fix="draw all randomness from self.np_random (seeded by reset(seed=)), never from random, "
                "numpy.random or the clock; keep timestamps, latencies and object ids out of observations, "
                "info and the env's attributes (put timing in the Episode record)",
            )
        return CheckResult(
            "determinism",
            True,
            f"{len(first) - 1} steps and the env's state identical across two runs with seed={seed}",
        )

    def check_fuzz(self) -> CheckResult:
        problems: list[str] = []
        env = self.make()
        cases = hostile_actions(self.tool_schemas(), self.rng)
        for index, (label, action, wants_error) in enumerate(cases):
            try:
                obs, _ = env.reset(seed=self.seed + 100 + index)
                obs, reward, terminated, truncated, info = env.step(action)
                problem = step_problem(env, obs, reward, terminated, truncated, info)
                if problem is None and wants_error and not obs.strip():
                    problem = "the observation is empty; answer a malformed action with an error message"
                if problem is None and not (terminated or truncated):
                    follow = self.varied_actions(1)[0]
                    problem = step_problem(env, *env.step(follow))
                    if problem:
                        problem = f"the next step failed: {problem}"
            except Exception as err:
                problem = f"raised {type(err).__name__}: {clip_text(str(err), 160)}"
            if problem:
                problems.append(f"{label}: {problem}")
        env.close()
        if problems:
            return CheckResult(
                "fuzz",
                False,
                f"{len(problems)} of {len(cases)} hostile actions broke the env",
                fix="never raise for the agent's mistakes: return an error observation it can act on "
                "(tools raise llmgym.ToolError; LLMEnv turns bad calls into error messages)",
                details=problems,
            )
        return CheckResult("fuzz", True, f"{len(cases)} hostile actions answered without raising")

    def check_rewards(self, episodes: int) -> CheckResult:
        problems: list[str] = []
        rewards: list[float] = []
        weights = self.llm_env.rubric.weights() if self.llm_env is not None else None
        for episode in range(episodes):
            use_agent = self.agent is not None and episode % 2 == 1
            for step, (reward, info) in enumerate(self.play_timed(self.seed + 1000 + episode, use_agent)):
                where = f"episode {episode} step {step + 1}"
                if type(reward) is not float or not math.isfinite(reward):
                    problems.append(f"{where}: reward {reward!r} is not a finite Python float")
                    continue
                rewards.append(reward)
                components = info.get("reward_components")
                if weights is not None and isinstance(components, dict):
                    explained = sum(weights.get(name, 0.0) * value for name, value in components.items())
                    if not math.isclose(explained, reward, rel_tol=1e-6, abs_tol=1e-9):
                        problems.append(f"{where}: reward {reward} but components give {explained}: {components}")
                    unknown = set(components) - set(weights)
                    if unknown:
                        problems.append(f"{where}: components {sorted(unknown)} are not in the rubric")
        if problems:
            return CheckResult(
                "rewards",
                False,
                f"{len(problems)} bad rewards in {episodes} episodes",
                fix="return float(reward) from step; compute every reward through the rubric so that "
                "reward == sum(weight * component) and info['reward_components'] explains it",
                details=problems,
            )
        if not rewards:
            return CheckResult("rewards", None, "no steps were played")
        return CheckResult(
            "rewards",
            True,
            f"{len(rewards)} rewards finite and explained by components, "
            f"range [{min(rewards):.3g}, {max(rewards):.3g}]",
        )

    def check_episode_jsonl(self) -> CheckResult:
        if self.llm_env is None:
            return CheckResult("episode_jsonl", None, "not an LLMEnv: no episode record to check")
        env = self.make()
        rewards = [reward for reward, _ in self.play_rewards(env, self.seed + 3, self.varied_actions(6))]
        episode = env.unwrapped.episode()
        env.close()
        problems = []
        if episode.turn_rewards != rewards:
            problems.append(f"episode.turn_rewards {episode.turn_rewards} != rewards from step {rewards}")
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "episode.jsonl"
            save_jsonl([episode, episode], path)
            loaded = load_jsonl(path)
        if loaded != [episode, episode]:
            problems.append("the episode loaded from JSONL differs from the one saved")
        if problems:
            return CheckResult(
                "episode_jsonl",
                False,
                "the episode record is not faithful",
                fix="keep messages, rewards and metadata JSON-serializable plain data (str, int, float, list, dict)",
                details=problems,
            )
        return CheckResult("episode_jsonl", True, f"{episode.num_turns}-turn episode survived a JSONL round trip")

    def check_budgets(self) -> CheckResult:
        env = self.make()
        llm_env = env.unwrapped if isinstance(env.unwrapped, LLMEnv) else None
        max_turns = llm_env.max_turns if llm_env is not None else (env.spec.max_episode_steps if env.spec else None)
        if max_turns is None:
            env.close()
            return CheckResult("budgets", None, "no max_turns or max_episode_steps to check")
        problems = []
        env.reset(seed=self.seed + 5)
        filler = "Let me think about this a little more before I act."
        for turn in range(1, max_turns + 2):
            if turn > max_turns:
                problems.append(f"the episode was still running after max_turns={max_turns} turns")
                break
            _, _, terminated, truncated, _ = env.step(filler)
            if terminated or truncated:
                break
        if llm_env is not None:
            old = llm_env.max_tokens
            llm_env.max_tokens = 16
            try:
                env.reset(seed=self.seed + 6)
                _, _, terminated, truncated, _ = env.step(filler * 4)
                if llm_env.tokens_used >= 16 and not (terminated or truncated):
                    problems.append(f"{llm_env.tokens_used} tokens used with max_tokens=16 but the episode went on")
            finally:
                llm_env.max_tokens = old
        env.close()
        if problems:
            return CheckResult(
                "budgets",
                False,
                "a budget was not enforced",
                fix="let LLMEnv.step end the episode (truncated=True) at max_turns and max_tokens; "
                "do not override step without keeping its budget logic",
                details=problems,
            )
        return CheckResult(
            "budgets", True, f"episodes end by max_turns={max_turns}" + (" and by max_tokens" if llm_env else "")
        )

    def check_tool_schemas(self) -> CheckResult:
        schemas = self.tool_schemas()
        env = self.make()
        _, info = env.reset(seed=self.seed)
        env.close()
        problems = [] if info.get("tools", schemas) == schemas else ["info['tools'] differs from env.tool_schemas"]
        names = []
        for schema in schemas:
            problems.extend(tool_schema_problems(schema))
            names.append((schema.get("function") or {}).get("name"))
        if len(set(names)) != len(names):
            problems.append(f"tool names repeat: {names}")
        if problems:
            return CheckResult(
                "tool_schemas",
                False,
                f"{len(problems)} problems in {len(schemas)} tool schemas",
                fix="define tools with @llmgym.tool on typed functions with Google docstrings "
                "(a summary line and an Args: entry per argument)",
                details=problems,
            )
        return CheckResult("tool_schemas", True, f"{len(schemas)} tool schemas valid (JSON Schema Draft 2020-12)")

    # -- playing ---------------------------------------------------------------

    def varied_actions(self, count: int) -> list[Action]:
        """Seeded actions: random text, valid-looking tool calls, plain words."""
        schemas = self.tool_schemas()
        actions: list[Action] = []
        for index in range(count):
            kind = index % 3
            if kind == 1 and schemas:
                function = schemas[int(self.rng.integers(len(schemas)))]["function"]
                arguments = sample_arguments(function.get("parameters", {}), self.rng)
                actions.append(
                    f"<tool_call>{json.dumps({'name': function['name'], 'arguments': arguments})}</tool_call>"
                )
            elif kind == 2:
                actions.append(str(self.rng.choice(WORDS)))
            else:
                self.env.action_space.seed(int(self.rng.integers(2**31)))
                actions.append(self.env.action_space.sample())
        return actions

    def play(
        self, env: gym.Env, seed: int, actions: list[Action], states: list[dict[str, Any]] | None = None
    ) -> list[tuple[Any, ...]]:
        """Transitions of one episode: ``(obs, info)`` then ``(obs, reward, terminated, truncated, info)``...

        ``states``, when given, receives a copy of the env's plain-data attributes after each of them.
        """
        transitions: list[tuple[Any, ...]] = [env.reset(seed=seed)]
        if states is not None:
            states.append(plain_state(env.unwrapped))
        for action in actions:
            transition = env.step(action)
            transitions.append(transition)
            if states is not None:
                states.append(plain_state(env.unwrapped))
            if transition[2] or transition[3]:
                break
        env.close()
        return transitions

    def play_rewards(self, env: gym.Env, seed: int, actions: list[Action]) -> list[tuple[float, dict]]:
        env.reset(seed=seed)
        out = []
        for action in actions:
            _, reward, terminated, truncated, info = env.step(action)
            out.append((reward, info))
            if terminated or truncated:
                break
        return out

    def play_timed(self, seed: int, use_agent: bool) -> list[tuple[float, dict]]:
        start = time.perf_counter()
        obs, _ = self.env.reset(seed=seed)
        self.reset_seconds.append(time.perf_counter() - start)
        out = []
        done, steps = False, 0
        while not done and steps < 1000:
            action = self.agent(obs) if use_agent else self.varied_actions(1)[0]
            start = time.perf_counter()
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.step_seconds += time.perf_counter() - start
            self.timed_steps += 1
            steps += 1
            out.append((reward, info))
            done = terminated or truncated
        return out

    def steps_per_second(self) -> float:
        return self.timed_steps / self.step_seconds if self.step_seconds > 0 else 0.0

    def mean_reset_ms(self) -> float:
        return 1000 * sum(self.reset_seconds) / len(self.reset_seconds) if self.reset_seconds else 0.0
