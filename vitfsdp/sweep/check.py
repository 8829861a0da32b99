"""The checks of a sweep's points before anything runs: each point alone
(:func:`_check_launchable`: local process count, emulated network, queue limits, JAX) and the
sweep as a whole (:func:`_check_launchers`: one launcher, writable run directories, Slurm's
partition and ``sbatch --test-only``; the launcher's options, :func:`_options`). Each returns or
raises one line per refused point; :func:`vitfsdp.sweep.compose.plan` gathers them.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from vitfsdp import plan as planner
from vitfsdp.config import RunConfig
from vitfsdp.launch import LaunchOptions, pack, resume, slurm, slurm_checks
from vitfsdp.plan import impossible
from vitfsdp.plan.memory import ADAMW_STATES, FP32_BYTES, model_sizes
from vitfsdp.sweep.choose import _settled, plan_runs
from vitfsdp.sweep.options import composed_options
from vitfsdp.sweep.point import (
    Point,
    SweepRefused,
    _label,
    _point_label,
    log,
)
from vitfsdp.sweep.slurm_jobs import max_queued_jobs, packs_fix, queue_cap_site, sweep_packs

#: Seconds a Slurm job should have between its start and the stop signal: Slurm may send
#: ``--signal`` up to 60 s early (sbatch(1)), and a rank needs some time to start.
SIGNAL_MARGIN_S = 120
#: Bytes a checkpoint holds per model parameter: the fp32 weights and AdamW's two fp32
#: moments (vitfsdp.plan.memory: ``FP32_BYTES`` × (1 + ``ADAMW_STATES``)), the model and
#: optimizer state :mod:`vitfsdp.checkpoint` saves; its RNG states and meta.json are small.
#: ViT-3B: 3.07 G parameters, 36.8 GB; ViT-5B: 5.35 G, 64.2 GB.
CHECKPOINT_BYTES_PER_PARAM = FP32_BYTES * (1 + ADAMW_STATES)
#: GB/s (10^9 bytes) at which one node is assumed to write its ranks' checkpoint files into
#: the sweep directory where the profile gives no ``cluster.checkpoint_write_gbps``: about the
#: line rate of a 10 Gb Ethernet link to an NFS server (1.25 GB/s), a small site's home; a
#: parallel file system over InfiniBand may take several GB/s a node, a busy one less.
#: Assumed, not measured: each save's seconds are in a run's ``logs/task0.log``
#: ("checkpoint of step N saved in X s").
CHECKPOINT_WRITE_GBPS = 1.0


def _check_launchable(cfg: RunConfig) -> list[str]:
    """Refuse a point its launcher cannot run, in one line: more local processes than
    ``cluster.max_local_procs``, nodes the emulated network cannot place, a node count
    beyond the profile's queue limits, or JAX missing where its ranks would import it.

    Returns:
        The lines of what the queue limits lowered
        (:meth:`~vitfsdp.launch.ClusterConfig.check_queue_limits`), for the sweep to say once.

    Raises:
        ValueError: naming the field and the fix.
    """
    if cfg.cluster.launcher == "local" and cfg.world_size > cfg.cluster.max_local_procs:
        raise ValueError(
            f"nodes={cfg.nodes} × cluster.gpus_per_node={cfg.cluster.gpus_per_node} = "
            f"{cfg.world_size} local processes exceeds cluster.max_local_procs="
            f"{cfg.cluster.max_local_procs}; use fewer nodes or raise the limit"
        )
    if cfg.cluster.launcher == "local":
        cfg.cluster.network.check_nodes(cfg.nodes)
    lowered = cfg.cluster.check_queue_limits(cfg.nodes)
    _check_jax_importable(cfg)
    return lowered


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
                         f"{sys.executable}: pip install 'vitfsdp[jax]' (README, Installing), or "
                         "leave the jax points out (framework=torch)")


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


#: The sweep's check of points that are an earlier point again: the plan's, which it also
#: runs (vitfsdp.plan may not import vitfsdp.sweep); ``_repeated_points``: the name
#: vitfsdp.sweep.compose imports.
repeated_points = _repeated_points = impossible.repeated_points


def _options(config: DictConfig) -> LaunchOptions:
    """The launcher's options, as composed (:func:`vitfsdp.sweep.options.composed_options`).

    Raises:
        SweepRefused: an option not of its kind (a switch not true or false, a
            ``batch_search_max`` not a whole number, an unknown ``pack``, a ``stall_floor_s``
            not above 0), --detach with --scripts-only, or --batch-search with --detach or
            --scripts-only or a ``batch_search_max`` below 1.
    """
    try:  # as composed: a config file's text too (the launcher plugin leaves them untyped)
        options = composed_options(config.hydra.launcher)
    except ValueError as e:
        raise SweepRefused(f"error: {e}") from None
    if options.detach and options.scripts_only:
        raise SweepRefused("error: --scripts-only submits nothing, so there is nothing for "
                           "--detach to leave running; drop one of them")
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
    for warning in dict.fromkeys(filter(None, (slurm_checks.small_path_warning(
            p.cfg.cluster.small_paths, p.run_dir, p.cfg.cluster.name) for p in points))):
        log.warning("%s", warning)
    largest = max(points, key=lambda p: p.cfg.world_size)
    if warning := slurm_checks.small_path_environment_warning(largest.cfg.cluster,
                                                              largest.cfg.world_size):
        log.warning("%s", warning)
    if options.pack is None and any(p.cfg.cluster.probe == pack.PROBE_IN_ALLOCATION
                                    for p in points):
        return ["cluster.probe=allocation is measured by each pack's first step; add "
                "hydra.launcher.pack=by_nodes, or run python -m vitfsdp.probe --out "
                "<hydra.sweep.dir> before the sweep and leave cluster.probe unset"]
    queued = _queue_refusals(points, options)
    if queued:
        return queued
    refused: dict[str, list[tuple[int, Sequence[str]]]] = {}
    checked: dict[tuple, object] = {}  # Slurm answers shared by the sweep's points
    for p in points:
        try:
            slurm.check_values(p.overrides, p.run_dir, options.job_name)
            problem = _check_slurm_point(p, options, checked)
        except slurm_checks.SlurmUnreachable as e:  # the same for every point: said once
            return [str(e)]
        except ValueError as e:
            problem = str(e)
        if problem:
            refused.setdefault(problem, []).append((p.num, p.overrides))
    # the warnings are of the jobs that will run: not of points the plan skips as not fitting
    runs = {p.num for p in points if plan_runs(p, options.run_infeasible)}
    warned = {k: [e for e in v if e[1].num in runs] for k, v in checked.items()
              if k in ("requeues", "windows", "saves", "published")}  # (figure, point, ...)
    _say_published_steps(warned.get("published", []), len(runs))
    _warn_of_requeues(warned.get("requeues", []), len(runs))
    _warn_of_windows(warned.get("windows", []), len(runs))
    _warn_of_saves(warned.get("saves", []), len(runs))
    return refusal_lines(refused, len(points), named=True)


def _queue_refusals(points: list[Point], options: LaunchOptions) -> list[str]:
    """What the queue limits say of the sweep's jobs as a whole: a QOS that forbids chaining
    jobs (``chaining: false``: Frontier's debug QOS) takes a sweep of one job only; a pack
    (``hydra.launcher.pack=by_nodes``) whose time is beyond its node count's limit (one
    point with the pack's start: more points are split into packs that fit) is refused: a
    pack is not requeued, so its points' times are the plan's, never held to the limit
    (:func:`vitfsdp.sweep.slurm_jobs.sweep_packs`).
    A sweep of more jobs than the site queues for a user (``cluster.max_queued_jobs``) is
    :func:`_queued_jobs_refusals`'.
    Only the points still to run count: a resumed sweep's completed points (and its failed
    ones, without ``--rerun-failed``) and the points the plan skips as not fitting
    (:func:`vitfsdp.sweep.choose.plan_runs`) submit no job."""
    try:
        chaining = any(p.cfg.cluster.no_chaining(p.cfg.nodes) for p in points)
    except ValueError:  # a node count beyond the queue's bins: each point says so
        return []
    queued = max_queued_jobs(points)
    if not chaining and options.pack != "by_nodes" and (queued is None or len(points) <= queued):
        return []  # nothing to check: no directory read
    points = [p for p in _still_to_run(points, options.rerun_failed)
              if plan_runs(p, options.run_infeasible)]  # skipped_infeasible: no job
    if not points:
        return []
    try:
        packs = sweep_packs(points) if options.pack == "by_nodes" else None
        forbids = {where for p in points if (where := p.cfg.cluster.no_chaining(p.cfg.nodes))}
    except ValueError:  # a node count beyond the queue's bins: each point says so
        return []
    jobs = len(packs) if packs is not None else len(points)
    if forbids and jobs > 1:
        return [f"{', '.join(sorted(forbids))} forbids chaining jobs, and this sweep is "
                f"{jobs} jobs: run one point under it (or one pack, "
                "hydra.launcher.pack=by_nodes, of one node count and repeat round), or leave "
                "cluster.qos unset for the batch queue"]
    lines = []
    for pk in packs or []:
        cap = pk.cluster.queue_time_limit_s(pk.nodes)
        if cap is not None and pk.time_limit_s > cap:
            lines.append(
                f"the pack of nodes={pk.nodes} {_pack_points(pk.points)} needs "
                f"{pack.slurm_time(pk.time_limit_s)} ({pack.PACK_START_S} s to start and its "
                f"points' times), beyond {pack.slurm_time(cap)}, the limit of a job of "
                f"{pk.nodes} node(s) (cluster.queue_limits), and a pack is not requeued "
                "(cluster.time=auto is not held to the limit in one): run its points unpacked "
                "(drop hydra.launcher.pack: each is then held to the limit and requeued from "
                "its checkpoint) or with fewer train.steps, or, where the plan has no time "
                "for the point, a shorter cluster.time")
    return lines or _queued_jobs_refusals(points, options, jobs, queued)


def _pack_points(points: Sequence[Point]) -> str:
    """``(repeat=1: 2 points of vit_3b, vit_5b)``: which of a sweep's packs a line is of,
    by its repeat round and models (a sweep's packs of one node count differ in those)."""
    rounds = sorted({getattr(p.cfg, "repeat", 0) for p in points})
    models = ", ".join(sorted({p.cfg.model.name for p in points}))
    repeat = f"repeat={','.join(map(str, rounds))}: " if rounds != [0] else ""
    return f"({repeat}{len(points)} point{'s' if len(points) > 1 else ''} of {models})"


def _queued_jobs_refusals(points: list[Point], options: LaunchOptions, jobs: int,
                          cap: int | None) -> list[str]:
    """Where the sweep's ``jobs`` (packs, or a job or array task per point) are more than
    the site queues for a user (``cap``, ``cluster.max_queued_jobs``: sbatch rejects the
    rest): a submission that would queue more than ``cap`` at once (``cluster.max_jobs``
    unset or above it) is refused in one line, before anything is queued, naming the fix:
    packs (``hydra.launcher.pack=by_nodes``) where they come to ``cap`` or fewer, else fewer
    at once. ``--scripts-only`` is not refused (the user submits them by hand): it is warned
    of after its ``submit with`` lines, where it stays in sight
    (:func:`vitfsdp.sweep.slurm_jobs.scripts_queue_warning`)."""
    if cap is None or jobs <= cap or options.scripts_only:  # scripts: warned once written
        return []
    max_jobs = min((m for p in points if (m := p.cfg.cluster.max_jobs) is not None),
                   default=None)
    at_once = jobs if max_jobs is None else min(jobs, max_jobs)
    if at_once <= cap:
        return []  # the sweep submits more as its jobs end
    return [f"this sweep would queue {at_once} jobs at once (cluster.max_jobs="
            f"{'null' if max_jobs is None else max_jobs}), and {queue_cap_site(points, cap)}: "
            f"{packs_fix(points, options, cap)}set cluster.max_jobs={cap} or fewer (the sweep "
            "submits the others as its jobs end)"]


def _still_to_run(points: list[Point], rerun_failed: bool) -> list[Point]:
    """``points`` less those an earlier sweep in their directory settled, as
    :func:`vitfsdp.sweep.choose.select` will skip them, without asking Slurm which earlier
    jobs still run (those are counted as to run)."""
    existing: dict[str, list] = {}
    for sweep_dir in {Path(p.run_dir).parent for p in points}:
        for config_hash, found in resume.existing_points(sweep_dir, slurm.JOB_FILE).items():
            existing.setdefault(config_hash, []).extend(found)
    return [p for p in points
            if not _settled(existing.get(p.config_hash, []), {}, rerun_failed)[0]]


def refusal_lines(refused: dict[str, list[tuple[int, Sequence[str]]]], total: int,
                  named: bool = False) -> list[str]:  # fmt: skip
    """One line per reason, for every point refused for it (``refused``: reason -> the
    points' numbers and overrides) said once: the reason alone in a one-point sweep (unless
    ``named``), ``point 3 (nodes=8): reason`` for one point, ``every point (4 of 4):
    reason`` or ``points 0, 2 (2 of 4): reason`` for several."""
    lines = []
    for reason, which in refused.items():
        if total == 1 and not named:
            lines.append(reason)
        elif len(which) == 1:
            num, overrides = which[0]
            lines.append(f"point {num} ({_label(overrides)}): {reason}")
        else:
            nums = "every point" if len(which) == total else "points " + ", ".join(
                str(num) for num, _ in which)
            lines.append(f"{nums} ({len(which)} of {total}): {reason}")
    return lines


def _read_only(p: Point) -> str | None:
    """Why the compute nodes of ``p``'s profile could not write its run directory
    (:func:`vitfsdp.launch.slurm_checks.read_only_refusal` of ``cluster.read_only_paths``)."""
    return slurm_checks.read_only_refusal(p.cfg.cluster.read_only_paths, p.run_dir,
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
    if problem := slurm_checks.missing_path(cluster):  # --scripts-only too (cluster.check_paths)
        return problem
    if cluster.check_paths and ("modules", tuple(cluster.modules)) not in checked:
        checked["modules", tuple(cluster.modules)] = slurm_checks.unavailable_module(
            cluster.modules)
    if problem := checked.get(("modules", tuple(cluster.modules))):
        return problem
    if problem := _environment_problem(cluster, checked, jax=p.cfg.framework == "jax"):
        return problem
    if options.scripts_only:  # the scripts may be for another cluster: no Slurm query
        limit, partition = cluster.max_nodes, cluster.partition
        _note_login_interpreter(cluster, checked)
    else:  # one sinfo per partition for the whole sweep
        if ("sinfo", cluster.partition) not in checked:
            checked["sinfo", cluster.partition] = slurm_checks.partition_nodes(cluster.partition)
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
        checked[key] = slurm_checks.sbatch_test_only(cluster, p.cfg.nodes, options.job_name)
    return _slurm_refusal(cluster, checked[key]) if checked[key] else None


def _environment_problem(cluster, checked: dict, jax: bool = False) -> str | None:
    """:func:`vitfsdp.launch.slurm_checks.environment_problem`, asked once per environment
    of the sweep (the script that makes it, its interpreter and what is asked of it, JAX
    included for ``framework=jax`` points only; its warning said once)."""
    key = ("environment", slurm_checks.environment_script(cluster), slurm.node_python(cluster),
           cluster.torch_build, cluster.check_paths, cluster.sbcast_env, cluster.export_env,
           cluster.name if jax else None, jax)
    if key not in checked:
        problem, warning = slurm_checks.environment_problem(cluster, Path.cwd(), jax=jax)
        if warning:
            log.warning("%s", warning)
        checked[key] = problem
    return checked[key]


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
    ``cluster.max_requeues`` requeues (each resumes from the checkpoint; the jobs counted as
    :func:`_jobs_needed` does, with auto's margin where ``cluster.time=auto`` was held to the
    queue's limit), or that needs a requeue while a timing window (``train.log_every``
    predicted steps) is longer than the training's wait after SIGUSR2
    (:func:`vitfsdp.launch.slurm.checkpoint_wait_s`: it saves only at a window's end, and an
    attempt that saved nothing is not requeued, :func:`vitfsdp.launch.resume.unsaved_attempt`);
    None when it fits or the plan has no step time. A run that needs requeues is noted in
    ``warned["requeues"]``, one whose window is longer than that wait but which the plan
    expects to end before the signal in ``warned["windows"]``, each for one line for the
    sweep (:func:`_warn_of_requeues`, :func:`_warn_of_windows`); one whose checkpoint may not
    be saved in that wait in ``warned["saves"]`` (:func:`_note_save`). The step time is
    :func:`vitfsdp.plan.sizing_step`'s, as ``cluster.time=auto``'s: the plan's, or a published
    one of the point's settings where slower (noted in ``warned["published"]`` for
    :func:`_say_published_steps`)."""
    step_s = _sizing_step_s(p, warned)
    _note_save(p, step_s, warned)
    if not step_s:
        return None
    cluster = p.cfg.cluster
    window_s = p.cfg.train.log_every * step_s
    if window_s * planner.TIME_SAFETY_FACTOR > slurm.checkpoint_wait_s(cluster):
        certain = _jobs_needed(p.cfg, step_s, cluster.time_limit_s)  # without auto's margin
        every = getattr(p.cfg.train, "checkpoint_every", 0)
        periodic = 0 < every and every * step_s < cluster.time_limit_s - planner.STARTUP_S
        if (certain > 1 and window_s > slurm.checkpoint_wait_s(cluster)
                and not periodic):  # the signal is certain
            short, fix = _window_text(p, step_s)
            return (f"train.steps={p.cfg.train.steps} needs {certain} jobs of cluster.time="
                    f"{cluster.time}, but {short}: an attempt may end without a checkpoint, "
                    f"and an attempt that saved nothing is not requeued; {fix}, or "
                    "train.checkpoint_every=N (saves within each job)")
        warned.setdefault("windows", []).append((window_s, p, step_s))
    auto = p.auto_held
    jobs = _jobs_needed(p.cfg, step_s, cluster.time_limit_s, auto)
    cap = cluster.queue_time_limit_s(p.cfg.nodes)
    if jobs > cluster.max_requeues + 1:
        return (f"train.steps={p.cfg.train.steps}: {_predicted_text(p.cfg, step_s, auto)}, "
                f"more than cluster.time={cluster.time}{_at_cap(p.cfg, cap)} allows with "
                f"cluster.max_requeues={cluster.max_requeues}; "
                f"{_uncovered_fix(p.cfg, step_s, cap, auto)}")
    if jobs > 1:
        warned.setdefault("requeues", []).append((jobs - 1, p, step_s, auto))
    return None


def _sizing_step_s(p: Point, warned: dict) -> float | None:
    """:func:`vitfsdp.plan.sizing_step`'s seconds per step of ``p`` (None: the plan has no
    step time and no published row matches, or the config cannot be predicted); where the
    published step time is used, ``p`` is noted in ``warned["published"]`` (published /
    predicted, point, the :class:`vitfsdp.plan.SizingStep`)."""
    try:
        sized = planner.sizing_step(p.cfg)
    except (ValueError, NotImplementedError):
        return None
    if sized.by_published:
        ratio = sized.published_s / sized.predicted_s if sized.predicted_s else math.inf
        warned.setdefault("published", []).append((ratio, p, sized))
    return sized.step_s


def _say_published_steps(published: list[tuple[float, Point, planner.SizingStep]],
                         total: int) -> None:
    """One line for the sweep's points whose time is sized by a published step time, slower
    than the plan's (``published``: published / predicted, point, its
    :class:`vitfsdp.plan.SizingStep`, from :func:`_sizing_step_s`), of ``total`` points:
    how many, the study, and the point where the two differ most, with its time limit."""
    if not published:
        return
    _, p, sized = max(published, key=lambda x: x[0])
    studies = ", ".join(sorted({s.study for _, _, s in published if s.study}))
    predicted = (f"{sized.predicted_s:.3g} s predicted" if sized.predicted_s is not None
                 else "none predicted")
    at = f"point {p.num}, {_point_label(p)}: " if total > 1 else ""
    log.info("time limits: %d of the %d points are sized by the step time published for "
             "their settings on this machine (%s: vitfsdp/reference, the global batch over "
             "its measured images/s), slower than the plan's: cluster.time=auto and the time "
             "checks use it (most, %s%.3g s/step published, %s; cluster.time=%s)",
             len(published), total, studies, at, sized.published_s, predicted,
             p.cfg.cluster.time)


def _at_cap(cfg: RunConfig, cap_s: int | None) -> str:
    """`` (the longest a job of 1 node may ask ...)`` where ``cfg``'s ``cluster.time`` is the
    queue's limit for its node count (``cap_s``), else nothing."""
    if cap_s is None or cfg.cluster.time_limit_s < cap_s:
        return ""
    nodes = f"{cfg.nodes} node{'s' if cfg.nodes > 1 else ''}"
    return (f" (the longest a job of {nodes} may ask under cluster.queue_limits, to which "
            "cluster.time=auto is held)")


