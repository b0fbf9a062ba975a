"""Prompt log-probs on ``/v1/completions`` (``echo`` + ``logprobs``), as OpenAI's legacy API and vLLM return them.

Both backends, each behind a real ``llmgym serve`` on loopback with a tiny random
model: the echoed block covers prompt + completion (first prompt token ``null``),
prompt scores agree with the log-probs generation reported, ``max_tokens: 0`` only
scores, streaming carries the prompt's block in the echo chunk, and the request
lm-evaluation-harness's ``local-completions`` sends gives its log-likelihoods.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest

pytest.importorskip("fastapi")

from llmgym.policy import SamplingParams  # noqa: E402
from llmgym.wrappers.server import create_app, serve_in_thread  # noqa: E402

PROMPT = "Once upon a time, the cat"


@pytest.fixture(scope="module", params=["llama.cpp", "transformers"])
def served(request):
    """``(base_url, policy, score)``: ``score(ids)`` is the backend's own log-prob of each token after the first."""
    if request.param == "llama.cpp":
        pytest.importorskip("llama_cpp")
        from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy
        from llmgym.wrappers.models import tiny_random_gguf

        policy = LlamaCppPolicy(tiny_random_gguf(seed=0), n_ctx=256)

        def score(ids: list[int]) -> list[float]:
            return policy.score(ids)[0][1:]
    else:
        pytest.importorskip("transformers")
        import torch

        from llmgym.wrappers.models import tiny_random_model
        from llmgym.wrappers.transformers_policy import TransformersPolicy

        policy = TransformersPolicy(*tiny_random_model())

        def score(ids: list[int]) -> list[float]:
            with torch.no_grad():
                logits = policy.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
            return logits.log_softmax(-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()

    with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
        yield base_url, policy, score
    if hasattr(policy, "close"):
        policy.close()


def encode(policy, text: str) -> list[int]:
    return list(policy.tokenizer(text)["input_ids"]) if hasattr(policy, "tokenizer") else policy.tokenize(text)


def complete(base_url: str, **body) -> dict:
    response = httpx.post(f"{base_url}/completions", json={"model": "tiny", **body}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def sse(base_url: str, body: dict) -> list[dict]:
    events = []
    with httpx.stream("POST", f"{base_url}/completions", json={"model": "tiny", **body}, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[len("data: ") :]))
    return events


def test_echo_logprobs_cover_the_prompt_then_the_completion(served):
    base_url, policy, _ = served
    prompt_ids = encode(policy, PROMPT)
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 1.0, "seed": 7, "logprobs": 2}
    plain = complete(base_url, **body)["choices"][0]
    echoed = complete(base_url, **body, echo=True)["choices"][0]
    block, generated = echoed["logprobs"], plain["logprobs"]
    count = len(prompt_ids)
    assert len(block["tokens"]) == len(block["token_logprobs"]) == len(block["top_logprobs"]) == count + 4
    assert block["token_logprobs"][0] is None and block["top_logprobs"][0] is None
    assert all(isinstance(lp, float) and lp <= 0 for lp in block["token_logprobs"][1:])
    # text_offset runs over the whole echoed text, each token where its text starts
    assert echoed["text"] == PROMPT + plain["text"] and "".join(block["tokens"][:count]) == PROMPT
    assert block["text_offset"] == [len("".join(block["tokens"][:i])) for i in range(count + 4)]
    # every scored position: the token itself first, then up to `logprobs` alternatives (OpenAI's logprobs + 1)
    for token, logprob, top in zip(block["tokens"][1:], block["token_logprobs"][1:], block["top_logprobs"][1:]):
        assert next(iter(top.items())) == (token, logprob) and 1 <= len(top) <= 3
    # the completion's part is what the request without echo returned
    assert block["tokens"][count:] == generated["tokens"]
    assert block["token_logprobs"][count:] == pytest.approx(generated["token_logprobs"], abs=1e-4)


