"""The study's ViTs in Flax (linen), built from the same table as the timm models.

:func:`build_model` turns a :class:`vitfsdp.models.ModelConfig` into a :class:`ViT` whose
parameters match timm's ``VisionTransformer`` of :func:`vitfsdp.models.build_model` tensor for
tensor (same shapes, so the same count; transposed layouts: Flax kernels are (in, out), the
patch embedding is HWIO): class token, learned position embedding over patches + class token,
pre-norm blocks (LayerNorm eps 1e-6, qkv with bias, GELU MLP or SwiGLU), final LayerNorm,
classifier on the class token.

Initial values follow timm's distributions (:func:`vitfsdp.models.timm_vit_init_rules`), drawn
from JAX's RNG, so the values differ from the torch run's: Linear weights normal(std .02)
(timm's trunc_normal_ cuts at ±2 absolute, i.e. 100 std: never), biases 0; LayerNorm 1, 0;
patch embedding uniform(±1/√fan_in) for weight and bias (torch's Conv2d default);
``pos_embed`` normal(.02); ``cls_token`` normal(1e-6); SwiGLU gate weight normal(1e-6), bias 1.

Model code knows nothing of sharding (:mod:`vitfsdp.jax.sharding` lays out the parameters).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vitfsdp.models import ModelConfig

log = logging.getLogger(__name__)

DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}
LN_EPS = 1e-6  # timm VisionTransformer's LayerNorm epsilon

_normal02 = nn.initializers.normal(0.02)
#: A function applied to every activation (B, ...) between layers; a step whose collectives
#: XLA's SPMD partitioner places passes a sharding constraint here
#: (:func:`vitfsdp.jax.sharding.activation_constraint`; the trainer's step runs the model
#: per device and needs none). Model code knows nothing of meshes. None: identity.
Constrain = Callable[[jax.Array], jax.Array] | None


def _apply(constrain: Constrain, x: jax.Array) -> jax.Array:
    return x if constrain is None else constrain(x)


def _uniform(bound: float):
    """Uniform on ±``bound`` (torch's Conv2d/Linear ``reset_parameters``)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class Attention(nn.Module):
    """Multi-head self-attention: qkv projection (with bias), softmax(q·kᵀ/√h)·v, projection.

    Input and output (B, N, width). ``fused``: ``jax.nn.dot_product_attention`` with
    ``implementation`` (``xla``: XLA's own lowering, the einsum/softmax fused by XLA, which
    is what JAX runs when none is named; ``cudnn``: cuDNN's fused flash-attention kernel,
    chosen on a GPU by :func:`attention_implementation`); else the einsum/softmax written out.
    """

    width: int
    num_heads: int
    dtype: Any = jnp.float32
    fused: bool = True
    constrain: Constrain = None
    implementation: str = "xla"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, n, _ = x.shape
        head_dim = self.width // self.num_heads
        dense = dict(dtype=self.dtype, kernel_init=_normal02)
        qkv = _apply(self.constrain, nn.Dense(3 * self.width, name="qkv", **dense)(x))
        q, k, v = jnp.split(qkv.reshape(b, n, 3, self.num_heads, head_dim), 3, axis=2)
        q, k, v = (t[:, :, 0] for t in (q, k, v))  # (B, N, heads, head_dim)
        if self.fused:
            out = jax.nn.dot_product_attention(q, k, v, implementation=self.implementation)
        else:
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)
            weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(v.dtype)
            out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        out = _apply(self.constrain, out.reshape(b, n, self.width))
        return _apply(self.constrain, nn.Dense(self.width, name="proj", **dense)(out))