def _predicted_text(cfg: RunConfig, step_s: float, auto: bool) -> str:
    """``the plan predicts 2.82 h (4.93 s/step)``, and where ``auto`` (the time held by
    ``cluster.time=auto``) what :func:`_jobs_needed` counts of it: the margin, and the
    start-up and signal delay each job loses."""
    run_s = cfg.train.steps * step_s + planner.STARTUP_S
    basis, plan = _step_basis(cfg)
    text = (f"{'the plan predicts' if not plan else basis + ' gives'} {_duration(run_s)} "
            f"({step_s:.3g} s/step{plan}")
    if not auto:
        return text + ")"
    per_step, _, per_job = _job_terms(cfg, step_s, auto)
    return (f"{text}; {_duration(cfg.train.steps * per_step)} of steps with the "
            f"{planner.TIME_SAFETY_FACTOR:g}x margin of cluster.time=auto, and each job "
            f"{per_job:.0f} s of start-up and cluster.signal_delay_s)")


def _step_basis(cfg: RunConfig) -> tuple[str, str]:
    """Whose step time the time checks of ``cfg`` use (:func:`vitfsdp.plan.sizing_step`):
    (``the plan``, '') or (``the step time published for its settings (<study>)``,
    ``; the plan <s>``) where a published one is slower and used."""
    try:
        sized = planner.sizing_step(cfg)
    except (ValueError, NotImplementedError):
        return "the plan", ""
    if not sized.by_published:
        return "the plan", ""
    plan = f"; the plan {sized.predicted_s:.3g}" if sized.predicted_s is not None else ""
    return f"the step time published for its settings ({sized.study})", plan


