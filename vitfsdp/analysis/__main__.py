"""``python -m vitfsdp.analysis SWEEP_DIR... [--report] [--out DIR] [--dataset-size N]``.

Reads the records of every run below the sweep dirs and writes into ``--out`` (default
``SWEEP_DIR/analysis`` for one sweep dir; required for several; ``--jobs N`` processes draw
the figures at the same time, by default one per figure up to the CPUs available):

- ``runs.csv``: every point's latest run, whatever its status (``collect_runs``);
- ``attempts.csv``: the earlier attempts a rerun of the sweep moved aside
  (``<run dir>/attempts/<n>/``, ``n`` the attempt counted from 0 as run.json's ``attempt``:
  :func:`vitfsdp.launch.resume.attempt_folder`), the same columns, ``attempt_of`` naming
  the point: kept as data, counted in no table or figure;
- ``scaling.csv``: completed runs with ideal ips, scaling efficiency, TFLOP/s and MFU
  (``scaling_table``);
- ``points.csv``: one row per point, repeats aggregated (median ips, min-max over
  repeats), with efficiency, TFLOP/s, MFU/HFU, memory (and the limit it ran under,
  ``memory_limit_gib``), the runs that resumed from a checkpoint (``runs_resumed``,
  ``attempts_differ``, as runs.csv's ``num_attempts``/``attempts_differ``) and cost per
  epoch (``points_table``);
- ``best.csv``: the fastest configuration per model and node count (``best_table``), and
  whether it wins beyond the spread;
- ``equivalence.csv``: points that compute the same thing under two names (FULL_SHARD and
  HYBRID_SHARD over the whole world ...), whether they agree within their spread
  (``equivalence_table``);
- ``failures.csv``: every run that did not complete, with why (one line) and its log
  (``failures_table``);
- ``prefetch.csv``: the prefetch x limit_all_gathers ablation;
- ``calibration.csv``: the plan's predictions against the measurements;
- ``framework_ratio.csv``: a row for every point both PyTorch and JAX ran, whatever their
  runs' status (the same model, strategy and node count, and the same world size, GPUs per
  node and cluster profile: a JAX run pairs only with PyTorch runs of its world): the
  JAX/PyTorch ips ratio where both sides completed runs, with its bounds
  (``ratio_low``/``ratio_high``), each side's completed and failed runs
  (``torch_runs``/``jax_runs``, ``torch_failed``/``jax_failed``), whether the two differ
  beyond their spread (``difference``; ``no result: jax failed (1 of 1 runs)`` where a side
  completed none), each side's device busy share, whether either was host-bound or noisy,
  the attention each ran, the PyTorch recipe the ratio is against (``torch_recipe``) and
  each side's final loss (``torch_loss``/``jax_loss``) (``framework_ratio_table``); a run
  at a point the other framework did not run at all has no row (the terminal and the
  report name them);
- ``reference.csv``: each point against the published figures of its setup (ORNL, PyCls:
  ``vitfsdp/reference/``): measured, published, ratio per device, or which settings differ
  (``vitfsdp.analysis.reference.reference_table``);
- ``recipe.csv``: a recipe ablation (a sweep over ``<recipe>`` and its ``<recipe>_<n>_<what>``
  presets): each step's images/s relative to the baseline (``recipe_table``);
- ``weak_scaling`` (with stars at the published images/s of matching points), ``memory``,
  ``loss`` (training loss against step, a line per point), ``tflops`` (TFLOP/s per GPU
  against GPUs, with the peak and MFU) and, with an ablation, ``prefetch`` and ``recipe``
  figures, PNG and SVG;

Every table is written, with its header only when it has no rows. A figure whose inputs (the
columns of the runs it reads, its loss curves, the drawing code) are those it was drawn from
in ``--out`` before is kept, not drawn again (``.figure_inputs.json`` records them), and a
run whose record files did not change is not read again (``.runs_cache.json``: its row),
nor a table whose values did not change written again (``.table_inputs.json``).
- with ``--report``: ``report.md`` (figures linked) and ``report.html`` (self-contained).

``python -m vitfsdp.analysis RUNS_CSV... --out DIR [--report]`` re-analyses ``runs.csv``
files an analysis wrote earlier (exports such as
``docs/data/gpu-h100-2026-11-26-sweep-runs.csv``) instead of records
(:func:`~vitfsdp.analysis.collect.read_runs_csv`): columns newer than an export are read as
missing, and ``rebuilt_from.txt``, the report's first section (and its provenance table) and
every figure caption say which files the analysis was rebuilt from (with their dates), which
columns they lacked and what could not be judged without them
(:func:`~vitfsdp.analysis.collect.absent_lines`); the loss figure draws only the runs whose
records are on this machine (a runs.csv holds no loss curves). A CSV that is not a runs.csv
is refused with one line naming what it lacks.

Prints a compact table of the results to stdout, a row per run (a row per point, with its
completed runs counted, above :data:`MAX_PRINTED_RUNS` runs), the JAX/PyTorch ratio table
where both frameworks ran a point, with the report's words on it
(``vitfsdp.analysis.report.framework_text``: how many ratios are results, the PyTorch recipe,
the hosts, what the two programs run differently, which completed runs of either framework
found no partner and so no row), and where a point matched a published
figure, how many did and the median measured / published ratio per device; logs go to
stderr. Exits with 2 and a one-line error when a sweep dir does not exist or holds no runs,
or a runs.csv is missing, empty or not a runs.csv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

from vitfsdp.analysis.collect import (
    RUNS_CACHE,
    absent_lines,
    collect_runs,
    export_date,
    is_runs_csv,
    read_runs_csv,
    replanned_line,
)
from vitfsdp.analysis.figures import (
    FIGURES,
    INPUTS_FILE,
    FigurePool,
    PendingFigures,
    figure_pool,
)
from vitfsdp.analysis.figures.finish import PREDICTED_NOTE_ATTR, REBUILT_ATTR
from vitfsdp.analysis.fingerprint import frame_hash
from vitfsdp.analysis.lines import contention_note, format_table
from vitfsdp.analysis.reference import one_device_apart, reference_summary
from vitfsdp.analysis.report import Section, framework_text, report_sections, write_report
from vitfsdp.analysis.tables import (
    IMAGENET_TRAIN_IMAGES,
    format_points,
    noise_lines,
    study_tables,
)
from vitfsdp.analysis.unended import unended_lines
from vitfsdp.provenance import command_line, exit_now
from vitfsdp.records import write_json_atomic

log = logging.getLogger("vitfsdp.analysis")

#: Up to this many runs the printed table has a row per run; above it, a row per point.
MAX_PRINTED_RUNS = 100


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The sweep dirs and the output dir (``SWEEP_DIR/analysis`` when there is one sweep)."""
    parser = argparse.ArgumentParser(
        prog="python -m vitfsdp.analysis",
        description="Collect the run records of sweeps into tables and weak-scaling figures.",
    )
    parser.add_argument(
        "sweep_dirs", nargs="+", type=Path, metavar="SWEEP_DIR",
        help="sweep output directory; runs are found below it by their run.json. Or a "
             "runs.csv an analysis wrote (a file): its rows are analysed again, columns "
             "newer than it read as missing (--out required)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="output directory (default: SWEEP_DIR/analysis for one sweep dir)",
    )  # fmt: skip
    parser.add_argument(
        "--report", action="store_true",
        help="also write report.md and report.html with every figure and table",
    )  # fmt: skip
    parser.add_argument(
        "--dataset-size", type=int, default=IMAGENET_TRAIN_IMAGES, metavar="N",
        help="images per epoch for the cost per epoch (default: ImageNet-1k train, "
             f"{IMAGENET_TRAIN_IMAGES:,})",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=None, metavar="N",
        help="processes drawing the figures at the same time (default: one per figure, at "
             "most the CPUs available; 1 draws them in this process)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs={args.jobs} must be at least 1")
    if args.dataset_size < 1:
        parser.error(f"--dataset-size={args.dataset_size} must be a positive number of images")
    csvs = [p for p in args.sweep_dirs if p.is_file() or p.suffix.lower() == ".csv"]
    args.runs_csv = bool(csvs)
    if csvs and len(csvs) < len(args.sweep_dirs):
        parser.error(f"{csvs[0]} is a runs.csv and "
                     f"{next(p for p in args.sweep_dirs if p not in csvs)} is not: pass "
                     "either sweep dirs or runs.csv files, in two analyses")
    if args.out is None:
        if csvs:
            parser.error(f"--out is required with a runs.csv ({csvs[0]}): the directory "
                         "the tables, figures and report are rebuilt into")
        if len(args.sweep_dirs) > 1:
            parser.error("--out is required with several sweep dirs")
        args.out = args.sweep_dirs[0] / "analysis"
    written = {(args.out / f"{name}.csv").resolve() for name in ("runs", "attempts")}
    for path in csvs:
        if path.resolve() in written:
            parser.error(f"--out {args.out} would write over {path}, which it reads: "
                         "rebuild into another directory")
    return args


