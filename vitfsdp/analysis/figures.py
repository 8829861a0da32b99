"""Figures of a weak-scaling study: images/s and peak memory per GPU against node count.

Both figures take a :func:`vitfsdp.analysis.collect.collect_runs` frame (every run, whatever
its status) and draw one line per strategy (split by any varying config, see
:func:`vitfsdp.analysis.collect.line_columns`) and one panel per model. When PyTorch and JAX
runs are both present, the framework is the line style (:data:`FRAMEWORK_STYLES`) and the
colour and marker are the rest of the line's identity, so each strategy looks the same in
both. Runs that did not complete are never dropped silently: they are drawn as an ``x`` at
the bottom of the panel in their line's colour and listed in a note under the axes.

Sized for papers: each panel is :data:`PANEL_WIDTH_IN` (one column of a two-column paper)
wide, with 7-8 pt text (:data:`PAPER_RC`), so a one-panel figure prints at 100 % in a column
and a two-panel figure across the page. Lines differ by marker as well as colour, and the
ideal, predicted and measured lines by dash style, so a greyscale print stays readable. The
legend is one per figure, below the panels, never over the data.

Figures are built on the Agg canvas without ``pyplot``, so no global state is touched and no
figure is left open; the functions return the :class:`~matplotlib.figure.Figure`.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.metadata
import json
import logging
import math
import multiprocessing
import os
import sys
import textwrap
import threading
import types
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.collect import (
    collect_runs,
    contention_note,
    frame_hash,
    line_columns,
    line_labels,
    loss_curves,
)
from vitfsdp.analysis.collect import label_columns as _label_keys
from vitfsdp.analysis.collect import line_label as _line_label
from vitfsdp.analysis.recipe import recipe_table
from vitfsdp.analysis.reference import matched, recipe_reference, reference_table
from vitfsdp.analysis.tables import ABLATION_COLUMNS, PREFETCH_ORDER, points_table, prefetch_table
from vitfsdp.core.throughput import HOST_BOUND_BUSY_FRAC, host_bound
from vitfsdp.records import write_json_atomic

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

log = logging.getLogger(__name__)


@functools.cache
def _mpl() -> types.SimpleNamespace:
    """The matplotlib names the figures use, imported on the first figure drawn: an analysis
    whose figures did not change (:class:`PendingFigures`) imports no matplotlib, which
    would be a third of its time."""
    # matplotlib at first use, not with this module (see above)
    import matplotlib
    import matplotlib.colors
    from matplotlib import font_manager
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    return types.SimpleNamespace(
        matplotlib=matplotlib, font_manager=font_manager, FigureCanvasAgg=FigureCanvasAgg,
        Figure=Figure, FontProperties=FontProperties, Line2D=Line2D, Patch=Patch,
        FuncFormatter=FuncFormatter, LogLocator=LogLocator, NullFormatter=NullFormatter,
        NullLocator=NullLocator)

DPI = 300  # PNG resolution (dots per inch): print quality at the figure's own size
#: zlib's level for the PNGs (Pillow's default is 6): level 1 saves a quarter of the time to
#: encode (0.24 s of memory.png's 1.5 s at 10,000 runs) for files 15 % larger.
PNG_COMPRESS_LEVEL = 1
#: Height (axes fraction) at which runs that did not complete are marked, and the step up
#: between marks of different lines at the same node count.
NOT_COMPLETED_Y = 0.04
NOT_COMPLETED_STEP = 0.05
#: The text in a panel whose runs give nothing to draw at a value (none completed).
NOTHING_TO_PLOT = "no completed run: nothing to plot\n(why: failures.csv)"
#: Width of one panel in inches, labels included: one column of a two-column paper (IEEE,
#: ACM and Springer columns are 3.3-3.5 in), so a figure prints at 100 % with no shrinking.
PANEL_WIDTH_IN = 3.5
AXES_HEIGHT_IN = 1.9  # height of each panel's plotting area (inches); the figure grows to fit
MAX_COLUMNS = 2  # panels a row: two columns make a full page width (7 in)
#: Matplotlib settings of every figure: text sizes readable at 100 % print size.
PAPER_RC = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "legend.fontsize": 7, "figure.titlesize": 9, "lines.linewidth": 1.2,
    "lines.markersize": 4.5, "errorbar.capsize": 2, "hatch.linewidth": 0.6,
}  # fmt: skip
NOTE_FONTSIZE = 6.5  # points: the not-completed note under a panel
Y_LABELS_IN = 0.8  # inches of a panel's width taken by the y label and tick labels
#: Memory figure columns: FULL_SHARD alone, as the study shows it, then the rest.
MEMORY_GROUPS = ("FULL_SHARD", "other strategies")
#: Bar colour per backward_prefetch in the ablation (ColorBrewer Dark2: not the strategy
#: colours, since bars there are prefetch settings, not strategies).
PREFETCH_COLORS = {"BACKWARD_PRE": "#1b9e77", "BACKWARD_POST": "#d95f02", "NONE": "#7570b3"}
#: Colours of strategies outside :data:`STRATEGY_LOOKS` (picked by the name, so fixed too;
#: grey, C7, is left to the legend's proxies).
LINE_COLORS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")
LINE_MARKERS = ("o", "s", "^", "v", "P", "<", ">", "p", "h", "*")
#: Markers of a strategy's further lines (a swept setting splitting it), none a strategy's.
VARIANT_MARKERS = ("*", "X", "D", "d", "H", "8", "1", "2", "3", "4")
#: Most not-completed points listed in one panel's note; the rest are counted.
MAX_NOTE_ITEMS = 6
#: A fixed colour and marker per strategy preset, so a strategy looks the same in every
#: figure, panel, sweep and report, in colour and in greyscale. A strategy split into several
#: lines (a swept setting) keeps its colour; its first line (by label) keeps the marker and
#: the others take :data:`VARIANT_MARKERS`.
STRATEGY_LOOKS = {"DDP": ("C0", "o"), "NO_SHARD": ("C1", "v"), "FULL_SHARD": ("C2", "s"),
                  "SHARD_GRAD_OP": ("C3", "^"), "HYBRID_1GPU": ("C4", "<"),
                  "HYBRID_2GPU": ("C5", ">"), "HYBRID_8GPU": ("C6", "P"),
                  "HYBRID_4GPU": ("C8", "p"), "HYBRID_16GPU": ("C9", "h")}  # fmt: skip
DEVICE_COLOR = "black"  # the device-memory line (no strategy line is black)
#: The model state in a memory bar, bottom first: ``(column, kind, fill alpha, hatch)``; the
#: kind names its legend entry (:data:`PATCH_PROXIES`) and its caption words. Each part is
#: filled in its line's colour, lighter and hatched going up, so it reads in greyscale too.
STATE_PARTS = (("state_params_gib", "state_params", 1.0, None),
               ("state_grads_gib", "state_grads", 0.45, "////"),
               ("state_optimizer_gib", "state_optimizer", 0.2, "...."))
#: Width (in octaves of the log-2 node axis: nodes 1 and 2 are one octave apart) of the
#: memory bars of one node count together, one bar per line of the panel, and of one bar.
BAR_GROUP_OCTAVES = 0.7
BAR_OCTAVES = 0.3
#: Shortest error bar drawn, as a fraction of the panel's height (a linear axis) or of the
#: point's value (a log axis): a shorter one hides under its point's marker (4.5 pt on a
#: panel 137 pt high), so it is neither drawn nor listed in the legend.
MIN_ERROR_BAR = 0.02
#: Thinnest part of a memory bar listed in the legend, as a fraction of the panel's height
#: (1.4 pt); where no part of a panel's model state is that high, the panel says so
#: (:data:`TINY_STATE`), and the Memory table of the report holds the bytes.
MIN_BAR_PART = 0.01
TINY_STATE = "model state per rank: under 1 % of the axis, too thin to see"
#: Memory y labels by ``peak_mem_kind``.
MEMORY_LABELS = {
    "allocated": "peak allocated per GPU (GiB)",
    "rss": "peak resident memory per rank (GiB)",
}
#: Line style per framework when both are plotted; one framework: solid. Measured lines are
#: solid or dash-dot, ideal lines dashed, the plan's predictions dotted.
FRAMEWORK_STYLES = {"torch": "-", "jax": "-."}
DEFAULT_STYLE = "-"
#: Config shown in the figure title when every run shares it.
CONTEXT_COLUMNS = ("local_batch_size", "precision", "data", "device_name")


def _paper_style(plot):
    """Run a figure function under :data:`PAPER_RC` (text sizes are fixed as it draws)."""

    @functools.wraps(plot)
    def styled(*args, **kwargs):
        with _mpl().matplotlib.rc_context(PAPER_RC):
            return plot(*args, **kwargs)

    return styled


@_paper_style
def plot_weak_scaling(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure:
    """Global images/s against nodes, with a dashed ideal line per strategy.

    Args:
        df: a ``collect_runs`` frame; ``ips`` is global images/s.
        path: where to save the figure (format from the suffix: .png at :data:`DPI` dpi,
            .svg); not saved if ``None``.

    Returns:
        The figure: one panel per model (up to :data:`MAX_COLUMNS` a row) and one legend below them;
        per line, a solid line with markers through the completed points (median ips per node count
        over repeats, with a min-max error bar where a point ran more than once), a dashed ideal
        line in the same colour, linear from the line's smallest completed node count, and the
        plan's predicted ips as a dotted line where ``pred_ips`` is known; log-2 x axis, log y. Runs
        that did not complete are marked at the panel's bottom (``x``; a hollow diamond for a point
        skipped as infeasible) and listed under the axes. A point whose device was busy less
        than :data:`~vitfsdp.core.throughput.HOST_BOUND_BUSY_FRAC` of its windows (median
        ``device_busy_frac`` over repeats) is ringed by a grey hexagon: the host decided it.
    """
    panels = _panels(df)
    fig, axes = _new_figure(len(panels))
    keys = _label_keys(df)
    looks = _looks(df, keys)
    extras = {"ideal"}
    published_ips = matched(reference_table(df))
    for ax, (model, panel) in zip(axes, panels, strict=True):
        notes, marked = [], Counter()
        for label, line in _lines(panel, keys):
            done, color = _plot_measured(ax, line, keys, looks, label, "ips", "median")
            if not done.empty:
                _plot_ideal(ax, done, line["nodes"], color, label)
                _mark_above_ideal(ax, done, extras)
                _mark_host_bound(ax, line, done, extras)
                _plot_repeat_range(ax, line, "ips", color, extras)
            _plot_predicted(ax, line, "pred_ips", color, label, extras)
            _plot_published(ax, published_ips, model, label, color, extras)
            notes += _mark_not_completed(ax, line, "ips", color, label, marked, extras,
                                         reached="ips_reached")
        _log_y_axis(ax)
        if notes:
            _make_room_below(ax)
        _style_panel(ax, panel, _panel_title(model, panel), "throughput (images/s, global)",
                     notes)
    _finish(fig, "Weak scaling: throughput against node count", df, path, extras,
            proxy_labels=_published_labels(published_ips))
    return fig


@_paper_style
def plot_memory(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure:
    """Peak memory per GPU (or per rank on CPU) against nodes, a line per strategy.

    As the study shows them, FULL_SHARD and the other strategies are separate panels (their
    scales differ by the shard count): one row per model, one column per group present.

    Args:
        df: a ``collect_runs`` frame; ``peak_mem_gib`` in GiB, ``peak_mem_kind`` says whether
            it is allocated GPU memory or CPU resident memory (the y label follows it).
        path: where to save the figure (format from the suffix); not saved if ``None``.

    Returns:
        The figure, with one legend below the panels. Per line: the maximum over ranks (and repeats)
        per node count, with an error bar down to the minimum over ranks where the records have it
        (``peak_mem_min_gib``); the plan's predicted peak as a dotted line (and the measured peak
        reserved as hollow circles when that is what the plan predicts); a point skipped as
        infeasible as a hollow diamond at its predicted memory; other runs that did not complete as
        ``x`` at the bottom. The device's memory (run.json ``device.memory_gib``, else
        ``cluster.device_memory_gib``) is a black dotted line. Where the runs record the model
        state a rank holds (``state_*_gib``, counted from its local shards: 1/N of the model
        under FULL_SHARD), each point is a bar in its line's colour, side by side with the
        panel's other lines at that node count: parameters, gradients and optimizer state
        stacked (solid, hatched, dotted) under the rest of the measured peak (hollow), the
        measured and predicted marks drawn at the bar's middle; runs without those records
        draw no bar.
    """
    cells = [(model, group, rows) for model, panel in _panels(df)
             for group, rows in _memory_groups(panel)]
    groups = sorted({group for _, group, _ in cells}, key=MEMORY_GROUPS.index)
    models = [model for model, _ in _panels(df)]
    fig, axes = _new_figure(len(models) * len(groups), columns=len(groups))
    keys = _label_keys(df)
    looks = _looks(df, keys)
    extras = set()
    table = reference_table(df)
    published = table[table["drawn"] == "memory.png"] if len(table) else table
    for ax, (model, group) in zip(axes, [(m, g) for m in models for g in groups], strict=True):
        panel = next((rows for m, g, rows in cells if (m, g) == (model, group)), None)
        if panel is None:
            _empty_panel(ax, f"{model}: {group}", f"no {group} runs")
            continue
        _draw_memory_panel(ax, panel, keys, looks, f"{_panel_title(model, panel)}: {group}",
                           extras, published[published["model"] == model])
    per = "rank" if _memory_label(df) == MEMORY_LABELS["rss"] else "GPU"  # CPU runs: ranks
    _finish(fig, f"Peak memory per {per} against node count", df, path, extras,
            proxy_labels=_memory_published_labels(published))
    return fig


def _draw_memory_panel(ax, panel: pd.DataFrame, keys: list[str],
                       looks: dict[str, tuple[str, str]], title: str, extras: set[str],
                       published: pd.DataFrame | None = None) -> None:  # fmt: skip
    """One memory panel: measured, predicted, not completed, device memory, and the
    published memory of the panel's points (``published``: reference.csv's rows drawn in
    memory.png, :func:`_plot_published_memory`); the kinds of mark drawn are added to
    ``extras`` for the figure's legend."""
    notes, marked, shown, barred = [], Counter(), set(), False
    lines = _lines(panel, keys)
    spans = _bar_spans(panel, [label for label, _ in lines])
    top = _memory_top(panel)
    for label, line in lines:
        span = spans.get(label)
        shift = 2 ** ((span[0] + span[1]) / 2) if span else 1.0  # the bar's middle
        done, color = _plot_measured(ax, line, keys, looks, label, "peak_mem_gib", "max",
                                     shift)
        if not done.empty:
            if span:
                barred |= _plot_state_bars(ax, line, done, color, span, shown,
                                           MIN_BAR_PART * top)
            _plot_rank_range(ax, line, done, color, extras, shift, MIN_ERROR_BAR * top)
        if _plot_predicted(ax, line, "pred_peak_mem_gib", color, label, extras, shift):
            _plot_reserved(ax, line, color, extras, shift)
        if published is not None and len(published):
            _plot_published_memory(ax, published[published["configuration"] == label], span,
                                   color, extras)
        notes += _mark_not_completed(ax, line, "peak_mem_gib", color, label, marked, extras,
                                     reached="peak_mem_reached_gib",
                                     at="pred_peak_mem_gib", shift=shift)
    ax.set_ylim(bottom=0, top=1.15 * ax.get_ylim()[1])  # room above the highest point
    extras |= shown
    if barred and not shown & {kind for _, kind, *_ in STATE_PARTS}:
        ax.text(0.02, 0.97, TINY_STATE, transform=ax.transAxes, va="top", ha="left",
                fontsize=NOTE_FONTSIZE, color="0.3")
        extras.add("state_tiny")
    if _plot_device_memory(ax, panel):
        extras.add("device")
    _style_panel(ax, panel, title, _memory_label(panel), notes)


