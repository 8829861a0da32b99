"""What a sweep says at its end, and its exit status: the counts of each
end status, the commands that go on and the analysis command (:func:`_report`), the points
that have not ended (:func:`_report_not_ended`), what ``--status`` says after its table
(:func:`next_steps`; the sweep's end says the same, :func:`_steps`), the commands to paste
(:func:`status_command`, :func:`analysis_command`) and :func:`exit_status`.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from vitfsdp.core.layout import FAILED_IN_RUN, SKIPPED_INFEASIBLE
from vitfsdp.launch import launcher_flags, secrets, status
from vitfsdp.launch.local import quote_override
from vitfsdp.plan.impossible import CANNOT_RUN
from vitfsdp.provenance import saved_overrides
from vitfsdp.records import STATUSES, SUMMARY_FILE, read_json, reason_line
from vitfsdp.sweep.point import CannotRun, Point, _point_label, log, points_span, say_group

#: Exit status of ``python -m vitfsdp.sweep`` (and of ``--status``): every point completed.
EXIT_COMPLETED = 0


#: Some point ended without completing (oom, failed, timeout, preempted, cancelled,
#: skipped_infeasible): its records say why.
EXIT_NOT_COMPLETED = 1


#: Refused before launch: nothing was run or queued, no sweep directory was left behind.
EXIT_REFUSED = 2


#: Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports it; one line says what runs on.
EXIT_INTERRUPTED = 130


#: No point ended otherwise than completed, but some have not ended: queued or running (a
#: ``--detach``-ed sweep, or a job of an earlier sweep a rerun found), waiting for
#: ``cluster.max_jobs``, or only written (``--scripts-only``).
EXIT_NOT_ENDED = 3


def exit_status(summaries: Sequence[dict | None]) -> int:
    """:data:`EXIT_NOT_COMPLETED` if a point ended in a status other than ``completed``, else
    :data:`EXIT_NOT_ENDED` if a point has not ended (its summary has no end status, or there
    is none), else :data:`EXIT_COMPLETED`."""
    found = [(s or {}).get("status") for s in summaries]
    if any(st in STATUSES and st != "completed" for st in found):
        return EXIT_NOT_COMPLETED
    return EXIT_NOT_ENDED if any(st not in STATUSES for st in found) else EXIT_COMPLETED


#: A point's status where the sweep held its job back: every earlier job met one failure
#: (:func:`vitfsdp.sweep.slurm_jobs.same_early_failure`); never written to its records.
NOT_SUBMITTED = "not submitted"

#: The key of a ``--scripts-only`` point's summary (the sweep's, in memory: never written)
#: that holds :func:`vitfsdp.sweep.slurm_jobs.scripts_queue_warning`'s line, which the
#: sweep's end says last (:func:`_report_not_ended`).
QUEUE_WARNING = "queue_warning"

#: Points that did not complete named one by one at a sweep's end; more are counted.
MAX_NAMED_FAILURES = 20


def _report(points: Sequence[Point | CannotRun], summaries: list[dict], sweep_dir: Path) -> None:
    """The sweep's last lines: the count of each end status, each point that did not
    complete with its reason on one line and its run directory (logs and records; at most
    :data:`MAX_NAMED_FAILURES`, the rest counted), the commands that go on, as ``--status``
    gives them (:func:`_steps`, without the reasons again), and the analysis command."""
    counts: dict[str, int] = {}
    for s in summaries:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    log.info("sweep done: %s", ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    failed = [(p, s) for p, s in zip(points, summaries, strict=True)
              if s["status"] != "completed"]
    ran = [(p, s) for p, s in failed if s["status"] != SKIPPED_INFEASIBLE]
    for p, s in ran[:MAX_NAMED_FAILURES]:
        log.info("  %s %s: %s (records and logs: %s)", s["status"], _point_label(p),
                 reason_line(s.get("reason")) or "no reason recorded", p.run_dir)
    if len(ran) > MAX_NAMED_FAILURES:
        log.info("  and %d more: failures.csv of the analysis", len(ran) - MAX_NAMED_FAILURES)
    _say_skipped([(p, s) for p, s in failed if s["status"] == SKIPPED_INFEASIBLE], "  ")
    for line in _steps(sweep_dir, [(_point_label(p), s["status"], s) for p, s in failed],
                       reasons=False):
        log.info("%s", line)
    log.info("figures and tables: %s", analysis_command(sweep_dir))


def _report_not_ended(points: Sequence[Point | CannotRun], summaries: list[dict],
                      sweep_dir: Path) -> None:
    """Name the points that have not ended (queued or running, perhaps by an earlier sweep;
    waiting for ``cluster.max_jobs``; only written): the sweep then exits
    :data:`EXIT_NOT_ENDED`. A point only written (``--scripts-only``) is named at DEBUG
    (``hydra.verbose=vitfsdp.sweep``): the line that wrote the scripts counted them and said
    how to submit and follow them; where every such point was only written, that is not
    said again; where they are more scripts than the site queues for a user, that warning
    is the last line (:func:`vitfsdp.sweep.slurm_jobs.scripts_queue_warning`)."""
    for p, s in zip(points, summaries, strict=True):
        if s.get("status") not in STATUSES:
            job = f" (Slurm job {s['job_id']})" if s.get("job_id") else ""
            log.log(logging.DEBUG if s.get("status") == "script" else logging.INFO,
                    "not ended: %s: %s%s", _point_label(p), s.get("status") or "no summary",
                    job)
        elif s.get("status") not in ("completed", SKIPPED_INFEASIBLE):  # an earlier sweep's
            log.info("%s %s: %s (records: %s)", s["status"], _point_label(p),
                     reason_line(s.get("reason")) or "no reason recorded", p.run_dir)
    _say_skipped([(p, s) for p, s in zip(points, summaries, strict=True)
                  if s.get("status") == SKIPPED_INFEASIBLE])
    if secrets.secrets_path(sweep_dir).exists():
        log.info("%s stays for the jobs that have not ended; --status removes it once every "
                 "point has ended", secrets.secrets_path(sweep_dir))
    left = {s.get("status") for s in summaries if s.get("status") not in STATUSES}
    if left == {NOT_SUBMITTED}:  # held back (slurm_jobs.same_early_failure): none to follow
        log.info("once fixed, go on with: %s", resume_command(sweep_dir, "--rerun-failed"))
    elif left != {"script"}:
        log.info("follow with: %s", status_command(sweep_dir))
    for warning in dict.fromkeys(s[QUEUE_WARNING] for s in summaries if s.get(QUEUE_WARNING)):
        log.warning("%s", warning)  # last: in sight below every point's lines


def _say_skipped(skipped: Sequence[tuple[Point | CannotRun, dict]], indent: str = "") -> None:
    """Say the points the sweep did not run, each ``(point, summary)``
    (``skipped_infeasible``: predicted not to fit, or cannot run), their status, reason and
    records, a line per kind (cannot run or not) and model for several (:func:`say_group`:
    ``12 skipped_infeasible points (repeat=0,1 strategy=DDP,NO_SHARD nodes=1,2,4: every
    combination): the first, repeat=0 strategy=DDP nodes=1: predicted ... (records: ...)``);
    ``indent`` begins each line."""
    groups: dict[tuple, list[tuple[Point | CannotRun, dict]]] = {}
    for p, s in skipped:
        cannot = str(s.get("reason") or "").startswith(CANNOT_RUN)
        groups.setdefault((s["status"], cannot, _model(p)), []).append((p, s))

    def one(item: tuple[Point | CannotRun, dict]) -> str:
        p, s = item
        return (f"{indent}{s['status']} {_point_label(p)}: "
                f"{reason_line(s.get('reason')) or 'no reason recorded'} (records: {p.run_dir})")

    def many(group: Sequence[tuple[Point | CannotRun, dict]]) -> str:
        st = group[0][1]["status"]
        return (f"{indent}{len(group)} {st} points ({points_span([p for p, _ in group])}): "
                f"the first, {one(group[0])[len(indent) + len(st) + 1:]}")

    for group in groups.values():
        say_group(group, one, many)


def _model(p: Point | CannotRun) -> str | None:
    """The point's ``model=`` override (None: the default model)."""
    return next((a.partition("=")[2] for a in p.overrides if a.startswith("model=")), None)


