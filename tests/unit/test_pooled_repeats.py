"""Runs pooled at one point as repeats: an explicit setting beside ``auto`` is another line,
runs that share a repeat label are not called the noise between runs (points.csv, the
report, the terminal), and a run at a pooled baseline is given no efficiency of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs, study_tables
from vitfsdp.analysis.lines import (
    BASELINE_RUN,
    ONE_DEVICE,
    format_table,
    framework_ratio_table,
    line_columns,
    scaling_table,
)
from vitfsdp.analysis.report import repeats_text
from vitfsdp.analysis.tables import noise_lines, points_table, verdict_kind
from vitfsdp.analysis.verdict import NOT_KNOWN_REPEATS


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
    'baseline'. A baseline of one run is blank too (one rule: every run at its line's
    baseline node count; it was 1.0 beside the pooled ones' blank), the scaled point keeps
    its efficiency."""
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
    _run(tmp_path / "b", "two", 180.0, nodes=2)
    alone = scaling_table(collect_runs(tmp_path / "b"))
    assert alone["scaling_efficiency"].isna().tolist() == [True, False]
    assert format_table(collect_runs(tmp_path / "b"), alone).count(BASELINE_RUN) == 1
    assert pd.isna(at_n0["scaling_efficiency"]).sum() == 3


def _one_device(root: Path, name: str, ips: float, **kwargs) -> None:
    """One completed run as :func:`_run`'s, on one GPU (world size 1)."""
    _run(root, name, ips, **kwargs)
    run_json = root / name / "run.json"
    info = json.loads(run_json.read_text())
    info["world"] |= {"size": 1, "ranks_per_node": 1}
    info["config"]["cluster"]["gpus_per_node"] = 1
    run_json.write_text(json.dumps(info))


def test_the_terminal_says_what_the_report_says_of_a_one_device_run(tmp_path):
    """A lone run of world size 1: the terminal printed '100%' where the report prints
    ONE_DEVICE; both now print ONE_DEVICE, for a pooled one-device baseline too."""
    _one_device(tmp_path, "one", 172.0, adamw="foreach")
    _one_device(tmp_path, "r0", 172.0, repeat=0)
    _one_device(tmp_path, "r1", 180.0, repeat=1)
    df = collect_runs(tmp_path)
    assert set(df["world_size"]) == {1}
    printed = format_table(df)
    assert printed.count(ONE_DEVICE) == 3 and "100%" not in printed


def _framework_run(root: Path, name: str, framework: str, ips: float, loss: float,
                   repeat: int = 0) -> None:  # fmt: skip
    """One completed GPU run of FULL_SHARD under ``framework``."""
    info = run_info("FULL_SHARD", 1, device="cuda")
    info["config"] |= {"framework": framework, "repeat": repeat}
    write_run(root / name, info, ips, loss=loss, busy=0.95)


def test_a_point_of_not_known_repeats_is_not_ranked_and_its_parted_loss_is_a_range(tmp_path):
    """The stall export's case: two runs sharing repeat=0 (losses 0.317 and 3.24) pooled
    beside a point of one run. Their median loss, 1.78, is a loss no run reached, and
    best.csv called the pair 'not like-for-like' only because it crossed 1 nat: now
    points.csv gives the range, not the median, and best.csv says not known repeats."""
    _run(tmp_path, "default", 197.0, loss=0.317)
    _run(tmp_path, "seed1", 197.0, loss=3.24)
    _run(tmp_path, "foreach", 150.0, adamw="foreach", loss=0.14)
    tables = study_tables(collect_runs(tmp_path), 1000)
    pooled = tables["points"].set_index("kernels.adamw").loc["auto"]
    assert pd.isna(pooled["loss"])
    assert (pooled["loss_min"], pooled["loss_max"]) == pytest.approx((0.317, 3.24))
    best = tables["best"].iloc[0]
    assert best["difference"].startswith(NOT_KNOWN_REPEATS)
    assert "final loss 0.317-3.24" in best["difference"]
    assert verdict_kind(best["difference"]) == NOT_KNOWN_REPEATS
    assert any("not known repeats" in line and "no ranking" in line
               for line in noise_lines(tables))


def test_repeats_whose_losses_do_not_part_keep_their_median_loss(tmp_path):
    """The contrast: two repeats (repeat=0, 1) at 0.30 and 0.32 keep their median, 0.31,
    and no range is named."""
    _run(tmp_path, "r0", 172.0, loss=0.30, repeat=0)
    _run(tmp_path, "r1", 174.0, loss=0.32, repeat=1)
    point = points_table(collect_runs(tmp_path)).iloc[0]
    assert point["loss"] == pytest.approx(0.31)


def test_a_framework_side_of_not_known_repeats_is_no_ratio(tmp_path):
    """PyTorch's side two runs sharing repeat=0 (losses 0.317 and 3.24), JAX's one: the
    ratio's row said 'beyond the spread' or the like on a pooled median; now its
    ``difference`` says not known repeats with PyTorch's loss range, and ``torch_loss``
    is not the median no run reached."""
    _framework_run(tmp_path, "t0", "torch", 172.0, 0.317)
    _framework_run(tmp_path, "t1", "torch", 197.0, 3.24)
    _framework_run(tmp_path, "jax", "jax", 287.0, 1.99)
    row = framework_ratio_table(collect_runs(tmp_path)).iloc[0]
    assert row["difference"].startswith(
        "not known repeats: PyTorch's 2 runs (final loss 0.317-3.24) share a repeat label")
    assert pd.isna(row["torch_loss"]) and row["jax_loss"] == pytest.approx(1.99)


def test_the_shared_repeat_warning_is_printed_once(tmp_path):
    """python -m vitfsdp.analysis printed the warning three times: once from the tables,
    twice more from figure processes that build the points table again."""
    _run(tmp_path / "runs", "default", 172.0, loss=0.317)
    _run(tmp_path / "runs", "seed1", 197.0, loss=3.24)
    done = subprocess.run([sys.executable, "-m", "vitfsdp.analysis", str(tmp_path / "runs"),
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, check=True)
    said = (done.stdout + done.stderr).count("share a point and a repeat label")
    assert said == 1, done.stderr
