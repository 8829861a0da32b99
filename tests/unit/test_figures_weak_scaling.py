"""The weak-scaling figure as a reader reads it off: tick labels over everything drawn."""

import math

import pytest
from matplotlib.colors import to_hex

from tests.fake_records import GPUS_PER_NODE, write_sweep
from tests.figure_marks import marks_by_line, measured_lines, window_bars_over_one_run_markers
from vitfsdp.analysis.figures import plot_weak_scaling

#: A CPU sweep at 1 and 2 nodes that scaled badly: less than a decade from the slowest
#: 2-node run (11) to FULL_SHARD's ideal at 2 nodes (46); the spans overlap at 2 nodes.
POOR = {("FULL_SHARD", 1): [22.0, 23.0, 24.0], ("FULL_SHARD", 2): [11.0, 12.1, 21.0],
        ("HYBRID_2GPU", 1): [21.0, 22.5, 23.0], ("HYBRID_2GPU", 2): [13.0, 14.0, 20.5],
        ("DDP", 1): [20.0, 21.0, 22.0], ("DDP", 2): [15.0, 18.0, 19.0]}


def test_the_y_labels_span_every_value_drawn(tmp_path):
    """On a log axis over less than a decade the reader reads a value off between two
    labels: the labelled ticks run from at or below the lowest value drawn (the slowest
    run's bar, 11) to at or above the highest (the ideal, 46), every one inside the axis."""
    ax = plot_weak_scaling(write_sweep(tmp_path, POOR)).axes[0]
    low, high = ax.get_ylim()
    labelled = {t.get_position()[1]: t.get_text() for t in ax.get_yticklabels()
                if t.get_text() and low <= t.get_position()[1] <= high}
    assert min(labelled) <= ax.dataLim.y0 <= 11.0
    assert max(labelled) >= ax.dataLim.y1 >= 46.0
    assert labelled == {10.0: "10", 15.0: "15", 20.0: "20", 30.0: "30", 40.0: "40",
                        50.0: "50"}


def _bar_xs(ax) -> dict[str, list[float]]:
    """The x of every error bar an axes drew, by the bars' colour."""
    xs: dict[str, list[float]] = {}
    for container in ax.containers:
        (segments,) = container.lines[2]
        color = to_hex(segments.get_color()[0])
        xs.setdefault(color, []).extend(seg[0][0] for seg in segments.get_segments())
    return xs


def test_each_lines_bars_stand_beside_the_node_count_where_all_are_seen(tmp_path):
    """At 2 nodes HYBRID_2GPU's span (13-20.5) lies inside FULL_SHARD's (11-21): drawn at one
    x, the inner bar hid in the outer. Each line's markers and bars now stand at their own x,
    symmetric around the node count (the middle line at it); the ideal lines stay at it."""
    ax = plot_weak_scaling(write_sweep(tmp_path, POOR)).axes[0]
    measured = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
    assert sorted(measured) == ["DDP", "FULL_SHARD", "HYBRID_2GPU"]
    at_2 = {label: ln.get_xdata()[1] for label, ln in measured.items()}
    assert at_2["DDP"] < at_2["FULL_SHARD"] == 2.0 < at_2["HYBRID_2GPU"]
    assert at_2["DDP"] * at_2["HYBRID_2GPU"] == pytest.approx(4.0)  # symmetric in log x
    bars = _bar_xs(ax)
    for line in measured.values():  # each line's bars where its markers are
        assert sorted(bars[to_hex(line.get_color())]) == pytest.approx(sorted(line.get_xdata()))
    ideals = [ln for ln in ax.lines if ln.get_label().startswith("_ideal")]
    assert len(ideals) == 3 and all(list(ln.get_xdata()) == [1, 2] for ln in ideals)


