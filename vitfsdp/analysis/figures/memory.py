"""The memory figure: peak memory per GPU (per rank on CPU) against nodes, the model state
as bars, FULL_SHARD and the other strategies in separate panels."""

from __future__ import annotations

import math
import os
import textwrap
from collections import Counter
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.finish import FAILED_ON_MARKER, _finish
from vitfsdp.analysis.figures.panels import (
    MAX_LINE_SPREAD,
    NODE_MARGIN,
    WINDOWS_BAR,
    _completed,
    _completed_points,
    _lines,
    _mark_not_completed,
    _new_figure,
    _panel_title,
    _panels,
    _plot_measured,
    _plot_predicted,
    _plot_repeat_range,
    _published_labels,
    _study,
    _style_panel,
    _unit_word,
    repeats_note,
)
from vitfsdp.analysis.figures.style import (
    DEVICE_COLOR,
    DEVICE_USED_MARKER,
    MIN_ERROR_BAR,
    NOTE_FONTSIZE,
    PANEL_WIDTH_IN,
    PUBLISHED_HALF_OCTAVES,
    PUBLISHED_OTHER,
    RESERVED_MARKER,
    _chars_per_line,
    _look_label,
    _looks,
    _mpl,
    _paper_style,
)
from vitfsdp.analysis.lines import label_columns as _label_keys
from vitfsdp.analysis.reference import reference_table
from vitfsdp.analysis.tables import peak_since

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure

#: Memory figure columns: FULL_SHARD alone, as the study shows it, then the rest.
MEMORY_GROUPS = ("FULL_SHARD", "other strategies")


#: The model state in a memory bar, bottom first: ``(column, kind, fill alpha, hatch)``; the
#: kind names its legend entry (:data:`~vitfsdp.analysis.figures.finish.PATCH_PROXIES`) and its
#: caption words. Each part is
#: filled in its line's colour, lighter and hatched going up, so it reads in greyscale too.
STATE_PARTS = (("state_params_gib", "state_params", 1.0, None),
               ("state_grads_gib", "state_grads", 0.45, "////"),
               ("state_optimizer_gib", "state_optimizer", 0.2, "...."))
#: Width (in octaves of the log-2 node axis: nodes 1 and 2 are one octave apart) of the
#: memory bars of one node count together, one bar per line of the panel, and of one bar.
BAR_GROUP_OCTAVES = 0.7
BAR_OCTAVES = 0.3


#: Thinnest part of a memory bar listed in the legend, as a fraction of the panel's height
#: (1.4 pt); where no part of a panel's model state is that high, the note under the panel
#: says so (:data:`TINY_STATE`), and the Memory table of the report holds the bytes.
MIN_BAR_PART = 0.01
TINY_STATE = "model state per rank: under 1 % of the axis, too thin to see"
#: Distance (in octaves of the log-2 node axis, as a fraction of the panel's width in
#: octaves) from a point's measured peak to its prediction (left) and to its measured
#: reserved memory (right; the device's used memory twice as far right): beside the point,
#: not one blob on it (the predicted dot sat under the reserved mark and the measured
#: marker). A bar's slot caps it at a quarter of the bar's width, so every mark stays on its
#: own line's bar; without bars, at :data:`~vitfsdp.analysis.figures.panels.MAX_LINE_SPREAD`
#: of the gap to the next node count over both sides.
MARK_STEP = 0.035
#: What the plan's predicted peak is, by runs.csv ``pred_mem_metric`` (the measured column
#: it is compared with: :func:`vitfsdp.plan.mem_metric`: ``peak_mem_reserved_gib`` on a
#: GPU, ``peak_mem_gib`` for JAX on a GPU, ``peak_rss_gib`` on CPU): the legend names it, so
#: that the prediction is read against the measure it predicts, not against the allocated
#: line of the y axis.
PREDICTED_LABELS = {
    "peak_mem_reserved_gib": "peak reserved",
    "peak_rss_gib": "peak resident memory",
    "peak_mem_gib": "XLA's peak in use",  # vitfsdp.plan.JAX_GPU_MEM_METRIC
}
#: What a JAX run's ``peak_mem_reserved_gib`` is (:mod:`vitfsdp.jax.metrics`): XLA's
#: ``peak_pool_bytes``, the pool it took (under XLA's preallocation a share of the device,
#: whatever the step needs).
JAX_RESERVED = "JAX: XLA's pool"
#: Memory y labels by ``peak_mem_kind``.
MEMORY_LABELS = {
    "allocated": "peak allocated per GPU (GiB)",
    "rss": "peak resident memory per rank (GiB)",
}


