"""The policy contract: what every LLM adapter provides and returns.

Holds :class:`SamplingParams`, :class:`PolicyRequest`, :class:`Generation`,
the :class:`Policy` base class and :func:`tool_protocol_prompt`. A policy
maps (messages, tools) to an assistant message, one request or a batch. For
training it also returns the token ids it generated and their log-probs, so
trainers train on exactly those tokens and never on re-tokenized text.

Adapters live in ``llmgym.wrappers``; the core only defines the contract.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from llmgym.messages import Message
from llmgym.parsing import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

__all__ = ["SamplingParams", "PolicyRequest", "Generation", "Policy", "tool_protocol_prompt"]


@dataclass
class SamplingParams:
    """How to sample.

    Attributes:
        temperature: 0 means greedy.
        top_p: nucleus sampling mass.
        max_tokens: most tokens generated per turn.
        seed: seeds the sampler, for reproducible generations where the backend allows.
        thinking_budget: most reasoning (``<think>``) tokens per turn; ``None`` = no cap.
        stop: extra stop strings.
    """

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    thinking_budget: int | None = None
    stop: list[str] = field(default_factory=list)


@dataclass
class PolicyRequest:
    """One turn to generate.

    Attributes:
        messages: the chat so far, OpenAI format.
        tools: OpenAI tool schemas offered this turn.
        sampling: sampling settings.
        prefix_token_ids: token ids of the conversation up to the last
            generation, exactly as earlier turns produced them (prompt +
            generated tokens). A token-exact policy renders only the messages
            added since then and appends their ids to this prefix, instead of
            re-tokenizing the whole chat. ``None`` on the first turn.
        episode_id: the same for every turn of one episode (the rollout sets it), so a
            policy over several servers keeps an episode on one (its prefix cache);
            ``None`` for a request of no episode.
    """

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    prefix_token_ids: list[int] | None = None
    episode_id: str | None = None


@dataclass
class Generation:
    """What a policy produced for one request.

    Attributes:
        message: an OpenAI assistant message (``content`` and, for native tool
            calling, ``tool_calls``); this is the env action.
        prompt_token_ids: the full prompt the model saw, as token ids (when known).
        token_ids: the generated token ids (when known).
        logprobs: the log-prob of each generated token under the sampling policy.
        finish_reason: ``"stop"``, ``"length"``, ``"tool_calls"``, or ``"abort"``
            (the policy's ``abort`` event ended it).
        thinking_tokens: how many generated tokens were reasoning (``<think>``).
        metadata: backend details (model name, latency...). Keys the rollout reads:
            ``prefix_reused`` (``False``: the prompt was rendered afresh, so its ids need not
            extend the previous turn's; a mismatch then drops the episode's token record
            instead of raising), ``forced_positions`` (indices into ``token_ids`` the
            policy forced, such as a thinking-budget close: mask 0 in the episode).
    """

    message: Message
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    thinking_tokens: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


class Policy:
    """Base class for LLM policies.

    Subclasses implement :meth:`agenerate` (one request, async) and may
    override :meth:`generate` to batch many requests in one forward pass.
    ``name`` identifies the policy in episode records.
    """

    name: str = "policy"
    #: True when :class:`Generation` carries token ids and log-probs.
    returns_tokens: bool = False
    #: Episodes this policy serves well at once (``None``: no limit). A single-stream
    #: backend sets 1: interleaving episodes would throw away its prompt cache every turn.
    max_concurrency: int | None = None

    async def agenerate(self, request: PolicyRequest) -> Generation:
        """Generate one assistant turn."""
        results = await asyncio.to_thread(self.generate, [request])
        return results[0]

    def generate(self, requests: list[PolicyRequest]) -> list[Generation]:
        """Generate one assistant turn for each request (default: concurrently through :meth:`agenerate`)."""
        if type(self).agenerate is Policy.agenerate:
            raise TypeError(f"{type(self).__name__} must override agenerate() or generate()")

        async def run_all() -> list[Generation]:
            return list(await asyncio.gather(*(self.agenerate(r) for r in requests)))

        return asyncio.run(run_all())

    def close(self) -> None:
        """Release models, threads and connections."""


def tool_protocol_prompt(tools: list[dict[str, Any]]) -> str:
    """System-prompt text that teaches a model without native tool calling the text protocol.

    Example:
        >>> text = tool_protocol_prompt([{"type": "function", "function": {
        ...     "name": "guess", "description": "Guess a word.", "parameters": {"type": "object"}}}])
        >>> "<tool_call>" in text and "guess" in text
        True
    """
    if not tools:
        return ""
    lines = [
        "You can call tools. To call one, write exactly:",
        f'{TOOL_CALL_OPEN}{{"name": "TOOL_NAME", "arguments": {{...}}}}{TOOL_CALL_CLOSE}',
        "The arguments must be a JSON object matching the tool's parameters. Available tools:",
    ]
    for schema in tools:
        function = schema.get("function", schema)
        lines.append(
            json.dumps(
                {
                    "name": function.get("name"),
                    "description": function.get("description", ""),
                    "parameters": function.get("parameters", {}),
                },
                ensure_ascii=False,
            )
        )
    return "\n".join(lines)