def _warn_of_requeues(requeues: list[tuple[int, Point, float, bool]], total: int) -> None:
    """One warning for the sweep's points that the plan expects to be requeued
    (``requeues``: requeues, point, step seconds, whether its time is auto's held to the
    limit, from :func:`_beyond_time_limit`), of ``total`` points: the point's own line in a
    sweep of one; else how many, the most requeues, and the point that needs them."""
    if not requeues:
        return
    most, p, step_s, auto = max(requeues, key=lambda r: (r[0], r[1].cfg.train.steps * r[2]))
    cfg = p.cfg
    cap = cfg.cluster.queue_time_limit_s(cfg.nodes)
    why = (f"train.steps={cfg.train.steps}: {_predicted_text(cfg, step_s, auto)}, beyond "
           f"cluster.time={cfg.cluster.time}{_at_cap(cfg, cap)}")
    times = f"{'up to ' if auto or len(requeues) > 1 else ''}{most} time(s)"
    if total == 1:
        log.warning("%s: the point will be requeued %s from its checkpoint "
                    "(cluster.max_requeues=%d)", why, times, cfg.cluster.max_requeues)
        return
    many = len(requeues) > 1
    log.warning("%d of the %d points will be requeued %s from %s (%spoint %d, %s: %s; "
                "cluster.max_requeues=%d)", len(requeues), total, times,
                "their checkpoints" if many else "its checkpoint", "longest: " if many else "",
                p.num, _point_label(p), why, cfg.cluster.max_requeues)


