"""run.json's "what ran", assembled in one place for both trainers.

Each trainer measures what is its own (the world its framework set up, the device, the
parameter count, the peak, the hosts, the versions) and hands it to :func:`run_info`, which
writes the fields every run.json holds under the same names and in the same order
(the schema: docs/architecture.md, "Records"); the framework-specific extras (the JAX mesh,
bytes per device) go in beside them.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vitfsdp.core.loop import WARMUP_RULE


@dataclass(frozen=True)
class World:
    """run.json's ``world``: who ran.

    Attributes:
        size: ranks (devices) of the job.
        nodes: nodes of the run (``nodes``).
        ranks_per_node: ``cluster.gpus_per_node``.
        replicas: data-parallel replicas (groups holding a whole model between them).
        sharding_strategy: how parameters are sharded (FSDP's names), ``None`` unwrapped.
        backend: the collectives' backend (``nccl``, ``gloo``), ``None`` for one process.
        launched_by: where rank and world came from (``torchrun``, ``slurm``, ``single``).
    """

    size: int
    nodes: int
    ranks_per_node: int
    replicas: int
    sharding_strategy: str | None
    backend: str | None
    launched_by: str


@dataclass(frozen=True)
class ModelSize:
    """run.json's ``model``: what was trained, and its FLOPs per image.

    Attributes:
        num_params: parameters of the whole model.
        forward_flops_per_image: forward FLOPs per image.
        train_flops_per_image: MODEL training FLOPs per image (3 × forward).
        hardware_flops_per_image: with the forward that activation checkpointing recomputes.
        img_size: image side, pixels.
        num_classes: classifier outputs.
    """

    num_params: int
    forward_flops_per_image: float
    train_flops_per_image: float
    hardware_flops_per_image: float
    img_size: int
    num_classes: int


def run_info(run_id: str, config: Mapping[str, Any], world: World, device: Mapping[str, Any],
             model: ModelSize, *, timer: str, warmup_steps: int, log_every: int,
             rank_hosts: Sequence[str], provenance: Mapping[str, Any],
             world_extra: Mapping[str, Any] | None = None,
             model_extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run.json record of one run (before ``status`` and ``applied``).

    Args:
        run_id: the run directory's name.
        config: the resolved config, secrets redacted (``vitfsdp.provenance.config_record``).
        device: ``type``, ``name``, ``memory_gib`` ... with the peak (``peak_flops``,
            ``peak_source``, ``peak_kind``).
        timer: how windows are timed (``cuda_event``, ``perf_counter``, ...).
        warmup_steps, log_every: ``train.warmup_steps`` and ``train.log_every``.
        rank_hosts: the host name of each global rank.
        provenance: versions, git, Slurm ids, environment (``vitfsdp.provenance.collect``).
        world_extra, model_extra: framework-specific keys added to ``world`` and ``model``.

    Returns:
        ``run_id``, ``config``, ``world``, ``device``, ``model``, ``timing`` (with
        :data:`vitfsdp.core.loop.WARMUP_RULE`), ``hosts`` (distinct, sorted),
        ``rank_hosts`` and the provenance keys.
    """
    return {
        "run_id": run_id,
        "config": config,
        "world": {**vars(world), **(world_extra or {})},
        "device": dict(device),
        "model": {**vars(model), **(model_extra or {})},
        "timing": {"timer": timer, "warmup_steps": warmup_steps, "log_every": log_every,
                   "warmup_rule": WARMUP_RULE},
        "hosts": sorted(set(rank_hosts)),
        "rank_hosts": list(rank_hosts),
        **provenance,
    }
