"""SFT warm-up on recorded episodes, and export to the chat ``messages`` format.

Holds :class:`SFTTrainer` (``SFTTrainer(SFTConfig(...)).train()``),
:func:`split_validation` and :class:`EarlyStopping` (a held-out loss after
every epoch, training until it stops falling),
:func:`select_episodes` (filter by reward), :func:`tokenize_episode`
(token ids and an assistant-only mask for an episode), :func:`check_tokens`
(are recorded ids and mask trainable?) and
:func:`export_messages` (JSONL of ``{"messages": [...], "tools": [...]}``,
the conversational format Hugging Face ``datasets`` and TRL's
``SFTTrainer`` read).

Which tokens: episodes that carry ``token_ids`` (recorded by a token-returning
policy with this model's tokenizer) are trained on exactly those ids and their
``mask``. Episodes without ids (a teacher behind an OpenAI API), or any
episode with ``retokenize=True``, are rendered with this model's chat template
the way :class:`~llmgym.wrappers.transformers_policy.TransformersPolicy`
prompts it, and only the assistant turns enter the loss.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmgym.episode import Episode, load_jsonl
from llmgym.messages import Message
from llmgym.parsing import text_protocol_content
from llmgym.progress import ProgressBar
from llmgym.trainers.batch import collate
from llmgym.trainers.checkpoint import save_weights
from llmgym.trainers.config import SFTConfig
from llmgym.trainers.losses import TokenScorer, sft_loss
from llmgym.trainers.metrics import MetricsLogger, peak_memory_mb
from llmgym.trainers.model import add_lora, load_policy_model, resolve_device
from llmgym.trainers.precision import choose_precision

__all__ = [
    "SFTTrainer",
    "EarlyStopping",
    "split_validation",
    "select_episodes",
    "tokenize_episode",
    "check_tokens",
    "export_messages",
    "chat_messages",
]


def select_episodes(
    episodes: list[Episode], min_reward: float | None = None, *, at_least_one: bool = False
) -> list[Episode]:
    """Episodes without a recorded error whose total reward is at least ``min_reward``.

    Args:
        episodes: the recorded episodes.
        min_reward: the least total reward kept; ``None`` keeps every reward.
        at_least_one: raise rather than return an empty selection (training and export need one).

    Raises:
        ValueError: with ``at_least_one``, no episode is kept; the message says why.

    Example:
        >>> eps = [Episode("x", turn_rewards=[1.0]), Episode("x", turn_rewards=[0.2]),
        ...        Episode("x", turn_rewards=[1.0], metadata={"error": "timeout"})]
        >>> len(select_episodes(eps)), len(select_episodes(eps, min_reward=0.5))
        (2, 1)
        >>> select_episodes(eps, min_reward=5.0, at_least_one=True)
        Traceback (most recent call last):
        ValueError: no episode without an error has total reward >= 5.0 (of 3); lower --min-reward
    """
    kept = [e for e in episodes if "error" not in e.metadata]
    if min_reward is not None:
        kept = [e for e in kept if e.total_reward >= min_reward]
    if at_least_one and not kept:
        if not episodes:
            raise ValueError("no episodes to learn from: the episodes file is empty")
        if min_reward is None:
            raise ValueError(f"no episode to learn from: all {len(episodes)} recorded an error (metadata 'error')")
        raise ValueError(
            f"no episode without an error has total reward >= {min_reward} (of {len(episodes)}); lower --min-reward"
        )
    return kept


def chat_messages(episode: Episode) -> list[Message]:
    """The episode's chat with native tool calls written out in the text protocol (any template renders it).

    Example:
        >>> call = {"id": "c", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}
        >>> chat_messages(Episode("x", messages=[{"role": "assistant", "content": "", "tool_calls": [call]}]))
        [{'role': 'assistant', 'content': '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'}]
    """
    out: list[Message] = []
    for message in episode.messages:
        message = dict(message)
        if message.get("role") == "assistant":
            message = {"role": "assistant", "content": text_protocol_content(message)}
        out.append(message)
    return out


def tokenize_episode(
    episode: Episode, tokenizer: Any, retokenize: bool = False, max_length: int | None = None
) -> Episode:
    """An episode with ``token_ids`` and ``mask`` for this tokenizer (a copy when re-rendered).

    Args:
        episode: a recorded episode.
        tokenizer: the trained model's tokenizer (with a chat template).
        retokenize: render the messages even when the episode carries token ids.
        max_length: the training cut (``SFTConfig.max_length``): some policy token must come before it.

    Raises:
        ValueError: recorded ids outside this tokenizer's vocabulary (or not
            integers >= 0), a mask not as long as the ids or not of 0s and 1s,
            no policy token to learn from (none in the mask, a chat without
            assistant turns, or none within ``max_length``), or a template that
            renders earlier turns differently once more follow.
    """
    if episode.token_ids and not retokenize:
        check_tokens(episode, max_length, vocab_size=len(tokenizer))
        return episode
    from llmgym.wrappers.prompting import prepare_messages, template_has_tool_role, template_supports_tools

    template = tokenizer.chat_template
    native = template_supports_tools(template)
    messages = prepare_messages(chat_messages(episode), episode.tools, native, template_has_tool_role(template))

    def render(upto: int, generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages[:upto],
            tools=episode.tools if native and episode.tools else None,
            add_generation_prompt=generation_prompt,
            tokenize=False,
        )

    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt, full = render(index, True), render(index + 1, False)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise ValueError("the chat template renders earlier turns differently once more follow; cannot mask turns")
        for text, bit in ((prompt[len(done) :], 0), (full[len(prompt) :], 1)):
            piece = tokenizer.encode(text, add_special_tokens=False)
            ids += piece
            learned = _through_end_of_turn(piece, tokenizer.eos_token_id) if bit else 0
            mask += [1] * learned + [0] * (len(piece) - learned)
        done = full
    if not any(mask):
        raise ValueError("the episode has no assistant turn to learn from")
    copy = Episode.from_dict(episode.to_dict())
    copy.token_ids, copy.mask, copy.logprobs, copy.turn_spans = ids, mask, [], []
    check_tokens(copy, max_length)
    return copy


def check_tokens(episode: Episode, max_length: int | None = None, vocab_size: int | None = None) -> None:
    """Refuse an episode's ``token_ids`` and ``mask`` that SFT cannot train on.

    A policy token counts when it is not the first token (which no context predicts)
    and comes before ``max_length``, where training cuts episodes. Without ``vocab_size``
    (no tokenizer loaded yet) the ids are checked only for being integers >= 0.

    Raises:
        ValueError: a token id that is not an integer >= 0 or not below ``vocab_size``, a mask
            not as long as the ids or with values other than 0 and 1, or no policy token to learn from.

    Example:
        >>> check_tokens(Episode("x", token_ids=[5, 6, 7], mask=[0, 1, 1]))
        >>> check_tokens(Episode("x", token_ids=[5, 6, 7], mask=[0, 0, 0]))
        Traceback (most recent call last):
        ValueError: the mask marks no policy token to learn from (mask all 0 after the first token)
        >>> check_tokens(Episode("x", token_ids=[5, 6, 7], mask=[0, 0, 1]), max_length=2)
        Traceback (most recent call last):
        ValueError: max_length 2 cuts every policy token (the first is token 2): raise max_length
    """
    ids, mask = episode.token_ids, episode.mask
    bad = next((t for t in ids if isinstance(t, bool) or not isinstance(t, int) or t < 0), None)
    if bad is not None:
        raise ValueError(f"token id {bad!r} is not an integer >= 0")
    if vocab_size is not None and ids and max(ids) >= vocab_size:
        raise ValueError(
            f"token id {max(ids)} does not fit this tokenizer of {vocab_size} tokens (another model recorded the ids): "
            "set retokenize=True (--retokenize) to render the messages with this model's template"
        )
    if len(mask) != len(ids):
        raise ValueError(f"the mask has {len(mask)} entries for {len(ids)} token ids; they must be as long")
    others = [bit for bit in mask if bit not in (0, 1)]
    if others:
        raise ValueError(f"the mask holds {others[0]!r}: its entries must be 0 (context) or 1 (policy token)")
    learned = [i for i, bit in enumerate(mask) if bit and i > 0]  # collate never trains on the first token
    if not learned:
        raise ValueError("the mask marks no policy token to learn from (mask all 0 after the first token)")
    if max_length is not None and learned[0] >= max_length:
        raise ValueError(
            f"max_length {max_length} cuts every policy token (the first is token {learned[0]}): raise max_length"
        )


def _through_end_of_turn(piece: list[int], eos_id: int | None) -> int:
    """How many tokens of a rendered assistant turn the model generates: up to its last end-of-turn token.

    A template appends text after it (``<|im_end|>`` then ``\n``) that the model
    never generates, since decoding stops there; without one, the whole turn.
    """
    if eos_id is None or eos_id not in piece:
        return len(piece)
    return len(piece) - piece[::-1].index(eos_id)


def export_messages(episodes: list[Episode], path: str | os.PathLike[str]) -> int:
    """Write ``{"messages": [...], "tools": [...]}`` per episode (tool calls in the text protocol); returns the count.

    ``datasets.load_dataset("json", data_files=path)`` reads it, and TRL's
    ``SFTTrainer`` trains on it (conversational format).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as file:
        for episode in episodes:
            record = {"messages": chat_messages(episode), "tools": episode.tools, "reward": episode.total_reward}
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(episodes)


