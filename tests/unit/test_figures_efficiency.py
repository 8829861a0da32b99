"""The efficiency figure: points.csv's weak-scaling efficiency on a linear axis, with its
bounds, the ideal at 1 and every run that did not complete."""

import math

import pytest

from tests.fake_records import write_sweep
from vitfsdp.analysis import points_table
from vitfsdp.analysis.figures import plot_efficiency


def _line(ax, label: str) -> dict[int, float]:
    """A line's points by node count (a power of 2: the line stands a little beside it)."""
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    nodes = [2 ** round(math.log2(x)) for x in line.get_xdata()]
    return dict(zip(nodes, line.get_ydata(), strict=True))


def test_the_figure_draws_points_csvs_efficiency_and_its_bounds(tmp_path):
    """DDP at 1 node ran twice (100, 110), at 2 nodes once (180, windows 179-181) and once
    out of memory at 4: the line is points.csv's efficiency (1 at 1 node, 180/210 at 2),
    a thin bar through its point at 2 over its bounds, an x for 4, the ideal dashed at 1."""
    df = write_sweep(tmp_path, {("DDP", 1): [100.0, 110.0], ("DDP", 2): [180.0],
                           ("DDP", 4): [None]})
    fig = plot_efficiency(df)
    ax = fig.axes[0]
    points = points_table(df).set_index("nodes")
    assert _line(ax, "DDP") == {1: pytest.approx(1.0),
                                2: pytest.approx(points.loc[2, "scaling_efficiency"])}
    assert points.loc[2, "scaling_efficiency"] == pytest.approx(180 / 210)
    bars = {}
    for container in ax.containers:
        (segments,) = container.lines[2]
        for (x, low), (_, high) in segments.get_segments():
            bars[round(x, 3)] = (low, high, len(container.lines[1]))
    assert bars[2.0] == (
        pytest.approx(points.loc[2, "efficiency_min"]),
        pytest.approx(points.loc[2, "efficiency_max"]), 0)
    assert {"ideal", "efficiency_windows", "failed"} <= set(fig.drawn_kinds)
    labels = [" ".join(t.get_text().split()) for legend in fig.legends
              for t in legend.get_texts()]  # wrapped to the figure's width
    assert "thin bar, no caps: a one-run point's windows against the baseline's span" in labels
    assert any(ln.get_linestyle() == "--" and list(ln.get_ydata()) == [1.0, 1.0]
               for ln in ax.get_lines())
    assert ax.get_ylabel().startswith("weak-scaling efficiency")


def test_every_legend_entry_fits_a_one_panel_figure(tmp_path):
    """A one-panel figure is 3.5 in wide: the one-run bar's long legend entry is wrapped, so
    the legend lies within the figure on both sides once drawn."""
    df = write_sweep(tmp_path, {("DDP", 1): [100.0, 110.0], ("DDP", 2): [180.0],
                           ("DDP", 4): [None]})
    fig = plot_efficiency(df)
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent(fig.canvas.get_renderer())
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, (box, fig.bbox)
    assert fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, (box, fig.bbox)


def test_no_figure_without_a_completed_point(tmp_path):
    assert plot_efficiency(write_sweep(tmp_path, {("DDP", 1): [None]})) is None


def test_no_figure_where_every_line_ran_at_one_node_count(tmp_path):
    """DDP and FULL_SHARD at 1 node only (and DDP out of memory at 2): each line's one
    efficiency is its own baseline's 1, so there is no efficiency.png, the analysis says
    why, and the report neither shows nor links it; the weak-scaling figure is still
    there."""
    from vitfsdp.analysis.__main__ import main as analysis_main

    df = write_sweep(tmp_path / "s", {("DDP", 1): [100.0], ("FULL_SHARD", 1): [80.0],
                                 ("DDP", 2): [None]})
    assert plot_efficiency(df) is None
    out = tmp_path / "out"
    assert analysis_main([str(tmp_path / "s"), "--out", str(out), "--report",
                          "--jobs", "1"]) == 0
    assert not (out / "efficiency.png").exists() and (out / "weak_scaling.png").exists()
    for report in ("report.md", "report.html"):
        text = (out / report).read_text(encoding="utf-8")
        assert "efficiency.png" not in text and "Weak-scaling efficiency against" not in text
    assert "weak_scaling.png" in (out / "report.md").read_text(encoding="utf-8")


def test_a_line_whose_ideal_starts_later_says_so(tmp_path):
    """DDP ran out of memory at 1 node, so its ideal starts at 2 nodes: its 1.0 there is over
    another baseline than FULL_SHARD's, and its legend label, points.csv's baseline_nodes
    and the report's 'ideal from' column say so; FULL_SHARD's label is its own."""
    from vitfsdp.analysis.report import ideal_from

    df = write_sweep(tmp_path, {("DDP", 1): [None], ("DDP", 2): [190.0], ("DDP", 4): [360.0],
                           ("FULL_SHARD", 1): [100.0], ("FULL_SHARD", 2): [150.0],
                           ("FULL_SHARD", 4): [250.0]})
    ax = plot_efficiency(df).axes[0]
    assert _line(ax, "DDP (ideal from 2 nodes)") == {2: 1.0, 4: pytest.approx(360 / 380)}
    assert _line(ax, "FULL_SHARD") == {1: 1.0, 2: 0.75, 4: 0.625}
    points = points_table(df)
    assert dict(zip(points["strategy"], points["baseline_nodes"], strict=True)) == {
        "DDP": 2, "FULL_SHARD": 1}
    shown = ideal_from(points, df)
    assert shown[points["strategy"] == "DDP"].tolist() == [2, 2]
    assert shown[points["strategy"] == "FULL_SHARD"].isna().all()


