"""Job states and progress of a sweep's points: the live table while a sweep waits, and
``python -m vitfsdp.sweep --status SWEEP_DIR`` later.

A point's state comes from two places: Slurm's queue (``squeue -t all``, which also shows jobs
that ended in the last few minutes with their end state) while its job exists, and the point's
own records (``summary.json``, ``metrics.jsonl``) for its outcome. A job that ended without the
point's summary (cancelled, killed at its time limit, a node died, the ranks crashed before
writing) is recorded here as data: :func:`reconcile` writes its summary with the status that
Slurm's end state implies and the tail of the tasks' logs as reason.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vitfsdp.launch.local import tail
from vitfsdp.launch.slurm import JOB_FILE, TASK_LOG_DIR
from vitfsdp.records import METRICS_FILE, RUN_FILE, SUMMARY_FILE, mark_failed, read_json, read_jsonl

log = logging.getLogger(__name__)

#: Slurm end states (squeue -t all, scontrol); any other state means the job is still alive.
END_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
              "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY")
#: States of a job that is queued or running (requeued jobs pass through REQUEUED, PENDING).
ALIVE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_FED",
                "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT")
#: End states imposed from outside the run (a rerun of the sweep runs these points again).
INTERRUPTED = ("CANCELLED", "TIMEOUT", "DEADLINE", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "GONE")
#: The run status implied by a Slurm end state when the job left no summary (else failed).
END_STATUS = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "PREEMPTED": "preempted",
              "OUT_OF_MEMORY": "oom"}


@dataclass
class PointState:
    """One row of the status table."""

    run_dir: Path
    job_id: str | None = None  # Slurm job id (``<array job>_<index>`` in an array); None: local
    state: str = "-"  # Slurm state (PENDING, RUNNING, COMPLETED, TIMEOUT ...), or - if unknown
    nodelist: str = ""  # the job's nodes, as Slurm prints them
    step: int = 0  # last step reached (from metrics.jsonl)
    steps: int | None = None  # steps of the run (train.steps), once run.json exists
    ips: float | None = None  # ips of the last window
    status: str | None = None  # the run's status from summary.json; None while it runs

    @property
    def done(self) -> bool:
        """The point has its final summary (completed, or failed as data); a ``preempted``
        point whose job is still queued (requeued) is not done."""
        if self.status == "preempted" and self.state in ALIVE_STATES:
            return False
        return self.status is not None

    @property
    def job_ended(self) -> bool:
        """Slurm reports the job in an end state."""
        return self.state in END_STATES


def point_dirs(sweep_dir: Path) -> list[Path]:
    """Run directories of a sweep (with a job.json or run.json), in point-number order."""
    dirs = [d for d in Path(sweep_dir).iterdir()
            if d.is_dir() and ((d / JOB_FILE).exists() or (d / RUN_FILE).exists())]
    return sorted(dirs, key=lambda d: (int(d.name.split("_")[0]) if d.name.split("_")[0]
                                       .isdigit() else 1 << 30, d.name))


def read_state(run_dir: Path) -> PointState:
    """A point's state from its files alone (no Slurm query)."""
    job = read_json(run_dir / JOB_FILE) or {}
    run = read_json(run_dir / RUN_FILE) or {}
    summary = read_json(run_dir / SUMMARY_FILE)
    windows = read_jsonl(run_dir / METRICS_FILE)
    steps = (run.get("config") or {}).get("train", {}).get("steps")
    started = _started_job_id(run_dir)
    return PointState(
        run_dir=run_dir, job_id=job.get("job_id") or started,
        state="written" if job.get("submitted_with") == "script" and not started else "-",
        step=windows[-1]["step_end"] if windows else 0, steps=steps,
        ips=windows[-1].get("ips") if windows else None,
        status=summary["status"] if summary else None,
    )


def _started_job_id(run_dir: Path) -> str | None:
    """The job id of a script submitted by hand, from the ``slurm-<id>.out`` its job writes
    into the run directory when it starts (the newest, if it ran more than once)."""
    ids = [p.stem.removeprefix("slurm-") for p in run_dir.glob("slurm-*.out")]
    ids = [i for i in ids if i.isdigit()]
    return max(ids, key=int) if ids else None


def queue_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str, str]] | None:
    """Slurm's view of the jobs: id → (state, node list, reason), for jobs alive or ended in the
    last few minutes (``squeue -t all``); None when squeue cannot be reached."""
    ids = sorted({str(j).split("_")[0] for j in job_ids if j})
    if not ids:
        return {}
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids),
                               "-o", "%i|%T|%N|%r"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None if "Invalid job id" not in proc.stderr else {}
    states = {}
    for line in proc.stdout.splitlines():
        job_id, state, nodelist, reason = (line.split("|") + ["", "", ""])[:4]
        states[job_id.strip()] = (state.strip(), nodelist.strip(), reason.strip())
    return states


