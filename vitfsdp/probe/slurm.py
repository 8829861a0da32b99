"""The probe on a Slurm cluster: per world size of the sweep one job of that many nodes, made
as the sweep makes a point's job (:mod:`vitfsdp.launch.slurm`: the profile's modules,
environment, ``srun`` options, a task per GPU), whose tasks run the probe's worker; then
the framework runs (``vitfsdp.train`` of the smallest model, :data:`FRAMEWORK_MODEL
<vitfsdp.probe.__main__.FRAMEWORK_MODEL>`) as ordinary point jobs. The sweep's launch
mode must be ``srun`` (a task per rank), the default of every shipped Slurm profile.

The probe's process waits for each world size's job in turn (on the login node, where it was
started), at most ``--timeout`` seconds counted from the job's submission, queue wait
included: then the job is cancelled and the world size recorded failed, the reason naming
the job, its state and how long it pended (:func:`wait_for_job`).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import time
from pathlib import Path

from vitfsdp.launch.slurm import TrainTask, executor_parameters, node_python, task_spec

#: The job-name of the probe's jobs.
JOB_NAME = "vitfsdp-probe"
#: The time limit of a probe job when the profile says ``cluster.time=auto``.
DEFAULT_TIME = "00:30:00"
#: Seconds between two looks at a waited-on job's state (one ``sacct`` call each).
POLL_S = 30.0
#: Slurm states of a job that has not started yet (``UNKNOWN``: not in sacct yet).
WAITING = frozenset({"PENDING", "UNKNOWN", "REQUEUED", "CONFIGURING"})


class ProbeTask:
    """What submitit runs in every task of a probe job: the worker, output appended to
    ``<log_dir>/task<SLURM_PROCID>.log``."""

    def __call__(self, python: str, spec_path: str, out_path: str, log_dir: str) -> int:
        """Run the worker to its end.

        Raises:
            RuntimeError: the worker exited non-zero (the job is recorded failed).
        """
        task = int(os.environ.get("SLURM_PROCID", "0"))
        log_path = Path(log_dir) / f"task{task}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as out:
            rc = subprocess.call([python, "-u", "-m", "vitfsdp.probe.worker", spec_path,
                                  out_path], stdout=out, stderr=subprocess.STDOUT)
        if rc != 0:
            raise RuntimeError(f"probe task {task} exited with code {rc}; see {log_path}")
        return rc


def _cluster(cfg):
    """The profile for a probe job: ``cluster.time=auto`` becomes :data:`DEFAULT_TIME`."""
    c = cfg.cluster
    return dataclasses.replace(c, time=DEFAULT_TIME) if c.time == "auto" else c


def _executor(cfg, folder: Path):
    import submitit  # only where a job is submitted, as the sweep's launcher does

    cluster = _cluster(cfg)
    executor = submitit.SlurmExecutor(folder=folder, python=shlex.quote(node_python(cluster)),
                                      max_num_timeout=0)
    executor.update_parameters(**executor_parameters(cluster, cfg.nodes, JOB_NAME, folder))
    return executor


def wait_for_job(job, timeout_s: float, poll_s: float = POLL_S) -> str:
    """Wait for submitit's ``job`` at most ``timeout_s`` seconds from now (call it right
    after the submission: queue wait counts), looking every ``poll_s`` seconds (at most a
    tenth of ``timeout_s``, at least 1 s); past it, cancel the job (``scancel``).

    Returns:
        ``""`` where the job ended in time (its result says how); else the reason, e.g.
        ``timed out: --timeout 1800 s (counted from submission) passed with Slurm job 4242
        PENDING, 1800 s in the queue (state looked at every 30 s); cancelled``. Interrupted
        (Ctrl-C), the job is cancelled too and the interrupt raised.
    """
    start = time.monotonic()
    deadline, poll_s = start + timeout_s, max(1.0, min(poll_s, timeout_s / 10))
    started = None  # monotonic time the job was first seen running
    try:
        while not job.done():
            now = time.monotonic()
            state = job.get_info(mode="force").get("State") or "UNKNOWN"
            if started is None and state.split()[0] not in WAITING:
                started = now
            if now >= deadline:
                return _cancel(job, state, timeout_s, poll_s, (started or now) - start,
                               None if started is None else now - started)
            time.sleep(min(poll_s, max(0.0, deadline - now)))
    except KeyboardInterrupt:
        job.cancel(check=False)
        raise
    return ""


def _cancel(job, state: str, timeout_s: float, poll_s: float, pended_s: float,
            ran_s: float | None) -> str:  # fmt: skip
    """Cancel ``job`` past its timeout; the reason :func:`wait_for_job` records (the times
    to within ``poll_s``, how often the state was looked at)."""
    job.cancel(check=False)
    where = (f"{pended_s:.0f} s in the queue" if ran_s is None else
             f"after {pended_s:.0f} s in the queue and {ran_s:.0f} s running")
    return (f"timed out: --timeout {timeout_s:g} s (counted from submission) passed with "
            f"Slurm job {job.job_id} {state}, {where} (state looked at every {poll_s:g} s); "
            "cancelled")


def run_world_job(cfg, spec_path: Path, out_path: Path, work_dir: Path,
                  timeout_s: float) -> tuple[bool, str]:  # fmt: skip
    """Submit one world size's probe job for ``cfg`` (a point at that world size) and wait
    for it, at most ``timeout_s`` seconds from its submission (:func:`wait_for_job`).
    Returns (succeeded, the job's id, or its error or why it was cancelled)."""
    if cfg.cluster.launch_mode != "srun":
        return False, (f"cluster.launch_mode={cfg.cluster.launch_mode}: the probe runs a task "
                       "per rank; set cluster.launch_mode=srun")
    executor = _executor(cfg, work_dir / ".submitit")
    job = executor.submit(ProbeTask(), node_python(_cluster(cfg)), str(spec_path.resolve()),
                          str(out_path.resolve()), str((work_dir / "logs").resolve()))
    timed_out = wait_for_job(job, timeout_s)
    if timed_out:
        return False, timed_out
    try:
        job.results()
    except Exception as e:  # noqa: BLE001 (submitit raises what the job raised, or its own)
        return False, f"Slurm job {job.job_id}: {str(e).strip().splitlines()[-1]}"
    return True, f"Slurm job {job.job_id}"


def run_framework_job(cfg, overrides: list[str], run_dir: Path) -> tuple[int, str]:
    """Run ``overrides`` (the framework model at ``cfg``'s world size) as a point's job
    would run and wait; (0 or 1, the Slurm job id)."""
    executor = _executor(cfg, run_dir.parent / ".submitit")
    spec = task_spec(_cluster(cfg), overrides, run_dir, cfg.nodes)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    job = executor.submit(TrainTask(), spec)
    try:
        job.results()
    except Exception:  # noqa: BLE001 (the run's own records say why)
        return 1, job.job_id
    return 0, job.job_id
