"""Model table: parameter counts from meta-device builds, FLOPs against torch's counter;
the meta-device init against timm's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from timm.layers import SwiGLU
from timm.models.vision_transformer import VisionTransformer
from torch.utils.flop_counter import FlopCounterMode

from vitfsdp.models import (
    INIT_BLOCK_NUMEL,
    VARIANTS,
    InitRule,
    ModelConfig,
    ViTInit,
    block_classes,
    build_model,
    count_params,
    forward_flops_per_image,
    set_fused_attn,
)

TABLE = [name for name, spec in VARIANTS.items() if spec.published_params_m]


@pytest.mark.parametrize("name", TABLE)
def test_param_count_matches_published_table(name):
    model = build_model(ModelConfig(name=name), num_classes=1000, device="meta")
    published = VARIANTS[name].published_params_m * 1e6
    assert abs(count_params(model) / published - 1) < 0.005


TIMM = ["vit_large_patch16_224", "vit_huge_patch14_224", "vit_giant_patch14_224",
        "vit_gigantic_patch14_224"]


@pytest.mark.parametrize("name", TIMM)
def test_timm_comparison_models_equal_timms_registered_ones(name):
    import timm

    with torch.device("meta"):
        reference = timm.create_model(name, pretrained=False, num_classes=1000)
    ours = build_model(ModelConfig(name=name), num_classes=1000, device="meta")
    assert count_params(ours) == count_params(reference)
    assert [tuple(p.shape) for p in ours.parameters()] == [
        tuple(p.shape) for p in reference.parameters()]


def test_every_variant_is_a_model_option_users_can_type():
    """Each row of the table is a config of the ``model`` group (``model=vit_3b``) naming
    itself, and each config of the group a row: a variant added to one and not the other
    would be unreachable from the command line, or refused by the config."""
    import yaml

    from vitfsdp.config import CONF_DIR

    configs = {p.stem: yaml.safe_load(p.read_text()) for p in
               (Path(CONF_DIR) / "model").glob("*.yaml")}
    assert set(configs) == set(VARIANTS)
    assert {stem: cfg.get("name") for stem, cfg in configs.items()} == {
        stem: stem for stem in configs}


@pytest.mark.parametrize("name", ["vit_tiny", "vit_base"])
def test_forward_flops_match_flop_counter(name):
    cfg = ModelConfig(name=name)
    model = build_model(cfg, num_classes=10).eval()
    # FlopCounterMode does not count every backend's SDPA kernel (CPU's flash kernel is not
    # registered in recent torch): the explicit q·kᵀ and attn·v matmuls do the same FLOPs
    for block in model.blocks:
        block.attn.fused_attn = False
    x = torch.randn(2, 3, cfg.resolved_img_size(), cfg.resolved_img_size())
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    measured = counter.get_total_flops() / 2
    assert forward_flops_per_image(cfg, 10) == pytest.approx(measured, rel=0.01)


def test_blocks_are_the_fsdp_units():
    model = build_model(ModelConfig(name="vit_tiny"), num_classes=10, device="meta")
    units = [m for m in model.modules() if type(m) in block_classes()]
    assert len(units) == VARIANTS["vit_tiny"].depth


@pytest.mark.parametrize("img_size", [None, 112])
def test_token_count_is_the_built_models(img_size):
    cfg = ModelConfig(name="vit_base", img_size=img_size)
    model = build_model(cfg, num_classes=10, device="meta")
    tokens = model.patch_embed(torch.empty(1, 3, cfg.resolved_img_size(), cfg.resolved_img_size(),
                                           device="meta")).shape[1] + model.num_prefix_tokens
    assert cfg.num_tokens() == tokens == (197 if img_size is None else 50)


def _tiny_vit(mlp: str, device: str | None = None, **kwargs) -> VisionTransformer:
    layers = {"mlp_layer": SwiGLU, "act_layer": torch.nn.SiLU} if mlp == "swiglu" else {}
    with torch.device(device or "cpu"):
        return VisionTransformer(img_size=16, patch_size=4, embed_dim=64, depth=2, num_heads=4,
                                 mlp_ratio=4, num_classes=10, **layers, **kwargs)


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_meta_init_draws_timms_distribution_for_every_parameter(mlp):
    torch.manual_seed(0)
    timm_model = _tiny_vit(mlp)
    ours = _tiny_vit(mlp, device="meta", weight_init="skip")
    init = ViTInit(ours, seed=0)
    init.init_model_(ours.to_empty(device="cpu"))
    theirs = dict(timm_model.named_parameters())
    for name, p in ours.named_parameters():
        ref = theirs[name].detach()
        if torch.all(ref == ref.flatten()[0]):  # a constant (zeros, ones): exactly timm's
            assert torch.equal(p, ref), name
        else:  # drawn: the same spread (64 to 16k samples: within 40%)
            assert 0.6 < (p.std() / ref.std()).item() < 1.6, name
            assert p.abs().max() <= 2.0, name


def _trunc_normal_of_torch_2_11(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """torch.nn.init.trunc_normal_ as torch 2.11 drew it (the GPU check's torch): inverse CDF
    of a uniform draw, whose end of range gives ±inf, clamped to the bounds."""
    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    tensor.uniform_(2 * lo - 1, 2 * hi - 1, generator=generator)
    tensor.erfinv_().mul_(std * math.sqrt(2.0)).add_(mean)
    return tensor.clamp_(min=a, max=b)


def test_the_truncated_normal_has_no_weights_at_its_bounds(monkeypatch):
    # with torch 2.11's trunc_normal_ this draw held 2 weights of exactly ±2 (100 std)
    monkeypatch.setattr(torch.nn.init, "trunc_normal_", _trunc_normal_of_torch_2_11)
    model = _tiny_vit("gelu", device="meta", weight_init="skip")
    init = ViTInit(model, seed=0)
    values = init._draw(InitRule("trunc_normal", 0.02), torch.empty(2**26),
                        "blocks.0.mlp.fc1.weight", 0)
    assert values.abs().max().item() < 0.2  # 10 std; the largest of 2^26 normals: about 5.7
    assert abs(values.std().item() - 0.02) < 1e-4 and abs(values.mean().item()) < 1e-5


def test_any_rows_are_drawn_alone_exactly_as_in_the_whole_parameter():
    model = build_model(ModelConfig(name="vit_base"), 1000, device="meta")
    init = ViTInit(model, seed=3)
    fc1 = model.blocks[5].mlp.fc1_x  # 2064 x 768: two draw blocks
    assert fc1.weight.numel() > INIT_BLOCK_NUMEL
    whole = init.fill_(fc1, "weight", torch.empty(fc1.weight.shape))
    for num_shards in (2, 3, 4, 7):
        start = 0
        for rows in torch.chunk(whole, num_shards):
            part = init.fill_(fc1, "weight", torch.empty(rows.shape), row_start=start)
            assert torch.equal(part, rows), (num_shards, start)
            start += rows.shape[0]
    as_bf16 = init.fill_(fc1, "weight", torch.empty(fc1.weight.shape, dtype=torch.bfloat16))
    assert torch.equal(as_bf16, whole.bfloat16())
    twin = build_model(ModelConfig(name="vit_base"), 1000, device="meta")  # another rank's
    twin_fc1 = twin.blocks[5].mlp.fc1_x
    again = ViTInit(twin, seed=3).fill_(twin_fc1, "weight", torch.empty(fc1.weight.shape))
    assert torch.equal(again, whole)
    other_seed = ViTInit(model, seed=4).fill_(fc1, "weight", torch.empty(fc1.weight.shape))
    assert not torch.equal(other_seed, whole)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_has_an_init_rule_for_every_parameter(name):
    model = build_model(ModelConfig(name=name), 1000, device="meta")
    assert len(list(ViTInit(model, seed=0).params())) == len(list(model.parameters()))


def test_fused_attention_switch_reaches_every_block():
    model = build_model(ModelConfig(name="vit_tiny"), 10, device="meta")
    assert set_fused_attn(model, False) == VARIANTS["vit_tiny"].depth
    assert not any(b.attn.fused_attn for b in model.blocks)
    set_fused_attn(model, True)
    assert all(b.attn.fused_attn for b in model.blocks)
