"""Analysis of sweep records: collect runs into tables, then draw the study's figures.

``python -m vitfsdp.analysis SWEEP_DIR... [--report]`` writes the tables (CSV), the figures
(PNG and SVG) and, with ``--report``, ``report.md`` and ``report.html`` (see ``__main__``);
the functions below do the same piece by piece::

    df = collect_runs(["multirun/2024-06-01/12-00-00"])   # one row per run, every status
    scaling = scaling_table(df)                            # ideal ips and scaling efficiency
    points = points_table(df)                              # repeats aggregated, cost/epoch
    best_table(points); failures_table(df); prefetch_table(points); calibration_table(df)
    plot_weak_scaling(df, "weak_scaling.png")
    plot_memory(df, "memory.svg")
    plot_prefetch(df, "prefetch.png")                      # None without an ablation
    plot_loss(df, "loss.png")                              # loss against step per point
    loss_curves(df)                                        # run_dir, step, loss
    framework_ratio_table(df)                              # JAX / PyTorch ips per point
    reference_table(df)                                    # points against published figures
    recipe_table(df); plot_recipe(df, "recipe.png")        # a recipe ablation
    plot_tflops(df, "tflops.png")                          # TFLOP/s per GPU, peak, MFU
    tables = study_tables(df)                              # all of them by file stem
"""

from vitfsdp.analysis.collect import collect_runs, find_run_dirs
from vitfsdp.analysis.figures import (
    plot_loss,
    plot_memory,
    plot_prefetch,
    plot_recipe,
    plot_tflops,
    plot_weak_scaling,
    write_figures,
)
from vitfsdp.analysis.lines import (
    contention_note,
    format_table,
    framework_ratio_table,
    line_columns,
    scaling_table,
)
from vitfsdp.analysis.recipe import recipe_table
from vitfsdp.analysis.reference import published, reference_table
from vitfsdp.analysis.rows import loss_curves
from vitfsdp.analysis.tables import (
    IMAGENET_TRAIN_IMAGES,
    best_table,
    calibration_table,
    failures_table,
    points_table,
    prefetch_table,
    study_tables,
)

__all__ = [
    "IMAGENET_TRAIN_IMAGES",
    "best_table",
    "calibration_table",
    "collect_runs",
    "contention_note",
    "failures_table",
    "find_run_dirs",
    "format_table",
    "framework_ratio_table",
    "line_columns",
    "loss_curves",
    "plot_loss",
    "plot_memory",
    "plot_prefetch",
    "plot_recipe",
    "plot_tflops",
    "plot_weak_scaling",
    "points_table",
    "prefetch_table",
    "published",
    "recipe_table",
    "reference_table",
    "scaling_table",
    "study_tables",
    "write_figures",
]
