"""The recipe ablation figure: each cumulative recipe step's images/s relative to the
recipe's baseline, a bar per node count."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.finish import _finish
from vitfsdp.analysis.figures.panels import _bar_spreads, _new_figure, _set_title, _study
from vitfsdp.analysis.figures.style import (
    NOT_COMPLETED_Y,
    NOTE_FONTSIZE,
    PAPER_RC,
    PUBLISHED_OTHER,
    _mpl,
    _paper_style,
)
from vitfsdp.analysis.recipe import recipe_table
from vitfsdp.analysis.reference import recipe_reference

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure

#: Bar colours of the node counts in the recipe ablation (ColorBrewer Blues, light to dark:
#: more nodes, darker; not the strategy colours, since bars here are node counts).
NODE_COLORS = ("#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")


@_paper_style
def plot_recipe(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """A recipe ablation, PyCls style: images/s of each cumulative recipe step relative to the
    recipe's baseline (:func:`vitfsdp.analysis.recipe.recipe_table`), as grouped bars.

    One panel per recipe; one bar group per step (x axis, in step order, labelled with what
    the step adds), one bar per node count (darker: more nodes) at the median over repeats
    with a min-max error bar (a thin uncapped one over a one-run step's timed windows; none
    under :data:`~vitfsdp.analysis.figures.style.MIN_ERROR_BAR`), both over the baseline's
    median; a dashed line at 1x (the baseline); ``x`` where a step's runs
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
        baseline = pd.to_numeric(rows["baseline_ips"], errors="coerce")
        _bar_spreads(ax, xs, rows["relative_ips"], rows["ips_span_low"] / baseline,
                     rows["ips_span_high"] / baseline, rows["num_completed"], extras)
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
