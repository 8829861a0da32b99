"""The probe's ``--timeout`` and ``--queue-timeout``: refused, before anything is composed or
submitted, where not a finite number of seconds > 0; when a Slurm job is cancelled (from its
start, or its submission while it waits); what a Slurm probe's first line counts; and the
signals held while sbatch runs."""

from __future__ import annotations

import math

import pytest

from vitfsdp.probe.__main__ import jax_jobs, main, max_at_once, slurm_wait_line
from vitfsdp.probe.slurm import run_jobs, signal_name


@pytest.mark.parametrize("option,fix", [("--timeout", "--timeout 1800"),
                                        ("--queue-timeout", "--queue-timeout 14400")])
@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "soon"])
def test_a_timeout_not_finite_and_positive_is_refused_before_anything(value, option, fix,
                                                                      tmp_path, capsys) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        main(["-m", "cluster=virtual", "model=vit_tiny", "nodes=1,2", option, value,
              "--out", str(out)])
    assert exit_.value.code == 2
    (error,) = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert f"argument {option}" in error and "a finite number > 0" in error, error
    assert fix in error  # the fix
    assert not out.exists()  # nothing composed, written or submitted


def test_run_jobs_refuses_nan_instead_of_polling_sacct_without_pause() -> None:
    """NaN made every deadline comparison false and the sleep 0: sacct in a tight loop."""
    with pytest.raises(ValueError, match="timeout_s=nan: a finite number of seconds > 0"):
        run_jobs([], math.nan)
    with pytest.raises(ValueError, match="queue_timeout_s=inf: a finite number of seconds"):
        run_jobs([], 60, queue_timeout_s=math.inf)


def test_a_job_is_cancelled_from_its_start_or_its_queue_timeout() -> None:
    """The deadline of a job: ``--timeout`` after its start (whatever it waited), or, while
    it waits, ``--queue-timeout`` after its submission, or none; polls at most a tenth of
    either, at least 1 s."""
    from vitfsdp.probe.slurm import Limits, ProbeJob

    job = ProbeJob("world size 2", lambda: None, submitted_s=100.0)
    assert Limits(1800).deadline(job) is None  # waits as long as the queue takes
    assert Limits(1800, 600).deadline(job) == 700.0
    job.started_s = 5000.0  # 4900 s in the queue
    assert Limits(1800).deadline(job) == Limits(1800, 600).deadline(job) == 6800.0
    assert job.times(5012.0) == "after 4900 s in the queue and 12 s running"
    assert Limits(1800).poll_s == 30 and Limits(1800, 60).poll_s == 6
    assert Limits(3).poll_s == 1 and Limits(60, 3).poll_s == 1


def test_a_requeued_job_waits_again_and_an_unknown_one_is_bounded_from_submission() -> None:
    """Requeued 12 s into its run, a job waits again: its queue bound counts from the
    requeue (before: from its submission, so it was cancelled at once), its --timeout from
    its restart, and its times add up both waits and runs. A job neither sacct nor squeue
    knows (UNKNOWN) gets the shorter of --timeout and --queue-timeout from its submission
    (before: no bound without --queue-timeout); UNKNOWN after its start changes nothing."""
    from vitfsdp.probe.slurm import Limits, ProbeJob

    job = ProbeJob("world size 2", lambda: None, submitted_s=100.0, state="PENDING")
    job.follow("RUNNING", "", 130.0, 0.0)  # sacct gives no Start: this look's time
    job.follow("PENDING", "", 142.0, 0.0)  # requeued
    assert (job.requeues, job.queued_s, job.started_s) == (1, 142.0, None)
    assert Limits(1800, 600).deadline(job) == 742.0 and Limits(1800).deadline(job) is None
    assert job.times(150.0) == "after 38 s in the queue and 12 s running, requeued by Slurm once"
    job.follow("RUNNING", "", 160.0, 0.0)
    assert Limits(1800, 600).deadline(job) == 1960.0
    assert job.times(165.0) == "after 48 s in the queue and 17 s running, requeued by Slurm once"
    job.follow("UNKNOWN", "", 170.0, 0.0)  # sacct and squeue lost it: still running
    assert job.started_s == 160.0 and job.requeues == 1

    unknown = ProbeJob("world size 4", lambda: None, submitted_s=100.0)
    assert unknown.state == "NOT SUBMITTED" and Limits(1800).deadline(unknown) is None
    unknown.state = "UNKNOWN"
    assert Limits(1800).deadline(unknown) == 1900.0
    assert Limits(1800, 600).deadline(unknown) == 700.0
    assert Limits(1800, 600).unknown_bound() == "--queue-timeout 600 s"
    assert Limits(60, 600).unknown_bound() == "--timeout 60 s"


def test_sacct_start_is_read_as_this_hosts_monotonic_time() -> None:
    """sacct prints Start in local time, ``Unknown`` before the job starts."""
    import datetime

    from vitfsdp.probe.slurm import start_s

    wall = datetime.datetime(2026, 11, 30, 4, 34, 14).timestamp()
    assert start_s("2026-11-30T04:34:14", 1000.0, wall + 95) == pytest.approx(905.0)
    assert start_s("2026-11-30T04:34:14", 1000.0, wall - 5) == 1000.0  # a clock ahead: now
    assert start_s("Unknown", 1000.0) is None and start_s("", 1000.0) is None


