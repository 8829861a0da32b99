"""The vitfsdp sweeper's side of a sweep (:func:`run_sweeper`, called by
``hydra_plugins/vitfsdp_launcher``): validate every point, take the sweep directory's lock,
then hand over to Hydra's basic sweeper, whose launcher is :func:`vitfsdp.sweep.run.launch`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from vitfsdp.core.layout import COMMANDS_FILE, LOCK_FILE
from vitfsdp.sweep.compose import _compose_once, validate_sweep
from vitfsdp.sweep.point import SweepDiskError, SweepRefused
from vitfsdp.sweep.report import EXIT_NOT_COMPLETED, EXIT_REFUSED, exit_status
from vitfsdp.sweep.run import MULTIRUN_FILE, _held_locks, take_lock


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
                  for path in (yaml, sweep_dir / LOCK_FILE, sweep_dir / COMMANDS_FILE)}
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
