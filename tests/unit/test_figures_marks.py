"""What a reader of the figures alone must be able to tell: which points other work competed
with, a published figure only where it compares node with node, a JAX point from the
PyTorch point beside it, and a run that ended before completing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from tests.fake_records import run_info, write_run, write_sweep
from tests.unit.test_reference import ornl_like
from tests.unit.test_reference import write as write_ornl
from vitfsdp.analysis import collect_runs, plot_loss, plot_memory, plot_weak_scaling
from vitfsdp.analysis.figures import plot_efficiency
from vitfsdp.analysis.figures.memory import MARK_SHAPES
from vitfsdp.analysis.figures.panels import CONTENDED_LABEL
from vitfsdp.analysis.figures.style import LINE_MARKERS, STRATEGY_LOOKS, VARIANT_MARKERS


def _footer(fig) -> str:
    return " ".join(fig.legends[0].get_title().get_text().split())


def _legend(fig) -> list[str]:
    return [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]


def _contended_sweep(root: Path) -> pd.DataFrame:
    """FULL_SHARD and DDP at 1 and 2 nodes, three repeats each on a 2-core host; other work
    kept 1.5 cores busy beside FULL_SHARD's second repeat at 1 node only."""
    for strategy in ("FULL_SHARD", "DDP"):
        for nodes in (1, 2):
            for repeat in range(3):
                info = run_info(strategy, nodes)
                info["config"]["repeat"] = repeat
                info["device"]["host_cpus"] = 2
                run_dir = root / f"{strategy}_{nodes}_r{repeat}"
                write_run(run_dir, info, 100.0 * nodes * (1 + 0.01 * repeat))
                if (strategy, nodes, repeat) == ("FULL_SHARD", 1, 1):
                    (run_dir / "host.json").write_text(json.dumps({"other_cpus": 1.5,
                                                                   "host_cpus": 2}))
    return collect_runs(root)


def _rings(ax) -> list[tuple[float, float]]:
    return [tuple(xy) for c in ax.collections if c.get_label() == CONTENDED_LABEL
            for xy in c.get_offsets()]


def test_the_contended_point_is_ringed_and_named_in_the_footer(tmp_path: Path) -> None:
    """Before, the footer said "other work used 1.5 of 2 cores during 1 run" and no point
    said which. Now FULL_SHARD at 1 node (1 of its 3 runs contended) is ringed in the
    weak-scaling and the efficiency figures, at its point, and the footer names it; no other
    point is ringed."""
    df = _contended_sweep(tmp_path)
    for plot in (plot_weak_scaling, plot_efficiency):
        fig = plot(df)
        ax = fig.axes[0]
        (full_shard,) = [ln for ln in ax.lines if ln.get_label().startswith("FULL_SHARD")]
        at_1 = (full_shard.get_xdata()[0], full_shard.get_ydata()[0])
        assert _rings(ax) == [at_1], plot.__name__
        assert "contended: FULL_SHARD at 1 node, 1 of 3 runs" in _footer(fig), _footer(fig)
        assert CONTENDED_LABEL in _legend(fig) and "contended" in fig.drawn_kinds


def test_no_ring_and_no_footer_words_without_contention(tmp_path: Path) -> None:
    df = write_sweep(tmp_path, {("FULL_SHARD", 1): [10.0, 11.0], ("FULL_SHARD", 2): [19.0, 20.0]})
    fig = plot_weak_scaling(df)
    assert not _rings(fig.axes[0]) and "contended" not in _footer(fig)