class Mlp(nn.Module):
    """timm's Mlp (width → hidden, GELU (exact erf, as torch's), hidden → width) or SwiGLU
    (fc1_g, fc1_x: width → hidden; SiLU(fc1_g(x)) · fc1_x(x); fc2: hidden → width)."""

    width: int
    hidden: int
    kind: str = "gelu"
    dtype: Any = jnp.float32
    constrain: Constrain = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense = dict(dtype=self.dtype, kernel_init=_normal02)
        if self.kind == "swiglu":
            gate = nn.Dense(self.hidden, name="fc1_g", dtype=self.dtype,
                            kernel_init=nn.initializers.normal(1e-6),
                            bias_init=nn.initializers.ones)(x)
            h = nn.silu(gate) * nn.Dense(self.hidden, name="fc1_x", **dense)(x)
        else:
            h = nn.gelu(nn.Dense(self.hidden, name="fc1", **dense)(x), approximate=False)
        return _apply(self.constrain, nn.Dense(self.width, name="fc2", **dense)(
            _apply(self.constrain, h)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    width: int
    num_heads: int
    mlp_hidden: int
    mlp: str = "gelu"
    dtype: Any = jnp.float32
    fused_attn: bool = True
    constrain: Constrain = None
    attn_impl: str = "xla"  # jax.nn.dot_product_attention's implementation (Attention)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = nn.LayerNorm(LN_EPS, dtype=self.dtype, name="norm1")(x)
        x = x + Attention(self.width, self.num_heads, self.dtype, self.fused_attn,
                          self.constrain, self.attn_impl, name="attn")(y)
        y = nn.LayerNorm(LN_EPS, dtype=self.dtype, name="norm2")(x)
        mlp = Mlp(self.width, self.mlp_hidden, self.mlp, self.dtype, self.constrain, name="mlp")
        return _apply(self.constrain, x + mlp(y))


class ViT(nn.Module):
    """timm's VisionTransformer (class token, global pool ``token``) in Flax.

    Input images (B, 3, img_size, img_size) float32, as the torch model takes them (NCHW;
    transposed to NHWC inside); output logits (B, num_classes) float32. ``dtype`` is the
    compute dtype (bf16 casts the fp32 parameters per use); ``remat`` recomputes each
    block's activations in backward (``nn.remat``); ``constrain`` is applied to the
    activations between layers (:data:`Constrain`).
    """

    img_size: int
    patch_size: int
    width: int
    depth: int
    num_heads: int
    mlp_hidden: int
    num_classes: int
    mlp: str = "gelu"
    dtype: Any = jnp.float32
    fused_attn: bool = True
    remat: bool = False
    constrain: Constrain = None
    attn_impl: str = "xla"  # xla | cudnn: jax.nn.dot_product_attention's implementation

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        p = self.patch_size
        x = jnp.transpose(images, (0, 2, 3, 1)).astype(self.dtype)
        bound = (3 * p * p) ** -0.5
        x = nn.Conv(self.width, (p, p), strides=(p, p), padding="VALID", dtype=self.dtype,
                    kernel_init=_uniform(bound), bias_init=_uniform(bound), name="patch_embed")(x)
        b = x.shape[0]
        x = _apply(self.constrain, x.reshape(b, -1, self.width))
        cls = self.param("cls_token", nn.initializers.normal(1e-6), (1, 1, self.width))
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, self.width)).astype(x.dtype), x], 1)
        x = x + self.param("pos_embed", _normal02, (1, x.shape[1], self.width)).astype(x.dtype)
        block = nn.remat(Block) if self.remat else Block
        for i in range(self.depth):
            x = block(self.width, self.num_heads, self.mlp_hidden, self.mlp, self.dtype,
                      self.fused_attn, self.constrain, self.attn_impl, name=f"blocks_{i}")(x)
        x = nn.LayerNorm(LN_EPS, dtype=self.dtype, name="norm")(x)
        head = nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=_normal02, name="head")
        return head(x[:, 0]).astype(jnp.float32)


