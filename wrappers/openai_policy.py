"""A policy that talks to any OpenAI-compatible chat-completions server.

Holds :class:`OpenAIPolicy`, which drives vLLM (``vllm serve``), OpenAI, or
llmgym's own server (``llmgym serve``) through the async ``openai`` client,
and :func:`to_text_protocol`, which rewrites a chat for servers without
native tool calling.

- Retries with exponential backoff on 408/409/429/5xx, timeouts and
  connection errors come from the ``openai`` client itself (``max_retries``).
- Concurrency is bounded by one semaphore shared by every caller.
- Several base URLs spread the load (:class:`~llmgym.wrappers.routing.ServerRouter`):
  a new episode goes to the server with the fewest requests in flight and its
  later turns stay there (its prefix cache); a server that stays unreachable
  after its retries is taken out for ``server_retry_after`` seconds and the
  request, with its episode, moves to another one.
- Tools go as native ``tools=`` when the server takes them; with
  ``native_tools=None`` the first rejection switches to the text protocol
  (:func:`llmgym.policy.tool_protocol_prompt`) for the rest of the run.
- For training it asks for ``logprobs`` and vLLM's ``return_token_ids`` /
  ``return_tokens_as_token_ids`` and fills :class:`~llmgym.policy.Generation`'s
  token ids and log-probs from them; a server that rejects those extras before
  it has accepted them once is asked without them from then on. Without a
  tokenizer the server re-renders the chat each turn, so the generations say
  ``prefix_reused=False`` and a multi-turn rollout keeps no token record
  (``metadata["token_ids_dropped"]``) when the re-rendered ids differ.
- Token-exact mode: given the served model's ``tokenizer=``, the policy renders
  prompts itself with :class:`~llmgym.wrappers.prompting.ChatPrompter` (the
  local policies' prompter: ``prefix_token_ids`` plus the new turns) and sends
  the token ids to ``/v1/completions``, so multi-turn episodes keep exactly the
  tokens the model produced, as with a local policy.

All network work runs on one private event-loop thread, so the policy can
be called from :meth:`generate` (sync), from any event loop through
:meth:`agenerate`, or from many threads at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from llmgym.messages import Message
from llmgym.parsing import parse_text_tool_calls
from llmgym.policy import Generation, Policy, PolicyRequest, tool_protocol_prompt
from llmgym.wrappers.prompting import ChatPrompter, Prompt, eos_token_ids, hf_chat_prompter, text_protocol_message
from llmgym.wrappers.routing import ServerRouter
from llmgym.wrappers.thinking import split_thinking

__all__ = ["OpenAIPolicy", "to_text_protocol"]

_VLLM_TOKEN_EXTRAS = {"return_token_ids": True, "return_tokens_as_token_ids": True}
_INSTALL_HINT = 'the OpenAI-compatible policy needs the openai package: pip install "llmgym[openai]"'


class OpenAIPolicy(Policy):
    """An LLM behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        model: the model name the server knows (``"smollm2-135m"`` for
            ``llmgym serve``, ``"Qwen/Qwen3-8B"`` for a vLLM server...).
        base_url: the server's ``/v1`` URL, or a list of several to spread
            episodes over (least busy for a new episode, the same for its later turns).
        api_key: the key; defaults to ``$OPENAI_API_KEY``, else ``"EMPTY"``
            (local servers accept any key).
        native_tools: ``True`` sends tools as ``tools=``; ``False`` writes
            them into the system prompt (text protocol); ``None`` tries native
            first and falls back to text when the server rejects tools.
        return_tokens: ask for token ids and log-probs (vLLM extras plus
            ``logprobs=True``); ``None`` asks and stops asking if the server
            rejects them before it has ever accepted them, ``False`` never asks.
        max_concurrency: most requests in flight at once, over all servers.
        timeout: seconds before one HTTP attempt times out.
        max_retries: retries per request (exponential backoff, honouring
            ``Retry-After``), done by the ``openai`` client.
        extra_body: extra JSON fields sent with every request (for example
            vLLM's ``{"top_k": 20}``).
        tokenizer: the served model's tokenizer (a transformers tokenizer, or
            a local path or cached name loaded offline with ``AutoTokenizer``).
            With it the policy is token-exact: it builds the prompt token ids
            itself (chat template, text tool protocol when the template has no
            tools, ``prefix_token_ids`` plus the new turns) and calls
            ``/v1/completions`` with them; ``native_tools`` then means whether
            the template renders the tools (``None``: when it can).
        server_retry_after: seconds a server that could not be reached is left out
            before new episodes try it again (several base URLs).

    Raises:
        ImportError: the ``openai`` package is missing (names the extra to install).
        ValueError: no base URL, a limit below 1, ``tokenizer`` with
            ``return_tokens=False``, or a tokenizer without a chat template.
        OSError: ``tokenizer`` is a path or name that cannot be loaded offline.

    Example:
        >>> policy = OpenAIPolicy("smollm2-135m", base_url="http://127.0.0.1:8000/v1")
        >>> policy.name, policy.base_urls
        ('openai:smollm2-135m', ['http://127.0.0.1:8000/v1'])
        >>> policy.close()
    """

    def __init__(
        self,
        model: str,
        base_url: str | list[str] = "http://127.0.0.1:8000/v1",
        api_key: str | None = None,
        native_tools: bool | None = None,
        return_tokens: bool | None = None,
        max_concurrency: int = 64,
        timeout: float = 120.0,
        max_retries: int = 4,
        extra_body: dict[str, Any] | None = None,
        tokenizer: Any = None,
        server_retry_after: float = 30.0,
    ):
        try:
            import openai
        except ImportError as err:
            raise ImportError(_INSTALL_HINT) from err
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            raise ValueError(f"base_url must be a URL or a non-empty list of URLs, got {base_url!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        if tokenizer is not None and return_tokens is False:
            raise ValueError("tokenizer= makes the policy token-exact, which needs token ids: drop return_tokens=False")
        self._openai = openai
        self.model = model
        self.name = f"openai:{model}"
        self.base_urls = [u.rstrip("/") for u in urls]
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.native_tools = native_tools
        self.return_tokens = return_tokens
        self.returns_tokens = return_tokens is not False
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.extra_body = dict(extra_body or {})
        self.router = ServerRouter(len(self.base_urls), retry_after=server_retry_after)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._clients: list[Any] = []
        self._semaphore: asyncio.Semaphore | None = None
        self._start_lock = threading.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.tokenizer = _load_tokenizer(tokenizer) if tokenizer is not None else None
        self.prompter: ChatPrompter | None = None
        if self.tokenizer is not None:
            self.prompter = hf_chat_prompter(self.tokenizer, None, native_tools, eos_token_ids(self.tokenizer))
            self.returns_tokens = True
            self.native_tools = self.prompter.native_tools  # what the template does with tools

    # -- public API ---------------------------------------------------------

    async def agenerate(self, request: PolicyRequest) -> Generation:
        """Generate one assistant turn (from any event loop)."""
        future = asyncio.run_coroutine_threadsafe(self._generate(request), self._ensure_loop())
        return await asyncio.wrap_future(future)

    def generate(self, requests: list[PolicyRequest]) -> list[Generation]:
        """Generate one turn per request, all concurrently (bounded by ``max_concurrency``)."""
        loop = self._ensure_loop()

        async def run_all() -> list[Generation]:
            return list(await asyncio.gather(*(self._generate(r) for r in requests)))

        return asyncio.run_coroutine_threadsafe(run_all(), loop).result()

    def close(self) -> None:
        """Close the HTTP clients and stop the event-loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            # Requests still in flight fail with a clear error instead of leaving their callers waiting forever.
            self._closing = True
            tasks = [task for task in self._tasks if not task.done()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in self._clients:
                await client.close()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._loop = self._thread = self._semaphore = None
        self._clients = []

    def __del__(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)

    # -- internals ----------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._closing = False
                self._thread = threading.Thread(target=loop.run_forever, name="llmgym-openai", daemon=True)
                self._thread.start()

                async def setup() -> None:
                    self._semaphore = asyncio.Semaphore(self.max_concurrency)
                    self._clients = [
                        self._openai.AsyncOpenAI(
                            base_url=url, api_key=self.api_key, timeout=self.timeout, max_retries=self.max_retries
                        )
                        for url in self.base_urls
                    ]

                asyncio.run_coroutine_threadsafe(setup(), loop).result()
                self._loop = loop
            return self._loop

    async def _generate(self, request: PolicyRequest) -> Generation:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            return await self._generate_bounded(request)
        except asyncio.CancelledError:
            if self._closing:
                raise RuntimeError(f"{self.name} was closed while this request was in flight") from None
            raise
        finally:
            self._tasks.discard(task)

    async def _generate_bounded(self, request: PolicyRequest) -> Generation:
        assert self._semaphore is not None
        prompt = self.prompter.prepare(request) if self.prompter is not None else None
        async with self._semaphore:
            tried: set[int] = set()
            while True:
                index = self.router.pick(request.episode_id, tried)
                self.router.begin(index)
                try:
                    if prompt is not None:
                        generation = await self._complete_on(index, prompt)
                    else:
                        generation = await self._generate_on(index, request)
                    self.router.succeed(index)
                    return generation
                except self._openai.APIConnectionError as err:
                    tried.add(index)
                    timed_out = isinstance(err, self._openai.APITimeoutError)  # reachable, but too slow to answer
                    if not timed_out:
                        self.router.fail(index)
                    if len(tried) == len(self.base_urls):
                        if timed_out:
                            raise _timed_out(self.base_urls, tried, self.timeout, self.max_retries) from err
                        raise _unreachable(self.base_urls, tried, err) from err
                finally:
                    self.router.end(index)

    async def _generate_on(self, index: int, request: PolicyRequest) -> Generation:
        client = self._clients[index]
        started = time.perf_counter()
        while True:
            native = bool(request.tools) and self.native_tools is not False
            want_tokens = self.return_tokens is not False
            kwargs = self._request_kwargs(request, native, want_tokens)
            try:
                response = await client.chat.completions.create(**kwargs)
                break
            except self._openai.BadRequestError as err:
                text = str(err).lower()
                # Another request may have switched already; what matters is what this one sent.
                names_tokens = "return_token" in text or "logprob" in text
                # "Extra inputs are not permitted" alone does not say which field: one naming tools is about tools.
                vague = ("unrecognized" in text or "extra" in text) and not (native and "tool" in text)
                if want_tokens and self.return_tokens is not True and (names_tokens or vague):
                    self.return_tokens = False
                    self.returns_tokens = False
                    continue
                if native and self.native_tools is not True and "tool" in text:
                    self.native_tools = False
                    continue
                raise
        if native and self.native_tools is None:
            self.native_tools = True
        if want_tokens and self.return_tokens is None:  # accepted once: a later 400 is that request's own fault
            self.return_tokens = True
        generation = _read_response(response, text_protocol=bool(request.tools) and not native)
        generation.metadata.update(
            {
                "model": response.model or self.model,
                "base_url": self.base_urls[index],
                "latency_s": time.perf_counter() - started,
                "native_tools": native,
                # The chat API has no field for prefix_token_ids: the server re-renders the chat, so its prompt ids
                # need not continue the previous turn's (the rollout then drops the token record, not the run).
                "prefix_reused": False,
                "token_exact": False,
            }
        )
        return generation

    async def _complete_on(self, index: int, prompt: Prompt) -> Generation:
        """One token-exact turn: the prompt's ids to ``/v1/completions``, token ids and log-probs back."""
        sampling = prompt.request.sampling
        kwargs: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt.ids),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "logprobs": 0,
            "extra_body": {**self.extra_body, **_VLLM_TOKEN_EXTRAS},
        }
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        started = time.perf_counter()
        response = await self._clients[index].completions.create(**kwargs)
        generation = _read_completion(response, prompt)
        generation.metadata.update(
            {
                "model": response.model or self.model,
                "base_url": self.base_urls[index],
                "latency_s": time.perf_counter() - started,
                "prefix_reused": prompt.prefix_reused,
                "token_exact": True,
            }
        )
        return generation

    def _request_kwargs(self, request: PolicyRequest, native: bool, want_tokens: bool) -> dict[str, Any]:
        sampling = request.sampling
        messages = (
            request.messages if native or not request.tools else to_text_protocol(request.messages, request.tools)
        )
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if native:
            kwargs["tools"] = request.tools
        extra = dict(self.extra_body)
        if want_tokens:
            kwargs["logprobs"] = True
            extra.update(_VLLM_TOKEN_EXTRAS)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs


