"""A local sweep's progress says that a point resumed, once, and starts its bar there
(:meth:`vitfsdp.progress.SweepProgress.resumed`, fed by
:class:`vitfsdp.launch.local.AttemptWindows`' resume record)."""

from __future__ import annotations

import io
import logging

from rich.console import Console

from vitfsdp.progress import SweepProgress

RESUME = {"resumed_from_step": 16, "attempt": 1}
W = {"step_end": 20, "loss": 2.5, "ips": 1640.0, "step_time_s": 0.1, "warmup": True,
     "attempt": 1}
LINE = ("[1/2]   resumed from checkpoint step 16 (attempt 1, counted from 0: steps 1-16 ran in "
        "earlier attempts)")


def test_plain_lines_say_the_resume_then_this_attempts_windows(caplog):
    bars = SweepProgress([60, 60], console=Console(file=io.StringIO()))
    with caplog.at_level(logging.INFO, logger="vitfsdp.progress"), bars:
        bars.start_point(0, "[1/2]", "[1/2] strategy=DDP  (2 ranks) -> runs/0")
        bars.window("[1/2]", RESUME)
        assert bars.done_steps[0] == 16
        bars.window("[1/2]", W)
    assert [r.getMessage() for r in caplog.records] == [
        "[1/2] strategy=DDP  (2 ranks) -> runs/0", LINE,
        "[1/2]   step 20/60  loss 2.5000  1640.0 images/s  (warm-up)"]
    assert bars.measured_step_s == []  # the resume record is no window


def test_the_bar_starts_at_the_checkpoint_step():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    bars = SweepProgress([60, 60], console=console)
    with bars:
        bars.start_point(0, "[1/2]", "[1/2] strategy=DDP")
        bars.window("[1/2]", RESUME)
        assert bars.bars.tasks[1].completed == 16
    assert LINE in out.getvalue()
