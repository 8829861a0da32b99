"""Runs pooled at one point as repeats: an explicit setting beside ``auto`` is another line,
runs that share a repeat label are not called the noise between runs (points.csv, the
report, the terminal), and a run at a pooled baseline is given no efficiency of its own."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs, study_tables
from vitfsdp.analysis.lines import BASELINE_RUN, format_table, line_columns, scaling_table
from vitfsdp.analysis.report import repeats_text
from vitfsdp.analysis.tables import noise_lines, points_table


def _run(root: Path, name: str, ips: float, *, nodes: int = 1, adamw: str = "auto",
         repeat: int = 0, loss: float = 0.3, seed: int | None = None) -> None:  # fmt: skip
    """One completed GPU run of FULL_SHARD with ``kernels.adamw`` as recorded (no resolution)
    and, where given, ``train.seed``."""
    info = run_info("FULL_SHARD", nodes, device="cuda")
    info["config"] |= {"kernels": {"adamw": adamw}, "repeat": repeat}
    if seed is not None:
        info["config"].setdefault("train", {})["seed"] = seed
    write_run(root / name, info, ips, loss=loss)


def test_an_explicit_adamw_beside_an_unresolved_auto_is_its_own_line(tmp_path):
    """The stall export's case: kernels.adamw=foreach beside runs that recorded only auto
    (what auto chose not recorded): two points, not three repeats of one."""
    _run(tmp_path, "default", 172.0)
    _run(tmp_path, "foreach", 173.0, adamw="foreach")
    df = collect_runs(tmp_path)
    assert "kernels.adamw" in line_columns(df)
    points = points_table(df)
    assert sorted(points["num_repeats"]) == [1, 1]
    assert points["configuration"].str.contains("kernels.adamw=foreach").sum() == 1


def test_a_run_of_another_seed_is_its_own_line(tmp_path):
    """A seed-1 rerun beside the seed-0 run, the seed recorded: two points, not two repeats
    of one (repeats are repeat=0,1,2 of one seed)."""
    _run(tmp_path, "default", 172.0, seed=0)
    _run(tmp_path, "seed1", 197.0, loss=3.24, seed=1)
    df = collect_runs(tmp_path)
    assert "train.seed" in line_columns(df)
    points = points_table(df)
    assert sorted(points["num_repeats"]) == [1, 1]
    assert points["configuration"].str.contains("train.seed=1").sum() == 1


def test_a_record_without_the_seed_splits_no_line(tmp_path):
    """A run read before the column (no seed recorded) beside a seed-0 repeat: one point of
    two repeats, as for the step counts."""
    _run(tmp_path, "default", 172.0, seed=0)
    _run(tmp_path, "older", 175.0, repeat=1)
    df = collect_runs(tmp_path)
    assert "train.seed" not in line_columns(df)
    assert list(points_table(df)["num_repeats"]) == [2]


def test_runs_sharing_a_repeat_label_are_named_and_not_called_measured_noise(tmp_path):
    """Two runs of one point, both repeat=0 (a seed-1 rerun the records cannot tell apart),
    whose final losses part: points.csv counts them and says what differs; the report and
    the terminal say they are not known repeats, and never call their spread the noise
    between runs, measured."""
    _run(tmp_path, "default", 172.0, loss=0.317)
    _run(tmp_path, "seed1", 197.0, loss=3.24)
    df = collect_runs(tmp_path)
    tables = study_tables(df, 1000)
    point = tables["points"].iloc[0]
    assert point["num_repeats"] == 2 and point["runs_share_repeat"] == 2
    assert point["repeats_differ"] == "final loss 0.317-3.24 (did not train alike)"
    text = repeats_text(df, tables["points"])
    assert "Not known repeats" in text and "runs_share_repeat" in text
    assert "the noise between runs, measured" not in text
    assert any(line.startswith("not known repeats") for line in noise_lines(tables))


def test_runs_with_distinct_repeat_labels_are_measured_noise(tmp_path):
    """The contrast: repeat=0 and repeat=1 of one setting are repeats, their spread the
    noise between runs; nothing is flagged as shared."""
    _run(tmp_path, "r0", 172.0, repeat=0)
    _run(tmp_path, "r1", 180.0, repeat=1)
    df = collect_runs(tmp_path)
    points = points_table(df)
    assert points["runs_share_repeat"].tolist() == [0]
    text = repeats_text(df, points)
    assert "the noise between runs, measured" in text and "Not known repeats" not in text


def test_a_run_at_a_pooled_baseline_has_no_efficiency_of_its_own(tmp_path):
    """Three runs at the baseline node count: a run's ips over their median (1.14) is their
    spread, not an efficiency; scaling.csv leaves it blank and the terminal prints
    'baseline'. A baseline of one run keeps 1.0, the scaled point its efficiency."""
    for repeat, ips in enumerate((172.0, 197.0, 173.0)):
        _run(tmp_path / "a", f"r{repeat}", ips, repeat=repeat)
    _run(tmp_path / "a", "n2", 2 * 173.0 * 0.9, nodes=2)
    df = collect_runs(tmp_path / "a")
    table = scaling_table(df)
    at_n0 = table[table["nodes"] == 1]
    assert at_n0["scaling_efficiency"].isna().all()
    assert table.loc[table["nodes"] == 2, "scaling_efficiency"].round(3).tolist() == [0.9]
    printed = format_table(df, table)
    assert printed.count(BASELINE_RUN) == 3 and "114%" not in printed
    _run(tmp_path / "b", "one", 100.0)
    alone = scaling_table(collect_runs(tmp_path / "b"))
    assert alone["scaling_efficiency"].tolist() == [1.0]
    assert pd.isna(at_n0["scaling_efficiency"]).sum() == 3
