"""MCP tools as env tools, against the real stdio server in tests/mcp_server_for_tests.py.

Covers schema derivation, valid calls, argument validation before the call, tool errors and timeouts
as observations, a server that dies, startup failures, LLMEnv.add_tools and an MCPEnv episode; ``$ref`` in a
tool's schema; a toolset collected, or copied, stops or keeps its server as it should.
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import re
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("mcp")

from llmgym.env import LLMEnv  # noqa: E402
from llmgym.mcp import MCPEnv, MCPTool, MCPToolset  # noqa: E402

SERVER = [str(Path(__file__).with_name("mcp_server_for_tests.py"))]


@pytest.fixture(scope="module")
def toolset():
    with MCPToolset(sys.executable, SERVER, env={"MCP_TEST_SECRET": "s3cret"}, timeout=1.0) as tools:
        yield tools


def test_schemas_are_derived_from_the_server(toolset):
    tools = toolset.tools()
    assert list(tools) == ["add", "lookup", "remember", "crash", "sleep", "die"]
    assert tools["add"].schema == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    assert tools["add"].input_schema["title"] == "addArguments"  # validation uses the server's schema as given
    assert toolset.schemas() == [t.schema for t in tools.values()]


def test_valid_calls_return_text_and_structured_values(toolset):
    result = toolset.tools()["add"].call({"a": 2, "b": 40})
    assert result.ok and result.content == "42" and result.value == {"result": 42}
    assert toolset.tools()["lookup"].call({"key": "secret"}).content == "s3cret"  # env reaches the server
    assert toolset.call("remember", {"key": "colour", "value": "teal"}).content == "stored colour"
    assert toolset.tools()["lookup"].call({"key": "colour"}).content == "teal"  # one server process keeps state


def test_invalid_arguments_are_refused_before_the_call(toolset):
    remember = toolset.tools()["remember"]
    result = remember.call({"key": "k", "value": 5})
    assert not result.ok and result.content == "Error: invalid arguments for remember: value: 5 is not of type 'string'"
    assert not toolset.tools()["lookup"].call({"key": "k"}).ok  # the refused call never reached the server
    for bad in [{"a": 1}, {"a": "1", "b": 2}, [1, 2], "a=1"]:
        result = toolset.tools()["add"].call(bad)
        assert not result.ok and result.content.startswith("Error: invalid arguments for add: ")


def test_tool_errors_and_timeouts_are_observations(toolset):
    missing = toolset.tools()["lookup"].call({"key": "nope"})
    assert not missing.ok and missing.content.startswith("Error: lookup: ") and "no entry for 'nope'" in missing.content
    crashed = toolset.tools()["crash"].call({})
    assert not crashed.ok and "crash" in crashed.content
    slow = toolset.tools()["sleep"].call({"seconds": 3})
    assert not slow.ok and "longer than 1 s" in slow.content
    assert toolset.tools()["add"].call({"a": 1, "b": 1}).content == "2"  # the server is still usable


def test_invalid_input_schema_is_a_clear_error(toolset):
    with pytest.raises(ValueError, match="invalid inputSchema"):
        MCPTool(toolset, "bad", "", {"type": 12})


def test_startup_failures_are_clear_errors():
    with pytest.raises(RuntimeError, match="failed to start: FileNotFoundError"):
        MCPToolset("/nonexistent/mcp-server")
    with pytest.raises(RuntimeError, match="(?s)failed to start.*bad config"):
        MCPToolset(sys.executable, ["-c", "import sys; sys.stderr.write('bad config'); sys.exit(2)"])


class Calculator(LLMEnv):
    def setup(self, options):
        return "compute"


def test_add_tools_updates_tools_and_schemas(toolset):
    env = Calculator()
    env.add_tools(toolset.tools())
    assert list(env.tools) == list(toolset.tools()) and env.tool_schemas == toolset.schemas()
    _, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == list(toolset.tools())
    obs, *_ = env.step('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    assert obs == "5"
    with pytest.raises(ValueError, match="already taken"):
        env.add_tools(toolset.tools())
    assert len(env.tool_schemas) == len(env.tools)


def test_mcp_env_episode_end_to_end():
    env = MCPEnv(
        sys.executable,
        SERVER,
        task="What is the capital of France? Look it up.",
        answer="Paris",
        prefix="kb_",
        tool_timeout=5.0,
        max_turns=6,
    )
    try:
        check_env(env)
        obs, info = env.reset(seed=0)
        assert obs.startswith("What is the capital")
        assert {t["function"]["name"] for t in info["tools"]} == {
            "submit",
            "kb_add",
            "kb_lookup",
            "kb_remember",
            "kb_crash",
            "kb_sleep",
            "kb_die",
        }
        obs, reward, terminated, truncated, info = env.step(
            '<tool_call>{"name": "kb_lookup", "arguments": {"key": 7}}</tool_call>'
        )
        assert (
            obs.startswith("Error: invalid arguments for kb_lookup")
            and info["reward_components"]["format_error"] == 1.0
        )
        assert reward == pytest.approx(-0.1) and not terminated
        action = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "kb_lookup", "arguments": '{"key": "capital_of_france"}'},
                }
            ],
        }
        obs, reward, terminated, _, _ = env.step(action)
        assert obs == "Paris" and reward == 0.0 and not terminated
        obs, reward, terminated, truncated, info = env.step(
            '<tool_call>{"name": "submit", "arguments": {"answer": "paris"}}</tool_call>'
        )
        assert terminated and not truncated and reward == 1.0 and info["reward_components"]["correct"] == 1.0
        assert env.episode().turn_rewards == pytest.approx([-0.1, 0.0, 1.0])

        env.reset(seed=1)
        obs, *_ = env.step('<tool_call>{"name": "kb_die", "arguments": {}}</tool_call>')
        assert obs.startswith("Error: kb_die failed")
        obs, reward, terminated, truncated, _ = env.step(
            '<tool_call>{"name": "kb_add", "arguments": {"a": 1, "b": 2}}</tool_call>'
        )
        assert obs.startswith("Error: kb_add") and not terminated and not truncated  # a dead server is an observation
    finally:
        env.close()
    assert env.toolset.call("add", {"a": 1, "b": 2}).content == "Error: the MCP server for kb_add is not running"


def test_mcp_env_needs_a_task():
    with pytest.raises(ValueError, match="task"):
        MCPEnv(sys.executable, SERVER, task=" ")


def _refused_at_startup(env: dict[str, str], match: str) -> None:
    """MCPToolset refuses what the test server lists under ``env`` with ``match``, leaving no loop thread nor server
    process."""
    import os
    import subprocess
    import threading

    def loops() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("llmgym-mcp-")}

    def servers() -> set[str]:  # pids of this process's test servers (another test's toolset may be running)
        ps = subprocess.run(
            ["ps", "--ppid", str(os.getpid()), "-o", "pid=,args="], capture_output=True, text=True
        ).stdout
        return {line.split()[0] for line in ps.splitlines() if "mcp_server_for_tests.py" in line}

    before_loops, before_servers = loops(), servers()
    with pytest.raises(ValueError, match=match):
        MCPToolset(sys.executable, SERVER, env=env)
    assert not loops() - before_loops and not servers() - before_servers


def test_mcp_invalid_input_schema_stops_the_server():
    _refused_at_startup({"MCP_TEST_BAD_SCHEMA": "1"}, "invalid inputSchema")


def test_mcp_duplicate_tool_name_is_refused_and_stops_the_server():
    _refused_at_startup({"MCP_TEST_DUPLICATE": "1"}, "'add' twice")


SUBMIT_SERVER = '''
try:
    from mcp.server.mcpserver import MCPServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer

server = MCPServer("has-submit")


@server.tool()
def submit(answer: str) -> str:
    """The server's own submit (clashes with MCPEnv's)."""
    return answer


if __name__ == "__main__":
    server.run()
'''


def _servers(marker: str) -> set[str]:
    """Pids of this process's children whose command line contains ``marker``."""
    ps = subprocess.run(
        ["ps", "-ww", "--ppid", str(os.getpid()), "-o", "pid=,args="], capture_output=True, text=True
    ).stdout
    return {line.split()[0] for line in ps.splitlines() if marker in line}


