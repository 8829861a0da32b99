"""The TFLOP/s figure: model TFLOP/s per GPU against GPUs, the device's peak and MFU."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.captions import SINGLE_DEVICE
from vitfsdp.analysis.figures.finish import _finish
from vitfsdp.analysis.figures.panels import (
    _completed,
    _hollow_one_run,
    _lines,
    _mark_host_bound,
    _new_figure,
    _panel_title,
    _panels,
    _plot_repeat_range,
    _set_title,
    line_shifts,
    single_device,
)
from vitfsdp.analysis.figures.style import (
    DEVICE_COLOR,
    _linestyle,
    _look_label,
    _looks,
    _mpl,
    _paper_style,
    log_label,
)
from vitfsdp.analysis.lines import label_columns as _label_keys
from vitfsdp.analysis.schema import flop_unit

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure


@_paper_style
def plot_tflops(df: pd.DataFrame, path: str | os.PathLike | None = None) -> Figure | None:
    """Model TFLOP/s per GPU against the number of GPUs, a line per configuration and a
    panel per model, with the device's peak (dotted, where the runs record it) and an MFU
    axis on the right (TFLOP/s / peak; MFU's definition: docs/benchmarks.md), and each
    point's spread as in the weak-scaling figure (min-max over repeats, else a thin bar over
    its one run's timed windows; a point that completed once is hollow: its spread over
    repeats is unmeasured). Where a panel has several lines, each line's markers, bars and
    rings stand a little beside the world size, by the weak-scaling figure's offsets
    (:func:`~vitfsdp.analysis.figures.panels.line_shifts`), and a one-run point's window bar
    runs through its own hollow marker, in its colour (not beside it, where it stood among
    the other lines' points at that world size). A host-bound point (median busy share
    below the bound, least busy rank: ``judged_busy``) is ringed by a grey hexagon, as in
    the weak-scaling figure: its MFU is the host's, not the device's. Runs on CPU ranks say
    "rank" for "GPU"; where every value is below 0.1 TFLOP/s (CPU ranks, tiny models) the
    axis is in GFLOP/s (a peak in TFLOP/s would flatten it: none drawn). Where every point
    ran on one device, the title says so (no scaling to read off; ``single_device`` in its
    drawn kinds, for the caption).

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
    extras: set[str] = {SINGLE_DEVICE} if single_device(done) else set()
    per = "rank" if set(done["device_type"].dropna()) == {"cpu"} else "GPU"  # CPU ranks
    # GFLOP/s where TFLOP/s would read 0.00x (CPU ranks, tiny models), as the report's tables
    unit, scale = flop_unit(done["tflops_per_gpu"])
    for ax, (model, panel) in zip(axes, panels, strict=True):
        lines = _lines(panel, keys)
        shifts = line_shifts(len(lines), panel["world_size"])
        for (label, line), shift in zip(lines, shifts, strict=True):
            color, marker = looks[_look_label(line, keys)]
            runs = _completed(line, "tflops_per_gpu", "world_size")  # points.csv's runs
            points = runs.groupby(runs["world_size"].astype("int64"))["tflops_per_gpu"].median()
            ax.plot(points.index * shift, points.values * scale, ls=_linestyle(line, keys),
                    marker=marker, color=color, label=label)
            _hollow_one_run(ax, line, "tflops_per_gpu", points * scale, color, marker, extras,
                            shift, x="world_size")
            _mark_host_bound(ax, line, points * scale, extras, x="world_size", shift=shift)
            _plot_repeat_range(ax, line, "tflops_per_gpu", color, extras, x="world_size",
                               scale=scale, shift=shift)
        if scale == 1.0:
            _draw_peak(ax, panel, extras)
        gpus = sorted(set(panel["world_size"].astype("int64")))
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, labels=[str(g) for g in gpus])
        ax.xaxis.set_minor_locator(_mpl().NullLocator())
        ax.set_xlim(gpus[0] / 1.4, gpus[-1] * 1.4)
        ax.set_ylim(bottom=0)
        ax.set_xlabel(log_label(f"{per}s" if per == "rank" else "GPUs (ranks)"))
        ax.set_ylabel(f"model {unit} per {per}")
        ax.grid(True, which="major", alpha=0.3)
        _set_title(ax, _panel_title(model, panel))
    title = (f"{unit} of one {per} (single device: no collectives, no scaling)"
             if SINGLE_DEVICE in extras else f"{unit} per {per} against the number of {per}s")
    _finish(fig, title, df, path, extras)
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
