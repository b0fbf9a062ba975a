"""Tests for ``llmgym init`` (llmgym/scaffold.py): names, refusal of bad input (names that would shadow a module,
folders that cannot be made), the files it writes, and the scaffold installed end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from llmgym.cli import main
from llmgym.scaffold import names_for, scaffold


def test_names_for_derives_package_class_and_id():
    names = names_for("word_ladder")
    assert (names.package, names.class_name, names.env_id) == (
        "word_ladder",
        "WordLadderEnv",
        "word_ladder/WordLadderEnv-v0",
    )


@pytest.mark.parametrize("bad", ["", "1env", "my env", "my--env", "json", "llmgym", "../evil", "class"])
def test_bad_names_are_refused(bad):
    with pytest.raises(ValueError, match="name"):
        names_for(bad)


def test_init_writes_the_package(tmp_path, capsys):
    assert main(["init", "my-env", "--dir", str(tmp_path), "--description", "A test env."]) == 0
    assert "pip install -e" in capsys.readouterr().out
    root = tmp_path / "my-env"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [
        ".gitignore",
        "README.md",
        "my_env/__init__.py",
        "my_env/env.py",
        "pyproject.toml",
        "tests/test_env.py",
    ]
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


def test_scaffold_writes_the_description_once_on_the_class(tmp_path, monkeypatch):
    """The class's ``description`` is its one home (docs/authoring.md): ``register`` gets none, and
    ``llmgym list`` (``registry.describe``) shows the class's line."""
    import ast

    from llmgym.registry import describe

    root = scaffold("once-env", tmp_path, description="Told once.")
    package_init = ast.parse((root / "once_env" / "__init__.py").read_text())
    registers = [
        node
        for node in ast.walk(package_init)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register"
    ]
    assert len(registers) == 1 and [k.arg for k in registers[0].keywords] == [] and len(registers[0].args) == 2
    monkeypatch.syspath_prepend(str(root))
    import once_env

    once_env.register_envs()
    assert describe("once-env/OnceEnv-v0") == "Told once."


def _llmgym(*args: str) -> subprocess.CompletedProcess:
    """The ``llmgym`` console script (the entry point pip installed), or its main() when not on PATH."""
    script = shutil.which("llmgym")
    command = (
        [script] if script else [sys.executable, "-c", "import sys; from llmgym.cli import main; sys.exit(main())"]
    )
    return _run(*command, *args)


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_pip_install_then_list_make_and_its_own_tests(tmp_path):
    """The whole authoring loop: init, pip install -e, llmgym list, gym.make, the package's tests, uninstall."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"  # unique, so a parallel run never sees a half-installed twin
    names = names_for(name)
    root = scaffold(name, tmp_path, description="Guess the number.")
    pip = [sys.executable, "-m", "pip"]
    installed = _run(*pip, "install", "-q", "-e", str(root), "--no-deps", "--no-build-isolation")
    try:
        assert installed.returncode == 0, installed.stderr
        listed = _llmgym("list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {row["id"]: row["description"] for row in json.loads(listed.stdout)}
        assert rows.get(names.env_id) == "Guess the number."  # the class's description
        made = _run(
            sys.executable,
            "-c",
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


@pytest.mark.parametrize("name", ["numpy", "gymnasium", "pytest"])
def test_init_refuses_the_name_of_an_installed_module(name, tmp_path, capsys):
    assert importlib.util.find_spec(name) is not None
    assert main(["init", name, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"installed module {name}" in err
    assert not (tmp_path / name).exists()


def test_init_names_the_stdlib_module_it_would_shadow(tmp_path, capsys):
    assert main(["init", "json", "--dir", str(tmp_path)]) == 2
    assert "standard-library module json" in capsys.readouterr().err


def test_init_rerun_over_its_own_importable_scaffold(tmp_path, monkeypatch):
    root = scaffold("rerun-env", tmp_path)
    monkeypatch.syspath_prepend(str(root))  # as after `pip install -e rerun-env`
    assert importlib.util.find_spec("rerun_env") is not None
    assert scaffold("rerun-env", tmp_path, force=True) == root  # the same project: allowed
    with pytest.raises(ValueError, match="installed module rerun_env"):
        scaffold("rerun-env", tmp_path / "elsewhere")  # a second copy would shadow the first


def test_init_ignores_a_bare_folder_of_that_name_on_the_path(tmp_path, monkeypatch):
    (tmp_path / "path" / "bare_env").mkdir(parents=True)  # a namespace package: any real package wins over it
    monkeypatch.syspath_prepend(str(tmp_path / "path"))
    assert scaffold("bare_env", tmp_path / "projects").is_dir()


def test_init_reports_os_errors_in_one_line(tmp_path, capsys):
    """Regression: an OS error while creating the project was a traceback."""
    assert main(["init", "a" * 300, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym: error: cannot create the project") and "File name too long" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    if Path("/sys/kernel").is_dir():  # sysfs: no folder can be made there, not even by root
        assert main(["init", "my-env", "--dir", "/sys/kernel"]) == 2
        assert capsys.readouterr().err.startswith("llmgym: error: cannot create the project")


def test_scaffold_description_with_backslashes_and_newlines_keeps_the_package_valid(tmp_path):
    import ast

    import tomllib

    from llmgym.scaffold import scaffold

    root = scaffold("desc-env", tmp_path, description='Paths like C:\\Names\\x.\nSecond "line"\\')
    expected = "Paths like C:\\Names\\x. Second 'line'\\"
    assert tomllib.loads((root / "pyproject.toml").read_text())["project"]["description"] == expected
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), str(path))  # a SyntaxError before the fix
    package_init = ast.parse((root / "desc_env" / "__init__.py").read_text())
    assert ast.get_docstring(package_init).splitlines()[0] == expected
    env_module = ast.parse((root / "desc_env" / "env.py").read_text())
    values = [
        node.value.value
        for node in ast.walk(env_module)
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "description"
    ]
    assert values == [expected]
    assert expected in (root / "README.md").read_text()


def test_scaffold_into_a_path_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    from llmgym.cli import main

    (tmp_path / "my-env").write_text("mine")
    assert main(["init", "my-env", "--dir", str(tmp_path)]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert (tmp_path / "my-env").read_text() == "mine"


@pytest.mark.parametrize("name", ["tests", "Tests"])
def test_a_name_whose_package_would_be_the_tests_folder_is_refused(name):
    from llmgym.scaffold import names_for

    with pytest.raises(ValueError, match="shadow"):
        names_for(name)


def test_a_keyword_project_name_is_refused_as_a_keyword():
    with pytest.raises(ValueError, match="'class' is a Python keyword"):
        names_for("class")


def test_the_scaffolded_checker_test_prints_the_whole_report(tmp_path):
    from llmgym.scaffold import scaffold

    tests = (scaffold("report-env", tmp_path) / "tests" / "test_env.py").read_text()
    assert "assert report.passed, str(report)" in tests
