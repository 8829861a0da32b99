"""Collect run records into tables: one row per run, and the weak-scaling table.

Reads only records (``run.json`` and ``summary.json``, see :mod:`vitfsdp.records`), never
stdout. Every run directory found becomes a row whatever its status, so a point that ran out
of memory or timed out stays visible next to the ones that completed.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import os
import re
import statistics
import threading
import typing
from collections.abc import Iterable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pandas as pd

from vitfsdp.analysis.fingerprint import code_fingerprint
from vitfsdp.core.layout import NETWORK_FILE
from vitfsdp.models import VARIANTS
from vitfsdp.plan import predict_recorded, predict_run
from vitfsdp.plan.probed import PROBE_FILE
from vitfsdp.plan.recorded import find_run_dirs
from vitfsdp.records import (
    METRICS_FILE,
    RUN_FILE,
    RUNNING,
    STATUSES,
    SUMMARY_FILE,
    read_json,
    read_jsonl,
    reason_line,
    summarize_windows,
    write_text_atomic,
)

log = logging.getLogger(__name__)
#: Predictions by point (model, strategy, nodes: :func:`_point_key`), each a list of
#: ``(config without repeat, device, prediction)`` looked up by equality: a study repeats its
#: points, and each prediction rebuilds the config and the model's sizes.
_PREDICTIONS: dict[tuple, list[tuple[dict, dict, dict | None]]] = {}
#: Cluster profiles whose nodes are processes of one machine: every rank shares its cores.
SHARED_HOST_PROFILES = ("local", "virtual")
#: Where a run's output lies, in order of preference: the local launcher's log, then the
#: Slurm tasks' logs (``logs/task<rank>.log``).
LOG_FILES = ("train.log", "logs")
#: Loss per window (``(step_end, loss)``) of the runs the last :func:`collect_runs` read, by
#: run directory, so :func:`loss_curves` need not read metrics.jsonl again.
_LOSS_CURVES: dict[str, list[tuple[int, float]]] = {}

#: Columns of :func:`collect_runs`, in order. Dotted names are config keys as a user types
#: them (``kernels.compile``); ``*_min_gib`` are minima over ranks where ``peak_*`` are maxima.
COLUMNS = (
    "run_dir", "status", "reason", "log",
    "model", "strategy", "sharding_strategy", "shard_group_size", "backward_prefetch",
    "limit_all_gathers", "engine", "framework", "precision", "data", "img_size",
    "train.activation_checkpointing", "kernels.fused_attn", "kernels.compile", "kernels.adamw",
    "kernels.float32_matmul_precision", "kernels.cudnn_allow_tf32",
    "mixed_precision.param_dtype", "mixed_precision.reduce_dtype",
    "mixed_precision.buffer_dtype", "strategy.use_orig_params", "strategy.blocks_per_unit",
    "experiment", "repeat",
    "nodes", "world_size", "ranks_per_node", "local_batch_size", "global_batch_size",
    "cluster", "host_cpus", "ranks_per_host", "shared_cores", "network",
    "device_type", "device_name", "device_memory_gib", "device_peak_flops", "peak_source",
    "price_per_node_hour", "num_params",
    "ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "hw_tflops_per_gpu", "hfu",
    "peak_mem_gib", "peak_mem_min_gib", "peak_mem_kind", "peak_mem_reserved_gib",
    "peak_mem_reserved_min_gib", "peak_rss_gib", "device_mem_used_gib",
    "device_mem_used_min_gib", "alloc_retries", "num_ooms", "device_busy_frac",
    "device_busy_min_frac", "host_load_1m", "cpu_throttled_s",
    "state_params_gib", "state_grads_gib", "state_optimizer_gib", "num_classes",
    "sent_gb_per_node_max", "sent_gb_total",
    "ips_spread", "ips_min", "ips_max", "step_time_s_min", "step_time_s_max",
    "num_windows", "last_step", "loss", "elapsed_s", "compile_s",
    "ips_reached", "peak_mem_reached_gib",
    "pred_peak_mem_gib", "pred_step_time_s", "pred_ips", "pred_fits", "pred_mem_metric",
    "pred_source", "started_at", "git_commit", "versions",
)  # fmt: skip
#: Prediction columns (``vitfsdp.plan.predict_run``'s keys).
PRED_COLUMNS = ("pred_peak_mem_gib", "pred_step_time_s", "pred_ips", "pred_fits",
                "pred_mem_metric", "pred_source")
#: The model state a rank holds, in GiB, by summary.json ``model_state_bytes`` field: the
#: maximum over ranks (``model_state_bytes_max``) where recorded, else the one process's
#: (the JAX trainer's); ``NaN`` in older records and where a field is null (JAX's grads).
STATE_COLUMNS = {"state_params_gib": "params", "state_grads_gib": "grads",
                 "state_optimizer_gib": "optimizer"}
#: What the nodes sent over their emulated link (the point's ``network.json``, written by
#: the local launcher): the most any node sent and all nodes together, in GB (10^9 bytes);
#: ``NaN`` where the network was not emulated.
NETWORK_COLUMNS = ("sent_gb_per_node_max", "sent_gb_total")
#: Integer columns, held as pandas' nullable ``Int64`` (a run that never started has none).
INT_COLUMNS = (
    "shard_group_size", "img_size", "repeat", "nodes", "world_size", "ranks_per_node",
    "local_batch_size", "global_batch_size", "num_params", "alloc_retries", "num_ooms",
    "num_windows", "last_step", "host_cpus", "ranks_per_host", "num_classes",
    "strategy.blocks_per_unit",
)  # fmt: skip
#: Float columns (``NaN`` where the run measured nothing, or where old records lack them).
FLOAT_COLUMNS = (
    "device_memory_gib", "device_peak_flops", "price_per_node_hour",
    "ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "hw_tflops_per_gpu", "hfu",
    "peak_mem_gib", "peak_mem_min_gib", "peak_mem_reserved_gib", "peak_mem_reserved_min_gib",
    "peak_rss_gib", "device_mem_used_gib", "device_mem_used_min_gib", "device_busy_frac",
    "device_busy_min_frac", "host_load_1m", "cpu_throttled_s", *STATE_COLUMNS, *NETWORK_COLUMNS,
    "ips_spread", "ips_min", "ips_max", "step_time_s_min", "step_time_s_max",
    "loss", "elapsed_s", "compile_s", "ips_reached", "peak_mem_reached_gib",
    "pred_peak_mem_gib", "pred_step_time_s", "pred_ips",
)  # fmt: skip
#: Figures copied as they are from ``summary.json`` (absent in older records: ``NaN``).
SUMMARY_FIGURES = (
    "ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "hw_tflops_per_gpu", "hfu",
    "peak_mem_reserved_gib", "peak_mem_reserved_min_gib", "peak_rss_gib",
    "device_mem_used_gib", "device_mem_used_min_gib", "alloc_retries", "num_ooms",
    "device_busy_frac", "device_busy_min_frac",
    "ips_spread", "ips_min", "ips_max", "step_time_s_min", "step_time_s_max",
    "loss", "elapsed_s", "compile_s",
)  # fmt: skip
#: Window statistics over measured windows, computed from ``metrics.jsonl``
#: (:func:`vitfsdp.records.summarize_windows`) when the summary of a completed run lacks them
#: (records older than these fields).
WINDOW_RANGES = ("ips_min", "ips_max", "step_time_s_min", "step_time_s_max")
#: Config keys (as dotted paths into run.json's ``config``) recorded as columns of that name.
CONFIG_KEYS = (
    "train.activation_checkpointing", "kernels.fused_attn", "kernels.compile", "kernels.adamw",
    "kernels.float32_matmul_precision", "kernels.cudnn_allow_tf32",
    "mixed_precision.param_dtype", "mixed_precision.reduce_dtype",
    "mixed_precision.buffer_dtype", "strategy.use_orig_params", "strategy.blocks_per_unit",
)  # fmt: skip
_CONFIG_PATHS = tuple((key, tuple(key.split("."))) for key in CONFIG_KEYS)
#: Config columns that split a strategy into separate scaling lines when they vary at all.
VARIANT_COLUMNS = (
    "backward_prefetch", "limit_all_gathers", "precision", "engine", "framework", "data",
    "local_batch_size", "img_size", "device_name", *CONFIG_KEYS, "network",
)  # fmt: skip
#: Columns a strategy name normally fixes; they split lines only if they vary within one.
#: (Not ``shard_group_size``: FULL_SHARD shards over the whole world, which grows with nodes.)
STRATEGY_COLUMNS = ("sharding_strategy",)
#: Line identity: the panel (model) and the strategy, before any varying config column.
BASE_LINE_COLUMNS = ("model", "strategy")
#: Settings only PyTorch runs have (JAX runs record them as null or leave the default, and
#: framework=jax refuses them): they do not keep a JAX run from being compared with the
#: PyTorch run of the same point. ``kernels.compile`` resolves per run under torch (null =
#: auto: compiled or not), while XLA always compiles.
TORCH_ONLY_COLUMNS = ("backward_prefetch", "limit_all_gathers", "engine", "kernels.compile",
                      "kernels.adamw", "kernels.cudnn_allow_tf32", "mixed_precision.param_dtype",
                      "mixed_precision.reduce_dtype", "mixed_precision.buffer_dtype",
                      "strategy.use_orig_params", "strategy.blocks_per_unit")
#: Columns of :func:`framework_ratio_table` after its key columns.
RATIO_COLUMNS = ("torch_ips", "jax_ips", "jax_over_torch")


def collect_runs(sweep_dirs: str | os.PathLike | Iterable[str | os.PathLike],
                 cache: str | os.PathLike | None = None,
                 pool: Executor | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per run directory found below ``sweep_dirs``, whatever its status.

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
        A DataFrame with the columns of :data:`COLUMNS`, sorted by model, strategy, nodes.
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
        state a rank holds, counted from its local shards (:data:`STATE_COLUMNS`; ``NaN`` in
        records older than them); ``sent_gb_per_node_max`` and ``sent_gb_total`` what the
        nodes sent over an emulated link (:data:`NETWORK_COLUMNS`); ``num_classes`` the
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
    by = ["model", "strategy", "nodes", *VARIANT_COLUMNS, "repeat", "run_dir"]
    df = df.sort_values(by, na_position="last", kind="stable", key=_sort_key)
    log.info("collected %d runs from %d sweep dir(s)", len(df), len(sweep_dirs))
    return df.reset_index(drop=True)


#: The file (in the analysis directory) of :func:`collect_runs`' ``cache``.
RUNS_CACHE = ".runs_cache.json"
#: The files of a run directory whose size and modification time decide whether its row
#: is read again (``logs``: the Slurm task logs' directory, which :func:`find_log` names).
RECORD_FILES = (RUN_FILE, SUMMARY_FILE, METRICS_FILE, NETWORK_FILE, "job.json", *LOG_FILES)


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
    takes the last part left each time it is free (:class:`_SharedRead`); their rows, stats
    and loss curves come back here. A part whose process failed is read here."""
    runs = [(str(d), probes.get(d), stat) for d in run_dirs]
    if pool is None or len(runs) < 2 * READ_CHUNK:
        return [_read_run(*run) for run in runs]
    shared = _SharedRead([runs[i:i + READ_CHUNK] for i in range(0, len(runs), READ_CHUNK)],
                         pool)
    return shared.rows()


