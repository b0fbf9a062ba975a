"""llmgym.sandbox: ordinary programs run, and hostile ones stay contained, wherever the interpreter is installed.

The sandbox's uid may not enter a mode-700 home, and its private ``/tmp`` hides
what the host keeps there. A helper process builds both cases in a mount
namespace of its own (nothing of it is seen outside), on fresh tmpfs over
``/home`` and ``/tmp``: the interpreter this suite runs on, bind-mounted into
``/home/alice/.pyenv`` with ``/home/alice`` mode 700 next to a private key
(pyenv or conda in a home), and a virtualenv in ``/tmp`` on top of it (this
machine's own setup). Each runs the same
ordinary and hostile programs in a :class:`SubprocessSandbox` whose workers
use that interpreter.

Those tmpfs hide whatever the host keeps in ``/home`` and ``/tmp``, and the
suite itself may live there (CI runs a fresh clone and virtualenv in ``/tmp``):
the helper binds the folders of its own interpreter and llmgym's sources (the
worker script) back at their paths, read-only, before it starts a worker. The
home and the virtualenv it makes get names the host does not use, so they
never land on a folder bound back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from llmgym.sandbox import SandboxLimits
from llmgym.sandbox._isolation import interpreter_paths


def _unused(path: str) -> str:
    """``path``, else ``path-2``, ``path-3``...: the first the host lacks (the helper binds host folders back)."""
    candidate, number = path, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = f"{path}-{number}"
    return candidate


LIMITS = SandboxLimits(wall_time_s=20, cpu_time_s=10, memory_mb=512)
HOME = _unused("/home/alice")
KEY = f"{HOME}/.ssh/id_ed25519"
VENV = _unused("/tmp/venv")

ORDINARY = {
    "stdlib": "import doctest, inspect, socket, statistics, threading, unittest\n"
    "print(statistics.mean([1, 2, 3]), 'def mean' in inspect.getsource(statistics.mean))",
    "unittest": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(1, 1)\n"
    "unittest.main()",
    "thread": "import threading\nthread = threading.Thread(target=print, args=('from a thread',))\n"
    "thread.start()\nthread.join()",
    "child_interpreter": "import subprocess, sys\n"
    "child = [sys.executable, '-c', 'import statistics; print(statistics.median([3, 1, 2]))']\n"
    "print(subprocess.run(child, capture_output=True, text=True).stdout.strip())",
}
HOSTILE = {
    "read_key": f"print(open({KEY!r}).read())",
    "list_home": f"import os\nprint(sorted(os.listdir({HOME!r})))",
    "write_stdlib": "import os\nopen(os.path.join(os.path.dirname(os.__file__), 'planted.py'), 'w').write('x')",
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)",
    "environment": "import os\nprint(dict(os.environ))",
    "kill_parent": "import os\nos.kill(os.getppid(), 9)",
    "memory": "x = bytearray(4 * 1024**3)",
    "processes": "import os, resource\nprint(os.getuid() != 0, resource.getrlimit(resource.RLIMIT_NPROC)[0])",
    "read_hidden": "import os, sys\nprint(open(os.path.join(sys.prefix, 'hidden_tests', 'test_secret.py')).read())",
    "after": "print('alive')",
}

_HELPER = """
import ctypes, json, os, subprocess, sys
import llmgym
from llmgym.sandbox import SandboxLimits, SubprocessSandbox
from llmgym.sandbox._isolation import interpreter_paths
from llmgym.sandbox.subprocess_backend import WORKER_SCRIPT

libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x20, 0x1000, 0x4000, 0x40000


def mount(source, target, fstype, flags, data=None):
    source, fstype, data = (text and text.encode() for text in (source, fstype, data))
    if libc.mount(source, target.encode(), fstype, flags, data):
        raise OSError(ctypes.get_errno(), "mount " + target)


def under(path, folder):
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


limits, home, key, venv, programs = json.loads(sys.argv[1])
covered = [os.path.realpath(os.path.dirname(path)) for path in (home, venv)]
# what this process and its workers need from the host's /home and /tmp, which the tmpfs below hide: the folders of
# this interpreter (the suite's virtualenv may be in /tmp) and llmgym's sources (the worker script; a checkout in /tmp)
needed = set(interpreter_paths()) | {os.path.realpath(os.path.dirname(llmgym.__file__))}
needed = [p for p in needed if not any(q != p and under(p, q) for q in needed)]
if libc.unshare(0x00020000):  # CLONE_NEWNS: these mounts stay in this process and go with it
    raise OSError(ctypes.get_errno(), "unshare")
mount("none", "/", None, MS_REC | MS_PRIVATE)
# handles opened in this namespace (a bind's source must be in it) before the tmpfs cover their folders
kept = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in needed if any(under(p, folder) for folder in covered)}
base = os.open(sys.base_prefix, os.O_PATH | os.O_DIRECTORY)
for folder in covered:
    mount("tmpfs", folder, "tmpfs", 0, "mode=1777")
