"""The JAX/PyTorch ratio table (:func:`vitfsdp.analysis.lines.framework_ratio_table`) and
the report's words on it, on record directories written with RunRecords: which runs pair
up as one point."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs, framework_ratio_table


def _info(framework: str, nodes: int = 1, per_node: int = 2, cluster: str = "a100",
          strategy: str = "DDP") -> dict:  # fmt: skip
    """A GPU run.json of one framework on ``nodes`` nodes of ``per_node`` GPUs of the
    cluster profile ``cluster``; FSDP1-only settings null (JAX, DDP)."""
    info = run_info(strategy, nodes, device="cuda")
    info["config"]["framework"] = framework
    info["config"]["strategy"] |= {"backward_prefetch": None, "limit_all_gathers": None}
    info["config"]["cluster"] = {"name": cluster, "gpus_per_node": per_node}
    info["world"] |= {"size": nodes * per_node, "ranks_per_node": per_node}
    return info


def _ratio(sweep: Path, runs: dict[str, tuple[dict, float]]) -> pd.DataFrame:
    """The ratio table of the runs ``{name: (run.json, ips)}`` written below ``sweep``."""
    for name, (info, ips) in runs.items():
        write_run(sweep / name, info, ips, busy=0.95)
    return framework_ratio_table(collect_runs(sweep))


def test_a_jax_run_pairs_only_with_a_torch_run_of_its_gpus_per_node(tmp_path: Path) -> None:
    """One node of 8 GPUs under PyTorch, one of 4 under JAX: not the same point, no row;
    a PyTorch run on 4 GPUs too, and the JAX run is compared with that one only."""
    apart = _ratio(tmp_path / "apart", {"torch8": (_info("torch", per_node=8), 800.0),
                                        "jax4": (_info("jax", per_node=4), 500.0)})
    assert apart.empty
    both = _ratio(tmp_path / "both", {"torch8": (_info("torch", per_node=8), 800.0),
                                      "torch4": (_info("torch", per_node=4), 400.0),
                                      "jax4": (_info("jax", per_node=4), 500.0)})
    assert len(both) == 1
    row = both.iloc[0]
    assert (row["world_size"], row["ranks_per_node"], row["torch_ips"], row["jax_ips"]) == \
        (4, 4, 400.0, 500.0)
    assert row["jax_over_torch"] == pytest.approx(1.25)


def test_a_jax_run_pairs_only_with_a_torch_run_of_its_cluster(tmp_path: Path) -> None:
    """The same node count and GPUs per node on two cluster profiles (another interconnect,
    another host): no row; the pairing columns that take one value are not shown."""
    apart = _ratio(tmp_path / "apart", {"torch": (_info("torch", cluster="a100"), 200.0),
                                        "jax": (_info("jax", cluster="h100"), 300.0)})
    assert apart.empty
    same = _ratio(tmp_path / "same", {"torch": (_info("torch"), 200.0),
                                      "jax": (_info("jax"), 300.0)})
    assert list(same.columns[:3]) == ["model", "strategy", "nodes"]
    assert not {"world_size", "ranks_per_node", "cluster"} & set(same.columns)
    assert same["jax_over_torch"].tolist() == pytest.approx([1.5])


def test_the_report_names_a_host_bound_point_by_its_gpus_per_node(tmp_path: Path) -> None:
    from vitfsdp.analysis.report import framework_host_text

    ratio = _ratio(tmp_path, {"torch8": (_info("torch", per_node=8), 800.0),
                              "torch4": (_info("torch", per_node=4), 400.0),
                              "jax4": (_info("jax", per_node=4), 500.0)})
    text = framework_host_text(ratio.assign(host_bound=pd.array([True], dtype="boolean")))
    assert "vit_tiny DDP ranks_per_node=4 world_size=4 at 1 node(s)" in text


def test_a_host_bound_pair_is_not_counted_as_a_framework_result(tmp_path: Path) -> None:
    """Three runs a side at 1 and 2 nodes, JAX at half PyTorch's images/s: both pairs apart
    beyond the spread, but PyTorch's host decided its step at 2 nodes. That pair's
    ``difference`` says it compares host loops (with how far apart), not "beyond the
    spread"; the report counts one framework result, and the host-bound pair apart."""
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import study_tables
    from vitfsdp.analysis.verdict import host_bound_verdict

    for framework, ips in (("torch", 200.0), ("jax", 100.0)):
        for nodes in (1, 2):
            for repeat in range(3):
                info = _info(framework, nodes)
                info["config"]["repeat"] = repeat
                busy = 0.38 if (framework, nodes) == ("torch", 2) else 0.95
                write_run(tmp_path / f"{framework}_{nodes}_{repeat}", info,
                          nodes * ips + 3 * repeat, busy=busy)
    tables = study_tables(collect_runs(tmp_path), 1000)
    ratio = tables["framework_ratio"]
    apart = 1 / ratio["jax_over_torch"].iloc[1]  # PyTorch the faster
    assert ratio["difference"].tolist() == ["beyond the spread", host_bound_verdict(apart)]
    assert ratio["difference"].iloc[1].startswith("host-bound: compares host loops")
    assert ratio["host_bound"].tolist() == [False, True]
    text = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"].text
    assert "2 of 2" not in text
    assert "1 of 1 pairs measured not host-bound are (`difference`)" in text
    assert "1 host-bound pair (`host_bound`; `difference`: host-bound" in text
    assert "compares the two host loops, not the frameworks, and is not counted" in text