def _window_text(p: Point, step_s: float, longest_of: int = 1) -> tuple[str, str]:
    """What is wrong with ``p``'s timing window of ``train.log_every`` × ``step_s`` seconds
    (with the margin of ``cluster.time=auto``) against the training's wait after SIGUSR2,
    and the fix: the ``cluster.signal_delay_s`` that covers it; ``longest_of``: the points
    whose windows it is the longest of (more than 1: said so)."""
    cluster, margin = p.cfg.cluster, planner.TIME_SAFETY_FACTOR
    window_s = p.cfg.train.log_every * step_s
    many = longest_of > 1
    basis, plan = _step_basis(p.cfg)
    short = (f"a timing window (train.log_every={p.cfg.train.log_every} steps) takes "
             f"{'up to ' if many else ''}{window_s:.0f} s by {basis} "
             f"({f'point {p.num}: ' if many else ''}{step_s:.3g} s/step{plan}; "
             f"{window_s * margin:.0f} s with the {margin:g}x margin of cluster.time=auto), "
             f"against the {slurm.checkpoint_wait_s(cluster)} s the training gets to reach its "
             f"boundary and save after SIGUSR2 (cluster.signal_delay_s={cluster.signal_delay_s}"
             f" less {slurm.REQUEUE_MARGIN_S} s)")
    fix = (f"set cluster.signal_delay_s above "
           f"{math.ceil(window_s * margin) + slurm.REQUEUE_MARGIN_S} s plus the save"
           f"{f' (it covers all {longest_of})' if many else ''}, or a smaller train.log_every")
    return short, fix


