"""Launchers and the cluster profile (``cluster=<name>``, ``conf/cluster/*.yaml``).

- ``launcher: local``: each point runs as torchrun processes on this machine
  (:mod:`vitfsdp.launch.local`).
- ``launcher: slurm``: each point is one Slurm job sized for it, submitted with submitit or
  written as an sbatch script (:mod:`vitfsdp.launch.slurm`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

LAUNCHERS = ("local", "slurm")
#: srun: one task per GPU (ranks from SLURM_PROCID); torchrun: one task per node, c10d rendezvous.
LAUNCH_MODES = ("srun", "torchrun")

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
            seconds = sum(int(v) * _SECONDS[u] for v, u in zip(m.groups(), units, strict=True))
            if seconds <= 0:
                break
            return seconds
    raise ValueError(
        f"{key}={value!r} is not a Slurm time limit; use MM, HH:MM:SS or D-HH:MM:SS "
        "(e.g. 00:30:00), greater than zero"
    )


def check_text(key: str, value: str) -> None:
    """Refuse control characters (newline, carriage return, NUL, ...) in a value that will be
    written into a job script: a newline would end a ``#SBATCH`` comment and start a command.

    Raises:
        ValueError: ``value`` holds a control character.
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in str(value)):
        raise ValueError(f"{key}={value!r} contains a control character (newline, tab, ...); "
                         "remove it")


@dataclass
class ClusterConfig:
    """Where sweep points run (``cluster=<name>``): a cluster profile.

    Every string that reaches a job script is shell-quoted there; values cannot run commands.
    """

    name: str = "local"  # profile name, recorded in run.json
    launcher: str = "local"  # local = torchrun processes here | slurm = one Slurm job per point
    gpus_per_node: int = 2  # ranks (GPUs, GCDs) per node; local simulates nodes of this many
    max_local_procs: int = 64  # local launcher: refuse points needing more processes than this

    # --- Slurm (launcher=slurm) ---
    launch_mode: str = "srun"  # srun: a task per GPU | torchrun: a task per node, c10d rendezvous
    partition: str | None = None  # sbatch --partition; None = the cluster's default partition
    account: str | None = None  # sbatch --account (project to charge); None = not passed
    qos: str | None = None  # sbatch --qos; None = not passed
    time: str = "00:30:00"  # job time limit, Slurm format: MM, HH:MM:SS or D-HH:MM:SS
    # SIGUSR2 this many seconds before the time limit: save, requeue. It must cover the rest
    # of a timing window (train.log_every steps) plus the checkpoint's save
    signal_delay_s: int = 90
    max_requeues: int = 3  # requeues after time limits per job (submitit's max_num_timeout)
    cpus_per_task: int = 1  # CPU cores per rank (srun -c); torchrun mode: × gpus_per_node
    gpu_resource: bool = False  # ask Slurm for GPUs: --gpus-per-node, and --gpus-per-task=1 (srun)
    gpu_bind: str | None = None  # srun --gpu-bind in srun mode (Frontier: closest); None = unset
    exclusive: bool = True  # whole nodes (sbatch --exclusive): no neighbours in the timings
    max_nodes: int | None = None  # nodes in the partition; None = ask sinfo before submitting
    modules: list[str] = field(default_factory=list)  # `module load` each, in order
    setup_script: str | None = None  # file sourced before the launch (site env, venv)
    env: dict[str, str] = field(default_factory=dict)  # exported as literal values
    miopen_cache_per_job: bool = False  # MIOpen kernel cache in /tmp per job (ROCm)
    python: str | None = None  # interpreter on the compute nodes; None = the one sweeping
    sbatch_args: list[str] = field(default_factory=list)  # extra sbatch options: --key=value
    srun_args: list[str] = field(default_factory=list)  # extra srun options: --key=value
    array: bool = True  # points of the same shape go into one job array
    array_parallelism: int = 64  # array tasks allowed to run at once (sbatch --array=...%N)
    poll_s: float = 5.0  # seconds between job-state polls while a sweep waits
    required: list[str] = field(default_factory=list)  # keys the user must set (account ...)

    # --- the plan (python -m vitfsdp.plan; docs/plan.md) ---
    device_memory_gib: float | None = None  # memory per GPU/GCD, GiB; None = unknown (fits unknown)
    peak_tflops: float | None = None  # dense bf16 peak per GPU, TFLOP/s; None = unknown
    plan_efficiency: float = 0.4  # fraction of peak_tflops the training compute reaches
    intra_node_gbps: float | None = None  # ring bus bandwidth per GPU inside a node, GB/s
    inter_node_gbps: float | None = None  # ring bus bandwidth per GPU across nodes, GB/s
    price_per_node_hour: float | None = None  # cost of one node-hour (any currency); None = unknown

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
        if self.poll_s <= 0:
            raise ValueError(f"cluster.poll_s={self.poll_s} must be > 0")
        self._check_plan_figures()
        time_limit_s(self.time)
        self._check_strings()
        for key in self.required:
            if getattr(self, key, None) in (None, "", []):
                raise ValueError(f"cluster.{key} is required by cluster={self.name}; set "
                                 f"cluster.{key}=... on the command line or in the profile")

    def _check_plan_figures(self) -> None:
        for key in ("device_memory_gib", "peak_tflops", "intra_node_gbps", "inter_node_gbps",
                    "price_per_node_hour"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ValueError(f"cluster.{key}={value} must be > 0 (or null: unknown)")
        if not 0 < self.plan_efficiency <= 1:
            raise ValueError(f"cluster.plan_efficiency={self.plan_efficiency} must be in (0, 1]; "
                             "fit it with python -m vitfsdp.plan --calibrate SWEEP_DIR")

    def _check_choices(self) -> None:
        for key, valid in (("launcher", LAUNCHERS), ("launch_mode", LAUNCH_MODES)):
            if getattr(self, key) not in valid:
                raise ValueError(f"cluster.{key}={getattr(self, key)!r} is unknown; valid: "
                                 f"{', '.join(valid)}")

    def _check_strings(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                check_text(f"cluster.{f.name}", value)
        for i, module in enumerate(self.modules):
            check_text(f"cluster.modules[{i}]", module)
        for name, value in self.env.items():
            if not _ENV_NAME.match(str(name)):
                raise ValueError(f"cluster.env.{name}: not a shell variable name "
                                 "(letters, digits, _; not starting with a digit)")
            check_text(f"cluster.env.{name}", value)
        for key in ("sbatch_args", "srun_args"):
            for i, arg in enumerate(getattr(self, key)):
                check_text(f"cluster.{key}[{i}]", arg)
                if not _SBATCH_OPTION.match(arg):
                    raise ValueError(f"cluster.{key}[{i}]={arg!r} is not a long option; "
                                     "write it as --key=value or --flag")

    @property
    def time_limit_s(self) -> int:
        """The job time limit in seconds."""
        return time_limit_s(self.time)
