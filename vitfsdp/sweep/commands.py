"""The command line of ``python -m vitfsdp.sweep`` around the sweep itself:
``--status`` (:func:`status_main`), ``--help`` (:func:`usage`), the short flags
(:data:`FLAGS`) and the signals that end a sweep (:func:`_exit_on_hangup`).
"""

from __future__ import annotations

import argparse
import signal
import textwrap
from collections.abc import Sequence
from pathlib import Path

from vitfsdp.config import GROUPS, group_defaults, group_options
from vitfsdp.launch import flag_help, launcher_flags, resume, secrets, setting_help, status
from vitfsdp.records import STATUSES
from vitfsdp.sweep.report import _remove_secrets, exit_status


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
