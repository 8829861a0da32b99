"""Memory prediction: the bytes of model state each rank holds, without building the model.

The persistent state of AdamW training with FSDP is, per rank (ZeRO, Rajbhandari et al.
2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", sec. 3 and 5;
FSDP, Zhao et al. 2023, "PyTorch FSDP", sec. 3):

- parameters: fp32, 4 bytes each, divided by the shard group (the whole world for
  FULL_SHARD and SHARD_GRAD_OP, ``k`` for HYBRID_<k>GPU, 1 for NO_SHARD and DDP);
- gradients: fp32, 4 bytes each, sharded like the parameters (reduce-scatter output);
- optimizer: AdamW's two fp32 moments, 8 bytes a parameter, sharded like the parameters.

On top, FSDP all-gathers one unit (a transformer block) at a time in the parameter dtype
(2 bytes under bf16 or fp16), two with backward prefetch. Activations are not counted
here: they depend on batch size, checkpointing and kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitfsdp.models import ModelConfig, block_classes, build_model, count_params
from vitfsdp.parallel import StrategyConfig

GIB = 1024**3
FP32_BYTES = 4
ADAMW_STATES = 2  # exp_avg and exp_avg_sq


@dataclass(frozen=True)
class StateBytes:
    """Model-state bytes held by one rank."""

    num_params: int  # parameters of the whole model
    shard_group_size: int  # ranks the parameters are split over
    param_bytes: int  # this rank's fp32 parameter shard
    grad_bytes: int  # this rank's fp32 gradient shard
    optimizer_bytes: int  # this rank's AdamW moments
    unit_bytes: int  # the largest FSDP unit, all-gathered, in the parameter dtype (0 for DDP)

    @property
    def total_bytes(self) -> int:
        """Persistent state plus one gathered unit."""
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.unit_bytes


def state_bytes(model: ModelConfig, num_classes: int, strategy: StrategyConfig,
                world_size: int, precision: str = "fp32") -> StateBytes:
    """Per-rank model-state bytes of ``model`` under ``strategy`` on ``world_size`` ranks.

    The model is built on the meta device: no memory is allocated, whatever its size.
    ``precision`` is the dtype parameters are gathered in (fp32 | bf16 | fp16; a run's
    ``precision_settings().param_dtype``).
    """
    meta = build_model(model, num_classes, device="meta")
    num_params = count_params(meta)
    group = strategy.shard_group(world_size)
    shard = -(-num_params // group)  # FSDP pads the flat parameter to a multiple of the group
    largest_unit = max(count_params(m) for m in meta.modules() if type(m) in block_classes())
    unit = largest_unit * (FP32_BYTES if precision == "fp32" else 2) if strategy.is_fsdp else 0
    return StateBytes(
        num_params=num_params,
        shard_group_size=group,
        param_bytes=shard * FP32_BYTES,
        grad_bytes=shard * FP32_BYTES,
        optimizer_bytes=shard * FP32_BYTES * ADAMW_STATES,
        unit_bytes=unit if group > 1 else 0,
    )


def format_state_bytes(b: StateBytes, label: str) -> str:
    """A few lines for the terminal, in GiB."""
    rows = [("parameters", b.param_bytes), ("gradients", b.grad_bytes),
            ("optimizer (AdamW)", b.optimizer_bytes), ("gathered unit", b.unit_bytes),
            ("total", b.total_bytes)]
    lines = [f"{label}: {b.num_params / 1e6:,.1f}M parameters, sharded over "
             f"{b.shard_group_size} rank(s); model state per rank (GiB):"]
    lines += [f"  {name:<18} {value / GIB:10.3f}" for name, value in rows]
    return "\n".join(lines)