def collect(sweep_dir: Path, run_dirs: Sequence[Path] | None = None,
            query: bool = True) -> list[PointState]:
    """Every point's state: its records, and Slurm's queue when ``query``."""
    rows = [read_state(d) for d in (run_dirs if run_dirs is not None else point_dirs(sweep_dir))]
    queue = queue_states([r.job_id for r in rows if r.job_id]) if query else None
    for row in rows:
        if queue is not None and row.job_id in queue:
            row.state, row.nodelist, _ = queue[row.job_id]
        elif queue is not None and row.job_id and row.state == "-":
            row.state = "GONE"  # no longer known to slurmctld
    return rows


def reconcile(row: PointState) -> bool:
    """Record a point whose job ended without its summary; True when it wrote one."""
    if row.done or not row.job_id or not (row.job_ended or row.state == "GONE"):
        return False
    summary = read_json(row.run_dir / SUMMARY_FILE)
    if summary is not None:  # written since the row was read
        row.status = summary["status"]
        return False
    status = END_STATUS.get(row.state, "failed")
    progress = f"at step {row.step}/{row.steps}" if row.steps else "before the first step"
    reason = (f"Slurm job {row.job_id} ended {row.state} {progress} without a summary"
              f"{_job_limit(row)}; task log tail:\n{task_log_tail(row.run_dir)}")
    mark_failed(row.run_dir, status, reason, interrupted=row.state in INTERRUPTED)
    row.status = status
    return True


def _job_limit(row: PointState) -> str:
    if row.state in ("TIMEOUT", "DEADLINE"):
        limit = (read_json(row.run_dir / JOB_FILE) or {}).get("time_limit")
        return f" (time limit cluster.time={limit})"
    return " (scancel)" if row.state == "CANCELLED" else ""


def task_log_tail(run_dir: Path, num_lines: int = 20) -> str:
    """The last lines of task 0's log, and of the first other task log with a traceback."""
    logs = sorted((run_dir / TASK_LOG_DIR).glob("task*.log"),
                  key=lambda p: int(p.stem[4:]) if p.stem[4:].isdigit() else 0)
    parts = []
    for i, path in enumerate(logs):
        text = tail(path, num_lines)
        if i == 0 or "Traceback" in text or "Error" in text:
            parts.append(f"[{path.name}]\n{text}")
        if len(parts) == 2:
            break
    return "\n".join(parts)


def labels(rows: Sequence[PointState]) -> list[str]:
    """Short point labels: the point number and the overrides that differ between points
    (``3 nodes=2 strategy=HYBRID_2GPU``), from the run directory names."""
    parts = []
    for r in rows:
        num, _, rest = r.run_dir.name.partition("_")
        parts.append((num, rest.split(",") if rest else []))
    common = set.intersection(*(set(p[1]) for p in parts)) if len(parts) > 1 else set()
    return [" ".join([num, *(o for o in overrides if o not in common)])
            for num, overrides in parts]


def format_table(rows: Sequence[PointState]) -> str:
    """The status table: one line per point, then the counts of states."""
    header = ("point", "job", "state", "nodes", "step", "ips", "status")
    lines = [header] + [
        (label, r.job_id or "-", r.state, r.nodelist or "-",
         f"{r.step}/{r.steps}" if r.steps else str(r.step or "-"),
         f"{r.ips:.1f}" if r.ips is not None else "-", r.status or "-")
        for label, r in zip(labels(rows), rows, strict=True)
    ]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    widths[0] = min(widths[0], 60)
    text = "\n".join("  ".join(str(v)[:widths[i]].ljust(widths[i]) for i, v in enumerate(line))
                     .rstrip() for line in lines)
    return text + "\n" + summary_line(rows)


def summary_line(rows: Sequence[PointState]) -> str:
    """Counts such as ``6 points: 2 RUNNING, 1 PENDING, 3 completed``."""
    counts: dict[str, int] = {}
    for r in rows:
        key = r.status or r.state
        counts[key] = counts.get(key, 0) + 1
    return f"{len(rows)} points: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def watch(sweep_dir: Path, run_dirs: Sequence[Path], poll_s: float,
          show: Callable[[str], None], timeout_s: float | None = None) -> list[PointState]:
    """Poll until every point has its summary, showing the table whenever it changes.

    A job seen ended without a summary twice in a row (so a summary being written at the very
    end is not missed) is recorded by :func:`reconcile`.

    Raises:
        TimeoutError: ``timeout_s`` passed with points still unfinished.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    seen_ended: set[str] = set()
    last = None
    while True:
        rows = collect(sweep_dir, run_dirs)
        for row in rows:
            if not row.done and (row.job_ended or row.state == "GONE"):
                if str(row.run_dir) in seen_ended:
                    reconcile(row)
                seen_ended.add(str(row.run_dir))
        table = format_table(rows)
        if table != last:
            show(table)
            last = table
        if all(r.done for r in rows):
            return rows
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"points still running after {timeout_s} s: "
                               f"{summary_line(rows)}")
        time.sleep(poll_s)