def _loop_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("llmgym-mcp-") and t.is_alive()}


def _gone(marker: str, before: set[str], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _servers(marker) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _servers(marker) - before


def test_an_unreferenced_toolset_is_collected_and_stops_its_server():
    """Regression: a toolset no one referenced any more was never collected, and its server kept running."""
    pytest.importorskip("mcp")
    from llmgym.mcp import MCPToolset

    before, loops = _servers("mcp_server_for_tests.py"), _loop_threads()
    toolset = MCPToolset(sys.executable, SERVER)
    assert toolset.tools()["add"].call({"a": 1, "b": 2}).content == "3"
    assert _servers("mcp_server_for_tests.py") - before
    alive = weakref.ref(toolset)
    del toolset
    gc.collect()
    assert alive() is None  # the loop thread's target held the toolset
    assert _gone("mcp_server_for_tests.py", before)
    assert not _loop_threads() - loops


def test_mcp_env_stops_the_server_when_its_init_fails(tmp_path):
    """Regression: an MCPEnv whose init failed left its server running."""
    pytest.importorskip("mcp")
    from llmgym.mcp import MCPEnv

    script = tmp_path / "submit_server.py"
    script.write_text(SUBMIT_SERVER)
    before = _servers(str(script))
    gc.disable()  # without a collection, only MCPEnv closing its toolset stops the server
    try:
        with pytest.raises(ValueError, match="already taken"):
            MCPEnv(sys.executable, [str(script)], task="t")
        assert _gone(str(script), before)
    finally:
        gc.enable()


def test_a_dangling_or_remote_ref_is_refused_naming_the_tool(toolset):
    """Regression: a schema with a dangling ``$ref`` used to be accepted."""
    from llmgym.mcp import MCPTool

    for ref in ["#/$defs/missing", "https://example.invalid/schema.json", "#nowhere"]:
        schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
        with pytest.raises(ValueError, match=f"MCP tool 'lookup_x'.*{re.escape(ref)}' does not resolve"):
            MCPTool(toolset, "lookup_x", "", schema)
    # a property named like a data keyword is still a schema, and so is a dynamic ref
    with pytest.raises(ValueError, match="missing"):
        MCPTool(toolset, "x", "", {"type": "object", "properties": {"default": {"$ref": "#/$defs/missing"}}})
    with pytest.raises(ValueError, match="#missing"):
        MCPTool(toolset, "x", "", {"type": "object", "properties": {"a": {"$dynamicRef": "#missing"}}})


def test_local_refs_still_validate(toolset):
    from llmgym.mcp import MCPTool

    schema = {
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/point"}},
        "required": ["p"],
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        "enum_like": {"enum": [{"$ref": "#/not/a/schema"}]},
    }
    tool_ = MCPTool(toolset, "pointy", "", schema)
    assert tool_.validate({"p": {"x": 1}}) is None
    assert "'x' is a required property" in tool_.validate({"p": {}})
    nested_id = {
        "$id": "https://x.test/root",
        "type": "object",
        "properties": {"a": {"$ref": "sub/other"}},
        "$defs": {"other": {"$id": "https://x.test/sub/other", "type": "string"}},
    }
    assert MCPTool(toolset, "nested", "", nested_id).validate({"a": 1}) == "a: 1 is not of type 'string'"


def test_a_schema_that_breaks_validation_is_an_error_observation(toolset):
    from llmgym.mcp import MCPTool

    endless = MCPTool(toolset, "endless", "", {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}})
    result = endless.call({"a": 1})  # the ref resolves, but validating it recurses forever
    assert not result.ok and result.content.startswith("Error: the arguments for endless could not be checked")
    assert len(result.content) < 700


def test_mcp_toolset_refuses_copies_with_a_clear_error():
    pytest.importorskip("mcp")
    from llmgym.mcp import MCPToolset

    server = str(Path(__file__).with_name("mcp_server_for_tests.py"))
    with MCPToolset(sys.executable, [server], timeout=5) as toolset:
        for attempt in (copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="holds a running MCP server .* cannot be copied or pickled"):
                attempt(toolset)
        start = time.monotonic()
        assert toolset.call("add", {"a": 1, "b": 2}).content == "3"  # still usable
        assert time.monotonic() - start < 5
