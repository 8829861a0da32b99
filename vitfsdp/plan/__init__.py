"""Plan before you spend: predicted memory per GPU and step time of a sweep point.

    python -m vitfsdp.plan -m model=vit_1b,vit_15b cluster=frontier \\
        strategy=DDP,FULL_SHARD,HYBRID_8GPU nodes=1,8 precision=bf16

:func:`predict` turns a :class:`vitfsdp.config.RunConfig` into a :class:`Prediction`: peak
memory per rank broken into its parts (:mod:`vitfsdp.plan.memory`), whether it fits the
cluster profile's ``device_memory_gib``, and the step time and ips from FLOPs and
collective volumes (:mod:`vitfsdp.plan.timing`). :func:`predict_run` does the same from a
run's run.json, for predicted lines beside measured ones. docs/plan.md explains the model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from vitfsdp.plan.memory import (
    ADAMW_STATES,
    CPU_BASELINE_GIB,
    DTYPE_BYTES,
    FP32_BYTES,
    GIB,
    GPU_ALLOCATOR_OVERHEAD,
    GPU_CONTEXT_GIB,
    NCCL_COMMUNICATOR_GIB,
    StateBytes,
    activation_bytes,
    format_state_bytes,
    fsdp_units,
    model_sizes,
    state_bytes,
)
from vitfsdp.plan.probed import Probe, cached_probe
from vitfsdp.plan.timing import (
    comm_volumes,
    compute_terms,
    host_seconds,
    probed_compute_terms,
    step_seconds,
)

if TYPE_CHECKING:  # the config imports the plan's callers; only a type here
    from vitfsdp.config import RunConfig

__all__ = ["GIB", "GPU_PROFILE", "GPU_PROFILE_DEVICE", "Prediction", "Probe", "StateBytes",
           "auto_time_limit", "communicators", "format_state_bytes", "memory_breakdown",
           "peak_flops_for", "predict", "predict_recorded", "predict_run", "probe_for",
           "recorded_config", "recorded_prediction", "runtime_gib", "state_bytes"]

#: The measured column a memory prediction compares with, per device kind.
MEM_METRIC = {"gpu": "peak_mem_reserved_gib", "cpu": "peak_rss_gib"}
#: The measured column a JAX run's predicted memory is compared with on a GPU: XLA's peak
#: bytes in use. Its ``peak_mem_reserved_gib`` is XLA's pool, which preallocation sizes by
#: a share of the device, not by the step (71.3 GiB on an H100 at 90%): no prediction of
#: the step's tensors compares with it.
JAX_GPU_MEM_METRIC = "peak_mem_gib"


def mem_metric(device: str, framework: str = "torch") -> str:
    """The measured column a prediction's ``peak_mem_gib`` is compared with, for a run on
    ``device`` (``gpu``, ``cpu``; a runs.csv ``device_type`` such as ``cuda`` counts as a
    GPU) under ``framework``: :data:`MEM_METRIC`, or :data:`JAX_GPU_MEM_METRIC` for JAX on
    a GPU."""
    gpu = isinstance(device, str) and device not in ("cpu", "")  # None, NaN, NA: unknown
    if gpu and framework == "jax":
        return JAX_GPU_MEM_METRIC
    return MEM_METRIC["gpu" if gpu else "cpu"]


@dataclass(frozen=True)
class Prediction:
    """What one sweep point is predicted to need and achieve (per rank unless named global).

    Memory in GiB; ``peak_mem_gib`` is what the run would record as ``pred_mem_metric``
    (``peak_mem_reserved_gib`` on a GPU: allocated + the caching allocator's usual reserve,
    never capped at the device; ``peak_rss_gib`` on CPU: allocated + the process baseline).
    A GPU point fits where ``peak_mem_gib + runtime_gib`` (the context and communicators,
    outside the allocator) is within the device memory (a JAX point: within XLA's pool).
    """

    device: str  # gpu | cpu: which kind of rank the memory model is for
    num_params: int
    shard_group_size: int
    params_gib: float  # fp32 parameter shard
    grads_gib: float  # fp32 gradient shard (freed by zero_grad(set_to_none) between steps)
    optimizer_gib: float  # AdamW moments
    buffers_gib: float  # FSDP's unsharded parameters/gradients, or DDP's buckets + autocast cache
    activations_gib: float  # saved for backward at the local batch, as configured
    activations_other_gib: float  # the same with activation checkpointing toggled
    allocated_gib: float  # peak of the above (gradients and activations are not all held at once)
    overhead_gib: float  # allocator cache (GPU: 15% of allocated, uncapped) or process baseline
    peak_mem_gib: float  # allocated + overhead: compare with pred_mem_metric
    device_memory_gib: float | None  # cluster.device_memory_gib (JAX on a GPU: XLA's pool of it)
    # peak_mem_gib + runtime_gib <= the device memory (JAX: peak_mem_gib <= XLA's pool, and
    # the pool + runtime_gib <= the device); None when the device memory is unknown
    fits: bool | None
    margin_gib: float | None  # device memory - runtime_gib - peak_mem_gib (< 0: does not fit)
    compute_s: float | None  # per step: forward, backward (recompute), optimizer; None: no peak
    all_gather_gib: float  # per step and rank: gathered buffers
    reduce_scatter_gib: float
    all_reduce_gib: float
    comm_s: float | None  # all collectives, overlapped or not; None: bandwidth unknown
    latency_s: float  # the collectives' latency terms (exposed), per step
    exposed_comm_s: float | None  # step time - compute: the communication not hidden
    step_time_s: float | None
    ips: float | None  # global images per second
    reason: str  # one line: why it fits or not
    # fits, but with less than cluster.memory_reserve_frac of the device memory to spare:
    # may run out; None when the device memory is unknown
    tight: bool | None = None
    gemm_s: float | None = None  # of compute_s: the matmuls of forward and backward
    other_s: float | None = None  # of compute_s: attention and the memory-bound ops
    optimizer_s: float | None = None  # of compute_s: the AdamW step over the shard
    overlap: float = 1.0  # fraction of min(compute, transfers) that hides, per phase
    # the loop's and the wrapper's own time per step: measured by a probe, or without one
    # (GPU) the host's time beyond the device's, max(0, host_s - device step)
    framework_s: float = 0.0
    host_s: float | None = None  # the host's whole time per step (no probe, GPU; timing.py)
    peak_tflops: float | None = None  # the dense peak of the compute dtype used (no probe)
    # profile (data sheets, cluster.*) | probe:<file> (<when it was measured>)
    source: str = "profile"
    # the probe's largest median repeat spread (Probe.worst_spread), a fraction; None: no
    # probe, or one that recorded no spread
    probe_spread: float | None = None
    notes: str = ""  # what a probe lookup approximated; what is unknown
    # GPU: device memory outside the allocator, GiB: the CUDA context and its libraries
    # (memory.GPU_CONTEXT_GIB, measured) + each communicator of more than one rank
    # (memory.NCCL_COMMUNICATOR_GIB, published); 0 on CPU
    runtime_gib: float = 0.0
    communicators: int = 0  # NCCL/RCCL communicators of more than one rank counted in it
    # GPU, does not fit, but its allocated peak would: only with the allocator's cache
    # squeezed below its usual reserve (it frees and retries before it fails); None: unknown
    squeezed: bool | None = None
    framework: str = "torch"  # the run's framework: decides pred_mem_metric on a GPU

    @property
    def verdict(self) -> str:
        """The plan table's ``fits`` column: ``yes`` (fits), ``tight`` (fits, with less
        than ``cluster.memory_reserve_frac`` of the device to spare), ``squeezed`` (does not
        fit, but its allocated peak would, with the allocator's cache squeezed below its
        usual reserve), ``NO`` (not even that) or ``?`` (the device memory is unknown). The
        sweep runs ``tight`` and ``squeezed`` points with a warning and skips ``NO`` points
        (``--run-infeasible`` runs them)."""
        if self.fits is None:
            return "?"
        if self.fits:
            return "tight" if self.tight else "yes"
        return "squeezed" if self.squeezed else "NO"

    @property
    def pred_mem_metric(self) -> str:
        """The measured column ``peak_mem_gib`` is to be compared with (:func:`mem_metric`)."""
        return mem_metric(self.device, self.framework)

    def as_dict(self) -> dict:
        """The fields, ``verdict`` and ``pred_mem_metric``, for JSON/CSV."""
        return dataclasses.asdict(self) | {"verdict": self.verdict,
                                           "pred_mem_metric": self.pred_mem_metric}


def device_kind(cfg) -> str:
    """``gpu`` or ``cpu``: what the ranks of ``cfg`` run on. ``device=auto`` means a GPU on a
    profile with a known ``device_memory_gib`` or ``peak_tflops``, else the CPU (the local
    and virtual profiles train on CPU here)."""
    if cfg.device in ("cpu", "cuda"):
        return "cpu" if cfg.device == "cpu" else "gpu"
    known = cfg.cluster.device_memory_gib is not None or cfg.cluster.peak_tflops is not None
    return "gpu" if known else "cpu"


def _dtypes(cfg, device: str) -> tuple[str, str, str]:
    """(parameter dtype of the gathered copies, compute dtype, residual-stream dtype) on a
    ``gpu`` or ``cpu`` rank (``precision=auto`` resolves by it)."""
    s = cfg.precision_settings("cuda" if device == "gpu" else "cpu")
    if not cfg.strategy.is_fsdp:  # DDP: fp32 parameters, autocast to bf16/fp16 for matmuls
        return "fp32", s.compute_dtype, "fp32"
    return s.param_dtype, s.param_dtype, s.param_dtype


def _unsharded_bytes(cfg, sizes, param_dtype: str, device: str) -> int:
    """FSDP's transient full-size buffers during forward and backward, bytes.

    Source: PyTorch FSDP docs (``FullyShardedDataParallel``: ``backward_prefetch``,
    ``limit_all_gathers``) and Zhao et al. 2023, sec. 3.2-3.3. Units gathered at once: 2 (the
    current unit and the prefetched next one; FSDP1's rate limiter allows two all-gathers in
    flight, FSDP2 prefetches one), 1 with ``backward_prefetch=NONE``; without
    ``limit_all_gathers`` on a GPU the CPU may issue every unit's all-gather ahead (the
    worst case: all units). SHARD_GRAD_OP keeps every unit gathered from forward to backward.
    Plus one unit's unsharded gradient (parameter dtype) and the root unit (patch and
    position embeddings, head), gathered for the whole step. With shard group 1 and fp32 the
    parameters are used in place (0); with mixed precision their low-precision copies count.
    """
    if not cfg.strategy.is_fsdp:
        return 0
    group = cfg.strategy.shard_group(cfg.world_size)
    pd = DTYPE_BYTES[param_dtype]
    if group == 1 and param_dtype == "fp32":
        return 0
    s = cfg.strategy
    num_units, unit_params = fsdp_units(sizes, s.blocks_per_unit)
    if s.effective_sharding_strategy() == "SHARD_GRAD_OP" and group > 1:
        units = num_units
    elif s.limit_all_gathers is False and device == "gpu":
        units = num_units
    else:
        units = 1 if s.backward_prefetch == "NONE" else 2
    return (min(units, num_units) + 1) * unit_params * pd + sizes.root_params * pd


def memory_breakdown(cfg, device: str | None = None) -> dict[str, int]:
    """Predicted bytes per rank of ``cfg`` (a RunConfig) by part, and the allocated peak.

    The peak (assumption, from the order of a training step with
    ``zero_grad(set_to_none=True)``): parameters, optimizer state and DDP's buckets are held
    throughout; activations plus unsharded buffers peak at the end of forward, when no
    gradient exists yet; gradients peak at the optimizer step, with its temporaries, when the
    activations are freed. Backward trades one for the other block by block, while one
    block's activations are in use (recomputed under activation checkpointing, or their
    gradients being formed), so ``allocated = params + optimizer + persistent +
    max(activations + autocast's weight cache, gradients) + unsharded + one block's
    activations``. (DDP's autocast caches a low-precision copy of every weight for the
    forward, released as backward uses it; FSDP's unsharded units live through both.)

    torch's foreach AdamW (``auto`` on GPUs) computes ``sqrt(exp_avg_sq)`` of the whole shard
    into a temporary (torch/optim/adamw.py, ``_multi_tensor_adamw``); the ORNL study's
    measured peaks show no such term (ViT-3B on one MI250X GCD: 59.8 GiB allocated under
    DDP, 47.3 GiB under NO_SHARD, against 57.1 and 45.7 GiB predicted without it), so it
    is not counted.

    Returns:
        params, grads, optimizer, buffers (DDP: buckets + autocast cache; FSDP: unsharded),
        activations, activations_other (checkpointing toggled), allocated; bytes.
    """
    device = device or device_kind(cfg)
    if cfg.framework == "jax":
        return jax_memory_breakdown(cfg, device)
    classes = cfg.num_classes
    sizes = model_sizes(cfg.model, classes)
    group = cfg.strategy.shard_group(cfg.world_size)
    shard = math.ceil(sizes.num_params / group)
    param_dtype, compute, residual = _dtypes(cfg, device)
    ckpt = cfg.train.activation_checkpointing
    compiled = cfg.compile_blocks("cuda" if device == "gpu" else "cpu")
    acts = {c: activation_bytes(cfg.model, classes, cfg.train.local_batch_size, dtype=compute,
                                residual_dtype=residual, fused_attn=cfg.kernels.fused_attn,
                                checkpointing=c, compiled=compiled) for c in (False, True)}
    forward_only = 0  # held with the activations only: freed by backward as it goes
    if cfg.strategy.is_fsdp:
        persistent, transient = 0, _unsharded_bytes(cfg, sizes, param_dtype, device)
    else:  # DDP's flat gradient buckets (gradient_as_bucket_view=False) and autocast's cache
        persistent, transient = sizes.num_params * FP32_BYTES, 0
        forward_only = sizes.num_params * DTYPE_BYTES[compute] if compute != "fp32" else 0
    params, grads = shard * FP32_BYTES, shard * FP32_BYTES
    optimizer = shard * FP32_BYTES * ADAMW_STATES
    work = acts[False] // cfg.model.spec.depth
    # AdamW's own temporaries are not counted, see the docstring
    allocated = (params + optimizer + persistent + max(acts[ckpt] + forward_only, grads)
                 + transient + work)
    return {"params": params, "grads": grads, "optimizer": optimizer,
            "buffers": persistent + transient + forward_only, "activations": acts[ckpt],
            "activations_other": acts[not ckpt], "allocated": allocated,
            "num_params": sizes.num_params,
            "num_units": fsdp_units(sizes, cfg.strategy.blocks_per_unit)[0],
            "shard_group_size": group}


#: The share of a GPU's memory XLA's allocator takes for its pool by default
#: (``XLA_PYTHON_CLIENT_MEM_FRACTION``; JAX's documentation, "GPU memory allocation"): a JAX
#: run fits in it, not in the whole device.
XLA_DEFAULT_MEM_FRACTION = 0.75


def xla_pool_fraction(env: dict) -> float:
    """The share of a GPU a JAX run can allocate under the profile's ``cluster.env``:
    ``XLA_CLIENT_MEM_FRACTION`` (or its older name ``XLA_PYTHON_CLIENT_MEM_FRACTION``) where
    set, else :data:`XLA_DEFAULT_MEM_FRACTION`; 1 with the platform allocator
    (``XLA_PYTHON_CLIENT_ALLOCATOR=platform``: no pool). Without preallocation
    (``XLA_PYTHON_CLIENT_PREALLOCATE=false``) the pool grows as needed, but up to the same
    share (XLA's BFC allocator is capped at it either way)."""
    if str(env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "")).lower() == "platform":
        return 1.0
    for name in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        if name in env:
            return float(env[name])
    return XLA_DEFAULT_MEM_FRACTION


def communicators(cfg) -> int:
    """NCCL (RCCL) communicators of more than one rank that a rank of ``cfg`` holds, each
    with its own buffers (:data:`vitfsdp.plan.memory.NCCL_COMMUNICATOR_GIB`).

    Assumption, from how the trainer makes its groups (:mod:`vitfsdp.parallel`): the world's
    (``init_process_group`` with the rank's device: DDP's, FULL_SHARD's and SHARD_GRAD_OP's,
    and the metrics' collective each window), plus, where a 2-D mesh (replicas × shard
    group) is made (the hybrids; FSDP2's NO_SHARD), one for the rank's shard group and one
    for its replica group, each where it has more than one rank. 0 in a world of 1.
    """
    world = cfg.world_size
    if world <= 1:
        return 0
    s = cfg.strategy
    effective = s.effective_sharding_strategy()
    if effective == "HYBRID_SHARD" or (effective == "NO_SHARD" and s.is_fsdp
                                       and cfg.engine == "fsdp2"):
        group = s.shard_group(world)
        return 1 + (group > 1) + (world // group > 1)
    return 1


def runtime_gib(cfg, device: str) -> tuple[float, int]:
    """Device memory per rank outside the allocator's pool, GiB, and the communicators
    counted in it: on a GPU the CUDA (HIP) context with its libraries
    (:data:`vitfsdp.plan.memory.GPU_CONTEXT_GIB`, measured on an H100) plus
    :data:`vitfsdp.plan.memory.NCCL_COMMUNICATOR_GIB` (published) per communicator of more
    than one rank (:func:`communicators`); 0 on a CPU rank, whose process baseline is in its
    peak already (:data:`vitfsdp.plan.memory.CPU_BASELINE_GIB`)."""
    if device != "gpu":
        return 0.0, 0
    n = communicators(cfg)
    return GPU_CONTEXT_GIB + n * NCCL_COMMUNICATOR_GIB, n


def _fits(allocated_gib: float, peak_gib: float, runtime: float, usable_gib: float | None,
          device: str, limit: str) -> tuple[bool | None, str]:
    """Fit and its one-line reason: the predicted peak (GPU: torch's reserved peak,
    allocated + the allocator's cache; CPU: the resident peak) within ``usable_gib``, the
    device memory (or XLA's pool) less ``runtime`` (GiB outside the allocator). A GPU point
    that does not fit but whose allocated peak would, with its cache squeezed, says so."""
    where = "per GPU" if device == "gpu" else "per rank"
    what = "reserved peak" if device == "gpu" else "peak"
    outside = (f" + {runtime:.1f} GiB outside the allocator (context, communicators)"
               if runtime else "")
    if usable_gib is None:
        return None, (f"predicted {what} {peak_gib:.1f} GiB {where}{outside}; device memory "
                      "unknown (set cluster.device_memory_gib)")
    margin = usable_gib - peak_gib
    fits = margin >= 0
    reason = (f"predicted {what} {peak_gib:.1f} GiB {where}{outside} "
              f"{'<=' if fits else '>'} {limit}, margin {margin:+.1f} GiB")
    if not fits and device == "gpu" and allocated_gib <= usable_gib:
        reason += (f"; its allocated peak ({allocated_gib:.1f} GiB) would leave the allocator "
                   f"{usable_gib - allocated_gib:.1f} GiB of cache, not the "
                   f"{peak_gib - allocated_gib:.1f} it keeps: squeezed, it may run, slowed "
                   "by the allocator's retries, or run out of memory")
    return fits, reason


#: Whether XLA's CPU compiler keeps the activations ``nn.remat`` recomputes (measured
#: 2026-11-28, jax 0.10.2; docs/jax.md "Memory: what JAX keeps, and checkpointing on CPU"):
#: ViT-B/16, one device, fp32, XLA's temporaries with remat against without: 2.31 against
#: 2.11 GiB at batch 8, 9.57 against 8.70 at batch 32, 3.57 against 3.86 at batch 16 (a run:
#: peak RSS 5.89 against 6.15 GiB), where remat should keep a seventh of the activations
#: (the plan's count). The plan then counts a JAX CPU run's activations as without
#: checkpointing.
JAX_CPU_REMAT_KEEPS = True

#: Copies of the whole model in the compute dtype that XLA keeps beside the activations of a
#: JAX step with a shard group of 1 under bf16/fp16 (measured 2026-11-30 on CPU, jax 0.10.2,
#: the trainer's jitted step compiled, ``memory_analysis()``; docs/plan.md "JAX memory: what
#: XLA's analysis counts"): its temporaries less what grows with the local batch (the
#: intercept of batches 1, 2 and 4) are 4.02 bytes a parameter for ViT-H/14 in bf16, 4.14
#: for a 4-block ViT of 50.6 M parameters, and 0.14 and 0.66 in fp32: the compute-dtype
#: copy of each weight autodiff keeps (docs/jax.md's list) and 2 bytes a parameter more,
#: the size of the gradients in that dtype. Two copies of 2 bytes; not measured for a group
#: above 1 (CPU's virtual devices gave a flat 8.0 bytes a parameter whatever the batch and
#: dtype), where the whole gathered model is counted once, as before.
JAX_COMPUTE_COPIES = 2


def jax_memory_breakdown(cfg, device: str) -> dict[str, int]:
    """Predicted bytes per device of a ``framework=jax`` run (:mod:`vitfsdp.jax`), by part,
    as :func:`memory_breakdown` returns them.

    The JAX layout (:mod:`vitfsdp.jax.sharding`): parameters (fp32), gradients (fp32) and
    optax's AdamW moments split over the ``shard`` axis (the shard group), as under FSDP; no
    FSDP unit buffers and no DDP buckets: XLA all-gathers each sharded weight before its use,
    and its scheduler keeps the gathered copies of the whole model, in the compute dtype, for
    the backward (assumption: the worst case of XLA's scheduling, counted where the group is
    larger than 1). Activations as :func:`vitfsdp.plan.memory.activation_bytes` counts them
    for written-out attention (the JAX model computes softmax(q·kᵀ) itself), everything in
    the compute dtype, with ``train.activation_checkpointing`` as ``nn.remat`` per block on
    a GPU; on CPU as without it (:data:`JAX_CPU_REMAT_KEEPS`: XLA's CPU compiler keeps what
    remat would free, measured). With a shard group of 1 under a 16-bit compute dtype,
    :data:`JAX_COMPUTE_COPIES` copies of the whole model in that dtype beside the
    activations (``buffers``; measured). The interpreter with jax, flax and optax imported
    holds 0.68 GiB on CPU, the torch baseline's figure (0.8 GiB with the data) is kept.
    """
    sizes = model_sizes(cfg.model, cfg.num_classes)
    group = cfg.strategy.shard_group(cfg.world_size)
    shard = math.ceil(sizes.num_params / group)
    compute = cfg.resolved_precision("cuda" if device == "gpu" else "cpu")
    ckpt = cfg.train.activation_checkpointing and not (device == "cpu" and JAX_CPU_REMAT_KEEPS)
    acts = [activation_bytes(cfg.model, cfg.num_classes, cfg.train.local_batch_size,
                             dtype=compute, fused_attn=False, checkpointing=c)
            for c in (ckpt, not ckpt)]
    gathered = sizes.num_params * DTYPE_BYTES[compute] if group > 1 else 0
    if group == 1 and DTYPE_BYTES[compute] < FP32_BYTES:
        gathered = JAX_COMPUTE_COPIES * sizes.num_params * DTYPE_BYTES[compute]
    params, grads = shard * FP32_BYTES, shard * FP32_BYTES
    optimizer = shard * FP32_BYTES * ADAMW_STATES
    allocated = params + optimizer + gathered + max(acts[0], grads)
    return {"params": params, "grads": grads, "optimizer": optimizer, "buffers": gathered,
            "activations": acts[0], "activations_other": acts[1], "allocated": allocated,
            "num_params": sizes.num_params, "num_units": sizes.num_units,
            "shard_group_size": group}


def _with_checkpointing(cfg, device: str, usable_gib: float) -> str:
    """What a point that does not fit would need with ``train.activation_checkpointing=true``
    (the plan's peak then, in GiB): ``"; fits with ... (predicted peak X GiB)"`` when that
    fits ``usable_gib`` (the device memory less what lies outside the allocator), else ``""``
    (the refusal's own fixes stand)."""
    train = dataclasses.replace(cfg.train, activation_checkpointing=True)
    allocated = memory_breakdown(dataclasses.replace(cfg, train=train), device)["allocated"] / GIB
    peak = allocated + _overhead_gib(allocated, device)
    if peak > usable_gib:
        return ""
    return f"; fits with train.activation_checkpointing=true (predicted peak {peak:.1f} GiB)"


def _overhead_gib(allocated_gib: float, device: str) -> float:
    """What the run's measured peak adds to the allocated one, GiB: on CPU the process
    baseline (:data:`vitfsdp.plan.memory.CPU_BASELINE_GIB`); on a GPU the caching allocator's
    reserve, :data:`vitfsdp.plan.memory.GPU_ALLOCATOR_OVERHEAD` of the allocated peak (what
    it keeps where the device has room; not capped at what the device has left, so the peak
    is the reserved peak a run with room records)."""
    if device != "gpu":
        return CPU_BASELINE_GIB
    return allocated_gib * GPU_ALLOCATOR_OVERHEAD


def peak_flops_for(cfg, device: str) -> tuple[float | None, str]:
    """The dense peak FLOP/s of the profile for the run's compute dtype, and its kind:
    ``cluster.peak_tflops`` (bf16; fp16 alike) under bf16/fp16 (DDP's autocast included),
    ``cluster.peak_tflops_tf32`` for fp32 when ``kernels.float32_matmul_precision`` allows
    TF32 (else, or on a device without TF32 units, ``cluster.peak_tflops_fp32``).
    None where the profile does not give that figure."""
    compute = cfg.precision_settings("cuda" if device == "gpu" else "cpu").compute_dtype
    c = cfg.cluster
    if compute in ("bf16", "fp16"):
        return (c.peak_tflops * 1e12 if c.peak_tflops else None), "bf16"
    if cfg.kernels.float32_matmul_precision != "highest" and c.peak_tflops_tf32:
        return c.peak_tflops_tf32 * 1e12, "tf32"
    return (c.peak_tflops_fp32 * 1e12 if c.peak_tflops_fp32 else None), "fp32"


#: What a CPU step with ``train.release_host_memory=true`` costs that the plan does not model.
RELEASE_HOST_MEMORY_NOTE = (
    "train.release_host_memory=true: every large tensor is mapped and zero-filled afresh, "
    "not modelled (measured here: 2.1x the step of ViT-S/16 FULL_SHARD on 2 CPU ranks)")


def _unmodelled(cfg, device: str) -> list[str]:
    """Notes on what the point's step holds that the plan does not predict."""
    if device == "cpu" and cfg.train.release_host_memory:
        return [RELEASE_HOST_MEMORY_NOTE]
    return []


def probe_for(cfg) -> Probe | None:
    """The probe the plan reads for ``cfg``: ``cluster.probe`` (a probe.json, or a directory
    holding one), or None: unset, or ``allocation`` (each pack measures its allocation
    during the sweep; the analysis then predicts from the sweep directory's probe.json).

    Raises:
        ValueError: the file cannot be read (:func:`vitfsdp.plan.probed.load_probe`).
    """
    if cfg.cluster.probe in (None, "", "allocation"):  # allocation: measured in the job
        return None
    return cached_probe(cfg.cluster.probe)


def predict(cfg, *, peak_flops: float | None = None,
            device_memory_gib: float | None = None, device: str | None = None,
            probe: Probe | None = None) -> Prediction:
    """Predicted memory, fit and step time of one sweep point.

    Args:
        cfg: a validated :class:`vitfsdp.config.RunConfig`.
        peak_flops: dense peak FLOP/s per GPU of the compute dtype when the profile has no
            figure for it (e.g. a run's recorded device peak).
        device_memory_gib: device memory when the profile has no
            ``cluster.device_memory_gib`` (e.g. a run's recorded device).
        device: ``gpu`` | ``cpu``; default :func:`device_kind`.
        probe: a site's measurements (:mod:`vitfsdp.plan.probed`); default
            ``cluster.probe`` (:func:`probe_for`). With one, compute and collectives are
            read from it; without, from the profile's data-sheet figures.

    Returns:
        A :class:`Prediction`; ``fits`` is None where the device memory is unknown, and the
        step time None where neither a probe nor the peak FLOP/s of the compute dtype is known.

    Raises:
        ValueError: ``cluster.probe`` names a file that cannot be read.
    """
    device = device or device_kind(cfg)
    b = memory_breakdown(cfg, device)
    allocated = b["allocated"] / GIB
    memory = cfg.cluster.device_memory_gib or device_memory_gib
    runtime, comms = runtime_gib(cfg, device)
    usable, limit, outside = None, "", runtime  # outside: what the usable memory leaves out
    if memory:
        usable = memory - runtime
        limit = f"{memory:.1f} GiB (cluster.device_memory_gib)"
    if cfg.framework == "jax" and device == "gpu" and memory:
        fraction = xla_pool_fraction(cfg.cluster.env)
        if fraction < 1:  # XLA's pool: the context and communicators lie outside it
            pool = memory * fraction
            usable = min(pool, memory - runtime)
            outside = 0.0 if usable == pool else runtime
            limit = (f"{pool:.1f} GiB (XLA's pool: {fraction:.0%} of {memory:g} GiB, "
                     "XLA_PYTHON_CLIENT_MEM_FRACTION)" if not outside else
                     f"{memory:.1f} GiB (cluster.device_memory_gib; XLA's pool would be "
                     f"{fraction:.0%} of it)")
            memory = pool
    overhead = _overhead_gib(allocated, device)
    peak_gib = allocated + overhead
    fits, reason = _fits(allocated, peak_gib, outside, usable, device, limit)
    tight = _tight(peak_gib, usable, memory, cfg.cluster.memory_reserve_frac)
    if fits is False and not cfg.train.activation_checkpointing:
        reason += _with_checkpointing(cfg, device, usable)
    if tight:
        reason += (f"; tight: less than cluster.memory_reserve_frac="
                   f"{cfg.cluster.memory_reserve_frac:g} of the device memory to spare"
                   + ("" if cfg.train.activation_checkpointing else
                      " (train.activation_checkpointing=true or a smaller "
                      "train.local_batch_size leaves room)"))
    probe = probe if probe is not None else probe_for(cfg)
    shard = math.ceil(b["num_params"] / b["shard_group_size"])
    profile_peak, _ = peak_flops_for(cfg, device)
    peak = profile_peak or peak_flops
    notes = set(_unmodelled(cfg, device))
    if probe is not None:
        net = cfg.cluster.network
        notes |= probe.check_network(cfg.world_size, net.emulate, net.inter_node_gbit_s,
                                     net.node_cpus)
    with _probe_covers(probe, cfg):
        if probe is not None:
            dtype = cfg.precision_settings("cuda" if device == "gpu" else "cpu").compute_dtype
            compute = probed_compute_terms(cfg, probe, shard, dtype)
        else:
            compute = compute_terms(cfg, shard, peak, cfg.cluster.plan_efficiency,
                                    cfg.cluster.memory_gbps)
        comm = comm_volumes(cfg, b["num_params"], b["num_units"], probe=probe,
                            host_synchronous=device == "cpu")
    notes |= comm.notes | (compute.notes if compute is not None else frozenset())
    step = step_seconds(compute, comm)
    framework, host = 0.0, None
    if probe is not None and step is not None:
        framework, found = probe.framework_s(cfg.world_size, cfg.strategy.name, cfg.engine,
                                             cfg.strategy.is_fsdp, b["num_units"] + 1,
                                             cfg.framework)
        notes |= found
        step += framework
    elif step is not None and device == "gpu":  # the host issues ahead: max(device, host)
        host = host_seconds(cfg, b["num_units"], cfg.compile_blocks("cuda"))
        framework = max(0.0, host - step)
        step += framework
    return Prediction(
        device=device, num_params=b["num_params"], shard_group_size=b["shard_group_size"],
        params_gib=b["params"] / GIB, grads_gib=b["grads"] / GIB,
        optimizer_gib=b["optimizer"] / GIB, buffers_gib=b["buffers"] / GIB,
        activations_gib=b["activations"] / GIB,
        activations_other_gib=b["activations_other"] / GIB, allocated_gib=allocated,
        overhead_gib=overhead, peak_mem_gib=peak_gib, device_memory_gib=memory,
        fits=fits, margin_gib=None if usable is None else usable - peak_gib,
        compute_s=None if compute is None else compute.total_s,
        all_gather_gib=comm.all_gather_bytes / GIB,
        reduce_scatter_gib=comm.reduce_scatter_bytes / GIB,
        all_reduce_gib=comm.all_reduce_bytes / GIB, comm_s=comm.total_s,
        latency_s=comm.latency_s,
        exposed_comm_s=None if step is None else step - compute.total_s - framework,
        step_time_s=step,
        ips=cfg.world_size * cfg.train.local_batch_size / step if step else None,
        reason=reason, tight=tight, runtime_gib=runtime, communicators=comms,
        squeezed=None if fits is None else (not fits and device == "gpu"
                                            and allocated <= usable),
        gemm_s=None if compute is None else compute.gemm_s,
        other_s=None if compute is None else compute.other_s,
        optimizer_s=None if compute is None else compute.optimizer_s,
        overlap=comm.overlap, framework_s=framework, host_s=host,
        peak_tflops=None if probe or not peak else peak / 1e12,
        source=_probe_source(probe) if probe is not None else "profile",
        probe_spread=probe.worst_spread() if probe is not None else None,
        framework=cfg.framework,
        notes="; ".join(sorted(notes)))


@contextlib.contextmanager
def _probe_covers(probe, cfg):
    """Turn a probe lookup's ``KeyError`` (a GEMM, op or collective the probe did not
    measure: it measures what the sweep it was run for needs) into the plan's one-line
    ``ValueError`` naming ``cluster.probe``, the point and the fix."""
    try:
        yield
    except KeyError as e:
        if probe is None:
            raise
        what = str(e.args[0]).removeprefix(f"probe {probe.path}: ")
        raise ValueError(f"cluster.probe={probe.path}: {what}, which {cfg.model.name} "
                         f"{cfg.strategy.name} at nodes={cfg.nodes} needs: a probe measures "
                         "what the sweep it was run for needs; probe again with this sweep's "
                         "overrides (python -m vitfsdp.probe -m ...), or set "
                         "cluster.probe=null") from None


def _tight(peak_gib: float, usable_gib: float | None, memory_gib: float | None,
           reserve_frac: float) -> bool | None:
    """A point that fits, but with less than ``reserve_frac`` of the device memory
    (``memory_gib``; XLA's pool for JAX) to spare beyond its predicted peak and what lies
    outside the allocator (``usable_gib``): fragmentation beyond the allocator's usual
    reserve, or a larger communicator, may still make it run out. None where the device
    memory is unknown; False where it does not fit."""
    if usable_gib is None or memory_gib is None:
        return None
    margin = usable_gib - peak_gib
    return 0 <= margin < reserve_frac * memory_gib


#: ``cluster.time=auto``: the step time (:func:`sizing_step`) times the point's steps times
#: this factor (assumed, a judgement: docs/plan.md's worst step-time misses are 40.0-40.7%
#: short on the one-GPU H100 runs, measured 1.7x predicted, which 2 covers; 50.5% and 59%
#: short on CPU checks from a probe, 2.02x and 2.44x, and more out of sample on ORNL's
#: Frontier rows, which it does not: where a published row of the point's settings exists,
#: its step time is the floor, :func:`sizing_step`), plus :data:`STARTUP_S` and the
#: profile's ``signal_delay_s`` (the checkpoint window).
TIME_SAFETY_FACTOR = 2.0
#: Seconds before the first step: interpreter and imports, rendezvous, model build and
#: sharding, per-block compile (assumption: 5 minutes covers them on a GPU node).
STARTUP_S = 300


class SizingStep(NamedTuple):
    """The seconds per step a point's time is sized by (:func:`sizing_step`)."""

    step_s: float | None  # the larger of the two below; None where neither is known
    predicted_s: float | None  # the plan's (:func:`predict`)
    published_s: float | None  # global batch / a published images/s of the same settings
    study: str | None  # the published study (vitfsdp/reference) where published_s is set

    @property
    def by_published(self) -> bool:
        """Whether the published step time is the one used (slower than the plan's)."""
        return self.published_s is not None and (self.predicted_s is None
                                                 or self.published_s > self.predicted_s)

    @classmethod
    def of(cls, predicted_s: float | None,
           published: tuple[float, str] | None) -> SizingStep:
        """The sizing step of a point whose plan predicts ``predicted_s`` seconds per step
        (None or NaN: none) and whose settings have ``published`` (seconds per step, study;
        :func:`vitfsdp.plan.__main__.published_step`), or None: the slower of the two. The
        one rule of :func:`sizing_step` and of the plan's node-hours
        (:func:`vitfsdp.plan.__main__.summary_line`)."""
        if predicted_s is not None and math.isnan(predicted_s):
            predicted_s = None
        published_s, study = published if published is not None else (None, None)
        known = [s for s in (predicted_s, published_s) if s is not None]
        return cls(max(known) if known else None, predicted_s, published_s, study)


def sizing_step(cfg) -> SizingStep:
    """The step time that ``cluster.time=auto`` (:func:`auto_time_limit`) and the sweep's
    time checks (:mod:`vitfsdp.sweep.check`) size ``cfg``'s jobs by: the plan's predicted
    step time, or, where a published study measured the same settings at the same node
    count on the profile's machine (:func:`vitfsdp.plan.__main__.published_ips`: ORNL's
    Frontier rows), the global batch over its images/s where that is slower. A measurement
    used as a floor as published, nothing fitted to it.

    Raises:
        ValueError, NotImplementedError: as :func:`predict`.
    """
    # on use: the table's module (pandas, the published CSVs) only where a time is sized
    from vitfsdp.plan.__main__ import published_settings, published_step

    p = predict(cfg)
    return SizingStep.of(p.step_time_s, published_step(published_settings(cfg, p.device)))


def auto_time_limit(cfg) -> str:
    """The Slurm time limit ``cluster.time=auto`` resolves to for ``cfg``:
    ``train.steps × step time × TIME_SAFETY_FACTOR + STARTUP_S + cluster.signal_delay_s``,
    the step time :func:`sizing_step`'s (the plan's, or a published one of the same settings
    where slower), rounded up to whole minutes, as ``D-HH:MM:SS``. A sweep holds it to the
    queue's limit for the node count (``cluster.queue_limits``), leaving the rest to
    requeues (:func:`vitfsdp.sweep.compose.resolve_auto_time`).

    Raises:
        ValueError: no step time for ``cfg`` (no peak FLOP/s in the profile, no published
            row).
    """
    step = sizing_step(cfg).step_s
    if step is None:
        raise ValueError(f"cluster.time=auto needs the plan's step time, which cluster="
                         f"{cfg.cluster.name} cannot give (no cluster.probe, and the peak of "
                         "the run's precision is unset: cluster.peak_tflops, _tf32, _fp32); "
                         "set one, or a time such as cluster.time=00:30:00")
    seconds = (cfg.train.steps * step * TIME_SAFETY_FACTOR + STARTUP_S
               + cfg.cluster.signal_delay_s)
    minutes = math.ceil(seconds / 60)
    days, minutes = divmod(minutes, 24 * 60)
    return f"{days}-{minutes // 60:02d}:{minutes % 60:02d}:00"


def _probe_source(probe) -> str:
    """``probe:<file> (<when measured>; <its repeats' spread>)``: which probe a prediction
    used and how far its figures held while it was measured
    (:meth:`~vitfsdp.plan.probed.Probe.spread_text`)."""
    about = "; ".join(x for x in (probe.created_at, probe.spread_text()) if x)
    return f"probe:{probe.path}" + (f" ({about})" if about else "")


def predict_run(run_info: dict) -> dict | None:
    """The prediction for a recorded run, for analysis beside its measured figures.

    Args:
        run_info: a run.json dict; its ``config`` is ``dataclasses.asdict(RunConfig)``, its
            ``device`` may carry ``type``, ``peak_flops`` and ``memory_gib``.

    Returns:
        ``pred_peak_mem_gib``, ``pred_step_time_s``, ``pred_ips``, ``pred_fits`` and
        ``pred_mem_metric`` (the measured column to compare memory with), ``pred_source``
        (``profile``, or ``probe:<file> (<when measured>)``); None when the
        config cannot be rebuilt (records of an older schema).
    """
    # the config (Hydra) on use: `python -m vitfsdp.plan --help` starts without it
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from vitfsdp.config import RunConfig, to_run_config

    try:
        cfg = to_run_config(OmegaConf.create(run_info["config"]))
    except (KeyError, TypeError, ValueError, OmegaConfBaseException):
        return None
    assert isinstance(cfg, RunConfig)
    return predict_recorded(cfg, run_info.get("device") or {})


#: The profile a GPU run recorded under a profile without a GPU's peak (``local``,
#: ``virtual``) borrows its efficiency, bandwidths and latencies from: a DGX H100's
#: (conf/cluster/cuda8.yaml), so only for a run whose recorded device is an H100.
GPU_PROFILE = "cuda8"
#: The recorded device name (``device.name``, runs.csv ``device_name``) :data:`GPU_PROFILE`
#: describes.
GPU_PROFILE_DEVICE = "H100"


#: A recorded device name (whole word) -> the profile whose data sheet gives that device's
#: memory bandwidth (``memory_gbps``), for a GPU run of another device than an H100 on a
#: profile without a GPU peak (:func:`_other_gpu_config`): an MI250X GCD, frontier's.
MEMORY_GBPS_PROFILES = {"MI250X": "frontier"}


@functools.cache
def _gpu_profile_cluster(profile: str = GPU_PROFILE):
    """A profile's (default :data:`GPU_PROFILE`'s) cluster config, composed once (Hydra on
    use)."""
    # on use: Hydra and the composition only where a local GPU run is predicted
    from vitfsdp.plan.__main__ import compose_points

    [(_, cfg)] = compose_points([f"cluster={profile}", "nodes=1"])
    return cfg.cluster


def recorded_config(cfg: RunConfig, device: dict) -> tuple[RunConfig, float | None, str]:
    """The config to predict a recorded run with, the peak FLOP/s to pass
    :func:`predict`, and its ``pred_source`` where not a probe's; the one rule of the
    analysis of records and of exports (:mod:`vitfsdp.plan.exported`).

    ``device`` is run.json's ``device`` (``type``, ``name``, ``peak_flops``, ``memory_gib``;
    missing keys are unknown). A GPU run on a profile with a GPU peak, or a CPU run: ``cfg``
    and the recorded peak as :func:`predict`'s fall-back (``profile``). A GPU run on a
    profile without one (``local``, ``virtual``): where its device is an H100
    (:data:`GPU_PROFILE_DEVICE`), :data:`GPU_PROFILE`'s cluster figures (efficiency,
    bandwidths, latencies) with the run's own recorded peak FLOP/s and memory where
    recorded, else the profile's (``profile:cuda8 (recorded peak and memory)``); on any
    other GPU, :func:`_other_gpu_config`.
    """
    kind = {"cuda": "gpu", "cpu": "cpu"}.get(device.get("type"))
    peak = device.get("peak_flops")
    if kind != "gpu" or peak_flops_for(cfg, "gpu")[0] is not None:
        return cfg, peak, "profile"
    if GPU_PROFILE_DEVICE not in str(device.get("name") or ""):
        return _other_gpu_config(cfg, device)
    base = _gpu_profile_cluster()
    memory = device.get("memory_gib")
    used = [w for w, v in (("peak", peak), ("memory", memory)) if v is not None]
    figures = {"gpus_per_node": cfg.cluster.gpus_per_node, "env": cfg.cluster.env}
    if memory is not None:
        figures["device_memory_gib"] = float(memory)
    if peak is not None:  # the recorded peak is the compute dtype's: predict's fall-back
        figures.update(peak_tflops=None, peak_tflops_tf32=None, peak_tflops_fp32=None)
    cluster = dataclasses.replace(base, **figures)
    source = f"profile:{GPU_PROFILE}" + (f" (recorded {' and '.join(used)})" if used else "")
    return dataclasses.replace(cfg, cluster=cluster), peak, source


def _other_gpu_config(cfg: RunConfig, device: dict) -> tuple[RunConfig, float | None, str]:
    """:func:`recorded_config` for a GPU other than an H100 on a profile without a GPU peak
    (``local``, ``virtual``): the run's own profile with its recorded memory (memory and fit
    are predicted, the model is the device's own) and, for a one-GPU run with a recorded
    peak FLOP/s (a data sheet's, ``vitfsdp.metrics.PEAK_TABLE``, or measured), a step time
    at :data:`GPU_PROFILE`'s ``plan_efficiency`` (0.4, assumed in every data-sheet profile;
    checked on H100 runs only) with the host term measured on an H100 node; the source
    says both are assumed for the device. No step time (peak None, the source says why
    in one clause) without a recorded peak, or over more than one GPU: no profile of the
    repo gives that machine's links."""
    name = device.get("name") or "an unrecorded GPU"
    memory, peak = device.get("memory_gib"), device.get("peak_flops")
    figures = {} if memory is None else {"device_memory_gib": float(memory)}
    recorded = "recorded memory" if memory is not None else "no recorded memory: fits unknown"
    if peak is None:
        why = (f"no step time: the run recorded no peak FLOP/s for {name} "
               "(vitfsdp.metrics.PEAK_TABLE's data sheets or metrics.peak=measure give one)")
    elif cfg.world_size > 1:
        peak, why = None, (f"no step time: the links between the run's {cfg.world_size} GPUs "
                           f"({name}) are in no profile (cluster.intra_node_gbps)")
    else:
        figures["plan_efficiency"] = efficiency = _gpu_profile_cluster().plan_efficiency
        why = (f"recorded peak; plan_efficiency {efficiency:g} (assumed, checked on H100 only) "
               f"and the H100 node's measured host term, assumed for {name}; "
               + _memory_bandwidth(name, figures))
    cluster = dataclasses.replace(cfg.cluster, **figures)
    return (dataclasses.replace(cfg, cluster=cluster), peak,
            f"profile:{cfg.cluster.name} ({recorded}; {why})")


def _memory_bandwidth(name: str, figures: dict) -> str:
    """Sets ``figures["memory_gbps"]`` from the profile of :data:`MEMORY_GBPS_PROFILES` whose
    device ``name`` names, and says where it came from (or that memory-bound ops are not
    counted: no data sheet of the device's bandwidth in the repo)."""
    words = set(re.split(r"[^A-Za-z0-9]+", name))
    profile = next((p for key, p in MEMORY_GBPS_PROFILES.items() if key in words), None)
    if profile is None:
        return "memory-bound ops not counted (its memory bandwidth is in no profile)"
    figures["memory_gbps"] = gbps = _gpu_profile_cluster(profile).memory_gbps
    return f"memory bandwidth {gbps:g} GB/s (cluster={profile}'s data sheet)"


def recorded_prediction(cfg: RunConfig, device: dict) -> tuple[Prediction, str]:
    """The :class:`Prediction` of ``cfg`` on a recorded device (run.json ``device``:
    ``type``, ``name``, ``peak_flops``, ``memory_gib``; missing keys are unknown), composed by
    :func:`recorded_config`, and its ``pred_source`` (a probe's, else the profile's).

    Raises:
    """
    kind = {"cuda": "gpu", "cpu": "cpu"}.get(device.get("type"))
    cfg, peak, source = recorded_config(cfg, device)
    p = predict(cfg, peak_flops=peak, device_memory_gib=device.get("memory_gib"), device=kind)
    return p, p.source if p.source != "profile" else source


def predict_recorded(cfg: RunConfig, device: dict) -> dict:
    """:func:`predict_run`'s figures for ``cfg`` on a recorded device
    (:func:`recorded_prediction`) as ``pred_*`` columns (GiB per rank, s, global images/s):
    the one place a prediction becomes them, for records and exports alike.
    """
    p, source = recorded_prediction(cfg, device)
    return {"pred_peak_mem_gib": p.peak_mem_gib, "pred_step_time_s": p.step_time_s,
            "pred_ips": p.ips, "pred_fits": p.fits, "pred_mem_metric": p.pred_mem_metric,
            "pred_source": source}
