"""What a local sweep shows while it runs: rich progress bars on a terminal, log lines elsewhere.

On a terminal (``Console().is_terminal``) a sweep bar (points done of the sweep, the point
running, ETA) and a bar of the running point (steps, images/s, ETA) are drawn with rich
(https://rich.readthedocs.io/en/stable/progress.html). Elsewhere (CI, Slurm logs, pipes) each
event is one ``logging`` line, the same lines as before bars existed.

The sweep's ETA is an estimate, and says what it rests on:

- once a point has ended, its measured wall time (from its start to its end: process
  start-up, model build and wrapping, warm-up and every step) is split into a start-up
  (wall time − steps × its median step time) and steps; each point not yet ended is expected
  to take the median start-up of the ended points plus its steps at the median step time of
  every window measured so far, less what the running point has already spent
  (``ETA ~0:02:41 (measured: wall time of 3 points)``). Where the points' ``work`` is given
  (a local sweep: every rank shares this host's cores, so a step's wall time grows with
  ranks × local batch × FLOPs an image), the step time is the median measured seconds per
  unit of work times the point's work, and the start-up the median per rank times its
  ranks: a sweep whose last points have 4x the ranks is not estimated at its first points'
  pace;
- before that, the step time ``cluster.time=auto`` sizes the points by
  (:func:`vitfsdp.plan.sizing_step`: the plan's, or a slower published one) times their
  steps, which leaves out start-up (``ETA ~0:00:08 (plan: steps only, no start-up)``);
  ``-:--:--`` where the plan has none.

On a terminal the ETA is in the sweep bar; elsewhere one line after each point.

A point that shows no progress (no new window record, no resume) for a quiet interval gets a
stall line, once per interval (:meth:`SweepProgress.tick`): ``[2/3] no progress for 3 min
(last step 12/100 at 21:04:10; windows so far came at most 4 s apart)``, so that a user
back at the terminal tells a hang from a slow point. The interval is
:data:`STALL_FACTOR` times the longest gap between two windows of one point seen so far in
the sweep (before the point's first window: the longest start-up, from its start to its
first window, of the points before it), and at least :data:`STALL_FLOOR_S`, which a sweep's
``hydra.launcher.stall_floor_s=S`` sets (a site whose step or first compile takes minutes:
more; earlier lines: less).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

log = logging.getLogger(__name__)


#: The shortest quiet interval before a stall line, s (assumed, not measured): the default
#: ``train.timeout_s`` (600 s) ends a hung collective within 10 min, so 3 min gives a user
#: two or three lines before the point is recorded ``timeout``, while a window of a healthy
#: point (``train.log_every`` steps: seconds on this host's tiny models, tens of seconds for
#: a large ViT) never comes near it. A sweep sets its own: ``hydra.launcher.stall_floor_s``
#: (:attr:`vitfsdp.launch.LaunchOptions.stall_floor_s`, whose default is this).
STALL_FLOOR_S = 180.0
#: How many times the longest gap seen so far a point may stay quiet before a stall line: a
#: window that takes a few times the slowest before it (a garbage collection, a slow
#: all-gather on a shared network) is not a hang; one that takes 5x is worth a line.
STALL_FACTOR = 5.0


def format_quiet(seconds: float) -> str:
    """``45 s``, ``3 min``, ``2 h 5 min`` (rounded down): how long a point has been quiet."""
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def format_eta(seconds: float | None) -> str:
    """``h:mm:ss`` of ``seconds``; ``-:--:--`` where unknown."""
    if seconds is None:
        return "-:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class SweepProgress:
    """Progress of a local sweep of ``num_points`` points of ``steps`` steps each (a list).

    Args:
        steps: each point's ``train.steps``, in running order.
        predicted_step_s: each point's predicted seconds per step (``None`` where the plan
            has none); used for the ETA until a window is measured.
        console: where bars go; default: rich's stdout console. Bars only where it is a
            terminal, else log lines.
        logger: where the plain lines go (the sweep's own logger, so they read as before).
        clock: seconds of a monotonic clock (``time.monotonic``), for each point's wall time.
        stall_floor_s: the shortest quiet interval before a stall line (:meth:`tick`), s.
        wall_clock: seconds since the epoch (``time.time``): when the last step came, as
            a stall line shows it (this host's local time).
    """

    def __init__(self, steps: list[int], predicted_step_s: list[float | None] | None = None,
                 console: Console | None = None, logger: logging.Logger = log,
                 clock: Callable[[], float] = time.monotonic,
                 work: list[tuple[int, float]] | None = None,
                 stall_floor_s: float = STALL_FLOOR_S,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.stall_floor_s, self.wall_clock = stall_floor_s, wall_clock
        self.longest_gap_s = 0.0  # longest gap between two windows of one point so far
        self.gap_seen = False  # a gap between two windows was measured
        self.longest_startup_s = 0.0  # longest start of a point to its first window so far
        self.last_progress: float | None = None  # clock() at the running point's last news
        self.last_step: tuple[int, float] | None = None  # (step, wall_clock()) of it
        self.stall_lines = 0  # stall lines said since the last news
        self.work = work  # each point's (ranks, relative work of a step), for the ETA
        self.log = logger
        self.console = console or Console()
        self.live = self.console.is_terminal
        self.steps = steps
        self.predicted = predicted_step_s or [None] * len(steps)
        self.measured_step_s: list[float] = []
        self.point_step_s: list[list[float]] = [[] for _ in steps]  # each point's windows
        self.wall_s: list[float | None] = [None] * len(steps)  # each ended point's wall time
        self.clock = clock
        self.started_at: float | None = None  # clock() at the running point's start
        self.done_steps = [0] * len(steps)
        self.index = 0
        self.bars: Progress | None = None
        if self.live:
            self.bars = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                                 console=self.console, transient=False)
            self.sweep_task = self.bars.add_task("sweep", total=len(steps), info="")
            self.point_task = self.bars.add_task("point", total=1, info="", visible=False)

    def __enter__(self) -> SweepProgress:
        if self.bars:
            self.bars.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bars:
            self.bars.stop()

    def eta_s(self) -> float | None:
        """Seconds left in the sweep (module docstring), ``None`` where nothing predicts it."""
        if any(w is not None for w in self.wall_s):
            return self._measured_eta_s()
        left = [s - d for s, d in zip(self.steps, self.done_steps, strict=True)]
        if any(p is None for p, n in zip(self.predicted, left, strict=True) if n):
            return None
        return sum(n * p for p, n in zip(self.predicted, left, strict=True) if n)

    def eta_text(self) -> str:
        """``ETA ~h:mm:ss (<what it rests on>)``, or ``ETA -:--:--`` where nothing predicts it."""
        eta = self.eta_s()
        if eta is None:
            return f"ETA {format_eta(None)}"
        ended = sum(w is not None for w in self.wall_s)
        basis = (f"measured: wall time of {ended} point{'s' * (ended > 1)}" if ended
                 else "plan: steps only, no start-up")
        return f"ETA ~{format_eta(eta)} ({basis})"

    def _measured_eta_s(self) -> float:
        if self.work is not None:
            return self._scaled_eta_s()
        step_s = statistics.median(self.measured_step_s) if self.measured_step_s else 0.0
        startups = [w - n * (statistics.median(own) if own else step_s)
                    for w, n, own in zip(self.wall_s, self.steps, self.point_step_s, strict=True)
                    if w is not None]
        startup_s = max(statistics.median(startups), 0.0)
        left = 0.0
        for i, (n, wall) in enumerate(zip(self.steps, self.wall_s, strict=True)):
            if wall is None:
                expected = startup_s + n * step_s
                if i == self.index and self.started_at is not None:  # the running point
                    expected -= self.clock() - self.started_at
                left += max(expected, 0.0)
        return left

    def _scaled_eta_s(self) -> float:
        """The measured ETA with each point's step time and start-up scaled by its work and
        ranks (``work``; module docstring)."""
        per_work = [statistics.median(own) / max(w, 1e-30)
                    for own, (_, w) in zip(self.point_step_s, self.work, strict=True) if own]
        rate = statistics.median(per_work) if per_work else 0.0
        startups = [(wall - n * (statistics.median(own) if own else 0.0)) / max(ranks, 1)
                    for wall, n, own, (ranks, _) in zip(self.wall_s, self.steps,
                                                         self.point_step_s, self.work,
                                                         strict=True) if wall is not None]
        startup_per_rank = max(statistics.median(startups), 0.0)
        left = 0.0
        for i, (n, wall, (ranks, w)) in enumerate(zip(self.steps, self.wall_s, self.work,
                                                       strict=True)):
            if wall is None:
                expected = startup_per_rank * ranks + n * rate * w
                if i == self.index and self.started_at is not None:  # the running point
                    expected -= self.clock() - self.started_at
                left += max(expected, 0.0)
        return left

    def start_point(self, index: int, tag: str, line: str) -> None:
        """Point ``index`` (0-based) starts; ``line`` is its plain log line."""
        self.index = index
        self.started_at = self.clock()
        self.last_progress, self.last_step, self.stall_lines = self.started_at, None, 0
        if not self.bars:
            self.log.info("%s", line)
            return
        self.bars.console.print(line, markup=False, highlight=False)
        self.bars.update(self.point_task, description=tag, total=self.steps[index],
                         completed=0, info="", visible=True)
        self._update_sweep()

    def window(self, tag: str, w: dict) -> None:
        """A window record of the running point arrived, or (``resumed_from_step`` in it:
        :class:`vitfsdp.launch.local.AttemptWindows`) the point resumed from a checkpoint."""
        if "resumed_from_step" in w:
            self.resumed(tag, w["resumed_from_step"], w.get("attempt"))
            return
        steps = self.steps[self.index]
        self.done_steps[self.index] = w["step_end"]
        self._news(w["step_end"])
        if not w.get("warmup") and w.get("step_time_s"):
            self.measured_step_s.append(w["step_time_s"])
            self.point_step_s[self.index].append(w["step_time_s"])
        if not self.bars:
            self.log.info("%s   step %d/%d  loss %.4f  %.1f images/s%s", tag, w["step_end"], steps,
                     w["loss"], w["ips"], "  (warm-up)" if w.get("warmup") else "")
            return
        point_eta = (steps - w["step_end"]) * w["step_time_s"] if w.get("step_time_s") else None
        self.bars.update(self.point_task, completed=w["step_end"],
                         info=f"loss {w['loss']:.4f}  {w['ips']:.1f} images/s  "
                              f"ETA {format_eta(point_eta)}", refresh=True)
        self._update_sweep()

    def resumed(self, tag: str, step: int, attempt: int | None) -> None:
        """The running point resumed from its checkpoint of step ``step``, as attempt
        ``attempt`` (counted from 0, as run.json and metrics.jsonl count them): one line, and
        its bar starts at that step. Its windows up to that step are the earlier attempts'
        (not shown again); its summary pools them with this attempt's."""
        self.done_steps[self.index] = step
        self._news(None)
        line = (f"{tag}   resumed from checkpoint step {step} (attempt "
                f"{'?' if attempt is None else attempt}, counted from 0: steps 1-{step} ran "
                "in earlier attempts)")
        if not self.bars:
            self.log.info("%s", line)
            return
        self.bars.console.print(line, markup=False, highlight=False)
        self.bars.update(self.point_task, completed=step, refresh=True)
        self._update_sweep()

    def _news(self, step: int | None) -> None:
        """The running point showed progress (a window ending at ``step``; None: a resume,
        which starts its timing again): the gap since its last news counts towards the
        stall interval (:meth:`stall_interval_s`), unless it was itself a stall (a stall
        line was said): a hang that ended does not lengthen the next wait for a line."""
        now = self.clock()
        if self.last_progress is not None and step is not None and not self.stall_lines:
            gap = now - self.last_progress
            if self.last_step is None:
                self.longest_startup_s = max(self.longest_startup_s, gap)
            else:
                self.longest_gap_s, self.gap_seen = max(self.longest_gap_s, gap), True
        self.last_progress, self.stall_lines = now, 0
        if step is not None:
            self.last_step = (step, self.wall_clock())

    def stall_interval_s(self) -> float:
        """Seconds the running point may stay quiet before a stall line (module docstring):
        :data:`STALL_FACTOR` x the longest gap between windows seen so far (before its first
        window: the longest start-up so far), at least ``stall_floor_s``."""
        seen = self.longest_gap_s if self.last_step is not None else self.longest_startup_s
        return max(self.stall_floor_s, STALL_FACTOR * seen)

    def tick(self, tag: str) -> str | None:
        """Called while the point runs (each poll of its processes): once per quiet
        interval (:meth:`stall_interval_s`) without news, a stall line, which it returns
        (None where none is due): ``[2/3] no progress for 3 min (last step 12/100 at
        21:04:10; windows so far came at most 4 s apart)``."""
        if self.last_progress is None or self.started_at is None:
            return None
        quiet, interval = self.clock() - self.last_progress, self.stall_interval_s()
        if quiet < interval * (self.stall_lines + 1):
            return None
        self.stall_lines = int(quiet // interval)
        if self.last_step is None:
            started = time.strftime("%H:%M:%S", time.localtime(self.wall_clock() - quiet))
            last = f"no step yet; started at {started}"
            seen = (f"; start-ups so far took up to {format_quiet(self.longest_startup_s)}"
                    if self.longest_startup_s else "")
        else:
            step, at = self.last_step
            last = (f"last step {step}/{self.steps[self.index]} at "
                    f"{time.strftime('%H:%M:%S', time.localtime(at))}")
            gap = self.longest_gap_s
            apart = ("less than 1 s" if gap < 1 else f"at most {gap:.{1 if gap < 10 else 0}f} s")
            seen = f"; windows so far came {apart} apart" if self.gap_seen else ""
        line = f"{tag} no progress for {format_quiet(quiet)} ({last}{seen})"
        if self.bars:
            self.bars.console.print(line, markup=False, highlight=False)
        else:
            self.log.warning("%s", line)
        return line

    def end_point(self, line: str) -> None:
        """The running point ended; ``line`` is its plain log line (then, where points are
        left, one line of the sweep's ETA)."""
        self.done_steps[self.index] = self.steps[self.index]
        if self.started_at is not None:
            self.wall_s[self.index] = self.clock() - self.started_at
            self.started_at = None
        self.last_progress = None
        if not self.bars:
            self.log.info("%s", line)
            if any(w is None for w in self.wall_s):
                self.log.info("sweep: %d/%d points ended, %s",
                              sum(w is not None for w in self.wall_s), len(self.steps),
                              self.eta_text())
            return
        self.bars.console.print(line, markup=False, highlight=False)
        self.bars.update(self.sweep_task, completed=self.index + 1)
        self.bars.update(self.point_task, visible=False)
        self._update_sweep()

    def _update_sweep(self) -> None:
        assert self.bars is not None
        running = 0 if self.done_steps[self.index] >= self.steps[self.index] else 1
        self.bars.update(self.sweep_task, info=f"{running} running  {self.eta_text()}",
                         refresh=True)
