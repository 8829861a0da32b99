"""What the figures' panels share: new figures and panels, lines per label, measured,
ideal and predicted values, runs that did not complete and their note, published marks,
axes and titles."""

from __future__ import annotations

import itertools
import math
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from vitfsdp.analysis.figures.style import (
    AXES_HEIGHT_IN,
    DPI,
    HOLLOW_LW,
    MAX_COLUMNS,
    MAX_NOTE_ITEMS,
    MIN_ERROR_BAR,
    NOT_COMPLETED_STEP_PT,
    NOT_COMPLETED_Y,
    NOTE_FONTSIZE,
    NOTHING_TO_PLOT,
    PANEL_WIDTH_IN,
    PAPER_RC,
    Y_LABELS_IN,
    _chars_per_line,
    _linestyle,
    _look_label,
    _mpl,
    log_label,
    model_name,
)
from vitfsdp.analysis.lines import competed_flags, judged_busy, line_columns, line_labels
from vitfsdp.analysis.verdict import judged_runs
from vitfsdp.core.throughput import host_bound

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure


def _new_figure(num_panels: int, columns: int = 0) -> tuple[Figure, list]:
    """A figure on the Agg canvas with ``num_panels`` panels, ``columns`` a row (default
    up to :data:`MAX_COLUMNS`), :data:`PANEL_WIDTH_IN` wide each, laid out by matplotlib's
    constrained layout; ``fig.axes`` holds exactly the panels, row by row. The height is a
    first guess: :func:`~vitfsdp.analysis.figures.finish._finish` sets it once the legend and notes
    are known."""
    num_panels = max(1, num_panels)
    columns = columns or min(num_panels, MAX_COLUMNS)
    rows = -(-num_panels // columns)
    fig = _mpl().Figure(figsize=(PANEL_WIDTH_IN * columns, 2 * AXES_HEIGHT_IN * rows), dpi=DPI,
                 layout="constrained")
    _mpl().FigureCanvasAgg(fig)
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    for ax in axes[num_panels:]:
        fig.delaxes(ax)
    return fig, axes[:num_panels]


def _empty_panel(ax, title: str, text: str) -> None:
    """A panel without data: its title and a line saying why."""
    _set_title(ax, title)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _panels(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(model, rows)`` per model, smallest model first (by recorded ``num_params``, then
    name; models with no size recorded last); a missing model name reads ``unknown``."""
    models = df["model"].astype("string").fillna("unknown")
    panels = [(str(m), panel) for m, panel in df.groupby(models, sort=True)]
    if "num_params" not in df:
        return panels

    def size(panel: pd.DataFrame) -> float:
        params = pd.to_numeric(panel["num_params"], errors="coerce").max()
        return math.inf if pd.isna(params) else float(params)

    return sorted(panels, key=lambda mp: size(mp[1]))  # stable: equal sizes by name


def single_device(df: pd.DataFrame) -> bool:
    """Whether every run of ``df`` with a known ``world_size`` ran on one device (and one
    does): nothing crossed a device, so nothing scaled, and no ideal line has a second point
    (the H100 sweeps of 2026-11-26: every point one GPU)."""
    sizes = pd.to_numeric(df["world_size"], errors="coerce").dropna() if "world_size" in df \
        else pd.Series(dtype=float)
    return bool(len(sizes)) and bool((sizes == 1).all())


def _lines(panel: pd.DataFrame, keys: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(label, rows)`` per line of one panel, sorted by label."""
    labels = line_labels(panel, keys)
    return sorted(((str(k), rows) for k, rows in panel.groupby(labels)), key=lambda kv: kv[0])


#: The node axis runs from the smallest node count over this to the largest times this.
NODE_MARGIN = 1.4
#: Distance between neighbouring lines' points at one node count in the line figures
#: (weak scaling, efficiency), as a fraction of the panel's width: each line's markers,
#: bars and marks stand beside the node count, symmetric around it, so that a span inside
#: another line's is seen; the ideal lines stay at the node count.
LINE_STEP = 0.03
#: The most a panel's lines spread to either side of a node count, as a fraction of the
#: distance to the nearest other node count (octaves on the log-2 axis).
MAX_LINE_SPREAD = 0.25


def line_shifts(num_lines: int, nodes: pd.Series) -> list[float]:
    """The factor each of a panel's ``num_lines`` lines (in :func:`_lines`' order) multiplies
    its node counts by, on the log-2 x axis of ``nodes``' counts: :data:`LINE_STEP` of the
    panel's width apart (closer where the lines would spread past :data:`MAX_LINE_SPREAD`),
    centred on the node count; all 1 for one line."""
    counts = sorted({int(n) for n in nodes.dropna()})
    if num_lines < 2 or not counts:
        return [1.0] * num_lines
    octaves = math.log2(counts[-1] / counts[0] * NODE_MARGIN**2)
    gap = min((math.log2(b / a) for a, b in itertools.pairwise(counts)), default=1.0)
    step = min(LINE_STEP * octaves, 2 * MAX_LINE_SPREAD * gap / (num_lines - 1))
    return [2 ** (step * (i - (num_lines - 1) / 2)) for i in range(num_lines)]


def _plot_measured(ax, line: pd.DataFrame, keys: list[str], looks: dict[str, tuple[str, str]],
                   label: str, value: str, how: str, shift: float = 1.0,
                   extras: set[str] | None = None) -> tuple[pd.Series, str]:  # fmt: skip
    """The line's completed ``value`` per node count (``how``: median or max over runs) in
    its colour, marker and framework's line style (an empty line, for the legend, when none
    completed), drawn at ``shift`` times the node count (the middle of its bar where the
    memory figure draws bars); returns those points (by node count) and the colour. Where
    ``extras`` is given, a point that completed once is drawn hollow (``one_run`` added to
    ``extras``): nothing measured its spread over repeats, though its marker looks exact."""
    done = _completed_points(line, value, how)
    color, marker = looks[_look_label(line, keys)]
    # a line with nothing completed still gets its legend entry (its marks use its colour)
    ax.plot(done.index * shift, done.values, ls=_linestyle(line, keys), marker=marker,
            color=color, label=label, zorder=3)
    if extras is not None:
        _hollow_one_run(ax, line, value, done, color, marker, extras, shift)
    return done, color


#: The z-order of a one-run point's hollow marker (over its line's filled one) and of its
#: window bar (:func:`_plot_repeat_range`, the efficiency figure's bounds): over the hollow
#: marker's white face, so the bar runs through the marker it belongs to, seen inside it too.
HOLLOW_Z, WINDOW_ON_MARKER_Z = 3.1, 3.2


def _hollow_one_run(ax, line: pd.DataFrame, value: str, done: pd.Series, color: str,
                    marker: str, extras: set[str], shift: float = 1.0,
                    x: str = "nodes") -> None:  # fmt: skip
    """Each point of ``done`` (by ``x``: node count, or world size; drawn at ``shift``
    times it) that one completed run of ``line`` measured, redrawn hollow over its filled
    marker (white inside, its line's colour around), and ``one_run`` in ``extras`` for the
    legend; points of two runs or more keep their filled marker."""
    runs = _completed(line, value, x)
    counts = runs.groupby(runs[x].astype("int64"))[value].count()
    once = done[done.index.isin(counts.index[counts == 1])]
    if len(once):
        size = PAPER_RC["lines.markersize"]  # as the line's own markers (points)
        ax.scatter(once.index * shift, once.values, marker=marker, s=size**2,
                   facecolors="white", edgecolors=color, lw=HOLLOW_LW, zorder=HOLLOW_Z,
                   label="_one run")
        extras.add("one_run")


def repeats_note(df: pd.DataFrame, value: str = "peak_mem_gib") -> str:
    """The footer's count of the completed runs (with ``value``) a figure's points hold, as
    points.csv ``num_repeats`` counts them (a point: a line at a node count), e.g. ``each
    point: n=3 completed runs`` or ``each point: n=1-3 completed runs (points.csv
    num_repeats)``; ``""`` where none completed."""
    runs = df[(df["status"] == "completed") & df[value].notna() & df["nodes"].notna()]
    if runs.empty:
        return ""
    counts = runs.groupby([*line_columns(runs), "nodes"], dropna=False).size()
    low, high = int(counts.min()), int(counts.max())
    if low == high:
        return f"each point: n={low} completed run{'s' if low > 1 else ''}"
    return f"each point: n={low}-{high} completed runs (points.csv num_repeats)"


def _completed_points(line: pd.DataFrame, value: str, how: str) -> pd.Series:
    """``value`` of the completed runs of a line per node count (``how``: median or max)."""
    done = _completed(line, value)
    points = done.groupby(done["nodes"].astype("int64"))[value].agg(how)
    return points.sort_index()


def _completed(line: pd.DataFrame, value: str, x: str = "nodes") -> pd.DataFrame:
    """``x`` and ``value`` of the line's completed runs with both known that a point's
    figures are taken over: at a point (an ``x``) with runs other work did not compete
    with, only those (:func:`~vitfsdp.analysis.verdict.judged_runs`, points.csv's rule, so
    a marker, its bar and points.csv's images/s agree; the contended runs are ringed and
    counted apart). Two columns, not the frame's every column."""
    mask = (line["status"] == "completed") & line[value].notna() & line[x].notna()
    runs = line.loc[mask]
    judged = judged_runs(competed_flags(runs), [runs[x]])
    return runs.loc[judged, [x, value]]


def _plot_ideal(ax, done: pd.Series, nodes: pd.Series, color: str, label: str) -> bool:
    """Dashed linear scaling from the smallest completed node count over the line's nodes.
    Returns whether it was drawn: not where the line has no node count above that one (a
    dashed line through one point draws nothing, so the legend must not name it)."""
    n0 = done.index.min()
    xs = sorted({int(n) for n in nodes.dropna() if n >= n0})
    if len(xs) < 2:
        return False
    ideal = [done.loc[n0] * n / n0 for n in xs]
    ax.plot(xs, ideal, "--", color=color, alpha=0.7, lw=1, label=f"_ideal {label}")
    return True


def _mark_above_ideal(ax, done: pd.Series, extras: set[str], shift: float = 1.0) -> None:
    """A grey hollow square around each point whose scaling efficiency (ips over the ideal
    line's) rounds above 100 %: noise in weak scaling, or a host-bound, contended or one-run
    baseline, which the legend names
    (:func:`~vitfsdp.analysis.figures.finish.above_ideal_label`); at ``shift`` times the node
    count, as its point (:func:`_plot_measured`)."""
    n0 = done.index.min()
    efficiency = done / (done.loc[n0] * done.index.to_series() / n0)
    above = done[(efficiency * 100).round() > 100]
    if len(above):
        ax.scatter(above.index * shift, above.values, marker="s", facecolors="none",
                   edgecolors="0.4", s=70, lw=0.8, zorder=4, label="_above ideal")
        extras.add("above_ideal")


def _mark_host_bound(ax, line: pd.DataFrame, done: pd.Series, extras: set[str],
                     x: str = "nodes", shift: float = 1.0) -> None:
    """A grey hollow hexagon around each completed point whose median busy share over repeats
    (its least busy rank's, :func:`vitfsdp.analysis.lines.judged_busy`) is host-bound
    (:func:`vitfsdp.core.throughput.host_bound`): its images/s
    (or TFLOP/s) measure the wrapper and the loop, not the device or the network. Nothing
    where the runs did not measure it (CPU ranks).

    Args:
        done: the plotted values, indexed by ``x`` (the line's column on the x axis).
        shift: the factor the points' ``x`` were drawn at (:func:`_plot_measured`).
    """
    if "device_busy_frac" not in line:
        return
    rows = _completed(line.assign(judged_busy=judged_busy(line)), "judged_busy", x)
    busy = rows.groupby(rows[x].astype("int64"))["judged_busy"].median()
    flagged = [n for n, b in busy.items() if host_bound(b) and n in done.index]
    _ring_host_bound(ax, [n * shift for n in flagged], done.loc[flagged].values, extras)


def _ring_host_bound(ax, xs, ys, extras: set[str]) -> None:
    """The grey hollow hexagons of host-bound points at (``xs``, ``ys``), and the legend's
    entry for them (``extras``); nothing where there are none."""
    if len(xs):
        ax.scatter(xs, ys, marker="h", facecolors="none", edgecolors="0.4", s=110, lw=0.8,
                   zorder=4, label="_host-bound")
        extras.add("host_bound")


#: How a point with a run other work competed with is ringed (weak scaling, efficiency): a
#: black dashed circle, wider than the grey host-bound hexagon, so both show on one point.
CONTENDED_RING = dict(marker="o", facecolors="none", edgecolors="black", s=190, lw=0.8,
                      linestyles=(0, (2.5, 1.5)), zorder=4)
#: Its legend entry (a labelled artist: no grey proxy of the figures' finish draws it).
CONTENDED_LABEL = "dashed ring: other work competed with a run of the point (footer: which)"
#: Most contended points the footer names; the rest are counted.
MAX_CONTENDED_ITEMS = 8


def _mark_contended(ax, line: pd.DataFrame, done: pd.Series, label: str, extras: set[str],
                    shift: float = 1.0) -> list[str]:  # fmt: skip
    """Ring each completed point of ``line`` (``done``, by node count; drawn at ``shift``
    times it) that has a run other work competed with (any status:
    :func:`~vitfsdp.analysis.lines.competed_flags`, the rule of points.csv
    ``runs_contended``) with :data:`CONTENDED_RING`, ``contended`` added to ``extras``;
    returns the footer's item per such point, ringed or not (nothing completed there),
    e.g. ``FULL_SHARD at 1 node, 1 of 3 runs``."""
    rows = line[line["nodes"].notna()]
    hit = competed_flags(rows)
    if not hit.any():
        return []
    nodes = rows["nodes"].astype("int64")
    counts = pd.DataFrame({"hit": hit, "nodes": nodes}).groupby("nodes")["hit"].agg(["sum", "size"])
    counts = counts[counts["sum"] > 0]
    ringed = [n for n in counts.index if n in done.index]
    if ringed:
        ax.scatter([n * shift for n in ringed], done.loc[ringed].values,
                   label=CONTENDED_LABEL, **CONTENDED_RING)
        extras.add("contended")
    return [f"{label} at {n} node{'s' if n != 1 else ''}, {c} of {t} run{'s' if t != 1 else ''}"
            for n, (c, t) in counts.astype(int).iterrows()]


#: The mark of a point whose runs share a repeat label (points.csv ``runs_share_repeat``):
#: pooled as repeats, not known to be (:func:`~vitfsdp.analysis.tables.shared_repeats`),
#: so its bar is not known to be the noise between runs.
POOLED_RING = dict(marker="s", facecolors="none", edgecolors="black", s=150, lw=0.8,
                   linestyles=(0, (1, 1.5)), zorder=4)
#: Its legend entry (a labelled artist).
POOLED_LABEL = ("dotted square: runs sharing a repeat label, pooled: not known repeats "
                "(points.csv runs_share_repeat)")


def _mark_pooled(ax, line: pd.DataFrame, done: pd.Series, shift: float = 1.0) -> int:
    """Ring each completed point of ``line`` (``done``, by node count; drawn at ``shift``
    times it) whose completed runs share a ``repeat`` label with :data:`POOLED_RING`: its
    bar spans runs that are not known repeats. Returns how many points it ringed."""
    ok = line[(line["status"] == "completed") & line["nodes"].notna()]
    labelled = pd.DataFrame({"nodes": ok["nodes"].astype("int64"),
                             "repeat": ok["repeat"].fillna(0) if "repeat" in ok else 0})
    pooled = sorted(n for n in set(labelled.loc[labelled.duplicated(keep=False), "nodes"])
                    if n in done.index)
    if pooled:
        ax.scatter([n * shift for n in pooled], done.loc[pooled].values, label=POOLED_LABEL,
                   **POOLED_RING)
    return len(pooled)


def pooled_note(count: int) -> str:
    """The footer's words for the points :func:`_mark_pooled` ringed, e.g. ``not known
    repeats: 1 point(s) pool runs that share a repeat label (points.csv
    runs_share_repeat)``; ``""`` for none."""
    return (f"not known repeats: {count} point(s) pool runs that share a repeat label "
            "(points.csv runs_share_repeat)") if count else ""


def contended_note(items: list[str]) -> str:
    """The footer's sentence naming the points with contended runs (:func:`_mark_contended`'s
    items), e.g. ``contended: FULL_SHARD at 1 node, 1 of 3 runs``; at most
    :data:`MAX_CONTENDED_ITEMS`, the rest counted (points.csv ``runs_contended``); ``""``
    for none."""
    if not items:
        return ""
    more = len(items) - MAX_CONTENDED_ITEMS
    tail = f"; and {more} more (points.csv runs_contended)" if more > 0 else ""
    return "contended: " + "; ".join(items[:MAX_CONTENDED_ITEMS]) + tail


def _mark_not_completed(
    ax, line: pd.DataFrame, value: str, color: str, label: str, marked: Counter,
    extras: set[str], at: str | None = None, reached: str | None = None, shift: float = 1.0,
    marker: str | None = None, strip: bool = False,
) -> list[tuple[bool, str]]:
    """Mark each point of a line with runs without ``value``; return its note items.

    One mark per point, however many of its runs failed: a ``skipped_infeasible`` point with
    a known ``at`` (its predicted value) is a hollow diamond there; any other is an ``x`` at
    what its runs reached before they ended (``reached``: the median over them), else in the
    panel's bottom band (:data:`NOT_COMPLETED_Y`), at its line's x: ``marked`` counts the
    marks at each x, and one whose x is taken stands :data:`NOT_COMPLETED_STEP_PT` further
    right, never higher up (a mark up the axis reads as a value it reached); with
    ``strip``, over a light grey strip (:func:`_shade_strip`) for a figure whose axis keeps
    it free of values (:func:`_make_room_below`).
    With ``marker`` (the line's), each ``x`` is drawn over that marker in the line's colour
    (:data:`FAILED_SHAPE`), so a greyscale print still says whose it is.
    ``extras`` collects the kinds drawn, for the legend; every mark is drawn at ``shift``
    times its node count (see :func:`_plot_measured`). The items are ``(completed_there,
    text)``: one per point, e.g. ``FULL_SHARD nodes=8 (2 oom)``.
    """
    bad = (line["status"] != "completed") | line[value].isna()
    columns = ["nodes", "status", *dict.fromkeys(c for c in (at, reached) if c is not None)]
    missing = line.loc[bad & line["nodes"].notna(), columns]
    skipped = (missing["status"] == "skipped_infeasible") & (
        missing[at].notna() if at is not None else False)
    if skipped.any():  # one diamond per point and predicted value, however many repeats
        where = missing.loc[skipped, ["nodes", at]].astype(float).drop_duplicates()
        ax.scatter(where["nodes"] * shift, where[at], marker="D", facecolors="none",
                   edgecolors=color, s=40, zorder=3, label=f"_skipped {label}")
        extras.add("skipped")
    rest = missing[~skipped]
    at_value, at_bottom = [], {}  # (x, y) in data coordinates; x by its step right
    nodes = rest["nodes"].astype("int64")
    ys = (rest[reached].groupby(nodes).median() if reached is not None
          else pd.Series(float("nan"), index=sorted(set(nodes))))
    for n, y in ys.items():  # one mark per point: the median of what its runs reached
        x = float(n) * shift
        if pd.notna(y) and y > 0:
            at_value.append((x, y))
        else:
            at_bottom.setdefault(marked[x], []).append(x)
            marked[x] += 1
    cross = dict(marker="x", color="black" if marker else color, zorder=FAILED_Z + 0.1,
                 label=f"_not completed {label}")
    shape = dict(marker=marker, color=color, zorder=FAILED_Z, label=f"_failed shape {label}",
                 **FAILED_SHAPE)
    if at_value:  # one collection per kind of mark: fast for hundreds of points
        for look in ([shape] if marker else []) + [cross]:
            ax.scatter(*zip(*at_value, strict=True), **look)
    for step, xs in at_bottom.items():
        for look in ([shape] if marker else []) + [cross]:
            ax.scatter(xs, [NOT_COMPLETED_Y] * len(xs), clip_on=False,
                       transform=_points_right(ax, step * NOT_COMPLETED_STEP_PT), **look)
    if at_bottom and strip:
        _shade_strip(ax)
    if at_value or at_bottom:
        extras.add("failed")
    return _note_items(line, bad, label, value)


#: The z-order of a failure's marks: over every line, bar and ring, where none can hide
#: them. Under each ``x``, the line's own marker in its colour (a little larger than the
#: line's, the x black over it), so strategies differ by shape as well as colour.
FAILED_Z = 5.0
FAILED_SHAPE = dict(s=(PAPER_RC["lines.markersize"] + 1) ** 2, lw=0, alpha=0.85)
#: The bottom strip's height (axes fraction) that holds the marks of runs that reached
#: nothing: what :func:`_make_room_below` keeps free of values (a tenth of the span, of 1.1).
STRIP_HEIGHT = 1 / 11
STRIP_GID = "not-completed strip"


def _shade_strip(ax) -> None:
    """A light grey strip along the panel's bottom (:data:`STRIP_HEIGHT`), once per panel:
    the place of the marks of runs that did not complete, apart from every value."""
    if not any(p.get_gid() == STRIP_GID for p in ax.patches):
        ax.add_patch(_mpl().Rectangle((0, 0), 1, STRIP_HEIGHT, transform=ax.transAxes,
                                      color="0.93", lw=0, zorder=0.5, gid=STRIP_GID))


def _points_right(ax, points: float):
    """``ax``'s x-axis transform (x in data, y in axes fraction), moved ``points`` right."""
    return ax.get_xaxis_transform() + _mpl().ScaledTranslation(
        points / 72, 0, ax.get_figure().dpi_scale_trans)


def _note_items(line: pd.DataFrame, bad: pd.Series, label: str,
                value: str) -> list[tuple[bool, str]]:  # fmt: skip
    """One note item per point with runs that did not complete: ``(completed_there, text)``,
    the text naming the point and counting its runs by status, e.g. ``DDP nodes=4 (2 oom of
    50 runs)`` where other runs of the point completed. Counted with one grouping of the
    line's runs, not one per point."""
    nodes = line["nodes"].astype("Int64").astype("string").fillna("?")
    totals = nodes.value_counts(sort=False)
    failed = line.loc[bad, "status"]
    why = failed.where(failed != "completed", f"completed, no {value}")
    why = why.fillna("unknown")
    counts = why.groupby([nodes[bad], why], sort=False).size()
    by_point: dict[str, list[tuple[str, int]]] = {}
    for (n, status), count in counts.items():
        by_point.setdefault(n, []).append((status, int(count)))
    items = []
    for n in dict.fromkeys(nodes):  # the points in the line's order, as before
        if n not in by_point:
            continue
        # most frequent status first (ties: first seen), as value_counts orders them
        statuses = sorted(by_point[n], key=lambda sc: -sc[1])
        text = ", ".join(f"{c} {s}" for s, c in statuses)
        failed_here = sum(c for _, c in statuses)
        done_there = failed_here < totals[n]
        total = f" of {totals[n]} runs" if done_there else ""
        items.append((done_there, f"{label} nodes={n} ({text}{total})"))
    return items


def _plot_repeat_range(ax, line: pd.DataFrame, value: str, color: str, extras: set[str],
                       x: str = "nodes", scale: float = 1.0, shift: float = 1.0,
                       windows: bool = True) -> None:  # fmt: skip
    """A min-max error bar at each ``x`` (node count, or world size): over the point's runs
    where it ran more than once (capped), else over its one run's timed windows (thin and
    uncapped: the least its noise can be, the noise between runs unmeasured; none with
    ``windows=False``, for a ``value`` that does not move with images/s, such as memory).
    A window's ``value`` is the run's ``value`` times the window's images/s over the run's
    (``ips_min`` and ``ips_max`` over ``ips``: TFLOP/s per GPU and MFU move with images/s at
    a fixed model and world). Values are multiplied by ``scale`` (the axis' unit); the bars stand
    at ``shift`` times ``x``, as the line's points (:func:`_plot_measured`): a window bar
    through its point's hollow marker, over its face (:data:`WINDOW_ON_MARKER_Z`), so it is
    not taken for another line's at that ``x``. Drawn where the
    span exceeds :data:`MIN_ERROR_BAR` of the median (on the log axis a smaller one hides
    under the marker: not drawn, not in the legend)."""
    done = _completed(line, value, x)
    stats = done.groupby(done[x].astype("int64"))[value].agg(["median", "min", "max", "count"])
    stats[["median", "min", "max"]] *= scale
    if windows and {"ips", "ips_min", "ips_max"} <= set(line.columns):
        runs = line.loc[done.index, list(dict.fromkeys([x, value, "ips", "ips_min",
                                                        "ips_max"]))].dropna()
        runs = runs.set_index(runs[x].astype("int64"))
        once = runs[runs.index.isin(stats.index[stats["count"] == 1])]
        per_ips = once[value] * scale / once["ips"]
        _error_bars(ax, once[value] * scale, once["ips_min"] * per_ips,
                    once["ips_max"] * per_ips,
                    dict(ecolor=color, **WINDOWS_BAR, zorder=WINDOW_ON_MARKER_Z), "windows",
                    extras, shift=shift)
    stats = stats[stats["count"] > 1]
    _error_bars(ax, stats["median"], stats["min"], stats["max"],
                dict(ecolor=color, **REPEATS_BAR), "repeats", extras, shift=shift)


def _bar_spreads(ax, xs: Sequence[float], middle: pd.Series, low: pd.Series,
                 high: pd.Series, runs: pd.Series, extras: set[str]) -> None:  # fmt: skip
    """Error bars on the bars at ``xs`` (one per row of the Series, in order): min-max over
    repeats (capped) where ``runs`` >= 2, else over the one run's timed windows (thin,
    uncapped: :data:`~vitfsdp.analysis.figures.finish.PROXIES`' ``windows``), from ``low``
    to ``high`` around ``middle`` (the bar's height); none under :data:`MIN_ERROR_BAR` of
    the height, as on the line figures."""
    xs = np.asarray(xs, dtype=float)
    wide = ((high - low) > MIN_ERROR_BAR * middle).to_numpy()
    repeated = (runs.fillna(1) >= 2).to_numpy()
    for rows, look, mark in ((wide & repeated, dict(capsize=2, lw=0.8), "repeats"),
                             (wide & ~repeated, dict(capsize=0, lw=0.6), "windows")):
        if rows.any():
            mid = middle.to_numpy()[rows]
            ax.errorbar(xs[rows], mid, yerr=[mid - low.to_numpy()[rows],
                                             high.to_numpy()[rows] - mid],
                        fmt="none", ecolor="black", **look)
            extras.add(mark)


#: The line figures' error bars: capped over repeats, thin and uncapped over one run's
#: windows (through the point's hollow marker, over its face: :data:`WINDOW_ON_MARKER_Z`).
REPEATS_BAR, WINDOWS_BAR = dict(capsize=3, lw=1), dict(capsize=0, lw=0.8)


def _error_bars(ax, middle: pd.Series, low: pd.Series, high: pd.Series, look: dict,
                mark: str, extras: set[str], shift: float = 1.0) -> None:  # fmt: skip
    """Error bars from ``low`` to ``high`` around ``middle`` (all indexed by node count,
    drawn at ``shift`` times it) where the span exceeds :data:`MIN_ERROR_BAR` of
    ``middle``; ``mark`` is added to ``extras`` (the caption's words) where one was drawn."""
    wide = (high - low) > MIN_ERROR_BAR * middle
    if wide.any():
        mid, lo, hi = middle[wide], low[wide], high[wide]
        ax.errorbar(mid.index * shift, mid.values,
                    yerr=[(mid - lo).values, (hi - mid).values], fmt="none", **look)
        extras.add(mark)


def _plot_predicted(ax, line: pd.DataFrame, value: str, color: str, label: str,
                    extras: set[str], shift: float = 1.0,
                    marker: str | None = None) -> bool:  # fmt: skip
    """The plan's prediction ``value`` per node count as a dotted line (every status: a
    skipped point's prediction is part of the line), at ``shift`` times the node count (as
    :func:`_plot_measured`), its points small filled ``marker``s (the line's: strategies
    differ by shape as well as colour; a dot without one); True if one was drawn."""
    known = line.loc[line[value].notna() & line["nodes"].notna(), ["nodes", value]]
    if known.empty:
        return False
    pred = known.groupby(known["nodes"].astype("int64"))[value].first().sort_index()
    ax.plot(pred.index * shift, pred.values, ls=":", lw=1.2, marker=marker or ".",
            ms=PREDICTED_MS if marker else None, color=color, label=f"_predicted {label}",
            zorder=3)
    extras.add("predicted")
    return True


#: Size (points) of a prediction's markers: smaller than a measured point's, so the two
#: are not taken for one another.
PREDICTED_MS = 2.6


def _study(label: str) -> str:
    """The study's short name in a published label: ``ORNL, Frontier, 2023`` -> ``ORNL``."""
    return label.split(",")[0]


def _unit_word(unit: str) -> str:
    """The published unit's first word in a reference.csv unit: ``GiB per rank ... here;
    GB per GPU ... published`` -> ``GB``."""
    words = unit.split(" here; ")[-1].split()
    return words[0] if words else ""


def _plot_published(ax, published: pd.DataFrame, model: str, label: str, color: str,
                    extras: set[str]) -> None:  # fmt: skip
    """A hollow star in the line's colour at each published images/s whose setup the line's
    point matches (:func:`vitfsdp.analysis.reference.reference_table`: reference.csv)."""
    rows = published[(published["model"] == model) & (published["configuration"] == label)]
    if len(rows):
        ax.scatter(rows["nodes"].astype(float), rows["published"].astype(float), marker="*",
                   facecolors="none", edgecolors=color, s=90, lw=0.9, zorder=5,
                   label=f"_published {label}")
        extras.add("reference")


def _published_labels(published: pd.DataFrame) -> dict[str, str]:
    """The legend text of the published-figure mark: its studies' labels, e.g.
    ``{"reference": "published: ORNL, Frontier, 2023"}``; empty when nothing matched."""
    labels = sorted(set(published["label"].dropna().astype(str))) if len(published) else []
    return {"reference": "published: " + "; ".join(labels)} if labels else {}


#: Mantissas of a log axis' labelled ticks, by the most decades the axis spans: dense over
#: narrow spans (a sweep of 1 and 2 nodes spans less than a decade), powers of 10 past them.
LOG_TICK_SUBS = ((1.0, (1, 1.5, 2, 3, 4, 5, 7)), (1.5, (1, 2, 3, 5)), (3.0, (1, 2, 5)),
                 (math.inf, (1,)))


def _log_y_axis(ax) -> None:
    """Log y with plain-number ticks (:data:`LOG_TICK_SUBS`), the axis running from the
    labelled tick at or below everything drawn (points, bars, ideal, predicted and failure
    marks) to the one at or above it, so every value lies between two labels.

    A panel with nothing drawn at a positive value (no run completed, none predicted) keeps
    a linear axis without ticks and says so in its middle: a log axis has no range then
    (matplotlib raises "Data cannot be log-scaled" when the figure is drawn)."""
    y0 = ax.dataLim.y0
    if not (math.isfinite(y0) and y0 > 0):
        ax.set_yticks([])
        ax.text(0.5, 0.5, NOTHING_TO_PLOT, ha="center", va="center", transform=ax.transAxes,
                color="0.4")
        return
    ax.set_yscale("log")
    ticks = _log_ticks(*ax.get_ylim())  # autoscaled: the data and matplotlib's margins
    ax.set_yticks(ticks, labels=[f"{y:,.0f}" if y >= 1 and y == round(y) else f"{y:g}"
                                 for y in ticks])
    ax.set_ylim(ticks[0], ticks[-1])
    ax.yaxis.set_minor_formatter(_mpl().NullFormatter())


def _log_ticks(low: float, high: float) -> list[float]:
    """Labelled ticks of a log axis from ``low`` to ``high`` (both > 0): every mantissa of
    :data:`LOG_TICK_SUBS` for the span's decades in each decade, from the last at or below
    ``low`` to the first at or above ``high`` (at least two)."""
    high = max(high, low * 1.01)
    decades = math.log10(high / low)
    subs = next(subs for most, subs in LOG_TICK_SUBS if decades <= most)
    ticks = sorted(float(f"{m}e{k}") for k in range(math.floor(math.log10(low)) - 1,
                                                      math.ceil(math.log10(high)) + 1)
                   for m in subs)  # fmt: skip
    first = max(i for i, t in enumerate(ticks) if t <= low * (1 + 1e-9))
    last = min(i for i, t in enumerate(ticks) if t >= high * (1 - 1e-9))
    return ticks[first:last + 1]


def _make_room_below(ax) -> None:
    """Lower the y axis by a tenth of its span (a log axis: of its decades) so the ``x``
    marks in the bottom strip (:data:`STRIP_HEIGHT`) clear the lowest value."""
    low, high = ax.get_ylim()
    if ax.get_yscale() == "log":
        if low > 0 and high > low:
            ax.set_ylim(low / (high / low) ** 0.1, high)
    elif high > low:
        ax.set_ylim(low - 0.1 * (high - low), high)


def _style_panel(ax, panel: pd.DataFrame, title: str, ylabel: str,
                 notes: list[tuple[bool, str]], remarks: Sequence[str] = ()) -> None:  # fmt: skip
    """Log-2 node axis with node counts as ticks, labels, title and, under the x label, the
    not-completed note (:func:`_note_text`) followed by ``remarks`` (sentences on the panel
    as a whole, such as :data:`~vitfsdp.analysis.figures.memory.TINY_STATE`): below the
    plotting area, where no text can run through the data (:func:`_write_note`)."""
    nodes = sorted({int(n) for n in panel["nodes"].dropna()})
    if nodes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(nodes, labels=[str(n) for n in nodes])
        ax.xaxis.set_minor_locator(_mpl().NullLocator())
        ax.set_xlim(nodes[0] / NODE_MARGIN, nodes[-1] * NODE_MARGIN)
    ax.set_xlabel(log_label("nodes") if nodes else "nodes")
    ax.set_ylabel(log_label(ylabel) if ax.get_yscale() == "log" else ylabel)
    _set_title(ax, title)
    ax.grid(True, which="major", alpha=0.3)
    ax.tick_params(labelsize=PAPER_RC["xtick.labelsize"])  # kept if saved outside PAPER_RC
    _write_note(ax, notes, remarks)


def _write_note(ax, notes: list[tuple[bool, str]], remarks: Sequence[str] = ()) -> None:
    """The not-completed note (:func:`_note_text`) followed by ``remarks``, just under the
    panel's x label (under its tick labels where the label is empty), wrapped to the
    panel's width; nothing where there are neither."""
    if notes or remarks:
        width = _chars_per_line(PANEL_WIDTH_IN - Y_LABELS_IN, NOTE_FONTSIZE)
        text = "\n".join(textwrap.fill(part, width=width)
                         for part in ([_note_text(notes)] if notes else []) + list(remarks))
        ax.annotate(text, xy=(0, 0), xycoords=("axes fraction", ax.xaxis.label),
                    xytext=(0, -3), textcoords="offset points", va="top", ha="left",
                    fontsize=NOTE_FONTSIZE)  # fmt: skip


def _note_text(notes: list[tuple[bool, str]]) -> str:
    """The not-completed note of a panel: points where nothing completed first, at most
    :data:`MAX_NOTE_ITEMS` of them, the rest counted (every run: failures.csv)."""
    ordered = [text for done, text in sorted(notes, key=lambda n: n[0])]
    shown = ordered[:MAX_NOTE_ITEMS]
    more = len(ordered) - len(shown)
    tail = f"; and {more} more points (failures.csv)" if more else ""
    return "not completed: " + "; ".join(shown) + tail


#: Inches of a panel's width a title leaves free (its axes are centred right of the y label).
TITLE_MARGIN_IN = 0.4


def _set_title(ax, title: str) -> None:
    """The panel's title, each line wrapped to the panel's width (long model names), at
    most two lines: past them the second line is shortened with ``...``."""
    # less a margin: a title centred over the axes runs past the figure's edge on its side
    # (ViT-3B/14 (ORNL, SwiGLU; 3,067.0M params, 224 px) by 15 px at 300 dpi)
    width = _chars_per_line(PANEL_WIDTH_IN - TITLE_MARGIN_IN, PAPER_RC["axes.titlesize"])
    lines = [wrapped for line in title.split("\n") for wrapped in _wrap_title(line, width)]
    if len(lines) > 2:
        lines = [lines[0], " ".join(lines[1:])[:width - 3].rstrip() + "..."]
    ax.set_title("\n".join(lines))


def _wrap_title(line: str, width: int) -> list[str]:
    """``line`` in lines of ``width`` characters at most, broken after its last ``; `` or
    ``: `` that leaves a first line that fits (``ViT-H/14 (ORNL, SwiGLU;`` / ``635.0M params,
    224 px)``, not ``... 224`` / ``px)``), else where :func:`textwrap.wrap` breaks it."""
    if len(line) <= width:
        return [line]
    cut = max(line.rfind(sep, 0, width) for sep in ("; ", ": "))
    if cut > 0:
        return [line[:cut + 1], *_wrap_title(line[cut + 2:], width)]
    return textwrap.wrap(line, width)


def _panel_title(model: str, panel: pd.DataFrame) -> str:
    """The model's readable name (:func:`~.style.model_name`: ``ViT-H/14 (ORNL, SwiGLU)``,
    ``ViT-H/14 (timm)``) with its parameter count in millions when known and its input side
    when every run of the panel shares one (``ViT-S/16 (timm; 21.6M params, 32 px)``: the
    demo's ViT-S/16 runs at 32 px, not the 224 its name suggests)."""
    parts = []
    params = panel["num_params"].dropna()
    if len(params):
        parts.append(f"{params.iloc[0] / 1e6:,.1f}M params")
    sizes = panel["img_size"].dropna().unique() if "img_size" in panel else []
    if len(sizes) == 1:
        parts.append(f"{int(sizes[0])} px")
    name = model_name(model)
    if parts and name.endswith(")"):  # ViT-H/14 (ORNL, SwiGLU; 635.4M params, 224 px)
        return f"{name[:-1]}; {', '.join(parts)})"
    return f"{name} ({', '.join(parts)})" if parts else name
