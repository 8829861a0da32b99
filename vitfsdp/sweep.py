"""The multirun entry point: expand, validate, launch, watch.

    python -m vitfsdp.sweep -m strategy=FULL_SHARD,HYBRID_2GPU nodes=1,2,4,8

Hydra's sweeper expands the overrides into points; the ``vitfsdp`` launcher
(``hydra_plugins/vitfsdp_launcher``) hands them to :func:`launch`, which composes and
validates every point before the first one starts (for Slurm profiles: node counts against
the partition, and ``sbatch --test-only`` of every job shape), then

- ``cluster=local``: runs them one after another as torchrun processes here, with progress;
- ``cluster=<slurm profile>``: submits one Slurm job per point, sized for it (job arrays for
  points of the same shape), and shows a live table of job states and progress until all are
  done. ``--detach`` returns after submitting; ``--scripts-only`` writes each point's
  ``job.sbatch`` and submits nothing.

Each point writes its records into ``<sweep dir>/<num>_<overrides>/``; a point that dies
without writing its own summary is recorded with the status its end implies (``failed``,
``timeout``, ...) and the tail of its log, so no point is ever lost.

    python -m vitfsdp.sweep --status SWEEP_DIR [--watch]

shows the table later (``--watch``: until every point is done).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import logging
import math
import os
import re
import shlex
import signal
import socket
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException, ConfigCompositionException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from vitfsdp import plan as planner
from vitfsdp import provenance, rundir
from vitfsdp.config import (
    CONF_DIR,
    GROUPS,
    RunConfig,
    cli,
    group_defaults,
    group_options,
    one_line,
    register_configs,
    to_run_config,
)
from vitfsdp.core.layout import LOCK_FILE
from vitfsdp.launch import (
    LaunchOptions,
    flag_help,
    launcher_flags,
    local,
    pack,
    resume,
    secrets,
    setting_help,
    slurm,
    status,
    time_limit_s,
)
from vitfsdp.launch import batch_search as bsearch
from vitfsdp.models import train_flops_per_image
from vitfsdp.overrides import expand
from vitfsdp.progress import SweepProgress
from vitfsdp.records import (
    STATUSES,
    SUMMARY_FILE,
    RunRecords,
    disk_error,
    mark_failed,
    read_json,
    reason_line,
    write_json_atomic,
)

log = logging.getLogger("vitfsdp.sweep")
#: Seconds a Slurm job should have between its start and the stop signal: Slurm may send
#: ``--signal`` up to 60 s early (sbatch(1)), and a rank needs some time to start.
SIGNAL_MARGIN_S = 120
MULTIRUN_FILE = "multirun.yaml"  # the sweep's config and overrides, saved by Hydra's sweeper

register_configs()


class SweepRefused(CompactHydraException, ValueError):
    """Points refused before anything ran; Hydra prints the message alone (no traceback)."""


class SweepDiskError(CompactHydraException, OSError):
    """The sweep could not write its own records (a full, over-quota or read-only file
    system): one line says so and what runs on; the sweep exits :data:`EXIT_NOT_COMPLETED`."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during a sweep: its message says what was recorded, what runs on and
    what to do next (:func:`main_cli` prints it alone and exits :data:`EXIT_INTERRUPTED`)."""


@dataclass
class Point:
    """One sweep point: its overrides, validated config and run directory."""

    num: int  # Hydra job number
    overrides: list[str]  # the point's Hydra overrides, as typed
    cfg: RunConfig
    run_dir: Path
    config_hash: str = ""  # resume.config_hash(cfg): the point's identity across reruns
    #: the overrides that tell it from the sweep's other points (none of a key the sweep
    #: gives one value), as its run directory's name holds them: what messages name it by
    swept: list[str] = field(default_factory=list)


def plan(hydra_context, config: DictConfig, job_overrides: Sequence[Sequence[str]],
         initial_job_idx: int) -> list[Point]:
    """Compose and validate every point before anything runs.

    Raises:
        SweepRefused: one or more points are invalid; the message has one line per refused
            point naming the field and the fix. No point has run and no run directory exists.
    """
    key = (id(config), tuple(map(tuple, job_overrides)), initial_job_idx)
    if _validated.get("key") == key and "points" in _validated:  # by the sweeper just before
        return _validated.pop("points")
    points, errors = [], []
    constant = rundir.constant_keys(job_overrides)  # not in the points' names
    for i, overrides in enumerate(job_overrides):
        num = initial_job_idx + i
        where = f"point {num} ({_label(overrides)}): " if len(job_overrides) > 1 else ""
        try:
            points.append(_compose_point(hydra_context, config, list(overrides), num,
                                         constant))
        except (ValueError, ConfigCompositionException, OmegaConfBaseException) as e:
            errors.append(where + _one_line(hydra_context, e))
    errors += _shared_run_dirs(points) + _repeated_points(points) + _reresolved_dirs(points)
    if not errors:
        errors += _check_launchers(points, _options(config))
    if len(errors) == 1:
        raise SweepRefused(f"error: {errors[0]}; nothing was launched")
    if errors:
        raise SweepRefused(f"error: {len(errors)} of {len(job_overrides)} sweep points "
                           "refused, nothing was launched:\n" + "\n".join(errors))
    return points


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
    points = plan(hydra_context, config, job_overrides, 0)
    _validated.update(key=(id(config), tuple(map(tuple, job_overrides)), 0), points=points,
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


def _label(overrides: Sequence[str]) -> str:
    """A point's overrides for messages, secret values redacted."""
    return " ".join(provenance.redact_args(list(overrides)))


def _point_label(point: Point) -> str:
    """What a message names a point by: its swept overrides (:attr:`Point.swept`), secret
    values redacted; all of them for a sweep of one point; ``(defaults)`` for none."""
    return _label(point.swept or point.overrides) or "(defaults)"