def _warn_of_windows(windows: list[tuple[float, Point, float]], total: int) -> None:
    """One warning for the sweep's points whose timing window may outlast the wait after
    SIGUSR2 (``windows``: window seconds, point, step seconds, from
    :func:`_beyond_time_limit`), of ``total`` points: the longest window, whose
    ``cluster.signal_delay_s`` covers every one, and how many points it concerns."""
    if not windows:
        return
    _, p, step_s = max(windows, key=lambda w: w[0])
    short, fix = _window_text(p, step_s, len(windows))
    at = f" at {len(windows)} of the {total} points" if total > 1 else ""
    log.warning("%s%s: a run the time limit stops may end without a checkpoint (and not be "
                "requeued); %s", short, at, fix)


def checkpoint_bytes(cfg: RunConfig) -> int:
    """Bytes of a run's checkpoint over all its ranks (:data:`CHECKPOINT_BYTES_PER_PARAM` ×
    the model's parameters, :func:`vitfsdp.plan.memory.model_sizes`): torch's distributed
    checkpoint writes each shard once, a replicated one by one rank only."""
    sizes = model_sizes(cfg.model, cfg.num_classes)
    return sizes.num_params * CHECKPOINT_BYTES_PER_PARAM


def write_gbps(cfg: RunConfig) -> float:
    """GB/s at which one node of ``cfg``'s profile writes its checkpoint files:
    ``cluster.checkpoint_write_gbps``, else the assumed :data:`CHECKPOINT_WRITE_GBPS`."""
    return cfg.cluster.checkpoint_write_gbps or CHECKPOINT_WRITE_GBPS