@_paper_style
def plot_memory(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure:
    """Peak memory per GPU (or per rank on CPU) against nodes, a line per strategy.

    As the study shows them, FULL_SHARD and the other strategies are separate panels: a
    panel per model and group the runs hold (none left empty), two a row, a model's panels
    on one y scale from 0 to a little above its highest value, so that they read against
    each other (vit_base's 1.6-3.6 GiB lay flat on a 0-80 GiB axis); a device memory far
    above that is named at the panel's top, off scale, under an arrow (:data:`OFF_SCALE`).

    Args:
        df: a ``collect_runs`` frame; ``peak_mem_gib`` in GiB, ``peak_mem_kind`` says whether
            it is allocated GPU memory or CPU resident memory (the y label follows it).
        path: where to save the figure (format from the suffix); not saved if ``None``.

    Returns:
        The figure, with one legend below the panels. Per line: the maximum over ranks and
        repeats per node count, with a capped min-max error bar over the point's repeats
        where it ran more than once (each repeat's maximum over ranks; a point that
        completed once is hollow: its spread over repeats is unmeasured, and the footer
        says how many runs the points hold,
        :func:`~vitfsdp.analysis.figures.panels.repeats_note`), and a thin uncapped bar
        just right of it down to the minimum over ranks where the records have it
        (``peak_mem_min_gib``); the plan's predicted peak as a dotted line just left of the
        measured points, its legend entry naming what it predicts (runs.csv
        ``pred_mem_metric``, :func:`_memory_mark_labels`: the peak reserved memory on a GPU,
        the resident memory on CPU); just right of them, the measured peak reserved
        (``peak_mem_reserved_gib``) as hollow thin diamonds where that is what the plan
        predicts, and further right the whole device's used memory as three-spoked marks where
        the records hold it (``device_mem_used_gib``, NVML or AMD SMI: the CUDA context and
        NCCL included), so the gap between the allocator's peak and what the device holds
        shows (:func:`_mark_step` sets how far beside); a point skipped as infeasible as a
        hollow diamond at its predicted memory; other runs that did not complete as ``x`` at
        the bottom. The device's memory (run.json ``device.memory_gib``, else
        ``cluster.device_memory_gib``) is a black dotted line. Where the runs record the model
        state a rank holds (``state_*_gib``, counted from its local shards: 1/N of the model
        under FULL_SHARD), each point is a bar in its line's colour, side by side with the
        panel's other lines at that node count: parameters, gradients and optimizer state
        stacked (solid, hatched, dotted) under the rest of the measured peak (hollow), the
        measured peak drawn at the bar's middle and the marks beside it on the bar; runs
        without those records draw no bar.
    """
    cells = [(model, group, rows) for model, panel in _panels(df)
             for group, rows in _memory_groups(panel)]
    fig, axes = _new_figure(len(cells))  # only the groups a model ran: no empty panel
    keys = _label_keys(df)
    looks = _looks(df, keys)
    extras = set()
    table = reference_table(df)
    published = table[table["drawn"] == "memory.png"] if len(table) else table
    for ax, (model, group, panel) in zip(axes, cells, strict=True):
        _draw_memory_panel(ax, panel, keys, looks, f"{_panel_title(model, panel)}: {group}",
                           extras, published[published["model"] == model],
                           scale=df[df["model"].astype("string").fillna("unknown") == model])
    _share_model_scale(axes, [model for model, _, _ in cells])
    per = "rank" if _memory_label(df) == MEMORY_LABELS["rss"] else "GPU"  # CPU runs: ranks
    _finish(fig, f"Peak memory per {per} against node count", df, path, extras,
            proxy_labels=_memory_published_labels(published) | _memory_mark_labels(df)
            | {"failed": FAILED_ON_MARKER},
            note="; ".join(filter(None, [repeats_note(df), memory_limit_note(df),
                                         peak_since_note(df)])))
    return fig


#: The shapes of memory.png's marks beside a measured point, by kind: none a line's
#: (:data:`~vitfsdp.analysis.figures.style.RESERVED_MARKER`), so a hollow one-run DDP circle
#: is not read as a reserved mark.
MARK_SHAPES = {"reserved": RESERVED_MARKER, "device_used": DEVICE_USED_MARKER}


def _hollow(marker: str, color: str) -> dict:
    """Scatter keywords of a hollow ``marker`` in ``color``: its outline where it is a
    filled shape, its strokes where it is drawn of lines alone (``"2"``: matplotlib colours
    those by the face colour, not the edge)."""
    if _mpl().MarkerStyle(marker).is_filled():
        return dict(marker=marker, facecolors="none", edgecolors=color)
    return dict(marker=marker, color=color, lw=1.0)


def _share_model_scale(axes: list, models: list[str]) -> None:
    """One y scale for a model's panels (``models``: each panel's), its panels' highest top,
    so FULL_SHARD's panel and the other strategies' read against each other (HYBRID_8GPU
    at one node of 8 GPUs is FULL_SHARD: the same bar height beside it); each model its
    own, set by its values, not by the device's memory (:data:`OFF_SCALE`)."""
    for model in dict.fromkeys(models):
        row = [ax for ax, m in zip(axes, models, strict=True) if m == model]
        top = max(ax.get_ylim()[1] for ax in row)
        for ax in row:
            ax.set_ylim(bottom=0, top=top)


def _draw_memory_panel(ax, panel: pd.DataFrame, keys: list[str],
                       looks: dict[str, tuple[str, str]], title: str, extras: set[str],
                       published: pd.DataFrame | None = None,
                       scale: pd.DataFrame | None = None) -> None:  # fmt: skip
    """One memory panel: measured, predicted, not completed, device memory, and the
    published memory of the panel's points (``published``: reference.csv's rows drawn in
    memory.png, :func:`_plot_published_memory`); the kinds of mark drawn are added to
    ``extras`` for the figure's legend. ``scale``: the runs whose values decide whether the
    device's memory is on the scale (the model's, whose panels share one), else ``panel``."""
    notes, marked, shown, barred = [], Counter(), set(), False
    lines = _lines(panel, keys)
    spans = _bar_spans(panel, [label for label, _ in lines])
    top = _memory_top(panel)
    for label, line in lines:
        span = spans.get(label)
        shift = 2 ** ((span[0] + span[1]) / 2) if span else 1.0  # the bar's middle
        beside = 2 ** _mark_step(panel, span)  # the marks beside the measured point
        done, color = _plot_measured(ax, line, keys, looks, label, "peak_mem_gib", "max",
                                     shift, extras)
        if not done.empty:
            if span:
                barred |= _plot_state_bars(ax, line, done, color, span, shown,
                                           MIN_BAR_PART * top)
            _plot_repeat_range(ax, line, "peak_mem_gib", color, extras, shift=shift,
                               windows=False)
            _plot_rank_range(ax, line, done, color, extras, shift * beside**0.5,
                             MIN_ERROR_BAR * top)
        if _plot_predicted(ax, line, "pred_peak_mem_gib", color, label, extras,
                           shift / beside, marker=looks[_look_label(line, keys)][1]):
            _plot_reserved(ax, line, color, extras, shift * beside)
        _plot_device_used(ax, line, color, extras, shift * beside**2)
        if published is not None and len(published):
            _plot_published_memory(ax, published[published["configuration"] == label], span,
                                   color, extras)
        # left of the point (the prediction's side, twice as far): an x at what a failed
        # repeat reached stood exactly under the marker of the point's completed runs
        notes += _mark_not_completed(ax, line, "peak_mem_gib", color, label, marked, extras,
                                     reached="peak_mem_reached_gib",
                                     at="pred_peak_mem_gib", shift=shift / beside**2,
                                     marker=looks[_look_label(line, keys)][1])
    ax.set_ylim(bottom=0, top=1.15 * ax.get_ylim()[1])  # room above the highest point
    extras |= shown
    remarks = []
    if barred and not shown & {kind for _, kind, *_ in STATE_PARTS}:
        remarks.append(TINY_STATE)  # under the panel: inside, it ran through the data
        extras.add("state_tiny")
    extras |= _plot_device_memory(ax, panel, _values_top(panel if scale is None else scale))
    _style_panel(ax, panel, title, _memory_label(panel), notes, remarks)


def _memory_top(panel: pd.DataFrame) -> float:
    """About the top of a memory panel's y axis (GiB): 1.15 x the largest value it draws
    (peak, predicted, reached, reserved or device used memory, and the device's memory
    where it is on the panel's scale: :data:`OFF_SCALE`); 0 when none is known."""
    top = _values_top(panel)
    device = panel["device_memory_gib"].max() if "device_memory_gib" in panel else None
    if pd.notna(device) and (not top or device <= OFF_SCALE * top):  # drawn on the scale
        top = max(top, float(device))
    return 1.15 * top


def _values_top(panel: pd.DataFrame) -> float:
    """The largest memory a panel's runs measured, predicted or reached (GiB), the device's
    own memory left out; 0 when none is known."""
    columns = ["peak_mem_gib", "pred_peak_mem_gib", "peak_mem_reached_gib",
               "peak_mem_reserved_gib", "device_mem_used_gib"]
    values = pd.concat([panel[c] for c in columns if c in panel]).dropna()
    return float(values.max()) if len(values) else 0.0


def _mark_step(panel: pd.DataFrame, span: tuple[float, float] | None) -> float:
    """How far (octaves of the log-2 node axis) a line's prediction stands left of its
    measured point, and its measured reserved memory right of it (its device used memory
    twice that): :data:`MARK_STEP` of the panel's width (its axis runs from the smallest
    node count over :data:`~vitfsdp.analysis.figures.panels.NODE_MARGIN` to the largest
    times it, as :func:`~vitfsdp.analysis.figures.panels._style_panel` sets it), at most a
    quarter of the line's bar (``span``: :func:`_bar_spans`), so the device used mark stays
    on it, or, without bars, at most :data:`~vitfsdp.analysis.figures.panels.MAX_LINE_SPREAD`
    of the closest two node counts' gap over both sides."""
    octaves = sorted({math.log2(n) for n in panel["nodes"].dropna() if n > 0})
    if not octaves:
        return 0.0
    step = MARK_STEP * (octaves[-1] - octaves[0] + 2 * math.log2(NODE_MARGIN))
    if span:
        return min(step, (span[1] - span[0]) / 4)
    gap = min((b - a for a, b in zip(octaves, octaves[1:], strict=False)), default=None)
    return step if gap is None else min(step, MAX_LINE_SPREAD * gap / 3)


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
        # JAX on a GPU records no gradient bytes: they are in the rest, which says so
        no_grads = pd.isna(parts["state_grads_gib"])
        if done.loc[n] > bottom:
            ax.bar(left, done.loc[n] - bottom, width, bottom, align="edge", facecolor="white",
                   edgecolor=color, lw=0.6, ls="--" if no_grads else "-",
                   label="_state_rest_no_grads" if no_grads else "_state_rest")
            extras.add("state_rest_no_grads" if no_grads else "state_rest")
    return not state.empty


def peak_since_note(df: pd.DataFrame) -> str:
    """The footer's words where the figure draws the peaks of JAX runs on a GPU beside
    PyTorch's: JAX's counts from the process's start (XLA's peak is never reset), PyTorch's
    from each window's (:data:`~vitfsdp.analysis.tables.PEAK_SINCE`); ``""`` otherwise."""
    done = df[(df["status"] == "completed") & df["peak_mem_gib"].notna()]
    since = set(peak_since(done)) if len(done) else set()
    if len(since) < 2:
        return ""
    return ("JAX peak since process start (XLA's, never reset); PyTorch peak per window "
            "(reset every window): not equals (points.csv peak_mem_since)")


def _memory_groups(panel: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(group, rows)`` of a model's runs: FULL_SHARD, then the other strategies."""
    sharding = panel["sharding_strategy"].fillna(panel["strategy"])
    full = sharding == "FULL_SHARD"
    groups = [(MEMORY_GROUPS[0], panel[full]), (MEMORY_GROUPS[1], panel[~full])]
    return [(g, rows) for g, rows in groups if len(rows)]


def _plot_rank_range(ax, line: pd.DataFrame, done: pd.Series, color: str,
                     extras: set[str], shift: float = 1.0,
                     min_length: float = 0.0) -> None:  # fmt: skip
    """A thin uncapped bar from the minimum over ranks (``peak_mem_min_gib``) up to the
    plotted maximum, where the records hold the minimum and it is more than ``min_length``
    (GiB) below the maximum (a shorter bar hides under the marker: not drawn, not in the
    legend), at ``shift`` times the node count: just right of the point, whose capped bar
    is its spread over repeats (:func:`_draw_memory_panel`)."""
    ok = _completed(line, "peak_mem_min_gib")
    low = ok.groupby(ok["nodes"].astype("int64"))["peak_mem_min_gib"].min()
    low = low[low.index.isin(done.index)]
    low = low[done.loc[low.index] - low > min_length]
    if len(low):
        high = done.loc[low.index]
        ax.errorbar(low.index * shift, high, yerr=[high - low, 0 * high], fmt="none",
                    ecolor=color, **WINDOWS_BAR, alpha=0.8, zorder=3)
        extras.add("ranks")


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


def _plot_reserved(ax, line: pd.DataFrame, color: str, extras: set[str],
                   shift: float = 1.0) -> None:  # fmt: skip
    """Measured peak reserved memory as hollow thin diamonds (:data:`MARK_SHAPES`), where
    the plan predicts reserved memory (``pred_mem_metric``) and the figure shows allocated
    memory (at ``shift`` times the node count, as :func:`_plot_measured`)."""
    metric = line["pred_mem_metric"].dropna()
    if metric.empty or metric.iloc[0] != "peak_mem_reserved_gib":
        return
    if (line["peak_mem_kind"].dropna() != "allocated").any():
        return
    _plot_hollow_maxima(ax, line, "peak_mem_reserved_gib", MARK_SHAPES["reserved"],
                        "reserved", color, extras, shift)


def _plot_device_used(ax, line: pd.DataFrame, color: str, extras: set[str],
                      shift: float = 1.0) -> None:  # fmt: skip
    """The whole device's used memory (runs.csv ``device_mem_used_gib``: NVML, or AMD SMI,
    on a GPU, the maximum over ranks and repeats; GiB) as three-spoked marks
    (:data:`MARK_SHAPES`) in the line's colour, at ``shift`` times the node count (right of
    the measured point and its reserved diamond): what the device holds beside the
    allocator's peak, the CUDA context, NCCL's buffers and any other process included.
    Nothing where the records hold none (CPU
    runs, a JAX run on ROCm, nvidia-ml-py missing; older records without the column)."""
    if "device_mem_used_gib" in line:
        _plot_hollow_maxima(ax, line, "device_mem_used_gib", MARK_SHAPES["device_used"],
                            "device_used", color, extras, shift)


def _plot_hollow_maxima(ax, line: pd.DataFrame, value: str, marker: str, kind: str,
                        color: str, extras: set[str], shift: float) -> None:  # fmt: skip
    """The line's ``value`` (GiB), its maximum over the completed runs per node count, as
    hollow ``marker`` s in ``color`` at ``shift`` times the node count, labelled ``_<kind>``
    (``device_used`` as ``_device used``) and ``kind`` added to ``extras``; nothing where no
    completed run holds it."""
    points = _completed_points(line, value, "max")
    if len(points):
        ax.scatter(points.index * shift, points.values, **_hollow(marker, color), s=30,
                   zorder=3, label="_" + kind.replace("_", " "))
        extras.add(kind)


def _memory_mark_labels(df: pd.DataFrame) -> dict[str, str]:
    """The legend texts of the marks whose meaning the records decide (for
    :func:`~vitfsdp.analysis.figures.finish._finish`'s ``proxy_labels``): the prediction by
    what it predicts (``pred_mem_metric`` of the runs with a predicted peak,
    :data:`PREDICTED_LABELS`: ``predicted peak reserved (plan)`` on a GPU, ``predicted peak
    resident memory (plan)`` on CPU, each named with its devices where the figure holds
    both; an unknown metric by its column name) and, where a JAX run on a GPU is among
    them, its reserved memory as XLA's pool (:data:`JAX_RESERVED`), in the prediction's
    label and the reserved marks'. Empty where no run records its metric (the proxy's own
    label, ``predicted (plan)``, stands)."""
    known = df.loc[df["pred_peak_mem_gib"].notna() & df["nodes"].notna()]
    metric = known["pred_mem_metric"].dropna().astype(str)
    if metric.empty:
        return {}
    framework = known.get("framework", pd.Series(None, index=known.index, dtype=object))
    jax_gpu = (framework == "jax") & (known["device_type"] != "cpu")
    jax = bool(jax_gpu.any())
    # records of the older rule compared a JAX run's prediction with its pool: said so
    pool = ({"peak_mem_reserved_gib": JAX_RESERVED}
            if (jax_gpu & (known["pred_mem_metric"] == "peak_mem_reserved_gib")).any() else {})
    names = sorted(set(metric), key=lambda m: (m not in PREDICTED_LABELS, m))
    if len(names) == 1:
        (name,) = names
        plan = "; ".join(["plan", *([pool[name]] if name in pool else [])])
        labels = {"predicted": f"predicted {PREDICTED_LABELS.get(name, name)} ({plan})"}
    else:  # CPU and GPU runs in one figure: each measure with its devices
        devices = known["device_type"].map(lambda t: "CPU" if t == "cpu" else "GPU")
        labels = {"predicted": "predicted (plan): " + ", ".join(
            PREDICTED_LABELS.get(name, name) + (f" ({pool[name]})" if name in pool else "")
            + " on " + "/".join(sorted(set(devices[known["pred_mem_metric"] == name])))
            for name in names)}
    if jax:
        labels["reserved"] = f"measured peak reserved ({JAX_RESERVED})"
    return labels


#: How far above a model's highest value (times) the device's memory may stand and still be
#: drawn as a line on its panels' scale (with XLA's pool); higher, both are named at the
#: top, off scale, with an arrow: a 0-80 GiB axis flattened vit_base's 1.6-3.6 GiB.
OFF_SCALE = 4.0


def _plot_device_memory(ax, panel: pd.DataFrame, top: float) -> set[str]:
    """The device memory as a dotted horizontal line, once per distinct known size, and
    where a GPU run could use less of it (runs.csv ``memory_limit_gib``: a JAX run's XLA
    pool) that limit as a dash-dotted line; where the device's memory is more than
    :data:`OFF_SCALE` times ``top`` (the highest value of the panel's model, GiB), both are
    named instead in the panel's top right corner, under an arrow up
    (:func:`_name_off_scale`). Returns the kinds drawn: ``device`` for a line,
    ``device_off_scale`` for a name."""
    kinds, off = set(), []
    limit = OFF_SCALE * top if top > 0 else float("inf")
    if panel["device_memory_gib"].notna().any():  # the pool goes with its device
        limit = limit if panel["device_memory_gib"].max() > limit else float("inf")
    devices = panel.loc[panel["device_memory_gib"].notna(), ["device_memory_gib", "device_name"]]
    for gib, rows in devices.groupby("device_memory_gib"):
        names = rows["device_name"].dropna().unique()
        name = f"{_device_unit(names[0])} " if len(names) == 1 else ""
        if gib > limit:
            off.append(f"{name}memory {gib:.3g} GiB")
            continue
        ax.axhline(gib, ls=":", color=DEVICE_COLOR, lw=1, label=f"{name}memory ({gib:.3g} GiB)")
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.08 * gib))
        kinds.add("device")
    jax = (panel["framework"] == "jax") if "framework" in panel else panel["device_type"].isna()
    pools = panel.loc[jax & (panel["device_type"] != "cpu") & panel["memory_limit_gib"].notna(),
                      ["memory_limit_gib", "device_memory_gib"]] \
        if "memory_limit_gib" in panel else devices.iloc[0:0]
    for (pool, gib), _ in pools.groupby(["memory_limit_gib", "device_memory_gib"], dropna=False):
        share = f", {pool / gib:.0%} of the memory" if gib == gib and gib > pool else ""
        if pool > limit:
            off.append(f"XLA's pool {pool:.3g} GiB")
            continue
        ax.axhline(pool, ls="-.", color=DEVICE_COLOR, lw=0.8,
                   label=f"XLA's pool{share} ({pool:.3g} GiB)")
    if off:
        _name_off_scale(ax, off)
        kinds.add("device_off_scale")
    return kinds


