"""One run at a time writes an output: a second process is refused naming the holder, and a resume repairs the file
that two runs wrote into at once (one line per episode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from cli_runs import eval_wordle, one_line_error

from llmgym.cli import main
from llmgym.episode import Episode, load_jsonl
from llmgym.rollout import rollout
from llmgym.rollout.output_lock import OutputInUseError, hold_output, lock_path
from llmgym.rollout.resume import Repair, repair_jsonl
from llmgym.wrappers.scripted import load_scripted

WORDLE = "llmgym/Wordle-v0"

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from llmgym.rollout.output_lock import hold_output
    with hold_output(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
    """
)

_TAKE = "import sys\nfrom llmgym.rollout.output_lock import hold_output\nwith hold_output(sys.argv[1]):\n    pass"


@pytest.fixture
def holder(tmp_path):
    """Another process that holds ``tmp_path/run/episodes.jsonl`` until it is killed."""
    path = tmp_path / "run" / "episodes.jsonl"
    process = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "held\n"
        yield process, path
    finally:
        process.kill()
        process.wait()


def test_a_second_run_into_a_held_output_is_refused_naming_the_holder(holder, tmp_path, capsys):
    process, path = holder
    for extra in ([], ["--resume"]):
        assert eval_wordle(tmp_path / "run", "-n", "2", *extra) == 2
        error = one_line_error(capsys)
        assert f"{path} is being written by another run (pid {process.pid})" in error
        assert "choose another --out" in error
    assert not path.exists()  # nothing was written, nor emptied
    with pytest.raises(OutputInUseError, match=f"pid {process.pid}") as refused:
        rollout(WORDLE, load_scripted("wordle"), seeds=1, jsonl_path=path)
    assert refused.value.pid == process.pid and refused.value.path == path


def test_a_run_that_wrote_nothing_leaves_no_folder_behind(tmp_path):
    out = tmp_path / "new" / "run"
    with hold_output(out / "episodes.jsonl"):
        assert lock_path(out / "episodes.jsonl").exists()
    assert not (tmp_path / "new").exists()


def test_a_killed_holder_leaves_the_output_free(holder, tmp_path, capsys):
    process, path = holder
    process.kill()  # SIGKILL: no cleanup of its own runs; the kernel drops its lock
    process.wait()
    assert eval_wordle(tmp_path / "run", "-n", "2") == 0
    assert [e.seed for e in load_jsonl(path)] == [0, 1]
    assert not lock_path(path).exists()  # released: the lock file (the killed holder's) is gone


def test_the_lock_is_shared_within_a_process_and_released_by_the_outermost_hold(tmp_path):
    path = tmp_path / "episodes.jsonl"
    with hold_output(path):
        rollout(WORDLE, load_scripted("wordle"), seeds=1, jsonl_path=path)  # the rollout holds it again
        assert lock_path(path).read_text() == f"{os.getpid()}\n"
    taken = subprocess.run([sys.executable, "-c", _TAKE, str(path)], capture_output=True, text=True)
    assert taken.returncode == 0, taken.stderr  # another process takes it at once
    assert not lock_path(path).exists()


def _lines(path):
    return [line for line in path.read_text().split("\n") if line]


def test_resume_keeps_one_line_per_episode_and_says_what_it_dropped(tmp_path, capsys):
    out = tmp_path / "run"
    assert eval_wordle(out, "-n", "4") == 0
    path = out / "episodes.jsonl"
    first = _lines(path)
    # what two runs appending at once leave: episodes twice, a line torn by a kill, and a line written into another
    torn = first[2][: len(first[2]) // 2]
    path.write_text("\n".join([*first, first[0], torn, first[1], first[3][:60] + first[0], first[3][60:], ""]))
    capsys.readouterr()
    assert eval_wordle(out, "-n", "6", "--resume", "--json") == 0
    captured = capsys.readouterr()
    assert f"{path}: dropped 2 duplicate lines and 3 torn lines (one line kept per episode)" in captured.err
    episodes = load_jsonl(path)
    assert sorted(e.seed for e in episodes) == [0, 1, 2, 3, 4, 5]
    assert episodes[:4] == [Episode.from_json(line) for line in first[2:4] + first[:2]]  # the later copies kept
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == len(_lines(path)) == 6 and summary == json.loads(captured.out)
    assert eval_wordle(out, "-n", "6", "--resume") == 0  # nothing left to drop: said nothing
    assert "dropped" not in capsys.readouterr().err


def test_a_resume_that_retries_a_failed_episode_leaves_one_line_per_episode(tmp_path, monkeypatch, capsys):
    (tmp_path / "fails_once.py").write_text(
        "failed = False\n\n\nclass Actor:\n    def act(self, observation):\n        global failed\n"
        "        if not failed:\n            failed = True\n            raise ConnectionError('server went away')\n"
        "        return 'crane'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fails_once", raising=False)
    out = tmp_path / "run"
    args = ["eval", WORDLE, "-n", "3", "--policy", "scripted:fails_once:Actor", "--out", str(out), "--no-progress"]
    assert main(args) == 1  # one episode failed
    path = out / "episodes.jsonl"
    assert sum("error" in e.metadata for e in load_jsonl(path)) == 1
    assert main([*args, "--resume", "--json"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == len(_lines(path)) == 3 and summary["failed"] == 0
    assert sorted(e.seed for e in load_jsonl(path)) == [0, 1, 2]


def test_repair_keeps_a_finished_episode_over_a_failed_one(tmp_path):
    path = tmp_path / "e.jsonl"
    done = Episode(WORDLE, seed=0, metadata={"group_index": 0})
    failed = Episode(WORDLE, seed=0, metadata={"group_index": 0, "error": "boom"})
    other = Episode(WORDLE, seed=0, metadata={"group_index": 1, "error": "boom"})
    for lines in ([done, failed, other], [failed, done, other]):
        path.write_text("".join(e.to_json() + "\n" for e in lines))
        assert repair_jsonl(path) == Repair(duplicates=1, torn=0)
        assert sorted(load_jsonl(path), key=lambda e: e.metadata["group_index"]) == [done, other]


def test_repair_leaves_a_whole_file_untouched_and_refuses_one_of_no_episodes(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text(Episode(WORDLE, seed=0).to_json() + "\n")
    before = os.stat(path)
    assert repair_jsonl(path) == Repair(0, 0)
    assert os.stat(path).st_ino == before.st_ino and os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert repair_jsonl(tmp_path / "missing.jsonl") == Repair(0, 0)
    path.write_text("notes\nmore notes\n")
    with pytest.raises(ValueError, match="not a file of episodes"):
        repair_jsonl(path)
    assert path.read_text() == "notes\nmore notes\n"
    path.write_text('{"env_id": "llmgym/Wordle-v0", "se')  # a run killed in its first write: nothing to keep
    assert repair_jsonl(path) == Repair(0, 1) and path.read_text() == ""


def test_rollout_resume_repairs_the_file_with_a_warning(tmp_path):
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=2, jsonl_path=path)
    path.write_text(path.read_text() * 2)
    with pytest.warns(RuntimeWarning, match="dropped 2 duplicate lines"):
        rollout(WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True)
    assert [e.seed for e in load_jsonl(path)] == [0, 1, 2]
