"""An analysis run again redraws only the figures whose inputs changed (issue 37)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from tests.integration.test_analysis import IPS
from vitfsdp.analysis import collect_runs, loss_curves, study_tables
from vitfsdp.analysis.__main__ import main as analysis_main
from vitfsdp.analysis.__main__ import write_tables
from vitfsdp.analysis.collect import RUNS_CACHE
from vitfsdp.analysis.figures import INPUTS_FILE, PendingFigures, figure_inputs
from vitfsdp.analysis.fingerprint import frame_hash
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
    assert {name for name, r in record.items() if r["drawn"]} == {"weak_scaling", "efficiency",
                                                                  "memory", "loss"}
    assert set(record) == {"weak_scaling", "efficiency", "memory", "loss", "prefetch", "tflops",
                           "recipe"}
    with caplog.at_level("INFO"):
        assert analysis_main([str(analysed), "--jobs", "1", "--report"]) == 0
    assert redrawn(analysed) == set()
    assert "kept 7 figure(s)" in caplog.text
    report = (analysed / "analysis" / "report.md").read_text(encoding="utf-8")
    assert "](memory.png)" in report and "](loss.png)" in report  # kept, still reported


def test_a_changed_ips_redraws_only_what_shows_ips(analysed: Path) -> None:
    path = analysed / "HYBRID_2GPU_n2" / SUMMARY_FILE
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "ips": summary["ips"] * 1.5}))
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0
    assert redrawn(analysed) == {"weak_scaling", "efficiency"}  # memory and loss read no ips


def test_a_changed_loss_or_a_new_run_redraws(analysed: Path) -> None:
    metrics = analysed / "FULL_SHARD_n1" / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"loss": 2.0', '"loss": 1.5', 1))
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0
    assert redrawn(analysed) == {"loss"}
    write_run(analysed / "DDP_n1", run_info("DDP", 1), 50.0)  # a new line in every figure
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0
    assert redrawn(analysed) == {"weak_scaling", "efficiency", "memory", "loss"}


def test_a_missing_file_or_other_format_is_drawn(analysed: Path, tmp_path: Path) -> None:
    (analysed / "analysis" / "memory.svg").unlink()
    df = collect_runs(analysed)
    pending = PendingFigures(df, analysed / "analysis", keep_unchanged=True)
    assert pending.todo == ["memory"]
    assert set(pending.result()) == {"weak_scaling", "efficiency", "memory", "loss"}
    assert (analysed / "analysis" / "memory.svg").is_file()
    png_only = PendingFigures(df, analysed / "analysis", formats=("png",), keep_unchanged=True)
    assert "memory" in png_only.todo  # other formats: other inputs
    assert figure_inputs(df, "memory") != figure_inputs(df, "memory", formats=("png",))
    plain = PendingFigures(df, tmp_path / "fresh", names=("memory",))
    assert plain.todo == ["memory"] and not (tmp_path / "fresh" / INPUTS_FILE).exists()


def test_the_loss_figure_is_fingerprinted_under_pandas_2(analysed: Path, monkeypatch) -> None:
    # the loss figure reads no measured column; pandas 2's hash_pandas_object raises on a
    # frame of no columns (seen on a GPU node: every analysis with a loss figure failed)
    real = pd.util.hash_pandas_object

    def pandas_2(obj, *args, **kwargs):
        if isinstance(obj, pd.DataFrame) and obj.shape[1] == 0:
            raise ValueError(f"Length of values (0) does not match length of index ({len(obj)})")
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(pd.util, "hash_pandas_object", pandas_2)
    df = collect_runs(analysed)
    assert figure_inputs(df, "loss") != figure_inputs(df.iloc[:-1], "loss")
    assert frame_hash(pd.DataFrame(index=range(3))) != frame_hash(pd.DataFrame(index=range(4)))
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0


def test_rows_of_unchanged_runs_come_from_the_cache(analysed: Path, tmp_path: Path,
                                                    caplog) -> None:  # fmt: skip
    """The analysis kept each run's row: a later collect reads only the run whose records
    changed, and gives the frame (and loss curves) a collect without the cache gives."""
    cache = analysed / "analysis" / RUNS_CACHE
    assert cache.is_file()
    with caplog.at_level("INFO"):
        cached = collect_runs(analysed, cache=cache)
    assert "read 0 of 6 runs" in caplog.text
    pd.testing.assert_frame_equal(cached, collect_runs(analysed))
    curves = loss_curves(cached)
    path = analysed / "FULL_SHARD_n4" / SUMMARY_FILE
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "ips": 1.0}))
    caplog.clear()
    with caplog.at_level("INFO"):
        again = collect_runs(analysed, cache=cache)
    assert "read 1 of 6 runs" in caplog.text
    assert again.set_index("run_dir").loc[str(path.parent), "ips"] == 1.0
    pd.testing.assert_frame_equal(loss_curves(again), curves)
    cache.write_text("{not json")  # a broken cache: every run read, nothing lost
    pd.testing.assert_frame_equal(collect_runs(analysed, cache=cache), again)


def test_unchanged_tables_are_not_written_again(analysed: Path) -> None:
    out = analysed / "analysis"
    for path in out.glob("*.csv"):
        os.utime(path, (OLD, OLD))
    assert analysis_main([str(analysed), "--jobs", "1"]) == 0
    assert {p.stem for p in out.glob("*.csv") if p.stat().st_mtime != OLD} == set()
    write_run(analysed / "DDP_n1", run_info("DDP", 1), 50.0)
    tables = study_tables(collect_runs(analysed))
    write_tables(tables, out, keep_unchanged=True)
    written = {p.stem for p in out.glob("*.csv") if p.stat().st_mtime != OLD}
    assert {"runs", "scaling", "points"} <= written
    assert "prefetch" not in written  # still no ablation: the same empty table


def test_a_re_analysis_imports_no_matplotlib_or_hydra(analysed: Path) -> None:
    """Nothing changed: no figure is drawn, so matplotlib (and Hydra, for no prediction) is
    never imported, a third of the time a re-analysis would otherwise take."""
    code = ("import sys\nfrom vitfsdp.analysis.__main__ import main\n"
            f"assert main([{str(analysed)!r}, '--jobs', '1']) == 0\n"
            "print(sorted(m for m in ('matplotlib', 'hydra') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr[-2000:]
