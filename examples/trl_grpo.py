"""TRL's GRPOTrainer on an llmgym environment through ``environment_factory``, a few steps on a CPU.

``trl_environment("llmgym/Wordle-v0")`` hands TRL a class whose methods are
the env's tools (``guess``), whose ``reset`` starts a seeded episode and whose
``get_reward`` is the episode's return. The model is the project's tiny random
Llama (SmolLM2 tokenizer, Qwen2.5 tool-calling chat template), first taught
in a short SFT warm-up (until its loss is below 0.003) to emit one ``guess``
tool call, so the GRPO rollouts really call into the environment. Swap in a
real instruct model for real training. Needs ``pip install trl==1.16.0`` (and the ``local`` extra).

Run: ``python examples/trl_grpo.py --steps 2``
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import llmgym  # noqa: E402,F401
from llmgym.trainers.trl import trl_dataset, trl_environment  # noqa: E402

ENV_ID = "llmgym/Wordle-v0"
TOOL_CALL = '<tool_call>\n{"name": "guess", "arguments": {"word": "crane"}}\n</tool_call><|im_end|>'


def tool_calling_tiny_model(sft_steps: int = 300, target_loss: float = 0.003) -> tuple[Any, Any]:
    """The tiny random model, with a tool-calling chat template, taught to answer the first turn with a guess."""
    import torch
    from transformers.utils import get_json_schema
    from trl.chat_template_utils import qwen2_5_chat_template

    from llmgym.wrappers.models import tiny_random_model

    model, tokenizer = tiny_random_model(0)
    tokenizer = copy.deepcopy(tokenizer)  # the shared one must not change
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    env = trl_environment(ENV_ID)()
    first = env.reset(seed=0)
    messages = [{"role": "system", "content": env.env.unwrapped.system_prompt}, {"role": "user", "content": first}]
    tools = [get_json_schema(getattr(env, name)) for name in env.env.unwrapped.tools]  # the schemas TRL renders
    prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(TOOL_CALL, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + target_ids])
    targets = torch.tensor(target_ids)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=sft_steps)
    for step in range(1, sft_steps + 1):  # noqa: B007  (read after the loop: how many steps it took)
        # logits only where the tool call is predicted: the 49k-token output layer is most of the cost
        hidden = model.model(input_ids=ids).last_hidden_state[0, len(prompt_ids) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden), targets)
        if loss.item() < target_loss:  # memorised: nearly every sample is the whole tool call
            break
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    print(f"SFT warm-up: loss {loss.item():.4f} on the tool call after {step} steps")
    return model, tokenizer


def main(steps: int = 2, seed: int = 0) -> dict[str, Any]:
    """Run GRPO for ``steps`` steps; returns the log history, the played episodes and each env's last reward."""
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = tool_calling_tiny_model()
    instances: list[Any] = []

    class Wordle(trl_environment(ENV_ID)):
        def __init__(self) -> None:
            super().__init__()
            instances.append(self)

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="llmgym-trl-"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=96,
        max_tool_calling_iterations=2,
        max_steps=steps,
        logging_steps=1,
        temperature=0.7,
        learning_rate=1e-5,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=seed,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=trl_dataset(ENV_ID, range(64)),
        environment_factory=Wordle,
    )
    trainer.train()
    episodes = [env._episode() for env in instances if env.env.unwrapped.turn_rewards]
    for entry in trainer.state.log_history:
        if "reward" in entry:
            print(
                f"step {entry['step']}: reward {entry['reward']:.3f}, "
                f"tool calls per rollout {entry['tools/call_frequency']:.2f}"
            )
    rewards = [env.get_reward() for env in instances]
    return {"log_history": trainer.state.log_history, "episodes": episodes, "rewards": rewards}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    cli = parser.parse_args()
    main(cli.steps, cli.seed)
