"""Real multi-process gloo training: every strategy gives single-process training's losses.

Fixed data (digits, no shuffle): at every step the ranks' local batches make up exactly the
single process's batch, so with fp32 each strategy must reproduce its losses.
"""

from __future__ import annotations

import pytest

from tests.conftest import read, run_module

STEPS = 6  # the loss at step 6 is the loss after 5 optimizer steps
COMMON = ["model=vit_tiny", "data=digits", "data.shuffle=false", "precision=fp32", "device=cpu",
          f"train.steps={STEPS}", "train.warmup_steps=0", "train.log_every=1", "train.lr=3e-3"]
SWEPT = "HYBRID_1GPU,HYBRID_2GPU,DDP,NO_SHARD,FULL_SHARD,SHARD_GRAD_OP"
REL_TOL = 1e-4


def _losses(run_dir) -> list[float]:
    return [w["loss"] for w in read(run_dir / "metrics.jsonl")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[float]:
    out = tmp_path_factory.mktemp("single")
    proc = run_module("vitfsdp.train", *COMMON, "strategy=DDP", "cluster.gpus_per_node=1",
                      "train.local_batch_size=8", f"hydra.run.dir={out}", cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = _losses(out)
    assert len(losses) == STEPS
    return losses


@pytest.mark.slow
def test_every_strategy_on_4_ranks_matches_single_process(reference, tmp_path):
    proc = run_module("vitfsdp.sweep", "-m", f"strategy={SWEPT}", "nodes=2", *COMMON,
                      "train.local_batch_size=2", f"hydra.sweep.dir={tmp_path}",
                      "hydra.sweep.subdir=${strategy.name}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in SWEPT.split(","):
        run = read(tmp_path / name / "run.json")
        assert run["status"] == "completed" and run["world"]["size"] == 4, name
        assert _losses(tmp_path / name) == pytest.approx(reference, rel=REL_TOL), name


@pytest.mark.slow
def test_hybrid_8gpu_on_8_ranks_matches_single_process(reference, tmp_path):
    proc = run_module("vitfsdp.train", *COMMON, "strategy=HYBRID_8GPU", "nodes=1",
                      "cluster.gpus_per_node=8", "train.local_batch_size=1",
                      f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = read(tmp_path / "run.json")
    assert (run["world"]["size"], run["world"]["replicas"]) == (8, 1)
    assert _losses(tmp_path) == pytest.approx(reference, rel=REL_TOL)
