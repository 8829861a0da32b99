"""A figure's finish: its title and the runs' shared settings, one legend below the panels
(the lines and a grey proxy per kind of mark drawn), the height that gives every panel its
plotting area, and the file."""

from __future__ import annotations

import logging
import os
import re
import textwrap
import warnings
from typing import TYPE_CHECKING

import pandas as pd

from vitfsdp.analysis.figures.style import (
    AXES_HEIGHT_IN,
    DEVICE_COLOR,
    DEVICE_USED_MARKER,
    DPI,
    PAPER_RC,
    PNG_COMPRESS_LEVEL,
    PUBLISHED_OTHER,
    RESERVED_MARKER,
    _chars_per_line,
    _mpl,
    short_label,
)
from vitfsdp.analysis.lines import BUSY_NOT_MEASURED, contention_note, gpu_busy_missing
from vitfsdp.analysis.tables import points_table
from vitfsdp.analysis.verdict import ABOVE_IDEAL_CAUSES
from vitfsdp.core.throughput import HOST_BOUND_BUSY_FRAC

if TYPE_CHECKING:  # annotations only: matplotlib is imported at first use (_mpl)
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)


#: Config shown in the figure title when every run shares it.
CONTEXT_COLUMNS = ("local_batch_size", "precision", "data", "device_name")


