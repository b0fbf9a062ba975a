"""bf16 slot rollouts (wrappers/decoding/rollout_slots.py): LoRA merged, a KV cache slot per episode, refreshed."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams  # noqa: E402
from llmgym.rollout import rollout  # noqa: E402
from llmgym.wrappers.decoding.rollout_slots import SlotRollouts, merged_weights  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402
from llmgym.wrappers.transformers_policy import TransformersPolicy  # noqa: E402

#: Largest log-prob difference allowed between the bf16 copy and the fp32 model, on the tiny model.
BF16_LOGPROB_TOLERANCE = 0.05


@pytest.fixture()
def lora_model():
    model, tokenizer = tiny_random_model(seed=0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(model, config)
    with torch.no_grad():  # a LoRA update that changes the outputs (B starts at 0)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    return model, tokenizer


def recomputed(model, prompt: list[int], generated: list[int]) -> list[float]:
    """The fp32 model's log-probs of ``generated`` after ``prompt``."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + generated])).logits[0].float().log_softmax(-1)
    return [float(logits[len(prompt) - 1 + i, token]) for i, token in enumerate(generated)]


def test_merged_weights_are_peft_merge_and_unload_without_touching_the_model(lora_model):
    model, _ = lora_model
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    weights = merged_weights(model)
    merged = copy.deepcopy(model).merge_and_unload()
    for name, tensor in merged.state_dict().items():
        if name == "lm_head.weight" and merged.config.tie_word_embeddings:
            continue
        assert torch.allclose(weights[name], tensor, atol=1e-6), name
    assert not torch.equal(
        weights["model.layers.0.self_attn.q_proj.weight"],
        before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"],
    )
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_a_later_turn_evaluates_only_its_new_tokens_and_matches_a_fresh_slot(lora_model):
    model, _ = lora_model
    rollouts, fresh = SlotRollouts(model, slots=2), SlotRollouts(model, slots=2)
    first = [5, 17, 3, 99, 42]
    rollouts.start([first], ["episode"])
    assert rollouts.processed == [5]
    rollouts.step([0], [7])  # the reply's first token; the turn ends after the next
    later = first + [7, 8, 30, 31]  # the reply's last token (8) and the env's answer
    logits = rollouts.start([later], ["episode"])
    assert rollouts.processed == [3]  # 8, 30, 31: the history came from the slot
    assert torch.allclose(logits, fresh.start([later], ["other"]), atol=1e-2)


def test_a_group_of_identical_prompts_is_evaluated_once(lora_model):
    model, _ = lora_model
    rollouts = SlotRollouts(model, slots=4)
    logits = rollouts.start([[1, 2, 3, 4]] * 3 + [[9, 9]], ["a", "b", "c", "d"])
    assert rollouts.processed == [4, 0, 0, 2]
    assert torch.equal(logits[0], logits[2])
    stepped = rollouts.step([0, 1, 2], [5, 5, 5])  # every copy holds the prompt
    assert torch.allclose(stepped[0], stepped[1], atol=1e-2) and torch.allclose(stepped[0], stepped[2], atol=1e-2)
    with pytest.raises(ValueError, match="needs as many slots"):
        rollouts.start([[1]] * 5, [None] * 5)


def test_the_policy_samples_from_the_merged_model_and_refreshes_after_a_weight_change(lora_model):
    model, tokenizer = lora_model
    policy = TransformersPolicy(model, tokenizer, batch_size=2, rollout_precision="bf16")
    request = PolicyRequest([{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=6, seed=3))
    out = policy.generate([request])[0]
    assert out.metadata["rollout_precision"] == "bf16" and len(out.token_ids) == 6
    exact = recomputed(model, out.prompt_token_ids, out.token_ids)
    assert max(abs(a - b) for a, b in zip(out.logprobs, exact)) <= BF16_LOGPROB_TOLERANCE
    with torch.no_grad():  # an optimizer step, as the trainer tells it
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.mul_(-1.0)
    policy.weights_changed()
    again = policy.generate([request])[0]
    assert again.metadata["prompt_tokens_processed"] == len(again.prompt_token_ids)  # every slot was emptied
    exact = recomputed(model, again.prompt_token_ids, again.token_ids)
    assert max(abs(a - b) for a, b in zip(again.logprobs, exact)) <= BF16_LOGPROB_TOLERANCE


class Recording(Policy):
    """Delegates to a policy and keeps each turn's generation."""

    def __init__(self, inner: TransformersPolicy) -> None:
        self.inner, self.name, self.returns_tokens = inner, inner.name, True
        self.turns: list[tuple[PolicyRequest, Generation]] = []

    async def agenerate(self, request: PolicyRequest) -> Generation:
        out = await self.inner.agenerate(request)
        self.turns.append((request, out))
        return out


def test_multi_turn_episodes_reuse_their_history_and_stay_token_exact(lora_model):
    """Wordle episodes on the bf16 slots: a later turn evaluates only what follows the history its slot holds,
    and the episodes' tokens and log-probs are those the fp32 model scores within the bf16 tolerance."""
    model, tokenizer = lora_model
    policy = Recording(TransformersPolicy(model, tokenizer, batch_size=4, rollout_precision="bf16"))
    episodes = rollout(
        "llmgym/Wordle-v0",
        policy,
        seeds=2,
        group_size=2,
        sampling=SamplingParams(max_tokens=8, temperature=1.0, seed=0),
        env_kwargs={"max_turns": 3},
        max_concurrency=4,
    )
    later = [out for request, out in policy.turns if request.prefix_token_ids is not None]
    assert len(later) >= 4, "the episodes ran more than one turn"
    for out in later:
        assert 0 < out.metadata["prompt_tokens_processed"] < len(out.prompt_token_ids) / 2
    for episode in episodes:
        assert not episode.metadata.get("error")
        generated = [i for i, m in enumerate(episode.mask) if m]
        with torch.no_grad():
            logits = model(torch.tensor([episode.token_ids])).logits[0].float().log_softmax(-1)
        exact = [float(logits[i - 1, episode.token_ids[i]]) for i in generated]
        assert max(abs(episode.logprobs[i] - e) for i, e in zip(generated, exact)) <= BF16_LOGPROB_TOLERANCE


def test_only_a_plain_llama_on_the_cpu_decodes_on_slots(lora_model):
    model, _ = lora_model
    with pytest.raises(ValueError, match="plain LlamaForCausalLM"):
        SlotRollouts(model.get_base_model().model, slots=1)
