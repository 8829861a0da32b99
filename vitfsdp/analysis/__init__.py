"""Analysis of sweep records: collect runs into tables, then draw the study's figures.

``python -m vitfsdp.analysis SWEEP_DIR...`` writes ``runs.csv``, ``scaling.csv``,
``weak_scaling.png``, ``memory.png`` and, with PyTorch and JAX runs, ``framework_ratio.csv``;
the functions below do the same piece by piece::

    df = collect_runs(["multirun/2024-06-01/12-00-00"])   # one row per run, every status
    scaling = scaling_table(df)                            # ideal ips and scaling efficiency
    plot_weak_scaling(df, "weak_scaling.png")
    plot_memory(df, "memory.png")
    framework_ratio_table(df)                              # JAX / PyTorch ips per point
"""

from vitfsdp.analysis.collect import (
    collect_runs,
    find_run_dirs,
    format_table,
    framework_ratio_table,
    line_columns,
    scaling_table,
)
from vitfsdp.analysis.figures import plot_memory, plot_weak_scaling, write_figures

__all__ = [
    "collect_runs",
    "find_run_dirs",
    "format_table",
    "framework_ratio_table",
    "line_columns",
    "plot_memory",
    "plot_weak_scaling",
    "scaling_table",
    "write_figures",
]
