"""Every figure holds what it draws: a legend of many lines leaves each panel its height and
every label inside the saved file."""

import pytest

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.figures.style import AXES_HEIGHT_IN
from vitfsdp.analysis.figures.write import FIGURES

#: Lines in the sample: enough that the legend is taller than a figure's first guess.
NUM_LINES = 24


@pytest.fixture(scope="module")
def many_lines(tmp_path_factory):
    """NUM_LINES configurations (a strategy's name and a variant number) at 1 and 2 nodes,
    the second line out of memory at 2; TFLOP/s per rank set from images/s (the records
    hold none) to read 0.0x GFLOP/s, tick labels as wide as a CPU sweep's."""
    root = tmp_path_factory.mktemp("many")
    for i in range(NUM_LINES):
        strategy = ("DDP", "FULL_SHARD", "HYBRID_2GPU")[i % 3]
        for nodes in (1, 2):
            info = run_info(strategy, nodes)
            info["config"]["strategy"]["name"] = f"{strategy}_V{i}"
            ips = None if (i, nodes) == (1, 2) else 100.0 * nodes * (1 - 0.01 * i)
            write_run(root / f"v{i}_n{nodes}", info, ips,
                      status="completed" if ips is not None else "oom")
    df = collect_runs(root)
    return df.assign(tflops_per_gpu=df["ips"] / 4e6)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_a_tall_legend_leaves_every_label_inside_the_figure(many_lines, name, tmp_path):
    """24 lines: the legend is taller than a figure's first guess at its height, where
    matplotlib's layout placed nothing ('axes sizes collapsed'): the panels kept its
    default margins, the y label ('model GFLOP/s per rank') ran off the left edge and the
    legend over the panels. Now the saved figure holds every label and each panel its
    plotting height."""
    fig = FIGURES[name](many_lines, tmp_path / f"{name}.png")
    if fig is None:
        pytest.skip(f"{name}: nothing to draw in this sample")
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches: everything drawn
    width, height = fig.get_size_inches()
    assert box.x0 >= 0 and box.y0 >= 0, (box, width, height)
    assert box.x1 <= width and box.y1 <= height, (box, width, height)
    for ax in fig.axes:
        label = ax.yaxis.label.get_window_extent(renderer)
        assert label.x0 >= 0 and label.y0 >= 0, label
        if ax.get_label() != "<colorbar>" and ax.get_subplotspec() is not None:
            assert ax.get_position().height * height == pytest.approx(AXES_HEIGHT_IN, rel=0.05)
    legend = fig.legends[0].get_window_extent(renderer)
    panels = min(ax.get_window_extent(renderer).y0 for ax in fig.axes)
    assert legend.y1 <= panels, "the legend runs over the panels"