#: Inches of a panel's width the off-scale names leave free: the y axis's label and tick
#: labels left of the axes, the arrow right of the names.
OFF_SCALE_MARGIN_IN = 1.1


def _name_off_scale(ax, names: list[str]) -> None:
    """``names`` (the device memory and pool above the panel's scale) in the panel's top
    right corner, under an arrow up to its top edge, over a white box, each wrapped to the
    axes' width (:func:`_wrap_name`: a long device name ran over the y axis's labels and
    past the figure's edge); the axis raised so that no value is under them."""
    lines = [part for name in names for part in _wrap_name(
        name, _chars_per_line(PANEL_WIDTH_IN - OFF_SCALE_MARGIN_IN, NOTE_FONTSIZE))]
    ax.set_ylim(top=ax.get_ylim()[1] * (1.05 + 0.1 * (len(lines) + 1)))
    ax.annotate("", xy=(0.985, 1.0), xytext=(0.985, 0.80), xycoords="axes fraction",
                arrowprops=dict(arrowstyle="-|>", color=DEVICE_COLOR, lw=0.8))
    ax.text(0.965, 0.97, "off scale, above:\n" + "\n".join(lines), transform=ax.transAxes,
            ha="right", va="top", fontsize=NOTE_FONTSIZE, color=DEVICE_COLOR, zorder=6,
            bbox=dict(facecolor="white", edgecolor="none", pad=0.5, alpha=0.85))