#: Three strategies close together: twice at 1 and 4 nodes (capped bars over the runs), once
#: at 2 nodes (windows ips - 1 to ips + 1, 2.5%; against the baseline's span in
#: efficiency.png, 0.90-1.01: a thin bar over either).
CLOSE = {(s, n): [v + i for v in values] for i, s in enumerate(("DDP", "FULL_SHARD",
                                                                 "HYBRID_2GPU"))
         for n, values in ((1, [40.0, 44.0]), (2, [80.0]), (4, [150.0, 170.0]))}


@pytest.mark.parametrize("figure", ["weak_scaling", "efficiency"])
def test_each_window_bar_runs_through_its_own_marker(tmp_path, figure):
    """Each line stood beside the node count, but a one-run point's window bar stood further
    right, half way to the next line's markers: at 2 nodes DDP's bar stood between DDP's and
    FULL_SHARD's markers and FULL_SHARD's on the node count's gridline, so a reader could not
    tell whose it was. Each bar now stands at its own marker's x, in its colour, over its
    hollow face (as in tflops.png, test_figures_tflops); the capped bars stay at theirs."""
    from vitfsdp.analysis.figures import plot_efficiency

    plot = {"weak_scaling": plot_weak_scaling, "efficiency": plot_efficiency}[figure]
    ax = plot(write_sweep(tmp_path, CLOSE)).axes[0]
    measured = measured_lines(ax)
    assert sorted(measured) == ["DDP", "FULL_SHARD", "HYBRID_2GPU"]
    at_2 = sorted(ln.get_xdata()[1] for ln in measured.values())
    assert at_2[0] < at_2[1] == 2.0 < at_2[2]  # beside the node count
    for label, xs, windows, repeats, hollow in marks_by_line(ax):
        assert windows == pytest.approx([xs[1]]), label  # the bar's x is its marker's
        assert repeats[-1] == pytest.approx(xs[2]), label  # 4 nodes: over its two runs
        assert hollow == pytest.approx([xs[1]]), label
    assert window_bars_over_one_run_markers(ax)


def test_a_failure_mark_stands_where_its_lines_points_do(tmp_path):
    """DDP ran out of memory at 4 nodes: its x stands beside 4 as DDP's points stand beside
    1 and 2, apart from FULL_SHARD's points there."""
    ax = plot_weak_scaling(write_sweep(tmp_path, {
        ("DDP", 1): [100.0], ("DDP", 2): [180.0], ("DDP", 4): [None],
        ("FULL_SHARD", 1): [100.0], ("FULL_SHARD", 2): [190.0], ("FULL_SHARD", 4): [350.0],
    })).axes[0]
    (ddp,) = [ln for ln in ax.lines if ln.get_label() == "DDP"]
    (marks,) = [c for c in ax.collections if c.get_label() == "_not completed DDP"]
    shift = ddp.get_xdata()[0]
    assert shift < 1.0 and list(ddp.get_xdata()) == pytest.approx([shift, 2 * shift])
    assert list(marks.get_offsets()[:, 0]) == pytest.approx([4 * shift])


def _footer(fig) -> str:
    """The legend's title (the runs' shared settings and the figure's note), unwrapped."""
    return " ".join(fig.legends[0].get_title().get_text().split())


def test_the_footer_says_why_no_predicted_ips_is_drawn(tmp_path):
    """A CPU sweep without a probe: the plan predicted memory (pred_source=profile) but no
    images/s, so no dotted line is drawn; the footer says what the plan needs for one. Where
    a run has a predicted ips the line is drawn and the footer says nothing of it."""
    df = write_sweep(tmp_path, POOR)
    assert df["pred_ips"].isna().all() and (df["pred_source"] == "profile").any()
    fig = plot_weak_scaling(df)
    assert "predicted" not in fig.drawn_kinds
    assert _footer(fig).endswith(
        "no predicted ips: the plan needs a probe (python -m vitfsdp.probe -m ... --out "
        "SWEEP_DIR) or the profile's peak FLOP/s (cluster.peak_tflops, _tf32, _fp32)")
    predicted = plot_weak_scaling(df.assign(pred_ips=df["nodes"] * 20.0))
    assert "predicted" in predicted.drawn_kinds
    assert "no predicted ips" not in _footer(predicted)
    assert "predicted none" in _footer(plot_weak_scaling(df.assign(pred_source=None)))


