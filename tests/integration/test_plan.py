"""Per-rank model-state bytes and the dry run: billion-parameter models, nothing allocated."""

from __future__ import annotations

import dataclasses
import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from tests.conftest import read, run_module
from vitfsdp.models import ModelConfig, build_model, count_params
from vitfsdp.parallel import StrategyConfig
from vitfsdp.plan import GIB, predict, predict_run, state_bytes
from vitfsdp.plan.calibrate import calibrate
from vitfsdp.plan.memory import CPU_BASELINE_GIB

FULL = StrategyConfig(name="FULL_SHARD", sharding_strategy="FULL_SHARD")
HYBRID2 = StrategyConfig(name="HYBRID_2GPU", sharding_strategy="HYBRID_SHARD",
                         shard_group_size=2)
HYBRID1 = StrategyConfig(name="HYBRID_1GPU", sharding_strategy="HYBRID_SHARD",
                         shard_group_size=1)
DDP = StrategyConfig(name="DDP", sharding_strategy="DDP")


@pytest.mark.parametrize(("strategy", "world", "group"),
                         [(FULL, 8, 8), (HYBRID2, 8, 2), (HYBRID1, 8, 1), (DDP, 8, 1)])
def test_shard_group_size(strategy, world, group):
    assert strategy.shard_group(world) == group
    assert strategy.replicas(world) == world // group


