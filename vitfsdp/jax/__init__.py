"""The JAX/Flax variant of the study (``framework=jax``): the same ViTs, strategies and records.

- :mod:`vitfsdp.jax.config`: what ``framework=jax`` accepts (imports no JAX; run at config
  validation, so a sweep refuses a point before anything starts).
- :mod:`vitfsdp.jax.model`: the Flax ViT of every row of :data:`vitfsdp.models.VARIANTS`,
  with the parameter count of the timm build.
- :mod:`vitfsdp.jax.sharding`: meshes and NamedShardings for DDP, FULL_SHARD, HYBRID_*.
- :mod:`vitfsdp.jax.distributed`: ``jax.distributed`` from the same discovery as torch.
- :mod:`vitfsdp.jax.train`: the jitted AdamW step and the loop writing run records.

Importing this package imports no JAX; the submodules above (but ``config``) do.
"""

from vitfsdp.jax.config import check_run_config

__all__ = ["check_run_config"]