def build_model(cfg: ModelConfig, num_classes: int, *, precision: str = "fp32",
                fused_attn: bool = True, remat: bool = False) -> ViT:
    """The Flax ViT of ``cfg`` with ``num_classes`` outputs (parameters not yet drawn).

    The MLP hidden size is computed as timm's Block computes it, ``int(width × mlp_ratio)``
    with ``mlp_ratio = mlp_dim / width`` as :func:`vitfsdp.models.build_model` passes it, so
    both builds round the same way.

    Args:
        precision: compute dtype, ``fp32`` or ``bf16``; parameters are always fp32.

    Raises:
        ValueError: ``num_classes`` < 1 or an unknown ``precision``.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes={num_classes} must be >= 1")
    if precision not in DTYPES:
        raise ValueError(f"precision={precision!r} is unknown; valid: {', '.join(DTYPES)}")
    s = cfg.spec
    return ViT(img_size=cfg.resolved_img_size(), patch_size=s.patch_size, width=s.width,
               depth=s.depth, num_heads=s.num_heads,
               mlp_hidden=int(s.width * (s.mlp_dim / s.width)), num_classes=num_classes,
               mlp=s.mlp, dtype=DTYPES[precision], fused_attn=fused_attn, remat=remat)


def attention_implementation(model: ViT) -> str:
    """The implementation :func:`choose_attention` picks (``cudnn`` or ``xla``)."""
    return choose_attention(model)[0]


def choose_attention(model: ViT) -> tuple[str, str | None]:
    """The ``jax.nn.dot_product_attention`` implementation for ``model`` on this process's
    backend: ``cudnn`` (cuDNN's fused flash attention) on a GPU when the compute dtype is
    bf16 and the attention's forward and backward at the model's shape (B=1, N tokens,
    heads, head dim) compile with it; else ``xla`` (what JAX runs when none is named).

    cuDNN's kernel takes fp16/bf16 only and head dims up to 128 in multiples of 8
    (``jax.nn.dot_product_attention``'s documentation); the compile probe also catches a
    cuDNN too old for JAX, which JAX reports only when the step is compiled. Raises nothing:
    a refused probe is logged and gives ``xla``.

    Returns:
        (the implementation, why cuDNN's was refused: the probe's error on one line, for
        run.json's ``applied.cudnn_attention_refused``; None where it was not tried or not
        refused).
    """
    if not model.fused_attn or model.dtype != jnp.bfloat16 or jax.default_backend() != "gpu":
        return "xla", None
    tokens = (model.img_size // model.patch_size) ** 2 + 1
    qkv = jax.ShapeDtypeStruct((1, tokens, model.num_heads, model.width // model.num_heads),
                               model.dtype)

    def loss(q, k, v):
        out = jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
        return out.astype(jnp.float32).sum()

    try:
        jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(qkv, qkv, qkv).compile()
    except Exception as e:  # noqa: BLE001 - any refusal means: not cuDNN here
        why = " ".join(f"{type(e).__name__}: {e}".split())[:1000]
        log.warning("cuDNN attention refused at %s (%s); using XLA's", qkv.shape, why)
        return "xla", f"at (B, N, heads, head dim) {qkv.shape}: {why}"
    return "cudnn", None


def dummy_input(model: ViT, batch_size: int = 1) -> jax.ShapeDtypeStruct:
    """The shape and dtype of a batch of images for ``model``: (B, 3, img_size, img_size)."""
    return jax.ShapeDtypeStruct((batch_size, 3, model.img_size, model.img_size), jnp.float32)


def param_shapes(model: ViT) -> Any:
    """The parameter pytree of ``model`` as ``jax.ShapeDtypeStruct`` leaves, from
    ``jax.eval_shape`` (nothing allocated, nothing computed)."""
    variables = jax.eval_shape(model.init, jax.random.key(0), dummy_input(model))
    return variables["params"]


def count_params(params: Any) -> int:
    """Number of parameter elements of a pytree of arrays or ``ShapeDtypeStruct`` leaves."""
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))
