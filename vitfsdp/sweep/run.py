"""The launcher's side of a sweep (:func:`launch`, called by the vitfsdp
Hydra launcher): the validated points (:func:`vitfsdp.sweep.compose.plan`), those to run
(:mod:`vitfsdp.sweep.choose`), run here (:mod:`vitfsdp.sweep.local`) or as Slurm jobs
(:mod:`vitfsdp.sweep.slurm_jobs`), or searched for their largest batch; then the end report
(:mod:`vitfsdp.sweep.report`). The sweep directory's lock is taken by :func:`take_lock`.
"""

from __future__ import annotations

import datetime
import os
import shlex
import socket
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from vitfsdp import provenance
from vitfsdp.core.layout import COMMANDS_FILE, MULTIRUN_FILE
from vitfsdp.launch import LaunchOptions, resume, secrets, slurm, status
from vitfsdp.launch import batch_search as bsearch
from vitfsdp.progress import SweepProgress
from vitfsdp.records import (
    STATUSES,
    SUMMARY_FILE,
    append_jsonl,
    disk_error,
    read_json,
    write_json_atomic,
)
from vitfsdp.sweep.check import _options
from vitfsdp.sweep.choose import _consult_plan, record_cannot_run, select
from vitfsdp.sweep.compose import _compose_point, plan_all
from vitfsdp.sweep.local import _host_work, run_one, stop_signal
from vitfsdp.sweep.point import (
    Point,
    SweepDiskError,
    SweepInterrupted,
    SweepRefused,
    SweepStopped,
    _predicted_step_s,
    log,
)
from vitfsdp.sweep.report import (
    _remove_secrets,
    _report,
    _report_not_ended,
    resume_command,
    status_command,
)
from vitfsdp.sweep.slurm_jobs import launch_slurm

#: A sweep's lock, by sweep directory, taken by :func:`run_sweeper` before Hydra writes
#: anything there, and used by :func:`launch`.
_held_locks: dict[Path, resume.SweepLock] = {}


def take_lock(sweep_dir: Path) -> resume.SweepLock:
    """Make the sweep directory and take its lock (:class:`vitfsdp.launch.resume.SweepLock`).

    Raises:
        SweepRefused: the directory cannot be made (naming ``hydra.sweep.dir``), or another
            sweep holds the lock; nothing of the other sweep's is touched.
    """
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        return resume.SweepLock(sweep_dir).acquire()
    except OSError as e:
        raise SweepRefused(f"error: hydra.sweep.dir={sweep_dir} cannot be made or written "
                           f"({e.strerror or e}); choose a directory you can write") from None
    except RuntimeError as e:
        raise SweepRefused(f"error: {e}") from None


