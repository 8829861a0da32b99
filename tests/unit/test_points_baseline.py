"""A point's efficiency carries its line's baseline: the baseline's images/s are over its
runs other work did not compete with, and points.csv says where the baseline was contended,
host-bound or ran once (``baseline_*``, ``above_ideal_cause``), as the report and the
weak-scaling figure's legend do. Records written with RunRecords."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.tables import points_table


def _write(root: Path, runs: dict[int, list[float]], busy: dict[int, float] | None = None):
    """FULL_SHARD GPU runs ``{nodes: [ips of each repeat]}``, each window's busy share
    ``busy[nodes]`` (None: not measured); returns the ``collect_runs`` frame."""
    for nodes, values in runs.items():
        for repeat, ips in enumerate(values):
            info = run_info("FULL_SHARD", nodes, device="cuda")
            info["config"]["repeat"] = repeat
            write_run(root / f"n{nodes}_r{repeat}", info, ips,
                      busy=(busy or {}).get(nodes))
    return collect_runs(root)


def _contend(df: pd.DataFrame, which: pd.Series) -> pd.DataFrame:
    """``df`` with other work using 8 of 16 cores during the runs ``which`` (none else)."""
    return df.assign(host_cpus=16.0, host_other_cpus=which.map({True: 8.0, False: 0.0}))


def test_a_contended_baseline_repeat_is_left_out_of_the_efficiency(tmp_path: Path) -> None:
    """1 node: 440 and 450 images/s quiet, 300 beside other work; 2 nodes: 800-820. The
    baseline is the median of the quiet runs, and every efficiency divides by it; the
    contended run is counted, not dropped."""
    df = _write(tmp_path, {1: [440.0, 300.0, 450.0], 2: [800.0, 810.0, 820.0]})
    contended = df["run_dir"].str.endswith("n1_r1")
    points = points_table(_contend(df, contended)).set_index("nodes")
    quiet = df.loc[(df["nodes"] == 1) & ~contended, "ips"].median()
    two = df.loc[df["nodes"] == 2, "ips"].median()
    assert points.loc[1, "ips"] == pytest.approx(quiet)
    assert points.loc[2, "scaling_efficiency"] == pytest.approx(two / (2 * quiet))
    assert points.loc[1, ["num_repeats", "runs_contended", "runs_judged"]].tolist() == [3, 1, 2]
    assert points["baseline_runs"].tolist() == [2, 2]
    assert not points["baseline_contended"].any()


def test_an_all_contended_baseline_flags_every_point_of_its_line(tmp_path: Path) -> None:
    df = _write(tmp_path, {1: [440.0, 450.0], 2: [800.0, 810.0]})
    points = points_table(_contend(df, df["nodes"] == 1)).set_index("nodes")
    assert points["baseline_contended"].tolist() == [True, True]
    assert bool(points.loc[1, "figures_contended"]) and not points.loc[2, "figures_contended"]


def test_above_ideal_names_a_host_bound_baseline(tmp_path: Path) -> None:
    """1 node at 40% busy (330 images/s), 2 nodes at 95% (700): 106% of ideal, which the
    table, the report and the figure's legend put down to the host-bound baseline, not to
    noise."""
    from vitfsdp.analysis.figures.weak_scaling import plot_weak_scaling
    from vitfsdp.analysis.lines import format_efficiency
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import study_tables

    df = _write(tmp_path, {1: [330.0, 331.0, 332.0], 2: [700.0, 701.0, 702.0]},
                busy={1: 0.40, 2: 0.95})
    tables = study_tables(df, 1000)
    points = tables["points"].set_index("nodes")
    assert format_efficiency(points.loc[2, "scaling_efficiency"]).endswith("*")
    assert points["baseline_host_bound"].tolist() == [True, True]
    assert points.loc[2, "above_ideal_cause"] == "host-bound baseline"
    text = {s.title: s for s in report_sections(tables, 1000)}["Weak scaling"].text
    assert "vit_tiny FULL_SHARD at 2 node(s) (host-bound baseline)" in text
    assert "noise (in the smallest node count's baseline or the point)" not in text
    fig = plot_weak_scaling(df)
    labels = [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]
    assert "above ideal (efficiency > 100 %): host-bound baseline" in labels


def test_above_ideal_names_a_one_run_baseline(tmp_path: Path) -> None:
    df = _write(tmp_path, {1: [330.0], 2: [700.0, 701.0, 702.0]}, busy={1: 0.95, 2: 0.95})
    points = points_table(df).set_index("nodes")
    assert points["baseline_runs"].tolist() == [1, 1]
    assert points.loc[2, "above_ideal_cause"] == "one-run baseline"
