"""Slurm launcher: one job per sweep point, sized for that point.

Each point becomes a Slurm job of ``nodes`` nodes. Two launch modes (``cluster.launch_mode``):

- ``srun`` (default, as on Frontier): ``gpus_per_node`` tasks per node, one per GPU; each task
  runs ``python -m vitfsdp.train`` and finds its rank in ``SLURM_PROCID``
  (:func:`vitfsdp.distributed.discover`).
- ``torchrun``: one task per node running ``torchrun --nnodes=N --nproc-per-node=G`` with a
  c10d rendezvous on the first node of the job.

Both modes export ``MASTER_ADDR`` (the first host of ``SLURM_JOB_NODELIST``) and
``MASTER_PORT`` (:data:`PORT_BASE` + job id mod :data:`PORT_SPAN`) in the job script, so every
rank agrees on the master without a hard-coded port.

Jobs are submitted with submitit (:func:`submit`): points of the same shape go into one job
array, requeued by submitit after a time limit or preemption. Or only the scripts are written
(:func:`write_scripts`), one per point, rendered from ``launch/sbatch/job.sbatch.in``, for
users who submit by hand. A pack's script (:mod:`vitfsdp.launch.pack`) is rendered from the
same parts (:func:`job_options`, :func:`sbatch_lines`, :func:`setup_lines`,
:func:`srun_step`) and submitted by :func:`sbatch`; every Slurm point's ``job.json`` is
:func:`slurm_job_record`. Every config value placed in a script is shell-quoted
(:func:`shell_word`); the script in a run directory (``job.sbatch``) is byte for byte the one
that ran. The checks before anything queues are in :mod:`vitfsdp.launch.slurm_checks`.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath

from vitfsdp.core.layout import (
    EXIT_ALREADY_COMPLETED,
    EXIT_PREEMPTED,
    JOB_FILE,
    SCRIPT_FILE,
    SLURM_OUTPUT,
    SUBMITIT_DIR,
    SUBMITTED_FILE,
    TASK_LOG,
    TASK_LOG_DIR,
)
from vitfsdp.launch import CONFIG_PATH_ENV, ClusterConfig, check_text
from vitfsdp.launch.agent import LOG_DIR_ARG
from vitfsdp.launch.local import job_record, quote_override, torchrun_signal_env
from vitfsdp.launch.resume import unsaved_attempt
from vitfsdp.launch.secrets import (
    hidden_from_slurm,
    secrets_path,
    source_line,
    write_point_secrets,
)
from vitfsdp.provenance import carries_secret, redact_args
from vitfsdp.records import RUN_FILE, default_file_mode, write_json_atomic, write_text_atomic

log = logging.getLogger(__name__)

#: The folders that pyproject.toml's ``[tool.setuptools.package-dir]`` maps into the package,
#: as a checkout keeps them (relative to the folder that holds ``vitfsdp/``): data package,
#: folder. An install carries them inside the package; a checkout's ``vitfsdp/`` imported in
#: its place (a command run inside the checkout, or the checkout on PYTHONPATH) does not, and
#: the data an install (an editable one of another checkout) supplies are not its own.
CHECKOUT_DATA = {"vitfsdp.conf": "conf", "vitfsdp.launch.sbatch": "launch/sbatch"}


def data_dir(package: str) -> Path:
    """The folder of the data package ``package`` (a key of :data:`CHECKOUT_DATA`) that goes
    with the ``vitfsdp/`` imported: where that is a checkout's (pyproject.toml beside it), the
    checkout's folder, so that its code never reads another checkout's configs or template;
    else the installed one (:func:`importlib.resources.files`: a wheel's, inside the package).

    Raises:
        ModuleNotFoundError: neither exists; one line saying how to fix it.
    """
    imported = Path(__file__).absolute().parents[1]  # the vitfsdp/ folder imported
    folder = imported.parent / CHECKOUT_DATA[package]
    if (imported.parent / "pyproject.toml").is_file() and folder.is_dir():
        return folder
    try:
        return Path(str(resources.files(package)))
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"No module named '{package}': vitfsdp was imported from {imported}, which has "
            f"neither it nor a checkout's {folder} (pyproject.toml beside it); reinstall (pip "
            "install .), or, in a checkout, install it editable (pip install -e .) or run from "
            "outside it", name=package) from None


#: The job-script template (placeholders ``@NAME@``): the repository's launch/sbatch/, installed
#: as the package data ``vitfsdp.launch.sbatch`` (pyproject.toml; :func:`data_dir`).
TEMPLATE = data_dir("vitfsdp.launch.sbatch") / "job.sbatch.in"
#: MASTER_PORT = PORT_BASE + job id mod PORT_SPAN: 20000-31999, below Linux's default
#: ephemeral range (net.ipv4.ip_local_port_range 32768-60999, the kernel's ip-sysctl
#: documentation), from which the OS hands out the ports of outgoing connections, so the
#: rendezvous does not meet one of them in use; above JAX's coordinator ports (10000-19999,
#: :func:`vitfsdp.jax.distributed.coordinator_port`).
PORT_BASE, PORT_SPAN = 20000, 12000
#: HOME-free caches under ``cluster.cache_dir`` (which becomes XDG_CACHE_HOME): variable,
#: sub-directory. PyTorch hub, Triton's kernels (default ~/.triton), Inductor's code, Hugging
#: Face downloads, CUDA's JIT cache (default ~/.nv/ComputeCache).
CACHE_DIRS = {"TORCH_HOME": "torch", "TRITON_CACHE_DIR": "triton",
              "TORCHINDUCTOR_CACHE_DIR": "torchinductor", "HF_HOME": "huggingface",
              "CUDA_CACHE_PATH": "nv-compute"}
_NODE_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_DQ_SPECIAL = re.compile(r'[\\"$`]')  # special inside double quotes


class ShellExpr(str):
    """A template-made shell word that must expand (``${MASTER_ADDR}``): rendered inside
    double quotes. Never built from config values."""


def shell_word(arg: str) -> str:
    """One argument as a shell word: config values single-quoted (nothing expands), template
    expressions (:class:`ShellExpr`) double-quoted."""
    return f'"{arg}"' if isinstance(arg, ShellExpr) else shlex.quote(str(arg))


def shell_join(argv: Sequence[str]) -> str:
    """A command line of :func:`shell_word` words."""
    return " ".join(shell_word(a) for a in argv)


def sbatch_word(value: str) -> str:
    """A value on an ``#SBATCH`` line, which sbatch parses itself (bash reads a comment):
    quoted like :func:`shell_word` (sbatch strips single and double quotes alike), with each
    backslash doubled, as sbatch reads a backslash as an escape even inside single quotes."""
    return shlex.quote(str(value).replace("\\", "\\\\"))


def check_values(overrides: Sequence[str], run_dir: str | Path, job_name: str) -> None:
    """Refuse what a Slurm job script cannot carry: a control character in an override, the
    run directory or the job name (a newline ends an ``#SBATCH`` comment and starts a
    command), and ``%`` or a backslash in the run directory (sbatch and srun read ``%`` in an
    ``--output`` path as a pattern, ``%j``, and a backslash as an escape).

    Raises:
        ValueError: one line naming the value (secrets redacted) and the fix.
    """
    for i, arg in enumerate(overrides):
        try:
            check_text(f"override {i}", arg)
        except ValueError:
            raise ValueError(f"override {i} {redact_args([arg])[0]!r} contains a control "
                             "character (newline, tab, ...); remove it") from None
    check_text("hydra.launcher.job_name", job_name)
    check_text("run directory", str(run_dir))
    if "%" in str(run_dir) or "\\" in str(run_dir):
        raise ValueError(f"run directory {str(run_dir)!r} contains '%' or a backslash, which "
                         "Slurm reads in --output paths (a pattern, an escape); choose a "
                         "hydra.sweep.dir without them")


def _script_mode(secret: bool) -> int:
    """A job script's permissions: owner only (0700) when it carries a secret, else the
    umask's, executable where readable."""
    if secret:
        return 0o700
    mode = default_file_mode()
    return mode | (mode & 0o444) >> 2


def write_script(path: Path, text: str, secret: bool) -> None:
    """Write a job script with :func:`_script_mode` permissions from its first byte,
    atomically (:func:`vitfsdp.records.write_text_atomic`)."""
    write_text_atomic(path, text, _script_mode(secret))


def point_carries_secret(point) -> bool:
    """Whether a point's script and pickles hold a secret (an override or ``cluster.env``
    value that redaction would change): they are then written for their owner only."""
    return carries_secret(point.overrides, point.cfg.cluster.env)


@dataclass(frozen=True)
class TaskSpec:
    """What every task of a point's job runs; pickled by submitit, or rendered into a script."""

    overrides: tuple[str, ...]  # the point's Hydra overrides, as typed
    run_dir: str  # absolute run directory of the point
    nodes: int  # nodes of the job
    gpus_per_node: int  # ranks per node
    launch_mode: str  # srun | torchrun
    python: str  # interpreter on the compute nodes
    checkpoint_every: int = 0  # train.checkpoint_every (a signal always saves one too)
    checkpoint_wait_s: int = 60  # how long task 0 waits for the training to save on a signal

    def train_argv(self) -> list[str]:
        """``vitfsdp.train`` with the point's overrides (no secret: those are named, their
        values in the environment, :mod:`vitfsdp.launch.secrets`), writing into the run
        directory."""
        return ["-m", "vitfsdp.train", *self.overrides,
                f"hydra.run.dir={quote_override(self.run_dir)}", "hydra.output_subdir=null"]

    def argv(self, endpoint: str, rdzv_id: str) -> list[str]:
        """The command of one task: ``python -u -m vitfsdp.train ...`` (srun mode), or
        torchrun over the point's nodes with a c10d rendezvous at ``endpoint`` (host:port)."""
        if self.launch_mode == "srun":
            return [self.python, "-u", *self.train_argv()]
        return [self.python, "-u", "-m", "torch.distributed.run", LOG_DIR_ARG,
                f"--nnodes={self.nodes}",
                f"--nproc-per-node={self.gpus_per_node}", "--rdzv-backend=c10d",
                # a ShellExpr stays one (expanded by the job script's shell)
                type(endpoint)(f"--rdzv-endpoint={endpoint}"),
                type(rdzv_id)(f"--rdzv-id={rdzv_id}"), *self.train_argv()]


def task_spec(cluster: ClusterConfig, overrides: Sequence[str], run_dir: Path,
              nodes: int, checkpoint_every: int = 0) -> TaskSpec:
    """The :class:`TaskSpec` of a point (``checkpoint_every``: its train.checkpoint_every)."""
    return TaskSpec(tuple(overrides), str(Path(run_dir).resolve()), nodes,
                    cluster.gpus_per_node, cluster.launch_mode, node_python(cluster),
                    checkpoint_every, checkpoint_wait_s(cluster))


#: Seconds of ``cluster.signal_delay_s`` kept for the requeue after the training's save.
REQUEUE_MARGIN_S = 15


def checkpoint_wait_s(cluster: ClusterConfig) -> int:
    """Seconds a stopped training gets to save its checkpoint before it is killed (by task 0
    of the job, or torchrun): ``cluster.signal_delay_s`` less :data:`REQUEUE_MARGIN_S` for
    the requeue, at least 10 s."""
    return max(10, cluster.signal_delay_s - REQUEUE_MARGIN_S)


# ---------------------------------------------------------------- what the job asks Slurm for


def tasks_per_node(cluster: ClusterConfig) -> int:
    """Slurm tasks per node: one per GPU (srun mode) or one per node (torchrun mode)."""
    return cluster.gpus_per_node if cluster.launch_mode == "srun" else 1


def cpus_per_task(cluster: ClusterConfig) -> int:
    """CPU cores per Slurm task: ``cpus_per_task`` per rank times the task's ranks."""
    return cluster.cpus_per_task * (1 if cluster.launch_mode == "srun" else cluster.gpus_per_node)


def sbatch_options(cluster: ClusterConfig, nodes: int, job_name: str) -> dict[str, object]:
    """The job's sbatch options in script order (``True`` = a flag without value)."""
    opts: dict[str, object] = {
        "job-name": job_name, "nodes": nodes, "ntasks-per-node": tasks_per_node(cluster),
        "cpus-per-task": cpus_per_task(cluster),
    }
    if cluster.gpu_resource:
        opts["gpus-per-node"] = cluster.gpus_per_node
    opts["time"] = cluster.time
    for key in ("partition", "account", "qos"):
        if getattr(cluster, key):
            opts[key] = getattr(cluster, key)
    if cluster.exclusive:
        opts["exclusive"] = True
    if not cluster.export_env:  # the job starts from the login environment (Slurm's NONE)
        opts["export"] = "NONE"
    for arg in [*cluster.site_sbatch_args, *cluster.sbatch_args,
                *(cluster.sbcast_args if cluster.sbcast_env else [])]:
        key, has_value, value = arg[2:].partition("=")
        opts[key] = value if has_value else True
    return opts


def job_options(cluster: ClusterConfig, nodes: int, job_name: str, *, workdir: str,
                output: str, time: str | None = None) -> dict[str, object]:
    """The sbatch options of a job script rendered here (a point's, :func:`render_script`, or
    a pack's, :func:`vitfsdp.launch.pack.render`), in script order: the profile's
    (:func:`sbatch_options`) with ``time`` (Slurm's ``D-HH:MM:SS``) in place of
    ``cluster.time`` where given, then the working directory ``workdir`` (absolute), Slurm's
    output file ``output`` (``%j``: the job id) and the stop signal
    (``USR2@cluster.signal_delay_s``)."""
    opts = sbatch_options(cluster, nodes, job_name)
    if time is not None:
        opts["time"] = time
    return {**opts, "chdir": workdir, "output": output,
            "signal": f"USR2@{cluster.signal_delay_s}"}


def sbatch_lines(opts: dict[str, object]) -> list[str]:
    """``#SBATCH`` lines of ``opts`` (:func:`job_options`), each value one sbatch word
    (:func:`sbatch_word`); ``True``: a flag without value."""
    return [f"#SBATCH --{k}" if v is True else f"#SBATCH --{k}={sbatch_word(v)}"
            for k, v in opts.items()]


def srun_step(cluster: ClusterConfig, output: str, step_name: str | None = None) -> list[str]:
    """The ``srun`` of a job step of a script rendered here: its name (``step_name``, where
    given), the profile's options (:func:`srun_options`), each task's output file ``output``
    (``%t``: the task's number)."""
    return ["srun", *([f"--job-name={step_name}"] if step_name else []),
            *srun_options(cluster), f"--output={output}"]


def binds_task_gpus(cluster: ClusterConfig) -> bool:
    """Whether an srun-mode step gives each task a GPU of its own (``--gpus-per-task=1``):
    where the profile asks Slurm for GPUs and binds tasks to them (``gpu_bind`` set, not
    ``none``; Frontier: ``closest``, OLCF's guide). Otherwise (``gpu_bind`` null or ``none``)
    every task sees all the GPUs the job holds on its node (``--gpus-per-node``) and rank r
    takes device r (:func:`vitfsdp.distributed.pick_device`): where a site's cgroups confine
    each task to its own GPU (Slurm's ``ConstrainDevices`` with ``--gpus-per-task``), NCCL
    cannot see the other GPUs of the node and does not use NVLink between them (NCCL's
    ``p2p.cc``: a GPU this process cannot see is reached over NVLink only where NVML shows
    the link), so CUDA profiles leave the GPUs visible (docs/sites.md)."""
    return bool(cluster.gpu_resource and cluster.gpu_bind and cluster.gpu_bind != "none")


#: srun's option that ends the step once a task exits non-zero (srun(1) ``-K``): Slurm
#: cancels the other tasks (SIGTERM, then SIGKILL after slurm.conf's ``KillWait``). Without
#: it a bare srun step waits for every task, so a rank hung after rank 0 recorded a failure
#: held the job until its time limit; torchrun's agent ends its own ranks itself. A rank
#: that ends a run exits only after rank 0 recorded it (vitfsdp.failures), and the SIGTERM
#: is the one torchrun sends: rank 0 still records a killed peer (``failed``), and ranks
#: that stopped at a checkpoint (exit code 3) catch it and still exit 3, which requeues.
KILL_ON_BAD_EXIT = "--kill-on-bad-exit=1"


def srun_options(cluster: ClusterConfig) -> list[str]:
    """The options of the job's srun step: tasks, cores and GPUs per task
    (:func:`binds_task_gpus`), GPU binding, :data:`KILL_ON_BAD_EXIT` (in both launch modes:
    under torchrun, one agent a node, it ends the other nodes' agents when one fails), then
    the profile's ``srun_args`` (which may override it)."""
    if cluster.launch_mode == "srun":
        opts = [f"--ntasks-per-node={cluster.gpus_per_node}",
                f"--cpus-per-task={cluster.cpus_per_task}"]
        if binds_task_gpus(cluster):
            opts.append("--gpus-per-task=1")
        if cluster.gpu_bind:
            opts.append(f"--gpu-bind={cluster.gpu_bind}")
    else:
        opts = ["--ntasks-per-node=1", f"--cpus-per-task={cpus_per_task(cluster)}"]
        if cluster.gpu_resource:
            opts.append(f"--gpus-per-task={cluster.gpus_per_node}")
    return [*opts, KILL_ON_BAD_EXIT, *cluster.srun_args]


def setup_lines(cluster: ClusterConfig, sweep_dir: str | Path | None = None) -> list[str]:
    """Shell lines run in the job script before the launch, in this order: the checks of the
    environment's paths (:func:`path_check_lines`), modules, the setup script, the conda or
    venv activation, the secrets (``cluster.secrets``: the sweep's 0600 file in ``sweep_dir``
    sourced, :mod:`vitfsdp.launch.secrets`), the profile's environment (literal values;
    ``multi_node_env`` in jobs of more than one node), the path prepends, the interpreter's
    check (on the PATH the tasks get), the HOME-free and MIOpen caches (created on every
    node), threads, master address and port. docs/sites.md shows them for each site
    profile."""
    lines = ["set -eo pipefail"]
    if not cluster.export_env:  # --export=NONE: without this, srun steps would drop our setup
        lines.append("unset SLURM_EXPORT_ENV")
    lines += _environment_lines(cluster, sweep_dir) + _cache_lines(cluster)
    if cluster.launch_mode == "torchrun":  # torchrun forwards SIGUSR2, waits for the save
        lines += [f"export {name}={shell_word(value)}" for name, value in
                  torchrun_signal_env(checkpoint_wait_s(cluster)).items()]
    lines += [
        f"export OMP_NUM_THREADS={cluster.cpus_per_task}",
        "# Rendezvous: the job's first node; the port derives from the job id.",
        'export MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"',
        f'export MASTER_PORT="$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))"',
    ]
    return lines


def _fail_line(test: str, problem: str) -> str:
    """``test || { echo 'vitfsdp: <problem> on' <node> >&2; exit 1; }``: the job's first
    words when a check fails, its batch log's last line (its reason in summary.json)."""
    return (f"{test} || {{ echo {shell_word('vitfsdp: ' + problem + ' on')} "
            '"${SLURMD_NODENAME:-$(hostname)}" >&2; exit 1; }')


def path_check_lines(cluster: ClusterConfig) -> list[str]:
    """The job's first lines: ``cluster.setup_script`` is a readable file, ``cluster.venv``
    has ``bin/activate``, a ``cluster.conda_env`` given as a path is a directory; else the
    job ends at once with one line naming the field (the point's reason,
    :func:`vitfsdp.launch.status.reconcile`)."""
    lines = []
    if cluster.setup_script:
        lines.append(_fail_line(f"[[ -r {shell_word(cluster.setup_script)} ]]",
                                f"cluster.setup_script={cluster.setup_script} is not a "
                                "readable file"))
    if cluster.venv:
        activate = str(PurePosixPath(cluster.venv, "bin", "activate"))
        lines.append(_fail_line(f"[[ -r {shell_word(activate)} ]]",
                                f"cluster.venv={cluster.venv} has no bin/activate"))
    if cluster.conda_env and "/" in cluster.conda_env:
        lines.append(_fail_line(f"[[ -d {shell_word(cluster.conda_env)} ]]",
                                f"cluster.conda_env={cluster.conda_env} is not a directory"))
    if cluster.sbcast_env:
        lines.append(_fail_line(f"[[ -r {shell_word(cluster.sbcast_env)} ]]",
                                f"cluster.sbcast_env={cluster.sbcast_env} is not a readable "
                                "file"))
    return lines


#: The job's node-local copy of ``cluster.sbcast_env`` (inside ``cluster.sbcast_dir``).
SBCAST_ENV_DIR = "vitfsdp-env-${SLURM_JOB_ID}"


def sbcast_lines(cluster: ClusterConfig) -> list[str]:
    """``cluster.sbcast_env``: broadcast the packed environment to every node's
    ``cluster.sbcast_dir`` (``sbcast -pf``; ``set -e`` ends the job if it fails, as a partial
    copy would give confusing errors), unpack it there with one task per node (pigz on the
    node's cores where it is installed, as OLCF's guide does), activate it
    and run its ``conda-unpack`` (conda-pack's prefix fix) on every node. Source: OLCF,
    "Sbcast Conda Environments" (docs.olcf.ornl.gov/software/python/sbcast_conda.html), the
    way "PyTorch on Frontier" recommends at scale ("Environment Location": NVMe > Lustre >> NFS).
    """
    if not cluster.sbcast_env:
        return []
    per_node = ('srun --nodes="${SLURM_JOB_NUM_NODES}" --ntasks="${SLURM_JOB_NUM_NODES}" '
                "--ntasks-per-node=1")
    env_dir = shell_path(str(PurePosixPath(cluster.sbcast_dir, SBCAST_ENV_DIR)))
    return [
        "# cluster.sbcast_env: the packed environment to each node's local disk, unpacked there",
        f"export VITFSDP_ENV_DIR={env_dir}",
        f'sbcast -pf {shell_word(cluster.sbcast_env)} "${{VITFSDP_ENV_DIR}}.tar.gz"',
        # [S] unpacks with pigz on the node's cores (gzip where there is no pigz): the cores
        # the job's tasks hold on a node (Frontier: 8 x 7 = 56, as [S]'s -c56), not
        # SLURM_CPUS_ON_NODE, which counts hardware threads where a site allocates them
        # and can then exceed what one task may take (--threads-per-core=1, Frontier's
        # default); --force-local: a ':' in the path names a file, not host:file elsewhere
        f'{per_node} --cpus-per-task={tasks_per_node(cluster) * cpus_per_task(cluster)} '
        "bash -c "
        "'mkdir -p -- \"$0\" && tar --force-local "
        '--use-compress-program="$(command -v pigz || echo gzip)" -xf "$0.tar.gz" -C "$0"\' '
        '"${VITFSDP_ENV_DIR}"',
        'source "${VITFSDP_ENV_DIR}/bin/activate"',
        'if [[ -x "${VITFSDP_ENV_DIR}/bin/conda-unpack" ]]; then '
        f'{per_node} "${{VITFSDP_ENV_DIR}}/bin/conda-unpack"; fi',
    ]


def python_check_line(cluster: ClusterConfig) -> str:
    """The job's check, after the environment's activation, that the interpreter of
    :func:`node_python` runs there."""
    python = node_python(cluster)
    field = f"cluster.python={python}" if cluster.python else f"the interpreter {python}"
    return _fail_line(f"command -v {shell_word(python)} >/dev/null",
                      f"{field} is not an executable or on PATH")


def _environment_lines(cluster: ClusterConfig, sweep_dir: str | Path | None) -> list[str]:
    """Path checks, modules, setup script, env activation, the secrets, the user's config
    path, env (and multi-node env), prepends, and the interpreter's check."""
    lines = path_check_lines(cluster) + activation_lines(cluster) + sbcast_lines(cluster)
    if cluster.secrets:
        if sweep_dir is None:
            raise ValueError("cluster.secrets needs the sweep directory that holds their file")
        lines += ["# cluster.secrets: their values, in a file only you can read",
                  source_line(secrets_path(sweep_dir))]
    if os.environ.get(CONFIG_PATH_ENV):  # the user's own profiles, found on the nodes too
        lines.append(f"export {CONFIG_PATH_ENV}={shell_word(os.environ[CONFIG_PATH_ENV])}")
    lines += env_lines(cluster) + _node_count_env_lines(cluster) + prepend_lines(cluster)
    # the interpreter once PATH is what the tasks get (a prepend_env.PATH may provide it)
    lines.append(python_check_line(cluster))
    return lines


def env_lines(cluster: ClusterConfig) -> list[str]:
    """``cluster.env``'s exports, each value one literal shell word."""
    return [f"export {name}={shell_word(value)}" for name, value in cluster.env.items()]


def prepend_lines(cluster: ClusterConfig) -> list[str]:
    """``cluster.prepend_env``'s exports: each variable's directories in front of its value
    (an unset or empty variable adds no ``:``; ``[]`` prepends nothing, a way to drop a
    profile's entry)."""
    return [f"export {name}={shell_path(':'.join(dirs))}${{{name}:+:${{{name}}}}}"
            for name, dirs in cluster.prepend_env.items() if dirs]


def activation_lines(cluster: ClusterConfig) -> list[str]:
    """The job's modules, setup script and conda or venv activation, in that order: what
    makes its environment (the sweep asks the same environment here before queueing,
    :func:`vitfsdp.launch.slurm_checks.environment_problem`)."""
    lines = []
    if cluster.modules:
        lines.append("module load " + shell_join(cluster.modules))
    if cluster.setup_script:
        lines.append("source " + shell_word(cluster.setup_script))
    if cluster.conda_env:  # the hook defines `conda activate` in a non-interactive shell
        lines += ['eval "$(conda shell.bash hook)"',
                  "conda activate " + shell_word(cluster.conda_env)]
    if cluster.venv:
        lines.append("source " + shell_word(str(PurePosixPath(cluster.venv, "bin", "activate"))))
    return lines


def _node_count_env_lines(cluster: ClusterConfig) -> list[str]:
    """``multi_node_env`` exported in a job of more than one node, ``single_node_env`` in a
    job of one (the job's own node count: a pack's steps share it)."""
    multi = [f"    export {n}={shell_word(v)}" for n, v in cluster.multi_node_env.items()]
    single = [f"    export {n}={shell_word(v)}" for n, v in cluster.single_node_env.items()]
    if not multi and not single:
        return []
    if not multi:
        return ['if [[ "${SLURM_JOB_NUM_NODES:-1}" -eq 1 ]]; then', *single, "fi"]
    return ['if [[ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]]; then', *multi,
            *(["else", *single] if single else []), "fi"]


def _cache_lines(cluster: ClusterConfig) -> list[str]:
    """The HOME-free caches under ``cluster.cache_dir`` and MIOpen's per-job cache, made on
    every node by a one-task-per-node srun step (node-local /tmp differs between nodes)."""
    lines, made = [], []
    if cluster.cache_dir:
        lines.append(f"export XDG_CACHE_HOME={shell_path(cluster.cache_dir)}")
        lines += [f'export {name}="${{XDG_CACHE_HOME}}/{sub}"' for name, sub in CACHE_DIRS.items()]
        made += ["XDG_CACHE_HOME", *CACHE_DIRS]
    if cluster.miopen_cache_per_job:
        lines += ['export MIOPEN_USER_DB_PATH="/tmp/miopen-${USER:-vitfsdp}-${SLURM_JOB_ID}"',
                  'export MIOPEN_CUSTOM_CACHE_DIR="${MIOPEN_USER_DB_PATH}"']
        made.append("MIOPEN_USER_DB_PATH")
    if made:
        lines += ["# Cache directories, created on every node of the job before use.",
                  _on_every_node("mkdir -p", made)]
    return lines + _removal_lines(cluster)


def _on_every_node(command: str, variables: Sequence[str]) -> str:
    """A job step of one task per node running ``command`` on the directories the shell
    ``variables`` name (each a double-quoted expansion)."""
    return ('srun --nodes="${SLURM_JOB_NUM_NODES}" --ntasks="${SLURM_JOB_NUM_NODES}" '
            f"--ntasks-per-node=1 {command} " + " ".join(f'"${{{v}}}"' for v in variables))


def _removal_lines(cluster: ClusterConfig) -> list[str]:
    """When the job script exits (its training ended, failed or stopped for a requeue), one
    task per node removes the job's own node-local caches: a ``cluster.cache_dir`` naming
    ``$SLURM_JOB_ID`` and MIOpen's per-job cache, which no later job reads and which a site's
    epilog may leave in ``/tmp``. A ``cache_dir`` without the job id is shared between jobs
    (warm compile caches) and kept. A bash EXIT trap, so that the job scripts rendered here,
    packs and submitit's (whose setup these lines are) all do it; a failed removal leaves the
    job's exit code as it was."""
    gone = (["XDG_CACHE_HOME"] if cluster.cache_dir and "SLURM_JOB_ID" in cluster.cache_dir
            else []) + (["MIOPEN_USER_DB_PATH"] if cluster.miopen_cache_per_job else [])
    if not gone:
        return []
    return ["# ... and this job's own removed from every node when the script exits.",
            f"trap '{_on_every_node('rm -rf', gone)} || true' EXIT"]


def node_python(cluster: ClusterConfig) -> str:
    """The interpreter the job's tasks run: ``cluster.python``; else ``python`` of the
    environment the script activates (``conda_env``, ``venv``, ``sbcast_env``); else the sweeping
    interpreter's absolute path (``sys.executable``: it stays valid under --export=NONE)."""
    if cluster.python:
        return cluster.python
    return "python" if cluster.conda_env or cluster.venv or cluster.sbcast_env \
        else sys.executable


def shell_path(value: str) -> str:
    """``value`` as one double-quoted shell word in which only ``$NAME`` (or ``${NAME}``)
    references expand, on the compute node (``$SLURM_JOB_ID``, ``$PSCRATCH``); every other
    ``$``, backquote, backslash and double quote is escaped: ``$(...)`` stays text."""
    out, pos = [], 0
    for m in _NODE_VARIABLE.finditer(value):
        out += [_DQ_SPECIAL.sub(r"\\\g<0>", value[pos:m.start()]),
                "${" + (m.group(1) or m.group(2)) + "}"]
        pos = m.end()
    out.append(_DQ_SPECIAL.sub(r"\\\g<0>", value[pos:]))
    return '"' + "".join(out) + '"'


def master_port(job_id: int) -> int:
    """The rendezvous port of a job (the same arithmetic as :func:`setup_lines`)."""
    return PORT_BASE + job_id % PORT_SPAN


# ---------------------------------------------------------------- scripts for hand submission


def render_script(cluster: ClusterConfig, spec: TaskSpec, *, point: str, job_name: str,
                  workdir: str, sweep_dir: str | Path | None = None) -> str:
    """The sbatch script of one point (srun step writing ``logs/task<N>.log``).

    Args:
        point: the point's label for the header comment (its run directory name).
        workdir: the job's working directory (``#SBATCH --chdir``), absolute.
        sweep_dir: the sweep's directory, which holds the secrets file (``cluster.secrets``).

    Raises:
        ValueError: a value the script cannot carry (:func:`check_values`).
    """
    check_values(spec.overrides, spec.run_dir, job_name)
    run_dir = Path(spec.run_dir)
    sbatch = sbatch_lines({**job_options(cluster, spec.nodes, job_name, workdir=workdir,
                                         output=str(run_dir / SLURM_OUTPUT.format(job_id="%j"))),
                           "requeue": True})  # the script requeues itself: where the site's
    # slurm.conf has JobRequeue=0, only a job submitted with --requeue may be (slurm.conf(5))
    launch = srun_step(cluster, str(run_dir / TASK_LOG_DIR / TASK_LOG.format(task="%t")))
    argv = spec.argv(ShellExpr("${MASTER_ADDR}:${MASTER_PORT}"), ShellExpr("${SLURM_JOB_ID}"))
    values = {
        "POINT": point, "CLUSTER": cluster.name, "LAUNCH_MODE": cluster.launch_mode,
        "PREEMPTED_EXIT": str(EXIT_PREEMPTED), "MAX_REQUEUES": str(cluster.max_requeues),
        "SCRIPT": shell_word(str(run_dir / SCRIPT_FILE)), "SBATCH_LINES": "\n".join(sbatch),
        "SETUP_LINES": "\n".join(setup_lines(cluster, sweep_dir)),
        "PREPARE_LINE": shell_join([spec.python, "-m", "vitfsdp.launch.resume", spec.run_dir,
                                    "--keep", SCRIPT_FILE, JOB_FILE,
                                    ShellExpr(SLURM_OUTPUT.format(job_id="${SLURM_JOB_ID}")),
                                    "--mkdir", TASK_LOG_DIR]),
        "COMPLETED_EXIT": str(EXIT_ALREADY_COMPLETED),
        "SAVED_LINE": shell_join([spec.python, "-m", "vitfsdp.launch.resume", spec.run_dir,
                                  "--saved"]),
        "LAUNCH_LINE": " \\\n    ".join([shell_join(launch), *_argv_lines(argv)]),
    }
    # one pass: a value that holds "@NAME@" stays text
    return re.sub(r"@([A-Z_]+)@", lambda m: values.get(m[1], m[0]),
                  TEMPLATE.read_text(encoding="utf-8"))


def _argv_lines(argv: Sequence[str]) -> list[str]:
    """A command as readable lines: the interpreter with ``-u``, each ``-m module`` and
    every other argument on its own line."""
    lines: list[list[str]] = []
    for i, arg in enumerate(argv):
        if arg == "-u" or (i and argv[i - 1] == "-m"):
            lines[-1].append(arg)
        else:
            lines.append([arg])
    return [shell_join(words) for words in lines]


def write_scripts(points: Sequence, job_name: str,
                  sweep_dir: str | Path | None = None) -> list[Path]:
    """Write each point's ``job.sbatch`` (executable; its owner's only when it carries a
    secret) and ``job.json`` into its run directory; submit nothing. ``points`` are
    :class:`vitfsdp.sweep.Point`. Each script can be submitted again by hand: it moves an
    earlier attempt's files to ``attempts/<n>/`` first, and ends at once after a completed
    run (:func:`vitfsdp.launch.resume.prepare_rerun`).

    Args:
        sweep_dir: where the secrets file of ``cluster.secrets`` goes (None: the first
            point's parent directory, the sweep's in the default layout).

    Returns:
        the script paths, in point order.
    """
    paths = []
    workdir = str(Path.cwd())
    if points:
        sweep_dir = Path(sweep_dir or points[0].run_dir.parent)
        write_point_secrets(points, sweep_dir)
    for p in points:
        spec = task_spec(p.cfg.cluster, p.overrides, p.run_dir, p.cfg.nodes)
        text = render_script(p.cfg.cluster, spec, point=p.run_dir.name, job_name=job_name,
                             workdir=workdir, sweep_dir=sweep_dir)
        (p.run_dir / TASK_LOG_DIR).mkdir(parents=True, exist_ok=True)
        path = p.run_dir / SCRIPT_FILE
        write_script(path, text, point_carries_secret(p))
        write_json_atomic(p.run_dir / JOB_FILE, slurm_job_record(p, None, "script"))
        paths.append(path)
    return paths


def slurm_job_record(point, job_id: str | None, submitted_with: str, **extra) -> dict:
    """A Slurm point's ``job.json``: the local launcher's (the point's identity,
    :func:`vitfsdp.launch.local.job_record`) plus the Slurm job's ids, how it was submitted
    (``submitit``, ``script``: written, not submitted, or ``pack``), its launch mode, time
    limit and script; ``extra`` keys replace or follow these (a pack's time limit and
    place)."""
    array_job_id, _, array_task_id = (job_id or "").partition("_")
    return {
        **job_record(point),
        "launcher": "slurm",
        "submitted_with": submitted_with,
        "job_id": job_id,
        "array_job_id": array_job_id if array_task_id else None,
        "array_task_id": int(array_task_id) if array_task_id else None,
        "launch_mode": point.cfg.cluster.launch_mode,
        "time_limit": point.cfg.cluster.time,
        "script": SCRIPT_FILE,
        **extra,
    }


def sbatch(script: Path, points: Sequence, what: str) -> str:
    """Submit a job script rendered here with ``sbatch --parsable``, the values of the
    ``points``' secrets hidden from the environment sbatch exports into the job
    (:func:`vitfsdp.launch.secrets.hidden_from_slurm`); its job id. ``what``: the job, for
    the refusal's message.

    Raises:
        RuntimeError: sbatch refused the job (its message quoted: e.g. a QOS limit).
    """
    with hidden_from_slurm(points):  # sbatch exports this environment into the job's
        proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                              text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"sbatch refused {what}: {proc.stderr.strip()}; lower "
                           "cluster.max_jobs to the site's limit")
    return proc.stdout.strip().split(";")[0]


