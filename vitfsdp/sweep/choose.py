"""Which of the validated points run: those an earlier sweep in the same
directory has not settled (:func:`select`, :mod:`vitfsdp.launch.resume`), and of those the
ones the plan predicts to fit (:func:`_consult_plan`; the others are recorded
``skipped_infeasible``); the points that cannot run at all are recorded so too
(:func:`record_cannot_run`).
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from vitfsdp import plan as planner
from vitfsdp import provenance, rundir
from vitfsdp.launch import LaunchOptions, local, resume, slurm, status
from vitfsdp.plan.impossible import CANNOT_RUN, Impossible, cannot_run_line
from vitfsdp.records import SUMMARY_FILE, RunRecords, read_json, write_json_atomic
from vitfsdp.sweep.point import (
    CannotRun,
    Point,
    SweepRefused,
    _point_label,
    log,
    points_span,
    say_group,
)
from vitfsdp.sweep.report import _model, status_command


def select(points: list[Point], sweep_dir: Path,
           rerun_failed: bool) -> tuple[list[Point], dict[int, dict]]:
    """Split points into those to run and those an earlier sweep in ``sweep_dir`` already
    settled (see :mod:`vitfsdp.launch.resume`). A point run again keeps its earlier run
    directory, whose files move to ``attempts/<n>/``.

    Returns:
        the points to run, and point number → summary of every skipped point.

    Raises:
        SweepRefused: a point's run directory holds a run of a different config.
    """
    existing = resume.existing_points(sweep_dir, slurm.JOB_FILE)
    unsettled = [e.job_id for es in existing.values() for e in es if e.status is None and e.job_id]
    queue = status.queue_states(unsettled)
    if queue is None:
        raise SweepRefused(f"error: {len(unsettled)} earlier jobs in {sweep_dir} have no result "
                           "and squeue cannot say whether they still run; rerun where Slurm "
                           f"answers (or check with {status_command(sweep_dir, watch=False)})")
    todo, skipped, again, settled = [], {}, [], []
    for p in points:
        prior = existing.get(p.config_hash, [])
        why, summary = _settled(prior, queue, rerun_failed)
        if why:
            settled.append((p, why, (summary or {}).get("status")))
            skipped[p.num] = summary
        else:
            again.append((p, prior))
    _say_settled(settled)
    alive = status.alive_in_queue([e.job_id for _, prior in again for e in prior if e.job_id])
    kept = []
    for p, prior in again:
        why, summary = _job_alive(prior, alive, sweep_dir)
        if why:
            log.warning("skip %s: %s", _point_label(p), why)
            skipped[p.num] = summary
            continue
        if prior:
            p.run_dir = prior[0].run_dir
        _check_own_dir(p)
        moved = resume.archive_attempt(p.run_dir)
        if moved:
            kept.append((p, moved))
        todo.append(p)
    _say_kept(kept)
    return todo, skipped


def _say_kept(kept: list[tuple[Point, Path]]) -> None:
    """Say where the earlier attempts of the points run again went, each ``(point, its
    attempts/<n>/ folder)``, a line for several (:func:`say_group`)."""
    say_group(kept, lambda item: f"{item[0].run_dir.name}: earlier attempt kept in {item[1]}",
              lambda group: f"earlier attempts of {len(group)} points kept in their run "
                            f"directories' attempts/<n>/ ({points_span([p for p, _ in group])}"
                            f"): the first in {group[0][1]}")


#: How a line of several settled points (:func:`_say_settled`) says why they are skipped,
#: by their earlier status; any other: ``recorded <status>`` (run again on request).
_SETTLED = {"completed": "completed earlier",
            "submitted": "whose Slurm jobs are still queued or running"}


def _say_settled(settled: list[tuple[Point, str, str | None]]) -> None:
    """Say why the points an earlier sweep settled are skipped, each ``(point, why, its
    earlier status)``, a line per status for several (:func:`say_group`: ``skip 45 points
    completed earlier (repeat=0,1 strategy=... nodes=1,2,4: every combination): the first,
    repeat=0 ... nodes=1: completed in 0_...``)."""
    groups: dict[str | None, list[tuple[Point, str, str | None]]] = {}
    for item in settled:
        groups.setdefault(item[2], []).append(item)
    for group in groups.values():
        say_group(group, _skip_line, _skip_lines)


def _skip_line(item: tuple[Point, str, str | None]) -> str:
    """``skip <point>: <why>``."""
    return f"skip {_point_label(item[0])}: {item[1]}"


def _skip_lines(group: list[tuple[Point, str, str | None]]) -> str:
    """The line of several points an earlier sweep settled alike (:func:`_say_settled`)."""
    status_ = group[0][2]
    what = _SETTLED.get(status_ or "", f"recorded {status_ or 'with no result'}")
    return (f"skip {len(group)} points {what} ({points_span([p for p, _, _ in group])}): the "
            f"first, {_skip_line(group[0])[len('skip '):]}")


def _settled(prior: list, queue: dict, rerun_failed: bool) -> tuple[str | None, dict]:
    """Why a point with these earlier attempts need not run (None: it must), and its summary."""
    for e in prior:
        if e.status == "completed":
            return f"completed in {e.run_dir.name}", read_json(e.run_dir / SUMMARY_FILE)
    for e in prior:
        job = queue.get(e.job_id or "")
        state = job.state if job else ""
        if e.status is None and state and state not in status.END_STATES:
            return (f"Slurm job {e.job_id} is {state} ({e.run_dir.name})",
                    {"status": "submitted", "job_id": e.job_id, "run_dir": str(e.run_dir)})
    for e in prior:
        if e.status in resume.FAILED_IN_RUN and not e.interrupted and not rerun_failed:
            return (f"{e.status} in {e.run_dir.name}; --rerun-failed runs it again",
                    read_json(e.run_dir / SUMMARY_FILE))
    return None, {}


def _job_alive(prior: list, alive: dict[str, str] | None,
               sweep_dir: Path) -> tuple[str | None, dict]:
    """Why a point that would run again must not yet: an earlier attempt's Slurm job is still
    queued or running as squeue sees it (``alive``: :func:`vitfsdp.launch.status.alive_in_queue`;
    a rank recorded ``failed`` while the job is still ``RUNNING`` or ``COMPLETING``, a
    ``preempted`` job requeued), or squeue cannot say (``alive`` None): a second run would
    write into the directory the job still writes into; or, for a local point, its torchrun
    and ranks still run on this host (:func:`vitfsdp.launch.local.point_processes`: a sweep
    killed with SIGKILL leaves them). None where no such job; the summary the sweep keeps for
    the point (``submitted``: it waits for the job as for one an earlier sweep left queued;
    ``running`` for a local point: not ended)."""
    for e in prior:
        if not e.job_id and (pids := local.point_processes(e.run_dir)):
            return (f"no result in {e.run_dir.name}, but its torchrun and ranks (pids "
                    f"{' '.join(map(str, pids))}) still run here, left by a sweep that was "
                    f"killed: wait for them to end, or stop them with: "
                    f"{shlex.join(['kill', *map(str, pids)])}; then run this command again",
                    {"status": "running", "run_dir": str(e.run_dir)})  # not ended: exit 3
        if not e.job_id:
            continue
        recorded = f"recorded {e.status}" if e.status else "no result"
        if alive is None:
            return (f"{recorded} in {e.run_dir.name}, and squeue cannot say whether its Slurm "
                    f"job {e.job_id} still runs: not run again; rerun where squeue answers, or "
                    f"check with: {status_command(sweep_dir, watch=False)}",
                    read_json(e.run_dir / SUMMARY_FILE) or {"status": e.status})
        if e.job_id in alive:
            cancel = (f" (scancel {e.job_id} would end the pack's other points too)"
                      if e.packed else
                      f" or cancel it with: {shlex.join(['scancel', e.job_id])}")
            job = "pack job" if e.packed else "Slurm job"
            return (f"{recorded} in {e.run_dir.name}, but its {job} {e.job_id} is still "
                    f"{alive[e.job_id]}: wait for it to end (follow with: "
                    f"{status_command(sweep_dir)}){cancel}; then run this command again",
                    {"status": "submitted", "job_id": e.job_id, "run_dir": str(e.run_dir)})
    return None, {}


#: Overrides left out of a run directory's full name (:func:`_check_own_dir`), as Hydra's
#: ``override_dirname.exclude_keys`` leaves them out (conf/config.yaml), with the user's
#: config folders.
_NOT_IN_NAME = ("data.path", "hydra.sweep.dir", "hydra.searchpath")


def _differ(p: Point, earlier: list[str]) -> list[str]:
    """The overrides ``p`` has and the ``earlier`` run's lack, and for each key the earlier
    run set that ``p`` leaves at its default, ``key=<p's value>`` (``repeat=0`` where the
    earlier run had ``repeat=1``): what tells the two apart."""
    mine = {rundir.override_key(o) for o in p.overrides}
    dropped = [k for k in dict.fromkeys(map(rundir.override_key, earlier)) if k not in mine]
    return ([o for o in p.overrides if o not in earlier]
            + [f"{k}={_value(p.cfg, k)}" for k in dropped])


def _value(cfg, key: str) -> str:
    """``cfg``'s value at the dotted ``key`` as text (``~`` where the config has no such
    key: a ``+key`` the earlier run added)."""
    value = cfg
    for part in key.split("."):
        value = value.get(part, None) if isinstance(value, dict) else getattr(value, part, None)
        if value is None:
            return "~"
    return str(value)


def _check_own_dir(p: Point) -> None:
    """Make ``p.run_dir`` a directory of ``p``'s own. A run directory's name leaves out the
    keys a sweep sets to one value, so a later command that sets them to another (``repeat=2``
    after ``repeat=0``, ``nodes=3`` after ``nodes=4``) names its points as the earlier ones:
    such a point's name also gets the overrides in which it differs from the run there
    (``0_repeat=1,strategy=DDP``; then ``-2``, ``-3``, ... where that is taken too).

    Raises:
        SweepRefused: the directory holds a run of the same overrides but another config
            hash: the code or the defaults changed since, so the two would not be the same
            measurement.
    """
    base, n = p.run_dir, 1
    while (job := read_json(p.run_dir / slurm.JOB_FILE) or {}).get("config_hash") not in (
            None, p.config_hash):
        if sorted(job.get("overrides") or []) == sorted(p.overrides):
            raise SweepRefused(
                f"error: {p.run_dir} holds a run of the same overrides but a different config "
                f"(hash {job['config_hash']}, this point {p.config_hash}): the code or the "
                "defaults changed since; use another hydra.sweep.dir for the new runs")
        n += 1
        if n == 2:
            keys = dict.fromkeys([*p.swept, *_differ(p, job.get("overrides") or [])])
            name = f"{p.num}_{rundir.run_dirname(keys, _NOT_IN_NAME)}"
        p.run_dir = base.parent / (name if n == 2 else f"{name}-{n - 1}")
    if p.run_dir != base:
        log.info("%s holds another point's run: %s runs in %s", base.name, _point_label(p),
                 p.run_dir.name)


def plan_runs(point: Point, run_infeasible: bool) -> bool:
    """Whether :func:`_consult_plan` runs ``point`` (the queue checks count only such
    points): it fits, or may (``tight``, ``squeezed``, no prediction), or
    ``run_infeasible`` (``--run-infeasible``)."""
    if run_infeasible:
        return True
    try:
        pred = planner.predict(point.cfg)
    except (ValueError, NotImplementedError):
        return True
    return _may_fit(pred)


def _may_fit(pred: planner.Prediction) -> bool:
    """The plan's prediction lets a point run: it fits, ``tight``, or ``squeezed`` (its
    allocated peak fits), or the device memory is unknown."""
    return pred.fits is not False or bool(pred.squeezed)


def _consult_plan(points: list[Point], options: LaunchOptions) -> tuple[list[Point], dict]:
    """Split ``points`` into those to run and those the plan predicts not to fit, which are
    recorded as ``skipped_infeasible`` (with the prediction) in their run directories, unless
    ``options.run_infeasible`` (then they run, with a warning). A ``tight`` point (fits with
    less than ``cluster.memory_reserve_frac`` to spare) and a ``squeezed`` one (its
    allocated peak fits, not the allocator's usual cache: ORNL ran two such points on
    Frontier) run, with a warning: a run that does not fit is recorded ``oom``. Warnings of
    one kind for several points of a model come as one line (:func:`_warn_grouped`).

    Returns:
        the points to run, and point number → summary of each skipped point.
    """
    run, skipped, warned = [], {}, []
    for p in points:
        try:
            pred = planner.predict(p.cfg)
        except (ValueError, NotImplementedError) as e:
            warned.append(("no prediction", p, str(e), None))
            run.append(p)
            continue
        margin = getattr(pred, "margin_gib", None)
        if _may_fit(pred):
            if pred.tight or pred.squeezed:  # it may fit; a run that does not is `oom`
                warned.append(("squeezed" if pred.squeezed else "tight", p, pred.reason,
                               margin))
            run.append(p)
        elif options.run_infeasible:
            warned.append(("run anyway", p, pred.reason, margin))
            run.append(p)
        else:
            warned.append(("skip", p, pred.reason, margin))
            skipped[p.num] = _record_infeasible(p, pred)
    _warn_grouped(warned)
    return run, skipped


#: Per kind of :func:`_consult_plan`'s warnings: the line of one point (its label and the
#: reason), what a line of several calls them, and what the sweep does with them.
_WARNINGS = {
    "no prediction": ("%s: no memory prediction (%s); running it",
                      "without a memory prediction", "running them"),
    "tight": ("%s: %s; running it", "tight", "running them"),
    "squeezed": ("%s: %s; running it", "squeezed", "running them"),
    "run anyway": ("%s: %s; running it anyway (--run-infeasible)", "predicted not to fit",
                   "running them anyway (--run-infeasible)"),
    "skip": ("skip %s: %s (skipped_infeasible; --run-infeasible runs it)",
             "predicted not to fit", "skipped (skipped_infeasible; --run-infeasible runs them)"),
}


def _warn_grouped(warned: list[tuple[str, Point, str, float | None]]) -> None:
    """Say :func:`_consult_plan`'s warnings, each ``(kind, point, reason, margin GiB or
    None)``: one line a point where a kind meets one point of a model; else one line for all
    of them (:func:`say_group`), with their count, the points compactly
    (:func:`points_span`), their margins' range and the first one's full reason (``30
    points squeezed (model=vit_5b strategy=FULL_SHARD,HYBRID_8GPU nodes=1,2,4,8,16
    repeat=0,1,2: every combination), margins -10.0 to -0.6 GiB: the first, repeat=0 ...
    nodes=1: predicted reserved peak ...; running them``)."""
    groups: dict[tuple[str, str | None], list] = {}
    for kind, p, reason, margin in warned:
        groups.setdefault((kind, _model(p)), []).append((p, reason, margin, kind))
    for group in groups.values():
        say_group(group, _warning_line, _warning_lines, logging.WARNING)


def _warning_line(item: tuple[Point, str, float | None, str]) -> str:
    """One point's plan warning (:data:`_WARNINGS`)."""
    return _WARNINGS[item[3]][0] % (_point_label(item[0]), item[1])


