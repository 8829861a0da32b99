"""The report's captions say what the figures' marks stand at: the x of runs that did not
complete, where an OOM before any window takes its memory from ``memory_at_failure``."""

from __future__ import annotations

from tests.fake_records import run_info
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.report import caption
from vitfsdp.records import RunRecords


def test_the_failed_caption_is_true_of_an_oom_before_any_window(tmp_path):
    """An OOM in its first step measured no window: its x on memory.png stands at the
    memory its failing ranks reported (summary.json memory_at_failure), no median over
    windows. Before, the caption said '(median over their windows)' of every x."""
    info = run_info("FULL_SHARD", 1, device="cuda")
    records = RunRecords(tmp_path / "oom")
    records.start(info)
    records.finish("oom", reason="CUDA out of memory",
                   memory_at_failure={"peak_mem_allocated_gib": 79.5, "peak_rss_gib": 3.0})
    run = collect_runs(tmp_path).iloc[0]
    assert (run["status"], run["num_windows"]) == ("oom", 0)
    assert run["peak_mem_reached_gib"] == 79.5 and run["ips_reached"] != run["ips_reached"]
    text = caption("memory", drawn=["failed"])
    assert "median over their windows" not in text
    assert "an OOM before any window stands at its summary.json memory_at_failure" in text
    assert "of images/s, each run's median over its timed windows" in text
