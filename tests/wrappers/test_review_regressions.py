"""Regression tests for bugs found in review of the server, the OpenAI policy, rollout and the CLI."""

from __future__ import annotations

import asyncio

import pytest

from llmgym.wrappers.batching import MicroBatcher
from llmgym.wrappers.server.protocol import ChatCompletionRequest, CompletionRequest, LoadLoRARequest, parse_body


@pytest.mark.parametrize("field", ["n", "stream", "logprobs"])
def test_chat_request_takes_null_for_a_nullable_field_as_its_default(field):
    # OpenAI's schema (and vLLM) accept "n": null, "stream": null, "logprobs": null: null means the default
    body = parse_body(b'{"messages": [{"role": "user", "content": "hi"}], "%s": null}' % field.encode(),
                      ChatCompletionRequest)
    assert (body.n, body.stream, body.logprobs) == (1, False, False)


def test_completion_and_lora_requests_take_null_as_the_default():
    body = parse_body(b'{"prompt": [1, 2], "echo": null, "n": null, "stream": null}', CompletionRequest)
    assert (body.echo, body.n, body.stream) == (False, 1, False)
    lora = parse_body(b'{"lora_name": "a", "lora_path": "/a", "load_inplace": null}', LoadLoRARequest)
    assert lora.load_inplace is False


@pytest.mark.parametrize("inline", [False, True])
def test_a_batch_function_that_drops_a_result_fails_its_callers_instead_of_hanging(inline):
    batcher = MicroBatcher(lambda items: items[:-1], batch_size=4, wait_ms=1, inline=inline)

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True), 5)

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "2 results for 3 items" in str(r) for r in results)


def test_a_failed_in_place_lora_reload_no_longer_lists_the_deleted_adapter(tmp_path):
    peft = pytest.importorskip("peft")
    from llmgym.policy import PolicyRequest, SamplingParams
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.server.backend import ServedModel
    from llmgym.wrappers.server.protocol import APIError
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(type(policy.model)(policy.model.config), config).save_pretrained(tmp_path / "good")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "adapter_config.json").write_text("{not json")
    backend = ServedModel(policy, "tiny")
    request = PolicyRequest([{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=2, temperature=0))

    async def main():
        await backend.start()
        try:
            await backend.load_adapter("a", str(tmp_path / "good"))
            with pytest.raises(APIError, match="Could not load the lora adapter `a`"):
                await backend.load_adapter("a", str(tmp_path / "bad"), replace=True)
            # the old weights are gone: "a" must be unknown, not silently served by the base model
            assert "a" not in backend.adapters
            with pytest.raises(APIError, match="The model `a` does not exist") as err:
                await backend.generate(request, backend.resolve_model("a"))
            assert err.value.status == 404
        finally:
            await backend.stop()
            policy.close()

    asyncio.run(main())
