"""A run resumed from a checkpoint pools its attempts' windows; runs.csv says so
(``num_attempts``, ``attempts_differ``: :func:`vitfsdp.analysis.rows.run_row`), and the
terminal (:func:`vitfsdp.analysis.tables.noise_lines`) and the report's weak-scaling section
(:func:`vitfsdp.analysis.report.resumed_runs_text`) name the resumed points."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs, study_tables
from vitfsdp.analysis.report import report_sections, resumed_runs_text
from vitfsdp.analysis.rows import run_row
from vitfsdp.analysis.schema import COLUMNS
from vitfsdp.analysis.tables import noise_lines, resumed_text
from vitfsdp.launch.resume import archive_attempt
from vitfsdp.records import RunRecords


def write_resumed(run_dir: Path, first: list[float], second: list[float],
                  strategy: str = "DDP") -> None:  # fmt: skip
    """A run stopped after its first attempt measured windows of images/s ``first`` (steps
    4, 6, ... after a warm-up window at 2), moved aside as a sweep's rerun does, and resumed
    from the checkpoint at its last step: a warm-up window, then ``second``."""
    info = run_info(strategy, 1)
    rec = RunRecords(run_dir)
    rec.start(info)
    rec.window({"step_end": 2, "warmup": True, "ips": 1.0, "loss": 3.0, "attempt": 0})
    step = 2
    for ips in first:
        step += 2
        rec.window({"step_end": step, "warmup": False, "ips": ips, "loss": 2.0, "attempt": 0,
                    "peak_rss_gib": 1.0})
    rec.finish("cancelled", reason="Ctrl-C", interrupted=True, num_attempts=1)
    archive_attempt(run_dir)
    rec = RunRecords(run_dir)
    rec.start(info, resume_step=step, attempt=1)
    step += 2
    rec.window({"step_end": step, "warmup": True, "ips": 1.0, "loss": 2.0, "attempt": 1})
    for ips in second:
        step += 2
        rec.window({"step_end": step, "warmup": False, "ips": ips, "loss": 1.5, "attempt": 1,
                    "peak_rss_gib": 1.0})
    rec.finish("completed", num_attempts=2)


def test_the_columns_are_declared():
    assert {"num_attempts", "attempts_differ"} <= set(COLUMNS)


def test_one_attempt(tmp_path):
    write_run(tmp_path, run_info("DDP", 1), 100.0)
    row = run_row(tmp_path)
    assert row["num_attempts"] == 1  # run.json's attempt 0 (fake summaries have none)
    assert row["attempts_differ"] is None
    RunRecords(tmp_path / "b").start(run_info("DDP", 1))  # running, no summary yet
    assert run_row(tmp_path / "b")["num_attempts"] == 1


@pytest.mark.parametrize(("first", "second", "differ"), [
    ([850.0, 1200.0, 1680.0], [1640.0, 2400.0, 3100.0], False),  # ranges overlap
    ([850.0, 1000.0, 1100.0], [1640.0, 2400.0, 3100.0], True),  # attempt 1's slowest above
    ([2850.0, 3000.0], [1640.0, 2400.0], True),  # and the other way round
])
def test_attempts_differ_where_their_window_ranges_do_not_overlap(tmp_path, first, second,
                                                                  differ):
    write_resumed(tmp_path, first, second)
    row = run_row(tmp_path)
    assert row["status"] == "completed" and row["num_attempts"] == 2
    assert row["attempts_differ"] is differ
    assert row["num_windows"] == len(first) + len(second)  # pooled, as the summary is


def test_a_resume_whose_measured_windows_are_one_attempts_is_not_judged(tmp_path):
    write_resumed(tmp_path, [], [1640.0, 2400.0])  # resumed during the first warm-up
    row = run_row(tmp_path)
    assert row["num_attempts"] == 2 and row["attempts_differ"] is None


@pytest.fixture
def study(tmp_path) -> dict[str, pd.DataFrame]:
    """Three completed points: DDP resumed with attempts apart, FULL_SHARD resumed with
    attempts that agree, HYBRID_2GPU in one attempt."""
    write_resumed(tmp_path / "ddp", [850.0, 1000.0, 1100.0], [1640.0, 2400.0, 3100.0])
    write_resumed(tmp_path / "fs", [850.0, 1200.0, 1680.0], [1640.0, 2400.0, 3100.0],
                  strategy="FULL_SHARD")
    write_run(tmp_path / "hy", run_info("HYBRID_2GPU", 1), 100.0)
    df = collect_runs(tmp_path, earlier_attempts=True)
    assert df["attempt_of"].notna().sum() == 2  # the stopped attempts, not counted
    return study_tables(df)


def test_the_terminal_names_the_resumed_points_and_the_one_to_rerun(study):
    text = resumed_text(study["runs"])
    assert text.startswith("2 of 3 runs resumed from a checkpoint: ")
    assert "vit_tiny DDP at 1 node(s) (2 attempts)" in text
    assert "vit_tiny FULL_SHARD at 1 node(s) (2 attempts)" in text
    assert ("the attempts of vit_tiny DDP at 1 node(s) measured different speeds" in text
            and "FULL_SHARD at 1 node(s) measured" not in text)
    assert "its images/s pools them, a point to rerun" in text
    assert f"resumed: {text}" in noise_lines(study)


def test_the_report_says_it_where_it_lists_the_other_doubts(study):
    sentence = resumed_runs_text(study["runs"])
    assert sentence.startswith(" **Resumed:** 2 of 3 runs") and sentence.endswith(".")
    scaling = next(s for s in report_sections(study, 1_281_167)
                   if s.title == "Weak scaling")
    assert sentence in scaling.text


def test_nothing_is_said_where_no_run_resumed(tmp_path):
    write_run(tmp_path / "a", run_info("DDP", 1), 100.0)
    tables = study_tables(collect_runs(tmp_path))
    assert resumed_text(tables["runs"]) == "" and resumed_runs_text(tables["runs"]) == ""
    assert not any(line.startswith("resumed") for line in noise_lines(tables))


def test_points_csv_says_which_points_resumed_as_runs_csv_does(study):
    """points.csv had no column saying a point's figures pool a resumed run's attempts:
    ``runs_resumed`` counts its completed runs of more than one attempt (runs.csv
    ``num_attempts`` > 1) and ``attempts_differ`` is true where one of them measured apart
    (runs.csv's), false where every resumed run's attempts agree, NA where none resumed."""
    points = study["points"].set_index("strategy")
    assert points["runs_resumed"].to_dict() == {"DDP": 1, "FULL_SHARD": 1, "HYBRID_2GPU": 0}
    differ = dict(zip(points.index, points["attempts_differ"].tolist(), strict=True))
    assert differ["DDP"] is True and differ["FULL_SHARD"] is False
    assert differ["HYBRID_2GPU"] is pd.NA
    runs = study["runs"][study["runs"]["attempt_of"].isna()].set_index("strategy")
    assert (points["runs_resumed"]
            == (runs["num_attempts"] > 1).astype(int).loc[points.index]).all()


def test_an_earlier_attempts_folder_is_numbered_as_the_attempt_it_holds(tmp_path):
    """attempts/<n>/ was numbered from 1, the attempts from 0 (run.json ``attempt``, the
    progress line's "attempt k", runs.csv num_attempts = last attempt + 1): attempt 0 lay in
    attempts/1/. Now attempts/<k>/ holds attempt k; a point that started afresh (attempt 0
    again: its earlier attempt saved no checkpoint) takes the next number, so the highest
    number is always the latest attempt (records.RunRecords reads its windows there)."""
    run = tmp_path / "run"

    def stop(attempt: int, status: str = "cancelled") -> list[str]:
        rec = RunRecords(run)
        rec.start(run_info("DDP", 1), resume_step=2 if attempt else None, attempt=attempt)
        rec.window({"step_end": 2, "warmup": False, "ips": 9.0, "loss": 2.0,
                    "attempt": attempt})
        rec.finish(status, reason="stopped", interrupted=status == "cancelled")
        archive_attempt(run)
        return sorted((p.name for p in (run / "attempts").iterdir()), key=int)

    assert stop(0) == ["0"]
    assert stop(1) == ["0", "1"]  # resumed from attempt 0's checkpoint, stopped again
    assert (run / "attempts" / "1" / "run.json").read_text().count('"attempt": 1') == 1
    assert stop(0, "failed") == ["0", "1", "2"]  # afresh: attempt 0 again
    (run / "job.json").write_text("{}")  # a job that never started training: no run.json
    archive_attempt(run)
    assert sorted(int(p.name) for p in (run / "attempts").iterdir()) == [0, 1, 2, 3]


def test_runs_without_num_attempts_beside_runs_with_it_do_not_crash_the_tables():
    """Records older than num_attempts beside newer ones: the column is a nullable Int64
    with NA, and points.csv's runs_resumed raised 'cannot convert NA to integer' (a helper
    re-analysing older records). numeric_column gives floats, NaN where unknown, as its
    docstring says; such a run counts as not resumed."""
    import pandas as pd

    from vitfsdp.analysis.lines import numeric_column
    from vitfsdp.analysis.tables import _resumed_flags

    runs = pd.DataFrame({"num_attempts": pd.array([2, None, 1], dtype="Int64")})
    assert numeric_column(runs, "num_attempts").dtype == float
    assert _resumed_flags(runs)["resumed"].tolist() == [1, 0, 0]
