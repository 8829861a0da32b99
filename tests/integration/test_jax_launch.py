"""JAX runs through the launchers the torch runs use, as real processes: a mixed
PyTorch/JAX sweep under the local launcher (torchrun starts the ranks; jax.distributed with
gloo collectives between them) and its analysis; a 2-node JAX point on the virtual Slurm
cluster (srun, one task per rank), gated like tests/integration/test_slurm_sweep.py."""

from __future__ import annotations

import os
import uuid

import pandas as pd
import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it

from tests.conftest import TINY, read, run_module
from tests.integration.test_jax_checkpoint import FAST_COMPILE
from tests.integration.test_virtual_slurm import NODES, NOT_STARTED, hostnames, require_cluster


def test_mixed_sweep_runs_and_analyses(tmp_path, monkeypatch):
    """The README's comparison sweep for one strategy (the acceptance command adds DDP), with
    one rank per node to halve its processes (2 CPU cores; CI time), and XLA's CPU compiler
    without its costly LLVM passes (half the compile time; this test checks the launch)."""
    monkeypatch.setenv("XLA_FLAGS", FAST_COMPILE)
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "framework=torch,jax", "strategy=FULL_SHARD",
                      "nodes=1,2", "cluster.gpus_per_node=1", *TINY,
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sweep done: 4 completed" in proc.stdout
    runs = [read(p) for p in sorted(sweep_dir.glob("*/run.json"))]
    jax_runs = [r for r in runs if r["config"]["framework"] == "jax"]
    assert len(jax_runs) == 2
    for run in jax_runs:
        nodes = run["config"]["nodes"]
        assert run["status"] == "completed" and run["world"]["launched_by"] == "torchrun"
        assert run["world"]["num_processes"] == run["world"]["size"] == nodes
        assert run["applied"]["compile_s"] > 0 and run["versions"]["jax"]

    proc = run_module("vitfsdp.analysis", str(sweep_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = sweep_dir / "analysis"
    ratio = pd.read_csv(out / "framework_ratio.csv")
    assert sorted(zip(ratio["strategy"], ratio["nodes"], strict=True)) == [
        ("FULL_SHARD", 1), ("FULL_SHARD", 2)]
    assert (ratio["jax_over_torch"] > 0).all()
    assert (out / "weak_scaling.png").stat().st_size > 10_000
    assert set(pd.read_csv(out / "runs.csv")["framework"]) == {"torch", "jax"}


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_jax_point_on_two_virtual_slurm_nodes(tmp_path, monkeypatch):
    require_cluster()
    monkeypatch.setenv("XLA_FLAGS", FAST_COMPILE)  # the ranks' environment: sbatch exports it
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "cluster=virtual", "framework=jax", "nodes=2",
                      *TINY, "cluster.poll_s=1",
                      f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 point: 1 completed" in proc.stdout
    (point,) = [p.parent for p in sweep_dir.glob("*/job.json")]
    run, job = read(point / "run.json"), read(point / "job.json")
    assert read(point / "summary.json")["status"] == "completed"
    assert run["config"]["framework"] == "jax" and run["world"]["launched_by"] == "slurm"
    assert run["world"]["num_processes"] == run["world"]["size"] == 4
    assert run["slurm"]["SLURM_JOB_ID"] and run["slurm"]["SLURM_JOB_NUM_NODES"] == "2"
    assert job["job_id"] in (run["slurm"]["SLURM_JOB_ID"], run["slurm"].get(
        "SLURM_ARRAY_JOB_ID"))
    node_names = hostnames(run["slurm"]["SLURM_JOB_NODELIST"])
    assert len(node_names) == 2 and set(node_names) <= NODES
    assert run["rank_hosts"] == [n for n in sorted(node_names) for _ in range(2)]
