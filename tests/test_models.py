"""Model table: parameter counts from meta-device builds, FLOPs against torch's counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from vitfsdp.models import (
    VARIANTS,
    ModelConfig,
    block_classes,
    build_model,
    count_params,
    forward_flops_per_image,
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


def test_table_has_the_studys_rows():
    assert TABLE == ["vit_base", "vit_huge", "vit_1b", "vit_3b", "vit_5b", "vit_15b"]


@pytest.mark.parametrize("name", ["vit_tiny", "vit_base"])
def test_forward_flops_match_flop_counter(name):
    cfg = ModelConfig(name=name)
    model = build_model(cfg, num_classes=10).eval()
    x = torch.randn(2, 3, cfg.resolved_img_size(), cfg.resolved_img_size())
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    measured = counter.get_total_flops() / 2
    assert forward_flops_per_image(cfg, 10) == pytest.approx(measured, rel=0.01)


def test_blocks_are_the_fsdp_units():
    model = build_model(ModelConfig(name="vit_tiny"), num_classes=10, device="meta")
    units = [m for m in model.modules() if type(m) in block_classes()]
    assert len(units) == VARIANTS["vit_tiny"].depth
