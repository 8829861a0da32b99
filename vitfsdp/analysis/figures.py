"""Figures of a weak-scaling study: images/s and peak memory per GPU against node count.

Both figures take a :func:`vitfsdp.analysis.collect.collect_runs` frame (every run, whatever
its status) and draw one line per strategy (split by any varying config, see
:func:`vitfsdp.analysis.collect.line_columns`) and one panel per model. When PyTorch and JAX
runs are both present, the framework is the line style (:data:`FRAMEWORK_STYLES`) and the
colour is the rest of the line's identity, so each strategy has one colour in both. Runs
that did not complete are never dropped silently: they are drawn as an ``x`` at the bottom
of the panel in their line's colour and listed in a note under the axes.

Figures are built on the Agg canvas without ``pyplot``, so no global state is touched and no
figure is left open; the functions return the :class:`~matplotlib.figure.Figure`.
"""

from __future__ import annotations

import logging
import os
import textwrap
from collections import Counter
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from vitfsdp.analysis.collect import TORCH_ONLY_COLUMNS, line_columns

log = logging.getLogger(__name__)

DPI = 150
#: Height (axes fraction) at which runs that did not complete are marked, and the step up
#: between marks of different lines at the same node count.
NOT_COMPLETED_Y = 0.04
NOT_COMPLETED_STEP = 0.05
PANEL_SIZE = (5.5, 4.2)  # inches per panel: width, height
#: Memory y labels by ``peak_mem_kind``.
MEMORY_LABELS = {
    "allocated": "peak allocated per GPU (GiB)",
    "rss": "peak resident memory per rank (GiB)",
}
#: Line style and marker per framework when both are plotted; one framework: solid, circles.
FRAMEWORK_STYLES = {"torch": ("-", "o"), "jax": ("-.", "s")}
DEFAULT_STYLE = ("-", "o")
#: Config shown in the figure title when every run shares it.
CONTEXT_COLUMNS = ("local_batch_size", "precision", "data", "device_name")


