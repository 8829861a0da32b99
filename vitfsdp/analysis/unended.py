"""Points of a sweep whose records do not say how they ended (:func:`unended_lines`): the
analysis reads records only, so a point that never started has no row, and a Slurm job that
ended without writing its summary (cancelled while queued, killed) has none until the
sweep, or ``python -m vitfsdp.sweep --status DIR``, records Slurm's end state. Said in a
line each, so that a figure with fewer points than the sweep is not read as the sweep.
"""

from __future__ import annotations

import itertools
import os
import shlex
from collections.abc import Iterable
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from vitfsdp.core.layout import JOB_FILE, SUMMARY_FILE
from vitfsdp.provenance import redact_args
from vitfsdp.records import read_json

#: Hydra's record of a sweep's last command in its directory.
MULTIRUN_FILE = "multirun.yaml"


def unended_lines(sweep_dirs: Iterable[str | os.PathLike]) -> list[str]:
    """One line per sweep directory and kind: its points with a ``job.json`` (started or
    submitted) but no ``summary.json``, with the ``--status`` command that records Slurm's end
    state; and the points of its last sweep command (``multirun.yaml``: the product of its
    swept values, as Hydra's basic sweeper expands them) that no run directory holds, which
    never started. Empty where every point ended."""
    lines = []
    for sweep_dir in map(Path, sweep_dirs):
        jobs = {p.parent: read_json(p) or {} for p in sorted(sweep_dir.glob(f"*/{JOB_FILE}"))}
        open_ = [d for d in jobs if not (d / SUMMARY_FILE).exists()]
        if open_:
            status = shlex.join(["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir)])
            lines.append(f"{len(open_)} point(s) in {sweep_dir} have no end record (queued, "
                         f"running, or ended without one; e.g. {open_[0].name}): they are in "
                         f"no table or figure until {status} records how they ended")
        expected = last_command_points(sweep_dir)
        recorded = [set(j.get("overrides") or []) for j in jobs.values()]
        never = [o for o in expected if not any(set(o) <= r for r in recorded)]
        if never:
            lines.append(f"{len(never)} of the {len(expected)} points of the last sweep command "
                         f"in {sweep_dir} ({MULTIRUN_FILE}) never started (e.g. "
                         f"{' '.join(never[0])}): the sweep in that directory runs them")
    return lines


def last_command_points(sweep_dir: str | os.PathLike) -> list[list[str]]:
    """The points of the last sweep command in ``sweep_dir``: its task overrides
    (``multirun.yaml``) expanded as Hydra's basic sweeper does (every combination of the
    swept values, ``key=value`` each), secret values redacted as ``job.json`` holds them;
    empty where there is no readable ``multirun.yaml`` or an override the parser refuses."""
    try:
        record = yaml.safe_load((Path(sweep_dir) / MULTIRUN_FILE).read_text(encoding="utf-8"))
        task = [str(o) for o in record["hydra"]["overrides"]["task"] or []]
        parsed = OverridesParser.create().parse_overrides(task)
    except Exception:  # noqa: BLE001 - no record, or one the parser refuses: nothing to say
        return []
    choices = []
    for o in parsed:
        key = o.get_key_element()
        values = (list(o.sweep_string_iterator()) if o.is_sweep_override()
                  else [o.get_value_element_as_str()])
        choices.append([f"{key}={v}" for v in values])
    return [redact_args(list(c)) for c in itertools.product(*choices)]