def test_a_published_node_of_8_gcds_is_not_drawn_beside_one_gpu(tmp_path: Path) -> None:
    """Four H100s at 1,324 images/s and ORNL's node of 8 MI250X GCDs at 1,205 on one global
    axis read about alike, where per device they are 2.2x apart (reference.csv). The star is
    left out and the footer says where the comparison is; a node of 8 GPUs gets its star."""
    info = ornl_like("FULL_SHARD")
    info["world"].update(size=4, ranks_per_node=4)
    info["config"]["cluster"] = {"name": "local", "gpus_per_node": 4}
    info["device"] = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.0,
                      "peak_flops": 989e12}
    write_ornl(tmp_path / "h100" / "fs", info, 1324.0)
    fig = plot_weak_scaling(collect_runs(tmp_path / "h100"))
    assert "reference" not in fig.drawn_kinds
    assert not [c for c in fig.axes[0].collections if str(c.get_label()).startswith("_published")]
    assert ("compared per device in reference.csv ratio_per_device: ORNL, Frontier, 2023 (8 x "
            "AMD MI250X GCD a node): ours / published per device 2.2") in _footer(fig)
    write_ornl(tmp_path / "node" / "fs", ornl_like("FULL_SHARD"), 1100.0)
    fig = plot_weak_scaling(collect_runs(tmp_path / "node"))
    assert "reference" in fig.drawn_kinds and "per device" not in _footer(fig)


def test_a_jax_point_differs_in_shape_from_the_pytorch_point_beside_it(tmp_path: Path) -> None:
    """FULL_SHARD at one node under JAX and under PyTorch, one run each: both were green
    hollow squares, told apart only by a line style a lone point has not. The JAX line now
    has its own marker, in the legend too; the PyTorch line keeps FULL_SHARD's."""
    for framework, ips in (("torch", 201.0), ("jax", 293.0)):
        info = run_info("FULL_SHARD", 1, device="cuda")
        info["config"]["framework"] = framework
        write_run(tmp_path / framework, info, ips)
    df = collect_runs(tmp_path)
    for fig in (plot_weak_scaling(df), plot_memory(df)):
        lines = {ln.get_label(): ln for ln in fig.axes[0].lines
                 if ln.get_label().startswith("FULL_SHARD")}
        markers = {label.split()[1]: ln.get_marker() for label, ln in lines.items()}
        assert markers["torch"] == STRATEGY_LOOKS["FULL_SHARD"][1]
        assert markers["jax"] != markers["torch"] and markers["jax"] in VARIANT_MARKERS
        handles = {h.get_label(): h.get_marker() for h in fig.legends[0].legend_handles
                   if h.get_label().startswith("FULL_SHARD")}
        assert handles == {label: ln.get_marker() for label, ln in lines.items()}


def test_memory_marks_take_shapes_no_line_uses() -> None:
    """The reserved mark was a hollow circle and the device-used mark a hollow triangle:
    DDP's and NO_SHARD's shapes, and a one-run point is hollow too."""
    taken = {m for _, m in STRATEGY_LOOKS.values()} | set(LINE_MARKERS) | set(VARIANT_MARKERS)
    assert not set(MARK_SHAPES.values()) & taken


def test_a_failed_repeats_x_in_memory_stands_beside_its_completed_point(tmp_path: Path) -> None:
    """FULL_SHARD at 2 nodes: two runs completed, one ran out of memory after reaching the
    peak; its x was drawn at the completed marker's x (under it where the peaks agree). It
    now stands left of it."""
    df = write_sweep(tmp_path, {("FULL_SHARD", 1): [10.0, 11.0],
                                ("FULL_SHARD", 2): [19.0, 20.0]})
    info = run_info("FULL_SHARD", 2)
    info["config"]["repeat"] = 2
    write_run(tmp_path / "oom", info, 18.0, status="oom")
    df = collect_runs(tmp_path)
    ax = plot_memory(df).axes[0]
    (line,) = [ln for ln in ax.lines if ln.get_label() == "FULL_SHARD"]
    (x_mark,) = [c for c in ax.collections if c.get_label().startswith("_not completed")]
    (mx, my), = x_mark.get_offsets()
    assert mx < line.get_xdata()[1] / 1.05 and my > 0


