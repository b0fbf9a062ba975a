"""Chat prompts for local policies (llmgym/wrappers/prompting.py): continuing a prefix token for token, Qwen3-style
templates included, and tool calls in the prompts of templates without tool support.

Everything runs on the tiny random Llama (SmolLM2 tokenizer) or without a model.
"""

from __future__ import annotations

import pytest

from llmgym.policy import Generation, PolicyRequest, SamplingParams
from llmgym.rollout import rollout
from llmgym.rollout.tokens import TokenMismatchError, TokenRecord

WORDLE = "llmgym/Wordle-v0"
GUESS = {
    "type": "function",
    "function": {
        "name": "guess",
        "description": "Guess a word.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}
CALL = {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}
CALL_TEXT = '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'
ASSISTANT = {"role": "assistant", "content": "hi"}

# Qwen3's rule, reduced: a <think> block is shown only on assistant turns after the last user message.
QWEN3_STYLE = """{%- set ns = namespace(last_query_index=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_query_index = loop.index0 -%}{%- endif -%}\
{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{%- if loop.index0 > ns.last_query_index -%}\
{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' + m.content + '<|im_end|>\n' }}
{%- else -%}{{ '<|im_start|>assistant\n' + m.content + '<|im_end|>\n' }}{%- endif -%}
{%- else -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"""

# A template that cannot be continued: earlier replies are replaced once a user message follows.
FORGETFUL = QWEN3_STYLE.replace(
    "{{ '<|im_start|>assistant\n' + m.content + '<|im_end|>\n' }}",
    "{{ '<|im_start|>assistant\n(earlier reply)<|im_end|>\n' }}",
)


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from llmgym.wrappers.models import tiny_random_model

    return tiny_random_model(seed=0)


def prompter(tokenizer, template=None):
    from llmgym.wrappers.prompting import eos_token_ids, hf_chat_prompter

    return hf_chat_prompter(tokenizer, template, None, eos_token_ids(tokenizer))


def transformers_policy(tiny, **kwargs):
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    return TransformersPolicy(*tiny, **kwargs)


# -- templates that render earlier turns differently once more follow ---------------------


def test_a_qwen3_style_template_is_continued_from_the_prefix(tiny):
    """Regression: token-exact multi-turn rollouts with Qwen3-style templates used to fail with TokenMismatchError."""
    tokenizer = tiny[1]
    chat = prompter(tokenizer, QWEN3_STYLE)
    first = [{"role": "user", "content": "hi"}]
    prompt = chat.prepare(PolicyRequest(first)).ids
    generated = tokenizer.encode("<think>\nhmm\n</think>\n\ncrane<|im_end|>", add_special_tokens=False)
    prefix = prompt + generated
    messages = first + [
        {"role": "assistant", "content": "crane", "reasoning_content": "hmm"},
        {"role": "user", "content": "CRANE x x G x x"},
    ]
    second = chat.prepare(PolicyRequest(messages, prefix_token_ids=prefix))
    assert second.prefix_reused and second.ids[: len(prefix)] == prefix
    assert (
        tokenizer.decode(second.ids[len(prefix) :])
        == "\n<|im_start|>user\nCRANE x x G x x<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_rollout_with_a_qwen3_style_template_keeps_its_tokens(tiny):
    # The prompt opens <think> and the budget closes it, so each reply has a think block that a
    # re-rendered chat would drop from turn 1: only the prefix keeps it.
    template = QWEN3_STYLE.replace(
        "{{ '<|im_start|>assistant\n' }}{%- endif -%}", "{{ '<|im_start|>assistant\n<think>\n' }}{%- endif -%}"
    )
    policy = transformers_policy(tiny, chat_template=template, native_tools=False)
    sampling = SamplingParams(temperature=1.0, max_tokens=8, seed=1, thinking_budget=2)
    episode = rollout(WORDLE, policy, seeds=[0], sampling=sampling, env_kwargs={"max_turns": 2})[0]
    assert "error" not in episode.metadata and "token_ids_dropped" not in episode.metadata
    assert episode.num_turns == len(episode.turn_spans) == 2 and episode.metadata["reasoning"][0]
    assert len(episode.token_ids) == len(episode.mask) == len(episode.logprobs) > 0


def test_a_template_that_cannot_be_continued_drops_the_token_record_not_the_run(tiny):
    chat = prompter(tiny[1], FORGETFUL)
    messages = [{"role": "user", "content": "hi"}, ASSISTANT, {"role": "user", "content": "again"}]
    assert not chat.prepare(PolicyRequest(messages, prefix_token_ids=[1, 2, 3])).prefix_reused

    policy = transformers_policy(tiny, chat_template=FORGETFUL, native_tools=False)
    sampling = SamplingParams(temperature=1.0, max_tokens=6, seed=1)
    episode = rollout(WORDLE, policy, seeds=[0], sampling=sampling, env_kwargs={"max_turns": 2})[0]
    assert "error" not in episode.metadata and episode.num_turns == 2
    assert episode.token_ids == [] and "prefix_reused=False" in episode.metadata["token_ids_dropped"]


@pytest.mark.parametrize("metadata", [{"prefix_reused": False}, {"prefix_reused": True}, {}])
def test_only_a_policy_that_says_it_did_not_continue_the_prefix_is_forgiven(metadata):
    record = TokenRecord()
    record.add(Generation(ASSISTANT, prompt_token_ids=[1, 2], token_ids=[3], logprobs=[-0.5]), 1, None)
    retokenized = Generation(
        ASSISTANT, prompt_token_ids=[1, 2, 9, 4], token_ids=[5], logprobs=[-0.1], metadata=metadata
    )
    if metadata.get("prefix_reused") is False:  # a chat server, a template that cannot be continued
        record.add(retokenized, 2, [1, 2, 3])
        assert record.prefix() is None and record.dropped.startswith("turn 2: ")
    else:  # it answered as if it continued the prefix: training on these ids would be wrong
        with pytest.raises(TokenMismatchError, match="position 2 of 3"):
            record.add(retokenized, 2, [1, 2, 3])


# -- tool calls in the prompts of templates without tool support --------------------------


def test_past_tool_calls_and_results_are_shown_in_the_text_protocol(tiny):
    """Regression: templates without tool support (SmolLM2) used to render earlier tool calls as empty turns."""
    tokenizer = tiny[1]
    chat = prompter(tokenizer)
    assert not chat.native_tools
    messages = [
        {"role": "user", "content": "play"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "CRANE x x G x x"},
    ]
    text = tokenizer.decode(chat.prepare(PolicyRequest(messages, tools=[GUESS])).ids)
    assert "<|im_start|>assistant\n<|im_end|>" not in text
    assert f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>\n" in text
    assert (
        "<|im_start|>user\n<tool_response>\nCRANE x x G x x\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        in text
    )


def test_a_tool_call_that_cannot_be_shown_is_a_clear_error(tiny):
    bad = dict(CALL, function={"name": "guess", "arguments": "{not json"})
    messages = [{"role": "user", "content": "play"}, {"role": "assistant", "content": "", "tool_calls": [bad]}]
    with pytest.raises(ValueError, match="message 1: tool call 'guess': arguments are not valid JSON"):
        prompter(tiny[1]).prepare(PolicyRequest(messages, tools=[GUESS]))


def test_a_template_with_a_tool_role_keeps_tool_messages(tiny):
    template = (
        "{%- for m in messages -%}{%- if m.role == 'tool' -%}{{ '<|im_start|>tool\n' + m.content + '<|im_end|>\n' }}"
        "{%- else -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif -%}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
    )
    chat = prompter(tiny[1], template)
    assert not chat.native_tools and chat.tool_role
    messages = [
        {"role": "user", "content": "play"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "x x G x x"},
    ]
    text = tiny[1].decode(chat.prepare(PolicyRequest(messages, tools=[GUESS])).ids)
    assert f"assistant\n{CALL_TEXT}<|im_end|>" in text and "<|im_start|>tool\nx x G x x<|im_end|>" in text


def test_the_prefix_continues_over_tool_calls_and_equals_a_fresh_render(tiny):
    tokenizer = tiny[1]
    chat = prompter(tokenizer)
    first = [{"role": "user", "content": "play"}]
    prompt = chat.prepare(PolicyRequest(first, tools=[GUESS])).ids
    prefix = prompt + tokenizer.encode(CALL_TEXT + "<|im_end|>", add_special_tokens=False)
    # as the env records a text-protocol call: the text, and the parsed call
    messages = first + [
        {"role": "assistant", "content": CALL_TEXT, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "name": "guess", "content": "CRANE x x G x x"},
    ]
    second = chat.prepare(PolicyRequest(messages, tools=[GUESS], prefix_token_ids=prefix))
    assert second.prefix_reused and second.ids[: len(prefix)] == prefix
    assert tokenizer.decode(second.ids[len(prefix) :]) == (
        "\n<|im_start|>user\n<tool_response>\nCRANE x x G x x\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert second.ids == chat.prepare(PolicyRequest(messages, tools=[GUESS])).ids


def test_llmgym_serve_shows_the_model_its_earlier_tool_calls(tiny):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from llmgym.wrappers.server import create_app, serve_in_thread

    messages = [
        {"role": "user", "content": "play"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "CRANE x x G x x"},
    ]
    with serve_in_thread(create_app(transformers_policy(tiny), model_name="tiny")) as url:
        body = httpx.post(
            f"{url}/chat/completions",
            timeout=60,
            json={"model": "tiny", "messages": messages, "tools": [GUESS], "max_tokens": 2, "return_token_ids": True},
        ).json()
    text = tiny[1].decode(body["prompt_token_ids"])
    assert f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>" in text and "<tool_response>\nCRANE x x G x x" in text


# -- requests checked before batching ------------------------------------------------------


def test_a_negative_thinking_budget_is_refused_before_batching():
    from llmgym.policy import PolicyRequest, SamplingParams
    from llmgym.wrappers.prompting import check_request

    with pytest.raises(ValueError, match="thinking_budget"):
        check_request(
            PolicyRequest(messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(thinking_budget=-1))
        )
