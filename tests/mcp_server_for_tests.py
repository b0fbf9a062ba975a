"""A small MCP server over stdio for tests/test_mcp.py (run as a script; not a test module).

Tools: ``add(a, b)``, ``lookup(key)`` (a tool error for an unknown key), ``remember(key, value)``
(keeps state in the server process), ``crash()`` (an unexpected exception in the tool body),
``sleep(seconds)`` and ``die()`` (the server process exits). ``$MCP_TEST_SECRET``, when set, is
stored under the key ``secret`` (to check that the client's ``env`` reaches the server);
``$MCP_TEST_BAD_SCHEMA``, when set, gives ``add`` an invalid input schema; ``$MCP_TEST_DUPLICATE``
lists ``add`` twice.

The ``mcp`` imports sit inside :func:`build_server`, so collecting this file (pytest's doctest
pass imports every module under tests/) costs nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any


def build_server() -> Any:
    """The MCP server with the test tools (``MCPServer`` in mcp 2.x, ``FastMCP`` in 1.x)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as MCPServer
        from mcp.server.fastmcp.exceptions import ToolError

    server = MCPServer("llmgym-test")
    table = {"capital_of_france": "Paris", "answer": "42"}
    if os.environ.get("MCP_TEST_SECRET"):
        table["secret"] = os.environ["MCP_TEST_SECRET"]

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def lookup(key: str) -> str:
        """Look a key up in the server's table."""
        if key not in table:
            raise ToolError(f"no entry for {key!r}; known keys: {', '.join(sorted(table))}")
        return table[key]

    @server.tool()
    def remember(key: str, value: str) -> str:
        """Store a value under a key (the server keeps it)."""
        table[key] = value
        return f"stored {key}"

    @server.tool()
    def crash() -> str:
        """A tool whose body fails."""
        raise RuntimeError("boom")

    @server.tool()
    def sleep(seconds: float) -> str:
        """Sleep, then answer."""
        time.sleep(seconds)
        return "awake"

    @server.tool()
    def die() -> str:
        """Kill the server process."""
        os._exit(3)

    if os.environ.get("MCP_TEST_BAD_SCHEMA"):  # a tool whose inputSchema is not a valid JSON schema
        server._tool_manager._tools["add"].parameters = {"type": "object", "properties": {"a": {"type": 5}}}
    if os.environ.get("MCP_TEST_DUPLICATE"):  # a non-compliant server that lists ``add`` twice
        listing = server._tool_manager.list_tools
        server._tool_manager.list_tools = lambda: [*listing(), listing()[0]]
    return server


if __name__ == "__main__":
    build_server().run()
