"""The points of a ``cluster=local`` sweep, run one after another here as
torchrun processes (:func:`run_one`), with progress lines or bars.
"""

from __future__ import annotations

import io
import re
import signal
import time
from pathlib import Path

from rich.console import Console

from vitfsdp.core.layout import HOST_FILE
from vitfsdp.core.throughput import competed, window_other_cpus
from vitfsdp.launch import local, secrets, slurm
from vitfsdp.models import train_flops_per_image
from vitfsdp.progress import SweepProgress
from vitfsdp.records import (
    METRICS_FILE,
    SUMMARY_FILE,
    disk_error,
    mark_failed,
    read_json,
    read_jsonl,
    reason_line,
    write_json_atomic,
)
from vitfsdp.sweep.point import Point, _point_label, log


def _host_work(point: Point) -> tuple[int, float]:
    """(ranks, FLOPs of one step of all ranks): what a point asks of this host, whose cores
    all its ranks share (the ETA of a local sweep, :class:`vitfsdp.progress.SweepProgress`);
    activation checkpointing adds a forward (4/3 of the training FLOPs)."""
    cfg = point.cfg
    flops = train_flops_per_image(cfg.model, cfg.num_classes) * (
        4 / 3 if cfg.train.activation_checkpointing else 1.0)
    return cfg.world_size, cfg.world_size * cfg.train.local_batch_size * flops


def _with_root_cause(run_dir: Path, summary: dict) -> dict:
    """``summary`` (a failed point's, rank 0's record) with torchrun's root cause appended
    to its reason where a rank died of a signal the reason does not name: a record that
    names only the symptom its rank 0 met ("Gloo all-reduce failed ... Connection closed by
    peer", as the JAX trainer's did before its failure board) where a peer was killed;
    torchrun saw which (``rank 1 (local_rank: 1) exitcode -9 (SIGKILL)``). Written back to
    summary.json; ``summary`` as it was otherwise."""
    cause = local.root_cause(run_dir / local.LOG_FILE)
    signal_name = re.search(r"\((SIG\w+)\)", cause)
    reason = str(summary.get("reason") or "")
    if not signal_name or signal_name.group(1) in reason:
        return summary
    said = "; ".join(filter(None, [reason, f"torchrun's root cause: {cause}"]))
    summary = {**summary, "reason": said}
    write_json_atomic(run_dir / SUMMARY_FILE, summary)
    return summary


def run_one(point: Point, tag: str, bars: SweepProgress | None = None, index: int = 0) -> dict:
    """Run one point with progress lines (or bars, :mod:`vitfsdp.progress`); return its
    summary (a failure recorded as data). ``index``: the point's place in ``bars``."""
    bars = bars or SweepProgress([point.cfg.train.steps], console=_PLAIN, logger=log)
    bars.start_point(index, tag, f"{tag} {_point_label(point)}  "
                     f"({point.cfg.world_size} ranks) -> {point.run_dir}")
    t0 = time.time()
    point.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(point.run_dir / slurm.JOB_FILE, local.job_record(point))
    try:
        rc = local.run_point(
            point.overrides, point.run_dir, point.cfg.world_size,
            log_path=point.run_dir / local.LOG_FILE,
            on_window=lambda w: bars.window(tag, w),
            env={**point.cfg.cluster.env, **secrets.point_secrets([point])},
            nodes=point.cfg.nodes, network=point.cfg.cluster.network,
            on_poll=lambda: bars.tick(tag),
        )
    except KeyboardInterrupt:  # its processes are stopped (run_until_done)
        _record_interrupted(point.run_dir)
        raise
    except SystemExit as e:  # SIGTERM, SIGHUP (vitfsdp.core.hangup.exit_on_hangup)
        name = stop_signal(e.code)
        if name:
            _record_interrupted(point.run_dir, name)
        raise
    summary = read_json(point.run_dir / SUMMARY_FILE)
    if summary is None:
        tail = local.tail(point.run_dir / local.LOG_FILE)
        disk = disk_error(tail)  # the cause, first: the ranks' own words come later
        reason = (f"{disk}; " if disk else "") + (f"exit code {rc} without a summary; log "
                                                  f"tail:\n{tail}")
        mark_failed(point.run_dir, "failed", reason)
        summary = read_json(point.run_dir / SUMMARY_FILE)
    elif rc and summary.get("status") == "failed":
        summary = _with_root_cause(point.run_dir, summary)
    bars.end_point(f"{tag} {summary['status']} in {time.time() - t0:.0f} s{_figures(summary)}"
                   f"{_other_work(point.run_dir, summary)}")
    return summary


