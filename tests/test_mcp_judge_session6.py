"""Regressions found in review (session 6): MCP toolsets that leaked their server, MCP schemas with
dangling ``$ref``, the checker and ``nondeterministic=True``, judge transcripts, verdicts and copies,
``CandidateActions`` masks after the last step, and ``llmgym init`` on OS errors.

Each test failed before its fix.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import pickle
import random
import re
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import gymnasium as gym
import pytest

import llmgym
from llmgym.cli import main
from llmgym.env import LLMEnv
from llmgym.judge import (
    JudgeRubric,
    LLMJudge,
    Verdict,
    VerdictCache,
    parse_group_verdict,
    parse_verdict,
    render_transcript,
)
from llmgym.policy import Generation, Policy, PolicyRequest
from llmgym.rubric import Reward, Rubric
from llmgym.tools import tool

SERVER = [str(Path(__file__).with_name("mcp_server_for_tests.py"))]

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
    ps = subprocess.run(["ps", "-ww", "--ppid", str(os.getpid()), "-o", "pid=,args="], capture_output=True, text=True).stdout
    return {line.split()[0] for line in ps.splitlines() if marker in line}


def _loop_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("llmgym-mcp-") and t.is_alive()}


def _gone(marker: str, before: set[str], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _servers(marker) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _servers(marker) - before


# -- MCP ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toolset():
    pytest.importorskip("mcp")
    from llmgym.mcp import MCPToolset

    with MCPToolset(sys.executable, SERVER, timeout=2.0) as tools:
        yield tools


def test_an_unreferenced_toolset_is_collected_and_stops_its_server():
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

    schema = {"type": "object", "properties": {"p": {"$ref": "#/$defs/point"}}, "required": ["p"],
              "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
              "enum_like": {"enum": [{"$ref": "#/not/a/schema"}]}}
    tool_ = MCPTool(toolset, "pointy", "", schema)
    assert tool_.validate({"p": {"x": 1}}) is None
    assert "'x' is a required property" in tool_.validate({"p": {}})
    nested_id = {"$id": "https://x.test/root", "type": "object", "properties": {"a": {"$ref": "sub/other"}},
                 "$defs": {"other": {"$id": "https://x.test/sub/other", "type": "string"}}}
    assert MCPTool(toolset, "nested", "", nested_id).validate({"a": 1}) == "a: 1 is not of type 'string'"


def test_a_schema_that_breaks_validation_is_an_error_observation(toolset):
    from llmgym.mcp import MCPTool

    endless = MCPTool(toolset, "endless", "", {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}})
    result = endless.call({"a": 1})  # the ref resolves, but validating it recurses forever
    assert not result.ok and result.content.startswith("Error: the arguments for endless could not be checked")
    assert len(result.content) < 700


# -- the checker ------------------------------------------------------------------------------------


class DrawsFromRandom(LLMEnv):
    """Honestly nondeterministic: the task comes from ``random``."""

    description = "a nondeterministic test env"
    system_prompt = "Guess."

    def __init__(self, **kwargs):
        super().__init__(max_turns=3, **kwargs)

    @tool
    def guess(self, number: int) -> str:
        """Guess.

        Args:
            number: a number.
        """
        return "ok"

    def setup(self, options):
        return f"target {random.random()}"

    def build_rubric(self):
        return Rubric([Reward(lambda ctx: 0.0, name="zero")])


def test_check_skips_determinism_for_an_env_registered_nondeterministic(capsys):
    from llmgym.checker import check_env

    llmgym.register("llmgym-test6/Honest-v0", DrawsFromRandom, nondeterministic=True)
    llmgym.register("llmgym-test6/Hidden-v0", DrawsFromRandom)
    report = check_env("llmgym-test6/Honest-v0", episodes=1)
    assert report["determinism"].status == "SKIP" and "nondeterministic=True" in report["determinism"].summary
    assert report.passed, str(report)
    assert check_env("llmgym-test6/Hidden-v0", episodes=1)["determinism"].status == "FAIL"
    assert main(["check", "llmgym-test6/Honest-v0", "--episodes", "1"]) == 0
    assert "SKIP  determinism" in capsys.readouterr().out


# -- the judge --------------------------------------------------------------------------------------


class FixedJudge(Policy):
    """Always replies ``reply`` (module level, so it pickles)."""

    name = "fixed-judge"

    def __init__(self, reply: str = '{"reasoning": "ok", "score": 8}'):
        self.reply = reply

    def generate(self, requests: list[PolicyRequest]) -> list[Generation]:
        return [Generation({"role": "assistant", "content": self.reply}) for _ in requests]


def test_tool_call_arguments_are_cut_in_the_transcript():
    huge = json.dumps({"code": "x" * 1_000_000})
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "python", "arguments": huge}}]}]
    text = render_transcript(messages, max_message_chars=4000)
    assert len(text) < 4200 and "-> python({\"code\": \"xxx" in text
    assert f"[... {len('python()') + len(huge) - 4000} more characters]" in text
    prompt = LLMJudge("c", policy=FixedJudge()).prompt(messages)
    assert len(prompt[1]["content"]) < 6000


def test_a_repeated_key_is_refused():
    with pytest.raises(ValueError, match="'score' appears more than once"):
        parse_verdict('{"score": 1, "reasoning": "ok", "score": 10}')
    with pytest.raises(ValueError, match="'scores' appears more than once"):
        parse_group_verdict('{"reasoning": "ok", "scores": [1], "scores": [10]}', 1)
    with pytest.raises(ValueError, match="appears more than once"):  # at any depth
        parse_verdict('{"reasoning": "ok", "score": 1, "extra": {"a": 1, "a": 2}}')
    with pytest.raises(ValueError, match="invalid verdict: reply: not JSON"):
        parse_verdict("The score is 7.")
    with pytest.raises(ValueError, match="invalid verdict"):
        parse_verdict("[" * 100_000)  # deep nesting: refused, not a RecursionError
    judge = LLMJudge("c", policy=FixedJudge('{"reasoning": "ok", "score": 1, "score": 10}'))
    verdict = judge.grade([{"role": "assistant", "content": "4"}])
    assert verdict.score == 0.0 and not verdict.ok and judge.stats["parse_errors"] == 1


class HoldsAJudge(LLMEnv):
    description = "qa"
    system_prompt = "Answer."

    def __init__(self, **kwargs):
        self.judge_rubric = JudgeRubric("correct", **kwargs.pop("judge"))
        super().__init__(max_turns=2, **kwargs)

    def setup(self, options):
        return "What is 2+2?"

    def on_text(self, text):
        self.answered = True
        return "thanks"

    def is_done(self):
        return getattr(self, "answered", False)

    def build_rubric(self):
        return self.judge_rubric


def test_an_env_with_a_judge_rubric_deep_copies_and_pickles(tmp_path):
    cache_path = tmp_path / "verdicts.sqlite"
    env = HoldsAJudge(judge={"policy": FixedJudge(), "cache_path": cache_path})
    env.reset(seed=0)
    assert env.step("4")[1] == pytest.approx(0.8)
    for copied in (copy.deepcopy(env), pickle.loads(pickle.dumps(env))):
        judge = copied.judge_rubric.judge
        assert judge is not env.judge_rubric.judge and judge.stats == {**env.judge_rubric.judge.stats}
        assert judge.last_verdict is None  # a copy starts with no verdict on any thread
        copied.answered = False
        copied.reset(seed=0)
        _, reward, terminated, _, info = copied.step("4")
        assert terminated and reward == pytest.approx(0.8) and info["reward_components"]["judge_error"] == 0.0
        assert judge.stats["cache_hits"] == 1 and env.judge_rubric.judge.stats["cache_hits"] == 0
        judge.cache.put("from-the-copy", Verdict([3.0], "fine"))
        assert VerdictCache(path=cache_path).get("from-the-copy").score == 3.0  # the copy writes the same file
    shared = copy.deepcopy(env)
    assert shared.judge_rubric.judge.backend.policy is env.judge_rubric.judge.backend.policy  # not a second model
    http = HoldsAJudge(judge={"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": "k"})
    for copied in (copy.deepcopy(http), pickle.loads(pickle.dumps(http))):
        client = copied.judge_rubric.judge.backend.client
        assert client is not http.judge_rubric.judge.backend.client and str(client.base_url).startswith("http://127.0.0.1:9")
        copied.close()
    http.close()
    cache = VerdictCache(path=tmp_path / "other.sqlite")
    assert pickle.loads(pickle.dumps(cache)).get("k") is None


def test_a_copied_rubric_reports_its_own_judge_errors():
    rubric = JudgeRubric("correct", policy=FixedJudge("not a verdict"))
    copied = copy.deepcopy(rubric)
    copied.judge.grade([{"role": "assistant", "content": "4"}])
    judge_error = next(r.fn for r in copied.rewards if r.name == "judge_error")
    assert judge_error(None) == 1.0  # reads the copy's judge, not the original's
    assert next(r.fn for r in rubric.rewards if r.name == "judge_error")(None) == 0.0


# -- CandidateActions ----------------------------------------------------------------------------------


def test_the_mask_after_the_last_step_agrees_with_info():
    pytest.importorskip("stable_baselines3")
    from llmgym.wrappers.sb3 import CandidateActions

    env = CandidateActions(gym.make("llmgym/Wordle-v0"), lambda env, obs, info: ["crane", "pious"], max_candidates=3)
    env.reset(seed=0, options={"answer": "pious"})
    assert env.action_masks().tolist() == [True, True, False]
    _, _, terminated, _, info = env.step(1)
    assert terminated and info["candidates"] == []
    assert env.action_masks().tolist() == [False, False, False]
    env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True, False]


# -- llmgym init ------------------------------------------------------------------------------------


def test_init_reports_os_errors_in_one_line(tmp_path, capsys):
    assert main(["init", "a" * 300, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym: error: cannot create the project") and "File name too long" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    if Path("/sys/kernel").is_dir():  # sysfs: no folder can be made there, not even by root
        assert main(["init", "my-env", "--dir", "/sys/kernel"]) == 2
        assert capsys.readouterr().err.startswith("llmgym: error: cannot create the project")