def _read_run(run_dir: str, probe: str | None, stat: bool) -> tuple[dict[str, Any], list | None]:
    """:func:`run_row` of ``run_dir``, after its :func:`_record_stats` with ``stat``."""
    stats = _record_stats(run_dir) if stat else None
    return run_row(run_dir, probe), stats


class _SharedRead:
    """The parts of a read (:func:`_read_runs`), taken from the front by this process and
    from the back by ``pool``'s processes, whichever is free first: handed to the pool by
    the callback of the part it finished (the pool's thread), so no process waits on
    another's part."""

    def __init__(self, parts: list[list[tuple[str, str | None, bool]]], pool: Executor) -> None:
        self.parts, self.pool = parts, pool
        self.left = collections.deque(range(len(parts)))
        self.done: dict[int, list[tuple[dict[str, Any], list | None]]] = {}
        self.futures: dict[int, Future] = {}
        self.lock = threading.RLock()
        self._hand_out()

    def _hand_out(self, *_: Any) -> None:
        """Give the last parts left to the pool's idle processes, one each."""
        with self.lock:
            busy = sum(not f.done() for f in self.futures.values())
            while self.left and busy < getattr(self.pool, "workers", 1):
                i = self.left.pop()
                try:
                    future = self.pool.submit(_read_part, self.parts[i])
                except RuntimeError:  # the pool is shutting down: the rest is read here
                    self.left.append(i)
                    return
                self.futures[i], busy = future, busy + 1
                future.add_done_callback(self._hand_out)

    def _next(self) -> int | None:
        with self.lock:
            return self.left.popleft() if self.left else None

    def rows(self) -> list[tuple[dict[str, Any], list | None]]:
        """Read the parts left here, wait for the pool's; every ``(row, stats)``, in order."""
        while (i := self._next()) is not None:
            self.done[i] = [_read_run(*run) for run in self.parts[i]]
        for i, future in list(self.futures.items()):
            try:
                part = future.result()
            except Exception as e:  # noqa: BLE001 - the process died (killed for memory, say)
                log.warning("a process reading runs failed (%s); reading its %d runs here",
                            e, len(self.parts[i]))
                self.done[i] = [_read_run(*run) for run in self.parts[i]]
                continue
            for (row, _), curve in part:
                if curve is not None:
                    _LOSS_CURVES[row["run_dir"]] = [tuple(point) for point in curve]
            self.done[i] = [read for read, _ in part]
        return [read for i in range(len(self.parts)) for read in self.done[i]]


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


