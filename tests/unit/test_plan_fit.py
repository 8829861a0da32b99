"""The plan's memory verdict (the reserved peak, uncapped, and what a GPU rank holds outside
the allocator, against the device) and its points that cannot run (rows of verdict n/a; the
plan refuses only where no point can run). Review: ``python -m vitfsdp.plan -m model=vit_5b
cluster=cuda8 strategy=DDP,FULL_SHARD,SHARD_GRAD_OP,HYBRID_8GPU nodes=1,2,4,8,16
precision=bf16`` printed the device's 79.2 GiB as the peak of 10 of its 13 fitting points."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from tests.conftest import REPO
from vitfsdp.plan import predict
from vitfsdp.plan.__main__ import compose_points, format_plan, main, plan_table
from vitfsdp.plan.memory import GPU_ALLOCATOR_OVERHEAD

REVIEW = ["model=vit_5b", "cluster=cuda8", "precision=bf16"]
H100_GIB = 79.18  # cluster=cuda8's device_memory_gib


def _cfg(*overrides: str):
    (_, cfg), = compose_points([*REVIEW, *overrides])
    return cfg


def test_the_printed_peak_is_the_reserved_one_and_fit_counts_what_is_outside_the_allocator():
    """FULL_SHARD at 1 node printed peak 79.2 (the device: the allocator's reserve capped at
    what was left) and fit; its reserved peak is allocated + 15%, 85.4 GiB, beyond the
    device: it does not fit, and says its allocated peak would (squeezed). SHARD_GRAD_OP at
    16 nodes (76.8 GiB allocated, fitting before with ~1 GiB to spare) does not fit once the
    CUDA context and the world's NCCL communicator count: NO."""
    full = predict(_cfg("strategy=FULL_SHARD", "nodes=1"))
    assert full.device_memory_gib == H100_GIB
    assert full.peak_mem_gib == pytest.approx(full.allocated_gib * (1 + GPU_ALLOCATOR_OVERHEAD))
    assert full.peak_mem_gib > H100_GIB > full.allocated_gib
    from vitfsdp.plan.memory import GPU_CONTEXT_GIB, NCCL_COMMUNICATOR_GIB

    assert full.communicators == 1  # the world's
    assert full.runtime_gib == pytest.approx(GPU_CONTEXT_GIB + NCCL_COMMUNICATOR_GIB)
    assert full.margin_gib == pytest.approx(H100_GIB - full.runtime_gib - full.peak_mem_gib)
    assert full.fits is False and full.verdict == "squeezed" and full.tight is False
    assert f"predicted reserved peak {full.peak_mem_gib:.1f} GiB per GPU + 2.4 GiB" in full.reason
    sgo = predict(_cfg("strategy=SHARD_GRAD_OP", "nodes=16"))
    assert sgo.allocated_gib < H100_GIB < sgo.allocated_gib + sgo.runtime_gib
    assert sgo.fits is False and sgo.verdict == "NO" and not sgo.squeezed
    roomy = predict(_cfg("strategy=FULL_SHARD", "nodes=16", "train.activation_checkpointing=true"))
    assert roomy.fits is True and roomy.verdict == "yes"
    assert roomy.margin_gib == pytest.approx(H100_GIB - roomy.runtime_gib - roomy.peak_mem_gib)


def test_tight_is_a_margin_under_the_profiles_reserve():
    """`tight`: fits, with a margin under cluster.memory_reserve_frac of the device memory."""
    cfg = _cfg("strategy=FULL_SHARD", "nodes=16", "train.activation_checkpointing=true")
    margin = predict(cfg).margin_gib
    for frac, tight in (((margin + 1) / H100_GIB, True), ((margin - 1) / H100_GIB, False)):
        p = predict(dataclasses.replace(cfg, cluster=dataclasses.replace(
            cfg.cluster, memory_reserve_frac=frac)))
        assert (p.fits, p.tight, p.verdict) == (True, tight, "tight" if tight else "yes")
        assert ("; tight: less than cluster.memory_reserve_frac" in p.reason) is tight


