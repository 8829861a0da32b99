"""vitfsdp.analysis.schema: the figures each measured column feeds are named once, on the
column, and name figures that exist."""

from __future__ import annotations

from vitfsdp.analysis.figures import FIGURES
from vitfsdp.analysis.schema import FIGURE_COLUMNS, FIGURE_NAMES, MEASURED_COLUMNS, RUN_COLUMNS


def test_every_figure_a_column_names_exists_and_reads_only_measured_columns():
    assert FIGURE_NAMES == tuple(FIGURES)
    named = {f for c in RUN_COLUMNS for f in c.figures}
    assert named <= set(FIGURES), named - set(FIGURES)
    for name, columns in FIGURE_COLUMNS.items():
        # a run column (settings, identity) is read by every figure: naming it is a mistake
        assert set(columns) <= set(MEASURED_COLUMNS), (name, set(columns) - set(MEASURED_COLUMNS))
    assert FIGURE_COLUMNS["weak_scaling"][:1] == ("ips",) and FIGURE_COLUMNS["loss"] == ()
