"""The thinking budget (llmgym/wrappers/thinking.py): the tokens it forces to close a ``<think>`` block are
recorded with mask 0, so they are not trained on."""

from __future__ import annotations

import pytest

from llmgym.policy import Generation, SamplingParams
from llmgym.rollout import rollout
from llmgym.rollout.tokens import TokenMismatchError, TokenRecord

WORDLE = "llmgym/Wordle-v0"
ASSISTANT = {"role": "assistant", "content": "hi"}

# The thinking budget needs a prompt that opens a <think> block (R1-style).
OPENS_THINKING = (
    "{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n<think>\n' }}{%- endif -%}"
)


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from llmgym.wrappers.models import tiny_random_model

    return tiny_random_model(seed=0)


def transformers_policy(tiny, **kwargs):
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    return TransformersPolicy(*tiny, **kwargs)


def test_forced_positions_get_mask_0_and_keep_their_logprobs():
    """Regression: tokens forced by a thinking budget used to get mask 1 and be trained on."""
    record = TokenRecord()
    generation = Generation(
        ASSISTANT,
        prompt_token_ids=[1, 2],
        token_ids=[3, 4, 5, 6],
        logprobs=[-0.1, -0.2, -0.3, -0.4],
        metadata={"forced_positions": [1, 2]},
    )
    record.add(generation, 1, None)
    assert record.mask == [0, 0, 1, 0, 0, 1]
    assert record.logprobs == [0.0, 0.0, -0.1, -0.2, -0.3, -0.4] and record.turn_spans == [(2, 6)]
    with pytest.raises(TokenMismatchError, match="forced position 4"):
        TokenRecord().add(
            Generation(
                ASSISTANT,
                prompt_token_ids=[1],
                token_ids=[3, 4],
                logprobs=[-0.1, -0.2],
                metadata={"forced_positions": [4]},
            ),
            1,
            None,
        )


def test_a_thinking_budget_rollout_masks_the_forced_close(tiny):
    from llmgym.wrappers.thinking import FORCED_CLOSE

    tokenizer = tiny[1]
    policy = transformers_policy(tiny, chat_template=OPENS_THINKING, native_tools=False)
    sampling = SamplingParams(temperature=1.0, max_tokens=12, seed=1, thinking_budget=3)
    episode = rollout(WORDLE, policy, seeds=[0], sampling=sampling, env_kwargs={"max_turns": 1})[0]
    start, end = episode.turn_spans[0]
    forced = [i for i in range(start, end) if not episode.mask[i]]
    assert tokenizer.decode([episode.token_ids[i] for i in forced]) == FORCED_CLOSE
    assert forced == list(range(start + 3, start + 3 + len(forced)))  # right after the 3-token budget
    assert all(episode.logprobs[i] < 0 for i in forced)  # the recorded log-probs stay
    assert sum(episode.mask) == (end - start) - len(forced)
