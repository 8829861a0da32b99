"""Expand a sweep's overrides into points and compose and validate every
one of them before anything runs (:func:`validate_sweep`, :func:`plan`): the first step of a
sweep, for the vitfsdp sweeper (:func:`vitfsdp.sweep.sweeper.run_sweeper`) and again for the
launcher (:func:`vitfsdp.sweep.run.launch`), which gets the points validated once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from vitfsdp import plan as planner
from vitfsdp import rundir
from vitfsdp.config import one_line, to_run_config
from vitfsdp.launch import pack, resume, secrets, time_limit_s
from vitfsdp.overrides import expand
from vitfsdp.plan.impossible import shard_group_refusal, short_reason
from vitfsdp.provenance import redact_mapping
from vitfsdp.sweep.check import (
    _check_launchable,
    _check_launchers,
    _options,
    _repeated_points,
    _reresolved_dirs,
    _shared_run_dirs,
    refusal_lines,
)
from vitfsdp.sweep.point import CannotRun, Point, PointCannotRun, SweepRefused, _label, log


def plan(hydra_context, config: DictConfig, job_overrides: Sequence[Sequence[str]],
         initial_job_idx: int) -> list[Point]:
    """Compose and validate every point before anything runs: the points that run
    (:func:`plan_all` without the points that cannot run).

    Raises:
        SweepRefused: see :func:`plan_all`.
    """
    return plan_all(hydra_context, config, job_overrides, initial_job_idx)[0]


def plan_all(hydra_context, config: DictConfig, job_overrides: Sequence[Sequence[str]],
             initial_job_idx: int) -> tuple[list[Point], list[CannotRun]]:
    """Compose and validate every point before anything runs: (the points to run, the
    points that cannot run). A point whose combination the config refuses (a hybrid's shard
    group that does not tile its nodes: :class:`~vitfsdp.sweep.point.CannotRun`, as the
    plan lists it ``n/a``) is kept apart where others can run: the launcher records it
    skipped; where it is the one point, or every point is one, the sweep is refused.

    Raises:
        SweepRefused: one or more points are invalid, or none can run; the message has one
            line per refused point naming the field and the fix (``none of the N points can
            run; point ...: reason``). No point has run and no run directory exists.
    """
    key = (id(config), tuple(map(tuple, job_overrides)), initial_job_idx)
    if _validated.get("key") == key and "points" in _validated:  # by the sweeper just before
        return _validated.pop("points")
    points, refused, cannot = [], {}, []
    constant = rundir.constant_keys(job_overrides)  # not in the points' names
    said: set[str] = set()  # the max_jobs lowerings logged for this sweep
    for i, overrides in enumerate(job_overrides):
        num = initial_job_idx + i
        try:
            points.append(_compose_point(hydra_context, config, list(overrides), num,
                                         constant, said))
        except PointCannotRun as e:
            cannot.append(e.point)
        except (ValueError, ConfigCompositionException, OmegaConfBaseException) as e:
            refused.setdefault(one_line(e, overrides), []).append((num, overrides))
    if cannot and len(cannot) == len(job_overrides):  # no point can run: refused, as before
        first = cannot[0]
        if len(cannot) == 1:
            raise SweepRefused(f"error: {first.refusal}; nothing was launched")
        raise SweepRefused(f"error: none of the {len(cannot)} points can run; point "
                           f"{first.num} ({_label(first.overrides)}): {first.refusal}; "
                           "nothing was launched")
    errors = refusal_lines(refused, len(job_overrides))
    errors += _shared_run_dirs(points) + _repeated_points(points) + _reresolved_dirs(points)
    if not errors:
        errors += _check_launchers(points, _options(config))
    if len(errors) == 1:
        raise SweepRefused(f"error: {errors[0]}; nothing was launched")
    if errors:
        count = (f"{sum(map(len, refused.values()))} of {len(job_overrides)} sweep points"
                 if refused else "the sweep was")
        raise SweepRefused(f"error: {count} refused, nothing was launched:\n"
                           + "\n".join(errors))
    return points, cannot



#: The points :func:`validate_sweep` validated, for the launcher's :func:`plan` of the same
#: sweep (same master config object and overrides): keys ``key`` and ``points``; and
#: ``composed``: (id of the master config, the set of the points' overrides), which Hydra's
#: own check of each batch skips (:func:`_compose_once`).
_validated: dict = {}


def validate_sweep(hydra_context, config: DictConfig, arguments: Sequence[str],
                   params: Sequence[str] = ()) -> list[Point]:
    """Expand a sweep's overrides into points as Hydra's basic sweeper does
    (:func:`vitfsdp.overrides.expand`) and validate them all (:func:`plan`), before the sweep
    directory or its multirun.yaml exist.

    Args:
        arguments: the task overrides (``hydra.overrides.task``).
        params: ``hydra.sweeper.params`` as overrides.

    Raises:
        SweepRefused: an override the basic sweeper cannot expand (``interval(...)``), or
            see :func:`plan`.
    """
    try:
        job_overrides = expand([*params, *arguments], hydra_context.config_loader)
    except ValueError as e:
        raise SweepRefused(f"error: {e}; nothing was launched") from None
    points, cannot = plan_all(hydra_context, config, job_overrides, 0)
    _validated.update(key=(id(config), tuple(map(tuple, job_overrides)), 0),
                      points=(points, cannot),
                      composed=(id(config), {tuple(o) for o in job_overrides}))
    return points


def _compose_once(sweeper) -> None:
    """Make ``sweeper`` (Hydra's basic sweeper) leave out of its check of each batch
    (``validate_batch_is_legal``: compose every point, to fail early) the points
    :func:`validate_sweep` has just composed and validated for the same master config, so
    that a sweep composes each point once (a 100-point ``--scripts-only`` sweep of
    ``cluster=frontier``: 257 ms a point before, 148 ms after, on a 2-core CPU machine).
    Points it has not composed (none in a sweep started by :func:`run_sweeper`) are still
    checked by Hydra. Set on the instance, where :func:`run_sweeper` gets the sweeper, so the
    plugin stays Hydra's class."""
    hydra_check = sweeper.validate_batch_is_legal

    def validate_batch_is_legal(batch: Sequence[Sequence[str]]) -> None:
        config_id, composed = _validated.get("composed", (None, set()))
        if config_id != id(sweeper.config):
            composed = set()
        hydra_check([o for o in batch if tuple(o) not in composed])

    sweeper.validate_batch_is_legal = validate_batch_is_legal


def _compose_point(hydra_context, config: DictConfig, overrides: list[str], num: int,
                   constant_keys: Sequence[str] = (), said: set[str] | None = None) -> Point:
    """Compose and check one point; ``constant_keys`` (the sweep's keys of one value) are
    left out of its run directory's name (:mod:`vitfsdp.rundir`); ``said``: the lines of
    ``cluster.max_jobs`` lowered that the sweep has logged, each logged once (None: log
    none, as the sweep's plan has)."""
    sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
        naming = sweep_config.hydra.job.config.override_dirname
        naming.exclude_keys = [*naming.exclude_keys,
                               *(k for k in constant_keys if k not in naming.exclude_keys)]
    HydraConfig.instance().set_config(sweep_config)
    run_dir = Path(sweep_config.hydra.sweep.dir) / str(sweep_config.hydra.sweep.subdir)
    constant = set(constant_keys)
    try:
        cfg = to_run_config(sweep_config)
    except ValueError as e:
        cannot = _cannot_run(sweep_config, overrides, num, run_dir.resolve(),
                             [o for o in overrides if rundir.override_key(o) not in constant], e)
        if cannot is None:
            raise
        raise PointCannotRun(cannot) from None
    auto_held = False
    if cfg.cluster.time == "auto":  # the plan's time for the point's steps (docs/plan.md)
        cfg.cluster.time, auto_held = resolve_auto_time(cfg)
        overrides = [*(o for o in overrides if not o.startswith("cluster.time=")),
                     f"cluster.time={cfg.cluster.time}"]
    for line in _check_launchable(cfg):  # max_jobs lowered to the queue's
        if said is not None and line not in said:
            said.add(line)
            log.info("%s", line)
    secrets.secret_values(cfg.cluster.secrets, cfg.cluster.secrets_file)  # each one is set
    swept = [o for o in overrides if rundir.override_key(o) not in constant]
    # the user's config folders (hydra.searchpath) go with the point into its command
    searchpath = [o for o in config.hydra.overrides.hydra if o.startswith("hydra.searchpath=")]
    overrides = [*overrides, *(s for s in searchpath if s not in overrides)]
    return Point(num, overrides, cfg, run_dir.resolve(), resume.config_hash(cfg), swept,
                 auto_held)


def resolve_auto_time(cfg) -> tuple[str, bool]:
    """What ``cluster.time=auto`` resolves to for ``cfg``, and whether it was held to the
    queue's limit (then the point's requeues are counted with auto's margin,
    :func:`vitfsdp.sweep.check._jobs_needed`; :attr:`Point.auto_held`): the plan's time
    (:func:`vitfsdp.plan.auto_time_limit`), held to the longest a job of its node count may
    ask under ``cluster.queue_limits`` (Frontier's batch queue: 2 h up to 91 nodes) where
    it is longer; the requeues from the checkpoint run the rest, which
    :func:`vitfsdp.sweep.check._beyond_time_limit` checks (with auto's margin,
    :func:`vitfsdp.sweep.check._jobs_needed`). Not held where a row that applies forbids
    chaining jobs (Frontier's debug QOS, :meth:`~vitfsdp.launch.ClusterConfig.no_chaining`):
    a requeue is a second job there, so a point that needs one is refused as a time typed
    beyond that limit is (:meth:`~vitfsdp.launch.ClusterConfig.check_queue_limits`).

    Raises:
        ValueError: no step time in the plan, or more nodes than the queue's largest bin.
    """
    planned = planner.auto_time_limit(cfg)
    cap_s = cfg.cluster.queue_time_limit_s(cfg.nodes)
    if (cap_s is None or time_limit_s(planned) <= cap_s
            or cfg.cluster.no_chaining(cfg.nodes)):  # no requeues: the limit refuses it
        return planned, False
    return pack.slurm_time(cap_s), True


def _cannot_run(sweep_config: DictConfig, overrides: list[str], num: int, run_dir: Path,
                swept: list[str], error: ValueError) -> CannotRun | None:
    """The :class:`CannotRun` of a point whose validation raised ``error``, where the plan
    would list it ``n/a`` (:func:`vitfsdp.plan.__main__.compose_all`: the config refuses it
    with ``cluster.required`` set aside, as planning needs no account) and the refusal is
    structural: its hybrid shard group does not tile its nodes
    (:func:`vitfsdp.plan.impossible.shard_group_refusal`); None for any other refusal (a
    value out of range, a missing account), which refuses the sweep as before."""
    masked = OmegaConf.masked_copy(sweep_config, [k for k in sweep_config if k != "hydra"])
    try:
        composed = OmegaConf.to_container(masked, resolve=True)
    except OmegaConfBaseException:  # an interpolation only the run resolves: as written
        composed = OmegaConf.to_container(masked, resolve=False)
    if not isinstance(composed, dict) or shard_group_refusal(composed) is None:
        return None
    planned = sweep_config.copy()  # as the plan validates it: no account needed
    with open_dict(planned):
        planned.cluster.required = []
    try:
        to_run_config(planned)
        return None  # refused for a required key the plan sets aside: refused as before
    except ValueError as planned_error:
        reason = (str(planned_error).splitlines() or [type(error).__name__])[0]
    cluster = composed.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("env"), dict):
        cluster["env"] = redact_mapping(cluster["env"])
    shown = {"strategy": (composed.get("strategy") or {}).get("name"),
             "nodes": composed.get("nodes")}
    return CannotRun(num, list(overrides), run_dir, swept, reason, one_line(error, overrides),
                     short_reason(composed, reason), composed, shown)