def _shared_run_dirs(points: list[Point]) -> list[str]:
    first: dict[Path, Point] = {}
    errors = []
    for p in points:
        if p.run_dir in first:
            errors.append(f"points {first[p.run_dir].num} and {p.num} would both write into "
                          f"{p.run_dir}; make hydra.sweep.subdir tell them apart")
        first.setdefault(p.run_dir, p)
    return errors


def _reresolved_dirs(points: list[Point]) -> list[str]:
    """One line for the first run directory holding ``${``: Hydra copies the training's
    hydra.run.dir into hydra.runtime.output_dir as a string, which OmegaConf resolves again
    in every rank (``${IFS}``: InterpolationKeyError; ``${oc.env:SLURM_JOB_ID}``: another
    directory)."""
    p = next((p for p in points if "${" in str(p.run_dir)), None)
    if p is None:
        return []
    key, path = (("hydra.sweep.dir", p.run_dir.parent) if "${" in str(p.run_dir.parent)
                 else (f"point {p.num}'s hydra.sweep.subdir", p.run_dir))
    return [f"{key} resolves to {str(path)!r}, which holds '${{': the training would "
            "resolve it a second time (Hydra's hydra.runtime.output_dir); choose a directory "
            "without it"]


def _repeated_points(points: list[Point]) -> list[str]:
    """One line for each point whose config equals an earlier point's (``nodes=1,1``): the
    same run twice (``repeat=0,1`` is the way to measure a point several times)."""
    first: dict[str, Point] = {}
    errors = []
    for p in points:
        if p.config_hash in first:
            errors.append(f"point {p.num} ({_label(p.overrides)}) is point "
                          f"{first[p.config_hash].num} ({_label(first[p.config_hash].overrides)})"
                          " again: drop the repeated value (repeat=0,1 runs a point twice)")
        first.setdefault(p.config_hash, p)
    return errors


def _compose_point(hydra_context, config: DictConfig, overrides: list[str], num: int,
                   constant_keys: Sequence[str] = ()) -> Point:
    """Compose and check one point; ``constant_keys`` (the sweep's keys of one value) are
    left out of its run directory's name (:mod:`vitfsdp.rundir`)."""
    sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
        naming = sweep_config.hydra.job.config.override_dirname
        naming.exclude_keys = [*naming.exclude_keys,
                               *(k for k in constant_keys if k not in naming.exclude_keys)]
    HydraConfig.instance().set_config(sweep_config)
    run_dir = Path(sweep_config.hydra.sweep.dir) / str(sweep_config.hydra.sweep.subdir)
    cfg = to_run_config(sweep_config)
    if cfg.cluster.time == "auto":  # the plan's time for the point's steps (docs/plan.md)
        cfg.cluster.time = planner.auto_time_limit(cfg)
        overrides = [*(o for o in overrides if not o.startswith("cluster.time=")),
                     f"cluster.time={cfg.cluster.time}"]
    _check_launchable(cfg)
    secrets.secret_values(cfg.cluster.secrets, cfg.cluster.secrets_file)  # each one is set
    constant = set(constant_keys)
    swept = [o for o in overrides if rundir.override_key(o) not in constant]
    # the user's config folders (hydra.searchpath) go with the point into its command
    searchpath = [o for o in config.hydra.overrides.hydra if o.startswith("hydra.searchpath=")]
    overrides = [*overrides, *(s for s in searchpath if s not in overrides)]
    return Point(num, overrides, cfg, run_dir.resolve(), resume.config_hash(cfg), swept)


def _options(config: DictConfig) -> LaunchOptions:
    """The launcher's options.

    Raises:
        SweepRefused: an unknown ``hydra.launcher.pack``, --detach with --scripts-only,
            packing with --scripts-only, or
            --batch-search with --detach or --scripts-only or a ``batch_search_max`` below 1.
    """
    options = LaunchOptions.from_values(config.hydra.launcher)
    if options.pack is not None and options.pack not in pack.PACK_MODES:
        raise SweepRefused(f"error: hydra.launcher.pack={options.pack!r} is unknown; valid: "
                           f"{', '.join(pack.PACK_MODES)} (or null: a job per point)")
    if options.detach and options.scripts_only:
        raise SweepRefused("error: --scripts-only submits nothing, so there is nothing for "
                           "--detach to leave running; drop one of them")
    if options.pack and options.scripts_only:
        raise SweepRefused("error: --scripts-only writes a script per point; drop "
                           "hydra.launcher.pack to write them, or drop --scripts-only to pack")
    if options.batch_search and (options.detach or options.scripts_only):
        raise SweepRefused("error: --batch-search waits for each round's results before the "
                           "next; drop --detach / --scripts-only")
    if options.batch_search and options.batch_search_max < 1:
        raise SweepRefused(f"error: hydra.launcher.batch_search_max="
                           f"{options.batch_search_max} must be >= 1")
    return options


def _check_launchers(points: list[Point], options: LaunchOptions) -> list[str]:
    """Sweep-level checks: one launcher per sweep; run directories the compute nodes can
    write (``cluster.read_only_paths``, one line for the sweep); Slurm points fit the
    partition and pass ``sbatch --test-only`` (one query per job shape)."""
    launchers = {p.cfg.cluster.launcher for p in points}
    if len(launchers) > 1:
        return [f"points mix launchers ({', '.join(sorted(launchers))}); sweep one cluster "
                "kind at a time"]
    if launchers != {"slurm"}:
        return _slurm_only(points, options)
    read_only = dict.fromkeys(filter(None, map(_read_only, points)))  # once, not per point
    if read_only:
        return list(read_only)
    if options.pack is None and any(p.cfg.cluster.probe == pack.PROBE_IN_ALLOCATION
                                    for p in points):
        return ["cluster.probe=allocation is measured by each pack's first step; add "
                "hydra.launcher.pack=by_nodes, or run python -m vitfsdp.probe --out "
                "<hydra.sweep.dir> before the sweep and leave cluster.probe unset"]
    errors = []
    checked: dict[tuple, object] = {}  # Slurm answers shared by the sweep's points
    for p in points:
        try:
            slurm.check_values(p.overrides, p.run_dir, options.job_name)
            problem = _check_slurm_point(p, options, checked)
        except slurm.SlurmUnreachable as e:  # the same for every point: said once
            return [str(e)]
        except ValueError as e:
            problem = str(e)
        if problem:
            errors.append(f"point {p.num} ({_label(p.overrides)}): {problem}")
    return errors


