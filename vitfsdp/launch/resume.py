"""Rerunning a sweep: which points already have a result, and one sweep per directory.

A point is identified by the hash of its resolved config (:func:`config_hash`), recorded in
its ``job.json`` when it is launched. Rerunning the same sweep command (or any command
whose points overlap) into the same sweep directory:

- skips a point whose config already *completed* anywhere in the directory;
- skips a point whose Slurm job is still pending or running (a detached sweep);
- skips a point that ended as data in the run itself (``oom``, ``failed``, ``timeout`` of a
  collective) unless ``--rerun-failed``: it would most likely fail the same way again;
- runs again a point that never ran, or that was *interrupted* from outside (cancelled,
  killed at its time limit, preempted, a node died: ``interrupted`` in its summary).

A run directory that is run again keeps its earlier attempt in ``attempts/<n>/``, ``n`` the
attempt it holds, counted from 0 (:func:`attempt_folder`; a run directory of an earlier
version counts from 1 and goes on after its highest folder: the numbers order the attempts,
and the attempt a folder holds is its run.json's ``attempt``, never read from its name); a
completed run's directory is never written into (:class:`vitfsdp.records.RunRecords` refuses
too). A ``--scripts-only`` job script submitted again does the same before its training
(``python -m vitfsdp.launch.resume RUN_DIR``, :func:`prepare_rerun`).
Two sweeps cannot work in one directory at once: :class:`SweepLock`.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from vitfsdp.core.confighash import config_digest
from vitfsdp.core.layout import (
    ATTEMPTS_DIR,
    CHECKPOINT_DIR,
    CHECKPOINT_META_FILE,
    CHECKPOINT_OLD_DIR,
    COMPLETED,
    EXIT_ALREADY_COMPLETED,
    LOCK_FILE,
    RUN_FILE,
    SKIPPED_INFEASIBLE,
    SLURM_OUTPUT,
    SUBMITTED_FILE,
    SUMMARY_FILE,
    field_of,
)
from vitfsdp.core.layout import FAILED_IN_RUN as FAILED_IN_RUN  # the sweep reads it from here
from vitfsdp.core.locks import lock_holder, locked
from vitfsdp.records import read_json

log = logging.getLogger(__name__)

def config_hash(cfg) -> str:
    """16 hex digits of SHA-256 over the resolved config (a :class:`vitfsdp.config.RunConfig`)
    as sorted JSON, without the cluster fields that do not change what a point measures
    (:data:`vitfsdp.core.confighash.POINT_EXCLUDED`): the ``point`` scope of
    :func:`vitfsdp.core.confighash.config_digest`."""
    return config_digest(cfg, "point")[0]


@dataclass
class Existing:
    """A point of an earlier sweep found in the directory."""

    run_dir: Path
    status: str | None  # summary status; None while running or never started
    interrupted: bool  # ended from outside the run (scancel, time limit, node failure)
    job_id: str | None
    packed: bool = False  # its job is a pack's (hydra.launcher.pack): other points run in it


def existing_points(sweep_dir: Path, job_file: str) -> dict[str, list[Existing]]:
    """config hash → the points of earlier sweeps in ``sweep_dir`` with that config; a
    point's job is its ``job_file``'s, else that of its script submitted by hand
    (:func:`hand_submitted_job_id`)."""
    found: dict[str, list[Existing]] = {}
    for job_path in sorted(Path(sweep_dir).glob(f"*/{job_file}")):
        job = read_json(job_path) or {}
        if not job.get("config_hash"):
            continue
        summary = read_json(job_path.parent / SUMMARY_FILE) or {}
        found.setdefault(job["config_hash"], []).append(Existing(
            job_path.parent, summary.get("status"), bool(summary.get("interrupted")),
            job.get("job_id") or hand_submitted_job_id(job_path.parent),
            bool(job.get("pack"))))
    return found


def hand_submitted_job_id(run_dir: Path) -> str | None:
    """The Slurm job of a point's script submitted by hand (``--scripts-only``): the newest
    of the job ids ``submit.sh`` recorded in the run directory (:data:`SUBMITTED_FILE`) and
    of the ``slurm-<id>.out`` a job writes there when it starts (:data:`SLURM_OUTPUT`); None
    where neither names one (a script only written, or sbatch-ed without submit.sh and not
    started)."""
    started = [field_of(SLURM_OUTPUT, p.name)
               for p in Path(run_dir).glob(SLURM_OUTPUT.format(job_id="*"))]
    try:
        recorded = (Path(run_dir) / SUBMITTED_FILE).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        recorded = []
    ids = [i for i in (*started, *recorded) if i and i.isdigit()]
    return max(ids, key=int) if ids else None


def archive_attempt(run_dir: Path, keep: tuple[str, ...] = ()) -> Path | None:
    """Move an unfinished or failed attempt's files into ``run_dir/attempts/<n>/`` so the
    point can run again in ``run_dir`` (its ``checkpoint/`` stays: the next attempt resumes
    from it); None when there is nothing to move. ``n`` is the attempt it holds, counted from
    0 as everywhere else (:func:`attempt_folder`). A point the plan skipped
    (``skipped_infeasible``) ran nothing: its records are a prediction, which the next
    sweep makes again, so they are removed rather than kept as an attempt.

    Args:
        keep: names left in place (a job script's own files); empty folders stay too and
            alone do not make an attempt.

    Raises:
        FileExistsError: ``run_dir`` holds a completed run (never moved or overwritten).
    """
    if not run_dir.is_dir():
        return None
    summary = read_json(run_dir / SUMMARY_FILE) or {}
    if summary.get("status") == COMPLETED:
        raise FileExistsError(f"{run_dir} holds a completed run; it is never overwritten")
    entries = [p for p in run_dir.iterdir()
               if p.name not in (ATTEMPTS_DIR, CHECKPOINT_DIR, *keep)
               and not (p.is_dir() and not any(p.iterdir()))]
    if not entries:
        return None
    if summary.get("status") == SKIPPED_INFEASIBLE:
        for p in entries:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        return None
    dest = run_dir / ATTEMPTS_DIR / str(attempt_folder(run_dir))
    dest.mkdir(parents=True)
    for p in entries:
        shutil.move(str(p), dest / p.name)
    return dest


def attempt_folder(run_dir: Path) -> int:
    """The number of the ``attempts/<n>/`` folder that the attempt now in ``run_dir`` moves
    to: its attempt number, counted from 0 as run.json's ``attempt`` counts it (the same
    number as the progress line's "attempt k" and runs.csv's ``num_attempts`` = the last
    attempt + 1: ``attempts/0/`` holds the first attempt, ``attempts/1/`` the one that
    resumed from its checkpoint, ...), or, where that number is taken or not above every
    folder's (the point started afresh, counting from 0 again, because the attempt before
    saved no checkpoint) or unknown (no readable run.json: the job ended before its training
    started), one more than the highest. So the highest number is always the latest attempt,
    where :meth:`vitfsdp.records.RunRecords.start` reads the windows a resume keeps; in a run
    directory of an earlier version, whose folders count from 1 (``attempts/1/`` holds
    attempt 0), every new folder is one more than the highest, and only the order holds: the
    attempt a folder holds is its run.json's ``attempt`` (which the progress line and
    runs.csv read), never its name."""
    taken = [int(p.name) for p in (run_dir / ATTEMPTS_DIR).glob("*") if p.name.isdigit()]
    after = max(taken, default=-1) + 1
    try:
        attempt = (read_json(run_dir / RUN_FILE) or {}).get("attempt")
    except ValueError:  # unreadable run.json: its attempt is unknown, the files move all the same
        attempt = None
    return attempt if isinstance(attempt, int) and attempt >= after else after


def prepare_rerun(run_dir: Path, keep: tuple[str, ...], make_dirs: tuple[str, ...] = ()) -> int:
    """What a job script runs before its training when it is submitted again by hand: the
    earlier attempt's files move to ``attempts/<n>/`` (:func:`archive_attempt`, ``keep``
    and the job ids ``submit.sh`` recorded, :data:`SUBMITTED_FILE`, left in place) and
    ``make_dirs`` are made again.

    Returns:
        0 to run the point, :data:`~vitfsdp.core.layout.EXIT_ALREADY_COMPLETED` when it
        already completed (nothing to do).
    """
    try:  # the ids submit.sh recorded name this job too: --status reads them
        moved = archive_attempt(run_dir, (*keep, SUBMITTED_FILE))
    except FileExistsError as e:
        log.info("%s; nothing to do", e)
        return EXIT_ALREADY_COMPLETED
    if moved:
        log.info("earlier attempt kept in %s", moved)
    for name in make_dirs:
        (run_dir / name).mkdir(parents=True, exist_ok=True)
    return 0


def unsaved_attempt(run_dir: Path) -> str | None:
    """Why a job whose training just stopped on a signal is not worth requeueing, or
    ``None`` when it is: the attempt that ran last (``run.json``'s ``attempt``) saved the
    run's checkpoint (``checkpoint/meta.json``'s ``attempt``, the attempt that saved it).

    An attempt that saved nothing stopped before its first timing window ended: the stop
    signal came during start-up (or before the first window boundary). A requeued job gets
    the same time limit, starts the same way and would stop the same way, spending the job's
    nodes once more per requeue (``cluster.max_requeues``) for no step. Each requeue
    decision reads this: submitit's :meth:`vitfsdp.launch.slurm.TrainTask.checkpoint` and the
    ``--scripts-only`` job script (``python -m vitfsdp.launch.resume RUN_DIR --saved``). A
    pack is never requeued. The point stays ``preempted`` (interrupted): a rerun of the
    sweep, with more ``cluster.time``, runs it again.

    Returns:
        one line, or ``None``; a run directory without ``run.json`` (the training ended
        before it recorded anything) gives a line too.
    """
    run = read_json(Path(run_dir) / RUN_FILE)
    if run is None:
        return f"{run_dir} has no {RUN_FILE}: the training stopped before it started"
    attempt = run.get("attempt", 0)
    meta = next((m for m in (read_json(Path(run_dir) / d / CHECKPOINT_META_FILE)
                             for d in (CHECKPOINT_DIR, CHECKPOINT_OLD_DIR)) if m), None)
    if meta is not None and meta.get("attempt") == attempt:
        return None
    kept = (f"the checkpoint of step {meta['step']} is an earlier attempt's" if meta
            else "no checkpoint")
    return (f"attempt {attempt} saved nothing ({kept}): it stopped before its first timing "
            "window ended, and a requeue would stop the same way; not requeued. Give "
            "cluster.time more than the start-up and a window plus cluster.signal_delay_s, "
            "and run the sweep again")


def main(argv: list[str] | None = None) -> int:
    """``python -m vitfsdp.launch.resume RUN_DIR [--keep NAME ...] [--mkdir NAME ...]``: see
    :func:`prepare_rerun`; the exit code is its return value. With ``--saved``: exit 0 when
    the run's last attempt saved its checkpoint, else 1 with :func:`unsaved_attempt`'s line
    on stderr (a job script's requeue decision)."""
    parser = argparse.ArgumentParser(prog="python -m vitfsdp.launch.resume",
                                     description=prepare_rerun.__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--keep", nargs="*", default=[], help="names left in place")
    parser.add_argument("--mkdir", nargs="*", default=[], help="folders made again")
    parser.add_argument("--saved", action="store_true",
                        help="only ask whether the last attempt saved the checkpoint")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="vitfsdp: %(message)s")
    if args.saved:
        why = unsaved_attempt(args.run_dir)
        if why:
            log.warning("%s", why)
        return 1 if why else 0
    return prepare_rerun(args.run_dir, tuple(args.keep), tuple(args.mkdir))


def _named_holder(path: Path, wait_s: float = 1.0) -> str | None:
    """The lock's holder as :func:`lock_holder` reads it, waiting up to ``wait_s`` for a
    holder that has just taken the lock to write its name (the file is empty in between: seen
    once in a suite, two sweeps started together); None if it names none by then."""
    deadline = time.monotonic() + wait_s
    while (holder := lock_holder(path)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return holder


class SweepLock:
    """An exclusive lock on a sweep directory for the life of one sweep process:
    ``<sweep dir>/.sweep.lock`` held with :func:`vitfsdp.core.locks.locked` (``flock``,
    released when the process exits, however it ends), naming its holder's host and pid.

    Raises:
        RuntimeError: another live sweep holds the lock; the message names its host and pid.
    """

    def __init__(self, sweep_dir: Path) -> None:
        self.path = Path(sweep_dir) / LOCK_FILE
        self._held: ExitStack | None = None

    def acquire(self) -> SweepLock:
        """Take the lock or raise (never waits).

        Raises:
            RuntimeError: another sweep holds it.
            OSError: the directory or the lock file cannot be made.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        held = ExitStack()
        try:
            held.enter_context(locked(self.path, timeout=0))
        except TimeoutError:
            holder = _named_holder(self.path) or "another process"
            follow = shlex.join(["python", "-m", "vitfsdp.sweep", "--status",
                                 str(self.path.parent), "--watch"])
            raise RuntimeError(
                f"another sweep ({holder}) is working in {self.path.parent}; wait for it "
                f"({follow}) or use another hydra.sweep.dir"
            ) from None
        self._held = held
        return self

    def release(self) -> None:
        """Drop the lock (also dropped when the process exits)."""
        if self._held is not None:
            self._held.close()
            self._held = None


if __name__ == "__main__":
    raise SystemExit(main())
