"""Stall lines for the Slurm jobs a sweep waits on (:class:`StallWatch`), as a local sweep's
progress says them (:meth:`vitfsdp.progress.SweepProgress.tick`): a point whose job (or pack
step) runs but shows no progress (no new window in its ``metrics.jsonl``) for a quiet
interval gets a line, once per interval: ``point 3 (nodes=2 strategy=FULL_SHARD, Slurm job
123 on vnode[2-3]): no progress for 4 min (last step 12/100 at 21:04:10; windows so far came
at most 40 s apart)``, so that a user back at the terminal tells a hang from a slow point
before ``train.timeout_s`` ends it.

The interval is :data:`~vitfsdp.progress.STALL_FACTOR` times the longest gap between two
windows of a point seen so far in the sweep (before a point's first window: the longest
start-up seen, from a job's start, as sacct's elapsed time gives it, to its first window), at
least ``hydra.launcher.stall_floor_s``. The records are read at the sweep's polls
(``cluster.poll_s`` apart): a gap is measured up to one poll longer than it was. A point
first seen with windows (``--status --watch`` started on a running sweep, or a job an
earlier sweep left running) is quiet since its last window was written (``metrics.jsonl``'s
modification time), else since it was first seen, not since its job started.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vitfsdp.core.layout import METRICS_FILE
from vitfsdp.launch import status
from vitfsdp.progress import STALL_FACTOR, STALL_FLOOR_S, format_quiet


@dataclass
class _Seen:
    """What the watch last saw of a running point."""

    step: int  # the last window's step_end (0: none yet)
    at: float  # when that was seen (before a window: when the job started), s since epoch
    measured: bool  # ``at`` is when the news came (not when the watch first saw the point)
    lines: int = 0  # stall lines said since that news


def _first_seen(row: status.PointState, now: float) -> _Seen:
    """A running point the watch sees for the first time at ``now`` (s since the epoch):
    before its first window, quiet since its job started where sacct says when; with
    windows, since its last one was written (``metrics.jsonl``'s modification time, not
    before the job started: an earlier attempt's windows), else since ``now`` (a sweep's
    ``--status --watch`` started mid-run, or a job an earlier sweep left running)."""
    elapsed = row.own.elapsed_s if row.own is not None else None
    started = now - elapsed if elapsed else None
    if not row.step:
        return _Seen(0, started or now, started is not None)
    try:
        written = min(now, (row.run_dir / METRICS_FILE).stat().st_mtime)
    except OSError:
        return _Seen(row.step, now, False)
    return _Seen(row.step, max(written, started or written), True)


class StallWatch:
    """Called with the status rows at each poll (:func:`vitfsdp.launch.status.watch`'s
    ``on_poll``); returns the stall lines due, and hands each to ``say``.

    Args:
        floor_s: the shortest quiet interval before a stall line, s.
        say: what is done with a line (the sweep logs it as a warning).
        clock: seconds since the epoch (tests pass their own).
    """

    def __init__(self, floor_s: float = STALL_FLOOR_S,
                 say: Callable[[str], object] = lambda line: None,
                 clock: Callable[[], float] = time.time) -> None:
        self.floor_s, self.say, self.clock = floor_s, say, clock
        self.seen: dict[Path, _Seen] = {}
        self.longest_gap_s = self.longest_startup_s = 0.0

    def __call__(self, rows: Sequence[status.PointState]) -> list[str]:
        now, lines = self.clock(), []
        for (num, label), row in zip(status.labels(rows), rows, strict=True):
            if row.status is not None or row.state != "RUNNING" or not row.job_id:
                self.seen.pop(row.run_dir, None)
                continue
            named = f"{label}, " if label and len(rows) > 1 else ""  # one: the table names it
            line = self._poll(row, now, f"point {num} ({named}Slurm job "
                              f"{row.step_id or row.job_id} on {row.nodelist})")
            if line:
                self.say(line)
                lines.append(line)
        return lines

    def _poll(self, row: status.PointState, now: float, tag: str) -> str | None:
        """The point's stall line where one is due at ``now``; else None (news noted)."""
        seen = self.seen.get(row.run_dir)
        if seen is None:
            self.seen[row.run_dir] = _first_seen(row, now)
            return None
        if row.step != seen.step:
            self._news(seen, row.step, now)
            return None
        return self._stall(row, seen, now, tag)

    def _news(self, seen: _Seen, step: int, now: float) -> None:
        """A new window: the gap since the last news counts towards the interval, unless a
        stall line was said in it (a hang that ended does not lengthen the next wait)."""
        if seen.measured and not seen.lines:
            gap = now - seen.at
            if seen.step:
                self.longest_gap_s = max(self.longest_gap_s, gap)
            else:
                self.longest_startup_s = max(self.longest_startup_s, gap)
        seen.step, seen.at, seen.measured, seen.lines = step, now, True, 0

    def interval_s(self, step: int) -> float:
        """Seconds a point at ``step`` (0: before its first window) may stay quiet before a
        stall line: :data:`STALL_FACTOR` x the longest gap (start-up) seen, at least the
        floor."""
        seen = self.longest_gap_s if step else self.longest_startup_s
        return max(self.floor_s, STALL_FACTOR * seen)

    def _stall(self, row: status.PointState, seen: _Seen, now: float, tag: str) -> str | None:
        quiet, interval = now - seen.at, self.interval_s(row.step)
        if quiet < interval * (seen.lines + 1):
            return None
        seen.lines = int(quiet // interval)
        at = time.strftime("%H:%M:%S", time.localtime(seen.at))
        if not row.step:
            last = f"no step yet; {'started' if seen.measured else 'seen running'} at {at}"
            took = self.longest_startup_s
            more = f"; start-ups so far took up to {format_quiet(took)}" if took else ""
        else:
            steps = f"/{row.steps}" if row.steps else ""
            last = f"last step {row.step}{steps} {'at' if seen.measured else 'seen at'} {at}"
            gap = self.longest_gap_s
            apart = "less than 1 s" if gap < 1 else f"at most {gap:.{1 if gap < 10 else 0}f} s"
            more = f"; windows so far came {apart} apart" if gap else ""
        return f"{tag}: no progress for {format_quiet(quiet)} ({last}{more})"
