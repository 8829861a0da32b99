"""The points of a Slurm sweep: written as scripts (``--scripts-only``),
or submitted (a job per point, job arrays for equal shapes, or packs) at most
``cluster.max_jobs`` at a time, then watched in a live status table until every point is done
(:func:`launch_slurm`).

Where the points of :data:`SAME_FAILURE_STOP` jobs fail before their first timed window with
one reason (:func:`same_early_failure`), the sweep submits no more jobs and cancels those it
submitted that are still pending (one ``scancel``), recording each of their points
``cancelled`` with a reason that names the failure: they would only fail the same way after
their wait in the queue. Its running packs run no further point (the stop file their scripts
read before each point: :func:`vitfsdp.launch.pack.stop_packs`; the points they do not reach
are recorded the same way); the point each runs now, and its other jobs already running, are
left to run, with the ``scancel`` that stops them.
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from vitfsdp import plan as planner
from vitfsdp.core.layout import CANCELLED, PACK_DIR, SCRIPT_FILE, SUBMITIT_DIR, TASK_LOG_DIR
from vitfsdp.launch import LaunchOptions, pack, secrets, slurm, status, time_limit_s
from vitfsdp.records import SUMMARY_FILE, mark_failed, read_json, reason_line
from vitfsdp.sweep.point import Point, SweepRefused, log
from vitfsdp.sweep.report import NOT_SUBMITTED, QUEUE_WARNING, resume_command, status_command
from vitfsdp.sweep.stall import StallWatch


def launch_slurm(points: list[Point], sweep_dir: Path, options: LaunchOptions,
                 alive: Sequence[Point] = (), queued: int = 0) -> list[dict]:
    """Submit (or only write) the sweep's Slurm jobs: one per point (job arrays for equal
    shapes), or one per node count with ``hydra.launcher.pack=by_nodes``
    (:mod:`vitfsdp.launch.pack`); at most ``cluster.max_jobs`` queued at once, more submitted
    as earlier ones end. Unless detached, show the live status table until every point is
    done and return the summaries (``{"status": "submitted"}``, ``{"status": "waiting"}``
    (not submitted: max_jobs) or ``{"status": "script"}`` for points not waited on).
    ``queued``: the points an earlier sweep of the directory left queued or running, which
    count against ``cluster.max_jobs`` (a detached sweep run again submits only what fits).

    Raises:
        SweepRefused: sbatch refused the first submission with none of the sweep's jobs in
            the queue (a site limit below it): what the submission wrote is taken back.
    """
    if options.scripts_only:
        return _write_scripts(points, sweep_dir, options)
    max_jobs = _max_jobs(points)
    before = _sweep_files(sweep_dir)
    units = _submission_units(points, sweep_dir, options, max_jobs)
    submitter = _Submitter(units, max_jobs, sweep_dir,
                           points[0].cfg.cluster.qos if points else None)
    # an earlier sweep's points still queued or running (``queued``: ``alive`` among them,
    # waited for or not) count against the limit, one job each (a pack's points once per
    # point: on the safe side)
    try:
        pack.submit_free(units, max_jobs, queued)
    except pack.SubmitRefused as e:
        if any(_has_job(p) for p in points):  # some of the unit's jobs went in: watch them
            submitter.hold(e)
        else:
            _take_back_submission(points, sweep_dir, before)
            raise SweepRefused(_first_refused_line(e, points)) from None
    if submitter.held is None and _unsubmitted_jobs(units):  # why, for --status's rows
        limit = (f"cluster.max_jobs={max_jobs}" if max_jobs is not None
                 else "the site's limit on queued jobs")
        status.record_not_submitted(sweep_dir, f"{limit} reached" + (
            " and the sweep was detached" if options.detach else ""), not options.detach)
    if options.detach:
        _log_detached(units, sweep_dir, max_jobs)
        return [_detached_summary(p) for p in points]
    poll_s = min(p.cfg.cluster.poll_s for p in [*points, *alive])
    if alive:
        log.info("waiting also for %d point(s) an earlier sweep left in Slurm's queue",
                 len(alive))
    stalls = StallWatch(options.stall_floor_s, say=log.warning)  # a running point's hang

    def on_poll(rows: list[status.PointState]) -> bool:
        stalls(rows)
        return submitter(rows)

    try:
        status.watch(sweep_dir, [p.run_dir for p in [*points, *alive]], poll_s,
                     show=_show_table, on_poll=on_poll)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM, SIGHUP
        if _unsubmitted_jobs(units) and submitter.held is None:  # else held: fix first
            status.record_not_submitted(sweep_dir, "the sweep was interrupted before it")
        raise
    return [read_json(p.run_dir / SUMMARY_FILE)
            or {"status": NOT_SUBMITTED, "reason": submitter.held} for p in points]


def _write_scripts(points: list[Point], sweep_dir: Path,
                   options: LaunchOptions) -> list[dict]:
    """``--scripts-only``: write a script per point, or with ``hydra.launcher.pack=by_nodes``
    one per pack (:func:`vitfsdp.launch.pack.write_scripts`; each point's ``job.sbatch`` is
    its pack's), and ``submit.sh``, which submits them round by round
    (:func:`vitfsdp.launch.slurm.write_submit_script`, :func:`_round_order`); say in one
    line how many and how to submit them (``bash <sweep_dir>/submit.sh``, shell-quoted, for
    one too: it records the job id where ``--status`` finds it), then how to follow
    them (each script's own line at DEBUG: ``hydra.verbose=vitfsdp.sweep``). Returns each
    point's summary (``{"status": "script", "script": <the script its job runs>}``, and
    :data:`QUEUE_WARNING` where the scripts are more than the site queues for a user)."""
    if options.pack == "by_nodes":
        packs = sweep_packs(points)
        paths = pack.write_scripts(packs, sweep_dir, options.job_name)
        scripts = {p.num: path for pk, path in zip(packs, paths, strict=True)
                   for p in pk.points}
        wrote = [f"{path}: pack {pk.index}, {len(pk.points)} point(s) of {pk.nodes} "
                 f"node(s), time limit {pack.slurm_time(pk.time_limit_s)}"
                 for pk, path in zip(packs, paths, strict=True)]
        what = f"{status.plural(len(paths), 'pack script')} ({len(points)} points)"
        run_dirs = [[p.run_dir for p in pk.points] for pk in packs]
    else:
        paths = slurm.write_scripts(points, options.job_name, sweep_dir)
        scripts = {p.num: path for p, path in zip(points, paths, strict=True)}
        paths = [scripts[p.num] for p in _round_order(points)]
        wrote = [str(path) for path in paths]
        what = f"{status.plural(len(paths), 'job script')} (a point each)"
        run_dirs = None  # each script's own folder
    slurm.write_submit_script(sweep_dir, paths, run_dirs)
    for line in wrote:
        log.log(logging.INFO if len(paths) == 1 else logging.DEBUG, "wrote %s", line)
    if len(paths) == 1:  # submit.sh too: it records the job id, where --status finds it
        log.info("submit with: %s", slurm.submit_command(sweep_dir))
    else:
        log.info("wrote %s; submit them round by round with: %s", what,
                 slurm.submit_command(sweep_dir))
    log.info("then follow with: %s", status_command(sweep_dir))
    # said last, by the sweep's end (report._report_not_ended), where it stays in sight
    warning = {QUEUE_WARNING: w} if (w := scripts_queue_warning(points, options,
                                                                  len(paths))) else {}
    return [{"status": "script", "script": str(scripts[p.num]), **warning} for p in points]


def _round_order(points: Sequence[Point]) -> list[Point]:
    """``points`` in the order packs are submitted (:func:`vitfsdp.launch.pack.
    allocation_groups`): every point of repeat 0, then of repeat 1, ...; within a round, by
    node count in the order of their first points."""
    return [p for group in pack.allocation_groups(points) for p in group]


def max_queued_jobs(points: Sequence[Point]) -> int | None:
    """The smallest ``cluster.max_queued_jobs`` of the points' profiles (None: unknown)."""
    caps = [p.cfg.cluster.max_queued_jobs for p in points
            if p.cfg.cluster.max_queued_jobs is not None]
    return min(caps) if caps else None


def queue_cap_site(points: Sequence[Point], cap: int) -> str:
    """``cluster=frontier queues at most 100 jobs of a user (cluster.max_queued_jobs; sbatch
    rejects more)``: the site's cap on queued jobs, as the lines about it say it."""
    return (f"cluster={points[0].cfg.cluster.name} queues at most {cap} jobs of a user "
            "(cluster.max_queued_jobs; sbatch rejects more)")


def packs_fix(points: Sequence[Point], options: LaunchOptions, cap: int) -> str:
    """``add hydra.launcher.pack=by_nodes (21 jobs: one per node count and repeat round),
    or `` where packs of ``points`` come to ``cap`` jobs or fewer and the sweep is not
    packed already; else ''."""
    if options.pack == "by_nodes":
        return ""
    try:
        packed = len(sweep_packs(list(points)))
    except ValueError:  # a node count beyond the queue's bins: the points' own check says so
        return ""
    return (f"add hydra.launcher.pack=by_nodes ({status.plural(packed, 'job')}: one per node "
            "count and repeat round), or " if packed <= cap else "")


def scripts_queue_warning(points: Sequence[Point], options: LaunchOptions,
                          jobs: int) -> str | None:
    """The line ``--scripts-only`` ends with where it wrote more job scripts (``jobs``) than
    the site queues for a user (:func:`max_queued_jobs`; sbatch rejects the rest): ``--scripts-
    only wrote 126 job scripts to submit by hand, and cluster=frontier queues at most 100
    jobs of a user (...): add hydra.launcher.pack=by_nodes (21 jobs: ...), or submit at most
    100 at a time, the next as earlier jobs end (submit.sh stops at ...)``; None within the
    cap or where it is unknown."""
    cap = max_queued_jobs(points)
    if cap is None or jobs <= cap:
        return None
    return (f"--scripts-only wrote {jobs} job scripts to submit by hand, and "
            f"{queue_cap_site(points, cap)}: {packs_fix(points, options, cap)}submit at most "
            f"{cap} at a time, the next as earlier jobs end ({slurm.SUBMIT_FILE} stops at the "
            "first script sbatch refuses and prints the command that goes on from it)")


#: Jobs of a sweep whose points must have failed before their first timed window with one
#: reason, none completing, before the sweep stops submitting (:func:`same_early_failure`).
SAME_FAILURE_STOP = 3


def same_early_failure(rows: Sequence[status.PointState]) -> str | None:
    """The reason shared by points of at least :data:`SAME_FAILURE_STOP` jobs (a pack's
    points are one job) that ended ``failed`` before their first timed window, not
    interrupted from outside (a node failure), where no point of ``rows`` completed: the
    signature of what every job of the sweep meets (an environment that does not run on the
    compute nodes, a network plugin that does not load across nodes), so the jobs not yet
    submitted, or submitted and still pending, would only fail the same way after their wait
    in the queue. Reasons are compared with their numbers left out (node names, job ids).
    None otherwise."""
    if any(r.status == "completed" for r in rows):
        return None
    seen: dict[str, dict[str, str]] = {}  # reason without numbers: job id -> reason
    for r in rows:
        if r.status == "failed" and not r.step:
            summary = read_json(r.run_dir / SUMMARY_FILE) or {}
            reason = reason_line(summary.get("reason"))
            if reason and not summary.get("interrupted"):  # ended from outside: a node, not it
                seen.setdefault(re.sub(r"\d+", "#", reason), {})[str(r.job_id)] = reason
    shared = [jobs for jobs in seen.values() if len(jobs) >= SAME_FAILURE_STOP]
    return next(iter(shared[0].values())) if shared else None


class _Submitter:
    """The watch's poll: submit the units that fit ``max_jobs`` (:func:`pack.submit_free`)
    until :func:`same_early_failure` finds the reason every job meets; then submit no more,
    cancel the sweep's jobs still pending (:func:`_cancel_pending`: never started, a pack
    with all its points), tell its running packs to run no further point
    (:func:`pack.stop_packs`), leave the points running now to end, say so once with the
    command that goes on once it is fixed, and return true (the watch then waits only for
    the jobs submitted)."""

    def __init__(self, units: list[pack.Unit], max_jobs: int | None, sweep_dir: Path,
                 qos: str | None = None) -> None:
        self.units, self.max_jobs, self.sweep_dir, self.qos = units, max_jobs, sweep_dir, qos
        self.held: str | None = None

    def __call__(self, rows: list[status.PointState]) -> bool:
        if self.held is None and (reason := same_early_failure(rows)):
            self._stop(rows, reason)
        if self.held is None:
            try:
                pack.submit_free(self.units, self.max_jobs, status.num_alive(rows))
            except pack.SubmitRefused as e:  # every job of the sweep has ended: none to wait for
                self.hold(e)
        return self.held is not None

    def _stop(self, rows: list[status.PointState], reason: str) -> None:
        """The breaker: where jobs of the sweep wait (not submitted, pending in the queue, or
        a point waiting in a running pack), submit no more, cancel the pending ones, tell
        the running packs to run no further point, and say so in one line (with the
        ``scancel`` that stops what runs now, and the command that goes on once the reason
        is fixed). Nothing where no job waits."""
        waiting = _unsubmitted_jobs(self.units)
        own = {j for u in self.units for j in (u.job_ids or [])}  # this command's jobs
        pending = _job_rows(rows, own, ("PENDING",))
        running = {j: r for j, r in _job_rows(rows, own, status.ALIVE_STATES).items()
                   if j not in pending}
        packs = [j for j, pack_rows in running.items() if _points_to_run(pack_rows)]
        if not waiting and not pending and not packs:
            return
        self.held = (f"not submitted: the points of {SAME_FAILURE_STOP} jobs failed "
                     f"before their first timed window with the same reason ({reason})")
        if waiting:
            status.record_not_submitted(
                self.sweep_dir, f"held back: {SAME_FAILURE_STOP} jobs failed the same way "
                "before their first timed window", then="fix that, then run the sweep again")
        why = (f"{SAME_FAILURE_STOP} jobs failed before their first timed window with the "
               f"same reason ({reason}); fix it and rerun")
        packs_said = self._stop_packs(packs, why)  # first: a pack may be between points
        cancelled, error = _cancel_pending(pending, f"cancelled before it started: {why}")
        stopped = [f"{status.plural(len(cancelled), 'pending job')} cancelled "
                   f"({' '.join(cancelled)})"] if cancelled else []
        stopped += [f"{status.plural(waiting, 'job')} not submitted"] if waiting else []
        they = "it" if len(cancelled) + waiting == 1 else "they"
        said = [f"{' and '.join(stopped)}, as {they} would fail the same way after the wait "
                "in the queue"] if stopped else []
        if error:
            said.append(f"{status.plural(len(pending), 'pending job')} not cancelled "
                        f"({error}): cancel them with: "
                        f"{shlex.join(['scancel', *pending])}")
        said += packs_said
        left = [j for j in running if j not in packs]
        if left:
            them = "it" if len(left) == 1 else "them"
            said.append(f"{status.plural(len(left), 'job')} already running left to run "
                        f"({' '.join(left)}); stop {them} with: "
                        f"{shlex.join(['scancel', *left])}")
        log.error("the points of %d jobs failed before their first timed window with the "
                  "same reason, none completed: %s; %s. Fix it, then go on with: %s",
                  SAME_FAILURE_STOP, reason, "; ".join(said),
                  resume_command(self.sweep_dir, "--rerun-failed"))

    def _stop_packs(self, packs: list[str], why: str) -> list[str]:
        """Tell the running ``packs`` (job ids) to run no further point
        (:func:`pack.stop_packs`: their scripts read the stop file before each point); what
        the breaker's line says of them: that they run no further point, with the
        ``scancel`` of the points they run now, or, where the stop file could not be
        written, the ``scancel`` that stops them."""
        if not packs:
            return []
        ids, scancel = " ".join(packs), shlex.join(["scancel", *packs])
        try:
            pack.stop_packs(self.sweep_dir, packs, why)
        except OSError as e:
            return [f"{status.plural(len(packs), 'running pack')} ({ids}) not stopped "
                    f"(the stop file could not be written: {e}): stop "
                    f"{'it' if len(packs) == 1 else 'them'} with: {scancel}"]
        one = len(packs) == 1
        return [f"{status.plural(len(packs), 'running pack')} ({ids}) "
                f"{'runs' if one else 'run'} no further point; stop the point"
                f"{'' if one else 's'} {'it runs' if one else 'they run'} now with: {scancel}"]

    def hold(self, e: pack.SubmitRefused) -> None:
        """sbatch refused a submission with no job of the sweep left to wait for: submit no
        more, and say so once with the fix and the command that goes on."""
        waiting = _unsubmitted_jobs(self.units)
        self.held = f"not submitted: sbatch refused it ({e.words})"
        status.record_not_submitted(
            self.sweep_dir, f"sbatch refused it ({e.words})",
            then=f"{_refusal_fix(e.num_jobs, self.max_jobs, self.qos)}, then run the sweep "
                 "again")
        log.error("sbatch refused %d job(s) with no job of the sweep queued or running: %s; "
                  "%d job(s) not submitted. %s, then go on with: %s", e.num_jobs, e.words,
                  waiting, _refusal_fix(e.num_jobs, self.max_jobs, self.qos),
                  resume_command(self.sweep_dir))


def _job_rows(rows: Sequence[status.PointState], own: set[str],
              states: Sequence[str]) -> dict[str, list[status.PointState]]:
    """The jobs among ``own`` whose state (the job's: a pack's, not its point's step) Slurm
    reported in ``states`` at this poll (one squeue and one sacct call for all:
    :func:`status.collect`), each with the rows of its points that have no summary yet."""
    jobs: dict[str, list[status.PointState]] = {}
    for r in rows:
        if r.job_id in own and r.job is not None and r.job.state in states and r.status is None:
            jobs.setdefault(r.job_id, []).append(r)
    return jobs


def _points_to_run(rows: Sequence[status.PointState]) -> bool:
    """Whether ``rows`` (a running job's points without a summary) hold a packed point whose
    step has not started: one its pack would run next."""
    return any(r.position is not None and r.own is None for r in rows)


def _cancel_pending(pending: dict[str, list[status.PointState]],
                    why: str) -> tuple[list[str], str | None]:
    """Cancel the ``pending`` jobs (id → their points' rows) in one ``scancel`` and record each of
    their points ``cancelled`` with ``why`` (ended from outside: a rerun runs it again;
    ``held_back``: by the sweep, for a failure to fix first), Slurm's end (``CANCELLED``,
    with the pending reason of the poll) in its summary's ``slurm`` object, as
    :func:`status.reconcile` would keep it: a cancelled task of a job array that never
    started is not reported on its own by squeue or sacct once cancelled (``123_[4-5]``).
    ``scancel --state=PENDING`` is not used: with a state filter, Slurm 22.05 cancels every
    pending task of an array when one is named. Returns the ids cancelled, and what went
    wrong where scancel did not (None if nothing did)."""
    if not pending:
        return [], None
    ids = list(pending)
    try:
        proc = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], f"scancel did not run: {e}"
    if proc.returncode != 0:
        return [], f"scancel failed: {reason_line(proc.stderr) or f'exit {proc.returncode}'}"
    for job_id in ids:
        for row in pending[job_id]:
            record = replace(row.job or status.SlurmJob("PENDING"),
                             state="CANCELLED").record(job_id)
            if row.position is not None:  # a packed point: its pack's end
                record["job_state"] = "CANCELLED"
            mark_failed(row.run_dir, CANCELLED, why, interrupted=True, held_back=True,
                        **{status.SLURM_KEY: record})
            row.status, row.slurm_recorded = CANCELLED, True
    return ids, None