def _read_only(p: Point) -> str | None:
    """Why the compute nodes of ``p``'s profile could not write its run directory
    (:func:`vitfsdp.launch.slurm.read_only_refusal` of ``cluster.read_only_paths``)."""
    return slurm.read_only_refusal(p.cfg.cluster.read_only_paths, p.run_dir,
                                   p.cfg.cluster.name)


def _slurm_only(points: list[Point], options: LaunchOptions) -> list[str]:
    """The Slurm-only options given to a sweep that runs its points in this process
    (``cluster.launcher=local``), which would otherwise be ignored: one line naming them."""
    given = [name for name, on in (("--detach", options.detach),
                                   ("--scripts-only", options.scripts_only),
                                   (f"hydra.launcher.pack={options.pack}", options.pack)) if on]
    if not given:
        return []
    cluster = points[0].cfg.cluster.name if points else "local"
    return [f"{', '.join(given)} applies to Slurm profiles only, and cluster={cluster} runs the "
            f"points one after another here; drop {'them' if len(given) > 1 else 'it'}, or "
            "choose a Slurm profile (cluster=frontier, say)"]


def _check_slurm_point(p: Point, options: LaunchOptions, checked: dict) -> str | None:
    """Why Slurm cannot run ``p`` (None: it can); ``checked`` caches sinfo and
    ``sbatch --test-only`` answers across the sweep's points."""
    cluster = p.cfg.cluster
    if cluster.signal_delay_s >= cluster.time_limit_s:
        return (f"cluster.signal_delay_s={cluster.signal_delay_s} is not below cluster.time="
                f"{cluster.time} ({cluster.time_limit_s} s): Slurm would signal the job as it "
                "starts; use a longer cluster.time or a smaller cluster.signal_delay_s")
    if (cluster.time_limit_s - cluster.signal_delay_s < SIGNAL_MARGIN_S
            and ("margin", cluster.time) not in checked):
        checked["margin", cluster.time] = True
        log.warning("cluster.time=%s leaves %d s before the SIGUSR2 of cluster.signal_delay_s="
                    "%d, and Slurm may send it up to 60 s early: runs may stop (preempted) "
                    "during start-up", cluster.time,
                    cluster.time_limit_s - cluster.signal_delay_s, cluster.signal_delay_s)
    if problem := _beyond_time_limit(p, checked):
        return problem
    if problem := slurm.missing_path(cluster):  # --scripts-only too (cluster.check_paths)
        return problem
    if cluster.check_paths and ("modules", tuple(cluster.modules)) not in checked:
        checked["modules", tuple(cluster.modules)] = slurm.unavailable_module(cluster.modules)
    if problem := checked.get(("modules", tuple(cluster.modules))):
        return problem
    if options.scripts_only:  # the scripts may be for another cluster: no Slurm query
        limit, partition = cluster.max_nodes, cluster.partition
        _note_login_interpreter(cluster, checked)
    else:  # one sinfo per partition for the whole sweep
        if ("sinfo", cluster.partition) not in checked:
            checked["sinfo", cluster.partition] = slurm.partition_nodes(cluster.partition)
        partition, limit = checked["sinfo", cluster.partition]
        limit = min(limit, cluster.max_nodes or limit)
    if limit is not None and p.cfg.nodes > limit:
        return (f"nodes={p.cfg.nodes} but partition {partition or '(default)'} of "
                f"cluster={cluster.name} has {limit} nodes; use nodes<={limit} or another "
                "cluster.partition")
    if options.scripts_only:
        return None
    key = (repr(cluster), p.cfg.nodes)
    if key not in checked:
        checked[key] = slurm.sbatch_test_only(cluster, p.cfg.nodes, options.job_name)
    return _slurm_refusal(cluster, checked[key]) if checked[key] else None


def _note_login_interpreter(cluster, noted: dict) -> None:
    """Say once that --scripts-only's scripts run this interpreter (no ``cluster.python`` and
    no environment to activate): the compute nodes must have it under the same path."""
    python = slurm.node_python(cluster)
    if python == sys.executable and ("interpreter", python) not in noted:
        noted["interpreter", python] = True
        log.warning("the scripts run %s, the interpreter sweeping here (no cluster.python, "
                    "conda_env, venv or sbcast_env): the compute nodes need it under this "
                    "path (each job stops with one line where it is missing)", python)


def _beyond_time_limit(p: Point, warned: dict) -> str | None:
    """Why the plan's predicted run time (:func:`vitfsdp.plan.predict`: ``train.steps`` ×
    step time + :data:`vitfsdp.plan.STARTUP_S`) cannot fit ``cluster.time`` even with its
    ``cluster.max_requeues`` requeues (each resumes from the checkpoint); None when it fits or
    the plan has no step time. A run that needs requeues is only warned of (once per time)."""
    step_s = _predicted_step_s(p)
    if not step_s:
        return None
    cluster = p.cfg.cluster
    run_s = p.cfg.train.steps * step_s + planner.STARTUP_S
    jobs = math.ceil(run_s / cluster.time_limit_s)
    if jobs > cluster.max_requeues + 1:
        return (f"train.steps={p.cfg.train.steps}: the plan predicts {_duration(run_s)} "
                f"({step_s:.3g} s/step), more than cluster.time={cluster.time} allows with "
                f"cluster.max_requeues={cluster.max_requeues}; use fewer train.steps, a longer "
                "cluster.time, or cluster.time=auto")
    if jobs > 1 and ("requeues", cluster.time) not in warned:
        warned["requeues", cluster.time] = True
        log.warning("train.steps=%d: the plan predicts %s, beyond cluster.time=%s: the point "
                    "will be requeued %d times (from its checkpoint)", p.cfg.train.steps,
                    _duration(run_s), cluster.time, jobs - 1)
    return None


