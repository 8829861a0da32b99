"""Predicted step time: compute from each GEMM and memory-bound op at its shape, and every
collective from a latency + bandwidth (alpha-beta) model; what overlaps and what is exposed.

Compute (per rank and step; :func:`compute_terms`):

- **GEMMs** at their shapes (per block: QKV, projection, MLP in and out; the patch embedding
  and the head): ``2·M·N·K`` FLOPs at ``plan_efficiency × peak`` (the fraction of the dense
  peak a large GEMM reaches; fitted by ``--calibrate``), with tile quantization (the output
  is computed in 128×128 tiles: NVIDIA, "Matrix Multiplication Background User's Guide",
  "Tile quantization"), and never faster than its operands move through device memory
  (roofline: Williams et al. 2009, "Roofline", CACM 52(4)).
- **Attention** (fused SDPA: q, k, v read and the output written once; written out, the
  scores and softmax too) and the **non-matmul ops** (2 LayerNorms, 2 residual adds, the MLP's
  activation: read and written once each, ``10·d + 2·m`` elements per token, ``5·m`` for
  SwiGLU's SiLU and product) at ``cluster.memory_gbps``: a roofline of FLOPs and bytes.
- Backward: twice the forward's GEMM FLOPs (gradients of inputs and weights; Kaplan et al.
  2020, sec. 2.1) and twice its memory traffic; activation checkpointing runs every block's
  forward again (Chowdhery et al. 2022, "PaLM", appendix B).
- **Optimizer step** (AdamW over this rank's shard, memory-bound): reads parameter,
  gradient and both moments, writes parameter and moments: 28 bytes a parameter (fp32).

Collectives (per step; :func:`comm_terms`), buffers as nccl-tests count them
(NVIDIA/nccl-tests, doc/PERFORMANCE.md: S the whole gathered / reduced buffer):

- DDP: all-reduce of the fp32 gradients (DDP keeps fp32 parameters and reduces their
  gradients in fp32 under autocast) in 25 MiB buckets (``bucket_cap_mb``);
- NO_SHARD, HYBRID_1GPU: one all-reduce per FSDP unit, in ``reduce_dtype``;
- FULL_SHARD, HYBRID_<k>GPU: per unit an all-gather in forward and again in backward (the
  parameter dtype) and a reduce-scatter (``reduce_dtype``), over the shard group; the
  hybrids add an all-reduce of the gradient shard over the replicas; SHARD_GRAD_OP gathers
  once (kept from forward to backward).

Each collective over n ranks takes ``latency + S·f / busbw`` (``f = (n-1)/n`` for all-gather and
reduce-scatter, ``2(n-1)/n`` for all-reduce). Latency, as NCCL/RCCL's own cost model counts it
(ROCm/rccl and NVIDIA/nccl, src/graph/tuning.cc: a base latency plus a per-step hardware
latency): ring, ``collective_latency_us + steps × step latency`` with ``n-1`` steps (``2(n-1)``
for all-reduce), every step at the slowest link's latency (``inter_node_latency_us`` once
the ring leaves a node); tree (all-reduce only, across nodes), ``collective_latency_us +
2·((ranks per node - 1)·intra + log2(nodes)·inter)``; the faster of the two is used, as
NCCL/RCCL pick. All-gather and reduce-scatter only have a ring: over a flat FULL_SHARD
of 1024 ranks each of a model's ~100 collectives a step pays 1023 steps, which is what
makes FULL_SHARD fall behind the hybrids at scale (Singh et al. 2025, "The Big Send-off",
arXiv:2504.18658: RCCL's ring latency grows linearly with the GCDs of Frontier).

Host (:func:`host_seconds`; no probe, GPU ranks): the host issues a step's kernels while the
device runs earlier ones, so the step takes the longer of the two, ``max(device, host)``.
The host's time is the training loop's (forward, loss, backward, AdamW: Python and kernel
launches) per transformer block, the forward again per block under activation checkpointing
(the backward's host work assumed twice the forward's, as its FLOPs), and the wrapper's
hooks per FSDP unit (the blocks' units and the root; DDP per block): the figures of
``python -m vitfsdp.bench wrappers`` on one H100 node (:data:`HOST_LOOP_US_PER_BLOCK`,
:data:`HOST_WRAPPER_US`), the same for every device: a site's probe measures its own.

Overlap (:func:`step_seconds`): FSDP prefetches the next unit's all-gather during the
current unit's compute and reduce-scatters during backward, DDP all-reduces buckets during
backward (Zhao et al. 2023, "PyTorch FSDP", sec. 3.3, 4.1; Li et al. 2020, sec. 3.2.3), so the
bandwidth part hides behind the compute of its phase (forward or backward) up to it:
``max(compute, transfer)``. Exposed: the latency terms (a ring step moves too little to
pipeline and every rank waits on its neighbour, so it holds the unit's compute; assumption,
checked against the ORNL measurements in docs/plan.md), the first unit's all-gather, the
last bucket's all-reduce, the backward all-gathers under ``backward_prefetch=NONE``, and
the optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vitfsdp.plan.memory import DTYPE_BYTES

TILE = 128  # GEMM output tile edge (elements), for tile quantization
#: The training loop's host time per step and transformer block, the wrapper's excluded:
#: the unwrapped 32-block model's step of ``python -m vitfsdp.bench wrappers`` on an NVIDIA
#: H100 80GB HBM3 node (2026-11-26, torch 2.11, eager, fp32, batch 2: so little arithmetic
#: that the step is the host's; 47.34 ms median of 3 passes, 33.53-56.90; its stem, head and
#: AdamW spread over the blocks; docs/data/gpu-h100-2026-11-26-wrappers.json). Measured on
#: the H100; docs/plan.md, "Every constant and its kind".
HOST_LOOP_US_PER_BLOCK = 47.34e3 / 32
#: What each wrapper adds to the host's time per step, µs per FSDP unit (the root included;
#: DDP: per block), by (engine, use_orig_params): the same benchmark and node (added over
#: the unwrapped step, median of 3 passes). Measured on the H100. DDP's 226 is not
#: established: its passes (48.7-58.2 ms) overlap the unwrapped ones (33.5-56.9 ms), a pass
#: against a pass -257 to +771 µs a block; the FSDP passes (81.0-148.1 ms) lie beyond them.
HOST_WRAPPER_US = {("DDP", None): 226.0, ("fsdp1", True): 2643.0, ("fsdp1", False): 1467.0,
                   ("fsdp2", None): 2682.0}
DDP_BUCKET_BYTES = 25 * 1024**2  # DistributedDataParallel(bucket_cap_mb=25), the default
ADAMW_BYTES_PER_PARAM = 28  # fp32: read p, g, m, v (16), write p, m, v (12)


@dataclass(frozen=True)
class Collective:
    """One kind of collective of a step: how often, its buffer, and its group."""

    op: str  # all_gather | reduce_scatter | all_reduce
    phase: str  # forward | backward
    count: int  # collectives per step
    size_bytes: float  # buffer of one (S of nccl-tests)
    ranks: int  # group size
    nodes: int  # nodes the group spans
    consecutive: bool = True  # neighbouring ranks (a shard group), not one rank a group apart


@dataclass(frozen=True)
class CommVolumes:
    """Per rank and step: buffer sizes (bytes) of each collective and their time (s)."""

    all_gather_bytes: float  # gathered buffer, summed over forward and backward
    reduce_scatter_bytes: float  # reduced buffer (the full gradient)
    all_reduce_bytes: float  # reduced buffer (gradients or gradient shard)
    forward_s: float | None  # bandwidth time of forward collectives; None = bandwidth unknown
    backward_s: float | None  # bandwidth time of backward collectives
    latency_s: float  # latency terms of every collective (exposed)
    first_s: float | None  # exposed: the first unit's gather, the last bucket, no prefetch
    overlap: float = 1.0  # fraction of min(compute, transfers) of a phase that hides
    notes: frozenset[str] = frozenset()  # what the probe's lookups approximated

    @property
    def total_s(self) -> float | None:
        """Every collective's time, overlapped or not; None where a bandwidth is unknown."""
        if self.forward_s is None or self.backward_s is None:
            return None
        return self.forward_s + self.backward_s + self.latency_s


