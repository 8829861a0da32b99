"""Progress of a local sweep: rich bars on a terminal, today's log lines elsewhere."""

from __future__ import annotations

import io
import logging
import time

import pytest
from rich.console import Console

from vitfsdp.progress import SweepProgress, format_eta

W1 = {"step_end": 2, "loss": 6.5, "ips": 40.0, "step_time_s": 0.5, "warmup": True}
W2 = {"step_end": 4, "loss": 6.25, "ips": 50.0, "step_time_s": 0.25, "warmup": False}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _drive(bars: SweepProgress, clock: FakeClock) -> None:
    """One point of two: 4 steps that take 3 s from its start to its end (fake clock)."""
    with bars:
        bars.start_point(0, "[1/2]", "[1/2] strategy=DDP  (2 ranks) -> runs/0")
        bars.window("[1/2]", W1)
        bars.window("[1/2]", W2)
        clock.now = 3.0
        bars.end_point("[1/2] completed in 3 s: 50.0 images/s")


def test_plain_lines_when_not_a_terminal(caplog):
    out = io.StringIO()
    clock = FakeClock()
    bars = SweepProgress([4, 4], [1.0, 1.0], console=Console(file=out), clock=clock)
    assert not bars.live
    with caplog.at_level(logging.INFO, logger="vitfsdp.progress"):
        _drive(bars, clock)
    assert [r.getMessage() for r in caplog.records] == [
        "[1/2] strategy=DDP  (2 ranks) -> runs/0",
        "[1/2]   step 2/4  loss 6.5000  40.0 images/s  (warm-up)",
        "[1/2]   step 4/4  loss 6.2500  50.0 images/s",
        "[1/2] completed in 3 s: 50.0 images/s",
        "sweep: 1/2 points ended, ETA ~0:00:03 (measured: wall time of 1 point)",
    ]
    assert out.getvalue() == ""


def test_bars_on_a_terminal(caplog):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    clock = FakeClock()
    bars = SweepProgress([4, 4], [1.0, None], console=console, clock=clock)
    assert bars.live
    with caplog.at_level(logging.INFO, logger="vitfsdp.progress"):
        _drive(bars, clock)
    text = out.getvalue()
    assert "[1/2] strategy=DDP  (2 ranks) -> runs/0" in text
    assert "images/s  ETA" in text and "50.0 images/s" in text
    assert "sweep" in text and "1/2" in text and "4/4" in text
    # after the point: the point left takes what the first took from start to end (3 s)
    assert "0 running  ETA ~0:00:03 (measured: wall time of 1 point)" in text
    assert not caplog.records  # no log lines under the bars


def test_eta_from_plan_until_a_point_ends():
    bars = SweepProgress([4, 6], [0.5, 2.0], console=Console(file=io.StringIO()))
    assert bars.eta_s() == pytest.approx(4 * 0.5 + 6 * 2.0)
    assert SweepProgress([4], [None], console=Console(file=io.StringIO())).eta_s() is None
    bars.start_point(0, "[1/2]", "start")
    bars.window("[1/2]", W2)  # a measured window, no point ended: still the plan's
    assert bars.eta_s() == pytest.approx(6 * 2.0)
    assert format_eta(3725) == "1:02:05" and format_eta(None) == "-:--:--"


def test_eta_from_measured_wall_time_includes_start_up():
    """Three points of 10 steps at 1 s a step: the first takes 40 s (30 s of start-up), so
    the two left take 80 s, less what the running one has spent; before, the plan's 30 s
    (steps only) is labelled as such."""
    clock = FakeClock()
    bars = SweepProgress([10, 10, 10], [1.0, 1.0, 1.0], console=Console(file=io.StringIO()),
                         clock=clock)
    assert bars.eta_text() == "ETA ~0:00:30 (plan: steps only, no start-up)"
    bars.start_point(0, "[1/3]", "start")
    clock.now = 40.0
    bars.window("[1/3]", {**W2, "step_end": 10, "step_time_s": 1.0})
    bars.end_point("end")
    assert bars.eta_s() == pytest.approx(80.0)
    assert bars.eta_text() == "ETA ~0:01:20 (measured: wall time of 1 point)"
    bars.start_point(1, "[2/3]", "start")
    clock.now = 50.0
    assert bars.eta_s() == pytest.approx(70.0)


def test_eta_scales_each_point_by_its_ranks_and_work():
    """A local sweep's points share the host: a point of 4x the ranks and work is expected
    to take 4x the steps' time and 4x the start-up, not the first points' pace (a 4-node
    point after three 1-node ones was estimated at 19 s and took 96 s)."""
    clock = FakeClock()
    bars = SweepProgress([10, 10], [None, None], console=Console(file=io.StringIO()),
                         clock=clock, work=[(2, 1.0), (8, 4.0)])
    bars.start_point(0, "[1/2]", "start")
    clock.now = 30.0  # 10 s of start-up (5 s a rank), 10 steps of 2 s
    bars.window("[1/2]", {**W2, "step_end": 10, "step_time_s": 2.0})
    bars.end_point("end")
    assert bars.eta_s() == pytest.approx(5.0 * 8 + 10 * 2.0 * 4)
    unscaled = SweepProgress([10, 10], [None, None], console=Console(file=io.StringIO()),
                             clock=FakeClock())
    unscaled.start_point(0, "[1/2]", "start")
    unscaled.clock.now = 30.0
    unscaled.window("[1/2]", {**W2, "step_end": 10, "step_time_s": 2.0})
    unscaled.end_point("end")
    assert unscaled.eta_s() == pytest.approx(30.0)  # without work: the first point's pace


