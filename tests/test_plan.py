"""Per-rank model-state bytes and the dry run: billion-parameter models, nothing allocated."""

from __future__ import annotations

import dataclasses

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
        for strategy in group_options("strategy"):
            cfg = compose("config", [*STUDY, f"strategy={strategy}"])
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
    rest is a few GiB, so a point fits iff that bound is under 64 GiB with room to spare:
    every point is at least 6 GiB away from the line, so the answer is not a coin toss."""
    group = {"DDP": 1, "NO_SHARD": 1, "HYBRID_1GPU": 1, "HYBRID_2GPU": 2, "HYBRID_8GPU": 8}
    checked = 0
    for name, cfg in study_configs.items():
        for model in STUDY_MODELS:
            for nodes in (1, 2, 16, 128):
                g = group.get(name, 8 * nodes)
                per_param = 20 if name == "DDP" else 16
                bound = TABLE_PARAMS_M[model] * 1e6 * per_param / g / GIB
                assert abs(bound - 64) > 6, (name, model, nodes, bound)
                p = predict(_point(cfg, model, nodes))
                assert p.fits is (bound < 64), (name, model, nodes, bound, p.reason)
                checked += 1
    assert checked == 7 * 6 * 4
    assert "> 64.0 GiB (cluster.device_memory_gib)" in predict(
        _point(study_configs["DDP"], "vit_5b")).reason


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
}


def test_memory_against_the_published_gpu_figures(study_configs):
    """Allocated peak within 20% of the study's measurements, ViT-Huge and up (ViT-Base's
    1.3-2.5 GiB are dominated by fixed costs the plan does not model: 23-37% under)."""
    hybrid4 = StrategyConfig(name="HYBRID_4GPU", sharding_strategy="HYBRID_SHARD",
                             shard_group_size=4)
    errors = {}
    for (name, model), measured in PUBLISHED_ALLOCATED_GIB.items():
        cfg = study_configs["HYBRID_8GPU" if name == "HYBRID_4GPU" else name]
        strategy = hybrid4 if name == "HYBRID_4GPU" else None
        p = predict(_point(cfg, model, strategy=strategy))
        errors[name, model] = p.allocated_gib / measured - 1
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
    bad = run_module("vitfsdp.plan", "strategy=BOGUS", cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and "strategy=BOGUS is unknown" in bad.stderr


def test_cpu_run_memory_within_20_percent_and_calibration(tmp_path):
    """Real 2-rank CPU runs of ViT-Base (87M parameters at 32x32 pixels: model state, not
    activations or the process baseline, is most of its RSS) under DDP and FULL_SHARD, with
    train.release_host_memory (peak RSS without glibc's kept heap): the plan's peak RSS
    within 20% of the measured one for both; --calibrate writes calibration.csv and fits a
    FLOP/s."""
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "model=vit_base", "model.img_size=32",
                      "strategy=DDP,FULL_SHARD", "device=cpu", "train.steps=2",
                      "train.warmup_steps=1", "train.log_every=1", "train.local_batch_size=4",
                      "train.release_host_memory=true",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    measured_by = {}
    for run_json in sorted(sweep_dir.rglob("run.json")):
        run = read(run_json)
        assert run["applied"]["cpu_mmap_threshold_bytes"] > 0
        pred = predict_run(run)
        measured = read(run_json.parent / "summary.json")[pred["pred_mem_metric"]]
        assert pred["pred_mem_metric"] == "peak_rss_gib"
        assert measured > 1.5 * CPU_BASELINE_GIB  # the model, not the interpreter, dominates
        assert abs(pred["pred_peak_mem_gib"] / measured - 1) < 0.20, (run_json, pred, measured)
        measured_by[run["config"]["strategy"]["name"]] = measured
    assert set(measured_by) == {"DDP", "FULL_SHARD"}
    assert measured_by["FULL_SHARD"] < measured_by["DDP"]  # sharding shows in the measurement
    report = calibrate([sweep_dir])
    table = pd.read_csv(sweep_dir / "calibration.csv")
    assert len(table) == 2
    assert sorted(table["measured_mem_gib"]) == pytest.approx(sorted(measured_by.values()))
    assert "cluster.peak_tflops=" in report and "cluster.plan_efficiency=1" in report
