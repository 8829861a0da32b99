"""``jax.distributed`` from the same discovery as the torch path (:mod:`vitfsdp.distributed`).

Whatever started the processes (torchrun locally or across nodes, srun under Slurm) left
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` behind
(:func:`vitfsdp.distributed.discover` exports them from Slurm's variables). Rank 0 hosts
JAX's coordination service at ``MASTER_ADDR:`` :func:`coordinator_port`; every process then
holds one device (one GPU, as a torch rank does, or one CPU device whose collectives go over
gloo between processes).

The coordinator port is not ``MASTER_PORT``: under torchrun that port is taken by torchrun's
own TCP store. It is :data:`COORDINATOR_PORT_BASE` + ``MASTER_PORT`` mod
:data:`COORDINATOR_PORT_SPAN`, i.e. in 10000–19999, a range that neither the Slurm job
scripts' ``MASTER_PORT`` (20000 + job id mod 12000, :mod:`vitfsdp.launch.slurm`) nor
torchrun's ephemeral ports (Linux: 32768–60999) use, so it collides neither with this job's
store nor with another job's. ``JAX_COORDINATOR_PORT`` set in the environment wins.
"""

from __future__ import annotations

import datetime
import glob
import logging
import os
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

from vitfsdp.distributed import DistEnv, host_name

log = logging.getLogger(__name__)

COORDINATOR_PORT_BASE, COORDINATOR_PORT_SPAN = 10000, 10000
DEVICES = ("auto", "cpu", "cuda")
HOST_NAME_BYTES = 256  # node names are gathered as fixed-size byte rows


def coordinator_port(environ: dict[str, str] | None = None) -> int:
    """The port of JAX's coordination service: ``JAX_COORDINATOR_PORT`` if set, else derived
    from ``MASTER_PORT`` (see the module docstring).

    Raises:
        ValueError: neither variable is set (no launcher started this process).
    """
    env = os.environ if environ is None else environ
    if env.get("JAX_COORDINATOR_PORT"):
        return int(env["JAX_COORDINATOR_PORT"])
    if not env.get("MASTER_PORT"):
        raise ValueError("MASTER_PORT is not set; start the ranks with torchrun or srun "
                         "(or set JAX_COORDINATOR_PORT)")
    return COORDINATOR_PORT_BASE + int(env["MASTER_PORT"]) % COORDINATOR_PORT_SPAN


def initialize(env: DistEnv, device: str, timeout_s: float,
               gpu_expected: str | None = None) -> None:  # fmt: skip
    """Pick JAX's platform for ``device`` (auto | cpu | cuda) and start ``jax.distributed``
    for ``env`` (nothing more for a single process), one device per process: the GPU
    ``LOCAL_RANK`` mod the visible GPUs, or one CPU device with gloo collectives.

    Must run before any JAX computation. ``timeout_s`` bounds the wait for every process to
    join the coordinator. Under ``auto`` with ``gpu_expected`` (why a GPU must be there:
    :meth:`vitfsdp.config.RunConfig.gpu_expected`) JAX must find one, as the torch ranks
    must (:func:`vitfsdp.distributed.pick_device`).

    Raises:
        ValueError: an unknown ``device``; ``auto`` found no GPU where ``gpu_expected``.
    """
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is unknown; valid: {', '.join(DEVICES)}")
    if device == "cpu":  # cuda: JAX's GPU backend is "cuda" or "rocm"; checked below
        jax.config.update("jax_platforms", device)
    if not env.is_distributed:
        _check_gpu(device, gpu_expected)
        return
    if device == "cpu":
        jax.config.update("jax_num_cpu_devices", 1)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    address = f"{os.environ['MASTER_ADDR']}:{coordinator_port()}"
    local_ids = None if device == "cpu" else _local_gpu(env.local_rank)
    log.info("jax.distributed: coordinator %s, process %d of %d", address, env.rank,
             env.world_size)
    jax.distributed.initialize(coordinator_address=address, num_processes=env.world_size,
                               process_id=env.rank, local_device_ids=local_ids,
                               initialization_timeout=int(timeout_s))
    _check_gpu(device, gpu_expected)


def _check_gpu(device: str, gpu_expected: str | None) -> None:
    """Under ``device=cuda``, or ``device=auto`` with ``gpu_expected``: raise where JAX's
    devices here are CPUs only (after ``jax.distributed.initialize``, which must come before
    the backends start). ``cuda`` means any GPU backend of JAX (``cuda`` or ``rocm``), as
    torch's ``cuda`` device means ROCm too.

    Raises:
        ValueError: no GPU, naming JAX's version and the host.
    """
    if device == "cpu" or (device == "auto" and not gpu_expected):
        return
    if not {d.platform for d in jax.local_devices()} - {"cpu"}:
        why = gpu_expected if device == "auto" else "device=cuda asks for one"
        raise ValueError(f"device={device}: JAX {jax.__version__} sees no GPU on {host_name()}, "
                         f"but {why}: install JAX with the GPU plugin for this site "
                         "(jax[cuda13] on NVIDIA; environment.yml for ROCm), or set "
                         "device=cpu")


