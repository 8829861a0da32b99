"""Launchers and the cluster profile (``cluster=<name>``, ``conf/cluster/*.yaml``).

- ``launcher: local``: each point runs as torchrun processes on this machine
  (:mod:`vitfsdp.launch.local`).
- ``launcher: slurm``: each point is one Slurm job sized for it, submitted with submitit or
  written as an sbatch script (:mod:`vitfsdp.launch.slurm`).
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from vitfsdp.launch.netns import NetworkConfig
from vitfsdp.provenance import looks_secret, redact

LAUNCHERS = ("local", "slurm")
#: Extra config directories (os.pathsep-separated), each holding cluster/<name>.yaml ...:
#: added to Hydra's search path (hydra_plugins/vitfsdp_searchpath) and carried into job
#: scripts, so that a user's own profile is found on the compute nodes too.
CONFIG_PATH_ENV = "VITFSDP_CONFIG_PATH"
#: srun: one task per GPU (ranks from SLURM_PROCID); torchrun: one task per node, c10d rendezvous.
LAUNCH_MODES = ("srun", "torchrun")
#: ``cluster.torch_build`` values: the GPU stack a torch wheel is built for.
TORCH_BUILDS = ("rocm", "cuda", "cpu")

#: Slurm's time-limit formats (sbatch --time): MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME_FORMATS = (
    (re.compile(r"^(\d+)$"), ("m",)),
    (re.compile(r"^(\d+):(\d{1,2})$"), ("m", "s")),
    (re.compile(r"^(\d+):(\d{1,2}):(\d{1,2})$"), ("h", "m", "s")),
    (re.compile(r"^(\d+)-(\d{1,2})$"), ("d", "h")),
    (re.compile(r"^(\d+)-(\d{1,2}):(\d{1,2})$"), ("d", "h", "m")),
    (re.compile(r"^(\d+)-(\d{1,2}):(\d{1,2}):(\d{1,2})$"), ("d", "h", "m", "s")),
)
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SBATCH_OPTION = re.compile(r"^--[a-z][a-z0-9-]*(=.*)?$")


def time_limit_s(value: str, key: str = "cluster.time") -> int:
    """Seconds in a Slurm time limit such as ``00:30:00``, ``90`` (minutes) or ``1-12:00:00``.

    Source: the ``--time`` formats of sbatch(1).

    Raises:
        ValueError: the string is in none of Slurm's formats, or is zero.
    """
    text = str(value).strip()
    for pattern, units in _TIME_FORMATS:
        m = pattern.match(text)
        if m:
            _check_time_fields(key, value, [int(v) for v in m.groups()], units)
            seconds = sum(int(v) * _SECONDS[u] for v, u in zip(m.groups(), units, strict=True))
            if seconds <= 0:
                break
            return seconds
    raise ValueError(
        f"{key}={value!r} is not a Slurm time limit; use MM, HH:MM:SS or D-HH:MM:SS "
        "(e.g. 00:30:00), greater than zero"
    )


#: The largest value of a field that is not a time limit's first (``25:99:99`` is refused:
#: Slurm took it without a word and ran 1-02:41:00).
_FIELD_MAX = {"h": 23, "m": 59, "s": 59}
_FIELD_NAME = {"h": "hours", "m": "minutes", "s": "seconds"}


def _check_time_fields(key: str, value: str, numbers: list[int], units: tuple) -> None:
    """Refuse a field after the first of a time limit that is out of its range.

    Raises:
        ValueError: naming ``key``, the field and its range.
    """
    for number, unit in list(zip(numbers, units, strict=True))[1:]:
        if number > _FIELD_MAX[unit]:
            raise ValueError(f"{key}={value!r} has {number} {_FIELD_NAME[unit]}, more than "
                             f"{_FIELD_MAX[unit]}; write e.g. 1-02:00:00 for 26 hours")


def config_path_dirs() -> list[Path]:
    """The folders of ``VITFSDP_CONFIG_PATH`` (:data:`CONFIG_PATH_ENV`), in order, ``~``
    expanded and made absolute; none when it is unset.

    Raises:
        ValueError: naming the variable and the folder's position (never its text): a folder
            holding ``${`` (Hydra parses its search path as OmegaConf text), a control
            character, or a name longer than file systems allow (255 bytes a name, 4096 a path).
    """
    folders = os.environ.get(CONFIG_PATH_ENV, "").split(os.pathsep)
    for i, folder in enumerate(folders, start=1):
        where = f"{CONFIG_PATH_ENV}'s folder {i}"
        if "${" in folder:
            raise ValueError(f"{where} holds '${{', which Hydra reads as an interpolation in "
                             "its search path; use a folder (or a link to it) without it")
        if any(ord(c) < 32 or ord(c) == 127 for c in folder):
            raise ValueError(f"{where} holds a control character (newline, tab, ...); fix "
                             f"{CONFIG_PATH_ENV}")
        if len(folder.encode()) >= 4096 or any(len(part.encode()) > 255
                                               for part in folder.split("/")):
            raise ValueError(f"{where} is {len(folder)} characters long, longer than a file "
                             f"system allows (255 bytes a name, 4096 a path); fix "
                             f"{CONFIG_PATH_ENV}")
    return [Path(f).expanduser().resolve() for f in folders if f]


def _check_env_name(key: str, name: object) -> None:
    """Refuse a variable name that is not a shell name (it is written unquoted).

    Raises:
        ValueError: ``name`` is not letters, digits and ``_``, or starts with a digit.
    """
    if not _ENV_NAME.match(str(name)):
        raise ValueError(f"{key}: not a shell variable name "
                         "(letters, digits, _; not starting with a digit)")


def check_text(key: str, value: str) -> None:
    """Refuse control characters (newline, carriage return, NUL, ...) in a value that will be
    written into a job script: a newline would end a ``#SBATCH`` comment and start a command.

    Raises:
        ValueError: ``value`` holds a control character (shown redacted where ``key`` looks
            secret, :func:`vitfsdp.provenance.redact`).
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in str(value)):
        raise ValueError(f"{key}={redact(key, str(value))!r} contains a control character "
                         "(newline, tab, ...); remove it")


