"""The prefetch ablation figure: images/s of each backward_prefetch x limit_all_gathers
variant, as grouped bars."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.finish import _finish
from vitfsdp.analysis.figures.panels import (
    _bar_spreads,
    _new_figure,
    _panel_title,
    _ring_host_bound,
    _set_title,
)
from vitfsdp.analysis.figures.style import NOT_COMPLETED_Y, PAPER_RC, _mpl, _paper_style
from vitfsdp.analysis.lines import line_columns
from vitfsdp.analysis.lines import line_label as _line_label
from vitfsdp.analysis.tables import ABLATION_COLUMNS, PREFETCH_ORDER, points_table, prefetch_table

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

#: Bar colour per backward_prefetch in the ablation (ColorBrewer Dark2: not the strategy
#: colours, since bars there are prefetch settings, not strategies).
PREFETCH_COLORS = {"BACKWARD_PRE": "#1b9e77", "BACKWARD_POST": "#d95f02", "NONE": "#7570b3"}


@_paper_style
def plot_prefetch(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """The prefetch ablation: ips of each strategy under BACKWARD_PRE / BACKWARD_POST / NONE
    x ``limit_all_gathers`` true/false, as grouped bars.

    One panel per model, at the largest node count where at least two variants of one
    strategy completed: prefetching hides communication, which grows with the node count,
    so the largest ablated scale is where the choice matters (``prefetch.csv`` holds every
    node count). One bar group per strategy (and any other varying config); bar colour =
    ``backward_prefetch``, hatching = ``limit_all_gathers=False``; min-max error bars over
    repeats, or thin uncapped ones over a one-run variant's timed windows (none under
    :data:`~vitfsdp.analysis.figures.style.MIN_ERROR_BAR`); a grey hexagon on a host-bound
    bar (median busy share below the bound, least busy rank: its images/s measure the wrapper, not
    prefetching); a run that did not complete is an ``x`` at its bar's place. One legend
    below the panels.

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
        _bar_spreads(ax, xs, rows["ips"], rows["ips_span_low"], rows["ips_span_high"],
                     rows["num_repeats"], extras)
        # the host decided: the bar measures the wrapper, not prefetching
        bound = rows["host_bound"].fillna(False).astype(bool).to_numpy()
        _ring_host_bound(ax, [x for x, b in zip(xs, bound, strict=True) if b],
                         rows["ips"][bound], extras)
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
