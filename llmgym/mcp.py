"""MCP: the tools of any Model Context Protocol server as an environment's tools.

Holds :class:`MCPToolset` (starts an MCP server over stdio with the ``mcp``
package, lists its tools, calls them), :class:`MCPTool` (one server tool with
the interface :class:`~llmgym.LLMEnv` expects of a tool: ``name``, ``schema``
and ``call(arguments) -> ToolResult``), :func:`openai_tool_schema` and
:class:`MCPEnv`, an example environment that hands an MCP server's tools to
the agent and ends when it submits an answer.

The MCP client is async; llmgym's ``step`` is not. The client session lives
on a private event-loop thread for the toolset's lifetime, and each call is
submitted to it and waited for with a timeout, so a synchronous ``step`` (or
many threads at once) can call tools.

Arguments are validated with ``jsonschema`` against the tool's
``inputSchema`` before anything is sent; invalid ones get the same
``"Error: invalid arguments for <tool>: ..."`` observation as a Python tool
(so the rubric's format penalty applies). A tool that reports an error
(``isError``), a timeout, or a server that died also come back as error
observations; none of them raises inside an episode. A ``$ref`` in an input
schema must resolve inside that schema: a tool with a dangling or remote one
is refused when the toolset starts (remote references are never fetched).

A toolset nobody refers to any more is garbage-collected and stops its server,
but :meth:`MCPToolset.close` (or a ``with`` block) stops it at a known time.

Use in an environment (``add_tools`` updates ``tools`` and ``tool_schemas``)::

    class MyEnv(LLMEnv):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.toolset = MCPToolset("python", ["my_server.py"])
            self.add_tools(self.toolset.tools())

        def close(self):
            self.toolset.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import logging
import re
import sys
import tempfile
import threading
import weakref
from typing import Any

import jsonschema
import jsonschema_specifications
import referencing.exceptions
import referencing.jsonschema

from llmgym.env import LLMEnv
from llmgym.rubric import Reward, Rubric, format_error
from llmgym.tools import ToolResult, strip_schema_titles, tool

__all__ = ["MCPToolset", "MCPTool", "MCPEnv", "openai_tool_schema"]

logger = logging.getLogger(__name__)

_INSTALL_HINT = 'MCP tools need the mcp package: pip install "llmgym[tools]"'
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# Refs resolve inside the tool's schema or to the JSON Schema meta-schemas; a remote one is never fetched
# (jsonschema's default registry would download it, from an address the server chose).
_LOCAL_REFS = jsonschema_specifications.REGISTRY
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})  # their values are data, not schemas
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def _unresolvable_ref(schema: Any, resolver: Any, specification: Any) -> str | None:
    """The first ``$ref`` or ``$dynamicRef`` in ``schema`` that ``resolver`` cannot resolve, or ``None``."""
    if isinstance(schema, list):
        return next((ref for item in schema if (ref := _unresolvable_ref(item, resolver, specification))), None)
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("$id"), str):  # refs below resolve against this subschema's own base URI
        resolver = resolver.in_subresource(specification.create_resource(schema))
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except referencing.exceptions.Unresolvable:
                return ref
    for key, value in schema.items():
        if key in _DATA_KEYWORDS:
            continue
        children = value.values() if key in _SCHEMA_MAPS and isinstance(value, dict) else [value]
        for child in children:
            ref = _unresolvable_ref(child, resolver, specification)
            if ref is not None:
                return ref
    return None


def openai_tool_schema(name: str, description: str, input_schema: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool as an OpenAI function schema (pydantic's ``title`` keys dropped: noise in a prompt).

    Example:
        >>> schema = openai_tool_schema("add", "Add.", {"type": "object", "title": "addArguments",
        ...     "properties": {"a": {"type": "integer", "title": "A"}}, "required": ["a"]})
        >>> schema["function"]["parameters"]
        {'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'required': ['a']}
    """
    parameters = copy.deepcopy(input_schema)
    strip_schema_titles(parameters)
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


