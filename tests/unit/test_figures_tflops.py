"""The TFLOP/s figure as a reader reads it off: which marker each bar belongs to."""

import pytest

from tests.fake_records import GPUS_PER_NODE, write_sweep
from tests.figure_marks import marks_by_line, measured_lines, window_bars_over_one_run_markers
from vitfsdp.analysis.figures import plot_tflops

#: Three strategies close together at each node count: twice at 1 node (a capped bar over
#: the runs), once at 2 nodes (windows ips - 1 to ips + 1, about 5%: a thin bar over them).
CLOSE = {("DDP", 1): [40.0, 44.0], ("FULL_SHARD", 1): [41.0, 45.0],
         ("HYBRID_2GPU", 1): [42.0, 46.0], ("DDP", 2): [40.0], ("FULL_SHARD", 2): [41.0],
         ("HYBRID_2GPU", 2): [42.0]}


def test_each_window_bar_runs_through_its_own_marker(tmp_path):
    """The one-run points at 2 nodes (4 GPUs) drew their window bars at 1.08x the world size,
    right of all three lines' markers, which shared the world size: a reader could not tell
    which bar was whose. Each line's markers now stand beside the world size (the
    weak-scaling figure's offsets), and each bar at its own marker's x, over its hollow
    face."""
    fig = plot_tflops(write_sweep(tmp_path, CLOSE).pipe(
        lambda df: df.assign(tflops_per_gpu=df["ips"] / 100)))  # the records hold none
    ax = fig.axes[0]
    measured = measured_lines(ax)
    assert sorted(measured) == ["DDP", "FULL_SHARD", "HYBRID_2GPU"]
    at_4 = sorted(ln.get_xdata()[1] for ln in measured.values())
    assert at_4[0] < at_4[1] == 2.0 * GPUS_PER_NODE < at_4[2]  # beside the world size
    for label, xs, windows, repeats, hollow in marks_by_line(ax):
        assert windows == pytest.approx([xs[1]]), label  # the bar's x is its marker's
        assert repeats == pytest.approx([xs[0]]), label
        assert hollow == pytest.approx([xs[1]]), label
    assert window_bars_over_one_run_markers(ax)
    assert "windows" in fig.drawn_kinds