def test_the_communicators_a_rank_holds():
    """The world's communicator; a hybrid's shard and replica groups where each has more
    than one rank; none in a world of one."""
    from vitfsdp.plan import communicators
    from vitfsdp.plan.memory import GPU_CONTEXT_GIB

    assert communicators(_cfg("strategy=DDP", "nodes=2")) == 1
    assert communicators(_cfg("strategy=HYBRID_8GPU", "nodes=1")) == 2  # replicas: 1 rank
    assert communicators(_cfg("strategy=HYBRID_8GPU", "nodes=2")) == 3
    one = _cfg("strategy=FULL_SHARD", "nodes=1", "cluster.gpus_per_node=1")
    assert communicators(one) == 0
    assert predict(one).runtime_gib == pytest.approx(GPU_CONTEXT_GIB)


def test_the_context_figure_is_the_committed_h100_records():
    """GPU_CONTEXT_GIB is what NVML saw beyond torch's reserved memory in every torch run
    of the committed one-GPU H100 records (not fitted: the same 1.768 GiB in each)."""
    from vitfsdp.plan.memory import GPU_CONTEXT_GIB

    for name in ("gpu-h100-2026-11-26-sweep-runs.csv", "gpu-h100-2026-11-27-stall-runs.csv"):
        runs = pd.read_csv(REPO / "docs" / "data" / name)
        runs = runs[runs["framework"] == "torch"]
        outside = runs["device_mem_used_gib"] - runs["peak_mem_reserved_gib"]
        assert len(outside) >= 6 and outside.notna().all(), name
        assert (outside - GPU_CONTEXT_GIB).abs().max() < 0.005, (name, list(outside))


def test_the_table_shows_alloc_and_the_uncapped_reserved_peak():
    df = plan_table([*REVIEW, "strategy=FULL_SHARD,SHARD_GRAD_OP", "nodes=1,16"])
    text = format_plan(df)
    header = text.splitlines()[0].split()
    assert header[header.index("alloc") + 1:header.index("alloc") + 4] == ["rsvd", "margin",
                                                                          "fits"]
    rows = {(r.split()[1], r.split()[2]): r.split() for r in text.splitlines()[1:5]}
    assert rows["FULL_SHARD", "1"][6:10] == ["74.3", "85.4", "-8.65", "squeezed"]
    assert rows["SHARD_GRAD_OP", "16"][9] == "NO"
    assert "79.2" not in text.split("\n4 point(s)")[0]  # no peak is the device's size
    assert ("4 point(s): 0 fit, 2 squeezed (the sweep runs them, warned), 2 predicted not to "
            "fit (the sweep skips them)") in text


def test_a_point_that_cannot_run_is_a_row_and_the_others_are_planned(capsys):
    """HYBRID_16GPU at 1 node of 8 ranks cannot run: a row of verdict n/a with its reason,
    named in one line under the table; the other points are planned; exit status 0."""
    sweep = ["-m", "model=vit_base", "cluster=cuda8", "strategy=FULL_SHARD,HYBRID_16GPU",
             "nodes=1,2"]
    assert main([*sweep, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["strategy"], r["nodes"], r["verdict"]) for r in rows] == [
        ("FULL_SHARD", 1, "yes"), ("FULL_SHARD", 2, "yes"), ("HYBRID_16GPU", 1, "n/a"),
        ("HYBRID_16GPU", 2, "yes")]
    na = rows[2]
    assert na["reason"].startswith("strategy=HYBRID_16GPU (strategy.shard_group_size=16): "
                                   "HYBRID_SHARD needs shard groups of 16 ranks")
    assert na["cannot_run"] == "shard groups of 16 ranks > 8 ranks at 1 node"
    assert na["peak_mem_gib"] is None and na["ips"] is None and na["rank"] is None
    assert all(r["ips"] for r in rows if r["verdict"] == "yes")
    assert main(sweep) == 0
    out = capsys.readouterr().out
    (line,) = [ln.split() for ln in out.splitlines()
               if ln.split()[:3] == ["vit_base", "HYBRID_16GPU", "1"]]
    assert line[9] == "n/a" and set(line[6:9] + line[10:]) == {"-"}, line
    flat = " ".join(out.split())
    assert "4 point(s): 3 fit, 0 predicted not to fit (the sweep skips them), 0 unknown, " \
           "1 cannot run (n/a)" in flat
    assert ("1 point cannot run (n/a, not planned): HYBRID_16GPU at 1 node (shard groups of "
            "16 ranks > 8 ranks at 1 node)") in flat


