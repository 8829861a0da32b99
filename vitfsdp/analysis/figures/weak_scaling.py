"""The weak-scaling figure: global images/s against nodes, a line per strategy and its
ideal."""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.captions import SINGLE_DEVICE
from vitfsdp.analysis.figures.finish import FAILED_IN_STRIP, _finish
from vitfsdp.analysis.figures.panels import (
    _lines,
    _log_y_axis,
    _make_room_below,
    _mark_above_ideal,
    _mark_contended,
    _mark_host_bound,
    _mark_not_completed,
    _mark_pooled,
    _new_figure,
    _panel_title,
    _panels,
    _plot_ideal,
    _plot_measured,
    _plot_predicted,
    _plot_published,
    _plot_repeat_range,
    _published_labels,
    _style_panel,
    contended_note,
    line_shifts,
    pooled_note,
    single_device,
)
from vitfsdp.analysis.figures.style import _look_label, _looks, _paper_style
from vitfsdp.analysis.lines import label_columns as _label_keys
from vitfsdp.analysis.reference import matched, reference_table

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure

#: The footer's words where no run has a predicted images/s but the plan predicted them
#: (``pred_source``: their memory is predicted): its step time needs measured or data-sheet
#: compute (:func:`vitfsdp.plan.predict`).
NO_PREDICTED_IPS = ("no predicted ips: the plan needs a probe (python -m vitfsdp.probe -m ... "
                    "--out SWEEP_DIR) or the profile's peak FLOP/s (cluster.peak_tflops, "
                    "_tf32, _fp32)")
#: The footer's words where no run has a prediction at all (records the plan cannot rebuild a
#: config from).
NO_PREDICTION = "no predicted ips: the plan predicted none of these runs"


