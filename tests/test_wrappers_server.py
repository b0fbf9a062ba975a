"""The OpenAI-compatible server (llmgym/wrappers/server.py): malformed ``tool_choice`` requests are a 400 naming it.

Belongs in tests/wrappers/ (kept here while that folder is being reorganised).
"""

from __future__ import annotations

import json

import httpx
import pytest

import llmgym  # noqa: F401
from llmgym.wrappers.scripted import load_scripted
from llmgym.wrappers.server import create_app, serve_in_thread


@pytest.fixture(scope="module")
def scripted():
    app = create_app(load_scripted("wordle"), model_name="bot")
    with serve_in_thread(app) as base_url:
        yield base_url


TOOLS = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("choice", [{"type": "function", "function": "x"}, {"type": "function", "function": [1]},
                                    {"type": "function"}, {"type": "retrieval", "function": {"name": "guess"}}])
def test_a_malformed_tool_choice_is_a_400_naming_it(scripted, choice):
    """Regression: a malformed ``tool_choice`` used to be a 500."""
    response = httpx.post(f"{scripted}/chat/completions", timeout=30,
                          json={"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "tool_choice": choice})
    assert response.status_code == 400, response.text
    assert "tool_choice" in json.dumps(response.json()["error"])


def test_required_or_named_tool_choice_without_tools_is_a_400(scripted):
    for choice in ["required", {"type": "function", "function": {"name": "guess"}}]:
        response = httpx.post(f"{scripted}/chat/completions", timeout=30,
                              json={"messages": [{"role": "user", "content": "hi"}], "tool_choice": choice})
        assert response.status_code == 400 and "needs tools" in response.json()["error"]["message"]
    named = httpx.post(f"{scripted}/chat/completions", timeout=30, json={
        "messages": [{"role": "user", "content": "Guess."}], "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "guess"}}})
    assert named.status_code == 200 and named.json()["choices"][0]["finish_reason"] == "tool_calls"