def test_the_plan_refuses_where_no_point_can_run(capsys):
    """One point asked for, or every point impossible: the refusal, one line, exit 2."""
    assert main(["model=vit_base", "cluster=cuda8", "strategy=HYBRID_16GPU", "nodes=1"]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1
    assert err.startswith("error: point model=vit_base cluster=cuda8 strategy=HYBRID_16GPU "
                          "nodes=1: strategy=HYBRID_16GPU (strategy.shard_group_size=16)")
    assert main(["-m", "model=vit_base,vit_huge", "cluster=cuda8", "strategy=HYBRID_16GPU",
                 "nodes=1"]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1
    assert err.startswith("error: none of the 2 points can run; point model=vit_base ")


@pytest.mark.parametrize("k, per_node, nodes, short", [
    (16, 8, 1, "shard groups of 16 ranks > 8 ranks at 1 node"),
    (16, 8, 3, "shard groups of 16 ranks do not divide 24 ranks at 3 nodes"),
    (4, 6, 2, "shard groups of 4 ranks neither fill part of a node of 6 ranks nor whole "
              "nodes"),
    (0, 8, 1, "train.local_batch_size=3 does not split"),  # another refusal: its first clause
])  # fmt: skip
def test_the_short_reason_of_a_point_that_cannot_run(k, per_node, nodes, short):
    from vitfsdp.plan.impossible import short_reason

    composed = {"strategy": {"shard_group_size": k}, "cluster": {"gpus_per_node": per_node},
                "nodes": nodes}
    assert short_reason(composed, "train.local_batch_size=3 does not split; use 4") == short


def test_a_model_that_fits_nowhere_gets_the_fix_its_reasons_name(capsys):
    """Review (Frontier): ViT-5B without checkpointing was NO at every point and nothing
    under the table said that the reasons (--json) name train.activation_checkpointing=true.
    Now one line per model with no point that fits counts the points that would with it,
    as many as the same sweep with it fits; a model where some fit gets no line."""
    points = ["cluster=frontier", "precision=bf16", "strategy=DDP,FULL_SHARD,HYBRID_8GPU",
              "nodes=1,2"]
    assert main(["-m", "model=vit_3b,vit_5b", *points]) == 0
    out = capsys.readouterr().out
    df = plan_table(["model=vit_5b", *points, "train.activation_checkpointing=true"])
    would = int(df["verdict"].isin(("yes", "tight")).sum())
    assert would >= 4, df[["strategy", "nodes", "verdict"]]
    assert (f"vit_5b: 0 of 6 points fit; {would} would with "
            "train.activation_checkpointing=true (add it)") in out.splitlines(), out
    assert not any(ln.startswith("vit_3b: 0 of") for ln in out.splitlines())
    assert main(["model=vit_15b", "cluster=frontier", "precision=bf16", "strategy=DDP",
                 "train.activation_checkpointing=true"]) == 0
    assert ("vit_15b: 0 of 1 point fit; their reasons name no override that fits "
            "(reasons: --json)") in capsys.readouterr().out.splitlines()