def test_scoring_prompt_plus_completion_gives_the_generated_tokens_logprobs(served):
    base_url, policy, score = served
    prompt_ids = encode(policy, PROMPT)
    generated = complete(
        base_url, prompt=prompt_ids, max_tokens=6, temperature=1.0, seed=3, logprobs=0, return_token_ids=True
    )["choices"][0]
    whole = prompt_ids + generated["token_ids"]
    scored = complete(base_url, prompt=whole, max_tokens=0, echo=True, logprobs=0)
    choice = scored["choices"][0]
    assert choice["finish_reason"] == "length" and scored["usage"]["completion_tokens"] == 0
    at_completion = choice["logprobs"]["token_logprobs"][len(prompt_ids) :]
    assert at_completion == pytest.approx(generated["logprobs"]["token_logprobs"], abs=1e-4)
    # and the prompt positions are the backend's own log-probs of the sequence
    assert choice["logprobs"]["token_logprobs"][1:] == pytest.approx(score(whole), abs=1e-4)


def test_llama_cpp_policy_scores_and_generates_consistently():
    pytest.importorskip("llama_cpp")
    from llmgym.wrappers.llamacpp_policy import SCORE_CHUNK, LlamaCppPolicy
    from llmgym.wrappers.models import tiny_random_gguf

    policy = LlamaCppPolicy(tiny_random_gguf(seed=0), n_ctx=512)
    try:
        prompt = (policy.tokenize(PROMPT) * 40)[: SCORE_CHUNK + 20]  # spans two scoring chunks
        sampling = SamplingParams(temperature=1.0, max_tokens=8, seed=5)
        plain = policy.complete([prompt], sampling, top_logprobs=3)[0]
        logprobs, tops = policy.score(prompt + plain.token_ids, top_logprobs=3)
        assert logprobs[0] is None and tops[0] is None and len(logprobs) == len(prompt) + 8
        assert logprobs[len(prompt) :] == pytest.approx(plain.logprobs, abs=1e-4)
        assert [list(top) for top in tops[len(prompt) :]] == [list(top) for top in plain.metadata["top_logprobs"]]
        for top in plain.metadata["top_logprobs"]:
            assert list(top.values()) == sorted(top.values(), reverse=True) and len(top) == 3
        # scoring the prompt while generating changes nothing about the generation
        scored = policy.complete([prompt], sampling, prompt_logprobs=True)[0]
        assert scored.token_ids == plain.token_ids
        assert scored.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
        assert scored.metadata["prompt_logprobs"] == pytest.approx(logprobs[: len(prompt)], abs=1e-5)
        # the KV cache left by scoring is reused, and the result is the same as from a fresh evaluation
        again = policy.complete([prompt], sampling)[0]
        assert again.token_ids == plain.token_ids and again.metadata["cached_prompt_tokens"] == len(prompt) - 1
        with pytest.raises(ValueError, match="n_ctx"):
            policy.score([1] * 513)
        with pytest.raises(ValueError, match="token_ids must be a non-empty list of ints"):
            policy.score([])
    finally:
        policy.close()


def _lm_eval_parse_logprobs(outputs: dict, ctxlens: list[int]) -> list[tuple[float, bool]]:
    """What lm-evaluation-harness's ``LocalCompletionsAPI.parse_logprobs`` does with a response."""
    results = []
    for choice, ctxlen in zip(sorted(outputs["choices"], key=lambda c: c["index"]), ctxlens):
        logprobs = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        greedy = all(lp == max(top.values()) for lp, top in zip(logprobs, tops))
        results.append((sum(logprobs), greedy))
    return results


