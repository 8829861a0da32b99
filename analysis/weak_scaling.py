"""Regenerate the weak-scaling figures of sweeps from their records.

Usage (with the package installed, ``pip install -e .``)::

    python analysis/weak_scaling.py SWEEP_DIR [SWEEP_DIR ...]

For each sweep dir, writes ``weak_scaling.png`` (images/s against nodes, dashed ideal lines)
and ``memory.png`` (peak memory per GPU against nodes) into ``SWEEP_DIR/analysis``. For the
tables too, or to combine several sweeps into one figure, use
``python -m vitfsdp.analysis SWEEP_DIR... --out DIR``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from vitfsdp.analysis import collect_runs, write_figures


def main(sweep_dirs: list[str]) -> int:
    """Write both figures of each sweep dir; 2 on bad input (no such dir, no runs)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not sweep_dirs:
        print(f"usage: {sys.argv[0]} SWEEP_DIR [SWEEP_DIR ...]", file=sys.stderr)
        return 2
    try:
        runs = {sweep_dir: collect_runs(sweep_dir) for sweep_dir in sweep_dirs}
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for sweep_dir, df in runs.items():
        write_figures(df, Path(sweep_dir) / "analysis")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
