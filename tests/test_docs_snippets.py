"""What README.md and docs/*.md tell a user still holds: snippets run, commands parse.

Only fast checks: the README's Python example, the authoring guide's environment
(which must pass the checker), every ``llmgym ...`` command line shown in a code
block (parsed by the real CLI parser, not run), the extras the README lists, and the
repository files the docs name.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def code_blocks(path: Path, lang: str | None = None) -> list[str]:
    """The fenced code blocks of a Markdown file (only ``lang`` ones when given)."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), flags=re.M | re.S)
    return [code for block_lang, code in blocks if lang is None or block_lang == lang]


def block_under(path: Path, heading: str, lang: str = "python") -> str:
    """The first ``lang`` code block after ``heading``."""
    text = path.read_text()
    section = text[text.index(heading) :]
    return code_blocks_from_text(section, lang)[0]


def code_blocks_from_text(text: str, lang: str) -> list[str]:
    return [
        code for block_lang, code in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S) if block_lang == lang
    ]


def test_readme_python_example_runs(capsys):
    code = block_under(ROOT / "README.md", "## In Python")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert isinstance(namespace["reward"], float)
    assert set(namespace["info"]["reward_components"]) >= {"information", "invalid_guess"}
    assert "CRANE" in capsys.readouterr().out


def test_authoring_guide_env_passes_the_checker():
    from llmgym.checker import check_env

    code = block_under(ROOT / "docs" / "authoring.md", "## An environment in 50 lines")
    namespace: dict = {}
    exec(compile(code, "docs/authoring.md", "exec"), namespace)
    env_class = namespace["GuessNumberEnv"]
    report = check_env(env_class(), episodes=5)
    assert report.passed, report
    env = env_class()
    env.reset(seed=0)
    observation, reward, terminated, _, _ = env.step(
        f'<tool_call>{{"name": "guess", "arguments": {{"number": {env.target}}}}}</tool_call>'
    )
    assert terminated and reward > 1.0, observation


def command_lines() -> list[tuple[str, str]]:
    """Every ``llmgym ...`` line of a code block: (file, command without comment or ``&``)."""
    lines = []
    for path in DOCS:
        for code in code_blocks(path):
            code = code.replace("\\\n", " ")
            for line in code.splitlines():
                line = line.strip().removeprefix("$ ")
                for part in line.split("&&"):
                    part = part.strip()
                    if part.startswith("llmgym "):
                        part = re.sub(r"\s+#.*$", "", part).rstrip("& ")
                        lines.append((path.name, part))
    return lines


@pytest.mark.parametrize(("doc", "command"), command_lines())
def test_documented_commands_parse(doc, command):
    from llmgym.cli import build_parser

    args = build_parser().parse_args(shlex.split(command)[1:])
    assert hasattr(args, "func"), f"{doc}: {command!r} names no subcommand"


def test_readme_extras_exist():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Extras") : text.index("## Where things are")]
    named = {
        name for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.M) for name in re.findall(r"`([\w-]+)`", cell)
    }
    assert named, "no extras found in the README table"
    assert named <= set(extras), named - set(extras)
    assert set(extras) <= named, f"extras missing from the README: {set(extras) - named}"


# Paths the docs name that are outputs or files of a generated project, not of this repository.
NOT_REPO_FILES = ("runs/", "OUT/", "out/", "final/", "my_env/", "tests/test_env.py")


def test_repository_files_named_in_docs_exist():
    missing = []
    for path in DOCS:
        for name in re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|md|json|toml|png|txt))`", path.read_text()):
            if name.startswith(NOT_REPO_FILES):
                continue
            if not (ROOT / name).exists():
                missing.append(f"{path.name}: {name}")
    assert not missing, missing


def test_readme_write_your_own_environment_runs_and_passes_the_checker(capsys):
    from llmgym.checker import check_env

    code = block_under(ROOT / "README.md", "## Write your own environment")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert capsys.readouterr().out.strip().endswith("1.0")
    report = check_env(namespace["ReverseEnv"](), episodes=3)
    assert report.passed, report


def test_docs_index_lists_every_page_once():
    index = (ROOT / "docs" / "README.md").read_text()
    linked = re.findall(r"^- \[([\w.-]+\.md)\]\(\1\)", index, flags=re.M)
    pages = sorted(path.name for path in (ROOT / "docs").glob("*.md") if path.name != "README.md")
    assert sorted(linked) == pages, f"docs/README.md lists {sorted(set(linked) ^ set(pages))} wrongly"