def run_row(run_dir: str | os.PathLike, probe: str | None = None) -> dict[str, Any]:
    """The flat row of one run directory (the columns of :data:`COLUMNS`).

    Reads ``run.json``, ``summary.json`` and ``metrics.jsonl`` (through
    :func:`vitfsdp.records.read_jsonl`, which skips a killed run's truncated last line with a
    warning) and adds the plan's prediction (:func:`prediction`; from ``probe``, a probe.json,
    where the run's own ``cluster.probe`` is unset). An unreadable record gives
    a ``failed`` row with the reason, never an exception, so one broken run cannot hide the
    others.
    """
    run_dir = Path(run_dir)
    base = str(run_dir)  # text paths below: no Path per file read, tens of thousands of runs
    try:
        run = read_json(f"{base}{os.sep}{RUN_FILE}") or {}
        if not isinstance(run.get("config"), dict):  # failed before the trainer wrote it
            run = {**run, "config": _config_from_job(run_dir)}
        summary = read_json(f"{base}{os.sep}{SUMMARY_FILE}")
        windows = _read_windows(f"{base}{os.sep}{METRICS_FILE}")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
        log.warning("%s: unreadable records (%s)", run_dir, e)
        return {"run_dir": base, "status": "failed", "reason": f"unreadable records: {e}"}
    cluster = (run.get("config") or {}).get("cluster")
    if probe and isinstance(cluster, dict) and cluster.get("probe") in (None, "", "allocation"):
        # the sweep's probe (allocation: the packs measured into it)
        run = {**run, "config": {**run["config"], "cluster": {**cluster, "probe": probe}}}
    _LOSS_CURVES[base] = _loss_curve(windows)
    status = _status(run, summary)
    row = {"run_dir": base, **status, **_config(run), **_figures(summary),
           **_model_state(summary), **_sent(base),
           **_window_figures(windows, summary, status["status"]), **prediction(run)}
    if row["status"] != "completed":
        row |= {"log": find_log(run_dir, status["reason"]),
                **_reached(windows, summary, row.get("peak_mem_kind"))}
    return row


def _read_windows(path: str | os.PathLike) -> list[dict]:
    """``metrics.jsonl`` as :func:`vitfsdp.records.read_jsonl` reads it, parsed in one
    ``json.loads`` of its lines as an array (one call per file, not per line); a file that
    does not parse so (a truncated last line, a corrupt one) goes to ``read_jsonl``, which
    skips the truncated line with a warning or raises ``ValueError``."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        rows = json.loads(f"[{','.join(lines)}]")
    except json.JSONDecodeError:
        return read_jsonl(path)
    if len(rows) != len(lines):  # a line holding two values: not JSON lines
        return read_jsonl(path)
    return rows


def _config_from_job(run_dir: Path) -> dict:
    """The model, strategy and nodes of a run whose run.json holds no config (it failed
    before the trainer started), from the launcher's ``job.json`` overrides; ``{}`` if none."""
    job = read_json(run_dir / "job.json") or {}
    given = dict(o.split("=", 1) for o in job.get("overrides") or [] if "=" in o)
    config: dict[str, Any] = {}
    if "model" in given:
        config["model"] = {"name": given["model"]}
    if "strategy" in given:
        config["strategy"] = {"name": given["strategy"]}
    if str(given.get("nodes", "")).isdigit():
        config["nodes"] = int(given["nodes"])
    return config


def _loss_curve(windows: list[dict]) -> list[tuple[int, float]]:
    """``(step_end, loss)`` of every window that recorded both (warm-up included)."""
    return [(w["step_end"], w["loss"]) for w in windows
            if isinstance(w.get("step_end"), int) and _number(w.get("loss"))]


