"""ViT variants of the study, built with timm's VisionTransformer, and their FLOPs per image
(forward, model training = 3 × forward, hardware training = + the recomputed forward under
activation checkpointing).

Model code knows nothing of parallelism: :func:`block_classes` tells the parallel code which
modules are the FSDP units (the transformer blocks), and nothing more.

The variants are data (:data:`VARIANTS`): the ORNL study's model table (Table 1 of
github.com/jqyin/AmSC-At-Scale-Services-OLCF, ViT-FSDP/README.md) plus ``vit_tiny``, a
CPU-sized model for tests and the demo.

Billion-parameter rows are built on the meta device (``build_model(..., device="meta")``, no
memory) and their weights drawn later by :class:`ViTInit`, which can draw any rows of any
parameter alone: the parallel code materializes each rank's part only.

torch and timm load on first use, inside the functions that need them: the config and the
plan read the model table without them.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and timm are imported where a model is built: configs import this
    import torch
    from timm.models.vision_transformer import VisionTransformer


@dataclass(frozen=True)
class ViTSpec:
    """Architecture of one ViT variant.

    Attributes:
        width: embedding dimension (channels per token).
        depth: number of transformer blocks.
        mlp_dim: hidden size of each block's MLP (for SwiGLU: of each of its two branches).
        num_heads: attention heads per block.
        patch_size: square patch side in pixels.
        img_size: default square input side in pixels.
        mlp: ``gelu`` (timm's Mlp: d→m→d) or ``swiglu`` (timm's SwiGLU: d→2m, SiLU gate, m→d).
        published_params_m: parameter count in millions from the study's table (1000 classes),
            ``None`` where the variant is not from the table.
    """

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    patch_size: int
    img_size: int = 224
    mlp: str = "gelu"
    published_params_m: float | None = None


def _smart_vit(width: int, depth: int, heads: int, patch: int, params_m: float,
               mlp_dim: int | None = None) -> ViTSpec:
    """A row of the ORNL study's table. Its reference code (jqyin/AmSC-At-Scale-Services-OLCF,
    ViT-FSDP/src/config/vit_smart_config.py, building lessw2020/transformer_framework's
    smart_vit) uses a SwiGLU MLP of hidden size int(2.6875 × width), about the parameters of
    the nominal 4 × width GELU MLP the table lists, except ViT-5B, whose config sets
    mlp_ratio = 15360 / 1792."""
    hidden = mlp_dim or int(2.6875 * width)
    return ViTSpec(width, depth, hidden, heads, patch_size=patch, mlp="swiglu",
                   published_params_m=params_m)


#: The ORNL ViT-FSDP study's model table (see the module docstring) plus ``vit_tiny`` for CPU work.
#: ``vit_tiny`` is *not* timm's ViT-Ti: it is 4 blocks of width 64 on 16x16 inputs, sized so
#: that eight gloo ranks train it on two CPU cores in seconds.
VARIANTS: dict[str, ViTSpec] = {
    "vit_tiny": ViTSpec(64, 4, 128, 4, patch_size=4, img_size=16),
    "vit_base": _smart_vit(768, 12, 12, patch=16, params_m=87),
    "vit_huge": _smart_vit(1280, 32, 16, patch=14, params_m=635),
    "vit_1b": _smart_vit(1536, 32, 16, patch=14, params_m=914),
    "vit_3b": _smart_vit(2816, 32, 32, patch=14, params_m=3067),
    "vit_5b": _smart_vit(1792, 56, 16, patch=14, params_m=5349, mlp_dim=15360),
    "vit_15b": _smart_vit(5040, 48, 48, patch=14, params_m=14720),
    # timm's registered ViTs of the PyTorch-vs-JAX study: same architecture as
    # timm.create_model(name) (GELU MLP, class token, qkv bias), built from this table.
    # ViT-S/16 (21.7M parameters) is the demo's: at 32 px its model state (~0.32 GiB a rank)
    # stands out above a CPU rank's baseline, so sharding shows; 8 gloo ranks train it on 2 cores.
    "vit_small_patch16_224": ViTSpec(384, 12, 1536, 6, patch_size=16),
    "vit_large_patch16_224": ViTSpec(1024, 24, 4096, 16, patch_size=16),
    "vit_huge_patch14_224": ViTSpec(1280, 32, 5120, 16, patch_size=14),
    "vit_giant_patch14_224": ViTSpec(1408, 40, 6144, 16, patch_size=14),
    "vit_gigantic_patch14_224": ViTSpec(1664, 48, 8192, 16, patch_size=14),
}


@dataclass
class ModelConfig:
    """Which ViT to build (``model=<name>``)."""

    name: str = "vit_tiny"  # a key of VARIANTS
    img_size: int | None = None  # input side in pixels; None = the variant's default
    num_classes: int | None = None  # classifier outputs; None = the data set's class count

    def __post_init__(self) -> None:
        if self.name not in VARIANTS:
            raise ValueError(
                f"model.name={self.name!r} is unknown; valid names: {', '.join(VARIANTS)}"
            )
        spec = VARIANTS[self.name]
        if self.img_size is not None and (self.img_size < 1 or self.img_size % spec.patch_size):
            raise ValueError(
                f"model.img_size={self.img_size} must be a positive multiple of the patch size "
                f"{spec.patch_size} of {self.name}"
            )
        if self.num_classes is not None and self.num_classes < 1:
            raise ValueError(f"model.num_classes={self.num_classes} must be >= 1")

    @property
    def spec(self) -> ViTSpec:
        """The architecture row of :data:`VARIANTS` for ``name``."""
        return VARIANTS[self.name]

    def resolved_img_size(self) -> int:
        """Input side in pixels after defaults."""
        return self.img_size or self.spec.img_size

    def num_tokens(self) -> int:
        """Tokens per image: ``(img_size / patch_size)²`` patches and the class token."""
        return (self.resolved_img_size() // self.spec.patch_size) ** 2 + 1


def build_model(cfg: ModelConfig, num_classes: int, device: str | torch.device = "cpu"):
    """Build the timm VisionTransformer of ``cfg`` with ``num_classes`` outputs.

    Input shape (B, 3, img_size, img_size); output logits (B, num_classes). On a real device
    the weights follow timm's default init from the global RNG (call ``torch.manual_seed``
    first for identical replicas); on ``device="meta"`` timm's init is skipped (nothing to
    draw) and :class:`ViTInit` draws the weights after materialization, as training does.

    Raises:
        ValueError: ``num_classes`` < 1.
    """
    # torch and timm on use (module docstring)
    import torch
    from timm.layers import SwiGLU
    from timm.models.vision_transformer import VisionTransformer

    if num_classes < 1:
        raise ValueError(f"num_classes={num_classes} must be >= 1")
    s = cfg.spec
    mlp = {"mlp_layer": SwiGLU, "act_layer": torch.nn.SiLU} if s.mlp == "swiglu" else {}
    if torch.device(device).type == "meta":
        mlp["weight_init"] = "skip"
    with torch.device(device):
        return VisionTransformer(
            img_size=cfg.resolved_img_size(),
            patch_size=s.patch_size,
            embed_dim=s.width,
            depth=s.depth,
            num_heads=s.num_heads,
            mlp_ratio=s.mlp_dim / s.width,
            num_classes=num_classes,
            **mlp,
        )


def block_classes() -> set[type[torch.nn.Module]]:
    """The module classes that are the FSDP units (auto-wrap) of every variant."""
    # torch and timm on use (module docstring)
    from timm.models.vision_transformer import Block

    return {Block}


def count_params(model: torch.nn.Module) -> int:
    """Number of parameters (elements), counted on any device including meta."""
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class ViTFlops:
    """FLOPs of one image through a ViT (a multiply-add counts as 2).

    Attributes:
        forward: the whole forward pass.
        block: the forward of one transformer block.
        block_recompute: what activation checkpointing runs again of one block in backward:
            the block's forward without the MLP's output projection (m→d), whose output
            nothing in backward needs, so torch's non-reentrant checkpoint stops before it
            (``torch.utils.checkpoint`` early stop, the default) and XLA drops it as dead
            code under ``jax.checkpoint``. Measured with FlopCounterMode in
            tests/unit/test_flops.py.
    """

    forward: float
    block: float
    block_recompute: float


def vit_flops(spec: ViTSpec, img_size: int, num_classes: int) -> ViTFlops:
    """Forward FLOPs of one image through the ViT ``spec`` at ``img_size`` × ``img_size``.

    Counts the matmuls, which is what ``torch.utils.flop_counter.FlopCounterMode`` counts:
    the patch embedding (a conv of ``3·p²`` inputs per output, per patch), per block and
    token the QKV (``3·d²``) and output projections (``d²``) and the MLP (``2·d·m`` for
    GELU, ``3·d·m`` for SwiGLU's two input branches and its output), per block the
    attention scores q·kᵀ and the weighted values (``2·n²·d``, n = patches + class token),
    and the classifier head on the class token (``d·classes``). Norms, softmax,
    activations, residual adds and biases are left out (under 0.5% at ViT-B size).

    Raises:
        ValueError: ``img_size`` is not a positive multiple of the patch size.
    """
    if img_size < 1 or img_size % spec.patch_size:
        raise ValueError(f"img_size={img_size} must be a positive multiple of the patch "
                         f"size {spec.patch_size}")
    d, m = spec.width, spec.mlp_dim
    num_patches = (img_size // spec.patch_size) ** 2
    n = num_patches + 1  # plus the class token
    patch_embed = 2 * num_patches * (3 * spec.patch_size**2) * d
    mlp_weights = (3 if spec.mlp == "swiglu" else 2) * d * m
    block = 2 * n * (4 * d * d + mlp_weights) + 2 * 2 * n * n * d
    head = 2 * d * num_classes
    return ViTFlops(forward=float(patch_embed + spec.depth * block + head),
                    block=float(block), block_recompute=float(block - 2 * n * m * d))


def forward_flops_per_image(cfg: ModelConfig, num_classes: int) -> float:
    """Forward-pass FLOPs for one image of ``cfg`` (input (3, img_size, img_size)) with
    ``num_classes`` outputs; see :func:`vit_flops` for what is counted.

    Checked in tests/unit/test_flops.py against ``FlopCounterMode`` on timm's own models and
    against timm's published figures (results/benchmark-infer-amp-nchw-pt240-cu124-
    rtx3090.csv of huggingface/pytorch-image-models, column ``infer_gmacs``, GMACs =
    FLOPs / 2: ViT-B/16 17.58, ViT-L/16 61.6, ViT-H/14 167.4 at 224).
    """
    return vit_flops(cfg.spec, cfg.resolved_img_size(), num_classes).forward


def train_flops_per_image(cfg: ModelConfig, num_classes: int) -> float:
    """MODEL training FLOPs per image: 3 × forward (the backward computes the gradients
    of the inputs and of the weights, 2 × forward; Kaplan et al. 2020, "Scaling Laws for
    Neural Language Models", sec. 2.1). What MFU counts: recomputation is not useful work
    (Chowdhery et al. 2022, "PaLM", appendix B)."""
    return 3 * forward_flops_per_image(cfg, num_classes)


def hardware_flops_per_image(cfg: ModelConfig, num_classes: int,
                             num_checkpointed_blocks: int = 0) -> float:
    """HARDWARE training FLOPs per image: :func:`train_flops_per_image` plus what
    activation checkpointing recomputes in backward, :attr:`ViTFlops.block_recompute` per
    checkpointed block (about 3.8 × forward in all with every block checkpointed: the
    patch embedding, the head and each block's MLP output projection are not run again).
    What HFU counts (PaLM, appendix B).

    Args:
        num_checkpointed_blocks: blocks whose forward runs twice (0 = no checkpointing;
            ``spec.depth`` under ``train.activation_checkpointing=true``).

    Raises:
        ValueError: ``num_checkpointed_blocks`` outside 0..depth.
    """
    if not 0 <= num_checkpointed_blocks <= cfg.spec.depth:
        raise ValueError(f"num_checkpointed_blocks={num_checkpointed_blocks} must be in "
                         f"0..{cfg.spec.depth} (the depth of {cfg.name})")
    recompute = vit_flops(cfg.spec, cfg.resolved_img_size(), num_classes).block_recompute
    return train_flops_per_image(cfg, num_classes) + num_checkpointed_blocks * recompute


def set_fused_attn(model: torch.nn.Module, enabled: bool) -> int:
    """Switch timm's fused scaled-dot-product attention (``torch.nn.functional.
    scaled_dot_product_attention``) on or off in every attention module of ``model``; off,
    timm computes softmax(q·kᵀ·scale)·v explicitly. Returns the number of modules switched."""
    switched = 0
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = enabled
            switched += 1
    return switched


@dataclass(frozen=True)
class InitRule:
    """The distribution of one parameter's initial value (every element i.i.d.).

    Attributes:
        kind: ``trunc_normal`` (mean 0, std ``scale``, cut at ±2 absolute, as timm's
            ``trunc_normal_``), ``normal`` (mean 0, std ``scale``), ``uniform`` (on
            ±``scale``), ``zeros`` or ``ones``.
        scale: the std (normal kinds) or bound (uniform); unused for constants.
    """

    kind: str
    scale: float = 0.0


#: timm's ``trunc_normal_`` cuts at ±2 (absolute, whatever the std).
TRUNC_BOUND = 2.0
#: A parameter's initial value is drawn in blocks of dim-0 rows of about this many elements,
#: each from its own seeded generator, so any range of rows (a rank's shard) is drawn alone.
INIT_BLOCK_NUMEL = 1 << 20


def timm_vit_init_rules(model: VisionTransformer) -> dict[tuple[torch.nn.Module, str], InitRule]:
    """Per (owning module, parameter name): the distribution timm 1.0 gives it.

    Source: timm/models/vision_transformer.py, ``VisionTransformer.init_weights`` with the
    default mode '' (``init_weights_vit_timm``) applied by ``named_apply`` children first:
    every Linear weight trunc_normal(std .02) and bias 0, then ``SwiGLU.init_weights``
    overrides the gate ``fc1_g`` (weight normal(std 1e-6), bias 1); ``pos_embed``
    trunc_normal(.02), ``cls_token``/``reg_token`` normal(1e-6). Modules timm leaves at their
    construction init keep torch's ``reset_parameters``: LayerNorm weight 1 and bias 0, the
    patch-embedding Conv2d kaiming_uniform(a=√5) = uniform(±1/√fan_in) for weight and bias.
    """
    # torch and timm on use (module docstring)
    import torch
    from timm.layers import SwiGLU

    rules: dict[tuple[torch.nn.Module, str], InitRule] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            rules[module, "weight"] = InitRule("trunc_normal", 0.02)
            rules[module, "bias"] = InitRule("zeros")
        elif isinstance(module, torch.nn.LayerNorm):
            rules[module, "weight"], rules[module, "bias"] = InitRule("ones"), InitRule("zeros")
        elif isinstance(module, torch.nn.Conv2d):
            fan_in = module.weight[0].numel()
            rules[module, "weight"] = rules[module, "bias"] = InitRule("uniform", fan_in**-0.5)
    for module in model.modules():
        if isinstance(module, SwiGLU):
            rules[module.fc1_g, "weight"] = InitRule("normal", 1e-6)
            rules[module.fc1_g, "bias"] = InitRule("ones")
    rules[model, "pos_embed"] = InitRule("trunc_normal", 0.02)
    rules[model, "cls_token"] = rules[model, "reg_token"] = InitRule("normal", 1e-6)
    return rules


def _no_grad(method: Callable) -> Callable:
    """``@torch.no_grad()``, importing torch at the first call rather than at this module's
    import (the configs import this module and must start without torch)."""

    @functools.wraps(method)
    def no_grad_method(*args, **kwargs):
        # torch and timm on use (module docstring)
        import torch

        with torch.no_grad():
            return method(*args, **kwargs)

    return no_grad_method


class ViTInit:
    """timm's VisionTransformer initialization, drawn so that any rows of any parameter can
    be produced alone: identically in a single process, on every rank, whatever the sharding.

    The distributions are timm's (:func:`timm_vit_init_rules`); the values are not the ones
    timm draws. timm draws from the global RNG in construction order, which a meta-device
    build never runs, and a rank materializing only its shard cannot replay. Instead each
    block of dim-0 rows (about :data:`INIT_BLOCK_NUMEL` elements) of a parameter is drawn
    from a generator seeded by (seed, the parameter's name in the unwrapped model, block
    index), on the device it is written to. Every path of ``vitfsdp.train`` (single process,
    DDP, FSDP1 and FSDP2 with every strategy) starts from this init, so they all start from
    the same weights for the same seed (and device type: CPU and CUDA generators differ).

    Args:
        model: the unwrapped model, usually on the meta device; the names and shapes of its
            parameters are taken now, so wrappers added later do not change the draw.
        seed: ``train.seed``.

    Raises:
        ValueError: a parameter of ``model`` has no rule (an architecture timm's rules do
            not cover).
    """

    def __init__(self, model: VisionTransformer, seed: int) -> None:
        self.seed = seed
        self._model = model
        rules = timm_vit_init_rules(model)
        self._params: dict[tuple[torch.nn.Module, str], tuple[str, torch.Size, InitRule]] = {}
        for prefix, module in model.named_modules():
            for name, p in module.named_parameters(recurse=False):
                fqn = f"{prefix}.{name}" if prefix else name
                if (module, name) not in rules:
                    raise ValueError(f"no init rule for parameter {fqn} of "
                                     f"{type(module).__name__}; add one to timm_vit_init_rules")
                self._params[module, name] = (fqn, p.shape, rules[module, name])

    def params(self) -> Iterator[tuple[torch.nn.Module, str]]:
        """Every (owning module, parameter name) of the model, in ``named_modules`` order."""
        return iter(self._params)

    @_no_grad
    def fill_(self, module: torch.nn.Module, name: str, out: torch.Tensor,
              row_start: int = 0) -> torch.Tensor:
        """Write rows ``row_start`` to ``row_start + out.shape[0]`` (dim 0) of the initial
        value of parameter ``name`` of ``module`` into ``out`` (contiguous, on any device, any
        float dtype); a 0-dim parameter is one row. Returns ``out``.

        Raises:
            KeyError: ``(module, name)`` is not a parameter of the model given at construction.
        """
        # torch and timm on use (module docstring)
        import torch

        fqn, shape, rule = self._params[module, name]
        if rule.kind in ("zeros", "ones"):
            return out.fill_(0.0 if rule.kind == "zeros" else 1.0)
        rows = out.view(-1, *shape[1:])  # a 0-dim parameter as one row
        stop = row_start + rows.shape[0]
        per_block = max(1, INIT_BLOCK_NUMEL // max(1, math.prod(shape[1:])))
        for block in range(row_start // per_block, -(-stop // per_block)):
            lo = block * per_block
            hi = min(lo + per_block, shape[0] if shape else 1)
            a, b = max(lo, row_start), min(hi, stop)
            target = rows[a - row_start:b - row_start]
            if (a, b) == (lo, hi) and target.dtype == torch.float32:
                self._draw(rule, target, fqn, block)  # the whole block: draw in place
            else:
                values = torch.empty((hi - lo, *shape[1:]), device=out.device)
                target.copy_(self._draw(rule, values, fqn, block)[a - lo:b - lo])
        return out

    @_no_grad
    def init_model_(self, model: torch.nn.Module) -> torch.nn.Module:
        """Fill every parameter of ``model`` (the model given at construction, materialized
        and unsharded, e.g. after ``to_empty``) with its whole initial value.

        Raises:
            ValueError: ``model`` is not the model given at construction.
        """
        if model is not self._model:
            raise ValueError("init_model_ fills the model this ViTInit was built for")
        for module, name in self.params():
            self.fill_(module, name, getattr(module, name))
        return model

    def _draw(self, rule: InitRule, out: torch.Tensor, fqn: str, block: int) -> torch.Tensor:
        """Draw ``out`` (one whole block, contiguous fp32) from the block's own generator."""
        # torch and timm on use (module docstring)
        import torch

        key = hashlib.blake2b(f"{self.seed}/{fqn}/{block}".encode(), digest_size=8).digest()
        gen = torch.Generator(device=out.device)
        gen.manual_seed(int.from_bytes(key, "little") & (2**63 - 1))
        if rule.kind == "trunc_normal":
            # the truncated normal by rejection: normal values, those outside the bounds drawn
            # again. Not torch.nn.init.trunc_normal_: in torch 2.11 its inverse-CDF draw
            # turned a uniform value at the end of its range into ±inf, clamped to ±2 (100
            # std at std .02): one weight in some 2^24-2^25 (39 in ViT-H/14), in neither timm's
            # distribution nor JAX's init (tests/unit/test_models.py)
            out.normal_(0.0, rule.scale, generator=gen)
            outside = out.abs() > TRUNC_BOUND
            while bool(outside.any()):  # at 100 std: never, in practice
                out[outside] = torch.empty_like(out[outside]).normal_(0.0, rule.scale,
                                                                      generator=gen)
                outside = out.abs() > TRUNC_BOUND
            return out
        if rule.kind == "normal":
            return out.normal_(0.0, rule.scale, generator=gen)
        if rule.kind == "uniform":
            return out.uniform_(-rule.scale, rule.scale, generator=gen)
        raise AssertionError(f"unknown init kind {rule.kind}")
