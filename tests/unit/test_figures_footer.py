"""A figure's footer says when its runs ran and with which libraries, from their records,
and its notes stay short: the PNG alone tells what it shows, without the notes crowding
out the panels (the long provenance is the report's)."""

from __future__ import annotations

import pytest

from tests.fake_records import write_sweep
from tests.unit.test_figures_single_device import H100
from vitfsdp.analysis import plot_loss, plot_memory, plot_weak_scaling
from vitfsdp.analysis.collect import absent_lines, read_runs_csv
from vitfsdp.analysis.figures import plot_efficiency
from vitfsdp.analysis.figures.finish import REBUILT_ATTR

#: The most of a figure's height its notes (under the panels and in the footer) may take
#: (a one-panel figure with 12 failed points: 0.19; 0.25 before).
MOST_NOTES = 0.22


def _footer(fig) -> str:
    return " ".join(fig.legends[0].get_title().get_text().split())


def _notes_share(fig) -> float:
    """The share of the figure's height its notes take: the not-completed notes under the
    panels and the footer over the legend, as drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    notes = [t for ax in fig.axes for t in ax.texts if t.get_text().startswith("not completed")]
    height = sum(t.get_window_extent(renderer).height for t in notes)
    height += fig.legends[0].get_title().get_window_extent(renderer).height
    return height / (fig.get_figheight() * fig.dpi)


def test_the_footer_says_when_and_with_what_the_runs_ran():
    """The H100 figures named no library version and no run date (only the export's file
    name held one): the footer now says both, from the runs' records; the export's path
    is shortened to its name (the report gives it whole)."""
    runs, absent = read_runs_csv(H100)
    runs.attrs[REBUILT_ATTR] = absent_lines(absent, runs)[0]
    for plot in (plot_weak_scaling, plot_memory):
        footer = _footer(plot(runs))
        assert "ran 2026-11-26; torch 2.11.0+cu130, jax 0.11.2, cuda 13.0" in footer
        assert "docs/data/" not in footer and "gpu-h100-2026-11-26-jax-runs.csv" in footer


@pytest.mark.parametrize("plot", [plot_weak_scaling, plot_efficiency, plot_loss])
def test_notes_take_a_fifth_of_the_figure_or_so(tmp_path, plot):
    """A panel with a failed repeat at each of its 12 points: its note listed six of them
    and the footer ran to five lines, the notes up to 35 % of the synthetic sample's
    figures (40 % of others); loss.png's footer named six. The notes now list three
    (failures.csv: every one), the footer is short, and the records without dates or
    versions say so."""
    ips = {(s, n): [100.0 * n, 101.0 * n, None]
           for s in ("DDP", "FULL_SHARD", "HYBRID_2GPU") for n in (1, 2, 4, 8)}
    fig = plot(write_sweep(tmp_path, ips))
    assert _notes_share(fig) <= MOST_NOTES
    note = " ".join(t.get_text() for t in fig.axes[0].texts).replace("\n", " ")
    assert "and 9 more points (failures.csv)" in (_footer(fig) if plot is plot_loss else note)
    assert "run dates and library versions not recorded" in _footer(fig)