# ---------------------------------------------------------------- submission through submitit


class TrainTask:
    """What submitit runs in every Slurm task of a point's job: the task's command as a child
    process, output in ``logs/task<SLURM_PROCID>.log``.

    Checkpointable in submitit's sense: when Slurm signals the job (``--signal=USR2@<delay>``
    before the time limit, or ``scancel --signal=USR2`` on preemption), submitit calls
    :meth:`checkpoint` in task 0; it forwards the signal to the training, which saves a
    checkpoint and exits (:data:`~vitfsdp.core.layout.EXIT_PREEMPTED`), and returns the same
    task for submitit to requeue (at most ``cluster.max_requeues`` times after time limits:
    submitit's ``max_num_timeout``), unless the attempt exited having saved nothing
    (:func:`vitfsdp.launch.resume.unsaved_attempt`: it would stop the same way again; one
    still running after ``checkpoint_wait_s``, perhaps mid-save, is requeued). The
    requeued job resumes from the run directory's checkpoint and keeps the earlier windows,
    marked by attempt.
    """

    def __init__(self) -> None:
        self._child: subprocess.Popen | None = None

    def __call__(self, spec: TaskSpec) -> int:
        """Run the task's command to its end.

        Raises:
            RuntimeError: the command exited with a non-zero code (submitit records the job as
                failed; the point's own records say why).
        """
        task = int(os.environ.get("SLURM_PROCID", "0"))
        endpoint = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        argv = spec.argv(endpoint, os.environ.get("SLURM_JOB_ID", "0"))
        log_path = Path(spec.run_dir) / TASK_LOG_DIR / TASK_LOG.format(task=task)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as out:
            self._child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
            rc = self._child.wait()
        if rc != 0:
            raise RuntimeError(f"task {task} exited with code {rc}; see {log_path}")
        return rc

    def checkpoint(self, spec: TaskSpec):
        """On the requeue signal: let the training save and exit, then requeue this task."""
        # submitit only where a job is submitted or requeued: validation, --status and
        # --scripts-only start without it
        import submitit

        child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGUSR2)
            try:
                child.wait(timeout=spec.checkpoint_wait_s)
            except subprocess.TimeoutExpired:  # still saving, or hung: nothing to read yet
                log.warning("training did not exit %d s after SIGUSR2; requeued whether or not "
                            "it saved", spec.checkpoint_wait_s)
                return submitit.helpers.DelayedSubmission(TrainTask(), spec)
        why = unsaved_attempt(Path(spec.run_dir))
        if why:  # submitit ends the job without requeueing it
            log.warning("%s", why)
            return None
        return submitit.helpers.DelayedSubmission(TrainTask(), spec)


