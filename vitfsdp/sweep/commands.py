"""The command line of ``python -m vitfsdp.sweep`` around the sweep itself:
``--status`` (:func:`status_main`), ``--help`` (:func:`usage`), the short flags
(:data:`FLAGS`); the signals that end a sweep: :func:`vitfsdp.core.hangup.exit_on_hangup`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from vitfsdp import rundir
from vitfsdp.config import GROUPS, group_defaults, group_options
from vitfsdp.core.layout import COMMANDS_FILE, JOB_FILE
from vitfsdp.launch import (
    STALL_FLOOR_KEY,
    check_stall_floor,
    flag_help,
    launcher_flags,
    resume,
    secrets,
    setting_help,
    status,
)
from vitfsdp.overrides import expand
from vitfsdp.records import STATUSES, read_json, read_jsonl
from vitfsdp.sweep.report import (
    EXIT_INTERRUPTED,
    NOT_SUBMITTED,
    _remove_secrets,
    exit_status,
    next_steps,
    status_command,
)
from vitfsdp.sweep.stall import StallWatch

#: The form of ``--status``, for its refusals.
STATUS_FORM = "python -m vitfsdp.sweep --status SWEEP_DIR [--watch] [--poll-s S]"


class _StatusParser(argparse.ArgumentParser):
    """``--status``'s arguments, in any order; a mistake is refused in one line that says
    the form (exit 2, as argparse)."""

    def error(self, message: str):
        self.exit(2, f"error: --status: {message}; the form is: {STATUS_FORM}\n")


def refused_launcher_value(argv: Sequence[str]) -> str | None:
    """The one-line refusal of a launcher option on the command line that Hydra would take
    with no fix said, or at all (:data:`vitfsdp.launch.STALL_FLOOR_KEY`: a value that is
    not a number, or not above 0: :func:`vitfsdp.launch.check_stall_floor`); None where
    every one is fine. Run before Hydra composes anything."""
    for arg in argv:
        key, eq, value = arg.lstrip("+").partition("=")
        if eq and key == STALL_FLOOR_KEY:
            try:
                check_stall_floor(value)
            except ValueError as e:
                return str(e)
    return None


def is_status(argv: Sequence[str]) -> bool:
    """``argv`` asks for ``--status`` (``--status DIR`` or ``--status=DIR``, anywhere)."""
    return any(a == "--status" or a.startswith("--status=") for a in argv)


def status_main(argv: Sequence[str]) -> int:
    """``--status SWEEP_DIR [--watch] [--poll-s S]`` (in any order; ``--status=SWEEP_DIR``
    too): print the sweep's status table (records and Slurm's queue, and the points of its
    last command with no job yet, :func:`_not_submitted`), recording jobs that ended without
    a summary; ``--watch`` until every point submitted is done. Then a line per kind of point
    that did not complete, with the command that goes on (:func:`next_steps`). A Ctrl-C
    stops only the watch: one line says the jobs keep running and how to follow them again.

    A point of an earlier command that the last command runs again with other environment
    settings (a fix of ``cluster.env``, ``cluster.venv`` or ``cluster.modules`` makes a new
    point) stays in the table as ``superseded``, counted on a line of its own, and counts
    neither in the exit status nor in the commands that go on (:func:`_mark_superseded`;
    every point counts where :data:`COMMANDS_FILE` has no record of the points, as in a
    directory of an older version).

    Returns:
        :func:`exit_status` of the points not superseded (a point not submitted has not
        ended: 3 where no point failed), or :data:`EXIT_INTERRUPTED` after a Ctrl-C."""
    parser = _StatusParser(prog="python -m vitfsdp.sweep", usage=STATUS_FORM)
    parser.add_argument("--status", dest="sweep_dir", type=Path, required=True,
                        metavar="SWEEP_DIR")
    parser.add_argument("--watch", action="store_true", help="refresh until every point is done")
    parser.add_argument("--poll-s", type=float, default=5.0, help="seconds between refreshes")
    args = parser.parse_args(argv)
    sweep_dir = args.sweep_dir
    if not sweep_dir.is_dir():
        parser.error(f"{sweep_dir} is not a directory")
    if not status.point_dirs(sweep_dir) and not _not_submitted(
            sweep_dir, read_jsonl(sweep_dir / COMMANDS_FILE)):
        parser.error(f"{sweep_dir} holds no sweep points (no */job.json or */run.json)")

    def rows_now() -> list[status.PointState]:
        records = read_jsonl(sweep_dir / COMMANDS_FILE)  # once a poll, for both
        rows = [*status.collect(sweep_dir, status.point_dirs(sweep_dir)),
                *_not_submitted(sweep_dir, records)]
        _mark_superseded(sweep_dir, rows, records)
        return rows

    try:
        if args.watch:  # stall lines of running jobs at the default floor (no sweep's option)
            stalls = StallWatch(say=print)

            def on_poll(rows: list[status.PointState]) -> None:  # None: nothing held back
                stalls(rows)

            rows = status.watch(sweep_dir, [], args.poll_s, show=print, rows_of=rows_now,
                                on_poll=on_poll)
        else:
            rows = rows_now()
            for row in rows:
                status.reconcile(row)
            print(status.format_table(rows))
    except KeyboardInterrupt:
        print("interrupted: only the watch stopped; the sweep's jobs keep running; follow "
              f"them again with: {status_command(sweep_dir)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    swept = False
    if all(r.status in STATUSES for r in rows):
        _remove_secrets_unless_swept(sweep_dir)
    elif any(r.status == NOT_SUBMITTED for r in rows):
        swept = _swept(sweep_dir)
    for line in next_steps(sweep_dir, rows, swept):
        print(line)
    return exit_status([{"status": r.status} for r in rows if not r.superseded])


def _last_records(records: Sequence[dict]) -> list[dict]:
    """The records of the last command: the last one, with the records before it of the
    same overrides (a sweep in rounds records each)."""
    if not records:
        return []
    task = records[-1].get("task") or []
    last = []
    for record in reversed(records):
        if record.get("task") != task:
            break
        last.insert(0, record)
    return last


#: The cluster settings that make a job's environment and its submission (the software,
#: the variables, the account), not the training a point measures: a later command's point
#: that differs from an earlier one only in these (the usual day-one fix of a failed sweep:
#: another ``cluster.env``, ``cluster.venv`` or ``cluster.modules``) runs that point again,
#: and supersedes it (:func:`_mark_superseded`). The config hash counts them (another one
#: is a new point, in a run directory of its own).
ENVIRONMENT_FIELDS = ("env", "multi_node_env", "single_node_env", "prepend_env", "modules",
                      "setup_script", "conda_env", "venv", "python", "export_env", "secrets",
                      "secrets_file", "sbcast_env", "sbcast_dir", "sbcast_args", "cache_dir",
                      "miopen_cache_per_job", "check_paths", "account", "partition", "qos",
                      "sbatch_args", "site_sbatch_args", "srun_args")


def _mark_superseded(sweep_dir: Path, rows: Sequence[status.PointState],
                     records: Sequence[dict]) -> None:
    """Mark :attr:`~vitfsdp.launch.status.PointState.superseded` the rows of points of
    earlier commands that the sweep's last command runs again with other environment
    settings: the point's config hash (its ``job.json``'s) is not the last command's, and
    the overrides its command's record expands to for it are those of a point of the last
    command but for :data:`ENVIRONMENT_FIELDS` (:func:`_identities`). A point of an earlier
    command that the last one does not run (a directory that gathers several commands'
    points) is not superseded: it still counts. Nothing is marked where there is no record
    of the last command's points (no :data:`COMMANDS_FILE`; a batch search's, whose points
    are searches) or a row has no config hash to match (hand-made records). ``records``:
    the sweep directory's :data:`COMMANDS_FILE`."""
    last = _last_records(records)
    current = {h for r in last for h in r.get("config_hashes") or []}
    if not current:
        return
    replacing = {identity for r in last for identity in _identities(r).values()}
    earlier: dict[str, frozenset[str]] = {}  # config hash → its point's overrides
    for record in records:
        earlier.update(_identities(record))
    for row in rows:
        try:
            config_hash = (read_json(row.run_dir / JOB_FILE) or {}).get("config_hash")
        except (OSError, ValueError):
            config_hash = None
        row.superseded = (bool(config_hash) and config_hash not in current
                          and earlier.get(config_hash) in replacing)


