"""Config validation: every bad value is refused with a message naming the field."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from vitfsdp.config import KernelsConfig, RunConfig, TrainConfig, register_configs, to_run_config
from vitfsdp.data import DataConfig
from vitfsdp.launch import ClusterConfig
from vitfsdp.models import ModelConfig
from vitfsdp.parallel import MixedPrecisionConfig, StrategyConfig, use_orig_params

register_configs()

DDP = StrategyConfig(name="DDP", sharding_strategy="DDP")
STRATEGIES = ["DDP", "NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP",
              "HYBRID_1GPU", "HYBRID_2GPU", "HYBRID_8GPU"]


def _compose(*overrides: str) -> RunConfig:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return to_run_config(compose("config", overrides=list(overrides)))


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_preset_composes(name):
    cfg = _compose(f"strategy={name}", "cluster.gpus_per_node=8")
    assert cfg.strategy.name == name
    assert cfg.strategy.is_fsdp == (name != "DDP")
    if name.startswith("HYBRID_"):
        k = int(name.removeprefix("HYBRID_").removesuffix("GPU"))
        strategy = cfg.strategy
        assert (strategy.sharding_strategy, strategy.shard_group_size) == ("HYBRID_SHARD", k)
        assert cfg.strategy.replicas(16) == 16 // k


def test_hybrid_shard_without_a_group_size_shards_within_a_node():
    """PyTorch's HYBRID_SHARD: shard groups of one node's GPUs unless told otherwise, so
    strategy=FULL_SHARD,HYBRID_SHARD sweeps as it reads (it failed on a missing size)."""
    cfg = _compose("strategy=HYBRID_SHARD", "cluster.gpus_per_node=8")
    assert (cfg.strategy.name, cfg.strategy.shard_group_size) == ("HYBRID_8GPU", 8)
    cfg = _compose("strategy=HYBRID_SHARD", "strategy.shard_group_size=4",
                   "cluster.gpus_per_node=8")
    assert (cfg.strategy.name, cfg.strategy.shard_group_size) == ("HYBRID_4GPU", 4)


def test_a_preset_sets_its_own_sweep_directory():
    """A preset's ``hydra.sweep.dir`` wins over the root config's dated default (the
    experiment group comes after the root's own keys); without a preset the default stays."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        preset = compose("sweep", ["experiment=demo_apart"], return_hydra_config=True)
        plain = compose("sweep", [], return_hydra_config=True)
    assert preset.hydra.sweep.dir == "runs/demo_apart"
    assert plain.hydra.sweep.dir.startswith("runs/sweep/")


def test_defaults_compose_and_world_size():
    cfg = _compose("nodes=4")
    assert (cfg.model.name, cfg.strategy.name, cfg.data.name, cfg.cluster.name) == (
        "vit_tiny", "FULL_SHARD", "synthetic", "local")
    assert cfg.world_size == 8


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ModelConfig(name="vit_giant"), "model.name"),
        (lambda: ModelConfig(name="vit_base", img_size=225), "model.img_size"),
        (lambda: StrategyConfig(sharding_strategy="ZERO3"), "strategy.sharding_strategy"),
        (lambda: StrategyConfig(backward_prefetch="EARLY"), "strategy.backward_prefetch"),
        (lambda: StrategyConfig(sharding_strategy="HYBRID_SHARD"), "strategy.shard_group_size"),
        (lambda: DataConfig(name="imagenet"), "data.name"),
        (lambda: DataConfig(name="imagefolder", path="/does/not/exist"), "data.path"),
        (lambda: TrainConfig(steps=5, warmup_steps=5), "train.warmup_steps"),
        (lambda: TrainConfig(local_batch_size=0), "train.local_batch_size"),
        (lambda: ClusterConfig(gpus_per_node=0), "cluster.gpus_per_node"),
        (lambda: RunConfig(nodes=0), "nodes"),
        (lambda: RunConfig(precision="fp8"), "precision"),
        (lambda: RunConfig(engine="fsdp3"), "engine"),
        (lambda: KernelsConfig(adamw="apex"), "kernels.adamw"),
        (lambda: KernelsConfig(float32_matmul_precision="tf32"),
         "kernels.float32_matmul_precision"),
        (lambda: MixedPrecisionConfig(param_dtype="fp8"), "mixed_precision.param_dtype"),
        (lambda: RunConfig(strategy=DDP, mixed_precision=MixedPrecisionConfig(reduce_dtype="fp32")),
         "mixed_precision.reduce_dtype"),
        (lambda: RunConfig(engine="fsdp2", precision="bf16",
                           mixed_precision=MixedPrecisionConfig(buffer_dtype="bf16")),
         "mixed_precision.buffer_dtype"),
        (lambda: RunConfig(precision="bf16", mixed_precision=MixedPrecisionConfig(
            param_dtype="fp16")), "mixed_precision.param_dtype"),
    ],
)
def test_bad_values_name_the_field(build, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")) as e:
        build()
    assert "\n" not in str(e.value)


def test_unknown_model_lists_valid_names():
    with pytest.raises(ValueError) as e:
        ModelConfig(name="vit_giant")
    for name in ("vit_tiny", "vit_base", "vit_huge", "vit_15b"):
        assert name in str(e.value)


def test_hybrid_shard_group_must_divide_ranks_per_node():
    cluster = ClusterConfig(gpus_per_node=3)
    strategy = StrategyConfig(name="HYBRID_2GPU", sharding_strategy="HYBRID_SHARD",
                              shard_group_size=2)
    with pytest.raises(ValueError,
                       match=r"\(strategy.shard_group_size=2\): HYBRID_SHARD.*gpus_per_node=3"):
        RunConfig(strategy=strategy, cluster=cluster, nodes=2)
    RunConfig(strategy=strategy, cluster=ClusterConfig(gpus_per_node=4), nodes=3)  # fits


def test_yaml_type_errors_are_refused():
    with pytest.raises(Exception, match="local_batch_size"):
        _compose("train.local_batch_size=many")


def test_precision_and_kernel_keys_compose_from_the_command_line():
    cfg = _compose("precision=fp16", "mixed_precision.buffer_dtype=fp32", "kernels.compile=true",
                   "kernels.fused_attn=false", "kernels.adamw=foreach",
                   "kernels.float32_matmul_precision=high", "kernels.cudnn_allow_tf32=true",
                   "train.activation_checkpointing=true")
    assert (cfg.precision, cfg.mixed_precision.buffer_dtype) == ("fp16", "fp32")
    assert cfg.kernels == KernelsConfig(fused_attn=False, compile=True, adamw="foreach",
                                        float32_matmul_precision="high", cudnn_allow_tf32=True)
    assert cfg.train.activation_checkpointing
    settings = cfg.precision_settings()
    assert (settings.param_dtype, settings.buffer_dtype, settings.grad_scaler) == (
        "fp16", "fp32", "ShardedGradScaler")


def test_switch_defaults_are_auto_and_exact_fp32_on_cpu():
    cfg = _compose()
    assert cfg.kernels == KernelsConfig(fused_attn=True, compile=None, adamw="auto",
                                        float32_matmul_precision="highest",
                                        cudnn_allow_tf32=False)
    assert (cfg.precision, cfg.resolved_precision("cpu"), cfg.resolved_precision("cuda")) == (
        "auto", "fp32", "bf16")
    assert not cfg.kernels.resolved_compile("cpu") and cfg.kernels.resolved_compile("cuda")
    assert cfg.train.local_batch_size == 32 and not cfg.compile_blocks("cuda")
    assert cfg.mixed_precision == MixedPrecisionConfig()
    assert not cfg.train.activation_checkpointing


@pytest.mark.parametrize(("overrides", "compiled"), [
    ((), False),  # FSDP1 at the studies' batch of 32: eager blocks on flat parameters
    (("train.local_batch_size=64",), False),
    (("train.local_batch_size=128",), True),  # the device hides the host: compile
    (("strategy=DDP",), True),
    (("engine=fsdp2",), True),
    (("kernels.compile=true",), True),  # an explicit value always wins
])
def test_compile_auto_on_a_gpu_follows_the_engine_and_local_batch(overrides, compiled):
    cfg = _compose(*overrides)
    assert cfg.compile_blocks("cuda") is compiled
    assert cfg.compile_blocks("cpu") is ("kernels.compile=true" in overrides)
    # the wrap's use_orig_params follows: flat parameters where the blocks run eagerly
    assert use_orig_params(cfg.strategy, cfg.compile_blocks("cuda")) is compiled or (
        not cfg.strategy.is_fsdp)


@pytest.mark.parametrize("value", ["/data/x (copy)", "x;rm", "my sweep's dir", "a=b", "{a}",
                                   "(x)\\"])
def test_the_quoting_hint_pastes_back_as_the_value(value):
    """A value that does not parse gets a hint to paste: shell-quoted around Hydra's quotes.
    Pasted into a shell, it reaches Hydra as the value typed (the old hint,
    ``data.path='/data/x (copy)'``, lost its quotes to the shell and failed again)."""
    import shlex

    from vitfsdp.config import parse_overrides

    with pytest.raises(ValueError, match="quote the value: ") as e:
        parse_overrides([f"data.path={value}"])
    hint = str(e.value).split("quote the value: ", 1)[1]
    (argument,) = shlex.split(hint)  # what the shell hands the command
    (override,) = parse_overrides([argument])
    assert override.value() == value, hint


def test_the_probes_printed_override_pastes_back_as_its_path(tmp_path):
    """The probe ends with ``plan with cluster.probe=PATH``: pasted, the path reaches Hydra
    whole even with a space, ``(`` or ``'`` in it (shlex alone left Hydra the bare path)."""
    import shlex

    from vitfsdp.config import parse_overrides
    from vitfsdp.probe.__main__ import publish

    folder = tmp_path / "my site's (probe) dir"
    folder.mkdir()
    kept = folder / "probe-1.json"
    kept.write_text("{}")
    line = publish(kept, folder / "probe.json", replace=False, completed=True, measured="1")
    (argument,) = shlex.split(line.split("plan with ", 1)[1])
    (override,) = parse_overrides([argument])
    assert override.key_or_group == "cluster.probe"
    assert override.value() == str(folder / "probe.json")


@pytest.mark.parametrize(("overrides", "expected"), [
    ([], "054d07e4f40c6280"),
    (["cluster=frontier", "cluster.account=x"], "b3267b4821bc0d99"),
    (["cluster=perlmutter", "cluster.account=x"], "c71e4364b2e09cef"),
    (["cluster=lumi", "cluster.account=x"], "b5546df9c71d61b3"),
])
def test_a_points_identity_survives_new_fields(overrides, expected):
    """The point hashes of 78b8976 (before cluster.torch_build, small_paths and
    site_sbatch_args): a field that only changes the checks is left out, and the site's
    sbatch options are hashed with the sweep's, so a sweep recorded before resumes its
    points instead of running them again (cuda8's changed on purpose: its job scripts did).
    perlmutter's device memory stays 40 GiB for this reason (CUDA reports 39.39-39.59)."""
    from vitfsdp.launch.resume import config_hash

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = to_run_config(compose("config", overrides=overrides))
    assert config_hash(cfg) == expected