def _executor_parameters(cluster: ClusterConfig, nodes: int, job_name: str,
                         sweep_dir: Path) -> dict:
    """submitit's SlurmExecutor parameters for a point of ``nodes`` nodes. submitit writes
    each sbatch option with :func:`shlex.quote` alone: backslashes are doubled here, as
    :func:`sbatch_word` does, so that sbatch reads back the value itself. No wckey (submitit's
    default is ``--wckey=submitit``, which a site that enforces wckeys refuses at submission,
    after ``sbatch --test-only`` passed without it): the job asks what ``--scripts-only``
    writes; ``cluster.sbatch_args=[--wckey=KEY]`` sets one. ``--requeue`` (``#SBATCH
    --requeue``: submitit writes a ``True`` of ``additional_parameters`` as the bare flag and
    has no parameter of its own for it), as :func:`render_script` writes it: submitit requeues
    a job with ``scontrol requeue``, which a site whose slurm.conf has ``JobRequeue=0``
    refuses ("Requested operation is presently disabled") for a job not submitted with
    ``--requeue`` (slurm.conf(5), ``JobRequeue``), and the point would end at its first time
    limit with its checkpoint."""
    opts = {k: v.replace("\\", "\\\\") if isinstance(v, str) else v
            for k, v in sbatch_options(cluster, nodes, job_name).items()}
    named = {k.replace("-", "_"): opts.pop(k) for k in
             ("job-name", "nodes", "ntasks-per-node", "cpus-per-task", "gpus-per-node",
              "partition", "account", "qos", "exclusive") if k in opts}
    opts.pop("time")
    return {**named, "time": max(1, math.ceil(cluster.time_limit_s / 60)),
            "additional_parameters": {**opts, "requeue": True},
            "setup": setup_lines(cluster, sweep_dir),
            "srun_args": srun_options(cluster), "stderr_to_stdout": True,
            "signal_delay_s": cluster.signal_delay_s,
            "array_parallelism": cluster.array_parallelism, "wckey": None}