#: DDP ran three times at 1 and 2 nodes, once at 4; FULL_SHARD once at 1 and 4, twice at 2.
ONCE_AND_REPEATED = {("DDP", 1): [100.0, 104.0, 110.0], ("DDP", 2): [180.0, 186.0, 190.0],
                     ("DDP", 4): [350.0], ("FULL_SHARD", 1): [100.0],
                     ("FULL_SHARD", 2): [185.0, 190.0], ("FULL_SHARD", 4): [340.0]}


def _hollow_nodes(ax, per_x: int = 1) -> dict[str, list[int]]:
    """The node counts (powers of 2) of the hollow markers an axes drew, by colour; its x
    is ``per_x`` times the node count (the TFLOP/s figure's is world size)."""
    hollow: dict[str, list[int]] = {}
    for marks in ax.collections:
        if marks.get_label() == "_one run":
            assert to_hex(marks.get_facecolor()[0]) == "#ffffff"
            hollow.setdefault(to_hex(marks.get_edgecolor()[0]), []).extend(
                2 ** round(math.log2(x / per_x)) for x in marks.get_offsets()[:, 0])
    return {color: sorted(nodes) for color, nodes in hollow.items()}


@pytest.mark.parametrize("figure", ["weak_scaling", "efficiency", "tflops"])
def test_a_point_that_ran_once_is_hollow(tmp_path, figure):
    """A point that completed once has no spread over repeats, and its window bar (under 2%
    here) is not drawn: before, its filled marker looked as exact as a point of three runs.
    Now it is hollow, in its line's colour, and the legend says what hollow means; the
    points of two runs or more stay filled. The TFLOP/s figure (x: world size) drew every
    point filled until it too marked them."""
    from vitfsdp.analysis.figures import plot_efficiency, plot_tflops

    def tflops(df):  # the fake records hold no TFLOP/s: any value moving with ips will do
        return plot_tflops(df.assign(tflops_per_gpu=df["ips"] / 100))

    plot = {"weak_scaling": plot_weak_scaling, "efficiency": plot_efficiency,
            "tflops": tflops}[figure]
    per_x = GPUS_PER_NODE if figure == "tflops" else 1
    fig = plot(write_sweep(tmp_path, ONCE_AND_REPEATED))
    from vitfsdp.analysis.figures import strategy_look

    ddp, full_shard = (to_hex(strategy_look(s)[0]) for s in ("DDP", "FULL_SHARD"))
    assert _hollow_nodes(fig.axes[0], per_x) == {ddp: [4], full_shard: [1, 4]}
    assert "one_run" in fig.drawn_kinds
    labels = [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]
    assert "hollow marker, one run: no spread over repeats" in labels
    repeated = {key: values for key, values in ONCE_AND_REPEATED.items() if len(values) > 1}
    fig = plot(write_sweep(tmp_path / "repeated", repeated))
    assert _hollow_nodes(fig.axes[0], per_x) == {} and "one_run" not in fig.drawn_kinds


def _bottom_marks(ax) -> list[tuple[float, float]]:
    """Where the x marks of runs that reached nothing stand, in display pixels."""
    return [tuple(xy) for c in ax.collections if c.get_label().startswith("_not completed")
            for xy in c.get_offset_transform().transform(c.get_offsets())]


