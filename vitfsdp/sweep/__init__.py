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

    python -m vitfsdp.sweep --status SWEEP_DIR [--watch] [--poll-s S]

shows the table later (``--watch``: until every point submitted is done; the flags in any
order), with the points of the sweep's last command not yet submitted, and a line per kind
of point that did not complete with the command that goes on.

The package reads in the order a sweep runs:

- :mod:`~vitfsdp.sweep.sweeper`: the vitfsdp sweeper (:func:`run_sweeper`) validates every
  point and takes the sweep directory's lock before Hydra's basic sweeper writes anything;
- :mod:`~vitfsdp.sweep.compose`: the overrides expanded into points, each composed and
  validated (:func:`validate_sweep`, :func:`plan`), by the checks of
  :mod:`~vitfsdp.sweep.check`;
- :mod:`~vitfsdp.sweep.run`: the launcher's :func:`launch`: the points to run
  (:mod:`~vitfsdp.sweep.choose`: resume, the plan's feasibility), run here
  (:mod:`~vitfsdp.sweep.local`) or as Slurm jobs, watched until done
  (:mod:`~vitfsdp.sweep.slurm_jobs`), then the end report (:mod:`~vitfsdp.sweep.report`);
- :mod:`~vitfsdp.sweep.commands`: ``--status``, ``--help`` and the flags, around :func:`main_cli`
  (here, so that Hydra names the task ``sweep``).

:mod:`~vitfsdp.sweep.point` holds what they share: :class:`Point` and the refusals.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import hydra
from omegaconf import DictConfig

from vitfsdp.config import CONF_DIR, cli, register_configs
from vitfsdp.core.hangup import exit_on_hangup
from vitfsdp.records import disk_error
from vitfsdp.sweep.check import SIGNAL_MARGIN_S
from vitfsdp.sweep.choose import select
from vitfsdp.sweep.commands import (
    FLAG_HELP,
    FLAGS,
    STATUS_FORM,
    USAGE,
    is_status,
    refused_launcher_value,
    status_main,
    usage,
)
from vitfsdp.sweep.compose import plan, validate_sweep
from vitfsdp.sweep.local import run_one, stop_signal
from vitfsdp.sweep.point import (
    Point,
    SweepDiskError,
    SweepInterrupted,
    SweepRefused,
    SweepStopped,
    log,
)
from vitfsdp.sweep.report import (
    EXIT_COMPLETED,
    EXIT_INTERRUPTED,
    EXIT_NOT_COMPLETED,
    EXIT_NOT_ENDED,
    EXIT_REFUSED,
    analysis_command,
    exit_status,
    status_command,
)
from vitfsdp.sweep.run import MULTIRUN_FILE, launch, take_lock, where_line
from vitfsdp.sweep.slurm_jobs import launch_slurm
from vitfsdp.sweep.sweeper import run_sweeper

__all__ = [
    "EXIT_COMPLETED", "EXIT_INTERRUPTED", "EXIT_NOT_COMPLETED", "EXIT_NOT_ENDED",
    "EXIT_REFUSED", "FLAGS", "FLAG_HELP", "MULTIRUN_FILE", "SIGNAL_MARGIN_S", "USAGE",
    "Point", "SweepDiskError", "SweepInterrupted", "SweepRefused", "SweepStopped",
    "analysis_command", "exit_status", "launch", "launch_slurm", "log", "main", "main_cli",
    "plan", "run_one", "run_sweeper", "select", "status_command", "status_main", "take_lock",
    "usage", "validate_sweep", "where_line",
]

register_configs()


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="sweep")
def main(dcfg: DictConfig) -> None:
    """Reached only if Hydra runs the task in-process, which the vitfsdp launcher never does."""
    raise RuntimeError("vitfsdp.sweep runs points through the vitfsdp launcher only")


def main_cli(argv: Sequence[str]) -> int:
    """``python -m vitfsdp.sweep``: ``--status`` (named anywhere, :func:`is_status`),
    ``--help``, or the sweep (through Hydra, after :func:`vitfsdp.config.cli`'s checks);
    returns the exit status. ``--watch`` or ``--poll-s`` without ``--status`` is refused in
    one line (:data:`EXIT_REFUSED`), as is a launcher option's value Hydra would take with
    no fix said (:func:`vitfsdp.sweep.commands.refused_launcher_value`)."""
    if is_status(argv):
        try:
            return status_main(argv)
        except OSError as e:
            if not disk_error(e):
                raise
            print(f"error: --status could not record what Slurm says ({disk_error(e)}); "
                  "free space and run it again", file=sys.stderr)
            return EXIT_NOT_COMPLETED
    if any(a in ("--watch", "--poll-s") or a.startswith("--poll-s=") for a in argv):
        print(f"error: --watch and --poll-s go with --status; the form is: {STATUS_FORM}",
              file=sys.stderr)
        return EXIT_REFUSED
    if "--help" in argv or "-h" in argv:
        print(usage())
        return 0
    if refused := refused_launcher_value(argv):
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_REFUSED
    exit_on_hangup()  # a local point's processes are stopped on the way out; Slurm jobs run on
    # the flags become Hydra overrides after everything else (argparse wants -m first)
    sys.argv = [sys.argv[0], *(a for a in argv if a not in FLAGS),
                *(FLAGS[a] for a in argv if a in FLAGS)]
    try:
        cli(main, config_name="sweep")
    except KeyboardInterrupt as e:  # SweepInterrupted says what was recorded; else nothing ran
        print(str(e) or "interrupted: nothing was run or queued", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SweepStopped:  # its line is printed
        raise
    except SystemExit as e:  # SIGTERM, SIGHUP outside the points (vitfsdp.core.hangup)
        name = stop_signal(e.code)
        if name is not None:
            print(f"interrupted by {name}: nothing was run or queued", file=sys.stderr)
        raise
    return EXIT_COMPLETED
