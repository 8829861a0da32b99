"""Job states and progress of a sweep's points: the live table while a sweep waits, and
``python -m vitfsdp.sweep --status SWEEP_DIR`` later.

A point's state comes from two places: Slurm (``sacct`` where the cluster keeps accounting:
every job's and job step's end state, exit code and reason, for as long as the database keeps
them; ``squeue -t all`` beside it for jobs the database has not seen yet, and alone where there
is no accounting: it shows ended jobs for ``MinJobAge``, a few minutes) and the point's own
records (``summary.json``, ``metrics.jsonl``) for its outcome. A point packed with others into
one job (:mod:`vitfsdp.launch.pack`) is its own job step, named :data:`STEP_NAME` after its
position in the pack.

Once a point's job (or step) has ended, :func:`reconcile` keeps Slurm's view in the point's
``summary.json`` (a ``slurm`` object: job id, state, exit code, reason) and settles its status:

- no summary (killed at its time limit, a node died, the ranks crashed before writing, the
  job script's setup failed, the pack ended before the point started): the status Slurm's
  end implies, with the last non-empty line of the tasks' logs (else of the job's own output,
  :func:`job_log_tail`) in the reason's first line and their tail below it; a packed point
  that its pack did not reach because the sweep's same-failure stop named the pack in its
  stop file (:func:`pack_stop_reason`): ``cancelled`` with the stop's reason, ``held_back``
  (for ``--rerun-failed``, as the pending jobs the stop cancelled);
- ``preempted`` (the training saved a checkpoint on a stop signal) in a job that is not
  requeued: ``cancelled`` after ``scancel``, ``timeout`` when the job reached its time limit
  (Slurm's ``TIMEOUT``, or it stopped within ``cluster.signal_delay_s`` + 60 s of the limit:
  the ``--signal`` of the limit, with no requeue left). Both stay ``interrupted``: a rerun of
  the sweep runs them again, resuming from their checkpoint.

A job that ended before it started (cancelled while pending) gets a one-line reason that says
so, Slurm's record of it (state, its pending reason) in the summary's ``slurm`` object. A job
Slurm no longer knows (``GONE``: no record in ``squeue`` nor ``sacct``, as after ``scancel`` of a
pending array task) with nothing of a start in the point's directory (no step, no run.json, no
task log, no job output) is ``cancelled``, saying it left the queue before it started
(:func:`_left_before_start`); one that had started stays ``failed`` with its last log line.

The table shows a pending job's reason (squeue's ``%r``: ``PENDING (Priority)``), and below
it a line per reason a user acts on (a QOS or association limit, nodes not available, a
reservation, a dependency never satisfied, a hold) with what to do (:func:`pending_lines`).
A point of the sweep's last command with no job (``not submitted``) says why, from what the
sweep recorded in :data:`NOT_SUBMITTED_FILE` (:func:`record_not_submitted`,
:func:`not_submitted_why`). A point of an earlier command that the last one runs again with
other environment settings (a fix: another ``cluster.env``, venv or modules makes a new
point) is :attr:`PointState.superseded`: its row says so and it is counted on a line of its
own.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from vitfsdp.core.layout import (
    CANCELLED,
    COMMANDS_FILE,
    COMPLETED,
    FAILED,
    INTERRUPTED_STATUSES,
    JOB_FILE,
    METRICS_FILE,
    OOM,
    PACK_DIR,
    PACK_OUTPUT,
    PACK_STOP_FILE,
    PREEMPTED,
    RUN_FILE,
    SLURM_OUTPUT,
    SUBMITIT_DIR,
    SUMMARY_FILE,
    TASK_LOG,
    TASK_LOG_DIR,
    TIMEOUT,
    field_of,
)
from vitfsdp.launch import time_limit_s
from vitfsdp.launch.local import point_processes, process_runs, tail
from vitfsdp.launch.resume import hand_submitted_job_id
from vitfsdp.progress import format_quiet
from vitfsdp.records import (
    disk_error,
    mark_failed,
    read_json,
    read_jsonl,
    reason_line,
    summarize_windows,
    write_json_atomic,
)

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
END_STATUS = {"TIMEOUT": TIMEOUT, "DEADLINE": TIMEOUT, "PREEMPTED": PREEMPTED,
              "OUT_OF_MEMORY": OOM, "CANCELLED": CANCELLED}
#: Slurm may send ``--signal`` up to this many seconds before the requested time (sbatch(1)).
SIGNAL_EARLY_S = 60
SLURM_KEY = "slurm"  # summary.json: Slurm's view of the point's end
#: The name of a packed point's job step (``srun --job-name``), by its position in the pack.
STEP_NAME = "vitfsdp-point{position}"


@dataclass(frozen=True)
class SlurmJob:
    """A job (or job step) as Slurm reports it."""

    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED (sacct's " by <uid>" dropped) ...
    name: str = ""  # the job's or step's name (sacct); "" from squeue
    nodelist: str = ""
    reason: str = ""  # Slurm's reason (pending reason, or e.g. NonZeroExitCode); "" if none
    exit_code: str | None = None  # "<code>:<signal>" as sacct prints it; None from squeue
    elapsed_s: int | None = None  # run time so far or in all, s (sacct); None from squeue
    time_limit_s: int | None = None  # the job's time limit, s (sacct); None from squeue

    def record(self, job_id: str) -> dict:
        """The ``slurm`` object of a summary."""
        return {"job_id": job_id, "state": self.state, "exit_code": self.exit_code,
                "reason": self.reason or None, "elapsed_s": self.elapsed_s}


@dataclass
class PointState:
    """One row of the status table."""

    run_dir: Path
    job_id: str | None = None  # Slurm job id (``<array job>_<index>`` in an array); None: local
    state: str = "-"  # Slurm state (PENDING, RUNNING, COMPLETED, TIMEOUT ...), or - if unknown
    nodelist: str = ""  # the job's nodes, as Slurm prints them
    step: int = 0  # last step reached (from metrics.jsonl)
    steps: int | None = None  # steps of the run (train.steps), once run.json exists
    #: headline ips: a completed point's, else the median of the measured windows so far
    #: while it runs; None for a point that ended otherwise (:attr:`last_window_ips`)
    ips: float | None = None
    status: str | None = None  # the run's status from summary.json; None while it runs
    position: int | None = None  # place in its pack (job.json); None: a job of its own
    step_id: str | None = None  # a packed point's job step (``<job>.<step>``), once it exists
    job: SlurmJob | None = None  # Slurm's view of the job, when it answered
    own: SlurmJob | None = None  # the point's own: its step in a pack (None: not started), or job
    slurm_recorded: bool = False  # summary.json holds Slurm's end (:func:`reconcile`)
    pending_reason: str = ""  # Slurm's reason while the state shown is PENDING (squeue's %r)
    #: a point of an earlier command of the sweep directory that its last command runs again
    #: with other environment settings (``--status``): shown, counted apart, not judged
    superseded: bool = False
    #: the point's overrides as its job.json (else run.json) records them, redacted; None
    #: where neither holds them (:func:`labels` then reads the run directory's name)
    overrides: list[str] | None = None
    #: a local point's newest record (metrics.jsonl, run.json, job.json), seconds since the
    #: epoch: shown while it runs (:data:`LOCAL_RUNNING`); None for any other point
    last_record_at: float | None = None
    #: images/s of the last measured window of a point that ended otherwise than completed
    #: (failed, oom, timeout, cancelled, preempted): no figure of the point, shown as such in
    #: its status cell (:func:`_status_cell`); None for any other point or where none was
    last_window_ips: float | None = None

    @property
    def done(self) -> bool:
        """The point has its final summary (completed, or failed as data) and, for a Slurm
        point whose job Slurm still knows, Slurm's end in it; a ``preempted`` point whose
        job is still queued (requeued) is not done. A local point whose sweep process is gone
        without a summary (:data:`LOCAL_STOPPED`) is done too: nothing will write one (the
        sweep's command runs it again), so ``--status --watch`` ends rather than wait on it."""
        if self.state == LOCAL_STOPPED:
            return True
        if self.status is None or (self.status == PREEMPTED and self.state in ALIVE_STATES):
            return False
        return self.slurm_recorded or self.job_id is None or self.state in ("-", "written")

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
    job_id = job.get("job_id") or hand_submitted_job_id(run_dir)
    pack = job.get("pack") or {}
    state = "written" if job.get("submitted_with") == "script" and not job_id else "-"
    local_state = _local_state(job, run_dir) if summary is None and not job_id else None
    ended = summary is not None and summary.get("status") != COMPLETED
    return PointState(
        run_dir=run_dir, job_id=job_id, state=local_state or state,
        nodelist=job["sweep"]["host"] if local_state == LOCAL_RUNNING else "",
        last_record_at=_last_record_at(run_dir) if local_state == LOCAL_RUNNING else None,
        step=windows[-1]["step_end"] if windows else 0, steps=steps,
        ips=None if ended else (summary or {}).get("ips") or summarize_windows(windows)["ips"],
        last_window_ips=_last_window_ips(windows) if ended else None,
        status=summary["status"] if summary else None,
        position=pack.get("position"),
        slurm_recorded=bool(summary and SLURM_KEY in summary),
        overrides=_recorded_overrides(job, run),
    )


def _last_window_ips(windows: Sequence[dict]) -> float | None:
    """images/s of the last measured (not warm-up) window of ``windows`` (metrics.jsonl's
    records); None where none measured one."""
    measured = [w.get("ips") for w in windows if not w.get("warmup")]
    last = measured[-1] if measured else None
    return float(last) if isinstance(last, (int, float)) and not isinstance(last, bool) else None


#: The state of a local point (``cluster=local``: no Slurm job) whose sweep process still
#: runs and that has no summary yet, and of one whose sweep process is gone without one (a
#: SIGKILL, a reboot: the sweep's command runs it again).
LOCAL_RUNNING, LOCAL_STOPPED = "RUNNING", "STOPPED"


def _local_state(job: dict, run_dir: Path) -> str | None:
    """:data:`LOCAL_RUNNING` or :data:`LOCAL_STOPPED` for a local point with no summary, as
    the sweep process its job.json names runs or not
    (:func:`vitfsdp.launch.local.process_runs`), or, that process gone (a SIGKILL), its
    torchrun and ranks still run here (:func:`vitfsdp.launch.local.point_processes`); None
    where that cannot be told (another host's sweep, a job.json from before it was
    recorded)."""
    runs = process_runs(job.get("sweep")) if job.get("launcher") == "local" else None
    if runs is False and point_processes(run_dir):
        runs = True  # its sweep is gone, its ranks are not: they still write its files
    return None if runs is None else LOCAL_RUNNING if runs else LOCAL_STOPPED


def _last_record_at(run_dir: Path) -> float | None:
    """When the point's newest record (metrics.jsonl, run.json, job.json) was written,
    seconds since the epoch; None where none is there."""
    times = []
    for name in (METRICS_FILE, RUN_FILE, JOB_FILE):
        try:
            times.append((run_dir / name).stat().st_mtime)
        except OSError:
            continue
    return max(times, default=None)


def _recorded_overrides(job: dict, run: dict) -> list[str] | None:
    """A point's overrides from its job.json's ``overrides`` (else run.json's), as text;
    None where neither holds a list of them."""
    for record in (job, run):
        overrides = record.get("overrides") if isinstance(record, dict) else None
        if isinstance(overrides, list):
            return [str(o) for o in overrides]
    return None


def queue_states(job_ids: Sequence[str]) -> dict[str, SlurmJob] | None:
    """Slurm's view of the jobs: id (``123``, ``123_4`` for an array task, ``123.0`` for a job
    step) → :class:`SlurmJob`. From ``sacct`` where the cluster keeps accounting, over
    ``squeue -t all`` (jobs alive or ended in the last few minutes; no steps), whose state
    and reason a pending job takes (slurmctld's, current); one call of each for all the
    jobs. None when neither answers."""
    ids = sorted({str(j).split("_")[0].split(".")[0] for j in job_ids if j})
    if not ids:
        return {}
    queued, accounted = _run_query(_squeue_argv(ids)), _run_query(_sacct_argv(ids))
    if queued is None and accounted is None:
        return None
    # sacct's record wins: it carries the exit code, and it is the one that lasts; but
    # slurmctld's is the current one for a pending job (sacct's reason lags, or is None)
    jobs = {**(squeue := parse_squeue(queued or "")), **parse_sacct(accounted or "")}
    for job_id, job in squeue.items():
        if job.state == "PENDING" and jobs[job_id] is not job:
            jobs[job_id] = replace(jobs[job_id], state=job.state, reason=job.reason)
    return jobs


#: Seconds an interrupted sweep's last line waits for squeue (a ^C, a full disk): the user is
#: leaving; "cannot say" covers a slurmctld slower than that.
QUICK_QUERY_S = 10


def alive_in_queue(job_ids: Sequence[str], timeout_s: float = 60) -> dict[str, str] | None:
    """The jobs of ``job_ids`` that ``squeue`` (slurmctld's current view, not sacct's, which
    may record a job's end while it is still ``COMPLETING``) reports queued or running:
    id (``123``, ``123_4`` for an array task) → state (``RUNNING``, ``COMPLETING``,
    ``PENDING`` of a requeued job ...). One call for all; ``{}`` for no ids.

    Returns:
        ``None`` where squeue cannot answer (not installed, not reachable, an error other
        than "Invalid job id", no answer in ``timeout_s`` seconds): whether they still run
        is then unknown.
    """
    ids = sorted({str(j).split("_")[0].split(".")[0] for j in job_ids if j})
    if not ids:
        return {}
    out = _run_query(_squeue_argv(ids), timeout_s)
    if out is None:
        return None
    return {job_id: job.state for job_id, job in parse_squeue(out).items()
            if job.state and job.state not in END_STATES}


def _squeue_argv(ids: Sequence[str]) -> list[str]:
    return ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%N|%r"]


def _sacct_argv(ids: Sequence[str]) -> list[str]:
    return ["sacct", "-n", "-P", "-j", ",".join(ids),
            "-o", "JobID,JobName,State,NodeList,Reason,ExitCode,ElapsedRaw,TimelimitRaw"]


def _run_query(argv: list[str], timeout_s: float = 60) -> str | None:
    """A query's output; "" when Slurm knows none of the ids; None when it cannot answer
    (not reachable, no accounting for sacct, or no answer in ``timeout_s`` seconds)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return "" if "Invalid job id" in proc.stderr else None
    return proc.stdout


#: What Slurm prints as the node list of a job not yet placed (sacct's ``NodeList``).
NOT_PLACED = "None assigned"


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """``squeue -o %i|%T|%N|%r`` lines → id → :class:`SlurmJob` (a reason ``None``: "")."""
    states = {}
    for line in text.splitlines():
        job_id, state, nodelist, reason = (line.split("|") + ["", "", ""])[:4]
        nodes = nodelist.strip()  # sacct's placeholder for a job not yet placed
        reason = reason.strip()
        states[job_id.strip()] = SlurmJob(state.strip(),
                                          nodelist="" if nodes == NOT_PLACED else nodes,
                                          reason="" if reason == "None" else reason)
    return states


def parse_sacct(text: str) -> dict[str, SlurmJob]:
    """``sacct -P -o JobID,JobName,State,NodeList,Reason,ExitCode,ElapsedRaw,TimelimitRaw``
    lines → id → :class:`SlurmJob`; the ``batch`` and ``extern`` steps are left out."""
    states = {}
    for line in text.splitlines():
        fields = [f.strip() for f in (line.split("|") + [""] * 8)[:8]]
        job_id, name, state, nodelist, reason, exit_code, elapsed, limit = fields
        if not job_id or job_id.endswith((".batch", ".extern")):
            continue
        states[job_id] = SlurmJob(
            state.split(" ")[0], name, "" if nodelist == NOT_PLACED else nodelist,
            "" if reason == "None" else reason,
            exit_code or None, int(elapsed) if elapsed.isdigit() else None,
            int(limit) * 60 if limit.isdigit() else None)
    return states


def collect(sweep_dir: Path, run_dirs: Sequence[Path] | None = None,
            query: bool = True) -> list[PointState]:
    """Every point's state: its records, and Slurm's queue when ``query``."""
    rows = [read_state(d) for d in (run_dirs if run_dirs is not None else point_dirs(sweep_dir))]
    queue = queue_states([r.job_id for r in rows if r.job_id]) if query else None
    for row in rows:
        if queue is not None and row.job_id in queue:
            row.job = queue[row.job_id]
            if row.position is None:
                row.own = row.job
            else:
                row.step_id = find_step(queue, row.job_id, row.position)
                row.own = queue.get(row.step_id or "")
            shown = row.own or _not_started(row.job)
            row.state, row.nodelist = shown.state, shown.nodelist
            row.pending_reason = shown.reason if shown.state == "PENDING" else ""
        elif queue is not None and row.job_id and row.state == "-":
            row.state = "GONE"  # no longer known to slurmctld (nor to sacct)
    return rows


def find_step(queue: dict[str, SlurmJob], job_id: str, position: int) -> str | None:
    """The id of the job step that runs the point at ``position`` of a pack (named
    :data:`STEP_NAME`); None before it starts, or without accounting."""
    name = STEP_NAME.format(position=position)
    return next((key for key, job in queue.items()
                 if key.startswith(f"{job_id}.") and job.name == name), None)


def _not_started(job: SlurmJob) -> SlurmJob:
    """The state shown for a packed point whose step has not started: its pack's while the
    pack is pending (with Slurm's reason) or has ended, else PENDING (waiting in its pack)."""
    if job.state == "PENDING" or job.state not in ALIVE_STATES:
        return job
    return SlurmJob("PENDING", reason="waiting in its pack")


def reconcile(row: PointState) -> bool:
    """Keep Slurm's end in the summary of a point whose job (or step) ended, settling its
    status (see the module's docstring); True when it wrote the summary."""
    if row.slurm_recorded or not row.job_id or not (row.job_ended or row.state == "GONE"):
        return False
    summary = read_json(row.run_dir / SUMMARY_FILE)
    if summary and summary["status"] == PREEMPTED and row.job and row.job.state in ALIVE_STATES:
        return False  # its pack is ending (or requeued): settled once the job has ended
    own = row.own or row.job or SlurmJob(row.state)
    slurm = own.record(row.step_id if row.own and row.step_id else row.job_id)
    if row.position is not None and row.job is not None:
        slurm["job_state"] = row.job.state  # the pack's
    if summary is None:
        stopped = _stopped_by_sweep(row)  # its pack named in the sweep's stop file
        status = _status_without_summary(row, stopped)
        reason = _reason_without_summary(row, own, status, stopped)
        interrupted = status in INTERRUPTED_STATUSES or row.state in INTERRUPTED
        held = {"held_back": True} if stopped else {}  # by the sweep: fix the failure first
        mark_failed(row.run_dir, status, reason, interrupted=interrupted, **held,
                    **{SLURM_KEY: slurm})
    elif summary["status"] == PREEMPTED and _outside_end(row):
        status = _outside_end(row)
        reason = (_time_limit_reason(row, summary) if status == TIMEOUT else
                  f"{status}: Slurm job {row.job_id} ended {row.job.state}"
                  f"{_job_limit(row, status)} and was not requeued; the training had "
                  f"stopped: {summary.get('reason')}")
        extra = {k: v for k, v in summary.items() if k in _KEPT}
        mark_failed(row.run_dir, status, reason, interrupted=True, **extra, **{SLURM_KEY: slurm})
    else:
        write_json_atomic(row.run_dir / SUMMARY_FILE, {**summary, SLURM_KEY: slurm})
        status = summary["status"]
    row.status, row.slurm_recorded = status, True
    return True


def _reason_without_summary(row: PointState, own: SlurmJob, status: str,
                            stopped: str | None = None) -> str:
    """The reason of a point whose job (or step) ended without a summary: Slurm's end and
    the tasks' (else the job's) last log line, their tail below; one line for a job that
    ended before it started, and for a packed point its pack did not reach (``stopped``:
    the sweep's stop file's reason, where it named the pack: :func:`_stopped_by_sweep`)."""
    if stopped:
        return (f"cancelled before it started: its pack, Slurm job {row.job_id}, ran no "
                f"further point: {stopped}")
    if row.state == "GONE" and _left_before_start(row):
        return _left_queue_reason(row)
    progress = f"at step {row.step}/{row.steps}" if row.steps else "before the first step"
    tail = task_log_tail(row.run_dir) or job_log_tail(row.run_dir, row.job_id)
    last = tail.splitlines()[-1] if tail else "no log line"
    disk = disk_error(tail)  # the cause, first
    reason = (f"{disk}; " if disk else "") + (
        f"Slurm job {row.job_id} ended {row.state} {progress} without a summary"
        f"{_job_limit(row, status)}: {last}\nlog tail:\n{tail}")
    if not tail and _never_started(row, own):
        reason = _ended_before_start(row, own, status)
    if row.position is not None and row.own is None:
        reason = (f"its pack, Slurm job {row.job_id}, ended {row.state}"
                  f"{_job_limit(row, status)} before this point started")
    return reason


def pack_stop_reason(sweep_dir: Path, job_id: str | None) -> str | None:
    """Why the sweep's same-failure stop told the pack ``job_id`` to run no further point:
    the reason of its line in the sweep's stop file (:data:`PACK_STOP_FILE` in
    :data:`PACK_DIR`, ``<job id> <reason>``: :func:`vitfsdp.launch.pack.stop_packs`); None
    where no line names it, or the file is missing or unreadable."""
    try:
        text = (Path(sweep_dir) / PACK_DIR / PACK_STOP_FILE).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        named, _, reason = line.partition(" ")
        if job_id and named == job_id:
            return reason.strip() or "stopped by the sweep"
    return None


def _stopped_by_sweep(row: PointState) -> str | None:
    """The stop file's reason (:func:`pack_stop_reason`) for a packed point whose step never
    started (no step in Slurm's records, no line in its task logs) in a pack the sweep's
    same-failure stop named; None for any other point."""
    if row.position is None or row.own is not None or task_log_tail(row.run_dir):
        return None
    return pack_stop_reason(row.run_dir.parent, row.job_id)


#: Summary fields of a preempted run kept when Slurm's end settles it as cancelled/timeout.
_KEPT = ("last_step", "checkpoint_step", "num_attempts", "elapsed_s")


def _never_started(row: PointState, own: SlurmJob) -> bool:
    """The point's own job (not a pack's step) ended without ever running, as Slurm
    records it: on no node, for no time, and the point reached no step (a job cancelled
    while it was pending); where Slurm no longer knows the job (``GONE``), as its files
    say: :func:`_left_before_start`."""
    if row.state == "GONE":
        return _left_before_start(row)
    return (row.position is None and row.job is not None and not own.nodelist
            and not own.elapsed_s and not row.step)


def _left_before_start(row: PointState) -> bool:
    """A point whose job Slurm no longer knows (``GONE``: neither squeue nor sacct has a
    record, as after ``scancel`` of a pending array task) shows nothing of a start: no node
    known, no step reached, no run.json (the training writes it as it starts), no line in
    its task logs and no output file of its job (submitit's log, ``slurm-<id>.out``, its
    pack's output: Slurm creates it as the job starts). False for any other point."""
    if row.state != "GONE" or row.nodelist or row.step or (row.run_dir / RUN_FILE).exists():
        return False
    return not task_log_tail(row.run_dir) and not _job_outputs(row.run_dir, row.job_id)


def _left_queue_reason(row: PointState) -> str:
    """The one-line reason of a point :func:`_left_before_start`: ``Slurm job 1840_1 left
    Slurm's queue before it started (scancel of a pending task?); Slurm kept no record``."""
    what = "task" if "_" in str(row.job_id) else "job"
    pack = ", its pack," if row.position is not None else ""
    return (f"Slurm job {row.job_id}{pack} left Slurm's queue before it started (scancel of "
            f"a pending {what}?); Slurm kept no record")


def _ended_before_start(row: PointState, own: SlurmJob, status: str) -> str:
    """The one-line reason of a job that ended before it started: ``Slurm job 12 was
    cancelled before it started (scancel; it was pending: JobHeldUser)``, Slurm's own words
    (its state, its last pending reason's first line) where it was not cancelled."""
    pending = reason_line(own.reason) or ""
    if status == CANCELLED or row.state == "CANCELLED":
        why = "; ".join(["scancel", *([f"it was pending: {pending}"] if pending else [])])
        return f"Slurm job {row.job_id} was cancelled before it started ({why})"
    return (f"Slurm job {row.job_id} ended {row.state} before it started"
            f"{_job_limit(row, status)}" + (f" (Slurm's reason: {pending})" if pending else ""))


def _status_without_summary(row: PointState, stopped: str | None = None) -> str:
    """The status of a point that left no summary: Slurm's end state's (else ``failed``); a
    packed point that never started takes its pack's end (``cancelled``, ``timeout``, or
    ``preempted`` when the pack stopped early on a stop signal), or ``cancelled`` where the
    sweep's same-failure stop named its pack, whatever the pack's end (``stopped``: the stop
    file's reason, :func:`_stopped_by_sweep`), or where its job left Slurm's queue before it
    started (:func:`_left_before_start`)."""
    if stopped or (row.state == "GONE" and _left_before_start(row)):
        return CANCELLED
    if row.position is not None and row.own is None and row.job is not None:
        return _outside_end(row) or PREEMPTED
    return END_STATUS.get(row.state, FAILED)


def _outside_end(row: PointState) -> str | None:
    """``cancelled`` or ``timeout`` when the job of a preempted point ended from outside
    and is not requeued; None otherwise (still alive: requeued; or no Slurm record)."""
    job = row.job
    if job is None or job.state not in END_STATES:
        return None
    if job.state == "CANCELLED":
        return CANCELLED
    return TIMEOUT if _reached_time_limit(job, _signal_delay_s(row)) else None


def _reached_time_limit(job: SlurmJob, signal_delay_s: int) -> bool:
    """Slurm ended the job at its time limit, or it stopped within ``--signal``'s delay
    (plus Slurm's early margin) of the limit: the time-limit signal."""
    if job.state in ("TIMEOUT", "DEADLINE"):
        return True
    if job.elapsed_s is None or job.time_limit_s is None:
        return False
    return job.elapsed_s >= job.time_limit_s - signal_delay_s - SIGNAL_EARLY_S


def _signal_delay_s(row: PointState) -> int:
    """The point's ``cluster.signal_delay_s`` (job.json, else run.json; 90 if neither)."""
    job = read_json(row.run_dir / JOB_FILE) or {}
    run = read_json(row.run_dir / RUN_FILE) or {}
    cluster = (run.get("config") or {}).get("cluster") or {}
    return int(job.get("signal_delay_s") or cluster.get("signal_delay_s") or 90)


def _job_limit(row: PointState, status: str) -> str:
    """`` (time limit 2 min)`` for a ``timeout``, `` (scancel)`` for ``cancelled``, else
    ''."""
    if status == TIMEOUT:
        minutes = _limit_minutes(row)
        return f" (time limit {minutes} min)" if minutes is not None else " (time limit)"
    return " (scancel)" if status == CANCELLED else ""


def _cluster_config(row: PointState) -> dict:
    """The point's ``cluster`` config as its job.json (else run.json) records it; {} if
    neither does."""
    for name in (JOB_FILE, RUN_FILE):
        cluster = ((read_json(row.run_dir / name) or {}).get("config") or {}).get("cluster")
        if isinstance(cluster, dict):
            return cluster
    return {}


def _limit_minutes(row: PointState) -> int | None:
    """The job's time limit in minutes (Slurm's unit): Slurm's record of it (sacct), else
    job.json's ``time_limit`` (a pack's own), else ``cluster.time``; None where none says."""
    if row.job is not None and row.job.time_limit_s:
        return -(-row.job.time_limit_s // 60)
    for value in ((read_json(row.run_dir / JOB_FILE) or {}).get("time_limit"),
                  _cluster_config(row).get("time")):
        if value is None:
            continue
        try:
            return -(-time_limit_s(str(value)) // 60)
        except ValueError:  # cluster.time=auto, or a record not in Slurm's formats
            continue
    return None


def _time_limit_reason(row: PointState, summary: dict) -> str:
    """The reason of a preempted point whose job reached its time limit with no requeue
    left, from what its records hold (what they do not hold is left out): ``Slurm job 1842
    reached its time limit (cluster.time=2: 2 min) after 2 attempts (cluster.max_requeues=1
    used up) at step 2380 of 100000: raise cluster.time or cluster.max_requeues``; a packed
    point's names its pack's limit (a pack is not requeued)."""
    cluster = _cluster_config(row)
    minutes = _limit_minutes(row)
    in_min = f"{minutes} min" if minutes is not None else ""
    if row.position is not None:
        limit = f", its pack, reached the pack's time limit{f' ({in_min})' if in_min else ''}"
    else:
        given = [f"cluster.time={cluster['time']}"] if cluster.get("time") is not None else []
        shown = ": ".join([*given, *([in_min] if in_min else [])])
        limit = f" reached its time limit{f' ({shown})' if shown else ''}"
    attempts = summary.get("num_attempts")
    said = [f"Slurm job {row.job_id}{limit}"]
    if isinstance(attempts, int) and attempts > 0:
        said.append(f"after {plural(attempts, 'attempt')}")
    requeues = cluster.get("max_requeues")
    if row.position is not None:
        said.append("(a pack is not requeued)")
    elif isinstance(requeues, int):
        used = (": no requeue" if requeues == 0 else
                " used up" if isinstance(attempts, int) and attempts > requeues else "")
        said.append(f"(cluster.max_requeues={requeues}{used})")
    step = summary.get("last_step")
    step = step if isinstance(step, int) else row.step
    if step:
        said.append(f"at step {step}" + (f" of {row.steps}" if row.steps else ""))
    advice = ("the sweep's command runs it again from its checkpoint; raise cluster.time "
              "if it needs longer" if row.position is not None else
              "raise cluster.time or cluster.max_requeues")
    return f"{' '.join(said)}: {advice}"


def task_log_tail(run_dir: Path, num_lines: int = 20) -> str:
    """The last non-empty lines of task 0's log, and of the first other task log with a
    traceback ('' when no task wrote a line)."""
    logs = sorted((run_dir / TASK_LOG_DIR).glob(TASK_LOG.format(task="*")), key=_task_number)
    parts = []
    for i, path in enumerate(logs):
        text = tail(path, num_lines)
        if text and (i == 0 or "Traceback" in text or "Error" in text):
            parts.append(f"[{path.name}]\n{text}")
        if len(parts) == 2:
            break
    return "\n".join(parts)


def job_log_tail(run_dir: Path, job_id: str | None, num_lines: int = 20) -> str:
    """The last non-empty lines of the job's own output, where a job that ended before its
    tasks wrote anything (a setup line of the script failed: a missing environment,
    :func:`vitfsdp.launch.slurm.path_check_lines`) said why: ``slurm-<id>.out`` in the run
    directory (a ``--scripts-only`` script), submitit's ``.submitit/<id>_<task>_log.out``
    or the pack's ``packs/pack<N>-<id>.out`` in the sweep directory; '' when none has a line."""
    for path in _job_outputs(run_dir, job_id):
        text = tail(path, num_lines)
        if text:
            return f"[{path.name}]\n{text}"
    return ""


def _job_outputs(run_dir: Path, job_id: str | None) -> list[Path]:
    """The output files of the point's job that exist (:func:`job_log_tail`'s candidates),
    written to or not."""
    if not job_id:
        return []
    base = job_id.split(".")[0]  # a packed point's step: its pack job's output
    sweep_dir = run_dir.parent
    candidates = [run_dir / SLURM_OUTPUT.format(job_id=base),
                  *sorted((sweep_dir / SUBMITIT_DIR).glob(f"{base}_*log.out")),
                  *sorted((sweep_dir / PACK_DIR).glob(PACK_OUTPUT.format(index="*",
                                                                          job_id=base)))]
    return [path for path in candidates if path.is_file()]


def _task_number(path: Path) -> int:
    """The task of a task log (``task3.log``: 3); 0 for a name without one."""
    task = field_of(TASK_LOG, path.name) or ""
    return int(task) if task.isdigit() else 0


def labels(rows: Sequence[PointState]) -> list[tuple[str, str]]:
    """Each point's number and the overrides that differ between points
    (``("3", "nodes=2 strategy=HYBRID_2GPU")``), sorted: those its job.json (else run.json)
    records (:attr:`PointState.overrides`), else those of its run directory's name (which a
    long list shortens, with a hash: :func:`vitfsdp.rundir.run_dirname`)."""
    parts = []
    for r in rows:
        num, _, rest = r.run_dir.name.partition("_")
        named = rest.split(",") if rest else []
        parts.append((num, sorted(r.overrides) if r.overrides is not None else named))
    common = set.intersection(*(set(p[1]) for p in parts)) if len(parts) > 1 else set()
    return [(num, " ".join(o for o in overrides if o not in common)) for num, overrides in parts]


def format_table(rows: Sequence[PointState]) -> str:
    """The status table: one line per point, its differing overrides last and whole (a long
    one is never cut mid-key), a pending job's state with Slurm's reason (``PENDING
    (Priority)``), a point not submitted with why (:func:`not_submitted_why`); then the
    counts of states (the points the last command superseded on a line of their own,
    :func:`superseded_line`), and a line per pending reason a user acts on
    (:func:`pending_lines`).

    Returns:
        The table's lines, joined with newlines (no newline at the end).
    """
    header = ("point", "job", "state", "nodes", "step", "ips", "status", "overrides")
    why: dict[Path, str] = {}  # a sweep directory's, read once
    lines = [header] + [
        (num, r.step_id or r.job_id or "-", _state_cell(r), r.nodelist or "-",
         f"{r.step}/{r.steps}" if r.steps else str(r.step or "-"),
         f"{r.ips:.1f}" if r.ips is not None else "-", _status_cell(r, why), label or "-")
        for (num, label), r in zip(labels(rows), rows, strict=True)
    ]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    text = "\n".join("  ".join(str(v).ljust(widths[i]) for i, v in enumerate(line)).rstrip()
                     for line in lines)
    superseded = superseded_line(rows)
    return "\n".join([text, summary_line(rows), *([superseded] if superseded else []),
                      *pending_lines(rows)])


#: Characters of Slurm's pending reason the table's state column keeps (a ReqNodeNotAvail
#: names the nodes: a long list is cut with ``...``).
PENDING_REASON_CHARS = 60


def _state_cell(row: PointState, now: float | None = None) -> str:
    """The state column: Slurm's state, with its reason while pending; a local point that
    runs with when its last record was written (``RUNNING (last record 21:04:10, 3 min
    ago)``, this host's local time; ``now``: seconds since the epoch, default the clock)."""
    if row.state == LOCAL_RUNNING and row.last_record_at is not None:
        ago = max((time.time() if now is None else now) - row.last_record_at, 0)
        at = time.strftime("%H:%M:%S", time.localtime(row.last_record_at))
        return f"{row.state} (last record {at}, {format_quiet(ago)} ago)"
    if row.state != "PENDING" or not row.pending_reason:
        return row.state
    return f"{row.state} ({reason_line(row.pending_reason, PENDING_REASON_CHARS)})"


#: What the status column adds for a point :attr:`PointState.superseded`.
SUPERSEDED = "superseded"


#: How the status cell says a point ended, after ``before it`` (:func:`_status_cell`).
ENDED_AS = {FAILED: FAILED, OOM: FAILED, TIMEOUT: "timed out", CANCELLED: "was cancelled",
            PREEMPTED: "stopped"}


def _status_cell(row: PointState, why: dict[Path, str]) -> str:
    """The status column: the run's status; why for a point not submitted; ``(superseded)``
    for a point of an earlier command that the last one ran again
    (:attr:`PointState.superseded`); for a point that ended otherwise than completed with a
    measured window, that window's images/s as what it is: ``failed (last window 12.3 ips
    before it failed)`` (the ips column is left to completed and running points)."""
    if row.superseded:
        return f"{row.status or '-'} ({SUPERSEDED})"
    if row.last_window_ips is not None and row.status:
        return (f"{row.status} (last window {row.last_window_ips:.1f} ips before it "
                f"{ENDED_AS.get(row.status, 'ended')})")
    if row.status != NOT_SUBMITTED or row.job_id:
        return row.status or "-"
    sweep_dir = row.run_dir.parent
    if sweep_dir not in why:
        why[sweep_dir] = not_submitted_why(sweep_dir)
    return f"{row.status} ({why[sweep_dir]})"


def plural(count: int, noun: str) -> str:
    """``1 point``, ``2 points``: the count and the noun, plural (``s``) unless it is 1."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def summary_line(rows: Sequence[PointState]) -> str:
    """Counts such as ``6 points: 2 RUNNING, 1 PENDING, 3 completed`` (``1 point: ...``), of
    the points that are not :attr:`PointState.superseded` (:func:`superseded_line`)."""
    current = [r for r in rows if not r.superseded]
    counts = _counts(current)
    return f"{plural(len(current), 'point')}: {counts}" if counts else plural(0, "point")


def superseded_line(rows: Sequence[PointState]) -> str | None:
    """``2 earlier points superseded by the last command (the same points with other
    environment settings): 2 failed``: the count of the :attr:`PointState.superseded` rows
    by status; None where there are none."""
    earlier = [r for r in rows if r.superseded]
    if not earlier:
        return None
    return (f"{plural(len(earlier), 'earlier point')} {SUPERSEDED} by the last command (the "
            f"same {'point' if len(earlier) == 1 else 'points'} with other environment "
            f"settings): {_counts(earlier)}")


def _counts(rows: Sequence[PointState]) -> str:
    """``2 RUNNING, 1 PENDING, 3 completed``: how many rows of each status (else state)."""
    counts: dict[str, int] = {}
    for r in rows:
        key = r.status or r.state
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


#: Slurm's pending reasons a user acts on (squeue's ``%r``; Slurm's "Job Reason Codes"), by
#: a pattern of the reason's first word, in order → what it means and what to do; the
#: commands get the jobs' ids. The queue's normal waits (Priority, Resources, BeginTime,
#: Dependency, a pack's point waiting for its turn) are left out: they start by themselves.
PENDING_ADVICE: tuple[tuple[str, str], ...] = (
    (r"DependencyNeverSatisfied", "a job it depends on ended otherwise than it needed, so it "
     "never starts: cancel with: {scancel}, then run the sweep's command again"),
    (r"JobHeldUser", "held: release with: {release}; or cancel with: {scancel}"),
    (r"JobHeld\w*", "held by an administrator: ask them, or cancel with: {scancel}"),
    (r"(QOS|Assoc)\w*(WallDuration|PerJob)\w*|(QOS|Assoc)Min\w*|Partition(Time|Node)Limit",
     "it asks for more (or less) than the QOS, association or partition lets one job have "
     "(time, nodes, GPUs), so it never starts: cancel with: {scancel}, then lower cluster.time or "
     "nodes, or choose another cluster.qos or cluster.partition, and run the sweep again"),
    (r"(QOS|Assoc)\w*|Max\w*PerAccount\w*|AccountingPolicy",
     "a QOS or association limit on the jobs or resources you (or your account) use at "
     "once: they start as running jobs end, so wait; or cancel with: {scancel} and set "
     "cluster.max_jobs to the limit before running the sweep again"),
    (r"ReqNodeNotAvail", "nodes it needs are down, drained or reserved (a maintenance: "
     "scontrol show reservation): it starts once they are back, so wait; or cancel with: "
     "{scancel}"),
    (r"Reservation\w*", "its reservation is not active (or is gone: then it never starts): "
     "wait for it, or cancel with: {scancel}"),
    (r"Partition(Down|Inactive)|NodeDown", "its partition runs no jobs now: wait for it, or "
     "cancel with: {scancel} and choose another cluster.partition"),
    (r"BadConstraints|Invalid\w*|\w*NotAllowed|PartitionConfig",
     "Slurm cannot run it as asked (account, QOS, partition or constraint), so it never "
     "starts: cancel with: {scancel}, fix cluster.account, cluster.qos or "
     "cluster.partition, and run the sweep again"),
)


def pending_advice(reason: str) -> str | None:
    """What a pending job's Slurm reason means and what to do (:data:`PENDING_ADVICE`, with
    ``{scancel}`` and ``{release}`` for the commands); None for the queue's normal waits
    and reasons not known here."""
    key = _reason_key(reason)
    return next((advice for pattern, advice in PENDING_ADVICE if re.fullmatch(pattern, key)),
                None)


def _reason_key(reason: str) -> str:
    """A Slurm reason's first word: ``ReqNodeNotAvail`` of ``ReqNodeNotAvail,
    UnavailableNodes:nid[001-009]``."""
    return (reason or "").split(",")[0].strip()


def pending_lines(rows: Sequence[PointState]) -> list[str]:
    """A line per pending reason a user acts on (:func:`pending_advice`; by its first word,
    the rows keep the nodes a ``ReqNodeNotAvail`` names): how many jobs wait for it, its
    meaning and what to do, with the commands for those jobs (``scancel``, ``scontrol
    release``) shell-quoted; a job (a pack, an array task) counted once.

    Returns:
        The lines, in the order the reasons first appear; empty where none acts."""
    jobs: dict[str, list[str]] = {}  # reason's first word (no node list) → job ids
    for r in rows:
        if r.state == "PENDING" and r.job_id and pending_advice(r.pending_reason):
            ids = jobs.setdefault(_reason_key(r.pending_reason), [])
            if r.job_id not in ids:
                ids.append(r.job_id)
    lines = []
    for reason, ids in jobs.items():
        advice = pending_advice(reason).format(
            scancel=shlex.join(["scancel", *ids]),
            release=shlex.join(["scontrol", "release", *ids]))
        lines.append(f"{plural(len(ids), 'job')} pending ({reason}): {advice}")
    return lines


#: A point's status where it has no job: the same as
#: :data:`vitfsdp.sweep.report.NOT_SUBMITTED` (which imports this module).
NOT_SUBMITTED = "not submitted"
#: In a sweep directory: why the points of its last command that have no job have none, as
#: the sweep recorded it (:func:`record_not_submitted`).
NOT_SUBMITTED_FILE = "not_submitted.json"
#: Why a point has no job where the sweep recorded nothing that says why.
STOPPED_BEFORE = "the sweep stopped before it; rerun the command to submit it"
#: What a point not submitted needs where the sweep recorded why, unless it said otherwise.
RERUN = "rerun the command to submit it"


def record_not_submitted(sweep_dir: str | os.PathLike, why: str, waiting: bool = False,
                         then: str = RERUN) -> None:
    """Record, for the points of the sweep's last command that have no job, why they have
    none (``why``: ``cluster.max_jobs=2 reached``, ``sbatch refused it (...)``, ...) and what
    to do (``then``); ``waiting``: this process submits them itself as jobs end (while it
    runs: its host and pid are kept). Overwrites the sweep's earlier record; a failed write
    (a full disk) is logged and passed over: the table then says :data:`STOPPED_BEFORE`.

    Returns:
        None."""
    record = {"why": why, "then": then, "waiting": waiting, "host": socket.gethostname(),
              "pid": os.getpid(), "command": _last_command(sweep_dir),
              "recorded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds")}
    try:
        write_json_atomic(Path(sweep_dir) / NOT_SUBMITTED_FILE, record)
    except OSError as e:
        log.warning("could not record why points are not submitted: %s", e)


def not_submitted_why(sweep_dir: str | os.PathLike) -> str:
    """Why the points of the sweep's last command that have no job have none, on one line,
    with what to do: the sweep's record (:func:`record_not_submitted`) where it was written
    during that command; a ``waiting`` record whose sweep process is gone says the sweep
    stopped. Without a record (or an unreadable one): :data:`STOPPED_BEFORE`.

    Returns:
        The words for the row's status, after ``not submitted``."""
    try:
        record = read_json(Path(sweep_dir) / NOT_SUBMITTED_FILE)
        current = isinstance(record, dict) and record.get("command") == _last_command(
            sweep_dir)
    except (OSError, ValueError):
        return STOPPED_BEFORE
    if not current or not record.get("why"):
        return STOPPED_BEFORE
    why = reason_line(str(record["why"])) or ""
    if record.get("waiting"):
        if _alive(record.get("host"), record.get("pid")):
            return f"{why}; the sweep submits it as jobs end"
        return f"{why}, then the sweep stopped; {RERUN}"
    return f"{why}; {record.get('then') or RERUN}"


def _last_command(sweep_dir: str | os.PathLike) -> list | None:
    """The sweep's last command as its records in :data:`COMMANDS_FILE` name it (their count
    and its start), so that a record made during an earlier command is told apart; None
    where there are none."""
    try:
        records = read_jsonl(Path(sweep_dir) / COMMANDS_FILE)
    except (OSError, ValueError):
        return None
    return [len(records), records[-1].get("started_at")] if records else None


def _alive(host: object, pid: object) -> bool:
    """The process ``pid`` on ``host`` runs (another host's: assumed to)."""
    if host != socket.gethostname():
        return True
    try:
        if int(pid) <= 0:  # 0, -1: a process group, not a process
            return False
        os.kill(int(pid), 0)
    except (ProcessLookupError, TypeError, ValueError):
        return False
    except PermissionError:  # another user's: it runs
        return True
    return True


def num_alive(rows: Sequence[PointState]) -> int:
    """Jobs of these rows queued or running (an array task counts one; a pack one): those
    submitted whose job Slurm does not report ended (or gone)."""
    return len({r.job_id for r in rows if r.job_id and r.state not in ("GONE", "written")
                and (r.job is None or r.job.state not in END_STATES)})


def watch(sweep_dir: Path, run_dirs: Sequence[Path], poll_s: float,
          show: Callable[[str], None], timeout_s: float | None = None,
          on_poll: Callable[[list[PointState]], object] | None = None,
          rows_of: Callable[[], list[PointState]] | None = None) -> list[PointState]:
    """Poll until every point has its summary, showing the table whenever it changes.

    A job seen ended twice in a row (so a summary being written at the very end is not
    missed) is recorded by :func:`reconcile`. ``on_poll`` is called with the rows at every
    poll (the sweep submits waiting jobs there); where it returns true, nothing more will be
    submitted, and the watch ends once every point submitted is done (the others have no
    job and no summary). ``rows_of``: the rows at each poll, in place of :func:`collect` of
    ``run_dirs`` (``--status``: the run directories found at that poll, and the points not
    submitted, each with a status of its own, which counts it as done).

    Raises:
        TimeoutError: ``timeout_s`` passed with points still unfinished.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    seen_ended: set[str] = set()
    last = None
    while True:
        rows = rows_of() if rows_of is not None else collect(sweep_dir, run_dirs)
        for row in rows:
            if not row.slurm_recorded and (row.job_ended or row.state == "GONE"):
                if str(row.run_dir) in seen_ended:
                    reconcile(row)
                seen_ended.add(str(row.run_dir))
        held = bool(on_poll(rows)) if on_poll is not None else False
        table = format_table(rows)
        if table != last:
            show(table)
            last = table
        if all(r.done for r in rows if not (held and r.job_id is None and r.status is None)):
            return rows
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"points still running after {timeout_s} s: "
                               f"{summary_line(rows)}")
        time.sleep(poll_s)
