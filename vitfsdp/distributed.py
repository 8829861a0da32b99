"""Rank, world and master discovery from torchrun, srun (via submitit) or nothing at all.

One helper, :func:`discover`, maps the launcher's variables to a :class:`DistEnv`:

- torchrun (or a user) set ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/
  ``MASTER_PORT``: used as they are.
- ``srun`` started one task per GPU: submitit's ``TorchDistributedEnvironment`` maps
  ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``, takes the first host of the job's node
  list as master and derives the port from the job id; it never overwrites a variable the
  user set.
- neither: a single process (world size 1).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a device or group is made: the command that
    import torch  # only starts ranks (python -m vitfsdp.train, world > 1) never imports it

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job."""

    rank: int = 0  # global rank
    world_size: int = 1  # number of processes (GPUs) in the job
    local_rank: int = 0  # rank on this host
    local_world_size: int = 1  # processes on this host
    source: str = "single"  # single | torchrun | slurm

    @property
    def is_distributed(self) -> bool:
        """True when a launcher (torchrun or srun) started this process as one of several."""
        return self.source != "single"


def discover(environ: dict[str, str] | None = None) -> DistEnv:
    """Read this process's rank and world from the launcher's environment variables.

    Under Slurm (``SLURM_PROCID`` set, no ``RANK``) the torch variables are exported into
    ``os.environ`` first, so ``init_process_group("env://")`` finds them.

    Raises:
        ValueError: ``RANK`` is set without ``WORLD_SIZE`` (or the reverse).
    """
    env = os.environ if environ is None else environ
    if ("RANK" in env) != ("WORLD_SIZE" in env):
        raise ValueError("set both RANK and WORLD_SIZE, or neither (use torchrun or srun)")
    source = "torchrun"
    if "RANK" not in env:
        if "SLURM_PROCID" not in env or int(env.get("SLURM_NTASKS", "1")) < 2:
            return DistEnv()
        _export_slurm()
        source = "slurm"
    world = int(env["WORLD_SIZE"])
    return DistEnv(
        rank=int(env["RANK"]),
        world_size=world,
        local_rank=int(env.get("LOCAL_RANK", "0")),
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
        source=source,
    )


def _export_slurm() -> None:
    """Export torch's variables from Slurm's, keeping any the job script or user set
    (``MASTER_ADDR``/``MASTER_PORT`` from :func:`vitfsdp.launch.slurm.setup_lines`)."""
    # submitit only inside a Slurm job that submitit started
    from submitit.helpers import TorchDistributedEnvironment

    # submitit reads Slurm's variables once told it runs under Slurm (a job script rendered
    # by vitfsdp.launch.slurm does not come from submitit, so nothing else tells it)
    os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")
    tde = TorchDistributedEnvironment()  # uses MASTER_PORT when set, else derives it
    for key, value in (("MASTER_ADDR", tde.master_addr), ("MASTER_PORT", tde.master_port),
                       ("RANK", tde.rank), ("WORLD_SIZE", tde.world_size),
                       ("LOCAL_RANK", tde.local_rank),
                       ("LOCAL_WORLD_SIZE", tde.local_world_size)):
        os.environ.setdefault(key, str(value))