#: Grey legend entries for the kinds of mark a figure may draw (the keys of ``extras``); a
#: figure may say more in its own words (``proxy_labels`` of :func:`_finish`: memory.png
#: names what its prediction predicts, ``predicted peak reserved (plan)`` on a GPU).
PROXIES = {
    "ideal": dict(color="0.4", ls="--", label="ideal (linear)"),
    "predicted": dict(color="0.4", ls=":", marker=".", label="predicted (plan)"),
    # memory.png's marks beside a measured point: shapes no line uses (style.py)
    "reserved": dict(color="0.4", marker=RESERVED_MARKER, mfc="none", ls="none",
                     label="measured peak reserved"),
    "device_used": dict(color="0.4", marker=DEVICE_USED_MARKER, mfc="none", ls="none",
                        label="device used (NVML / AMD SMI): the whole GPU,\nits CUDA "
                              "context and NCCL included"),
    "ranks": dict(color="0.4", ls="-", lw=0.6,
                  label="thin bar just right, no caps: down to the min over ranks"),
    "repeats": dict(color="0.4", marker="_", ls="-", lw=1,
                    label="error bar: min-max over repeats"),
    "efficiency_bounds": dict(color="0.4", marker="_", ls="-", lw=1,
                              label="bar: efficiency bounds (slowest run / baseline's "
                                    "fastest to fastest / baseline's slowest)"),
    # on a line, as the points it stands for: apart from memory.png's hollow reserved circle
    "one_run": dict(color="0.4", marker="o", mfc="white", ls="-", lw=1,
                    label="hollow marker, one run: no spread over repeats"),
    "efficiency_windows": dict(color="0.4", ls="-", lw=0.6,
                               label="thin bar, no caps: a one-run point's windows against "
                                     "the baseline's span"),
    "windows": dict(color="0.4", ls="-", lw=0.6,
                    label="thin bar, no caps: one run's windows, min-max"),
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


#: The legend's words for ``failed`` where the figure draws each x over its line's marker
#: (:func:`~vitfsdp.analysis.figures.panels._mark_not_completed` with ``marker``).
FAILED_ON_MARKER = "not completed: black x over its line's marker"
#: ... and where, reaching nothing, they stand in the panel's bottom strip.
FAILED_IN_STRIP = "not completed: black x over its line's marker, in the grey bottom strip"


#: Legend entries (grey patches) for the parts of the memory bars
#: (:data:`~vitfsdp.analysis.figures.memory.STATE_PARTS`).
PATCH_PROXIES = {
    "state_params": dict(facecolor="0.35", edgecolor="0.35", lw=0.6,
                         label="params (local shards)"),
    "state_grads": dict(facecolor=(0.35, 0.35, 0.35, 0.45), edgecolor="0.35", lw=0.6,
                        hatch="////", label="grads (local shards)"),
    "state_optimizer": dict(facecolor=(0.35, 0.35, 0.35, 0.2), edgecolor="0.35", lw=0.6,
                            hatch="....", label="optimizer state (local shards)"),
    "state_rest": dict(facecolor="white", edgecolor="0.35", lw=0.6,
                       label="peak above the model state"),
    "state_rest_no_grads": dict(facecolor="white", edgecolor="0.35", lw=0.6, ls="--",
                                label="dashed: grads not recorded (JAX), in the peak above "
                                      "the model state"),
}  # fmt: skip


def _figure_legend(fig: Figure, extras: set[str], handles: list | None = None,
                   footer: str = "", proxy_labels: dict[str, str] | None = None) -> None:
    """One legend for the whole figure, below the panels, in as many columns as fit its
    width: ``handles``, by default every labelled line of every panel once (by label, sorted,
    device memory last), then a grey proxy for each kind of mark drawn (``extras``, see
    :data:`PROXIES` and :data:`PATCH_PROXIES`). ``footer`` (the runs' shared settings) heads
    the legend, or stands alone below the panels where there is no legend. ``proxy_labels``
    replaces the label of a kind's proxy (the published figures' study names). Every entry's
    label is wrapped to the figure's width (:func:`_fit_label`), so no entry runs past
    either side of a one-panel figure; the lines keep their own labels."""
    if handles is None:
        by_label = {}
        for ax in fig.axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                by_label.setdefault(label, handle)
        order = sorted(by_label, key=lambda label: (_is_device_line(by_label[label]), label))
        handles = [by_label[label] for label in order]
    relabel = proxy_labels or {}
    entries = handles + [_mpl().Line2D([], [], **{**PROXIES[kind], **({"label": relabel[kind]}
                                                               if kind in relabel else {})})
                         for kind in PROXIES
                         if kind in extras and (handles or kind != "ideal")]
    entries += [_mpl().Patch(**PATCH_PROXIES[kind]) for kind in PATCH_PROXIES if kind in extras]
    if entries:  # the lines' labels in the reader's words (short_label), the marks' as set
        labels = [_fit_label(fig, short_label(h.get_label()) if i < len(handles)
                             else h.get_label()) for i, h in enumerate(entries)]
        columns = _legend_columns(fig, labels)
        fig.legend(handles=entries, labels=labels, loc="outside lower center", frameon=False,
                   ncols=columns, title=footer or None,
                   title_fontsize=PAPER_RC["legend.fontsize"])
    elif footer:
        fig.supxlabel(footer, fontsize=PAPER_RC["legend.fontsize"])


def _fit_label(fig: Figure, label: str) -> str:
    """``label`` wrapped into lines as long as fit the figure's width beside a legend handle
    (a published study's long label, a mark's explanation); unchanged where it fits."""
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


#: The ``DataFrame.attrs`` key of the runs' line saying they were rebuilt from runs.csv
#: exports (:func:`vitfsdp.analysis.collect.absent_lines`' first), which every footer adds.
REBUILT_ATTR = "rebuilt_from"
#: The ``DataFrame.attrs`` key of the line saying whose plan the predictions of a rebuild are
#: (:func:`vitfsdp.analysis.collect.replanned_line`), which only the footers of figures that
#: draw a prediction add (``"predicted"`` in their extras: weak_scaling.png, memory.png).
PREDICTED_NOTE_ATTR = "predicted_note"


def _finish(fig: Figure, title: str, df: pd.DataFrame, path: str | os.PathLike | None,
            extras: set[str], handles: list | None = None,
            proxy_labels: dict[str, str] | None = None, note: str = "") -> None:  # fmt: skip
    """Title and shared config (wrapped to the figure's width), then ``note`` (a sentence on
    the figure as a whole, such as what it cannot draw and why) under it, the figure's
    legend (see :func:`_figure_legend`), the height that gives every panel
    :data:`AXES_HEIGHT_IN` of plotting area, and the file at ``path`` if given."""
    if "above_ideal" in extras:
        proxy_labels = {**(proxy_labels or {}), "above_ideal": above_ideal_label(df)}
    if df.attrs.get(REBUILT_ATTR):  # tables and figures rebuilt from a runs.csv export
        note = _then(note, f"{_file_names(df.attrs[REBUILT_ATTR])}.")
    if "predicted" in extras and df.attrs.get(PREDICTED_NOTE_ATTR):
        note = _then(note, f"{df.attrs[PREDICTED_NOTE_ATTR]}.")
    if gpu_busy_missing(df):  # the report says why (its host-bound text)
        note = _then(note, f"GPU points: {BUSY_NOT_MEASURED}, host-bound not known.")
    note = _then(provenance(df), note) if note else provenance(df)
    width = _chars_per_line(fig.get_figwidth(), PAPER_RC["figure.titlesize"])
    shared = contention_note(df)  # names the cluster profile where it says shared cores
    context = [p for p in _context(df)
               if not (shared and "cluster=" in shared and p.startswith("cluster="))]
    fig.suptitle(_two_line_title(title, width))
    fig.drawn_kinds = sorted(extras)  # saved into the PNG (DRAWN_KEY) for the captions
    legend_width = _chars_per_line(fig.get_figwidth(), PAPER_RC["legend.fontsize"])
    # not at a hyphen: a file name (gpu-h100-...-jax-runs.csv) is read whole
    footer = "\n".join([*textwrap.wrap("; ".join([shared, *context] if shared else context),
                                       legend_width, break_on_hyphens=False),
                         *textwrap.wrap(note, legend_width, break_on_hyphens=False)])
    _figure_legend(fig, extras, handles, footer, proxy_labels)
    _fit_height(fig)
    if path is not None:
        _save(fig, path)


#: The libraries a footer names the versions of (runs.csv ``versions``), as written there.
FOOTER_LIBRARIES = ("torch", "jax", "cuda", "rocm")


def provenance(df: pd.DataFrame) -> str:
    """The footer's words on when the runs ran and with what, from their records
    (``started_at``, ``versions``): ``ran 2026-11-26; torch 2.11.0+cu130, jax 0.11.2, cuda
    13.0`` (several dates as a range, several versions of a library joined by ``/``);
    ``run dates and library versions not recorded`` where no run has either."""
    started = df["started_at"].dropna().astype(str).str[:10] if "started_at" in df else []
    days = sorted(set(started))
    when = (f"ran {days[0]}" if len(days) == 1 else f"ran {days[0]} to {days[-1]}"
            if days else "")
    found: dict[str, set[str]] = {}
    texts = df["versions"].dropna().astype(str).unique() if "versions" in df else []
    for text in texts:
        for part in text.split(", "):
            name, _, version = part.partition(" ")
            if name in FOOTER_LIBRARIES and version:
                found.setdefault(name, set()).add(version)
    libraries = ", ".join(f"{name} {'/'.join(sorted(found[name]))}"
                          for name in FOOTER_LIBRARIES if name in found)
    said = "; ".join(p for p in (when, libraries) if p)
    if not said:
        return "run dates and library versions not recorded"
    return said if libraries else f"{said}; library versions not recorded"


def _file_names(text: str) -> str:
    """``text`` with each path of a .csv file shortened to the file's name (the report
    names the whole path): ``docs/data/x-runs.csv`` -> ``x-runs.csv``."""
    return re.sub(r"\S*/([^/\s,]+\.csv)", r"\1", text)


def _then(note: str, sentence: str) -> str:
    """``note`` (a figure's own sentences) and then ``sentence``, a full stop between."""
    return f"{note.rstrip().rstrip('.')}. {sentence}" if note else sentence


def above_ideal_label(df: pd.DataFrame) -> str:
    """The legend's words for the above-ideal square: ``"above ideal (efficiency > 100 %):
    host-bound baseline"``, each cause its points have (points.csv ``above_ideal_cause``:
    :func:`vitfsdp.analysis.verdict.above_ideal_cause`), noise where none is known."""
    try:
        causes = points_table(df)["above_ideal_cause"].dropna().unique()
    except (KeyError, ValueError):  # a frame without the columns a points table needs
        causes = []
    named = [c for c in ABOVE_IDEAL_CAUSES if c in set(causes)] or [ABOVE_IDEAL_CAUSES[-1]]
    return f"above ideal (efficiency > 100 %): {', '.join(named)}"


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
    again.

    Where the first guess is too short for the legend, notes and titles (a legend of many
    lines), matplotlib would leave every panel where it stood before the layout, at its
    default margins, which do not hold the y label and tick labels (they ran off the left
    edge, the legend over the panels): the height is doubled until the layout holds
    (:func:`_first_layout`), then set as above."""
    engine = fig.get_layout_engine()
    _first_layout(fig, engine)
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


#: The most times the first layout doubles a figure's height to make room for its panels.
MAX_LAYOUT_DOUBLINGS = 6
#: The words of matplotlib's warning that its constrained layout left the panels unplaced.
COLLAPSED = "axes sizes collapsed"


def _first_layout(fig: Figure, engine) -> None:
    """Run ``engine`` (constrained layout) on ``fig``, doubling the figure's height until it
    places the panels (at most :data:`MAX_LAYOUT_DOUBLINGS` times): where the panels would
    have no height left beside the legend, notes and titles, matplotlib warns that they
    "collapsed" and places nothing. Its other warnings are passed on."""
    for _ in range(MAX_LAYOUT_DOUBLINGS):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.execute(fig)
        collapsed = [w for w in caught if COLLAPSED in str(w.message)]
        for w in caught:
            if w not in collapsed:
                warnings.warn(w.message, w.category, stacklevel=2)
        if not collapsed:
            return
        fig.set_figheight(2 * fig.get_figheight())
    engine.execute(fig)  # still collapsed: matplotlib's own warning says so


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
