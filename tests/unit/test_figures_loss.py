"""The loss figure shows training (chance level, coinciding strategies both visible) and
every figure's titles stay within two lines."""

from __future__ import annotations

import io
import math
from pathlib import Path

import matplotlib.colors
import matplotlib.image
import numpy as np
import pytest

from tests.fake_records import run_info
from vitfsdp.analysis import collect_runs, plot_loss
from vitfsdp.analysis.figures import ALL_FIGURES, PROXIES, strategy_look
from vitfsdp.analysis.figures.loss import LABEL_PAD, LIGHTEST, _loss_dashes
from vitfsdp.analysis.figures.panels import _new_figure, _set_title
from vitfsdp.analysis.report import caption, drawn_kinds
from vitfsdp.records import RunRecords

LOSSES = (2.25, 2.0, 1.6, 1.1)  # per window: the same for every strategy (same data order)


def write_run(run_dir: Path, strategy: str, nodes: int, classes: int | None) -> None:
    """A completed run whose windows record :data:`LOSSES`; ``classes`` in run.json's model
    record (``None``: an older record without it)."""
    info = run_info(strategy, nodes)
    if classes is not None:
        info["model"]["num_classes"] = classes
    records = RunRecords(run_dir)
    records.start(info)
    for i, loss in enumerate(LOSSES):
        records.window({"step_end": 2 * (i + 1), "warmup": i == 0, "ips": 10.0,
                        "peak_rss_gib": 1.0, "loss": loss})
    records.finish("completed")


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """DDP and FULL_SHARD at one node count, training alike on 10 classes."""
    for strategy in ("DDP", "FULL_SHARD"):
        write_run(tmp_path / strategy, strategy, 1, classes=10)
    return tmp_path


def test_chance_level_drawn_and_named(sweep: Path) -> None:
    fig = plot_loss(collect_runs(sweep))
    ax = fig.axes[0]
    chance = [ln for ln in ax.lines if ln.get_label() == "_chance"]
    assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(math.log(10))
    low, high = ax.get_ylim()
    assert low < min(LOSSES) and math.log(10) < high  # the loss and the chance both shown
    assert "chance" in fig.drawn_kinds
    assert PROXIES["chance"]["label"] in {t.get_text() for t in fig.legends[0].get_texts()}
    assert any("ln 10 = 2.30" in t.get_text() for t in ax.texts)
    assert "chance level" in caption("loss", None, fig.drawn_kinds)


def test_no_chance_level_without_the_number_of_classes(tmp_path: Path) -> None:
    write_run(tmp_path / "a", "DDP", 1, classes=None)
    fig = plot_loss(collect_runs(tmp_path))
    assert "chance" not in fig.drawn_kinds
    assert not [ln for ln in fig.axes[0].lines if ln.get_label() == "_chance"]
    assert "chance" not in caption("loss", None, fig.drawn_kinds)


def _pixels_of(image: np.ndarray, color: str) -> int:
    """How many pixels of ``image`` (RGB floats) are within a small distance of ``color``."""
    target = np.array(matplotlib.colors.to_rgb(color))
    return int((np.abs(image[..., :3] - target).max(axis=-1) < 0.08).sum())


def test_coinciding_strategies_both_visible(sweep: Path, tmp_path: Path) -> None:
    """Two strategies with the same loss at every step: each shows a good share of the
    shared line in its own colour (not one hidden under the other), and the PNG records
    the chance level for the caption."""
    fig = plot_loss(collect_runs(sweep))
    path = tmp_path / "loss.png"
    fig.savefig(path, dpi=100, metadata={"vitfsdp drawn": "chance"})
    image = matplotlib.image.imread(io.BytesIO(path.read_bytes()))
    ax = fig.axes[0]
    axes_px = ax.get_window_extent().transformed(fig.dpi_scale_trans.inverted())
    x0, x1 = int(axes_px.x0 * 100), int(axes_px.x1 * 100)
    y0, y1 = image.shape[0] - int(axes_px.y1 * 100), image.shape[0] - int(axes_px.y0 * 100)
    panel = image[y0:y1, x0:x1]
    ddp, full = (_pixels_of(panel, strategy_look(s)[0]) for s in ("DDP", "FULL_SHARD"))
    assert ddp > 100 and full > 100 and 0.3 < ddp / full < 3, (ddp, full)
    assert drawn_kinds(path.read_bytes()) == ["chance"]
    handles = fig.legends[0].legend_handles
    solid = [h for h in handles if h.get_label() in ("DDP", "FULL_SHARD")]
    assert len(solid) == 2 and all(h.get_linestyle() == "-" for h in solid)


def test_loss_dashes_take_turns() -> None:
    """Each of k labels draws one dash in k, at its own place in the period."""
    assert _loss_dashes(0, 1) == "-"
    starts = []
    for i in range(3):
        offset, (on, off) = _loss_dashes(i, 3)
        assert on + off == pytest.approx(3 * on)
        starts.append((-offset) % (on + off))  # where along the period its dash begins
    assert sorted(starts) == pytest.approx([0.0, 4.0, 8.0])