def pick_device(requested: str, local_rank: int,
                gpu_expected: str | None = None) -> torch.device:  # fmt: skip
    """The device of this rank: ``cuda:<local_rank mod visible GPUs>`` (CUDA or ROCm) or ``cpu``.

    ``auto`` picks the GPU when torch sees one, else the CPU, unless ``gpu_expected`` says
    why there must be one (:meth:`vitfsdp.config.RunConfig.gpu_expected`: a GPU cluster's
    profile): then a torch without the site's GPU build would train every point on CPU
    ranks over gloo, to its time limit, and the run stops at once instead.

    Raises:
        ValueError: ``requested`` is not auto/cpu/cuda; cuda was asked for and none exists;
            auto found none where ``gpu_expected``.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device={requested!r} is unknown; valid: auto, cpu, cuda")
    import torch  # torch where a rank is made (the module stays torch-free: see above)

    if requested == "auto" and gpu_expected and not torch.cuda.is_available():
        build = torch_build()
        fix = ("install the torch build for this site's GPUs (docs/sites.md)"
               if build == CPU_BUILD else
               _driver_too_old(torch.version.cuda) or "check that the node's driver shows "
               "its GPUs (nvidia-smi, rocm-smi) and that CUDA_VISIBLE_DEVICES or "
               "ROCR_VISIBLE_DEVICES does not hide them")
        raise ValueError(f"device=auto: torch {torch.__version__} ({build}) sees no GPU on "
                         f"{host_name()}, but {gpu_expected}: {fix}; or set device=cpu to "
                         "train on CPU ranks")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("device=cuda but torch sees no GPU; use device=cpu or device=auto")
    # A rank bound to its own GPU (srun --gpu-bind, --gpus-per-task=1) sees one device: index 0.
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def _driver_too_old(torch_cuda: str | None) -> str | None:
    """Where this node's NVIDIA driver runs CUDA only below ``torch_cuda`` (torch's
    ``version.cuda``, ``13.0``), the fix in words (the driver's version, the newest CUDA it
    runs, the wheel to take); None where it runs it, or where NVML cannot say (no NVIDIA
    driver, no nvidia-ml-py). NVML's ``nvmlSystemGetCudaDriverVersion``: the newest CUDA the
    driver supports, ``12080`` for 12.8."""
    if not torch_cuda:
        return None
    try:
        import pynvml  # nvidia-ml-py: asked only where a run finds no GPU (absent on ROCm)

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            newest = pynvml.nvmlSystemGetCudaDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - pynvml.NVMLError (no driver), ImportError: unknown
        return None
    driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    runs = (newest // 1000, newest % 1000 // 10)
    wanted = tuple(int(x) for x in torch_cuda.split(".")[:2])
    if runs >= wanted:
        return None
    return (f"this node's NVIDIA driver {driver} runs CUDA up to {runs[0]}.{runs[1]}, older "
            f"than the CUDA {torch_cuda} torch is built for: install torch's wheel for CUDA "
            f"{runs[0]}.{runs[1]} or older (README, \"Installing\"), or ask for a newer driver")


def torch_build() -> str:
    """What this torch was built for, in words: ``a CPU build``, ``built for CUDA 12.8`` or
    ``built for ROCm (HIP 7.1...)``."""
    import torch  # where a rank is made, as in pick_device (the module stays torch-free)

    if getattr(torch.version, "hip", None):
        return f"built for ROCm (HIP {torch.version.hip})"
    if torch.version.cuda:
        return f"built for CUDA {torch.version.cuda}"
    return CPU_BUILD


#: :func:`torch_build`'s words for a torch without GPU support.
CPU_BUILD = "a CPU build"


def backend_for(device: torch.device) -> str:
    """gloo on CPU, nccl on GPUs (torch maps nccl to RCCL on ROCm builds)."""
    return "nccl" if device.type == "cuda" else "gloo"


@contextlib.contextmanager
def process_group(env: DistEnv, device: torch.device, timeout_s: float) -> Iterator[None]:
    """Initialize the default process group for ``env`` and destroy it on exit.

    A single process gets a world-size-1 group on an in-memory store, so DDP and FSDP wrap
    the same way at every size. A group aborted inside (a recorded failure:
    :func:`vitfsdp.failures.abort_process_group`) is left as it is on exit.

    Args:
        timeout_s: collective timeout in seconds; a collective waiting longer raises.
    """
    import torch.distributed as dist  # torch where a rank is made (see the module's imports)

    single = {} if env.is_distributed else {"store": dist.HashStore(), "rank": 0, "world_size": 1}
    dist.init_process_group(
        backend=backend_for(device),
        timeout=datetime.timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
        **single,
    )
    try:
        yield
    finally:
        if dist.is_initialized():  # not when a failure aborted it: that would raise
            dist.destroy_process_group()


def host_name() -> str:
    """This process's node name: ``SLURMD_NODENAME`` under Slurm (several virtual nodes may
    share one host), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def rank_hostnames(env: DistEnv) -> list[str]:
    """Node name of every rank, indexed by global rank (one all-gather; ``[host]`` if single)."""
    host = host_name()
    if not env.is_distributed:
        return [host]
    import torch.distributed as dist  # torch where a rank is made (see the module's imports)

    hosts: list[str | None] = [None] * env.world_size
    dist.all_gather_object(hosts, host)
    return [str(h) for h in hosts]

