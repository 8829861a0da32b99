"""ViT variants of the study, built with timm's VisionTransformer, and their FLOPs per image.

Model code knows nothing of parallelism: :func:`block_classes` tells the parallel code which
modules are the FSDP units (the transformer blocks), and nothing more.

The variants are data (:data:`VARIANTS`): the ORNL study's model table (DESIGN.md) plus
``vit_tiny``, a CPU-sized model for tests and the demo.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from timm.layers import SwiGLU
from timm.models.vision_transformer import Block, VisionTransformer


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


#: Model table of DESIGN.md (ORNL ViT-FSDP study) plus ``vit_tiny`` for CPU work.
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


def build_model(cfg: ModelConfig, num_classes: int, device: str | torch.device = "cpu"):
    """Build the timm VisionTransformer of ``cfg`` with ``num_classes`` outputs.

    Input shape (B, 3, img_size, img_size); output logits (B, num_classes). Weights follow
    timm's default init; call ``torch.manual_seed`` first for identical replicas.

    Raises:
        ValueError: ``num_classes`` < 1.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes={num_classes} must be >= 1")
    s = cfg.spec
    mlp = {"mlp_layer": SwiGLU, "act_layer": torch.nn.SiLU} if s.mlp == "swiglu" else {}
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
    return {Block}


def count_params(model: torch.nn.Module) -> int:
    """Number of parameters (elements), counted on any device including meta."""
    return sum(p.numel() for p in model.parameters())


def forward_flops_per_image(cfg: ModelConfig, num_classes: int) -> float:
    """Forward-pass FLOPs for one image (multiply-add = 2 FLOPs), from the architecture.

    Counts the matmuls: patch embedding, per block QKV (3·d²), output projection (d²) and
    MLP (2·d·m for GELU, 3·d·m for SwiGLU) per token, attention scores and weighted values
    (2·n²·d), and the classifier head on the class token. Norms, softmax, activations and
    biases are left out (<1% at ViT-B size).
    Training FLOPs are 3 × forward (backward ≈ 2 × forward; Kaplan et al. 2020, "Scaling
    Laws for Neural Language Models", sec. 2.1), which :mod:`vitfsdp.metrics` applies.

    Returns:
        FLOPs per image for input (3, img_size, img_size).
    """
    s = cfg.spec
    d, m = s.width, s.mlp_dim
    num_patches = (cfg.resolved_img_size() // s.patch_size) ** 2
    n = num_patches + 1  # plus the class token
    patch_embed = 2 * num_patches * (3 * s.patch_size**2) * d
    mlp_weights = (3 if s.mlp == "swiglu" else 2) * d * m
    per_block = 2 * n * (4 * d * d + mlp_weights) + 2 * 2 * n * n * d
    head = 2 * d * num_classes
    return float(patch_embed + s.depth * per_block + head)
