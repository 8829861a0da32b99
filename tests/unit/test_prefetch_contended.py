"""One contended repeat does not void the prefetch ablation: each variant is judged on its
runs other work did not compete with, its contended runs counted apart; only a variant
every run of which was contended loses its verdict. Records written with RunRecords."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.tables import study_tables

VARIANTS = {"BACKWARD_PRE": 800.0, "BACKWARD_POST": 760.0, "NONE": 700.0}


def _ablation(root: Path) -> pd.DataFrame:
    """Five runs of each prefetch variant of FULL_SHARD at 1 node on a GPU, 95% busy."""
    for prefetch, ips in VARIANTS.items():
        for repeat in range(5):
            info = run_info("FULL_SHARD", 1, device="cuda", prefetch=prefetch)
            info["config"]["repeat"] = repeat
            write_run(root / f"{prefetch}_{repeat}", info, ips + repeat, busy=0.95)
    return collect_runs(root)


def _contend(df: pd.DataFrame, which: pd.Series) -> pd.DataFrame:
    return df.assign(host_cpus=16.0, host_other_cpus=which.map({True: 8.0, False: 0.0}))


def test_one_contended_run_of_the_fastest_leaves_the_others_verdicts(tmp_path: Path) -> None:
    df = _ablation(tmp_path)
    quiet = study_tables(df, 1000)["prefetch"].set_index("backward_prefetch")
    one = _contend(df, df["run_dir"].str.endswith("BACKWARD_PRE_3"))
    table = study_tables(one, 1000)["prefetch"].set_index("backward_prefetch")
    for slower in ("BACKWARD_POST", "NONE"):
        assert not table.loc[slower, "vs_best"].startswith("not a result")
        assert table.loc[slower, "vs_best"] == quiet.loc[slower, "vs_best"]
    assert table.loc["BACKWARD_PRE", ["runs_contended", "runs_judged"]].tolist() == [1, 4]
    assert table.loc["BACKWARD_PRE", "vs_best"] == "1 run beside other work left out"


def test_a_variant_every_run_of_which_was_contended_loses_its_verdict(tmp_path: Path) -> None:
    df = _ablation(tmp_path)
    table = study_tables(_contend(df, df["run_dir"].str.contains("NONE_")), 1000)["prefetch"]
    table = table.set_index("backward_prefetch")
    assert table.loc["NONE", "vs_best"] == "not a result: other work competed (5 of 5 runs)"
    assert not table.loc["BACKWARD_POST", "vs_best"].startswith("not a result")
