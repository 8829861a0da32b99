"""Meshes and shardings of the JAX strategies (jax.sharding: Mesh, NamedSharding).

Every strategy is one 2-D mesh ``(data, fsdp)`` over the world's devices in rank order
(process index, then local device id), so shard groups are consecutive ranks, part of a node
or whole nodes (``strategy.shard_group_size`` = 16 on 8-GPU nodes spans two), as in
:mod:`vitfsdp.parallel`:

=============  =====================  ==============================================
strategy       mesh (data × fsdp)     parameters and AdamW moments
=============  =====================  ==============================================
DDP            world × 1              replicated
FULL_SHARD     1 × world              sharded over ``fsdp`` (every device)
HYBRID_<k>GPU  world/k × k            sharded over ``fsdp`` (k ranks), replicated over
                                      ``data`` (world/k replicas)
=============  =====================  ==============================================

The batch is always split over both axes (every device gets its local batch), and so is
every activation between layers (:func:`activation_constraint`); XLA's SPMD partitioner
inserts the collectives: the gradient all-reduce (DDP), the all-gather of a
parameter before its use and the reduce-scatter of its gradient (FULL_SHARD), both inside a
shard group plus an all-reduce across replicas (hybrid).

A parameter is sharded along its largest dimension that the ``fsdp`` axis divides (the
``fsdp`` rule of big_vision's ``big_vision/sharding.py``); one with no such dimension (a
10-class head's bias over 4 devices) stays replicated. The rule is a function of the shape
alone, so AdamW's moments, which have their parameter's shape, are laid out like it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vitfsdp.parallel import StrategyConfig

#: Mesh axes: replicas (pure data parallelism) × shard group (sharded data parallelism).
DATA_AXIS, FSDP_AXIS = "data", "fsdp"
#: The batch dimension is split over both axes.
BATCH_SPEC = PartitionSpec((DATA_AXIS, FSDP_AXIS))


def make_mesh(strategy: StrategyConfig, devices: list | None = None) -> Mesh:
    """The ``(data, fsdp)`` mesh of ``strategy`` over ``devices`` (default: every device of
    the job, ``jax.devices()``), sorted by (process index, device id).

    Raises:
        ValueError: the strategy has no JAX layout, or a hybrid shard group does not divide
            the number of devices.
    """
    devices = sorted(devices or jax.devices(), key=lambda d: (d.process_index, d.id))
    world = len(devices)
    kind = strategy.sharding_strategy
    if kind == "DDP":
        shard = 1
    elif kind == "FULL_SHARD":
        shard = world
    elif kind == "HYBRID_SHARD":
        shard = strategy.shard_group_size
    else:
        raise ValueError(f"strategy.sharding_strategy={kind} has no JAX layout; valid: DDP, "
                         "FULL_SHARD, HYBRID_SHARD (see vitfsdp.jax.config)")
    if world % shard:
        raise ValueError(f"strategy={strategy.name} needs shard groups of {shard} devices, "
                         f"which do not divide the {world} devices")
    return Mesh(np.array(devices).reshape(world // shard, shard), (DATA_AXIS, FSDP_AXIS))


def param_spec(shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
    """Where one parameter (or AdamW moment) of ``shape`` lives: its largest dimension that
    the ``fsdp`` axis size divides is split over ``fsdp`` (the first of equal ones); none,
    or an ``fsdp`` axis of size 1: replicated (``PartitionSpec()``)."""
    k = mesh.shape[FSDP_AXIS]
    if k == 1:
        return PartitionSpec()
    candidates = [i for i, n in enumerate(shape) if n % k == 0 and n >= k]
    if not candidates:
        return PartitionSpec()
    dim = max(candidates, key=lambda i: (shape[i], -i))
    return PartitionSpec(*([None] * dim), FSDP_AXIS)


def tree_shardings(tree: Any, mesh: Mesh) -> Any:
    """A NamedSharding per leaf of ``tree`` (arrays or ``ShapeDtypeStruct``; parameters,
    optimizer state, a whole train state) by :func:`param_spec` of its shape."""
    return jax.tree.map(lambda x: NamedSharding(mesh, param_spec(x.shape, mesh)), tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Images (B, 3, H, W) and labels (B,): dimension 0 split over every device."""
    return NamedSharding(mesh, BATCH_SPEC)


def activation_constraint(mesh: Mesh):
    """The function the model applies to its activations (B, ...) between layers
    (:data:`vitfsdp.jax.model.Constrain`): batch split over every device, the other
    dimensions whole. Without it XLA may split activations along features like the sharded
    weights and reshuffle them with all-to-alls; with it, a sharded weight is all-gathered
    before its matmul, which is what FSDP does."""
    return functools.partial(jax.lax.with_sharding_constraint,
                             shardings=NamedSharding(mesh, BATCH_SPEC))


def replicated(mesh: Mesh) -> NamedSharding:
    """A value every device holds whole (the loss)."""
    return NamedSharding(mesh, PartitionSpec())


def bytes_per_device(tree: Any, mesh: Mesh) -> int:
    """Bytes of ``tree`` (arrays or ``ShapeDtypeStruct``) one device holds under
    :func:`tree_shardings`: each leaf's size divided by its shard count."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        spec = param_spec(leaf.shape, mesh)
        shards = mesh.shape[FSDP_AXIS] if FSDP_AXIS in spec else 1
        total += math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize // shards
    return total
