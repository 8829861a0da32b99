"""Meshes, shardings and the gradient collectives of the JAX strategies.

Every strategy is one 2-D mesh ``(replicate, shard)`` (:mod:`vitfsdp.core.mesh`, the torch
path's names) over the world's devices in rank order (process index, then local device id),
so shard groups are consecutive ranks, part of a node or whole nodes
(``strategy.shard_group_size`` = 16 on 8-GPU nodes spans two), as in :mod:`vitfsdp.parallel`:

=============  ========================  ============================================
strategy       mesh (replicate × shard)  parameters and AdamW moments
=============  ========================  ============================================
DDP            world × 1                 replicated
FULL_SHARD     1 × world                 sharded over ``shard`` (every device)
HYBRID_<k>GPU  world/k × k               sharded over ``shard`` (k ranks), replicated
                                         over ``replicate`` (world/k replicas)
=============  ========================  ============================================

The batch is always split over both axes (every device gets its local batch).

A parameter is sharded along its largest dimension that the ``shard`` axis divides (the
``fsdp`` rule of big_vision's ``big_vision/sharding.py``). One with no such dimension is
stored flat, padded with zeros to a multiple of the ``shard`` axis and split over it
(:func:`stored_shape`, :func:`to_stored`; the model sees its own shape again through
:func:`from_stored`), as torch's FSDP flattens and pads its units: without it ViT-15B's
width 5040 and MLP 13545 split over no power of two from 32 devices, and FULL_SHARD kept
every parameter whole on every device, DDP's memory under FSDP's name. The padding stays
zero under AdamW (its gradient is zero). The rule is a function of the shape alone, so
AdamW's moments, which have their parameter's shape, are laid out like it.

Under a compute dtype below fp32 (bf16), a sharded step moves what torch's FSDP moves
under ``MixedPrecision(param_dtype=bf16, reduce_dtype=bf16)``: every parameter is cast on
its shard, so the all-gathers carry compute-dtype weights, and the gradients are
reduce-scattered in the compute dtype, then kept in fp32 beside the fp32 parameters. DDP
(a ``shard`` axis of 1) all-reduces fp32 gradients, as torch's DDP under autocast does.

The step's collectives are written out (:func:`sharded_value_and_grad`, a ``shard_map``),
one per FSDP unit and kind, each on one flat buffer, as torch's FSDP and DDP issue them: an
all-gather of a unit's shards before the forward, a reduce-scatter of its gradients (and
an all-reduce across replicas, hybrid), and for what every device of a shard group holds
whole (all of DDP) an all-reduce of buckets of at least :data:`BUCKET_BYTES`. Left to XLA's
SPMD partitioner, a step had one collective per parameter; XLA's combiner merges them into
one tuple-shaped op, but its CPU runtime still runs one gloo call per tuple element (56 per
step for vit_tiny), which made CPU runs several times slower than torch's (docs/jax.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vitfsdp.core.mesh import MESH_AXES, REPLICATE_AXIS, SHARD_AXIS
from vitfsdp.parallel import StrategyConfig

#: The batch dimension is split over both axes.
BATCH_SPEC = PartitionSpec(MESH_AXES)
#: Smallest all-reduce bucket of whole (unsharded) gradients, bytes: torch DDP's default
#: ``bucket_cap_mb`` (25 MiB); a smaller model's gradients go in one bucket.
BUCKET_BYTES = 25 * 2**20
#: Top-level parameters outside the blocks (embeddings, final norm, head) form one unit.
ROOT_UNIT = "root"

#: ``(params, images (b,3,H,W), labels (b,)) → mean loss over the b images`` of one device.
LossFn = Callable[[Any, jax.Array, jax.Array], jax.Array]


def make_mesh(strategy: StrategyConfig, devices: list | None = None) -> Mesh:
    """The ``(replicate, shard)`` mesh of ``strategy`` over ``devices`` (default: every
    device of the job, ``jax.devices()``), sorted by (process index, device id).

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
                         "FULL_SHARD, HYBRID_SHARD (see vitfsdp.config_jax)")
    if world % shard:
        raise ValueError(f"strategy={strategy.name} needs shard groups of {shard} devices, "
                         f"which do not divide the {world} devices")
    return Mesh(np.array(devices).reshape(world // shard, shard), MESH_AXES)


def param_spec(shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
    """Where one parameter (or AdamW moment) of ``shape`` lives: its largest dimension that
    the ``shard`` axis size divides is split over ``shard`` (the first of equal ones); none,
    or a ``shard`` axis of size 1: replicated (``PartitionSpec()``)."""
    k = mesh.shape[SHARD_AXIS]
    if k == 1:
        return PartitionSpec()
    candidates = [i for i, n in enumerate(shape) if n % k == 0 and n >= k]
    if not candidates:
        return PartitionSpec()
    dim = max(candidates, key=lambda i: (shape[i], -i))
    return PartitionSpec(*([None] * dim), SHARD_AXIS)


def stored_shape(shape: tuple[int, ...], mesh: Mesh) -> tuple[int, ...]:
    """How a parameter of ``shape`` is stored on ``mesh``: as it is where :func:`param_spec`
    splits it or the ``shard`` axis has size 1; else flat, zero-padded to the next multiple
    of the ``shard`` axis size (a (5040,) norm scale over 32 devices: (5056,))."""
    k = mesh.shape[SHARD_AXIS]
    if k == 1 or not shape or param_spec(shape, mesh) != PartitionSpec():
        return tuple(shape)
    return (-(-math.prod(shape) // k) * k,)


def to_stored(params: Any, mesh: Mesh) -> Any:
    """``params`` (the model's shapes) as :func:`stored_shape` stores them on ``mesh``
    (traceable: call it under jit, where the init draws them)."""
    def store(x):
        shape = stored_shape(x.shape, mesh)
        return x if shape == x.shape else jnp.pad(x.reshape(-1), (0, shape[0] - x.size))
    return jax.tree.map(store, params)


def from_stored(params: Any, shapes: Any) -> Any:
    """Stored parameters (:func:`to_stored`) back in the model's ``shapes`` (a pytree of
    arrays or ``ShapeDtypeStruct`` of the same structure): a flat padded leaf loses its
    padding and takes its shape; the others pass as they are."""
    def load(x, like):
        return x if x.shape == like.shape else x[:math.prod(like.shape)].reshape(like.shape)
    return jax.tree.map(load, params, shapes)


def in_compute_dtype(params: Any, mesh: Mesh, compute_dtype: Any) -> bool:
    """Whether a step on ``mesh`` gathers weights and reduces gradients in ``compute_dtype``
    rather than in the parameters' fp32 (module docstring): on a ``shard`` axis above 1
    under a compute dtype narrower than a parameter's."""
    if compute_dtype is None or mesh.shape[SHARD_AXIS] == 1:
        return False
    narrow = np.dtype(compute_dtype).itemsize
    return any(np.dtype(x.dtype).itemsize > narrow for x in jax.tree.leaves(params))


def tree_shardings(tree: Any, mesh: Mesh) -> Any:
    """A NamedSharding per leaf of ``tree`` (arrays or ``ShapeDtypeStruct``; parameters,
    optimizer state, a whole train state) by :func:`param_spec` of its shape."""
    return jax.tree.map(lambda x: NamedSharding(mesh, param_spec(x.shape, mesh)), tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Images (B, 3, H, W) and labels (B,): dimension 0 split over every device."""
    return NamedSharding(mesh, BATCH_SPEC)


def activation_constraint(mesh: Mesh):
    """The function the model applies to its activations (B, ...) between layers
    (:data:`vitfsdp.jax.model.Constrain`) when XLA's SPMD partitioner, not
    :func:`sharded_value_and_grad`, places the collectives: batch split over every device,
    the other dimensions whole (else XLA may split activations along features like the
    sharded weights and reshuffle them with all-to-alls)."""
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
        shards = mesh.shape[SHARD_AXIS] if SHARD_AXIS in spec else 1
        total += math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize // shards
    return total


def sharded_value_and_grad(loss_fn: LossFn, mesh: Mesh,
                           compute_dtype: Any = None) -> Callable:
    """``loss_fn``'s value and gradient over the global batch, with the collectives of FSDP
    (or DDP) written out, each on one flat buffer (see the module docstring).

    The returned function takes the parameters laid out by :func:`tree_shardings` and the
    batch by :func:`batch_sharding` (global arrays; call it under ``jax.jit``) and returns
    (the mean loss over the global batch, replicated; the gradients of that mean, laid out
    like the parameters). Under a ``shard_map`` each device all-gathers its shards of each
    unit (a block, or the top-level parameters, :data:`ROOT_UNIT`), runs ``loss_fn`` on its
    local batch with whole parameters, reduce-scatters each unit's sharded gradients over
    ``shard`` (then all-reduces them over ``replicate``: hybrid), and all-reduces the
    gradients of unsharded parameters over both axes in buckets of :data:`BUCKET_BYTES`.
    With ``compute_dtype`` (bf16) on a ``shard`` axis above 1, the shards are cast before
    the all-gathers and the gradients reduced in it (:func:`in_compute_dtype`), returned in
    the parameters' dtype.
    """

    def value_and_grad(params: Any, images: jax.Array, labels: jax.Array):
        specs = jax.tree.map(lambda x: param_spec(x.shape, mesh), params)
        units = _units(params, mesh)
        cast = compute_dtype if in_compute_dtype(params, mesh, compute_dtype) else None
        local = functools.partial(_local_value_and_grad, loss_fn, units, mesh, cast)
        return jax.shard_map(local, mesh=mesh, in_specs=(specs, BATCH_SPEC, BATCH_SPEC),
                             out_specs=(PartitionSpec(), specs), check_vma=False)(
            params, images, labels)

    return value_and_grad


def collective_units(params: Any) -> dict[str, list[int]]:
    """The FSDP units of a parameter pytree: unit name → indices of its leaves (in
    ``jax.tree.leaves`` order). A top-level ``blocks_<i>`` is a unit; the other top-level
    parameters form :data:`ROOT_UNIT`, as torch's FSDP wraps the blocks and the root."""
    units: dict[str, list[int]] = {}
    for i, (path, _) in enumerate(jax.tree_util.tree_flatten_with_path(params)[0]):
        top = str(getattr(path[0], "key", path[0]))
        units.setdefault(top if top.startswith("blocks_") else ROOT_UNIT, []).append(i)
    return units


def _units(params: Any, mesh: Mesh) -> list[tuple[list[tuple[int, int]], list[int]]]:
    """Per unit (:func:`collective_units`): its sharded leaves as (leaf index, the dimension
    split over ``shard``) and the indices of its leaves that are whole on every device."""
    leaves = jax.tree.leaves(params)
    dims = [_shard_dim(param_spec(x.shape, mesh)) for x in leaves]
    return [([(i, dims[i]) for i in idx if dims[i] is not None],
             [i for i in idx if dims[i] is None])
            for idx in collective_units(params).values()]


def _shard_dim(spec: PartitionSpec) -> int | None:
    return spec.index(SHARD_AXIS) if SHARD_AXIS in spec else None


def _local_value_and_grad(loss_fn: LossFn, units: list, mesh: Mesh, cast: Any, params: Any,
                          images: jax.Array, labels: jax.Array) -> tuple[jax.Array, Any]:
    """One device's part of :func:`sharded_value_and_grad` (inside the ``shard_map``);
    ``cast``: the dtype weights are gathered and gradients reduced in (None: their own)."""
    k, replicas = mesh.shape[SHARD_AXIS], mesh.shape[REPLICATE_AXIS]
    leaves, treedef = jax.tree.flatten(params)
    dtypes = [x.dtype for x in leaves]
    if cast is not None:
        leaves = [x.astype(cast) for x in leaves]
    whole = list(leaves)
    for sharded, _ in units:
        if sharded:
            gathered = _all_gather([leaves[i] for i, _ in sharded], [d for _, d in sharded], k)
            for (i, _), x in zip(sharded, gathered, strict=True):
                whole[i] = x
    loss, grads = jax.value_and_grad(loss_fn)(jax.tree.unflatten(treedef, whole), images,
                                              labels)
    grads = jax.tree.leaves(grads)
    out: list[Any] = [None] * len(grads)
    bucket: list[int] = []
    for sharded, whole_leaves in reversed(units):  # backward order: the last block first
        if sharded:
            parts = _reduce_scatter([grads[i] for i, _ in sharded], [d for _, d in sharded],
                                    k, replicas)
            for (i, _), g in zip(sharded, parts, strict=True):
                out[i] = g
        bucket += whole_leaves
        if sum(grads[i].nbytes for i in bucket) >= BUCKET_BYTES:
            _all_reduce(grads, bucket, out)
            bucket = []
    _all_reduce(grads, bucket, out)
    world = k * replicas
    return jax.lax.pmean(loss, MESH_AXES), jax.tree.unflatten(
        treedef, [g.astype(d) / world for g, d in zip(out, dtypes, strict=True)])


def _flat(xs: list[jax.Array]) -> jax.Array:
    return jnp.concatenate([x.reshape(-1) for x in xs])


def _all_gather(shards: list[jax.Array], dims: list[int], k: int) -> list[jax.Array]:
    """Whole leaves from this device's shards (split along ``dims``): one all-gather over
    ``shard`` of their concatenation."""
    rows = jax.lax.all_gather(_flat(shards), SHARD_AXIS)  # (k, sum of shard sizes)
    out, start = [], 0
    for x, d in zip(shards, dims, strict=True):
        piece = rows[:, start:start + x.size].reshape(k, *x.shape)
        start += x.size
        # device j's shard is block j along dimension d
        out.append(jnp.moveaxis(piece, 0, d).reshape(
            *x.shape[:d], k * x.shape[d], *x.shape[d + 1:]))
    return out


def _reduce_scatter(grads: list[jax.Array], dims: list[int], k: int,
                    replicas: int) -> list[jax.Array]:
    """This device's shards of the sums over the mesh of whole-leaf ``grads`` (split along
    ``dims``): one reduce-scatter over ``shard``, then one all-reduce over ``replicate``
    if there are replicas."""
    rows = [jnp.moveaxis(g.reshape(*g.shape[:d], k, g.shape[d] // k, *g.shape[d + 1:]), d, 0)
            for g, d in zip(grads, dims, strict=True)]  # (k, *shard shape)
    flat = jnp.concatenate([r.reshape(k, -1) for r in rows], axis=1)
    mine = jax.lax.psum_scatter(flat, SHARD_AXIS, scatter_dimension=0)
    if replicas > 1:
        mine = jax.lax.psum(mine, REPLICATE_AXIS)
    out, start = [], 0
    for r in rows:
        size = r[0].size
        out.append(mine[start:start + size].reshape(r.shape[1:]))
        start += size
    return out


def _all_reduce(grads: list[jax.Array], bucket: list[int], out: list) -> None:
    """Sum ``grads[i]`` for ``i`` in ``bucket`` over the whole mesh into ``out[i]``: one
    all-reduce of their concatenation."""
    if not bucket:
        return
    total = jax.lax.psum(_flat([grads[i] for i in bucket]), MESH_AXES)
    start = 0
    for i in bucket:
        out[i] = total[start:start + grads[i].size].reshape(grads[i].shape)
        start += grads[i].size
