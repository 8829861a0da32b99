"""The analysis of a sweep in which no run completed (every point failed before its first
window, as a one-GPU check's sweep can): tables, report and figures that say so."""

from __future__ import annotations

from pathlib import Path

from tests.fake_records import run_info
from vitfsdp.analysis import collect_runs, plot_weak_scaling
from vitfsdp.analysis.__main__ import main as analysis_main
from vitfsdp.analysis.figures import NOTHING_TO_PLOT
from vitfsdp.records import RunRecords


def failed_sweep(root: Path) -> Path:
    """Two CPU points (no device memory, no prediction) that failed before any window."""
    for strategy in ("DDP", "FULL_SHARD"):
        records = RunRecords(root / strategy)
        records.start(run_info(strategy, 1))
        records.finish("failed", reason="exit code 1 without a summary")
    return root


def test_a_sweep_with_no_completed_run_writes_tables_report_and_figures(tmp_path: Path) -> None:
    sweep = failed_sweep(tmp_path / "sweep")
    assert analysis_main([str(sweep), "--report", "--jobs", "1"]) == 0
    out = sweep / "analysis"
    for name in ("runs.csv", "failures.csv", "points.csv", "weak_scaling.png", "memory.png",
                 "report.md", "report.html"):
        assert (out / name).stat().st_size > 0, name
    assert len((out / "failures.csv").read_text().splitlines()) == 3  # header + 2 runs


def test_the_weak_scaling_panel_says_nothing_completed(tmp_path: Path) -> None:
    fig = plot_weak_scaling(collect_runs(failed_sweep(tmp_path)))
    fig.canvas.draw()  # where matplotlib raised for a log axis with no positive value
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert NOTHING_TO_PLOT in texts