def plot_weak_scaling(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure:
    """Global images/s against nodes, with a dashed ideal line per strategy.

    Args:
        df: a ``collect_runs`` frame; ``ips`` is global images/s.
        path: where to save a 150 dpi PNG; not saved if ``None``.

    Returns:
        The figure: one panel per model; per line, a solid line with markers through the
        completed points (median ips per node count) and a dashed ideal line in the same
        colour, linear from the line's smallest completed node count; log-2 x axis, log y.
    """
    fig, axes = _new_figure(df)
    keys = _label_keys(df)
    colors = _colors(df, keys)
    for ax, (model, panel) in zip(axes, _panels(df), strict=True):
        notes, marked = [], Counter()
        for label, line in _lines(panel, keys):
            done = _completed_points(line, "ips", "median")
            color = colors[_color_label(line, keys)]
            if not done.empty:
                ls, marker = _style(line, keys)
                ax.plot(done.index, done.values, ls=ls, marker=marker, color=color, label=label)
                _plot_ideal(ax, done, line["nodes"], color, label)
            notes += _mark_not_completed(ax, line, "ips", color, label, marked)
        _log_y_axis(ax)
        if notes:
            _make_room_below(ax)
        _style_panel(ax, panel, model, "throughput (images/s, global)", notes)
        _legend(ax, notes, ideal=True)
    _finish(fig, "Weak scaling: throughput against node count", df, path)
    return fig


def plot_memory(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure:
    """Peak memory per GPU (or per rank on CPU) against nodes, a line per strategy.

    Args:
        df: a ``collect_runs`` frame; ``peak_mem_gib`` in GiB, ``peak_mem_kind`` says whether
            it is allocated GPU memory or CPU resident memory (the y label follows it).
        path: where to save a 150 dpi PNG; not saved if ``None``.

    Returns:
        The figure: one panel per model; the maximum over runs per node count; the device's
        memory as a dotted horizontal line where ``device_memory_gib`` is known.
    """
    fig, axes = _new_figure(df)
    keys = _label_keys(df)
    colors = _colors(df, keys)
    for ax, (model, panel) in zip(axes, _panels(df), strict=True):
        notes, marked = [], Counter()
        for label, line in _lines(panel, keys):
            done = _completed_points(line, "peak_mem_gib", "max")
            color = colors[_color_label(line, keys)]
            if not done.empty:
                ls, marker = _style(line, keys)
                ax.plot(done.index, done.values, ls=ls, marker=marker, color=color, label=label)
            notes += _mark_not_completed(ax, line, "peak_mem_gib", color, label, marked)
        ax.set_ylim(bottom=0, top=1.15 * ax.get_ylim()[1])  # room above the highest point
        _plot_device_memory(ax, panel)
        _style_panel(ax, panel, model, _memory_label(panel), notes)
        _legend(ax, notes, ideal=False)
    _finish(fig, "Peak memory against node count", df, path)
    return fig


def write_figures(df: pd.DataFrame, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write ``weak_scaling.png`` and ``memory.png`` into ``out_dir`` (created if missing).

    Returns:
        The paths written, by name (``"weak_scaling"``, ``"memory"``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"weak_scaling": out_dir / "weak_scaling.png", "memory": out_dir / "memory.png"}
    plot_weak_scaling(df, paths["weak_scaling"])
    plot_memory(df, paths["memory"])
    return paths


def _new_figure(df: pd.DataFrame) -> tuple[Figure, list]:
    """A figure on the Agg canvas with one panel per model."""
    num_panels = max(1, len(_panels(df)))
    fig = Figure(figsize=(PANEL_SIZE[0] * num_panels, PANEL_SIZE[1]), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(1, num_panels, squeeze=False)[0])


def _panels(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(model, rows)`` per model, in sorted order; a missing model name reads ``unknown``."""
    models = df["model"].astype("string").fillna("unknown")
    return [(str(m), panel) for m, panel in df.groupby(models, sort=True)]


def _lines(panel: pd.DataFrame, keys: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(label, rows)`` per line of one panel, sorted by label."""
    labels = panel.apply(lambda row: _line_label(row, keys), axis=1) if len(panel) else []
    return sorted((str(k), rows) for k, rows in panel.groupby(pd.Series(labels, panel.index)))


def _line_label(row: pd.Series, keys: list[str]) -> str:
    """The strategy, then each varying config value (``name=value`` unless it is a word of
    an undotted column: ``bf16``, but ``kernels.adamw=fused``); a null value (a setting that
    does not apply to the run) is left out."""
    parts = [str(row["strategy"]) if pd.notna(row["strategy"]) else "unknown strategy"]
    for key in keys[2:]:
        value = row[key]
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            continue
        bare = isinstance(value, str) and "." not in key
        parts.append(value if bare else f"{key}={value}")
    return " ".join(parts)


def _label_keys(df: pd.DataFrame) -> list[str]:
    """The line columns that label lines: :func:`line_columns` without a PyTorch-only
    setting that splits no strategy's lines within a framework (it varies only between
    strategies or frameworks: DDP and JAX runs record it as null)."""
    keys = line_columns(df)
    within = df.groupby(["model", "strategy", "framework"], dropna=False)
    return [k for k in keys if k not in TORCH_ONLY_COLUMNS
            or (within[k].nunique(dropna=False) > 1).any()]


def _color_keys(keys: list[str]) -> list[str]:
    """The label columns that pick a colour: all but ``framework`` (the line style)."""
    return [k for k in keys if k != "framework"]


def _color_label(line: pd.DataFrame, keys: list[str]) -> str:
    """The colour key of a line's rows (see :func:`_color_keys`)."""
    return _line_label(line.iloc[0], _color_keys(keys))


def _style(line: pd.DataFrame, keys: list[str]) -> tuple[str, str]:
    """(line style, marker) of a line: by framework when frameworks vary, else solid/circle."""
    if "framework" not in keys:
        return DEFAULT_STYLE
    return FRAMEWORK_STYLES.get(line["framework"].iloc[0], DEFAULT_STYLE)


def _colors(df: pd.DataFrame, keys: list[str]) -> dict[str, str]:
    """One colour per colour key, the same in every panel and both figures."""
    labels = sorted({_color_label(line, keys)
                     for _, panel in _panels(df) for _, line in _lines(panel, keys)})
    return {label: f"C{i % 10}" for i, label in enumerate(labels)}


def _completed_points(line: pd.DataFrame, value: str, how: str) -> pd.Series:
    """``value`` of the completed runs of a line per node count (``how``: median or max)."""
    done = line[(line["status"] == "completed") & line[value].notna() & line["nodes"].notna()]
    points = done.groupby(done["nodes"].astype("int64"))[value].agg(how)
    return points.sort_index()


def _plot_ideal(ax, done: pd.Series, nodes: pd.Series, color: str, label: str) -> None:
    """Dashed linear scaling from the smallest completed node count over the line's nodes."""
    n0 = done.index.min()
    xs = sorted({int(n) for n in nodes.dropna() if n >= n0})
    ideal = [done.loc[n0] * n / n0 for n in xs]
    ax.plot(xs, ideal, "--", color=color, alpha=0.7, label=f"_ideal {label}")


def _mark_not_completed(
    ax, line: pd.DataFrame, value: str, color: str, label: str, marked: Counter
) -> list[str]:
    """Draw an ``x`` at the panel's bottom for each run without ``value``; return note items.

    ``marked`` counts the marks already drawn per node count in this panel, so marks of
    different lines at the same node count stack upwards instead of hiding each other.
    """
    missing = line[(line["status"] != "completed") | line[value].isna()]
    xs = [float(n) for n in missing["nodes"].dropna()]
    if xs:
        ys = [NOT_COMPLETED_Y + NOT_COMPLETED_STEP * marked[x] for x in xs]
        marked.update(xs)
        ax.scatter(xs, ys, marker="x", color=color, transform=ax.get_xaxis_transform(),
                   clip_on=False, zorder=3)  # fmt: skip
    return [_not_completed_item(row, label, value) for _, row in missing.iterrows()]


def _not_completed_item(row: pd.Series, label: str, value: str) -> str:
    """``FULL_SHARD nodes=8 (oom)``; a completed run lacking the value says so."""
    nodes = "?" if pd.isna(row["nodes"]) else int(row["nodes"])
    why = row["status"] if row["status"] != "completed" else f"completed, no {value}"
    return f"{label} nodes={nodes} ({why})"


def _log_y_axis(ax) -> None:
    """Log y with plain-number ticks at 1, 2, 3 and 5 per decade (readable over narrow spans)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _make_room_below(ax) -> None:
    """Lower a log y axis by a tenth of its span so the ``x`` marks clear the lowest point."""
    low, high = ax.get_ylim()
    if low > 0 and high > low:
        ax.set_ylim(low / (high / low) ** 0.1, high)


def _plot_device_memory(ax, panel: pd.DataFrame) -> None:
    """The device memory as a dotted horizontal line, once per distinct known size."""
    devices = panel.dropna(subset=["device_memory_gib"])
    for gib, rows in devices.groupby("device_memory_gib"):
        names = rows["device_name"].dropna().unique()
        name = f"{names[0]} " if len(names) == 1 else ""
        ax.axhline(gib, ls=":", color="black", lw=1.2, label=f"{name}memory ({gib:g} GiB)")
    if len(devices):
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.08 * devices["device_memory_gib"].max()))


def _memory_label(panel: pd.DataFrame) -> str:
    """Which memory the panel shows: allocated per GPU, resident per rank (CPU), or both."""
    kinds = set(panel["peak_mem_kind"].dropna())
    if not kinds:
        kinds = {"rss" if set(panel["device_type"].dropna()) == {"cpu"} else "allocated"}
    if len(kinds) == 1:
        return MEMORY_LABELS[kinds.pop()]
    return "peak memory per GPU (allocated) or per rank (resident) (GiB)"


def _style_panel(ax, panel: pd.DataFrame, model: str, ylabel: str, notes: list[str]) -> None:
    """Log-2 node axis with node counts as ticks, labels, title and the not-completed note."""
    nodes = sorted({int(n) for n in panel["nodes"].dropna()})
    if nodes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(nodes, labels=[str(n) for n in nodes])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(nodes[0] / 1.4, nodes[-1] * 1.4)
    ax.set_xlabel("nodes")
    ax.set_ylabel(ylabel)
    ax.set_title(_panel_title(model, panel))
    ax.grid(True, which="major", alpha=0.3)
    if notes:
        text = textwrap.fill("not completed: " + "; ".join(notes), width=90)
        ax.annotate(text, xy=(0, 0), xycoords="axes fraction", xytext=(0, -36),
                    textcoords="offset points", va="top", ha="left", fontsize=7)  # fmt: skip


def _panel_title(model: str, panel: pd.DataFrame) -> str:
    """The model name with its parameter count in millions when known."""
    params = panel["num_params"].dropna()
    return f"{model} ({params.iloc[0] / 1e6:,.1f}M params)" if len(params) else model


def _legend(ax, notes: list[str], ideal: bool) -> None:
    """Legend of the lines, plus proxies for the ideal style and the not-completed marker."""
    handles, _ = ax.get_legend_handles_labels()
    if ideal and handles:
        handles.append(Line2D([], [], color="0.4", ls="--", label="ideal (linear)"))
    if notes:
        handles.append(Line2D([], [], color="0.4", marker="x", ls="none", label="not completed"))
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="best")


def _context(df: pd.DataFrame) -> str:
    """Config every run shares (local batch, precision, data, device), for the title."""
    parts = []
    for col in CONTEXT_COLUMNS:
        values = df[col].dropna().unique()
        if len(values) == 1:
            value = values[0]
            parts.append(f"local batch {value}/GPU" if col == "local_batch_size" else str(value))
    return ", ".join(parts)


def _finish(fig: Figure, title: str, df: pd.DataFrame, path: str | os.PathLike | None) -> None:
    """Title, tight layout, and a 150 dpi PNG at ``path`` when given."""
    context = _context(df)
    fig.suptitle(f"{title}\n{context}" if context else title, fontsize=11)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
        log.info("wrote %s", path)
