"""What a sweep says at its end, and its exit status: the counts of each
end status and the analysis command (:func:`_report`), the points that have not ended
(:func:`_report_not_ended`), the commands to paste (:func:`status_command`,
:func:`analysis_command`) and :func:`exit_status`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from vitfsdp.launch import secrets
from vitfsdp.launch.local import quote_override
from vitfsdp.provenance import saved_overrides
from vitfsdp.records import STATUSES, reason_line
from vitfsdp.sweep.point import Point, _point_label, log

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

#: Points that did not complete named one by one at a sweep's end; more are counted.
MAX_NAMED_FAILURES = 20


def _report(points: list[Point], summaries: list[dict], sweep_dir: Path) -> None:
    """The sweep's last lines: the count of each end status, each point that did not
    complete with its reason on one line and its run directory (logs and records; at most
    :data:`MAX_NAMED_FAILURES`, the rest counted), and the analysis command."""
    counts: dict[str, int] = {}
    for s in summaries:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    log.info("sweep done: %s", ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    failed = [(p, s) for p, s in zip(points, summaries, strict=True)
              if s["status"] != "completed"]
    for p, s in failed[:MAX_NAMED_FAILURES]:
        log.info("  %s %s: %s (records and logs: %s)", s["status"], _point_label(p),
                 reason_line(s.get("reason")) or "no reason recorded", p.run_dir)
    if len(failed) > MAX_NAMED_FAILURES:
        log.info("  and %d more: failures.csv of the analysis", len(failed) - MAX_NAMED_FAILURES)
    log.info("figures and tables: %s", analysis_command(sweep_dir))


def _report_not_ended(points: list[Point], summaries: list[dict], sweep_dir: Path) -> None:
    """Name the points that have not ended (queued or running, perhaps by an earlier sweep;
    waiting for ``cluster.max_jobs``; only written): the sweep then exits
    :data:`EXIT_NOT_ENDED`. Where every such point was only written (``--scripts-only``),
    the lines that wrote them already said how to follow them: not again."""
    for p, s in zip(points, summaries, strict=True):
        if s.get("status") not in STATUSES:
            job = f" (Slurm job {s['job_id']})" if s.get("job_id") else ""
            log.info("not ended: %s: %s%s", _point_label(p),
                     s.get("status") or "no summary", job)
    if secrets.secrets_path(sweep_dir).exists():
        log.info("%s stays for the jobs that have not ended; --status removes it once every "
                 "point has ended", secrets.secrets_path(sweep_dir))
    left = {s.get("status") for s in summaries if s.get("status") not in STATUSES}
    if left == {NOT_SUBMITTED}:  # held back (slurm_jobs.same_early_failure): none to follow
        log.info("once fixed, go on with: %s", resume_command(sweep_dir, "--rerun-failed"))
    elif left != {"script"}:
        log.info("follow with: %s", status_command(sweep_dir))


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
    after ``-m``. Quoted for Hydra's grammar and for the shell. Without ``multirun.yaml``:
    ``<your overrides>`` in their place."""
    overrides = saved_overrides(sweep_dir)
    args = ["<your overrides>"] if overrides is None else [
        a for a in [*overrides["task"], *overrides["hydra"]]
        if not a.startswith("hydra.sweep.dir=")]
    plain = re.fullmatch(r"[\w./+-]+", str(sweep_dir))  # else Hydra's grammar would read it
    where = str(sweep_dir) if plain else quote_override(str(sweep_dir))
    return shlex.join(["python", "-m", "vitfsdp.sweep", "-m", *flags, *args,
                       f"hydra.sweep.dir={where}"])


def analysis_command(sweep_dir: str | os.PathLike) -> str:
    """The command that draws a sweep's figures and tables, quoted as :func:`status_command`."""
    return shlex.join(["python", "-m", "vitfsdp.analysis", str(sweep_dir)])