def test_status_table_keeps_a_long_point_label_whole():
    """The differing overrides go last and whole: a label past the old 60-character column
    is never cut mid-key, and the keys every point shares are left out."""
    from pathlib import Path

    from vitfsdp.launch.status import PointState, format_table

    first = ("cluster.shard_group_size=16,fsdp.backward_prefetch=BACKWARD_POST,"
             "fsdp.limit_all_gathers=false,model=vit_huge,nodes=16")
    second = ("cluster.shard_group_size=8,fsdp.backward_prefetch=BACKWARD_PRE,"
              "fsdp.limit_all_gathers=true,model=vit_huge,nodes=16")
    rows = [PointState(Path(f"sweep/3_{first}"), job_id="58_3", state="RUNNING", steps=20),
            PointState(Path(f"sweep/4_{second}"), status="completed")]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["point", "job", "state", "nodes", "step", "ips", "status",
                                "overrides"]
    label = ("cluster.shard_group_size=16 fsdp.backward_prefetch=BACKWARD_POST "
             "fsdp.limit_all_gathers=false")
    assert len(label) > 60 and lines[1].startswith("3 ") and lines[1].endswith(f"  {label}")
    assert "nodes=16" not in lines[2] and lines[2].endswith("limit_all_gathers=true")
    assert lines[-1] == "2 points: 1 RUNNING, 1 completed"


def test_the_breaker_needs_one_reason_in_three_jobs_none_interrupted(tmp_path):
    """Three jobs' points failed before their first window, the node's name aside with one
    reason: the sweep stops submitting. Three points of one pack (one job), a node failure
    (interrupted) or a completed point elsewhere do not stop it."""
    import json
    from pathlib import Path

    from vitfsdp.launch.status import PointState
    from vitfsdp.sweep.slurm_jobs import same_early_failure

    def row(name: str, job: str, reason: str, interrupted: bool = False,
            status: str = "failed") -> PointState:
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "summary.json").write_text(json.dumps(
            {"status": status, "reason": reason, "interrupted": interrupted}))
        return PointState(Path(run_dir), job_id=job, status=status)

    missing = "vitfsdp: cluster.python=/x is not an executable or on PATH on node{}"
    jobs = [row(f"p{i}", f"{40 + i}", missing.format(i)) for i in range(3)]
    assert same_early_failure(jobs) == missing.format(0)
    assert same_early_failure(jobs[:2]) is None
    pack = [row(f"q{i}", "77", missing.format(i)) for i in range(3)]  # one pack: one job
    assert same_early_failure(pack) is None
    node = "its pack, Slurm job {} ended NODE_FAIL before this point started"
    assert same_early_failure([row(f"n{i}", f"{50 + i}", node.format(50 + i), True)
                               for i in range(3)]) is None
    done = row("done", "60", "", status="completed")
    assert same_early_failure([*jobs, done]) is None


def test_a_quiet_point_gets_a_stall_line_once_per_interval(caplog):
    """No window for 5x the longest gap between windows so far (at least the floor): one
    line naming the last step and when it came, then one per interval; news resets it.
    Before: nothing at all while a point hung."""
    clock, wall = FakeClock(), FakeClock()
    wall.now = 1_800_000_000.0
    bars = SweepProgress([100], console=Console(file=io.StringIO()), clock=clock,
                         stall_floor_s=60, wall_clock=wall)
    with caplog.at_level(logging.INFO, logger="vitfsdp.progress"):
        bars.start_point(0, "[1/1]", "[1/1] strategy=DDP")
        clock.now = wall.now = 30  # start-up: 30 s to the first window
        wall.now += 1_800_000_000.0
        assert bars.tick("[1/1]") is None
        bars.window("[1/1]", {**W2, "step_end": 2})
        for step in (4, 6):  # windows 20 s apart: interval max(60, 5 x 20) = 100 s
            clock.now += 20
            wall.now += 20
            bars.window("[1/1]", {**W2, "step_end": step})
        at = time.strftime("%H:%M:%S", time.localtime(wall.now))
        assert bars.stall_interval_s() == 100
        said = []
        for _ in range(250):  # 250 s without news, polled every second
            clock.now += 1
            said += [(clock.now, line) for line in [bars.tick("[1/1]")] if line]
        assert [t for t, _ in said] == [170.0, 270.0]
        assert said[0][1] == (f"[1/1] no progress for 100 s (last step 6/100 at {at}; "
                              "windows so far came at most 20 s apart)")
        assert said[1][1].startswith("[1/1] no progress for 3 min (last step 6/100")
        bars.window("[1/1]", {**W2, "step_end": 8})  # news: quiet again from here
        assert bars.stall_interval_s() == 100  # the stall itself is not a step's pace
        clock.now += 99
        assert bars.tick("[1/1]") is None
    assert [r.levelname for r in caplog.records if "no progress" in r.getMessage()] == \
        ["WARNING", "WARNING"]


def test_a_point_quiet_before_its_first_window_says_it_has_no_step_yet():
    clock = FakeClock()
    bars = SweepProgress([4], console=Console(file=io.StringIO()), clock=clock,
                         stall_floor_s=180)
    bars.start_point(0, "[1/1]", "[1/1] strategy=DDP")
    clock.now = 179
    assert bars.tick("[1/1]") is None
    clock.now = 180
    assert bars.tick("[1/1]").startswith("[1/1] no progress for 3 min (no step yet; started at ")
