"""Checkpoint and resume: a run stopped by a real signal saves a sharded checkpoint, records
``preempted`` and exits with code 3; run again in its directory it resumes and ends with the
loss of a run that was never interrupted (fp32, shuffled real data: the data order continues),
under FULL_SHARD on 2 ranks and under HYBRID_2GPU on 4 (FSDP1 HYBRID_SHARD: 2 shard groups of
2 ranks, each a replica of the other, as a requeued HYBRID point resumes). Windows measured
before the interruption are kept, marked with their attempt, also when a launcher moved the
first attempt into ``attempts/0/``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, read
from vitfsdp import checkpoint
from vitfsdp.config import RunConfig, TrainConfig
from vitfsdp.core.loop import remaining_windows

COMMON = ["model=vit_tiny", "data=digits", "device=cpu", "precision=fp32",
          "strategy=FULL_SHARD", "train.steps=6", "train.warmup_steps=1", "train.log_every=1",
          "train.local_batch_size=4", "train.lr=3e-3"]
REL_TOL = 1e-5
# (ranks, replicas, overrides) of the worker's torchrun; HYBRID_2GPU on 2 nodes of 2 ranks:
# shard groups {0, 1} and {2, 3}, replicated across them
WORKER_LAYOUTS = {
    "FULL_SHARD": (2, 1, ["nodes=1", "cluster.gpus_per_node=2"]),
    "HYBRID_2GPU": (4, 2, ["strategy=HYBRID_2GPU", "nodes=2", "cluster.gpus_per_node=2"]),
}


@pytest.fixture(scope="module", params=list(WORKER_LAYOUTS))
def worker_runs(request, tmp_path_factory):
    """The worker's run directories under one strategy: (its folder, its
    :data:`WORKER_LAYOUTS` entry)."""
    ranks, _, overrides = WORKER_LAYOUTS[request.param]
    out = tmp_path_factory.mktemp(f"ckpt-{request.param}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={ranks}", str(REPO / "tests" / "integration" /
                                             "checkpoint_worker.py"), str(out), *COMMON,
           *overrides, "train.checkpoint_every=2"]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out, WORKER_LAYOUTS[request.param]


def test_resumed_run_ends_with_the_uninterrupted_loss(worker_runs):
    worker_runs, (ranks, replicas, _) = worker_runs
    exits = read(worker_runs / "exits.json")
    assert exits["first"] == {"signal": "SIGUSR2", "step": 3, "code": 3}
    rng = {f"rng-{r}.pt" for r in range(ranks)}
    assert {"meta.json", ".metadata", *rng} <= set(exits["checkpoint_files"])
    ref = read(worker_runs / "reference" / "metrics.jsonl")
    resumed = read(worker_runs / "interrupted" / "metrics.jsonl")
    print("reference losses", [w["loss"] for w in ref])
    print("resumed losses  ", [(w["step_end"], w["attempt"], w["loss"]) for w in resumed])
    assert [w["step_end"] for w in resumed] == [1, 2, 3, 4, 5, 6]
    assert [w["attempt"] for w in resumed] == [0, 0, 0, 1, 1, 1]
    assert [w["loss"] for w in resumed] == pytest.approx([w["loss"] for w in ref], rel=REL_TOL)
    assert resumed[3]["warmup"] and not resumed[4]["warmup"]  # cold again after the resume
    summary = read(worker_runs / "interrupted" / "summary.json")
    assert summary["status"] == "completed" and summary["num_attempts"] == 2
    # the first run of the worker's processes: their start to its first step (imports,
    # rendezvous, build); the later runs share those processes and record none (theirs
    # would count the runs before them)
    reference = read(worker_runs / "reference" / "summary.json")
    assert 0 < reference["startup_s"] < 120 and "startup_s" not in summary
    assert summary["num_windows"] == 4  # measured windows of both attempts
    run = read(worker_runs / "interrupted" / "run.json")
    assert (run["attempt"], run["resumed_from_step"]) == (1, 3)
    assert (run["world"]["size"], run["world"]["replicas"]) == (ranks, replicas)
    assert not (worker_runs / "interrupted" / checkpoint.CHECKPOINT_DIR).exists()


def test_signal_exits_3_and_rerun_resumes_from_moved_attempt(tmp_path):
    """Through the entry point, one process: SIGTERM at step 2 → exit 3, ``preempted``; the
    attempt is moved aside as a launcher does (checkpoint/ stays); the rerun resumes."""
    args = [sys.executable, "-m", "vitfsdp.train", *COMMON, "nodes=1", "cluster.gpus_per_node=1",
            f"hydra.run.dir={tmp_path}", "hydra.output_subdir=null"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={**env, "VITFSDP_TEST_FAULT": "term:0:2"})
    assert first.returncode == checkpoint.EXIT_PREEMPTED, first.stderr[-3000:]
    summary = read(tmp_path / "summary.json")
    print("first attempt:", summary["status"], summary["reason"])
    assert summary["status"] == "preempted" and summary["interrupted"]
    assert summary["checkpoint_step"] == summary["last_step"] == 2
    assert "Traceback" not in first.stderr
    moved = tmp_path / "attempts" / "0"
    moved.mkdir(parents=True)
    for p in tmp_path.iterdir():
        if p.name not in ("attempts", checkpoint.CHECKPOINT_DIR):
            shutil.move(str(p), moved / p.name)
    second = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    windows = read(tmp_path / "metrics.jsonl")
    print("windows:", [(w["step_end"], w["attempt"], round(w["loss"], 6)) for w in windows])
    assert [(w["step_end"], w["attempt"]) for w in windows] == [
        (1, 0), (2, 0), (3, 1), (4, 1), (5, 1), (6, 1)]
    assert read(tmp_path / "summary.json")["status"] == "completed"
    assert read(moved / "summary.json")["status"] == "preempted"  # the attempt stays as it was


def _cfg(**train) -> RunConfig:
    return RunConfig(train=TrainConfig(**{"steps": 6, "warmup_steps": 1, "log_every": 2,
                                          **train}))


def test_checkpoint_of_another_config_is_refused(tmp_path):
    digest, d = checkpoint.fingerprint(_cfg(lr=1e-3))
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "meta.json").write_text(json.dumps(
        {"step": 2, "attempt": 0, "fingerprint": digest, "config": d}))
    assert checkpoint.find(tmp_path, _cfg(lr=1e-3, checkpoint_every=2, timeout_s=9), 0)
    with pytest.raises(ValueError, match=r"another config \(differs in: train.lr\)"):
        checkpoint.find(tmp_path, _cfg(lr=2e-3), 0)


def test_interrupted_swap_falls_back_to_the_previous_checkpoint(tmp_path):
    digest, d = checkpoint.fingerprint(_cfg())
    (tmp_path / checkpoint.OLD_DIR).mkdir()
    (tmp_path / checkpoint.OLD_DIR / "meta.json").write_text(json.dumps(
        {"step": 4, "attempt": 0, "fingerprint": digest, "config": d}))
    assert checkpoint.find(tmp_path, _cfg(), 0)["step"] == 4
    assert (tmp_path / checkpoint.CHECKPOINT_DIR / "meta.json").is_file()


@pytest.mark.parametrize("done, expected", [
    (0, [(0, (1, 1, True)), (1, (2, 3, False)), (2, (4, 5, False)), (3, (6, 6, False))]),
    (3, [(2, (4, 5, False)), (3, (6, 6, False))]),
    (4, [(2, (5, 5, False)), (3, (6, 6, False))]),  # a checkpoint inside a window
    (6, []),
])
def test_remaining_windows_after_a_resume(done, expected):
    assert list(remaining_windows(_cfg().train, done)) == expected


def test_negative_checkpoint_every_and_memory_limit_are_refused():
    with pytest.raises(ValueError, match="train.checkpoint_every"):
        TrainConfig(checkpoint_every=-1)
    with pytest.raises(ValueError, match="train.memory_limit_gib"):
        TrainConfig(memory_limit_gib=-0.5)