class SFTTrainer:
    """Supervised fine-tuning on the policy tokens of good episodes.

    Args:
        config: the run's settings.
        model: an already loaded model (default: ``config.model``).
        tokenizer: its tokenizer (required with ``model``).
        episodes: episodes to learn from (default: read ``config.episodes``).
        retokenize: render messages even when episodes carry token ids.
    """

    def __init__(
        self,
        config: SFTConfig,
        model: Any = None,
        tokenizer: Any = None,
        episodes: list[Episode] | None = None,
        retokenize: bool = False,
    ):
        self.config = config
        self.device = resolve_device(config.device)
        torch.manual_seed(config.seed)
        if episodes is None:
            if not config.episodes:
                raise ValueError("SFTConfig.episodes is empty: give the episodes JSONL to learn from")
            episodes = load_jsonl(config.episodes)
        if config.patience is not None and not config.val_fraction:
            raise ValueError("patience needs a validation set: set val_fraction (e.g. 0.1)")
        if not 0.0 <= config.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {config.val_fraction!r}")
        # everything that can fail without the model fails before it is loaded:
        # the selection, the recorded tokens, the folder
        selected = {id(e) for e in select_episodes(episodes, config.min_reward, at_least_one=True)}
        numbered = [(number, e) for number, e in enumerate(episodes, 1) if id(e) in selected]
        for number, episode in numbered:
            if episode.token_ids and not retokenize:
                _in_episode(number, len(episodes), check_tokens, episode, config.max_length)
        self.out = Path(config.out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a file in the way: say so now, not after the model load
            raise OSError(f"cannot create the run folder {config.out}: {err.strerror or err}") from None
        if model is None:
            model, tokenizer = load_policy_model(config.model, str(self.device))
        elif tokenizer is None:
            raise TypeError("SFTTrainer(model=...) also needs tokenizer=")
        model.to(self.device)
        if config.lora:
            model = add_lora(model, config)
        self.model, self.tokenizer = model, tokenizer
        tokenized = [
            _in_episode(number, len(episodes), tokenize_episode, e, tokenizer, retokenize, config.max_length)
            for number, e in numbered
        ]
        self.episodes, self.val_episodes = split_validation(tokenized, config.val_fraction, config.seed)
        self.scorer = TokenScorer(self.model)
        # the loss's forward passes in bf16 autocast where this device multiplies bf16 faster (config.precision)
        self.precision = choose_precision(config.precision, self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.learning_rate, weight_decay=config.weight_decay)

    def train(self) -> list[dict[str, float]]:
        """Run every epoch; returns each optimizer step's metrics (also in ``out/metrics.jsonl``)."""
        config, history = self.config, []
        run_config = {**dataclasses.asdict(config), "precision_chosen": self.precision.as_dict()}
        (self.out / "config.json").write_text(json.dumps(run_config, indent=1))
        logger = MetricsLogger(self.out)
        rng = np.random.default_rng(config.seed)
        steps_per_epoch = -(-len(self.episodes) // config.batch_size)
        progress = ProgressBar("SFT", steps_per_epoch * config.epochs, shown=config.progress)
        best = EarlyStopping(config.patience)
        step = 0
        try:
            for epoch in range(config.epochs):
                # one pass over the training episodes in a fresh order, an optimizer step per batch
                self.model.train()
                order = rng.permutation(len(self.episodes))
                for start in range(0, len(order), config.batch_size):
                    started = time.perf_counter()
                    chosen = [self.episodes[i] for i in order[start : start + config.batch_size]]
                    loss, tokens = self._step(chosen)
                    step += 1
                    metrics = {
                        "step": step,
                        "epoch": epoch,
                        "loss": loss,
                        "tokens/trained": tokens,
                        "time/step_s": time.perf_counter() - started,
                        **peak_memory_mb(),
                    }
                    logger.log(metrics)
                    history.append(metrics)
                    progress.advance()
                if not self.val_episodes:
                    continue
                # the held-out loss after the epoch; keep the best weights, stop when it no longer falls
                val_loss = self.validation_loss()
                logger.log({"step": step, "epoch": epoch, "val_loss": val_loss})
                history[-1]["val_loss"] = val_loss
                if best.update(val_loss, self.params):
                    break
        finally:
            logger.close()
            progress.close()
        best.restore(self.params)
        save_weights(self.model, self.tokenizer, self.out / "final", base=self.config.model)
        return history

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Mean negative log-likelihood per policy token of the held-out episodes, in eval mode."""
        self.model.eval()
        config, total, tokens = self.config, 0.0, 0.0
        for start in range(0, len(self.val_episodes), config.micro_batch_size):
            batch = collate(self.val_episodes[start : start + config.micro_batch_size], max_length=config.max_length)
            batch = batch.to(self.device)
            with self.precision.autocast():
                logp, _ = self.scorer(batch.input_ids, batch.attention_mask, batch.mask)
            total += float(sft_loss(logp, batch.mask, 1.0))
            tokens += float(batch.mask.sum())
        return total / max(tokens, 1.0)

    def _step(self, episodes: list[Episode]) -> tuple[float, float]:
        config = self.config
        chunks = [episodes[i : i + config.micro_batch_size] for i in range(0, len(episodes), config.micro_batch_size)]
        batches = [collate(chunk, max_length=config.max_length).to(self.device) for chunk in chunks]
        num_tokens = float(sum(b.mask.sum() for b in batches))
        autocast = self.precision.autocast()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for batch in batches:
            with autocast:
                logp, _ = self.scorer(batch.input_ids, batch.attention_mask, batch.mask)
            loss = sft_loss(logp, batch.mask, num_tokens)
            loss.backward()
            total += loss.item()
        if config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.params, config.max_grad_norm)
        self.optimizer.step()
        return total, num_tokens


def split_validation(episodes: list[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """``(train, validation)``: ``round(fraction * len)`` episodes drawn with ``seed`` held out, at least one
    left to train on.

    Example:
        >>> train, val = split_validation(list(range(10)), 0.2, seed=0)
        >>> len(train), len(val), sorted(train + val) == list(range(10))
        (8, 2, True)
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {fraction!r}")
    count = min(round(fraction * len(episodes)), len(episodes) - 1)
    if count <= 0:
        return list(episodes), []
    held = set(np.random.default_rng(seed).permutation(len(episodes))[:count].tolist())
    return [e for i, e in enumerate(episodes) if i not in held], [e for i, e in enumerate(episodes) if i in held]


class EarlyStopping:
    """The lowest validation loss so far and a copy of the trainable weights that gave it.

    ``update`` returns True when ``patience`` epochs in a row have not lowered it; ``restore`` puts the best
    weights back (nothing to do when no loss was seen).
    """

    def __init__(self, patience: int | None):
        if patience is not None and patience < 1:
            raise ValueError(f"patience must be >= 1 or None, got {patience!r}")
        self.patience, self.best, self.waited = patience, float("inf"), 0
        self.weights: list[torch.Tensor] | None = None

    def update(self, loss: float, params: list[torch.Tensor]) -> bool:
        if loss < self.best:
            self.best, self.waited = loss, 0
            self.weights = [p.detach().clone() for p in params]
            return False
        self.waited += 1
        return self.patience is not None and self.waited >= self.patience

    @torch.no_grad()
    def restore(self, params: list[torch.Tensor]) -> None:
        if self.weights is not None and self.patience is not None:
            for param, best in zip(params, self.weights, strict=True):
                param.copy_(best)


def _in_episode(number: int, total: int, check: Callable[..., Any], *args: Any) -> Any:
    """``check(*args)``, with a ``ValueError`` naming the episode (1-based, in file order)."""
    try:
        return check(*args)
    except ValueError as err:
        raise ValueError(f"episode {number} of {total}: {err}") from None
