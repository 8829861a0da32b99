"""Data parallelism: DDP and FSDP1 wrapping, hybrid shard groups, mixed precision.

Parallel code knows nothing of ViTs beyond "the blocks are the FSDP units": the caller passes
the block classes (``vitfsdp.models.block_classes()``) for transformer-block auto-wrap.

Strategy names (``strategy=<name>``) follow the published study: ``DDP``, FSDP's
``NO_SHARD``, ``FULL_SHARD``, ``SHARD_GRAD_OP``, and ``HYBRID_<k>GPU`` = FSDP
``HYBRID_SHARD`` with shard groups of ``k`` consecutive ranks (inside a node), replicated
across the rest (world size / k replicas).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    BackwardPrefetch,
    MixedPrecision,
    MixedPrecisionPolicy,
    ShardingStrategy,
    fully_shard,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger(__name__)

SHARDING_STRATEGIES = ("DDP", "NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD")
BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NONE")
ENGINES = ("fsdp1", "fsdp2")
#: FSDP1 defaults of the settings that only FSDP1 has.
FSDP1_DEFAULTS = {"backward_prefetch": "BACKWARD_PRE", "limit_all_gathers": True}
PRECISIONS = ("fp32", "bf16")

#: Mesh axis names of hybrid sharding: replicas × shard group (torchtitan's naming).
REPLICATE_AXIS, SHARD_AXIS = "replicate", "shard"


@dataclass
class StrategyConfig:
    """How the model is data-parallel (``strategy=<name>``)."""

    name: str = "FULL_SHARD"  # the preset's name, as plots label it
    sharding_strategy: str = "FULL_SHARD"  # DDP or a torch ShardingStrategy name
    shard_group_size: int = 0  # ranks per shard group for HYBRID_SHARD; 0 = not hybrid
    # BACKWARD_PRE | BACKWARD_POST | NONE; FSDP1 only. None = BACKWARD_PRE under FSDP1 and
    # "not applicable" (recorded as null) under DDP and FSDP2.
    backward_prefetch: str | None = None
    limit_all_gathers: bool | None = None  # FSDP1 all-gather rate limiter; None as above (true)
    forward_prefetch: bool = False  # FSDP1 explicit forward prefetch

    def __post_init__(self) -> None:
        if self.sharding_strategy not in SHARDING_STRATEGIES:
            raise ValueError(
                f"strategy.sharding_strategy={self.sharding_strategy!r} is unknown; valid: "
                f"{', '.join(SHARDING_STRATEGIES)}"
            )
        if self.backward_prefetch is not None and self.backward_prefetch not in BACKWARD_PREFETCH:
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
        """True for every FSDP strategy, False for DDP."""
        return self.sharding_strategy != "DDP"

    def resolve_for_engine(self, engine: str) -> None:
        """Fill FSDP1-only settings with their defaults under FSDP1; elsewhere refuse them.

        Under DDP and FSDP2 ``backward_prefetch`` and ``limit_all_gathers`` do not exist
        (FSDP2 prefetches by its own schedule), so they stay ``None`` and are recorded as not
        applicable: a sweep never plots an axis that did nothing.

        Raises:
            ValueError: one of them is set for DDP or engine=fsdp2.
        """
        applies = self.is_fsdp and engine == "fsdp1"
        for key, default in FSDP1_DEFAULTS.items():
            if applies and getattr(self, key) is None:
                setattr(self, key, default)
            elif not applies and getattr(self, key) is not None:
                where = "DDP" if not self.is_fsdp else f"engine={engine}"
                raise ValueError(f"strategy.{key} applies only to FSDP1 (engine=fsdp1), not "
                                 f"{where}; leave it unset (null)")
        if self.forward_prefetch and not applies:
            raise ValueError("strategy.forward_prefetch applies only to FSDP1 (engine=fsdp1)")

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

    def shard_group(self, world_size: int) -> int:
        """Ranks one parameter is split over: the world (FULL_SHARD, SHARD_GRAD_OP), the
        hybrid shard group, or 1 (NO_SHARD, DDP: replicated)."""
        effective = self.effective_sharding_strategy()
        if effective in ("FULL_SHARD", "SHARD_GRAD_OP"):
            return world_size
        return self.shard_group_size if effective == "HYBRID_SHARD" else 1

    def replicas(self, world_size: int) -> int:
        """Number of model replicas: world / shard group."""
        return world_size // self.shard_group(world_size)


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
    engine: str = "fsdp1",
) -> torch.nn.Module:
    """Wrap ``model`` (already on ``device``) for data-parallel training per ``cfg``.

    FSDP wraps every module of ``block_classes`` as its own unit, then the root. DDP keeps a
    full replica per rank; under bf16 the caller runs the forward in autocast.

    Raises:
        ValueError: bad strategy, precision or engine values.
    """
    if not cfg.is_fsdp:
        ids = [device.index] if device.type == "cuda" else None
        return DDP(model, device_ids=ids)
    if engine == "fsdp2":
        return _fully_shard(model, cfg, device, world_size, block_classes, precision)
    if engine != "fsdp1":
        raise ValueError(f"engine={engine!r} is unknown; valid: {', '.join(ENGINES)}")
    cfg = dataclasses.replace(cfg)
    cfg.resolve_for_engine(engine)  # FSDP1 defaults for settings left unset
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


def fsdp2_mesh(device_type: str, world_size: int, cfg: StrategyConfig) -> DeviceMesh:
    """The DeviceMesh ``fully_shard`` shards over.

    FULL_SHARD and SHARD_GRAD_OP: 1-D over all ranks. HYBRID_SHARD: 2-D replicas × shard
    group (HSDP). NO_SHARD (and hybrid groups of 1): 2-D (world, 1), a replica per rank with
    gradients all-reduced over all of them.
    """
    if cfg.sharding_strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=(SHARD_AXIS,))
    return hybrid_mesh(device_type, world_size, cfg.shard_group(world_size))


def _fully_shard(model, cfg, device, world_size, block_classes, precision):
    """FSDP2: ``fully_shard`` each block, then the root. FULL_SHARD and the hybrids reshard
    parameters after forward; SHARD_GRAD_OP keeps them gathered until backward (ZeRO-2)."""
    mesh = fsdp2_mesh(device.type, world_size, cfg)
    mp = mixed_precision(precision)
    policy = (MixedPrecisionPolicy(param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype)
              if mp else MixedPrecisionPolicy())
    reshard = cfg.sharding_strategy != "SHARD_GRAD_OP"
    for module in model.modules():
        if type(module) in block_classes:
            fully_shard(module, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