def _recipe_run(framework: str, strategy: str, engine: str = "fsdp1", kernels: dict | None = None,
                applied: dict | None = None) -> dict:  # fmt: skip
    """:func:`_info` of ``strategy`` on one node with ``engine``, the ``kernels`` settings
    and run.json ``applied`` (what the trainer records the auto settings resolved to)."""
    info = _info(framework, strategy=strategy)
    info["config"] |= {"engine": engine, "kernels": kernels or {}}
    info["config"]["strategy"]["use_orig_params"] = None
    info["applied"] = applied or {}
    return info


def test_the_ratio_says_which_torch_recipe_it_is_against(tmp_path: Path) -> None:
    """Nothing swept among the PyTorch runs, yet each row names the recipe they ran: the
    resolved compile and use_orig_params where run.json recorded them, else the setting."""
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import study_tables

    auto = {"compile": None, "adamw": "fused"}
    for name, (info, ips) in {
        "torch_fs": (_recipe_run("torch", "FULL_SHARD", kernels=auto, applied={
            "compiled_blocks": 12, "use_orig_params": True}), 200.0),
        "jax_fs": (_recipe_run("jax", "FULL_SHARD"), 250.0),
        "torch_ddp": (_recipe_run("torch", "DDP", kernels=auto,
                                  applied={"compiled_blocks": 12}), 300.0),
        "jax_ddp": (_recipe_run("jax", "DDP"), 250.0),
    }.items():
        write_run(tmp_path / "one" / name, info, ips, busy=0.95)
    tables = study_tables(collect_runs(tmp_path / "one"), 1000)
    ratio = tables["framework_ratio"].set_index("strategy")
    assert "kernels.compile" not in ratio.columns  # nothing varies: no column of its own
    assert ratio.loc["FULL_SHARD", "torch_recipe"] == "FSDP1 compiled, orig params, fused AdamW"
    assert ratio.loc["DDP", "torch_recipe"] == "DDP compiled, fused AdamW"
    text = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"].text
    assert ("PyTorch ran 2 recipes (`torch_recipe`: DDP compiled, fused AdamW; FSDP1 compiled, "
            "orig params, fused AdamW): each row's ratio is against its own.") in text

    eager = _recipe_run("torch", "FULL_SHARD", engine="fsdp2",
                        kernels={"compile": False, "adamw": "auto"})
    ratio = _ratio(tmp_path / "two", {"torch": (eager, 200.0),
                                      "jax": (_recipe_run("jax", "FULL_SHARD"), 250.0)})
    assert ratio["torch_recipe"].tolist() == ["FSDP2 eager, auto AdamW"]
    section = {s.title: s for s in report_sections(
        study_tables(collect_runs(tmp_path / "two"), 1000), 1000)}["PyTorch and JAX"]
    assert ("PyTorch ran FSDP2 eager, auto AdamW (`torch_recipe`): every ratio is against "
            "that recipe, not PyTorch at large.") in section.text
    assert section.table is not None and "PyTorch recipe" in section.table.columns

    chosen = _recipe_run("torch", "FULL_SHARD", engine="fsdp2", applied={"adamw": "foreach"},
                         kernels={"compile": False, "adamw": "auto"})  # what auto chose
    ratio = _ratio(tmp_path / "three", {"torch": (chosen, 200.0),
                                        "jax": (_recipe_run("jax", "FULL_SHARD"), 250.0)})
    assert ratio["torch_recipe"].tolist() == ["FSDP2 eager, foreach AdamW"]


