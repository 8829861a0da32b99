"""JAX checkpoint and resume (orbax): a ``framework=jax`` run of 2 processes (torchrun, one
CPU device each, FULL_SHARD so each process holds half of every sharded array) is sent a real
SIGUSR2 on rank 1 only; both processes save their shards at the next window boundary, the run
records ``preempted`` and raises ``Preempted`` (exit code 3). A run of another config in that
directory is refused; the same config resumes and ends with the parameters of a run that was
never interrupted (fp32, shuffled real data: the data order continues)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it

from tests.conftest import REPO, read
from vitfsdp import checkpoint

COMMON = ["framework=jax", "model=vit_tiny", "data=digits", "device=cpu", "precision=fp32",
          "strategy=FULL_SHARD", "nodes=1", "cluster.gpus_per_node=2", "train.steps=5",
          "train.warmup_steps=1", "train.log_every=1", "train.local_batch_size=2",
          "train.lr=3e-3", "train.checkpoint_every=2"]
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


@pytest.fixture(scope="module")
def worker_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("jax_ckpt")
    # XLA's CPU compiler without its costly LLVM passes: half the compile time of the five
    # programs each process compiles (init and step, three runs), the same arithmetic
    # the coordinator on a port free now, not MASTER_PORT's 10000-19999 slot, which the
    # other pytest worker's JAX run may hold (CI saw 'Failed to start RPC server' once)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XLA_FLAGS": FAST_COMPILE,
           "JAX_COORDINATOR_PORT": str(port)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "tests" / "integration" / "jax_checkpoint_worker.py"), str(out), *COMMON]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out


def test_signal_on_one_rank_saves_every_shard_and_records_preempted(worker_runs):
    exits = read(worker_runs / "exits.json")
    assert exits["first"] == {"signal": "SIGUSR2", "step": 3, "code": checkpoint.EXIT_PREEMPTED}
    assert set(exits["checkpoint_files"]) == {checkpoint.META_FILE, "state"}
    meta = exits["meta"]
    assert (meta["step"], meta["attempt"], meta["world_size"]) == (3, 0, 2)
    assert meta["config"]["framework"] == "jax" and len(meta["fingerprint"]) == 16
    first = exits["first_summary"]
    assert first["status"] == "preempted" and first["interrupted"]
    assert first["checkpoint_step"] == first["last_step"] == 3 and first["num_attempts"] == 1


def test_checkpoint_of_another_config_is_refused(worker_runs):
    message = read(worker_runs / "exits.json")["other_config"]
    assert "was saved by a run of another config (differs in: train.lr)" in message


def test_resumed_run_ends_with_the_uninterrupted_parameters(worker_runs):
    for rank in (0, 1):  # each rank's shards of every parameter
        params = np.load(worker_runs / f"params-{rank}.npz")
        names = [k.removeprefix("reference") for k in params.files if k.startswith("reference")]
        assert len(names) > 10 and len(params.files) == 2 * len(names)
        for name in names:
            np.testing.assert_allclose(params["resumed" + name], params["reference" + name],
                                       rtol=1e-5, atol=1e-7, err_msg=f"rank {rank} {name}")
    ref = read(worker_runs / "reference" / "metrics.jsonl")
    resumed = read(worker_runs / "interrupted" / "metrics.jsonl")
    print("resumed losses", [(w["step_end"], w["attempt"], w["loss"]) for w in resumed])
    assert [(w["step_end"], w["attempt"]) for w in resumed] == [
        (1, 0), (2, 0), (3, 0), (4, 1), (5, 1)]
    assert [w["loss"] for w in resumed] == pytest.approx([w["loss"] for w in ref], rel=1e-5)
    assert resumed[3]["warmup"] and not resumed[4]["warmup"]  # cold again after the resume
    summary = read(worker_runs / "interrupted" / "summary.json")
    assert summary["status"] == "completed" and summary["num_attempts"] == 2
    run = read(worker_runs / "interrupted" / "run.json")
    assert (run["attempt"], run["resumed_from_step"]) == (1, 3)
    assert not (worker_runs / "interrupted" / checkpoint.CHECKPOINT_DIR).exists()
    assert read(worker_runs / "reference" / "summary.json")["num_attempts"] == 1