@pytest.mark.parametrize("figure", ["weak_scaling", "efficiency"])
def test_runs_that_reached_nothing_stay_in_the_bottom_band_side_by_side(tmp_path, figure):
    """DDP, FULL_SHARD and HYBRID_2GPU ran out of memory at 4 nodes before any window:
    before, their x marks stacked up the axis (the third at 15 % of its height, on the
    0.1 gridline of efficiency.png: a value it never reached); now all three stand at one
    height in the bottom band, side by side at their lines' x."""
    from vitfsdp.analysis.figures import plot_efficiency
    from vitfsdp.analysis.figures.style import NOT_COMPLETED_Y

    plot = {"weak_scaling": plot_weak_scaling, "efficiency": plot_efficiency}[figure]
    ips = {(s, n): [100.0 * n] for s in ("DDP", "FULL_SHARD", "HYBRID_2GPU") for n in (1, 2)}
    ips |= {(s, 4): [None] for s in ("DDP", "FULL_SHARD", "HYBRID_2GPU")}
    fig = plot(write_sweep(tmp_path, ips))
    fig.canvas.draw()
    ax = fig.axes[0]
    marks = _bottom_marks(ax)
    assert len(marks) == 3
    bottom = ax.transAxes.transform((0, NOT_COMPLETED_Y))[1]
    assert [y for _, y in marks] == pytest.approx([bottom] * 3)
    xs = sorted(x for x, _ in marks)
    assert xs[0] < ax.transData.transform((4, 1))[0] < xs[2] and len(set(xs)) == 3


def test_marks_at_one_x_stand_side_by_side_not_up_the_axis(tmp_path):
    """Two lines drawn at the node count itself (no line shifts: the memory figure without
    its bars) both reached nothing at 2 nodes: the second x stands a step right of the
    first, at its height, not a step up."""
    from collections import Counter

    from vitfsdp.analysis.figures.panels import _mark_not_completed, _new_figure
    from vitfsdp.analysis.figures.style import NOT_COMPLETED_STEP_PT

    df = write_sweep(tmp_path, {("DDP", 2): [None], ("FULL_SHARD", 2): [None]})
    fig, (ax,) = _new_figure(1)
    marked, extras = Counter(), set()
    for strategy, color in (("DDP", "C0"), ("FULL_SHARD", "C2")):
        _mark_not_completed(ax, df[df["strategy"] == strategy], "ips", color, strategy,
                            marked, extras)
    ax.set_xscale("log", base=2)
    ax.set_xlim(1, 4)
    fig.canvas.draw()
    (first, second) = _bottom_marks(ax)
    assert second[1] == pytest.approx(first[1])
    assert second[0] - first[0] == pytest.approx(NOT_COMPLETED_STEP_PT * fig.dpi / 72)
    assert extras == {"failed"}


def test_a_failed_repeat_is_not_hidden_under_its_points_markers(tmp_path):
    """FULL_SHARD at 2 nodes: two runs completed at 190-200 images/s, a third ran out of
    memory after reaching 190. Its x stood at 190, under the completed point's marker (4 of
    the synthetic sample's 8 vit_base failures could not be seen). It now stands in the
    grey strip at the panel's bottom, below every value, at its line's x, black over the
    line's marker and over everything drawn."""
    from tests.fake_records import run_info, write_run
    from vitfsdp.analysis import collect_runs
    from vitfsdp.analysis.figures.panels import STRIP_GID, STRIP_HEIGHT

    write_sweep(tmp_path, {("DDP", 1): [100.0, 101.0], ("DDP", 2): [180.0, 182.0],
                           ("FULL_SHARD", 1): [100.0, 102.0], ("FULL_SHARD", 2): [190.0, 200.0]})
    info = run_info("FULL_SHARD", 2)
    info["config"]["repeat"] = 2
    write_run(tmp_path / "oom", info, 190.0, status="oom")
    df = collect_runs(tmp_path)
    assert df.loc[df["status"] == "oom", "ips_reached"].iloc[0] == pytest.approx(190.0)
    fig = plot_weak_scaling(df)
    fig.canvas.draw()
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.lines if ln.get_label() == "FULL_SHARD"]
    (cross,) = [c for c in ax.collections if c.get_label() == "_not completed FULL_SHARD"]
    (shape,) = [c for c in ax.collections if c.get_label() == "_failed shape FULL_SHARD"]
    (x, y), = cross.get_offset_transform().transform(cross.get_offsets())
    ax_x, ax_y = ax.transAxes.inverted().transform((x, y))
    assert ax_y < STRIP_HEIGHT  # in the strip ...
    lowest = min(ax.transData.transform((1, v))[1] for ln in ax.lines for v in ln.get_ydata())
    assert y < lowest  # ... below every value drawn
    assert x == pytest.approx(ax.transData.transform((line.get_xdata()[1], 1))[0])
    assert list(shape.get_offsets()[0]) == pytest.approx(list(cross.get_offsets()[0]))
    others = [a.get_zorder() for a in [*ax.lines, *ax.collections] if a not in (cross, shape)]
    assert cross.get_zorder() > shape.get_zorder() > max(others)
    assert any(p.get_gid() == STRIP_GID for p in ax.patches)
    legend = " ".join(" ".join(t.get_text().split()) for t in fig.legends[0].get_texts())
    assert "in the grey bottom strip" in legend


