"""Registration: the llmgym namespace, plugins through entry points, and broken plugins."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym

import llmgym
from llmgym.cli import main
from llmgym.registry import close_matches, describe
from llmgym.scaffold import scaffold


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
    _write_plugin(
        tmp_path,
        "good_plugin",
        """
        import llmgym
        def register():
            llmgym.register("goodplugin/Echo-v0", "llmgym.envs.wordle.env:WordleEnv", description="a plugin env")
    """,
        "good_plugin:register",
    )
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


def _install(root, name, entry_points, modules):
    """A fake installed distribution ``name`` under ``root``: its modules and its ``llmgym.envs`` entry points."""
    for path, source in modules.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(source))
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[llmgym.envs]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))


def _python(root, script):
    """Run ``script`` with ``root`` on the path and every warning shown; its stdout and stderr together."""
    prelude = f"import sys, warnings\nsys.path.insert(0, {str(root)!r})\nwarnings.simplefilter('always')\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_a_package_that_imports_llmgym_at_its_top_is_registered_when_imported_first(tmp_path):
    _install(
        tmp_path,
        "toppkg",
        {"toppkg": "toppkg:register_envs"},
        {
            "toppkg/__init__.py": """
        from llmgym import register
        def register_envs():
            register("toppkg/Echo-v0", "llmgym.envs.wordle.env:WordleEnv")
    """
        },
    )
    out = _python(
        tmp_path,
        """
        import toppkg, llmgym, gymnasium as gym
        print("listed", "toppkg/Echo-v0" in llmgym.list_envs())
        print("made", gym.make("toppkg/Echo-v0").spec.id)
    """,
    )
    assert "partially initialized" not in out and "failed to load" not in out
    assert "listed True" in out and "made toppkg/Echo-v0" in out


def test_scaffolded_package_imported_before_llmgym_registers_once(tmp_path):
    root = scaffold("early-env", tmp_path)
    _install(root, "early_env", {"early-env": "early_env:register_envs"}, {})
    out = _python(
        root,
        """
        import early_env, gymnasium as gym
        print("made", gym.make("early_env:early-env/EarlyEnv-v0").spec.id)
        import llmgym
        print("listed", "early-env/EarlyEnv-v0" in llmgym.list_envs())
    """,
    )
    assert "made early-env/EarlyEnv-v0" in out and "listed True" in out
    assert "Warn" not in out and "Overriding" not in out and "failed" not in out, out


def test_a_failed_plugin_is_retried_and_warned_about_once(tmp_path):
    _install(
        tmp_path,
        "flaky",
        {"flaky": "flaky:register_envs"},
        {
            "flaky.py": """
        import builtins, llmgym
        builtins.flaky_runs = getattr(builtins, "flaky_runs", 0)
        if not getattr(builtins, "flaky_ready", False):
            raise ImportError("dependency not ready")
        def register_envs():
            builtins.flaky_runs += 1
            llmgym.register("flaky/Echo-v0", "llmgym.envs.wordle.env:WordleEnv")
    """
        },
    )
    out = _python(
        tmp_path,
        """
        import builtins, llmgym
        print("first", llmgym.load_plugins())
        builtins.flaky_ready = True
        print("listed", "flaky/Echo-v0" in llmgym.list_envs(), llmgym.load_plugins(force=True), builtins.flaky_runs)
    """,
    )
    assert out.count("dependency not ready") == 1
    assert "first ['flaky']" in out and "listed True [] 1" in out


def test_a_module_plugin_runs_once(tmp_path):
    _install(
        tmp_path,
        "modplug",
        {"modplug": "modplug_envs"},
        {
            "modplug_envs.py": """
        import gymnasium as gym
        print("module ran")
        gym.register("modplug/Echo-v0", entry_point="llmgym.envs.wordle.env:WordleEnv")
    """
        },
    )
    out = _python(
        tmp_path,
        """
        import llmgym
        print("listed", "modplug/Echo-v0" in llmgym.list_envs())
    """,
    )
    assert out.count("module ran") == 1 and "Overriding" not in out and "listed True" in out


def test_a_plugin_never_takes_over_a_builtin_id(tmp_path):
    _install(
        tmp_path,
        "grabber",
        {"grabber": "grabber:register_envs"},
        {
            "grabber.py": """
        import gymnasium as gym, llmgym
        def register_envs():
            llmgym.register("llmgym/Wordle-v0", "grabber:Fake", description="not wordle")
            gym.register("llmgym/MathTools-v0", entry_point="grabber:Fake")
    """
        },
    )
    out = _python(
        tmp_path,
        """
        import llmgym, gymnasium as gym
        print("kept", gym.spec("llmgym/Wordle-v0").entry_point, gym.spec("llmgym/MathTools-v0").entry_point)
        print("described", llmgym.registry.describe("llmgym/Wordle-v0"))
    """,
    )
    assert "kept llmgym.envs.wordle.env:WordleEnv llmgym.envs.math_tools.env:MathToolsEnv" in out
    assert "not wordle" not in out
    for env_id in ("llmgym/Wordle-v0", "llmgym/MathTools-v0"):
        assert f"plugin 'grabber' registered '{env_id}', which llmgym already registered" in out


def test_a_plugin_that_calls_sys_exit_only_warns(tmp_path):
    (tmp_path / "exiting_plugin.py").write_text("import sys\nsys.exit('bad plugin')\n")
    info = tmp_path / "exiting_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: exiting_plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[llmgym.envs]\nexiting = exiting_plugin:register\n")
    script = textwrap.dedent(f"""
        import sys, warnings
        sys.path.insert(0, {str(tmp_path)!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import llmgym
        print([str(w.message) for w in caught if "plugin" in str(w.message)])
        print("llmgym/Wordle-v0" in llmgym.list_envs())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    warning, wordle = result.stdout.splitlines()
    assert "'exiting'" in warning and "SystemExit: bad plugin" in warning
    assert wordle == "True"


def test_a_variant_does_not_make_the_reference_env_out_of_date(capsys):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym.make("llmgym/Wordle-v0").close()
    assert not [w for w in caught if "out of date" in str(w.message)]
    assert "out of date" not in capsys.readouterr().err


def test_the_old_wordle_v1_id_makes_the_compact_variant_and_names_it():
    import pytest

    with pytest.warns(FutureWarning, match=r"llmgym/Wordle-v1 is a deprecated name of llmgym/WordleCompact-v0"):
        env = gym.make("llmgym/Wordle-v1", answers="test")
    assert env.spec.id == "llmgym/WordleCompact-v0" and type(env.unwrapped).__name__ == "CompactWordleEnv"
    assert env.unwrapped.answer_split == "test"
    assert "llmgym/Wordle-v1" not in llmgym.list_envs() and "llmgym/WordleCompact-v0" in llmgym.list_envs()
    assert "WordleCompact-v0" in describe("llmgym/Wordle-v1")


def test_register_alias_needs_the_new_id_and_keeps_an_env_registered_under_the_old_one():
    import pickle
    import warnings

    import pytest

    from llmgym.registry import register, register_alias

    with pytest.raises(ValueError, match="register 'llmgym-test/Missing-v0' before"):
        register_alias("llmgym-test/Old-v0", "llmgym-test/Missing-v0")
    register("llmgym-test/Kept-v0", "llmgym.envs.wordle.env:WordleEnv")
    with pytest.warns(RuntimeWarning, match="already registered"):
        register_alias("llmgym-test/Kept-v0", "llmgym/Wordle-v0")
    assert gym.spec("llmgym-test/Kept-v0").entry_point == "llmgym.envs.wordle.env:WordleEnv"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register_alias("llmgym/Wordle-v1", "llmgym/WordleCompact-v0")  # again: nothing changes, no warning
    assert pickle.loads(pickle.dumps(gym.registry["llmgym/Wordle-v1"])) == gym.registry["llmgym/Wordle-v1"]


def test_descriptions_are_read_from_source_without_importing_the_envs():
    """`llmgym list` imported every env module (sympy, bm25s, scipy...) to read one line each: 1.0 -> 2.2 s."""
    code = (
        "import sys, gymnasium as gym\n"
        "from llmgym.registry import _descriptions as registered, describe, list_envs\n"
        "lines = {env_id: describe(env_id) for env_id in list_envs()}\n"
        "print(sorted(m for m in ('sympy', 'bm25s', 'scipy', 'torch') if m in sys.modules))\n"
        "for env_id, line in lines.items():\n"
        "    if env_id in registered:  # one adapter class serves many ids: their descriptions are registered\n"
        "        continue\n"
        "    entry = gym.spec(env_id).entry_point\n"
        "    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry\n"
        "    text = (getattr(cls, 'description', '') or cls.__doc__ or '').strip()\n"
        "    assert not hasattr(cls, 'description') or line == text.splitlines()[0], (env_id, line)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "[]"


def test_a_description_not_written_as_a_string_falls_back_to_the_class():
    from llmgym.registry import description_in_source

    assert description_in_source("llmgym.envs.wordle.env:WordleEnv")
    assert description_in_source("llmgym.envs.wordle.env:NoSuchClass") is None
    assert description_in_source("no_such_package.module:Env") is None