def executor_parameters(cluster: ClusterConfig, nodes: int, job_name: str,
                        folder: Path) -> dict:
    """submitit's SlurmExecutor parameters of a job of ``nodes`` nodes made as a point's job
    is (the profile's sbatch and srun options, setup lines, time limit), for other jobs of
    a sweep's site (the probe, :mod:`vitfsdp.probe.slurm`)."""
    return _executor_parameters(cluster, nodes, job_name, folder)


def submit(points: Sequence, sweep_dir: Path, job_name: str) -> list[str]:
    """Submit every point as its own job; points of the same shape go into one job array when
    ``cluster.array``. Writes ``job.sbatch`` (the script submitted) and ``job.json`` into each
    run directory.

    Returns:
        the Slurm job ids in point order (``<array job>_<index>`` for array tasks).

    The values of ``cluster.secrets`` go into the sweep's 0600 file first
    (:func:`vitfsdp.launch.secrets.write_point_secrets`), which the scripts source. Scripts
    and submitit's pickles of points that carry a secret (:func:`point_carries_secret`)
    are their owner's only, in a ``.submitit`` folder that is too.

    Raises:
        ValueError: a value no job script can carry (:func:`check_values`); nothing queued.
        submitit.core.utils.FailedJobError / FailedSubmissionError: sbatch refused a job.
    """
    # submitit only where a job is submitted or requeued: validation, --status and --scripts-only
    # start without it
    import submitit

    for p in points:
        check_values(p.overrides, p.run_dir, job_name)
    write_point_secrets(points, sweep_dir)
    folder = (Path(sweep_dir) / SUBMITIT_DIR).resolve()
    if any(point_carries_secret(p) for p in points):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)
    job_ids: dict[int, str] = {}
    for group in shape_groups(points):
        cluster = group[0].cfg.cluster
        # submitit writes `python` into its script as shell text: one quoted word
        executor = submitit.SlurmExecutor(folder=folder, python=shlex.quote(node_python(cluster)),
                                          max_num_timeout=cluster.max_requeues)
        executor.update_parameters(**_executor_parameters(cluster, group[0].cfg.nodes,
                                                          job_name, sweep_dir))
        specs = [task_spec(p.cfg.cluster, p.overrides, p.run_dir, p.cfg.nodes,
                           getattr(p.cfg.train, "checkpoint_every", 0)) for p in group]
        for p in group:
            (p.run_dir / TASK_LOG_DIR).mkdir(parents=True, exist_ok=True)
        with hidden_from_slurm(group):  # sbatch exports this environment into the job's
            if cluster.array and len(group) > 1:
                with executor.batch():
                    jobs = [executor.submit(TrainTask(), s) for s in specs]
            else:
                jobs = [executor.submit(TrainTask(), s) for s in specs]
        for p, job in zip(group, jobs, strict=True):
            job_ids[p.num] = job.job_id
            _save_submitted(p, job, folder)
    return [job_ids[p.num] for p in points]


