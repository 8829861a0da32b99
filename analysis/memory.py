"""Regenerate the peak-memory figure of sweeps from their records.

Usage (with the package installed, ``pip install -e .``)::

    python analysis/memory.py SWEEP_DIR [SWEEP_DIR ...]

For each sweep dir, writes ``memory.png`` and ``.svg`` into ``SWEEP_DIR/analysis``: peak
memory per GPU against nodes, FULL_SHARD and the other strategies as separate panels per
model, the device's memory as a black dotted line, min-over-ranks error bars, the plan's
prediction dotted and points skipped as infeasible at their predicted memory.
"""

from __future__ import annotations

import sys

from vitfsdp.analysis.figures import figure_script

if __name__ == "__main__":
    sys.exit(figure_script("memory", sys.argv[1:]))
