"""The loss figure: training loss against step, a line per point, its node count at its end."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.finish import _finish
from vitfsdp.analysis.figures.panels import _new_figure, _panel_title, _panels, _set_title
from vitfsdp.analysis.figures.style import (
    NOTE_FONTSIZE,
    PANEL_WIDTH_IN,
    PAPER_RC,
    Y_LABELS_IN,
    _looks,
    _mpl,
    _paper_style,
)
from vitfsdp.analysis.lines import label_columns as _label_keys
from vitfsdp.analysis.lines import line_labels
from vitfsdp.analysis.rows import loss_curves

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D


@_paper_style
def plot_loss(df: pd.DataFrame, path: str | os.PathLike | None = None,
              curves: pd.DataFrame | None = None) -> Figure | None:  # fmt: skip
    """Training loss against step, a line per point, so a reader sees every configuration
    train (warm-up windows included; failed runs up to where they ended).

    One panel per model; per point (a line's node count) the median over repeats of each
    window's mean loss at the window's last step, in the strategy's colour and marker (as in
    the other figures), lighter for fewer nodes (:func:`node_shades`), and the framework's
    line style where both ran, its node count written at its end (``n=4``), placed clear of
    the others and of the end markers. Strategies that train alike (the same
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
    info = df.assign(_label=line_labels(df, keys), _look=line_labels(df, keys))
    columns = ["run_dir", "model", "num_params", "num_classes", "nodes", "framework", "_label",
               "_look", "status"]
    rows = curves.merge(info[[c for c in columns if c in info]], on="run_dir")
    panels = _panels(rows)
    fig, axes = _new_figure(len(panels))
    extras: set[str] = set()
    ended = []
    for ax, (model, panel) in zip(axes, panels, strict=True):
        _draw_loss_panel(ax, panel, looks, "framework" in keys, extras)
        ended += [(f"{model} " if len(panels) > 1 else "") + item
                  for item in _mark_ended(ax, panel, extras)]
        _set_title(ax, _panel_title(model, df[df["model"].astype("string") == model]))
    most = rows["nodes"].dropna().max() if rows["nodes"].notna().any() else None
    ends = (f"; n={int(most)} at its end: {int(most)} node{'s' if most != 1 else ''}"
            if most is not None else "")
    _finish(fig, f"Training loss against step (a line per point{ends})", df, path, extras,
            _loss_handles(looks, rows, "framework" in keys), note=ended_note(ended))
    return fig


#: Most points with runs that ended before completing the footer names; the rest counted.
MAX_ENDED_ITEMS = 3


def _mark_ended(ax, panel: pd.DataFrame, extras: set[str]) -> list[str]:
    """A black ``x`` at the last step of each run of ``panel`` (loss curves merged with their
    runs: ``status``) that did not complete, at its loss there (one mark a place, over the
    line's end marker), ``failed`` added to ``extras`` for the legend's "not completed";
    returns the footer's item per point (line label and node count), e.g. ``DDP at 8
    nodes: 3 of 3 runs oom at step 30``."""
    if "status" not in panel:
        return []
    ends = panel.sort_values("step").groupby("run_dir", sort=False).tail(1)
    bad = ends[ends["status"].fillna("unknown") != "completed"]
    if bad.empty:
        return []
    ax.scatter(bad["step"], bad["loss"], marker="x", color="black", s=30, lw=1.2, zorder=5,
               label="_not completed")
    extras.add("failed")
    items = []
    for (label, nodes), runs in bad.groupby(["_label", "nodes"], dropna=False, sort=True):
        how = ", ".join(f"{count} {status}" for status, count
                        in runs["status"].fillna("unknown").value_counts().items())
        steps = "/".join(str(int(step)) for step in sorted(set(runs["step"])))
        where = f" at {int(nodes)} node{'s' if nodes != 1 else ''}" if pd.notna(nodes) else ""
        same = ends["nodes"].isna() if pd.isna(nodes) else ends["nodes"] == nodes
        total = int(((ends["_label"] == label) & same).sum())
        items.append(f"{label}{where}: {how} of {total} runs, "
                     f"last step {steps}")
    return items


def ended_note(items: list[str]) -> str:
    """The footer's sentence on the loss lines cut short (:func:`_mark_ended`'s items), e.g.
    ``not completed (x at the run's last step): DDP at 8 nodes: 3 oom of 3 runs, last step
    30.``; at most :data:`MAX_ENDED_ITEMS`, the rest counted (failures.csv); ``""`` for
    none."""
    if not items:
        return ""
    more = len(items) - MAX_ENDED_ITEMS
    tail = f"; and {more} more points (failures.csv)" if more > 0 else ""
    return ("not completed (x at the run's last step): " + "; ".join(items[:MAX_ENDED_ITEMS])
            + tail + ".")


def _draw_loss_panel(ax, panel: pd.DataFrame, looks: dict[str, tuple[str, str]],
                     by_framework: bool, extras: set[str]) -> None:  # fmt: skip
    """The loss lines of one model: per line label and node count, the median loss per step
    over repeats, in alternating dashes (:func:`_loss_dashes`) so that lines which coincide
    (strategies training alike) all show; JAX's markers hollow where both frameworks ran;
    ``n=<nodes>`` at each line's end; the chance level (:func:`_plot_chance`)."""
    labels = sorted(set(panel["_label"]))
    shades = node_shades(panel["nodes"])
    ends = set()
    points = panel.groupby(["_label", "nodes"], dropna=False, sort=True)
    firsts = points[["_look", "framework"]].first(skipna=False)  # its first run's
    medians = panel.groupby(["_label", "nodes", "step"], dropna=False, sort=True)["loss"].median()
    for (label, nodes), loss in medians.groupby(level=[0, 1], dropna=False, sort=True):
        look, framework = firsts.loc[(label, nodes)]
        color, marker = looks.get(look, ("0.5", "o"))
        color = _lighter(color, shades.get(nodes, 0.0))
        i = labels.index(label)
        hollow = by_framework and framework == "jax"
        loss = loss.droplevel([0, 1])
        size = 3 + 2.5 * (len(labels) - 1 - i) / max(1, len(labels) - 1)
        ax.plot(loss.index, loss.values, marker=marker, color=color, lw=1.4, markersize=size,
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


#: How far toward white the line of a panel's fewest nodes is drawn (0: its strategy's
#: colour, 1: white); the most nodes are drawn in the strategy's own colour, node counts
#: between evenly between the two (:func:`node_shades`).
LIGHTEST = 0.6


def node_shades(nodes: pd.Series) -> dict:
    """How much lighter each node count of ``nodes`` is drawn: :data:`LIGHTEST` for the
    fewest, 0 for the most, evenly by rank between; one node count: 0. So a loss panel
    tells its node counts apart by shade within a strategy's colour (lighter for fewer
    nodes, README "Analysis and report"), and each line's end also says ``n=<nodes>``."""
    counts = sorted(n for n in set(nodes.dropna()))
    if len(counts) < 2:
        return {n: 0.0 for n in counts}
    return {n: LIGHTEST * (len(counts) - 1 - i) / (len(counts) - 1) for i, n in enumerate(counts)}


def _lighter(color: str, amount: float) -> tuple[float, float, float]:
    """``color`` mixed with white by ``amount`` (0: unchanged, 1: white), as RGB."""
    red, green, blue = _mpl().matplotlib.colors.to_rgb(color)
    return tuple(c + (1.0 - c) * amount for c in (red, green, blue))


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
#: :data:`NOTE_FONTSIZE` text on a panel :data:`~vitfsdp.analysis.figures.style.AXES_HEIGHT_IN`
#: high).
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


#: Space between a line's end and its ``n=`` label (axes fraction): the largest end
#: marker's radius (5.5 pt markers, :func:`_draw_loss_panel`) and 2 pt of air, on the
#: plotting area of a panel (about 2.7 in wide), so a label never touches a marker.
LABEL_PAD = (5.5 / 2 + 2.0) / 72 / (PANEL_WIDTH_IN - Y_LABELS_IN)


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