def loss_curves(df: pd.DataFrame) -> pd.DataFrame:
    """The training loss against step of every run of ``df`` (a :func:`collect_runs` frame),
    warm-up windows included: columns ``run_dir``, ``step`` (the window's last step) and
    ``loss`` (the window's mean loss). Read from metrics.jsonl, or kept from
    :func:`collect_runs` when it read these runs last."""
    rows = []
    for run_dir in df["run_dir"]:
        curve = _LOSS_CURVES.get(str(run_dir))
        if curve is None:
            try:
                curve = _loss_curve(read_jsonl(Path(run_dir) / METRICS_FILE))
            except (OSError, ValueError) as e:
                log.warning("%s: no loss curve (%s)", run_dir, e)
                curve = []
        rows += [(str(run_dir), step, loss) for step, loss in curve]
    return pd.DataFrame(rows, columns=["run_dir", "step", "loss"])


def find_log(run_dir: Path, reason: str | None = None) -> str | None:
    """The run's log with its full output and traceback: ``train.log`` (local launcher), or
    the Slurm task log of the rank the reason names (``... on rank 3 ...``), else the first
    task's; ``None`` when there is none."""
    if (run_dir / LOG_FILES[0]).is_file():
        return str(run_dir / LOG_FILES[0])
    tasks = run_dir / LOG_FILES[1]
    if not tasks.is_dir():
        return None
    rank = re.search(r"on rank (\d+)", reason or "")
    named = tasks / f"task{rank.group(1)}.log" if rank else None
    if named is not None and named.is_file():
        return str(named)
    logs = sorted(tasks.glob("task*.log"))
    return str(logs[0]) if logs else None


def _reached(windows: list[dict], summary: dict | None, kind: str | None) -> dict[str, Any]:
    """What a run that did not complete reached before it ended: ``ips_reached`` (median of
    its measured windows, else its last window's) and ``peak_mem_reached_gib`` (the largest
    window peak, or the memory its failing ranks reported: summary ``memory_at_failure``)."""
    measured = [w["ips"] for w in windows if not w.get("warmup") and _number(w.get("ips"))]
    last = [w["ips"] for w in windows if _number(w.get("ips"))][-1:]
    ips = statistics.median(measured) if measured else (last[0] if last else None)
    at_failure = (summary or {}).get("memory_at_failure") or {}
    keys = ("peak_rss_gib",) if kind == "rss" else ("peak_mem_allocated_gib", "peak_rss_gib")
    mem = None
    for key in keys:
        values = [w[key] for w in windows if _number(w.get(key))]
        values += [at_failure[key]] if _number(at_failure.get(key)) else []
        if values:
            mem = max(values)
            break
    return {"ips_reached": ips, "peak_mem_reached_gib": mem}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _status(run: dict, summary: dict | None) -> dict[str, Any]:
    """Status and reason: the summary's, or a stand-in when the run wrote no summary."""
    if summary is not None:
        return {"status": summary.get("status"), "reason": reason_line(summary.get("reason"))}
    status = run.get("status")
    if status != RUNNING and (status not in STATUSES or status == "completed"):
        status = "failed"
    why = "no summary.json (still running, or killed before writing one)" \
        if status == RUNNING else "no summary.json"
    return {"status": status, "reason": why}


def _config(run: dict) -> dict[str, Any]:
    """Config, world and device columns from ``run.json`` (``None`` where a field is missing)."""
    cfg, world, device = run.get("config", {}), run.get("world", {}), run.get("device", {})
    strategy, train = cfg.get("strategy", {}), cfg.get("train", {})
    nodes = cfg.get("nodes", world.get("nodes"))
    per_node = world.get("ranks_per_node", _get(cfg, "cluster", "gpus_per_node"))
    world_size = world.get("size", nodes * per_node if nodes and per_node else None)
    local_batch = train.get("local_batch_size")
    memory_gib = device.get("memory_gib")
    framework = cfg.get("framework")
    return {
        "model": _get(cfg, "model", "name"),
        "strategy": strategy.get("name"),
        "sharding_strategy": strategy.get("sharding_strategy"),
        "shard_group_size": strategy.get("shard_group_size"),
        "backward_prefetch": strategy.get("backward_prefetch"),
        "limit_all_gathers": strategy.get("limit_all_gathers"),
        "engine": None if framework == "jax" else cfg.get("engine"),  # FSDP1/2: torch only
        "framework": framework,
        "precision": _applied_precision(run),
        "data": _get(cfg, "data", "name"),
        "img_size": _img_size(run),
        **{key: _get(cfg, *path) for key, path in _CONFIG_PATHS},
        **_applied_kernels(run),
        "experiment": cfg.get("experiment"),
        "repeat": cfg.get("repeat", 0),
        "nodes": nodes,
        "world_size": world_size,
        "ranks_per_node": per_node,
        "local_batch_size": local_batch,
        "global_batch_size": local_batch * world_size if local_batch and world_size else None,
        **_host_sharing(_get(cfg, "cluster", "name"), device, world_size, per_node),
        "network": _network(run.get("network")),
        "device_type": device.get("type"),
        "device_name": device.get("name"),
        "device_memory_gib": (memory_gib if memory_gib is not None
                              else _get(cfg, "cluster", "device_memory_gib")),
        "device_peak_flops": device.get("peak_flops"),
        "peak_source": device.get("peak_source"),
        "price_per_node_hour": _get(cfg, "cluster", "price_per_node_hour"),
        "num_params": _get(run, "model", "num_params"),
        "num_classes": _get(run, "model", "num_classes") or _get(cfg, "data", "num_classes"),
        **_provenance(run),
    }


def _img_size(run: dict) -> int | None:
    """The input side in pixels: run.json's model record (what ran), else the config's
    ``model.img_size``, else the variant's default (a run that ended before its model was
    built has no model record: it still belongs to its point's line)."""
    recorded = _get(run, "model", "img_size") or _get(run, "config", "model", "img_size")
    if recorded is not None:
        return recorded
    spec = VARIANTS.get(_get(run, "config", "model", "name"))
    return spec.img_size if spec is not None else None


#: Library versions named in the ``versions`` column (run.json ``versions``), in order.
VERSION_KEYS = ("python", "torch", "timm", "jax", "flax", "cuda", "rocm", "nccl")