def test_lm_eval_loglikelihood_request_end_to_end(served):
    base_url, policy, score = served
    context = encode(policy, "Question: what did the cat do? Answer:")
    greedy = complete(base_url, prompt=context, max_tokens=3, temperature=0, return_token_ids=True)
    greedy_continuation = greedy["choices"][0]["token_ids"]
    other_continuation = encode(policy, " it slept")
    prompts = [context + greedy_continuation, context + other_continuation]
    # the payload lm-eval's local-completions sends for loglikelihood (tokenized_requests=True): a batch of id lists
    payload = {
        "model": "tiny",
        "prompt": prompts,
        "temperature": 0,
        "max_tokens": 1,
        "logprobs": 1,
        "seed": 1234,
        "echo": True,
    }
    response = httpx.post(f"{base_url}/completions", json=payload, timeout=120)
    assert response.status_code == 200, response.text
    outputs = response.json()
    assert [c["index"] for c in outputs["choices"]] == [0, 1]
    assert outputs["usage"]["prompt_tokens"] == sum(len(p) for p in prompts)
    (greedy_ll, greedy_flag), (other_ll, other_flag) = _lm_eval_parse_logprobs(outputs, [len(context)] * 2)
    assert greedy_flag is True and other_flag is False
    for prompt, loglikelihood in zip(prompts, (greedy_ll, other_ll)):
        assert math.isfinite(loglikelihood) and loglikelihood < 0
        assert loglikelihood == pytest.approx(sum(score(prompt)[len(context) - 1 :]), abs=1e-3)


def test_openai_client_reads_the_echoed_prompt_logprobs(served):
    openai = pytest.importorskip("openai")
    base_url, policy, _ = served
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    completion = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
    choice = completion.choices[0]
    assert choice.text == PROMPT and completion.usage.completion_tokens == 0
    assert choice.logprobs.token_logprobs[0] is None and choice.logprobs.top_logprobs[0] is None
    assert len(choice.logprobs.tokens) == len(encode(policy, PROMPT))


def test_streamed_echo_chunk_carries_the_prompt_block(served):
    base_url, policy, _ = served
    body = {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "echo": True, "logprobs": 1}
    full = complete(base_url, **body)["choices"][0]["logprobs"]
    events = sse(base_url, {**body, "stream": True})
    first, *rest = [e["choices"][0] for e in events]
    count = len(encode(policy, PROMPT))
    assert first["text"] == PROMPT and first["logprobs"]["token_logprobs"][0] is None
    assert first["logprobs"]["tokens"] == full["tokens"][:count]
    pieces = [c["logprobs"] for c in rest if c["logprobs"] is not None]
    streamed = {key: first["logprobs"][key] + [x for piece in pieces for x in piece[key]] for key in full}
    assert streamed["tokens"] == full["tokens"] and streamed["text_offset"] == full["text_offset"]
    assert streamed["token_logprobs"][1:] == pytest.approx(full["token_logprobs"][1:], abs=1e-4)
    assert [None if t is None else list(t) for t in streamed["top_logprobs"]] == [
        None if t is None else list(t) for t in full["top_logprobs"]
    ]
    only_prompt = sse(base_url, {**body, "max_tokens": 0, "stream": True})
    assert [c["choices"][0]["text"] for c in only_prompt] == [PROMPT, ""]
    assert only_prompt[0]["choices"][0]["logprobs"]["tokens"] == full["tokens"][:count]


def test_echo_only_and_bad_requests(served):
    base_url, policy, _ = served
    echoed = complete(base_url, prompt=PROMPT, max_tokens=0, echo=True)
    assert echoed["choices"][0]["text"] == PROMPT and echoed["choices"][0]["logprobs"] is None
    assert echoed["usage"] == {
        "prompt_tokens": len(encode(policy, PROMPT)),
        "completion_tokens": 0,
        "total_tokens": len(encode(policy, PROMPT)),
    }
    for body, param in (
        ({"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),  # as vLLM: 0 only with echo
        ({"prompt": [[1, 2], []], "max_tokens": 0, "echo": True, "logprobs": 1}, None),
        ({"prompt": [10**9], "max_tokens": 0, "echo": True}, None),
        ({"prompt": [10**9], "max_tokens": 0, "echo": True, "logprobs": 0}, None),
        ({"prompt": PROMPT, "max_tokens": -1, "echo": True}, "max_tokens"),
    ):
        response = httpx.post(f"{base_url}/completions", json=body, timeout=60)
        assert response.status_code == 400, (body, response.text)
        if param:
            assert response.json()["error"]["param"] == param
    assert httpx.get(f"{base_url.removesuffix('/v1')}/health", timeout=10).status_code == 200