@dataclass(frozen=True)
class ComputeTerms:
    """Per rank and step, seconds."""

    forward_s: float  # GEMMs, attention and memory-bound ops of the forward
    backward_s: float  # the backward, with the recomputed forward of checkpointed blocks
    optimizer_s: float  # AdamW over the shard (0 where memory bandwidth is unknown)
    gemm_s: float = 0.0  # of forward + backward: the matmuls
    other_s: float = 0.0  # of forward + backward: attention and the memory-bound ops
    notes: frozenset[str] = frozenset()  # what the probe's lookups approximated

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


def _link(cluster, c: Collective) -> tuple[float | None, float]:
    """(bus bandwidth GB/s, per-step latency s) of a ring over ``c``'s group: across nodes,
    inside one package (``cluster.package_gpus`` consecutive ranks or fewer, where the
    profile gives ``intra_package_gbps``: an MI250X's two GCDs), else inside a node."""
    if c.nodes > 1:
        return cluster.inter_node_gbps, (cluster.inter_node_latency_us or 0.0) * 1e-6
    latency = (cluster.intra_node_latency_us or 0.0) * 1e-6
    if (cluster.package_gpus and cluster.intra_package_gbps and c.consecutive
            and c.ranks <= cluster.package_gpus):
        return cluster.intra_package_gbps, latency
    return cluster.intra_node_gbps, latency


