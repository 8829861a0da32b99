"""The report's cost-per-epoch table, the one a proposal quotes, carries its caveats: a
host-bound point, a noisy one and a configuration whose runs all failed are named, and the
table shows ``host_bound``, ``noisy`` and the failed runs. Records written with
RunRecords."""

from __future__ import annotations

from pathlib import Path

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.report import report_sections
from vitfsdp.analysis.tables import study_tables


def test_the_cost_table_names_host_bound_noisy_and_failed_points(tmp_path: Path) -> None:
    """DDP at 42% busy is the cheapest at 1 node; FULL_SHARD's repeats spread 44%; HYBRID
    ran out of memory every time at 1 node."""
    for strategy, values, busy in (("DDP", [460.0, 461.0, 462.0], 0.42),
                                   ("FULL_SHARD", [300.0, 440.0, 420.0], 0.95),
                                   ("HYBRID_2GPU", [None, None], 0.95)):
        for repeat, ips in enumerate(values):
            info = run_info(strategy, 1, device="cuda")
            info["config"]["repeat"] = repeat
            write_run(tmp_path / f"{strategy}_{repeat}", info, ips,
                      status="completed" if ips else "oom", busy=busy)
    tables = study_tables(collect_runs(tmp_path), 1000)
    section = {s.title: s for s in report_sections(tables, 1000)}["Cost per epoch"]
    assert {"runs failed", "repeat spread", "noisy", "host-bound"} <= set(section.table.columns)
    points = tables["points"].set_index("strategy")
    spread = points.loc["FULL_SHARD", "ips_repeat_spread"]
    assert "**Host-bound**" in section.text and "vit_tiny DDP at 1 node(s)" in section.text
    assert f"vit_tiny FULL_SHARD at 1 node(s) ({spread:.0%})" in section.text
    assert "vit_tiny HYBRID_2GPU 2 of 2 oom (none completed)" in section.text
    assert "has no cost there" in section.text