def test_the_report_names_what_the_two_programs_run_differently():
    """FULL_SHARD, HYBRID: JAX keeps the gathered units to the backward (torch gathers again); DDP
    in bf16: torch's autocast keeps an fp32 residual stream. Said for the strategies the
    table holds, and only there."""
    from vitfsdp.analysis.report import _program_caveat

    both = pd.DataFrame({"strategy": ["FULL_SHARD", "DDP"], "precision": ["bf16", "bf16"]})
    text = _program_caveat(both)
    assert "Under FULL_SHARD JAX gathers each unit's parameters once a step" in text
    assert "Where DDP ran in bf16, torch ran autocast" in text
    hybrid = _program_caveat(pd.DataFrame({"strategy": ["HYBRID_2GPU", "FULL_SHARD"]}))
    assert "Under FULL_SHARD, HYBRID_2GPU JAX gathers each unit's parameters once" in hybrid
    assert _program_caveat(pd.DataFrame({"strategy": ["SHARD_GRAD_OP"]})) == ""
    fp32 = _program_caveat(pd.DataFrame({"strategy": ["DDP"], "precision": ["fp32"]}))
    assert fp32 == ""


def test_the_framework_section_carries_the_program_caveat(tmp_path):
    """The PyTorch-and-JAX section of a real ratio table (a FULL_SHARD pair) says it."""
    from vitfsdp.analysis.report import _framework_section

    ratio = _ratio(tmp_path, {fw: (_info(fw, strategy="FULL_SHARD"), ips)
                              for fw, ips in (("torch", 100.0), ("jax", 120.0))})
    assert len(ratio) == 1
    section = _framework_section(ratio)
    assert "Under FULL_SHARD JAX gathers each unit's parameters once a step" in section.text


def _repeats(sweep: Path, ips: dict[tuple[str, int], tuple[float, ...]]) -> None:
    """DDP runs below ``sweep``, one per value of ``{(framework, nodes): (ips, ...)}``,
    each value a repeat; every device busy (no pair host-bound)."""
    for (framework, nodes), values in ips.items():
        for repeat, value in enumerate(values):
            info = _info(framework, nodes)
            info["config"]["repeat"] = repeat
            write_run(sweep / f"{framework}_{nodes}_{repeat}", info, value, busy=0.95)


def test_a_pair_is_noisy_where_either_side_spread_or_competed(tmp_path: Path) -> None:
    """Three runs a side at 1 and 2 nodes: PyTorch's runs at 2 nodes spread 14% of their
    median (points.csv calls that point noisy), so that pair is noisy and the one at 1 node
    is not; other work competing with one JAX run at 1 node makes that pair noisy too. The
    report's verdict counts the noisy pairs among those it counts."""
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import study_tables

    _repeats(tmp_path, {("torch", 1): (200.0, 201.0, 202.0), ("jax", 1): (100.0, 101.0, 102.0),
                        ("torch", 2): (400.0, 430.0, 460.0), ("jax", 2): (200.0, 201.0, 202.0)})
    df = collect_runs(tmp_path)
    tables = study_tables(df, 1000)
    ratio = tables["framework_ratio"]
    assert ratio["nodes"].tolist() == [1, 2]
    assert ratio["noisy"].tolist() == [False, True]
    points = tables["points"].set_index(["framework", "nodes"])
    assert points.loc[("torch", 2), "noisy"] and not points.loc[("torch", 1), "noisy"]
    text = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"].text
    assert "2 of 2 pairs measured not host-bound are (`difference`)" in text
    assert "1 of those 2 is noisy (`noisy`: on either side the runs" in text

    other = (df["framework"] == "jax") & (df["nodes"] == 1) & (df["repeat"] == 0)
    competed = df.assign(host_cpus=2, host_other_cpus=other.map({True: 0.9, False: 0.05}))
    tables = study_tables(competed, 1000)
    assert tables["framework_ratio"]["noisy"].tolist() == [True, True]
    text = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"].text
    assert "2 of those 2 are noisy" in text