#: Beside the tables of an analysis rebuilt from runs.csv files: where they come from
#: (:func:`~vitfsdp.analysis.collect.absent_lines`), a line each.
REBUILT_FILE = "rebuilt_from.txt"


def read_runs(args: argparse.Namespace,
              pool: FigurePool | None) -> tuple[pd.DataFrame, list[str]]:  # fmt: skip
    """Every run of ``args.sweep_dirs`` (its earlier attempts too, ``attempt_of`` set): from
    the records (:func:`collect_runs`, part of them read by ``pool``), or from runs.csv
    files (``args.runs_csv``: :func:`read_runs_csv`), with the lines saying so
    (:func:`absent_lines`; ``[]`` from records). Raises ValueError as those do."""
    if not args.runs_csv:
        try:
            return collect_runs(args.sweep_dirs, cache=args.out / RUNS_CACHE, pool=pool,
                                earlier_attempts=True), []
        except ValueError as e:
            raise ValueError(f"{e}{_exports_hint(args.sweep_dirs)}") from None
    every, absent = read_runs_csv(args.sweep_dirs)
    lines = absent_lines(absent, every)
    # every figure's footer says it too; those that draw predictions, whose plan they are
    every.attrs[REBUILT_ATTR] = lines[0]
    every.attrs[PREDICTED_NOTE_ATTR] = replanned_line(every, brief=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / REBUILT_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    for line in lines:
        log.info("%s", line)
    return every, lines


#: Beside the tables: a fingerprint of each table's values when it was written.
TABLES_FILE = ".table_inputs.json"


def write_tables(tables: dict[str, pd.DataFrame], out_dir: Path,
                 keep_unchanged: bool = False) -> dict[str, Path]:  # fmt: skip
    """Write each table as ``<name>.csv`` into ``out_dir``; an empty one as its header.

    With ``keep_unchanged``, a table whose values are those it was last written with (their
    fingerprint in :data:`TABLES_FILE`) and whose file is there is not written again.
    Returns each table's path, by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before = _read_record(out_dir / TABLES_FILE) if keep_unchanged else {}
    digests, paths, kept = {}, {}, []
    for name, table in tables.items():
        paths[name] = out_dir / f"{name}.csv"
        if keep_unchanged:
            digests[name] = hashlib.sha1(frame_hash(table)).hexdigest()
            if before.get(name) == digests[name] and paths[name].is_file():
                kept.append(name)
                continue
        table.to_csv(paths[name], index=False)
        log.info("wrote %s", paths[name])
    if kept:
        log.info("kept %d table(s) whose values did not change: %s", len(kept),
                 ", ".join(kept))
    if keep_unchanged and len(kept) < len(tables):
        write_json_atomic(out_dir / TABLES_FILE, digests)
    return paths


def _read_record(path: Path) -> dict:
    """A JSON object from ``path``; ``{}`` where there is none or it cannot be read."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def stage_line(done: str, started: float, next_step: str) -> str:
    """A progress line of the analysis: what is ``done``, the seconds since ``started``
    (``time.monotonic``), what comes next, e.g. ``read 27 run(s) (2.1 s); next:
    drawing 6 figure(s) while the tables are written``."""
    return f"{done} ({time.monotonic() - started:.1f} s); next: {next_step}"


def main(argv: list[str] | None = None) -> int:
    """Run the analysis; returns the exit code (0, or 2 for bad input)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    # a first analysis starts the figure processes at once: they read part of the records,
    # then draw; a later one (the figures' inputs recorded) starts them once it knows which
    # figures changed
    again = (args.out / INPUTS_FILE).is_file()
    started = time.monotonic()
    pool = None if again else figure_pool(args.jobs)
    try:
        try:
            every, rebuilt = read_runs(args, pool)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        attempts, df = (every[every["attempt_of"].notna()],
                        every[every["attempt_of"].isna()].reset_index(drop=True))
        pending = PendingFigures(df, args.out, names=tuple(FIGURES), pool=pool,
                                 keep_unchanged=True)  # drawn while the tables are made
        if again and len(pending.todo) > 1:
            pool = figure_pool(args.jobs, len(pending.todo))
            pending.attach(pool)
        log.info("%s", stage_line(f"read {len(df)} run(s)", started,
                                  f"drawing {len(pending.todo) + len(pending.futures)} "
                                  "figure(s) while the tables are written"))
        tables = study_tables(df, args.dataset_size)
        write_tables({**tables, "attempts": attempts}, args.out, keep_unchanged=True)
        if len(attempts):
            log.info("%d earlier attempt(s) of points that ran again (attempts.csv): not "
                     "counted in the tables and figures, which take each point's latest run",
                     len(attempts))
        log.info("%s", stage_line(f"{len(tables)} tables written", started,
                                  "waiting for the figures"))
        figures = pending.result()
        log.info("%s", stage_line(f"{len(figures)} figure(s) in place", started,
                                  "the report" if args.report else "the summary"))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    ratio = tables["framework_ratio"]
    unended = [] if args.runs_csv else unended_lines(args.sweep_dirs)
    if args.report:
        command = command_line(["python", "-m", "vitfsdp.analysis",
                                *(sys.argv[1:] if argv is None else argv)])
        sections = report_sections(tables, args.dataset_size,
                                   [] if args.runs_csv else args.sweep_dirs, args.out, command)
        # contention_note names other work beside the runs too: competition_text, the
        # runs it competed with, opens the report instead
        note = "; ".join(n for n in (contention_note(df), *unended) if n)
        if rebuilt:
            sections = _rebuilt_sections(sections, rebuilt)
            note = "; ".join(n for n in (note, rebuilt[0]) if n)
        write_report(sections, args.out, figures, note=note or None)
    if len(df) > MAX_PRINTED_RUNS:
        print(format_points(df, tables["points"]))
    else:
        print(format_table(df, tables["scaling"]))
    for line in [*noise_lines(tables), *unended, *rebuilt]:
        print(line)
    words = framework_text(ratio, df)  # the report's, and the runs that paired with nothing
    if not ratio.empty:
        print("\nJAX / PyTorch images/s:")
        print(ratio.dropna(axis=1, how="all")  # the busy shares, where nothing measured them
              .to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if words:
        print(words if len(ratio) else f"\n{words}")
    reference = tables["reference"]
    if len(reference) and (reference["compared"].astype(bool).any()
                           or not one_device_apart(reference).empty):
        print("\n" + reference_summary(reference))
    else:  # nothing to see beside the table: the why is in reference.csv
        log.info("%s", reference_summary(reference))
    return 0


def _exports_hint(sweep_dirs: list[Path]) -> str:
    """Where a sweep dir holds no runs but runs.csv exports (``docs/data``): the commands
    that analyse those, one per date in their names (:func:`export_date`: exports of two
    days read together would pool their runs of a point as repeats), shell-quoted, after
    ``"; "``; else ``""``."""
    exports = sorted(str(f) for d in sweep_dirs if d.is_dir() for f in d.glob("*.csv")
                     if is_runs_csv(f) and _has_rows(f))  # attempts.csv: often its header
    if not exports:
        return ""
    by_date: dict[str | None, list[str]] = {}
    dated = len({export_date(e) for e in exports} - {None}) > 1
    for export in exports:  # one date (or none named): one command, as they are one study
        by_date.setdefault(export_date(export) if dated else None, []).append(export)
    commands = [shlex.join(["python", "-m", "vitfsdp.analysis", *files, "--out",
                            f"DIR-{date}" if date and len(by_date) > 1 else "DIR"])
                for date, files in by_date.items()]
    return (f"; it holds runs.csv exports, analysed again by: {'; '.join(commands)}"
            + (" (one per date: exports of two days read together pool a point's runs as "
               "repeats)" if len(commands) > 1 else ""))


def _has_rows(path: Path) -> bool:
    """Whether the CSV at ``path`` holds a row below its header."""
    with path.open(encoding="utf-8", errors="replace") as f:
        return sum(1 for line, _ in zip(f, range(2), strict=False) if line.strip()) > 1


def _rebuilt_sections(sections: list[Section], rebuilt: list[str]) -> list[Section]:
    """The report's ``sections`` opened by one that says what it was rebuilt from and could
    not judge (``rebuilt``: :func:`absent_lines`), the first of them also a row of the
    provenance table."""
    first = Section("Rebuilt from a runs.csv export",
                    " ".join(f"{line[0].upper()}{line[1:]}." for line in rebuilt))
    for s in sections:
        if s.title == "Provenance" and s.table is not None:
            s.table = pd.concat([pd.DataFrame([("runs read from", rebuilt[0])],
                                              columns=s.table.columns), s.table],
                                ignore_index=True)
    return [first, *sections]


if __name__ == "__main__":
    # the figure processes have ended and every file is written: no teardown of the frames
    exit_now(main())