#: The file ``--scripts-only`` writes into the sweep directory: it submits the job scripts
#: in the order a sweep submits them (:func:`write_submit_script`).
SUBMIT_FILE = "submit.sh"

_SUBMIT_TEXT = """\
#!/bin/bash
# Submits the {count} job scripts `python -m vitfsdp.sweep --scripts-only` wrote, one sbatch
# each, round by round as a packed sweep submits its jobs: every job of repeat 0, then of
# repeat 1, ... Run it as: bash {name} [FIRST [SBATCH OPTION...]]
# FIRST (a script's number, 1-{count}; default 1) leaves out the scripts before it; the
# options after it go to each sbatch (--hold, --qos=debug). It stops at the first script
# sbatch refuses (a site's cap on a user's queued jobs, a wrong account) and prints the
# command that goes on from that script once fixed or once jobs have ended. Each job id is
# appended to {ids} in the run directory of each point the script runs, where
# `python -m vitfsdp.sweep --status` finds the job (pending, running or ended).
set -u
scripts=(
{lines}
)
# the number of points each script runs, and their run directories, in the scripts' order
num_points=({counts})
run_dirs=(
{dirs}
)
first=${{1:-1}}
n=${{#scripts[@]}}
if ! [[ $first =~ ^[1-9][0-9]*$ ]] || (( first > n )); then
    echo "{name}: FIRST is the number of the script to start from, 1-$n, not '$first'" >&2
    exit 2
fi
options=("${{@:2}}")
k=0
for ((i = 1; i < first; i++)); do (( k += num_points[i - 1] )); done
for ((i = first; i <= n; i++)); do
    if ! out=$(sbatch --parsable ${{options[@]+"${{options[@]}}"}} "${{scripts[i - 1]}}"); then
        printf '{name}: sbatch refused script %d of %d (%s); ' "$i" "$n" "${{scripts[i - 1]}}" >&2
        printf 'once fixed, or once jobs have ended, go on with: bash %q %d' "$0" "$i" >&2
        if (( ${{#options[@]}} )); then printf ' %q' "${{options[@]}}" >&2; fi
        echo >&2
        exit 1
    fi
    id=${{out##*$'\\n'}}
    id=${{id%%;*}}  # --parsable: <job id>[;<cluster>]
    if [[ $id =~ ^[0-9]+$ ]]; then
        echo "Submitted batch job $id"
        for ((j = k; j < k + num_points[i - 1]; j++)); do
            echo "$id" 2>/dev/null >> "${{run_dirs[j]}}/{ids}" ||
                echo "{name}: job $id is queued, but could not be recorded in" \\
                    "${{run_dirs[j]}}/{ids}: --status shows its point written until it starts" >&2
        done
    elif [[ -n $out ]]; then
        echo "$out"
    fi
    (( k += num_points[i - 1] ))
done
echo "{name}: submitted scripts $first-$n of $n"
"""


