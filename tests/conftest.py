"""Shared fixtures. Tests mirror the package: tests/test_*.py for the core, tests/envs/, tests/wrappers/ (with server/,
decoding/ and classic_rl/ as in wrappers/), tests/trainers/. Test file names are unique across folders (no __init__.py).

Helpers shared by several test modules are plain modules beside them: cli_runs.py (a scripted eval, the one-line
CLI error), forking.py, envs/scripted_play.py and envs/multiagent_actions.py.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tiny test models are dominated by thread overhead on 2 cores: one thread is faster and steadier.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def wordle():
    import gymnasium as gym

    import llmgym  # noqa: F401  registers the envs

    env = gym.make("llmgym/Wordle-v0")
    yield env
    env.close()


@pytest.fixture
def start_scripted_serve():
    """Starts ``llmgym serve --backend scripted ARGS...`` on a free loopback port; returns its ``/v1`` URL once it
    answers.

    Every server it started is stopped at teardown.
    """
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("fastapi")
    pytest.importorskip("openai")
    processes = []

    def start(*args: str) -> str:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from llmgym.cli import main; sys.exit(main())",
                "serve",
                "--backend",
                "scripted",
                *args,
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(process)
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=1).close()
                return url
            except OSError:
                if time.time() > deadline or process.poll() is not None:
                    pytest.fail("llmgym serve did not start")
                time.sleep(0.2)

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=20)


class StubTrainer:
    """Stands in for GRPOTrainer in CLI tests: records the config, trains nothing."""

    config = None

    def __init__(self, config, resume=False):
        StubTrainer.config = config

    def train(self):
        return []

    def close(self):
        pass


@pytest.fixture
def stub_trainer(monkeypatch):
    """``llmgym.trainers.grpo.GRPOTrainer`` replaced by :class:`StubTrainer`; returns the stub class."""
    pytest.importorskip("transformers")
    import llmgym.trainers.grpo as grpo_module

    StubTrainer.config = None
    monkeypatch.setattr(grpo_module, "GRPOTrainer", StubTrainer)
    return StubTrainer


@pytest.fixture
def fake_hf_cache(tmp_path, monkeypatch):
    """A local Hugging Face cache in ``tmp_path``: ``fake_hf_cache("acme/tiny")`` saves the tiny random
    model there as that id's snapshot (no network) and returns ``(model, tokenizer)``."""
    hub = pytest.importorskip("huggingface_hub")
    from llmgym.wrappers.models import tiny_random_model

    monkeypatch.setattr(hub.constants, "HF_HUB_CACHE", str(tmp_path))

    def cache(model_id: str):
        model, tokenizer = tiny_random_model()
        folder = tmp_path / ("models--" + model_id.replace("/", "--"))
        snapshot = folder / "snapshots" / ("0" * 40)
        model.save_pretrained(snapshot)
        tokenizer.save_pretrained(snapshot)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text("0" * 40)
        return model, tokenizer

    return cache
