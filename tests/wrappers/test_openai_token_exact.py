"""OpenAIPolicy with a local tokenizer: token-exact multi-turn episodes through a real ``llmgym serve``.

The server runs the tiny random Llama on loopback; the policy renders the
prompts itself and sends token ids to ``/v1/completions``. Checked: a 3-turn
Wordle episode passes the rollout's prefix contract, its token record is
consistent, its log-probs equal a local forward pass of the same weights, and
it matches a local TransformersPolicy episode token for token (greedy).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("openai")

from llmgym import rollout  # noqa: E402
from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.openai_policy import OpenAIPolicy  # noqa: E402
from llmgym.wrappers.server import create_app, serve_in_thread  # noqa: E402

WORDLE = "llmgym/Wordle-v0"


@pytest.fixture(scope="module")
def served():
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    model, tokenizer = tiny_random_model()
    local = TransformersPolicy(model, tokenizer)
    app = create_app(local, model_name="tiny", max_batch_size=8, batch_wait_s=0.01)
    with serve_in_thread(app) as base_url:
        policy = OpenAIPolicy("tiny", base_url=base_url, tokenizer=tokenizer)
        try:
            yield base_url, policy, local, model
        finally:
            policy.close()


def check_record(episode) -> None:
    ids, mask, logprobs, spans = episode.token_ids, episode.mask, episode.logprobs, episode.turn_spans
    assert len(ids) == len(mask) == len(logprobs) > 0
    assert len(spans) == episode.num_turns == 3
    generated = [i for i, m in enumerate(mask) if m == 1]
    assert generated == [i for start, end in spans for i in range(start, end)]
    assert sum(mask) == sum(1 for lp in logprobs if lp != 0.0)
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)
    assert all(lp < 0.0 for lp, m in zip(logprobs, mask) if m == 1)


def test_three_turn_wordle_is_token_exact_and_logprobs_match_local_forward(served):
    _, policy, _, model = served
    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=11)
    episodes = rollout(WORDLE, policy, seeds=[0, 1], sampling=sampling, env_kwargs={"max_turns": 3})
    assert policy.returns_tokens
    for episode in episodes:
        assert "error" not in episode.metadata and "token_ids_dropped" not in episode.metadata
        check_record(episode)
        with torch.no_grad():
            logits = model(torch.tensor([episode.token_ids])).logits[0].float().log_softmax(-1)
        positions = [i for i, m in enumerate(episode.mask) if m == 1]
        local = [float(logits[i - 1, episode.token_ids[i]]) for i in positions]
        remote = [episode.logprobs[i] for i in positions]
        assert remote == pytest.approx(local, abs=1e-3)


def test_greedy_episode_matches_the_local_policy_token_for_token(served):
    _, policy, local, _ = served
    sampling = SamplingParams(temperature=0.0, max_tokens=8)
    remote = rollout(WORDLE, policy, seeds=[3], sampling=sampling, env_kwargs={"max_turns": 3})[0]
    here = rollout(WORDLE, local, seeds=[3], sampling=sampling, env_kwargs={"max_turns": 3})[0]
    check_record(remote)
    assert remote.token_ids == here.token_ids and remote.mask == here.mask
    assert [m.get("content") for m in remote.messages] == [m.get("content") for m in here.messages]
    assert remote.logprobs == pytest.approx(here.logprobs, abs=1e-3)


def test_prefix_is_reused_and_stop_strings_cut_the_text(served):
    _, policy, _, _ = served
    first = PolicyRequest([{"role": "user", "content": "Hello there"}], sampling=SamplingParams(max_tokens=8, seed=5))
    out = policy.generate([first])[0]
    assert out.metadata["token_exact"] and not out.metadata["prefix_reused"] and len(out.token_ids) == 8
    prefix = out.prompt_token_ids + out.token_ids
    follow = PolicyRequest(
        first.messages + [out.message, {"role": "user", "content": "And?"}],
        sampling=SamplingParams(max_tokens=8, seed=5),
        prefix_token_ids=prefix,
    )
    second = policy.generate([follow])[0]
    assert second.metadata["prefix_reused"] and second.prompt_token_ids[: len(prefix)] == prefix
    text = out.message["content"]
    stop = text.strip()[len(text.strip()) // 2 :][:3]
    if not stop.strip():
        pytest.fail(f"the sampled text {text!r} has no usable stop string")
    cut = policy.generate([PolicyRequest(first.messages, sampling=SamplingParams(max_tokens=8, seed=5, stop=[stop]))])[
        0
    ]
    assert stop not in cut.message["content"] and text.startswith(cut.message["content"])
    assert cut.finish_reason == "stop" and len(cut.token_ids) == len(cut.logprobs) <= 8


def test_bad_tokenizer_arguments_fail_clearly(tmp_path):
    with pytest.raises(OSError, match="offline"):
        OpenAIPolicy("tiny", tokenizer=tmp_path / "no-such-tokenizer")
    with pytest.raises(TypeError, match="tokenizer"):
        OpenAIPolicy("tiny", tokenizer=42)
    from llmgym.wrappers.models import load_tokenizer

    with pytest.raises(ValueError, match="return_tokens"):
        OpenAIPolicy("tiny", tokenizer=load_tokenizer(), return_tokens=False)
