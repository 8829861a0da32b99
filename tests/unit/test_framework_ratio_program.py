"""JAX's FULL_SHARD keeps each unit's gathered parameters to the backward, as torch's
SHARD_GRAD_OP does: where a sweep ran torch's SHARD_GRAD_OP at a JAX FULL_SHARD point,
framework_ratio.csv pairs them too (``torch_strategy``), beside the FULL_SHARD pair, and the
report says which pair compares which program. Records written with RunRecords."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.lines import framework_partners, framework_ratio_table

#: Images/s of each (framework, strategy) at 1 node: three runs each, 0, +1, +2.
IPS = {("torch", "FULL_SHARD"): 200.0, ("torch", "SHARD_GRAD_OP"): 240.0,
       ("jax", "FULL_SHARD"): 300.0, ("torch", "DDP"): 400.0, ("jax", "DDP"): 410.0}


def _sweep(root: Path, which: tuple[tuple[str, str], ...] = tuple(IPS)) -> pd.DataFrame:
    for framework, strategy in which:
        for repeat in range(3):
            info = run_info("FULL_SHARD" if strategy == "SHARD_GRAD_OP" else strategy, 1)
            info["config"] |= {"repeat": repeat, "framework": framework}
            info["config"]["strategy"] |= {"name": strategy, "sharding_strategy": strategy}
            if framework == "jax" or strategy == "DDP":
                info["config"]["strategy"] |= {"backward_prefetch": None,
                                               "limit_all_gathers": None}
            write_run(root / f"{framework}_{strategy}_{repeat}", info,
                      IPS[framework, strategy] + repeat)
    return collect_runs(root)


def test_jax_full_shard_is_paired_with_torch_shard_grad_op_too(tmp_path: Path) -> None:
    table = framework_ratio_table(_sweep(tmp_path))
    assert "torch_strategy" in table
    full = table[table["strategy"] == "FULL_SHARD"]
    full = full.set_index(full["torch_strategy"].fillna("same"))
    assert set(full.index) == {"same", "SHARD_GRAD_OP"}
    assert full.loc["same", "torch_ips"] == 201.0 and full.loc["SHARD_GRAD_OP",
                                                                 "torch_ips"] == 241.0
    assert full.loc["SHARD_GRAD_OP", "jax_over_torch"] == 301.0 / 241.0
    assert full.loc["SHARD_GRAD_OP", "difference"] == "beyond the spread"
    assert full["torch_runs"].tolist() == [3, 3] and full["jax_runs"].tolist() == [3, 3]
    ddp = table[table["strategy"] == "DDP"]
    assert len(ddp) == 1 and pd.isna(ddp["torch_strategy"].iloc[0])
    assert table.index.size == 3 and table["strategy"].tolist() == [
        "DDP", "FULL_SHARD", "FULL_SHARD"]


def test_a_sweep_without_shard_grad_op_keeps_its_table(tmp_path: Path) -> None:
    table = framework_ratio_table(_sweep(tmp_path, (("torch", "FULL_SHARD"),
                                                    ("jax", "FULL_SHARD"))))
    assert "torch_strategy" not in table and len(table) == 1


def test_shard_grad_op_alone_pairs_by_program_and_counts_as_paired(tmp_path: Path) -> None:
    """No torch FULL_SHARD: the JAX FULL_SHARD runs pair with torch's SHARD_GRAD_OP only,
    and neither side's runs are called unpaired."""
    from vitfsdp.analysis.report import framework_text, unpaired_text

    df = _sweep(tmp_path, (("torch", "SHARD_GRAD_OP"), ("jax", "FULL_SHARD")))
    table = framework_ratio_table(df)
    assert table[["strategy", "torch_strategy"]].values.tolist() == [
        ["FULL_SHARD", "SHARD_GRAD_OP"]]
    assert framework_partners(df)["paired"].all()
    assert unpaired_text(df) == ""
    text = framework_text(table, df)
    assert "keeps them to the backward as torch's SHARD_GRAD_OP does" in text
    assert "those ratios include one all-gather per unit" not in text


def test_the_report_says_which_pair_compares_which_program(tmp_path: Path) -> None:
    from vitfsdp.analysis.report import framework_text

    df = _sweep(tmp_path, (("torch", "FULL_SHARD"), ("torch", "SHARD_GRAD_OP"),
                           ("jax", "FULL_SHARD")))
    text = framework_text(framework_ratio_table(df), df)
    assert "those ratios include one all-gather per unit" in text
    assert ("Where `torch_strategy` is set (JAX FULL_SHARD against torch SHARD_GRAD_OP), a "
            "row pairs by program") in text