def test_the_first_line_counts_the_jax_framework_jobs() -> None:
    """Two world sizes of torch and JAX points, FULL_SHARD and DDP: the JAX points submit a
    framework job per world size and strategy (PyTorch's train in the world's job). All
    world sizes' jobs go at once, so the bound is one --timeout of running for them and one
    for the JAX runs after, plus the queue waits (not bounded without --queue-timeout); with
    at most 2 queued at a time, 1 + 2 rounds; with --queue-timeout, each round's wait is
    bounded too."""
    from vitfsdp.plan.__main__ import compose_points

    points = compose_points(["cluster=virtual", "framework=torch,jax", "model=vit_tiny",
                             "strategy=FULL_SHARD,DDP", "nodes=1,2", "device=cpu"])
    assert jax_jobs(points) == 4 and max_at_once([cfg for _, cfg in points]) is None
    line = slurm_wait_line(2, 60, jax_jobs(points))
    assert line.startswith("[probe] Slurm: 6 job(s) (2 world size(s) + 4 JAX framework run(s)), "
                           "submitted at once and waited for here, each at most --timeout 60 s "
                           "from its start (no --queue-timeout: the queue wait is not bounded; "
                           "a line every 4 min says how long a job has waited")
    assert "up to 0:02:00 of running, plus the queue waits" in line
    assert "cancels every job still queued or running" in line
    assert "at most 2 queued at a time" in slurm_wait_line(2, 60, 4, 2)
    assert "up to 0:03:00 of running" in slurm_wait_line(2, 60, 4, 2)
    assert "(5 world size(s))" in slurm_wait_line(5, 60) and "up to 0:01:00" in slurm_wait_line(
        5, 60)
    bounded = slurm_wait_line(2, 60, 4, 2, queue_timeout_s=600)
    assert "from its start (after at most --queue-timeout 600 s in the queue" in bounded
    assert bounded.count("up to 0:33:00;") == 1 and "plus the queue waits" not in bounded
    capped = compose_points(["cluster=virtual", "cluster.max_jobs=3", "model=vit_tiny",
                             "nodes=1,2", "device=cpu"])
    assert max_at_once([cfg for _, cfg in capped]) == 3


def test_a_signal_while_sbatch_runs_is_held_until_it_returns() -> None:
    """SIGTERM sent to this process while a child runs in :func:`signals_held` (as sbatch
    does): the child runs to its end, with the signals blocked (a signal to the process
    group does not stop it midway), and the probe's handler (exit_on_hangup's
    ``SystemExit(143)``) runs after the block; the handlers are as before."""
    import os
    import signal
    import subprocess
    import sys

    from vitfsdp.probe.slurm import signals_held

    def leave(signum, _frame):
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, leave)
    child = [sys.executable, "-c", "import os, time; os.kill(os.getppid(), 15); time.sleep(0.5);"
             "print(open('/proc/self/status').read().split('SigBlk:')[1].split()[0])"]
    ran = []
    try:
        with pytest.raises(SystemExit) as exit_:
            with signals_held():
                ran.append(subprocess.run(child, capture_output=True, text=True, check=True))
        assert exit_.value.code == 143 and len(ran) == 1  # the child ended, then the signal
        blocked = int(ran[0].stdout, 16)
        assert all(blocked >> (s - 1) & 1 for s in (signal.SIGINT, signal.SIGTERM,
                                                     signal.SIGHUP)), ran[0].stdout
        assert signal.getsignal(signal.SIGTERM) is leave
        assert not signal.pthread_sigmask(signal.SIG_BLOCK, []) & {signal.SIGTERM}
        os.kill(os.getpid(), 0)  # still here
    finally:
        signal.signal(signal.SIGTERM, before)


def test_signal_names() -> None:
    assert [signal_name(c) for c in (129, 143, 130, 1)] == [
        "SIGHUP", "SIGTERM", "Ctrl-C (SIGINT)", "exit 1"]


def test_a_signal_during_a_framework_run_keeps_the_runs_measured() -> None:
    """A world size measured, its PyTorch framework run done, then a SIGTERM while its JAX
    run was launched: the PyTorch figures stay and the JAX run is recorded ``interrupted``
    with the signal (before, the whole framework list became one failed entry)."""
    from vitfsdp.plan.__main__ import compose_points
    from vitfsdp.probe.__main__ import record_interrupted
    from vitfsdp.probe.slurm import Interrupted

    points = compose_points(["framework=torch,jax", "model=vit_tiny", "strategy=FULL_SHARD",
                             "nodes=1", "device=cpu"])
    torch_run = {"framework": "torch", "strategy": "FULL_SHARD", "engine": "fsdp1",
                 "status": "completed", "overhead_s": 0.002, "per": "unit"}
    world = {"world_size": 2, "nodes": 1, "ranks_per_node": 2, "status": "completed",
             "framework": [torch_run]}
    worlds = [world]
    spec = {"world_size": 2, "nodes": 1, "ranks_per_node": 2}
    why = "interrupted by SIGTERM after 3 s: Slurm job 7 RUNNING cancelled"
    record_interrupted(Interrupted(143, why), spec, worlds, points)
    assert worlds == [world] and world["status"] == "completed"
    assert world["framework"] == [torch_run, {"framework": "jax", "strategy": "FULL_SHARD",
                                              "engine": "fsdp1", "status": "interrupted",
                                              "reason": why}]
    record_interrupted(SystemExit(129), {**spec, "world_size": 4}, worlds, [])
    assert worlds[-1] == {"world_size": 4, "nodes": 1, "ranks_per_node": 2,
                          "status": "failed", "reason": "interrupted by SIGHUP"}