def next_steps(sweep_dir: Path, rows: Sequence[status.PointState],
               swept: bool = False) -> list[str]:
    """What ``--status`` prints after its table, a line per kind of point that did not
    complete, naming the points (numbers and differing overrides; at most
    :data:`MAX_NAMED_FAILURES`, the rest counted) and the command that goes on
    (:func:`resume_command`, shell-quoted):

    - interrupted from outside (``cancelled``, ``preempted``, a ``timeout`` at the job's
      limit, a node failure): the same command runs them again;
    - ended so themselves (``failed``, ``oom``, a ``timeout`` of the run's own), or
      cancelled while pending by the sweep's same-failure stop (``held_back``): the same
      command with ``--rerun-failed``, once fixed, then a line per point with its reason
      (the first line of its summary's, :func:`reason_line`);
    - ``skipped_infeasible``: ``--rerun-failed --run-infeasible`` runs them anyway; those
      whose reason begins ``cannot run:`` (the config refuses the combination) cannot run:
      leave them out of the command;
    - :data:`NOT_SUBMITTED` (points of the sweep's last command with no job yet: waiting
      for ``cluster.max_jobs``, or the sweep stopped before submitting them): the same
      command submits them; ``swept``: a sweep works in the directory now and submits them
      itself as its jobs end.

    Rows :attr:`~vitfsdp.launch.status.PointState.superseded` (points of an earlier command
    that the last one ran again with other environment settings) are left out. Empty where
    every point completed or is queued or running."""
    points = []
    for (num, label), row in zip(status.labels(rows), rows, strict=True):
        if row.superseded:
            continue
        ended = row.status in STATUSES and row.status != "completed"
        points.append((f"{num} {label}".strip() if label else num, row.status,
                       (read_json(row.run_dir / SUMMARY_FILE) or {}) if ended else None))
    return _steps(sweep_dir, points, swept)


