"""The analysis at scale: what keeps ``python -m vitfsdp.analysis`` of thousands of runs fast
and its figures readable, checked structurally (counts, sizes, imports), never by timing."""

from __future__ import annotations

import pytest

from vitfsdp.models import VARIANTS, ModelConfig, build_model, count_params


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_model_sizes_equal_the_timm_build(name: str) -> None:
    """The plan counts parameters from the architecture (no torch): exactly what the
    meta-device build of timm's model holds (what run.json records as ``num_params``), the
    largest block and the number of blocks, at the default and at a small image size."""
    from timm.models.vision_transformer import Block

    from vitfsdp.plan.memory import model_sizes

    patch = VARIANTS[name].patch_size
    for img_size, classes in ((None, 1000), (2 * patch, 10)):
        model = ModelConfig(name=name, img_size=img_size)
        meta = build_model(model, classes, device="meta")
        blocks = [count_params(m) for m in meta.modules() if isinstance(m, Block)]
        sizes = model_sizes(model, classes)
        assert (sizes.num_params, sizes.unit_params, sizes.num_units) == (
            count_params(meta), max(blocks), len(blocks)), (name, img_size, classes)