def test_a_side_that_ran_once_is_noisy_by_its_windows(tmp_path: Path) -> None:
    """One run a side: its windows (±1 images/s) judge it. Around 15 images/s they spread
    13% of the median, noisy; around 200, 1%, not; a run of one window, not known."""
    from vitfsdp.analysis.report import _framework_verdict

    noisy = _ratio(tmp_path / "slow", {"torch": (_info("torch"), 15.0),
                                       "jax": (_info("jax"), 300.0)})
    assert noisy["noisy"].tolist() == [True]
    assert "The pair not host-bound is noisy (`noisy`" in _framework_verdict(noisy)
    steady = _ratio(tmp_path / "steady", {"torch": (_info("torch"), 200.0),
                                          "jax": (_info("jax"), 300.0)})
    assert steady["noisy"].tolist() == [False]
    assert "The pair not host-bound is not noisy" in _framework_verdict(steady)
    df = collect_runs(tmp_path / "steady")
    unknown = framework_ratio_table(df.assign(ips_spread=float("nan"), ips_min=float("nan")))
    assert unknown["noisy"].isna().all()


def test_runs_without_a_partner_are_counted_and_named(tmp_path: Path) -> None:
    """DDP on one node under both; PyTorch twice on two nodes and JAX FULL_SHARD on one
    node, with nothing to pair with: no row, so the report says the table is partial and
    names them, a point's runs once."""
    from vitfsdp.analysis.lines import framework_partners
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import study_tables

    _repeats(tmp_path, {("torch", 1): (200.0,), ("jax", 1): (300.0,),
                        ("torch", 2): (400.0, 401.0)})
    write_run(tmp_path / "jax_fs", _info("jax", strategy="FULL_SHARD"), 250.0, busy=0.95)
    df = collect_runs(tmp_path)
    partners = framework_partners(df).sort_values("run_dir")
    assert partners["paired"].tolist() == [True, False, True, False, False]
    tables = study_tables(df, 1000)
    assert len(tables["framework_ratio"]) == 1
    text = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"].text
    assert ("The table is partial: a run without a run of the other framework at its point, "
            "completed or not (the same model, strategy, node count, world size, GPUs per "
            "node and cluster profile) is in no row: 2 of 3 PyTorch runs (vit_tiny DDP at 2 "
            "node(s) (2 runs)) and 1 of 2 JAX runs (vit_tiny FULL_SHARD at 1 node(s)).") in text


def test_a_sweep_where_nothing_pairs_says_so(tmp_path: Path) -> None:
    """PyTorch on one node of 8 GPUs, JAX on one of 4: no ratio, yet the report's section
    says why, naming each run by the GPUs per node that keep them apart; where only one
    framework ran, nothing is said."""
    from vitfsdp.analysis.report import report_sections, unpaired_text
    from vitfsdp.analysis.tables import study_tables

    for name, info in (("torch8", _info("torch", per_node=8)), ("jax4", _info("jax", per_node=4))):
        write_run(tmp_path / name, info, 400.0, busy=0.95)
    df = collect_runs(tmp_path)
    tables = study_tables(df, 1000)
    assert tables["framework_ratio"].empty
    section = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"]
    assert section.table is None
    assert section.text.startswith("No run has a run of the other framework")
    assert ("so there is no ratio: 1 of 1 PyTorch run (vit_tiny DDP ranks_per_node=8 "
            "world_size=8 at 1 node(s)) and 1 of 1 JAX run (vit_tiny DDP ranks_per_node=4 "
            "world_size=4 at 1 node(s)).") in section.text
    assert unpaired_text(df[df["framework"] == "torch"]) == ""
    titles = [s.title for s in report_sections(
        study_tables(df[df["framework"] == "torch"].reset_index(drop=True), 1000), 1000) if s]
    assert "PyTorch and JAX" not in titles


def _sections(df: pd.DataFrame) -> tuple[dict, dict]:
    """study_tables of ``df`` and the report's sections by title."""
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import study_tables

    tables = study_tables(df, 1000)
    return tables, {s.title: s for s in report_sections(tables, 1000)}


