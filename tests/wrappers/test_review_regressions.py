"""Regression tests for bugs found in review of the server, the OpenAI policy, rollout and the CLI."""

from __future__ import annotations

import asyncio

import pytest

from llmgym.wrappers.batching import MicroBatcher
from llmgym.wrappers.server_protocol import ChatCompletionRequest, CompletionRequest, LoadLoRARequest, parse_body


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