def test_each_lines_bounds_stand_beside_the_node_count_where_all_are_seen(tmp_path):
    """At 2 nodes HYBRID_2GPU's bounds lie inside FULL_SHARD's: drawn at one x, its bar hid
    in FULL_SHARD's. Each line's points and bars now stand at their own x, either side of
    the node count."""
    df = write_sweep(tmp_path, {("FULL_SHARD", 1): [100.0, 104.0],
                                ("FULL_SHARD", 2): [140.0, 200.0],
                                ("HYBRID_2GPU", 1): [100.0, 104.0],
                                ("HYBRID_2GPU", 2): [185.0, 195.0]})
    ax = plot_efficiency(df).axes[0]
    xs = {}
    for container in ax.containers:
        (segments,) = container.lines[2]
        for (x, low), (_, high) in segments.get_segments():
            xs[(round(low, 3), round(high, 3))] = x
    points = points_table(df).set_index(["strategy", "nodes"])
    fs, hy = (points.loc[(s, 2), ["efficiency_min", "efficiency_max"]] for s in
              ("FULL_SHARD", "HYBRID_2GPU"))
    assert fs["efficiency_min"] < hy["efficiency_min"] < hy["efficiency_max"] \
        < fs["efficiency_max"]  # one span inside the other
    fs_x = xs[(round(fs["efficiency_min"], 3), round(fs["efficiency_max"], 3))]
    hy_x = xs[(round(hy["efficiency_min"], 3), round(hy["efficiency_max"], 3))]
    assert fs_x < 2.0 < hy_x and fs_x * hy_x == pytest.approx(4.0)
    (fs_line,) = [ln for ln in ax.get_lines() if ln.get_label() == "FULL_SHARD"]
    assert fs_line.get_xdata()[1] == pytest.approx(fs_x)


def _legend_labels(fig) -> list[str]:
    return [" ".join(t.get_text().split()) for legend in fig.legends
            for t in legend.get_texts()]  # wrapped to the figure's width


def test_the_capped_bar_is_named_the_efficiency_bounds_not_the_repeats(tmp_path):
    """DDP ran twice at 1 node (100, 110) and at 2 nodes (150, 170): its capped bar at 2 is
    150/220 to 170/200, wider than its repeats' 150/210 to 170/210. Before, the legend and
    the caption's mark called it 'min-max over repeats'; now it is its own kind."""
    df = write_sweep(tmp_path, {("DDP", 1): [100.0, 110.0], ("DDP", 2): [150.0, 170.0]})
    fig = plot_efficiency(df)
    bars = {}
    for container in fig.axes[0].containers:
        (segments,) = container.lines[2]
        for (x, low), (_, high) in segments.get_segments():
            bars[round(x)] = (low, high)
    assert bars[2] == (pytest.approx(150 / 220), pytest.approx(170 / 200))
    assert "efficiency_bounds" in fig.drawn_kinds and "repeats" not in fig.drawn_kinds
    labels = _legend_labels(fig)
    assert ("bar: efficiency bounds (slowest run / baseline's fastest to fastest / "
            "baseline's slowest)") in labels
    assert not any("over repeats" in label for label in labels)


def test_the_axis_starts_near_the_lowest_value_and_says_so(tmp_path):
    """Efficiencies within 0.72-1.0 lay in the top quarter of an axis from 0, the lines over
    one another. The axis now starts a little below the lowest value or bound drawn (less
    the bottom strip of the run that did not complete), the ideal 1.0 inside it, and the
    label and caption say it does not start at 0."""
    from vitfsdp.analysis.figures.panels import STRIP_HEIGHT
    from vitfsdp.analysis.report import caption

    df = write_sweep(tmp_path, {("DDP", 1): [100.0, 101.0], ("DDP", 2): [150.0, 152.0],
                                ("DDP", 4): [290.0, 295.0], ("FULL_SHARD", 1): [100.0, 100.5],
                                ("FULL_SHARD", 2): [160.0, 161.0], ("FULL_SHARD", 4): [None]})
    fig = plot_efficiency(df)
    ax = fig.axes[0]
    values = [v for ln in ax.get_lines() for v in ln.get_ydata()]
    bounds = [y for c in ax.containers for seg in c.lines[2][0].get_segments()
              for _, y in seg]
    low, high = ax.get_ylim()
    assert 0.5 < low < min(values + bounds) and high > 1.0 >= max(values)
    lowest = (min(values + bounds) - low) / (high - low)  # axes fraction
    assert STRIP_HEIGHT <= lowest < 0.3  # over the strip, the lines spread up the axis
    assert ax.get_ylabel().endswith(f"from {low:.2f}, not 0)")
    assert "not at 0" in caption("efficiency", drawn=fig.drawn_kinds)
