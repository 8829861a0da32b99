"""Regenerate the prefetch-ablation figure of sweeps from their records.

Usage (with the package installed, ``pip install -e .``)::

    python analysis/prefetch_ablation.py SWEEP_DIR [SWEEP_DIR ...]

For each sweep dir that holds the ablation (for example
``python -m vitfsdp.sweep -m strategy=FULL_SHARD,HYBRID_8GPU
strategy.backward_prefetch=BACKWARD_PRE,BACKWARD_POST,NONE
strategy.limit_all_gathers=true,false nodes=4``), writes ``prefetch.png`` and ``.svg`` into
``SWEEP_DIR/analysis``: grouped bars of images/s, one group per strategy, one panel per
model at its largest ablated node count. Nothing is written for a sweep without one.
"""

from __future__ import annotations

import sys

from vitfsdp.analysis.figures import figure_script

if __name__ == "__main__":
    sys.exit(figure_script("prefetch", sys.argv[1:]))