def write_submit_script(sweep_dir: str | Path, scripts: Sequence[Path],
                        run_dirs: Sequence[Sequence[Path]] | None = None) -> Path:
    """Write ``<sweep_dir>/submit.sh`` (:data:`SUBMIT_FILE`, executable): a bash script that
    ``sbatch``-es ``scripts`` (their absolute paths, shell-quoted) in the order given, from
    its first argument's (``FIRST``, 1-based; default 1) on, each with the further arguments
    as sbatch options (``--hold``), and stops at the first one sbatch refuses, printing the
    command that goes on from it (``bash <submit.sh> <n> [options]``, shell-quoted). Each
    job id sbatch gives is appended to :data:`SUBMITTED_FILE` in the run directory of each
    point its script runs, where ``--status`` finds the job
    (:func:`vitfsdp.launch.resume.hand_submitted_job_id`). Submits nothing itself.

    Args:
        run_dirs: per script, the run directories of the points it runs (a pack's); None:
            each script's own folder (a point's ``job.sbatch``).

    Raises:
        OSError: the sweep directory is missing or not writable.
    """
    path = Path(sweep_dir) / SUBMIT_FILE
    run_dirs = [[Path(s).parent] for s in scripts] if run_dirs is None else run_dirs
    lines = "\n".join(f"    {shlex.quote(str(Path(s).absolute()))}" for s in scripts)
    dirs = "\n".join("    " + " ".join(shlex.quote(str(Path(d).absolute())) for d in ds)
                     for ds in run_dirs)
    write_text_atomic(path, _SUBMIT_TEXT.format(
        count=len(scripts), name=SUBMIT_FILE, ids=SUBMITTED_FILE, lines=lines, dirs=dirs,
        counts=" ".join(str(len(ds)) for ds in run_dirs)), _script_mode(False))
    return path


