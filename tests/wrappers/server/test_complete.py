"""Raw completions on the transformers backend (llmgym/wrappers/server/complete.py): a prompt's tokens do not depend on
the rest of its batch, and an empty stop string cuts nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")


def test_a_seeded_completion_is_the_same_alone_or_in_a_list_of_prompts():
    # transformers /v1/completions ran prompts of equal sampling (same seed) as one model.generate batch,
    # whose rows share one generator: "hello" with seed 1 gave other tokens beside "bye there" than alone.
    pytest.importorskip("fastapi")
    pytest.importorskip("transformers")
    import httpx

    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.server import create_app, serve_in_thread
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:

        def texts(prompt, **body):
            response = httpx.post(
                f"{base_url}/completions",
                timeout=120,
                json={"model": "tiny", "prompt": prompt, "max_tokens": 6, **body},
            )
            assert response.status_code == 200, response.text
            return [choice["text"] for choice in response.json()["choices"]]

        alone = texts("hello", seed=1)
        assert texts(["hello", "bye there", "a third prompt"], seed=1)[0] == alone[0]
        assert texts(["bye", "hello"], seed=1, n=2)[2] == alone[0]
        greedy = texts("hello", temperature=0)
        assert texts(["hello", "bye there"], temperature=0, seed=5)[0] == greedy[0]


def test_an_empty_stop_string_does_not_cut_a_served_completion():
    from llmgym.policy import SamplingParams
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.server.complete import complete_ids

    model, tokenizer = tiny_random_model(0)
    ids = tokenizer("hello there").input_ids
    plain = complete_ids(model, tokenizer, [(ids, SamplingParams(temperature=0, max_tokens=6))])[0]
    empty = complete_ids(model, tokenizer, [(ids, SamplingParams(temperature=0, max_tokens=6, stop=[""]))])[0]
    assert empty.token_ids == plain.token_ids and empty.message["content"] == plain.message["content"]