def _warning_lines(group: list[tuple[Point, str, float | None, str]]) -> str:
    """The line of several points' plan warnings of one kind and model."""
    _, what, then = _WARNINGS[group[0][3]]
    margins = sorted(m for _, _, m, _ in group if m is not None)
    span = f", margins {margins[0]:+.1f} to {margins[-1]:+.1f} GiB" if margins else ""
    first, reason = group[0][:2]
    return (f"{len(group)} points {what} ({points_span([p for p, *_ in group])}){span}: the "
            f"first, {_point_label(first)}: {reason}; {then}")


def _record_infeasible(p: Point, pred) -> dict:
    """Write a skipped point's records: job.json (its identity), run.json and summary.json
    with status ``skipped_infeasible``, the reason and the prediction."""
    p.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(p.run_dir / slurm.JOB_FILE,
                      local.job_record(p) | {"launcher": p.cfg.cluster.launcher})
    prediction = pred.as_dict()
    records = RunRecords(p.run_dir)
    records.run_info = {
        "run_id": p.run_dir.name,
        "config": provenance.config_record(p.cfg),
        "world": {"size": p.cfg.world_size, "nodes": p.cfg.nodes,
                  "ranks_per_node": p.cfg.cluster.gpus_per_node},
        "plan": prediction,
    }
    return records.finish("skipped_infeasible", pred.reason, plan=prediction)