def _duration(seconds: float) -> str:
    """``seconds`` for a message: ``3.2 h``, ``41 days``, ``5 min``."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.0f} s"


def _slurm_refusal(cluster, message: str) -> str:
    """``sbatch --test-only``'s refusal, quoted, after the ``cluster.sbatch_args`` entry it
    names (where it names one)."""
    for i, arg in enumerate(cluster.sbatch_args):
        if arg.split("=")[0] in message:
            return f"cluster.sbatch_args[{i}]={arg!r}: Slurm would not run it: {message}"
    return f"Slurm would not run it: {message}"


def _check_launchable(cfg: RunConfig) -> None:
    if cfg.cluster.launcher == "local" and cfg.world_size > cfg.cluster.max_local_procs:
        raise ValueError(
            f"nodes={cfg.nodes} × cluster.gpus_per_node={cfg.cluster.gpus_per_node} = "
            f"{cfg.world_size} local processes exceeds cluster.max_local_procs="
            f"{cfg.cluster.max_local_procs}; use fewer nodes or raise the limit"
        )
    if cfg.cluster.launcher == "local":
        cfg.cluster.network.check_nodes(cfg.nodes)
    cfg.cluster.check_queue_limits(cfg.nodes)
    _check_jax_importable(cfg)


def _jax_installed() -> bool:
    """Whether this interpreter has JAX (found, not imported: an import takes seconds)."""
    return importlib.util.find_spec("jax") is not None


def _check_jax_importable(cfg: RunConfig) -> None:
    """Refuse a ``framework=jax`` point whose ranks run this interpreter (a local sweep, or a
    Slurm job that runs ``sys.executable``) where JAX is not installed: each would fail after
    its start-up with ``No module named 'jax'``. Slurm jobs that activate an environment of
    their own are not checked (JAX may be there only)."""
    if cfg.framework != "jax" or _jax_installed():
        return
    if cfg.cluster.launcher == "local" or slurm.node_python(cfg.cluster) == sys.executable:
        raise ValueError("framework=jax needs JAX, which is not installed for "
                         f"{sys.executable}: pip install 'vitfsdp[jax]' (README, Set-up), or "
                         "leave the jax points out (framework=torch)")


def _one_line(hydra_context, e: Exception) -> str:
    """A composition error in one line (:func:`vitfsdp.config.one_line`); Hydra's
    'Could not find' becomes 'strategy=X is unknown; valid: ...' with the options of every
    config folder Hydra searches."""
    m = re.search(r"Could not find '([\w/]+)/([^']+)'", str(e))
    if m:
        group, name = m.groups()
        options = hydra_context.config_loader.get_group_options(group)
        return f"{group}={name} is unknown; valid: {', '.join(options)}"
    return one_line(e)


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
    points = plan(hydra_context, config, job_overrides, initial_job_idx)
    sweep_dir = Path(config.hydra.sweep.dir).resolve()
    options = _options(config)
    log.info("%s", where_line(points))
    lock = _held_locks.get(sweep_dir) or take_lock(sweep_dir)  # held: run_sweeper took it
    provenance.redact_yaml_file(sweep_dir / MULTIRUN_FILE)  # Hydra saved the overrides raw
    try:
        if options.batch_search:
            summaries = _batch_search(hydra_context, config, points, sweep_dir, options)
        else:
            todo, summaries = select(points, sweep_dir, options.rerun_failed)
            log.info("sweep of %d points into %s: %d to run, %d already done", len(points),
                     sweep_dir, len(todo), len(points) - len(todo))
            todo, infeasible = _consult_plan(todo, options)
            summaries.update(infeasible)
            alive = _still_queued(points, summaries, options)
            summaries.update({p.num: s for p, s in zip(todo, _run(todo, sweep_dir, options,
                                                                   alive), strict=True)})
            summaries.update({p.num: read_json(p.run_dir / SUMMARY_FILE) or summaries[p.num]
                              for p in alive})
    except KeyboardInterrupt:
        raise SweepInterrupted(_interrupted_line(points, sweep_dir)) from None
    except OSError as e:
        if not disk_error(e):
            raise
        raise SweepDiskError(_disk_line(e, points, sweep_dir)) from None
    finally:
        lock.release()
    ordered = [summaries[p.num] for p in points]
    if all(s.get("status") in STATUSES for s in ordered):
        _remove_secrets(sweep_dir)
        _report(points, ordered, sweep_dir)
    else:
        _report_not_ended(points, ordered, sweep_dir)
    return [JobReturn(overrides=p.overrides, cfg=OmegaConf.create({}), hydra_cfg=config,
                      working_dir=str(p.run_dir), _return_value=s, status=JobStatus.COMPLETED)
            for p, s in zip(points, ordered, strict=True)]


def where_line(points: Sequence[Point]) -> str:
    """One line saying what the sweep runs and where: the model(s), data, cluster profile
    and how many ranks run on this host (``cluster=local``: all of them, as processes), so a
    sweep of the defaults says it is vit_tiny on synthetic data here."""
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
    return f"{what}: Slurm jobs of {ranks} ranks a point, none on this host"


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


def _running_jobs(points: list[Point]) -> list[str]:
    """The Slurm job ids of the points that have not ended (one per pack or array task)."""
    ids = []
    for p in points:
        try:
            job = read_json(p.run_dir / slurm.JOB_FILE) or {}
            ended = (read_json(p.run_dir / SUMMARY_FILE) or {}).get("status") in STATUSES
        except (OSError, ValueError):  # unreadable: say nothing of it
            continue
        if job.get("job_id") and not ended:
            ids.append(str(job["job_id"]))
    return list(dict.fromkeys(ids))


def _disk_line(e: OSError, points: list[Point], sweep_dir: Path) -> str:
    """The one line of a sweep that could not write its records: the file system's error,
    the jobs that run on (with --status and scancel), and the fix."""
    ids = _running_jobs(points)
    jobs = (f"; {len(ids)} Slurm job(s) run on: follow with {status_command(sweep_dir)} once "
            f"there is space, or cancel them with {shlex.join(['scancel', *ids])}"
            if ids else "")
    return (f"error: the sweep could not write its records ({disk_error(e)}){jobs}; free "
            "space (or choose a writable hydra.sweep.dir) and run the same command again: "
            "completed points are kept")


def _interrupted_line(points: list[Point], sweep_dir: Path) -> str:
    """What a Ctrl-C leaves: the Slurm jobs that keep running (follow them, cancel them),
    or the local point stopped and recorded ``cancelled``; the same command goes on."""
    ids = _running_jobs(points)
    if ids:
        kept = ("; the sweep's secrets file stays for them (--status removes it once every "
                "point has ended)" if secrets.secrets_path(sweep_dir).exists() else "")
        return (f"interrupted: {len(ids)} Slurm job(s) keep running; follow with: "
                f"{status_command(sweep_dir)}; cancel them with: "
                f"{shlex.join(['scancel', *ids])}; the same sweep command waits for them and "
                f"submits the points not submitted yet{kept}")
    _remove_secrets(sweep_dir)
    return ("interrupted: the point running here was stopped and recorded cancelled "
            "(interrupted); the same sweep command runs it again, and the points not run yet")


def _run(todo: list[Point], sweep_dir: Path, options: LaunchOptions,
         alive: Sequence[Point] = ()) -> list[dict]:
    """Run ``todo`` with its cluster's launcher; their summaries in the same order. A Slurm
    sweep also waits for ``alive`` (:func:`_still_queued`)."""
    if alive or (todo and todo[0].cfg.cluster.launcher == "slurm"):
        return launch_slurm(todo, sweep_dir, options, alive)
    with SweepProgress([p.cfg.train.steps for p in todo], [_predicted_step_s(p) for p in todo],
                       logger=log, work=[_host_work(p) for p in todo]) as bars:
        return [run_one(p, f"[{i}/{len(todo)}]", bars, i - 1)
                for i, p in enumerate(todo, start=1)]


def _host_work(point: Point) -> tuple[int, float]:
    """(ranks, FLOPs of one step of all ranks): what a point asks of this host, whose cores
    all its ranks share (the ETA of a local sweep, :class:`vitfsdp.progress.SweepProgress`);
    activation checkpointing adds a forward (4/3 of the training FLOPs)."""
    cfg = point.cfg
    flops = train_flops_per_image(cfg.model, cfg.num_classes) * (
        4 / 3 if cfg.train.activation_checkpointing else 1.0)
    return cfg.world_size, cfg.world_size * cfg.train.local_batch_size * flops


def _predicted_step_s(point: Point) -> float | None:
    """The plan's predicted seconds per step of ``point``; ``None`` where it has none."""
    try:
        return planner.predict(point.cfg).step_time_s
    except (ValueError, NotImplementedError):
        return None