def _provenance(run: dict) -> dict[str, Any]:
    """When the run started, the git commit it ran (``+dirty`` with local changes) and its
    library versions (``torch 2.4.1, timm 1.0.9, ...``; CUDA, ROCm and NCCL only for runs on
    a GPU)."""
    commit, dirty = _get(run, "git", "commit"), _get(run, "git", "dirty")
    versions = run.get("versions") if isinstance(run.get("versions"), dict) else {}
    # a CPU run names no GPU stack: a CUDA build of torch reports its CUDA on any machine
    gpu_only = ("cuda", "rocm", "nccl") if _get(run, "device", "type") == "cpu" else ()
    named = [f"{k} {versions[k]}" for k in VERSION_KEYS if versions.get(k) and k not in gpu_only]
    return {"started_at": run.get("started_at"),
            "git_commit": f"{commit[:12]}{'+dirty' if dirty else ''}" if commit else None,
            "versions": ", ".join(named) or None}


def _host_sharing(cluster: str | None, device: dict, world_size: int | None,
                  per_node: int | None) -> dict[str, Any]:  # fmt: skip
    """The cluster profile, the host's CPUs, the ranks that shared them (the whole world on
    :data:`SHARED_HOST_PROFILES`, else a node's ranks) and, for CPU ranks that outnumbered
    the cores, ``shared_cores``: ``"8 ranks on 2 cores"``."""
    cpus = device.get("host_cpus")
    per_host = world_size if cluster in SHARED_HOST_PROFILES else per_node
    shared = (device.get("type") == "cpu" and isinstance(cpus, int) and isinstance(per_host, int)
              and per_host > cpus)
    return {"cluster": cluster, "host_cpus": cpus, "ranks_per_host": per_host,
            "shared_cores": f"{per_host} ranks on {cpus} cores" if shared else None}


def _network(record: dict | None) -> str | None:
    """The ``network`` column: ``"nodes apart on an emulated 1 Gbit/s link"`` for a run whose
    local launcher emulated one (run.json ``network``, :mod:`vitfsdp.launch.netns`), with
    ``", 0.5 CPU a node"`` where each node had a CPU quota (``node_cpus``), ``"network not
    emulated (not root)"`` where one was asked for but not made, else ``None``."""
    if not isinstance(record, dict) or not record.get("emulate"):
        return None
    if record.get("emulated") and record.get("inter_node_gbit_s"):
        cpus = record.get("node_cpus")
        quota = f", {cpus:g} CPU a node" if isinstance(cpus, (int, float)) and cpus else ""
        return f"nodes apart on an emulated {record['inter_node_gbit_s']:g} Gbit/s link{quota}"
    return f"network not emulated ({record.get('reason') or 'unknown'})"


def contention_note(df: pd.DataFrame) -> str | None:
    """What figures and reports say of runs whose CPU ranks shared cores, e.g. ``"4-8 ranks
    on 2 cores (cluster=local): not a hardware measurement"``, followed by the network the
    nodes were on where it was emulated (``"; nodes apart on an emulated 1 Gbit/s link"``);
    ``None`` when neither applies."""
    networks = "; ".join(sorted(set(df["network"].dropna().astype(str)))) \
        if "network" in df else ""
    shared = df[df["shared_cores"].notna()]
    if shared.empty:
        return networks or None
    note = _shared_cores_note(shared)
    return f"{note}; {networks}" if networks else note


def _shared_cores_note(shared: pd.DataFrame) -> str:
    """``"4-8 ranks on 2 cores (cluster=local): not a hardware measurement"``."""
    ranks = shared["ranks_per_host"].dropna().astype(int)
    low, high = ranks.min(), ranks.max()
    count = f"{low}" if low == high else f"{low}-{high}"
    cores = "/".join(str(c) for c in sorted(set(shared["host_cpus"].dropna().astype(int))))
    profiles = ",".join(sorted(set(shared["cluster"].dropna().astype(str))))
    return f"{count} ranks on {cores} cores (cluster={profiles}): not a hardware measurement"


def _applied_precision(run: dict) -> str | None:
    """The precision the run computed in: run.json ``applied.precision`` (torch: ``name``;
    JAX: ``compute_dtype``) where recorded, so ``precision=auto`` shows as what it resolved
    to; else the configured value."""
    applied = _get(run, "applied", "precision")
    if isinstance(applied, dict):
        resolved = applied.get("name") or applied.get("compute_dtype")
        if resolved:
            return resolved
    return _get(run, "config", "precision")


def _applied_kernels(run: dict) -> dict[str, Any]:
    """``kernels.compile`` and ``strategy.use_orig_params`` as they resolved (null = auto in
    the config): whether any block was compiled (run.json ``applied.compiled_blocks``), and
    FSDP1's ``applied.use_orig_params``; absent when neither says. ``strategy.blocks_per_unit``
    1 in records older than the key."""
    out = {}
    compiled = _get(run, "applied", "compiled_blocks")
    if _get(run, "config", "kernels", "compile") is None and compiled is not None:
        out["kernels.compile"] = compiled > 0
    orig_params = _get(run, "applied", "use_orig_params")
    if _get(run, "config", "strategy", "use_orig_params") is None and orig_params is not None:
        out["strategy.use_orig_params"] = orig_params
    if _get(run, "config", "strategy") and \
            _get(run, "config", "strategy", "blocks_per_unit") is None:
        out["strategy.blocks_per_unit"] = 1  # recorded before the key: one block a unit
    return out


