"""Regressions for llmgym.vector and llmgym init (scaffold)."""

from __future__ import annotations

import pytest

import llmgym


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_wrong_number_of_actions_plays_none_and_leaves_the_envs_in_step(mode):
    envs = llmgym.make_vec("llmgym/Wordle-v0", 2, mode)
    try:
        envs.reset(seed=0)
        for bad in (["crane"], ["crane", "hello", "extra"], "hello"):
            with pytest.raises(ValueError, match="one per sub-environment"):
                envs.step(bad)
        first = envs.step(["crane", "hello"])[0]
        second = envs.step(["crane", "hello"])[0]
    finally:
        envs.close()
    assert [o.splitlines()[-1] for o in first] == ["5 guesses left."] * 2
    assert [o.splitlines()[-1] for o in second] == ["4 guesses left."] * 2


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
    values = [node.value.value for node in ast.walk(env_module)
              if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "description"]
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