def _memory_top(panel: pd.DataFrame) -> float:
    """About the top of a memory panel's y axis (GiB): 1.15 x the largest value it draws
    (peak, predicted or reached memory, the device's memory); 0 when none is known."""
    columns = ["peak_mem_gib", "pred_peak_mem_gib", "peak_mem_reached_gib",
               "device_memory_gib"]
    values = pd.concat([panel[c] for c in columns if c in panel]).dropna()
    return 1.15 * float(values.max()) if len(values) else 0.0


def _bar_spans(panel: pd.DataFrame, labels: list[str]) -> dict[str, tuple[float, float]]:
    """Each line's bar slot in a memory panel, ``(left, right)`` in octaves from the node
    count (its bars are drawn from ``n * 2**left`` to ``n * 2**right``): the lines side by
    side in label order, :data:`BAR_GROUP_OCTAVES` wide together (narrower where two node
    counts are closer than an octave, each at most :data:`BAR_OCTAVES`); ``{}`` when no
    completed run of the panel recorded its model state (older records: no bars, the lines
    as before)."""
    parts = [column for column, *_ in STATE_PARTS if column in panel]
    if not parts or not panel.loc[panel["status"] == "completed", parts].notna().any().any():
        return {}
    octaves = sorted({math.log2(n) for n in panel["nodes"].dropna() if n > 0})
    closest = min((b - a for a, b in zip(octaves, octaves[1:], strict=False)), default=1.0)
    group = min(BAR_GROUP_OCTAVES, BAR_OCTAVES * len(labels), 0.8 * closest)
    width = group / len(labels)
    return {label: (-group / 2 + i * width, -group / 2 + (i + 1) * width)
            for i, label in enumerate(labels)}


def _plot_state_bars(ax, line: pd.DataFrame, done: pd.Series, color: str,
                     span: tuple[float, float], extras: set[str],
                     min_height: float = 0.0) -> bool:  # fmt: skip
    """At each node count of ``done`` (the line's measured peak, GiB) whose runs recorded
    their model state: the state's parts stacked from 0 (:data:`STATE_PARTS`, each the
    maximum over the point's repeats) and the rest of the peak above them, hollow, in the
    line's slot ``span`` (:func:`_bar_spans`). The parts at least ``min_height`` (GiB) high
    somewhere are added to ``extras`` (a lower one is drawn, to scale, but too thin to see
    or to list). Returns whether any bar was drawn."""
    columns = [column for column, *_ in STATE_PARTS]
    ok = line.loc[(line["status"] == "completed") & line["nodes"].notna(), ["nodes", *columns]]
    state = ok.groupby(ok["nodes"].astype("int64"))[columns].max()
    state = state[state.notna().any(axis=1) & state.index.isin(done.index)]
    for n, parts in state.iterrows():
        left, width = n * 2 ** span[0], n * (2 ** span[1] - 2 ** span[0])
        bottom = 0.0
        for column, kind, alpha, hatch in STATE_PARTS:
            if pd.notna(parts[column]) and parts[column] > 0:
                ax.bar(left, parts[column], width, bottom, align="edge", hatch=hatch,
                       facecolor=_mpl().matplotlib.colors.to_rgba(color, alpha), edgecolor=color,
                       lw=0.6, label=f"_{kind}")
                bottom += parts[column]
                if parts[column] >= min_height:
                    extras.add(kind)
        if done.loc[n] > bottom:
            ax.bar(left, done.loc[n] - bottom, width, bottom, align="edge", facecolor="white",
                   edgecolor=color, lw=0.6, label="_state_rest")
            extras.add("state_rest")
    return not state.empty


@_paper_style
def plot_prefetch(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """The prefetch ablation: ips of each strategy under BACKWARD_PRE / BACKWARD_POST / NONE
    x ``limit_all_gathers`` true/false, as grouped bars.

    One panel per model, at the largest node count where at least two variants of one
    strategy completed: prefetching hides communication, which grows with the node count,
    so the largest ablated scale is where the choice matters (``prefetch.csv`` holds every
    node count). One bar group per strategy (and any other varying config); bar colour =
    ``backward_prefetch``, hatching = ``limit_all_gathers=False``; min-max error bars over
    repeats; a run that did not complete is an ``x`` at its bar's place. One legend below
    the panels.

    Args:
        df: a ``collect_runs`` frame.
        path: where to save the figure (format from the suffix); not saved if ``None``.

    Returns:
        The figure, or ``None`` when no strategy ran two prefetch variants at one node count.
    """
    table = prefetch_table(points_table(df))
    counts = table.groupby(["model", "nodes", "configuration"]).size()
    ablated = counts[counts >= 2].reset_index()
    if ablated.empty:
        return None
    at = ablated.groupby("model")["nodes"].max()
    fig, axes = _new_figure(len(at))
    extras, drawn = set(), set()
    for ax, (model, nodes) in zip(axes, at.items(), strict=True):
        bars = table[(table["model"] == model) & (table["nodes"] == nodes)]
        drawn |= _draw_prefetch_panel(ax, bars, _ablation_failures(df, model, nodes), extras)
        panel = df[df["model"] == model]
        world = panel.loc[panel["nodes"] == nodes, "world_size"].dropna()
        gpus = f", {int(world.iloc[0])} GPUs" if len(world) else ""
        _set_title(ax, f"{_panel_title(model, panel)}\nat {nodes} node(s){gpus}")
    _finish(fig, "Backward prefetch and limit_all_gathers", df, path, extras,
            _prefetch_handles(drawn))
    return fig


@_paper_style
def plot_loss(df: pd.DataFrame, path: str | os.PathLike | None = None,
              curves: pd.DataFrame | None = None) -> Figure | None:  # fmt: skip
    """Training loss against step, a line per point, so a reader sees every configuration
    train (warm-up windows included; failed runs up to where they ended).

    One panel per model; per point (a line's node count) the median over repeats of each
    window's mean loss at the window's last step, in the strategy's colour and marker (as in
    the other figures) and the framework's line style where both ran, its node count written
    at its end (``n=4``), placed clear of the others. Strategies that train alike (the same
    data order and global batch) coincide: each line label draws its dashes in turn
    (:func:`_loss_dashes`), so a shared line shows every colour, and their markers shrink
    label by label. The chance level, ln(num_classes), is a grey dashed line where the runs
    record their classes. The legend shows each label solid (its colour and marker).

    Args:
        df: a ``collect_runs`` frame.
        path: where to save the figure (format from the suffix); not saved if ``None``.
        curves: ``loss_curves(df)`` when the caller has it (another process drawing the
            figure holds no curves kept by ``collect_runs``); read for ``df`` if ``None``.

    Returns:
        The figure, or ``None`` when no run recorded a loss.
    """
    curves = loss_curves(df) if curves is None else curves
    if curves.empty:
        return None
    keys = _label_keys(df)
    looks = _looks(df, keys)
    info = df.assign(_label=line_labels(df, keys), _look=line_labels(df, _color_keys(keys)))
    columns = ["run_dir", "model", "num_params", "num_classes", "nodes", "framework", "_label",
               "_look"]
    rows = curves.merge(info[[c for c in columns if c in info]], on="run_dir")
    panels = _panels(rows)
    fig, axes = _new_figure(len(panels))
    extras: set[str] = set()
    for ax, (model, panel) in zip(axes, panels, strict=True):
        _draw_loss_panel(ax, panel, looks, "framework" in keys, extras)
        _set_title(ax, _panel_title(model, df[df["model"].astype("string") == model]))
    _finish(fig, "Training loss against step (a line per point)", df, path, extras,
            _loss_handles(looks, rows, "framework" in keys))
    return fig


def _draw_loss_panel(ax, panel: pd.DataFrame, looks: dict[str, tuple[str, str]],
                     by_framework: bool, extras: set[str]) -> None:  # fmt: skip
    """The loss lines of one model: per line label and node count, the median loss per step
    over repeats, in alternating dashes (:func:`_loss_dashes`) so that lines which coincide
    (strategies training alike) all show; JAX's markers hollow where both frameworks ran;
    ``n=<nodes>`` at each line's end; the chance level (:func:`_plot_chance`)."""
    labels = sorted(set(panel["_label"]))
    ends = set()
    points = panel.groupby(["_label", "nodes"], dropna=False, sort=True)
    firsts = points[["_look", "framework"]].first(skipna=False)  # its first run's
    medians = panel.groupby(["_label", "nodes", "step"], dropna=False, sort=True)["loss"].median()
    for (label, nodes), loss in medians.groupby(level=[0, 1], dropna=False, sort=True):
        look, framework = firsts.loc[(label, nodes)]
        color, marker = looks.get(look, ("0.5", "o"))
        i = labels.index(label)
        hollow = by_framework and framework == "jax"
        loss = loss.droplevel([0, 1])
        ax.plot(loss.index, loss.values, marker=marker, color=color, lw=1.4,
                markersize=3 + 2.5 * (len(labels) - 1 - i) / max(1, len(labels) - 1),
                mfc="white" if hollow else color, ls=_loss_dashes(i, len(labels)),
                label=f"_{label} nodes={nodes}")
        if pd.notna(nodes):
            ends.add((float(loss.index[-1]), float(loss.iloc[-1]), f"n={int(nodes)}"))
    if _plot_chance(ax, panel):
        extras.add("chance")
    ax.margins(x=0.12)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (window mean)")
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=PAPER_RC["xtick.labelsize"])
    _label_ends(ax, ends)


