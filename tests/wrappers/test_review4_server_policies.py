"""Session-4 review regressions: the server and the local policies."""

from __future__ import annotations

import pytest


def test_a_cached_model_id_keeps_its_id_as_the_policy_name(tmp_path, monkeypatch):
    # load_model loads an id from its cache snapshot folder; the policy was then named after the
    # snapshot's commit hash (config.name_or_path = .../snapshots/<hash>) instead of the model.
    hub = pytest.importorskip("huggingface_hub")
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    model, tokenizer = tiny_random_model()
    snapshot = tmp_path / "models--acme--TinyChat-1M" / "snapshots" / ("0" * 40)
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (tmp_path / "models--acme--TinyChat-1M" / "refs").mkdir()
    (tmp_path / "models--acme--TinyChat-1M" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(hub.constants, "HF_HUB_CACHE", str(tmp_path))
    policy = TransformersPolicy("acme/TinyChat-1M", device="cpu")
    assert policy.name == "TinyChat-1M"
    assert policy.model.config.name_or_path == "acme/TinyChat-1M"
