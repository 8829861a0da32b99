"""Collect run records into a table: one row per run directory found below the sweep
directories (:func:`collect_runs`), whatever its status.

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
from collections.abc import Iterable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import pandas as pd

from vitfsdp.analysis.fingerprint import code_fingerprint
from vitfsdp.analysis.lines import VARIANT_COLUMNS, _sort_key
from vitfsdp.analysis.rows import _LOSS_CURVES, LOG_FILES, run_row
from vitfsdp.analysis.schema import COLUMNS, FLOAT_COLUMNS, INT_COLUMNS
from vitfsdp.analysis.workshare import WorkShare
from vitfsdp.core.layout import ATTEMPTS_DIR, HOST_FILE, NETWORK_FILE
from vitfsdp.plan.probed import PROBE_FILE
from vitfsdp.plan.recorded import find_run_dirs
from vitfsdp.records import (
    METRICS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    write_text_atomic,
)

log = logging.getLogger(__name__)






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
        for d in find_run_dirs(s):
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
    df["attempt_of"] = df["run_dir"].astype(str).str.extract(
        rf"^(.*)[/\\]{ATTEMPTS_DIR}[/\\]\d+$", expand=False)
    if not earlier_attempts:
        df = df[df["attempt_of"].isna()]
    by = ["model", "strategy", "nodes", *VARIANT_COLUMNS, "repeat", "run_dir"]
    df = df.sort_values(by, na_position="last", kind="stable", key=_sort_key)
    log.info("collected %d runs from %d sweep dir(s)%s", len(df), len(sweep_dirs),
             "" if earlier_attempts or len(unique) == len(df) else
             f" ({len(unique) - len(df)} earlier attempt(s) of points that ran again left out)")
    return df.reset_index(drop=True)


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
