"""Regressions found in review: sandbox, judge and MCP edge cases."""

from __future__ import annotations

import os

import pytest

from llmgym.sandbox import SandboxLimits, SubprocessSandbox

LIMITS = SandboxLimits(wall_time_s=3, cpu_time_s=1, memory_mb=512, max_output_bytes=10_000)


@pytest.fixture(scope="module")
def sandbox():
    with SubprocessSandbox(LIMITS) as box:
        yield box


def test_syntax_error_is_the_programs_error_not_a_sandbox_failure(sandbox):
    result = sandbox.run("x = 1 +\n")
    assert result.exit_code == 1 and "SyntaxError" in result.stderr and "SyntaxError" in result.error
    assert "sandbox" not in result.error.replace("<sandbox>", "") and "_worker.py" not in result.stderr
    assert result.stderr.startswith('  File "<sandbox>", line 1')
    null = sandbox.run("print(1)\x00")
    assert null.exit_code == 1 and "null bytes" in null.stderr and "setup" not in null.error


def test_missing_interpreter_is_an_error_result_and_leaves_no_scratch_dir(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    box = SubprocessSandbox(LIMITS, python=str(tmp_path / "no-such-python"))
    result = box.run("print(1)")
    assert not result.ok and "sandbox unavailable" in result.error and "no-such-python" in result.error
    assert list(tmp_path.iterdir()) == []
    box.close()


def test_judge_cache_key_covers_the_endpoint_and_every_sampling_setting():
    pytest.importorskip("openai")
    from llmgym.judge import LLMJudge
    from llmgym.policy import SamplingParams

    prompt = [{"role": "user", "content": "a"}]
    key = LLMJudge("c", base_url="http://127.0.0.1:9/v1").cache_key(prompt)
    assert LLMJudge("c", base_url="http://127.0.0.1:10/v1").cache_key(prompt) != key  # another server, same model name
    greedy = SamplingParams(temperature=0.0, max_tokens=512, seed=0)
    stopped = SamplingParams(temperature=0.0, max_tokens=512, seed=0, stop=["}"])
    budget = SamplingParams(temperature=0.0, max_tokens=512, seed=0, thinking_budget=8)
    keys = {LLMJudge("c", base_url="http://127.0.0.1:9/v1", sampling=s).cache_key(prompt) for s in (greedy, stopped, budget)}
    assert len(keys) == 3


def test_judge_sends_its_stop_strings_to_the_endpoint():
    pytest.importorskip("openai")
    from types import SimpleNamespace

    from llmgym.judge import LLMJudge
    from llmgym.policy import SamplingParams

    judge = LLMJudge("c", base_url="http://127.0.0.1:9/v1", sampling=SamplingParams(temperature=0.0, stop=["END"]))
    sent = {}

    def create(**kwargs):
        sent.update(kwargs)
        message = SimpleNamespace(content='{"reasoning": "ok", "score": 6}')
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])

    judge.backend.client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)),
                                           close=lambda: None)
    assert judge.grade([{"role": "user", "content": "hi"}]).score == 6.0
    assert sent["stop"] == ["END"]
    judge.close()


def test_mcp_invalid_input_schema_stops_the_server():
    pytest.importorskip("mcp")
    import subprocess
    import sys
    import threading
    from pathlib import Path

    from llmgym.mcp import MCPToolset

    server = str(Path(__file__).with_name("mcp_server_for_tests.py"))
    before = {t for t in threading.enumerate() if t.name.startswith("llmgym-mcp-")}
    with pytest.raises(ValueError, match="invalid inputSchema"):
        MCPToolset(sys.executable, [server], env={"MCP_TEST_BAD_SCHEMA": "1"})
    leaked = {t for t in threading.enumerate() if t.name.startswith("llmgym-mcp-")} - before
    assert not leaked
    ps = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "args="], capture_output=True, text=True).stdout
    assert "mcp_server_for_tests.py" not in ps


def test_mcp_duplicate_tool_name_is_refused_and_stops_the_server():
    pytest.importorskip("mcp")
    import sys
    import threading
    from pathlib import Path

    from llmgym.mcp import MCPToolset

    server = str(Path(__file__).with_name("mcp_server_for_tests.py"))
    before = {t for t in threading.enumerate() if t.name.startswith("llmgym-mcp-")}
    with pytest.raises(ValueError, match="'add' twice"):
        MCPToolset(sys.executable, [server], env={"MCP_TEST_DUPLICATE": "1"})
    assert not {t for t in threading.enumerate() if t.name.startswith("llmgym-mcp-")} - before


def test_a_file_holding_a_lone_surrogate_is_written_not_a_setup_failure(sandbox):
    # "\ud800" is valid in a JSON tool argument; the file gets its surrogatepass bytes, the run goes on
    result = sandbox.run('print(open("data.txt", "rb").read())', files={"data.txt": "a\ud800"})
    assert result.exit_code == 0 and result.stdout.strip() == "b'a\\xed\\xa0\\x80'"
