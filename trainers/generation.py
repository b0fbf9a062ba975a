"""Where the GRPO trainer's episodes are generated: in this process, or on an OpenAI-compatible server.

Holds :class:`Generator`, the one interface the trainer generates through, and
its two implementations:

- :class:`InProcessGenerator`: a ``TransformersPolicy`` that decodes with the
  trained model itself (under FSDP with its gathered full weights), so new
  weights need no hand-over;
- :class:`ServerGenerator`: an ``OpenAIPolicy`` on a vLLM or ``llmgym serve``
  server, which loads the newest LoRA adapter after every optimizer step
  (``POST /v1/load_lora_adapter``). With ``async_generation`` the trainer plays
  the next step's first round through it while this one trains
  (:class:`~llmgym.trainers.overlap.RolloutPrefetcher`).

The trainer tells a generator when the weights are about to change
(:meth:`Generator.before_update`) and when they have
(:meth:`Generator.after_update`); what that means for the policy is the
generator's business.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist

from llmgym.episode import Episode
from llmgym.policy import Policy, SamplingParams
from llmgym.rollout import rollout
from llmgym.trainers.checkpoint import save_weights
from llmgym.trainers.config import GRPOConfig, ServerConfigError
from llmgym.trainers.curriculum import Curriculum
from llmgym.trainers.distributed import save_full_weights

__all__ = ["Generator", "InProcessGenerator", "ServerGenerator"]


class Generator:
    """Plays groups of episodes of the trained env with the current weights.

    Args:
        config: the run's settings (sampling, group size, concurrency, env kwargs).
        env_id: the env to play.
        curriculum: the difficulty curriculum whose current level the envs are made at, if any.
        rank: this process's rank (part of every sampling seed).

    Attributes:
        policy: the policy that generates (set by the implementation).
    """

    policy: Policy

    def __init__(self, config: GRPOConfig, env_id: str, curriculum: Curriculum | None, rank: int):
        self.config, self.env_id, self.curriculum, self.rank = config, env_id, curriculum, rank

    def env_kwargs(self) -> dict[str, Any]:
        """The env's keyword arguments, with the curriculum's current level when there is one."""
        return self.curriculum.env_kwargs(self.config.env_kwargs) if self.curriculum else dict(self.config.env_kwargs)

    def rollout(self, seeds: list[int], step: int, attempt: int = 0) -> list[Episode]:
        """``group_size`` episodes per distinct seed (group ``i`` = the ``i``-th distinct seed).

        Sampling is seeded by (run seed, step, rank, attempt): a resumed run, or a
        run with and without ``async_generation``, samples the same tokens.
        """
        if not seeds:
            return []
        config = self.config
        sampling = SamplingParams(
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_new_tokens,
            seed=int(np.random.SeedSequence([config.seed, step, self.rank, attempt]).generate_state(1)[0] >> 1),
        )
        return rollout(
            self.env_id,
            self.policy,
            seeds=list(dict.fromkeys(seeds)),
            group_size=config.group_size,
            sampling=sampling,
            env_kwargs=self.env_kwargs(),
            max_concurrency=config.concurrency,
            ray=config.ray,
            worker_retries=config.worker_retries,
        )

    def before_update(self) -> None:
        """The optimizer is about to change the weights."""

    def after_update(self, version: int) -> None:
        """The weights now are those after ``version`` optimizer steps; the next rollouts must use them."""

    def close(self) -> None:
        """Release what generation holds."""


class InProcessGenerator(Generator):
    """Generates with the trained model itself, through a ``TransformersPolicy``.

    Args:
        model: the trained model (the policy shares it: there are no weights to hand over).
        tokenizer: its tokenizer.
        world: the number of ranks (each decodes its share of the step's episodes).
        config, env_id, curriculum, rank: as for :class:`Generator`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: GRPOConfig,
        env_id: str,
        curriculum: Curriculum | None,
        rank: int,
        world: int,
    ):
        from llmgym.wrappers.transformers_policy import TransformersPolicy

        super().__init__(config, env_id, curriculum, rank)
        batch = min(config.concurrency, max(1, config.prompts_per_step * config.group_size // world))
        # decode on the training thread: one OpenMP pool instead of two fighting over the cores
        self.policy = TransformersPolicy(
            model,
            tokenizer,
            batch_size=batch,
            name=f"grpo:{config.model}",
            rollout_precision=config.rollout_precision,
            generate_inline=True,
        )

    def before_update(self) -> None:
        # bf16 rollout copies and their KV cache slots are stale from here on: rebuilt at the next rollout
        self.policy.weights_changed()

    # close(): the policy is left open, as it shares the model the trainer still holds


class ServerGenerator(Generator):
    """Generates on an OpenAI-compatible server that serves the trained LoRA adapter as ``config.lora_name``.

    The adapter is pushed when the generator is made and after every optimizer
    step. :meth:`rollout` may run in the trainer's prefetch thread
    (``async_generation``): it only sends requests and steps envs.

    Args:
        model: the trained (peft) model, whose adapter is pushed.
        tokenizer: its tokenizer (the policy renders prompts and keeps token ids with it).
        out: the run folder; the adapter is written to ``out/adapter_push`` for the server to read.
        world: the number of ranks.
        config, env_id, curriculum, rank: as for :class:`Generator`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        out: Path,
        config: GRPOConfig,
        env_id: str,
        curriculum: Curriculum | None,
        rank: int,
        world: int,
    ):
        from llmgym.wrappers.openai_policy import OpenAIPolicy

        super().__init__(config, env_id, curriculum, rank)
        self.model, self.out, self.world = model, out, world
        self.push_adapter()  # the server must hold the adapter before the first request
        self.policy = OpenAIPolicy(
            config.lora_name,
            base_url=config.base_url,
            api_key=config.api_key,
            return_tokens=True,
            max_concurrency=config.concurrency,
            tokenizer=tokenizer,
        )

    def after_update(self, version: int) -> None:
        self.push_adapter()

    def push_adapter(self) -> None:
        """Save the adapter and load it on the server under ``lora_name`` (replacing the previous one).

        Every rank calls it (under FSDP each contributes its shards); rank 0 sends
        the request, and no rank returns before the server has loaded the adapter.

        Raises:
            ServerConfigError: the server refused the adapter (no LoRA support, a bad adapter).
            ConnectionError: the server cannot be reached.
        """
        config = self.config
        target = (self.out / "adapter_push").resolve()
        if config.fsdp:
            save_full_weights(self.model, None, target)
        if self.rank == 0:
            folder = target if config.fsdp else save_weights(self.model, None, target)
            body = {"lora_name": config.lora_name, "lora_path": str(folder), "load_inplace": True}
            request = urllib.request.Request(
                config.base_url.rstrip("/") + "/load_lora_adapter",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {config.api_key}"},
            )
            try:
                urllib.request.urlopen(request, timeout=120).read()
            except urllib.error.HTTPError as err:
                raise ServerConfigError(
                    f"the server refused the LoRA adapter: {err.code} {err.read()[:300]!r}"
                ) from None
            except urllib.error.URLError as err:
                raise ConnectionError(f"cannot reach {config.base_url} to push the adapter: {err.reason}") from None
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        """Close the policy's connections."""
        self.policy.close()
