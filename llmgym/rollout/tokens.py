"""Token-exact bookkeeping for multi-turn episodes.

Holds :class:`TokenRecord`, which assembles an episode's token ids, mask,
log-probs and turn spans from the policy's generations, and
:class:`TokenMismatchError`. The rule, turn by turn:

1. turn 1: the prompt ids (mask 0), then the generated ids (mask 1, except
   the tokens the policy forced rather than sampled, listed in
   ``Generation.metadata["forced_positions"]``: mask 0, log-probs kept);
2. the next request carries ``prefix_token_ids`` = every id so far;
3. the policy's ``prompt_token_ids`` must start with that prefix; the new part
   (env and tool messages, the next assistant header) gets mask 0, then the
   generated ids as in 1.

So a trainer sees exactly the tokens the model produced, never re-tokenized
text. A policy that breaks rule 3 would silently corrupt training data, so
:meth:`TokenRecord.add` raises instead. A policy that returns too little to
place the ids (no prompt ids), or that says it did not continue the prefix
(``Generation.metadata["prefix_reused"] is False``: a chat server that
re-renders the chat, a template that cannot be continued), gets no token
record, with the reason noted; the episode itself is kept.
"""

from __future__ import annotations

from llmgym.episode import Episode
from llmgym.policy import Generation

__all__ = ["TokenRecord", "TokenMismatchError"]


class TokenMismatchError(ValueError):
    """A policy's token ids break the prefix contract of :class:`~llmgym.policy.PolicyRequest`."""


class TokenRecord:
    """The growing token sequence of one episode.

    Example:
        >>> from llmgym.policy import Generation
        >>> record = TokenRecord()
        >>> msg = {"role": "assistant", "content": "hi"}
        >>> record.add(Generation(msg, prompt_token_ids=[1, 2], token_ids=[3], logprobs=[-0.5]), 1, None)
        >>> record.prefix()
        [1, 2, 3]
        >>> second = Generation(msg, prompt_token_ids=[1, 2, 3, 4], token_ids=[5, 6], logprobs=[-0.1, -0.2])
        >>> record.add(second, 2, [1, 2, 3])
        >>> record.token_ids, record.mask, record.turn_spans
        ([1, 2, 3, 4, 5, 6], [0, 0, 1, 0, 1, 1], [(2, 3), (4, 6)])
        >>> forced = Generation(msg, prompt_token_ids=[1, 2, 3, 4, 5, 6, 7], token_ids=[8, 9],
        ...                     logprobs=[-0.3, -0.4], metadata={"forced_positions": [0]})
        >>> record.add(forced, 3, [1, 2, 3, 4, 5, 6])
        >>> record.mask[-2:], record.logprobs[-2:]
        ([0, 1], [-0.3, -0.4])
    """

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.turn_spans: list[tuple[int, int]] = []
        self.has_logprobs = True
        self.active: bool | None = None  # None until the first generation says whether ids come back
        self.dropped: str | None = None

    def prefix(self) -> list[int] | None:
        """``prefix_token_ids`` for the next request (``None`` before the first turn or without ids)."""
        return list(self.token_ids) if self.active and self.dropped is None else None

    def _drop(self, reason: str) -> None:
        self.dropped = reason
        self.token_ids, self.mask, self.logprobs, self.turn_spans = [], [], [], []

    def add(self, generation: Generation, turn: int, prefix: list[int] | None) -> None:
        """Append one turn's prompt delta (mask 0) and generated ids (mask 1, forced ones 0).

        Args:
            generation: what the policy returned for the turn.
            turn: the 1-based turn number (for error messages).
            prefix: the ``prefix_token_ids`` the request carried.

        Incomplete ids (generated ids without the prompt's, or ids on some
        turns only), and a prompt that breaks the prefix from a policy that says
        it did not continue it (``metadata["prefix_reused"] is False``), cannot
        be placed exactly: the record is dropped and :meth:`fill` notes why in
        ``metadata["token_ids_dropped"]``. Forced tokens
        (``metadata["forced_positions"]``, indices into the generated ids) get mask 0.

        Raises:
            TokenMismatchError: a prompt that does not start with the prefix from
                a policy that did not say so (ids that contradict each other),
                log-probs of the wrong length, or a forced position outside the
                generated ids.
        """
        if self.dropped is not None:
            return
        has_ids = generation.token_ids is not None
        if self.active is None:
            self.active = has_ids
        if has_ids != self.active:
            self._drop(f"turn {turn}: the policy returned token ids on some turns only")
            return
        if not has_ids:
            return
        prompt = generation.prompt_token_ids
        if prompt is None:
            self._drop(f"turn {turn}: generated token ids came without prompt_token_ids")
            return
        prefix = prefix or []
        if list(prompt[: len(prefix)]) != prefix:
            at = next((i for i, (a, b) in enumerate(zip(prompt, prefix)) if a != b), min(len(prompt), len(prefix)))
            if generation.metadata.get("prefix_reused") is False:  # it never promised to keep the prefix
                self._drop(
                    f"turn {turn}: the policy re-rendered the chat instead of continuing prefix_token_ids "
                    f"(prefix_reused=False), so its prompt ids differ from the earlier turns' at position {at} "
                    f"of {len(prefix)}"
                )
                return
            raise TokenMismatchError(
                f"turn {turn}: prompt_token_ids do not start with the request's prefix_token_ids "
                f"(first difference at position {at} of {len(prefix)}; prompt has {len(prompt)} ids). "
                "A token-exact policy must append the ids of the new messages to prefix_token_ids "
                "instead of re-tokenizing the whole chat"
            )
        generated = list(generation.token_ids)
        if generation.logprobs is None:
            if generated:  # no log-probs for zero tokens (an empty reply) lacks nothing
                self.has_logprobs = False
        elif len(generation.logprobs) != len(generated):
            raise TokenMismatchError(
                f"turn {turn}: {len(generation.logprobs)} log-probs for {len(generated)} generated tokens"
            )
        policy_mask = [1] * len(generated)
        for position in generation.metadata.get("forced_positions") or ():
            if not 0 <= position < len(generated):
                raise TokenMismatchError(
                    f"turn {turn}: forced position {position} is outside the {len(generated)} generated tokens"
                )
            policy_mask[position] = 0  # forced, not sampled: no gradient for the policy
        delta = list(prompt[len(prefix) :])
        self.token_ids += delta
        self.mask += [0] * len(delta)
        self.logprobs += [0.0] * len(delta)
        start = len(self.token_ids)
        self.token_ids += generated
        self.mask += policy_mask
        self.logprobs += (
            [float(x) for x in generation.logprobs] if generation.logprobs is not None else [0.0] * len(generated)
        )
        self.turn_spans.append((start, len(self.token_ids)))

    def fill(self, episode: Episode) -> None:
        """Copy the record into ``episode``; log-probs stay empty unless every turn had them."""
        if self.dropped is not None:
            episode.metadata["token_ids_dropped"] = self.dropped
            return
        if not self.active:
            return
        episode.token_ids = list(self.token_ids)
        episode.mask = list(self.mask)
        episode.logprobs = list(self.logprobs) if self.has_logprobs else []
        episode.turn_spans = list(self.turn_spans)
