"""What ``framework=jax`` accepts: one-line refusals at config validation, before a sweep
starts anything; the coordinator port of jax.distributed."""

from __future__ import annotations

import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it
from hydra import compose, initialize_config_dir

from tests.conftest import run_module
from vitfsdp.config import CONF_DIR, RunConfig, register_configs, to_run_config
from vitfsdp.jax.distributed import coordinator_port


def _cfg(*overrides: str) -> RunConfig:
    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return to_run_config(compose("config", overrides=list(overrides)))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["strategy=NO_SHARD"], "strategy=NO_SHARD (sharding_strategy=NO_SHARD) has no JAX "
                                "meaning: replicated parameters with all-reduced gradients are "
                                "DDP under jax.sharding; valid with framework=jax: DDP, "
                                "FULL_SHARD, HYBRID_1GPU"),
        (["strategy=SHARD_GRAD_OP"], "XLA's scheduling decision"),
        # what framework=jax accepts here (1 node of 2 ranks), by the rules that validate:
        # HYBRID_SHARD (groups of a node) runs, HYBRID_4GPU and up do not tile 2 ranks
        (["strategy=SHARD_GRAD_OP"], "valid with framework=jax: DDP, FULL_SHARD, HYBRID_1GPU, "
                                     "HYBRID_2GPU, HYBRID_SHARD (on 2 ranks, 2 a node)"),
        (["strategy=SHARD_GRAD_OP", "nodes=2", "cluster.gpus_per_node=8"],
         "valid with framework=jax: DDP, FULL_SHARD, HYBRID_16GPU, HYBRID_1GPU, HYBRID_2GPU, "
         "HYBRID_4GPU, HYBRID_8GPU, HYBRID_SHARD (on 16 ranks, 8 a node)"),
        (["engine=fsdp2"], "engine='fsdp2' applies only to framework=torch; valid with "
                           "framework=jax: fsdp1"),
        (["strategy.backward_prefetch=BACKWARD_POST"],
         "strategy.backward_prefetch='BACKWARD_POST' applies only to framework=torch; valid "
         "with framework=jax: null"),
        (["strategy.limit_all_gathers=false"], "strategy.limit_all_gathers=False applies only"),
        (["strategy.forward_prefetch=true"], "strategy.forward_prefetch=True applies only"),
        (["kernels.compile=true"], "kernels.compile=True applies only to framework=torch"),
        (["kernels.adamw=foreach"], "valid with framework=jax: auto (optax.adamw)"),
        (["kernels.cudnn_allow_tf32=true"], "kernels.cudnn_allow_tf32=True applies only"),
        (["precision=bf16", "mixed_precision.reduce_dtype=fp32"],
         "mixed_precision.reduce_dtype='fp32' applies only to framework=torch"),
        (["precision=fp16"], "precision=fp16 is not supported with framework=jax (no loss "
                             "scaling); valid: fp32, bf16"),
    ],
)
def test_torch_only_settings_are_refused(overrides, message):
    with pytest.raises(ValueError) as err:
        _cfg("framework=jax", *overrides)
    assert message in str(err.value) and "\n" not in str(err.value)  # one line
    _cfg("framework=torch", *overrides)  # the same settings are valid under torch


@pytest.mark.parametrize("strategy", ["DDP", "FULL_SHARD", "HYBRID_1GPU", "HYBRID_2GPU"])
def test_jax_strategies_leave_fsdp1_settings_unset(strategy):
    cfg = _cfg("framework=jax", f"strategy={strategy}", "precision=bf16")
    assert cfg.strategy.backward_prefetch is None and cfg.strategy.limit_all_gathers is None
    torch = _cfg("framework=torch", "strategy=FULL_SHARD")
    assert torch.strategy.backward_prefetch == "BACKWARD_PRE"  # torch still defaults them


def test_hybrid_shard_group_checked_against_the_node_under_jax():
    with pytest.raises(ValueError, match="needs shard groups of 8 ranks"):
        _cfg("framework=jax", "strategy=HYBRID_8GPU")


def test_coordinator_port_avoids_master_port_ranges():
    assert coordinator_port({"MASTER_PORT": "29500"}) == 19500
    assert coordinator_port({"MASTER_PORT": "20123"}) == 10123  # a Slurm job's MASTER_PORT
    assert coordinator_port({"MASTER_PORT": "20123", "JAX_COORDINATOR_PORT": "4242"}) == 4242
    for port in range(20000, 61000, 997):  # never the port itself, never the Slurm range
        assert 10000 <= coordinator_port({"MASTER_PORT": str(port)}) < 20000
    with pytest.raises(ValueError, match="MASTER_PORT is not set"):
        coordinator_port({})


def test_sweep_refuses_jax_points_before_anything_starts(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "framework=torch,jax", "strategy=DDP,NO_SHARD",
                      "model=vit_tiny", "device=cpu", f"hydra.sweep.dir={sweep_dir}",
                      cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    refused = [line for line in proc.stderr.splitlines() if "has no JAX meaning" in line]
    assert len(refused) == 1 and "framework=jax" in refused[0]  # only the jax NO_SHARD point
    assert "] [1/" not in proc.stdout  # no point was started
    assert not sweep_dir.exists() or not any(sweep_dir.rglob("run.json"))


def test_xla_cpu_threads_follow_omp_num_threads():
    from vitfsdp.jax import cpu_thread_flags

    one = "--xla_cpu_multi_thread_eigen=false"
    assert cpu_thread_flags({"OMP_NUM_THREADS": "1"}) == one
    assert cpu_thread_flags({"OMP_NUM_THREADS": "1", "XLA_FLAGS": "--a=1"}) == f"--a=1 {one}"
    kept = "--xla_cpu_multi_thread_eigen=true"
    assert cpu_thread_flags({"OMP_NUM_THREADS": "1", "XLA_FLAGS": kept}) == kept
    assert cpu_thread_flags({"OMP_NUM_THREADS": "4"}) == ""
    assert cpu_thread_flags({}) == ""
