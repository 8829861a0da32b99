"""What a local sweep shows while it runs: rich progress bars on a terminal, log lines elsewhere.

On a terminal (``Console().is_terminal``) a sweep bar (points done of the sweep, the point
running, ETA) and a bar of the running point (steps, images/s, ETA) are drawn with rich
(https://rich.readthedocs.io/en/stable/progress.html). Elsewhere (CI, Slurm logs, pipes) each
event is one ``logging`` line, the same lines as before bars existed.

ETA of the sweep = steps left over all points × seconds per step, the median step time of
the windows measured so far in this sweep, or, before any, the plan's predicted step time of
the points (:func:`vitfsdp.plan.predict`), where it has one; none otherwise.
"""

from __future__ import annotations

import logging
import statistics
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

log = logging.getLogger(__name__)


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
    """

    def __init__(self, steps: list[int], predicted_step_s: list[float | None] | None = None,
                 console: Console | None = None, logger: logging.Logger = log) -> None:
        self.log = logger
        self.console = console or Console()
        self.live = self.console.is_terminal
        self.steps = steps
        self.predicted = predicted_step_s or [None] * len(steps)
        self.measured_step_s: list[float] = []
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
        left = [s - d for s, d in zip(self.steps, self.done_steps, strict=True)]
        if self.measured_step_s:
            return sum(left) * statistics.median(self.measured_step_s)
        if any(p is None for p, n in zip(self.predicted, left, strict=True) if n):
            return None
        return sum(n * p for p, n in zip(self.predicted, left, strict=True) if n)

    def start_point(self, index: int, tag: str, line: str) -> None:
        """Point ``index`` (0-based) starts; ``line`` is its plain log line."""
        self.index = index
        if not self.bars:
            self.log.info("%s", line)
            return
        self.bars.console.print(line, markup=False, highlight=False)
        self.bars.update(self.point_task, description=tag, total=self.steps[index],
                         completed=0, info="", visible=True)
        self._update_sweep()

    def window(self, tag: str, w: dict) -> None:
        """A window record of the running point arrived."""
        steps = self.steps[self.index]
        self.done_steps[self.index] = w["step_end"]
        if not w.get("warmup") and w.get("step_time_s"):
            self.measured_step_s.append(w["step_time_s"])
        if not self.bars:
            self.log.info("%s   step %d/%d  loss %.4f  %.1f images/s%s", tag, w["step_end"], steps,
                     w["loss"], w["ips"], "  (warm-up)" if w.get("warmup") else "")
            return
        point_eta = (steps - w["step_end"]) * w["step_time_s"] if w.get("step_time_s") else None
        self.bars.update(self.point_task, completed=w["step_end"],
                         info=f"loss {w['loss']:.4f}  {w['ips']:.1f} images/s  "
                              f"ETA {format_eta(point_eta)}", refresh=True)
        self._update_sweep()

    def end_point(self, line: str) -> None:
        """The running point ended; ``line`` is its plain log line."""
        self.done_steps[self.index] = self.steps[self.index]
        if not self.bars:
            self.log.info("%s", line)
            return
        self.bars.console.print(line, markup=False, highlight=False)
        self.bars.update(self.sweep_task, completed=self.index + 1)
        self.bars.update(self.point_task, visible=False)
        self._update_sweep()

    def _update_sweep(self) -> None:
        assert self.bars is not None
        running = 0 if self.done_steps[self.index] >= self.steps[self.index] else 1
        self.bars.update(self.sweep_task, info=f"{running} running  "
                                               f"ETA {format_eta(self.eta_s())}",
                         refresh=True)