def launch(hydra_context, config: DictConfig, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> list[JobReturn]:
    """Validate all points, then run them one after another; called by the Hydra launcher.

    Points the plan (:func:`vitfsdp.plan.predict`) predicts not to fit the cluster profile's
    device memory are recorded as ``skipped_infeasible`` instead of run (``--run-infeasible``:
    run them anyway, flagged). With ``--batch-search`` each point becomes a search for its
    largest local batch (:mod:`vitfsdp.launch.batch_search`).

    Every point gets a JobReturn whose value is its summary (status and figures), failures
    included, so Hydra's sweeper never aborts the sweep on one point's failure.
    """
    points, cannot = plan_all(hydra_context, config, job_overrides, initial_job_idx)
    sweep_dir = Path(config.hydra.sweep.dir).resolve()
    options = _options(config)
    log.info("%s", where_line(points))
    lock = _held_locks.get(sweep_dir) or take_lock(sweep_dir)  # held: run_sweeper took it
    provenance.redact_yaml_file(sweep_dir / MULTIRUN_FILE)  # Hydra saved the overrides raw
    skipped: dict[int, dict] = {}
    try:
        skipped = record_cannot_run(cannot)  # before anything runs: one line, their records
        if options.batch_search:
            _record_command(sweep_dir, [])
            summaries = _batch_search(hydra_context, config, points, sweep_dir, options)
        else:
            todo, summaries = select(points, sweep_dir, options.rerun_failed)
            _record_command(sweep_dir, points)  # not refused: it runs
            log.info("sweep of %d points into %s: %d to run%s", len(points), sweep_dir,
                     len(todo), _settled_counts(summaries.values(), options.rerun_failed))
            todo, infeasible = _consult_plan(todo, options)
            summaries.update(infeasible)
            alive = _still_queued(points, summaries, options)
            queued = sum(s.get("status") == "submitted" for s in summaries.values())
            summaries.update({p.num: s for p, s in zip(todo, _run(todo, sweep_dir, options,
                                                                   alive, queued), strict=True)})
            summaries.update({p.num: read_json(p.run_dir / SUMMARY_FILE) or summaries[p.num]
                              for p in alive})
    except KeyboardInterrupt:
        raise SweepInterrupted(_interrupted_line(points, sweep_dir)) from None
    except SystemExit as e:  # SIGTERM, SIGHUP (vitfsdp.core.hangup.exit_on_hangup)
        name = stop_signal(e.code)  # a local point: stopped and recorded (run_one)
        if name is None:
            raise
        _say_everywhere(_interrupted_line(points, sweep_dir, name))
        raise SweepStopped(e.code) from None
    except OSError as e:
        if not disk_error(e):
            raise
        raise SweepDiskError(_disk_line(e, points, sweep_dir)) from None
    finally:
        lock.release()
    summaries.update(skipped)
    every = sorted([*points, *cannot], key=lambda p: p.num)  # the points that cannot run too
    ordered = [summaries[p.num] for p in every]
    if all(s.get("status") in STATUSES for s in ordered):
        _remove_secrets(sweep_dir)
        _report(every, ordered, sweep_dir)
    else:
        _report_not_ended(every, ordered, sweep_dir)
    return [JobReturn(overrides=p.overrides, cfg=OmegaConf.create({}), hydra_cfg=config,
                      working_dir=str(p.run_dir), _return_value=s, status=JobStatus.COMPLETED)
            for p, s in zip(every, ordered, strict=True)]


def _record_command(sweep_dir: Path, points: Sequence[Point]) -> None:
    """Append this sweep's command (its overrides from the redacted multirun.yaml, which the
    next sweep in the directory overwrites) and its points' config hashes (the identity a
    rerun matches them by; none for a batch search, whose points are searches) to
    :data:`COMMANDS_FILE`, so that the report can name every command the directory's runs
    came from and the analysis the points of the last one that never started; ``points``:
    each point's hash, run directory name and overrides (redacted), which ``--status``
    reads rather than expanding the command again (an ``experiment=`` preset's sweep, a
    point that cannot run: the expansion of ``task`` is not the points)."""
    overrides = provenance.saved_overrides(sweep_dir)
    if overrides is None:
        return
    append_jsonl(sweep_dir / COMMANDS_FILE, {
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **overrides, "config_hashes": [p.config_hash for p in points],
        "points": [{"config_hash": p.config_hash, "run_dir": p.run_dir.name,
                    "overrides": provenance.redact_args(list(p.overrides))} for p in points]})


def _settled_counts(skipped: Iterable[dict], rerun_failed: bool) -> str:
    """``"; skipped: 2 completed, 1 failed (--rerun-failed runs it again)"``: the end status
    an earlier sweep left each point this one skips with (``submitted``: its job still
    queued or running); ``""`` for none."""
    counts: dict[str, int] = {}
    for s in skipped:
        status = (s or {}).get("status") or "no summary"
        counts[status] = counts.get(status, 0) + 1
    if not counts:
        return ""
    again = [k for k in counts if k not in ("completed", "submitted")]
    hint = " (--rerun-failed runs them again)" if again and not rerun_failed else ""
    ordered = sorted(counts.items(), key=lambda kv: (kv[0] != "completed", kv[0]))
    return "; skipped: " + ", ".join(f"{n} {k}" for k, n in ordered) + hint


def where_line(points: Sequence[Point]) -> str:
    """One line saying what the sweep runs and where: the model(s), data, cluster profile
    and how many ranks run on this host (``cluster=local``: all of them, as processes), so a
    sweep of the defaults says it is vit_tiny on synthetic data here, and a GPU cluster's
    sweep of vit_tiny that it is the CPU test model."""
    def values(get) -> str:
        return ",".join(dict.fromkeys(str(get(p.cfg)) for p in points))
    worlds = sorted({p.cfg.world_size for p in points})
    ranks = f"{worlds[0]}-{worlds[-1]}" if len(worlds) > 1 else f"{worlds[0]}"
    what = (f"runs model={values(lambda c: c.model.name)} data={values(lambda c: c.data.name)}"
            f" cluster={values(lambda c: c.cluster.name)}")
    if all(p.cfg.cluster.launcher == "local" for p in points):
        nets = {(n.inter_node_gbit_s, n.node_cpus) for p in points
                if (n := p.cfg.cluster.network).emulate}
        apart = "".join(f", nodes apart on an emulated {g:g} Gbit/s link"
                        + (f" with {c:g} CPUs each" if c else "") for g, c in sorted(
                            nets, key=lambda x: (x[0], x[1] or 0)))
        return (f"{what}: {ranks} ranks a point, all as processes on this host "
                f"({socket.gethostname()}, {os.cpu_count()} CPUs{apart}); choose with "
                "model=, data=, cluster=")
    tiny = ("; model=vit_tiny is the CPU test model (4 blocks of width 64, 16 px): name the "
            "study's (model=vit_huge_patch14_224, ...)"
            if any(p.cfg.model.name == "vit_tiny" and p.cfg.gpu_expected() for p in points)
            else "")
    return f"{what}: Slurm jobs of {ranks} ranks a point, none on this host{tiny}"


def _still_queued(points: list[Point], summaries: dict[int, dict],
                  options: LaunchOptions) -> list[Point]:
    """The points an earlier (interrupted or detached) sweep left queued or running in Slurm,
    which this sweep waits for with its own (none with --detach or --scripts-only); each
    with the run directory its job writes into."""
    if options.detach or options.scripts_only:
        return []
    return [replace(p, run_dir=Path(summaries[p.num]["run_dir"])) for p in points
            if summaries.get(p.num, {}).get("status") == "submitted"
            and summaries[p.num].get("run_dir")]


def _running_jobs(points: list[Point]) -> tuple[list[str], list[str]]:
    """The Slurm job ids of the points that have not ended (one per pack or array task), and
    of those whose records say they ended (no Slurm end kept in the summary yet: a rank
    recorded ``failed`` while the job is still ``RUNNING`` or ``COMPLETING``) the ones
    squeue reports still queued or running (:func:`vitfsdp.launch.status.alive_in_queue`).

    Returns:
        (the jobs that run on, the jobs whose end squeue could not confirm: empty where it
        answered or none was asked about).
    """
    ids, ended = [], []
    for p in points:
        try:
            job = read_json(p.run_dir / slurm.JOB_FILE) or {}
            summary = read_json(p.run_dir / SUMMARY_FILE) or {}
        except (OSError, ValueError):  # unreadable: say nothing of it
            continue
        if not job.get("job_id"):
            continue
        if summary.get("status") not in STATUSES:
            ids.append(str(job["job_id"]))
        elif status.SLURM_KEY not in summary:  # Slurm's end not seen yet
            ended.append(str(job["job_id"]))
    alive = status.alive_in_queue(ended, status.QUICK_QUERY_S) if ended else {}
    unknown = ended if alive is None else []
    ids += [i for i in ended if i in (alive or {})]
    return list(dict.fromkeys(ids)), [i for i in dict.fromkeys(unknown) if i not in ids]


def _unknown_jobs(ids: list[str]) -> str:
    """``"; squeue cannot say whether 2 more Slurm job(s) run (their points recorded an
    end): check with: squeue -j 12,13"``; ``""`` for none."""
    if not ids:
        return ""
    return (f"; squeue cannot say whether {len(ids)} more Slurm job(s) run (their points "
            f"recorded an end): check with: {shlex.join(['squeue', '-j', ','.join(ids)])}")


def _disk_line(e: OSError, points: list[Point], sweep_dir: Path) -> str:
    """The one line of a sweep that could not write its records: the file system's error,
    the jobs that run on (with --status and scancel), and the fix."""
    ids, unknown = _running_jobs(points)
    jobs = (f"; {len(ids)} Slurm job(s) run on: follow with {status_command(sweep_dir)} once "
            f"there is space, or cancel them with {shlex.join(['scancel', *ids])}"
            if ids else "") + _unknown_jobs(unknown)
    return (f"error: the sweep could not write its records ({disk_error(e)}){jobs}; free "
            f"space and go on with: {resume_command(sweep_dir)} (completed points are kept)")


def _on_slurm(points: Sequence[Point]) -> bool:
    """Whether the sweep's points run as Slurm jobs (which outlive the sweep's process)."""
    return any(p.cfg.cluster.launcher == "slurm" for p in points)


def _say_everywhere(line: str) -> None:
    """Write the line of a sweep stopped by a signal into its log (stdout, which a sweep left
    running is redirected into) and onto stderr, once where both are the same file; a
    terminal already closed (SIGHUP) is passed over."""
    log.error("%s", line)
    try:
        same = os.path.sameopenfile(sys.stdout.fileno(), sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):  # one of them closed, or no file
        same = False
    if not same:
        try:
            print(line, file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def _interrupted_line(points: list[Point], sweep_dir: Path, signal_name: str = "") -> str:
    """What a Ctrl-C (or ``signal_name``, a SIGTERM or SIGHUP) leaves: the Slurm jobs that
    keep running (follow them, cancel them), or the local point stopped and recorded
    ``cancelled``; the same command goes on."""
    ids, unknown = _running_jobs(points)
    how = f"interrupted by {signal_name}" if signal_name else "interrupted"
    if ids:
        kept = ("; the sweep's secrets file stays for them (--status removes it once every "
                "point has ended)" if secrets.secrets_path(sweep_dir).exists() else "")
        return (f"{how}: {len(ids)} Slurm job(s) keep running; follow with: "
                f"{status_command(sweep_dir)}; cancel them with: "
                f"{shlex.join(['scancel', *ids])}; go on with: {resume_command(sweep_dir)} "
                f"(it waits for them and submits the points not submitted yet){kept}"
                f"{_unknown_jobs(unknown)}")
    if unknown:
        return (f"{how}:{_unknown_jobs(unknown)[1:]}; go on with: {resume_command(sweep_dir)} "
                "(it waits for those that still run and submits the points not submitted "
                "yet)")
    _remove_secrets(sweep_dir)
    if _on_slurm(points):
        return (f"{how}: no Slurm job of the sweep is queued or running; go on with: "
                f"{resume_command(sweep_dir)} (it submits the points not submitted yet)")
    return (f"{how}: the point running here was stopped and recorded cancelled "
            f"(interrupted); go on with: {resume_command(sweep_dir)} (it runs that point "
            "again, and the points not run yet)")


def _run(todo: list[Point], sweep_dir: Path, options: LaunchOptions,
         alive: Sequence[Point] = (), queued: int = 0) -> list[dict]:
    """Run ``todo`` with its cluster's launcher; their summaries in the same order. A Slurm
    sweep also waits for ``alive`` (:func:`_still_queued`), and counts ``queued`` (an earlier
    sweep's points still in Slurm's queue) against ``cluster.max_jobs``."""
    if alive or (todo and todo[0].cfg.cluster.launcher == "slurm"):
        return launch_slurm(todo, sweep_dir, options, alive, queued)
    with SweepProgress([p.cfg.train.steps for p in todo], [_predicted_step_s(p) for p in todo],
                       logger=log, work=[_host_work(p) for p in todo],
                       stall_floor_s=options.stall_floor_s) as bars:
        return [run_one(p, f"[{i}/{len(todo)}]", bars, i - 1)
                for i, p in enumerate(todo, start=1)]


def _relative(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` where it lies under it, else as it is."""
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _batch_search(hydra_context, config: DictConfig, points: list[Point], sweep_dir: Path,
                  options: LaunchOptions) -> dict[int, dict]:
    """Run every point's batch-size search in rounds (see :mod:`vitfsdp.launch.batch_search`);
    write ``batch_search.json``; point number → the summary of its largest fitting attempt
    (or of its last attempt), with ``largest_local_batch``."""
    searches = [bsearch.Search(p.num, bsearch.without_batch(p.overrides),
                               bsearch.power_of_two_floor(p.cfg.train.local_batch_size),
                               options.batch_search_max) for p in points]
    last: dict[int, dict] = {}
    best: dict[int, dict] = {}
    round_num = 0
    while active := [(s, b) for s in searches if (b := s.next_batch()) is not None]:
        round_num += 1
        attempts = [_compose_point(hydra_context, config, bsearch.with_batch(s.overrides, b),
                                   s.num) for s, b in active]
        log.info("batch search round %d: %s", round_num, ", ".join(
            f"point {s.num} local batch {b}" for s, b in active))
        todo, summaries = select(attempts, sweep_dir, options.rerun_failed)
        # every attempt runs (the search measures what fits); the plan only warns
        _consult_plan(todo, replace(options, run_infeasible=True))
        summaries.update({p.num: s for p, s in zip(todo, _run(todo, sweep_dir, options),
                                                     strict=True)})
        for (s, b), p in zip(active, attempts, strict=True):
            summary = summaries.get(p.num)
            s.attempts.append(bsearch.attempt_from_summary(
                b, _relative(p.run_dir, sweep_dir), summary))
            last[s.num] = summary or {"status": "failed"}
            if s.attempts[-1].status == "completed" and b == s.largest_fitting:
                best[s.num] = summary
        write_json_atomic(sweep_dir / bsearch.RESULT_FILE,
                          {"points": [s.record() for s in searches]})
    log.info("batch search (%s):\n%s", sweep_dir / bsearch.RESULT_FILE,
             bsearch.format_results(searches))
    return {s.num: {**best.get(s.num, last.get(s.num, {"status": "failed"})),
                    "largest_local_batch": s.largest_fitting} for s in searches}
