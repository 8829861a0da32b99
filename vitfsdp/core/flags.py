"""The one reading of a recorded boolean flag (a runs.csv, points.csv or ratio-table cell;
a record's value), shared by the analysis (:mod:`vitfsdp.analysis.verdict`) and the plan's
reading of exports (:mod:`vitfsdp.plan.exported`), which cannot import the analysis."""

from __future__ import annotations

import numbers

#: A flag's text as a reread CSV, or a record written by hand, holds it (case aside).
FLAG_WORDS = {"true": True, "false": False}


def read_flag(value: object) -> bool | None:
    """A recorded boolean flag as ``True`` or ``False``, ``None`` where it is not known:
    JSON's and numpy's booleans as they are, a number by its truth (``1``, ``1.0``: True;
    ``0``: False), the text ``"True"``/``"true"``/``"False"``/``"false"`` (case aside) as a
    reread CSV holds it; ``None`` for None, NaN, pandas' NA, ``""`` (an empty CSV cell) and
    any other value (``"1"`` included: no runs.csv writes a flag so)."""
    if value is None or type(value).__name__ == "NAType":
        return None
    if isinstance(value, str):
        return FLAG_WORDS.get(value.strip().lower())
    if type(value).__name__ in ("bool", "bool_", "bool8"):  # Python's and numpy's
        return bool(value)
    if isinstance(value, numbers.Number):
        return None if value != value else bool(value)  # NaN: not known
    return None
