"""The probe on a Slurm cluster: per world size of the sweep one job of that many nodes, made
as the sweep makes a point's job (:mod:`vitfsdp.launch.slurm`: the profile's modules,
environment, ``srun`` options, a task per GPU), whose tasks run the probe's worker; then
the framework runs (``vitfsdp.train`` of the smallest model, :data:`FRAMEWORK_MODEL
<vitfsdp.probe.__main__.FRAMEWORK_MODEL>`) as ordinary point jobs. The sweep's launch
mode must be ``srun`` (a task per rank), the default of every shipped Slurm profile.

The probe's process waits for each world size's job in turn (on the login node, where it was
started), at most ``--timeout`` seconds counted from the job's submission, queue wait
included: then the job is cancelled and the world size recorded failed, the reason naming
the job, its state and how long it pended (:func:`wait_for_job`). A Ctrl-C, SIGTERM or SIGHUP
(a dropped login, which ``python -m vitfsdp.probe`` turns into ``SystemExit``) while it waits
cancels the job too and raises :class:`Interrupted`, whose reason the probe records.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from vitfsdp.launch.slurm import TrainTask, executor_parameters, node_python, task_spec

log = logging.getLogger(__name__)

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


class Interrupted(SystemExit):
    """A Ctrl-C, SIGTERM or SIGHUP while the probe waited for a Slurm job, which was cancelled
    on the way out. ``code``: the exit status (128 + the signal's number; 130 for Ctrl-C);
    ``reason``: what the probe records, e.g. ``interrupted by SIGHUP after 12 s: Slurm job
    4242 PENDING cancelled``."""

    def __init__(self, code: int, reason: str):
        super().__init__(code)
        self.reason = reason


def signal_name(code: int) -> str:
    """The signal behind exit status ``code`` (128 + its number): ``SIGHUP``, ``SIGTERM``,
    ``Ctrl-C (SIGINT)``; ``exit <code>`` for another."""
    try:
        name = signal.Signals(code - 128).name
    except (TypeError, ValueError):
        return f"exit {code}"
    return "Ctrl-C (SIGINT)" if name == "SIGINT" else name


def wait_for_job(job, timeout_s: float, poll_s: float = POLL_S) -> str:
    """Wait for submitit's ``job`` at most ``timeout_s`` seconds (finite, > 0) from now (call
    it right after the submission: queue wait counts), looking every ``poll_s`` seconds (at
    most a tenth of ``timeout_s``, at least 1 s); past it, cancel the job (``scancel``).

    Returns:
        ``""`` where the job ended in time (its result says how); else the reason, e.g.
        ``timed out: --timeout 1800 s (counted from submission) passed with Slurm job 4242
        PENDING, 1800 s in the queue (state looked at every 30 s); cancelled``.

    Raises:
        ValueError: ``timeout_s`` is not finite and > 0 (nothing is cancelled).
        Interrupted: a Ctrl-C, or a SIGTERM or SIGHUP raised as ``SystemExit``, while it
            waited; the job was cancelled first.
    """
    if not (math.isfinite(timeout_s) and timeout_s > 0):  # NaN would poll sacct without pause
        raise ValueError(f"timeout_s={timeout_s}: a finite number of seconds > 0")
    start = time.monotonic()
    deadline, poll_s = start + timeout_s, max(1.0, min(poll_s, timeout_s / 10))
    started, state = None, "UNKNOWN"  # when the job was first seen running; its last state
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
    except (KeyboardInterrupt, SystemExit) as e:
        state = _state_now(job, state)
        job.cancel(check=False)
        code = 130 if isinstance(e, KeyboardInterrupt) else e.code
        raise Interrupted(code, f"interrupted by {signal_name(code)} after "
                          f"{time.monotonic() - start:.0f} s: Slurm job {job.job_id} "
                          f"{state} cancelled") from e
    return ""


def _state_now(job, last: str) -> str:
    """``job``'s Slurm state now (one ``sacct``), or ``last`` where it cannot be had."""
    try:
        return job.get_info(mode="force").get("State") or last
    except Exception:  # noqa: BLE001 (on the way out: the last state seen will do)
        return last


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


def _submitted(job, what: str, timeout_s: float) -> None:
    """Log that ``job`` (for ``what``) was submitted and how long it is waited for."""
    log.info("[probe] %s: Slurm job %s submitted; waiting at most --timeout %g s (follow: %s)",
             what, job.job_id, timeout_s, shlex.join(["squeue", "-j", str(job.job_id)]))


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
    _submitted(job, f"world size {cfg.world_size}", timeout_s)
    timed_out = wait_for_job(job, timeout_s)
    if timed_out:
        return False, timed_out
    try:
        job.results()
    except Exception as e:  # noqa: BLE001 (submitit raises what the job raised, or its own)
        return False, f"Slurm job {job.job_id}: {str(e).strip().splitlines()[-1]}"
    return True, f"Slurm job {job.job_id}"


def run_framework_job(cfg, overrides: list[str], run_dir: Path,
                      timeout_s: float) -> tuple[int, str]:  # fmt: skip
    """Run ``overrides`` (the framework model at ``cfg``'s world size) as a point's job
    would run and wait, at most ``timeout_s`` seconds from its submission
    (:func:`wait_for_job`): (0 or 1, ``""`` or why the job was cancelled).

    Raises:
        Interrupted: see :func:`wait_for_job`.
    """
    executor = _executor(cfg, run_dir.parent / ".submitit")
    spec = task_spec(_cluster(cfg), overrides, run_dir, cfg.nodes)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    job = executor.submit(TrainTask(), spec)
    _submitted(job, f"framework run {run_dir.name}", timeout_s)
    timed_out = wait_for_job(job, timeout_s)
    if timed_out:
        return 1, timed_out
    try:
        job.results()
    except Exception:  # noqa: BLE001 (the run's own records say why)
        return 1, ""
    return 0, ""
