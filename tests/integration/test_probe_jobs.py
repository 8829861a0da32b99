"""When a Slurm probe's job has ended, on the virtual Slurm cluster: a job sacct does not
know (no accounting, slurmdbd down) is looked up with squeue, and one neither knows is
bounded from its submission; a job Slurm requeues waits again, its queue bound counted from
the requeue; a job of several tasks has ended only when every task has. Each test runs
:func:`vitfsdp.probe.slurm.run_jobs` in a thread, so a probe that would wait forever
fails the test instead of hanging it."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import threading
import time

import pytest

from tests.integration.test_probe import _assert_cancelled

pytestmark = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                                reason="the virtual Slurm cluster is not started (make slurm-up)")


def _job(tmp_path, fn, what="world size 1", **params):
    """A :class:`ProbeJob` running ``fn`` (picklable) under submitit, as the probe's own."""
    import submitit

    from vitfsdp.probe import slurm as ps

    executor = submitit.SlurmExecutor(folder=tmp_path / ".submitit", max_num_timeout=0)
    executor.job_class = ps._job_class()
    executor.update_parameters(time=5, **params)
    return ps.ProbeJob(what, lambda: executor.submit(fn))


def _run(job, within_s: float, **kwargs) -> float:
    """Seconds :func:`run_jobs` took on ``[job]``; fails (cancelling the job) if it has
    not returned in ``within_s``."""
    from vitfsdp.probe.slurm import run_jobs

    t0 = time.monotonic()
    thread = threading.Thread(target=run_jobs, args=([job],), kwargs=kwargs, daemon=True)
    thread.start()
    thread.join(within_s)
    if thread.is_alive():
        if job.job is not None:
            job.job.cancel(check=False)
        pytest.fail(f"run_jobs still waiting after {within_s:g} s: {job.what} {job.state}")
    return time.monotonic() - t0


def _blind(tmp_path, monkeypatch, *tools: str) -> None:
    """``tools`` (``sacct``, ``squeue``) answer as for jobs they do not know: a header, or
    nothing (a cluster without accounting, slurmdbd down)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).write_text("#!/bin/sh\necho 'JobID|State|NodeList|Start|Reason'\n"
                                    if tool == "sacct" else "#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_job_sacct_does_not_know_is_looked_up_with_squeue(tmp_path, monkeypatch):
    """sacct knows no job (header only) and the job dies without its result (``os._exit``:
    a node lost, an OOM kill): before, it stayed UNKNOWN, counted as waiting, and the probe
    waited forever; now squeue says FAILED, so it has ended within seconds, recorded failed
    for want of its result."""
    from vitfsdp.probe.slurm import world_result

    _blind(tmp_path, monkeypatch, "sacct")
    job = _job(tmp_path, functools.partial(os._exit, 1))
    took = _run(job, 40, timeout_s=3, poll_s=1)
    assert job.outcome == "" and job.state == "FAILED" and took < 30, (job.state, took)
    ok, why = world_result(job)
    assert not ok and re.fullmatch(rf"Slurm job {job.job_id} FAILED without the result of "
                                   r"task 0 \(see .+\)", why), why


def test_a_job_neither_sacct_nor_squeue_knows_is_bounded_from_its_submission(tmp_path,
                                                                              monkeypatch):
    """Neither sacct nor squeue knows the job (it runs 10 min): before, it waited forever
    (--timeout counts from a start it never got); now it is cancelled --timeout 3 s after
    its submission, the reason saying neither knew it."""
    _blind(tmp_path, monkeypatch, "sacct", "squeue")
    job = _job(tmp_path, functools.partial(time.sleep, 600))
    took = _run(job, 40, timeout_s=3, poll_s=1)
    monkeypatch.undo()  # the real sacct and squeue again
    assert re.fullmatch(
        rf"timed out: --timeout 3 s \(counted from submission\) passed with Slurm job "
        rf"{job.job_id} UNKNOWN \(known to neither sacct nor squeue\), [3-6] s in the queue "
        r"\(state looked at every 1 s\); cancelled", job.outcome or ""), job.outcome
    assert took < 15, took
    _assert_cancelled(job.job_id)


def test_a_requeued_job_waits_again_from_its_requeue(tmp_path):
    """A job requeued 3 s into its run (``scontrol requeue``: a node failure, a preemption)
    with --queue-timeout 8; the virtual cluster holds a requeued job 30 s before it starts
    again. Before, it was cancelled at once, as a queue timeout counted from its first
    submission with its run time lost; now it waits again, is cancelled 8 s after the
    requeue, and the reason counts both its waits and its run."""
    job = _job(tmp_path, functools.partial(time.sleep, 600),
               additional_parameters={"requeue": True})
    said = []

    def requeue():
        while job.started_s is None:
            time.sleep(0.2)
        time.sleep(3)
        said.append(time.monotonic())
        subprocess.run(["scontrol", "requeue", job.job_id], check=True)

    threading.Thread(target=requeue, daemon=True).start()
    try:
        _run(job, 55, timeout_s=30, poll_s=1, queue_timeout_s=8)
    finally:
        job.job.cancel(check=False)
    ended = time.monotonic()
    match = re.fullmatch(
        rf"queue timeout: --queue-timeout 8 s \(counted from its requeue\) passed with Slurm "
        rf"job {job.job_id} \w+( \(\w+\))?, after (\d+) s in the queue and (\d+) s running, "
        r"requeued by Slurm once \(state looked at every 1 s\); cancelled", job.outcome or "")
    assert match and said and int(match[3]) >= 3, job.outcome
    assert int(match[2]) >= 7 and ended - said[0] >= 7, (job.outcome, ended - said[0])
    # cancelled: not to start again (its first run's processes may still be COMPLETING,
    # sacct keeping its REQUEUED record meanwhile)
    queued = subprocess.run(["squeue", "-h", "-j", job.job_id, "-o", "%T"],
                            capture_output=True, text=True).stdout.split()
    assert queued in ([], ["COMPLETING"], ["CANCELLED"]), queued


def test_a_job_has_ended_when_every_task_has(tmp_path):
    """Two tasks, task 1 hung (in its teardown, say) after task 0 wrote its result: before,
    task 0's result counted as the job's end and world_result blocked on task 1 forever;
    now the job runs on to its --timeout (5 s), is cancelled and recorded timed out, and
    world_result says so at once."""
    from vitfsdp.probe.slurm import world_result

    hang = functools.partial(subprocess.call,
                             ["sh", "-c", 'test "$SLURM_PROCID" = 0 || exec sleep 600'])
    job = _job(tmp_path, hang, "world size 2", ntasks_per_node=2, nodes=1)
    took = _run(job, 40, timeout_s=5, poll_s=1)
    assert job.job.task(0).paths.result_pickle.exists()
    assert job.outcome and job.outcome.startswith("timed out: --timeout 5 s (counted from "
                                                  "the job's start)"), job.outcome
    assert took < 25, took
    t0 = time.monotonic()
    assert world_result(job) == (False, job.outcome) and time.monotonic() - t0 < 1
    _assert_cancelled(job.job_id)
