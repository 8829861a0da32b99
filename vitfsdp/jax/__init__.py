"""The JAX/Flax variant of the study (``framework=jax``): the same ViTs, strategies and records.

- :mod:`vitfsdp.jax.model`: the Flax ViT of every row of :data:`vitfsdp.models.VARIANTS`,
  with the parameter count of the timm build.
- :mod:`vitfsdp.jax.sharding`: meshes and NamedShardings for DDP, FULL_SHARD, HYBRID_*.
- :mod:`vitfsdp.jax.distributed`: ``jax.distributed`` from the same discovery as torch.
- :mod:`vitfsdp.jax.train`: the jitted AdamW step and the loop writing run records.

What ``framework=jax`` accepts of the run config is :mod:`vitfsdp.config_jax`, in the config
layer (it imports no JAX; the config validation runs it before anything starts). Importing
this package imports no JAX; the submodules above do. It caps
XLA's CPU threads (:func:`cap_cpu_threads`), which must happen before JAX is imported.
"""

import os

__all__ = ["cap_cpu_threads", "cpu_thread_flags"]


def cpu_thread_flags(environ: dict[str, str]) -> str:
    """``XLA_FLAGS`` with XLA's CPU client on one thread per process
    (``--xla_cpu_multi_thread_eigen=false``) where ``OMP_NUM_THREADS=1``, as a torch rank is:
    torchrun sets ``OMP_NUM_THREADS=1`` when it starts several ranks per node. Without it
    each process's XLA CPU client runs a thread pool as large as the host, and ranks that
    share the cores oversubscribe them (docs/jax.md: 3x slower steps and compiles on 2 shared
    cores). A value already in ``XLA_FLAGS`` wins; only XLA's CPU client reads the flag, so
    GPU steps are unchanged.
    """
    flags = environ.get("XLA_FLAGS", "").split()
    name = "--xla_cpu_multi_thread_eigen"
    if environ.get("OMP_NUM_THREADS", "").strip() == "1" and not any(
            f.split("=")[0] == name for f in flags):
        flags.append(f"{name}=false")
    return " ".join(flags)


def cap_cpu_threads() -> None:
    """Set ``XLA_FLAGS`` per :func:`cpu_thread_flags` (XLA reads it once, when JAX starts)."""
    flags = cpu_thread_flags(dict(os.environ))
    if flags:
        os.environ["XLA_FLAGS"] = flags


cap_cpu_threads()
