"""The probe on a Slurm cluster: per world size of the sweep one job of that many nodes, made
as the sweep makes a point's job (:mod:`vitfsdp.launch.slurm`: the profile's modules,
environment, ``srun`` options, a task per GPU), whose tasks run the probe's worker; then
the JAX points' framework runs (``vitfsdp.train`` of the smallest model, :data:`FRAMEWORK_MODEL
<vitfsdp.probe.__main__.FRAMEWORK_MODEL>`) as ordinary point jobs. The sweep's launch
mode must be ``srun`` (a task per rank), the default of every shipped Slurm profile.

Every world size's job is submitted at once (at most ``cluster.max_jobs`` or
``cluster.max_queued_jobs`` queued at a time, more as earlier ones end), and a world size's
framework jobs as soon as its own job has measured it (:func:`run_jobs`). The probe's
process waits for them all on the login node, where it was started, looking at every job's
state with one ``sacct`` call a poll (its ``Start`` and ``Reason`` too; ``squeue`` for a
job sacct does not know: no accounting, slurmdbd down or behind) and logging each change,
and, while a job waits in the queue, how long it has waited (a line per job every
:data:`WAIT_LINE_S` seconds at most). A job has ended when every task of it has written its
result, or Slurm says it ended. Each job gets at most ``--timeout`` seconds counted from its
start (sacct's ``Start``: when it began RUNNING; from its restart after Slurm requeued it),
so the timeout bounds the run, not the queue: then it is cancelled and recorded failed, the
reason naming the job, its state, how long it pended and ran. The queue wait is unbounded
unless ``--queue-timeout`` is given: a job still waiting that long after its submission (or
its requeue) is cancelled and recorded failed the same way. A job neither sacct nor squeue
knows gets ``--timeout`` (or ``--queue-timeout`` where shorter) from its submission. A
Ctrl-C, SIGTERM or SIGHUP (a dropped login, which ``python -m vitfsdp.probe`` turns into
``SystemExit``) cancels every job still queued or running and raises :class:`Interrupted`;
a signal that arrives while ``sbatch`` runs is held until it returns (:func:`signals_held`),
so the job it submitted is known, and cancelled with the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import logging
import math
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from vitfsdp.launch.slurm import TrainTask, executor_parameters, node_python, task_spec

log = logging.getLogger(__name__)

#: The job-name of the probe's jobs.
JOB_NAME = "vitfsdp-probe"
#: The time limit of a probe job when the profile says ``cluster.time=auto``.
DEFAULT_TIME = "00:30:00"
#: Seconds between two looks at the jobs' states (one ``sacct`` call for all of them).
POLL_S = 30.0
#: Seconds between two lines saying how long a job still waiting in the queue has waited.
WAIT_LINE_S = 240.0
#: The fields of the one ``sacct`` a poll: submitit's, with when the job started (its
#: ``--timeout`` counts from there) and why it waits.
SACCT_FIELDS = "JobID,State,NodeList,Start,Reason"
#: Slurm states of a job that has not started yet (``UNKNOWN``: not in sacct yet).
WAITING = frozenset({"PENDING", "UNKNOWN", "REQUEUED", "CONFIGURING"})
#: Slurm states of a job that has started and not ended (``PREEMPTED``: Slurm may requeue).
ACTIVE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD",
                     "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "PREEMPTED"})
#: The signals held while ``sbatch`` runs (:func:`signals_held`).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ProbeTask:
    """What submitit runs in every task of a probe job: the worker, output appended to
    ``<log_dir>/task<SLURM_PROCID>.log``."""

    def __call__(self, python: str, spec_path: str, out_path: str, log_dir: str) -> int:
        """Run the worker to its end.

        Raises:
            RuntimeError: the worker exited non-zero (the job is recorded failed).
        """
        task = int(os.environ.get("SLURM_PROCID", "0"))
        log_path = Path(log_dir) / f"task{task}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as out:
            rc = subprocess.call([python, "-u", "-m", "vitfsdp.probe.worker", spec_path,
                                  out_path], stdout=out, stderr=subprocess.STDOUT)
        if rc != 0:
            raise RuntimeError(f"probe task {task} exited with code {rc}; see {log_path}")
        return rc


def _cluster(cfg):
    """The profile for a probe job: ``cluster.time=auto`` becomes :data:`DEFAULT_TIME`."""
    c = cfg.cluster
    return dataclasses.replace(c, time=DEFAULT_TIME) if c.time == "auto" else c


def _executor(cfg, folder: Path):
    import submitit  # only where a job is submitted, as the sweep's launcher does

    cluster = _cluster(cfg)
    executor = submitit.SlurmExecutor(folder=folder, python=shlex.quote(node_python(cluster)),
                                      max_num_timeout=0)
    executor.job_class = _job_class()
    executor.update_parameters(**executor_parameters(cluster, cfg.nodes, JOB_NAME, folder))
    return executor


@functools.cache
def _job_class():
    """submitit's SlurmJob whose one ``sacct`` a poll asks :data:`SACCT_FIELDS` (a watcher of
    the probe's jobs only: the field names come from sacct's header line)."""
    # submitit only where a job is submitted, as the sweep's launcher does
    from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

    class Watcher(SlurmInfoWatcher):
        def _make_command(self):
            command = super()._make_command()
            if command is not None:
                command[command.index("-o") + 1] = SACCT_FIELDS
            return command

    class ProbeSlurmJob(SlurmJob):
        watcher = Watcher(delay_s=600)

    return ProbeSlurmJob


def _queue_infos(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """sacct's fields ``State`` and ``Reason`` of the jobs ``job_ids`` (ones the poll's
    ``sacct`` did not know) from :func:`vitfsdp.launch.status.queue_states` (``squeue``, and
    sacct once more); a job neither knows is left out."""
    from vitfsdp.launch.status import queue_states  # squeue only where a job is polled

    states = (queue_states(job_ids) if job_ids else None) or {}
    return {i: {"State": s.state, "Reason": s.reason} for i, s in states.items()
            if i in job_ids and s.state}


def _results_written(job) -> bool:
    """Every task of submitit's ``job`` has written its result file (task 0's alone is
    not the job's end: another rank may still run, or hang)."""
    return all(job.task(t).paths.result_pickle.exists() for t in range(job.num_tasks))


