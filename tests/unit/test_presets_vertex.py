"""The Vertex single-node preset (PyTorch against JAX on timm's L/16, H/14, g/14, G/14 on one
8-GPU node) and its CPU-sized variant: composed and planned as the sweep and the plan expand
them; nothing trains."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from tests.unit.test_reference import compose  # the validated RunConfig and the sweep's params
from vitfsdp.analysis.reference import published
from vitfsdp.config import CONF_DIR
from vitfsdp.plan.__main__ import compose_points, plan_table, summary_line

PRESET, CPU = "vertex_single_node", "vertex_single_node_cpu"
MODELS = ("vit_large_patch16_224", "vit_huge_patch14_224", "vit_giant_patch14_224",
          "vit_gigantic_patch14_224")
FRAMEWORKS = ("torch", "jax")
STRATEGIES = ("FULL_SHARD", "DDP")
#: What the CPU variant may change: the sizing (model, image size, batch, steps) and its
#: name and sweep directory; every other key is the GPU preset's.
SIZING = {"model", "train.local_batch_size", "train.steps", "train.warmup_steps",
          "train.log_every", "experiment"}


def flat(cfg) -> dict:
    """A RunConfig as {dotted key: value}."""
    def walk(prefix: str, value) -> dict:
        if isinstance(value, dict):
            return {k: v for key, sub in value.items()
                    for k, v in walk(f"{prefix}{key}.", sub).items()}
        return {prefix[:-1]: value}
    return walk("", dataclasses.asdict(cfg))


def test_every_point_is_a_model_framework_strategy_of_the_study_on_one_8_gpu_node():
    """4 models x torch, jax x FULL_SHARD, DDP, each validated as the sweep validates it
    (framework=jax refuses torch-only keys), at the study's settings."""
    points = compose_points([f"experiment={PRESET}", "cluster=cuda8"])
    got = sorted((c.model.name, c.framework, c.strategy.name) for _, c in points)
    assert got == sorted(itertools.product(MODELS, FRAMEWORKS, STRATEGIES))
    for _, cfg in points:
        assert (cfg.nodes, cfg.world_size, cfg.cluster.name) == (1, 8, "cuda8")
        assert (cfg.precision, cfg.train.local_batch_size, cfg.data.name) == ("bf16", 32,
                                                                             "synthetic")
        assert cfg.model.img_size in (None, 224) and cfg.kernels.fused_attn
        assert not cfg.train.activation_checkpointing and cfg.experiment == PRESET
        if cfg.framework == "jax":  # the torch-only keys stay unset: recorded as n/a
            assert cfg.strategy.backward_prefetch is None and cfg.engine == "fsdp1"


def test_the_plan_fits_every_point_on_a_dgx_node_and_prices_it():
    """The plan's table and summary on cluster=cuda8 (80 GB H100s): 16 points, all fit but
    ViT-G/14 under JAX's DDP, squeezed in XLA's default pool (75% of the device) since the
    plan counts the two bf16 copies of the model XLA's analysis measured (2402024): run,
    warned; each with a step time, so the node-hours are known."""
    df = plan_table([f"experiment={PRESET}", "cluster=cuda8"])
    assert len(df) == 16 and df["step_time_s"].notna().all()
    squeezed = df[~df["fits"].astype(bool)]
    assert [(r.model, r.framework, r.strategy) for r in squeezed.itertuples()] == [
        ("vit_gigantic_patch14_224", "jax", "DDP")]
    assert squeezed["squeezed"].all() and "XLA_PYTHON_CLIENT_MEM_FRACTION" in squeezed[
        "reason"].iloc[0]
    assert {o.split("framework=")[1].split()[0] for o in df["overrides"]} == set(FRAMEWORKS)
    for model, rows in df.groupby("model"):  # sharding saves memory under either framework
        peak = rows.groupby("strategy")["peak_mem_gib"]
        assert peak.min()["DDP"] > peak.max()["FULL_SHARD"], model
    assert df["peak_mem_gib"].max() < 80
    line = summary_line(df)
    assert line.startswith("16 point(s): 15 fit, 1 squeezed (the sweep runs them, warned), "
                           "0 predicted not to fit"), line
    assert "node hours" in line and "unknown" not in line.split("\n")[1]
    assert "training at the predicted steps" in line and "starting (300 s a point, assumed)" in line
    assert line.split("\n")[2].startswith("one run a point ranks nothing")  # no repeat=


def test_the_cost_line_splits_training_from_start_up_and_prices_repeats():
    """Start-up (300 s a point, assumed) is most of a short sweep's node-hours: the line says
    how much each is; three repeats are three times the cost, and a sweep with repeats is
    not told to add them."""
    import pandas as pd

    df = pd.DataFrame({"fits": [True, True], "nodes": [1, 4], "steps": [20, 20],
                       "step_time_s": [0.1, 0.2], "overrides": ["nodes=1", "nodes=4"]})
    line = summary_line(df)
    hours = (1 * (2 + 300) + 4 * (4 + 300)) / 3600  # 0.42: two digits below 1
    assert line.split("\n")[1] == (
        f"the 2 that run: {hours:,.2g} node hours (nodes x (steps x step + 300 s)): "
        f"{(2 + 16) / 3600:,.2g} training at the predicted steps, {1500 / 3600:,.2g} starting "
        "(300 s a point, assumed); predictions, not measurements: docs/plan.md gives their "
        "errors against runs")
    assert line.split("\n")[2] == ("one run a point ranks nothing (best.csv: one run is not a "
                                   f"result); with three repeats (repeat=0,1,2): "
                                   f"{3 * hours:,.1f} node hours")  # 1.3
    repeated = summary_line(df.assign(overrides=["nodes=1 repeat=0", "nodes=4 repeat=1"]))
    assert "three repeats" not in repeated


def test_the_cpu_variant_keeps_every_key_but_the_sizing():
    """Composed on the same cluster, the CPU variant differs from the GPU preset only in
    SIZING (and the sweep dir); its sweep has both frameworks and the same strategies."""
    gpu, gpu_params = compose(f"experiment={PRESET}")
    cpu, cpu_params = compose(f"experiment={CPU}")
    gpu_keys, cpu_keys = flat(gpu), flat(cpu)
    changed = {k for k in gpu_keys if gpu_keys[k] != cpu_keys[k]}
    assert {k.split(".")[0] if k.startswith("model.") else k for k in changed} <= SIZING
    assert "train.local_batch_size" in changed  # sized down, not left at the GPU's 32
    assert {k: v for k, v in gpu_params.items() if k != "model"} == \
        {k: v for k, v in cpu_params.items() if k != "model"}
    assert set(cpu_params["framework"].split(",")) == set(FRAMEWORKS)
    assert cpu_params["model"] == "vit_tiny" and cpu.cluster.name == "local"
    points = compose_points([f"experiment={CPU}"])  # every point validates (JAX's refusals)
    assert sorted((c.framework, c.strategy.name) for _, c in points) == sorted(
        itertools.product(FRAMEWORKS, STRATEGIES))


@pytest.mark.parametrize("name", [PRESET, CPU])
def test_the_header_gives_the_commands_and_holds_out_the_published_figures(name: str):
    """big_vision style: the file opens with its commands, hardware and expected figures;
    the study's published figures are a held-out check, in neither the package nor here."""
    header = (CONF_DIR / "experiment" / f"{name}.yaml").read_text().split("\ndefaults:")[0]
    assert f"python -m vitfsdp.sweep experiment={name}" in header
    assert "Hardware:" in header and "Expected:" in header
    assert not set(published()["model"]) & set(MODELS)