def collective_latency_s(c: Collective, cluster) -> float:
    """Latency of one collective (module docstring): ring, or for an all-reduce across nodes
    the faster of ring and tree."""
    if c.ranks <= 1:
        return 0.0
    base = (cluster.collective_latency_us or 0.0) * 1e-6
    _, step = _link(cluster, c)
    steps = (2 if c.op == "all_reduce" else 1) * (c.ranks - 1)
    ring = base + steps * step
    if c.op != "all_reduce" or c.nodes <= 1:
        return ring
    intra = (cluster.intra_node_latency_us or 0.0) * 1e-6
    per_node = max(1, c.ranks // c.nodes)
    tree = base + 2 * ((per_node - 1) * intra + math.log2(c.nodes) * step)
    return min(ring, tree)


def collective_transfer_s(c: Collective, cluster) -> float | None:
    """Bandwidth time of one collective, ``S·f / busbw``; None where the bus bandwidth of its
    link is unknown."""
    if c.ranks <= 1 or c.size_bytes == 0:
        return 0.0
    gbps, _ = _link(cluster, c)
    f = (2 if c.op == "all_reduce" else 1) * (c.ranks - 1) / c.ranks
    return None if gbps is None else c.size_bytes * f / (gbps * 1e9)


def collectives(cfg, num_params: int, unit_params: int, num_units: int) -> list[Collective]:
    """The collectives of one training step of ``cfg`` (module docstring)."""
    world, rpn = cfg.world_size, cfg.cluster.gpus_per_node
    strategy, s = cfg.strategy, cfg.precision_settings()
    group = strategy.shard_group(world)
    nodes_of = lambda ranks: max(1, math.ceil(ranks / rpn))  # noqa: E731
    units = num_units + 1  # the blocks and the root
    unit_bytes = num_params / units  # the root is folded into an average unit
    if not strategy.is_fsdp:
        count = max(1, math.ceil(num_params * 4 / DDP_BUCKET_BYTES))
        return [Collective("all_reduce", "backward", count, num_params * 4 / count, world,
                           cfg.nodes)]
    rd, pd = DTYPE_BYTES[s.reduce_dtype], DTYPE_BYTES[s.param_dtype]
    if group == 1:
        return [Collective("all_reduce", "backward", units, unit_bytes * rd, world, cfg.nodes)]
    gathers = 1 if strategy.effective_sharding_strategy() == "SHARD_GRAD_OP" else 2
    out = [Collective("all_gather", "forward", units, unit_bytes * pd, group, nodes_of(group)),
           Collective("reduce_scatter", "backward", units, unit_bytes * rd, group,
                      nodes_of(group))]
    if gathers == 2:
        out.append(Collective("all_gather", "backward", units, unit_bytes * pd, group,
                              nodes_of(group)))
    replicas = world // group
    if replicas > 1:  # ranks at the same place of every shard group: one per group's nodes
        out.append(Collective("all_reduce", "backward", units, unit_bytes * rd / group,
                              replicas, max(1, cfg.nodes // nodes_of(group)),
                              consecutive=False))  # one rank of every shard group
    return out


def comm_volumes(cfg, num_params: int, num_units: int,
                 unit_params: int | None = None, *, probe=None,
                 host_synchronous: bool = False) -> CommVolumes:
    """Collective buffers and times per step for ``cfg`` (a :class:`vitfsdp.config.RunConfig`)
    with ``num_params`` parameters in ``num_units`` FSDP units; see the module docstring.

    Args:
        probe: a site's :class:`vitfsdp.plan.probed.Probe`: each collective's time is read
            from its measured curve at that op, group and message size (latency included),
            and the overlap of transfers with compute is the probe's measured fraction; what
            its lookups approximated is in the result's ``notes``. None = the profile's
            alpha-beta figures and full overlap.
        host_synchronous: the ranks' compute runs on the host (CPU): the host waits for each
            unit's forward all-gather before it computes the unit, so forward gathers are
            exposed (on a GPU the host issues them ahead on another stream).
    """
    cs = collectives(cfg, num_params, unit_params or num_params // max(num_units, 1), num_units)
    cluster = cfg.cluster
    volume = {"all_gather": 0.0, "reduce_scatter": 0.0, "all_reduce": 0.0}
    phase: dict[str, float | None] = {"forward": 0.0, "backward": 0.0}
    latency, first = 0.0, 0.0
    notes: frozenset[str] = frozenset()
    dtype = _comm_dtype(cfg)
    for c in cs:
        if c.ranks > 1:
            volume[c.op] += c.count * c.size_bytes
        if probe is not None:
            t, found = probe.collective_s(cfg.world_size, c.op, c.size_bytes, c.ranks, c.nodes,
                                          dtype if c.op != "all_gather" else _gather_dtype(cfg))
            notes |= found
        else:
            latency += c.count * collective_latency_s(c, cluster)
            t = collective_transfer_s(c, cluster)
        if t is None or phase[c.phase] is None:
            phase[c.phase] = None
            continue
        phase[c.phase] += c.count * t
        if c.op == "all_gather" and c.phase == "forward" and host_synchronous:
            first += c.count * t  # the host waits for each unit's gather
            phase[c.phase] -= c.count * t
        elif c.op == "all_gather" and c.phase == "forward":
            first += t  # the first unit's gather has no compute before it
        elif c.op == "all_gather" and cfg.strategy.backward_prefetch == "NONE":
            first += c.count * t  # each unit waits for its own gather
            phase[c.phase] -= c.count * t
        elif c.phase == "backward" and c.op == "all_reduce":
            first += t  # the last bucket (unit) after the backward ends
    if phase["forward"] is None or phase["backward"] is None:
        first = None
    overlap, found = probe.overlap(cfg.world_size) if probe is not None else (1.0, frozenset())
    return CommVolumes(volume["all_gather"], volume["reduce_scatter"], volume["all_reduce"],
                       phase["forward"], phase["backward"], latency, first, overlap,
                       notes | found)


def _comm_dtype(cfg) -> str:
    """The dtype gradients are reduced in: fp32 under DDP, ``reduce_dtype`` under FSDP."""
    return cfg.precision_settings().reduce_dtype if cfg.strategy.is_fsdp else "fp32"


def _gather_dtype(cfg) -> str:
    """The dtype parameters are all-gathered in (FSDP's ``param_dtype``)."""
    return cfg.precision_settings().param_dtype


def _gemm_s(m: float, n: float, k: float, el: int, peak: float, mem: float | None) -> float:
    """One GEMM (M×K)·(K×N): FLOPs with tile quantization, or its operands' bytes."""
    quant = (m * n) / (math.ceil(m / TILE) * TILE * math.ceil(n / TILE) * TILE)
    flops_s = 2 * m * n * k / (peak * quant)
    bytes_s = (m * k + k * n + m * n) * el / mem if mem else 0.0
    return max(flops_s, bytes_s)


@dataclass(frozen=True)
class Gemm:
    """One linear layer's forward matmul, (M×K)·(K×N) (M rows of tokens, K inputs, N
    outputs); backward adds the input gradient (M×N)·(N×K) unless ``input_grad`` is False
    (the first layer), and the weight gradient (N×M)·(M×K)."""

    name: str
    m: int
    n: int
    k: int
    input_grad: bool = True


@dataclass(frozen=True)
class Op:
    """One non-matmul op of a block at its shape: ``layer_norm``, ``add``, ``gelu``,
    ``swiglu`` (rows, dim); ``sdpa`` (fused attention) or ``attention`` (written out):
    (batch, heads, tokens, head dim)."""

    op: str
    shape: tuple[int, ...]
    count: int  # per block


#: Elements read and written per element of an op's shape in forward (the data-sheet
#: roofline; backward moves twice as much): LayerNorm reads and writes once, a residual add
#: reads two and writes one, GELU reads and writes, SwiGLU's SiLU and product 5.
OP_TRAFFIC = {"layer_norm": 2, "add": 3, "gelu": 2, "swiglu": 5}


def block_workload(spec, tokens: int, batch: int, fused_attn: bool) -> tuple[list[Gemm],
                                                                               list[Op]]:
    """The matmuls and other ops of one transformer block's forward for ``batch`` images of
    ``tokens`` tokens (timm's ``Block``: two LayerNorms, QKV, attention, projection, two
    residual adds, the MLP)."""
    d, m, heads = spec.width, spec.mlp_dim, spec.num_heads
    rows = batch * tokens
    fc1 = 2 * m if spec.mlp == "swiglu" else m
    gemms = [Gemm("qkv", rows, 3 * d, d), Gemm("proj", rows, d, d),
             Gemm("fc1", rows, fc1, d), Gemm("fc2", rows, d, m)]
    ops = [Op("layer_norm", (rows, d), 2), Op("add", (rows, d), 2),
           Op("swiglu" if spec.mlp == "swiglu" else "gelu", (rows, m), 1),
           Op("sdpa" if fused_attn else "attention", (batch, heads, tokens, d // heads), 1)]
    return gemms, ops


def outer_gemms(cfg) -> list[Gemm]:
    """The matmuls outside the blocks: the patch embedding (a stride-p convolution, a GEMM
    over the patches; no input gradient) and the head (on the class token)."""
    spec, batch = cfg.model.spec, cfg.train.local_batch_size
    patches = (cfg.model.resolved_img_size() // spec.patch_size) ** 2
    return [Gemm("patch_embed", batch * patches, spec.width, 3 * spec.patch_size**2,
                 input_grad=False),
            Gemm("head", batch, cfg.num_classes, spec.width)]


def _op_roofline_s(o: Op, el: int, peak: float, mem: float | None) -> float:
    """Forward seconds of one op on the data-sheet roofline (module docstring)."""
    if o.op in ("sdpa", "attention"):
        batch, heads, tokens, hd = o.shape
        d = heads * hd
        flops = 4 * batch * tokens * tokens * d
        traffic = 4 * batch * tokens * d * el
        if o.op == "attention":  # scores written, softmax read and written, read again
            traffic += 4 * batch * heads * tokens * tokens * el
        return max(flops / peak, traffic / mem if mem else 0.0)
    return OP_TRAFFIC[o.op] * math.prod(o.shape) * el / mem if mem else 0.0


def compute_terms(cfg, num_params_shard: int, peak_flops: float | None,
                  efficiency: float, memory_gbps: float | None) -> ComputeTerms | None:
    """Compute seconds per step of ``cfg`` (module docstring); None without a peak FLOP/s.

    Args:
        num_params_shard: parameters this rank's optimizer steps (its shard).
        peak_flops: dense peak of the compute dtype, FLOP/s.
        efficiency: fraction of the peak a large GEMM reaches (``plan_efficiency``).
        memory_gbps: device memory bandwidth, GB/s; None = memory-bound terms not counted.
    """
    if peak_flops is None:
        return None
    model, batch = cfg.model, cfg.train.local_batch_size
    spec = model.spec
    el = DTYPE_BYTES[cfg.precision_settings().compute_dtype]
    peak, mem = efficiency * peak_flops, memory_gbps * 1e9 if memory_gbps else None
    gemms, ops = block_workload(spec, cfg.model.num_tokens(), batch, cfg.kernels.fused_attn)
    block_gemm = sum(_gemm_s(g.m, g.n, g.k, el, peak, mem) for g in gemms)
    block_other = sum(o.count * _op_roofline_s(o, el, peak, mem) for o in ops)
    outer = sum(_gemm_s(g.m, g.n, g.k, el, peak, mem) for g in outer_gemms(cfg))
    block = block_gemm + block_other
    forward = spec.depth * block + outer
    recompute = spec.depth * block if cfg.train.activation_checkpointing else 0.0
    optimizer = num_params_shard * ADAMW_BYTES_PER_PARAM / mem if mem else 0.0
    gemm = 3 * (spec.depth * block_gemm + outer) + (recompute and spec.depth * block_gemm)
    other = 3 * spec.depth * block_other + (recompute and spec.depth * block_other)
    return ComputeTerms(forward, 2 * forward + recompute, optimizer, gemm, other)


def probed_compute_terms(cfg, probe, num_params_shard: int, dtype: str) -> ComputeTerms:
    """Compute seconds per step of ``cfg`` from a site's probe (:mod:`vitfsdp.plan.probed`):
    every matmul of forward and backward (input and weight gradients) at its own shape and
    the block's other ops (LayerNorm, residual adds, the MLP activation, attention) as
    measured at this world size with every rank busy, activation checkpointing's recomputed
    forward, and AdamW's measured time per parameter of the shard.

    Args:
        probe: a :class:`vitfsdp.plan.probed.Probe`; what its lookups approximated is in the
            result's ``notes``.
        num_params_shard: parameters this rank's optimizer steps.
        dtype: the compute dtype (fp32, bf16, fp16).

    Raises:
        KeyError: the probe has no GEMM or op measurement at all.
    """
    world, spec, batch = cfg.world_size, cfg.model.spec, cfg.train.local_batch_size
    gemms, ops = block_workload(spec, cfg.model.num_tokens(), batch, cfg.kernels.fused_attn)
    notes: set[str] = set()  # of this call's lookups

    def noted(looked_up):
        value, found = looked_up
        notes.update(found)
        return value

    def gemm(g: Gemm) -> tuple[float, float]:
        fwd = noted(probe.gemm_s(world, g.m, g.n, g.k, dtype))
        bwd = noted(probe.gemm_s(world, g.n, g.k, g.m, dtype))  # weight gradient (N×M)·(M×K)
        if g.input_grad:  # input gradient (M×N)·(N×K)
            bwd += noted(probe.gemm_s(world, g.m, g.k, g.n, dtype))
        return fwd, bwd

    block_g = [gemm(g) for g in gemms]
    block_o = [tuple(o.count * t for t in noted(probe.op_s(world, o.op, o.shape, dtype)))
               for o in ops]
    outer = [gemm(g) for g in outer_gemms(cfg)]
    g_fwd, g_bwd = sum(f for f, _ in block_g), sum(b for _, b in block_g)
    o_fwd, o_bwd = sum(f for f, _ in block_o), sum(b for _, b in block_o)
    depth = spec.depth
    recompute = depth * (g_fwd + o_fwd) if cfg.train.activation_checkpointing else 0.0
    forward = depth * (g_fwd + o_fwd) + sum(f for f, _ in outer)
    backward = depth * (g_bwd + o_bwd) + sum(b for _, b in outer) + recompute
    gemm_total = depth * (g_fwd + g_bwd) + sum(f + b for f, b in outer)
    if recompute:
        gemm_total += depth * g_fwd
    other = depth * (o_fwd + o_bwd) + (depth * o_fwd if recompute else 0.0)
    optimizer = noted(probe.optimizer_s(world, num_params_shard))
    return ComputeTerms(forward, backward, optimizer, gemm_total, other, frozenset(notes))


def host_seconds(cfg, num_units: int, compiled: bool) -> float:
    """The host's time per step of ``cfg`` (a RunConfig) on a GPU rank (module docstring):
    ``depth × HOST_LOOP_US_PER_BLOCK`` (× 4/3 under activation checkpointing: the forward
    again) + the wrapper's :data:`HOST_WRAPPER_US` per FSDP unit (``num_units`` blocks'
    units + the root) or per block (DDP), in seconds. A JAX point (``framework=jax``): 0,
    whatever ``compiled`` says: its step is one jitted call with no per-block loop or
    per-unit hooks (docs/plan.md: without a probe's JAX run, no loop term), and
    ``kernels.compile`` means nothing to it (vitfsdp.config_jax).

    Args:
        num_units: FSDP units besides the root (``strategy.blocks_per_unit`` applied).
        compiled: the blocks are compiled (FSDP1 then keeps the original parameters unless
            ``strategy.use_orig_params`` says otherwise).
    """
    # the parallel layer's rule for FSDP1's parameters; torch-free
    from vitfsdp.parallel import use_orig_params

    if cfg.framework == "jax":
        return 0.0
    depth, strategy = cfg.model.spec.depth, cfg.strategy
    loop = depth * HOST_LOOP_US_PER_BLOCK * (4 / 3 if cfg.train.activation_checkpointing else 1)
    if not strategy.is_fsdp:
        wrapper = depth * HOST_WRAPPER_US[("DDP", None)]
    elif cfg.engine == "fsdp2":
        wrapper = (num_units + 1) * HOST_WRAPPER_US[("fsdp2", None)]
    else:
        orig = use_orig_params(strategy, compiled)
        wrapper = (num_units + 1) * HOST_WRAPPER_US[("fsdp1", orig)]
    return (loop + wrapper) * 1e-6


def step_seconds(compute: ComputeTerms | None, comm: CommVolumes) -> float | None:
    """Per phase (forward, backward) ``compute + transfers - overlap · min(compute,
    transfers)`` (``max(compute, transfers)`` at full overlap), then ``+ latency + the exposed
    transfers + optimizer``; transfers count as 0 where the bandwidths are unknown (the caller
    says so)."""
    if compute is None:
        return None
    o = comm.overlap

    def phase(c: float, t: float | None) -> float:
        t = t or 0.0
        return c + t - o * min(c, t)

    return (phase(compute.forward_s, comm.forward_s) + phase(compute.backward_s, comm.backward_s)
            + comm.latency_s + (comm.first_s or 0.0) + compute.optimizer_s)
