"""Recorded runs as the plan reads them: where a sweep's run directories are.

The plan's calibration (:mod:`vitfsdp.plan.calibrate`) and the analysis
(:mod:`vitfsdp.analysis.collect`) both start from the run directories below a sweep; the
search lives here, below both, so the analysis imports the plan and never the reverse.
"""

from __future__ import annotations

import os
from pathlib import Path

from vitfsdp.records import RUN_FILE


def find_run_dirs(sweep_dir: str | os.PathLike) -> list[Path]:
    """Every directory at or below ``sweep_dir`` that holds a ``run.json``, sorted.

    One directory listing per directory (``os.walk``), so tens of thousands of runs are
    found in well under a second.

    Raises:
        ValueError: ``sweep_dir`` does not exist, is not a directory, or holds no ``run.json``.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.exists():
        raise ValueError(f"sweep dir {sweep_dir} does not exist; pass a sweep's output directory")
    if not sweep_dir.is_dir():
        raise ValueError(f"sweep dir {sweep_dir} is not a directory")
    # sorted as paths sort (component by component), on the text: no Path per comparison
    found = sorted((d for d, _, files in os.walk(sweep_dir) if RUN_FILE in files),
                   key=lambda d: d.split(os.sep))
    run_dirs = [Path(d) for d in found]
    if not run_dirs:
        raise ValueError(f"sweep dir {sweep_dir} holds no {RUN_FILE} (no runs below it)")
    return run_dirs
