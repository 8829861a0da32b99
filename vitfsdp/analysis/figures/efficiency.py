"""The efficiency figure: weak-scaling efficiency against nodes on a linear axis, a line per
configuration, where the weak-scaling figure's log axis of images/s hides differences of a
few percent."""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.finish import FAILED_IN_STRIP, _finish
from vitfsdp.analysis.figures.panels import (
    REPEATS_BAR,
    WINDOW_ON_MARKER_Z,
    WINDOWS_BAR,
    _error_bars,
    _lines,
    _make_room_below,
    _mark_contended,
    _mark_host_bound,
    _mark_not_completed,
    _mark_pooled,
    _new_figure,
    _panel_title,
    _panels,
    _plot_measured,
    _style_panel,
    contended_note,
    line_shifts,
    pooled_note,
)
from vitfsdp.analysis.figures.style import _look_label, _looks, _paper_style
from vitfsdp.analysis.lines import label_columns as _label_keys
from vitfsdp.analysis.lines import line_columns
from vitfsdp.analysis.tables import points_table

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure

#: The point columns the figure draws, by the run column each is copied into (one value for
#: every run of a point).
POINT_VALUES = {"eff": "scaling_efficiency", "eff_low": "efficiency_min",
                "eff_high": "efficiency_max", "eff_runs": "num_repeats"}


