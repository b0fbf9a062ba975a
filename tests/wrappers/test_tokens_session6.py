"""Token records of multi-turn episodes: continuing Qwen3-style templates, forced tokens,
tool calls in the prompts of templates without tools, chat servers that re-render the
chat, token support confirmed once, and one batcher shared by several event loops.

Everything runs on the tiny random Llama (SmolLM2 tokenizer) or without a model.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref

import pytest

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout import rollout
from llmgym.rollout.tokens import TokenMismatchError, TokenRecord
from llmgym.wrappers.batching import MicroBatcher

WORDLE = "llmgym/Wordle-v0"
GUESS = {"type": "function", "function": {"name": "guess", "description": "Guess a word.",
                                          "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}
CALL_TEXT = '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'
ASSISTANT = {"role": "assistant", "content": "hi"}

# Qwen3's rule, reduced: a <think> block is shown only on assistant turns after the last user message.
QWEN3_STYLE = """{%- set ns = namespace(last_query_index=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_query_index = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{%- if loop.index0 > ns.last_query_index -%}{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' + m.content + '<|im_end|>\n' }}
{%- else -%}{{ '<|im_start|>assistant\n' + m.content + '<|im_end|>\n' }}{%- endif -%}
{%- else -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"""

# A template that cannot be continued: earlier replies are replaced once a user message follows.
FORGETFUL = QWEN3_STYLE.replace(
    "{{ '<|im_start|>assistant\n' + m.content + '<|im_end|>\n' }}", "{{ '<|im_start|>assistant\n(earlier reply)<|im_end|>\n' }}"
)

# The thinking budget needs a prompt that opens a <think> block (R1-style).
OPENS_THINKING = ("{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor -%}"
                  "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n<think>\n' }}{%- endif -%}")


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


# -- 1. templates that render earlier turns differently once more follow ---------------------


def test_a_qwen3_style_template_is_continued_from_the_prefix(tiny):
    tokenizer = tiny[1]
    chat = prompter(tokenizer, QWEN3_STYLE)
    first = [{"role": "user", "content": "hi"}]
    prompt = chat.prepare(PolicyRequest(first)).ids
    generated = tokenizer.encode("<think>\nhmm\n</think>\n\ncrane<|im_end|>", add_special_tokens=False)
    prefix = prompt + generated
    messages = first + [{"role": "assistant", "content": "crane", "reasoning_content": "hmm"},
                        {"role": "user", "content": "CRANE x x G x x"}]
    second = chat.prepare(PolicyRequest(messages, prefix_token_ids=prefix))
    assert second.prefix_reused and second.ids[: len(prefix)] == prefix
    assert tokenizer.decode(second.ids[len(prefix):]) == "\n<|im_start|>user\nCRANE x x G x x<|im_end|>\n<|im_start|>assistant\n"


def test_a_rollout_with_a_qwen3_style_template_keeps_its_tokens(tiny):
    # The prompt opens <think> and the budget closes it, so each reply has a think block that a
    # re-rendered chat would drop from turn 1: only the prefix keeps it.
    template = QWEN3_STYLE.replace("{{ '<|im_start|>assistant\n' }}{%- endif -%}",
                                   "{{ '<|im_start|>assistant\n<think>\n' }}{%- endif -%}")
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
    retokenized = Generation(ASSISTANT, prompt_token_ids=[1, 2, 9, 4], token_ids=[5], logprobs=[-0.1], metadata=metadata)
    if metadata.get("prefix_reused") is False:  # a chat server, a template that cannot be continued
        record.add(retokenized, 2, [1, 2, 3])
        assert record.prefix() is None and record.dropped.startswith("turn 2: ")
    else:  # it answered as if it continued the prefix: training on these ids would be wrong
        with pytest.raises(TokenMismatchError, match="position 2 of 3"):
            record.add(retokenized, 2, [1, 2, 3])


# -- 2. forced thinking-close tokens are not policy tokens ------------------------------------


def test_forced_positions_get_mask_0_and_keep_their_logprobs():
    record = TokenRecord()
    generation = Generation(ASSISTANT, prompt_token_ids=[1, 2], token_ids=[3, 4, 5, 6],
                            logprobs=[-0.1, -0.2, -0.3, -0.4], metadata={"forced_positions": [1, 2]})
    record.add(generation, 1, None)
    assert record.mask == [0, 0, 1, 0, 0, 1]
    assert record.logprobs == [0.0, 0.0, -0.1, -0.2, -0.3, -0.4] and record.turn_spans == [(2, 6)]
    with pytest.raises(TokenMismatchError, match="forced position 4"):
        TokenRecord().add(Generation(ASSISTANT, prompt_token_ids=[1], token_ids=[3, 4], logprobs=[-0.1, -0.2],
                                     metadata={"forced_positions": [4]}), 1, None)


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


# -- 3. tool calls in the prompts of templates without tool support --------------------------


def test_past_tool_calls_and_results_are_shown_in_the_text_protocol(tiny):
    tokenizer = tiny[1]
    chat = prompter(tokenizer)
    assert not chat.native_tools
    messages = [{"role": "user", "content": "play"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "CRANE x x G x x"}]
    text = tokenizer.decode(chat.prepare(PolicyRequest(messages, tools=[GUESS])).ids)
    assert "<|im_start|>assistant\n<|im_end|>" not in text
    assert f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\nCRANE x x G x x\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text


def test_a_tool_call_that_cannot_be_shown_is_a_clear_error(tiny):
    bad = dict(CALL, function={"name": "guess", "arguments": "{not json"})
    messages = [{"role": "user", "content": "play"}, {"role": "assistant", "content": "", "tool_calls": [bad]}]
    with pytest.raises(ValueError, match="message 1: tool call 'guess': arguments are not valid JSON"):
        prompter(tiny[1]).prepare(PolicyRequest(messages, tools=[GUESS]))


def test_a_template_with_a_tool_role_keeps_tool_messages(tiny):
    template = ("{%- for m in messages -%}{%- if m.role == 'tool' -%}{{ '<|im_start|>tool\n' + m.content + '<|im_end|>\n' }}"
                "{%- else -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif -%}{%- endfor -%}"
                "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}")
    chat = prompter(tiny[1], template)
    assert not chat.native_tools and chat.tool_role
    messages = [{"role": "user", "content": "play"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "x x G x x"}]
    text = tiny[1].decode(chat.prepare(PolicyRequest(messages, tools=[GUESS])).ids)
    assert f"assistant\n{CALL_TEXT}<|im_end|>" in text and "<|im_start|>tool\nx x G x x<|im_end|>" in text


def test_the_prefix_continues_over_tool_calls_and_equals_a_fresh_render(tiny):
    tokenizer = tiny[1]
    chat = prompter(tokenizer)
    first = [{"role": "user", "content": "play"}]
    prompt = chat.prepare(PolicyRequest(first, tools=[GUESS])).ids
    prefix = prompt + tokenizer.encode(CALL_TEXT + "<|im_end|>", add_special_tokens=False)
    # as the env records a text-protocol call: the text, and the parsed call
    messages = first + [{"role": "assistant", "content": CALL_TEXT, "tool_calls": [CALL]},
                        {"role": "tool", "tool_call_id": "c1", "name": "guess", "content": "CRANE x x G x x"}]
    second = chat.prepare(PolicyRequest(messages, tools=[GUESS], prefix_token_ids=prefix))
    assert second.prefix_reused and second.ids[: len(prefix)] == prefix
    assert tokenizer.decode(second.ids[len(prefix):]) == (
        "\n<|im_start|>user\n<tool_response>\nCRANE x x G x x\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert second.ids == chat.prepare(PolicyRequest(messages, tools=[GUESS])).ids


def test_llmgym_serve_shows_the_model_its_earlier_tool_calls(tiny):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from llmgym.wrappers.server import create_app, serve_in_thread

    messages = [{"role": "user", "content": "play"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "CRANE x x G x x"}]
    with serve_in_thread(create_app(transformers_policy(tiny), model_name="tiny")) as url:
        body = httpx.post(f"{url}/chat/completions", timeout=60, json={
            "model": "tiny", "messages": messages, "tools": [GUESS], "max_tokens": 2, "return_token_ids": True}).json()
    text = tiny[1].decode(body["prompt_token_ids"])
    assert f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>" in text and "<tool_response>\nCRANE x x G x x" in text


# -- 4 and 5. OpenAIPolicy through chat completions ------------------------------------------


def test_a_chat_server_rollout_drops_the_token_record_instead_of_failing(tiny):
    pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from llmgym.wrappers.openai_policy import OpenAIPolicy
    from llmgym.wrappers.server import create_app, serve_in_thread

    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=3)
    with serve_in_thread(create_app(transformers_policy(tiny), model_name="tiny", batch_wait_s=0.01)) as url:
        policy = OpenAIPolicy("tiny", base_url=url)
        try:
            episode = rollout(WORDLE, policy, seeds=[0], sampling=sampling)[0]
        finally:
            policy.close()
    # the server's re-tokenized history differs from the ids generated on turn 1
    assert "error" not in episode.metadata and episode.num_turns == 10
    assert episode.token_ids == [] and episode.metadata["token_ids_dropped"].startswith("turn 2: ")
    assert "prefix_reused=False" in episode.metadata["token_ids_dropped"]


class _Echo(Policy):
    """Answers with token ids; a prompt holding ``BAD`` is refused with a message that says "extra"."""

    name = "echo"
    returns_tokens = True

    def generate(self, requests):
        if any("BAD" in r.messages[-1]["content"] for r in requests):
            raise ValueError("the prompt has an extra long line")
        return [Generation({"role": "assistant", "content": "ok"}, prompt_token_ids=[1, 2], token_ids=[3],
                           logprobs=[-0.1]) for _ in requests]


def test_one_unrelated_400_does_not_turn_token_collection_off():
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from llmgym.wrappers.openai_policy import OpenAIPolicy
    from llmgym.wrappers.server import create_app, serve_in_thread

    def ask(policy, text):
        return policy.generate([PolicyRequest([{"role": "user", "content": text}])])[0]

    with serve_in_thread(create_app(_Echo(), model_name="echo", batch_wait_s=0.005)) as url:
        policy = OpenAIPolicy("echo", base_url=url, max_retries=0)
        try:
            assert ask(policy, "hi").token_ids == [3] and policy.return_tokens is True
            with pytest.raises(openai.BadRequestError):
                ask(policy, "BAD")
            assert policy.return_tokens is True and ask(policy, "hi").token_ids == [3]
        finally:
            policy.close()


# -- 6. one batcher, several event loops -------------------------------------------------------


def _join(threads: list[threading.Thread], seconds: float) -> None:
    """Wait for the threads, ``seconds`` in all (a deadlocked one is left behind: they are daemons)."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


def test_a_batcher_shared_by_two_event_loops_serves_both():
    batches: list[list[tuple[str, int]]] = []
    active, most = [0], [0]
    guard = threading.Lock()

    def run_batch(items):
        with guard:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.02)
        with guard:
            active[0] -= 1
            batches.append(list(items))
        return [f"{name}{i}" for name, i in items]

    batcher = MicroBatcher(run_batch, batch_size=8, wait_ms=100)
    results: dict[str, list[str]] = {}
    a_queued = threading.Event()

    def play(name: str) -> None:
        async def main():
            if name == "B":  # B's loop submits while A's items wait for their batch to fill
                a_queued.wait(10)
            calls = [asyncio.ensure_future(batcher.submit((name, i))) for i in range(4)]
            await asyncio.sleep(0)
            a_queued.set()
            return await asyncio.gather(*calls)

        results[name] = asyncio.run(main())

    threads = [threading.Thread(target=play, args=(name,), daemon=True) for name in "AB"]
    for thread in threads:
        thread.start()
    _join(threads, seconds=20)
    assert not any(thread.is_alive() for thread in threads), "a loop's callers were left waiting"
    assert results == {"A": ["A0", "A1", "A2", "A3"], "B": ["B0", "B1", "B2", "B3"]}
    assert sorted(len(b) for b in batches) == [4, 4]  # each loop's requests still batched together
    assert most[0] == 1  # one batch at a time over all loops


def test_a_batcher_does_not_keep_finished_event_loops_alive():
    batcher = MicroBatcher(lambda xs: xs, batch_size=2, wait_ms=1)
    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(batcher.submit(7)) == 7
    loop.close()
    ref = weakref.ref(loop)
    del loop
    gc.collect()
    assert ref() is None


def test_two_rollouts_in_two_threads_share_one_transformers_policy(tiny):
    policy = transformers_policy(tiny, batch_wait_ms=20)
    sampling = SamplingParams(temperature=1.0, max_tokens=4, seed=1)
    results: dict[str, list] = {}

    def play(name: str) -> None:
        results[name] = rollout(WORDLE, policy, seeds=4, sampling=sampling, env_kwargs={"max_turns": 2}, max_concurrency=4)

    threads = [threading.Thread(target=play, args=(name,), daemon=True) for name in "AB"]
    for thread in threads:
        thread.start()
    _join(threads, seconds=60)
    assert not any(thread.is_alive() for thread in threads), "the rollouts deadlocked"
    assert [len(results[name]) for name in "AB"] == [4, 4]
    assert all(e.token_ids and "error" not in e.metadata for name in "AB" for e in results[name])