def start_s(start: str, now_s: float, now_wall: float | None = None) -> float | None:
    """sacct's ``Start`` (``2026-11-30T04:34:14``, this host's local time, as sacct prints
    it) as a ``time.monotonic()`` time, ``now_s`` being now (``now_wall``: ``time.time()``
    now); None where it is no time (``Unknown``, ``None``, empty: not started)."""
    try:
        when = datetime.datetime.fromisoformat(start).timestamp()
    except (TypeError, ValueError):
        return None
    return now_s - max(0.0, (time.time() if now_wall is None else now_wall) - when)


class Interrupted(SystemExit):
    """A Ctrl-C, SIGTERM or SIGHUP while the probe waited for its Slurm jobs, each of which
    still queued or running was cancelled on the way out. ``code``: the exit status (128 +
    the signal's number; 130 for Ctrl-C); ``reason``: what the probe records, e.g.
    ``interrupted by SIGHUP after 12 s: Slurm job 4242 PENDING cancelled`` (each job's own
    in its :class:`ProbeJob`)."""

    def __init__(self, code: int, reason: str):
        super().__init__(code)
        self.reason = reason


def signal_name(code: int) -> str:
    """The signal behind exit status ``code`` (128 + its number): ``SIGHUP``, ``SIGTERM``,
    ``Ctrl-C (SIGINT)``; ``exit <code>`` for another."""
    try:
        name = signal.Signals(code - 128).name
    except (TypeError, ValueError):
        return f"exit {code}"
    return "Ctrl-C (SIGINT)" if name == "SIGINT" else name


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP (:data:`HELD_SIGNALS`) for the block (an ``sbatch``
    call): the first one that arrives is delivered when the block ends, to the handler it
    would have met (``KeyboardInterrupt``, the ``SystemExit`` of
    :func:`vitfsdp.core.hangup.exit_on_hangup`, or the default action), so a job submitted
    meanwhile is known by its id before the probe cancels its jobs. The signals are blocked
    in the process too, so ``sbatch``, which inherits the mask, is not stopped midway by a
    signal to the whole process group (a closed terminal). An ignored signal stays ignored;
    outside the main thread nothing is held (Python's handlers run there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    before = {sig: signal.getsignal(sig) for sig in HELD_SIGNALS}
    for sig, handler in before.items():
        if handler != signal.SIG_IGN:
            signal.signal(sig, lambda signum, _frame: caught.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending is delivered: caught
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if caught:
            _deliver(caught[0], before[caught[0]])


def _deliver(signum: int, handler) -> None:
    """Deliver the held ``signum`` to ``handler`` (its handler before :func:`signals_held`)."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)


@dataclasses.dataclass
class ProbeJob:
    """One Slurm job of the probe, from before its submission to its end.

    ``what`` names it in the log and reasons (``world size 4``); ``submit`` submits it
    (returns submitit's Job). ``outcome`` is ``None`` while it has not ended, ``""`` where it
    ended by itself (its result says how), else why it did not: refused by sbatch, timed out
    or past ``--queue-timeout`` and cancelled, or ``interrupted``. Times are
    ``time.monotonic()`` seconds; ``queued_s`` when its wait in the queue began (its
    submission, or when it was seen requeued), ``started_s`` sacct's ``Start`` of its run
    (None while it waits); ``waited_s`` and ``ran_s`` the seconds of its earlier waits and
    runs (before a requeue), ``requeues`` how often Slurm requeued it; ``waiting`` why Slurm
    keeps it waiting (sacct's ``Reason``, e.g. ``Priority``)."""

    what: str
    submit: Callable[[], object]
    job: object | None = None
    submitted_s: float | None = None
    queued_s: float | None = None
    started_s: float | None = None
    waited_s: float = 0.0
    ran_s: float = 0.0
    requeues: int = 0
    state: str = "NOT SUBMITTED"
    outcome: str | None = None
    interrupted: bool = False
    refused_at: int | None = None  # jobs of the probe alive when sbatch last refused it
    waiting: str = ""
    said_s: float | None = None  # when a line last said how long it waited

    def __post_init__(self):
        if self.queued_s is None:
            self.queued_s = self.submitted_s

    @property
    def alive(self) -> bool:
        """Submitted and not ended."""
        return self.job is not None and self.outcome is None

    @property
    def job_id(self) -> str | None:
        """Slurm's id of the job (None before its submission)."""
        return None if self.job is None else str(self.job.job_id)

    def times(self, now: float) -> str:
        """How long it waited and ran in all by ``now``: ``95 s in the queue``, ``after 95 s
        in the queue and 12 s running``, or, requeued, ``after 95 s in the queue and 12 s
        running, requeued by Slurm once``."""
        waited = self.waited_s + (now if self.started_s is None else self.started_s) - self.queued_s
        ran = self.ran_s + (0.0 if self.started_s is None else now - self.started_s)
        if self.started_s is None and not self.requeues:
            return f"{waited:.0f} s in the queue"
        again = (f", requeued by Slurm {'once' if self.requeues == 1 else f'{self.requeues} times'}"
                 if self.requeues else "")
        return f"after {waited:.0f} s in the queue and {ran:.0f} s running{again}"

    def follow(self, word: str, start: str, now: float, wall: float) -> None:
        """Take the state ``word`` (``RUNNING``) seen at ``now`` (``wall``: ``time.time()``
        then), sacct's ``start`` with it: a job seen running has started (at ``start`` where
        sacct says, else now); one seen waiting again after it started was requeued, and
        waits from now. ``UNKNOWN`` (neither sacct nor squeue knows it) changes nothing."""
        if word == "UNKNOWN":
            return
        if word in WAITING and self.started_s is not None:  # requeued: waits again
            self.waited_s += self.started_s - self.queued_s
            self.ran_s += now - self.started_s
            self.requeues, self.queued_s, self.started_s = self.requeues + 1, now, None
        elif word not in WAITING and self.started_s is None:  # sacct's Start; else now
            self.started_s = min(now, max(self.queued_s, start_s(start, now, wall) or now))


@dataclasses.dataclass(frozen=True)
class Limits:
    """How long a probe job may take, in seconds: ``timeout_s`` from its start (sacct's
    ``Start``; its restart after a requeue); ``queue_s`` from its submission (its requeue)
    while it waits in the queue (None: no bound); ``poll_s`` between two looks;
    ``wait_line_s`` between two lines of a job's wait.

    Raises:
        ValueError: ``timeout_s`` or ``queue_s`` (where set) not finite and > 0.
    """

    timeout_s: float
    queue_s: float | None = None
    poll_s: float = POLL_S
    wait_line_s: float = WAIT_LINE_S

    def __post_init__(self):
        for name, value in (("timeout_s", self.timeout_s), ("queue_timeout_s", self.queue_s)):
            if value is not None and not (math.isfinite(value) and value > 0):
                # NaN would poll sacct without pause
                raise ValueError(f"{name}={value}: a finite number of seconds > 0")
        bounds = [self.timeout_s, *([self.queue_s] if self.queue_s else [])]
        object.__setattr__(self, "poll_s", max(1.0, min(self.poll_s, *(t / 10 for t in bounds))))

    def deadline(self, j: ProbeJob) -> float | None:
        """When ``j`` (alive) is cancelled: ``timeout_s`` after its start, or ``queue_s``
        after its submission (requeue) while it waits; None: not while it waits. Not
        started and known to neither sacct nor squeue (state ``UNKNOWN``): the shorter of
        the two after its submission (requeue)."""
        if j.started_s is not None:
            return j.started_s + self.timeout_s
        if j.state == "UNKNOWN":
            return j.queued_s + min(self.timeout_s, self.queue_s or math.inf)
        return None if self.queue_s is None else j.queued_s + self.queue_s

    def unknown_bound(self) -> str:
        """The bound of a job neither sacct nor squeue knows: ``--timeout 60 s``, or
        ``--queue-timeout 30 s`` where shorter."""
        if self.queue_s is not None and self.queue_s < self.timeout_s:
            return f"--queue-timeout {self.queue_s:g} s"
        return f"--timeout {self.timeout_s:g} s"


def run_jobs(jobs: list[ProbeJob], timeout_s: float, max_at_once: int | None = None,
             poll_s: float = POLL_S,
             then: Callable[[ProbeJob], list[ProbeJob]] | None = None,
             queue_timeout_s: float | None = None,
             wait_line_s: float = WAIT_LINE_S) -> None:  # fmt: skip
    """Submit ``jobs`` (at most ``max_at_once`` queued or running at a time; None: all at
    once) and wait until each has ended, looking at their states every ``poll_s`` seconds
    (at most a tenth of ``timeout_s`` and of ``queue_timeout_s``, at least 1 s) with one
    ``sacct`` call, logging every change of state and, every ``wait_line_s`` seconds at most
    per job, how long a job still waiting has waited. A job still running ``timeout_s``
    seconds (finite, > 0) after its start (sacct's ``Start``) is cancelled (``scancel``), as
    is one still waiting in the queue ``queue_timeout_s`` seconds after its submission
    (None: it may wait as long as Slurm keeps it); after a requeue by Slurm both count
    again, from the requeue and the restart. A job sacct does not know is looked up with
    ``squeue``; one neither knows is cancelled ``timeout_s`` (``queue_timeout_s`` where
    shorter) after its submission. A job has ended when each of its tasks has written its
    result or Slurm says it ended. ``then(job)``, called as each job ends (not to block:
    it runs in the poll loop), returns jobs to submit after it (a world size's framework
    runs). Sets each job's ``outcome``.

    Raises:
        ValueError: ``timeout_s`` or ``queue_timeout_s`` is not finite and > 0 (nothing is
            submitted).
        Interrupted: a Ctrl-C, or a SIGTERM or SIGHUP raised as ``SystemExit``, while it
            submitted or waited: every job still queued or running was cancelled first, each
            job not ended has its ``interrupted`` reason.
    """
    limits = Limits(timeout_s, queue_timeout_s, poll_s, wait_line_s)
    try:
        while any(j.outcome is None for j in jobs):
            _submit_free(jobs, max_at_once, limits)
            _look(jobs, limits, then)
            if any(j.alive for j in jobs):
                deadlines = [d for j in jobs if j.alive and (d := limits.deadline(j)) is not None]
                soonest = min(deadlines, default=math.inf) - time.monotonic()
                time.sleep(max(0.0, min(limits.poll_s, soonest)))
    except (KeyboardInterrupt, SystemExit) as e:
        code = 130 if isinstance(e, KeyboardInterrupt) else e.code
        raise Interrupted(code, _interrupt(jobs, code)) from e


def _submit_free(jobs: list[ProbeJob], max_at_once: int | None, limits: Limits) -> None:
    """Submit the jobs not yet submitted while at most ``max_at_once`` are alive. A job
    sbatch refuses (the site's cap on a user's queued jobs, reached before ours) is
    submitted again once a job of the probe has ended; refused with none alive, it is
    recorded so, with sbatch's words."""
    for j in jobs:
        alive = sum(x.alive for x in jobs)
        if j.job is not None or j.outcome is not None:
            continue
        if (max_at_once is not None and alive >= max_at_once) or (
                j.refused_at is not None and alive >= j.refused_at):
            return
        try:
            with signals_held():
                j.job, j.submitted_s, j.state = j.submit(), time.monotonic(), "UNKNOWN"
            j.queued_s = j.submitted_s
        except (OSError, RuntimeError) as e:  # submitit's FailedJobError is a RuntimeError
            words = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            if alive:
                j.refused_at = alive
                log.warning("[probe] %s: sbatch refused the job (%s); submitting it again "
                            "once a job of the probe has ended", j.what, words)
                return
            j.outcome = f"sbatch refused the job: {words}"
            log.warning("[probe] %s: %s", j.what, j.outcome)
            continue
        j.said_s = j.submitted_s
        queue = ("in the queue as long as Slurm keeps it (no --queue-timeout)"
                 if limits.queue_s is None else
                 f"at most --queue-timeout {limits.queue_s:g} s in the queue")
        log.info("[probe] %s: Slurm job %s submitted; waiting %s, then at most --timeout %g s "
                 "from its start (follow: %s)", j.what, j.job_id, queue, limits.timeout_s,
                 shlex.join(["squeue", "-j", j.job_id]))


def _look(jobs: list[ProbeJob], limits: Limits,
          then: Callable[[ProbeJob], list[ProbeJob]] | None) -> None:  # fmt: skip
    """One look at every alive job (one ``sacct``; ``squeue`` for those sacct does not
    know): log changes and long waits, cancel those past their timeout or queue timeout,
    and hand each that ended to ``then``."""
    alive = [j for j in jobs if j.alive]
    if not alive:
        return
    alive[0].job.watcher.update()  # one sacct for every job submitit registered
    infos = {j.job_id: j.job.get_info(mode="cache") for j in alive}
    infos |= _queue_infos([i for i, info in infos.items() if not info.get("State")])
    now, wall = time.monotonic(), time.time()
    for j in alive:
        info = infos[j.job_id]
        state = info.get("State") or "UNKNOWN"
        changed, j.state, word = state != j.state, state, state.split()[0]
        reason = info.get("Reason") or ""
        # sacct's Reason of a pending job reads None at some polls: keep the one it gave
        kept = j.waiting if not changed and word in WAITING else ""
        j.waiting = ("known to neither sacct nor squeue" if word == "UNKNOWN" else
                     kept if reason in {"None", ""} else reason)
        j.follow(word, info.get("Start", ""), now, wall)
        deadline = limits.deadline(j)
        if _results_written(j.job) or word not in WAITING | ACTIVE:
            j.outcome = ""
        elif deadline is not None and now >= deadline:
            j.outcome = _cancel(j, limits, now)
        if changed:
            j.said_s = now
            log.info("[probe] %s: Slurm job %s %s%s, %s (%s)", j.what, j.job_id, state,
                     _why(j), j.times(now), _tally(jobs))
        elif j.outcome is None and word in WAITING and now - j.said_s >= limits.wait_line_s:
            j.said_s = now
            log.info("[probe] %s: Slurm job %s still %s%s, %s so far (%s; %s)", j.what,
                     j.job_id, state, _why(j), j.times(now), _queue_words(limits),
                     _tally(jobs))
        if j.outcome == "" and then is not None:
            jobs.extend(then(j))


def _why(j: ProbeJob) -> str:
    """`` (Priority)``: why Slurm keeps ``j`` waiting, where sacct says and it waits."""
    return f" ({j.waiting})" if j.waiting and j.started_s is None else ""


def _queue_words(limits: Limits) -> str:
    """What bounds the queue wait: ``no --queue-timeout`` or ``--queue-timeout 600 s``."""
    return ("no --queue-timeout: waiting on" if limits.queue_s is None else
            f"--queue-timeout {limits.queue_s:g} s")


def _tally(jobs: list[ProbeJob]) -> str:
    """How far the probe's jobs are: ``1/3 job(s) ended, 1 running, 1 waiting`` (queued,
    or not yet submitted)."""
    ended = sum(j.outcome is not None for j in jobs)
    running = sum(j.alive and j.started_s is not None for j in jobs)
    return (f"{ended}/{len(jobs)} job(s) ended, {running} running, "
            f"{len(jobs) - ended - running} waiting")


def _cancel(j: ProbeJob, limits: Limits, now: float) -> str:
    """Cancel ``j`` past its timeout (from its start or restart), its queue timeout (from
    its submission or requeue, not started), or the bound of a job neither sacct nor squeue
    knows; the reason recorded (the times to within ``limits.poll_s``, how often the state
    was looked at)."""
    j.job.cancel(check=False)
    since = "its requeue" if j.requeues else "submission"
    if j.started_s is not None:
        what = f"--timeout {limits.timeout_s:g} s"
        head = (f"timed out: {what} (counted from the job's "
                f"{'restart' if j.requeues else 'start'}) passed with Slurm job {j.job_id} "
                f"{j.state}, {j.times(now)}")
    else:
        what = (limits.unknown_bound() if j.state == "UNKNOWN" else
                f"--queue-timeout {limits.queue_s:g} s")
        kind = "queue timeout" if what.startswith("--queue") else "timed out"
        head = (f"{kind}: {what} (counted from {since}) passed with Slurm job "
                f"{j.job_id} {j.state}{_why(j)}, {j.times(now)}")
    log.warning("[probe] %s: Slurm job %s %s past %s; cancelled", j.what, j.job_id, j.state,
                what)
    return f"{head} (state looked at every {limits.poll_s:g} s); cancelled"


def _interrupt(jobs: list[ProbeJob], code: int) -> str:
    """Cancel every alive job of ``jobs`` on a signal (exit status ``code``) and record why
    in each job not ended; the reasons, joined."""
    how, now = f"interrupted by {signal_name(code)}", time.monotonic()
    for j in jobs:
        if j.outcome is not None:
            continue
        j.interrupted = True
        if j.job is None:
            j.outcome = f"{how} before its job was submitted"
            continue
        j.state = _state_now(j)
        j.job.cancel(check=False)
        j.outcome = (f"{how} after {now - j.submitted_s:.0f} s: Slurm job {j.job_id} "
                     f"{j.state} cancelled")
    return "; ".join(f"{j.what}: {j.outcome}" for j in jobs if j.interrupted) or how


def _state_now(j: ProbeJob) -> str:
    """``j``'s Slurm state now (one ``sacct``), or the last one seen where it cannot be had."""
    try:
        return j.job.get_info(mode="force").get("State") or j.state
    except Exception:  # noqa: BLE001 (on the way out: the last state seen will do)
        return j.state


def world_job(cfg, spec_path: Path, out_path: Path, work_dir: Path) -> ProbeJob:
    """The probe job of one world size (``cfg``: a point at that world size), its tasks
    running the worker on ``spec_path`` (rank 0 writes ``out_path``), logs under
    ``work_dir/logs``.

    Raises:
        ValueError: ``cluster.launch_mode`` is not ``srun`` (the probe runs a task per rank).
    """
    if cfg.cluster.launch_mode != "srun":
        raise ValueError(f"cluster.launch_mode={cfg.cluster.launch_mode}: the probe runs a "
                         "task per rank; set cluster.launch_mode=srun")
    executor = _executor(cfg, work_dir / ".submitit")
    args = (node_python(_cluster(cfg)), str(spec_path.resolve()), str(out_path.resolve()),
            str((work_dir / "logs").resolve()))
    return ProbeJob(f"world size {cfg.world_size}", lambda: executor.submit(ProbeTask(), *args))


#: Seconds a job Slurm says COMPLETED may take to show its tasks' result files (a shared
#: file system's lag), as submitit waits for them.
RESULT_WAIT_S = 15.0


def world_result(j: ProbeJob) -> tuple[bool, str]:
    """(succeeded, the job's id, or its error or why it did not end by itself) of an ended
    job (:func:`world_job`, :func:`framework_job`), from its tasks' result files; never
    waits for a task still running (at most :data:`RESULT_WAIT_S` for the files of a job
    Slurm says COMPLETED). A task without its result file: ``Slurm job 12 FAILED without
    the result of task 1 (see <its stderr>)``; one that raised: the error's last line."""
    from submitit.core.utils import pickle_load  # submitit only where a job was submitted

    if j.outcome:
        return False, j.outcome
    wait_until = time.monotonic() + (RESULT_WAIT_S if j.state.startswith("COMPLETED") else 0)
    while not _results_written(j.job) and time.monotonic() < wait_until:
        time.sleep(1.0)
    for task in range(j.job.num_tasks):
        paths = j.job.task(task).paths
        if not paths.result_pickle.exists():
            return False, (f"Slurm job {j.job_id} {j.state} without the result of task "
                           f"{task} (see {paths.stderr})")
        outcome, value = pickle_load(paths.result_pickle)
        if outcome != "success":
            return False, f"Slurm job {j.job_id}: {str(value).strip().splitlines()[-1]}"
    return True, f"Slurm job {j.job_id}"


def framework_job(cfg, overrides: list[str], run_dir: Path) -> ProbeJob:
    """A framework run, ``overrides`` (the framework model at ``cfg``'s world size), as a
    point's job, its records in ``run_dir``."""
    executor = _executor(cfg, run_dir.parent / ".submitit")
    spec = task_spec(_cluster(cfg), overrides, run_dir, cfg.nodes)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    return ProbeJob(f"framework run {run_dir.name}", lambda: executor.submit(TrainTask(), spec))

