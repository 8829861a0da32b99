"""Packing: one Slurm job per node count and repeat round runs its sweep points one after
another (``hydra.launcher.pack=by_nodes``), and at most ``cluster.max_jobs`` of a sweep's jobs
are queued at once.

Sites limit the jobs a user may queue: Frontier's batch queue allows 4 eligible-to-run jobs
per user (more are held) and 100 queued (``cluster.max_queued_jobs``: sbatch rejects more),
its debug QOS 1 (https://docs.olcf.ornl.gov/systems/frontier_user_guide.html, "batch
Partition (queue) Policy"), so a sweep of 168 points cannot be one job per point. A pack is
one allocation of ``nodes`` nodes whose script runs each point as its own job step (``srun``):
each point keeps its own run directory, ``job.json`` (the pack's job id and the point's
``position``; its step is named ``vitfsdp-point<position>``), records and status, and a point
that fails does not stop the next. The pack's time limit is the sum over its points of the
plan's predicted run time (what ``cluster.time=auto`` resolves to) or, without a prediction,
the point's ``cluster.time``, plus :data:`PACK_START_S` (its points run one after another);
where the profile's ``queue_limits`` cap a job of that size, the points fill as many packs as
keep each under the cap.

Which points share a pack (:func:`allocation_groups`): those of one node count, one cluster
profile (every field but ``cluster.time``, which the pack sets for all of them, so the
per-point times of ``cluster.time=auto`` do not split a pack) and one repeat round
(``repeat``). The competing points of a round (the strategies of a model at that node count)
then run in one allocation, on the same nodes, and each round in an allocation of its own:
round r of a point never shares a pack with round r-1, so that a difference in the nodes
Slurm gives a job spreads over the repeats rather than over the strategies (the spread of
the repeats is what a difference between points is held to). Where the queue's cap splits
a round's points of one node count, a model's points (its competing strategies) stay in one
pack where they fit in one. Packs are submitted round by round: every pack of round 0, then
of round 1, ...

With ``cluster.probe=allocation`` each pack first measures its own allocation: one job step
(``vitfsdp-probe``) runs the probe's worker (:mod:`vitfsdp.probe.worker`) on the pack's
nodes, every rank at once, and adds that world size to the sweep directory's
``probe.json``, from which the analysis predicts the points (docs/plan.md, "The probe"). A
failed probe step is logged in the pack's output and the points run as before. The loop and
wrapper term (the framework probe) is not measured in a pack.

A point stopped by SIGUSR2 (the pack's time limit is near; ``--signal``) saves its checkpoint
and ends the pack; the pack is not requeued: points it did not reach are recorded by the
sweep's status (:mod:`vitfsdp.launch.status`) and a rerun of the sweep runs them, resuming the
stopped one from its checkpoint.

Where the sweep's same-failure stop (:mod:`vitfsdp.sweep.slurm_jobs`) finds that every job
fails the same way, a running pack runs no further point: the sweep appends the pack's job
id and the reason to ``packs/stop`` (:func:`stop_packs`), which the pack's script reads
before each point after its first (a point already started runs to its end); where it names
the pack's job, the script says so in its output and ends (exit
:data:`~vitfsdp.core.layout.EXIT_PACK_STOPPED`), and the sweep's status records the points
not reached ``cancelled`` with the reason, held back for ``--rerun-failed`` like the pending
jobs the stop cancels. A later sweep's packs have other job ids, so an earlier stop stops
none of them; a pack submitted by hand has no check.

With ``--scripts-only`` the packs are written, not submitted (:func:`write_scripts`): each
is submitted by hand (``sbatch packs/pack<i>.sbatch``) and, like a point's own script,
links its output into each point's run directory (where ``--status`` finds the job) and,
submitted again, leaves out the points that completed and resumes the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from vitfsdp.core.layout import (
    EXIT_ALREADY_COMPLETED,
    EXIT_PACK_STOPPED,
    EXIT_PREEMPTED,
    JOB_FILE,
    PACK_DIR,
    PACK_OUTPUT,
    PACK_PROBE_REQUEST,
    PACK_SCRIPT,
    PACK_STOP_FILE,
    PROBE_FILE,
    SCRIPT_FILE,
    SLURM_OUTPUT,
    TASK_LOG,
    TASK_LOG_DIR,
)
from vitfsdp.launch import ClusterConfig, check_text
from vitfsdp.launch.secrets import write_point_secrets
from vitfsdp.launch.slurm import (
    ShellExpr,
    job_options,
    point_carries_secret,
    sbatch,
    sbatch_lines,
    setup_lines,
    shell_join,
    shell_word,
    slurm_job_record,
    srun_step,
    task_spec,
    write_script,
)
from vitfsdp.launch.status import STEP_NAME
from vitfsdp.records import write_json_atomic

log = logging.getLogger(__name__)

#: ``hydra.launcher.pack`` values: None = one job per point (job arrays for equal shapes).
PACK_MODES = ("by_nodes",)
PACK_START_S = 120  # time-limit allowance per pack for the job's start (s)
PROBE_STEP_S = 600  # time-limit allowance for a pack's probe step (cluster.probe=allocation)
#: ``cluster.probe`` value: measure inside each pack's allocation.
PROBE_IN_ALLOCATION = "allocation"
#: The job-step name of a pack's probe step.
PROBE_STEP_NAME = "vitfsdp-probe"


@dataclass
class Pack:
    """The points one job runs one after another."""

    index: int  # 0, 1, ... in the sweep (names its script)
    points: list  # vitfsdp.sweep.Point, in run order
    time_limit_s: int  # the job's time limit, s
    job_id: str | None = None  # once submitted

    @property
    def cluster(self) -> ClusterConfig:
        """The cluster profile of the pack's points (one per pack: they share a job)."""
        return self.points[0].cfg.cluster

    @property
    def nodes(self) -> int:
        """Nodes of the pack's job: every point of a pack has this node count."""
        return self.points[0].cfg.nodes

    @property
    def probes(self) -> bool:
        """Whether the pack measures its allocation first (``cluster.probe=allocation``)."""
        return self.cluster.probe == PROBE_IN_ALLOCATION


