"""The GPU hazards fixed without a GPU (issue 36), checked on the CPU: the loss in fp32 under
bf16 parameters, cuDNN's autotuner, JAX's attention implementation and its batches
normalized on the device."""

from __future__ import annotations

import itertools

import torch

from tests.conftest import requires_jax
from vitfsdp.config import KernelsConfig
from vitfsdp.data import DataConfig, batches
from vitfsdp.torch_train import apply_numerics, autocast_context, train_step


def test_the_loss_is_computed_in_fp32_under_bf16_parameters() -> None:
    """FSDP's bf16 parameters without autocast: the logits are bf16, the loss must not be."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 1000).to(torch.bfloat16)
    x, y = torch.randn(32, 64, dtype=torch.bfloat16), torch.randint(0, 1000, (32,))
    with torch.no_grad():
        logits = model(x)
    fp32 = torch.nn.functional.cross_entropy(logits.float(), y)
    bf16 = torch.nn.functional.cross_entropy(logits, y).float()
    assert fp32 != bf16  # the two differ at this size, so the check below can fail
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = train_step(model, optimizer, (x, y), autocast_context(None, torch.device("cpu")))
    assert torch.allclose(loss, fp32, rtol=1e-6, atol=0)


def test_cudnn_autotuner_is_on_and_recorded() -> None:
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = False
        assert apply_numerics(KernelsConfig())["cudnn_benchmark"] is True
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = before


@requires_jax
def test_jax_attention_is_xla_on_the_cpu_and_recorded_so() -> None:
    from vitfsdp.jax.model import attention_implementation, build_model
    from vitfsdp.jax.train import _applied
    from vitfsdp.models import ModelConfig

    model = build_model(ModelConfig(name="vit_tiny"), 10, precision="bf16")
    impl = attention_implementation(model)
    assert impl == "xla"
    applied = _applied(_resolved_stub(), model.clone(attn_impl=impl))
    assert applied["attention"] == "jax.nn.dot_product_attention(implementation='xla')"


def _resolved_stub():
    from vitfsdp.core.resolved import Resolved

    return Resolved(framework="jax", device_type="cpu", precision="bf16", compute_dtype="bf16",
                    precision_record={}, compile=True, adamw="optax.adamw", fused_attn=True,
                    allow_tf32=False)


@requires_jax
def test_jax_batches_travel_as_uint8_and_equal_the_torch_normalization() -> None:
    import numpy as np

    from vitfsdp.config import RunConfig
    from vitfsdp.jax import sharding
    from vitfsdp.jax.train import PREFETCH_BATCHES, device_batches

    cfg = RunConfig()
    cfg.data = DataConfig(name="digits", shuffle=False)
    cfg.model.name = "vit_tiny"
    cfg.train.local_batch_size = 4
    mesh = sharding.make_mesh(cfg.strategy)
    jax_batches = list(itertools.islice(device_batches(cfg, mesh), PREFETCH_BATCHES + 1))
    torch_batches = list(itertools.islice(batches(
        cfg.data, img_size=cfg.model.resolved_img_size(),
        local_batch_size=4 * mesh.devices.size, rank=0,  # the mesh's devices of this process
        world_size=1, device=torch.device("cpu")), PREFETCH_BATCHES + 1))
    for (jx, jy), (tx, ty) in zip(jax_batches, torch_batches, strict=True):
        assert str(jx.dtype) == "float32"
        np.testing.assert_allclose(np.asarray(jx), tx.numpy(), atol=1e-6)
        assert np.array_equal(np.asarray(jy), ty.numpy())
