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


#: The scale study of the test: 2 models x 2 strategies x 8 node counts, 40 repeats each.
SCALE_POINTS = 32
SCALE_RUNS = 1280


@pytest.fixture(scope="module")
def scale_sweep(tmp_path_factory: pytest.TempPathFactory) -> list:
    """A synthetic study in the real record format with 40 repeats of 32 points, a fifth
    of the runs failing (oom, failed, timeout)."""
    from vitfsdp.analysis import synthetic

    keep = {"model=vit_base", "model=vit_huge", "strategy=DDP", "strategy=FULL_SHARD"}
    points = [p for p in synthetic.point_overrides() if {p[0], p[1]} <= keep]
    assert len(points) == SCALE_POINTS
    patch = pytest.MonkeyPatch()
    patch.setattr(synthetic, "point_overrides", lambda: points)
    patch.setattr(synthetic, "FAILURE_RATES", {"oom": 0.1, "failed": 0.05, "timeout": 0.05})
    try:
        return synthetic.write_synthetic_sweep(tmp_path_factory.mktemp("scale"), (SCALE_RUNS,))
    finally:
        patch.undo()


def test_one_prediction_per_point_and_no_torch(scale_sweep: list) -> None:
    """1,280 runs of 32 points cost 32 predictions (the cache is keyed on the point, not the
    run), and neither importing the analysis nor collecting the runs imports torch or timm."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import vitfsdp.plan\n"
        "calls = []\n"
        "predict = vitfsdp.plan.predict\n"
        "vitfsdp.plan.predict = lambda *a, **k: calls.append(1) or predict(*a, **k)\n"
        "from vitfsdp.analysis import collect_runs\n"
        f"df = collect_runs({[str(p) for p in scale_sweep]!r})\n"
        "print(len(df), len(calls), int(df['pred_ips'].notna().sum()),"
        " sorted({'torch', 'timm'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=3)
    assert out[:3] == [str(SCALE_RUNS), str(SCALE_POINTS), str(SCALE_RUNS)]
    assert out[3].strip() == "[]"  # no torch, no timm


def test_figures_stay_bounded_and_failures_summarized_per_point(scale_sweep: list,
                                                                tmp_path) -> None:
    """At 1,280 runs the figures keep their size (2 panels of 3.5 in, bounded height), draw
    one not-completed mark per point (never per run), and the note under a panel names each
    point once, with its runs counted by status (``3 oom of 40 runs``), at most
    ``MAX_NOTE_ITEMS`` points, the rest counted."""
    import re

    from vitfsdp.analysis import collect_runs, plot_weak_scaling
    from vitfsdp.analysis.figures import MAX_NOTE_ITEMS, write_figures
    from vitfsdp.analysis.synthetic import png_sizes

    df = collect_runs(scale_sweep)
    assert (df["status"] != "completed").sum() > SCALE_POINTS  # failures repeat per point
    write_figures(df, tmp_path, formats=("png",), names=("weak_scaling", "memory"))
    sizes = png_sizes(tmp_path)
    assert sizes["weak_scaling"][0] < 2200 and sizes["weak_scaling"][1] < 2600, sizes
    assert sizes["memory"][0] < 2200 and sizes["memory"][1] < 4000, sizes
    fig = plot_weak_scaling(df)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        marks = [len(c.get_offsets()) for c in ax.collections
                 if c.get_label().startswith("_not completed")]
        assert 0 < sum(marks) <= SCALE_POINTS // 2  # a mark per point with failures
        (note,) = [t.get_text() for t in ax.texts if t.get_text().startswith("not completed")]
        items = re.findall(r"(\w+ nodes=\d+) \(([^)]*)\)", note.replace("\n", " "))
        assert 0 < len(items) <= MAX_NOTE_ITEMS
        assert len({point for point, _ in items}) == len(items)  # one item per point
        assert all(re.fullmatch(r"\d+ \w+(, \d+ \w+)*( of \d+ runs)?", counts)
                   for _, counts in items), items
        assert " of 40 runs" in note and "more points (failures.csv)" in note
        assert note.count("\n") < 12  # a few lines, whatever the number of runs
