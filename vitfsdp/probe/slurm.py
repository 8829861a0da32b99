"""The probe on a Slurm cluster: per world size of the sweep one job of that many nodes, made
as the sweep makes a point's job (:mod:`vitfsdp.launch.slurm`: the profile's modules,
environment, ``srun`` options, a task per GPU), whose tasks run the probe's worker; then
the framework runs (``vitfsdp.train`` of the smallest model, :data:`FRAMEWORK_MODEL
<vitfsdp.probe.__main__.FRAMEWORK_MODEL>`) as ordinary point jobs. The sweep's launch
mode must be ``srun`` (a task per rank), the default of every shipped Slurm profile.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from pathlib import Path

from vitfsdp.launch.slurm import TrainTask, executor_parameters, node_python, task_spec

#: The job-name of the probe's jobs.
JOB_NAME = "vitfsdp-probe"
#: The time limit of a probe job when the profile says ``cluster.time=auto``.
DEFAULT_TIME = "00:30:00"


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


def run_world_job(cfg, spec_path: Path, out_path: Path, work_dir: Path) -> tuple[bool, str]:
    """Submit one world size's probe job for ``cfg`` (a point at that world size) and wait
    for it. Returns (succeeded, the job's log tail or error)."""
    if cfg.cluster.launch_mode != "srun":
        return False, (f"cluster.launch_mode={cfg.cluster.launch_mode}: the probe runs a task "
                       "per rank; set cluster.launch_mode=srun")
    executor = _executor(cfg, work_dir / ".submitit")
    job = executor.submit(ProbeTask(), node_python(_cluster(cfg)), str(spec_path.resolve()),
                          str(out_path.resolve()), str((work_dir / "logs").resolve()))
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