def _consult_plan(points: list[Point], options: LaunchOptions) -> tuple[list[Point], dict]:
    """Split ``points`` into those to run and those the plan predicts not to fit, which are
    recorded as ``skipped_infeasible`` (with the prediction) in their run directories, unless
    ``options.run_infeasible`` (then they run, with a warning). A ``tight`` point (fits with
    less than ``cluster.memory_reserve_frac`` to spare) runs, with a warning.

    Returns:
        the points to run, and point number → summary of each skipped point.
    """
    run, skipped = [], {}
    for p in points:
        label = _point_label(p)
        try:
            pred = planner.predict(p.cfg)
        except (ValueError, NotImplementedError) as e:
            log.warning("%s: no memory prediction (%s); running it", label, e)
            run.append(p)
            continue
        if pred.fits is not False:
            if pred.tight:  # runs: it may fit; a run that does not is recorded `oom`
                log.warning("%s: %s; running it", label, pred.reason)
            run.append(p)
        elif options.run_infeasible:
            log.warning("%s: %s; running it anyway (--run-infeasible)", label, pred.reason)
            run.append(p)
        else:
            log.warning("skip %s: %s (skipped_infeasible; --run-infeasible runs it)", label,
                        pred.reason)
            skipped[p.num] = _record_infeasible(p, pred)
    return run, skipped


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
    todo, skipped = [], {}
    for p in points:
        prior = existing.get(p.config_hash, [])
        why, summary = _settled(prior, queue, rerun_failed)
        if why:
            log.info("skip %s: %s", _point_label(p), why)
            skipped[p.num] = summary
            continue
        if prior:
            p.run_dir = prior[0].run_dir
        _check_own_dir(p)
        moved = resume.archive_attempt(p.run_dir)
        if moved:
            log.info("%s: earlier attempt kept in %s", p.run_dir.name, moved)
        todo.append(p)
    return todo, skipped


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


