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
    _note_items,
    _panel_title,
    _ring_host_bound,
    _set_title,
    _write_note,
)
from vitfsdp.analysis.figures.style import (
    AXES_HEIGHT_IN,
    NOT_COMPLETED_Y,
    PANEL_WIDTH_IN,
    PAPER_RC,
    Y_LABELS_IN,
    _mpl,
    _paper_style,
)
from vitfsdp.analysis.lines import line_columns
from vitfsdp.analysis.lines import line_label as _line_label
from vitfsdp.analysis.tables import (
    ABLATION_COLUMNS,
    PREFETCH_ORDER,
    equivalence_table,
    observed_noise,
    points_table,
    prefetch_limits,
    prefetch_table,
    verdict_kind,
)
from vitfsdp.analysis.verdict import BEYOND, CONTENDED

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure

#: Bar colour per backward_prefetch in the ablation: viridis at 0.08, 0.58 and 0.90 (not the
#: strategy colours, since bars there are prefetch settings, not strategies), dark, middle
#: and light, so they read in greyscale too: their luma (ITU-R BT.601, what a greyscale
#: print or PIL's ``convert("L")`` keeps) is 52, 121 and 192 of 255, about 70 apart; the
#: hatching of ``limit_all_gathers=False`` moves a bar's mean grey by less than that.
PREFETCH_COLORS = {"BACKWARD_PRE": "#481d6f", "BACKWARD_POST": "#20a386", "NONE": "#bddf26"}
#: Fill opacity of a bar whose place against its group's fastest is no result
#: (:func:`_settled`): a pale fill, its outline in the full colour.
UNSETTLED_ALPHA = 0.3
#: Luma (0-255) under which a bar's hatching is drawn white, not black (dark fills).
DARK_LUMA = 100
#: Air (points) between a bar's top (or its error bar's) and the text over it.
LABEL_AIR_PT = 1.5
#: Where a bar is ringed as host-bound (a grey hexagon of 110 pt² at its top,
#: :func:`~vitfsdp.analysis.figures.panels._ring_host_bound`: about 10.5 pt across), its
#: text starts this far above the bar's top, clear of the ring.
RING_CLEAR_PT = 7.0
#: Height (points) the fastest's star takes over its bar's text.
STAR_PT = 10.0
#: Size (points) of the run count over a bar.
RUNS_FONTSIZE = 6
#: The legend's words for a pale bar and for the star.
UNSETTLED_LABEL = ("pale: not established against its group's fastest (too few runs / "
                   "within the spread or the noise: prefetch.csv vs_best)")
#: ... and for a pale bar where other work competed with runs of a variant compared
#: (prefetch.csv ``vs_best``: :data:`~vitfsdp.analysis.verdict.CONTENDED`).
UNSETTLED_CONTENDED_LABEL = ("pale: not established against its group's fastest (too few "
                             "runs / within the spread or the noise / other work competed: "
                             "prefetch.csv vs_best)")
WINNER_LABEL = "fastest, beyond the spread of every other variant"
#: The legend's words for the count of contended runs over a bar (``n=2, 2 contended``).
CONTENDED_LABEL = ("k contended: other work competed with k of the bar's runs "
                   "(host_other_cpus): not a result, nor any bar ranked against it")
#: The footer's sentence where a panel's runs ran on CPU ranks (prefetch.csv ``cpu_ranks``;
#: why: :func:`~vitfsdp.analysis.tables.prefetch_table`).
CPU_NOTE = ("CPU ranks: FSDP's streams are no-ops, so prefetch and limit_all_gathers "
            "change only the order of collectives, not their overlap with compute")
#: ... and where no variant's busy share was measured (every ``host_bound`` NA), in the
#: words of the report's weak-scaling section (``report.host_bound_text``), by why.
BUSY_NOT_MEASURED = {True: "Device busy share not measured on CPU ranks, where the host is "
                           "the device: no bar is judged host-bound",
                     False: "Device busy share not measured (no NVML or AMD SMI on the "
                            "nodes, or older records): no bar is judged host-bound"}