def _figures(summary: dict | None) -> dict[str, Any]:
    """Headline figures from ``summary.json``; peak memory is allocated GPU memory, else RSS
    (``peak_mem_min_gib``: its minimum over ranks, where the records have it)."""
    summary = summary or {}
    figures = {key: summary.get(key) for key in SUMMARY_FIGURES}
    figures["last_step"] = summary.get("last_step")
    competed = summary.get("competition") or {}
    loads = [x for x in (competed.get("load_1m_start"), competed.get("load_1m_end"))
             if x is not None]
    figures["host_load_1m"] = max(loads) if loads else None  # what rank 0's host also ran
    figures["cpu_throttled_s"] = competed.get("cpu_throttled_s")
    allocated, rss = summary.get("peak_mem_allocated_gib"), summary.get("peak_rss_gib")
    if allocated is not None:
        figures |= {"peak_mem_gib": allocated, "peak_mem_kind": "allocated",
                    "peak_mem_min_gib": summary.get("peak_mem_allocated_min_gib")}
    elif rss is not None:
        figures |= {"peak_mem_gib": rss, "peak_mem_kind": "rss",
                    "peak_mem_min_gib": summary.get("peak_rss_min_gib")}
    return figures


def _model_state(summary: dict | None) -> dict[str, float | None]:
    """The :data:`STATE_COLUMNS` of a summary: ``model_state_bytes_max`` (the most any rank
    held), else ``model_state_bytes`` (JAX: its process's), in GiB; ``{}`` where neither."""
    summary = summary or {}
    state = summary.get("model_state_bytes_max") or summary.get("model_state_bytes")
    if not isinstance(state, dict):
        return {}
    return {column: state[key] / 2**30 if _number(state.get(key)) else None
            for column, key in STATE_COLUMNS.items()}


def _sent(run_dir: str | os.PathLike) -> dict[str, float | None]:
    """The :data:`NETWORK_COLUMNS` from the point's ``network.json`` (bytes each node sent
    over its emulated link, :data:`vitfsdp.core.layout.NETWORK_FILE`), in GB; ``{}`` where
    there is none or it cannot be read (a warning: the run's other records still count)."""
    try:
        record = read_json(f"{run_dir}{os.sep}{NETWORK_FILE}")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
        log.warning("%s: unreadable %s (%s)", run_dir, NETWORK_FILE, e)
        return {}
    if not isinstance(record, dict):
        return {}
    sent = [b for b in record.get("sent_bytes_per_node") or [] if _number(b)]
    total = record.get("sent_bytes_total")
    return {"sent_gb_per_node_max": max(sent) / 1e9 if sent else None,
            "sent_gb_total": total / 1e9 if _number(total) else None}


def _window_figures(windows: list[dict], summary: dict | None, status: str) -> dict[str, Any]:
    """From ``metrics.jsonl``: measured windows, the last step reached, and (completed runs
    whose summary predates them) the min/max of ips and step time over measured windows and
    the minimum over ranks of peak memory (``peak_mem_min_gib``)."""
    steps = [w["step_end"] for w in windows if isinstance(w.get("step_end"), int)]
    out: dict[str, Any] = {"num_windows": sum(not w.get("warmup") for w in windows),
                           "last_step": max(steps, default=None)}
    summary = summary or {}
    for key in ("num_windows", "last_step"):
        if summary.get(key) is not None:
            out[key] = summary[key]
    kind = "peak_rss_min_gib" if summary.get("peak_mem_allocated_gib") is None \
        else "peak_mem_allocated_min_gib"
    if status != "completed" or all(summary.get(k) is not None for k in (*WINDOW_RANGES, kind)):
        return out  # nothing to fill in (the summary has it all: current records)
    derived = summarize_windows(windows)
    for column in WINDOW_RANGES:
        if summary.get(column) is None and derived[column] is not None:
            out[column] = derived[column]
    if summary.get(kind) is None and derived[kind] is not None:
        out["peak_mem_min_gib"] = derived[kind]
    return out


def prediction(run: dict) -> dict[str, Any]:
    """The plan's prediction for a run, as ``pred_*`` columns (empty when there is none).

    Uses the ``plan`` dict the sweep wrote into ``run.json`` when there is one (a
    ``skipped_infeasible`` point: the prediction it was skipped on, ``Prediction.as_dict()``;
    keys ``peak_mem_gib``, ``step_time_s``, ``ips``, ``fits``, ``pred_mem_metric``), else
    :func:`vitfsdp.plan.predict_run`. Predictions are
    compared with measurements in :func:`vitfsdp.analysis.tables.calibration_table`.
    """
    plan = run.get("plan")
    if isinstance(plan, dict):
        cpu = plan.get("device") == "cpu" or _get(run, "device", "type") == "cpu"
        metric = plan.get("pred_mem_metric") or ("peak_rss_gib" if cpu
                                                 else "peak_mem_reserved_gib")
        return {"pred_peak_mem_gib": plan.get("peak_mem_gib"),
                "pred_step_time_s": plan.get("step_time_s"), "pred_ips": plan.get("ips"),
                "pred_fits": plan.get("fits"), "pred_mem_metric": metric,
                "pred_source": plan.get("source")}
    pred = _predict_run(run)
    return {} if pred is None else {key: pred.get(key) for key in PRED_COLUMNS}


def _predict_run(run: dict) -> dict | None:
    """The plan's prediction for ``run``, memoized per config and device (a study's repeats
    of one point cost one prediction): the config without its ``repeat`` label, and the
    device's kind, name, memory and peak (not its UUID or bus id, which differ per node),
    compared as dicts (cheaper than writing each run's config out as a key); ``None`` where
    the config cannot be rebuilt (older records)."""
    if not isinstance(run.get("config"), dict) or "train" not in run["config"]:
        return None  # no config, or only the overrides of a run that never started
    config = {k: v for k, v in run["config"].items() if k != "repeat"}
    device = {k: _get(run, "device", k) for k in ("type", "name", "memory_gib", "peak_flops")}
    known = _PREDICTIONS.setdefault(_point_key(config), [])
    for known_config, known_device, pred in known:
        if known_device == device and known_config == config:
            return pred
    try:
        pred = _fast_predict(run)
    except (ValueError, TypeError, KeyError) as e:
        log.warning("no prediction for run %s: %s", run.get("run_id", "?"), e)
        pred = None
    known.append((config, device, pred))
    return pred


def _point_key(config: dict) -> tuple[str, str, str]:
    """The model, strategy and nodes of a config, as text: where :data:`_PREDICTIONS` looks
    for its prediction."""
    return (str(_get(config, "model", "name")), str(_get(config, "strategy", "name")),
            str(config.get("nodes")))