def _check_own_dir(p: Point) -> None:
    job = read_json(p.run_dir / slurm.JOB_FILE) or {}
    if job.get("config_hash") not in (None, p.config_hash):
        raise SweepRefused(
            f"error: {p.run_dir} holds a run of a different config (hash "
            f"{job['config_hash']}, this point {p.config_hash}: code or defaults changed?); "
            "use another hydra.sweep.dir")


def launch_slurm(points: list[Point], sweep_dir: Path, options: LaunchOptions,
                 alive: Sequence[Point] = ()) -> list[dict]:
    """Submit (or only write) the sweep's Slurm jobs: one per point (job arrays for equal
    shapes), or one per node count with ``hydra.launcher.pack=by_nodes``
    (:mod:`vitfsdp.launch.pack`); at most ``cluster.max_jobs`` queued at once, more submitted
    as earlier ones end. Unless detached, show the live status table until every point is
    done and return the summaries (``{"status": "submitted"}``, ``{"status": "waiting"}``
    (not submitted: max_jobs) or ``{"status": "script"}`` for points not waited on).
    """
    if options.scripts_only:
        paths = slurm.write_scripts(points, options.job_name, sweep_dir)
        for path in paths:
            log.info("wrote %s", path)
        for path in paths:
            log.info("submit with: %s", shlex.join(["sbatch", str(path)]))
        log.info("then follow with: %s", status_command(sweep_dir))
        return [{"status": "script", "script": str(p)} for p in paths]
    max_jobs = _max_jobs(points)
    units = _submission_units(points, sweep_dir, options, max_jobs)
    pack.submit_free(units, max_jobs, 0)
    if options.detach:
        _log_detached(units, sweep_dir, max_jobs)
        return [_detached_summary(p) for p in points]
    poll_s = min(p.cfg.cluster.poll_s for p in [*points, *alive])
    if alive:
        log.info("waiting also for %d point(s) an earlier sweep left in Slurm's queue",
                 len(alive))
    status.watch(sweep_dir, [p.run_dir for p in [*points, *alive]], poll_s,
                 show=_show_table,
                 on_poll=lambda rows: pack.submit_free(units, max_jobs, status.num_alive(rows)))
    return [read_json(p.run_dir / SUMMARY_FILE) for p in points]


def _max_jobs(points: list[Point]) -> int | None:
    """The sweep's ``cluster.max_jobs`` (the smallest set; None: no limit)."""
    limits = [p.cfg.cluster.max_jobs for p in points if p.cfg.cluster.max_jobs is not None]
    return min(limits) if limits else None


def _submission_units(points: list[Point], sweep_dir: Path, options: LaunchOptions,
                      max_jobs: int | None) -> list[pack.Unit]:
    """What is submitted at once: a pack (one job), or up to ``max_jobs`` points of one shape
    (a job or array task each)."""
    if options.pack == "by_nodes":
        predicted = {p.num: s for p in points if (s := _predicted_time_s(p)) is not None}
        packs = pack.make_packs(points, predicted)
        return [pack.Unit(1, lambda pk=pk: [pack.submit(pk, sweep_dir, options.job_name)])
                for pk in packs]
    return [pack.Unit(len(chunk), lambda c=chunk: slurm.submit(c, sweep_dir, options.job_name))
            for group in pack.shape_groups(points) for chunk in pack.chunks(group, max_jobs)]


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
    waiting = sum(u.num_jobs for u in units if u.job_ids is None)
    if waiting:
        log.info("%d jobs wait for cluster.max_jobs=%s: run the same command again once jobs "
                 "have ended to submit them", waiting, max_jobs)
    log.info("detached; follow with: %s", status_command(sweep_dir))


def _detached_summary(p: Point) -> dict:
    job_id = (read_json(p.run_dir / slurm.JOB_FILE) or {}).get("job_id")
    return {"status": "submitted", "job_id": job_id} if job_id else {"status": "waiting"}


def _show_table(table: str) -> None:
    log.info("jobs:\n%s", table)


def run_one(point: Point, tag: str, bars: SweepProgress | None = None, index: int = 0) -> dict:
    """Run one point with progress lines (or bars, :mod:`vitfsdp.progress`); return its
    summary (a failure recorded as data). ``index``: the point's place in ``bars``."""
    bars = bars or SweepProgress([point.cfg.train.steps], console=_PLAIN, logger=log)
    bars.start_point(index, tag, f"{tag} {_point_label(point)}  "
                     f"({point.cfg.world_size} ranks) -> {point.run_dir}")
    t0 = time.time()
    point.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(point.run_dir / slurm.JOB_FILE, local.job_record(point))
    try:
        rc = local.run_point(
            point.overrides, point.run_dir, point.cfg.world_size,
            log_path=point.run_dir / local.LOG_FILE,
            on_window=lambda w: bars.window(tag, w),
            env={**point.cfg.cluster.env, **secrets.point_secrets([point])},
            nodes=point.cfg.nodes, network=point.cfg.cluster.network,
        )
    except KeyboardInterrupt:  # its processes are stopped (run_until_done)
        _record_interrupted(point.run_dir)
        raise
    summary = read_json(point.run_dir / SUMMARY_FILE)
    if summary is None:
        tail = local.tail(point.run_dir / local.LOG_FILE)
        disk = disk_error(tail)  # the cause, first: the ranks' own words come later
        reason = (f"{disk}; " if disk else "") + (f"exit code {rc} without a summary; log "
                                                  f"tail:\n{tail}")
        mark_failed(point.run_dir, "failed", reason)
        summary = read_json(point.run_dir / SUMMARY_FILE)
    bars.end_point(f"{tag} {summary['status']} in {time.time() - t0:.0f} s{_figures(summary)}")
    return summary