def check_platform(device: str) -> str:
    """The platform JAX runs on (``cpu``, ``gpu``), after :func:`initialize`.

    Raises:
        ValueError: this JAX has no backend for ``device`` (install its GPU plugin).
    """
    try:
        return jax.default_backend()
    except RuntimeError as e:
        raise ValueError(f"device={device}: JAX has no such backend here ({e}); install "
                         "jax[cuda13] (NVIDIA; ROCm: environment.yml) or use device=cpu") from e


#: The variables that say which GPUs a process sees (Slurm sets them for its GPU
#: allocation and binding), in the order they are read.
VISIBLE_DEVICES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def _local_gpu(local_rank: int, environ: dict[str, str] | None = None) -> list[int] | None:
    """``[LOCAL_RANK mod visible GPUs]`` (a rank bound to its own GPU sees index 0); None
    where no GPU is visible (JAX then runs on the CPU). The count comes from the first of
    :data:`VISIBLE_DEVICES` that is set, else the node's GPUs as the drivers list them
    (:func:`_node_gpus`), not from torch: a torch that cannot use the GPUs (a CPU build, or
    a CUDA newer than the driver) would leave every rank of the node to take them all."""
    env = os.environ if environ is None else environ
    listed = next((env[v] for v in VISIBLE_DEVICES if env.get(v) is not None), None)
    count = len([d for d in listed.split(",") if d.strip()]) if listed is not None \
        else _node_gpus()
    return [local_rank % count] if count else None


def _node_gpus(root: str = "/") -> int:
    """The node's GPUs as their drivers list them: NVIDIA's device files (``/dev/nvidia<N>``),
    else AMD's KFD topology nodes that are GPUs (``gpu_id`` not 0; a CPU node's is 0)."""
    nvidia = [p for p in glob.glob(os.path.join(root, "dev", "nvidia*"))
              if os.path.basename(p)[len("nvidia"):].isdigit()]
    if nvidia:
        return len(nvidia)
    amd = 0
    for gpu_id in glob.glob(os.path.join(root, "sys/class/kfd/kfd/topology/nodes/*/gpu_id")):
        try:
            amd += Path(gpu_id).read_text().strip() not in ("", "0")
        except OSError:
            continue
    return amd


def shutdown(env: DistEnv) -> None:
    """Leave ``jax.distributed`` (a no-op for a single process)."""
    if env.is_distributed:
        jax.distributed.shutdown()


_STORES: dict[tuple[str, str], object] = {}


def failure_store(env: DistEnv, timeout_s: float):
    """The key-value store the ranks of ``env`` share for :class:`vitfsdp.failures.FailureBoard`,
    a ``torch.distributed.Store`` as the board reads and writes, found as torch's ``env://``
    rendezvous finds it for a torch run: torchrun's agent's store
    (``TORCHELASTIC_USE_AGENT_STORE``; it outlives the ranks), else one rank 0 hosts at
    ``MASTER_ADDR:MASTER_PORT`` (a bare srun, as a torch run's; JAX's coordinator is at
    :func:`coordinator_port`, not there). One per process, made on first use; None for a
    single process.

    Raises:
        RuntimeError (torch's ``DistStoreError``): rank 0's store was not reached within
            ``timeout_s``.
    """
    if not env.is_distributed:
        return None
    key = (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    if key not in _STORES:
        import torch.distributed as dist  # torch as the JAX trainer has it (its data loader)

        _STORES[key], _, _ = next(dist.rendezvous(
            "env://", rank=env.rank, world_size=env.world_size,
            timeout=datetime.timedelta(seconds=timeout_s)))
    return _STORES[key]


def gather_floats(values: list[float]) -> np.ndarray:
    """Every process's ``values``: an array (num processes, len(values)) float64, rows in
    process order (one all-gather; the values themselves for a single process)."""
    row = np.asarray(values, dtype=np.float64)
    if jax.process_count() == 1:
        return row[None]
    return np.asarray(multihost_utils.process_allgather(row)).reshape(jax.process_count(), -1)


def rank_hostnames() -> list[str]:
    """Node name of every process, in process order (``SLURMD_NODENAME`` or the host name)."""
    name = host_name().encode()[:HOST_NAME_BYTES]
    row = np.zeros(HOST_NAME_BYTES, dtype=np.uint8)
    row[:len(name)] = np.frombuffer(name, dtype=np.uint8)
    if jax.process_count() == 1:
        return [host_name()]
    rows = np.asarray(multihost_utils.process_allgather(row)).reshape(jax.process_count(), -1)
    return [bytes(r).rstrip(b"\0").decode(errors="replace") for r in rows]