def _identities(record: dict) -> dict[str, frozenset[str]]:
    """A command's record → each of its points' config hash → the point's overrides (as
    :func:`vitfsdp.overrides.expand` writes them, a leading ``+``, ``++`` or ``~`` dropped)
    but those of :data:`ENVIRONMENT_FIELDS`; empty where its overrides do not expand to as
    many points as it has hashes (a ``glob(...)``). A record with ``points`` (each point's
    hash and overrides, as the sweep ran them) is read as it is, not expanded."""
    if record.get("points"):
        hashes = [p.get("config_hash") for p in record["points"]]
        points = [p.get("overrides") or [] for p in record["points"]]
    else:
        hashes = record.get("config_hashes") or []
        try:
            points = expand(record.get("task") or [])
        except ValueError:
            return {}
        if len(points) != len(hashes):
            return {}
    identities = {}
    for config_hash, overrides in zip(hashes, points, strict=True):
        kept = set()
        for override in overrides:
            key, _, value = override.partition("=")
            key = key.lstrip("+~")
            section, _, field = key.partition(".")
            if section == "cluster" and field.split(".")[0] in ENVIRONMENT_FIELDS:
                continue
            kept.add(f"{key}={value}")
        identities[config_hash] = frozenset(kept)
    return identities


def _not_submitted(sweep_dir: Path, records: Sequence[dict]) -> list[status.PointState]:
    """The points of the sweep's last command (``records``, its :data:`COMMANDS_FILE`:
    :func:`_last_records`) that no run directory's ``job.json`` holds, matched by config
    hash as a rerun matches them: a row each, status :data:`NOT_SUBMITTED`, named as its
    run directory will be: as the command's record names it (``points``), else where the
    command's overrides expand to as many points, else by its place in the sweep."""
    last = _last_records(records)
    hashes = list(dict.fromkeys(h for r in last for h in r.get("config_hashes") or []))
    if not hashes:
        return []
    started = {(read_json(path) or {}).get("config_hash")
               for path in sweep_dir.glob(f"*/{JOB_FILE}")}
    if all(h in started for h in hashes):
        return []
    recorded = {p.get("config_hash"): p.get("run_dir") for r in last
                for p in r.get("points") or []}
    names = ([recorded[h] for h in hashes] if all(recorded.get(h) for h in hashes)
             else _point_names(last[-1].get("task") or [], len(hashes)))
    return [status.PointState(run_dir=sweep_dir / name, status=NOT_SUBMITTED)
            for h, name in zip(hashes, names, strict=True) if h not in started]


