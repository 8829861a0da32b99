"""PyTorch and JAX side by side in the analysis: framework as line style, one colour per
strategy, and the JAX/PyTorch ips ratio table, on record directories written with RunRecords."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from tests.integration.test_analysis import run_cli
from vitfsdp.analysis import collect_runs, framework_ratio_table, plot_weak_scaling, study_tables
from vitfsdp.analysis.report import framework_host_text

#: Global images/s per (framework, strategy, nodes); JAX FULL_SHARD at 2 nodes failed.
IPS = {
    ("torch", "FULL_SHARD", 1): 100.0, ("torch", "FULL_SHARD", 2): 180.0,
    ("torch", "DDP", 1): 200.0, ("torch", "DDP", 2): 300.0,
    ("jax", "FULL_SHARD", 1): 150.0, ("jax", "FULL_SHARD", 2): None,
    ("jax", "DDP", 1): 100.0, ("jax", "DDP", 2): 240.0,
}  # fmt: skip


def _info(framework: str, strategy: str, nodes: int) -> dict:
    """A run.json as each framework writes it: FSDP1-only settings are null under JAX and
    under DDP, and JAX runs add ``compile_s`` to their summary."""
    info = run_info(strategy, nodes)
    info["config"]["framework"] = framework
    if framework == "jax" or strategy == "DDP":
        info["config"]["strategy"] |= {"backward_prefetch": None, "limit_all_gathers": None}
    return info


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    for (framework, strategy, nodes), ips in IPS.items():
        status = "completed" if ips is not None else "failed"
        write_run(tmp_path / f"{framework}_{strategy}_{nodes}", _info(framework, strategy, nodes),
                  ips, status=status)
    return tmp_path


def test_framework_is_the_line_style_and_strategy_the_colour(sweep: Path) -> None:
    ax = plot_weak_scaling(collect_runs(sweep)).axes[0]
    lines = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
    # FSDP1-only settings split no strategy's lines here: left out of the labels
    assert sorted(lines) == ["DDP jax", "DDP torch", "FULL_SHARD jax", "FULL_SHARD torch"]
    torch_fs = lines["FULL_SHARD torch"]
    assert torch_fs.get_linestyle() == "-" and lines["DDP torch"].get_linestyle() == "-"
    assert {lines["DDP jax"].get_linestyle(), lines["FULL_SHARD jax"].get_linestyle()} == {"-."}
    assert lines["DDP jax"].get_color() == lines["DDP torch"].get_color()
    assert lines["FULL_SHARD jax"].get_color() == torch_fs.get_color()
    assert lines["DDP jax"].get_color() != torch_fs.get_color()
    assert list(lines["DDP jax"].get_ydata()) == [100.0, 240.0]
    assert "FULL_SHARD jax nodes=2 (1 failed)" in " ".join(t.get_text() for t in ax.texts)


def test_ratio_table(sweep: Path) -> None:
    df = collect_runs(sweep)
    assert df.loc[df["framework"] == "jax", "engine"].isna().all()  # FSDP1/2 is torch's
    assert (df.loc[df["framework"] == "torch", "engine"] == "fsdp1").all()
    table = framework_ratio_table(df)
    assert list(table.columns) == ["model", "strategy", "nodes", "torch_ips", "jax_ips",
                                   "jax_over_torch", "ratio_low", "ratio_high", "torch_runs",
                                   "jax_runs", "torch_failed", "jax_failed", "difference",
                                   "torch_busy_frac", "jax_busy_frac", "host_bound",
                                   "noisy", "torch_attention", "jax_attention",
                                   "torch_recipe", "torch_loss", "jax_loss"]
    # JAX FULL_SHARD at 2 nodes failed: its row says so, with no ratio
    assert list(zip(table["strategy"], table["nodes"], strict=True)) == [
        ("DDP", 1), ("DDP", 2), ("FULL_SHARD", 1), ("FULL_SHARD", 2)]
    # records without kernels settings or what they resolved to: said so, not guessed
    assert table["torch_recipe"].tolist() == [
        "DDP compile auto, AdamW unrecorded"] * 2 + [
        "FSDP1 compile auto, orig params auto, AdamW unrecorded"] * 2
    assert list(table["jax_over_torch"][:3]) == pytest.approx([0.5, 0.8, 1.5])
    assert pd.isna(table["jax_over_torch"].iloc[3])
    assert (table["torch_failed"].tolist(), table["jax_failed"].tolist()) == \
        ([0, 0, 0, 0], [0, 0, 0, 1])
    # one run a side, windows ±1 images/s apart: each ratio beyond the windows, not a result
    assert list(table["difference"]) == ["one run: not established"] * 3 + [
        "no result: jax failed (1 of 1 runs)"]
    assert framework_ratio_table(df, noise=1.6)["difference"].tolist() == [
        "one run: not established", "within observed noise", "within observed noise",
        "no result: jax failed (1 of 1 runs)"]
    # CPU ranks: no busy share, so whether a host loop decided a ratio is not known
    assert table[["torch_busy_frac", "jax_busy_frac"]].isna().all().all()
    assert table["host_bound"].isna().all()
    assert "not measured here" in framework_host_text(table)


def test_a_framework_is_faster_only_over_repeats(tmp_path: Path) -> None:
    """DDP at 1 node: PyTorch 200-203, JAX 100-102, three runs each: JAX is slower as a
    result; with two JAX runs too few; with one it rests on one run; and the report counts
    the results."""
    from vitfsdp.analysis.report import report_sections

    for framework, values in (("torch", (200.0, 203.0, 201.0)), ("jax", (100.0, 102.0, 101.0))):
        for repeat, ips in enumerate(values):
            info = _info(framework, "DDP", 1)
            info["config"]["repeat"] = repeat
            write_run(tmp_path / f"{framework}_{repeat}", info, ips)
    df = collect_runs(tmp_path)
    row = framework_ratio_table(df).iloc[0]
    assert (row["torch_runs"], row["jax_runs"], row["difference"]) == (3, 3, "beyond the spread")
    twice = df[~df["run_dir"].str.endswith("jax_2")]
    assert framework_ratio_table(twice).iloc[0]["difference"] == "too few runs: not established"
    once = twice[~twice["run_dir"].str.endswith("jax_1")]
    assert framework_ratio_table(once).iloc[0]["difference"] == "one run: not established"
    section = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}["PyTorch and JAX"]
    # CPU ranks: the busy share is not measured, so the pair is not counted as not host-bound
    assert "0 of 0 pairs measured not host-bound are (`difference`)" in section.text
    assert ("At 1 pair the device busy share was not measured (on CPU ranks, where the host "
            "is the device)") in section.text


def _gpu_pair_ratio(sweep: Path, applied: dict) -> pd.DataFrame:
    """The ratio table of one DDP point on an H100 run by both frameworks, each with its
    run.json ``applied`` from ``applied`` (framework → dict)."""
    for framework in ("torch", "jax"):
        info = _info(framework, "DDP", 1)
        info["device"] |= {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"}
        info["applied"] = applied[framework]
        write_run(sweep / framework, info, 200.0, busy=0.95)
    return framework_ratio_table(collect_runs(sweep))


def test_the_ratio_says_when_the_two_ran_different_attention(tmp_path: Path) -> None:
    """Both H100 records ran torch's sdpa against JAX's XLA attention: the ratio table names
    each side's attention, and where no side was host-bound the report says that the
    attention kernels' difference is part of every ratio."""
    ratio = _gpu_pair_ratio(tmp_path / "apart", {
        "torch": {"fused_attn": True},
        "jax": {"attention": "jax.nn.dot_product_attention(implementation='xla')"}})
    assert ratio[["torch_attention", "jax_attention"]].values.tolist() == [["sdpa", "xla"]]
    assert framework_host_text(ratio).endswith(
        "the ratios compare the frameworks' steps on the device. The two ran different "
        "attention (PyTorch sdpa, JAX xla): the attention kernels' difference is part of "
        "every ratio.")
    cpu = ratio.assign(host_bound=pd.array([pd.NA], dtype="boolean"))  # not measured, too
    assert framework_host_text(cpu).endswith("is part of every ratio.")
    same = _gpu_pair_ratio(tmp_path / "same", {"torch": {"fused_attn": False},
                                               "jax": {"attention": "einsum_softmax"}})
    assert same[["torch_attention", "jax_attention"]].values.tolist() == [["written out"] * 2]
    assert "attention" not in framework_host_text(same)