def _unsubmitted_jobs(units: Sequence[pack.Unit]) -> int:
    """Jobs of the ``units`` not submitted yet."""
    return sum(u.num_jobs for u in units if u.job_ids is None)


def _refusal_fix(num_jobs: int, max_jobs: int | None, qos: str | None) -> str:
    """What lets sbatch take a refused submission of ``num_jobs`` jobs: fewer at once
    (``cluster.max_jobs``, where more than one), fewer of the user's other jobs, or another
    QOS."""
    now = "" if max_jobs is None else f"; now {max_jobs}"
    fewer = (f"set cluster.max_jobs to the site's limit on a user's queued jobs (below "
             f"{num_jobs}{now}), " if num_jobs > 1 else "")
    return (f"{fewer}wait for your other jobs in the queue to end (squeue --me), or choose "
            f"another cluster.qos{f' (now {qos})' if qos else ''}")


def _first_refused_line(e: pack.SubmitRefused, points: list[Point]) -> str:
    """The one line of a sweep whose first submission sbatch refused: sbatch's words and
    the fix; nothing is queued and the sweep directory is as it was."""
    cluster = points[0].cfg.cluster
    return (f"error: sbatch refused the sweep's first submission ({e.num_jobs} job(s)): "
            f"{e.words}; nothing was queued or kept; "
            f"{_refusal_fix(e.num_jobs, _max_jobs(points), cluster.qos)}, then run the "
            "sweep again")


