"""Stall lines for the Slurm jobs a sweep waits on (vitfsdp.sweep.stall.StallWatch): only a
local sweep said 'no progress for ...' of a point that hangs; a Slurm sweep showed its table
unchanged until train.timeout_s ended the point. The watch reads the rows --status reads
(steps from metrics.jsonl, Slurm's state and elapsed time) at each poll; here the rows and
the clock are set by hand."""

from __future__ import annotations

import os
from pathlib import Path

from vitfsdp.launch.status import PointState, SlurmJob
from vitfsdp.progress import STALL_FACTOR
from vitfsdp.sweep.stall import StallWatch


class Clock:
    """Seconds since the epoch, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _row(num: int, step: int, state: str = "RUNNING", elapsed_s: int | None = 10,
         status: str | None = None) -> PointState:
    return PointState(run_dir=Path(f"/sweep/{num}_nodes={num + 1}"), job_id=str(100 + num),
                      state=state, nodelist="vnode1", step=step, steps=50, status=status,
                      own=SlurmJob(state, elapsed_s=elapsed_s),
                      overrides=[f"nodes={num + 1}", "model=vit_tiny"])


def test_a_running_point_that_stops_showing_windows_gets_a_line_per_interval():
    clock, said = Clock(), []
    watch = StallWatch(floor_s=60, say=said.append, clock=clock)
    assert watch([_row(0, 0, elapsed_s=30), _row(1, 0, state="PENDING")]) == []
    clock.now += 20  # its first window, 50 s after its job started: a start-up of 50 s
    assert watch([_row(0, 2), _row(1, 0, state="PENDING")]) == []
    assert watch.longest_startup_s == 50
    for step in (4, 6):  # windows 10 s apart
        clock.now += 10
        assert watch([_row(0, step), _row(1, 0, state="PENDING")]) == []
    assert watch.longest_gap_s == 10 and watch.interval_s(6) == 60  # the floor: 5 x 10 < 60
    clock.now += 59
    assert watch([_row(0, 6), _row(1, 0, state="PENDING")]) == []
    clock.now += 2
    (line,) = watch([_row(0, 6), _row(1, 0, state="PENDING")])
    assert line.startswith("point 0 (nodes=1, Slurm job 100 on vnode1): no progress for 61 s "
                           "(last step 6/50 at "), line
    assert line.endswith("; windows so far came at most 10 s apart)"), line
    assert said == [line]
    clock.now += 30  # within the next interval: nothing
    assert watch([_row(0, 6)]) == []
    clock.now += 200  # 4 intervals on: one line, not one per interval missed
    assert len(watch([_row(0, 6)])) == 1 and len(said) == 2


def test_the_interval_follows_the_slowest_window_and_start_up_seen():
    clock = Clock()
    watch = StallWatch(floor_s=10, clock=clock)
    watch([_row(0, 0, elapsed_s=None)])  # no sacct: its start-up is not measured
    clock.now += 100
    watch([_row(0, 2)])
    assert watch.longest_startup_s == 0
    clock.now += 40
    watch([_row(0, 4)])
    assert watch.interval_s(4) == STALL_FACTOR * 40
    assert watch.interval_s(0) == 10  # before a first window: start-ups (none measured)
    # a point seen before its first window gets the start-up line
    watch([_row(0, 4), _row(1, 0, elapsed_s=5)])
    clock.now += 6
    lines = watch([_row(0, 4), _row(1, 0)])
    assert lines == ["point 1 (nodes=2, Slurm job 101 on vnode1): no progress for 11 s (no "
                     f"step yet; started at {_hms(clock.now - 11)})"], lines


def test_a_hang_that_ended_does_not_lengthen_the_next_wait_and_ended_points_are_let_go():
    clock, said = Clock(), []
    watch = StallWatch(floor_s=10, say=said.append, clock=clock)
    watch([_row(0, 0, elapsed_s=1)])
    clock.now += 1
    watch([_row(0, 2)])
    clock.now += 30  # a stall line, then the window comes
    assert len(watch([_row(0, 2)])) == 1
    clock.now += 1
    watch([_row(0, 4)])
    assert watch.longest_gap_s == 0  # the 31 s with a line said are not a window's gap
    clock.now += 100
    assert watch([_row(0, 4, status="timeout")]) == [] and watch.seen == {}
    assert watch([_row(0, 4, state="COMPLETING")]) == []


def _hms(seconds: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(seconds))


def test_a_point_first_seen_mid_run_is_quiet_since_its_last_window_not_its_job_start(tmp_path):
    """--status --watch on a sweep whose job has run 2 h (windows every 60 s): the point's
    quiet time starts at its last window (metrics.jsonl's modification time), or where that
    cannot be read when it was first seen; before, at the job's start: 'no progress for 2 h
    0 min' at the second poll."""
    clock, said = Clock(), []
    watch = StallWatch(floor_s=180, say=said.append, clock=clock)
    written = _row(1, 500, elapsed_s=7200)
    written.run_dir = tmp_path / "1_nodes=2"  # its run directory's name numbers the point
    written.run_dir.mkdir()
    (written.run_dir / "metrics.jsonl").write_text("{}\n")
    os.utime(written.run_dir / "metrics.jsonl", (clock.now - 50, clock.now - 50))
    assert watch([_row(0, 500, elapsed_s=7200), written]) == []
    clock.now += 30  # the next poll, the next window not yet written
    assert watch([_row(0, 500, elapsed_s=7230), written]) == [] and said == []
    clock.now += 110  # 190 s after its last window, 140 s after point 0 was first seen
    (line,) = watch([_row(0, 500, elapsed_s=7340), written])
    assert line.startswith("point 1 (nodes=2, Slurm job 101 on vnode1): no progress for 3 min "
                           f"(last step 500/50 at {_hms(clock.now - 190)}"), line
    clock.now += 50
    (line,) = watch([_row(0, 500, elapsed_s=7390), written])
    assert line.startswith("point 0 (nodes=1, Slurm job 100 on vnode1): no progress for 3 min "
                           f"(last step 500/50 seen at {_hms(clock.now - 190)}"), line


def test_windows_older_than_the_job_are_an_earlier_attempts(tmp_path):
    """A requeued job whose metrics.jsonl is from the attempt before: quiet since the job
    started (sacct), not since that file was written."""
    clock = Clock()
    watch = StallWatch(floor_s=60, clock=clock)
    row = _row(0, 20, elapsed_s=40)
    row.run_dir = tmp_path
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    os.utime(tmp_path / "metrics.jsonl", (clock.now - 3600, clock.now - 3600))
    watch([row])
    assert watch.seen[tmp_path].at == clock.now - 40
