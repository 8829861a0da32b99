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
        said = " ".join(note.split())  # as read, not as wrapped
        assert " of 40 runs" in said and "more points (failures.csv)" in said
        assert note.count("\n") < 12  # a few lines, whatever the number of runs


def test_runs_read_with_a_pool_equal_those_read_here(scale_sweep: list, tmp_path) -> None:
    """A figure process sharing the reading (``collect_runs(pool=)``, parts of READ_CHUNK
    runs) gives the frame, the loss curves and the runs cache that one process gives."""
    import json

    import pandas as pd

    from vitfsdp.analysis import collect_runs, loss_curves
    from vitfsdp.analysis.collect import READ_CHUNK
    from vitfsdp.analysis.figures import figure_pool

    here = collect_runs(scale_sweep, cache=tmp_path / "here.json")
    curves = loss_curves(here)
    pool = figure_pool(2)
    try:
        assert pool is not None and len(here) > 2 * READ_CHUNK  # the read is shared
        pooled = collect_runs(scale_sweep, cache=tmp_path / "pool.json", pool=pool)
    finally:
        pool.shutdown()
    pd.testing.assert_frame_equal(pooled, here)
    pd.testing.assert_frame_equal(loss_curves(pooled), curves)
    kept = [json.loads((tmp_path / f"{n}.json").read_text()) for n in ("here", "pool")]
    assert kept[0] == kept[1]


def test_figures_drawn_by_a_pool_equal_those_drawn_here(scale_sweep: list, tmp_path) -> None:
    """A pool of one process beside this one (``--jobs 2``) draws the same pixels as this
    process alone, every figure of FIGURES that the runs hold, each written once, returned
    in FIGURES' order: the loss figure included, whose curves only this process kept."""
    from matplotlib.image import imread

    from vitfsdp.analysis import collect_runs
    from vitfsdp.analysis.figures import FIGURES, figure_pool, write_figures

    df = collect_runs(scale_sweep)
    here = write_figures(df, tmp_path / "here", formats=("png",))
    pool = figure_pool(2)
    try:
        assert pool is not None and pool.workers == 1
        pooled = write_figures(df, tmp_path / "pool", formats=("png",), pool=pool)
    finally:
        pool.shutdown()
    # no ablation, no recipe, no TFLOP/s in these runs' records: those figures are not drawn
    drawn = [n for n in FIGURES if n not in ("prefetch", "recipe", "tflops")]
    assert list(pooled) == list(here) == drawn
    for name, path in here.items():
        a, b = imread(path), imread(pooled[name])
        assert a.shape == b.shape and (a == b).all(), name
    assert sorted(p.name for p in (tmp_path / "pool").iterdir()) == sorted(
        f"{n}.png" for n in here)
    assert figure_pool(1) is None  # --jobs 1: everything drawn in this process


def test_a_figure_whose_process_died_is_drawn_here(scale_sweep: list, tmp_path) -> None:
    """A figure process killed (for memory, say) breaks the pool: its figure is drawn in
    this process instead, with a warning, and nothing is missing."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from vitfsdp.analysis import collect_runs
    from vitfsdp.analysis.figures import PendingFigures

    class DeadPool:  # a pool whose every process has died: what cannot be staged reliably
        workers = 1

        def submit(self, *args, **kwargs) -> Future:
            future = Future()
            future.set_exception(BrokenProcessPool("a child process terminated abruptly"))
            return future

    df = collect_runs(scale_sweep)
    names = ("weak_scaling", "loss")
    paths = PendingFigures(df, tmp_path, ("png",), names, pool=DeadPool()).result()
    assert list(paths) == list(names) and all(p.exists() for p in paths.values())


def test_each_process_holds_one_figure_and_this_one_draws_the_rest(scale_sweep: list,
                                                                    tmp_path, monkeypatch) -> None:
    """With one busy process beside it, this process draws the next figure itself instead of
    queueing it behind the busy one; every figure is written. (A thread stands in for the
    pool's process: the hand-out is the same. Its figure waits until this process has drawn
    its own, so the process is busy for certain while the figures are handed out.)"""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from vitfsdp.analysis import collect_runs
    from vitfsdp.analysis.figures import PendingFigures, write

    drawn_here = threading.Event()
    drawn_by: dict[str, str] = {}
    draw = write._write_figure

    def recorded(name, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            assert drawn_here.wait(120), "this process never drew its figure"
        path = draw(name, *args, **kwargs)
        drawn_by[name] = threading.current_thread().name
        if threading.current_thread() is threading.main_thread():
            drawn_here.set()
        return path

    monkeypatch.setattr(write, "_write_figure", recorded)
    df = collect_runs(scale_sweep)
    with ThreadPoolExecutor(1, thread_name_prefix="pool") as pool:
        pool.workers = 1
        pending = PendingFigures(df, tmp_path, ("png",), ("weak_scaling", "memory"), pool=pool)
        assert list(pending.futures) == ["memory"] and pending.todo == ["weak_scaling"]
        paths = pending.result()
    assert list(paths) == ["weak_scaling", "memory"]
    assert all(p.exists() for p in paths.values())
    assert drawn_by["weak_scaling"] == threading.main_thread().name
    assert drawn_by["memory"].startswith("pool")