def _has_job(point: Point) -> bool:
    """Whether the point's ``job.json`` names a Slurm job (submitted)."""
    return bool((read_json(point.run_dir / slurm.JOB_FILE) or {}).get("job_id"))


def _sweep_files(sweep_dir: Path) -> set[Path]:
    """The files a submission may add to besides the points' run directories: those of
    submitit's folder and the pack scripts' folder, with the folders and the secrets file,
    as they are now (:func:`_take_back_submission`)."""
    found = {secrets.secrets_path(sweep_dir)}
    for name in (SUBMITIT_DIR, PACK_DIR):
        folder = Path(sweep_dir).resolve() / name
        found |= {folder, *folder.glob("*")} if folder.is_dir() else set()
    return {f for f in found if f.exists()}


def _take_back_submission(points: list[Point], sweep_dir: Path, before: set[Path]) -> None:
    """Remove what a submission sbatch refused wrote, none of its jobs queued: each point's
    job script and empty ``logs/`` (its run directory too where that leaves it empty: the
    earlier attempts of a point run again stay), and the files of submitit's and the packs'
    folders and the secrets file not in ``before`` (:func:`_sweep_files`)."""
    for p in points:
        (p.run_dir / SCRIPT_FILE).unlink(missing_ok=True)
        for d in (p.run_dir / TASK_LOG_DIR, p.run_dir):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    for f in sorted(_sweep_files(sweep_dir) - before, reverse=True):  # a folder's files first
        if f.is_dir():
            if not any(f.iterdir()):
                f.rmdir()
        else:
            f.unlink(missing_ok=True)