def _save_s(cfg: RunConfig) -> float:
    """Seconds the save of ``cfg``'s checkpoint takes at :func:`write_gbps` per node, its
    bytes shared evenly by the run's nodes (each rank writes its own files)."""
    return checkpoint_bytes(cfg) / cfg.nodes / (write_gbps(cfg) * 1e9)


def _rate_text(cfg: RunConfig) -> str:
    """Where the save's rate comes from, for :func:`_warn_of_saves`: the profile's
    ``cluster.checkpoint_write_gbps``, or the assumed default and how to set the field."""
    if cfg.cluster.checkpoint_write_gbps:
        return (f"at {cfg.cluster.checkpoint_write_gbps:g} GB/s per node "
                f"(cluster.checkpoint_write_gbps of cluster={cfg.cluster.name})")
    return (f"at an assumed {CHECKPOINT_WRITE_GBPS:g} GB/s per node "
            "(vitfsdp.sweep.check.CHECKPOINT_WRITE_GBPS: a 10 Gb Ethernet link to NFS; your "
            f"file system may differ: cluster={cfg.cluster.name} gives no "
            "cluster.checkpoint_write_gbps, which a run's logs/task0.log measures, "
            "'checkpoint of step N saved in X s')")


def _note_save(p: Point, step_s: float | None, warned: dict) -> None:
    """Note ``p`` in ``warned["saves"]`` (for :func:`_warn_of_saves`) where the training's
    wait after SIGUSR2 (:func:`vitfsdp.launch.slurm.checkpoint_wait_s`) is unlikely to hold
    the rest of a timing window and the save, each a prediction held to the plan's margin
    (:data:`vitfsdp.plan.TIME_SAFETY_FACTOR`, as :func:`_beyond_time_limit` holds the
    window): the save at the profile's or the assumed rate (:func:`_save_s`) with the margin
    takes half the wait or more (smaller ones are not warned of: a window beyond the wait is
    :func:`_warn_of_windows`'s), and with a window of ``train.log_every`` × ``step_s``
    predicted seconds (none where the plan has no step time) more than the wait."""
    margin, wait_s = planner.TIME_SAFETY_FACTOR, slurm.checkpoint_wait_s(p.cfg.cluster)
    save_s = _save_s(p.cfg)
    window_s = p.cfg.train.log_every * step_s if step_s else 0.0
    if save_s * margin >= wait_s / 2 and (window_s + save_s) * margin > wait_s:
        warned.setdefault("saves", []).append(((window_s + save_s) * margin, p, save_s,
                                               window_s))