def make_packs(points: Sequence, predicted_s: dict[int, int]) -> list[Pack]:
    """The points of each of :func:`allocation_groups` (a repeat round's points of one node
    count and cluster profile) in one pack, in point order, round 0's packs first; where the
    profile's queue limits cap a job of that node count
    (:meth:`~vitfsdp.launch.ClusterConfig.queue_time_limit_s`: Frontier's batch queue, 2 h
    up to 91 nodes), as many packs as keep each within the cap (:func:`_fill`).

    Args:
        predicted_s: point number → the plan's predicted run time in seconds, where it has
            one; a point without takes its ``cluster.time``.
    """
    packs: list[Pack] = []
    for group in allocation_groups(points):
        cluster = group[0].cfg.cluster
        start = PACK_START_S + (PROBE_STEP_S if cluster.probe == PROBE_IN_ALLOCATION else 0)
        cap = cluster.queue_time_limit_s(group[0].cfg.nodes)
        for chunk in _fill(group, cap, lambda chunk, s=start: _pack_s(chunk, s, predicted_s)):
            packs.append(Pack(len(packs), chunk, _pack_s(chunk, start, predicted_s)))
    return packs


def _fill(group: Sequence, cap: int | None, pack_s: Callable[[list], int]) -> list[list]:
    """``group``'s points in packs whose time (``pack_s`` of a pack's points, s) stays within
    ``cap`` (None: one pack), keeping the points of one model (those that compete: its
    strategies) in one pack where they fit in one: a model's points go on in the pack being
    filled where all fit, else into a new one; a model's points beyond one pack fill as many
    as they need, in point order."""
    models: dict[str, list] = {}
    for p in group:
        models.setdefault(p.cfg.model.name, []).append(p)
    chunks: list[list] = [[]]
    for same in models.values():
        if cap is not None and chunks[-1] and pack_s(chunks[-1] + same) > cap:
            chunks.append([])
        for p in same:
            if cap is not None and chunks[-1] and pack_s(chunks[-1] + [p]) > cap:
                chunks.append([])
            chunks[-1].append(p)
    return chunks


