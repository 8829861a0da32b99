"""``python -m vitfsdp.analysis SWEEP_DIR... [--out DIR]``: tables and figures of sweeps.

Reads the records of every run below the sweep dirs and writes into ``--out`` (default
``SWEEP_DIR/analysis`` for one sweep dir; required for several):

- ``runs.csv``: every run, whatever its status (``collect_runs``);
- ``scaling.csv``: completed runs with ideal ips and scaling efficiency (``scaling_table``);
- ``weak_scaling.png`` and ``memory.png`` (PyTorch and JAX as line styles when both ran);
- ``framework_ratio.csv``, when both PyTorch and JAX runs completed: the JAX/PyTorch ips
  ratio per model, strategy and node count (``framework_ratio_table``).

Prints a compact table of the results to stdout; logs go to stderr. Exits with 2 and a
one-line error when a sweep dir does not exist or holds no runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pandas as pd

from vitfsdp.analysis.collect import (
    collect_runs,
    format_table,
    framework_ratio_table,
    scaling_table,
)
from vitfsdp.analysis.figures import write_figures

log = logging.getLogger("vitfsdp.analysis")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The sweep dirs and the output dir (``SWEEP_DIR/analysis`` when there is one sweep)."""
    parser = argparse.ArgumentParser(
        prog="python -m vitfsdp.analysis",
        description="Collect the run records of sweeps into tables and weak-scaling figures.",
    )
    parser.add_argument(
        "sweep_dirs", nargs="+", type=Path, metavar="SWEEP_DIR",
        help="sweep output directory; runs are found below it by their run.json",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="output directory (default: SWEEP_DIR/analysis for one sweep dir)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.out is None:
        if len(args.sweep_dirs) > 1:
            parser.error("--out is required with several sweep dirs")
        args.out = args.sweep_dirs[0] / "analysis"
    return args


def write_tables(df: pd.DataFrame, scaling: pd.DataFrame, out_dir: Path,
                 ratio: pd.DataFrame | None = None) -> dict[str, Path]:
    """Write ``runs.csv`` (every run) and ``scaling.csv`` (the scaling table) into
    ``out_dir``, and ``framework_ratio.csv`` when ``ratio`` has rows."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"runs": out_dir / "runs.csv", "scaling": out_dir / "scaling.csv"}
    df.to_csv(paths["runs"], index=False)
    scaling.to_csv(paths["scaling"], index=False)
    if ratio is not None and not ratio.empty:
        paths["framework_ratio"] = out_dir / "framework_ratio.csv"
        ratio.to_csv(paths["framework_ratio"], index=False)
    for path in paths.values():
        log.info("wrote %s", path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Run the analysis; returns the exit code (0, or 2 for bad input)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        df = collect_runs(args.sweep_dirs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    scaling = scaling_table(df)
    ratio = framework_ratio_table(df)
    write_tables(df, scaling, args.out, ratio)
    write_figures(df, args.out)
    print(format_table(df, scaling))
    if not ratio.empty:
        print("\nJAX / PyTorch images/s:")
        print(ratio.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
