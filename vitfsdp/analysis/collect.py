"""Collect run records into a table: one row per run directory found below the sweep
directories (:func:`collect_runs`), whatever its status; or read such a table back from the
``runs.csv`` an analysis wrote (:func:`read_runs_csv`), columns newer than it added as missing.

Reads only records (``run.json`` and ``summary.json``, see :mod:`vitfsdp.records`), never
stdout. Every run directory found becomes a row (:func:`vitfsdp.analysis.rows.run_row`), so
a point that ran out of memory or timed out stays visible next to the ones that completed.
The rows of runs whose records did not change are kept from the last collection
(:data:`RUNS_CACHE`), and a pool's processes may read part of the others beside this one.
The columns: :mod:`vitfsdp.analysis.schema`; lines, labels and the weak-scaling table of
the frame: :mod:`vitfsdp.analysis.lines`.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import pandas as pd

from vitfsdp.analysis.fingerprint import code_fingerprint
from vitfsdp.analysis.lines import VARIANT_COLUMNS, _sort_key
from vitfsdp.analysis.rows import _LOSS_CURVES, LOG_FILES, run_row
from vitfsdp.analysis.schema import (
    COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    PRED_COLUMNS,
    RUN_COLUMNS,
    TEXT,
)
from vitfsdp.analysis.workshare import WorkShare
from vitfsdp.core.flags import read_flag
from vitfsdp.core.layout import ATTEMPTS_DIR, HOST_FILE, NETWORK_FILE
from vitfsdp.launch.slurm import written_not_run
from vitfsdp.plan import mem_metric
from vitfsdp.plan.exported import predicted_columns
from vitfsdp.plan.probed import PROBE_FILE
from vitfsdp.plan.recorded import find_run_dirs
from vitfsdp.records import (
    METRICS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    write_text_atomic,
)

log = logging.getLogger(__name__)






def _run_dirs(sweep_dir: Path) -> list[Path]:
    """:func:`find_run_dirs`, whose error, where ``sweep_dir`` holds job scripts
    ``--scripts-only`` wrote and no run, counts them and names the command that submits
    them (:func:`vitfsdp.launch.slurm.written_not_run`).

    Raises:
        ValueError: as :func:`find_run_dirs`.
    """
    try:
        return find_run_dirs(sweep_dir)
    except ValueError:
        if written := written_not_run(sweep_dir):
            raise ValueError(written) from None
        raise


def collect_runs(sweep_dirs: str | os.PathLike | Iterable[str | os.PathLike],
                 cache: str | os.PathLike | None = None,
                 pool: Executor | None = None,
                 earlier_attempts: bool = False) -> pd.DataFrame:  # fmt: skip
    """One row per run directory found below ``sweep_dirs``, whatever its status: each
    point's latest run, and with ``earlier_attempts`` also the earlier attempts a rerun of
    the sweep moved aside (``<run dir>/attempts/<n>/``; their ``attempt_of`` names the
    point's run directory). Tables and figures count a point's latest run only: an attempt
    that a rerun superseded is not one of its repeats.

    Args:
        sweep_dirs: one sweep directory or several; run directories are found anywhere below
            them by their ``run.json``.
        cache: a file (:data:`RUNS_CACHE` in the analysis directory) holding the rows read
            last time, each with the size and modification time of the records it was read
            from: a run whose record files (and the package's code) did not change since is
            not read again; the file is rewritten with what was read. ``None``: every run
            is read.
        pool: processes that read part of the runs beside this one (the analysis's figure
            processes, before they draw: :func:`vitfsdp.analysis.figures.figure_pool`), a
            part of :data:`READ_CHUNK` runs at a time; ``None`` reads every run here. The
            rows are the same either way.

    Returns:
        A DataFrame with the columns of
        :data:`~vitfsdp.analysis.schema.COLUMNS`, sorted by model, strategy, nodes.
        ``ips`` is global images/s, ``ips_per_gpu`` per GPU, memory in GiB; ``peak_mem_gib``
        is the peak allocated GPU memory, or the ranks' peak resident memory on CPU runs
        (``peak_mem_kind`` says which: ``"allocated"`` or ``"rss"``). Runs that did not
        complete keep their row with ``NaN`` figures, their ``reason`` on one line (the full
        text and traceback: summary.json and the run's ``log``) and what they reached before
        failing (``ips_reached``: median of the measured windows, else the last window;
        ``peak_mem_reached_gib``). A run with ``run.json`` but no ``summary.json`` has status
        ``running`` (if ``run.json`` says so) or ``failed``. ``cluster`` is the profile;
        ``shared_cores`` says ``"8 ranks on 2 cores"`` where CPU ranks of one host
        (``ranks_per_host``: the whole world on the ``local`` and ``virtual`` profiles) were
        more than its cores (``host_cpus``): not a hardware measurement.
        ``state_params_gib``, ``state_grads_gib`` and ``state_optimizer_gib`` are the model
        state a rank holds, counted from its local shards
        (:data:`~vitfsdp.analysis.rows.STATE_COLUMNS`; ``NaN`` in records older than them);
        ``sent_gb_per_node_max`` and ``sent_gb_total`` what the nodes sent over an emulated
        link (:data:`~vitfsdp.analysis.rows.NETWORK_COLUMNS`); ``num_classes`` the
        classifier's classes (chance-level loss: ln of it).

    Raises:
        ValueError: a sweep dir does not exist or holds no ``run.json``.
    """
    if isinstance(sweep_dirs, (str, os.PathLike)):
        sweep_dirs = [sweep_dirs]
    run_dirs, probes = [], {}
    for s in sweep_dirs:
        probe = _sweep_probe(s)
        for d in _run_dirs(s):
            run_dirs.append(d)
            probes.setdefault(d, probe)
    if not run_dirs:
        raise ValueError("no sweep dir given; pass at least one SWEEP_DIR")
    _LOSS_CURVES.clear()
    unique = list(dict.fromkeys(run_dirs))
    if cache is None:
        rows = [row for row, _ in _read_runs(unique, probes, pool)]
    else:
        rows = _cached_rows(unique, probes, Path(cache), pool)
    df = _typed(pd.DataFrame(rows, columns=list(COLUMNS)))
    df["attempt_of"] = _attempt_of(df["run_dir"])
    if not earlier_attempts:
        df = df[df["attempt_of"].isna()]
    df = _sorted(df)
    log.info("collected %d runs from %d sweep dir(s)%s", len(df), len(sweep_dirs),
             "" if earlier_attempts or len(unique) == len(df) else
             f" ({len(unique) - len(df)} earlier attempt(s) of points that ran again left out)")
    return df.reset_index(drop=True)


def _attempt_of(run_dirs: pd.Series) -> pd.Series:
    """runs.csv ``attempt_of`` of each run directory: the point's directory where it is an
    earlier attempt (``<point>/attempts/<n>``), else NaN."""
    return run_dirs.astype(str).str.extract(
        rf"^(.*)[/\\]{ATTEMPTS_DIR}[/\\]\d+$", expand=False)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` in runs.csv order: model, strategy, nodes, the variants, repeat, run dir."""
    by = ["model", "strategy", "nodes", *VARIANT_COLUMNS, "repeat", "run_dir"]
    return df.sort_values(by, na_position="last", kind="stable", key=_sort_key)


#: The columns a CSV must have to be read as a runs.csv (:func:`read_runs_csv`): which run,
#: how it ended, its point and what it measured; every runs.csv the analysis wrote has them.
RUNS_CSV_KEYS = ("run_dir", "status", "model", "strategy", "nodes", "ips")
#: What the report cannot judge where a runs.csv lacks a column (:func:`absent_lines`).
NOT_JUDGED = {
    "device_busy_frac": "no point is judged host-bound or not",
    "host_other_cpus": "no run is judged competed with by other work on its host",
    "num_attempts": "no run is known to have resumed from a checkpoint",
}
#: What a missing value of a column of each source means (``schema.SOURCES``' keys).
MISSING_MEANS = {"measured": "not measured", "predicted": "not recorded",
                 "provenance": "not recorded", "outcome": "not recorded"}


def read_runs_csv(paths: Iterable[str | os.PathLike]) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """The runs of ``runs.csv`` files an analysis wrote earlier (an export such as
    ``docs/data/gpu-h100-2026-11-26-sweep-runs.csv``), as :func:`collect_runs` would have
    read them from the records: the columns of :data:`~vitfsdp.analysis.schema.COLUMNS`
    in order, typed alike (text and flags as their strings, ``True``/``False``, ``None``),
    sorted alike. A column the file lacks (one newer than the export) is added as missing
    (``None`` for text, else ``NaN``: an integer column too, as floats, as is one with no
    value at all); ``attempt_of``, where absent, is derived from ``run_dir`` as collect
    derives it. Columns this code does not know are left out (logged). A run directory in
    two files keeps its first row. The runs' loss curves are not in a runs.csv: they are
    read from the ``metrics.jsonl`` of the runs whose directories are here, and the others
    have none (:func:`loss_curves_here`). The prediction columns (``pred_*``) are this
    checkout's plan, recomputed from each row's settings
    (:func:`vitfsdp.plan.exported.predicted_columns`), never the file's (written by the plan
    of its day); a row that cannot be composed has them empty, and the frame's
    ``attrs[REPLANNED_ATTR]`` counts both (:func:`replanned_line`).

    Returns:
        The frame (one row per run, every status) and, by file as given, the columns it
        lacked (``attempt_of`` not counted), in runs.csv order: a column of
        :data:`NOT_JUDGED` with no value in any row counts as lacked too (a runs.csv rebuilt
        from an export holds it empty), so a second rebuild says what the first did.

    Raises:
        ValueError: a file is missing or unreadable, has no rows, or is not a runs.csv
            (lacks a column of :data:`RUNS_CSV_KEYS`): one line naming the file and what
            it lacks.
    """
    frames, absent = [], {}
    for path in map(str, paths):
        frame = _read_csv(path)
        # missing, or (a runs.csv this code rebuilt from an export) present and empty
        # where its emptiness means a judgement cannot be made (NOT_JUDGED)
        absent[path] = [c for c in COLUMNS if c != "attempt_of" and (
            c not in frame or (c in NOT_JUDGED and frame[c].isna().all()))]
        extra = [c for c in frame.columns if c not in COLUMNS]
        if extra:
            log.warning("%s: left out %d column(s) this code does not know: %s", path,
                        len(extra), ", ".join(extra))
        frames.append(frame.reindex(columns=list(COLUMNS)))
    if not frames:
        raise ValueError("no runs.csv given; pass at least one RUNS_CSV")
    _LOSS_CURVES.clear()  # no curve of an earlier analysis in this process drawn here
    df = pd.concat(frames, ignore_index=True)
    twice = df["run_dir"].notna() & df["run_dir"].duplicated()
    if twice.any():
        log.warning("%d run(s) in more than one runs.csv (e.g. %s): the first file's row "
                    "kept", int(twice.sum()), df.loc[twice, "run_dir"].iloc[0])
        df = df[~twice]
    df = _replanned(_sorted(_as_collected(df, absent)).reset_index(drop=True))
    for run_dir in df["run_dir"].dropna().astype(str):
        if not (Path(run_dir) / METRICS_FILE).is_file():
            _LOSS_CURVES[run_dir] = []  # the records are elsewhere: no curve, no warning
    log.info("read %d runs from %d runs.csv file(s)", len(df), len(frames))
    return df, absent


#: The ``DataFrame.attrs`` key of :func:`read_runs_csv`'s frame counting its predictions:
#: ``{"runs": n, "uncomposed": k, "sources": {pred_source: runs}}``.
REPLANNED_ATTR = "replanned"


def _replanned(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``pred_*`` columns this checkout's plan's
    (:func:`~vitfsdp.plan.exported.predicted_columns`; empty where a row cannot be composed),
    counted in ``attrs[REPLANNED_ATTR]``."""
    pred, failed = predicted_columns(df)
    df = df.copy()
    for column in pred.columns:
        df[column] = pred[column]
    if failed:
        log.warning("%d run(s) of the runs.csv could not be composed into a point, their "
                    "predictions left empty: e.g. %s", len(failed), next(iter(failed.values())))
    df.attrs[REPLANNED_ATTR] = {
        "runs": len(df), "uncomposed": len(failed),
        "sources": df["pred_source"].dropna().value_counts().to_dict()}
    return df


def replanned_line(runs: pd.DataFrame, brief: bool = False) -> str:
    """The line an analysis rebuilt from exports says of its predictions (``runs``: a
    :func:`read_runs_csv` frame): this checkout's plan recomputed from the export's
    settings, on which profile, and how many rows could not be composed (predictions left
    empty, not the export's); ``brief``: the short form a figure's footer adds (the
    profiles, and the count of rows not composed). ``""`` where ``runs`` was not read by it."""
    counted = runs.attrs.get(REPLANNED_ATTR)
    if not counted:
        return ""
    n = counted["uncomposed"]
    profiles = ", ".join(sorted({s.split(" ")[0] for s in counted["sources"]}))
    if brief:
        return ("predicted: this checkout's plan"
                + (f" ({profiles})" if profiles else "")
                + ", recomputed from the export's settings"
                + (f" (none for the {n} of {counted['runs']} run(s) that could not be "
                   "composed)" if n else ""))
    sources = ", ".join(f"{s} for {k} run{'s' if k > 1 else ''}"
                        for s, k in counted["sources"].items())
    line = ("the predictions (pred_*) are this checkout's plan (python -m vitfsdp.plan) "
            "recomputed from the export's settings, not the export's own (the plan of its "
            "day)" + (f": {sources}" if sources else ""))
    return line + (f"; {n} of {counted['runs']} run(s) could not be composed into a point: "
                   "their predictions left empty (the reason: the log)" if n else
                   "; every run composed")


def _as_collected(df: pd.DataFrame, absent: dict[str, list[str]]) -> pd.DataFrame:
    """The rows of runs.csv files (every column of COLUMNS) typed as :func:`collect_runs`
    types them: text cells as :func:`_flag` reads them, ``attempt_of`` derived where absent,
    numbers as :func:`_typed`; an integer column an export lacked, or left empty (a
    runs.csv rebuilt from one), stays floats (NaN): Int64's NA is no number to compare
    (tables' ``num_attempts > 1``)."""
    text = [c.name for c in RUN_COLUMNS if c.dtype == TEXT]
    df[text] = df[text].astype(object).map(_flag)
    derived = df["attempt_of"].isna()
    df.loc[derived, "attempt_of"] = _attempt_of(df.loc[derived, "run_dir"])
    df["attempt_of"] = df["attempt_of"].astype(object).where(df["attempt_of"].notna(), None)
    df = _typed(df)
    unknown = [c for c in INT_COLUMNS
               if df[c].isna().all() or any(c in lacks for lacks in absent.values())]
    df[unknown] = df[unknown].astype("float64")
    return _jax_pool_as_limit(df)


def _jax_pool_as_limit(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of JAX runs on a GPU exported before ``memory_limit_gib`` read as records are
    now (:func:`vitfsdp.analysis.rows.memory_limit`): their ``device_memory_gib`` is XLA's
    pool (the trainer records ``bytes_limit``), so it becomes their ``memory_limit_gib``,
    their device memory unknown, and their ``pred_mem_metric`` the one rule's
    (:func:`vitfsdp.plan.mem_metric`: XLA's peak in use)."""
    jax_gpu = ((df["framework"] == "jax") & df["device_type"].notna()
               & (df["device_type"] != "cpu"))
    old = jax_gpu & df["memory_limit_gib"].isna() & df["device_memory_gib"].notna()
    if not old.any():
        return df
    df = df.copy()
    df.loc[old, "memory_limit_gib"] = df.loc[old, "device_memory_gib"]
    df.loc[old, "device_memory_gib"] = float("nan")
    df.loc[jax_gpu & df["pred_mem_metric"].notna(), "pred_mem_metric"] = mem_metric("gpu", "jax")
    return df


def is_runs_csv(path: str | os.PathLike) -> bool:
    """Whether the CSV at ``path`` has the columns of a runs.csv (:data:`RUNS_CSV_KEYS`);
    False where it cannot be read."""
    try:
        header = pd.read_csv(path, nrows=0).columns
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return False
    return not _lacking_keys(header)


def _lacking_keys(header: Iterable[str]) -> list[str]:
    """The columns of :data:`RUNS_CSV_KEYS` a CSV's ``header`` lacks (none: a runs.csv)."""
    header = set(header)
    return [c for c in RUNS_CSV_KEYS if c not in header]


def _read_csv(path: str) -> pd.DataFrame:
    """The rows of one runs.csv, its text columns as strings; ValueError (one line) where it
    cannot be read, has no rows or is not a runs.csv."""
    try:
        header = pd.read_csv(path, nrows=0).columns
        lacks = _lacking_keys(header)
        if lacks:
            raise ValueError(
                f"{path} is not a runs.csv (python -m vitfsdp.analysis writes one per "
                f"analysis): it lacks the column(s) {', '.join(lacks)}; pass the runs.csv of "
                "an analysis directory, or the sweep dir itself")
        text = {c.name: object for c in RUN_COLUMNS if c.dtype == TEXT and c.name in header}
        frame = pd.read_csv(path, dtype=text)
    except FileNotFoundError:
        raise ValueError(f"runs.csv {path} does not exist") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as e:  # fmt: skip
        raise ValueError(f"cannot read {path} as a runs.csv: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if frame.empty:
        raise ValueError(f"{path} holds no runs (its header only)")
    return frame


def _flag(value: Any) -> Any:
    """A text cell of runs.csv as collect held it: ``True``/``False`` as the JSON booleans
    they were written from (:func:`vitfsdp.core.flags.read_flag`), an empty cell as
    ``None``, other text as it is."""
    if not isinstance(value, str):
        return None if pd.isna(value) else value
    flag = read_flag(value)
    return value if flag is None else flag


def export_date(path: str | os.PathLike) -> str | None:
    """The date in an export's file name (``gpu-h100-2026-11-26-sweep-runs.csv``:
    ``"2026-11-26"``), else ``None``."""
    found = re.search(r"\d{4}-\d{2}-\d{2}", Path(path).name)
    return found.group(0) if found else None


def loss_curves_here(runs: pd.DataFrame) -> int:
    """How many runs of ``runs`` (a :func:`read_runs_csv` frame) have their records here,
    whose loss curves the loss figure draws (the others' are not in a runs.csv)."""
    return sum((Path(d) / METRICS_FILE).is_file() for d in runs["run_dir"].dropna().astype(str))


def absent_lines(absent: dict[str, list[str]], runs: pd.DataFrame) -> list[str]:
    """What an analysis rebuilt from runs.csv exports says of its source
    (:func:`read_runs_csv`'s ``absent``), a line each: that it was rebuilt from the files
    (each with its date where its name holds one), not from run records; that its
    predictions are this checkout's plan (:func:`replanned_line`); the columns the
    files lacked (a line per set of files lacking the same), each with what its missing
    value means (``17 column(s) newer than the export not in it, read as missing: train.steps,
    ...: not recorded; device_busy_frac, ...: not measured``); each judgement the report
    could not make for want of a column (:data:`NOT_JUDGED`); and that a runs.csv holds no
    loss curves (the loss figure draws those of ``runs`` whose records are here:
    :func:`loss_curves_here`)."""
    names = {p: Path(p).name for p in absent}
    dated = [f"{p} (dated {export_date(p)})" if export_date(p) else p for p in absent]
    lines = [f"rebuilt from the runs.csv export{'s' if len(absent) > 1 else ''} "
             f"{', '.join(dated)}, not from the run records", replanned_line(runs),
             *_lacked_lines(absent)]
    lines = [line for line in lines if line]
    for column, why in NOT_JUDGED.items():
        lacking = [names[p] for p, lacks in absent.items() if column in lacks]
        if lacking:
            lines.append(f"without {column} (not in the export): {why}"
                         if len(lacking) == len(absent) else
                         f"without {column} (not in {', '.join(lacking)}): for its runs, {why}")
    here = loss_curves_here(runs)
    lines.append("a runs.csv holds no loss curves: the loss figure is not drawn" if not here
                 else f"a runs.csv holds no loss curves: the loss figure draws those of the "
                 f"{here} of {len(runs)} runs whose records (metrics.jsonl) are here")
    return lines


def _lacked_lines(absent: dict[str, list[str]]) -> list[str]:
    """A line per set of files of ``absent`` that lack the same columns, naming them by what
    a missing value of each means (:data:`MISSING_MEANS`); the prediction columns are left
    out (:func:`read_runs_csv` recomputes them)."""
    sources = {c.name: c.source for c in RUN_COLUMNS}
    by_lacks: dict[tuple[str, ...], list[str]] = {}
    for path, lacks in absent.items():
        lacks = [c for c in lacks if c not in PRED_COLUMNS]  # recomputed: _replanned
        if lacks:
            by_lacks.setdefault(tuple(lacks), []).append(Path(path).name)
    lines = []
    for lacks, files in by_lacks.items():
        means: dict[str, list[str]] = {}
        for c in lacks:
            means.setdefault(MISSING_MEANS.get(sources[c], "not recorded"), []).append(c)
        which = ("the export" if len(absent) == 1 else "the exports" if len(files) == len(absent)
                 else ", ".join(files))
        lines.append(f"{len(lacks)} column(s) newer than {which} not in "
                     f"{'it' if len(files) == 1 else 'them'}, read as missing: "
                     + "; ".join(f"{', '.join(cs)}: {why}" for why, cs in means.items()))
    return lines


#: The file (in the analysis directory) of :func:`collect_runs`' ``cache``.
RUNS_CACHE = ".runs_cache.json"
#: The files of a run directory whose size and modification time decide whether its row
#: is read again (``logs``: the Slurm task logs' directory, which
#: :func:`~vitfsdp.analysis.rows.find_log` names).
RECORD_FILES = (RUN_FILE, SUMMARY_FILE, METRICS_FILE, NETWORK_FILE, HOST_FILE, "job.json",
                *LOG_FILES)


def _cached_rows(run_dirs: list[Path], probes: dict[Path, str | None], cache: Path,
                 pool: Executor | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The rows of ``run_dirs``: from ``cache`` where a run's records (and probe) have the
    stats recorded with its row and the package's code is the same, else read
    (:func:`_read_runs`, with ``pool``); ``cache`` rewritten with them (atomically) when
    anything was read."""
    code = code_fingerprint()
    kept = _read_cache(cache, code)
    probe_stats = {probe: _file_stats([probe]) for probe in set(probes.values()) if probe}
    stats, rows, unread = {}, {}, []
    for d in run_dirs if kept else ():  # nothing kept: every run is read, and stat'ed there
        key, probe = str(d), probes.get(d)
        stats[key] = _record_stats(key) + (probe_stats[probe] if probe else [])
        hit = kept.get(key)
        if hit is not None and hit[0] == stats[key]:
            rows[key] = hit[1]
            _LOSS_CURVES[key] = [tuple(point) for point in hit[2]]
        else:
            unread.append(d)
    unread = unread if kept else list(run_dirs)
    for d, (row, record_stats) in zip(unread, _read_runs(unread, probes, pool, not kept),
                                      strict=True):
        rows[str(d)] = row
        if record_stats is not None:
            probe = probes.get(d)
            stats[str(d)] = record_stats + (probe_stats[probe] if probe else [])
    if unread or set(stats) != set(kept):
        columns = list(rows[next(iter(stats))]) if stats else []
        fresh = {key: [stats[key], _compact(rows[key], columns), _LOSS_CURVES.get(key, [])]
                 for key in stats}
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(cache, json.dumps(
                {"code": code, "columns": columns, "runs": fresh}, default=_plain))
        except OSError as e:  # a read-only analysis directory: nothing kept, all else works
            log.warning("could not keep the rows read in %s (%s)", cache, e)
    log.info("read %d of %d runs (the rest unchanged since %s)", len(unread), len(run_dirs),
             cache.name)
    return [rows[str(d)] for d in run_dirs]


#: Runs in each part of a read shared with other processes (:func:`_read_runs`): small
#: enough that the processes end close together, large enough to cost little to hand out.
READ_CHUNK = 200


def _read_runs(run_dirs: list[Path], probes: dict[Path, str | None],
               pool: Executor | None = None,
               stat: bool = False) -> list[tuple[dict[str, Any], list | None]]:  # fmt: skip
    """:func:`run_row` of each of ``run_dirs``, in order, each with its records' stats
    (:func:`_record_stats`, taken just before they are read) with ``stat``, else ``None``.
    With ``pool``, the runs are cut into parts of :data:`READ_CHUNK`: this process reads
    them from the first on, and each of the pool's processes (``pool.workers``, default 1)
    takes the last part left each time it is free
    (:class:`~vitfsdp.analysis.workshare.WorkShare`); their rows, stats and loss curves
    come back here. A part whose process failed is read here."""
    runs = [(str(d), probes.get(d), stat) for d in run_dirs]
    if pool is None or len(runs) < 2 * READ_CHUNK:
        return [_read_run(*run) for run in runs]
    parts = [runs[i:i + READ_CHUNK] for i in range(0, len(runs), READ_CHUNK)]
    share = WorkShare(range(len(parts)), lambda p, i: p.submit(_read_part, parts[i]), pool,
                      from_back=True)
    done = {}
    while (i := share.take()) is not None:
        done[i] = [_read_run(*run) for run in parts[i]]
    for i, future in list(share.futures.items()):
        try:
            part = future.result()
        except Exception as e:  # noqa: BLE001 - the process died (killed for memory, say)
            log.warning("a process reading runs failed (%s); reading its %d runs here",
                        e, len(parts[i]))
            done[i] = [_read_run(*run) for run in parts[i]]
            continue
        for (row, _), curve in part:
            if curve is not None:
                _LOSS_CURVES[row["run_dir"]] = [tuple(point) for point in curve]
        done[i] = [read for read, _ in part]
    return [read for i in range(len(parts)) for read in done[i]]


def _read_run(run_dir: str, probe: str | None, stat: bool) -> tuple[dict[str, Any], list | None]:
    """:func:`run_row` of ``run_dir``, after its :func:`_record_stats` with ``stat``."""
    stats = _record_stats(run_dir) if stat else None
    return run_row(run_dir, probe), stats


def _read_part(runs: list[tuple[str, str | None, bool]]) -> list[tuple[tuple, list | None]]:
    """In a pool's process: :func:`_read_run` of each ``(run_dir, probe, stat)`` with the
    run's loss curve (:data:`_LOSS_CURVES`, which the calling process fills from it;
    ``None`` for unreadable records)."""
    reads = [_read_run(*run) for run in runs]
    return [(read, _LOSS_CURVES.pop(read[0]["run_dir"], None)) for read in reads]


def _compact(row: dict[str, Any], columns: list[str]) -> list | dict[str, Any]:
    """A row as :data:`RUNS_CACHE` keeps it: its values alone where its keys are
    ``columns`` in that order (nearly every run: half the file, half the time to write and
    read it, the keys written once), else the row itself."""
    return list(row.values()) if len(row) == len(columns) and list(row) == columns else row


def _read_cache(cache: Path, code: str) -> dict[str, list]:
    """The runs of :data:`RUNS_CACHE` (``{run_dir: [stats, row, curve]}``, each row a dict
    again), ``{}`` where there is none, it cannot be read, or another version of the code
    wrote it."""
    try:
        record = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("code") != code:
        return {}
    runs, columns = record.get("runs"), record.get("columns")
    if not isinstance(runs, dict) or not isinstance(columns, list):
        return {}
    try:
        for entry in runs.values():
            if isinstance(entry[1], list):
                entry[1] = dict(zip(columns, entry[1], strict=True))
    except (TypeError, ValueError, IndexError, KeyError):  # not a file this code wrote
        return {}
    return runs


def _record_stats(run_dir: str) -> list:
    """:func:`_file_stats` of the :data:`RECORD_FILES` of ``run_dir``."""
    return _file_stats([f"{run_dir}{os.sep}{name}" for name in RECORD_FILES])


def _file_stats(paths: list[str]) -> list:
    """``[size, mtime_ns]`` of each path, ``None`` where it is missing (plain ``os.stat``
    on text paths: tens of thousands of runs, eight files each)."""
    stats = []
    for path in paths:
        try:
            st = os.stat(path)
            stats.append([st.st_size, st.st_mtime_ns])
        except OSError:
            stats.append(None)
    return stats


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python value JSON writes (the cache's rows); else ``str``."""
    return value.item() if hasattr(value, "item") else str(value)


def _sweep_probe(sweep_dir: str | os.PathLike) -> str | None:
    """The sweep directory's ``probe.json`` (``python -m vitfsdp.probe --out SWEEP_DIR``), which
    the predictions of its runs are made from where their own ``cluster.probe`` is unset."""
    path = Path(sweep_dir) / PROBE_FILE
    return str(path) if path.is_file() else None


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Nullable integers and floats for the numeric columns (JSON gives mixed ``None``)."""
    for col in INT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in FLOAT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df