def allocation_groups(points: Sequence) -> list[list]:
    """The points one pack may hold, in pack order: those of one repeat round
    (``repeat``), one node count and one cluster profile but for ``cluster.time`` (a pack
    sets its own time limit, :func:`_pack_s`; ``cluster.time=auto`` resolves to another per
    point). Round 0's groups first, then round 1's, ...; within a round, in the order of
    their first points."""
    groups: dict[tuple, list] = {}
    for p in points:
        key = (p.cfg.repeat, _profile_but_time(p.cfg.cluster), p.cfg.nodes)
        groups.setdefault(key, []).append(p)
    return [groups[key] for key in sorted(groups, key=lambda key: key[0])]


def _profile_but_time(cluster: ClusterConfig) -> str:
    """The cluster profile's fields but ``time``, as one string: what the points of one job
    must share (its sbatch options, setup lines and srun options)."""
    return repr([(f.name, getattr(cluster, f.name)) for f in fields(cluster)
                 if f.name != "time"])


def _pack_s(points: Sequence, start: int, predicted_s: dict[int, int]) -> int:
    """A pack's time limit: ``start`` plus each point's predicted time, else its
    ``cluster.time``, in seconds."""
    return start + sum(predicted_s.get(p.num, p.cfg.cluster.time_limit_s) for p in points)