def submit_command(sweep_dir: str | Path) -> str:
    """``bash <sweep_dir>/submit.sh``, shell-quoted: what submits the scripts
    :func:`write_submit_script` listed, to paste into a shell."""
    return shlex.join(["bash", str(Path(sweep_dir) / SUBMIT_FILE)])


def written_not_run(sweep_dir: str | Path) -> str | None:
    """What the analysis says of a sweep directory that holds no ``run.json``, where it holds
    points' job scripts (``--scripts-only``): ``sweep dir runs/s holds the job scripts of 90
    points (--scripts-only), none run yet (no run.json below it): submit them with: bash
    runs/s/submit.sh (unless submitted already: squeue --me lists them), then analyse it
    once they have run`` (:func:`submit_command`, shell-quoted; a directory written before
    ``submit.sh`` names each point's ``job.sbatch``); where ``submit.sh`` recorded job ids
    (:data:`SUBMITTED_FILE`), how many points it submitted and the ``--status`` command that
    follows them (shell-quoted). None where it holds no point's script.
    """
    sweep_dir = Path(sweep_dir)
    points = len(list(sweep_dir.glob(f"*/{SCRIPT_FILE}")))
    if not points:
        return None
    submitted = len(list(sweep_dir.glob(f"*/{SUBMITTED_FILE}")))
    status = shlex.join(["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir)])
    how = (f"{submitted} of them submitted by {SUBMIT_FILE}: follow them with: {status}"
           if submitted else
           f"submit them with: {submit_command(sweep_dir)} (unless submitted already: squeue "
           "--me lists them)" if (sweep_dir / SUBMIT_FILE).is_file() else
           f"sbatch each point's {SCRIPT_FILE} ({sweep_dir / '*' / SCRIPT_FILE}) (unless "
           "submitted already: squeue --me lists them)")
    return (f"sweep dir {sweep_dir} holds the job scripts of {points} point"
            f"{'' if points == 1 else 's'} (--scripts-only), none run yet (no {RUN_FILE} below "
            f"it): {how}, then analyse it once they have run")


def shape_groups(points: Sequence) -> list[list]:
    """Points of the same cluster profile, time limit included, and node count (one job
    shape), in point order: those that can share a job array (one time limit). Packs group
    otherwise (:func:`vitfsdp.launch.pack.allocation_groups`: by repeat round, and whatever
    their points' ``cluster.time``)."""
    groups: dict[tuple, list] = {}
    for p in points:
        groups.setdefault((repr(p.cfg.cluster), p.cfg.nodes), []).append(p)
    return list(groups.values())


def _save_submitted(point, job, folder: Path) -> None:
    base = str(job.job_id).split("_")[0]
    script = folder / f"{base}_submission.sh"
    if not script.exists():  # array tasks share the array job's script
        script = Path(job.paths.submission_file)
    secret = point_carries_secret(point)
    write_script(point.run_dir / SCRIPT_FILE, script.read_text(encoding="utf-8"), secret)
    if secret:  # submitit wrote them as the umask allows
        for path in (script, Path(job.paths.submitted_pickle)):
            if path.exists():
                path.chmod(0o600)
    write_json_atomic(point.run_dir / JOB_FILE,
                      slurm_job_record(point, str(job.job_id), "submitit"))
    log.info("submitted %s as Slurm job %s", point.run_dir.name, job.job_id)
