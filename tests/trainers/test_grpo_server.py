"""GRPO generating on an OpenAI-compatible server (``llmgym serve``) with the LoRA adapter pushed every step."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("openai")

from llmgym.cli import main  # noqa: E402
from llmgym.trainers.config import GRPOConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402
from tests.servers import free_port  # noqa: E402
from tests.trainers.toy_env import ENV_REF  # noqa: E402


@pytest.fixture
def server(tmp_path):
    checkpoint = tmp_path / "tiny"
    model, tokenizer = tiny_random_model(0)
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from llmgym.cli import main; sys.exit(main())",
            "serve",
            "--backend",
            "transformers",
            "--model",
            str(checkpoint),
            "--model-name",
            "tiny",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError as err:
                if process.poll() is not None or time.time() > deadline:
                    log = (tmp_path / "server.log").read_text()
                    raise RuntimeError("llmgym serve did not start: " + log[-2000:]) from err
                time.sleep(0.5)
        yield url + "/v1", checkpoint, tmp_path / "server.log"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_grpo_on_a_server_pushes_the_adapter_each_step(server, tmp_path):
    base_url, checkpoint, log = server
    torch.set_num_threads(1)
    config = GRPOConfig(
        env_id=ENV_REF,
        model=str(checkpoint),
        out=str(tmp_path / "run"),
        steps=2,
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=6,
        learning_rate=5e-2,
        lora=True,
        lora_r=4,
        base_url=base_url,
        lora_name="grpo-test",
        progress=False,
        plot=False,
    )
    trainer = GRPOTrainer(config)
    history = trainer.train()
    trainer.close()
    assert [m["step"] for m in history] == [1, 2]
    assert all(m["tokens/trained"] > 0 and m["episodes/errors"] == 0 for m in history)
    # the server generated with the updated adapter: its log-probs match the trainer's after step 1's update
    assert history[1]["is_weight/mean"] == pytest.approx(1.0, abs=0.02)
    assert Path(tmp_path / "run" / "adapter_push" / "adapter_config.json").is_file()
    assert log.read_text().count("/v1/load_lora_adapter") == 3  # before step 1, after steps 1 and 2
    models = json.loads(urllib.request.urlopen(base_url + "/models").read())
    assert "grpo-test" in {m["id"] for m in models["data"]}


# -- a server that refuses the LoRA adapter ----------------------------------------------------------------


@pytest.fixture
def lora_refusing_server():
    """An OpenAI-compatible base URL whose ``/v1/load_lora_adapter`` answers 400, as ``llmgym serve --backend
    scripted`` does."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": {"message": "LoRA adapters need the transformers backend", "code": 400}}'
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_server_that_refuses_the_adapter_is_a_one_line_error(lora_refusing_server, tmp_path, capsys):
    """Regression: a server that refused the LoRA adapter used to end the run in a traceback."""
    argv = [
        "train",
        "grpo",
        ENV_REF,
        "--model",
        "tiny-random",
        "--lora",
        "--base-url",
        lora_refusing_server,
        "--steps",
        "1",
        "--group-size",
        "2",
        "--prompts-per-step",
        "1",
        "--max-new-tokens",
        "4",
        "--no-progress",
        "--out",
        str(tmp_path / "run"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: the server refused the LoRA adapter: 400" in err and "Traceback" not in err