#: Length (points) of one dash of a loss line; see :func:`_loss_dashes`.
LOSS_DASH = 4.0


def _loss_dashes(index: int, count: int) -> str | tuple[float, tuple[float, float]]:
    """The line style of the ``index``-th of ``count`` line labels of a loss panel: each
    draws a dash of :data:`LOSS_DASH` points in turn and leaves the gap the others fill, so
    lines that coincide (the same data order and global batch) show as one line of every
    colour in turn, and a line alone is dashed in its own colour; one label: solid."""
    if count < 2:
        return "-"
    return ((count - index) % count * LOSS_DASH, (LOSS_DASH, (count - 1) * LOSS_DASH))


def _plot_chance(ax, panel: pd.DataFrame) -> bool:
    """The chance level, ln(num_classes) (the cross-entropy of a uniform guess), as a grey
    dashed line with its value written at the left, where every run of the panel records
    the same number of classes; True if drawn."""
    classes = panel["num_classes"].dropna().unique() if "num_classes" in panel else []
    if len(classes) != 1 or not classes[0] > 1:
        return False
    level = math.log(float(classes[0]))
    low, high = ax.get_ylim()
    span = max(high, level) - min(low, level) or 1.0
    ax.set_ylim(min(low, level - 0.05 * span), max(high, level + 0.12 * span))  # its text
    ax.axhline(level, color="0.45", ls=(0, (6, 3)), lw=0.9, zorder=1, label="_chance")
    ax.annotate(f"chance: ln {int(classes[0])} = {level:.2f}", xy=(0.01, level),
                xycoords=("axes fraction", "data"), xytext=(0, 2), textcoords="offset points",
                va="bottom", ha="left", fontsize=NOTE_FONTSIZE, color="0.3")
    return True


def _loss_handles(looks: dict[str, tuple[str, str]], rows: pd.DataFrame,
                  by_framework: bool) -> list[Line2D]:  # fmt: skip
    """The loss figure's legend: one solid entry per line label (its colour and marker;
    hollow for JAX where both frameworks ran), since the lines' dashes (shared by all
    labels in turn) would not tell them apart in a short legend handle."""
    handles = []
    labelled = rows.drop_duplicates("_label").sort_values("_label")
    for label, look, framework in zip(labelled["_label"], labelled["_look"],
                                      labelled["framework"], strict=True):
        color, marker = looks.get(look, ("0.5", "o"))
        hollow = by_framework and framework == "jax"
        handles.append(_mpl().Line2D([], [], color=color, marker=marker, lw=1.4,
                              mfc="white" if hollow else color, label=label))
    return handles


#: Least vertical distance between two ``n=`` labels (axes fraction: about a line of
#: :data:`NOTE_FONTSIZE` text on a panel :data:`AXES_HEIGHT_IN` high).
LABEL_GAP = 0.06


def _label_ends(ax, ends: set[tuple[float, float, str]]) -> None:
    """Write each line end's label (``n=4``) right of it, where it overlaps no label placed
    before (lowest end first): at its end's height, else the nearest free height above or
    below, with a thin leader to its end when moved; a label with no free place inside the
    axes is left out (the legend and the line's colour still say what it is). Ends that
    meet at one place (within half :data:`LABEL_GAP`) share one label: their node counts
    (``n=1,2``), or the range and count of them past three (``n=1-128 (8)``)."""
    x0, x1 = ax.get_xlim()
    low, high = ax.get_ylim()
    width_in = PANEL_WIDTH_IN - Y_LABELS_IN  # the plotting area, about (before the layout)
    placed: list[tuple[float, float, float, str]] = []  # (x, y, width) in axes fraction
    for x, y, text in _merge_ends(ends, (high - low) * LABEL_GAP / 2):
        fx, fy = (x - x0) / ((x1 - x0) or 1.0), (y - low) / ((high - low) or 1.0)
        width = (len(text) + 1) * 0.62 * NOTE_FONTSIZE / 72 / width_in
        free = _free_height(fx + LABEL_PAD, fy, width, placed)
        if free is None:
            continue
        placed.append((fx + LABEL_PAD, free, width, text))
        moved = abs(free - fy) > LABEL_GAP / 2
        ax.annotate(text, xy=(x, y), xytext=(fx + LABEL_PAD, free),
                    textcoords="axes fraction", va="center", ha="left",
                    fontsize=NOTE_FONTSIZE, color="0.3",
                    arrowprops=dict(arrowstyle="-", lw=0.4, color="0.6", shrinkA=0,
                                    shrinkB=2) if moved else None)  # fmt: skip


#: Space between a line's end and its ``n=`` label (axes fraction: clear of the marker).
LABEL_PAD = 0.02


def _merge_ends(ends: set[tuple[float, float, str]],
                tolerance: float) -> list[tuple[float, float, str]]:  # fmt: skip
    """``ends`` (``(x, y, "n=<nodes>")``) with those at one ``x`` and within ``tolerance``
    in ``y`` of the group's first merged into one, lowest first: ``n=1,2,4``, or past three
    node counts ``n=1-128 (8)``."""
    groups: list[tuple[float, float, set[int]]] = []
    for x, y, text in sorted(ends, key=lambda e: (e[1], e[0])):
        nodes = int(text.removeprefix("n="))
        match = next((g for g in groups if g[0] == x and abs(g[1] - y) <= tolerance), None)
        if match is None:
            groups.append((x, y, {nodes}))
        else:
            match[2].add(nodes)
    merged = []
    for x, y, counts in groups:
        ordered = sorted(counts)
        text = (f"n={','.join(map(str, ordered))}" if len(ordered) <= 3
                else f"n={ordered[0]}-{ordered[-1]} ({len(ordered)})")
        merged.append((x, y, text))
    return merged


def _free_height(fx: float, fy: float, width: float,
                 placed: list[tuple[float, float, float, str]]) -> float | None:  # fmt: skip
    """The height (axes fraction) nearest ``fy`` at which a label from ``fx``, ``width``
    wide, keeps :data:`LABEL_GAP` from every label of ``placed`` it would share columns
    with and stays inside the axes; ``None`` if there is none."""
    near = sorted(py for px, py, pw, _ in placed if fx < px + pw and px < fx + width)
    candidates = [fy] + [py + d * LABEL_GAP for py in near for d in (1, -1)]
    inside = [c for c in candidates if LABEL_GAP / 2 <= c <= 1 - LABEL_GAP / 2]
    free = [c for c in inside if all(abs(c - py) >= LABEL_GAP - 1e-9 for py in near)]
    return min(free, key=lambda c: (abs(c - fy), c), default=None)


def _prefetch_handles(drawn: set[tuple[str, bool]]) -> list[Patch]:
    """Legend entries of the bars drawn (``(backward_prefetch, limit_all_gathers)``): one
    colour per prefetch setting, and the hatching of ``limit_all_gathers=False``."""
    handles = [_mpl().Patch(facecolor=PREFETCH_COLORS.get(p, "0.5"), edgecolor="black", lw=0.6,
                     label=p) for p in PREFETCH_ORDER if p in {p for p, _ in drawn}]
    if any(not limit for _, limit in drawn):
        handles.append(_mpl().Patch(facecolor="white", edgecolor="black", lw=0.6, hatch="///",
                             label="limit_all_gathers=False"))
    return handles