def test_a_contended_pair_is_not_a_result_as_best_csv_says(tmp_path: Path) -> None:
    """PyTorch 1000/1050/1100, JAX 2000/2050/2100 images/s, three runs each, apart beyond
    their spread; but other work used 0.69-1.36 of the 2 cores during every run. best.csv
    says no ranking, and so does the ratio: same words, and the report counts no result."""
    _repeats(tmp_path, {("torch", 1): (1000.0, 1050.0, 1100.0),
                        ("jax", 1): (2000.0, 2050.0, 2100.0)})
    df = collect_runs(tmp_path)
    quiet = framework_ratio_table(df)
    assert quiet["difference"].tolist() == ["beyond the spread"]
    other = [0.69, 0.8, 0.9, 1.0, 1.2, 1.36]
    busy = df.assign(host_cpus=2, host_other_cpus=other)
    tables, sections = _sections(busy)
    assert tables["best"]["difference"].tolist() == [
        "not a result: other work competed (3 of 3 runs)"]
    ratio = tables["framework_ratio"]
    assert ratio["difference"].tolist() == ["not a result: other work competed (6 of 6 runs)"]
    text = sections["PyTorch and JAX"].text
    assert "0 of 1 pairs measured not host-bound are (`difference`)" in text
    assert ("Other work competed with runs of 1 of those 1 (`difference`: not a result, 6 of "
            "6 runs): their images/s measure the contention, not the frameworks.") in text


def test_the_ratio_uses_the_words_of_best_csv() -> None:
    """best.csv, prefetch.csv and the ratio table write the contended and failure words of
    one module (verdict.py, which lines.py can import; tables.py imports lines.py)."""
    from vitfsdp.analysis import tables, verdict

    assert tables.CONTENDED is verdict.CONTENDED
    for name in ("contended_verdict", "failed_note", "with_notes"):
        assert getattr(tables, name) is getattr(verdict, name), name


def test_a_point_where_one_framework_failed_keeps_its_row(tmp_path: Path) -> None:
    """JAX's one run at 1 node was killed where PyTorch's completed: a row with no ratio
    that says which side failed, and a report section that says it too. With one of two
    JAX repeats failed: the ratio of the other, and the verdict counts the failure."""
    write_run(tmp_path / "one" / "torch", _info("torch"), 200.0, busy=0.95)
    write_run(tmp_path / "one" / "jax", _info("jax"), None, status="failed")
    df = collect_runs(tmp_path / "one")
    ratio = framework_ratio_table(df)
    assert len(ratio) == 1
    row = ratio.iloc[0]
    assert (row["torch_runs"], row["jax_runs"], row["torch_failed"], row["jax_failed"]) == \
        (1, 0, 0, 1)
    assert pd.isna(row["jax_over_torch"]) and pd.isna(row["ratio_low"])
    assert row["difference"] == "no result: jax failed (1 of 1 runs)"
    _, sections = _sections(df)
    assert sections["PyTorch and JAX"].text == (
        "Images/s of both frameworks per point (in the weak scaling figure: solid PyTorch, "
        "dash-dot JAX); the ratio with its bounds, the slowest JAX measurement over the "
        "fastest PyTorch one and the other way round. No ratio at vit_tiny DDP at 1 node(s) "
        "(no result: jax failed (1 of 1 runs)): a side completed no run there (failures.csv "
        "says why).")

    _repeats(tmp_path / "two", {("torch", 1): (200.0, 201.0), ("jax", 1): (300.0,)})
    info = _info("jax")
    info["config"]["repeat"] = 1
    write_run(tmp_path / "two" / "jax_1_1", info, None, status="failed")
    df = collect_runs(tmp_path / "two")
    row = framework_ratio_table(df).iloc[0]
    assert (row["jax_runs"], row["jax_failed"]) == (1, 1)
    assert row["jax_over_torch"] == pytest.approx(300.0 / 200.5)
    assert row["difference"] == "one run: not established; jax: 1 of 2 runs failed"
    _, sections = _sections(df)
    assert ("Runs failed at vit_tiny DDP at 1 node(s) (jax: 1 of 2 runs failed): the ratio "
            "there is of the runs that completed.") in sections["PyTorch and JAX"].text


