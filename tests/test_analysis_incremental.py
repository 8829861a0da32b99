"""An analysis run again redraws only the figures whose inputs changed (issue 37)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.test_analysis import IPS, run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.__main__ import main as analysis_main
from vitfsdp.analysis.figures import INPUTS_FILE, PendingFigures, figure_inputs
from vitfsdp.records import SUMMARY_FILE

OLD = 1_000_000_000  # seconds since the epoch: the mtime the figures are set back to


@pytest.fixture
def analysed(tmp_path: Path) -> Path:
    """A sweep analysed once (every figure it holds drawn), its figures' mtimes set back to
    :data:`OLD` so a redraw shows."""
    sweep = tmp_path / "sweep"
    for (strategy, nodes), ips in IPS.items():
        write_run(sweep / f"{strategy}_n{nodes}", run_info(strategy, nodes), ips)
    assert analysis_main([str(sweep), "--jobs", "1"]) == 0
    for path in (sweep / "analysis").glob("*.*g"):
        os.utime(path, (OLD, OLD))
    return sweep


def redrawn(sweep: Path) -> set[str]:
    """The figures (by name) whose files were written since :func:`analysed`."""
    paths = [*(sweep / "analysis").glob("*.png"), *(sweep / "analysis").glob("*.svg")]
    return {p.stem for p in paths if p.stat().st_mtime != OLD}


def test_nothing_changed_nothing_redrawn(analysed: Path, caplog) -> None:
    record = json.loads((analysed / "analysis" / INPUTS_FILE).read_text())
    # no TFLOP/s, ablation or recipe in these records: those recorded as not drawn
    assert {name for name, r in record.items() if r["drawn"]} == {"weak_scaling", "memory",
                                                                  "loss"}
    assert set(record) == {"weak_scaling", "memory", "loss", "prefetch", "tflops", "recipe"}
    with caplog.at_level("INFO"):
        assert analysis_main([str(analysed), "--jobs", "1", "--report"]) == 0
    assert redrawn(analysed) == set()
    assert "kept 6 figure(s)" in caplog.text
    report = (analysed / "analysis" / "report.md").read_text(encoding="utf-8")
    assert "](memory.png)" in report and "](loss.png)" in report  # kept, still reported


def test_a_changed_ips_redraws_only_what_shows_ips(analysed: Path) -> None:
    path = analysed / "HYBRID_2GPU_n2" / SUMMARY_FILE
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "ips": summary["ips"] * 1.5}))
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0
    assert redrawn(analysed) == {"weak_scaling"}  # memory and loss read no ips


def test_a_changed_loss_or_a_new_run_redraws(analysed: Path) -> None:
    metrics = analysed / "FULL_SHARD_n1" / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"loss": 2.0', '"loss": 1.5', 1))
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0
    assert redrawn(analysed) == {"loss"}
    write_run(analysed / "DDP_n1", run_info("DDP", 1), 50.0)  # a new line in every figure
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0
    assert redrawn(analysed) == {"weak_scaling", "memory", "loss"}


def test_a_missing_file_or_other_format_is_drawn(analysed: Path, tmp_path: Path) -> None:
    (analysed / "analysis" / "memory.svg").unlink()
    df = collect_runs(analysed)
    pending = PendingFigures(df, analysed / "analysis", keep_unchanged=True)
    assert pending.todo == ["memory"]
    assert set(pending.result()) == {"weak_scaling", "memory", "loss"}
    assert (analysed / "analysis" / "memory.svg").is_file()
    png_only = PendingFigures(df, analysed / "analysis", formats=("png",), keep_unchanged=True)
    assert "memory" in png_only.todo  # other formats: other inputs
    assert figure_inputs(df, "memory") != figure_inputs(df, "memory", formats=("png",))
    plain = PendingFigures(df, tmp_path / "fresh", names=("memory",))
    assert plain.todo == ["memory"] and not (tmp_path / "fresh" / INPUTS_FILE).exists()
