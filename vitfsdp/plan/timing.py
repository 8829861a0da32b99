"""Predicted step time: compute from FLOPs at a stated efficiency, communication from the
collectives' volumes over the cluster profile's bandwidths.

Compute (per rank and step): ``local batch × hardware FLOPs per image / (plan_efficiency ×
peak)``; hardware FLOPs = 3 × forward (forward + backward, Kaplan et al. 2020, "Scaling Laws
for Neural Language Models", sec. 2.1) plus one more forward of every block under
activation checkpointing (≈ 4 × forward; Chowdhery et al. 2022, "PaLM", appendix B).

Communication (per rank and step), ring algorithms, as the NCCL tests measure them
(NVIDIA/nccl-tests, doc/PERFORMANCE.md: a collective on a buffer of S bytes over n ranks
takes ``S × f / busbw`` with ``f = 2(n-1)/n`` for all-reduce and ``(n-1)/n`` for all-gather
and reduce-scatter, S being the whole gathered / reduced buffer):

- DDP, NO_SHARD, HYBRID_1GPU: one all-reduce of the gradients (reduce dtype) over the world;
- FULL_SHARD, HYBRID_<k>GPU: the parameters all-gathered in forward and again in backward
  (parameter dtype) and the gradients reduce-scattered, over the shard group; the hybrids
  add an all-reduce of the gradient shard over the replicas;
- SHARD_GRAD_OP: one all-gather (forward; kept for backward) and the reduce-scatter.

A collective over ranks of one node runs at ``cluster.intra_node_gbps``, one spanning nodes
at ``cluster.inter_node_gbps`` (its slowest links).

Overlap (the assumption): FSDP prefetches the next unit's all-gather while the current unit
computes, and reduce-scatters a unit's gradients while the previous unit's backward runs
(Zhao et al. 2023, "PyTorch FSDP", sec. 3.3 and 4.1); DDP all-reduces gradient buckets
during backward (Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data
Parallel Training", sec. 3.2.3). So the overlapped communication hides behind compute:
step = max(compute, overlapped) + exposed. Exposed: the first unit's forward all-gather
(1 / units of it), and under ``strategy.backward_prefetch=NONE`` (FSDP1) the backward
all-gather (each unit waits for its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from vitfsdp.plan.memory import DTYPE_BYTES, GIB


@dataclass(frozen=True)
class CommVolumes:
    """Per rank and step: buffer sizes (bytes) of each collective and their time (s)."""

    all_gather_bytes: float  # gathered buffer, summed over forward and backward
    reduce_scatter_bytes: float  # reduced buffer (the full gradient)
    all_reduce_bytes: float  # reduced buffer (gradients or gradient shard)
    overlapped_s: float | None  # hidden behind compute; None = bandwidth unknown
    exposed_s: float | None  # added to the step; None = bandwidth unknown

    @property
    def total_gib(self) -> float:
        """All three buffers, GiB."""
        return (self.all_gather_bytes + self.reduce_scatter_bytes + self.all_reduce_bytes) / GIB


def _seconds(size: float, factor: float, gbps: float | None) -> float | None:
    """``size × factor / busbw`` (NCCL tests' bus bandwidth, GB/s = 1e9 bytes/s)."""
    if size == 0 or factor == 0:
        return 0.0
    return None if gbps is None else size * factor / (gbps * 1e9)


def comm_volumes(cfg, num_params: int, num_units: int) -> CommVolumes:
    """Collective volumes and times per step for ``cfg`` (a :class:`vitfsdp.config.RunConfig`)
    with ``num_params`` parameters in ``num_units`` FSDP units; see the module docstring."""
    world, nodes = cfg.world_size, cfg.nodes
    strategy, settings = cfg.strategy, cfg.precision_settings()
    group = strategy.shard_group(world)
    replicas = world // group
    rd = DTYPE_BYTES[settings.reduce_dtype]
    intra, inter = cfg.cluster.intra_node_gbps, cfg.cluster.inter_node_gbps
    if group == 1:
        ar = num_params * rd
        t = _seconds(ar, 2 * (world - 1) / world, inter if nodes > 1 else intra)
        return CommVolumes(0.0, 0.0, ar if world > 1 else 0.0, t, 0.0 if t is not None else None)
    pd = DTYPE_BYTES[settings.param_dtype]
    gbps = intra if group <= cfg.cluster.gpus_per_node else inter
    f = (group - 1) / group
    gathers = 1 if strategy.effective_sharding_strategy() == "SHARD_GRAD_OP" else 2
    ag, rs = gathers * num_params * pd, num_params * rd
    ar = num_params * rd / group if replicas > 1 else 0.0
    ag_s, rs_s = _seconds(ag, f, gbps), _seconds(rs, f, gbps)
    ar_s = _seconds(ar, 2 * (replicas - 1) / replicas, inter if nodes > 1 else intra)
    if None in (ag_s, rs_s, ar_s):
        return CommVolumes(ag, rs, ar, None, None)
    exposed = ag_s / gathers / max(num_units, 1)  # the first unit's forward all-gather
    if gathers == 2 and strategy.backward_prefetch == "NONE":
        exposed += ag_s / 2
    return CommVolumes(ag, rs, ar, ag_s + rs_s + ar_s - exposed, exposed)


def compute_seconds(flops_per_image: float, local_batch_size: int,
                    peak_flops: float | None, efficiency: float) -> float | None:
    """Seconds of compute per step: ``local batch × FLOPs / (efficiency × peak)``; None when
    the peak is unknown."""
    if peak_flops is None:
        return None
    return local_batch_size * flops_per_image / (efficiency * peak_flops)


def step_seconds(compute_s: float | None, comm: CommVolumes) -> float | None:
    """``max(compute, overlapped communication) + exposed communication``; the communication
    counts as 0 where the bandwidths are unknown (the caller says so)."""
    if compute_s is None:
        return None
    return max(compute_s, comm.overlapped_s or 0.0) + (comm.exposed_s or 0.0)