def _record_interrupted(run_dir: Path) -> None:
    """Record a point stopped by Ctrl-C ``cancelled`` and ``interrupted`` (a rerun runs it
    again), over what its ranks wrote as they were stopped; a completed run stays."""
    if (read_json(run_dir / SUMMARY_FILE) or {}).get("status") == "completed":
        return
    mark_failed(run_dir, "cancelled", "interrupted (Ctrl-C) in the sweep; a rerun of the "
                "sweep runs it again", interrupted=True)


#: a console that is never a terminal: run_one called alone logs plain lines
_PLAIN = Console(file=io.StringIO(), force_terminal=False)


def _figures(summary: dict) -> str:
    if summary["status"] != "completed":
        reason = reason_line(summary.get("reason"))
        return f": {reason}" if reason else ""
    mem = summary.get("peak_mem_allocated_gib") or summary.get("peak_rss_gib")
    return (f": {summary['ips']:.1f} images/s, {summary['step_time_s']:.3f} s/step, "
            f"peak memory {mem:.2f} GiB")


def _report_not_ended(points: list[Point], summaries: list[dict], sweep_dir: Path) -> None:
    """Name the points that have not ended (queued or running, perhaps by an earlier sweep;
    waiting for ``cluster.max_jobs``; only written): the sweep then exits
    :data:`EXIT_NOT_ENDED`."""
    for p, s in zip(points, summaries, strict=True):
        if s.get("status") not in STATUSES:
            job = f" (Slurm job {s['job_id']})" if s.get("job_id") else ""
            log.info("not ended: %s: %s%s", _point_label(p),
                     s.get("status") or "no summary", job)
    if secrets.secrets_path(sweep_dir).exists():
        log.info("%s stays for the jobs that have not ended; --status removes it once every "
                 "point has ended", secrets.secrets_path(sweep_dir))
    log.info("follow with: %s", status_command(sweep_dir))


def _remove_secrets(sweep_dir: Path) -> None:
    """Every point ended: no job reads the sweep's secrets file again; delete it."""
    removed = secrets.remove_secrets(sweep_dir)
    if removed:
        log.info("removed %s: every point has ended", removed)


def _report(points: list[Point], summaries: list[dict], sweep_dir: Path) -> None:
    counts: dict[str, int] = {}
    for s in summaries:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    log.info("sweep done: %s", ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    log.info("figures and tables: %s", analysis_command(sweep_dir))


def status_command(sweep_dir: str | os.PathLike, watch: bool = True) -> str:
    """The command that shows (``watch``: follows) a sweep's jobs, to paste into a shell: the
    path is quoted (``shlex.join``), so that spaces, quotes or ``$(...)`` in it stay text."""
    return shlex.join(["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir),
                       *(["--watch"] if watch else [])])


def analysis_command(sweep_dir: str | os.PathLike) -> str:
    """The command that draws a sweep's figures and tables, quoted as :func:`status_command`."""
    return shlex.join(["python", "-m", "vitfsdp.analysis", str(sweep_dir)])


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="sweep")
def main(dcfg: DictConfig) -> None:
    """Reached only if Hydra runs the task in-process, which the vitfsdp launcher never does."""
    raise RuntimeError("vitfsdp.sweep runs points through the vitfsdp launcher only")


def status_main(argv: Sequence[str]) -> int:
    """``--status SWEEP_DIR [--watch]``: print the sweep's status table (records and Slurm's
    queue), recording jobs that ended without a summary; ``--watch`` until all are done.
    Returns :func:`exit_status` of the points."""
    parser = argparse.ArgumentParser(prog="python -m vitfsdp.sweep --status")
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--watch", action="store_true", help="refresh until every point is done")
    parser.add_argument("--poll-s", type=float, default=5.0, help="seconds between refreshes")
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        parser.error(f"{args.sweep_dir} is not a directory")
    dirs = status.point_dirs(args.sweep_dir)
    if not dirs:
        parser.error(f"{args.sweep_dir} holds no sweep points (no */job.json or */run.json)")
    if args.watch:
        rows = status.watch(args.sweep_dir, dirs, args.poll_s, show=print)
    else:
        rows = status.collect(args.sweep_dir, dirs)
        for row in rows:
            status.reconcile(row)
        print(status.format_table(rows))
    if all(r.status in STATUSES for r in rows):
        _remove_secrets_unless_swept(args.sweep_dir)
    return exit_status([{"status": r.status} for r in rows])


def _remove_secrets_unless_swept(sweep_dir: Path) -> None:
    """Every point of ``sweep_dir`` has ended: delete its secrets file, unless a sweep is
    working there now (it holds the lock and may submit more jobs that read it)."""
    if not secrets.secrets_path(sweep_dir).exists():
        return
    try:
        lock = resume.SweepLock(sweep_dir).acquire()
    except RuntimeError:
        return
    try:
        _remove_secrets(sweep_dir)
    finally:
        lock.release()


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


def run_sweeper(sweeper, arguments: Sequence[str], basic_sweep) -> list:
    """The vitfsdp sweeper (``hydra_plugins/vitfsdp_launcher``): validate every point
    (:func:`validate_sweep`), take the sweep directory's lock (:func:`take_lock`), then
    ``basic_sweep(arguments)`` (Hydra's basic sweeper: multirun.yaml, the launcher), which
    composes no point a second time (:func:`_compose_once`).

    Exits the process (``SystemExit``) with :data:`EXIT_REFUSED` after printing a
    :class:`SweepRefused` (a refusal by the launcher too, whose own writes are then taken
    back; a sweep refused for the lock has written nothing), or with :func:`exit_status`'s
    code when a point did not complete; returns Hydra's job returns when all completed.
    """
    sweep_dir = Path(sweeper.config.hydra.sweep.dir).resolve()
    yaml = sweep_dir / MULTIRUN_FILE
    try:
        validate_sweep(sweeper.hydra_context, sweeper.config, arguments,
                       sweeper._parse_config())
        made = [d for d in (sweep_dir, *sweep_dir.parents) if not d.exists()]
        before = {path: path.read_bytes() if path.is_file() else None
                  for path in (yaml, sweep_dir / LOCK_FILE)}
        lock = take_lock(sweep_dir)
    except SweepRefused as e:
        print(str(e), file=sys.stderr)
        raise SystemExit(EXIT_REFUSED) from None
    _held_locks[sweep_dir] = lock
    _compose_once(sweeper)
    try:
        returns = basic_sweep(arguments)
    except SweepRefused as e:
        _take_back(before, made)
        print(str(e), file=sys.stderr)
        raise SystemExit(EXIT_REFUSED) from None
    except SweepDiskError as e:
        print(str(e), file=sys.stderr)
        raise SystemExit(EXIT_NOT_COMPLETED) from None
    finally:
        _held_locks.pop(sweep_dir, None)
        lock.release()
    code = exit_status([r.return_value for batch in returns for r in batch])
    if code:
        raise SystemExit(code)
    return returns