def _fast_predict(run: dict) -> dict | None:
    """``vitfsdp.plan.predict_run(run)`` without its OmegaConf rebuild of the config (most of
    its time): the recorded config (``dataclasses.asdict(RunConfig)``) becomes a
    :class:`~vitfsdp.config.RunConfig` field by field, validated by its ``__post_init__``s,
    and goes to :func:`vitfsdp.plan.predict_recorded`, as in ``predict_run``.
    A config this cannot rebuild goes to ``predict_run`` itself."""
    # the config (and Hydra under it) only where a run is predicted: rows read from the
    # cache (collect_runs' cache) need none, and its import is a tenth of a re-analysis
    from vitfsdp.config import RunConfig

    try:
        cfg = _dataclass_from_dict(RunConfig, run["config"])
    except (TypeError, ValueError, KeyError, AttributeError):
        return predict_run(run)
    return predict_recorded(cfg, run.get("device") or {})


def _dataclass_from_dict(cls: type, data: dict) -> Any:
    """``cls(**data)`` with every dataclass-typed field built the same way from its dict.

    Raises:
        TypeError: a key ``cls`` has no field for, or a nested value that is not a dict.
        ValueError: a field's ``__post_init__`` refuses its value.
    """
    hints = _type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        kind = hints[key] if key in hints else None
        if kind is None:
            raise TypeError(f"{cls.__name__} has no field {key!r}")
        kwargs[key] = (_dataclass_from_dict(kind, value)
                       if dataclasses.is_dataclass(kind) else value)
    return cls(**kwargs)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The init fields of dataclass ``cls`` and their resolved types."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _get(d: dict, *keys: str) -> Any:
    """``d[k1][k2]...``, or ``None`` where any level is missing or not a dict."""
    for key in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Nullable integers and floats for the numeric columns (JSON gives mixed ``None``)."""
    for col in INT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in FLOAT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df


def _sort_key(col: pd.Series) -> pd.Series:
    """Sort mixed-type object columns (e.g. booleans with ``None``) by their text."""
    return col.astype("string") if col.dtype == object else col


def line_columns(df: pd.DataFrame) -> list[str]:
    """The columns that identify one scaling line: model, strategy and any varying config.

    A column of :data:`VARIANT_COLUMNS` counts when it takes more than one value in ``df``;
    one of :data:`STRATEGY_COLUMNS` when it takes more than one value within a strategy.
    """
    cols = list(BASE_LINE_COLUMNS)
    configured = df[df["framework"].notna()]  # a run that failed before its config was
    df = configured if len(configured) else df  # recorded splits no line
    cols += [c for c in VARIANT_COLUMNS if df[c].nunique(dropna=False) > 1]
    within = df.groupby(list(BASE_LINE_COLUMNS), dropna=False)
    cols += [c for c in STRATEGY_COLUMNS if (within[c].nunique(dropna=False) > 1).any()]
    return cols


def label_columns(df: pd.DataFrame) -> list[str]:
    """The line columns that label lines: :func:`line_columns` without a PyTorch-only
    setting that splits no strategy's lines within a framework (it varies only between
    strategies or frameworks: DDP and JAX runs record it as null)."""
    keys = line_columns(df)
    within = df.groupby(["model", "strategy", "framework"], dropna=False)
    return [k for k in keys if k not in TORCH_ONLY_COLUMNS
            or (within[k].nunique(dropna=False) > 1).any()]


def configurations(df: pd.DataFrame) -> pd.Series:
    """Each row's line label (:func:`line_label` over :func:`label_columns`), e.g.
    ``"FULL_SHARD BACKWARD_POST"``: what figures' legends and tables call a configuration."""
    return line_labels(df, label_columns(df))


def line_labels(df: pd.DataFrame, keys: list[str]) -> pd.Series:
    """:func:`line_label` of every row of ``df``, column by column (fast for tens of
    thousands of runs)."""
    strategy = df["strategy"].astype("object")
    labels = strategy.where(strategy.notna(), "unknown strategy").astype(str)
    for key in keys[2:]:
        parts = [_label_part(key, v) for v in df[key].astype("object")]
        labels = labels + pd.Series(["" if p is None else " " + p for p in parts], df.index)
    return labels.astype("object")