def _steps(sweep_dir: Path, points: Sequence[tuple[str, str | None, dict | None]],
           swept: bool = False, reasons: bool = True) -> list[str]:
    """The lines of :func:`next_steps` for ``points``, each ``(name, status, summary)``
    (the summary read only for a point that ended otherwise than ``completed``);
    ``reasons``: each failed point's reason on a line of its own
    (the sweep's end has just named them with their run directories)."""
    again, failed, infeasible, cannot, waiting = [], [], [], [], []
    for point, st, summary in points:
        if st == NOT_SUBMITTED:
            waiting.append((point, st, None))
        elif st not in STATUSES or st == "completed":
            continue
        elif st == SKIPPED_INFEASIBLE:
            reason = str((summary or {}).get("reason") or "")
            (cannot if reason.startswith(CANNOT_RUN) else infeasible).append(
                (point, st, reason))
        else:
            summary = summary or {}
            own = (st in FAILED_IN_RUN and not summary.get("interrupted")
                   or bool(summary.get("held_back")))  # the failure is theirs to fix too
            (failed if own else again).append((point, st, summary.get("reason")))
    lines = []
    if again:
        lines.append(f"{_kinds(again)} (interrupted from outside): the same command runs "
                     f"{_them(again)} again: {resume_command(sweep_dir)}")
    if failed:
        lines.append(f"{_kinds(failed)}: once fixed, run {_them(failed)} again with: "
                     f"{resume_command(sweep_dir, '--rerun-failed')}")
        if reasons:
            lines += [f"  {point} {st}: {reason_line(reason) or 'no reason recorded'}"
                      for point, st, reason in failed[:MAX_NAMED_FAILURES]]
            if len(failed) > MAX_NAMED_FAILURES:
                lines.append(f"  and {len(failed) - MAX_NAMED_FAILURES} more: their "
                             "summary.json")
    if infeasible:
        lines.append(f"{_kinds(infeasible)} (the plan predicts "
                     f"{'it does' if len(infeasible) == 1 else 'they do'} not fit): run "
                     f"{_them(infeasible)} anyway with: "
                     f"{resume_command(sweep_dir, '--rerun-failed', '--run-infeasible')}")
    if cannot:
        lines.append(f"{_kinds(cannot)} cannot run (the config refuses the combination; "
                     f"no flag runs {_them(cannot)}): leave {_them(cannot)} out of the "
                     "command, or choose a strategy or node count that tiles")
        if reasons:
            lines += [f"  {point}: {reason_line(reason)}"
                      for point, _, reason in cannot[:MAX_NAMED_FAILURES]]
    if waiting:
        go_on = (f"the sweep working in {shlex.quote(str(sweep_dir))} submits "
                 f"{_them(waiting)} as its jobs end" if swept else
                 f"once jobs have ended, submit {_them(waiting)} with: "
                 f"{resume_command(sweep_dir)}")
        lines.append(f"{_kinds(waiting)} (no job yet: waiting for cluster.max_jobs, or the "
                     f"sweep stopped before submitting {_them(waiting)}): {go_on}")
    return lines


