"""``report_to = ["wandb"]``: metrics reach a W&B run (offline mode, no network or account), and a missing wandb is a
clear error.

The offline run's ``run-<id>.wandb`` file is read back record by record: it is
a LevelDB-style log (32 KiB blocks, each record a 7-byte header ``crc32 (4),
length (2), type (1)`` then a chunk; types 1 = full, 2 = first, 3 = middle,
4 = last) after a 7-byte ``:W&B`` header, and each record is a protobuf
``wandb.proto.wandb_internal_pb2.Record``. wandb 0.31 ships no Python reader
for it (its core is a Go binary), hence this small one.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from llmgym.cli import main  # noqa: E402
from llmgym.trainers.config import GRPOConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.trainers.metrics import MetricsLogger  # noqa: E402
from tests.trainers.toy_env import ENV_REF  # noqa: E402

BLOCK = 32 * 1024
HEADER = 7


def read_wandb_records(path: Path) -> list[Any]:
    """Every protobuf ``Record`` of an offline run file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    records, chunk, position = [], b"", HEADER
    while position + 7 <= len(data):
        room = BLOCK - position % BLOCK
        if room < 7:  # a block's tail too short for a header is padding
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:  # zero padding to the end of the block
            position += room
            continue
        chunk += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def history_rows(records: list[Any]) -> list[dict[str, Any]]:
    """The logged rows (``_step`` and every metric) of a run's records."""
    return [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]


def logged_history(run_dir: Path) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """``(run id, history rows, run config)`` of the single offline run under ``run_dir``."""
    import wandb

    wandb.teardown()  # run.finish() returns before wandb-core has flushed and closed the run file; this waits for it
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    records = read_wandb_records(run_file)
    rows = history_rows(records)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    return run.run_id, rows, config


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)


@pytest.mark.slow  # ~8-14 s here: wandb-core takes seconds to start
def test_grpo_metrics_reach_an_offline_wandb_run(tmp_path, offline_wandb):
    torch.set_num_threads(1)
    config = GRPOConfig(
        env_id=ENV_REF,
        model="tiny-random",
        out=str(tmp_path / "run"),
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=4,
        progress=False,
        plot=False,
        torch_threads=1,
        report_to=["wandb"],
        wandb_project="llmgym-tests",
    )
    trainer = GRPOTrainer(config)
    history = trainer.train()
    trainer.close()
    run_id, rows, run_config = logged_history(tmp_path / "run")
    assert run_id == (tmp_path / "run" / "wandb_run_id").read_text()
    assert [row["_step"] for row in rows] == [1, 2]
    for row, metrics in zip(rows, history):
        for key in ("reward/mean", "loss", "kl", "tokens/trained", "time/step_s"):
            assert row[key] == pytest.approx(metrics[key]), key
    assert run_config["env_id"] == ENV_REF and run_config["steps"] == 2 and run_config["report_to"] == ["wandb"]


def test_a_resumed_run_continues_its_wandb_run(tmp_path, offline_wandb):
    first = MetricsLogger(tmp_path, report_to=["wandb"])
    first.log({"step": 1, "loss": 1.0})
    first.close()
    run_id = (tmp_path / "wandb_run_id").read_text()
    again = MetricsLogger(tmp_path, resume_step=1, report_to=["wandb"])
    again.log({"step": 2, "loss": 0.5})
    again.close()
    assert (tmp_path / "wandb_run_id").read_text() == run_id
    import wandb

    wandb.teardown()
    runs = [read_wandb_records(path) for path in sorted(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))]
    assert len(runs) == 2  # offline mode writes each session to its own folder; `wandb sync` merges them by id
    assert [[r.run.run_id for r in records if r.WhichOneof("record_type") == "run"] for records in runs] == [
        [run_id]
    ] * 2
    assert [[(row["_step"], row["loss"]) for row in history_rows(records)] for records in runs] == [
        [(1, 1.0)],
        [(2, 0.5)],
    ]
    fresh = MetricsLogger(tmp_path / "other", report_to=["wandb"])
    fresh.close()
    assert (tmp_path / "other" / "wandb_run_id").read_text() != run_id


def test_report_to_is_validated():
    with pytest.raises(ValueError, match="report_to"):
        GRPOConfig(report_to=["mlflow"])
    with pytest.raises(ValueError, match="report_to"):
        GRPOConfig(report_to="wandb")


def test_missing_wandb_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now fails as if it were not installed
    with pytest.raises(ModuleNotFoundError, match=r'pip install "llmgym\[wandb\]"') as info:
        MetricsLogger(tmp_path, report_to=["wandb"])
    assert info.value.name == "wandb"
    code = main(
        [
            "train",
            "grpo",
            ENV_REF,
            "--model",
            "tiny-random",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--set",
            'report_to=["wandb"]',
        ]
    )
    assert code == 2
    assert 'pip install "llmgym[wandb]"' in capsys.readouterr().err
