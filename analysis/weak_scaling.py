"""Regenerate the weak-scaling figure of sweeps from their records.

Usage (with the package installed, ``pip install -e .``)::

    python analysis/weak_scaling.py SWEEP_DIR [SWEEP_DIR ...]

For each sweep dir, writes ``weak_scaling.png`` and ``.svg`` into ``SWEEP_DIR/analysis``:
global images/s against nodes, one panel per model, a line per strategy with dashed ideal
(linear) lines, the plan's predicted ips dotted, runs that did not complete marked. For
every figure and table at once, or to combine several sweeps into one figure, use
``python -m vitfsdp.analysis SWEEP_DIR... [--report] --out DIR``.
"""

from __future__ import annotations

import sys

from vitfsdp.analysis.figures import figure_script

if __name__ == "__main__":
    sys.exit(figure_script("weak_scaling", sys.argv[1:]))