def _wrap_name(name: str, width: int) -> list[str]:
    """``name`` (``... memory 79.2 GiB``) in lines of about ``width`` characters, its size
    and unit kept on one line: ``NVIDIA RTX PRO 6000 Blackwell Server`` / ``Edition memory
    79.2 GiB``."""
    head, size, unit = name.rsplit(" ", 2)
    lines = textwrap.wrap(head, width, break_on_hyphens=False) or [""]
    if len(lines[-1]) + len(size) + len(unit) + 2 <= width:
        return [*lines[:-1], f"{lines[-1]} {size} {unit}".strip()]
    return [*lines, f"{size} {unit}"]


def memory_limit_note(df: pd.DataFrame) -> str:
    """The footer's words on the limit CPU ranks ran under (runs.csv ``memory_limit_gib``:
    ``train.memory_limit_gib``), e.g. ``CPU ranks ran under train.memory_limit_gib=0.4 GiB
    per rank: a cap on the growth of each rank's data segment after its start
    (RLIMIT_DATA), not on the resident memory drawn, so no line``; ``""`` where no CPU run
    had one. A GPU's limit is its line (:func:`_plot_device_memory`)."""
    if "memory_limit_gib" not in df:
        return ""
    limits = df.loc[(df["device_type"] == "cpu") & df["memory_limit_gib"].notna(),
                    "memory_limit_gib"]
    if limits.empty:
        return ""
    values = "/".join(f"{v:g}" for v in sorted(limits.unique()))
    return (f"CPU ranks ran under train.memory_limit_gib={values} GiB per rank: a cap on the "
            "growth of each rank's data segment after its start (RLIMIT_DATA), not on the "
            "resident memory drawn, so no line")


def _device_unit(name: str) -> str:
    """What one rank's device is, by the name torch reports: an MI250X (or MI250) shows as
    one package of two GCDs, each its own device of 64 GiB (of the package's 128; AMD's data
    sheet), so its GCD is named: ``AMD Instinct MI250X GCD``; other names as they are."""
    return f"{name} GCD" if "MI250" in name and "GCD" not in name else name


def _memory_label(panel: pd.DataFrame) -> str:
    """Which memory the panel shows: allocated per GPU, resident per rank (CPU), or both."""
    kinds = set(panel["peak_mem_kind"].dropna())
    if not kinds:
        kinds = {"rss" if set(panel["device_type"].dropna()) == {"cpu"} else "allocated"}
    if len(kinds) == 1:
        return MEMORY_LABELS[kinds.pop()]
    return "peak memory (GiB): allocated\nper GPU or resident per rank"
