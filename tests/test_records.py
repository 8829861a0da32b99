"""Records: atomic JSON, append-only metrics, summaries that exclude warm-up and failures."""

from __future__ import annotations

import json

import pytest

from vitfsdp.records import (
    METRICS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    RunRecords,
    mark_failed,
    read_jsonl,
    summarize_windows,
    write_json_atomic,
)


def test_summary_is_median_of_measured_windows_and_max_memory():
    windows = [
        {"warmup": True, "ips": 1.0, "peak_rss_gib": 9.0, "loss": 3.0},
        {"warmup": False, "ips": 10.0, "step_time_s": 0.3, "peak_rss_gib": 1.0, "loss": 2.0},
        {"warmup": False, "ips": 30.0, "step_time_s": 0.1, "peak_rss_gib": 2.0, "loss": 1.5},
        {"warmup": False, "ips": 20.0, "step_time_s": 0.2, "peak_rss_gib": 1.5, "loss": 1.0},
    ]
    s = summarize_windows(windows)
    assert s["ips"] == 20.0 and s["step_time_s"] == 0.2
    assert s["peak_rss_gib"] == 2.0  # the warm-up's 9.0 is excluded
    assert s["loss"] == 1.0 and s["num_windows"] == 3
    assert s["ips_spread"] == pytest.approx((30 - 10) / 20)
    assert s["mfu"] is None


def test_failed_run_has_null_figures(tmp_path):
    rec = RunRecords(tmp_path)
    rec.start({"config": {}})
    rec.window({"warmup": False, "ips": 5.0, "loss": 2.0, "step_end": 7})
    s = rec.finish("oom", reason="CUDA out of memory")
    assert s["ips"] is None and s["last_step"] == 7 and s["last_loss"] == 2.0
    on_disk = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert on_disk["status"] == "oom" and on_disk["ips"] is None
    assert json.loads((tmp_path / RUN_FILE).read_text())["status"] == "oom"


def test_unknown_status_is_refused(tmp_path):
    with pytest.raises(ValueError, match="status"):
        RunRecords(tmp_path).finish("crashed")


def test_non_writer_rank_writes_nothing(tmp_path):
    rec = RunRecords(tmp_path / "r", is_writer=False)
    rec.start({})
    rec.window({"ips": 1.0})
    rec.finish("completed")
    assert not (tmp_path / "r").exists()


def test_truncated_last_line_is_skipped(tmp_path, caplog):
    path = tmp_path / METRICS_FILE
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": 3, "b"')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    assert "truncated" in caplog.text
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(path)


def test_atomic_write_leaves_no_temp_files(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"k": 1})
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "x.json", {"k": object()} | {"bad": {1, 2}})
    assert json.loads((tmp_path / "x.json").read_text()) == {"k": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_mark_failed_keeps_measured_windows(tmp_path):
    rec = RunRecords(tmp_path)
    rec.start({"config": {"nodes": 2}})
    rec.window({"warmup": False, "ips": 5.0, "loss": 2.0, "step_end": 3})
    mark_failed(tmp_path, "failed", "rank 3 died")
    assert len(read_jsonl(tmp_path / METRICS_FILE)) == 1
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert run["config"] == {"nodes": 2} and run["status"] == "failed"
    assert json.loads((tmp_path / SUMMARY_FILE).read_text())["reason"] == "rank 3 died"