@_paper_style
def plot_weak_scaling(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure:
    """Global images/s against nodes, with a dashed ideal line per strategy; where every
    point ran on one GPU (:func:`~vitfsdp.analysis.figures.panels.single_device`), titled
    as single-device throughput, no ideal drawn nor named (``single_device`` in its drawn
    kinds, for the caption).

    Args:
        df: a ``collect_runs`` frame; ``ips`` is global images/s.
        path: where to save the figure (format from the suffix: .png at
            :data:`~vitfsdp.analysis.figures.style.DPI` dpi, .svg); not saved if ``None``.

    Returns:
        The figure: one panel per model (up to
        :data:`~vitfsdp.analysis.figures.style.MAX_COLUMNS` a row) and one legend below them;
        per line, a solid line with markers through the completed points (median ips per node count
        over repeats, with a min-max error bar where a point ran more than once; a point that
        completed once is hollow, its spread over repeats unmeasured, with a thin bar through
        its marker over its run's timed windows, in its colour), a dashed ideal
        line in the same colour, linear from the line's smallest completed node count, and the
        plan's predicted ips as a dotted line where ``pred_ips`` is known (where no run has
        one, the footer says why: :func:`no_prediction_note`); log-2 x axis, log y. Runs
        that did not complete are marked in a grey strip at the panel's bottom (a black ``x``
        over the line's marker, on top of everything, where no completed marker can hide it;
        a hollow diamond for a point skipped as infeasible) and listed under the axes. A
        point whose device was busy less than
        :data:`~vitfsdp.core.throughput.HOST_BOUND_BUSY_FRAC` of its windows (on its least
        busy rank, median over repeats: :func:`~vitfsdp.analysis.lines.judged_busy`) is ringed
        by a grey hexagon: the host decided it. Where a panel has several lines, each
        line's markers, bars and marks stand a little beside the node count
        (:func:`~vitfsdp.analysis.figures.panels.line_shifts`), so a bar inside another
        line's is seen; the ideal lines and the published figures stand at it.
    """
    panels = _panels(df)
    fig, axes = _new_figure(len(panels))
    keys = _label_keys(df)
    looks = _looks(df, keys)
    one = single_device(df)  # one GPU a point: no collectives, no scaling, no ideal
    extras = {SINGLE_DEVICE} if one else set()  # "ideal" where one is drawn
    published_ips, apart = same_devices_per_node(matched(reference_table(df)))
    contended, pooled = [], 0
    for ax, (model, panel) in zip(axes, panels, strict=True):
        notes, marked = [], Counter()
        named = f"{model} " if len(panels) > 1 else ""
        lines = _lines(panel, keys)
        shifts = line_shifts(len(lines), panel["nodes"])
        for (label, line), shift in zip(lines, shifts, strict=True):
            done, color = _plot_measured(ax, line, keys, looks, label, "ips", "median", shift,
                                         extras)
            if not done.empty and not one and _plot_ideal(ax, done, line["nodes"], color, label):
                extras.add("ideal")
                _mark_above_ideal(ax, done, extras, shift)
            if not done.empty:
                _mark_host_bound(ax, line, done, extras, shift=shift)
                _plot_repeat_range(ax, line, "ips", color, extras, shift=shift)
                pooled += _mark_pooled(ax, line, done, shift)
            contended += [named + item for item in
                          _mark_contended(ax, line, done, label, extras, shift)]
            _plot_predicted(ax, line, "pred_ips", color, label, extras, shift,
                            marker=looks[_look_label(line, keys)][1])
            _plot_published(ax, published_ips, model, label, color, extras)
            # in the bottom strip: at what they reached, under the completed runs' markers
            # of the same point, half the failures of a sweep were hidden
            notes += _mark_not_completed(ax, line, "ips", color, label, marked, extras,
                                         shift=shift, marker=looks[_look_label(line, keys)][1],
                                         strip=True)
        _log_y_axis(ax)
        if notes:
            _make_room_below(ax)
        _style_panel(ax, panel, _panel_title(model, panel), "throughput (images/s, global)",
                     notes)
    _finish(fig, _title(df, one), df, path, extras,
            proxy_labels=_published_labels(published_ips) | {"failed": FAILED_IN_STRIP},
            note=". ".join(n for n in (contended_note(contended), pooled_note(pooled),
                                       published_apart_note(apart),
                                       no_prediction_note(df)) if n))
    return fig


#: The title where no line spans two node counts (one node count on several GPUs, or
#: nothing completed at a second): nothing scaled, so not called weak scaling.
ONE_NODE_COUNT_TITLE = "Throughput at one node count (no scaling measured)"


def _title(df: pd.DataFrame, one: bool) -> str:
    """The figure's title: single-device (:data:`SINGLE_DEVICE_TITLE`), weak scaling where
    a line spans two node counts, else :data:`ONE_NODE_COUNT_TITLE`."""
    if one:
        return SINGLE_DEVICE_TITLE
    keys = _label_keys(df)
    spans = any(line["nodes"].nunique() > 1 for _, panel in _panels(df)
                for _, line in _lines(panel, keys))
    return "Weak scaling: throughput against node count" if spans else ONE_NODE_COUNT_TITLE


#: The title where every point ran on one GPU (:func:`~.panels.single_device`): it shows
#: each configuration's throughput, not how any scaled.
SINGLE_DEVICE_TITLE = "Single-device throughput (one GPU: no collectives, no scaling)"


#: The item of reference.csv's ``differs`` that says the published figure ran on another
#: count of devices a node (:data:`vitfsdp.analysis.reference.HARDWARE`).
DEVICES_PER_NODE = "gpus_per_node:"


def same_devices_per_node(published: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``published`` (reference.csv's compared images/s rows) split into those whose devices
    a node equal our point's (drawn on the global images/s axis) and the rest (``differs``
    names ``gpus_per_node``): a node of 8 MI250X GCDs at 1,205 images/s beside one H100 at
    331 would read 3.6x slower, where per device it is 2.2x faster."""
    if published.empty:
        return published, published
    other = published["differs"].fillna("").astype(str).map(
        lambda text: any(part.startswith(DEVICES_PER_NODE) for part in text.split("; ")))
    return published[~other], published[other]


def published_apart_note(apart: pd.DataFrame) -> str:
    """The footer's words for the published figures left out of the axes
    (:func:`same_devices_per_node`), e.g. ``published figure(s) of another count of devices
    a node than ours, not drawn (global images/s would compare a node with our GPUs);
    compared per device in reference.csv ratio_per_device: ORNL, Frontier, 2023 (8 x AMD
    MI250X GCD a node): ours / published per device 2.2-4.7``; ``""`` for none."""
    if apart.empty:
        return ""
    parts = []
    for label, rows in apart.groupby("label"):
        ratio = pd.to_numeric(rows["ratio_per_device"], errors="coerce").dropna()
        low, high = (f"{ratio.min():.2g}", f"{ratio.max():.2g}") if len(ratio) else ("", "")
        span = low if low == high else f"{low}-{high}"
        parts.append(f"{label}" + (f": ours / published per device {span}" if span else ""))
    return ("published figure(s) of another count of devices a node than ours, not drawn "
            "(global images/s would compare a node with our GPUs); compared per device in "
            "reference.csv ratio_per_device: " + "; ".join(parts))


def no_prediction_note(df: pd.DataFrame) -> str:
    """Why the figure draws no predicted ips, where no run of ``df`` has one
    (:data:`NO_PREDICTED_IPS`, :data:`NO_PREDICTION`); ``""`` where one does."""
    if "pred_ips" in df and df["pred_ips"].notna().any():
        return ""
    if "pred_source" in df and df["pred_source"].notna().any():
        return NO_PREDICTED_IPS
    return NO_PREDICTION
