"""The H100 sweeps of 2026-11-26 ran every point on one GPU: their weak-scaling and TFLOP/s
figures show throughput, not scaling, and say so, with no ideal line promised; each figure's
caption holds only its own figure's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_records import write_sweep
from vitfsdp.analysis import plot_tflops, plot_weak_scaling
from vitfsdp.analysis.collect import read_runs_csv
from vitfsdp.analysis.report import caption, drawn_kinds

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"
H100 = [DATA / "gpu-h100-2026-11-26-sweep-runs.csv", DATA / "gpu-h100-2026-11-26-jax-runs.csv"]


@pytest.fixture(scope="module")
def h100():
    """The two H100 exports, every run at world size 1."""
    df, _ = read_runs_csv(H100)
    assert set(df["world_size"].dropna()) == {1}
    return df


def _legend(fig) -> str:
    return " ".join(t.get_text() for t in fig.legends[0].get_texts())


@pytest.mark.parametrize("plot", [plot_weak_scaling, plot_tflops])
def test_one_device_figures_are_titled_as_throughput_without_an_ideal(h100, plot, tmp_path):
    """Before, weak_scaling.png was titled 'Weak scaling' and its legend and caption named a
    dashed ideal line that was not drawn (one node count: no line to draw)."""
    png = tmp_path / "figure.png"
    fig = plot(h100, png)
    title = fig.get_suptitle().replace("\n", " ")
    assert "Weak scaling" not in title and "one GPU" in title and "no collectives" in title
    assert "ideal" not in _legend(fig)
    assert not [ln for ax in fig.axes for ln in ax.lines if "ideal" in ln.get_label()]
    name = "weak_scaling" if plot is plot_weak_scaling else "tflops"
    text = caption(name, drawn=drawn_kinds(png.read_bytes()))
    assert "ideal" not in text.replace("no ideal is drawn", "")
    assert "Weak scaling" not in text and "one GPU" in text


def test_a_sweep_over_devices_keeps_its_ideal(tmp_path):
    """Two ranks a node (the fake records): a weak-scaling figure, its ideal drawn and
    named."""
    fig = plot_weak_scaling(write_sweep(tmp_path, {("DDP", 1): [10.0], ("DDP", 2): [18.0]}))
    assert fig.get_suptitle().startswith("Weak scaling")
    assert "ideal (linear)" in _legend(fig)
    assert "ideal" in caption("weak_scaling", drawn=fig.drawn_kinds)


def test_the_weak_scaling_caption_has_no_memory_words(h100, tmp_path):
    """weak_scaling's caption carried the memory figure's clause on its predictions ('of
    memory: ... just left of the measured peak'): each figure's prediction now in its own
    words."""
    png = tmp_path / "weak_scaling.png"
    plot_weak_scaling(h100, png)
    drawn = drawn_kinds(png.read_bytes())
    assert "predicted" in drawn
    text = caption("weak_scaling", drawn=drawn)
    assert "predicted images/s" in text
    assert "memory" not in text and "measured peak" not in text
    assert "just left of the measured peak" in caption("memory", drawn=["predicted"])


def test_models_and_lines_are_named_in_readable_words(h100):
    """vit_huge and vit_huge_patch14_224 both read as a 224 px ViT-H/14 by their keys; the
    legend read 'DDP torch train.activation_checkpointing=False kernels.fused_attn=True'.
    The panels now name the model table's architecture, the legend the settings in words."""
    fig = plot_weak_scaling(h100)
    titles = [" ".join(ax.get_title().split()) for ax in fig.axes]
    assert titles == ["ViT-B/16 (ORNL, SwiGLU; 87.0M params, 224 px)",
                      "ViT-H/14 (timm; 632.0M params, 224 px)",
                      "ViT-H/14 (ORNL, SwiGLU; 635.4M params, 224 px)"]
    legend = [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]
    assert "DDP (PyTorch, AC off, fused attention)" in legend
    assert "FULL_SHARD (JAX, AC off, fused attention)" in legend
    assert "FULL_SHARD (PyTorch, AC off, unfused attention)" in legend
    assert not [text for text in legend if "=" in text or "train." in text]


def test_no_panel_title_runs_past_the_figures_edge(tmp_path):
    """The right-hand panel's 'ViT-3B/14 (ORNL, SwiGLU; 3,067.0M params, 224 px)' ran 15 px
    past the figure's edge at 300 dpi: a title now breaks after its '; ' where it would
    not fit, never between '224' and 'px'."""
    import pandas as pd

    df = write_sweep(tmp_path, {("DDP", 1): [10.0], ("DDP", 2): [18.0]})
    df = pd.concat([df.assign(model="vit_base", num_params=87e6, img_size=224),
                    df.assign(model="vit_3b", num_params=3067e6, img_size=224)],
                   ignore_index=True)
    fig = plot_weak_scaling(df)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width = fig.get_figwidth() * fig.dpi
    for ax in fig.axes:
        box = ax.title.get_window_extent(renderer)
        assert 0 <= box.x0 and box.x1 <= width, ax.get_title()
    assert fig.axes[1].get_title() == "ViT-3B/14 (ORNL, SwiGLU;\n3,067.0M params, 224 px)"