class MCPTool:
    """One tool of an MCP server, callable like an llmgym tool.

    Attributes:
        name: the name the agent calls (the toolset's ``prefix`` + the server's name).
        server_name: the tool's name on the server.
        description: the server's description.
        input_schema: the server's JSON schema for the arguments (what calls are validated against).
        schema: the OpenAI function schema offered to the agent.

    Raises:
        ValueError: the input schema is invalid, or a ``$ref`` in it does not resolve inside it.
    """

    def __init__(self, toolset: MCPToolset, server_name: str, description: str, input_schema: dict[str, Any]):
        self.toolset = toolset
        self.server_name = server_name
        self.name = toolset.prefix + server_name
        self.description = description
        self.input_schema = input_schema
        self.schema = openai_tool_schema(self.name, description, input_schema)
        validator_class = jsonschema.validators.validator_for(input_schema)
        try:
            validator_class.check_schema(input_schema)
        except jsonschema.SchemaError as err:
            raise ValueError(f"MCP tool {server_name!r} has an invalid inputSchema: {err.message}") from None
        specification = referencing.jsonschema.specification_with(
            str(input_schema.get("$schema", "")), default=referencing.jsonschema.DRAFT202012
        )
        resolver = _LOCAL_REFS.resolver_with_root(specification.create_resource(input_schema))
        missing = _unresolvable_ref(input_schema, resolver, specification)
        if missing is not None:
            raise ValueError(
                f"MCP tool {server_name!r} has an inputSchema whose reference {missing!r} does not "
                "resolve inside the schema (remote references are never fetched)"
            )
        self._validator = validator_class(input_schema, registry=_LOCAL_REFS)

    def validate(self, arguments: Any) -> str | None:
        """Why ``arguments`` do not match the input schema (at most 5 problems), or ``None`` when they do."""
        if not isinstance(arguments, dict):
            return "arguments must be a JSON object"
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        return "; ".join(f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}" for e in errors[:5])

    def call(self, arguments: dict[str, Any]) -> ToolResult:
        """Validate ``arguments`` and call the tool on the server; never raises."""
        try:
            problem = self.validate(arguments)
        except Exception as err:  # a schema jsonschema cannot apply: the agent is told, the episode goes on
            reason = f"{type(err).__name__}: {err}"[:500]  # a referencing error quotes the whole schema
            return ToolResult(
                f"Error: the arguments for {self.name} could not be checked against its schema: {reason}", ok=False
            )
        if problem is not None:
            return ToolResult(f"Error: invalid arguments for {self.name}: {problem}", ok=False)
        return self.toolset.call(self.server_name, arguments)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r})"