def test_a_loss_line_cut_short_ends_in_an_x_named_in_the_footer(tmp_path: Path) -> None:
    """DDP at 2 nodes ran out of memory after its windows: its loss line ended at step 8
    labelled "n=2" like a completed one. Its last step is now an x and the footer says how
    it ended."""
    write_sweep(tmp_path, {("DDP", 1): [10.0]})
    write_run(tmp_path / "oom", run_info("DDP", 2), 18.0, status="oom")
    fig = plot_loss(collect_runs(tmp_path))
    (x_mark,) = [c for c in fig.axes[0].collections if c.get_label() == "_not completed"]
    assert [tuple(xy) for xy in x_mark.get_offsets()] == [(8.0, 2.0)]
    assert "not completed (x at the run's last step): DDP at 2 nodes: 1 oom of 1 runs, last " \
           "step 8." in _footer(fig)
    assert "failed" in fig.drawn_kinds


def test_prefetch_bar_labels_stay_inside_the_axes_and_off_the_rings(tmp_path: Path) -> None:
    """Six variants of three runs on a GPU (one of two: each bar says its n), one run
    contended, NONE host-bound: the
    turned "n=3, 1 contended" ran up through the panel and figure titles, and "n=3" sat on
    the host-bound hexagons. Every label now ends inside the axes and clear of every ring."""
    from tests.fake_records import write_ablation_run
    from vitfsdp.analysis.figures import plot_prefetch

    speeds = {"BACKWARD_PRE": 800.0, "BACKWARD_POST": 760.0, "NONE": 700.0}
    for (prefetch, ips), limit, repeat in (
            (item, lim, rep) for item in speeds.items() for lim in (True, False)
            for rep in range(2 if (item[0], lim) == ("BACKWARD_POST", False) else 3)):
        write_ablation_run(tmp_path, prefetch, limit, repeat, ips * (1 + 0.01 * repeat),
                           device="cuda", busy=0.5 if prefetch == "NONE" else 0.95,
                           other_cpus=1.5 if (prefetch, limit, repeat) == (
                               "BACKWARD_PRE", False, 2) else None)
    fig = plot_prefetch(collect_runs(tmp_path))
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    box = ax.get_window_extent(renderer)
    labels = [t for t in ax.texts if t.get_gid() == "runs"]
    assert len(labels) == 6 and any("contended" in t.get_text() for t in labels)
    rings = [c for c in ax.collections if c.get_label() == "_host-bound"]
    assert rings
    for text in labels:
        extent = text.get_window_extent(renderer)
        assert box.y0 <= extent.y0 and extent.y1 <= box.y1, text.get_text()
        for ring in rings:  # each hexagon: 110 pt² of marker area, about 10.5 pt across
            radius = np.sqrt(ring.get_sizes()[0]) / 2 * fig.dpi / 72
            for x, y in ax.transData.transform(ring.get_offsets()):
                clear = (extent.x1 < x - radius or extent.x0 > x + radius
                         or extent.y0 > y + radius or extent.y1 < y - radius)
                assert clear, text.get_text()


def test_a_points_marker_is_points_csv_figure_over_its_uncontended_runs(tmp_path: Path) -> None:
    """points.csv takes a point's images/s over the runs other work did not compete with
    (e9320fb); weak_scaling.png still drew the median of every run, so its marker and bar
    disagreed with the table beside it. Here the contended repeat is made slow (60 where
    the others read 100 and 102): the marker is their median, 101, as in points.csv."""
    from vitfsdp.analysis.tables import points_table

    df = _contended_sweep(tmp_path)
    slow = df["run_dir"].astype(str).str.endswith("FULL_SHARD_1_r1")
    df.loc[slow, "ips"] = 60.0
    points = points_table(df)
    table = points[(points["strategy"] == "FULL_SHARD") & (points["nodes"] == 1)]["ips"]
    assert table.tolist() == [101.0]
    fig = plot_weak_scaling(df)
    drawn = [line.get_ydata() for ax in fig.axes for line in ax.get_lines()
             if line.get_label().startswith("FULL_SHARD")]
    assert any(np.isclose(y[0], 101.0) for y in drawn), drawn