def _warn_of_saves(saves: list[tuple[float, Point, float, float]], total: int) -> None:
    """One warning for the sweep's points whose checkpoint the wait after SIGUSR2 is unlikely
    to hold (``saves``: window and save seconds with the margin, point, save seconds, window
    seconds, from :func:`_note_save`), of ``total`` points: the point of the longest, its
    checkpoint's bytes in all and per node, the rate and where it comes from
    (:func:`_rate_text`), and the ``cluster.signal_delay_s`` that covers every one. A warning,
    not a refusal: the rate is assumed or the profile's, and a save's time varies."""
    if not saves:
        return
    longest, p, save_s, window_s = max(saves, key=lambda s: s[0])
    cfg, margin = p.cfg, planner.TIME_SAFETY_FACTOR
    total_gb = checkpoint_bytes(cfg) / 1e9
    delay = math.ceil(longest) + slurm.REQUEUE_MARGIN_S
    at = (f" (point {p.num}, {_point_label(p)}: the longest of {len(saves)} of the {total} "
          "points)" if len(saves) > 1 else f" (point {p.num}, {_point_label(p)})"
          if total > 1 else "")
    window = (f" after up to {window_s:.0f} s for the rest of its timing window "
              f"(train.log_every={cfg.train.log_every} steps)" if window_s else "")
    log.warning("the checkpoint of model=%s%s is %.1f GB (fp32 weights and AdamW's two "
                "moments), %.1f GB per node on nodes=%d: %s its save takes %.0f s%s, %.0f s "
                "with the plan's %gx margin (cluster.time=auto's), against the %d s the "
                "training gets after SIGUSR2 (cluster.signal_delay_s=%d less %d s): a run the "
                "time limit stops may end without a checkpoint (and not be requeued); set "
                "cluster.signal_delay_s=%d%s",
                cfg.model.name, at, total_gb, total_gb / cfg.nodes, cfg.nodes,
                _rate_text(cfg), save_s, window, longest, margin,
                slurm.checkpoint_wait_s(cfg.cluster), cfg.cluster.signal_delay_s,
                slurm.REQUEUE_MARGIN_S, delay,
                f" (it covers all {len(saves)})" if len(saves) > 1 else "")


def _job_terms(cfg: RunConfig, step_s: float, auto: bool) -> tuple[float, float, float]:
    """The rule that counts the jobs a run of ``cfg`` takes and the ``train.steps`` they
    cover, for the check and its suggestion alike: (seconds a step, seconds once a run,
    seconds each job loses). A ``cluster.time`` set by hand: the plan's step time and its
    start-up once (:data:`vitfsdp.plan.STARTUP_S`; the user chose the time). One that
    ``cluster.time=auto`` holds to the queue's limit (``auto``): auto's own margin, the step
    time × :data:`vitfsdp.plan.TIME_SAFETY_FACTOR`, and the start-up and
    ``cluster.signal_delay_s`` in every job, as :func:`vitfsdp.plan.auto_time_limit` counts
    its one job."""
    if auto:
        return (step_s * planner.TIME_SAFETY_FACTOR, 0.0,
                float(planner.STARTUP_S + cfg.cluster.signal_delay_s))
    return step_s, float(planner.STARTUP_S), 0.0


