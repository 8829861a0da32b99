"""Regenerate the whole study of a sweep from its records: every table, figure and the report.

Usage (with the package installed, ``pip install -e .``)::

    python analysis/report.py SWEEP_DIR [SWEEP_DIR ...] [--out DIR] [--dataset-size N]

The same as ``python -m vitfsdp.analysis ... --report``: CSV tables, PNG and SVG figures,
``report.md`` (figures linked) and ``report.html`` (self-contained) in ``SWEEP_DIR/analysis``
or ``--out``.
"""

from __future__ import annotations

import sys

from vitfsdp.analysis.__main__ import main

if __name__ == "__main__":
    sys.exit(main([*sys.argv[1:], "--report"]))
