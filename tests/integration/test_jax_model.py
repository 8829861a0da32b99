"""The Flax ViT against the timm build: parameter counts for every model (jax.eval_shape and
the meta device: nothing allocated), tensor shapes, and the forward pass of the tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it
import jax
import jax.numpy as jnp

from vitfsdp import models
from vitfsdp.jax.model import ViT, build_model, count_params, param_shapes

jax.config.update("jax_num_cpu_devices", 8)  # as the other test_jax files: one setting


@pytest.mark.parametrize("name", list(models.VARIANTS))
def test_param_count_equals_torch_build(name):
    cfg = models.ModelConfig(name)
    shapes = param_shapes(build_model(cfg, 1000))
    torch_model = models.build_model(cfg, 1000, device="meta")
    assert count_params(shapes) == models.count_params(torch_model)
    # tensor for tensor: the same sizes (Flax kernels are transposed, so compare numel)
    jax_sizes = sorted(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    torch_sizes = sorted(p.numel() for p in torch_model.parameters())
    assert jax_sizes == torch_sizes
    published = cfg.spec.published_params_m
    if published is not None:  # the study's table, to the nearest million or better
        assert count_params(shapes) / 1e6 == pytest.approx(published, rel=2e-3)


def test_tiny_layout_matches_timm_names():
    shapes = param_shapes(build_model(models.ModelConfig("vit_tiny"), 10))
    block = shapes["blocks_0"]
    assert block["attn"]["qkv"]["kernel"].shape == (64, 192)  # timm qkv.weight (192, 64)
    assert block["mlp"]["fc1"]["kernel"].shape == (64, 128)
    assert shapes["patch_embed"]["kernel"].shape == (4, 4, 3, 64)  # HWIO of (64, 3, 4, 4)
    assert shapes["pos_embed"].shape == (1, 17, 64) and shapes["cls_token"].shape == (1, 1, 64)
    assert shapes["head"]["kernel"].shape == (64, 10)
    swiglu = param_shapes(build_model(models.ModelConfig("vit_base"), 10))["blocks_0"]["mlp"]
    assert sorted(swiglu) == ["fc1_g", "fc1_x", "fc2"]
    assert swiglu["fc1_g"]["kernel"].shape == (768, 2064)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_forward_logits_and_attention_kernels_agree(precision):
    cfg = models.ModelConfig("vit_tiny")
    fused = build_model(cfg, 10, precision=precision, fused_attn=True)
    explicit = build_model(cfg, 10, precision=precision, fused_attn=False)
    images = jax.random.normal(jax.random.key(1), (2, 3, 16, 16))
    params = fused.init(jax.random.key(0), images)["params"]
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype("float32")}
    logits = fused.apply({"params": params}, images)
    assert logits.shape == (2, 10) and logits.dtype == jnp.float32
    tol = 1e-5 if precision == "fp32" else 5e-2
    np.testing.assert_allclose(explicit.apply({"params": params}, images), logits, atol=tol)


def test_init_distributions_follow_timm():
    tiny = ViT(img_size=16, patch_size=4, width=64, depth=1, num_heads=4, mlp_hidden=128,
               num_classes=10, mlp="swiglu")
    params = tiny.init(jax.random.key(0), jnp.zeros((1, 3, 16, 16)))["params"]
    block = params["blocks_0"]
    qkv = np.asarray(block["attn"]["qkv"]["kernel"])
    assert qkv.std() == pytest.approx(0.02, rel=0.05)
    assert not np.asarray(block["attn"]["qkv"]["bias"]).any()
    assert np.abs(np.asarray(params["cls_token"])).max() < 1e-4
    assert np.asarray(params["pos_embed"]).std() == pytest.approx(0.02, rel=0.1)
    bound = (3 * 4 * 4) ** -0.5
    patch = np.asarray(params["patch_embed"]["kernel"])
    assert np.abs(patch).max() <= bound and patch.std() == pytest.approx(bound / 3**0.5, rel=0.1)
    assert (np.asarray(params["norm"]["scale"]) == 1).all()
    gate = block["mlp"]["fc1_g"]  # SwiGLU.init_weights: gate weight normal(1e-6), bias 1
    assert np.abs(np.asarray(gate["kernel"])).max() < 1e-4
    assert (np.asarray(gate["bias"]) == 1).all()


def test_xla_on_cpu_keeps_what_remat_would_free():
    """The plan counts a JAX CPU run's activations as without checkpointing
    (vitfsdp.plan.JAX_CPU_REMAT_KEEPS): XLA's CPU compiler schedules nn.remat's recomputation
    with the forward, so its temporaries do not fall (ViT-B/16: 9.57 against 8.70 GiB at
    batch 32). Fails the day a jaxlib frees them: then drop the special case."""
    import optax
    from jax.sharding import Mesh

    from vitfsdp.jax import sharding
    from vitfsdp.jax.train import compiled_memory, make_train_step, state_layout
    from vitfsdp.plan import JAX_CPU_REMAT_KEEPS

    temp = {}
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), sharding.MESH_AXES)
    batch = sharding.batch_sharding(mesh)
    images = jax.ShapeDtypeStruct((32, 3, 64, 64), jnp.float32, sharding=batch)
    labels = jax.ShapeDtypeStruct((32,), jnp.int32, sharding=batch)
    for remat in (False, True):
        model = ViT(img_size=64, patch_size=8, width=256, depth=4, num_heads=4,
                    mlp_hidden=1024, num_classes=10, remat=remat)
        tx = optax.adamw(1e-3)
        target, shardings = state_layout(model, tx, mesh, 0)
        step = make_train_step(model, tx, mesh, shardings, "xla")
        temp[remat] = compiled_memory(step.lower(target, images, labels).compile())["temp"]
    print(f"XLA CPU temporaries: {temp[False] / 2**20:.0f} MiB without remat, "
          f"{temp[True] / 2**20:.0f} MiB with")
    assert JAX_CPU_REMAT_KEEPS and temp[True] > 0.8 * temp[False], temp


def test_the_jax_memory_tool_prints_what_autodiff_and_xla_keep():
    """tools/jax_memory.py (docs/jax.md): a row per remat setting; remat keeps less of the
    saved tensors (the block inputs), and the plan's count is printed beside them."""
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.run([sys.executable, str(REPO / "tools" / "jax_memory.py"), "--model",
                           "vit_tiny", "--batch", "4"], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]]
            for line in proc.stdout.splitlines() if line.split()[:1] in (["off"], ["on"])}
    assert set(rows) == {"off", "on"}, proc.stdout
    assert all(len(r) == 4 and all(math.isfinite(x) for x in r) for r in rows.values())
    assert rows["on"][0] < rows["off"][0] and rows["on"][3] < rows["off"][3], proc.stdout