def _jobs_needed(cfg: RunConfig, step_s: float, limit_s: int, auto: bool = False) -> int:
    """The jobs of ``limit_s`` seconds the plan's run of ``cfg`` takes (:func:`_job_terms`),
    each requeue resuming from the checkpoint: ``cluster.max_requeues`` + 1 jobs cover at
    most."""
    per_step, once, per_job = _job_terms(cfg, step_s, auto)
    return math.ceil((cfg.train.steps * per_step + once) / max(limit_s - per_job, 1.0))


def _steps_covered(cfg: RunConfig, step_s: float, limit_s: int, jobs: int, auto: bool) -> int:
    """The most ``train.steps`` that ``jobs`` jobs of ``limit_s`` seconds cover by the rule of
    :func:`_jobs_needed` (its inverse)."""
    per_step, once, per_job = _job_terms(cfg, step_s, auto)
    return int((jobs * (limit_s - per_job) - once) // per_step)


def _uncovered_fix(cfg: RunConfig, step_s: float, cap_s: int | None, auto: bool) -> str:
    """What would cover the plan's run of ``cfg`` (:func:`_jobs_needed`, by the rule of its
    time: ``auto`` where ``cluster.time=auto`` was held to the limit): a longer
    ``cluster.time`` where the queue's limit for its node count (``cap_s``; None: no limit)
    with its requeues covers it, and ``cluster.time=auto`` where auto's rule does too; else
    that limit with more ``cluster.max_requeues``, or the ``train.steps`` it covers."""
    cluster = cfg.cluster
    if cap_s is None:
        return "use fewer train.steps, a longer cluster.time, or cluster.time=auto"
    jobs = _jobs_needed(cfg, step_s, cap_s, auto)
    allowed = cluster.max_requeues + 1
    below = cluster.time_limit_s < cap_s
    if below and jobs <= allowed:
        also = ("cluster.time=auto, " if _jobs_needed(cfg, step_s, cap_s, auto=True) <= allowed
                else "")
        return f"use a longer cluster.time (at most {pack.slurm_time(cap_s)}), {also}or fewer " \
               "train.steps"
    steps = _steps_covered(cfg, step_s, cap_s, allowed, auto)
    return ((f"use cluster.time={pack.slurm_time(cap_s)} with " if below else "use ")
            + f"cluster.max_requeues={jobs - 1}"
            + (f" or train.steps<={steps}" if steps > 0 else ""))


def _duration(seconds: float) -> str:
    """``seconds`` for a message: ``3.2 h``, ``41 days``, ``5 min``."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.0f} s"


#: sbatch's refusals of an account, partition or QOS (Slurm's ``slurm_errtab.c``: "Invalid
#: account or account/partition combination specified", "invalid partition specified",
#: "Invalid qos specification"), lower case, and the profile field each names.
REFUSED_FIELDS = (("invalid account", ("account", "partition")),
                  ("invalid partition", ("partition",)), ("invalid qos", ("qos",)))
#: Where a user finds the values Slurm accepts for each field.
FIELD_HINTS = {"account": "sacctmgr show assoc user=$USER format=account,partition,qos lists "
                          "yours",
               "partition": "sinfo -s lists the partitions",
               "qos": "sacctmgr show assoc user=$USER format=account,qos lists yours"}


def _slurm_refusal(cluster, message: str) -> str:
    """``sbatch --test-only``'s refusal, quoted, after the ``cluster.sbatch_args`` (or
    ``site_sbatch_args``) entry it names (where it names one), or after the profile fields
    an account, partition or QOS refusal is about (:data:`REFUSED_FIELDS`), with their
    values and where to look."""
    for key in ("sbatch_args", "site_sbatch_args"):
        for i, arg in enumerate(getattr(cluster, key)):
            if arg.split("=")[0] in message:
                return f"cluster.{key}[{i}]={arg!r}: Slurm would not run it: {message}"
    for text, fields in REFUSED_FIELDS:
        if text in message.lower():
            named = ", ".join(f"cluster.{f}={getattr(cluster, f)!r}" for f in fields)
            return (f"{named}: Slurm would not run it: {message}; set "
                    f"{' and '.join(f'cluster.{f}=<{f.upper()}>' for f in fields)} "
                    f"({FIELD_HINTS[fields[0]]})")
    return f"Slurm would not run it: {message}"