for path, handle in sorted(kept.items()):  # back at their own paths, read-only: nothing of the host can change
    os.makedirs(path, exist_ok=True)
    mount("/proc/self/fd/%d" % handle, path, None, MS_BIND | MS_REC)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
if not os.path.isfile(WORKER_SCRIPT):
    raise FileNotFoundError("the tmpfs hide the sandbox worker script " + WORKER_SCRIPT)
os.mkdir(home, 0o700)
os.makedirs(os.path.dirname(key))
with open(key, "w") as handle:
    handle.write("PRIVATE KEY")
prefix = os.path.join(home, ".pyenv", "versions", "%d.%d" % sys.version_info[:2])
os.makedirs(prefix)
mount("/proc/self/fd/%d" % base, prefix, None, MS_BIND | MS_REC)
pyenv = os.path.join(prefix, "bin", "python%d.%d" % sys.version_info[:2])
subprocess.run([pyenv, "-m", "venv", "--without-pip", venv], check=True)
hidden = os.path.join(venv, "hidden_tests")  # inside a folder bound back: hiding it must win, run after run
os.mkdir(hidden)
with open(os.path.join(hidden, "test_secret.py"), "w") as handle:
    handle.write("EXPECTED = 42")
os.environ["LLMGYM_TEST_SECRET"] = "hunter2"
out = {}
for location, python in (("private_home", pyenv), ("venv_in_tmp", os.path.join(venv, "bin", "python"))):
    with SubprocessSandbox(SandboxLimits(**limits), python=python, hide_paths=[hidden]) as box:
        runs = {name: box.run(code) for name, code in programs.items()}
        out[location] = {"isolation": box.isolation(), "prefix": prefix,
                         "runs": {name: {"stdout": r.stdout, "stderr": r.stderr, "error": r.error, "ok": r.ok}
                                  for name, r in runs.items()}}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def runs() -> dict:
    if os.geteuid() != 0:
        pytest.skip(
            "needs root: the helper mounts the interpreter into a mode-700 home (in a mount namespace "
            "of its own), and only the uid drop makes that home unreadable to the program"
        )
    if not os.path.isdir(os.path.dirname(HOME)):
        pytest.skip(f"no {os.path.dirname(HOME)} to mount the private home on")
    argument = json.dumps([asdict(LIMITS), HOME, KEY, VENV, {**ORDINARY, **HOSTILE}])
    command = [sys.executable, "-c", _HELPER, argument]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


LOCATIONS = ["private_home", "venv_in_tmp"]


@pytest.mark.parametrize("location", LOCATIONS)
def test_ordinary_programs_run(runs, location):
    out = runs[location]["runs"]
    assert all(out[name]["ok"] for name in ORDINARY), {name: out[name]["stderr"] for name in ORDINARY}
    assert out["stdlib"]["stdout"] == "2 True\n"
    assert "Ran 1 test" in out["unittest"]["stderr"] and out["unittest"]["stderr"].endswith("OK\n")
    assert out["thread"]["stdout"] == "from a thread\n"
    assert out["child_interpreter"]["stdout"] == "2\n"


@pytest.mark.parametrize("location", LOCATIONS)
def test_only_the_interpreters_folders_are_bound_back(runs, location):
    report = runs[location]["isolation"]
    assert report["uid_drop"] and runs[location]["prefix"] in report["interpreter_paths"]
    if location == "venv_in_tmp":
        assert VENV in report["interpreter_paths"] and report["hidden_paths"] == [f"{VENV}/hidden_tests"]
    assert runs[location]["runs"]["list_home"]["stdout"] == "['.pyenv']\n"  # the rest of the home is not there


@pytest.mark.parametrize("location", LOCATIONS)
def test_hostile_programs_are_contained(runs, location):
    report, out = runs[location]["isolation"], runs[location]["runs"]
    assert not out["read_key"]["ok"] and "No such file or directory" in out["read_key"]["stderr"]
    assert "PRIVATE KEY" not in out["read_key"]["stdout"]
    assert not out["write_stdlib"]["ok"] and "Read-only file system" in out["write_stdlib"]["stderr"]
    assert report["network_isolated"] and not out["network"]["ok"]
    assert out["environment"]["ok"] and "hunter2" not in out["environment"]["stdout"]
    assert "PermissionError" in out["kill_parent"]["stderr"]
    assert "memory limit exceeded" in out["memory"]["error"]
    assert out["processes"]["stdout"] == f"True {LIMITS.max_processes + 2}\n"
    assert not out["read_hidden"]["ok"] and "EXPECTED" not in out["read_hidden"]["stdout"]  # after many runs' cleanups
    assert out["after"]["stdout"] == "alive\n"


def test_interpreter_paths_cover_sys_path_with_no_folder_inside_another():
    paths = interpreter_paths()
    assert all(os.path.isabs(p) and os.path.realpath(p) == p for p in paths)
    assert not any(p != q and q.startswith(p + os.sep) for p in paths for q in paths)
    for entry in filter(os.path.isdir, sys.path):
        assert any(os.path.realpath(entry) == p or os.path.realpath(entry).startswith(p + os.sep) for p in paths), entry
