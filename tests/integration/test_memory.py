"""Acceptance: a billion-parameter ViT built on the meta device and wrapped with FULL_SHARD
on 4 CPU ranks never holds the whole fp32 model on any rank.

Each rank builds and wraps through ``vitfsdp.torch_train.build`` (no training step) and reports
its peak resident memory (VmHWM, /proc/self/status) and the resident memory before the
build (Python, torch, timm, Hydra: about 0.7 GiB). Every rank must end with a quarter of the
parameters, and neither its peak memory nor the build's growth may reach half the full fp32
model (ViT-3B: 3,067M parameters × 4 B = 11.4 GiB).

- ViT-3B with FSDP2: ``fully_shard`` on meta, ``to_empty`` allocates only the rank's shards,
  and each rank draws only its own rows (about 50 s on 2 cores).
- FSDP1 materializes one unit (transformer block) at a time, whole, just before it flattens
  and shards it, so every rank draws every unit's values: 4× the random-number work of
  FSDP2. Its ViT-3B build takes about 100 s on 2 cores (measured peak 4.4 GiB per rank, 38%
  of the full model), so the suite checks FSDP1 on ViT-1B (about 40 s), the same code path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from vitfsdp.models import ModelConfig, build_model, count_params

GIB = 1024**3
WORLD = 4
MAX_FRACTION = 0.5  # of the full fp32 model, per rank
MATERIALIZED = {"fsdp1": "per_unit", "fsdp2": "per_shard"}


@pytest.mark.parametrize(("model", "engine"), [("vit_3b", "fsdp2"), ("vit_1b", "fsdp1")])
def test_full_shard_build_keeps_each_rank_far_below_the_full_model(model, engine, tmp_path):
    full_gib = count_params(build_model(ModelConfig(name=model), 1000, device="meta")) * 4 / GIB
    out = tmp_path / "memory.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={WORLD}",
           str(REPO / "tests" / "integration" / "memory_worker.py"), str(out),
           f"model={model}", f"engine={engine}", "strategy=FULL_SHARD", "device=cpu",
           "nodes=2", "cluster.gpus_per_node=2", "data=synthetic", "model.num_classes=1000"]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a rank that aborts shows its stack
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["applied"]["materialized"] == MATERIALIZED[engine]
    for rank, r in enumerate(result["ranks"]):
        growth = r["peak_rss_gib"] - r["rss_before_build_gib"]
        print(f"{model} {engine} rank {rank}: peak RSS {r['peak_rss_gib']:.2f} GiB "
              f"({r['peak_rss_gib'] / full_gib:.0%} of the full fp32 model, {full_gib:.2f} "
              f"GiB), grown by {growth:.2f} GiB ({growth / full_gib:.0%}) from "
              f"{r['rss_before_build_gib']:.2f} GiB before the build; parameters "
              f"{r['param_gib']:.2f} GiB, build {r['build_s']:.0f} s")
        assert r["param_gib"] == pytest.approx(full_gib / WORLD, rel=0.01)
        assert growth < MAX_FRACTION * full_gib
        if model == "vit_3b":
            assert r["peak_rss_gib"] < MAX_FRACTION * full_gib


def test_model_state_bytes_are_the_local_shards(tmp_path):
    """``model_state_bytes`` counts what each rank holds: at 2 ranks FULL_SHARD's params and
    grads are half of DDP's (within the flat parameters' padding, 1%), NO_SHARD's equal
    DDP's, and DDP's params are the whole model in fp32; AdamW's state is its two moments
    (twice the params) and a 4-byte step count a parameter tensor: one an original
    parameter under DDP (vit_tiny: 56), one a flat parameter under FSDP1 on flat parameters
    (``use_orig_params`` false, uncompiled: 5 units). Real 2-rank gloo process group, one
    AdamW step per strategy (tests/integration/memory_worker.py --state-bytes)."""
    out = tmp_path / "state.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "tests" / "integration" / "memory_worker.py"), "--state-bytes", str(out),
           "model=vit_tiny", "device=cpu"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out.read_text())
    full_model = got.pop("full_model_bytes")
    print(full_model, {k: v[0]["model_state_bytes"] for k, v in got.items()})
    mine = {k: [r["model_state_bytes"] for r in rows] for k, rows in got.items()}
    for rank in (0, 1):
        ddp = mine["DDP"][rank]
        assert ddp["params"] == ddp["grads"] == full_model, (ddp, full_model)
        steps = {name: (held[rank]["optimizer"] - 2 * held[rank]["params"]) / 4
                 for name, held in mine.items()}  # exp_avg and exp_avg_sq, then the steps
        assert steps == {"DDP": 56, "NO_SHARD": 5, "FULL_SHARD": 5}, (steps, got)
        assert {k: mine["NO_SHARD"][rank][k] for k in ("params", "grads")} == {
            k: ddp[k] for k in ("params", "grads")}
        for key in ("params", "grads"):
            assert 0.5 <= mine["FULL_SHARD"][rank][key] / ddp[key] <= 0.51, (key, got)
    for rows in got.values():  # the max over ranks is every rank's and covers each
        assert rows[0]["model_state_bytes_max"] == rows[1]["model_state_bytes_max"]
        assert all(r["model_state_bytes_max"][k] >= r["model_state_bytes"][k]
                   for r in rows for k in r["model_state_bytes"])


def test_jax_model_state_bytes_count_the_held_params_and_adamw_state():
    """The JAX trainer's ``model_state_bytes``: fp32 params' bytes, and AdamW's two moments
    plus its int32 step count; gradients are not held (null)."""
    jnp = pytest.importorskip("jax.numpy")
    optax = pytest.importorskip("optax")
    from vitfsdp.jax.train import model_state_bytes  # JAX only where the test runs

    params = {"w": jnp.ones((100, 10)), "b": jnp.ones(10)}
    got = model_state_bytes({"params": params, "opt_state": optax.adamw(1e-3).init(params)})
    assert got == {"params": 4040, "grads": None, "optimizer": 2 * 4040 + 4}