def slurm_time(seconds: int) -> str:
    """A time limit in Slurm's D-HH:MM:SS, rounded up to the minute (Slurm's unit)."""
    minutes = -(-seconds // 60)
    days, minutes = divmod(minutes, 24 * 60)
    return f"{days}-{minutes // 60:02d}:{minutes % 60:02d}:00"


def render(pack: Pack, sweep_dir: Path, job_name: str, workdir: str,
           by_hand: bool = False) -> str:
    """The pack's sbatch script: the job's options, the profile's setup, then one ``srun``
    step per point (task logs in the point's ``logs/``), each with its own rendezvous port,
    each after the first preceded by the check of the sweep's stop file
    (:func:`_stop_check_line`). ``by_hand`` (``--scripts-only``: the user submits it, no
    sweep watches it to stop it): no check, and each point's step is preceded by what a
    point's own script does first (:func:`_by_hand_lines`).

    Raises:
        ValueError: an override or run directory holds a control character.
    """
    output = sweep_dir / PACK_DIR / PACK_OUTPUT.format(index=pack.index, job_id="%j")
    opts = job_options(pack.cluster, pack.nodes, job_name, workdir=workdir, output=str(output),
                       time=slurm_time(pack.time_limit_s))
    lines = ["#!/bin/bash",
             f"# vitfsdp pack {pack.index}: {len(pack.points)} sweep points of {pack.nodes} "
             "node(s), one job step each, one after another",
             "# rendered by `python -m vitfsdp.sweep` (hydra.launcher.pack=by_nodes"
             + (", --scripts-only: sbatch this file)" if by_hand else ")"),
             *sbatch_lines(opts), "", *setup_lines(pack.cluster, sweep_dir),
             'PACK_PORT="${MASTER_PORT}"']
    if pack.probes:
        lines += ["", *_probe_lines(pack, sweep_dir)]
    for position, point in enumerate(pack.points):
        lines += ["", *_point_lines(pack, point, position, sweep_dir,
                                    output if by_hand else None)]
    lines += ["", "exit 0"]
    return "\n".join(lines) + "\n"


def probe_request_path(pack: Pack, sweep_dir: Path) -> Path:
    """Where :func:`write` puts the pack's probe request (what its probe step measures)."""
    return Path(sweep_dir).resolve() / PACK_DIR / PACK_PROBE_REQUEST.format(index=pack.index)


def probe_request(pack: Pack) -> dict:
    """What the pack's probe step measures: the overrides of its points, from which every
    rank of the step composes the probe's spec (:func:`vitfsdp.probe.worker.spec_of_request`:
    their GEMM shapes, ops, collectives at the pack's world size), and the profile's name."""
    return {"cluster": pack.cluster.name, "nodes": pack.nodes,
            "points": [list(p.overrides) for p in pack.points]}


def _probe_lines(pack: Pack, sweep_dir: Path) -> list[str]:
    """The pack's probe step (``cluster.probe=allocation``): the worker on every rank of the
    allocation, merging into the sweep's probe.json; a failure is logged, not fatal."""
    spec = task_spec(pack.cluster, [], Path(sweep_dir), pack.nodes)
    log = str(Path(sweep_dir).resolve() / PACK_DIR / f"probe{pack.index}-%j-%t.log")
    launch = srun_step(pack.cluster, log, PROBE_STEP_NAME)
    argv = [spec.python, "-u", "-m", "vitfsdp.probe.worker",
            str(probe_request_path(pack, sweep_dir)), "--merge",
            str(Path(sweep_dir).resolve() / PROBE_FILE)]
    return ["# the probe of this allocation (cluster.probe=allocation), into the sweep's "
            "probe.json",
            f"export MASTER_PORT=$((PACK_PORT + {len(pack.points)}))",
            f"{shell_join(launch)} \\\n    {shell_join(argv)} || echo \"the probe step failed "
            f"(exit $?): the points run; see {PACK_DIR}/probe{pack.index}-*.log\""]


def _point_lines(pack: Pack, point, position: int, sweep_dir: Path,
                 by_hand_output: Path | None = None) -> list[str]:
    """One point's step: a failure is recorded by the point and the pack goes on; a stop on
    SIGUSR2 (checkpoint saved, exit :data:`~vitfsdp.core.layout.EXIT_PREEMPTED`) ends the
    pack; after the first point, the sweep's stop file naming the pack's job ends it before
    the step (:func:`_stop_check_line`). ``by_hand_output``: the pack's output file (``%j``
    for the job id) of a pack submitted by hand, whose point steps are preceded by
    :func:`_by_hand_lines` (and no check: no sweep watches it to stop it)."""
    for i, arg in enumerate(point.overrides):
        check_text(f"override {i}", arg)
    check_text("run directory", str(point.run_dir))
    spec = task_spec(pack.cluster, point.overrides, point.run_dir, pack.nodes,
                     getattr(point.cfg.train, "checkpoint_every", 0))
    launch = srun_step(pack.cluster, str(Path(spec.run_dir) / TASK_LOG_DIR
                                         / TASK_LOG.format(task="%t")),
                       STEP_NAME.format(position=position))
    argv = spec.argv(ShellExpr("${MASTER_ADDR}:${MASTER_PORT}"), ShellExpr("${SLURM_JOB_ID}"))
    step = [f"{shell_join(launch)} \\\n    {shell_join(argv)} || rc=$?",
            f'if [[ $rc -eq {EXIT_PREEMPTED} ]]; then echo "stopped on a signal: pack ends"; '
            f"exit {EXIT_PREEMPTED}; fi"]
    head = [f"# point {position + 1}/{len(pack.points)}: {point.run_dir.name}",
            *([_stop_check_line(pack, position, sweep_dir)]
              if position and by_hand_output is None else []),
            f"export MASTER_PORT=$((PACK_PORT + {position}))",
            f"mkdir -p {shell_word(str(Path(spec.run_dir) / TASK_LOG_DIR))}",
            "rc=0"]
    if by_hand_output is None:
        return [*head, *step]
    return [*head, *_by_hand_lines(spec, by_hand_output),
            "if [[ $rc -eq 0 ]]; then", *(f"    {line}" for line in step), "fi"]


def stop_path(sweep_dir: Path) -> Path:
    """The sweep's stop file (:data:`~vitfsdp.core.layout.PACK_STOP_FILE` in its packs'
    folder), absolute: the packs' scripts read it wherever their job starts."""
    return Path(sweep_dir).resolve() / PACK_DIR / PACK_STOP_FILE


def _stop_check_line(pack: Pack, position: int, sweep_dir: Path) -> str:
    """Before the point at ``position`` (after the first): where the sweep's stop file has a
    line for this job (:func:`stop_packs`), say so with its reason and end the pack, exit
    :data:`~vitfsdp.core.layout.EXIT_PACK_STOPPED`; a missing file is no stop."""
    path = shell_word(str(stop_path(sweep_dir)))
    left = len(pack.points) - position
    return (f'if stop="$(grep -m 1 -e "^${{SLURM_JOB_ID}} " {path} 2>/dev/null)"; then '
            f'echo "the sweep stopped this pack before point {position + 1}/'
            f'{len(pack.points)} ({left} not run): ${{stop#* }}"; '
            f"exit {EXIT_PACK_STOPPED}; fi")


def stop_packs(sweep_dir: Path, job_ids: Sequence[str], reason: str) -> Path:
    """Tell the running packs ``job_ids`` to run no further point: append a line
    ``<job id> <reason>`` each (``reason`` on one line) to the sweep's stop file
    (:func:`stop_path`), in one write. A point a pack has started runs to its end; the
    script reads the file before its next point (:func:`_stop_check_line`). Returns the
    file.

    Raises:
        OSError: the file could not be written (a full disk): the packs run on.
    """
    path = stop_path(sweep_dir)
    line = " ".join(reason.split()) or "stopped by the sweep"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write("".join(f"{job_id} {line}\n" for job_id in job_ids))
    return path


def _by_hand_lines(spec, output: Path) -> list[str]:
    """What a pack submitted by hand does before a point's step, as a point's own script
    does before its training: link the pack's output into the run directory as
    ``slurm-<job id>.out`` (where ``--status`` finds the job of a script submitted by hand),
    and move an earlier attempt's files to ``attempts/<n>/``
    (:func:`vitfsdp.launch.resume.prepare_rerun`), leaving out (``rc`` not 0) a point that
    already completed or whose files could not be moved."""
    link = _job_path(Path(spec.run_dir) / SLURM_OUTPUT.format(job_id="%j"))
    prepare = [spec.python, "-m", "vitfsdp.launch.resume", spec.run_dir, "--keep", SCRIPT_FILE,
               JOB_FILE, ShellExpr(SLURM_OUTPUT.format(job_id="${SLURM_JOB_ID}")), "--mkdir",
               TASK_LOG_DIR]
    return [f"ln -sfn {_job_path(output)} {link}",
            f"{shell_join(prepare)} || rc=$?",
            f'if [[ $rc -eq {EXIT_ALREADY_COMPLETED} ]]; then echo "completed before: left out"; '
            f'elif [[ $rc -ne 0 ]]; then echo "its earlier attempt could not be moved (exit '
            '$rc): left out"; fi']


def _job_path(path: Path) -> ShellExpr:
    """``path``, whose name holds Slurm's ``%j`` (an ``--output`` file), for the job's
    shell: quoted, with ``"${SLURM_JOB_ID}"`` for ``%j``."""
    before, after = str(path).rsplit("%j", 1)
    return ShellExpr(shell_word(before) + '"${SLURM_JOB_ID}"' + (shell_word(after) if after
                                                                 else ""))


def write(pack: Pack, sweep_dir: Path, job_name: str, by_hand: bool = False) -> Path:
    """Write the pack's script into ``<sweep dir>/packs/`` and each point's copy
    (``job.sbatch``) into its run directory, and the sweep's secrets file
    (``cluster.secrets``); returns the pack's script. ``by_hand``: see :func:`render`."""
    write_point_secrets(pack.points, sweep_dir)
    text = render(pack, sweep_dir, job_name, str(Path.cwd()), by_hand)
    (sweep_dir / PACK_DIR).mkdir(parents=True, exist_ok=True)
    if pack.probes:
        write_json_atomic(probe_request_path(pack, sweep_dir), probe_request(pack))
    path = sweep_dir / PACK_DIR / PACK_SCRIPT.format(index=pack.index)
    secret = any(point_carries_secret(p) for p in pack.points)  # then the owner's only
    write_script(path, text, secret)
    for point in pack.points:
        (point.run_dir / TASK_LOG_DIR).mkdir(parents=True, exist_ok=True)
        write_script(point.run_dir / SCRIPT_FILE, text, secret)
    return path


def submit(pack: Pack, sweep_dir: Path, job_name: str) -> str:
    """Write and ``sbatch`` the pack (:func:`vitfsdp.launch.slurm.sbatch`); record its job id
    in every point's ``job.json``.

    Raises:
        RuntimeError: sbatch refused the job (its message quoted: e.g. a QOS limit).
    """
    script = write(pack, sweep_dir, job_name)
    pack.job_id = sbatch(script, pack.points, f"pack {pack.index} ({len(pack.points)} points "
                         f"of {pack.nodes} node(s))")
    for position, point in enumerate(pack.points):
        write_json_atomic(point.run_dir / JOB_FILE, pack_job_record(pack, point, position))
    log.info("submitted pack %d (%d points of %d node(s), time limit %s) as Slurm job %s",
             pack.index, len(pack.points), pack.nodes, slurm_time(pack.time_limit_s), pack.job_id)
    return pack.job_id


def write_scripts(packs: Sequence[Pack], sweep_dir: Path, job_name: str) -> list[Path]:
    """``--scripts-only`` with packs: write each pack's script to be submitted by hand
    (:func:`write`, ``by_hand``) and each of its points' ``job.json`` (written, not
    submitted); submit nothing. Returns the packs' scripts, in pack order."""
    paths = []
    for pk in packs:
        paths.append(write(pk, sweep_dir, job_name, by_hand=True))
        for position, point in enumerate(pk.points):
            write_json_atomic(point.run_dir / JOB_FILE,
                              pack_job_record(pk, point, position, "script"))
    return paths


def pack_job_record(pack: Pack, point, position: int, submitted_with: str = "pack") -> dict:
    """A packed point's ``job.json``: its identity, the pack's job id and its position;
    ``submitted_with``: ``pack``, or ``script`` for a pack written to be submitted by hand
    (no job id)."""
    return slurm_job_record(
        point, pack.job_id, submitted_with, time_limit=slurm_time(pack.time_limit_s),
        signal_delay_s=pack.cluster.signal_delay_s,
        pack={"index": pack.index, "position": position, "num_points": len(pack.points),
              "script": f"{PACK_DIR}/{PACK_SCRIPT.format(index=pack.index)}"})


# ---------------------------------------------------------------- at most max_jobs at once


@dataclass
class Unit:
    """What one submission queues: a pack (1 job), or points of one shape (a job each)."""

    num_jobs: int
    submit: Callable[[], list[str]]  # submits; returns the job ids
    job_ids: list[str] | None = None


class SubmitRefused(RuntimeError):
    """sbatch refused a submission while no job of the sweep was queued or running, so that
    waiting for one to end cannot help (:func:`submit_free`): a site limit below the
    submission's ``num_jobs`` (a QOS's jobs per user), the user's other jobs filling it, or
    a refusal of another kind. ``words``: what sbatch said, on one line."""

    def __init__(self, words: str, num_jobs: int) -> None:
        super().__init__(f"sbatch refused {num_jobs} job(s) with none of the sweep's queued: "
                         f"{words}")
        self.words, self.num_jobs = words, num_jobs


#: What :func:`vitfsdp.launch.slurm.sbatch` adds to sbatch's words (a pack's refusal).
_SBATCH_FIX = "; lower cluster.max_jobs to the site's limit"


def sbatch_words(error: BaseException) -> str:
    """sbatch's own words in a refusal (submitit's ``FailedJobError`` holds its stderr, a
    pack's :func:`~vitfsdp.launch.slurm.sbatch` its message around them), on one line."""
    text = str(error).strip()
    if text.startswith("sbatch refused ") and text.endswith(_SBATCH_FIX):
        text = text[:-len(_SBATCH_FIX)].split(": ", 1)[-1]
    return "; ".join(line.strip() for line in text.splitlines() if line.strip()) or repr(error)


def submit_free(units: Sequence[Unit], max_jobs: int | None, num_alive: int) -> int:
    """Submit the next unsubmitted units while ``num_alive`` (jobs of the sweep queued or
    running) plus theirs stays within ``max_jobs`` (None: no limit); a unit larger than the
    limit goes alone. A unit sbatch refuses is submitted again once a job of the sweep has
    ended. Returns the number of units submitted now.

    Raises:
        SubmitRefused: sbatch refused a unit while no job of the sweep was queued or running
            (no end to wait for); the unit stays unsubmitted.
    """
    submitted = 0
    for unit in units:
        if unit.job_ids is not None:
            continue
        if max_jobs is not None and num_alive and num_alive + unit.num_jobs > max_jobs:
            break
        try:
            unit.job_ids = unit.submit()
        except RuntimeError as e:  # the site's limit, reached before ours
            if not num_alive:
                raise SubmitRefused(sbatch_words(e), unit.num_jobs) from e
            log.warning("%s; submitting it again once a job of the sweep has ended", e)
            break
        num_alive += unit.num_jobs
        submitted += 1
    return submitted


def chunks(points: Sequence, max_jobs: int | None) -> list[list]:
    """Points in runs of at most ``max_jobs`` (one job each), in order; all when None."""
    size = max_jobs or max(1, len(points))
    return [list(points[i:i + size]) for i in range(0, len(points), size)]
