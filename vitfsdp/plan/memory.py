"""Predicted memory per rank: model state, FSDP's unsharded buffers, activations, overhead.

Every figure is bytes held by one rank (one GPU, or one CPU process) at the peak of a
training step, without building the model (:func:`model_sizes` counts the parameters from
the architecture table, as timm builds it).

Model state of AdamW training (ZeRO, Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", sec. 3 and 5; FSDP, Zhao et al. 2023, "PyTorch
FSDP: Experiences on Scaling Fully Sharded Data Parallel", sec. 3), per rank:

- parameters: fp32, 4 bytes each, divided by the shard group (the whole world for
  FULL_SHARD and SHARD_GRAD_OP, ``k`` for HYBRID_<k>GPU, 1 for NO_SHARD and DDP);
- gradients: fp32, 4 bytes each, sharded like the parameters (reduce-scatter output);
- optimizer: AdamW's two fp32 moments, 8 bytes a parameter, sharded like the parameters.

On top, FSDP all-gathers one unit (a transformer block, or ``strategy.blocks_per_unit``
consecutive blocks: :func:`fsdp_units`) at a time in the parameter dtype (2 bytes under bf16
or fp16), two with backward prefetch; see :func:`unsharded_bytes`.
Activations: :func:`activation_bytes`. How these add up to a peak: :func:`memory_breakdown`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from vitfsdp.models import ModelConfig, ViTSpec
from vitfsdp.parallel import StrategyConfig

GIB = 1024**3
FP32_BYTES = 4
ADAMW_STATES = 2  # exp_avg and exp_avg_sq
#: bytes per element of each ``precision`` / ``mixed_precision.*`` dtype.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: Resident set of a CPU rank before any model exists: the interpreter with torch, timm and
#: vitfsdp imported and a gloo process group. 0.71 GiB measured for the imports (``python -c
#: "import resource, torch, timm, vitfsdp.train; print(resource.getrusage(
#: resource.RUSAGE_SELF).ru_maxrss)"``; undated, torch 2.x on Linux x86-64, no host
#: recorded) plus 0.09 GiB assumed for a training rank's data and threads.
CPU_BASELINE_GIB = 0.8
#: Reserved over allocated on a GPU: the caching allocator keeps freed blocks for reuse and
#: splits large ones (PyTorch docs, "CUDA semantics: memory management"). Assumed 15% of the
#: allocated peak; ``peak_mem_reserved_gib - peak_mem_allocated_gib`` of a calibration sweep
#: shows the real figure.
GPU_ALLOCATOR_OVERHEAD = 0.15
#: Device memory a GPU rank holds outside torch's caching allocator with no communicator of
#: more than one rank: the CUDA context, the libraries' handles and workspaces, NCCL's
#: one-rank communicator. Measured: NVML's used memory (``device_mem_used_gib``) less torch's
#: reserved peak (``peak_mem_reserved_gib``) is 1.768 GiB in each of the 8 runs of
#: docs/data/gpu-h100-2026-11-26-sweep-runs.csv (data rows 1-8) and of the 6 torch runs of
#: docs/data/gpu-h100-2026-11-27-stall-runs.csv (rows 1-6): one H100 80GB HBM3, driver
#: 580.159.04, CUDA 13.0, torch 2.11, world size 1. NVML's used memory counts the driver's
#: own reserve too (NVML API reference, ``nvmlMemory_t.used``: "Sum of Reserved and
#: Allocated"), which may lie outside the 79.18 GiB CUDA reports as the device's (nvidia-smi's
#: 81,559 MiB less that: at most 0.47 GiB): kept in, so the term may be that much high.
#: ROCm (HIP context) has no record here: the same figure is assumed.
GPU_CONTEXT_GIB = 1.77
#: Device memory of one NCCL (RCCL) communicator of more than one rank: its channels' buffers
#: (``NCCL_BUFFSIZE``, 4 MiB by default, per channel and peer for the Simple protocol, and the
#: LL and LL128 buffers; NCCL's environment-variable documentation). Published, not measured
#: here (no multi-GPU record with NVML's figure in docs/data): 688 MB for each communicator of
#: 3-4 ranks, 544 MB of 2, on 4 A100s with NVLink under PyTorch, a 4 MB all-reduce each
#: (NVIDIA/nccl issue #964; taken as MiB, the larger reading). NCCL's maintainers: the buffers
#: grow with the number of channels (an H100's NVLink 4 takes more channels than an A100's,
#: so this may be low there) and not with the ranks beyond 2 nodes (NVIDIA/nccl #864).
NCCL_COMMUNICATOR_GIB = 688 / 1024


@dataclass(frozen=True)
class ModelSizes:
    """Parameter counts of one model (elements), as :func:`model_sizes` counts them."""

    num_params: int  # the whole model
    unit_params: int  # the largest FSDP unit (a transformer block)
    num_units: int  # transformer blocks (FSDP units besides the root)

    @property
    def root_params(self) -> int:
        """Parameters outside every block: patch embedding, position embedding, class
        token, final norm, head (the root FSDP unit)."""
        return self.num_params - self.num_units * self.unit_params


def vit_sizes(spec: ViTSpec, img_size: int, num_classes: int) -> ModelSizes:
    """Parameter counts of timm's ``VisionTransformer`` as :func:`vitfsdp.models.build_model`
    builds ``spec`` (class token, learned position embedding, qkv and projection biases, a
    final LayerNorm, a linear head), counted from the architecture without building it.

    Per block (d = width, h = MLP hidden size ``int(d * (mlp_dim / d))``, as timm rounds its
    ``mlp_ratio``): two LayerNorms (``2·2d``), QKV (``3d² + 3d``), the output projection
    (``d² + d``) and the MLP: GELU ``d·h + h + h·d + d``, SwiGLU two input branches
    (``2(d·h + h)``) and ``h·d + d``. Outside the blocks: the patch embedding (a conv,
    ``3p²·d + d``), the class token (``d``), the position embedding (``(patches + 1)·d``),
    the final LayerNorm (``2d``) and the head (``d·classes + classes``). Equal to
    ``count_params`` of the meta-device build for every variant (tests check it), without
    importing torch or timm.

    Args:
        spec: the architecture (:data:`vitfsdp.models.VARIANTS`).
        img_size: input side in pixels (a multiple of ``spec.patch_size``).
        num_classes: classifier outputs.
    """
    d, p = spec.width, spec.patch_size
    hidden = int(d * (spec.mlp_dim / d))
    branches = 2 if spec.mlp == "swiglu" else 1
    mlp = branches * (d * hidden + hidden) + hidden * d + d
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + mlp
    patches = (img_size // p) ** 2
    root = (3 * p * p * d + d) + d + (patches + 1) * d + 2 * d + (d * num_classes + num_classes)
    return ModelSizes(root + spec.depth * block, block, spec.depth)


def fsdp_units(sizes: ModelSizes, blocks_per_unit: int) -> tuple[int, int]:
    """(FSDP units besides the root, parameters of the largest) when each unit holds
    ``blocks_per_unit`` consecutive blocks (``strategy.blocks_per_unit``; the last unit the
    rest): ``ceil(blocks / k)`` units of ``k`` blocks' parameters."""
    k = min(blocks_per_unit, sizes.num_units)
    return -(-sizes.num_units // k), k * sizes.unit_params


@functools.lru_cache(maxsize=256)
def _sizes(name: str, img_size: int | None, num_classes: int) -> ModelSizes:
    model = ModelConfig(name=name, img_size=img_size)
    return vit_sizes(model.spec, model.resolved_img_size(), num_classes)


def model_sizes(model: ModelConfig, num_classes: int) -> ModelSizes:
    """Parameter counts of ``model`` with ``num_classes`` outputs (:func:`vit_sizes`,
    cached)."""
    return _sizes(model.name, model.img_size, num_classes)


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

    Counted from the architecture (:func:`model_sizes`): nothing is built, whatever its size.
    ``precision`` is the dtype parameters are gathered in (fp32 | bf16 | fp16; a run's
    ``precision_settings().param_dtype``).
    """
    sizes = model_sizes(model, num_classes)
    group = strategy.shard_group(world_size)
    shard = -(-sizes.num_params // group)  # FSDP pads the flat parameter to the group
    unit = fsdp_units(sizes, strategy.blocks_per_unit)[1] * DTYPE_BYTES[precision] \
        if strategy.is_fsdp else 0
    return StateBytes(
        num_params=sizes.num_params,
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


def activation_bytes(model: ModelConfig, num_classes: int, local_batch_size: int, *,
                     dtype: str, residual_dtype: str | None = None, fused_attn: bool = True,
                     checkpointing: bool = False, compiled: bool = False) -> int:
    """Bytes of activations saved for backward by one rank at the end of its forward.

    Source: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", sec. 4.1 (per layer ``sbh(34 + 5as/h)`` bytes in 16-bit), adapted to timm's
    ViT block as the autograd graph saves it, per token of a block (n = patches + class
    token): the block input (LayerNorm 1), LayerNorm 1's output (the QKV matmul), the QKV
    output (q, k, v: 3d), the attention output (also the projection's input), the residual
    sum (LayerNorm 2) and its norm (the MLP input): 8·d elements; the MLP: GELU keeps its
    input and output (2·m), SwiGLU its gate, its SiLU, its value branch and their product
    (4·m); compiled (``compiled``: ``torch.compile`` per block, inductor's min-cut partition)
    SwiGLU keeps 3·m, its SiLU recomputed in backward, while GELU keeps 2·m as in eager.
    (Measured, not fitted: the saved-for-backward outputs of the partitioned forward graph of
    one block, ``TORCH_LOGS=aot_graphs``, torch 2.14 on CPU, and autograd's saved tensors of
    the eager block, both equal to these counts; docs/plan.md, "Activations".) No dropout
    masks (the study's ViTs train without dropout). Fused attention
    (``scaled_dot_product_attention``, flash/memory-efficient kernels) saves only a fp32
    log-sum-exp per head and token; written out (``kernels.fused_attn=false``) it keeps the
    softmax output (heads·n per token), and its matmuls keep contiguous copies of the scaled
    q, kᵀ and v in place of the QKV output, the projection's input in place of the kernel's
    output (the same 6·d).

    Assumptions: every saved tensor is in ``dtype`` (the compute dtype), except the residual
    stream (block input and residual sum, 2·d) in ``residual_dtype`` (fp32 under DDP's
    autocast, which casts matmul inputs only). The patch embedding's input image (fp32) and
    the head's logits (fp32) are added once. With ``checkpointing`` only each block's input
    is kept, plus one block's activations while it is recomputed in backward.

    Returns:
        bytes, for ``local_batch_size`` images.
    """
    s = model.spec
    d = s.width
    n = model.num_tokens()
    res = DTYPE_BYTES[residual_dtype or dtype]
    block = block_activation_bytes(model, dtype=dtype, residual_dtype=residual_dtype,
                                   fused_attn=fused_attn, compiled=compiled)
    blocks = s.depth * n * d * res + block if checkpointing else s.depth * block
    img = model.resolved_img_size()
    stem_head = 3 * img * img * FP32_BYTES + n * d * res + num_classes * FP32_BYTES
    return local_batch_size * (blocks + stem_head)


def block_activation_bytes(model: ModelConfig, *, dtype: str, residual_dtype: str | None = None,
                           fused_attn: bool = True, compiled: bool = False) -> int:
    """Bytes one transformer block saves for backward for one image: the per-block term of
    :func:`activation_bytes` (its docstring lists what is counted), ``n`` tokens of
    ``2·d`` residual-stream elements, ``6·d`` + the MLP's (GELU 2·m; SwiGLU 4·m, 3·m
    compiled) in ``dtype``, and the attention's (fp32 log-sum-exp per head, or
    the softmax written out). Under autocast (``residual_dtype`` other than ``dtype``: DDP's)
    an eager SwiGLU block saves one ``d`` more: autocast casts the fp32 LayerNorm output to
    the compute dtype once for each of SwiGLU's two input projections (``fc1_g``,
    ``fc1_x``; it caches casts of parameters only), and each linear keeps its own copy
    (saved-tensor hooks, CPU and CUDA autocast alike: the H100's 13,187,984 bytes for one
    vit_base block at batch 2, this count's 13,181,664; compiled, inductor casts once).
    LayerNorm's per-token mean and reciprocal deviation (4 values a token) are left out:
    under 0.1 % of the block.

    Returns:
        bytes per image.
    """
    s = model.spec
    d, m, heads = s.width, s.mlp_dim, s.num_heads
    n = model.num_tokens()
    el, res = DTYPE_BYTES[dtype], DTYPE_BYTES[residual_dtype or dtype]
    mlp = ((3 if compiled else 4) if s.mlp == "swiglu" else 2) * m
    autocast = residual_dtype is not None and residual_dtype != dtype
    if s.mlp == "swiglu" and autocast and not compiled:
        mlp += d  # the LayerNorm output cast again for the second input projection
    attn = 4 * heads if fused_attn else heads * n * el  # lse (fp32) | the softmax output
    return n * (2 * d * res + (6 * d + mlp) * el + attn)
