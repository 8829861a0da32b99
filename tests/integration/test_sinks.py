"""Metric sinks: TensorBoard and W&B (offline) get the same window records as metrics.jsonl."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import read, run_module
from vitfsdp import sinks
from vitfsdp.metrics import MetricsConfig


def test_missing_package_is_one_line_error(monkeypatch):
    monkeypatch.setattr(sinks.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"metrics.wandb needs the 'wandb' package: pip") as e:
        MetricsConfig(wandb="offline")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"pip install tensorboard"):
        MetricsConfig(tensorboard=True)
    assert MetricsConfig().tensorboard is False and MetricsConfig().wandb is None


def test_unknown_wandb_mode():
    with pytest.raises(ValueError, match=r"metrics.wandb='disabled' is unknown; valid: offline"):
        MetricsConfig(wandb="disabled")


def test_tiny_run_feeds_tensorboard_and_wandb(tmp_path, tiny, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    temp = tmp_path / "temp"  # the ranks' temporary directory: wandb's import makes two
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    run_dir = tmp_path / "run"
    proc = run_module("vitfsdp.train", *tiny, "metrics.tensorboard=true",
                      "metrics.wandb=offline", "metrics.wandb_project=sinks-test",
                      f"hydra.run.dir={run_dir}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    windows = read(run_dir / "metrics.jsonl")
    assert len(windows) >= 2

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    loss = events.Scalars("window/loss")
    assert [e.step for e in loss] == [w["step_end"] for w in windows]
    assert [e.value for e in loss] == pytest.approx([w["loss"] for w in windows], rel=1e-6)
    ips = [e.value for e in events.Scalars("window/ips")]
    assert ips == pytest.approx([w["ips"] for w in windows], rel=1e-6)

    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, os.listdir(run_dir / "wandb")
    history = list(offline[0].glob("*.wandb"))  # wandb >= 0.19 ships no Python reader
    assert len(history) == 1 and history[0].stat().st_size > 0
    data = history[0].read_bytes()  # protobuf records: history values are JSON text
    for w in windows:
        assert json.dumps(w["loss"]).encode() in data
    assert b"sinks-test" in data and b"ips_per_gpu" in data
    # rank 1 never imported wandb, rank 0 removed what its import made: both ranks leave by
    # os._exit, past wandb's own clean-up (each left tmp*wandb-media and tmp*wandb-artifacts)
    assert [p.name for p in temp.iterdir() if "wandb" in p.name] == []
