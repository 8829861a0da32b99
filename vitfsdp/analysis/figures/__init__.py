"""Figures of a weak-scaling study: images/s, its efficiency and peak memory per GPU against
node count.

Both figures take a :func:`vitfsdp.analysis.collect.collect_runs` frame (every run, whatever
its status) and draw one line per strategy (split by any varying config, see
:func:`vitfsdp.analysis.lines.line_columns`) and one panel per model. When PyTorch and JAX
runs are both present, the framework is the line style (:data:`.style.FRAMEWORK_STYLES`) and the
colour and marker are the rest of the line's identity, so each strategy looks the same in
both. Runs that did not complete are never dropped silently: they are drawn as an ``x`` at
the bottom of the panel in their line's colour and listed in a note under the axes.

Sized for papers: each panel is :data:`.style.PANEL_WIDTH_IN` (one column of a two-column paper)
wide, with 7-8 pt text (:data:`.style.PAPER_RC`), so a one-panel figure prints at 100 % in a column
and a two-panel figure across the page. Lines differ by marker as well as colour, and the
ideal, predicted and measured lines by dash style, so a greyscale print stays readable. The
legend is one per figure, below the panels, never over the data.

Figures are built on the Agg canvas without ``pyplot``, so no global state is touched and no
figure is left open; the functions return the :class:`~matplotlib.figure.Figure`.

The package holds one module per figure (:mod:`.weak_scaling`, :mod:`.efficiency`, :mod:`.memory`,
:mod:`.prefetch`, :mod:`.loss`, :mod:`.recipe`, :mod:`.tflops`), what their panels share
(:mod:`.style`: matplotlib, sizes, colours and markers; :mod:`.panels`: lines, marks, notes,
published figures, axes and titles; :mod:`.finish`: the title, legend, height and file) and
the writing of them all (:mod:`.write`: which figures there are, the pool of processes
drawing them, the record of what each was drawn from).
"""

from vitfsdp.analysis.figures.efficiency import plot_efficiency
from vitfsdp.analysis.figures.finish import DRAWN_KEY, PATCH_PROXIES, PROXIES
from vitfsdp.analysis.figures.loss import plot_loss
from vitfsdp.analysis.figures.memory import TINY_STATE, plot_memory
from vitfsdp.analysis.figures.prefetch import plot_prefetch
from vitfsdp.analysis.figures.recipe import plot_recipe
from vitfsdp.analysis.figures.style import DPI, MAX_NOTE_ITEMS, NOTHING_TO_PLOT, strategy_look
from vitfsdp.analysis.figures.tflops import plot_tflops
from vitfsdp.analysis.figures.weak_scaling import plot_weak_scaling
from vitfsdp.analysis.figures.write import (
    ALL_FIGURES,
    FIGURE_COLUMNS,
    FIGURES,
    INPUTS_FILE,
    MEASURED_COLUMNS,
    FigurePool,
    PendingFigures,
    figure_inputs,
    figure_pool,
    figure_script,
    figures_inputs,
    write_figures,
)

__all__ = [
    "ALL_FIGURES",
    "DPI",
    "DRAWN_KEY",
    "FIGURES",
    "FIGURE_COLUMNS",
    "INPUTS_FILE",
    "MAX_NOTE_ITEMS",
    "MEASURED_COLUMNS",
    "NOTHING_TO_PLOT",
    "PATCH_PROXIES",
    "PROXIES",
    "TINY_STATE",
    "FigurePool",
    "PendingFigures",
    "figure_inputs",
    "figure_pool",
    "figure_script",
    "figures_inputs",
    "plot_efficiency",
    "plot_loss",
    "plot_memory",
    "plot_prefetch",
    "plot_recipe",
    "plot_tflops",
    "plot_weak_scaling",
    "strategy_look",
    "write_figures",
]