def _other_work(run_dir: Path, summary: dict) -> str:
    """``"; NOT A RESULT: other work kept 1.2 of this host's 2 cores busy during its timed
    windows"`` where other work competed (:func:`vitfsdp.core.throughput.competed`) by the
    figure and bound the analysis judges the run by: over its measured windows
    (:func:`~vitfsdp.core.throughput.window_other_cpus` of ``metrics.jsonl``; the whole
    point's bound where a CPU quota held its nodes back), else over the whole point
    (``host.json``, :class:`vitfsdp.records.OtherWork`: records without window figures,
    older than either trainer's); else ``""``. ``summary``: the point's summary.json, as
    the sweep read it (``competition.cpu_throttled_s``)."""
    host = read_json(run_dir / HOST_FILE) or {}
    cpus = host.get("host_cpus")
    try:
        other = window_other_cpus(read_jsonl(run_dir / METRICS_FILE))
    except (OSError, ValueError):  # an unreadable metrics.jsonl: the whole point's figure
        other = None
    during = " during its timed windows"
    if other is None:
        other, during = host.get("other_cpus"), ""
    throttled = ((summary.get("competition") or {}).get("cpu_throttled_s") or 0) > 0
    # quota-held nodes keep the whole point's bound, as the analysis (competed_flags)
    if not competed(other, cpus, over_windows=bool(during) and not throttled):
        return ""
    return f"; NOT A RESULT: other work kept {other:.1f} of this host's {cpus} cores busy{during}"


#: The signals that end a sweep as Ctrl-C does, besides SIGINT (:func:`stop_signal`), and
#: the one-line reason a point they stop is recorded ``cancelled`` with.
STOP_REASONS = {"SIGTERM": "SIGTERM: the sweep was killed",
                "SIGHUP": "SIGHUP: the terminal hung up (its login session closed)"}


def stop_signal(code: object) -> str | None:
    """The name of the signal behind a sweep's ``SystemExit(code)`` (128 + the signal, as
    :func:`vitfsdp.core.hangup.exit_on_hangup` raises it): ``"SIGTERM"`` or
    ``"SIGHUP"``; ``None`` for any other code (an exit of its own)."""
    if not isinstance(code, int) or code <= 128:
        return None
    try:
        name = signal.Signals(code - 128).name
    except ValueError:
        return None
    return name if name in STOP_REASONS else None


def _record_interrupted(run_dir: Path, name: str = "") -> None:
    """Record a point stopped by Ctrl-C (or the signal ``name``, a key of
    :data:`STOP_REASONS`) ``cancelled`` and ``interrupted`` (a rerun runs it again), over
    what its ranks wrote as they were stopped; a completed run stays."""
    if (read_json(run_dir / SUMMARY_FILE) or {}).get("status") == "completed":
        return
    why = STOP_REASONS.get(name, "interrupted (Ctrl-C) in the sweep")
    mark_failed(run_dir, "cancelled", f"{why}; a rerun of the sweep runs it again",
                interrupted=True)


#: a console that is never a terminal: run_one called alone logs plain lines
_PLAIN = Console(file=io.StringIO(), force_terminal=False)


def _figures(summary: dict) -> str:
    """The end-of-point line's figures: the reason of a run that did not complete, else its
    images/s, step time and peak memory, and, for a run resumed from a checkpoint
    (``num_attempts`` > 1), that they pool the measured windows of its attempts (runs.csv
    ``attempts_differ`` says whether those measured different speeds)."""
    if summary["status"] != "completed":
        reason = reason_line(summary.get("reason"))
        return f": {reason}" if reason else ""
    mem = summary.get("peak_mem_allocated_gib") or summary.get("peak_rss_gib")
    attempts = summary.get("num_attempts")
    pooled = (f" (pooling the windows of {attempts} attempts: resumed from a checkpoint)"
              if isinstance(attempts, int) and attempts > 1 else "")
    return (f": {summary['ips']:.1f} images/s, {summary['step_time_s']:.3f} s/step, "
            f"peak memory {mem:.2f} GiB{pooled}")
