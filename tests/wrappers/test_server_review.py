"""Regression tests for bugs found in review of ``llmgym serve`` (server.py, server_backend.py, server_protocol.py)."""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import pytest

pytest.importorskip("fastapi")

from llmgym.wrappers.scripted import load_scripted  # noqa: E402
from llmgym.wrappers.server import create_app, serve_in_thread  # noqa: E402


class _SlowAdapterModel:
    """Stands in for a transformers model's peft methods; slow, so concurrent requests overlap."""

    def __init__(self):
        self.loaded: dict[str, str] = {}
        self.calls: list[tuple] = []

    def load_adapter(self, path: str, adapter_name: str) -> None:
        time.sleep(0.2)
        self.calls.append(("load", adapter_name))
        self.loaded[adapter_name] = path

    def delete_adapter(self, name: str) -> None:
        time.sleep(0.2)
        self.calls.append(("delete", name))
        del self.loaded[name]


def _twice_at_once(post, args) -> list[httpx.Response]:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(post, args))


def test_concurrent_loads_of_one_lora_name_load_it_once_and_concurrent_unloads_give_one_404(tmp_path):
    paths = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text("{}")
        paths.append(str(tmp_path / name))
    app = create_app(load_scripted("wordle"), model_name="bot")
    model = _SlowAdapterModel()
    app.state.backend.hf_model = model
    with serve_in_thread(app) as base_url:
        loads = _twice_at_once(lambda path: httpx.post(
            f"{base_url}/load_lora_adapter", json={"lora_name": "a", "lora_path": path}, timeout=30), paths)
        unloads = _twice_at_once(lambda _: httpx.post(
            f"{base_url}/unload_lora_adapter", json={"lora_name": "a"}, timeout=30), [0, 1])
    # as vLLM: loading an already-loaded name is a 400, never a silent replacement of the first
    assert sorted(r.status_code for r in loads) == [200, 400]
    assert "already been loaded" in next(r for r in loads if r.status_code == 400).json()["error"]["message"]
    assert sorted(r.status_code for r in unloads) == [200, 404]
    assert model.calls == [("load", "a"), ("delete", "a")]