def _take_back(before: dict[Path, bytes | None], made: list[Path]) -> None:
    """Undo what this sweep wrote before its launcher refused it (it holds the lock: nothing
    here is another sweep's): each file of ``before`` back as it was (or gone), and the
    directories it ``made``, once empty."""
    for path, content in before.items():
        if content is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(content)
    for d in made:  # deepest first
        try:
            d.rmdir()
        except OSError:
            break


#: Short flags translated to the launcher's Hydra keys (declared by LaunchOptions' fields).
FLAGS = launcher_flags()
#: What each of :data:`FLAGS` does, for ``--help``.
FLAG_HELP = flag_help()
USAGE = """\
usage: python -m vitfsdp.sweep -m [FLAGS] key=a,b ... [hydra.sweep.dir=DIR]
       python -m vitfsdp.sweep --status SWEEP_DIR [--watch] [--poll-s S]

Every point of the sweep is validated before anything starts, then run one after another
(cluster=local) or as Slurm jobs (Slurm profiles).

The launcher's flags:
{flags}
  --status SWEEP_DIR    the sweep's status table (records and Slurm's queue), then exit
  --watch               with --status: refresh until every point is done

The launcher's settings (the default shown; change the value after =):
{settings}

Config groups (group=option); a group not named takes its default, so a sweep that names
none runs {defaults}:
{groups}

Exit status (--status too): 0 every point completed, 1 some point ended without completing
(its summary.json says why), 2 refused before launch (nothing run or queued), 3 no point
failed but some have not ended (queued, running, --detach, --scripts-only, cluster.max_jobs),
130 interrupted (Ctrl-C; one line says what was recorded and what runs on).
`--cfg job` prints the composed config, every key and its value; `--hydra-help` lists
Hydra's own options.

Hydra's flags:
{hydra_flags}"""


def usage() -> str:
    """``--help``: the launcher's flags, the config groups and Hydra's flags (Hydra's own
    help lists every config group of its search path and takes seconds)."""
    flags = "\n".join(f"  {flag:<20}  {FLAG_HELP.get(flag, override)}"
                      for flag, override in FLAGS.items())
    settings = "\n".join(f"  {setting}\n" + textwrap.fill(text, 92, initial_indent=" " * 6,
                                                          subsequent_indent=" " * 6)
                         for setting, text in setting_help().items())  # fmt: skip
    defaults = group_defaults()
    groups = "\n".join(
        textwrap.fill(f"{g}{f' (default {defaults[g]})' if g in defaults else ''}: "
                      + ", ".join(group_options(g)), 92, initial_indent="  ",
                      subsequent_indent=" " * 6)
        for g in GROUPS)
    try:  # Hydra has no public path to its flags' help text
        from hydra._internal.hydra import Hydra
        from hydra._internal.utils import get_args_parser

        hydra_flags = Hydra.format_args_help(get_args_parser())
    except (ImportError, AttributeError):  # Hydra's internals moved: point to them
        hydra_flags = "  see --hydra-help"
    return USAGE.format(flags=flags, settings=settings, groups=groups, hydra_flags=hydra_flags,
                        defaults=" ".join(f"{g}={o}" for g, o in defaults.items()))


def _exit_on_hangup() -> None:
    """SIGTERM and SIGHUP (a ``kill``, a closed login session) raise ``SystemExit`` (128 +
    the signal's number) where they would end the process outright, so a local point's
    processes are stopped on the way out (:func:`vitfsdp.launch.local.run_until_done`)
    instead of left running; a signal ignored (``nohup``) stays ignored. Slurm jobs are not
    touched: they run on, as with ``--detach``."""

    def leave(signum: int, _frame) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, leave)


def main_cli(argv: Sequence[str]) -> int:
    """``python -m vitfsdp.sweep``: ``--status``, ``--help``, or the sweep (through Hydra,
    after :func:`vitfsdp.config.cli`'s checks); returns the exit status."""
    if argv[:1] == ["--status"]:
        try:
            return status_main(argv[1:])
        except OSError as e:
            if not disk_error(e):
                raise
            print(f"error: --status could not record what Slurm says ({disk_error(e)}); "
                  "free space and run it again", file=sys.stderr)
            return EXIT_NOT_COMPLETED
    if "--help" in argv or "-h" in argv:
        print(usage())
        return 0
    _exit_on_hangup()
    # the flags become Hydra overrides after everything else (argparse wants -m first)
    sys.argv = [sys.argv[0], *(a for a in argv if a not in FLAGS),
                *(FLAGS[a] for a in argv if a in FLAGS)]
    try:
        cli(main, config_name="sweep")
    except KeyboardInterrupt as e:  # SweepInterrupted says what was recorded; else nothing ran
        print(str(e) or "interrupted: nothing was run or queued", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_COMPLETED


if __name__ == "__main__":
    sys.exit(main_cli(sys.argv[1:]))