#: Fields the job script hands to a command as an argument (mkdir, tar, source, conda
#: activate, sbcast, module load, the interpreter): a leading ``-`` would make it an option.
_COMMAND_ARGUMENTS = ("setup_script", "conda_env", "venv", "sbcast_env", "sbcast_dir",
                      "cache_dir", "python")


def _check_not_option(key: str, value: str, what: str) -> None:
    """Refuse a value a command in the job would read as an option (a leading ``-``).

    Raises:
        ValueError: naming the key; the fix (``./-name`` for a relative path).
    """
    if str(value).startswith("-"):
        raise ValueError(f"{key}={str(value)!r} starts with '-', which the job's command would "
                         f"read as an option; give {what} (./{str(value)} for a relative path)")


def _check_not_secret(key: str, name: str, value: str) -> None:
    """Refuse a secret's value in ``cluster.env``: it would stand in the job script, which
    Slurm may store (``AccountingStoreFlags=job_script``), and on the command line that set it.

    Raises:
        ValueError: ``name`` looks secret or ``value`` holds URL credentials; the value is
            never shown.
    """
    if looks_secret(name) or redact(name, str(value)) != str(value):
        raise ValueError(f"{key} holds a secret's value, which would stand in the job script "
                         f"and on the command line; name it instead: cluster.secrets=[{name}] "
                         f"with the value in your environment or a cluster.secrets_file "
                         "(docs/sites.md)")


@dataclass
class QueueLimit:
    """A site's limit on a job's time (and jobs at once) for a partition and/or QOS: one row
    of ``cluster.queue_limits``, e.g. one of Frontier's batch bins (1-91 nodes: 2 hours)."""

    max_time: str  # the longest cluster.time a matching job may ask for, Slurm format
    partition: str | None = None  # applies to jobs in this partition; None = any
    qos: str | None = None  # applies to jobs of this QOS; None = any (with or without)
    # the bin's largest job: the row with the smallest max_nodes >= nodes applies among the
    # rows of its partition and QOS; None = every job size
    max_nodes: int | None = None
    max_jobs: int | None = None  # jobs of a user at once (Frontier's debug QOS: 1); None = any
    # False: the site forbids submitting jobs one after another here (Frontier's debug QOS:
    # "job chaining ... is prohibited"): a sweep of more than one job is refused
    chaining: bool = True

    @property
    def where(self) -> str:
        """The row's scope in words: ``partition batch``, ``QOS debug``, both joined by
        "and", or ``the site``."""
        return " and ".join(x for x in (self.partition and f"partition {self.partition}",
                                        self.qos and f"QOS {self.qos}") if x) or "the site"

    def matches(self, partition: str | None, qos: str | None) -> bool:
        """Whether the row applies to a job in ``partition`` with ``qos``."""
        return (self.partition in (None, partition)
                and (self.qos is None or self.qos == qos))


