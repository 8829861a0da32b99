"""The plan's price of a sweep (its node-hours) and a local sweep's first ETA use the step
time cluster.time=auto sizes the jobs by (vitfsdp.plan.sizing_step): a Frontier day-one
review read 333.8 node hours for a sweep whose jobs asked for time at ORNL's published step
times, which 27 of its 33 points are slower at than the plan's."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from vitfsdp.plan import STARTUP_S, SizingStep, sizing_step
from vitfsdp.plan.__main__ import compose_points, plan_table, summary_line
from vitfsdp.sweep.point import Point, _predicted_step_s

ORNL = Path(__file__).resolve().parents[2] / "vitfsdp" / "reference" / "ornl_frontier_2023.csv"
STEPS = 100
#: vit_5b FULL_SHARD on Frontier as ORNL ran it; 3 nodes: a node count ORNL did not run
POINTS = ["model=vit_5b", "cluster=frontier", "strategy=FULL_SHARD", "nodes=1,3,128",
          "precision=bf16", "train.activation_checkpointing=true", f"train.steps={STEPS}"]


def _published_ips(nodes: int) -> float:
    """ORNL's images/s of vit_5b FULL_SHARD (local batch 32, bf16, checkpointing, 8 GCDs a
    node) at ``nodes``, read from the CSV here: the first row (its scaling run), not the
    prefetch ablation's."""
    ref = pd.read_csv(ORNL)
    rows = ref[(ref["metric"] == "ips") & (ref["model"] == "vit_5b")
               & (ref["strategy"] == "FULL_SHARD") & (ref["nodes"] == nodes)
               & (ref["local_batch_size"] == 32) & (ref["precision"] == "bf16")]
    return float(rows["value"].iloc[0])


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return plan_table(POINTS)


def test_a_point_with_a_published_row_is_priced_at_it_one_without_at_the_plans(table) -> None:
    steps = {}
    for nodes, predicted in zip(table["nodes"], table["step_time_s"], strict=True):
        if nodes == 3:  # no published row: the plan's step
            steps[nodes] = predicted
        else:  # the global batch (32 x 8 GCDs x nodes) over ORNL's images/s (50 and 2,262)
            steps[nodes] = 32 * 8 * nodes / _published_ips(nodes)
            assert steps[nodes] > 1.01 * predicted  # else the published step is not used
    assert steps[1] == pytest.approx(5.12) and steps[128] == pytest.approx(14.486, abs=1e-3)
    hours = sum(n * (STEPS * s + STARTUP_S) for n, s in steps.items()) / 3600
    plan_alone = sum(n * (STEPS * s + STARTUP_S)
                     for n, s in zip(table["nodes"], table["step_time_s"], strict=True)) / 3600
    line = summary_line(table).split("\n")[1]
    printed = float(re.search(r": ([\d.,]+) node hours", line).group(1).replace(",", ""))
    assert printed == pytest.approx(hours, abs=0.05)  # 62.9
    assert abs(printed - plan_alone) > 10  # what the line said before (the plan's alone)
    assert ("training at the predicted steps (2 points at the slower step time published "
            "for their settings, ornl_vit_fsdp, as cluster.time=auto sizes them)") in line


def test_the_price_is_the_step_cluster_time_auto_and_the_eta_use(table) -> None:
    """Each point's priced step is sizing_step's (cluster.time=auto's, the sweep's time
    checks') and the one a local sweep's ETA starts from before a window is measured."""
    hours = 0.0
    for overrides in table["overrides"]:
        [(_, cfg)] = compose_points(overrides.split())
        step = sizing_step(cfg)
        assert step.by_published == (cfg.nodes != 3)
        assert _predicted_step_s(Point(0, overrides.split(), cfg, Path("p"))) == step.step_s
        hours += cfg.nodes * (cfg.train.steps * step.step_s + STARTUP_S) / 3600
    assert f": {hours:,.1f} node hours" in summary_line(table)


def test_a_plan_table_without_published_rows_reads_as_before(table) -> None:
    """A profile no study ran on (the cluster column) prices at the plan's steps, with no
    clause."""
    other = table.assign(cluster="cuda8")
    line = summary_line(other).split("\n")[1]
    hours = sum(other["nodes"] * (STEPS * other["step_time_s"] + STARTUP_S)) / 3600
    assert f": {hours:,.1f} node hours" in line and "published" not in line


def test_the_slower_step_is_the_one_sized() -> None:
    plan_slower = SizingStep.of(10.0, (5.0, "ornl_vit_fsdp"))
    assert plan_slower.step_s == 10.0 and not plan_slower.by_published
    published_slower = SizingStep.of(2.0, (5.0, "ornl_vit_fsdp"))
    assert published_slower.step_s == 5.0 and published_slower.by_published
    assert SizingStep.of(math.nan, (5.0, "s")) == SizingStep(5.0, None, 5.0, "s")
    assert SizingStep.of(None, None) == SizingStep(None, None, None, None)
    assert SizingStep.of(3.0, None) == SizingStep(3.0, 3.0, None, None)
