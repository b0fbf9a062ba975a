"""The base class of every llmgym environment.

Holds :class:`LLMEnv`, a ``gymnasium.Env[str, str]``: the observation is the
text the agent reads this turn, the action is assistant text (tool calls in
the text protocol) or an OpenAI assistant-message ``dict``. Subclasses supply
the task (:meth:`LLMEnv.setup`), tools (methods decorated with
:func:`llmgym.tool`), an answer to plain text (:meth:`LLMEnv.on_text`), when
the task is over (:meth:`LLMEnv.is_done`) and a :class:`~llmgym.Rubric`.
The base class does the rest: parsing, argument validation, error
observations, chat history, turn and token budgets, per-turn rewards.
"""

from __future__ import annotations

import functools
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import gymnasium as gym

from llmgym.episode import Episode
from llmgym.messages import Message, ToolCall, system, tool_result, user
from llmgym.parsing import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ParsedAction,
    parse_action,
    text_protocol_content,
    thoughts,
    without_thinking,
)
from llmgym.rubric import Rubric, TurnContext
from llmgym.spaces import Text
from llmgym.tools import BoundTool, Tool, ToolResult

__all__ = ["LLMEnv"]


class LLMEnv(gym.Env[str, str], ABC):
    """A text environment whose actions are assistant messages and tool calls.

    Args:
        max_turns: turn budget; reaching it ends the episode with ``truncated=True``.
        max_tokens: budget of action tokens over the episode (``None``: no budget).
        max_action_chars: longer actions are refused with an error observation.
        max_tool_calls: tool calls honoured per turn; further ones get an error.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the transcript).

    Subclasses set ``description`` (one line, shown by ``llmgym list``) and
    ``system_prompt``, and implement :meth:`setup`; they usually override
    :meth:`on_text`, :meth:`is_done` and :meth:`build_rubric`. The rubric is built when
    first needed, after ``__init__``: state a subclass sets after ``super().__init__()``
    is there for :meth:`build_rubric` to read.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    description: ClassVar[str] = ""
    system_prompt: str = "You are a helpful agent."

    def __init__(
        self,
        max_turns: int = 10,
        max_tokens: int | None = None,
        max_action_chars: int = 32_768,
        max_tool_calls: int = 8,
        render_mode: str | None = None,
    ):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        budgets = {
            "max_turns": max_turns,
            "max_tokens": max_tokens,
            "max_action_chars": max_action_chars,
            "max_tool_calls": max_tool_calls,
        }
        for name, value in budgets.items():
            if value is None and name == "max_tokens":  # no token budget
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.max_action_chars = max_action_chars
        self.max_tool_calls = max_tool_calls
        self.render_mode = render_mode
        self.observation_space = Text(max_length=65_536)
        self.action_space = Text(max_length=max_action_chars)
        tool_attrs = dict.fromkeys(  # attribute names that hold a tool in some class, base classes first
            name
            for klass in reversed(type(self).__mro__)
            for name, attr in vars(klass).items()
            if isinstance(attr, Tool)
        )
        self.tools: dict[str, BoundTool] = {  # what the class resolves each name to: an override wins, as for methods
            tool_attr.name: getattr(self, name)
            for name in tool_attrs
            if isinstance(tool_attr := getattr(type(self), name), Tool)
        }
        self.tool_schemas: list[dict[str, Any]] = [t.schema for t in self.tools.values()]
        self.messages: list[Message] = []
        self.turn_contexts: list[TurnContext] = []
        self.turn_rewards: list[float] = []
        self.turn_components: list[dict[str, float]] = []
        self.tokens_used = 0
        self.seed_used: int | None = None
        self._over = True
        self._reset_once = False  # step() before any reset() says so

    def add_tools(self, tools: Mapping[str, Any] | Iterable[Any]) -> None:
        """Offer the agent more tools, e.g. an MCP server's (``env.add_tools(toolset.tools())``).

        Args:
            tools: objects with ``name``, ``schema`` (OpenAI function format) and
                ``call(arguments) -> ToolResult``, or a mapping whose values are such objects.

        Raises:
            ValueError: a tool's name is already taken.
        """
        new = list(tools.values() if isinstance(tools, Mapping) else tools)
        names = [*self.tools, *(item.name for item in new)]
        taken = sorted({name for name in names if names.count(name) > 1})
        if taken:
            raise ValueError(f"tool names already taken: {taken}; give the new tools a prefix")
        for item in new:
            self.tools[item.name] = item
            self.tool_schemas.append(item.schema)

    # -- what subclasses provide -------------------------------------------------

    @abstractmethod
    def setup(self, options: dict[str, Any] | None) -> str:
        """Start a new task with ``self.np_random`` and return the first user message."""

    def on_text(self, text: str) -> str:
        """Answer an action with no tool calls (default: remind the agent of its tools).

        ``text`` is what the agent said, its reasoning left out (:func:`~llmgym.parsing.without_thinking`).
        """
        if not self.tools:
            return ""
        names = ", ".join(self.tools)
        return (
            f"No tool was called. Call one of: {names}, e.g. "
            f'{TOOL_CALL_OPEN}{{"name": "{next(iter(self.tools))}", "arguments": {{...}}}}{TOOL_CALL_CLOSE}'
        )

    def is_done(self) -> bool:
        """True once the task is over (solved, failed, answered)."""
        return False

    def build_rubric(self) -> Rubric:
        """The rubric that scores each turn (default: none, every reward is 0); :attr:`rubric` calls it once."""
        return Rubric([])

    @functools.cached_property
    def rubric(self) -> Rubric:
        """The rubric that scores each turn: :meth:`build_rubric`'s, built the first time it is needed.

        Not in ``__init__``: a subclass's ``build_rubric`` may read state its ``__init__`` sets after
        ``super().__init__()``. Assigning ``env.rubric`` replaces it.
        """
        return self.build_rubric()

    def truncation_note(self) -> str | None:
        """A last line for the agent when a turn or token budget ends the episode (default: none).

        :meth:`step` adds it to that turn's observation, after the turn is scored, and to the
        transcript: on the turn's own user message when it has one, else as a user message.
        Wordle uses it to reveal the word.
        """
        return None

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` for the token budget and length rewards.

        The default estimates ~4 characters per token (no tokenizer needed);
        assign a real tokenizer's counter to ``env.unwrapped.count_tokens`` for
        exact budgets.
        """
        return (len(text) + 3) // 4

    # -- the Gymnasium API -----------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.seed_used = seed
        self.turn_contexts, self.turn_rewards, self.turn_components = [], [], []
        self.tokens_used = 0
        self._over = False
        self._reset_once = True
        prompt = self.setup(options)
        self.messages = [system(self.system_prompt), user(prompt)]
        return self._clip(prompt), self._info({})

    def step(self, action: str | dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._check_episode_open()
        turn = len(self.turn_contexts) + 1
        # read the action and record it
        parsed, counted = self._parse(action, turn)
        text = parsed.message.get("content") or ""
        self.messages.append(parsed.message)
        tokens = self.count_tokens(counted)
        self.tokens_used += tokens
        # run its tool calls and answer it
        tool_results, format_errors, replies = self._run_calls(parsed)
        observation = self._answer(parsed, replies)
        # score and record the turn
        terminated = bool(self.is_done())
        truncated = not terminated and (
            turn >= self.max_turns or (self.max_tokens is not None and self.tokens_used >= self.max_tokens)
        )
        ctx = TurnContext(
            env=self,
            turn=turn,
            action_text=text,
            parsed=parsed,
            tool_results=tool_results,
            format_errors=format_errors,
            action_tokens=tokens,
            thinking_tokens=sum(self.count_tokens(thought) for thought in thoughts(text)),
            done=terminated or truncated,
            terminated=terminated,
            history=list(self.turn_contexts),
        )
        reward, components = self._record_turn(ctx)
        self._over = terminated or truncated
        if truncated:
            observation = self._add_truncation_note(observation)
        return observation, float(reward), terminated, truncated, self._info(components)

    def _check_episode_open(self) -> None:
        """Raise unless an episode is under way (``reset`` called, and the episode not over)."""
        if self._over:
            raise RuntimeError(
                "the episode is over: call reset() before step()"
                if getattr(self, "_reset_once", True)
                else "no episode has started: call reset() before step()"
            )

    def _run_calls(self, parsed: ParsedAction) -> tuple[list[tuple[str, ToolResult]], list[str], list[str]]:
        """Run the action's tool calls, each result said in the transcript.

        Returns:
            ``(tool name, result)`` per call; the format errors (the parser's, then the calls'
            unknown names and invalid arguments); and each call's reply for the observation.
        """
        format_errors = list(parsed.errors)
        tool_results: list[tuple[str, ToolResult]] = []
        replies: list[str] = []
        calls = parsed.tool_calls
        for index, call in enumerate(calls):
            result = self._run_call(call, index, format_errors)
            tool_results.append((call.name, result))
            self.messages.append(tool_result(call, result.content))
            replies.append(result.content if len(calls) == 1 else f"[{call.name}] {result.content}")
        return tool_results, format_errors, replies

    def _answer(self, parsed: ParsedAction, replies: list[str]) -> str:
        """The observation: the calls' replies, then format feedback or the env's answer to plain text.

        Feedback and answers (not tool results) join the transcript as a user message.
        """
        replies = list(replies)
        if parsed.errors:
            feedback = "Format error: " + "; ".join(parsed.errors)
            if TOOL_CALL_OPEN not in feedback:
                feedback += f'. Call a tool as {TOOL_CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{TOOL_CALL_CLOSE}'
            replies.append(feedback)
        elif not parsed.tool_calls:
            reply = self.on_text(without_thinking(parsed.content))  # reasoning is no answer
            if reply:
                replies.append(reply)
        observation = self._clip("\n".join(replies))
        if parsed.errors or (not parsed.tool_calls and observation):
            self.messages.append(user(observation))
        return observation

    def _record_turn(self, ctx: TurnContext) -> tuple[float, dict[str, float]]:
        """Score the turn with the rubric and keep its context, reward and components."""
        reward, components = self.rubric.score(ctx)
        self.turn_contexts.append(ctx)
        self.turn_rewards.append(reward)
        self.turn_components.append(components)
        return reward, components

    def _parse(self, action: str | dict[str, Any], turn: int) -> tuple[ParsedAction, str]:
        """Parse ``action``, or refuse it when it is longer than ``max_action_chars``.

        Returns the parsed action and the text its size and tokens are counted on.
        """
        if isinstance(action, str):
            counted = action
        else:  # anything but a dict: parse_action raises TypeError
            content = action.get("content") if isinstance(action, dict) else None
            counted = content if isinstance(content, str) else ""
        if len(counted) > self.max_action_chars:
            return self._refuse(counted), counted
        parsed = parse_action(action, id_prefix=f"call_{turn}")
        if isinstance(action, dict) and action.get("tool_calls") and parsed.tool_calls:
            # native calls count toward the size limit and the token budget as they do written as <tool_call> blocks
            blocks = text_protocol_content({"tool_calls": parsed.message["tool_calls"]})  # the calls alone
            said = parsed.message.get("content") or ""
            counted = f"{said}\n{blocks}" if said else blocks  # even when the text has blocks too
            if len(counted) > self.max_action_chars:
                return self._refuse(counted), counted
        return parsed, counted

    def _refuse(self, text: str) -> ParsedAction:
        """An action over ``max_action_chars``: kept in the transcript as said, its calls not made."""
        error = f"your message has {len(text)} characters; the limit is {self.max_action_chars}"
        return ParsedAction("", [], [error], {"role": "assistant", "content": text})

    def _run_call(self, call: ToolCall, index: int, format_errors: list[str]) -> ToolResult:
        """Run the turn's ``index``-th call, or say why not; argument and name mistakes go to ``format_errors``."""
        handler = self.tools.get(call.name)
        if index >= self.max_tool_calls:
            return ToolResult(f"Error: at most {self.max_tool_calls} tool calls per turn", ok=False)
        if handler is None:
            result = ToolResult(
                f"Error: unknown tool {call.name[:64]!r}; available: {', '.join(self.tools) or 'none'}", ok=False
            )
            format_errors.append(result.content)
            return result
        if self.is_done():
            return ToolResult("Error: the task is already over; this call was not run", ok=False)
        result = handler.call(call.arguments)
        if not result.ok and result.content.startswith(f"Error: invalid arguments for {call.name}"):
            format_errors.append(result.content)
        return result

    def render(self) -> str | None:
        """The transcript so far as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        lines = []
        for message in self.messages:
            calls = "".join(
                f"\n  -> {c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls", [])
            )
            lines.append(f"[{message['role']}] {message.get('content') or ''}{calls}")
        return "\n".join(lines) + "\n"

    # -- copies ------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # the rubric's functions close over this env (lambdas reading self): a copy builds its own when it needs it
        state = self.__dict__.copy()
        state.pop("rubric", None)
        return state

    # -- records -----------------------------------------------------------------

    def episode(self, env_id: str | None = None) -> Episode:
        """The episode so far as an :class:`~llmgym.Episode` record."""
        spec_id = env_id or (self.spec.id if self.spec is not None else type(self).__name__)
        return Episode(
            env_id=spec_id,
            seed=self.seed_used,
            messages=list(self.messages),
            tools=list(self.tool_schemas),  # a later add_tools() must not change a recorded episode
            turn_rewards=list(self.turn_rewards),
            reward_components=[dict(c) for c in self.turn_components],
            terminated=bool(self._over and self.is_done()),
            truncated=bool(self._over and not self.is_done()),
        )

    def _info(self, components: dict[str, float]) -> dict[str, Any]:
        return {
            "messages": list(self.messages),
            "tools": self.tool_schemas,
            "reward_components": components,
            "turn": len(self.turn_contexts),
        }

    def _add_truncation_note(self, observation: str) -> str:
        """``observation`` with :meth:`truncation_note` as its last line, said in the transcript too."""
        note = self.truncation_note()
        if not note:
            return observation
        messages = self.messages
        last = messages[-1]
        if last["role"] == "user":  # feedback that was no tool result: the note joins it
            messages[-1] = user(f"{last['content']}\n{note}")
        else:
            messages.append(user(note))
        text = f"{observation}\n{note}"
        limit = self.observation_space.max_length
        if len(text) <= limit:
            return text
        marker = "\n[observation truncated]"  # cut in front of the note, which stays whole
        return f"{observation[: limit - len(note) - 1 - len(marker)]}{marker}\n{note}"

    def _clip(self, text: str) -> str:
        limit = self.observation_space.max_length
        if len(text) <= limit:
            return text
        note = f"\n[observation truncated: {len(text)} characters]"
        return text[: limit - len(note)] + note
