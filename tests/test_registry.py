"""Registration: the llmgym namespace, plugins through entry points, and broken plugins."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym

import llmgym
from llmgym.cli import main
from llmgym.registry import close_matches, describe


def test_builtin_envs_are_registered_with_descriptions():
    assert "llmgym/Wordle-v0" in llmgym.list_envs()
    assert "five-letter" in describe("llmgym/Wordle-v0")
    assert gym.spec("llmgym/Wordle-v0").entry_point == "llmgym.envs.wordle.env:WordleEnv"


def test_close_matches_for_typos():
    assert close_matches("llmgym/Wordel-v0")[0] == "llmgym/Wordle-v0"


def _write_plugin(root, name, module_source, target):
    (root / f"{name}.py").write_text(textwrap.dedent(module_source))
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[llmgym.envs]\n{name} = {target}\n")


def test_plugins_register_and_broken_ones_only_warn(tmp_path):
    _write_plugin(tmp_path, "good_plugin", """
        import llmgym
        def register():
            llmgym.register("goodplugin/Echo-v0", "llmgym.envs.wordle.env:WordleEnv", description="a plugin env")
    """, "good_plugin:register")
    _write_plugin(tmp_path, "broken_plugin", "raise ImportError('missing dependency xyz')\n", "broken_plugin:register")
    script = textwrap.dedent(f"""
        import sys, warnings
        sys.path.insert(0, {str(tmp_path)!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import llmgym, gymnasium as gym
        print([str(w.message) for w in caught if "plugin" in str(w.message)])
        print(llmgym.list_envs())
        print(gym.make("goodplugin/Echo-v0").reset(seed=0)[0])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "broken_plugin" in out[0] and "missing dependency xyz" in out[0]
    assert "goodplugin/Echo-v0" in out[1] and "llmgym/Wordle-v0" in out[1]
    assert "five-letter" in out[2]


def test_cli_list(capsys):
    assert main(["list", "--json"]) == 0
    assert '"llmgym/Wordle-v0"' in capsys.readouterr().out


def test_register_refuses_max_episode_steps_and_points_to_max_turns():
    import pytest

    from llmgym.registry import register

    with pytest.raises(ValueError, match=r'max_turns": 3'):
        register("llmgym-test/Limited-v0", "llmgym.envs.wordle:WordleEnv", max_episode_steps=3)
    assert "llmgym-test/Limited-v0" not in gym.registry