def test_full_shard_divides_params_grads_and_adamw_states():
    model = ModelConfig(name="vit_base")
    p = count_params(build_model(model, 1000, device="meta"))
    b = state_bytes(model, 1000, FULL, world_size=4)
    shard = -(-p // 4)
    assert (b.param_bytes, b.grad_bytes, b.optimizer_bytes) == (4 * shard, 4 * shard, 8 * shard)
    meta = build_model(model, 1000, device="meta")
    assert b.unit_bytes == 4 * count_params(meta.blocks[0])  # one block, gathered in fp32
    ddp = state_bytes(model, 1000, DDP, world_size=4)
    assert (ddp.param_bytes, ddp.unit_bytes) == (4 * p, 0)
    bf16 = state_bytes(model, 1000, FULL, world_size=4, precision="bf16")
    assert bf16.unit_bytes * 2 == b.unit_bytes


def test_dry_run_of_vit_15b_on_128_ranks_prints_bytes_without_building(tmp_path):
    proc = run_module("vitfsdp.train", "model=vit_15b", "strategy=FULL_SHARD", "nodes=16",
                      "cluster.gpus_per_node=8", "dry_run=true", f"hydra.run.dir={tmp_path}",
                      "hydra.output_subdir=null", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "vit_15b FULL_SHARD on 128 ranks" in out and "14,720.3M parameters" in out
    figures = dict(line.rsplit(None, 1) for line in out.splitlines()[1:])
    assert float(figures["  parameters"]) == pytest.approx(
        4 * -(-14_720_323_960 // 128) / GIB, abs=1e-3)
    assert float(figures["  optimizer (AdamW)"]) == pytest.approx(
        2 * float(figures["  parameters"]), abs=2e-3)
    assert not (tmp_path / "run.json").exists()  # nothing ran


# --- predictions ---------------------------------------------------------------------------

STUDY = ["cluster=frontier", "precision=bf16", "train.local_batch_size=32",
         "train.activation_checkpointing=true"]  # the ORNL study's settings (models.py)
STUDY_MODELS = ("vit_base", "vit_huge", "vit_1b", "vit_3b", "vit_5b", "vit_15b")
#: Parameters in millions, the study's table (models.py): the figures the test reasons with.
TABLE_PARAMS_M = {"vit_base": 87, "vit_huge": 635, "vit_1b": 914, "vit_3b": 3067,
                  "vit_5b": 5349, "vit_15b": 14720}


@pytest.fixture(scope="module")
def study_configs():
    """RunConfig of every strategy on the frontier profile with the study's settings."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from vitfsdp.config import CONF_DIR, group_options, register_configs, to_run_config

    register_configs()
    out = {}
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        for strategy in (g for g in group_options("strategy") if g != "HYBRID_SHARD"):
            cfg = compose("config", [*STUDY, f"strategy={strategy}", "nodes=2"])
            with open_dict(cfg):
                cfg.cluster.required = []
            out[strategy] = to_run_config(cfg)
    return out


def _point(cfg, model: str, nodes: int = 1, strategy=None):
    from vitfsdp.models import ModelConfig

    return dataclasses.replace(cfg, model=ModelConfig(name=model), nodes=nodes,
                               strategy=strategy or cfg.strategy)


def test_frontier_plan_marks_exactly_the_points_that_cannot_fit_in_64_gb(study_configs):
    """Independent reasoning: AdamW with fp32 master weights holds 16 bytes a parameter
    (4 weight + 4 gradient + 8 moments; ZeRO sec. 3.1), divided by the ranks the strategy
    shards over (8 × nodes for FULL_SHARD / SHARD_GRAD_OP, k for HYBRID_kGPU, 1 otherwise);
    DDP adds 4 bytes of gradient buckets. With activation checkpointing at batch 32 the
    rest is a few GiB, so a point's allocated peak fits iff that bound is under 64 GiB with
    room to spare: every point is at least 6 GiB away from the line, so the answer is not a
    coin toss. A point fits when its reserved peak (allocated + the allocator's 15%) and
    what lies outside the allocator do; three kinds of point whose bound is 55-57 GiB fit
    only with the allocator's cache squeezed (`squeezed`, run by the sweep, warned), two of
    which the ORNL study ran on 64 GiB (PUBLISHED_ALLOCATED_GIB: 59.8 and 58.2 GiB)."""
    group = {"DDP": 1, "NO_SHARD": 1, "HYBRID_1GPU": 1, "HYBRID_2GPU": 2, "HYBRID_4GPU": 4,
             "HYBRID_8GPU": 8, "HYBRID_16GPU": 16}
    checked = 0
    for name, cfg in study_configs.items():
        for model in STUDY_MODELS:
            for nodes in (1, 2, 16, 128):
                g = group.get(name, 8 * nodes)
                if g > 8 * nodes:
                    continue  # HYBRID_16GPU needs 2 nodes
                per_param = 20 if name == "DDP" else 16
                bound = TABLE_PARAMS_M[model] * 1e6 * per_param / g / GIB
                assert abs(bound - 64) > 6, (name, model, nodes, bound)
                p = predict(_point(cfg, model, nodes))
                squeezed = (name, model) in SQUEEZED_ON_64_GIB and (nodes == 1 or name
                                                                     != "SHARD_GRAD_OP")
                assert p.verdict == ("squeezed" if squeezed else "NO" if bound > 64
                                     else "yes"), (name, model, nodes, bound, p.reason)
                assert p.fits is (p.peak_mem_gib + p.runtime_gib <= 64.0)  # the printed peak
                assert p.margin_gib == pytest.approx(64.0 - p.runtime_gib - p.peak_mem_gib)
                assert p.peak_mem_gib == pytest.approx(1.15 * p.allocated_gib)  # not capped
                checked += 1
    assert checked == 9 * 6 * 4 - 6
    assert "> 64.0 GiB (cluster.device_memory_gib), margin -" in predict(
        _point(study_configs["DDP"], "vit_5b")).reason


#: Points of the study whose reserved peak does not fit a 64 GiB GCD but whose allocated peak
#: does (SHARD_GRAD_OP at 1 node only: its gathered units shrink with more ranks).
SQUEEZED_ON_64_GIB = {("DDP", "vit_3b"), ("HYBRID_4GPU", "vit_15b"),
                      ("SHARD_GRAD_OP", "vit_15b")}


def test_a_point_that_fits_only_with_activation_checkpointing_says_so(study_configs):
    """ViT-15B FULL_SHARD on one Frontier node without checkpointing: its activations at
    batch 32 do not fit 64 GiB, its 16 bytes a parameter over 8 GCDs (28 GiB) do; the
    refusal names the setting and the peak it would have. DDP, whose states alone are
    beyond the device, is not offered it."""
    cfg = _point(study_configs["FULL_SHARD"], "vit_15b")
    off = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, activation_checkpointing=False))
    p, on = predict(off), predict(cfg)
    assert p.fits is False and on.fits is True
    assert p.reason.endswith(f"; fits with train.activation_checkpointing=true (predicted "
                             f"peak {on.peak_mem_gib:.1f} GiB)"), p.reason
    ddp = predict(_point(study_configs["DDP"], "vit_15b"))
    assert ddp.fits is False and "activation_checkpointing" not in ddp.reason


#: Held-back GPU figures: max allocated GPU memory (GiB) of the ORNL ViT-FSDP study on one
#: Frontier node, local batch 32, bf16, activation checkpointing (jqyin/AmSC-At-Scale-
#: Services-OLCF, ViT-FSDP/src/performance_plots/mem_alloc_1G.py and mem_alloc_NG.py).
PUBLISHED_ALLOCATED_GIB = {
    ("DDP", "vit_huge"): 13.2812, ("DDP", "vit_1b"): 18.7437, ("DDP", "vit_3b"): 59.8159,
    ("NO_SHARD", "vit_huge"): 10.4048, ("NO_SHARD", "vit_1b"): 14.691,
    ("NO_SHARD", "vit_3b"): 47.3326, ("HYBRID_1GPU", "vit_3b"): 47.3302,
    ("HYBRID_2GPU", "vit_huge"): 5.6956, ("HYBRID_2GPU", "vit_1b"): 7.9241,
    ("HYBRID_2GPU", "vit_3b"): 24.6311, ("HYBRID_2GPU", "vit_5b"): 41.8989,
    ("HYBRID_4GPU", "vit_5b"): 22.1659, ("HYBRID_4GPU", "vit_15b"): 58.2116,
    ("HYBRID_8GPU", "vit_5b"): 12.2433, ("HYBRID_8GPU", "vit_15b"): 31.0713,
    ("HYBRID_16GPU", "vit_5b"): 7.5339, ("HYBRID_16GPU", "vit_15b"): 17.8344,  # 2 nodes
}


def test_memory_against_the_published_gpu_figures(study_configs):
    """Allocated peak within 20% of the study's measurements, ViT-Huge and up (ViT-Base's
    1.3-2.5 GiB are dominated by fixed costs the plan does not model: 15-24% under, its DDP
    row at bf16 and ORNL's "GB" read as GiB; docs/plan.md, "How good it is")."""
    errors = {}
    for (name, model), measured in PUBLISHED_ALLOCATED_GIB.items():
        nodes = 2 if name == "HYBRID_16GPU" else 1  # a shard group of 16 spans two nodes
        p = predict(_point(study_configs[name], model, nodes))
        assert p.shard_group_size == int(name.removeprefix("HYBRID_").removesuffix("GPU")
                                         if name.startswith("HYBRID") else 1)
        errors[name, model] = p.allocated_gib / measured - 1
    assert {n for n, _ in errors} >= {f"HYBRID_{k}GPU" for k in (2, 4, 8, 16)}
    assert max(abs(e) for e in errors.values()) < 0.20, errors


def test_plan_cli_expands_a_sweep_like_hydra_and_writes_csv(tmp_path):
    csv = tmp_path / "plan.csv"
    proc = run_module("vitfsdp.plan", "-m", "model=vit_base,vit_15b", "cluster=frontier",
                      "strategy=DDP,FULL_SHARD", "nodes=2", "precision=bf16",
                      "--csv", str(csv), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = pd.read_csv(csv)
    assert len(rows) == 4 and set(rows["model"]) == {"vit_base", "vit_15b"}
    assert rows.set_index(["model", "strategy", "nodes"])["world_size"].to_dict()[
        "vit_15b", "FULL_SHARD", 2] == 16
    ddp_15b = rows[(rows.model == "vit_15b") & (rows.strategy == "DDP")]
    assert not ddp_15b["fits"].any() and "NO" in proc.stdout and "yes" in proc.stdout
    # what the sweep would spend: the points that run, at their predicted steps + start-up
    runs = rows[rows["fits"]]
    hours = (runs["nodes"] * (runs["steps"] * runs["step_time_s"] + 300) / 3600).sum()
    fit = int(rows["fits"].sum())
    assert (f"4 point(s): {fit} fit, {4 - fit} predicted not to fit (the sweep skips them), "
            f"0 unknown\nthe {fit} that run: "
            f"{f'{hours:,.2g}' if hours < 1 else f'{hours:,.1f}'} node hours") in proc.stdout
    # the frameworks of a preset are a column of their own, not a legend under the table
    vertex = run_module("vitfsdp.plan", "-m", "experiment=vertex_single_node", "cluster=cuda8",
                        cwd=tmp_path, timeout=120)
    header = vertex.stdout.splitlines()[0].split()
    assert header[:4] == ["model", "strategy", "framework", "nodes"], vertex.stdout[:500]
    assert "#0:" not in vertex.stdout
    bad = run_module("vitfsdp.plan", "strategy=BOGUS", cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and "strategy=BOGUS is unknown" in bad.stderr


def test_a_preset_plans_its_own_sweep_and_the_command_line_wins():
    """``experiment=NAME`` plans the points its file sweeps (``hydra.sweeper.params``), as
    the sweep runs them; a key also given on the command line takes that value instead."""
    from vitfsdp.plan.__main__ import compose_points

    got = [(c.strategy.name, c.nodes) for _, c in compose_points(["experiment=demo_apart"])]
    assert got == [("FULL_SHARD", 1), ("FULL_SHARD", 4), ("HYBRID_2GPU", 1),
                   ("HYBRID_2GPU", 4)]
    one = compose_points(["experiment=demo_apart", "nodes=2"])
    assert [(c.strategy.name, c.nodes) for _, c in one] == [("FULL_SHARD", 2),
                                                              ("HYBRID_2GPU", 2)]
    assert all(c.cluster.network.emulate for _, c in one)
    assert len(compose_points(["strategy=DDP"])) == 1  # no preset: the point as it is


def test_a_cpu_point_that_releases_host_memory_says_its_step_is_not_modelled():
    """``train.release_host_memory=true`` maps and zero-fills every large tensor afresh, a
    cost the plan does not predict: the prediction says so; a GPU point has no such note."""
    from vitfsdp.plan import RELEASE_HOST_MEMORY_NOTE
    from vitfsdp.plan.__main__ import compose_points

    (_, cfg), = compose_points(["model=vit_tiny", "train.release_host_memory=true"])
    assert RELEASE_HOST_MEMORY_NOTE in predict(cfg, device="cpu").notes
    assert RELEASE_HOST_MEMORY_NOTE not in predict(cfg, device="gpu").notes
    (_, off), = compose_points(["model=vit_tiny"])
    assert RELEASE_HOST_MEMORY_NOTE not in predict(off, device="cpu").notes


def test_cpu_run_memory_within_20_percent_and_calibration(tmp_path):
    """Real 2-rank CPU runs of ViT-Base (87M parameters at 32x32 pixels: model state, not
    activations or the process baseline, is most of its RSS) and ViT-Tiny under DDP and
    FULL_SHARD, with train.release_host_memory (peak RSS without glibc's kept heap): the
    plan's peak RSS within 20% of ViT-Base's measured one for both; --calibrate writes the one
    calibration.csv format, fits a FLOP/s and reports the leave-one-out error: each run
    predicted by a fit to the other three (another model among them)."""
    from vitfsdp.plan.calibrate import (
        CALIBRATION_COLUMNS,
        fit,
        leave_one_out,
        read_runs,
    )

    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "model=vit_base,vit_tiny", "model.img_size=32",
                      "strategy=DDP,FULL_SHARD", "device=cpu", "train.steps=2",
                      "train.warmup_steps=1", "train.log_every=1", "train.local_batch_size=4",
                      "train.release_host_memory=true",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    measured_by = {}
    for run_json in sorted(sweep_dir.rglob("run.json")):
        run = read(run_json)
        assert run["applied"]["cpu_mmap_threshold_bytes"] > 0
        pred = predict_run(run)
        measured = read(run_json.parent / "summary.json")[pred["pred_mem_metric"]]
        assert pred["pred_mem_metric"] == "peak_rss_gib"
        measured_by[run["config"]["model"]["name"], run["config"]["strategy"]["name"]] = measured
        if run["config"]["model"]["name"] != "vit_base":
            continue
        assert measured > 1.5 * CPU_BASELINE_GIB  # the model, not the interpreter, dominates
        assert abs(pred["pred_peak_mem_gib"] / measured - 1) < 0.20, (run_json, pred, measured)
    assert len(measured_by) == 4
    # sharding shows in the measurement
    assert measured_by["vit_base", "FULL_SHARD"] < measured_by["vit_base", "DDP"]
    report = calibrate([sweep_dir])
    table = pd.read_csv(sweep_dir / "calibration.csv")
    assert len(table) == 4 and list(table.columns)[-len(CALIBRATION_COLUMNS):] == \
        CALIBRATION_COLUMNS
    assert sorted(table["measured_mem_gib"]) == pytest.approx(sorted(measured_by.values()))
    assert "cluster.peak_tflops_fp32=" in report and "cluster.plan_efficiency=1" in report
    assert "leave-one-out step time: median |error|" in report
    _, runs = read_runs([sweep_dir])
    errors = leave_one_out(runs)
    fitted = {k: v for k, v in fit(runs).items() if k != "rms_rel_error"}
    in_sample = [predict(dataclasses.replace(m.cfg, cluster=dataclasses.replace(
        m.cfg.cluster, **fitted)), device="cpu").step_time_s / m.step_time_s - 1 for m in runs]
    assert len(errors) == 4 and all(math.isfinite(e) for e in errors), errors
    # each run predicted by a fit to the others: within 10x even on a loaded CI machine
    # (ViT-Tiny's step is mostly fixed overhead, not FLOPs), and not the in-sample figure
    assert all(abs(math.log1p(e)) < math.log(10) for e in errors), errors
    assert errors != pytest.approx(in_sample), (errors, in_sample, fitted)


# --- step time, ranking, table, time limit (issue: the plan's step time) ------------------

NODE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128)
#: Published images/s of the ORNL ViT-FSDP study on Frontier at 1 … 128 nodes, local batch
#: 32 per GCD, bf16, activation checkpointing (jqyin/AmSC-At-Scale-Services-OLCF,
#: ViT-FSDP/src/performance_plots/ips_huge.py, ips_giant.py (ViT-1B), ips_enormous.py
#: (ViT-3B), ips_4B.py (ViT-5B), ips_15B.py; None: not run). DDP is left out: its rows
#: appear to have trained without mixed precision.
PUBLISHED_IPS = {
    ("vit_huge", "NO_SHARD"): (239, 472, 948, 1843, 3669, 7430, 14328, 28279),
    ("vit_huge", "HYBRID_2GPU"): (236, 476, 949, 1890, 3624, 7412, 14664, 27164),
    ("vit_huge", "FULL_SHARD"): (245, 490, 976, 1931, 3743, 7236, 8015, 10265),
    ("vit_1b", "NO_SHARD"): (187, 373, 745, 1435, 2807, 5802, 11460, 21603),
    ("vit_1b", "HYBRID_2GPU"): (188, 377, 753, 1454, 2871, 5611, 9585, 20453),
    ("vit_1b", "FULL_SHARD"): (197, 387, 776, 1518, 2995, 5779, 7806, 4099),
    ("vit_3b", "NO_SHARD"): (76, 153, 301, 591, 1193, 2269, 4468, 8457),
    ("vit_3b", "HYBRID_2GPU"): (79, 155, 306, 587, 1154, 2423, 4668, 7449),
    ("vit_3b", "FULL_SHARD"): (83, 161, 323, 644, 1278, 2511, 3759, 3708),
    ("vit_5b", "HYBRID_4GPU"): (47, 93, 182, 362, 695, 1248, 2120, 3282),
    ("vit_5b", "HYBRID_8GPU"): (48, 96, 189, 388, 766, 1440, 2820, 5565),
    ("vit_5b", "HYBRID_16GPU"): (None, 88, 175, 349, 697, 1360, 2726, 5277),
    ("vit_5b", "FULL_SHARD"): (50, 100, 197, 381, 768, 1307, 2306, 2262),
    ("vit_15b", "HYBRID_4GPU"): (15, 30, 60, 120, 238, 473, 928, 1649),
    ("vit_15b", "HYBRID_8GPU"): (16, 32, 63, 127, 245, 502, 982, 1878),
    ("vit_15b", "HYBRID_16GPU"): (None, 31, 62, 125, 250, 500, 984, 1789),
    ("vit_15b", "FULL_SHARD"): (18, 36, 71, 138, 283, 560, 1113, 1754),
}


def _efficiency_at_128(ips_by_nodes: dict[int, float]) -> float:
    """Weak-scaling efficiency at 128 nodes against the smallest node count."""
    first = min(ips_by_nodes)
    return ips_by_nodes[128] / (ips_by_nodes[first] * 128 / first)


def test_step_time_against_the_published_frontier_measurements(study_configs):
    """The frontier profile as shipped holds data-sheet and RCCL cost-model figures, none
    fitted to these rows (docs/plan.md), so this is an out-of-sample comparison: the
    smallest run's ips within a factor of 2 of the study's for every row (a sanity bound of
    the data-sheet plan, not a tolerance chosen to pass; the errors are printed and in the
    docs), and the study's finding: at 128 nodes FULL_SHARD is predicted below every hybrid
    of its model, its efficiency falls with the node count, and the fall is exposed
    ring latency."""
    errors = {}
    for (model, name), published in PUBLISHED_IPS.items():
        measured = {n: v for n, v in zip(NODE_COUNTS, published, strict=True) if v}
        first = min(measured)
        errors[model, name] = predict(_point(study_configs[name], model, first)).ips / measured[
            first] - 1
    print({k: f"{v:+.0%}" for k, v in errors.items()})
    assert all(-0.5 < e < 1.0 for e in errors.values()), errors
    for model in ("vit_huge", "vit_1b", "vit_3b", "vit_5b", "vit_15b"):
        ips = {name: predict(_point(study_configs[name], model, 128)).ips
               for (m, name) in PUBLISHED_IPS if m == model}
        assert ips["FULL_SHARD"] < min(v for k, v in ips.items() if k != "FULL_SHARD"), ips
    huge = [predict(_point(study_configs["FULL_SHARD"], "vit_huge", n)) for n in (1, 32, 128)]
    eff = [p.ips / (huge[0].ips * n) for p, n in zip(huge, (1, 32, 128), strict=True)]
    assert eff[0] > eff[1] > eff[2], eff
    assert huge[2].exposed_comm_s > 10 * huge[0].exposed_comm_s > 0
    assert huge[2].latency_s > 50 * huge[0].latency_s  # 1023 ring steps against 7


def test_precision_aware_peak_and_tight_margin(study_configs):
    """fp32 DDP is predicted at the fp32 peak (MI250X: 47.85 of 191.5 TFLOP/s, no TF32), so
    its compute is about 4x bf16's; ViT-3B under DDP on one 64 GB GCD fits only with the
    allocator's cache squeezed: `squeezed`, not fitting (the sweep runs it, warned), its reason
    saying what the allocated peak leaves; a point whose margin is under the profile's
    reserve is `tight`, one far below is not."""
    from vitfsdp.plan import peak_flops_for

    ddp = study_configs["DDP"]
    bf16 = predict(_point(ddp, "vit_huge"))
    fp32_cfg = dataclasses.replace(_point(ddp, "vit_huge"), precision="fp32")
    fp32 = predict(fp32_cfg)
    assert peak_flops_for(fp32_cfg, "gpu") == (47.85e12, "fp32")
    assert fp32.peak_tflops == pytest.approx(47.85) and bf16.peak_tflops == pytest.approx(191.5)
    assert fp32.gemm_s / bf16.gemm_s == pytest.approx(191.5 / 47.85, rel=0.35)
    tf32 = dataclasses.replace(fp32_cfg, cluster=dataclasses.replace(
        ddp.cluster, peak_tflops_tf32=None, peak_tflops_fp32=None))
    assert predict(tf32).step_time_s is None  # no fp32 figure: no step time, not bf16's
    squeezed = predict(_point(ddp, "vit_3b"))
    assert squeezed.fits is False and squeezed.tight is False and squeezed.squeezed is True
    assert squeezed.allocated_gib + squeezed.runtime_gib <= 64 < (squeezed.peak_mem_gib
                                                                  + squeezed.runtime_gib)
    assert f"its allocated peak ({squeezed.allocated_gib:.1f} GiB)" in squeezed.reason
    from vitfsdp.plan.__main__ import format_plan, rank_points  # the table says it too

    def table_line(p, model):
        row = {"point": f"model={model}", "model": model, "strategy": "DDP", "nodes": 1,
               "local_batch_size": 32, "precision": "bf16", "activation_checkpointing": True,
               **p.as_dict()}
        (line,) = [ln.split() for ln in format_plan(rank_points(pd.DataFrame([row])))
                   .splitlines() if ln.split()[:1] == [model]]  # not "vit_3b: 0 of 1 ..."
        return line

    line = table_line(squeezed, "vit_3b")
    assert "squeezed" in line and "yes" not in line[6:], line
    assert f"{squeezed.peak_mem_gib:.1f}" in line  # the reserved peak, above the device's 64
    roomy = predict(_point(study_configs["FULL_SHARD"], "vit_base", 2))
    assert roomy.fits is True and roomy.tight is False
    # a reserve of all but 0.32 of the GCD's 64 GiB: the roomy point (about 0.6 GiB) is tight
    wide = dataclasses.replace(study_configs["FULL_SHARD"].cluster, memory_reserve_frac=0.995)
    with pytest.raises(ValueError, match="memory_reserve_frac"):
        dataclasses.replace(wide, memory_reserve_frac=1.5)
    tight = predict(dataclasses.replace(_point(study_configs["FULL_SHARD"], "vit_base", 2),
                                        cluster=wide))
    assert tight.tight is True and tight.verdict == "tight" and "tight" in tight.reason
    assert "tight" in table_line(tight, "vit_base")


def test_collectives_ddp_reduces_fp32_fsdp_bf16_and_latency_grows_with_ranks(study_configs):
    """DDP all-reduces fp32 gradients (4 bytes a parameter), FSDP NO_SHARD in bf16 (2);
    FULL_SHARD's ring latency grows with the world, a hybrid's replica all-reduce uses a
    tree (log2 of the nodes), so its latency barely moves."""
    ddp, no_shard = (predict(_point(study_configs[n], "vit_1b", 2)) for n in ("DDP", "NO_SHARD"))
    assert ddp.all_reduce_gib == pytest.approx(2 * no_shard.all_reduce_gib, rel=1e-3)
    assert ddp.all_reduce_gib * GIB == pytest.approx(4 * ddp.num_params, rel=1e-3)
    full = [predict(_point(study_configs["FULL_SHARD"], "vit_1b", n)).latency_s
            for n in (16, 128)]
    hybrid = [predict(_point(study_configs["HYBRID_8GPU"], "vit_1b", n)).latency_s
              for n in (16, 128)]
    assert full[1] / full[0] == pytest.approx((1024 - 1) / (128 - 1), rel=0.05)
    assert hybrid[1] / hybrid[0] < 1.5


def test_plan_table_ranks_fitting_points_fits_100_columns_without_exponents(study_configs):
    from vitfsdp.plan.__main__ import TABLE_WIDTH, format_plan, rank_points

    rows = []
    for name in ("NO_SHARD", "FULL_SHARD", "HYBRID_8GPU", "HYBRID_16GPU", "DDP"):
        for model, nodes in (("vit_gigantic_patch14_224", 128), ("vit_15b", 128),
                             ("vit_huge", 2)):
            p = predict(_point(study_configs[name], model, nodes))
            rows.append({"point": f"model={model} strategy={name} nodes={nodes}",
                         "model": model, "strategy": name, "nodes": nodes,
                         "local_batch_size": 32, "precision": "bf16",
                         "activation_checkpointing": True, **p.as_dict()})
    df = rank_points(pd.DataFrame(rows))
    text = format_plan(df, by_rank=True)
    assert max(len(line) for line in text.splitlines()) <= TABLE_WIDTH, text
    assert not re.search(r"\de[+-]\d", text), text  # 1.2e-05 (words: one-GPU, rel-)
    ranked = df[df["model"] == "vit_15b"].dropna(subset=["rank"]).sort_values(
        ["rank", "ips"], ascending=[True, False])  # ties (within RANK_TIE_FRAC): most ips first
    assert list(ranked["ips"]) == sorted(ranked["ips"], reverse=True)
    assert not df.loc[(df["model"] == "vit_15b") & (df["strategy"] == "DDP"), "rank"].notna().any()
    assert ranked.iloc[-1]["strategy"] == "FULL_SHARD"  # last at 128 nodes
    lines = [ln.split() for ln in text.splitlines() if ln.split()[:1] == ["vit_15b"]]
    assert lines[0][1] == ranked.iloc[0]["strategy"]  # --rank prints the best first


@pytest.mark.parametrize("nodes", [128, 96])
def test_auto_time_limit_scales_with_steps_and_needs_a_step_time(study_configs, nodes):
    """At 128 nodes ORNL published vit_huge FULL_SHARD's images/s, slower than the plan: its
    step time sizes the limit; at 96 (no published row) the plan's does, and without a peak
    FLOP/s there is none."""
    from vitfsdp.launch import time_limit_s
    from vitfsdp.plan import STARTUP_S, TIME_SAFETY_FACTOR, auto_time_limit, sizing_step

    cfg = _point(study_configs["FULL_SHARD"], "vit_huge", nodes)
    sized = sizing_step(cfg)
    assert sized.predicted_s == predict(cfg).step_time_s
    assert (sized.published_s is not None) == (nodes == 128)
    step = max(s for s in (sized.predicted_s, sized.published_s) if s is not None)
    for steps in (10, 2000):
        c = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=steps))
        seconds = time_limit_s(auto_time_limit(c))
        low = steps * step * TIME_SAFETY_FACTOR + STARTUP_S + cfg.cluster.signal_delay_s
        assert low <= seconds < low + 60, (steps, seconds, low)
    cpu = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, peak_tflops=None))
    if nodes == 128:  # the published step alone sizes it
        assert sizing_step(cpu).step_s == sized.published_s
        return
    with pytest.raises(ValueError, match="cluster.time=auto needs the plan's step time"):
        auto_time_limit(cpu)


def test_jax_runs_are_predicted_with_the_jax_memory_model():
    """framework=jax: no FSDP unit buffers but XLA's gathered weights (the whole model in the
    compute dtype), and written-out attention (the JAX model computes the softmax itself)."""
    from hydra import compose, initialize_config_dir

    from vitfsdp.config import CONF_DIR, register_configs, to_run_config

    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = {fw: to_run_config(compose("config", [
            "model=vit_base", "model.img_size=32", "device=cpu", "strategy=FULL_SHARD",
            "nodes=2", f"framework={fw}"])) for fw in ("torch", "jax")}
    torch_p, jax_p = predict(cfg["torch"]), predict(cfg["jax"])
    assert jax_p.params_gib == pytest.approx(torch_p.params_gib)  # same shards of fp32
    assert jax_p.buffers_gib * GIB == pytest.approx(4 * jax_p.num_params)  # fp32 on CPU
    assert torch_p.buffers_gib < 0.3 * jax_p.buffers_gib  # FSDP: 3 of 12 units + the root
    assert jax_p.activations_gib > torch_p.activations_gib  # scores and softmax kept
    # checkpointing: XLA's CPU compiler keeps what remat frees (JAX_CPU_REMAT_KEEPS); a GPU's
    ckpt = dataclasses.replace(cfg["jax"], train=dataclasses.replace(
        cfg["jax"].train, activation_checkpointing=True))
    assert predict(ckpt).activations_gib == pytest.approx(jax_p.activations_gib)
    gpu = {c: predict(x, device="gpu", peak_flops=1e15, device_memory_gib=80).activations_gib
           for c, x in ((False, cfg["jax"]), (True, ckpt))}
    assert gpu[True] < 0.5 * gpu[False]


def test_a_jax_gpu_run_fits_in_xlas_pool_not_the_whole_device():
    """XLA takes 75% of a GPU for its pool by default (XLA_PYTHON_CLIENT_MEM_FRACTION): a
    JAX point is judged against that, or the fraction the profile's env sets (without
    preallocation too: the pool grows up to it), or the whole device under the platform
    allocator; a torch point against the whole device."""
    from hydra import compose, initialize_config_dir

    from vitfsdp.config import CONF_DIR, register_configs, to_run_config
    from vitfsdp.plan import xla_pool_fraction

    assert xla_pool_fraction({}) == 0.75
    assert xla_pool_fraction({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9"}) == 0.9
    assert xla_pool_fraction({"XLA_CLIENT_MEM_FRACTION": "0.5"}) == 0.5
    assert xla_pool_fraction({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}) == 0.75  # capped
    assert xla_pool_fraction({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}) == 1.0
    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = {fw: to_run_config(compose("config", [
            "model=vit_base", "strategy=DDP", "cluster=cuda8", f"framework={fw}"]))
            for fw in ("torch", "jax")}
    jax_p, torch_p = predict(cfg["jax"], device="gpu"), predict(cfg["torch"], device="gpu")
    memory = cfg["torch"].cluster.device_memory_gib  # 79.18 GiB: an H100 80GB, as torch sees it
    assert f"(XLA's pool: 75% of {memory:g} GiB" in jax_p.reason
    assert jax_p.margin_gib == pytest.approx(0.75 * memory - jax_p.peak_mem_gib, abs=0.05)
    assert "(cluster.device_memory_gib)" in torch_p.reason  # less what is outside the allocator
    assert torch_p.margin_gib == pytest.approx(memory - torch_p.runtime_gib
                                               - torch_p.peak_mem_gib, abs=0.05)


@pytest.mark.parametrize("model,dtype,fused,compiled", [
    ("vit_tiny", "fp32", True, False),        # GELU MLP
    ("vit_tiny", "fp32", False, False),       # attention written out
    ("vit_base", "bf16", True, False),        # the ORNL table's SwiGLU, FSDP's bf16 params
    ("vit_base", "bf16", True, True),         # compiled: SwiGLU's SiLU recomputed
    ("vit_tiny", "bf16", True, True),         # compiled GELU: as eager
    ("vit_base", "autocast", True, False),    # DDP: fp32 residual, SwiGLU's input cast twice
    ("vit_tiny", "autocast", True, False),    # DDP's autocast, GELU: cast once
])
def test_block_activations_are_what_autograd_saves(model, dtype, fused, compiled):
    """The plan's per-block activations against the tensors autograd actually saves for one
    block of the model the trainer builds (eager, or ``torch.compile``'d: the partitioned
    graph's saved outputs reach the same hooks), at 32 px so that it runs in seconds; within
    1 % (LayerNorm's per-token statistics are left out of the plan). ``autocast``: fp32
    parameters and input under bf16 autocast, as DDP runs (CPU autocast casts the linears'
    inputs as CUDA's does: the same count as the H100's, docs/plan.md, "Activations")."""
    import torch

    from tests.conftest import saved_for_backward_bytes
    from vitfsdp.models import ModelConfig, build_model
    from vitfsdp.plan.memory import block_activation_bytes

    if compiled and shutil.which("g++") is None:
        pytest.skip("torch.compile on CPU needs a C++ compiler (g++)")
    cfg = ModelConfig(name=model, img_size=32 if model == "vit_base" else None)
    net = build_model(cfg, 10)
    block = net.blocks[0]
    block.attn.fused_attn = fused
    autocast = dtype == "autocast"
    param_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}["fp32" if autocast else dtype]
    block = block.to(param_dtype)
    n, d = net.patch_embed.num_patches + 1, net.embed_dim
    x = torch.randn(2, n, d, dtype=param_dtype, requires_grad=True)
    if compiled:
        block = torch.compile(block)
        block(x).sum().backward()  # compiled before the count
    measured = saved_for_backward_bytes(block, x, torch.bfloat16 if autocast else None)
    predicted = 2 * block_activation_bytes(cfg, dtype="bf16" if autocast else dtype,
                                           residual_dtype="fp32" if autocast else None,
                                           fused_attn=fused, compiled=compiled)
    assert predicted == pytest.approx(measured, rel=0.01), (measured, predicted)


def test_plan_check_recomputes_the_h100_sweep(tmp_path):
    """tools/plan_check.py on the committed one-GPU calibration sweep (H100, docs/data):
    every completed point recomputed, the plan's printed peak within the issue's 15 % of the
    measured reserved memory for all eight, and the step time from the cuda8 profile's data
    sheets with the host term (no probe, nothing fitted) within 35 % median; a file without
    the columns is refused with exit status 2."""
    import re
    import subprocess
    import sys

    from tests.conftest import REPO

    tool = REPO / "tools" / "plan_check.py"
    runs = REPO / "docs" / "data" / "gpu-h100-2026-11-26-sweep-runs.csv"
    out = subprocess.run([sys.executable, str(tool), str(runs)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary, step = out.stdout.strip().splitlines()[-2:]
    assert summary.startswith("8 runs;") and summary.endswith("8 of 8 within 15%"), summary
    median = float(re.search(r"median \|error\| ([\d.]+)%", step).group(1))
    assert median <= 35, step
    bad = tmp_path / "runs.csv"
    bad.write_text("model,strategy\nvit_base,DDP\n")
    out = subprocess.run([sys.executable, str(tool), str(bad)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and "no column" in out.stderr


def test_calibration_holds_runs_out_in_folds_beyond_twenty_and_searches_coarse_first():
    """Leave-one-out refit once per run (36 runs: 6 minutes); beyond MAX_LEAVE_ONE_OUT runs
    they are held out in FOLDS folds, every run in one. The grid search tries every COARSE-th
    value, then those near the best: the full grid's argmin for a loss with one minimum."""
    from vitfsdp.plan.calibrate import (
        COARSE,
        FOLDS,
        GRIDS,
        MAX_LEAVE_ONE_OUT,
        _argmin,
        held_out_folds,
    )

    assert held_out_folds(3) == [[0], [1], [2]]
    assert len(held_out_folds(MAX_LEAVE_ONE_OUT)) == MAX_LEAVE_ONE_OUT
    folds = held_out_folds(57)
    assert len(folds) == FOLDS and sorted(i for f in folds for i in f) == list(range(57))
    grid = GRIDS["inter_node_gbps"]
    for target in (grid[0], grid[1], grid[COARSE + 2], grid[77], grid[-2], grid[-1], 3.3):
        calls: list[float] = []

        def loss(x, t=target, calls=calls):
            calls.append(x)
            return abs(math.log(x / t))
        assert _argmin(grid, loss) == grid[np.argmin([abs(math.log(g / target)) for g in grid])]
        assert len(calls) < len(grid) / 3


def test_hybrid_2gpu_shard_groups_ring_inside_a_package_and_replicas_do_not(study_configs):
    """On the shipped frontier profile, HYBRID_2GPU at 1 node: its all-gathers and
    reduce-scatters are over 2 consecutive ranks (one MI250X: 200 GB/s), its all-reduce
    over the 4 replicas, one rank of each package (50 GB/s); HYBRID_4GPU's groups span two
    packages (50 GB/s)."""
    from vitfsdp.plan.timing import collective_transfer_s, collectives

    def links(strategy: str) -> dict[str, float]:
        cfg = _point(study_configs[strategy], "vit_huge", 1)
        return {c.op: c.size_bytes * (2 if c.op == "all_reduce" else 1) * (c.ranks - 1)
                / c.ranks / collective_transfer_s(c, cfg.cluster) / 1e9
                for c in collectives(cfg, 632_000_000, 20_000_000, 32) if c.ranks > 1}

    assert links("HYBRID_2GPU") == {"all_gather": pytest.approx(200.0),
                                    "reduce_scatter": pytest.approx(200.0),
                                    "all_reduce": pytest.approx(50.0)}
    assert links("HYBRID_4GPU")["all_gather"] == pytest.approx(50.0)
