"""Tests for ``llmgym init``: names, refusal of bad input, and the scaffold installed end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from llmgym.cli import main
from llmgym.scaffold import names_for, scaffold


def test_names_for_derives_package_class_and_id():
    names = names_for("word_ladder")
    assert (names.package, names.class_name, names.env_id) == ("word_ladder", "WordLadderEnv", "word_ladder/WordLadderEnv-v0")


@pytest.mark.parametrize("bad", ["", "1env", "my env", "my--env", "json", "llmgym", "../evil", "class"])
def test_bad_names_are_refused(bad):
    with pytest.raises(ValueError, match="name"):
        names_for(bad)


def test_init_writes_the_package(tmp_path, capsys):
    assert main(["init", "my-env", "--dir", str(tmp_path), "--description", "A test env."]) == 0
    assert "pip install -e" in capsys.readouterr().out
    root = tmp_path / "my-env"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [".gitignore", "README.md", "my_env/__init__.py", "my_env/env.py", "pyproject.toml", "tests/test_env.py"]
    pyproject = (root / "pyproject.toml").read_text()
    assert '[project.entry-points."llmgym.envs"]' in pyproject and 'my-env = "my_env:register_envs"' in pyproject
    assert "{{" not in "".join(p.read_text() for p in root.rglob("*") if p.is_file())
    for path in root.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")


def test_init_refuses_a_non_empty_folder(tmp_path, capsys):
    (tmp_path / "my-env").mkdir()
    (tmp_path / "my-env" / "keep.txt").write_text("mine")
    assert main(["init", "my-env", "--dir", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "my-env" / "keep.txt").read_text() == "mine"


def test_scaffolded_env_runs_in_process(tmp_path, monkeypatch):
    import gymnasium as gym

    from llmgym.checker import check_env

    root = scaffold("inproc-env", tmp_path)
    monkeypatch.syspath_prepend(str(root))
    import inproc_env

    inproc_env.register_envs()
    report = check_env("inproc-env/InprocEnv-v0", episodes=2)
    assert report.passed, report
    assert gym.make("inproc-env/InprocEnv-v0").unwrapped.tools.keys() == {"guess"}


def _llmgym(*args: str) -> subprocess.CompletedProcess:
    """The ``llmgym`` console script (the entry point pip installed), or its main() when not on PATH."""
    script = shutil.which("llmgym")
    command = [script] if script else [sys.executable, "-c", "import sys; from llmgym.cli import main; sys.exit(main())"]
    return _run(*command, *args)


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_pip_install_then_list_make_and_its_own_tests(tmp_path):
    """The whole authoring loop: init, pip install -e, llmgym list, gym.make, the package's tests, uninstall."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"  # unique, so a parallel run never sees a half-installed twin
    names = names_for(name)
    root = scaffold(name, tmp_path)
    pip = [sys.executable, "-m", "pip"]
    installed = _run(*pip, "install", "-q", "-e", str(root), "--no-deps", "--no-build-isolation")
    try:
        assert installed.returncode == 0, installed.stderr
        listed = _llmgym("list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert names.env_id in [row["id"] for row in json.loads(listed.stdout)]
        made = _run(
            sys.executable, "-c",
            f"import gymnasium as gym, llmgym; env = gym.make({names.env_id!r}); print(env.reset(seed=0)[0])",
        )
        assert made.returncode == 0, made.stderr
        assert "between 1 and 100" in made.stdout
        tests = _run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests"), cwd=root)
        assert tests.returncode == 0, tests.stdout + tests.stderr
        assert " passed" in tests.stdout
    finally:
        removed = _run(*pip, "uninstall", "-y", "-q", name)
    assert removed.returncode == 0, removed.stderr
    after = _llmgym("list", "--json")
    assert names.env_id not in after.stdout
