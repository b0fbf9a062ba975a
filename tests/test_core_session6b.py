"""Plugin loading (half-imported packages, module plugins, id conflicts), tool refusals,
``Text`` flattening and equality, numpy values in episodes, and TRL chat rows."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from llmgym import Episode, Text, tool
from llmgym.scaffold import scaffold


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
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_a_package_that_imports_llmgym_at_its_top_is_registered_when_imported_first(tmp_path):
    _install(tmp_path, "toppkg", {"toppkg": "toppkg:register_envs"}, {"toppkg/__init__.py": """
        from llmgym import register
        def register_envs():
            register("toppkg/Echo-v0", "llmgym.envs.wordle.env:WordleEnv")
    """})
    out = _python(tmp_path, """
        import toppkg, llmgym, gymnasium as gym
        print("listed", "toppkg/Echo-v0" in llmgym.list_envs())
        print("made", gym.make("toppkg/Echo-v0").spec.id)
    """)
    assert "partially initialized" not in out and "failed to load" not in out
    assert "listed True" in out and "made toppkg/Echo-v0" in out


def test_scaffolded_package_imported_before_llmgym_registers_once(tmp_path):
    root = scaffold("early-env", tmp_path)
    _install(root, "early_env", {"early-env": "early_env:register_envs"}, {})
    out = _python(root, """
        import early_env, gymnasium as gym
        print("made", gym.make("early_env:early-env/EarlyEnv-v0").spec.id)
        import llmgym
        print("listed", "early-env/EarlyEnv-v0" in llmgym.list_envs())
    """)
    assert "made early-env/EarlyEnv-v0" in out and "listed True" in out
    assert "Warn" not in out and "Overriding" not in out and "failed" not in out, out


def test_a_failed_plugin_is_retried_and_warned_about_once(tmp_path):
    _install(tmp_path, "flaky", {"flaky": "flaky:register_envs"}, {"flaky.py": """
        import builtins, llmgym
        builtins.flaky_runs = getattr(builtins, "flaky_runs", 0)
        if not getattr(builtins, "flaky_ready", False):
            raise ImportError("dependency not ready")
        def register_envs():
            builtins.flaky_runs += 1
            llmgym.register("flaky/Echo-v0", "llmgym.envs.wordle.env:WordleEnv")
    """})
    out = _python(tmp_path, """
        import builtins, llmgym
        print("first", llmgym.load_plugins())
        builtins.flaky_ready = True
        print("listed", "flaky/Echo-v0" in llmgym.list_envs(), llmgym.load_plugins(force=True), builtins.flaky_runs)
    """)
    assert out.count("dependency not ready") == 1
    assert "first ['flaky']" in out and "listed True [] 1" in out


def test_a_module_plugin_runs_once(tmp_path):
    _install(tmp_path, "modplug", {"modplug": "modplug_envs"}, {"modplug_envs.py": """
        import gymnasium as gym
        print("module ran")
        gym.register("modplug/Echo-v0", entry_point="llmgym.envs.wordle.env:WordleEnv")
    """})
    out = _python(tmp_path, """
        import llmgym
        print("listed", "modplug/Echo-v0" in llmgym.list_envs())
    """)
    assert out.count("module ran") == 1 and "Overriding" not in out and "listed True" in out


def test_a_plugin_never_takes_over_a_builtin_id(tmp_path):
    _install(tmp_path, "grabber", {"grabber": "grabber:register_envs"}, {"grabber.py": """
        import gymnasium as gym, llmgym
        def register_envs():
            llmgym.register("llmgym/Wordle-v0", "grabber:Fake", description="not wordle")
            gym.register("llmgym/MathTools-v0", entry_point="grabber:Fake")
    """})
    out = _python(tmp_path, """
        import llmgym, gymnasium as gym
        print("kept", gym.spec("llmgym/Wordle-v0").entry_point, gym.spec("llmgym/MathTools-v0").entry_point)
        print("described", llmgym.registry.describe("llmgym/Wordle-v0"))
    """)
    assert "kept llmgym.envs.wordle.env:WordleEnv llmgym.envs.math_tools.env:MathToolsEnv" in out
    assert "not wordle" not in out
    for env_id in ("llmgym/Wordle-v0", "llmgym/MathTools-v0"):
        assert f"plugin 'grabber' registered '{env_id}', which llmgym already registered" in out


def test_async_tools_are_refused_at_decoration():
    with pytest.raises(TypeError, match="async functions are not supported.*MCP"):
        @tool
        async def fetch(x: int) -> int:
            """Fetch."""
            return x


def test_positional_only_tool_arguments_are_refused_at_decoration():
    with pytest.raises(TypeError, match="positional-only argument 'a'"):
        @tool
        def po(a: int, /) -> int:
            """Echo."""
            return a


@pytest.mark.parametrize("function", [gym.spaces.flatten, gym.spaces.unflatten])
def test_text_refuses_flattening_with_a_pointer_to_the_wrappers(function):
    with pytest.raises(ValueError, match="TextEmbeddingObservation"):
        function(Text(20), "—dash")


def test_text_refuses_flatdim_and_flatten_space_also_inside_a_dict():
    space = gym.spaces.Dict(text=Text(20))
    assert not space.is_np_flattenable
    with pytest.raises(ValueError, match="cannot be flattened"):
        gym.spaces.flatdim(space)  # Gymnasium's own message for a space that is not np-flattenable
    for call in (lambda: gym.spaces.flatdim(Text(20)), lambda: gym.spaces.flatten_space(space),
                 lambda: gym.spaces.flatten(space, {"text": "🙂"})):
        with pytest.raises(ValueError, match="docs/interop.md"):
            call()


def test_text_equality_includes_the_charset():
    assert Text(20, charset="abc") != Text(20, charset="xyz")
    assert Text(20, charset="abc") == Text(20, charset="cba")
    assert "charset='abc'" in repr(Text(20, charset="abc"))


def test_episode_to_json_turns_numpy_bools_and_arrays_into_plain_values():
    metadata = {"a": np.False_, "arr": np.array([[1, 2]]), "f": np.array([np.nan])}
    episode = Episode("x", terminated=np.bool_(True), metadata=metadata)
    data = json.loads(episode.to_json())
    assert data["terminated"] is True and data["metadata"] == {"a": False, "arr": [[1, 2]], "f": [None]}


def test_trl_rows_hold_a_text_protocol_call_once():
    from llmgym.wrappers.trl import episodes_to_messages

    env = gym.make("llmgym/Wordle-v0")
    env.reset(seed=0)
    *_, info = env.step('Trying. <tool_call>{"name":"guess","arguments":{"word":"pious"}}</tool_call>')
    assistant = [m for m in episodes_to_messages([Episode("llmgym/Wordle-v0", messages=info["messages"])])[0]["messages"]
                 if m["role"] == "assistant"]
    assert len(assistant) == 1 and assistant[0]["content"] == "Trying."
    assert [c["function"] for c in assistant[0]["tool_calls"]] == [{"name": "guess", "arguments": {"word": "pious"}}]
    native = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}]}
    row = episodes_to_messages([Episode("x", messages=[native])])[0]["messages"][0]
    assert row["tool_calls"][0]["function"]["arguments"] == {"word": "crane"}