def test_the_ratio_has_bounds(tmp_path: Path) -> None:
    """PyTorch 1000/1050/1100, JAX 2000/2050/2100: the ratio 1.95, bounded by the slowest
    JAX run over the fastest PyTorch one (1.82) and the other way round (2.10); the report
    prints them with it."""
    _repeats(tmp_path, {("torch", 1): (1000.0, 1050.0, 1100.0),
                        ("jax", 1): (2000.0, 2050.0, 2100.0)})
    df = collect_runs(tmp_path)
    row = framework_ratio_table(df).iloc[0]
    assert (row["ratio_low"], row["jax_over_torch"], row["ratio_high"]) == pytest.approx(
        (2000 / 1100, 2050 / 1050, 2100 / 1000))
    _, sections = _sections(df)
    table = sections["PyTorch and JAX"].table
    assert table["JAX / PyTorch"].tolist() == ["1.95 (1.82–2.10)"]
    assert "ratio_low" not in table.columns and "ratio_high" not in table.columns


def _timed(framework: str, repeat: int, steps: int = 20, warmup: int = 5,
           log_every: int | None = 5) -> dict:  # fmt: skip
    """:func:`_info` of DDP on one node, repeat ``repeat``, timed over ``steps`` steps of
    which ``warmup`` are warm-up, in windows of ``log_every`` (None: a record without the
    key, as records older than it)."""
    info = _info(framework)
    info["config"]["repeat"] = repeat
    info["config"]["train"] = {**info["config"]["train"], "steps": steps, "warmup_steps": warmup,
                               **({"log_every": log_every} if log_every else {})}
    return info


def test_runs_timed_otherwise_are_not_repeats(tmp_path: Path) -> None:
    """PyTorch DDP 1000/1050/1100 and JAX 2000/2050/2100 images/s over 20 steps (5 of them
    warm-up, windows of 5); one more JAX run of 8 steps without warm-up at 1200: runs.csv
    records each run's timing, the short run is a line of its own, not a third JAX repeat,
    and the ratio is of the runs timed alike (1.95, not 1.93 with it as a repeat)."""
    from vitfsdp.analysis.lines import configurations, line_columns

    for framework, values in (("torch", (1000.0, 1050.0, 1100.0)),
                              ("jax", (2000.0, 2050.0, 2100.0))):
        for repeat, ips in enumerate(values):
            write_run(tmp_path / f"{framework}_{repeat}", _timed(framework, repeat), ips,
                      busy=0.95)
    write_run(tmp_path / "jax_short", _timed("jax", 3, steps=8, warmup=0), 1200.0, busy=0.95)
    df = collect_runs(tmp_path)
    short = df["run_dir"].str.endswith("jax_short")
    timing = ["train.steps", "train.warmup_steps", "train.log_every"]
    assert df.loc[short, timing].values.tolist() == [[8, 0, 5]]
    assert df.loc[~short, timing].drop_duplicates().values.tolist() == [[20, 5, 5]]
    assert {"train.steps", "train.warmup_steps"} <= set(line_columns(df))
    assert "train.log_every" not in line_columns(df)
    assert configurations(df)[short].tolist() == ["DDP jax train.steps=8 train.warmup_steps=0"]
    ratio = framework_ratio_table(df)
    assert len(ratio) == 1  # the short JAX run has no PyTorch run timed as it was
    row = ratio.iloc[0]
    assert (row["train.steps"], row["jax_runs"]) == (20, 3)
    assert row["jax_over_torch"] == pytest.approx(2050.0 / 1050.0)


def test_a_record_without_the_timing_keys_splits_no_line(tmp_path: Path) -> None:
    """Two runs of one point, one recorded with train.log_every and one without it (a record
    older than the key): one line, its label unchanged, the two runs repeats of it."""
    from vitfsdp.analysis.lines import configurations, line_columns

    write_run(tmp_path / "new", _timed("torch", 0), 200.0)
    write_run(tmp_path / "old", _timed("torch", 1, log_every=None), 201.0)
    df = collect_runs(tmp_path)
    assert df["train.log_every"].isna().sum() == 1
    assert line_columns(df) == ["model", "strategy"]
    assert configurations(df).tolist() == ["DDP", "DDP"]


def test_an_fp32_sweep_gets_no_bf16_caveat(tmp_path: Path) -> None:
    """A DDP pair in fp32 (precision takes one value, so the ratio table has no precision
    column): the report and the terminal say nothing of bf16; in bf16 they do."""
    from vitfsdp.analysis.report import framework_text

    for precision in ("fp32", "bf16"):
        sweep = tmp_path / precision
        for framework, ips in (("torch", 200.0), ("jax", 300.0)):
            info = _info(framework)
            info["config"]["precision"] = precision
            write_run(sweep / framework, info, ips, busy=0.95)
        df = collect_runs(sweep)
        ratio = framework_ratio_table(df)
        assert "precision" not in ratio.columns
        words = framework_text(ratio, df)
        _, sections = _sections(df)
        section = sections["PyTorch and JAX"].text
        bf16 = "Where DDP ran in bf16, torch ran autocast"
        assert (bf16 in words, bf16 in section) == ((precision == "bf16"),) * 2, precision