def test_tflops_points_are_taken_over_the_uncontended_runs_too(tmp_path: Path) -> None:
    """tflops.png took the median of every row of a line, contended runs included."""
    from vitfsdp.analysis.figures.tflops import plot_tflops
    from vitfsdp.analysis.schema import flop_unit

    df = _contended_sweep(tmp_path)
    slow = df["run_dir"].astype(str).str.endswith("FULL_SHARD_1_r1")
    df["tflops_per_gpu"] = df["ips"] * 0.01  # what the run's FLOPs make of its images/s
    df.loc[slow, "tflops_per_gpu"] *= 0.6
    clean = df[(df["strategy"] == "FULL_SHARD") & (df["nodes"] == 1) & ~slow]
    every = df[(df["strategy"] == "FULL_SHARD") & (df["nodes"] == 1)]
    assert clean["tflops_per_gpu"].median() != every["tflops_per_gpu"].median()
    _, scale = flop_unit(df["tflops_per_gpu"])
    fig = plot_tflops(df)
    drawn = [line.get_ydata() for ax in fig.axes for line in ax.get_lines()
             if line.get_label().startswith("FULL_SHARD")]
    assert any(np.isclose(y[0], clean["tflops_per_gpu"].median() * scale) for y in drawn), drawn


def test_every_one_run_marker_reads_hollow(tmp_path: Path) -> None:
    """DDP with activation checkpointing ('*') and FULL_SHARD under PyTorch beside its JAX
    line ('X') ran once on the H100, yet their hollow markers looked filled (the outline
    filled the star's and the cross's thin face), as points of repeats. Every marker a line
    may take now leaves at least MIN_HOLLOW_SHARE of its face white, as drawn on the H100
    exports' weak_scaling.png (read off its axes) and for every strategy's and variant's
    marker."""
    from tests.figure_marks import unfilled_share
    from tests.unit.test_figures_single_device import H100
    from vitfsdp.analysis.collect import read_runs_csv
    from vitfsdp.analysis.figures.panels import _hollow_one_run, _new_figure
    from vitfsdp.analysis.figures.style import MIN_HOLLOW_SHARE

    df, _ = read_runs_csv(H100)
    fig = plot_weak_scaling(df)
    hollow = [c for ax in fig.axes for c in ax.collections if c.get_label() == "_one run"]
    assert len(hollow) >= 6
    for marks in hollow:
        assert unfilled_share(marks) >= MIN_HOLLOW_SHARE
    one = write_sweep(tmp_path, {("DDP", 1): [10.0]})
    for marker in {m for _, m in STRATEGY_LOOKS.values()} | set(LINE_MARKERS) | set(
            VARIANT_MARKERS):
        _, (ax,) = _new_figure(1)
        _hollow_one_run(ax, one, "ips", pd.Series([10.0], index=[1]), "black", marker, set())
        (marks,) = ax.collections
        assert unfilled_share(marks) >= MIN_HOLLOW_SHARE, marker


def test_the_usual_strategies_differ_in_grey_level() -> None:
    """DDP, FULL_SHARD, HYBRID_2GPU and SHARD_GRAD_OP printed at grey levels 0.36-0.44
    (matplotlib's tab10), FULL_SHARD and SHARD_GRAD_OP green against red: one grey in a
    black-and-white print, one colour to a red-green colour-blind reader. The usual six now
    take colour-blind-safe colours (Paul Tol's muted, Okabe-Ito) at least MIN_GREY_STEP
    apart in grey level."""
    from tests.figure_marks import grey
    from vitfsdp.analysis.figures.style import MIN_GREY_STEP, USUAL_STRATEGIES

    assert MIN_GREY_STEP >= 0.1
    levels = sorted(grey(STRATEGY_LOOKS[s][0]) for s in USUAL_STRATEGIES)
    assert min(np.diff(levels)) >= MIN_GREY_STEP - 1e-3, levels
    assert 0.15 <= levels[0] and levels[-1] <= 0.8  # none near black (the device) or white
