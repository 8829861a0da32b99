"""One reading of a boolean flag cell (verdict.read_flag) behind every reader the analysis
has: the verdicts' host-bound and contended flags, lines.flag_column (host_other_windows,
attempts_differ in the resumed text) and points.csv's attempts_differ."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vitfsdp.analysis.lines import flag_column
from vitfsdp.analysis.tables import _resumed_flags, figures_contended
from vitfsdp.analysis.verdict import HOST_BOUND, above_ideal_cause, ranked, read_flag

#: Each cell as a record or a reread CSV may hold it, and what it reads as: None where
#: not known.
CASES = [(True, True), (False, False), (1, True), (0, False), (1.0, True), (0.0, False),
         ("True", True), ("true", True), ("False", False), ("false", False), ("", None),
         (pd.NA, None), (None, None), (float("nan"), None), (np.nan, None),
         (np.bool_(True), True), (np.bool_(False), False), (np.int64(1), True),
         ("auto", None)]


@pytest.mark.parametrize(("cell", "expected"), CASES)
def test_read_flag(cell: object, expected: bool | None) -> None:
    assert read_flag(cell) is expected


@pytest.mark.parametrize(("cell", "expected"), CASES)
def test_every_reader_agrees(cell: object, expected: bool | None) -> None:
    """flag_column and the verdicts read a cell True exactly where read_flag does (not
    known counts as not True there); points.csv's attempts_differ keeps not known apart."""
    frame = pd.DataFrame({"flag": pd.Series([cell], dtype=object),
                          "attempts_differ": pd.Series([cell], dtype=object),
                          "num_attempts": [2]})
    assert bool(flag_column(frame, "flag").iloc[0]) is (expected is True)
    assert _resumed_flags(frame)["differ"].iloc[0] is expected
    assert ranked("beyond the spread", cell, 2.0).startswith(HOST_BOUND) is (expected is True)
    assert (above_ideal_cause(cell, None, 3) == "host-bound baseline") is (expected is True)


@pytest.mark.parametrize(("cell", "expected"), CASES)
def test_figures_contended_falls_back_only_where_not_known(cell: object,
                                                          expected: bool | None) -> None:
    """A points row's figures_contended as read (``"False"`` from a reread CSV is False, not
    a non-empty string's truth); where not known, whether any run was contended."""
    row = pd.Series({"figures_contended": cell, "runs_contended": 2})
    assert figures_contended(row) is (True if expected is None else expected)


def test_flag_column_of_a_frame_without_the_column() -> None:
    assert not flag_column(pd.DataFrame({"a": [1, 2]}), "flag").any()


def test_the_plans_reading_of_an_export_reads_flags_as_the_analysis() -> None:
    """exported._flag read "1" true and "TRUE" false where read_flag reads None and True:
    one reader (vitfsdp.core.flags) behind both, and runs.csv's text cells (collect)."""
    from vitfsdp.analysis.collect import _flag as text_cell
    from vitfsdp.core.flags import read_flag as core_read_flag
    from vitfsdp.plan.exported import _flag

    assert read_flag is core_read_flag
    for cell in ("TRUE", "true", "False", 1, 0.0, True, float("nan"), "", None):
        expected = read_flag(cell)
        word = {True: "true", False: "false", None: "null"}[expected]
        assert _flag({"kernels.compile": cell}, "kernels.compile", None) == word, cell
    # text that is no flag ("1": no runs.csv writes one so) is refused, naming the cell
    # (2063548), where the analysis reads it as not known
    assert read_flag("1") is None
    with pytest.raises(ValueError, match=r"kernels\.compile='1' in the row is not a flag"):
        _flag({"kernels.compile": "1"}, "kernels.compile", None)
        if isinstance(cell, str) and expected is not None:
            assert text_cell(cell) is expected