def _kinds(points: Sequence[tuple[str, str, object]]) -> str:
    """``"2 cancelled/timeout points (0 nodes=1, 3 nodes=4)"`` (``1 cancelled point``): how
    many, their statuses and the points (at most :data:`MAX_NAMED_FAILURES`, the rest
    counted)."""
    kinds = "/".join(dict.fromkeys(st for _, st, _ in points))
    named = ", ".join(p for p, _, _ in points[:MAX_NAMED_FAILURES])
    more = (f" and {len(points) - MAX_NAMED_FAILURES} more"
            if len(points) > MAX_NAMED_FAILURES else "")
    return f"{status.plural(len(points), f'{kinds} point')} ({named}{more})"


def _them(points: Sequence[object]) -> str:
    """``it`` for one point, ``them`` for more."""
    return "it" if len(points) == 1 else "them"


def _remove_secrets(sweep_dir: Path) -> None:
    """Every point ended: no job reads the sweep's secrets file again; delete it."""
    removed = secrets.remove_secrets(sweep_dir)
    if removed:
        log.info("removed %s: every point has ended", removed)


def status_command(sweep_dir: str | os.PathLike, watch: bool = True) -> str:
    """The command that shows (``watch``: follows) a sweep's jobs, to paste into a shell: the
    path is quoted (``shlex.join``), so that spaces, quotes or ``$(...)`` in it stay text."""
    return shlex.join(["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir),
                       *(["--watch"] if watch else [])])


def resume_command(sweep_dir: str | os.PathLike, *flags: str) -> str:
    """The command that goes on with the sweep in ``sweep_dir``, to paste into a shell: the
    sweep's own overrides (Hydra's ``multirun.yaml`` there) with ``hydra.sweep.dir`` set to
    that directory, so that the default ``runs/sweep/${now:...}`` does not start a new one
    (and, on Slurm, submit jobs that still run a second time), and ``flags`` (``--rerun-failed``)
    after ``-m``, in place of the Hydra key a flag stands for where the sweep's command gave
    it (``hydra.launcher.rerun_failed=true`` of a sweep run with ``--rerun-failed``). Quoted
    for Hydra's grammar and for the shell. Without ``multirun.yaml``: ``<your overrides>`` in
    their place."""
    overrides = saved_overrides(sweep_dir)
    flagged = {launcher_flags().get(f) for f in flags}
    args = ["<your overrides>"] if overrides is None else [
        a for a in [*overrides["task"], *overrides["hydra"]]
        if not a.startswith("hydra.sweep.dir=") and a not in flagged]
    plain = re.fullmatch(r"[\w./+-]+", str(sweep_dir))  # else Hydra's grammar would read it
    where = str(sweep_dir) if plain else quote_override(str(sweep_dir))
    return shlex.join(["python", "-m", "vitfsdp.sweep", "-m", *flags, *args,
                       f"hydra.sweep.dir={where}"])


def analysis_command(sweep_dir: str | os.PathLike) -> str:
    """The command that draws a sweep's figures and tables, quoted as :func:`status_command`."""
    return shlex.join(["python", "-m", "vitfsdp.analysis", str(sweep_dir)])