def _point_names(task: Sequence[str], num_points: int) -> list[str]:
    """The run directory names of a sweep's points (``<num>_<swept overrides>``, as
    ``conf/config.yaml``'s ``hydra.sweep.subdir`` names them) from its command's overrides;
    the numbers alone where they do not expand to ``num_points`` points (a ``glob(...)``,
    or a subdir of the user's)."""
    try:
        points = expand(task)
    except ValueError:
        points = []
    if len(points) != num_points:
        return [str(i) for i in range(num_points)]
    excluded = ["data.path", "hydra.sweep.dir", *rundir.constant_keys(points)]
    return [f"{i}_{rundir.run_dirname(p, excluded)}" for i, p in enumerate(points)]


def _swept(sweep_dir: Path) -> bool:
    """A sweep works in ``sweep_dir`` now (it holds the lock, and submits its points)."""
    try:
        resume.SweepLock(sweep_dir).acquire().release()
    except RuntimeError:
        return True
    except OSError:  # no lock to take here: no sweep can hold it either
        return False
    return False


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
  --status SWEEP_DIR    the sweep's status table (records and Slurm's queue; points not
                        submitted yet too), the command that goes on, then exit
  --watch               with --status: refresh until every point submitted is done
  --poll-s S            with --status --watch: seconds between refreshes (5)

The launcher's settings (the default shown; change the value after =):
{settings}

Config groups (group=option); a group not named takes its default, so a sweep that names
none runs {defaults}:
{groups}

Exit status (--status too): 0 every point completed, 1 some point ended without completing
(its summary.json says why), 2 refused before launch (nothing run or queued), 3 no point
failed but some have not ended (queued, running, --detach, --scripts-only, cluster.max_jobs),
130 interrupted (Ctrl-C; one line says what was recorded and what runs on), 129/143 stopped
by SIGHUP/SIGTERM (as Ctrl-C; the line also in the log). --status leaves
out the points that the last command ran again with other environment settings (superseded).
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
