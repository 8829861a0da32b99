"""How long ``python -m vitfsdp.analysis`` takes for 100, 1,000 and 10,000 runs.

    python analysis/bench_analysis.py [--runs 100,1000,10000] [--keep DIR] [--report] [--jobs N]

Writes a synthetic study in the real record format (vitfsdp.analysis.synthetic: 192 points,
repeated, ~5 % failing) into a temporary directory (or --keep DIR, to look at the figures
afterwards: DIR/analysis_<N>/), runs the analysis on the first N runs for each N in a fresh
process and prints N, the wall-clock and CPU seconds (CPU: what other load on the machine
does not inflate) and the wall milliseconds per run, then the pixel size of each PNG figure of
the largest N (their size must not grow with the number of runs).
"""

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from vitfsdp.analysis.synthetic import png_sizes, time_analysis, write_synthetic_sweep

log = logging.getLogger("bench_analysis")


def main(argv: list[str] | None = None) -> int:
    """Write the runs, time each analysis, print the table; 2 on bad arguments."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python analysis/bench_analysis.py")
    parser.add_argument("--runs", default="100,1000,10000",
                        help="increasing run counts, comma-separated (default 100,1000,10000)")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="write the runs and outputs here and keep them")
    parser.add_argument("--report", action="store_true", help="time --report as well")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="the analysis's --jobs (default: its own default)")
    args = parser.parse_args(argv)
    try:
        counts = tuple(int(n) for n in args.runs.split(","))
    except ValueError:
        parser.error(f"--runs={args.runs} must be comma-separated integers, e.g. 100,1000")
    with tempfile.TemporaryDirectory(prefix="bench_analysis_") as tmp:
        root = args.keep or Path(tmp)
        try:
            parts = write_synthetic_sweep(root, counts)
        except ValueError as e:
            parser.error(str(e))
        print(f"{'runs':>8}  {'wall s':>8}  {'CPU s':>8}  {'ms/run':>7}")
        for i, n in enumerate(counts):
            wall, cpu = time_analysis(parts[:i + 1], root / f"analysis_{n}", args.report,
                                      args.jobs)
            print(f"{n:>8,}  {wall:>8.2f}  {cpu:>8.2f}  {1000 * wall / n:>7.2f}", flush=True)
        print(f"figures at {counts[-1]:,} runs:")
        for name, (width, height) in png_sizes(root / f"analysis_{counts[-1]}").items():
            print(f"  {name + '.png':<18} {width} x {height} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())