@pytest.mark.parametrize("name", sorted(set(ALL_FIGURES) - {"prefetch", "recipe"}))
def test_titles_at_most_two_lines(tmp_path: Path, name: str) -> None:
    """Every figure a plain sweep draws (not the prefetch and recipe ablations, which need
    runs of their own), for a model with a long name: its title and each panel's title
    within two lines."""
    info_model = "vit_gigantic_patch14_224_with_a_very_long_name_that_wraps_twice_over"
    for strategy in ("DDP", "FULL_SHARD"):
        for nodes in (1, 2):
            info = run_info(strategy, nodes)
            info["config"]["model"]["name"] = info_model
            records = RunRecords(tmp_path / f"{strategy}{nodes}")
            records.start(info)
            for step in (2, 4):
                records.window({"step_end": step, "warmup": step == 2, "ips": 10.0 * nodes,
                                "peak_rss_gib": 1.0, "loss": 2.0, "tflops_per_gpu": 1.0})
            records.finish("completed")
    fig = ALL_FIGURES[name](collect_runs(tmp_path))
    assert fig is not None, f"{name}: nothing drawn"
    assert fig.get_suptitle().count("\n") <= 1
    for ax in fig.axes:
        assert ax.get_title().count("\n") <= 1, ax.get_title()


def test_set_title_keeps_two_lines() -> None:
    _, (ax,) = _new_figure(1)
    _set_title(ax, "a " * 60 + "\nat 8 node(s), 16 GPUs")
    assert ax.get_title().count("\n") == 1 and ax.get_title().endswith("...")


def test_saved_figure_is_laid_out_once_and_svg_keeps_text(sweep: Path, tmp_path: Path,
                                                          monkeypatch) -> None:
    """A finished figure has no layout engine left (savefig would lay it out and draw it an
    extra time per format otherwise), its layout stays where the analysis fixed it, and the
    SVG holds its labels as text."""
    from matplotlib.figure import Figure

    fig = plot_loss(collect_runs(sweep))
    assert fig.get_layout_engine() is None
    boxes = [tuple(ax.get_position().bounds) for ax in fig.axes]
    draws = []
    monkeypatch.setattr(Figure, "draw", lambda self, r, _d=Figure.draw: (draws.append(1),
                                                                          _d(self, r)))
    from vitfsdp.analysis.figures.finish import _save

    _save(fig, tmp_path / "loss.svg", quiet=True)
    _save(fig, tmp_path / "loss.png", quiet=True)
    assert len(draws) == 2  # one draw per format
    assert [tuple(ax.get_position().bounds) for ax in fig.axes] == boxes
    svg = (tmp_path / "loss.svg").read_text(encoding="utf-8")
    assert "<text" in svg and "chance" in svg


def test_fewer_nodes_draw_lighter_and_labels_clear_their_markers(tmp_path: Path) -> None:
    """DDP at 1, 2 and 4 nodes: each node count its own shade of DDP's colour, lighter for
    fewer nodes (4 nodes in the colour itself, 1 node :data:`LIGHTEST` toward white), as the
    README says; each ``n=`` label starts beyond its line's end marker."""
    for nodes in (1, 2, 4):
        write_run(tmp_path / f"ddp{nodes}", "DDP", nodes, classes=10)
    fig = plot_loss(collect_runs(tmp_path))
    ax = fig.axes[0]
    lines = {int(ln.get_label().rpartition("nodes=")[2]): ln for ln in ax.lines
             if "nodes=" in ln.get_label()}
    base = np.array(matplotlib.colors.to_rgb(strategy_look("DDP")[0]))
    colors = {n: np.array(matplotlib.colors.to_rgb(ln.get_color())) for n, ln in lines.items()}
    assert np.allclose(colors[4], base)
    assert np.allclose(colors[1], base + (1 - base) * LIGHTEST)
    assert colors[1].sum() > colors[2].sum() > colors[4].sum()
    fig.canvas.draw()
    width = ax.get_window_extent().width
    labels = [text for text in ax.texts if text.get_text().startswith("n=")]
    assert labels
    for text in labels:
        line = lines[int(text.get_text()[2:].split(",")[0])]  # ends that meet share one label
        end = ax.transData.transform((line.get_xdata()[-1], line.get_ydata()[-1]))[0]
        radius = line.get_markersize() / 2 * fig.dpi / 72
        assert text.get_window_extent().x0 >= end + radius, text.get_text()
    assert LABEL_PAD * width >= 5.5 / 2 * fig.dpi / 72


def test_the_title_says_what_n_at_a_line_end_counts(tmp_path: Path) -> None:
    """The ``n=2`` at a line's end is its node count, which the figure says itself (before,
    only the report's caption did, and the README writes ``n=`` for runs elsewhere)."""
    for nodes in (1, 2):
        write_run(tmp_path / f"ddp{nodes}", "DDP", nodes, classes=10)
    fig = plot_loss(collect_runs(tmp_path))
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "n=2 at its end: 2 nodes" in title, title  # the sweep's own largest node count