@dataclass
class ClusterConfig:
    """Where sweep points run (``cluster=<name>``): a cluster profile.

    Every string that reaches a job script is shell-quoted there; values cannot run commands.
    """

    name: str = "local"  # profile name, recorded in run.json
    launcher: str = "local"  # local = torchrun processes here | slurm = one Slurm job per point
    gpus_per_node: int = 2  # ranks (GPUs, GCDs) per node; local simulates nodes of this many
    max_local_procs: int = 64  # local launcher: refuse points needing more processes than this
    # local launcher: nodes apart on an emulated link (vitfsdp.launch.netns; root only)
    network: NetworkConfig = field(default_factory=NetworkConfig)

    # --- Slurm (launcher=slurm) ---
    launch_mode: str = "srun"  # srun: a task per GPU | torchrun: a task per node, c10d rendezvous
    partition: str | None = None  # sbatch --partition; None = the cluster's default partition
    account: str | None = None  # sbatch --account (project to charge); None = not passed
    qos: str | None = None  # sbatch --qos; None = not passed
    # job time limit, Slurm format: MM, HH:MM:SS or D-HH:MM:SS; auto = the plan's predicted
    # time of the point's steps x a safety factor + start-up (vitfsdp.plan.auto_time_limit),
    # resolved when the sweep composes each point
    time: str = "00:30:00"
    # SIGUSR2 this many seconds before the time limit: save, requeue. It must cover the rest
    # of a timing window (train.log_every steps) plus the checkpoint's save
    signal_delay_s: int = 90
    max_requeues: int = 3  # requeues after time limits per job (submitit's max_num_timeout)
    cpus_per_task: int = 1  # CPU cores per rank (srun -c); torchrun mode: × gpus_per_node
    gpu_resource: bool = False  # ask Slurm for GPUs: --gpus-per-node (and per task, below)
    # srun --gpu-bind in srun mode, with --gpus-per-task=1 (Frontier: closest); None or none:
    # every task sees the node's GPUs and rank r takes GPU r (slurm.binds_task_gpus)
    gpu_bind: str | None = None
    exclusive: bool = True  # whole nodes (sbatch --exclusive): no neighbours in the timings
    max_nodes: int | None = None  # nodes in the partition; None = ask sinfo before submitting
    # --- the environment on the compute nodes, in job-script order (docs/sites.md) ---
    # sbatch --export: True = the submitting shell's environment (Slurm's ALL); False = NONE,
    # the job starts from the login environment (OLCF's advice with conda) and the script
    # unsets SLURM_EXPORT_ENV so that its srun steps inherit what it set up
    export_env: bool = True
    modules: list[str] = field(default_factory=list)  # `module load` each, in order; pin versions
    setup_script: str | None = None  # file sourced after the modules (site env, conda init)
    conda_env: str | None = None  # `conda activate` this env (name or path); needs conda's module
    venv: str | None = None  # `source <venv>/bin/activate`; a Python virtual environment's path
    env: dict[str, str] = field(default_factory=dict)  # exported as literal values; no secrets
    # exported as literal values in jobs of more than one node only (Frontier: NCCL_NET=OFI)
    multi_node_env: dict[str, str] = field(default_factory=dict)
    # exported as literal values in jobs of one node only (Frontier: NCCL_NET=Socket)
    single_node_env: dict[str, str] = field(default_factory=dict)
    # names of secret variables (WANDB_API_KEY ...), never values: read from the submitting
    # environment (or secrets_file) and handed to the job in a 0600 file (docs/sites.md)
    secrets: list[str] = field(default_factory=list)
    secrets_file: str | None = None  # NAME=value lines, mode 0600; None = the environment only
    # a packed environment (conda-pack's .tar.gz of a conda env) that the job broadcasts with
    # sbcast to every node's sbcast_dir, unpacks and activates instead of conda_env / venv
    # (OLCF: "Sbcast Conda Environments"); None = no broadcast
    sbcast_env: str | None = None
    # node-local folder the environment goes to; `$NAME` expands on the node (Frontier's NVMe:
    # /mnt/bb/$USER); a per-job folder is made inside it
    sbcast_dir: str = "/tmp"
    # sbatch options a job with sbcast_env needs (Frontier: --constraint=nvme, the NVMe)
    sbcast_args: list[str] = field(default_factory=list)
    # refuse before queueing a setup_script, venv, conda_env path or cluster.python that does
    # not exist here; false: the paths exist on the compute nodes only (the job checks anyway)
    check_paths: bool = True
    # directories put in front of a path variable, e.g. {LD_LIBRARY_PATH: [<plugin>/lib]}, in
    # order; `$NAME` expands on the compute node (nothing else does)
    prepend_env: dict[str, list[str]] = field(default_factory=dict)
    # HOME-free caches: XDG_CACHE_HOME here and TORCH_HOME, TRITON_CACHE_DIR,
    # TORCHINDUCTOR_CACHE_DIR, HF_HOME, CUDA_CACHE_PATH under it, created on every node; `$NAME`
    # expands on the node (/tmp/vitfsdp-$SLURM_JOB_ID: per job, node-local); None = the tools'
    # defaults (under HOME)
    cache_dir: str | None = None
    miopen_cache_per_job: bool = False  # MIOpen kernel cache in /tmp per job (ROCm), created
    # interpreter on the compute nodes; None = `python` of the activated env (conda_env, venv),
    # else the one sweeping (its absolute path)
    python: str | None = None
    # the torch build the jobs' environment must hold (rocm | cuda | cpu), asked of it here,
    # with its modules and activation, before anything is queued (cluster.check_paths);
    # None = any build (vitfsdp and torch importable is still checked)
    torch_build: str | None = None
    # sbatch options the site needs (Perlmutter's --constraint=gpu, Frontier's --network=...):
    # the profile's, kept when a sweep sets its own sbatch_args
    site_sbatch_args: list[str] = field(default_factory=list)
    # extra sbatch options: --key=value, after the site's (the same key: this one wins)
    sbatch_args: list[str] = field(default_factory=list)
    srun_args: list[str] = field(default_factory=list)  # extra srun options: --key=value
    array: bool = True  # points of the same shape go into one job array
    array_parallelism: int = 64  # array tasks allowed to run at once (sbatch --array=...%N)
    # jobs of a sweep queued or running at once (array tasks count one each); more are
    # submitted as earlier ones end. None = no limit. Frontier: 4 eligible per user (batch)
    max_jobs: int | None = None
    # the site's cap on a user's jobs in the queue (pending, held or running; array tasks
    # count one each), beyond which sbatch rejects a submission: a sweep that would queue
    # more at once is refused, and --scripts-only says so. None = unknown. Frontier: 100
    max_queued_jobs: int | None = None
    poll_s: float = 5.0  # seconds between job-state polls while a sweep waits
    required: list[str] = field(default_factory=list)  # keys the user must set (account ...)
    # file systems the compute nodes mount read-only ($NAME and ~ expanded on the login
    # node): a sweep directory under one is refused before anything is queued
    read_only_paths: list[str] = field(default_factory=list)
    # file systems of a small quota (NFS homes; $NAME and ~ expanded on the login node): a
    # sweep directory under one is warned of, since checkpoints can fill it
    small_paths: list[str] = field(default_factory=list)
    # the site's time limits by partition, QOS and job size (QueueLimit rows; Frontier: the
    # batch bins and the debug QOS): a point beyond is refused before anything is queued
    queue_limits: list[QueueLimit] = field(default_factory=list)

    # --- the plan (python -m vitfsdp.plan; docs/plan.md) ---
    device_memory_gib: float | None = None  # memory per GPU/GCD, GiB; None = unknown (fits unknown)
    # a point predicted within this fraction of device_memory_gib is reported `tight`
    memory_reserve_frac: float = 0.08
    peak_tflops: float | None = None  # dense bf16 (= fp16) peak per GPU, TFLOP/s; None = unknown
    peak_tflops_tf32: float | None = None  # dense TF32 peak; None = no TF32 units (or unknown)
    peak_tflops_fp32: float | None = None  # dense fp32 peak (matrix units where the GPU has them)
    # a site's measurements (python -m vitfsdp.probe): a probe.json, or a directory holding
    # one; the plan then predicts step time from it. None = the data-sheet figures below.
    # `allocation`: each pack (hydra.launcher.pack=by_nodes) measures its own allocation
    # first, into the sweep directory's probe.json (the analysis predicts from it)
    probe: str | None = None
    plan_efficiency: float = 0.4  # fraction of peak_tflops the training compute reaches
    intra_node_gbps: float | None = None  # ring bus bandwidth per GPU inside a node, GB/s
    # GPUs of one package that share a faster link (an MI250X's 2 GCDs), and that link's bus
    # bandwidth, GB/s: a group of consecutive ranks within one package (HYBRID_2GPU, with
    # the closest GCD bound to each rank) uses it; None = every group inside a node alike
    package_gpus: int | None = None
    intra_package_gbps: float | None = None
    inter_node_gbps: float | None = None  # ring bus bandwidth per GPU across nodes, GB/s
    memory_gbps: float | None = None  # device memory bandwidth, GB/s; None = not modelled
    collective_latency_us: float | None = None  # start-up of one collective, us; None = 0
    intra_node_latency_us: float | None = None  # one ring step inside a node, us; None = 0
    inter_node_latency_us: float | None = None  # one ring step across nodes, us; None = 0
    price_per_node_hour: float | None = None  # cost of one node-hour (any currency); None = unknown
    # GB/s (10^9 bytes) at which one node writes its ranks' checkpoint files into the sweep
    # directory, for the check that the save fits the wait after SIGUSR2; None = unknown:
    # vitfsdp.sweep.check.CHECKPOINT_WRITE_GBPS, assumed. A run's logs/task0.log says each
    # save's seconds ("checkpoint of step N saved in X s")
    checkpoint_write_gbps: float | None = None

    def __post_init__(self) -> None:
        self._check_choices()
        for key in ("gpus_per_node", "max_local_procs", "cpus_per_task", "array_parallelism",
                    "signal_delay_s"):
            if getattr(self, key) < 1:
                raise ValueError(f"cluster.{key}={getattr(self, key)} must be >= 1")
        if self.max_requeues < 0:
            raise ValueError(f"cluster.max_requeues={self.max_requeues} must be >= 0")
        if self.max_nodes is not None and self.max_nodes < 1:
            raise ValueError(f"cluster.max_nodes={self.max_nodes} must be >= 1 (or null)")
        for key in ("max_jobs", "max_queued_jobs"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ValueError(f"cluster.{key}={getattr(self, key)} must be >= 1 (or null: "
                                 "no limit)")
        if self.poll_s <= 0:
            raise ValueError(f"cluster.poll_s={self.poll_s} must be > 0")
        self._check_plan_figures()
        for i, row in enumerate(self.queue_limits):
            time_limit_s(row.max_time, f"cluster.queue_limits[{i}].max_time")
        if self.network.emulate and self.launcher != "local":
            raise ValueError(f"cluster.network.emulate=true needs the local launcher; "
                             f"cluster={self.name} is launcher={self.launcher}: set "
                             "cluster.network.emulate=false (docs/network.md)")
        if self.probe == "allocation" and (self.launcher != "slurm"
                                           or self.launch_mode != "srun"):
            raise ValueError(f"cluster.probe=allocation measures inside each pack's Slurm "
                             f"allocation; cluster={self.name} is launcher={self.launcher}, "
                             f"launch_mode={self.launch_mode}: use a Slurm profile with "
                             "cluster.launch_mode=srun, or run python -m vitfsdp.probe --out "
                             "SWEEP_DIR before the sweep")
        if self.time != "auto":
            time_limit_s(self.time)
        self._check_strings()
        for key in self.required:
            if getattr(self, key, None) in (None, "", []):
                raise ValueError(f"cluster.{key} is required by cluster={self.name}; set "
                                 f"cluster.{key}=... on the command line or in the profile")

    def _check_plan_figures(self) -> None:
        for key in ("device_memory_gib", "peak_tflops", "peak_tflops_tf32", "peak_tflops_fp32",
                    "intra_node_gbps", "inter_node_gbps", "price_per_node_hour", "memory_gbps",
                    "package_gpus", "intra_package_gbps", "checkpoint_write_gbps"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ValueError(f"cluster.{key}={value} must be > 0 (or null: unknown)")
        for key in ("collective_latency_us", "intra_node_latency_us", "inter_node_latency_us"):
            if (getattr(self, key) or 0) < 0:
                raise ValueError(f"cluster.{key}={getattr(self, key)} must be >= 0 (or null)")
        if not 0 <= self.memory_reserve_frac < 1:
            raise ValueError(f"cluster.memory_reserve_frac={self.memory_reserve_frac} must be "
                             "in [0, 1), e.g. 0.08 (8% of the device memory)")
        if not 0 < self.plan_efficiency <= 1:
            raise ValueError(f"cluster.plan_efficiency={self.plan_efficiency} must be in (0, 1]; "
                             "fit it with python -m vitfsdp.plan --calibrate SWEEP_DIR")

    def _check_choices(self) -> None:
        for key, valid in (("launcher", LAUNCHERS), ("launch_mode", LAUNCH_MODES),
                           ("torch_build", (None, *TORCH_BUILDS))):
            if getattr(self, key) not in valid:
                raise ValueError(f"cluster.{key}={getattr(self, key)!r} is unknown; valid: "
                                 f"{', '.join(map(str, valid))}")

    def _check_strings(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                check_text(f"cluster.{f.name}", value)
        for i, module in enumerate(self.modules):
            check_text(f"cluster.modules[{i}]", module)
            _check_not_option(f"cluster.modules[{i}]", module, "a module name")
        for key in _COMMAND_ARGUMENTS:
            if getattr(self, key):
                _check_not_option(f"cluster.{key}", getattr(self, key), "a path")
        if ":" in self.sbcast_dir:
            raise ValueError(f"cluster.sbcast_dir={self.sbcast_dir!r} holds ':', which would "
                             "split PATH (the environment's bin goes on it) and which tar reads "
                             "as host:file; choose a folder without it")
        for key in ("env", "multi_node_env", "single_node_env"):
            for name, value in getattr(self, key).items():
                _check_env_name(f"cluster.{key}.{name}", name)
                check_text(f"cluster.{key}.{name}", value)
                _check_not_secret(f"cluster.{key}.{name}", name, value)
        for i, name in enumerate(self.secrets):
            _check_env_name(f"cluster.secrets[{i}]", name)
        self._check_environment()
        for key in ("site_sbatch_args", "sbatch_args", "srun_args", "sbcast_args"):
            for i, arg in enumerate(getattr(self, key)):
                check_text(f"cluster.{key}[{i}]", arg)
                if not _SBATCH_OPTION.match(arg):
                    raise ValueError(f"cluster.{key}[{i}]={arg!r} is not a long option; "
                                     "write it as --key=value or --flag")

    def _check_environment(self) -> None:
        activated = [f"cluster.{k}={getattr(self, k)!r}"
                     for k in ("conda_env", "venv", "sbcast_env") if getattr(self, k)]
        if len(activated) > 1:
            raise ValueError(f"{' and '.join(activated)} are set; activate one environment")
        for name, dirs in self.prepend_env.items():
            key = f"cluster.prepend_env.{name}"
            _check_env_name(key, name)
            if isinstance(dirs, str) or not all(isinstance(d, str) and d for d in dirs):
                raise ValueError(f"{key}={dirs!r} must be a list of directories, e.g. "
                                 f"{key}=[/path/a,/path/b]")
            for i, entry in enumerate(dirs):
                check_text(f"{key}[{i}]", entry)
                if os.pathsep in entry:
                    raise ValueError(f"{key}[{i}]={entry!r} holds {os.pathsep!r}; write each "
                                     "directory as its own list item")

    @property
    def time_limit_s(self) -> int:
        """The job time limit in seconds."""
        return time_limit_s(self.time)

    def check_queue_limits(self, nodes: int) -> list[str]:
        """Refuse a job of ``nodes`` nodes that ``queue_limits`` would not run: its
        ``cluster.time`` beyond the row that applies, or more nodes than the partition's
        largest bin. A ``max_jobs`` above (or unset against) a row's ``max_jobs`` is lowered
        to it (:meth:`_lower_max_jobs`); a row that forbids chaining jobs still refuses a
        sweep of more than one (:meth:`no_chaining`).

        Returns:
            One line per lowering (none: nothing lowered, as when checked again), for the
            caller to say once for its sweep: each of a sweep's points lowers its own.

        Raises:
            ValueError: one line naming the key, the limit and its row.
        """
        lowered = []
        for i, row in self.queue_rows(nodes):
            self._check_row(i, row, nodes)
            if line := self._lower_max_jobs(i, row):
                lowered.append(line)
        return lowered

    def queue_rows(self, nodes: int) -> list[tuple[int, QueueLimit]]:
        """The rows of ``queue_limits`` (index, row) that apply to a job of ``nodes`` nodes in
        this profile's partition and QOS: every row without ``max_nodes``, and of the binned
        rows the smallest bin that holds ``nodes``.

        Raises:
            ValueError: ``nodes`` is more than the partition's largest bin.
        """
        rows = [(i, r) for i, r in enumerate(self.queue_limits)
                if r.matches(self.partition, self.qos)]
        binned = sorted((r.max_nodes, i, r) for i, r in rows if r.max_nodes is not None)
        applies = [(i, r) for i, r in rows if r.max_nodes is None]
        if binned:
            fits = [(i, r) for n, i, r in binned if n >= nodes]
            if not fits:
                raise ValueError(f"nodes={nodes} is more than partition {self.partition} takes "
                                 f"(at most {binned[-1][0]} nodes, cluster.queue_limits)")
            applies.append(fits[0])
        return applies

    def queue_time_limit_s(self, nodes: int) -> int | None:
        """The longest time limit, in seconds, a job of ``nodes`` nodes may ask for under
        ``queue_limits`` (the shortest of the rows that apply); None where none applies.

        Raises:
            ValueError: ``nodes`` is more than the partition's largest bin.
        """
        limits = [time_limit_s(r.max_time, f"cluster.queue_limits[{i}].max_time")
                  for i, r in self.queue_rows(nodes)]
        return min(limits) if limits else None

    def _check_row(self, i: int, row: QueueLimit, nodes: int) -> None:
        where = row.where
        size = f" for a job of {nodes} node{'s' if nodes > 1 else ''}" if row.max_nodes else ""
        if self.time_limit_s > time_limit_s(row.max_time, f"cluster.queue_limits[{i}].max_time"):
            raise ValueError(f"cluster.time={self.time} is longer than {row.max_time}, the "
                             f"limit of {where}{size} (cluster.queue_limits[{i}]); use "
                             f"cluster.time<={row.max_time}, or another partition/QOS")

    def _lower_max_jobs(self, i: int, row: QueueLimit) -> str | None:
        """Lower ``max_jobs`` to row ``i``'s where it is above it or unset, and say so in one
        line (None: not lowered): a sweep of one point (or fewer jobs than either) runs the
        same, and the submitter reads the lowered value (``max_jobs`` is no part of a
        point's identity)."""
        if row.max_jobs is None or (self.max_jobs is not None and self.max_jobs <= row.max_jobs):
            return None
        was = "null (no limit)" if self.max_jobs is None else self.max_jobs
        jobs = f"{row.max_jobs} job{'s' if row.max_jobs > 1 else ''}"
        chain = "" if row.chaining else ", and forbids chaining jobs: a sweep under it is one job"
        self.max_jobs = row.max_jobs
        return (f"cluster.max_jobs={was} lowered to {row.max_jobs}: {row.where} allows {jobs} "
                f"of a user at once (cluster.queue_limits[{i}]){chain}")

    def no_chaining(self, nodes: int) -> str | None:
        """Where a row that applies to a job of ``nodes`` nodes forbids chaining jobs
        (``chaining: false``): ``QOS debug (cluster.queue_limits[4])``; else None."""
        for i, row in self.queue_rows(nodes):
            if not row.chaining:
                return f"{row.where} (cluster.queue_limits[{i}])"
        return None


def _option(default: object, text: str, flag: str | None = None):
    """A launcher option's field: its default, its one-line help ``text`` and, for a switch,
    the short flag of ``python -m vitfsdp.sweep`` that sets it to true."""
    return field(default=default, metadata={"help": text, "flag": flag})


@dataclass(frozen=True)
class LaunchOptions:
    """The vitfsdp launcher's sweep-wide options, declared once.

    Each is ``hydra.launcher.<name>=value`` on the sweep's command line (the launcher plugin's
    Hydra config is made of these fields, :func:`hydra_launcher_fields`); the switches with a
    flag (``--detach``) are also short flags of ``python -m vitfsdp.sweep``
    (:func:`launcher_flags`), listed with their help by ``--help``.
    """

    detach: bool = _option(False, "Slurm profiles: return once every point's job is submitted",
                           "--detach")
    rerun_failed: bool = _option(
        False, "run again the points that ended oom, failed or timeout in their run",
        "--rerun-failed")
    scripts_only: bool = _option(
        False, "Slurm profiles: write each point's job.sbatch, submit nothing", "--scripts-only")
    job_name: str = _option("vitfsdp", "Slurm job name of every point")
    run_infeasible: bool = _option(
        False, "run the points the plan predicts not to fit (only warn)", "--run-infeasible")
    batch_search: bool = _option(
        False, "find each point's largest power-of-two train.local_batch_size", "--batch-search")
    batch_search_max: int = _option(1024, "the largest local batch the search tries")
    pack: str | None = _option(
        None, "Slurm profiles: null = one job per point; by_nodes = one job per node count "
        "and repeat round runs its points one after another, each its own job step and "
        "records (vitfsdp.launch.pack)")
    #: the default is vitfsdp.progress.STALL_FLOOR_S (not imported: this module stays light)
    stall_floor_s: float = _option(
        180.0, "seconds a running point (a local one, or a Slurm job the sweep waits on) may "
        "show no progress before a stall line, at least (5x the longest gap between windows "
        "seen so far where that is more)")

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> LaunchOptions:
        """The options in ``values`` (``hydra.launcher``'s node; a missing one takes its
        default), each converted to its field's type (``bool``, ``int``, ``str``; an
        optional one kept as given)."""
        hints = typing.get_type_hints(cls)
        options = {}
        for f in fields(cls):
            value = values.get(f.name, f.default)
            kind = hints[f.name]
            options[f.name] = kind(value) if kind in (bool, int, str, float) else value
        return cls(**options)


#: The override that sets the stall line's floor (:attr:`LaunchOptions.stall_floor_s`).
STALL_FLOOR_KEY = "hydra.launcher.stall_floor_s"


def check_stall_floor(value: object) -> float:
    """``hydra.launcher.stall_floor_s`` as seconds: a number above 0 (``inf``: no stall
    line), as given on the command line (text) or composed (a float).

    Raises:
        ValueError: one line naming the key and the fix, for a value that is not a number
            (or NaN) or not above 0.
    """
    try:
        seconds = float(str(value).strip())
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:  # NaN too
        raise ValueError(f"{STALL_FLOOR_KEY}={value} is not a number of seconds above 0: give "
                         f"one, e.g. {STALL_FLOOR_KEY}=600 for steps or a first compile that "
                         "take minutes (default 180)")
    return seconds


def hydra_launcher_fields() -> list[tuple[str, object, object]]:
    """``(name, type, field)`` of every :class:`LaunchOptions` field, types resolved, for
    ``dataclasses.make_dataclass``: the launcher plugin's Hydra config node."""
    hints = typing.get_type_hints(LaunchOptions)
    return [(f.name, hints[f.name], field(default=f.default, metadata=f.metadata))
            for f in fields(LaunchOptions)]


def launcher_flags() -> dict[str, str]:
    """Each short flag of ``python -m vitfsdp.sweep`` → the Hydra override it stands for
    (``--detach`` → ``hydra.launcher.detach=true``), in :class:`LaunchOptions`' order."""
    return {f.metadata["flag"]: f"hydra.launcher.{f.name}=true"
            for f in fields(LaunchOptions) if f.metadata["flag"]}


def setting_help() -> dict[str, str]:
    """Each :class:`LaunchOptions` field without a short flag, as the override that sets it
    to its default (``hydra.launcher.job_name=vitfsdp``; ``null`` for none) → its one-line
    help, for ``--help``."""
    def shown(value: object) -> str:
        return "null" if value is None else str(value).lower() if isinstance(value, bool) \
            else str(value)

    return {f"hydra.launcher.{f.name}={shown(f.default)}": f.metadata["help"]
            for f in fields(LaunchOptions) if not f.metadata["flag"]}


def flag_help() -> dict[str, str]:
    """Each short flag of :func:`launcher_flags` → its one-line help, for ``--help``."""
    return {f.metadata["flag"]: f.metadata["help"]
            for f in fields(LaunchOptions) if f.metadata["flag"]}
