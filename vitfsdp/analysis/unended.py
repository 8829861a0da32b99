"""Points of a sweep whose records do not say how they ended (:func:`unended_lines`): the
analysis reads records only, so a point that never started has no row, and a Slurm job that
ended without writing its summary (cancelled while queued, killed) has none until the
sweep, or ``python -m vitfsdp.sweep --status DIR``, records Slurm's end state. Said in a
line each, so that a figure with fewer points than the sweep is not read as the sweep.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from vitfsdp.core.layout import COMMANDS_FILE, JOB_FILE, SUMMARY_FILE
from vitfsdp.records import read_json, read_jsonl


def unended_lines(sweep_dirs: Iterable[str | os.PathLike]) -> list[str]:
    """One line per sweep directory and kind: its points with a ``job.json`` (started or
    submitted) but no ``summary.json``, with the ``--status`` command that records Slurm's end
    state; and the points of its last sweep command that no run directory holds, which never
    started (the config hashes the sweep recorded in :data:`COMMANDS_FILE`, matched as a
    rerun matches them; nothing said of directories from before that record). Empty where
    every point ended."""
    lines = []
    for sweep_dir in map(Path, sweep_dirs):
        jobs = {p.parent: read_json(p) or {} for p in sorted(sweep_dir.glob(f"*/{JOB_FILE}"))}
        open_ = [d for d in jobs if not (d / SUMMARY_FILE).exists()]
        if open_:
            status = shlex.join(["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir)])
            lines.append(f"{len(open_)} point(s) in {sweep_dir} have no end record (queued, "
                         f"running, or ended without one; e.g. {open_[0].name}): they are in "
                         f"no table or figure until {status} records how they ended")
        commands = read_jsonl(sweep_dir / COMMANDS_FILE)
        expected = (commands[-1].get("config_hashes") or []) if commands else []
        started = {j.get("config_hash") for j in jobs.values()}
        never = [h for h in dict.fromkeys(expected) if h not in started]
        if never:
            lines.append(f"{len(never)} of the {len(set(expected))} points of the last sweep "
                         f"command in {sweep_dir} never started: the same command, in that "
                         "directory, runs them")
    return lines
