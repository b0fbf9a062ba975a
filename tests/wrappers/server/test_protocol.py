"""The request bodies ``llmgym serve`` parses (llmgym/wrappers/server/protocol.py): ``null`` where OpenAI's schema
allows it means the default, as in OpenAI's API and vLLM."""

from __future__ import annotations

import pytest

from llmgym.wrappers.server.protocol import ChatCompletionRequest, CompletionRequest, LoadLoRARequest, parse_body


@pytest.mark.parametrize("field", ["n", "stream", "logprobs"])
def test_chat_request_takes_null_for_a_nullable_field_as_its_default(field):
    # OpenAI's schema (and vLLM) accept "n": null, "stream": null, "logprobs": null: null means the default
    body = parse_body(
        b'{"messages": [{"role": "user", "content": "hi"}], "%s": null}' % field.encode(), ChatCompletionRequest
    )
    assert (body.n, body.stream, body.logprobs) == (1, False, False)


def test_completion_and_lora_requests_take_null_as_the_default():
    body = parse_body(b'{"prompt": [1, 2], "echo": null, "n": null, "stream": null}', CompletionRequest)
    assert (body.echo, body.n, body.stream) == (False, 1, False)
    lora = parse_body(b'{"lora_name": "a", "lora_path": "/a", "load_inplace": null}', LoadLoRARequest)
    assert lora.load_inplace is False
