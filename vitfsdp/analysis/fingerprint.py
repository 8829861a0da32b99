"""What the analysis' outputs are made from, as fingerprints that change when it does: the
code (:func:`code_fingerprint`) and a frame's values (:func:`frame_hash`).

The rows :func:`~vitfsdp.analysis.collect.collect_runs` keeps (its ``cache``) and the
figures :class:`~vitfsdp.analysis.figures.PendingFigures` keeps are both kept only while
the code's fingerprint is the one they were made with.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from pathlib import Path

import pandas as pd

#: The package's directory (``vitfsdp``).
PACKAGE_DIR = Path(__file__).resolve().parents[1]


@functools.cache
def code_fingerprint() -> str:
    """The code the analysis runs, as a SHA-1 (hex): the path (relative to the package),
    size and modification time of every Python file of the package (the records' reading,
    the plan's predictions, the figures) and of the published reference data
    (``vitfsdp/reference``), and pandas' and matplotlib's versions. Anything made by
    another version of the code (a kept row, a kept figure) is made again."""
    files = [*sorted(PACKAGE_DIR.rglob("*.py")), *sorted((PACKAGE_DIR / "reference").glob("*"))]
    stats = [(str(f.relative_to(PACKAGE_DIR)), f.stat().st_size, f.stat().st_mtime_ns)
             for f in dict.fromkeys(files) if f.is_file()]
    versions = (pd.__version__, importlib.metadata.version("matplotlib"))
    return hashlib.sha1(repr((stats, versions)).encode()).hexdigest()


def frame_hash(frame: pd.DataFrame) -> bytes:
    """The values of ``frame`` row by row, as bytes that change when any value, row or row
    order does (pandas' per-row hashes, 8 bytes a row; the index left out), preceded by
    its column names; object columns of values pandas cannot hash are hashed as text. A
    frame of no columns is its row count (pandas 2 cannot hash one: ``ValueError``)."""
    if frame.shape[1] == 0:
        return repr(([], len(frame))).encode()
    try:
        rows = pd.util.hash_pandas_object(frame, index=False)
    except TypeError:  # a value pandas cannot hash as it is (a list, a dict)
        rows = pd.util.hash_pandas_object(frame.astype(str), index=False)
    return repr(list(frame.columns)).encode() + rows.to_numpy().tobytes()
