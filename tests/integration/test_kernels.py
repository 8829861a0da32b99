"""The precision and kernel switches: each changes what it should, leaves the loss where it
should, and is recorded in run.json's ``applied`` section.

Multi-process cases train vit_tiny on 4 real gloo ranks (2 nodes of 2) through
``vitfsdp.torch_train.run`` and compare each switch with the same configuration without it:

- activation checkpointing recomputes the same forward: losses equal within 1e-6 relative;
- SDPA off, foreach and fused AdamW change only the order of float operations: 1e-4;
- bf16 with fp32 gradient reduction: within the parity test's bf16 bound (5e-2) of fp32;
- fp16 (FSDP1, FSDP2: ShardedGradScaler; DDP: GradScaler) skips the first steps while the
  loss scale falls from 2^16 to a scale whose gradients are finite, so it is compared with
  fp32 on the mean loss of 5-step windows: within 5e-2 relative; the three engines' fp16
  runs agree with each other within 1e-3.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, read, requires_jax
from vitfsdp.config import KernelsConfig, RunConfig, TrainConfig
from vitfsdp.launch import ClusterConfig
from vitfsdp.parallel import MixedPrecisionConfig, PrecisionSettings, resolve_precision
from vitfsdp.torch_train import build_optimizer

SWITCH_TOL = 1e-4
CHECKPOINT_TOL = 1e-6
BF16_TOL = 5e-2
FP16_TOL = 5e-2
FP16_ENGINES_TOL = 1e-3

COMMON = ("model=vit_tiny data=digits data.shuffle=false device=cpu train.warmup_steps=0 "
          "train.lr=3e-3 nodes=2 train.local_batch_size=2")
SHORT = f"{COMMON} train.steps=6 train.log_every=1"
LONG = f"{COMMON} train.steps=10 train.log_every=5"
ENGINES = {"fsdp1": "engine=fsdp1 strategy=FULL_SHARD",
           "fsdp2": "engine=fsdp2 strategy=FULL_SHARD",
           "ddp": "strategy=DDP"}

CASES = {
    **{f"base-{e}": f"{SHORT} {o}" for e, o in ENGINES.items()},
    **{f"ckpt-{e}": f"{SHORT} {o} train.activation_checkpointing=true" for e, o in ENGINES.items()},
    "sdpa_off-fsdp1": f"{SHORT} {ENGINES['fsdp1']} kernels.fused_attn=false",
    "sdpa_off-ddp": f"{SHORT} {ENGINES['ddp']} kernels.fused_attn=false",
    "foreach-fsdp1": f"{SHORT} {ENGINES['fsdp1']} kernels.adamw=foreach",
    "foreach-fsdp2": f"{SHORT} {ENGINES['fsdp2']} kernels.adamw=foreach",
    "fused-fsdp2": f"{SHORT} {ENGINES['fsdp2']} kernels.adamw=fused",
    "fused-ddp": f"{SHORT} {ENGINES['ddp']} kernels.adamw=fused",
    "bf16_reduce_fp32-fsdp1": (f"{SHORT} {ENGINES['fsdp1']} precision=bf16 "
                               "mixed_precision.reduce_dtype=fp32"),
    "tf32-fsdp2": (f"{SHORT} {ENGINES['fsdp2']} kernels.float32_matmul_precision=high "
                   "kernels.cudnn_allow_tf32=true"),
    "long-fp32-fsdp1": f"{LONG} {ENGINES['fsdp1']}",
    **{f"long-fp16-{e}": f"{LONG} {o} precision=fp16" for e, o in ENGINES.items()},
}


def _losses(run_dir) -> list[float]:
    return [w["loss"] for w in read(run_dir / "metrics.jsonl")]


def _applied(run_dir) -> dict:
    run = read(run_dir / "run.json")
    assert run["status"] == "completed", run.get("reason")
    return run["applied"]


def _train(out, cases: dict[str, str], nproc: int) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}",
           str(REPO / "tests" / "integration" / "parity_worker.py"), str(out),
           *(f"{name}|{o}" for name, o in cases.items())]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return {name: out / name for name in cases}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    return _train(tmp_path_factory.mktemp("switches"), CASES, nproc=4)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_activation_checkpointing_gives_the_same_losses(runs, engine):
    base, ckpt = runs[f"base-{engine}"], runs[f"ckpt-{engine}"]
    assert _applied(ckpt)["activation_checkpointed_blocks"] == 4
    assert _applied(base)["activation_checkpointed_blocks"] == 0
    assert _losses(ckpt) == pytest.approx(_losses(base), rel=CHECKPOINT_TOL)


def test_the_sharding_strategy_that_runs_is_recorded(runs):
    """On 4 ranks FULL_SHARD is what FSDP1 and FSDP2 run (on a world of 1 FSDP1 would run
    NO_SHARD: tests/integration/test_bench.py); DDP is DDP."""
    assert {e: _applied(runs[f"base-{e}"])["sharding_strategy"] for e in ENGINES} == {
        "fsdp1": "FULL_SHARD", "fsdp2": "FULL_SHARD", "ddp": "DDP"}


@pytest.mark.parametrize("engine", ["fsdp1", "ddp"])
def test_sdpa_off_gives_the_same_losses(runs, engine):
    off = runs[f"sdpa_off-{engine}"]
    assert (_applied(off)["fused_attn"], _applied(off)["fused_attn_modules"]) == (False, 4)
    assert _applied(runs[f"base-{engine}"])["fused_attn"] is True
    assert _losses(off) == pytest.approx(_losses(runs[f"base-{engine}"]), rel=SWITCH_TOL)


@pytest.mark.parametrize("name", ["foreach-fsdp1", "foreach-fsdp2", "fused-fsdp2", "fused-ddp"])
def test_adamw_implementations_give_the_same_losses(runs, name):
    impl, engine = name.split("-")
    assert _applied(runs[name])["adamw"] == impl
    assert _applied(runs[f"base-{engine}"])["adamw"] == "for_loop"  # torch's pick on CPU
    assert _losses(runs[name]) == pytest.approx(_losses(runs[f"base-{engine}"]), rel=SWITCH_TOL)


def test_mixed_precision_dtypes_are_applied_and_recorded(runs):
    run = runs["bf16_reduce_fp32-fsdp1"]
    assert _applied(run)["precision"] == {
        "name": "bf16", "param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "bf16",
        "autocast_dtype": None, "grad_scaler": None}
    losses, fp32 = _losses(run), _losses(runs["base-fsdp1"])
    assert losses == pytest.approx(fp32, rel=BF16_TOL)
    assert losses != pytest.approx(fp32, rel=1e-6), "did not run in bf16"


def test_matmul_precision_and_tf32_are_set_and_recorded(runs):
    applied = _applied(runs["tf32-fsdp2"])
    assert (applied["float32_matmul_precision"], applied["cuda_matmul_allow_tf32"],
            applied["cudnn_allow_tf32"]) == ("high", True, True)
    default = _applied(runs["base-fsdp2"])
    assert (default["float32_matmul_precision"], default["cuda_matmul_allow_tf32"],
            default["cudnn_allow_tf32"]) == ("highest", False, False)


def test_fp16_scales_gradients_and_stays_near_fp32(runs):
    fp32 = _losses(runs["long-fp32-fsdp1"])
    fp16 = {e: _losses(runs[f"long-fp16-{e}"]) for e in ENGINES}
    scalers = {e: _applied(runs[f"long-fp16-{e}"])["precision"]["grad_scaler"] for e in ENGINES}
    assert scalers == {"fsdp1": "ShardedGradScaler", "fsdp2": "ShardedGradScaler",
                       "ddp": "GradScaler"}
    for engine, losses in fp16.items():
        assert losses == pytest.approx(fp32, rel=FP16_TOL), engine
        assert losses != pytest.approx(fp32, rel=1e-6), f"{engine} did not run in fp16"
        assert losses == pytest.approx(fp16["fsdp1"], rel=FP16_ENGINES_TOL), engine


def test_compile_per_block_matches_eager(tmp_path):
    """torch.compile (inductor, CPU) of each block, one rank: same losses as eager."""
    single = f"{SHORT} nodes=1 cluster.gpus_per_node=1 train.local_batch_size=8"
    cases = {"eager": f"{single} {ENGINES['fsdp2']}",
             "compiled": f"{single} {ENGINES['fsdp2']} kernels.compile=true"}
    runs = _train(tmp_path, cases, nproc=1)
    assert _applied(runs["compiled"])["compiled_blocks"] == 4
    assert _applied(runs["eager"])["compiled_blocks"] == 0
    assert read(runs["compiled"] / "run.json")["config"]["kernels"]["compile"] is True
    assert _losses(runs["compiled"]) == pytest.approx(_losses(runs["eager"]), rel=SWITCH_TOL)


@pytest.mark.parametrize(
    ("precision", "mp", "is_fsdp", "engine", "expected"),
    [
        ("fp32", {}, True, "fsdp1", PrecisionSettings("fp32", "fp32", "fp32")),
        ("bf16", {}, True, "fsdp1", PrecisionSettings("bf16", "bf16", "bf16")),
        ("bf16", {}, True, "fsdp2", PrecisionSettings("bf16", "bf16", None)),
        ("bf16", {"reduce_dtype": "fp32"}, True, "fsdp2", PrecisionSettings("bf16", "fp32")),
        ("fp16", {}, True, "fsdp1",
         PrecisionSettings("fp16", "fp16", "fp16", grad_scaler="ShardedGradScaler")),
        ("fp16", {"buffer_dtype": "fp32"}, True, "fsdp1",
         PrecisionSettings("fp16", "fp16", "fp32", grad_scaler="ShardedGradScaler")),
        ("bf16", {}, False, "fsdp1", PrecisionSettings(autocast_dtype="bf16")),
        ("fp16", {}, False, "fsdp2", PrecisionSettings(autocast_dtype="fp16",
                                                       grad_scaler="GradScaler")),
    ],
)
def test_precision_resolves_to_the_dtypes_run_json_records(precision, mp, is_fsdp, engine,
                                                           expected):
    got = resolve_precision(precision, MixedPrecisionConfig(**mp), is_fsdp=is_fsdp,
                            engine=engine)
    assert got == expected


def test_fsdp_policies_follow_the_dtypes():
    fp32 = PrecisionSettings("fp32", "fp32", "fp32")
    assert fp32.fsdp1_policy() is None
    mixed = PrecisionSettings("bf16", "fp32", "bf16")
    policy = mixed.fsdp1_policy()
    assert (policy.param_dtype, policy.reduce_dtype, policy.buffer_dtype) == (
        torch.bfloat16, torch.float32, torch.bfloat16)
    policy2 = mixed.fsdp2_policy()
    assert (policy2.param_dtype, policy2.reduce_dtype) == (torch.bfloat16, torch.float32)


def test_fused_adamw_is_refused_where_torch_has_no_fused_kernel():
    params = [torch.nn.Parameter(torch.zeros(2, device="meta"))]
    with pytest.raises(ValueError, match=r"kernels\.adamw=fused.*meta.*valid there") as e:
        build_optimizer(params, TrainConfig(), KernelsConfig(adamw="fused"),
                        torch.device("meta"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("impl", ["for_loop", "foreach", "fused"])
def test_adamw_implementation_is_the_one_asked_for(impl):
    params = [torch.nn.Parameter(torch.ones(3))]
    optimizer, applied = build_optimizer(params, TrainConfig(), KernelsConfig(adamw=impl),
                                         torch.device("cpu"))
    assert applied == impl
    assert optimizer.defaults["foreach"] is (True if impl == "foreach" else
                                             False if impl == "for_loop" else None)
    assert bool(optimizer.defaults["fused"]) is (impl == "fused")


@pytest.mark.parametrize(
    ("device_type", "is_fsdp", "expected"),
    [
        ("cpu", True, PrecisionSettings("fp32", "fp32", "fp32")),
        ("cuda", True, PrecisionSettings("bf16", "bf16", "bf16")),
        ("cpu", False, PrecisionSettings()),
        ("cuda", False, PrecisionSettings(autocast_dtype="bf16")),
    ],
)
def test_precision_auto_is_bf16_on_gpus_and_fp32_on_cpu(device_type, is_fsdp, expected):
    got = resolve_precision("auto", MixedPrecisionConfig(), is_fsdp=is_fsdp, engine="fsdp1",
                            device_type=device_type)
    assert got == expected
    with pytest.raises(ValueError, match="precision=auto.*device_type"):
        resolve_precision("auto", MixedPrecisionConfig(), is_fsdp=is_fsdp, engine="fsdp1")


def test_precision_auto_refuses_fp16_overrides_and_keeps_other_overrides():
    with pytest.raises(ValueError, match=r"param_dtype=fp16 needs precision=fp16.*precision=auto"):
        RunConfig(precision="auto", mixed_precision=MixedPrecisionConfig(param_dtype="fp16"))
    cfg = RunConfig(precision="auto", mixed_precision=MixedPrecisionConfig(reduce_dtype="fp32"))
    assert cfg.precision_settings("cuda") == PrecisionSettings("bf16", "fp32", "bf16")
    assert cfg.precision_settings("cpu") == PrecisionSettings("fp32", "fp32", "fp32")


def test_before_the_run_auto_follows_the_device_or_the_cluster_profile():
    assert RunConfig(device="cpu").resolved_precision() == "fp32"
    assert RunConfig(device="cuda").resolved_precision() == "bf16"
    gpu_profile = RunConfig(cluster=ClusterConfig(device_memory_gib=80.0))
    assert (gpu_profile.expected_device_type(), gpu_profile.precision_settings().param_dtype) == (
        "cuda", "bf16")
    virtual = RunConfig(cluster=ClusterConfig(gpu_resource=True))  # Slurm GPUs, CPU ranks
    assert virtual.expected_device_type() == "cpu"
    assert RunConfig(device="cuda", precision="fp32").resolved_precision() == "fp32"


def test_compile_auto_is_on_for_gpus_only_unless_set():
    assert (KernelsConfig().resolved_compile("cuda"), KernelsConfig().resolved_compile("cpu")) == (
        True, False)
    # FSDP1 below the batch where compiled blocks were measured ahead: eager
    assert KernelsConfig().resolved_compile("cuda", fsdp1=True, local_batch=32) is False
    assert KernelsConfig().resolved_compile("cuda", fsdp1=True, local_batch=128) is True
    assert KernelsConfig(compile=True).resolved_compile("cuda", fsdp1=True, local_batch=32)
    assert KernelsConfig(compile=False).resolved_compile("cuda") is False
    assert KernelsConfig(compile=True).resolved_compile("cpu") is True


@pytest.mark.parametrize(("device", "expected"), [("cuda", "fused"), ("cpu", "for_loop")])
def test_adamw_auto_is_fused_on_gpus_and_torchs_pick_on_cpu(device, expected):
    params = [torch.nn.Parameter(torch.ones(3))]  # on CPU, where torch also has fused AdamW
    optimizer, applied = build_optimizer(params, TrainConfig(), KernelsConfig(),
                                         torch.device(device))
    assert applied == expected
    assert bool(optimizer.defaults["fused"]) is (expected == "fused")


@requires_jax
def test_jax_precision_auto_follows_the_backend():
    """The JAX trainer resolves ``precision=auto`` with the torch trainer's one rule, on the
    device type of its backend: here the CPU, so fp32; bf16 where the type is ``cuda``."""
    from vitfsdp.jax import train as jtrain

    assert jtrain.device_type() == "cpu"
    auto = RunConfig(precision="auto", framework="jax")
    assert auto.resolved_precision(jtrain.device_type()) == "fp32"
    assert auto.resolved_precision("cuda") == "bf16"
    assert RunConfig(precision="bf16", framework="jax").resolved_precision("cpu") == "bf16"
