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


def test_measured_model_state_bytes_reach_summary_whatever_the_status(tmp_path):
    """What the trainer put in ``summary_extra`` (model_state_bytes) is in summary.json,
    for a failed run too (failures are data)."""
    state = {"params": 10, "grads": 10, "optimizer": 20}
    for status in ("completed", "oom"):
        rec = RunRecords(tmp_path / status)
        rec.start({"config": {}})
        rec.window({"warmup": False, "ips": 5.0, "loss": 2.0, "step_end": 1})
        rec.summary_extra["model_state_bytes"] = state
        rec.finish(status)
        on_disk = json.loads((tmp_path / status / SUMMARY_FILE).read_text())
        assert on_disk["model_state_bytes"] == state and on_disk["status"] == status


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


def _preempted_run(run_dir, steps_done=4):
    rec = RunRecords(run_dir)
    rec.start({"config": {}})
    for end in range(2, steps_done + 1, 2):
        rec.window({"warmup": end == 2, "ips": float(end), "loss": 1.0 / end, "step_end": end})
    rec.finish("preempted", reason="SIGUSR2", interrupted=True)


def test_resume_keeps_earlier_windows_up_to_the_checkpoint_step(tmp_path):
    _preempted_run(tmp_path, steps_done=6)
    rec = RunRecords(tmp_path)
    rec.start({"config": {}}, resume_step=4, attempt=1)
    kept = read_jsonl(tmp_path / METRICS_FILE)
    assert [(w["step_end"], w["attempt"]) for w in kept] == [(2, 0), (4, 0)]  # 6 is redone
    assert not (tmp_path / SUMMARY_FILE).exists()
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert (run["status"], run["attempt"], run["resumed_from_step"]) == ("running", 1, 4)
    rec.window({"warmup": False, "ips": 8.0, "loss": 0.1, "step_end": 6, "attempt": 1})
    s = rec.finish("completed")
    assert s["num_windows"] == 2 and s["ips"] == 6.0  # measured windows of both attempts


def test_resume_reads_windows_of_an_attempt_moved_aside(tmp_path):
    _preempted_run(tmp_path / "attempts" / "1", steps_done=4)
    _preempted_run(tmp_path / "attempts" / "2", steps_done=2)  # the latest attempt wins
    RunRecords(tmp_path).start({}, resume_step=2, attempt=2)
    assert [w["step_end"] for w in read_jsonl(tmp_path / METRICS_FILE)] == [2]
    assert len(read_jsonl(tmp_path / "attempts" / "1" / METRICS_FILE)) == 2  # left as it was


def test_fresh_start_drops_an_unfinished_runs_windows(tmp_path):
    _preempted_run(tmp_path)
    RunRecords(tmp_path).start({})
    assert read_jsonl(tmp_path / METRICS_FILE) == [] and not (tmp_path / SUMMARY_FILE).exists()


def test_completed_run_is_never_resumed_into(tmp_path):
    rec = RunRecords(tmp_path)
    rec.start({})
    rec.finish("completed")
    with pytest.raises(FileExistsError, match="completed"):
        RunRecords(tmp_path).start({}, resume_step=2, attempt=1)


def test_summary_min_max_over_windows_and_ranks_and_summed_counts():
    windows = [
        {"warmup": True, "ips": 1.0, "alloc_retries": 50, "peak_rss_min_gib": 0.1},
        {"warmup": False, "ips": 10.0, "step_time_s": 0.4, "alloc_retries": 1, "num_ooms": 0,
         "peak_mem_reserved_gib": 7.0, "peak_mem_reserved_min_gib": 6.0, "hfu": 0.5},
        {"warmup": False, "ips": 30.0, "step_time_s": 0.1, "alloc_retries": 2, "num_ooms": 0,
         "peak_mem_reserved_gib": 8.0, "peak_mem_reserved_min_gib": 5.5, "hfu": 0.7},
    ]
    s = summarize_windows(windows)
    assert (s["ips_min"], s["ips_max"]) == (10.0, 30.0)
    assert (s["step_time_s_min"], s["step_time_s_max"]) == (0.1, 0.4)
    assert s["peak_mem_reserved_gib"] == 8.0 and s["peak_mem_reserved_min_gib"] == 5.5
    assert s["alloc_retries"] == 3 and s["num_ooms"] == 0  # the warm-up's 50 left out
    assert s["hfu"] == pytest.approx(0.6) and s["peak_rss_min_gib"] is None
    assert s["device_mem_used_gib"] is None  # an older record without the field


def test_process_started_at_reads_proc(tmp_path):
    """starttime (field 22, clock ticks after boot) plus btime; a command name holding ')'
    and spaces does not shift the fields. A real process started before now, within the
    suite's run."""
    import os
    import time

    from vitfsdp.records import process_started_at

    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 18 + [str(250 * ticks)] + ["0"] * 30  # field 22: 250 s
    stat = tmp_path / "stat"
    stat.write_text("4242 (odd) name) " + " ".join(fields) + "\n")
    boot = tmp_path / "boot"
    boot.write_text("cpu  1 2 3 4\nbtime 1700000000\nprocesses 9\n")
    assert process_started_at(stat, boot) == 1700000250.0
    assert process_started_at(tmp_path / "missing", boot) is None
    started = process_started_at()
    assert started is not None and 0 <= time.time() - started < 24 * 3600


def test_the_first_window_of_an_attempt_records_the_start_up(tmp_path, monkeypatch):
    """startup_s: the process's start to the first window's first step (its end less its
    time_s), in the summary whatever the status; only the process's first run records it
    (a later one's would count the runs before it)."""
    import time

    from vitfsdp import records as records_module
    from vitfsdp.records import RunRecords

    monkeypatch.setattr(records_module, "_STARTUP_TAKEN", False)  # as in a fresh process
    records = RunRecords(tmp_path)
    records._started_at = time.time() - 30.0  # as if the process started 30 s ago
    records.start({"config": {}})
    records.window({"step_end": 1, "time_s": 10.0, "warmup": True})
    records.window({"step_end": 2, "time_s": 1.0, "warmup": False})
    summary = records.finish("failed", reason="x")
    assert summary["startup_s"] == pytest.approx(20.0, abs=1.0)
    later = RunRecords(tmp_path / "later")  # the process's second run
    later.start({"config": {}})
    later.window({"step_end": 1, "time_s": 1.0, "warmup": True})
    assert "startup_s" not in later.finish("completed")