def _draw_prefetch_panel(ax, bars: pd.DataFrame, failed: pd.DataFrame,
                         extras: set[str]) -> set[tuple[str, bool]]:  # fmt: skip
    """Grouped bars of one model and node count; ``x`` marks for failed variants (added to
    ``extras`` for the legend). Returns the ``(backward_prefetch, limit_all_gathers)``
    variants drawn as bars."""
    groups = sorted(set(bars["configuration"]) | set(failed["configuration"]))
    variants = [(p, lim) for p in PREFETCH_ORDER for lim in (True, False)
                if _variant(bars, p, lim).any() or _variant(failed, p, lim).any()]
    width = 0.8 / len(variants)
    failed_xs = []
    for i, (prefetch, limit) in enumerate(variants):
        offset = (i - (len(variants) - 1) / 2) * width
        rows = bars[_variant(bars, prefetch, limit)]
        xs = [groups.index(g) + offset for g in rows["configuration"]]
        ax.bar(xs, rows["ips"], width, color=PREFETCH_COLORS.get(prefetch, "0.5"),
               hatch=None if limit else "///", edgecolor="black", linewidth=0.6,
               label=f"{prefetch}, limit_all_gathers={limit}")
        spread = rows["ips_repeat_max"] > rows["ips_repeat_min"]
        if spread.any():
            r = rows[spread]
            ax.errorbar([x for x, s in zip(xs, spread, strict=True) if s], r["ips"],
                        yerr=[r["ips"] - r["ips_repeat_min"], r["ips_repeat_max"] - r["ips"]],
                        fmt="none", ecolor="black", capsize=2, lw=0.8)
        miss = failed[_variant(failed, prefetch, limit)]
        failed_xs += [groups.index(g) + offset for g in miss["configuration"]]
    if failed_xs:
        ax.scatter(failed_xs, [NOT_COMPLETED_Y] * len(failed_xs), marker="x", color="black",
                   transform=ax.get_xaxis_transform(), clip_on=False, zorder=3,
                   label="_not completed")
        extras.add("failed")
    ax.set_xticks(range(len(groups)), labels=[textwrap.fill(g, 18) for g in groups])
    ax.set_xlim(-0.5, len(groups) - 0.5)  # every bar slot, drawn or not, inside the axes
    ax.set_ylabel("throughput (images/s, global)")
    ax.set_ylim(bottom=0, top=1.12 * ax.get_ylim()[1])
    ax.yaxis.set_major_formatter(_mpl().FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.grid(True, axis="y", alpha=0.3)
    ax.tick_params(labelsize=PAPER_RC["xtick.labelsize"])
    return {(p, lim) for p, lim in variants if _variant(bars, p, lim).any()}


def _variant(rows: pd.DataFrame, prefetch: str, limit: bool) -> pd.Series:
    """The rows run with this ``backward_prefetch`` and ``limit_all_gathers``."""
    return (rows["backward_prefetch"] == prefetch) & (rows["limit_all_gathers"] == limit)


def _ablation_failures(df: pd.DataFrame, model: str, nodes: int) -> pd.DataFrame:
    """Runs of the ablation at one model and node count that did not complete, with the
    bar-group label :func:`~vitfsdp.analysis.tables.prefetch_table` gives them."""
    rows = df[(df["model"] == model) & (df["nodes"] == nodes)
              & ((df["status"] != "completed") | df["ips"].isna())]
    rows = rows.dropna(subset=list(ABLATION_COLUMNS))
    keys = [c for c in line_columns(df) if c not in ABLATION_COLUMNS]
    labels = [_line_label(r, keys) for _, r in rows.iterrows()]
    return rows.assign(configuration=pd.Series(labels, rows.index, dtype="object"))


#: Bar colours of the node counts in the recipe ablation (ColorBrewer Blues, light to dark:
#: more nodes, darker; not the strategy colours, since bars here are node counts).
NODE_COLORS = ("#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")


@_paper_style
def plot_recipe(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """A recipe ablation, PyCls style: images/s of each cumulative recipe step relative to the
    recipe's baseline (:func:`vitfsdp.analysis.recipe.recipe_table`), as grouped bars.

    One panel per recipe; one bar group per step (x axis, in step order, labelled with what
    the step adds), one bar per node count (darker: more nodes) at the median over repeats
    with a min-max error bar; a dashed line at 1x (the baseline); ``x`` where a step's runs
    at a node count did not complete, and its value printed above each bar.

    Returns:
        The figure, or ``None`` when the runs hold no recipe (no run of a
        ``<recipe>_<n>_<what>`` preset beside its ``<recipe>`` baseline).
    """
    table = recipe_table(df)
    if table.empty:
        return None
    recipes = sorted(set(table["recipe"]))
    fig, axes = _new_figure(len(recipes), columns=1)
    extras = set()
    nodes = sorted({int(n) for n in table["nodes"]})
    published = recipe_reference(df)
    published = published[published["drawn"] == "recipe.png"]
    for ax, recipe in zip(axes, recipes, strict=True):
        _draw_recipe_panel(ax, table[table["recipe"] == recipe], nodes, extras,
                           published[published["recipe"] == recipe])
        model = table.loc[table["recipe"] == recipe, "model"].dropna()
        _set_title(ax, f"{recipe}: {model.iloc[0] if len(model) else 'unknown model'}, "
                       "each step adds to the one before")
    handles = [_mpl().Patch(facecolor=NODE_COLORS[i % len(NODE_COLORS)], edgecolor="black",
                     label=f"{n} node{'s' if n > 1 else ''}") for i, n in enumerate(nodes)]
    labels = sorted(set(published["label"].astype(str)))
    _finish(fig, "Recipe ablation: images/s relative to the baseline", df, path, extras,
            handles, proxy_labels={"published_other": "published ratio of the step in the "
                                   "published setup, not compared: " + "; ".join(labels)}
            if labels else None)
    return fig


def _draw_recipe_panel(ax, steps: pd.DataFrame, nodes: list[int], extras: set[str],
                       published: pd.DataFrame | None = None) -> None:  # fmt: skip
    """The bars of one recipe (see :func:`plot_recipe`), with the published ratio of each
    step that has one (``published``: :func:`~vitfsdp.analysis.reference.recipe_reference`
    rows drawn in recipe.png) as a :data:`PUBLISHED_OTHER` segment across the step's bars,
    its study and value above it."""
    order = steps.drop_duplicates("step").sort_values("step")
    labels = [f"{s}: {w}" for s, w in zip(order["step"], order["what"], strict=True)]
    width = 0.8 / len(nodes)
    failed = []
    for i, n in enumerate(nodes):
        offset = (i - (len(nodes) - 1) / 2) * width
        rows = steps[steps["nodes"] == n].set_index("step").reindex(order["step"])
        xs = [k + offset for k in range(len(order))]
        ax.bar(xs, rows["relative_ips"], width, color=NODE_COLORS[i % len(NODE_COLORS)],
               edgecolor="black", linewidth=0.6)
        spread = (rows["relative_max"] > rows["relative_min"]).to_numpy()
        if spread.any():
            r = rows[spread]
            ax.errorbar([x for x, s in zip(xs, spread, strict=True) if s], r["relative_ips"],
                        yerr=[r["relative_ips"] - r["relative_min"],
                              r["relative_max"] - r["relative_ips"]],
                        fmt="none", ecolor="black", capsize=2, lw=0.8)
            extras.add("repeats")
        for x, value in zip(xs, rows["relative_ips"], strict=True):
            if pd.notna(value):
                ax.annotate(f"{value:.2f}x", (x, value), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom",
                            fontsize=NOTE_FONTSIZE - 1)
        failed += [x for x, v in zip(xs, rows["relative_ips"], strict=True) if pd.isna(v)]
    if failed:
        ax.scatter(failed, [NOT_COMPLETED_Y] * len(failed), marker="x", color="black",
                   transform=ax.get_xaxis_transform(), clip_on=False, zorder=3,
                   label="_not completed")
        extras.add("failed")
    positions = {step: k for k, step in enumerate(order["step"])}
    if published is not None and len(published):
        _plot_published_steps(ax, published, positions, extras)
    ax.axhline(1.0, ls="--", color="0.4", lw=1)
    ax.set_xticks(range(len(order)), labels=[textwrap.fill(lb, 14) for lb in labels])
    ax.set_xlim(-0.5, len(order) - 0.5)
    ax.set_ylabel("images/s relative to step 0")
    ax.set_ylim(bottom=0, top=1.15 * max(ax.get_ylim()[1], 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    ax.tick_params(labelsize=PAPER_RC["xtick.labelsize"])


def _plot_published_steps(ax, published: pd.DataFrame, positions: dict[int, int],
                          extras: set[str]) -> None:  # fmt: skip
    """Each published ratio (one per figure, whatever the node counts of its rows) across
    its step's bar group (``positions``: the group's x by step), labelled ``PyCls 1.51x``."""
    for (step, value, label), _ in published.groupby(["step", "published", "label"]):
        x = positions.get(int(step))
        if x is None:
            continue
        ax.hlines(float(value), x - 0.45, x + 0.45, **PUBLISHED_OTHER, zorder=4,
                  label="_published other")
        ax.annotate(f"{_study(str(label))} {float(value):.2f}x", (x, float(value)),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=NOTE_FONTSIZE, color=PUBLISHED_OTHER["color"])
        extras.add("published_other")


@_paper_style
def plot_tflops(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """Model TFLOP/s per GPU against the number of GPUs, a line per configuration and a
    panel per model, with the device's peak (dotted, where the runs record it) and an MFU
    axis on the right (TFLOP/s / peak; MFU's definition: docs/benchmarks.md). Runs on CPU
    ranks say "rank" for "GPU"; where every value is below 0.1 TFLOP/s (CPU ranks, tiny
    models) the axis is in GFLOP/s (a peak in TFLOP/s would flatten it: none drawn).

    Returns:
        The figure, or ``None`` when no completed run recorded ``tflops_per_gpu``.
    """
    done = df[(df["status"] == "completed") & df["tflops_per_gpu"].notna()
              & df["world_size"].notna()]
    if done.empty:
        return None
    panels = _panels(done)
    fig, axes = _new_figure(len(panels))
    keys = _label_keys(df)
    looks = _looks(df, keys)
    extras: set[str] = set()
    per = "rank" if set(done["device_type"].dropna()) == {"cpu"} else "GPU"  # CPU ranks
    # GFLOP/s where TFLOP/s would read 0.00x (CPU ranks, tiny models)
    unit, scale = ("GFLOP/s", 1e3) if done["tflops_per_gpu"].max() < 0.1 else ("TFLOP/s", 1.0)
    for ax, (model, panel) in zip(axes, panels, strict=True):
        for label, line in _lines(panel, keys):
            color, marker = looks[_color_label(line, keys)]
            points = line.groupby(line["world_size"].astype("int64"))["tflops_per_gpu"].median()
            ax.plot(points.index, points.values * scale, ls=_linestyle(line, keys),
                    marker=marker, color=color, label=label)
        if scale == 1.0:
            _draw_peak(ax, panel, extras)
        gpus = sorted(set(panel["world_size"].astype("int64")))
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, labels=[str(g) for g in gpus])
        ax.xaxis.set_minor_locator(_mpl().NullLocator())
        ax.set_xlim(gpus[0] / 1.4, gpus[-1] * 1.4)
        ax.set_ylim(bottom=0)
        ax.set_xlabel(f"{per}s" if per == "rank" else "GPUs (ranks)")
        ax.set_ylabel(f"model {unit} per {per}")
        ax.grid(True, which="major", alpha=0.3)
        _set_title(ax, _panel_title(model, panel))
    _finish(fig, f"{unit} per {per} against the number of {per}s", df, path, extras)
    return fig


def _draw_peak(ax, panel: pd.DataFrame, extras: set[str]) -> None:
    """The device's peak as a dotted line and an MFU axis on the right, where every run of
    the panel records the same peak (``device_peak_flops``, FLOP/s)."""
    peaks = panel["device_peak_flops"].dropna().unique()
    if len(peaks) != 1 or not peaks[0] > 0:
        return
    peak = float(peaks[0]) / 1e12
    ax.axhline(peak, ls=":", color=DEVICE_COLOR, lw=1, label=f"peak ({peak:,.4g} TFLOP/s)")
    ax.set_ylim(top=1.08 * max(ax.get_ylim()[1], peak))
    mfu = ax.secondary_yaxis("right", functions=(lambda y: y / peak, lambda m: m * peak))
    mfu.set_ylabel("MFU")
    mfu.yaxis.set_major_formatter(_mpl().FuncFormatter(lambda m, _: f"{m:.0%}"))
    extras.add("peak")


#: Every figure by name: the file stem it is written under, and the function drawing it. The
#: loss, prefetch, TFLOP/s and recipe figures are drawn where the runs hold data for them
#: (their functions return ``None`` otherwise, and no file is written).
FIGURES = {"weak_scaling": plot_weak_scaling, "memory": plot_memory, "loss": plot_loss,
           "prefetch": plot_prefetch, "tflops": plot_tflops, "recipe": plot_recipe}
#: The same: every figure function by name (the name ``write_figures`` checks against).
ALL_FIGURES = FIGURES
#: What a figure that was not drawn needed, by name (the ones that may have nothing to draw).
NOTHING_TO_DRAW = {"loss": "loss", "prefetch": "prefetch ablation",
                   "recipe": "recipe ablation (<recipe>_<n>_<what> presets beside <recipe>)",
                   "tflops": "TFLOP/s per GPU", "weak_scaling": "run", "memory": "run"}
#: The figures, longest to draw first (memory has two panels per model, the loss figure a
#: few lines per panel), the order in which :class:`PendingFigures` hands them out.
COST_ORDER = ("memory", "weak_scaling", "prefetch", "loss", "tflops", "recipe")


def write_figures(df: pd.DataFrame, out_dir: str | os.PathLike,
                  formats: tuple[str, ...] = ("png", "svg"),
                  names: tuple[str, ...] = tuple(FIGURES),
                  pool: FigurePool | None = None) -> dict[str, Path]:  # fmt: skip
    """Write figures into ``out_dir`` (created if missing), once per format.

    Args:
        df: a ``collect_runs`` frame.
        out_dir: the directory; files are ``<name>.<format>``.
        formats: PNG at :data:`DPI` dpi; SVG is vector (for papers).
        names: which of :data:`FIGURES` (default all): ``weak_scaling``,
            ``memory``, ``loss`` (written when a run recorded a loss), ``prefetch`` (when
            the runs hold an ablation), ``tflops`` (when a run recorded TFLOP/s) and
            ``recipe`` (when the runs hold a recipe ablation).
        pool: processes drawing figures beside this one (:func:`figure_pool`); ``None``
            draws them one after another here. The files are the same either way.

    Returns:
        The path of each figure's first format (by default the PNG), by name; the other
        formats lie beside it with their suffix.

    Raises:
        ValueError: a name is not one of :data:`FIGURES`.
    """
    return PendingFigures(df, out_dir, formats, names, pool).result()


class PendingFigures:
    """Figures being drawn by a :class:`FigurePool`'s processes while this process goes on
    (writing the tables, say); :meth:`result` draws the ones no process has taken yet and
    waits for the rest. Each process holds one figure at a time and is handed the next as
    soon as it is done (by its figure's callback, in the pool's thread), so whichever is
    free first takes the next. Without a pool every figure is drawn in :meth:`result`.

    With ``keep_unchanged``, a figure whose inputs (:func:`figure_inputs`) are those it was
    last drawn from in ``out_dir`` (:data:`INPUTS_FILE`), and whose files are all there, is
    kept as it is, not drawn again (:attr:`kept`); :attr:`todo` holds what will be drawn.
    Other arguments and errors as :func:`write_figures`."""

    def __init__(self, df: pd.DataFrame, out_dir: str | os.PathLike,
                 formats: tuple[str, ...] = ("png", "svg"),
                 names: tuple[str, ...] = tuple(FIGURES),
                 pool: FigurePool | None = None,
                 keep_unchanged: bool = False) -> None:  # fmt: skip
        unknown = [n for n in names if n not in FIGURES]
        if unknown:
            raise ValueError(f"unknown figure(s) {unknown}; valid: {', '.join(FIGURES)}")
        self.df, self.out_dir, self.formats, self.pool = df, Path(out_dir), formats, pool
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()  # todo and futures: this thread and the pool's
        self.inputs: dict[str, str] = {}  # figure_inputs of each figure, where kept track of
        self.kept: dict[str, Path | None] = {}  # unchanged: its first format's path, or None
        self.inputs_due: tuple[str, ...] = ()  # inputs to take in result(), when drawn anyway
        self.curves: pd.DataFrame | None = None  # the loss curves, once taken
        if keep_unchanged:
            self._keep_unchanged(names)
        self.todo = sorted((n for n in names if n not in self.kept), key=COST_ORDER.index)
        self.futures: dict[str, Future] = {}
        self._hand_out()
        if pool is not None and "loss" in self.todo:  # now, not in the pool's thread
            self._loss_curves()

    def attach(self, pool: FigurePool | None) -> None:
        """Hand the figures left to draw to ``pool``'s processes from now on (a pool started
        once :attr:`todo` is known); ``None``: nothing changes."""
        if pool is None or self.pool is not None:
            return
        self.pool = pool
        if "loss" in self.todo:
            self._loss_curves()
        self._hand_out()

    def _keep_unchanged(self, names: tuple[str, ...]) -> None:
        """Fill :attr:`inputs` and :attr:`kept`: the figures whose inputs equal those
        recorded in :data:`INPUTS_FILE` when they were drawn, with every format's file in
        place (or recorded as having had nothing to draw). With no record at all, every
        figure is drawn: their inputs are taken in :meth:`result`, once they are handed out."""
        done = _read_inputs(self.out_dir / INPUTS_FILE)
        if not done:
            self.inputs_due = names
            return
        self._take_inputs(names)
        for name in names:
            before = done.get(name) or {}
            if before.get("inputs") != self.inputs[name]:
                continue
            if not before.get("drawn"):
                self.kept[name] = None
            elif all((self.out_dir / f"{name}.{fmt}").is_file() for fmt in self.formats):
                self.kept[name] = self.out_dir / f"{name}.{self.formats[0]}"

    def _take_inputs(self, names: tuple[str, ...]) -> None:
        """:attr:`inputs` of ``names`` (:func:`figures_inputs`)."""
        if names:
            curves = self._loss_curves() if "loss" in names else None
            self.inputs |= figures_inputs(self.df, names, self.formats, curves)

    def _loss_curves(self) -> pd.DataFrame:
        """The runs' loss curves (:func:`~vitfsdp.analysis.collect.loss_curves`: what
        ``collect_runs`` kept in this process, which the pool's processes lack), taken once."""
        if self.curves is None:
            self.curves = loss_curves(self.df)
        return self.curves

    def _hand_out(self, *_: Future) -> None:
        """Give the next figures to the pool's idle processes, one each (also the callback
        of each figure a process finished)."""
        if self.pool is None:
            return
        with self.lock:
            busy = sum(not f.done() for f in self.futures.values())
            while self.todo and busy < self.pool.workers:
                name = self.todo[0]
                curves = self._loss_curves() if name == "loss" else None
                try:
                    future = self.pool.submit(_write_figure, name, self.df, self.out_dir,
                                              self.formats, curves)
                except RuntimeError:  # the pool is shutting down or broken: drawn here
                    return
                self.todo.pop(0)
                self.futures[name], busy = future, busy + 1
                future.add_done_callback(self._hand_out)

    def _next(self) -> str | None:
        """The next figure to draw here, taken off :attr:`todo`; ``None`` when none is left."""
        with self.lock:
            return self.todo.pop(0) if self.todo else None

    def result(self) -> dict[str, Path]:
        """Draw what is left, wait for the pool; the path of each figure's first format
        (by default the PNG), by name."""
        written: dict[str, Path | None] = {}
        while (name := self._next()) is not None:  # every process is busy: draw it here
            written[name] = _write_figure(name, self.df, self.out_dir, self.formats)
        self._take_inputs(self.inputs_due)  # while the pool's processes draw
        for name, future in list(self.futures.items()):
            try:
                written[name] = future.result()
            except BrokenProcessPool as e:  # the process died (killed for memory, say)
                log.warning("the process drawing %s ended (%s); drawing it here", name, e)
                written[name] = _write_figure(name, self.df, self.out_dir, self.formats)
        if self.inputs:
            _write_inputs(self.out_dir / INPUTS_FILE, self.inputs, {**written, **self.kept})
        if self.kept:
            log.info("kept %d figure(s) whose runs did not change: %s", len(self.kept),
                     ", ".join(self.kept))
        paths = {}
        for name in FIGURES:  # in the order of FIGURES, however they were drawn
            if name not in written and name not in self.kept:
                continue
            path = written.get(name, self.kept.get(name))
            if path is None:
                log.info("no %s figure: the runs hold no %s", name, NOTHING_TO_DRAW[name])
                continue
            for fmt in self.formats:
                if name in written:
                    log.info("wrote %s", path.with_suffix(f".{fmt}"))
            paths[name] = path
        return paths


#: Beside the figures: what each was last drawn from (:func:`figure_inputs`) and whether it
#: was drawn (``{"memory": {"inputs": "<sha1>", "drawn": true}, ...}``), so an analysis of
#: unchanged runs keeps the figures (``PendingFigures(keep_unchanged=True)``).
INPUTS_FILE = ".figure_inputs.json"
#: Columns of a ``collect_runs`` frame that hold what runs measured or why they ended; a
#: figure's inputs are every other column (which runs, their settings: what lines, labels
#: and titles are made of) and the measured ones it reads (:data:`FIGURE_COLUMNS`).
MEASURED_COLUMNS = (
    "reason", "log", "ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "mfu",
    "hw_tflops_per_gpu", "hfu", "peak_mem_gib", "peak_mem_min_gib", "peak_mem_kind",
    "peak_mem_reserved_gib", "peak_mem_reserved_min_gib", "peak_rss_gib",
    "device_mem_used_gib", "device_mem_used_min_gib", "alloc_retries", "num_ooms",
    "device_busy_frac", "device_busy_min_frac", "host_load_1m", "cpu_throttled_s",
    "state_params_gib", "state_grads_gib",
    "state_optimizer_gib", "sent_gb_per_node_max",
    "sent_gb_total", "ips_spread", "ips_min", "ips_max", "step_time_s_min",
    "step_time_s_max", "num_windows", "last_step", "loss", "elapsed_s", "compile_s",
    "ips_reached", "peak_mem_reached_gib", "pred_peak_mem_gib", "pred_step_time_s",
    "pred_ips", "pred_fits", "pred_mem_metric", "pred_source", "started_at", "git_commit",
    "versions",
)  # fmt: skip
#: The measured columns each figure reads (the weak-scaling figure's published stars
#: compare the points' memory too: :func:`vitfsdp.analysis.reference.reference_table`).
FIGURE_COLUMNS = {
    "weak_scaling": ("ips", "ips_reached", "pred_ips", "peak_mem_gib", "peak_mem_kind",
                     "peak_mem_reserved_gib", "device_busy_frac"),
    "memory": ("peak_mem_gib", "peak_mem_min_gib", "peak_mem_kind", "peak_mem_reserved_gib",
               "pred_peak_mem_gib", "pred_mem_metric", "peak_mem_reached_gib",
               "state_params_gib", "state_grads_gib", "state_optimizer_gib"),
    "loss": (),  # and the loss curves (figure_inputs)
    "prefetch": ("ips",),
    "tflops": ("tflops_per_gpu",),
    "recipe": ("ips",),
}  # fmt: skip


def figure_inputs(df: pd.DataFrame, name: str, formats: tuple[str, ...] = ("png", "svg"),
                  curves: pd.DataFrame | None = None) -> str:  # fmt: skip
    """A fingerprint (SHA-1, hex) of everything figure ``name`` is drawn from: the columns
    of ``df`` it reads (every column but the :data:`MEASURED_COLUMNS` other than its own,
    :data:`FIGURE_COLUMNS`), row by row in order; for ``loss``, the loss curves
    (``curves``, else :func:`~vitfsdp.analysis.collect.loss_curves`); the ``formats``; and
    the code that draws it (:func:`_code_fingerprint`). Equal fingerprints draw equal files.

    Raises:
        KeyError: ``name`` is not one of :data:`FIGURES`.
    """
    return figures_inputs(df, (name,), formats, curves)[name]


def figures_inputs(df: pd.DataFrame, names: Iterable[str],
                   formats: tuple[str, ...] = ("png", "svg"),
                   curves: pd.DataFrame | None = None) -> dict[str, str]:  # fmt: skip
    """:func:`figure_inputs` of each of ``names``, by name. The columns every figure reads
    (all but :data:`MEASURED_COLUMNS`: which runs, their settings) are hashed once, not once
    per figure; each figure's fingerprint holds that hash, its own measured columns' and,
    for ``loss``, the curves' (``curves``, else computed once here).

    Raises:
        KeyError: a name is not one of :data:`FIGURES`.
    """
    names = list(names)
    measured = set(MEASURED_COLUMNS)
    shared = [c for c in df.columns if c not in measured]
    shared_digest = hashlib.sha1(frame_hash(df[shared])).digest()
    if "loss" in names and curves is None:
        curves = loss_curves(df)
    inputs = {}
    for name in names:
        own = set(FIGURE_COLUMNS[name])
        columns = [c for c in df.columns if c in measured and c in own]
        digest = hashlib.sha1(_code_fingerprint().encode())
        digest.update(repr((name, formats, shared, columns)).encode())
        digest.update(shared_digest)
        digest.update(frame_hash(df[columns]))
        if name == "loss":
            digest.update(frame_hash(curves))
        inputs[name] = digest.hexdigest()
    return inputs


@functools.cache
def _code_fingerprint() -> str:
    """What the figures' code is: the size and modification time of every file of this
    package (``vitfsdp/analysis``) and of the published reference data, and matplotlib's
    and pandas' versions; a change to any redraws every figure."""
    here = Path(__file__).resolve().parent
    files = [*sorted(here.glob("*.py")), *sorted((here.parent / "reference").glob("*"))]
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]
    return repr((stats, importlib.metadata.version("matplotlib"), pd.__version__, DPI))


def _read_inputs(path: Path) -> dict:
    """:data:`INPUTS_FILE`'s record, ``{}`` where there is none or it cannot be read (every
    figure is drawn then)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_inputs(path: Path, inputs: dict[str, str], paths: dict[str, Path | None]) -> None:
    """Record ``inputs`` of each figure in ``paths`` (drawn: a path; nothing to draw:
    ``None``) into :data:`INPUTS_FILE`, keeping the other figures' records (atomically:
    an analysis killed half way leaves the old record or the new one)."""
    record = _read_inputs(path)
    record |= {name: {"inputs": inputs[name], "drawn": paths[name] is not None}
               for name in paths if name in inputs}
    write_json_atomic(path, record)


class FigurePool(ProcessPoolExecutor):
    """Processes that work beside this one: they read part of the records
    (:func:`~vitfsdp.analysis.collect.collect_runs`' ``pool``), then draw figures
    (:class:`PendingFigures`).

    They are spawned, not forked (a fork of a process holding threads, BLAS's or a logging
    handler's, can deadlock), and start at once, so create the pool before
    :func:`~vitfsdp.analysis.collect.collect_runs`, and shut it down after the figures
    (``with`` or :meth:`shutdown`). The first time the pool has nothing to do (its processes
    started, the records they were given read), each process imports matplotlib and loads
    its font (:func:`_warm_up`) while this one is still busy (building the runs' frame,
    say), so the figures they are given next start at once.

    Args:
        workers: how many processes (at least 1).
    """

    def __init__(self, workers: int) -> None:
        super().__init__(workers, mp_context=multiprocessing.get_context("spawn"),
                         initializer=_leave_without_teardown)
        self.workers = workers
        self._lock = threading.Lock()
        self._queued = 0  # submitted, not yet done
        self._cold = workers  # warm-ups still to hand out
        for _ in range(workers):  # each submit starts a process while none is idle
            self.submit(_started)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """As :meth:`ProcessPoolExecutor.submit`; the pool warms up when it next is idle."""
        with self._lock:
            self._queued += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._when_done)
        return future

    def _when_done(self, _: Future) -> None:
        """A task ended: once nothing is queued, hand out the warm-ups (this pool's thread)."""
        with self._lock:
            self._queued -= 1
            warm, self._cold = (self._cold, 0) if self._queued == 0 else (0, self._cold)
        for _ in range(warm):
            try:
                self.submit(_warm_up)
            except RuntimeError:  # shutting down: nothing left to draw
                return


def figure_pool(jobs: int | None = None, figures: int = len(FIGURES)) -> FigurePool | None:
    """The pool for ``jobs`` processes drawing figures at once, this one included, or
    ``None`` for ``jobs=1`` (every figure drawn in this process).

    Args:
        jobs: default one per figure to draw, at most the CPUs this process may run on
            (``os.sched_getaffinity``: a Slurm step's CPUs, not the node's).
        figures: how many figures there are to draw (default all of :data:`FIGURES`): no
            more processes than that.
    """
    if jobs is None:
        cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count() or 1)  # fmt: skip
        jobs = cpus
    jobs = min(jobs, figures)
    return FigurePool(jobs - 1) if jobs > 1 else None


def _leave_without_teardown() -> None:
    """Run first in each new process: once it has been told to stop and has flushed its
    output, it leaves without the interpreter's teardown (the frame and figures it holds:
    about half a second that :meth:`FigurePool.shutdown` would wait for)."""
    atexit.register(os._exit, 0)  # the last handler registered runs first


def _started() -> None:
    """Run in a new process: nothing (its start, the imports, is the work)."""


def _warm_up() -> None:
    """Run in a new figure process: load the font every figure's text is measured with."""
    _mpl().font_manager.findfont(_mpl().FontProperties(
        family=_mpl().matplotlib.rcParams["font.family"]))


def _write_figure(name: str, df: pd.DataFrame, out_dir: Path, formats: tuple[str, ...],
                  curves: pd.DataFrame | None = None) -> Path | None:  # fmt: skip
    """Draw figure ``name`` of ``df`` and save it once per format; the first format's path,
    or ``None`` when the runs hold nothing to draw (no loss, no ablation)."""
    fig = (FIGURES[name](df, curves=curves) if name == "loss" and curves is not None
           else FIGURES[name](df))  # fmt: skip
    if fig is None:
        return None
    for fmt in formats:
        _save(fig, out_dir / f"{name}.{fmt}", quiet=True)
    return out_dir / f"{name}.{formats[0]}"


def figure_script(name: str, argv: list[str]) -> int:
    """The body of ``analysis/<name>.py``: write one figure for each sweep dir in ``argv``
    into ``SWEEP_DIR/analysis`` (PNG and SVG); 2 on bad input (no such dir, no runs)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not argv or any(a.startswith("-") for a in argv):
        print(f"usage: python analysis/{name}.py SWEEP_DIR [SWEEP_DIR ...]", file=sys.stderr)
        return 2
    try:
        runs = {sweep_dir: collect_runs(sweep_dir) for sweep_dir in argv}
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for sweep_dir, df in runs.items():
        write_figures(df, Path(sweep_dir) / "analysis", names=(name,))
    return 0


def _new_figure(num_panels: int, columns: int = 0) -> tuple[Figure, list]:
    """A figure on the Agg canvas with ``num_panels`` panels, ``columns`` a row (default
    up to :data:`MAX_COLUMNS`), :data:`PANEL_WIDTH_IN` wide each, laid out by matplotlib's
    constrained layout; ``fig.axes`` holds exactly the panels, row by row. The height is a
    first guess: :func:`_finish` sets it once the legend and notes are known."""
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


def _memory_groups(panel: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(group, rows)`` of a model's runs: FULL_SHARD, then the other strategies."""
    sharding = panel["sharding_strategy"].fillna(panel["strategy"])
    full = sharding == "FULL_SHARD"
    groups = [(MEMORY_GROUPS[0], panel[full]), (MEMORY_GROUPS[1], panel[~full])]
    return [(g, rows) for g, rows in groups if len(rows)]


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


def _lines(panel: pd.DataFrame, keys: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(label, rows)`` per line of one panel, sorted by label."""
    labels = line_labels(panel, keys)
    return sorted(((str(k), rows) for k, rows in panel.groupby(labels)), key=lambda kv: kv[0])


def _color_keys(keys: list[str]) -> list[str]:
    """The label columns that pick a colour: all but ``framework`` (the line style)."""
    return [k for k in keys if k != "framework"]


def _color_label(line: pd.DataFrame, keys: list[str]) -> str:
    """The colour key of a line's rows (see :func:`_color_keys`)."""
    return _line_label(line.iloc[0], _color_keys(keys))


def _linestyle(line: pd.DataFrame, keys: list[str]) -> str:
    """Line style of a measured line: by framework when frameworks vary, else solid."""
    if "framework" not in keys:
        return DEFAULT_STYLE
    return FRAMEWORK_STYLES.get(line["framework"].iloc[0], DEFAULT_STYLE)


def strategy_look(strategy: str) -> tuple[str, str]:
    """The fixed ``(colour, marker)`` of a strategy: :data:`STRATEGY_LOOKS`, else picked by
    the name's bytes (stable across runs and sweeps)."""
    if strategy in STRATEGY_LOOKS:
        return STRATEGY_LOOKS[strategy]
    code = sum(str(strategy).encode())
    return LINE_COLORS[code % len(LINE_COLORS)], LINE_MARKERS[code % len(LINE_MARKERS)]


def _looks(df: pd.DataFrame, keys: list[str]) -> dict[str, tuple[str, str]]:
    """``(colour, marker)`` per colour key, the same in every panel and figure: the
    strategy's fixed look (:func:`strategy_look`); a strategy's further lines keep its colour
    and take :data:`VARIANT_MARKERS` in label order."""
    rows = df.assign(_key=line_labels(df, _color_keys(keys)))
    by_strategy = rows.groupby(rows["strategy"].astype("string").fillna("unknown strategy"))
    looks, extra = {}, 0
    for strategy, lines in sorted(by_strategy["_key"]):
        color, marker = strategy_look(strategy)
        for i, label in enumerate(sorted(set(lines))):
            if i:
                marker, extra = VARIANT_MARKERS[extra % len(VARIANT_MARKERS)], extra + 1
            looks[label] = (color, marker)
    return looks


def _plot_measured(ax, line: pd.DataFrame, keys: list[str], looks: dict[str, tuple[str, str]],
                   label: str, value: str, how: str,
                   shift: float = 1.0) -> tuple[pd.Series, str]:  # fmt: skip
    """The line's completed ``value`` per node count (``how``: median or max over runs) in
    its colour, marker and framework's line style (an empty line, for the legend, when none
    completed), drawn at ``shift`` times the node count (the middle of its bar where the
    memory figure draws bars); returns those points (by node count) and the colour."""
    done = _completed_points(line, value, how)
    color, marker = looks[_color_label(line, keys)]
    # a line with nothing completed still gets its legend entry (its marks use its colour)
    ax.plot(done.index * shift, done.values, ls=_linestyle(line, keys), marker=marker,
            color=color, label=label, zorder=3)
    return done, color


def _completed_points(line: pd.DataFrame, value: str, how: str) -> pd.Series:
    """``value`` of the completed runs of a line per node count (``how``: median or max)."""
    done = _completed(line, value)
    points = done.groupby(done["nodes"].astype("int64"))[value].agg(how)
    return points.sort_index()


def _completed(line: pd.DataFrame, value: str) -> pd.DataFrame:
    """``nodes`` and ``value`` of the line's completed runs with both known (two columns,
    not the frame's every column: cheap at tens of thousands of runs)."""
    mask = (line["status"] == "completed") & line[value].notna() & line["nodes"].notna()
    return line.loc[mask, ["nodes", value]]


def _plot_ideal(ax, done: pd.Series, nodes: pd.Series, color: str, label: str) -> None:
    """Dashed linear scaling from the smallest completed node count over the line's nodes."""
    n0 = done.index.min()
    xs = sorted({int(n) for n in nodes.dropna() if n >= n0})
    ideal = [done.loc[n0] * n / n0 for n in xs]
    ax.plot(xs, ideal, "--", color=color, alpha=0.7, lw=1, label=f"_ideal {label}")


def _mark_above_ideal(ax, done: pd.Series, extras: set[str]) -> None:
    """A grey hollow square around each point whose scaling efficiency (ips over the ideal
    line's) rounds above 100 %: noise in weak scaling, flagged as such in the legend."""
    n0 = done.index.min()
    efficiency = done / (done.loc[n0] * done.index.to_series() / n0)
    above = done[(efficiency * 100).round() > 100]
    if len(above):
        ax.scatter(above.index, above.values, marker="s", facecolors="none", edgecolors="0.4",
                   s=70, lw=0.8, zorder=4, label="_above ideal")
        extras.add("above_ideal")


def _mark_host_bound(ax, line: pd.DataFrame, done: pd.Series, extras: set[str]) -> None:
    """A grey hollow hexagon around each completed point whose median ``device_busy_frac``
    over repeats is host-bound (:func:`vitfsdp.core.throughput.host_bound`): its images/s
    measure the wrapper and the loop, not the device or the network. Nothing where the runs
    did not measure it (CPU ranks)."""
    if "device_busy_frac" not in line:
        return
    rows = _completed(line, "device_busy_frac")
    busy = rows.groupby(rows["nodes"].astype("int64"))["device_busy_frac"].median()
    flagged = [n for n, b in busy.items() if host_bound(b) and n in done.index]
    if flagged:
        ax.scatter(flagged, done.loc[flagged].values, marker="h", facecolors="none",
                   edgecolors="0.4", s=110, lw=0.8, zorder=4, label="_host-bound")
        extras.add("host_bound")


def _mark_not_completed(
    ax, line: pd.DataFrame, value: str, color: str, label: str, marked: Counter,
    extras: set[str], at: str | None = None, reached: str | None = None, shift: float = 1.0,
) -> list[tuple[bool, str]]:
    """Mark each point of a line with runs without ``value``; return its note items.

    One mark per point, however many of its runs failed: a ``skipped_infeasible`` point with
    a known ``at`` (its predicted value) is a hollow diamond there; any other is an ``x`` at
    what its runs reached before they ended (``reached``: the median over them), else at the
    panel's bottom, where ``marked`` stacks the marks of different lines at one node count.
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
    at_value, at_bottom = [], []  # (x, y) in data coordinates / in axes fraction
    nodes = rest["nodes"].astype("int64")
    ys = (rest[reached].groupby(nodes).median() if reached is not None
          else pd.Series(float("nan"), index=sorted(set(nodes))))
    for n, y in ys.items():  # one mark per point: the median of what its runs reached
        if pd.notna(y) and y > 0:
            at_value.append((float(n) * shift, y))
        else:
            at_bottom.append((float(n) * shift, NOT_COMPLETED_Y + NOT_COMPLETED_STEP * marked[n]))
            marked[n] += 1
    for marks, where in ((at_value, {}), (at_bottom, {"transform": ax.get_xaxis_transform(),
                                                      "clip_on": False})):
        if marks:  # one collection per kind of mark: fast for hundreds of points
            ax.scatter(*zip(*marks, strict=True), marker="x", color=color, zorder=3,
                       label=f"_not completed {label}", **where)
            extras.add("failed")
    return _note_items(line, bad, label, value)


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


def _plot_repeat_range(ax, line: pd.DataFrame, value: str, color: str,
                       extras: set[str]) -> None:  # fmt: skip
    """A min-max error bar at each node count where the line's point ran more than once
    and its runs differ by more than :data:`MIN_ERROR_BAR` of their median (on the log
    axis a smaller spread hides under the marker: not drawn, not in the legend)."""
    done = _completed(line, value)
    stats = done.groupby(done["nodes"].astype("int64"))[value].agg(["median", "min", "max",
                                                                     "count"])
    stats = stats[(stats["count"] > 1)
                  & (stats["max"] - stats["min"] > MIN_ERROR_BAR * stats["median"])]
    if len(stats):
        ax.errorbar(stats.index, stats["median"],
                    yerr=[stats["median"] - stats["min"], stats["max"] - stats["median"]],
                    fmt="none", ecolor=color, capsize=3, lw=1)
        extras.add("repeats")


def _plot_rank_range(ax, line: pd.DataFrame, done: pd.Series, color: str,
                     extras: set[str], shift: float = 1.0,
                     min_length: float = 0.0) -> None:  # fmt: skip
    """An error bar from the minimum over ranks (``peak_mem_min_gib``) up to the plotted
    maximum, where the records hold the minimum and it is more than ``min_length`` (GiB)
    below the maximum (a shorter bar hides under the marker: not drawn, not in the legend),
    at ``shift`` times the node count (as :func:`_plot_measured`)."""
    ok = _completed(line, "peak_mem_min_gib")
    low = ok.groupby(ok["nodes"].astype("int64"))["peak_mem_min_gib"].min()
    low = low[low.index.isin(done.index)]
    low = low[done.loc[low.index] - low > min_length]
    if len(low):
        high = done.loc[low.index]
        ax.errorbar(low.index * shift, high, yerr=[high - low, 0 * high], fmt="none",
                    ecolor=color, capsize=3, lw=1, alpha=0.8, zorder=3)
        extras.add("ranks")


def _plot_predicted(ax, line: pd.DataFrame, value: str, color: str, label: str,
                    extras: set[str], shift: float = 1.0) -> bool:  # fmt: skip
    """The plan's prediction ``value`` per node count as a dotted line (every status: a
    skipped point's prediction is part of the line), at ``shift`` times the node count (as
    :func:`_plot_measured`); True if one was drawn."""
    known = line.loc[line[value].notna() & line["nodes"].notna(), ["nodes", value]]
    if known.empty:
        return False
    pred = known.groupby(known["nodes"].astype("int64"))[value].first().sort_index()
    ax.plot(pred.index * shift, pred.values, ls=":", lw=1.2, marker=".", color=color,
            label=f"_predicted {label}", zorder=3)
    extras.add("predicted")
    return True


def _plot_published_memory(ax, rows: pd.DataFrame, span: tuple[float, float] | None,
                           color: str, extras: set[str]) -> None:  # fmt: skip
    """A line's published memory (reference.csv rows drawn in memory.png): a compared one
    (GPU allocated memory of the same setup) as a hollow star in the line's colour at the
    bar's middle (``span``: :func:`_bar_spans`; ``None``: at the node count); one of another
    measure (CPU resident memory here) as a :data:`PUBLISHED_OTHER` segment across the bar
    with its value, not compared."""
    for _, row in rows.iterrows():
        n, value = float(row["nodes"]), float(row["published"])
        left, right = span or (-PUBLISHED_HALF_OCTAVES, PUBLISHED_HALF_OCTAVES)
        if bool(row["compared"]):
            ax.scatter([n * 2 ** ((left + right) / 2)], [value], marker="*", facecolors="none",
                       edgecolors=color, s=90, lw=0.9, zorder=5, label="_published")
            extras.add("reference")
            continue
        ax.hlines(value, n * 2 ** left, n * 2 ** right, **PUBLISHED_OTHER, zorder=5,
                  label="_published other")
        ax.annotate(f"{_study(row['label'])} {value:.3g} {_unit_word(row['unit'])}",
                    (n * 2 ** right, value), xytext=(2, 0), textcoords="offset points",
                    ha="left", va="center", fontsize=NOTE_FONTSIZE,
                    color=PUBLISHED_OTHER["color"])
        extras.add("published_other")


def _memory_published_labels(rows: pd.DataFrame) -> dict[str, str]:
    """The legend texts of memory.png's published marks: the compared star's study, and the
    segment's (:func:`_plot_published_memory`) with what it measures."""
    labels = {}
    if len(rows):
        labels |= _published_labels(rows[rows["compared"].astype(bool)])
        other = sorted(set(rows.loc[~rows["compared"].astype(bool), "label"].astype(str)))
        if other:
            labels["published_other"] = ("published GPU allocated memory, not compared (ours: "
                                         "CPU resident): " + "; ".join(other))
    return labels


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


def _plot_reserved(ax, line: pd.DataFrame, color: str, extras: set[str],
                   shift: float = 1.0) -> None:  # fmt: skip
    """Measured peak reserved memory as hollow circles, where the plan predicts reserved
    memory (``pred_mem_metric``) and the figure shows allocated memory (at ``shift`` times
    the node count, as :func:`_plot_measured`)."""
    metric = line["pred_mem_metric"].dropna()
    if metric.empty or metric.iloc[0] != "peak_mem_reserved_gib":
        return
    if (line["peak_mem_kind"].dropna() != "allocated").any():
        return
    reserved = _completed_points(line, "peak_mem_reserved_gib", "max")
    if len(reserved):
        ax.scatter(reserved.index * shift, reserved.values, marker="o", facecolors="none",
                   edgecolors=color, s=30, zorder=3, label="_reserved")
        extras.add("reserved")


def _log_y_axis(ax) -> None:
    """Log y with plain-number ticks: at 1, 2, 3 and 5 per decade over up to 1.5 decades
    (readable over narrow spans), at 1, 2 and 5 up to 3 decades, then at powers of 10.

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
    low, high = ax.get_ylim()
    decades = math.log10(high / low) if low > 0 and high > low else 0.0
    subs = (1.0, 2.0, 3.0, 5.0) if decades <= 1.5 else (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
    ax.yaxis.set_major_locator(_mpl().LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(
        _mpl().FuncFormatter(lambda y, _: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    ax.yaxis.set_minor_formatter(_mpl().NullFormatter())


def _make_room_below(ax) -> None:
    """Lower a log y axis by a tenth of its span so the ``x`` marks clear the lowest point."""
    low, high = ax.get_ylim()
    if low > 0 and high > low:
        ax.set_ylim(low / (high / low) ** 0.1, high)


def _plot_device_memory(ax, panel: pd.DataFrame) -> bool:
    """The device memory as a dotted horizontal line, once per distinct known size; True if
    one was drawn."""
    devices = panel.loc[panel["device_memory_gib"].notna(), ["device_memory_gib", "device_name"]]
    for gib, rows in devices.groupby("device_memory_gib"):
        names = rows["device_name"].dropna().unique()
        name = f"{names[0]} " if len(names) == 1 else ""
        ax.axhline(gib, ls=":", color=DEVICE_COLOR, lw=1, label=f"{name}memory ({gib:g} GiB)")
    if len(devices):
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.08 * devices["device_memory_gib"].max()))
    return bool(len(devices))


def _memory_label(panel: pd.DataFrame) -> str:
    """Which memory the panel shows: allocated per GPU, resident per rank (CPU), or both."""
    kinds = set(panel["peak_mem_kind"].dropna())
    if not kinds:
        kinds = {"rss" if set(panel["device_type"].dropna()) == {"cpu"} else "allocated"}
    if len(kinds) == 1:
        return MEMORY_LABELS[kinds.pop()]
    return "peak memory (GiB): allocated\nper GPU or resident per rank"


def _style_panel(ax, panel: pd.DataFrame, title: str, ylabel: str,
                 notes: list[tuple[bool, str]]) -> None:  # fmt: skip
    """Log-2 node axis with node counts as ticks, labels, title and the not-completed note
    (:func:`_note_text`)."""
    nodes = sorted({int(n) for n in panel["nodes"].dropna()})
    if nodes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(nodes, labels=[str(n) for n in nodes])
        ax.xaxis.set_minor_locator(_mpl().NullLocator())
        ax.set_xlim(nodes[0] / 1.4, nodes[-1] * 1.4)
    ax.set_xlabel("nodes")
    ax.set_ylabel(ylabel)
    _set_title(ax, title)
    ax.grid(True, which="major", alpha=0.3)
    ax.tick_params(labelsize=PAPER_RC["xtick.labelsize"])  # kept if saved outside PAPER_RC
    if notes:  # just under the x label, wrapped to the panel's width
        text = textwrap.fill(_note_text(notes),
                             width=_chars_per_line(PANEL_WIDTH_IN - Y_LABELS_IN, NOTE_FONTSIZE))
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


def _set_title(ax, title: str) -> None:
    """The panel's title, each line wrapped to the panel's width (long model names), at
    most two lines: past them the second line is shortened with ``...``."""
    width = _chars_per_line(PANEL_WIDTH_IN, PAPER_RC["axes.titlesize"])
    lines = [wrapped for line in title.split("\n") for wrapped in textwrap.wrap(line, width)]
    if len(lines) > 2:
        lines = [lines[0], " ".join(lines[1:])[:width - 3].rstrip() + "..."]
    ax.set_title("\n".join(lines))


def _panel_title(model: str, panel: pd.DataFrame) -> str:
    """The model name with its parameter count in millions when known and its input side
    when every run of the panel shares one (``vit_small (21.6M params, 32 px)``: the demo's
    ViT-S/16 runs at 32 px, not the 224 its name suggests)."""
    parts = []
    params = panel["num_params"].dropna()
    if len(params):
        parts.append(f"{params.iloc[0] / 1e6:,.1f}M params")
    sizes = panel["img_size"].dropna().unique() if "img_size" in panel else []
    if len(sizes) == 1:
        parts.append(f"{int(sizes[0])} px")
    return f"{model} ({', '.join(parts)})" if parts else model


#: How a published figure that is not compared with ours is drawn (another model, device
#: or measure: reference.csv's ``differs``): a short orange segment (ColorBrewer Dark2's
#: orange; no strategy line or node-count bar is orange) at its value, labelled.
PUBLISHED_OTHER = {"color": "#d95f02", "lw": 2}
#: Half the width of a published memory segment where the panel draws no bars (octaves).
PUBLISHED_HALF_OCTAVES = 0.15
#: Grey legend entries for the kinds of mark a figure may draw (the keys of ``extras``).
PROXIES = {
    "ideal": dict(color="0.4", ls="--", label="ideal (linear)"),
    "predicted": dict(color="0.4", ls=":", marker=".", label="predicted (plan)"),
    "reserved": dict(color="0.4", marker="o", mfc="none", ls="none",
                     label="measured peak reserved"),
    "ranks": dict(color="0.4", marker="_", ls="-", lw=1, label="error bar: min over ranks"),
    "repeats": dict(color="0.4", marker="_", ls="-", lw=1,
                    label="error bar: min-max over repeats"),
    "above_ideal": dict(color="0.4", marker="s", mfc="none", ms=7, ls="none",
                        label="above ideal (efficiency > 100 %): noise"),
    "host_bound": dict(color="0.4", marker="h", mfc="none", ms=9, ls="none",
                       label=f"host-bound: device busy < {HOST_BOUND_BUSY_FRAC:.0%}, measures "
                             "the wrapper"),
    "failed": dict(color="0.4", marker="x", ls="none", label="not completed"),
    "skipped": dict(color="0.4", marker="D", mfc="none", ls="none",
                    label="skipped: predicted not to fit"),
    "reference": dict(color="0.4", marker="*", mfc="none", ms=8, ls="none",
                      label="published figure (reference.csv)"),
    "published_other": dict(**PUBLISHED_OTHER, ls="-",
                            label="published figure, not compared (reference.csv)"),
    "chance": dict(color="0.45", ls=(0, (6, 3)), lw=0.9, label="chance: ln(classes)"),
}  # fmt: skip


#: Legend entries (grey patches) for the parts of the memory bars (:data:`STATE_PARTS`).
PATCH_PROXIES = {
    "state_params": dict(facecolor="0.35", edgecolor="0.35", lw=0.6,
                         label="params (local shards)"),
    "state_grads": dict(facecolor=(0.35, 0.35, 0.35, 0.45), edgecolor="0.35", lw=0.6,
                        hatch="////", label="grads (local shards)"),
    "state_optimizer": dict(facecolor=(0.35, 0.35, 0.35, 0.2), edgecolor="0.35", lw=0.6,
                            hatch="....", label="optimizer state (local shards)"),
    "state_rest": dict(facecolor="white", edgecolor="0.35", lw=0.6,
                       label="peak above the model state"),
}  # fmt: skip


def _figure_legend(fig: Figure, extras: set[str], handles: list | None = None,
                   footer: str = "", proxy_labels: dict[str, str] | None = None) -> None:
    """One legend for the whole figure, below the panels, in as many columns as fit its
    width: ``handles``, by default every labelled line of every panel once (by label, sorted,
    device memory last), then a grey proxy for each kind of mark drawn (``extras``, see
    :data:`PROXIES` and :data:`PATCH_PROXIES`). ``footer`` (the runs' shared settings) heads
    the legend, or stands alone below the panels where there is no legend. ``proxy_labels``
    replaces the label of a kind's proxy (the published figures' study names)."""
    if handles is None:
        by_label = {}
        for ax in fig.axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                by_label.setdefault(label, handle)
        order = sorted(by_label, key=lambda label: (_is_device_line(by_label[label]), label))
        handles = [by_label[label] for label in order]
    relabel = {kind: _fit_label(fig, text) for kind, text in (proxy_labels or {}).items()}
    entries = handles + [_mpl().Line2D([], [], **{**PROXIES[kind], **({"label": relabel[kind]}
                                                               if kind in relabel else {})})
                         for kind in PROXIES
                         if kind in extras and (handles or kind != "ideal")]
    entries += [_mpl().Patch(**PATCH_PROXIES[kind]) for kind in PATCH_PROXIES if kind in extras]
    if entries:
        columns = _legend_columns(fig, [h.get_label() for h in entries])
        fig.legend(handles=entries, loc="outside lower center", frameon=False, ncols=columns,
                   title=footer or None, title_fontsize=PAPER_RC["legend.fontsize"])
    elif footer:
        fig.supxlabel(footer, fontsize=PAPER_RC["legend.fontsize"])


def _fit_label(fig: Figure, label: str) -> str:
    """``label`` wrapped into lines as long as fit the figure's width beside a legend handle
    (a published study's long label); unchanged where it fits."""
    prop = _mpl().FontProperties(size=PAPER_RC["legend.fontsize"])
    renderer = fig.canvas.get_renderer()
    room = fig.get_figwidth() * 72 - 4.8 * prop.get_size_in_points()

    def width(text: str) -> float:  # points
        return max(renderer.get_text_width_height_descent(line, prop, ismath=False)[0]
                   for line in text.split("\n")) * 72 / fig.dpi

    text, chars = label, len(label)
    while width(text) > room and chars > 20:
        chars -= 4
        text = textwrap.fill(label, chars)
    return text


def _legend_columns(fig: Figure, labels: list[str]) -> int:
    """How many legend columns of ``labels`` fit the figure's width, with matplotlib's
    default handle length (2 em), handle pad (0.8 em) and column spacing (2 em)."""
    prop = _mpl().FontProperties(size=PAPER_RC["legend.fontsize"])
    renderer = fig.canvas.get_renderer()
    widest = max(renderer.get_text_width_height_descent(line, prop, ismath=False)[0]
                 for label in labels for line in label.split("\n")) * 72 / fig.dpi
    column = widest + 4.8 * prop.get_size_in_points()
    return max(1, min(len(labels), int(fig.get_figwidth() * 72 // column)))


def _is_device_line(handle) -> bool:
    """Whether a legend handle is a device-memory line (drawn in :data:`DEVICE_COLOR`)."""
    return isinstance(handle, _mpl().Line2D) and handle.get_color() == DEVICE_COLOR


def _chars_per_line(width_in: float, fontsize: float) -> int:
    """About how many characters of DejaVu Sans at ``fontsize`` points fit ``width_in``
    inches (an average character taken as 0.62 em: upper-case names run wide)."""
    return max(20, int(width_in * 72 / (0.62 * fontsize)))


def _wrap_items(items: list[str], width: int) -> str:
    """``items`` joined by ", ", a line break instead where a line would pass ``width``."""
    lines = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= width:
            lines[-1] += ", " + item
        else:
            lines.append(item)
    return ",\n".join(lines)


def _context(df: pd.DataFrame) -> list[str]:
    """Config every run shares (local batch, precision, data), the devices (every one named)
    and the cluster profile, for the title."""
    parts = []
    for col in CONTEXT_COLUMNS:
        values = df[col].dropna().unique()
        if col == "device_name" and len(values) > 1:
            parts.append(" / ".join(sorted(str(v) for v in values)))
        elif len(values) == 1:
            value = values[0]
            per = "rank" if set(df["device_type"].dropna()) == {"cpu"} else "GPU"  # CPU ranks
            parts.append(f"local batch {value}/{per}" if col == "local_batch_size"
                         else str(value))  # fmt: skip
    clusters = sorted(str(c) for c in df["cluster"].dropna().unique())
    if clusters:
        parts.append(f"cluster={','.join(clusters)}")
    return parts


def _finish(fig: Figure, title: str, df: pd.DataFrame, path: str | os.PathLike | None,
            extras: set[str], handles: list | None = None,
            proxy_labels: dict[str, str] | None = None) -> None:  # fmt: skip
    """Title and shared config (wrapped to the figure's width), the figure's legend (see
    :func:`_figure_legend`), the height that gives every panel :data:`AXES_HEIGHT_IN` of
    plotting area, and the file at ``path`` if given."""
    width = _chars_per_line(fig.get_figwidth(), PAPER_RC["figure.titlesize"])
    shared = contention_note(df)  # names the cluster profile itself
    context = [p for p in _context(df) if not (shared and p.startswith("cluster="))]
    fig.suptitle(_two_line_title(title, width))
    fig.drawn_kinds = sorted(extras)  # saved into the PNG (DRAWN_KEY) for the captions
    legend_width = _chars_per_line(fig.get_figwidth(), PAPER_RC["legend.fontsize"])
    footer = "\n".join(textwrap.wrap("; ".join([shared, *context] if shared else context),
                                     legend_width))
    _figure_legend(fig, extras, handles, footer, proxy_labels)
    _fit_height(fig)
    if path is not None:
        _save(fig, path)


def _two_line_title(title: str, width: int) -> str:
    """``title`` wrapped to ``width`` characters a line, at most two lines (the second
    shortened with ``...``): what the figure shows; the runs' shared settings go below the
    panels, over the legend (:func:`_figure_legend`)."""
    lines = textwrap.wrap(title, width)
    if len(lines) > 2:
        lines = [lines[0], " ".join(lines[1:])[:width - 3].rstrip() + "..."]
    return "\n".join(lines)


def _fit_height(fig: Figure) -> None:
    """Grow or shrink the figure so each row of panels has :data:`AXES_HEIGHT_IN` of plotting
    area after the layout made room for titles, labels, notes and the legend, then fix that
    layout, so saving draws the figure once per format without laying it out again.

    Constrained layout runs once, at the first guess of the height. The margins it made are
    lengths (inches) that a taller or shorter figure keeps, so each row of panels is then
    moved and stretched by what the height changed (:func:`_stretch_rows`), as a second run
    would place it, and the suptitle kept its distance from the top; only where a panel's
    ticks change with its new height (their labels set the margins) does the layout run
    again."""
    engine = fig.get_layout_engine()
    engine.execute(fig)
    rows = len({round(ax.get_position().y0, 4) for ax in fig.axes})
    height = min(ax.get_position().height for ax in fig.axes) * fig.get_figheight()
    ticks = _major_ticks(fig)
    _stretch_rows(fig, fig.get_figheight() + rows * (AXES_HEIGHT_IN - height))
    if _major_ticks(fig) != ticks:
        engine.execute(fig)
    # no engine at all (None, not "none"): savefig lays out and pre-draws a figure that has
    # one, even matplotlib's placeholder, once per format before drawing it
    with _mpl().matplotlib.rc_context({"figure.autolayout": False,
                                        "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)  # None means the rc's layout, unless both are off


def _major_ticks(fig: Figure) -> list[tuple[list[float], list[float]]]:
    """The major tick values of every panel's axes (their labels make its margins)."""
    return [(list(ax.xaxis.get_majorticklocs()), list(ax.yaxis.get_majorticklocs()))
            for ax in fig.axes]


def _stretch_rows(fig: Figure, new_height: float) -> None:
    """Set the figure's height to ``new_height`` (inches), keeping every margin of the
    layout in inches: each row of panels (from the top) moves down by what the rows above
    it grew and grows by an equal share of the change; the suptitle keeps its distance from
    the top, a bottom label (``supxlabel``) from the bottom (the legend is anchored there)."""
    old_height = fig.get_figheight()
    tops = sorted({round(ax.get_position().y1, 4) for ax in fig.axes}, reverse=True)
    grow = (new_height - old_height) / len(tops)
    boxes = [ax.get_position() for ax in fig.axes]
    fig.set_figheight(new_height)
    for ax, box in zip(fig.axes, boxes, strict=True):
        row = tops.index(round(box.y1, 4))
        top = (1 - box.y1) * old_height + row * grow  # inches from the figure's top
        height = box.height * old_height + grow
        y0 = 1 - (top + height) / new_height
        ax.set_position([box.x0, y0, box.width, height / new_height])
        ax.set_in_layout(True)  # set_position takes it out; kept for a second layout
    if fig._suptitle is not None:
        x, y = fig._suptitle.get_position()
        fig._suptitle.set_y(1 - (1 - y) * old_height / new_height)
    if fig._supxlabel is not None:
        x, y = fig._supxlabel.get_position()
        fig._supxlabel.set_y(y * old_height / new_height)


#: The PNG text chunk naming the kinds of mark a figure drew (keys of :data:`PROXIES`, and
#: ``device``), comma-separated: the report's captions name only these.
DRAWN_KEY = "vitfsdp drawn"


def _save(fig: Figure, path: str | os.PathLike, quiet: bool = False) -> None:
    """Save ``fig`` at ``path``, in the format its suffix names (PNG at :data:`DPI`, with
    :data:`DRAWN_KEY`), at the figure's own size: its fixed layout (:func:`_fit_height`)
    keeps every title, label, note and the legend inside it, so no bounding-box pass is
    needed."""
    drawn = getattr(fig, "drawn_kinds", None)
    png = str(path).endswith(".png") and drawn is not None
    # SVG text as text (editable and searchable, and a third of the time), not glyph outlines
    with _mpl().matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(path, dpi=DPI, **({"metadata": {DRAWN_KEY: ",".join(drawn)},
                                       "pil_kwargs": {"compress_level": PNG_COMPRESS_LEVEL}}
                                      if png else {}))  # fmt: skip
    if not quiet:
        log.info("wrote %s", path)