@_paper_style
def plot_prefetch(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """The prefetch ablation: ips of each strategy under BACKWARD_PRE / BACKWARD_POST / NONE
    x ``limit_all_gathers`` true/false, as grouped bars.

    One panel per model, at the largest node count where at least two variants of one
    strategy completed: prefetching hides communication, which grows with the node count,
    so the largest ablated scale is where the choice matters (``prefetch.csv`` holds every
    node count). One bar group per strategy (and any other varying config); bar colour =
    ``backward_prefetch`` (:data:`PREFETCH_COLORS`: apart in greyscale too), hatching =
    ``limit_all_gathers=False``; min-max error bars over repeats, or thin uncapped ones over
    a one-run variant's timed windows (none under
    :data:`~vitfsdp.analysis.figures.style.MIN_ERROR_BAR`). A bar is pale
    (:data:`UNSETTLED_ALPHA`, outlined in its colour) where prefetch.csv's ``vs_best`` is no
    result (too few runs, within the spread or the noise), the fastest too where any other
    variant of its group is; the fastest is starred only where it beats every other beyond
    the spread (:func:`_settled`). Each bar's completed runs are written over it
    (``n=2``), or once in the legend where every bar has as many. A grey hexagon on a
    host-bound bar (median busy share below the bound, least busy rank: its images/s
    measure the wrapper, not prefetching); where no variant of a panel measured its busy
    share, the footer says so (:data:`BUSY_NOT_MEASURED`), not reading it as "not
    host-bound". A bar other work competed with says so over it (``n=2, 2 contended``,
    :data:`CONTENDED_LABEL`), pale as every bar compared with it. Where a panel's runs ran
    on CPU ranks (prefetch.csv ``cpu_ranks``), the footer says that the variants there differ
    in the order of their collectives, not in prefetching (:data:`CPU_NOTE`). A variant
    with runs that did not complete is an ``x`` at its bar's place, at the images/s they
    reached before they ended (median), else at the panel's bottom, and an item of the note
    under the panel
    (:func:`~vitfsdp.analysis.figures.panels._note_items`, with what the ``x`` stands at).
    The title gives the node count and the ranks (CPU runs) or GPUs. One legend below the
    panels.

    Args:
        df: a ``collect_runs`` frame.
        path: where to save the figure (format from the suffix); not saved if ``None``.

    Returns:
        The figure, or ``None`` when no strategy ran two prefetch variants at one node count.
    """
    points = points_table(df)
    # the verdicts of prefetch.csv: judged against the sweep's observed noise as there
    table = prefetch_table(points, observed_noise(equivalence_table(points, df)), df)
    counts = table.groupby(["model", "nodes", "configuration"]).size()
    ablated = counts[counts >= 2].reset_index()
    if ablated.empty:
        return None
    at = ablated.groupby("model")["nodes"].max()
    shown = pd.concat([table[(table["model"] == m) & (table["nodes"] == n)]
                       for m, n in at.items()])
    runs = set(shown["num_repeats"].astype(int))
    fig, axes = _new_figure(len(at))
    extras: set[str] = set()
    drawn: dict[str, set] = {"variants": set(), "looks": set()}
    for ax, (model, nodes) in zip(axes, at.items(), strict=True):
        bars = table[(table["model"] == model) & (table["nodes"] == nodes)]
        _draw_prefetch_panel(ax, bars, _ablation_runs(df, model, nodes), extras, drawn,
                             label_runs=len(runs) > 1)
        panel = df[df["model"] == model]
        here = panel[panel["nodes"] == nodes]
        world = here["world_size"].dropna()
        # CPU runs are ranks, not GPUs (as the TFLOP/s figure and the footer say)
        per = "ranks" if set(here["device_type"].dropna()) == {"cpu"} else "GPUs"
        devices = f", {int(world.iloc[0])} {per}" if len(world) else ""
        _set_title(ax, f"{_panel_title(model, panel)}\nat {nodes} node(s){devices}")
    common = runs.pop() if len(runs) == 1 else None
    _finish(fig, "Backward prefetch and limit_all_gathers", df, path, extras,
            _prefetch_handles(drawn, common), note=_prefetch_note(shown))
    return fig


def _prefetch_note(shown: pd.DataFrame) -> str:
    """The footer's sentences on what the panels (``shown``: their rows of prefetch_table)
    cannot measure: :data:`CPU_NOTE` where a panel's variants all ran on CPU ranks
    (``cpu_ranks``), :data:`BUSY_NOT_MEASURED` where none measured its busy share (every
    ``host_bound`` NA), each with the panels' models where not every panel's; ``""`` where
    neither applies."""
    cpu, unmeasured = prefetch_limits(shown, ["model", "nodes"])
    sentences = []
    for hit, text in ((cpu, CPU_NOTE),
                      (unmeasured, BUSY_NOT_MEASURED[bool(cpu[unmeasured].all())])):
        if hit.any():
            which = "" if hit.all() else ", ".join(
                dict.fromkeys(m for m, _ in hit[hit].index)) + ": "
            sentences.append(f"{which}{text}.")
    return " ".join(sentences)


def _prefetch_handles(drawn: dict[str, set], runs: int | None = None) -> list:
    """Legend entries of the bars drawn: one colour per prefetch setting (of
    ``drawn["variants"]``, ``(backward_prefetch, limit_all_gathers)``), the hatching of
    ``limit_all_gathers=False``, the pale bar and the star where drawn
    (``drawn["looks"]``: ``unsettled``, ``winner``; ``contended``: the pale bar's words
    name other work, and :data:`CONTENDED_LABEL` says what ``2 contended`` over a bar
    means), and ``runs``, every bar's count of completed runs where they all have as many
    (else each bar says its own)."""
    mpl = _mpl()
    variants = drawn["variants"]
    handles = [mpl.Patch(facecolor=PREFETCH_COLORS.get(p, "0.5"), edgecolor="black", lw=0.6,
                         label=p) for p in PREFETCH_ORDER if p in {p for p, _ in variants}]
    if any(not limit for _, limit in variants):
        handles.append(mpl.Patch(facecolor="white", edgecolor="black", lw=0.6, hatch="///",
                                 label="limit_all_gathers=False"))
    contended = "contended" in drawn["looks"]
    if "unsettled" in drawn["looks"]:
        handles.append(mpl.Patch(facecolor=(0.45, 0.45, 0.45, UNSETTLED_ALPHA),
                                 edgecolor="0.45", lw=1.2,
                                 label=UNSETTLED_CONTENDED_LABEL if contended
                                 else UNSETTLED_LABEL))
    if contended:
        handles.append(mpl.Line2D([], [], ls="none", label=CONTENDED_LABEL))
    if "winner" in drawn["looks"]:
        handles.append(mpl.Line2D([], [], marker="*", color="black", ms=7, ls="none",
                                  label=WINNER_LABEL))
    if runs is not None:
        plural = "run" if runs == 1 else "runs"
        handles.append(mpl.Line2D([], [], ls="none",
                                  label=f"every bar: median of n={runs} completed {plural}"))
    return handles


def _settled(bars: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Which bars' place against their group's fastest (``configuration``) is a result, and
    which bar is a fastest that beats every other variant of its group beyond the spread.

    A slower variant is settled where prefetch.csv's ``vs_best`` is
    :data:`~vitfsdp.analysis.verdict.BEYOND` (:func:`~vitfsdp.analysis.tables.verdict_kind`:
    with or without a note of failed runs after it), none of the verdicts that are no result (too
    few runs, one run, within the spread, within the noise); the fastest where every other
    variant of its group is (the winner), or where it is its group's only bar (nothing to
    compare). Returns ``(settled, winner)``, boolean on ``bars``' index."""
    group = bars["configuration"]
    size = bars.groupby(group)["ips"].transform("size")
    fastest = bars["ips"] == bars.groupby(group)["ips"].transform("max")
    slower = bars["vs_best"].map(verdict_kind) == BEYOND  # "...; 1 of 3 runs failed" too
    beaten = slower.groupby(group).transform("sum")
    winner = fastest & (size > 1) & (beaten == size - 1)
    return (slower | winner | (size == 1)), winner


def _draw_prefetch_panel(ax, bars: pd.DataFrame, runs: pd.DataFrame, extras: set[str],
                         drawn: dict[str, set], label_runs: bool) -> None:  # fmt: skip
    """Grouped bars of one model and node count (``bars``: rows of prefetch_table; ``runs``:
    every run there, :func:`_ablation_runs`), pale where not :func:`_settled`, the winner
    starred, each bar's run count over it where ``label_runs`` and, whatever
    ``label_runs``, with its runs other work competed with where any (``runs_contended``:
    ``n=2, 2 contended``); ``x`` marks and the note under the panel for variants with runs
    that did not complete. Adds the kinds of mark drawn to ``extras`` and the variants and
    looks drawn to ``drawn`` (``contended`` where a bar was, or a verdict rests on one:
    prefetch.csv ``vs_best``)."""
    bad = (runs["status"] != "completed") | runs["ips"].isna()
    groups = sorted(set(bars["configuration"]) | set(runs.loc[bad, "configuration"]))
    variants = [(p, lim) for p in PREFETCH_ORDER for lim in (True, False)
                if _variant(bars, p, lim).any() or _variant(runs[bad], p, lim).any()]
    width = 0.8 / len(variants)
    settled, winner = _settled(bars)
    at_value, at_bottom, notes, labels = [], [], [], []
    for i, (prefetch, limit) in enumerate(variants):
        offset = (i - (len(variants) - 1) / 2) * width
        rows = bars[_variant(bars, prefetch, limit)]
        xs = [groups.index(g) + offset for g in rows["configuration"]]
        color = PREFETCH_COLORS.get(prefetch, "0.5")
        container = ax.bar(xs, rows["ips"], width, color=color,
                           hatch=None if limit else "///", edgecolor="black", linewidth=0.6,
                           label=f"{prefetch}, limit_all_gathers={limit}")
        for patch, ok in zip(container.patches, settled[rows.index], strict=True):
            _bar_look(patch, color, ok, hatched=not limit)
            if not ok:
                drawn["looks"].add("unsettled")
        _bar_spreads(ax, xs, rows["ips"], rows["ips_span_low"], rows["ips_span_high"],
                     rows["num_repeats"], extras)
        # the host decided: the bar measures the wrapper, not prefetching
        bound = rows["host_bound"].fillna(False).astype(bool).to_numpy()
        _ring_host_bound(ax, [x for x, b in zip(xs, bound, strict=True) if b],
                         rows["ips"][bound], extras)
        tops = rows[["ips", "ips_span_high"]].max(axis=1)
        labels += [(x, top, _runs_text(int(n), int(c), label_runs), star, ring)
                   for x, top, n, c, star, ring in zip(xs, tops, rows["num_repeats"],
                                                       rows["runs_contended"],
                                                       winner[rows.index], bound,
                                                       strict=True)]
        if (rows["runs_contended"] > 0).any() or (
                rows["vs_best"].map(verdict_kind) == CONTENDED).any():
            drawn["looks"].add("contended")
        for group in groups:  # the variant's runs that did not complete, per bar group
            mine = runs[_variant(runs, prefetch, limit) & (runs["configuration"] == group)]
            failed = mine[bad[mine.index]]
            if failed.empty:
                continue
            x = groups.index(group) + offset
            reached = (failed["ips_reached"].median() if "ips_reached" in failed
                       else float("nan"))
            placed = pd.notna(reached) and reached > 0
            if placed:
                at_value.append((x, reached))
            else:
                at_bottom.append(x)
            median = "the median " if len(failed) > 1 else ""
            where = (f"x at {median}{reached:,.0f} images/s reached" if placed
                     else "nothing reached: x at the bottom")
            label = f"{group} {prefetch} limit_all_gathers={limit}"
            notes += [(done, f"{text[:-1]}; {where})")
                      for done, text in _note_items(mine, bad[mine.index], label, "ips")]
        if len(rows):
            drawn["variants"].add((prefetch, limit))
    if at_value:  # at what the runs reached before they ended, as on weak_scaling.png
        ax.scatter(*zip(*at_value, strict=True), marker="x", color="black", zorder=4,
                   label="_not completed")
    if at_bottom:  # nothing reached: at the panel's bottom, in axes fraction
        ax.scatter(at_bottom, [NOT_COMPLETED_Y] * len(at_bottom), marker="x", color="black",
                   transform=ax.get_xaxis_transform(), clip_on=False, zorder=4,
                   label="_not completed")
    if at_value or at_bottom:
        extras.add("failed")
    ax.set_xticks(range(len(groups)), labels=[textwrap.fill(g, 18) for g in groups])
    ax.set_xlim(-0.5, len(groups) - 0.5)  # every bar slot, drawn or not, inside the axes
    ax.set_ylabel("throughput (images/s, global)")
    placed = _place_labels(labels, width / len(groups))
    ax.set_ylim(bottom=0, top=_room_for_labels(1.12 * ax.get_ylim()[1], placed))
    _label_bars(ax, placed)
    if any(star for *_, star, _ in labels):
        drawn["looks"].add("winner")
    ax.yaxis.set_major_formatter(_mpl().FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.grid(True, axis="y", alpha=0.3)
    ax.tick_params(labelsize=PAPER_RC["xtick.labelsize"])
    _write_note(ax, notes)


def _bar_look(patch, color: str, settled: bool, hatched: bool) -> None:
    """A settled bar: its colour, a thin black outline, hatching (where ``hatched``) white
    on a dark fill (luma under :data:`DARK_LUMA`), else black; an unsettled one: a pale fill
    (:data:`UNSETTLED_ALPHA` of its colour), a thicker outline in its colour, dark grey
    hatching. Hatching takes its own colour from matplotlib 3.10 (the outline's before)."""
    mpl = _mpl()
    if settled:
        r, g, b = mpl.matplotlib.colors.to_rgb(color)
        hatch = "white" if 255 * (0.299 * r + 0.587 * g + 0.114 * b) < DARK_LUMA else "black"
    else:
        patch.set_facecolor(mpl.matplotlib.colors.to_rgba(color, UNSETTLED_ALPHA))
        patch.set_edgecolor(color)
        patch.set_linewidth(1.2)
        hatch = "0.25"
    if hatched and hasattr(patch, "set_hatchcolor"):
        patch.set_hatchcolor(hatch)


def _runs_text(runs: int, contended: int, label_runs: bool) -> str | None:
    """What a bar says of its runs: ``n=2`` (its completed runs) where ``label_runs``, and
    ``n=2, 2 contended`` where other work competed with any of its runs, whatever
    ``label_runs`` (a legend's "every bar: n=2" does not say which bars were contended);
    None for neither."""
    if contended:
        return f"n={runs}, {contended} contended"
    return f"n={runs}" if label_runs else None


def _place_labels(labels: list[tuple[float, float, str | None, bool, bool]],
                  bar_width: float) -> list[tuple[float, float, str | None, int, float, bool]]:
    """How each bar's text stands over it (``labels``: ``(x, top, text, winner, ringed)``,
    ``top`` its bar's or error bar's top in data units, ``bar_width`` a bar's share of the
    axes' width): ``(x, top, text, rotation, above, winner)``, ``above`` the points from
    ``top`` to the text's foot (clear of a host-bound ring, :data:`RING_CLEAR_PT`). The
    text (:func:`_runs_text`) stands upright where it fits the bar's width on one line, else
    on one line a part (``n=3`` / ``1 contended``), else turned, its parts side by side, so a
    turned label is as short as its longest part."""
    width_pt = 0.9 * bar_width * (PANEL_WIDTH_IN - Y_LABELS_IN) * 72  # the axes, about
    placed = []
    for x, top, text, star, ringed in labels:
        above = RING_CLEAR_PT if ringed else LABEL_AIR_PT
        rotation = 0
        if text is not None and _text_width_pt(text) > width_pt:
            parts = text.split(", ")
            text = "\n".join(parts)
            rotation = 0 if max(map(_text_width_pt, parts)) <= width_pt else 90
        placed.append((x, top, text, rotation, above, star))
    return placed


def _text_width_pt(text: str) -> float:
    """About how wide ``text`` runs at :data:`RUNS_FONTSIZE` (points; 0.62 em a character)."""
    return len(text) * 0.62 * RUNS_FONTSIZE


def _label_height_pt(text: str | None, rotation: int, star: bool) -> float:
    """How high a bar's text (and star) stands over its foot, in points."""
    if text is None:
        height = 0.0
    elif rotation:
        height = max(_text_width_pt(part) for part in text.split("\n"))
    else:
        height = 1.2 * RUNS_FONTSIZE * len(text.split("\n"))
    return height + (STAR_PT if star else 0.0)


def _room_for_labels(top: float, placed: list[tuple[float, float, str | None, int, float,
                                                      bool]]) -> float:  # fmt: skip
    """The y axis' top (data units, the axis from 0) at which every bar's text and star
    (:func:`_place_labels`) ends inside the axes, at least ``top``: a label of ``h`` points
    over a bar top ``t`` needs ``t / (1 - h / axes height)``."""
    height_pt = AXES_HEIGHT_IN * 72
    for _, bar_top, text, rotation, above, star in placed:
        if text is None and not star:
            continue
        need = above + _label_height_pt(text, rotation, star) + LABEL_AIR_PT
        top = max(top, bar_top / max(0.2, 1 - need / height_pt))
    return top


def _label_bars(ax, placed: list[tuple[float, float, str | None, int, float, bool]]) -> None:
    """Over each bar (:func:`_place_labels`' rows): its text where given, and a star over the
    winner."""
    for x, top, text, rotation, above, star in placed:
        if text is not None:
            ax.annotate(text, xy=(x, top), xytext=(0, above), textcoords="offset points",
                        ha="center", va="bottom", fontsize=RUNS_FONTSIZE, rotation=rotation,
                        linespacing=1.0).set_gid("runs")
            above += _label_height_pt(text, rotation, False)
        if star:
            ax.annotate("\u2605", xy=(x, top), xytext=(0, above), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8).set_gid("winner")


def _variant(rows: pd.DataFrame, prefetch: str, limit: bool) -> pd.Series:
    """The rows run with this ``backward_prefetch`` and ``limit_all_gathers``."""
    return (rows["backward_prefetch"] == prefetch) & (rows["limit_all_gathers"] == limit)


def _ablation_runs(df: pd.DataFrame, model: str, nodes: int) -> pd.DataFrame:
    """Every run of the ablation at one model and node count (each status), with the
    bar-group label :func:`~vitfsdp.analysis.tables.prefetch_table` gives them."""
    rows = df[(df["model"] == model) & (df["nodes"] == nodes)]
    rows = rows.dropna(subset=list(ABLATION_COLUMNS))
    keys = [c for c in line_columns(df) if c not in ABLATION_COLUMNS]
    labels = [_line_label(r, keys) for _, r in rows.iterrows()]
    return rows.assign(configuration=pd.Series(labels, rows.index, dtype="object"))
