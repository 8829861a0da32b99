"""Per-rank model-state bytes and the dry run: billion-parameter models, nothing allocated."""

from __future__ import annotations

import pytest

from tests.conftest import run_module
from vitfsdp.models import ModelConfig, build_model, count_params
from vitfsdp.parallel import StrategyConfig
from vitfsdp.plan import GIB, state_bytes

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