@pytest.mark.parametrize("ips", [{("DDP", 1): [10.0], ("FULL_SHARD", 1): [9.0]},
                                 {("DDP", 1): [None], ("DDP", 2): [None]}],
                         ids=["one-node-count", "all-failed"])
def test_the_ideal_is_named_only_where_one_is_drawn(tmp_path, ips):
    """A sweep at one node count on two GPUs a node, and a sweep whose runs all failed:
    the legend named 'ideal (linear)' and the caption 'dashed: ideal linear scaling' where
    no dashed line was drawn; one node count was titled 'Weak scaling'."""
    from vitfsdp.analysis.report import caption

    fig = plot_weak_scaling(write_sweep(tmp_path, ips))
    drawn = [ln for ax in fig.axes for ln in ax.lines
             if ln.get_label().startswith("_ideal") and len(ln.get_xdata()) > 1]
    assert not drawn
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts()) if fig.legends else ""
    assert "ideal (linear)" not in legend
    assert "ideal linear scaling" not in caption("weak_scaling", drawn=fig.drawn_kinds)
    spans = len({nodes for _, nodes in ips}) > 1
    assert fig.get_suptitle().startswith("Weak scaling") == spans, fig.get_suptitle()


def test_runs_sharing_a_repeat_label_are_marked_as_not_known_repeats(tmp_path):
    """The stall export's 172-197 point (two runs under one repeat label, points.csv
    runs_share_repeat 2) was drawn as a filled marker with a bar the legend calls 'min-max
    over repeats'. Such a point is now ringed by a dotted square, named in the legend, and
    counted in the footer; a point of real repeats is not ringed."""
    from vitfsdp.analysis.figures import plot_efficiency
    from vitfsdp.analysis.figures.panels import POOLED_LABEL

    df = write_sweep(tmp_path, {("DDP", 1): [10.0, 11.0], ("DDP", 2): [18.0, 20.0]})
    df.loc[df["nodes"] == 2, "repeat"] = 0
    for fig in (plot_weak_scaling(df), plot_efficiency(df)):
        (ax,) = fig.axes
        rings = [c for c in ax.collections if c.get_label() == POOLED_LABEL]
        assert len(rings) == 1 and len(rings[0].get_offsets()) == 1
        x = rings[0].get_offsets()[0][0]
        assert x in list(measured_lines(ax)["DDP"].get_xdata())  # on the line's point
        assert x > 1.5  # at 2 nodes, not at 1 (two real repeats)
        legend = [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]
        assert POOLED_LABEL in legend
        assert "not known repeats: 1 point(s)" in " ".join(
            fig.legends[0].get_title().get_text().split())