def to_text_protocol(messages: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
    """Rewrite a chat for a server without native tools.

    The tool descriptions join the system prompt; earlier native tool calls
    become ``<tool_call>`` blocks in the assistant text, and ``tool`` results
    become user turns wrapped in ``<tool_response>`` (the convention of
    Qwen-style templates), so any chat template can render the chat. The local
    policies show a chat to a template without tool support the same way
    (:func:`~llmgym.wrappers.prompting.text_protocol_message`).

    Example:
        >>> tools = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]
        >>> call = {"id": "c0", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}
        >>> chat = to_text_protocol([
        ...     {"role": "user", "content": "Play."},
        ...     {"role": "assistant", "content": "", "tool_calls": [call]},
        ...     {"role": "tool", "tool_call_id": "c0", "name": "guess", "content": "CRANE x x G x x"}], tools)
        >>> [m["role"] for m in chat]
        ['system', 'user', 'assistant', 'user']
        >>> chat[2]["content"]
        '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'
    """
    protocol = tool_protocol_prompt(tools)
    # The server's template is unknown: tool results go as user turns, which every template renders.
    out: list[Message] = [dict(text_protocol_message(message, tool_role=False)) for message in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content') or ''}\n\n{protocol}".strip()
    else:
        out.insert(0, {"role": "system", "content": protocol})
    return out


def _read_response(response: Any, text_protocol: bool) -> Generation:
    if not response.choices:
        raise RuntimeError(f"the server answered without choices: {response!r}")
    choice = response.choices[0]
    content = choice.message.content or ""
    message: Message = {"role": "assistant", "content": content}
    # vLLM's reasoning parsers split the thinking off: older versions call it reasoning_content, newer reasoning.
    reasoning = getattr(choice.message, "reasoning_content", None) or getattr(choice.message, "reasoning", None)
    if isinstance(reasoning, str) and reasoning:
        message["reasoning_content"] = reasoning
    finish_reason = choice.finish_reason or "stop"
    native_calls = choice.message.tool_calls or []
    if native_calls:
        message["tool_calls"] = [call.model_dump(exclude_none=True) for call in native_calls]
    elif text_protocol:
        # The env parses <tool_call> text itself; the finish reason still says a call was made.
        if parse_text_tool_calls(content)[1]:
            finish_reason = "tool_calls"
    token_ids, logprobs = _read_tokens(choice)
    thinking = 0
    usage = getattr(response, "usage", None)
    details = getattr(usage, "completion_tokens_details", None) if usage else None
    if details is not None and getattr(details, "reasoning_tokens", None):
        thinking = int(details.reasoning_tokens)
    prompt_ids = getattr(response, "prompt_token_ids", None)
    return Generation(
        message=message,
        prompt_token_ids=list(prompt_ids) if prompt_ids is not None else None,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=finish_reason,
        thinking_tokens=thinking,
        metadata={"usage": usage.model_dump() if usage is not None else None},
    )


def _read_tokens(choice: Any) -> tuple[list[int] | None, list[float] | None]:
    """Token ids and log-probs from a choice: vLLM's ``token_ids`` or ``"token_id:N"`` logprob tokens."""
    entries = (choice.logprobs.content or []) if getattr(choice, "logprobs", None) is not None else []
    logprobs = [float(entry.logprob) for entry in entries] if entries else None
    token_ids = getattr(choice, "token_ids", None)
    if token_ids is not None:
        token_ids = [int(t) for t in token_ids]
    elif entries and all(entry.token.startswith("token_id:") for entry in entries):
        token_ids = [int(entry.token.split(":", 1)[1]) for entry in entries]
    if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
        raise RuntimeError(
            f"the server returned {len(token_ids)} token ids but {len(logprobs)} log-probs for one completion"
        )
    return token_ids, logprobs


def _read_completion(response: Any, prompt: Prompt) -> Generation:
    """A token-exact :class:`Generation` from a ``/v1/completions`` response to ``prompt.ids``."""
    if not response.choices:
        raise RuntimeError(f"the server answered without choices: {response!r}")
    choice = response.choices[0]
    echoed = getattr(choice, "prompt_token_ids", None) or getattr(response, "prompt_token_ids", None)
    if echoed is not None and [int(t) for t in echoed] != list(prompt.ids):
        raise RuntimeError(
            f"the server saw other prompt token ids than the {len(prompt.ids)} sent ({len(echoed)} ids): "
            "it must take token-id prompts verbatim (no added BOS) for token-exact episodes"
        )
    block = getattr(choice, "logprobs", None)
    tokens = list(getattr(block, "tokens", None) or []) if block is not None else []
    raw_logprobs = list(getattr(block, "token_logprobs", None) or []) if block is not None else []
    token_ids = getattr(choice, "token_ids", None)
    if token_ids is not None:
        token_ids = [int(t) for t in token_ids]
    elif tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        token_ids = [int(t.split(":", 1)[1]) for t in tokens]
    else:
        raise RuntimeError(
            "the server returned no completion token ids; token-exact mode needs a server that honours "
            "return_token_ids or return_tokens_as_token_ids (llmgym serve, vLLM)"
        )
    if len(raw_logprobs) != len(token_ids) or any(lp is None for lp in raw_logprobs):
        raise RuntimeError(
            f"the server returned {len(raw_logprobs)} log-probs for {len(token_ids)} completion tokens; "
            "token-exact mode needs one per token (logprobs=0)"
        )
    text = choice.text or ""
    for stop in prompt.request.sampling.stop:
        if stop and stop in text:
            text = text[: text.index(stop)]
    message: Message = {"role": "assistant", "content": text}
    reasoning, answer = split_thinking(text, prompt.opens_thinking)
    if reasoning is not None:
        message = {"role": "assistant", "content": answer, "reasoning_content": reasoning}
    usage = getattr(response, "usage", None)
    return Generation(
        message=message,
        prompt_token_ids=list(prompt.ids),
        token_ids=token_ids,
        logprobs=[float(lp) for lp in raw_logprobs],
        finish_reason=choice.finish_reason or "stop",
        metadata={"usage": usage.model_dump() if usage is not None else None},
    )


def _load_tokenizer(source: Any) -> Any:
    """A tokenizer object as given, or loaded offline from a local path or cached name."""
    if not isinstance(source, (str, os.PathLike)):
        if not callable(getattr(source, "apply_chat_template", None)) or not callable(getattr(source, "encode", None)):
            raise TypeError(f"tokenizer must be a transformers tokenizer or a path/name, got {type(source).__name__}")
        return source
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        raise ImportError('tokenizer= by name needs transformers: pip install "llmgym[transformers]"') from err
    try:
        return AutoTokenizer.from_pretrained(os.fspath(source), local_files_only=True)
    except (OSError, ValueError) as err:
        raise OSError(
            f"cannot load the tokenizer {os.fspath(source)!r} offline (a local folder or a cached model name): {err}"
        ) from err


def _timed_out(urls: list[str], tried: set[int], timeout: float, retries: int) -> TimeoutError:
    names = ", ".join(urls[i] for i in sorted(tried))
    return TimeoutError(
        f"the OpenAI-compatible server at {names} did not answer within timeout={timeout:g} s "
        f"({retries} retries): pass a larger timeout= or ask for fewer max_tokens"
    )


def _unreachable(urls: list[str], tried: set[int], err: Exception) -> ConnectionError:
    names = ", ".join(urls[i] for i in sorted(tried))
    return ConnectionError(
        f"cannot reach the OpenAI-compatible server at {names} ({type(err).__name__}: {err}). "
        "Is it running (`llmgym serve`, `vllm serve`) and is the URL right (it usually ends in /v1)?"
    )
