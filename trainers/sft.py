"""SFT warm-up on recorded episodes, and export to the chat ``messages`` format.

Holds :class:`SFTTrainer` (``SFTTrainer(SFTConfig(...)).train()``),
:func:`select_episodes` (filter by reward), :func:`tokenize_episode`
(token ids and an assistant-only mask for an episode) and
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

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmgym.episode import Episode, load_jsonl
from llmgym.messages import Message
from llmgym.parsing import text_protocol_content
from llmgym.trainers.batch import collate
from llmgym.trainers.checkpoint import save_weights
from llmgym.trainers.config import SFTConfig
from llmgym.trainers.losses import TokenScorer, sft_loss
from llmgym.trainers.metrics import MetricsLogger, peak_memory_mb

__all__ = ["SFTTrainer", "select_episodes", "tokenize_episode", "export_messages", "chat_messages"]


def select_episodes(episodes: list[Episode], min_reward: float | None = None) -> list[Episode]:
    """Episodes without a recorded error whose total reward is at least ``min_reward``.

    Example:
        >>> eps = [Episode("x", turn_rewards=[1.0]), Episode("x", turn_rewards=[0.2]),
        ...        Episode("x", turn_rewards=[1.0], metadata={"error": "timeout"})]
        >>> len(select_episodes(eps)), len(select_episodes(eps, min_reward=0.5))
        (2, 1)
    """
    kept = [e for e in episodes if "error" not in e.metadata]
    if min_reward is not None:
        kept = [e for e in kept if e.total_reward >= min_reward]
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


def tokenize_episode(episode: Episode, tokenizer: Any, retokenize: bool = False) -> Episode:
    """An episode with ``token_ids`` and ``mask`` for this tokenizer (a copy when re-rendered).

    Args:
        episode: a recorded episode.
        tokenizer: the trained model's tokenizer (with a chat template).
        retokenize: render the messages even when the episode carries token ids.

    Raises:
        ValueError: recorded ids outside this tokenizer's vocabulary, a chat
            without assistant turns, or a template that renders earlier turns
            differently once more follow.
    """
    if episode.token_ids and not retokenize:
        if max(episode.token_ids) >= len(tokenizer):
            raise ValueError(
                "the episode's token ids do not fit this tokenizer (another model recorded them): "
                "set retokenize=True (--retokenize) to render the messages with this model's template"
            )
        return episode
    from llmgym.wrappers.prompting import prepare_messages, template_supports_tools

    template = tokenizer.chat_template
    native = template_supports_tools(template)
    messages = prepare_messages(chat_messages(episode), episode.tools, native)

    def render(upto: int, generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages[:upto], tools=episode.tools if native and episode.tools else None,
                                             add_generation_prompt=generation_prompt, tokenize=False)

    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt, full = render(index, True), render(index + 1, False)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise ValueError("the chat template renders earlier turns differently once more follow; cannot mask turns")
        for text, bit in ((prompt[len(done):], 0), (full[len(prompt):], 1)):
            piece = tokenizer.encode(text, add_special_tokens=False)
            ids += piece
            learned = _through_end_of_turn(piece, tokenizer.eos_token_id) if bit else 0
            mask += [1] * learned + [0] * (len(piece) - learned)
        done = full
    if not any(mask):
        raise ValueError("the episode has no assistant turn to learn from")
    copy = Episode.from_dict(episode.to_dict())
    copy.token_ids, copy.mask, copy.logprobs, copy.turn_spans = ids, mask, [], []
    return copy


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

    def __init__(self, config: SFTConfig, model: Any = None, tokenizer: Any = None,
                 episodes: list[Episode] | None = None, retokenize: bool = False):
        from llmgym.trainers.grpo import add_lora, load_policy_model, resolve_device

        self.config = config
        self.device = resolve_device(config.device)
        torch.manual_seed(config.seed)
        if episodes is None:
            if not config.episodes:
                raise ValueError("SFTConfig.episodes is empty: give the episodes JSONL to learn from")
            episodes = load_jsonl(config.episodes)
        selected = select_episodes(episodes, config.min_reward)  # before the model load: an empty selection fails fast
        if not selected:
            if not episodes:
                raise ValueError("no episodes to learn from: the episodes file is empty")
            if config.min_reward is None:
                raise ValueError(f"no episode to learn from: all {len(episodes)} recorded an error (metadata 'error')")
            raise ValueError(f"no episode without an error has total reward >= {config.min_reward} (of {len(episodes)}); "
                             "lower --min-reward")
        if model is None:
            model, tokenizer = load_policy_model(config.model, config.seed, str(self.device))
        elif tokenizer is None:
            raise TypeError("SFTTrainer(model=...) also needs tokenizer=")
        model.to(self.device)
        if config.lora:
            model = add_lora(model, config)
        self.model, self.tokenizer = model, tokenizer
        self.episodes = [tokenize_episode(e, tokenizer, retokenize) for e in selected]
        self.scorer = TokenScorer(self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.out = Path(config.out)

    def train(self) -> list[dict[str, float]]:
        """Run every epoch; returns each optimizer step's metrics (also in ``out/metrics.jsonl``)."""
        config, history = self.config, []
        logger = MetricsLogger(self.out)
        rng = np.random.default_rng(config.seed)
        steps_per_epoch = -(-len(self.episodes) // config.batch_size)
        progress = None
        if config.progress:
            from rich.progress import Progress

            progress = Progress()
            task = progress.add_task("SFT", total=steps_per_epoch * config.epochs)
            progress.start()
        self.model.train()
        step = 0
        try:
            for epoch in range(config.epochs):
                order = rng.permutation(len(self.episodes))
                for start in range(0, len(order), config.batch_size):
                    started = time.perf_counter()
                    chosen = [self.episodes[i] for i in order[start : start + config.batch_size]]
                    loss, tokens = self._step(chosen)
                    step += 1
                    metrics = {"step": step, "epoch": epoch, "loss": loss, "tokens/trained": tokens,
                               "time/step_s": time.perf_counter() - started, **peak_memory_mb()}
                    logger.log(metrics)
                    history.append(metrics)
                    if progress is not None:
                        progress.update(task, advance=1)
        finally:
            logger.close()
            if progress is not None:
                progress.stop()
        save_weights(self.model, self.tokenizer, self.out / "final")
        return history

    def _step(self, episodes: list[Episode]) -> tuple[float, float]:
        config = self.config
        chunks = [episodes[i : i + config.micro_batch_size] for i in range(0, len(episodes), config.micro_batch_size)]
        batches = [collate(chunk, max_length=config.max_length).to(self.device) for chunk in chunks]
        num_tokens = float(sum(b.mask.sum() for b in batches))
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if config.bf16 and self.device.type == "cuda"
                    else torch.autocast("cpu", enabled=False))
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
