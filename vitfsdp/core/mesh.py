"""The mesh axes of every strategy, named once for both frameworks.

A strategy's devices form a 2-D mesh ``(replicate, shard)``: ``shard`` spans one shard group
(the ranks that split parameters, gradients and optimizer state between them), ``replicate``
the groups that hold the same shards (pure data parallelism between them). DDP is
``world × 1``, FULL_SHARD ``1 × world``, HYBRID_<k>GPU ``world/k × k``. The torch path
(:mod:`vitfsdp.parallel`, a ``DeviceMesh``) and the JAX path (:mod:`vitfsdp.jax.sharding`, a
``jax.sharding.Mesh``) use these names, torchtitan's, so run records and docs speak of one
mesh. Standard library only.
"""

from __future__ import annotations

#: Mesh axis of the replicas: the same shards, each on its part of the batch.
REPLICATE_AXIS = "replicate"
#: Mesh axis of a shard group: parameters, gradients and optimizer state split over it.
SHARD_AXIS = "shard"
#: Both, in mesh order (replicas × shard group).
MESH_AXES = (REPLICATE_AXIS, SHARD_AXIS)