def test_the_analysis_docstring_describes_the_ratio_table_it_writes():
    """Since every point both frameworks ran has a row (torch_failed/jax_failed, a side that
    completed none says so), ``python -m vitfsdp.analysis``'s description of
    framework_ratio.csv still said 'where both PyTorch and JAX runs completed a point' and
    'a run with no partner has no row'; now it names the rows and columns the table has."""
    import re

    import vitfsdp.analysis.__main__ as cli
    from vitfsdp.analysis.lines import RATIO_COLUMNS

    bullet = cli.__doc__.split("- ``framework_ratio.csv``:")[1].split("\n- ")[0]
    assert "completed a point" not in bullet and "no partner" not in bullet
    assert "every point both PyTorch and JAX ran, whatever their\n  runs' status" in bullet
    named = set(re.findall(r"``(\w+)``", bullet))
    assert {"ratio_low", "ratio_high", "torch_failed", "jax_failed", "difference"} <= named
    assert named - {"framework_ratio_table"} <= set(RATIO_COLUMNS)
    assert "completed a point" not in cli.__doc__


def test_the_ratio_table_carries_each_sides_final_loss(tmp_path: Path) -> None:
    """``torch_loss`` and ``jax_loss``: the median of each side's runs' final loss; where
    one side stalled (PyTorch at 3.2 and 3.0) and the other learned (JAX at 0.01), the
    section says the two did not train alike; where both ended alike, it says nothing."""
    from vitfsdp.analysis.report import framework_text

    for name, framework, repeat, loss in (("t0", "torch", 0, 3.2), ("t1", "torch", 1, 3.0),
                                          ("j0", "jax", 0, 0.01)):
        info = _info(framework, strategy="FULL_SHARD")
        info["config"]["repeat"] = repeat
        write_run(tmp_path / "parted" / name, info, 100.0, busy=0.95, loss=loss)
    runs = collect_runs(tmp_path / "parted")
    ratio = framework_ratio_table(runs)
    row = ratio.iloc[0]
    assert (row["torch_loss"], row["jax_loss"]) == (pytest.approx((3.2 + 3.0) / 2),
                                                    pytest.approx(0.01))
    assert ("did not train alike at vit_tiny FULL_SHARD at 1 node(s): final loss PyTorch "
            "3.1, JAX 0.01") in framework_text(ratio, runs)
    for framework, loss in (("torch", 5.75), ("jax", 5.76)):
        write_run(tmp_path / "alike" / framework, _info(framework, strategy="FULL_SHARD"), 100.0,
                  busy=0.95, loss=loss)
    alike = collect_runs(tmp_path / "alike")
    assert "did not train alike" not in framework_text(framework_ratio_table(alike), alike)


def test_final_losses_part_only_where_one_side_learned_and_the_other_did_not() -> None:
    """The rule: the higher at least 1 nat and 10 times the lower. Repeats of one program
    near zero (the H100 sweep's 0.021 against 0.082) and two sides at chance do not part."""
    from vitfsdp.analysis.report import loss_parted

    assert loss_parted(3.08, 0.0096) and loss_parted(0.0096, 3.08)
    assert not loss_parted(0.021, 0.082)
    assert not loss_parted(5.75, 5.76)
    assert not loss_parted(3.08, float("nan"))


def test_the_section_says_where_the_attention_was_not_recorded(tmp_path: Path) -> None:
    """Records without ``attention`` (the fake runs, the H100 export): the section says
    the attention each side ran was not recorded; with both recorded, it does not."""
    from vitfsdp.analysis.report import _attention_caveat, _framework_section

    ratio = _ratio(tmp_path, {fw: (_info(fw), 100.0) for fw in ("torch", "jax")})
    assert ratio["torch_attention"].isna().all() and ratio["jax_attention"].isna().all()
    assert "The attention each side ran was not recorded" in _framework_section(ratio).text
    recorded = pd.DataFrame({"torch_attention": ["sdpa"], "jax_attention": ["cudnn"]})
    assert "not recorded" not in _attention_caveat(recorded)
    jax_only = pd.DataFrame({"torch_attention": ["sdpa"], "jax_attention": [None]})
    assert "The attention JAX ran was not recorded" in _attention_caveat(jax_only)