def record_cannot_run(points: list[CannotRun]) -> dict[int, dict]:
    """Say in one line which points of the sweep cannot run (``skipped 1 point that cannot
    run: HYBRID_16GPU at 1 node (shard groups of 16 ranks > 8 ranks at 1 node)``,
    :func:`vitfsdp.plan.impossible.cannot_run_line`) and record each as data: job.json (its
    overrides; no config hash, so that no rerun takes it for a run of its own), run.json
    (the composed config) and summary.json with status ``skipped_infeasible`` and the reason
    ``cannot run: <the refusal's line>``. A run directory that holds another end (an earlier
    point's run) is left as it is.

    Returns:
        point number → summary of each.
    """
    if not points:
        return {}
    common = set.intersection(*(set(p.swept) for p in points)) if len(points) > 1 else set()
    log.info("skipped %s", cannot_run_line(
        [Impossible(p.swept or p.overrides, p.reason, p.short, p.shown) for p in points],
        common, verb="that cannot run"))
    return {p.num: _record_cannot_run(p) for p in points}


def _record_cannot_run(p: CannotRun) -> dict:
    """The records of one point that cannot run (:func:`record_cannot_run`); its summary."""
    reason = CANNOT_RUN + p.reason
    earlier = read_json(p.run_dir / SUMMARY_FILE) or {}
    if earlier.get("status") not in (None, "skipped_infeasible"):
        log.warning("%s: cannot run, and %s holds an earlier %s run: left as it is",
                    _point_label(p), p.run_dir, earlier.get("status"))
        return {"status": "skipped_infeasible", "reason": reason, "run_dir": str(p.run_dir)}
    p.run_dir.mkdir(parents=True, exist_ok=True)
    cluster = p.composed.get("cluster") or {}
    nodes, per_node = p.composed.get("nodes"), cluster.get("gpus_per_node")
    world = nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int) else None
    write_json_atomic(p.run_dir / slurm.JOB_FILE, {
        "launcher": cluster.get("launcher"), "job_id": None, "nodes": nodes,
        "world_size": world, "overrides": provenance.redact_args(list(p.overrides)),
        "config": p.composed})
    plan = {"verdict": "n/a", "fits": None, "cannot_run": p.short}
    records = RunRecords(p.run_dir)
    records.run_info = {"run_id": p.run_dir.name, "config": p.composed,
                        "world": {"size": world, "nodes": nodes, "ranks_per_node": per_node},
                        "plan": plan}
    return records.finish("skipped_infeasible", reason, plan=plan)
