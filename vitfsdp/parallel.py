"""Data parallelism: DDP and FSDP1 wrapping, hybrid shard groups, mixed precision.

Parallel code knows nothing of ViTs beyond "the blocks are the FSDP units": the caller passes
the block classes (``vitfsdp.models.block_classes()``) for transformer-block auto-wrap.

Strategy names (``strategy=<name>``) follow the published study: ``DDP``, FSDP's
``NO_SHARD``, ``FULL_SHARD``, ``SHARD_GRAD_OP``, and ``HYBRID_<k>GPU`` = FSDP
``HYBRID_SHARD`` with shard groups of ``k`` consecutive ranks (inside a node), replicated
across the rest (world size / k replicas).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger(__name__)

SHARDING_STRATEGIES = ("DDP", "NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD")
BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NONE")
ENGINES = ("fsdp1",)
PRECISIONS = ("fp32", "bf16")

#: Mesh axis names of hybrid sharding: replicas × shard group (torchtitan's naming).
REPLICATE_AXIS, SHARD_AXIS = "replicate", "shard"


@dataclass
class StrategyConfig:
    """How the model is data-parallel (``strategy=<name>``)."""

    name: str = "FULL_SHARD"  # the preset's name, as plots label it
    sharding_strategy: str = "FULL_SHARD"  # DDP or a torch ShardingStrategy name
    shard_group_size: int = 0  # ranks per shard group for HYBRID_SHARD; 0 = not hybrid
    backward_prefetch: str = "BACKWARD_PRE"  # BACKWARD_PRE | BACKWARD_POST | NONE (FSDP only)
    limit_all_gathers: bool = True  # FSDP rate limiter of in-flight all-gathers
    forward_prefetch: bool = False  # FSDP explicit forward prefetch

    def __post_init__(self) -> None:
        if self.sharding_strategy not in SHARDING_STRATEGIES:
            raise ValueError(
                f"strategy.sharding_strategy={self.sharding_strategy!r} is unknown; valid: "
                f"{', '.join(SHARDING_STRATEGIES)}"
            )
        if self.backward_prefetch not in BACKWARD_PREFETCH:
            raise ValueError(
                f"strategy.backward_prefetch={self.backward_prefetch!r} is unknown; valid: "
                f"{', '.join(BACKWARD_PREFETCH)}"
            )
        hybrid = self.sharding_strategy == "HYBRID_SHARD"
        if hybrid and self.shard_group_size < 1:
            raise ValueError(
                f"strategy.shard_group_size={self.shard_group_size} must be >= 1 for "
                "HYBRID_SHARD (ranks per shard group)"
            )
        if not hybrid and self.shard_group_size:
            raise ValueError(
                f"strategy.shard_group_size={self.shard_group_size} applies only to "
                f"HYBRID_SHARD, not {self.sharding_strategy}; set it to 0"
            )

    @property
    def is_fsdp(self) -> bool:
        return self.sharding_strategy != "DDP"

    def check_world(self, world_size: int, ranks_per_node: int) -> None:
        """Refuse a hybrid shard group that does not tile the nodes.

        Raises:
            ValueError: ``shard_group_size`` does not divide the ranks per node (a shard group
                must not straddle nodes) or the world size.
        """
        k = self.shard_group_size
        if not k:
            return
        if ranks_per_node % k or world_size % k:
            raise ValueError(
                f"strategy={self.name} needs shard groups of {k} ranks, but a node has "
                f"{ranks_per_node} ranks (world {world_size}); choose a strategy whose shard "
                f"group divides cluster.gpus_per_node={ranks_per_node}"
            )

    def effective_sharding_strategy(self) -> str:
        """The ShardingStrategy handed to FSDP1 (``DDP`` for DDP).

        HYBRID_SHARD with shard groups of 1 becomes NO_SHARD over the whole world: the same
        math (a full replica per rank, gradients averaged over all ranks). FSDP1 given a
        shard group of size 1 clamps itself to NO_SHARD *on that group*
        (torch/distributed/fsdp/_init_utils.py, ``_init_core_state``) and then never
        reduces gradients across replicas, silently training each rank on its own data.
        """
        if self.sharding_strategy == "HYBRID_SHARD" and self.shard_group_size == 1:
            return "NO_SHARD"
        return self.sharding_strategy

    def replicas(self, world_size: int) -> int:
        """Number of model replicas: world / shard group (hybrid), 1 (full sharding), or world."""
        if self.sharding_strategy == "HYBRID_SHARD":
            return world_size // self.shard_group_size
        if self.sharding_strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
            return 1
        return world_size


def mixed_precision(precision: str) -> MixedPrecision | None:
    """FSDP mixed-precision policy: bf16 parameters, gradient reduction and buffers, or None.

    Raises:
        ValueError: ``precision`` is not one of :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not supported; valid: {PRECISIONS}")
    if precision == "fp32":
        return None
    return MixedPrecision(
        param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16
    )


def hybrid_mesh(device_type: str, world_size: int, shard_group_size: int) -> DeviceMesh:
    """2-D mesh (replicas × shard group) for HYBRID_SHARD; ranks in a shard group are
    consecutive, so with ranks numbered node by node a shard group stays inside a node."""
    shape = (world_size // shard_group_size, shard_group_size)
    return init_device_mesh(device_type, shape, mesh_dim_names=(REPLICATE_AXIS, SHARD_AXIS))


def wrap(
    model: torch.nn.Module,
    cfg: StrategyConfig,
    *,
    device: torch.device,
    world_size: int,
    block_classes: set[type[torch.nn.Module]],
    precision: str = "fp32",
) -> torch.nn.Module:
    """Wrap ``model`` (already on ``device``) for data-parallel training per ``cfg``.

    FSDP wraps every module of ``block_classes`` as its own unit, then the root. DDP keeps a
    full replica per rank; under bf16 the caller runs the forward in autocast.

    Raises:
        ValueError: bad strategy or precision values.
    """
    if not cfg.is_fsdp:
        ids = [device.index] if device.type == "cuda" else None
        return DDP(model, device_ids=ids)
    kwargs = {}
    strategy = cfg.effective_sharding_strategy()
    if strategy == "HYBRID_SHARD":
        kwargs["device_mesh"] = hybrid_mesh(device.type, world_size, cfg.shard_group_size)
    prefetch = None if cfg.backward_prefetch == "NONE" else BackwardPrefetch[cfg.backward_prefetch]
    return FSDP(
        model,
        sharding_strategy=ShardingStrategy[strategy],
        auto_wrap_policy=ModuleWrapPolicy(block_classes),
        mixed_precision=mixed_precision(precision),
        backward_prefetch=prefetch,
        forward_prefetch=cfg.forward_prefetch,
        limit_all_gathers=cfg.limit_all_gathers,
        use_orig_params=True,
        device_id=device,
        **kwargs,
    )