def _max_jobs(points: list[Point]) -> int | None:
    """The sweep's ``cluster.max_jobs`` (the smallest set; None: no limit)."""
    limits = [p.cfg.cluster.max_jobs for p in points if p.cfg.cluster.max_jobs is not None]
    return min(limits) if limits else None


def _submission_units(points: list[Point], sweep_dir: Path, options: LaunchOptions,
                      max_jobs: int | None) -> list[pack.Unit]:
    """What is submitted at once: a pack (one job), or up to ``max_jobs`` points of one shape
    (a job or array task each)."""
    if options.pack == "by_nodes":
        packs = sweep_packs(points)
        return [pack.Unit(1, lambda pk=pk: [pack.submit(pk, sweep_dir, options.job_name)])
                for pk in packs]
    return [pack.Unit(len(chunk), lambda c=chunk: slurm.submit(c, sweep_dir, options.job_name))
            for group in slurm.shape_groups(points) for chunk in pack.chunks(group, max_jobs)]


def sweep_packs(points: list[Point]) -> list[pack.Pack]:
    """The packs ``hydra.launcher.pack=by_nodes`` submits for ``points``
    (:func:`vitfsdp.launch.pack.make_packs`, each point at the plan's time where it has one)."""
    predicted = {p.num: s for p in points if (s := _predicted_time_s(p)) is not None}
    return pack.make_packs(points, predicted)


def _predicted_time_s(p: Point) -> int | None:
    """The plan's run time for the point, as ``cluster.time=auto`` resolves it, in seconds
    (None: no prediction)."""
    try:
        return time_limit_s(planner.auto_time_limit(p.cfg))
    except (ValueError, NotImplementedError):
        return None


def _log_detached(units: list[pack.Unit], sweep_dir: Path, max_jobs: int | None) -> None:
    ids = [j for u in units for j in (u.job_ids or [])]
    log.info("submitted %d Slurm jobs: %s", len(ids), " ".join(ids))
    waiting = _unsubmitted_jobs(units)
    if waiting:
        log.info("%d jobs wait for cluster.max_jobs=%s: once jobs have ended, submit them "
                 "with: %s", waiting, max_jobs, resume_command(sweep_dir))
    log.info("detached: the jobs run on without this process (the sweep's last line says "
             "how to follow them)")


def _detached_summary(p: Point) -> dict:
    job_id = (read_json(p.run_dir / slurm.JOB_FILE) or {}).get("job_id")
    return {"status": "submitted", "job_id": job_id} if job_id else {"status": "waiting"}


def _show_table(table: str) -> None:
    log.info("jobs:\n%s", table)