def _label_part(key: str, value: Any) -> str | None:
    """One config value in a line label (see :func:`line_label`); ``None`` when null. The
    ``network`` column reads ``link 1 Gbit/s`` (nodes apart on an emulated link of that
    rate) or ``link not emulated``."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if key == "network":
        rate = re.search(r"emulated (\S+ Gbit/s)", str(value))
        return f"link {rate.group(1)}" if rate else "link not emulated"
    return value if isinstance(value, str) and "." not in key else f"{key}={value}"


def line_label(row: pd.Series, keys: list[str]) -> str:
    """A line's label: the strategy, then each varying config value of ``keys[2:]``
    (``name=value`` unless it is a word of an undotted column: ``bf16``, but
    ``kernels.adamw=fused``); a null value (a setting that does not apply) is left out."""
    parts = [str(row["strategy"]) if pd.notna(row["strategy"]) else "unknown strategy"]
    parts += [p for p in (_label_part(key, row[key]) for key in keys[2:]) if p is not None]
    return " ".join(parts)


def scaling_table(df: pd.DataFrame) -> pd.DataFrame:
    """Weak-scaling table of the completed runs of ``df`` (a :func:`collect_runs` frame).

    Each line is one model and strategy (split further by any varying config column, see
    :func:`line_columns`). Its ideal is linear scaling from its smallest completed node count
    ``n0``: ``ideal_ips = ips(n0) * nodes / n0``, where ``ips(n0)`` is the median over the
    completed runs at ``n0`` (one run per point in a plain sweep).

    Returns:
        One row per completed run with a measured ``ips``: the line columns, ``nodes``,
        ``world_size``, ``ips`` (global images/s), ``ideal_ips`` (images/s),
        ``scaling_efficiency`` (ips / ideal_ips, 1.0 = linear), ``tflops_per_gpu`` (model
        TFLOP/s per GPU), ``mfu`` (fraction of the device's peak), ``peak_mem_gib``,
        ``run_dir``; sorted like ``df``. Repeats stay separate rows here; see
        :func:`vitfsdp.analysis.tables.points_table` for one row per point.
    """
    keys = line_columns(df)
    done = df[(df["status"] == "completed") & df["ips"].notna() & df["nodes"].notna()].copy()
    cols = [*keys, "nodes", "world_size", "ips", "ideal_ips", "scaling_efficiency",
            "tflops_per_gpu", "mfu", "peak_mem_gib", "run_dir"]  # fmt: skip
    if done.empty:
        return pd.DataFrame(columns=cols)
    done["ideal_ips"] = _ideal_ips(done, keys)
    done["scaling_efficiency"] = done["ips"] / done["ideal_ips"]
    return done[cols].reset_index(drop=True)


def _ideal_ips(done: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Linear scaling from each line's smallest node count: ips(n0) * nodes / n0."""
    nodes = done["nodes"].astype("float64")
    n0 = nodes.groupby([done[k] for k in keys], dropna=False).transform("min")
    ips_at_n0 = done["ips"].where(nodes == n0)
    base_ips = ips_at_n0.groupby([done[k] for k in keys], dropna=False).transform("median")
    return base_ips * nodes / n0


def comparison_columns(df: pd.DataFrame) -> list[str]:
    """The line columns that pair a JAX run with a PyTorch run: all but ``framework`` and
    the :data:`TORCH_ONLY_COLUMNS` (null under JAX)."""
    return [c for c in line_columns(df) if c not in ("framework", *TORCH_ONLY_COLUMNS)]


def framework_ratio_table(df: pd.DataFrame) -> pd.DataFrame:
    """JAX against PyTorch: images/s of both and their ratio per model, strategy and node
    count (and any other varying config of :func:`comparison_columns`).

    Only completed runs count; the median ips is taken where a point ran more than once. A
    PyTorch setting that splits a strategy's PyTorch lines (``backward_prefetch`` swept,
    say) stays a column, each of its rows compared with the same JAX run.

    Returns:
        One row per point that both frameworks completed: the key columns, ``nodes``, the
        varying PyTorch-only columns, ``torch_ips`` and ``jax_ips`` (global images/s) and
        ``jax_over_torch`` (jax_ips / torch_ips; > 1: JAX is faster); empty (with these
        columns) when either framework has no completed run.
    """
    keys, lines = [*comparison_columns(df), "nodes"], line_columns(df)
    within = df[df["framework"] == "torch"].groupby(list(BASE_LINE_COLUMNS), dropna=False)
    torch_keys = [c for c in TORCH_ONLY_COLUMNS
                  if c in lines and (within[c].nunique(dropna=False) > 1).any()]
    done = df[(df["status"] == "completed") & df["ips"].notna() & df["nodes"].notna()]
    by_framework = {fw: done[done["framework"] == fw] for fw in ("torch", "jax")}
    cols = [*keys, *torch_keys, *RATIO_COLUMNS]
    if any(rows.empty for rows in by_framework.values()):
        return pd.DataFrame(columns=cols)
    torch_ips = (by_framework["torch"].groupby([*keys, *torch_keys], dropna=False)["ips"]
                 .median().rename("torch_ips").reset_index())
    jax_ips = (by_framework["jax"].groupby(keys, dropna=False)["ips"].median()
               .rename("jax_ips").reset_index())
    table = torch_ips.merge(jax_ips, on=keys, how="inner")
    table["jax_over_torch"] = table["jax_ips"] / table["torch_ips"]
    return table[cols].sort_values(keys, kind="stable", key=_sort_key).reset_index(drop=True)


def format_table(df: pd.DataFrame, scaling: pd.DataFrame | None = None) -> str:
    """A compact text table of every run: model, strategy, nodes, status, ips, efficiency, memory.

    Args:
        df: a :func:`collect_runs` frame (all statuses).
        scaling: its :func:`scaling_table`; computed if not given.

    Returns:
        The table as text; ips in images/s, efficiency in percent of ideal, peak memory in
        GiB; a missing value (a setting DDP does not have, a figure a failed run lacks) ``-``.
    """
    scaling = scaling_table(df) if scaling is None else scaling
    eff = scaling.set_index("run_dir")["scaling_efficiency"]
    keys = line_columns(df)
    table = df[[*keys, "nodes", "status"]].astype(object)
    table = table.where(table.notna(), "-")  # missing printed one way
    table["ips"] = df["ips"].map(lambda x: "-" if pd.isna(x) else f"{x:.1f}")
    table["efficiency"] = df["run_dir"].map(eff).map(format_efficiency)
    table["peak_mem_gib"] = df["peak_mem_gib"].map(lambda x: "-" if pd.isna(x) else f"{x:.2f}")
    return table.to_string(index=False) + efficiency_footnote(table["efficiency"])


#: What an efficiency above 100 % of the ideal line means in weak scaling: not super-linear
#: scaling (every rank does the same work) but noise, in the baseline or the point.
ABOVE_IDEAL_NOTE = ("* above 100 % of ideal: noise (in the smallest node count's baseline or "
                    "this point), not super-linear scaling")


def format_efficiency(x: float) -> str:
    """Scaling efficiency as a whole percent (``-`` where unknown), ``*`` after one that
    rounds above 100 % (see :data:`ABOVE_IDEAL_NOTE`)."""
    if pd.isna(x):
        return "-"
    return f"{x:.0%}" + ("*" if round(x * 100) > 100 else "")


def efficiency_footnote(column: pd.Series) -> str:
    """``\n`` and :data:`ABOVE_IDEAL_NOTE` where a formatted efficiency is flagged, else ``""``."""
    return f"\n{ABOVE_IDEAL_NOTE}" if column.str.endswith("*").any() else ""

