"""The recipe ablation's ``vs_baseline`` takes the demotions best.csv's verdicts take: a
step is judged on its runs other work did not compete with, a step or baseline every run of
which was contended is not ranked, and a host-bound pair (or one on GPUs without a busy
share) compares host loops, not the recipe. Records written with RunRecords."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.recipe import recipe_table
from vitfsdp.analysis.tables import study_tables

#: Baseline ``r`` at 100-104 images/s, step ``r_1_amp`` at 150-154: apart beyond the spread.
STEPS = {"r": 100.0, "r_1_amp": 150.0}


def _recipe(root: Path, busy: dict[str, float | None] | None = None) -> pd.DataFrame:
    """Five runs of each step of DDP at 1 node on GPUs, ``busy`` each step's busy share
    (95% where not given)."""
    for name, ips in STEPS.items():
        for repeat in range(5):
            info = run_info("DDP", 1, device="cuda")
            info["config"] |= {"repeat": repeat, "experiment": name}
            info["config"]["strategy"] |= {"backward_prefetch": None, "limit_all_gathers": None}
            write_run(root / f"{name}_{repeat}", info, ips + repeat,
                      busy=(busy or {}).get(name, 0.95))
    return collect_runs(root)


def _contend(df: pd.DataFrame, which: pd.Series) -> pd.DataFrame:
    return df.assign(host_cpus=16.0, host_other_cpus=which.map({True: 8.0, False: 0.0}))


def _verdict(df: pd.DataFrame) -> str:
    return recipe_table(df).set_index("step").loc[1, "vs_baseline"]


def test_a_quiet_measured_step_is_ranked(tmp_path: Path) -> None:
    assert _verdict(_recipe(tmp_path)) == "beyond the spread"


def test_one_contended_run_is_left_out_and_noted(tmp_path: Path) -> None:
    """The step's fastest run contended (154 images/s): its figures are over the other four
    (median 151.5), the verdict says one run was left out, and the report still counts the
    step a result."""
    from vitfsdp.analysis.report import report_sections

    df = _recipe(tmp_path)
    df = _contend(df, df["run_dir"].str.endswith("r_1_amp_4"))
    step = recipe_table(df).set_index("step").loc[1]
    assert step[["num_completed", "runs_contended", "runs_judged"]].tolist() == [5, 1, 4]
    assert step["ips"] == 151.5
    assert step["vs_baseline"] == "beyond the spread; 1 run beside other work left out"
    section = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}[
        "Recipe ablation"]
    assert "1 of 1 do." in section.text


def test_a_step_every_run_of_which_was_contended_is_not_ranked(tmp_path: Path) -> None:
    df = _recipe(tmp_path)
    assert _verdict(_contend(df, df["run_dir"].str.contains("r_1_amp_"))) == (
        "not a result: other work competed (5 of 5 runs)")


def test_a_contended_baseline_is_not_ranked(tmp_path: Path) -> None:
    df = _recipe(tmp_path)
    baseline = df["run_dir"].str.contains("/r_[0-9]$", regex=True)
    assert _verdict(_contend(df, baseline)) == (
        "not a result: other work competed with the baseline (5 of 5 runs)")


def test_a_host_bound_step_compares_host_loops(tmp_path: Path) -> None:
    """The step at 40% busy: apart beyond the spread, but the host decided its step; the
    report counts it among the steps, not the results."""
    from vitfsdp.analysis.report import report_sections

    df = _recipe(tmp_path, {"r_1_amp": 0.40})
    step = recipe_table(df).set_index("step").loc[1]
    assert bool(step["host_bound"])
    assert step["vs_baseline"] == ("host-bound: compares host loops and wrappers, not the "
                                   f"devices ({step['relative_ips']:.2f}x apart)")
    section = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}[
        "Recipe ablation"]
    assert "0 of 1 do." in section.text


def test_a_gpu_baseline_without_a_busy_share_is_not_ranked(tmp_path: Path) -> None:
    assert _verdict(_recipe(tmp_path, {"r": None})).startswith(
        "GPU busy share not measured: host-bound not known, not ranked (")