def test_a_pair_at_world_size_1_is_said_to_have_no_collectives(tmp_path: Path) -> None:
    """FULL_SHARD on one GPU shards nothing: no all-gather sentence, the one-GPU one; on
    two GPUs, the all-gather sentence."""
    from vitfsdp.analysis.report import framework_text

    for per_node, sweep in ((1, tmp_path / "one"), (2, tmp_path / "two")):
        for fw in ("torch", "jax"):
            write_run(sweep / fw, _info(fw, per_node=per_node, strategy="FULL_SHARD"), 100.0,
                      busy=0.95)
    one = collect_runs(tmp_path / "one")
    text = framework_text(framework_ratio_table(one), one)
    assert ("At world size 1 (FULL_SHARD): one GPU (or rank), no sharding and no collectives; "
            "the ratio compares the step's compute and host loop only") in text
    assert "JAX gathers each unit's parameters" not in text
    two = collect_runs(tmp_path / "two")
    text = framework_text(framework_ratio_table(two), two)
    assert "Under FULL_SHARD JAX gathers each unit's parameters once a step" in text
    assert "world size 1" not in text


H100_EXPORTS = [Path(__file__).parents[2] / "docs" / "data" / f"gpu-h100-2026-11-26-{name}-runs.csv"
                for name in ("sweep", "jax")]


def test_the_h100_pair_says_what_its_ratio_cannot_show() -> None:
    """The committed H100 pair (one GPU, FULL_SHARD, no attention recorded; PyTorch stalled
    at a loss near 3, JAX near 0; JAX compiled for 30 s): the section says each, with the
    figures read from the exports."""
    from vitfsdp.analysis.collect import read_runs_csv
    from vitfsdp.analysis.report import framework_text

    runs, _ = read_runs_csv(H100_EXPORTS)
    ratio = framework_ratio_table(runs)
    text = framework_text(ratio, runs)
    jax = runs[runs["framework"] == "jax"]
    assert ratio["jax_loss"].iloc[0] == pytest.approx(jax["loss"].iloc[0])
    assert (f"final loss PyTorch {ratio['torch_loss'].iloc[0]:.3g}, JAX "
            f"{jax['loss'].iloc[0]:.3g}") in text
    assert "did not train alike" in text
    assert "The attention each side ran was not recorded" in text
    assert "one GPU (or rank), no sharding and no collectives" in text
    assert "JAX gathers each unit's parameters" not in text
    assert (f"compile (`compile_s`) PyTorch in its warm-up window, not timed apart, JAX "
            f"{jax['compile_s'].iloc[0]:.1f} s (1 run)") in text


def test_start_up_is_given_per_framework() -> None:
    """JAX's start-up holds its compilation: the cost section's start-up line gives each
    framework's where both ran (not one pooled median), and the framework section each
    one's median start-up and compile time."""
    from vitfsdp.analysis.report import _startup_compile_text, _startup_text

    runs = pd.DataFrame({"framework": ["torch"] * 3 + ["jax"] * 3, "nodes": [1] * 6,
                         "startup_s": [3.1, 4.0, 5.5, 13.8, 18.0, 20.1],
                         "compile_s": [None, None, None, 3.6, 6.2, 7.4]})
    text = _startup_text(runs)
    assert "PyTorch median 4 s (3-6 s, 3 runs); JAX median 18 s (14-20 s, 3 runs)" in text
    assert ("start-up (`startup_s`) PyTorch 4.0 s (3.1-5.5 s, 3 runs), JAX 18.0 s "
            "(13.8-20.1 s, 3 runs); compile (`compile_s`) PyTorch in its warm-up window, not "
            "timed apart, JAX 6.2 s (3.6-7.4 s, 3 runs)") in _startup_compile_text(runs)
    torch_only = runs[runs["framework"] == "torch"]
    assert "median 4 s (3-6 s, 3 runs)" in _startup_text(torch_only)
    assert "PyTorch median" not in _startup_text(torch_only)