class MCPToolset:
    """An MCP server started over stdio, its tools listed once, callable from synchronous code.

    Args:
        command: the executable that starts the server (``"python"``, ``"npx"``, ``"uvx"``...).
        args: its arguments.
        env: extra environment variables for the server.
        cwd: the server's working directory.
        prefix: put before every tool name (to keep two servers' tools apart).
        timeout: seconds a tool call may take before the agent gets an error.
        startup_timeout: seconds the server may take to start and list its tools.
        max_output_chars: longer tool output is cut, with a note.

    Raises:
        ImportError: the ``mcp`` package is missing.
        RuntimeError: the server did not start or list its tools (with the tail of its stderr).
        ValueError: a tool name the OpenAI API would refuse, a duplicate, an invalid input schema, or one
            whose ``$ref`` does not resolve inside it.

    The server runs until :meth:`close` (or the ``with`` block ends, or the toolset is garbage-collected).
    """

    def __init__(
        self,
        command: str,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        *,
        prefix: str = "",
        timeout: float = 30.0,
        startup_timeout: float = 60.0,
        max_output_chars: int = 8192,
    ):
        try:
            import mcp
        except ImportError as err:
            raise ImportError(_INSTALL_HINT) from err
        self.command, self.args, self.env, self.cwd = command, list(args or []), dict(env or {}), cwd
        self.prefix, self.timeout, self.max_output_chars = prefix, timeout, max_output_chars
        self._server = _ServerThread(mcp, command, self.args, self.env, cwd)
        # The finalizer holds only the server thread, never self: an unreferenced toolset is
        # collected and its server stopped.
        self._finalizer = weakref.finalize(self, self._server.stop)
        self._server.start()
        if not self._server.ready.wait(startup_timeout):
            tail = self._server.stderr_tail()
            self.close()
            raise RuntimeError(f"MCP server {self._describe()} did not start within {startup_timeout:g} s{tail}")
        if self._server.error is not None:
            error, tail = self._server.error, self._server.stderr_tail()
            self.close()
            raise RuntimeError(
                f"MCP server {self._describe()} failed to start: {type(error).__name__}: {error}{tail}"
            ) from error
        self._tools: dict[str, MCPTool] = {}
        for listed in self._server.listed:
            schema = listed.get("inputSchema") or {"type": "object"}
            try:
                item = MCPTool(self, listed["name"], listed.get("description") or "", schema)
            except ValueError:  # an invalid input schema: stop the server before saying so
                self.close()
                raise
            if not _NAME.match(item.name):
                self.close()
                raise ValueError(
                    f"MCP tool name {item.name!r} is not a valid function name (letters, digits, _ and -, "
                    "at most 64); choose another prefix or server"
                )
            if item.name in self._tools:
                self.close()
                raise ValueError(f"MCP server {self._describe()} lists the tool {item.name!r} twice")
            self._tools[item.name] = item

    # -- public API ----------------------------------------------------------

    def tools(self) -> dict[str, MCPTool]:
        """The server's tools by the name the agent calls."""
        return dict(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The tools' OpenAI function schemas."""
        return [t.schema for t in self._tools.values()]

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call a tool by its name on the server (no validation: :meth:`MCPTool.call` validates).

        Errors (the tool's own, a timeout, a dead server) come back as ``ToolResult(ok=False)``.
        """
        server = self._server
        if server.session is None or not server.thread.is_alive():
            return ToolResult(f"Error: the MCP server for {self.prefix + name} is not running", ok=False)
        future = asyncio.run_coroutine_threadsafe(server.call(name, arguments, self.timeout), server.loop)
        try:
            result = future.result(self.timeout + 5)
        except (concurrent.futures.TimeoutError, TimeoutError):
            future.cancel()
            return ToolResult(f"Error: {self.prefix + name} took longer than {self.timeout:g} s", ok=False)
        except Exception as err:  # the server failed or hung up: tell the agent, keep the episode alive
            return ToolResult(f"Error: {self.prefix + name} failed: {type(err).__name__}: {err}", ok=False)
        content = self._content(result)
        if len(content) > self.max_output_chars:
            content = content[: self.max_output_chars] + f"\n[output truncated at {self.max_output_chars} characters]"
        if result.get("isError"):
            return ToolResult(f"Error: {self.prefix + name}: {content}", ok=False, value=result)
        return ToolResult(content, ok=True, value=result.get("structuredContent", content))

    def close(self) -> None:
        """Stop the server (stdin closed, then terminated if it lingers) and the event-loop thread."""
        self._finalizer()

    def __enter__(self) -> MCPToolset:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(
            f"an MCPToolset holds a running MCP server ({self._describe()}) and cannot be copied or "
            "pickled; start another one (for an MCPEnv, make a new env)"
        )

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------

    @staticmethod
    def _content(result: dict[str, Any]) -> str:
        parts = []
        for block in result.get("content") or []:
            kind = block.get("type")
            if kind == "text":
                parts.append(block.get("text", ""))
            elif kind == "resource" and "text" in block.get("resource", {}):
                parts.append(block["resource"]["text"])
            elif kind == "resource_link":
                parts.append(f"[resource: {block.get('uri', '')}]")
            else:
                mime = block.get("mimeType") or block.get("resource", {}).get("mimeType", "?")
                parts.append(f"[{kind} content: {mime}]")
        if not parts and "structuredContent" in result:
            parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
        return "\n".join(parts)

    def _describe(self) -> str:
        return " ".join([self.command, *self.args])


class _ServerThread:
    """The MCP client session on a private event-loop thread, for one server process.

    Kept apart from :class:`MCPToolset` so that neither the thread nor the running session refers
    to the toolset (a thread's target and a running coroutine are strong references).
    """

    def __init__(self, mcp: Any, command: str, args: list[str], env: dict[str, str], cwd: str | None):
        self.mcp, self.command, self.args, self.env, self.cwd = mcp, command, args, env, cwd
        self.session: Any = None
        self.listed: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.task: asyncio.Task[None] | None = None  # the session task, cancelled to stop the server
        self.stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run_loop, name=f"llmgym-mcp-{command}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Cancel the session task (the ``mcp`` client then stops the server, bounded waits) and end the loop thread.

        Safe to call twice, and from the loop thread itself (a garbage collection can run there).
        """
        if self.thread.is_alive() and not self.loop.is_closed():
            if self.task is not None:
                self.loop.call_soon_threadsafe(self.task.cancel)
            if threading.current_thread() is self.thread:
                return  # the loop ends once the task is cancelled; joining here would deadlock
            self.thread.join(timeout=15)
        if not self.thread.is_alive() and not self.loop.is_closed():
            self.loop.close()
        self.stderr.close()

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
        result = await asyncio.wait_for(self.session.call_tool(name, arguments), timeout)
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")

    def stderr_tail(self, chars: int = 2000) -> str:
        try:
            self.stderr.flush()
            self.stderr.seek(0)
            text = self.stderr.read()[-chars:].strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends:\n{text}" if text else ""

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as err:  # reported to the constructor, which raises it with context
            self.error = self.error or err
        finally:
            self.ready.set()
            self.session = None

    async def _serve(self) -> None:
        mcp = self.mcp
        self.task = asyncio.current_task()
        parameters = mcp.StdioServerParameters(command=self.command, args=self.args, env=self.env or None, cwd=self.cwd)
        if self.env:  # mcp 1.x replaces the default environment with env; 2.x merges: merge for both
            parameters.env = {**_default_environment(), **self.env}
        try:
            async with mcp.stdio_client(parameters, errlog=self.stderr) as (read, write):
                async with mcp.ClientSession(read, write) as session:
                    await session.initialize()
                    listed, cursor = [], None
                    while True:
                        page = await (
                            session.list_tools(params=mcp.types.PaginatedRequestParams(cursor=cursor))
                            if cursor
                            else session.list_tools()
                        )
                        listed += [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools]
                        cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
                        if not cursor:
                            break
                    self.listed = listed
                    self.session = session
                    self.ready.set()
                    await asyncio.Future()  # serve calls until stop() cancels this task
        except asyncio.CancelledError:
            return
        except BaseException as err:
            err = _only_error(err)
            if not self.ready.is_set():
                self.error = err
                return
            logger.warning(
                "MCP server %s stopped: %s: %s", " ".join([self.command, *self.args]), type(err).__name__, err
            )


def _only_error(err: BaseException) -> BaseException:
    """The error inside ``err`` while it is a group of one: anyio's task groups wrap the one error that matters."""
    if sys.version_info >= (3, 11):
        from builtins import BaseExceptionGroup
    else:  # before 3.11 anyio (which mcp runs on) raises, and so requires, the ``exceptiongroup`` backport's groups
        from exceptiongroup import BaseExceptionGroup
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    return err


def _default_environment() -> dict[str, str]:
    from mcp.client.stdio import get_default_environment

    return get_default_environment()


class MCPEnv(LLMEnv):
    """An environment whose tools are an MCP server's, plus ``submit(answer)`` to end the task.

    Not registered (it needs a server); make it directly or register your own subclass. Every
    keyword is plain data, so a registered subclass re-makes cleanly.

    Args:
        command: the executable that starts the MCP server.
        args: its arguments.
        task: the first user message (what the agent must do).
        answer: the expected answer; when given, ``correct`` pays 1.0 for an answer that equals it
            (case and surrounding space ignored). ``None``: no correctness reward (add a judge).
        server_env: extra environment variables for the server.
        prefix: put before every server tool name.
        tool_timeout: seconds per tool call.
        **kwargs: :class:`~llmgym.LLMEnv` options (``max_turns``...).

    Rewards: ``correct`` (weight 1, at the end) and ``format_error`` (weight -0.1 per malformed turn:
    bad JSON, unknown tool, arguments that fail the schema).

    The server starts with the env and keeps its state across episodes (tools that store
    data see earlier episodes' calls); ``close()`` stops it.
    """

    description = "Tools from an MCP server; submit(answer) ends the task."
    system_prompt = "You solve the task with the tools you have. When you know the answer, call submit."

    def __init__(
        self,
        command: str,
        args: list[str] | None = None,
        task: str = "",
        answer: str | None = None,
        server_env: dict[str, str] | None = None,
        prefix: str = "",
        tool_timeout: float = 30.0,
        **kwargs: Any,
    ):
        if not isinstance(task, str) or not task.strip():
            raise ValueError("task must be a non-empty string: the first message the agent reads")
        self.task, self.answer = task, answer
        self.submitted: str | None = None
        super().__init__(**kwargs)
        self.toolset = MCPToolset(command, args, server_env, prefix=prefix, timeout=tool_timeout)
        try:
            self.add_tools(self.toolset.tools())
        except BaseException:  # e.g. the server has its own submit: nobody could close this server later
            self.toolset.close()
            raise

    def setup(self, options: dict[str, Any] | None) -> str:
        self.submitted = None
        return self.task

    @tool
    def submit(self, answer: str) -> str:
        """Give your final answer; this ends the task.

        Args:
            answer: the answer, as short as possible.
        """
        self.submitted = answer
        return "Answer received."

    def is_done(self) -> bool:
        return self.submitted is not None

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(self._correct, when="end", name="correct"),
                Reward(format_error, weight=-0.1, name="format_error"),
            ]
        )

    def _correct(self, ctx: Any) -> float:
        if self.answer is None or self.submitted is None:
            return 0.0
        return 1.0 if self.submitted.strip().casefold() == self.answer.strip().casefold() else 0.0

    def close(self) -> None:
        self.toolset.close()
        super().close()
