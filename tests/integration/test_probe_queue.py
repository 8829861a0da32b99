"""A Slurm probe's jobs in the queue, on the virtual Slurm cluster: ``--timeout`` counts from
a job's start, not its submission, so a long queue wait does not cancel it; the wait is
shown as it goes; ``--queue-timeout`` bounds it. Jobs are held PENDING with sbatch's
``--begin`` (``cluster.sbatch_args``), which keeps only the probe's own jobs waiting (the
nodes stay free for others using the cluster)."""

from __future__ import annotations

import logging
import os
import re
from itertools import pairwise

import pytest

from tests.conftest import read, run_module
from tests.integration.test_probe import _assert_cancelled

pytestmark = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                                reason="the virtual Slurm cluster is not started (make slurm-up)")


def test_the_timeout_counts_from_the_jobs_start_and_the_wait_is_shown(tmp_path, caplog):
    """A job held 12 s in the queue (``--begin=now+12``) with a 3 s timeout: before, it was
    cancelled PENDING 3 s after its submission; now it starts, runs 3 s and is cancelled
    RUNNING, the reason saying how long it pended (>= 10 s) and ran (>= 3 s). While it
    waits, a line says how long it has waited, at most one per ``wait_line_s`` (4 s)."""
    from vitfsdp.plan.__main__ import compose_points
    from vitfsdp.probe.__main__ import framework_overrides
    from vitfsdp.probe.slurm import framework_job, run_jobs

    ((point, cfg),) = compose_points(["cluster=virtual", 'cluster.sbatch_args=["--begin=now+12"]',
                                      "model=vit_tiny", "strategy=FULL_SHARD", "nodes=1",
                                      "device=cpu"])
    job = framework_job(cfg, framework_overrides(point), tmp_path / "fw")
    with caplog.at_level(logging.INFO, logger="vitfsdp.probe.slurm"):
        run_jobs([job], 3, wait_line_s=4)
    match = re.fullmatch(r"timed out: --timeout 3 s \(counted from the job's start\) passed "
                         r"with Slurm job (\d+) (\w+), after (\d+) s in the queue and (\d+) s "
                         r"running \(state looked at every 1 s\); cancelled", job.outcome)
    assert match and not job.interrupted, job.outcome
    assert match[2] in {"RUNNING", "COMPLETING"} and int(match[3]) >= 10, job.outcome
    assert 3 <= int(match[4]) <= 8, job.outcome  # cancelled at its timeout, not later
    _assert_cancelled(match[1])
    lines = [r.getMessage() for r in caplog.records]
    waits = [ln for ln in lines if "PENDING" in ln]
    # 12 s in the queue, a line at most every 4 s (its state's change, then "still"): 2 or 3
    # lines, each with the wait so far
    assert 2 <= len(waits) <= 3 and "still PENDING" in waits[-1], lines
    for line in waits:
        assert re.search(rf"framework run fw: Slurm job {match[1]} (still )?PENDING "
                         r"\(BeginTime\), \d+ s in the queue", line), line
        assert "(no --queue-timeout: waiting on; 0/1 job(s) ended" in line or "still" not in line
    seconds = [int(re.search(r"(\d+) s in the queue", ln)[1]) for ln in waits]
    assert all(b - a >= 3 for a, b in pairwise(seconds)), waits  # at most one per 4 s, rounded
    assert any(re.search(rf"Slurm job {match[1]} RUNNING, after \d+ s in the queue and \d+ s "
                         "running", ln) for ln in lines), lines


def test_a_job_past_its_queue_timeout_is_cancelled_and_recorded(tmp_path):
    """``--queue-timeout 3`` with every job held 10 min (``--begin=now+600``): both world
    sizes' jobs are cancelled 3 s after their submission, still PENDING, and recorded
    failed, the reason naming the job, the state, why Slurm held it and the wait; the
    probe's first line says the queue is bounded; exit 1 (no world size measured)."""
    r = run_module("vitfsdp.probe", "-m", "cluster=virtual",
                   'cluster.sbatch_args=["--begin=now+600"]', "model=vit_tiny",
                   "strategy=FULL_SHARD", "nodes=1,2", "device=cpu", "--timeout", "60",
                   "--queue-timeout", "3", "--out", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("each at most --timeout 60 s from its start (after at most --queue-timeout 3 s in "
            "the queue): up to 0:01:03" in r.stdout), r.stdout
    assert "waiting at most --queue-timeout 3 s in the queue" in r.stdout + r.stderr
    (kept,) = (tmp_path / "probes").glob("*.json")
    worlds = read(kept)["worlds"]
    assert [w["world_size"] for w in worlds] == [2, 4]
    for world in worlds:
        assert world["status"] == "failed", world
        match = re.fullmatch(r"queue timeout: --queue-timeout 3 s \(counted from submission\) "
                             r"passed with Slurm job (\d+) PENDING \(BeginTime\), (\d+) s in the "
                             r"queue \(state looked at every 1 s\); cancelled", world["reason"])
        assert match and 3 <= int(match[2]) <= 8, world["reason"]
        _assert_cancelled(match[1])

