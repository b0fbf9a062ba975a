"""Regressions found in review: sandbox, judge and MCP edge cases."""

from __future__ import annotations

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