@_paper_style
def plot_efficiency(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """Weak-scaling efficiency against nodes: each point's images/s over the ideal from its
    line's smallest completed node count (``points.csv`` ``scaling_efficiency``; 1 = ideal,
    dashed), on a linear axis from a little below the lowest value or bound drawn (the
    label says where, where that is not 0: :func:`axis_bottom`), the ideal always shown.

    Args:
        df: a ``collect_runs`` frame.
        path: where to save the figure (format from the suffix); not saved if ``None``.

    Returns:
        The figure, or ``None`` where no line completed two node counts or more (no point
        completed, or each line ran at one node count: every efficiency would be its own
        baseline's 1, a figure that says nothing). One panel per model, a line per
        configuration in the weak-scaling figure's colours and markers; each point's bounds
        (``efficiency_min``/``efficiency_max``: its slowest measurement over the ideal from
        the baseline's fastest, and the other way round) as a capped bar where it ran more
        than once, else a thin bar through its hollow marker (its spread over repeats is
        unmeasured), in its colour, from its one run's windows against the baseline's span
        (none under 2%);
        a grey hexagon on a host-bound point; runs that did not complete as an ``x`` in a
        row at the panel's bottom, named under it. A line whose ideal starts above its
        panel's smallest node count says so in its legend label (``DDP (ideal from 2
        nodes)``): its efficiencies do not compare with the other lines'. Where a panel
        has several lines, each line's markers, bars and marks stand a little beside the
        node count (:func:`~vitfsdp.analysis.figures.panels.line_shifts`), so a bar inside
        another line's is seen.
    """
    runs = with_point_efficiency(df)
    if not scales(runs):
        return None
    panels = _panels(runs)
    fig, axes = _new_figure(len(panels))
    keys = _label_keys(runs)
    looks = _looks(runs, keys)
    extras = {"ideal"}
    contended, pooled = [], 0
    for ax, (model, panel) in zip(axes, panels, strict=True):
        notes, marked = [], Counter()
        named = f"{model} " if len(panels) > 1 else ""
        top, low = 1.0, 1.0
        smallest = panel["nodes"].min()
        lines = _lines(panel, keys)
        shifts = line_shifts(len(lines), panel["nodes"])
        for (label, line), shift in zip(lines, shifts, strict=True):
            done, color = _plot_measured(ax, line, keys, looks, _rebased(label, line, smallest),
                                         "eff", "median", shift, extras)
            if not done.empty:
                lowest, highest = _draw_bounds(ax, line, done, color, extras, shift)
                top, low = max(top, highest), min(low, lowest)
                _mark_host_bound(ax, line, done, extras, shift=shift)
                pooled += _mark_pooled(ax, line, done, shift)
            contended += [named + item for item in
                          _mark_contended(ax, line, done, label, extras, shift)]
            notes += _mark_not_completed(ax, line, "eff", color, label, marked, extras,
                                         shift=shift, marker=looks[_look_label(line, keys)][1],
                                         strip=True)
        ax.axhline(1.0, ls="--", color="0.4", lw=1, zorder=1)
        bottom = axis_bottom(low, top)
        ax.set_ylim(bottom, top + 0.08 * (top - bottom))
        if notes:
            _make_room_below(ax)
        start = ax.get_ylim()[0]  # below the bottom strip's marks, where there are any
        _style_panel(ax, panel, _panel_title(model, panel), EFFICIENCY_LABEL + (
            f"\n(images/s / ideal; from {start:.2f}, not 0)" if bottom > 0
            else " (images/s / ideal)"), notes)
        if bottom > 0:
            extras.add(NOT_FROM_ZERO)
    _finish(fig, "Weak-scaling efficiency against node count", runs, path, extras,
            proxy_labels={"failed": FAILED_IN_STRIP},
            note=". ".join(filter(None, [contended_note(contended), pooled_note(pooled)])))
    return fig


#: The y label's head; :func:`plot_efficiency` adds the unit and, on a second line, where
#: the axis starts when not at 0.
EFFICIENCY_LABEL = "weak-scaling efficiency"
#: The drawn kind (for the caption) of an efficiency axis that does not start at 0.
NOT_FROM_ZERO = "not_from_zero"
#: The step (efficiency) an axis' bottom is rounded down to.
BOTTOM_STEP = 0.05


def axis_bottom(low: float, top: float) -> float:
    """The efficiency axis' bottom: a twentieth of the span (at least half a step) below
    ``low`` (the lowest value or bound drawn), rounded down to :data:`BOTTOM_STEP`; 0
    where that is no more than a step (lines within 0.72-1.0 overlapped on an axis from 0,
    drawn in its top quarter)."""
    margin = max(0.05 * (top - low), BOTTOM_STEP / 2)  # every efficiency 1.0: 0.95
    bottom = math.floor((low - margin) / BOTTOM_STEP) * BOTTOM_STEP
    return round(bottom, 2) if bottom > BOTTOM_STEP else 0.0


def scales(runs: pd.DataFrame) -> bool:
    """Whether any line of ``runs`` (:func:`with_point_efficiency`'s frame) has an efficiency
    at two node counts or more: the efficiency figure's reason to be drawn."""
    known = runs[(runs["status"] == "completed") & runs["eff"].notna() & runs["nodes"].notna()]
    if known.empty:
        return False
    counts = known.groupby(line_columns(runs), dropna=False)["nodes"].nunique()
    return bool((counts >= 2).any())


def _rebased(label: str, line: pd.DataFrame, smallest: float) -> str:
    """The line's legend label, with ``(ideal from N nodes)`` where its ideal starts above
    its panel's ``smallest`` node count (it did not complete there, or did not run there):
    its 1.0 is at another baseline than the other lines', which the reader must see."""
    done = line.loc[(line["status"] == "completed") & line["eff"].notna(), "nodes"]
    if done.empty or pd.isna(smallest) or done.min() <= smallest:
        return label
    n0 = int(done.min())
    return f"{label} (ideal from {n0} node{'s' if n0 != 1 else ''})"


def with_point_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its point's efficiency on every run (:data:`POINT_VALUES`' columns, from
    :func:`~vitfsdp.analysis.tables.points_table`; NaN where the point did not complete)."""
    points = points_table(df)
    keys = [*line_columns(df), "nodes"]
    if points.empty or "scaling_efficiency" not in points:
        return df.assign(**{c: float("nan") for c in POINT_VALUES})
    wanted = points[[*keys, *POINT_VALUES.values()]].rename(
        columns={v: k for k, v in POINT_VALUES.items()})
    merged = df[keys].merge(wanted, on=keys, how="left")  # null keys match (merge)
    return df.assign(**{c: merged[c].to_numpy(dtype=float) for c in POINT_VALUES})


def _draw_bounds(ax, line: pd.DataFrame, done: pd.Series, color: str, extras: set[str],
                 shift: float = 1.0) -> tuple[float, float]:  # fmt: skip
    """The efficiency's bounds at each completed node count of ``line`` (at ``shift`` times
    it, as its points): capped over repeats, thin over one run's windows, through the
    point's hollow marker and over its face (:data:`WINDOW_ON_MARKER_Z`); returns the
    lowest and the highest value or bound, drawn or not. The capped bar is its own kind
    (``efficiency_bounds``), not ``repeats``: it spans the point's slowest run over the
    baseline's fastest to its fastest over the baseline's slowest, wider than the point's
    repeats alone."""
    ok = (line["status"] == "completed") & line["eff"].notna() & line["nodes"].notna()
    rows = line.loc[ok, ["nodes", "eff_low", "eff_high", "eff_runs"]]
    stats = rows.groupby(rows["nodes"].astype("int64")).first()
    repeated = stats["eff_runs"].fillna(1) >= 2
    on_marker = dict(WINDOWS_BAR, zorder=WINDOW_ON_MARKER_Z)
    for sel, look, mark in ((repeated, REPEATS_BAR, "efficiency_bounds"),
                            (~repeated, on_marker, "efficiency_windows")):
        s = stats[sel]
        _error_bars(ax, done.loc[s.index], s["eff_low"], s["eff_high"],
                    dict(ecolor=color, **look), mark, extras, shift=shift)
    return (float(pd.concat([done, stats["eff_low"]]).min()),
            float(pd.concat([done, stats["eff_high"]]).max()))