#: (torch busy, JAX busy) per (strategy, nodes) on a GPU: PyTorch host-bound at FULL_SHARD 1
#: node, JAX not measured at DDP 2 nodes (ROCm, say)
BUSY = {("FULL_SHARD", 1): (0.38, 0.93), ("DDP", 1): (0.95, 0.97), ("DDP", 2): (0.96, None)}


def test_ratio_rows_say_where_either_framework_was_host_bound(tmp_path: Path) -> None:
    for (framework, strategy, nodes), ips in IPS.items():
        info = _info(framework, strategy, nodes)
        info["device"] |= {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"}
        busy = BUSY.get((strategy, nodes), (None, None))[framework == "jax"]
        write_run(tmp_path / f"{framework}_{strategy}_{nodes}", info, ips,
                  status="completed" if ips is not None else "failed", busy=busy)
    ratio = framework_ratio_table(collect_runs(tmp_path))
    table = ratio.set_index(["strategy", "nodes"])
    assert table.loc[("FULL_SHARD", 1), ["torch_busy_frac", "jax_busy_frac"]].tolist() == \
        pytest.approx([0.38, 0.93])
    flags = [None if pd.isna(v) else bool(v) for v in table["host_bound"]]
    # DDP 1, DDP 2 (JAX not measured), FULL_SHARD 1, FULL_SHARD 2 (JAX failed)
    assert flags == [False, None, True, None]
    text = framework_host_text(ratio)
    assert "vit_tiny FULL_SHARD at 1 node(s)" in text and "DDP" not in text
    assert "compares the two host loops" in text
    result = run_cli(str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "host_bound" in result.stdout and "compares the two host loops" in result.stdout


def test_ratio_table_empty_with_one_framework(sweep: Path) -> None:
    df = collect_runs(sweep)
    assert framework_ratio_table(df[df["framework"] == "torch"]).empty


def test_cli_writes_ratio_csv(sweep: Path) -> None:
    result = run_cli(str(sweep))
    assert result.returncode == 0, result.stderr
    ratio = pd.read_csv(sweep / "analysis" / "framework_ratio.csv")
    assert list(ratio["jax_over_torch"][:3]) == pytest.approx([0.5, 0.8, 1.5])
    assert ratio["difference"].iloc[3] == "no result: jax failed (1 of 1 runs)"
    assert "JAX / PyTorch images/s:" in result.stdout


def test_cli_says_what_the_reports_framework_section_says(sweep: Path) -> None:
    """The terminal gives the report's words on the ratio table: how many ratios are
    results, the PyTorch recipe, the hosts and what the programs run differently."""
    from vitfsdp.analysis.report import framework_text, report_sections

    df = collect_runs(sweep)
    tables = study_tables(df, 1000)
    section = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"]
    words = framework_text(tables["framework_ratio"], df)
    assert words in section.text
    result = run_cli(str(sweep))
    assert result.returncode == 0, result.stderr
    assert words in result.stdout
    for part in ("0 of 0 pairs measured not host-bound are (`difference`)",
                 "At 3 pairs the device busy share was not measured (on CPU ranks",
                 "PyTorch ran 2 recipes (`torch_recipe`",
                 "Under FULL_SHARD JAX gathers each unit's parameters once a step",
                 "No ratio at vit_tiny FULL_SHARD at 2 node(s) (no result: jax failed (1 of 1 "
                 "runs)): a side completed no run there (failures.csv says why)."):
        assert part in result.stdout


def test_cli_names_the_runs_that_paired_with_nothing(sweep: Path) -> None:
    """JAX never ran FULL_SHARD at 2 nodes: PyTorch's completed run there has no row, and
    the terminal says so as the report does; with JAX's DDP runs on other GPUs per node
    nothing pairs, and the terminal says that instead of printing a table."""
    (sweep / "jax_FULL_SHARD_2").rename(sweep.parent / "jax_FULL_SHARD_2")
    result = run_cli(str(sweep))
    assert result.returncode == 0, result.stderr
    assert ("is in no row: 1 of 4 PyTorch runs (vit_tiny FULL_SHARD at 2 node(s)) and none of "
            "the 3 JAX runs.") in result.stdout
    for run in sweep.glob("jax_*"):
        run.rename(sweep.parent / run.name)
    for nodes in (1, 2):
        info = _info("jax", "DDP", nodes)
        info["world"] |= {"size": nodes, "ranks_per_node": 1}
        write_run(sweep / f"jax_DDP_{nodes}_one_gpu", info, 100.0)
    result = run_cli(str(sweep))
    assert result.returncode == 0, result.stderr
    assert "JAX / PyTorch images/s:" not in result.stdout
    assert ("so there is no ratio: 4 of 4 PyTorch runs (vit_tiny DDP ranks_per_node=2 "
            "world_size=2 at 1 node(s); vit_tiny DDP ranks_per_node=2 world_size=4 at 2 "
            "node(s); vit_tiny FULL_SHARD ranks_per_node=2 world_size=2 at 1 node(s); vit_tiny "
            "FULL_SHARD ranks_per_node=2 world_size=4 at 2 node(s)) and 2 of 2 JAX runs "
            "(vit_tiny DDP ranks_per_node=1 world_size=1 at 1 node(s); vit_tiny DDP "
            "ranks_per_node=1 world_size=2 at 2 node(s)).") in result.stdout


def test_swept_torch_setting_keeps_its_lines_and_ratio_rows(sweep: Path) -> None:
    info = _info("torch", "FULL_SHARD", 1)
    info["config"]["strategy"]["backward_prefetch"] = "BACKWARD_POST"
    write_run(sweep / "torch_post_1", info, 75.0)
    df = collect_runs(sweep)
    labels = {ln.get_label() for ln in plot_weak_scaling(df).axes[0].lines}
    assert {"FULL_SHARD BACKWARD_PRE torch", "FULL_SHARD BACKWARD_POST torch",
            "FULL_SHARD jax"} <= labels
    table = framework_ratio_table(df)
    fs = table[(table["strategy"] == "FULL_SHARD") & (table["nodes"] == 1)]
    assert list(fs["backward_prefetch"]) == ["BACKWARD_POST", "BACKWARD_PRE"]
    assert list(fs["jax_over_torch"]) == pytest.approx([2.0, 1.5])  # the same JAX run
