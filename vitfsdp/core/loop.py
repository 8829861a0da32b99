"""The training loop's schedule, shared by the torch and the JAX trainer: where a run is
(:class:`Progress`), its timing windows (:func:`windows`, :func:`remaining_windows`, the
warm-up rule :data:`WARMUP_RULE`), the data a resumed run skips (:func:`skip_batches`) and
when a stop signal or ``train.checkpoint_every`` saves a checkpoint and ends the attempt
(:func:`stop_before_first_step`, :func:`checkpoint_at_boundary`).

Standard library only: the trainers pass in what is theirs (the save); both end an attempt
on a stop signal with :class:`Preempted`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from vitfsdp.core.layout import EXIT_PREEMPTED

#: How warm-up windows are chosen (also recorded in run.json ``timing.warmup_rule``).
WARMUP_RULE = (
    "warm-up = the windows of steps 1..train.warmup_steps; also the first window of an "
    "attempt resumed from a checkpoint (caches cold again), and the first window when "
    "blocks are compiled (torch.compile) and train.warmup_steps is 0 (compilation runs in "
    "the first step). JAX compiles the step ahead of time, outside every window (compile_s)."
)


class Schedule(Protocol):
    """The ``train.*`` keys the schedule reads (:class:`vitfsdp.config.TrainConfig`)."""

    steps: int
    warmup_steps: int
    log_every: int


class Preempted(Exception):
    """The run stopped on a signal after saving a checkpoint; exit with ``EXIT_PREEMPTED``
    (:data:`vitfsdp.core.layout.EXIT_PREEMPTED`, which a requeued job resumes from).

    Args:
        signal_name: the signal, e.g. ``SIGUSR2``.
        step: the step of the checkpoint saved; with ``saved=False`` the signal came before
            this attempt's first step, nothing was saved and ``step`` is where the attempt
            would have started (the checkpoint of an earlier attempt, if any, is kept).
    """

    exit_code = EXIT_PREEMPTED

    def __init__(self, signal_name: str, step: int, saved: bool = True) -> None:
        if saved:
            message = f"{signal_name} received; checkpoint saved at step {step}"
        else:
            kept = f"the checkpoint of step {step} is kept" if step else "no checkpoint yet"
            message = (f"{signal_name} received during start-up, before step {step + 1}: "
                       f"nothing to save ({kept})")
            if signal_name == "SIGUSR2":  # Slurm's time-limit signal (--signal), not scancel
                message += ("; a job is not requeued after an attempt that saved nothing: "
                            "at a time limit, give cluster.time more than the start-up plus "
                            "cluster.signal_delay_s")
        super().__init__(message)
        self.signal_name, self.step, self.saved = signal_name, step, saved


@dataclass
class Progress:
    """Where a run is: for failure reports and checkpoints."""

    step: int = 0  # last optimizer step completed (0: none; a resumed run starts past it)
    attempt: int = 0  # 0 = the first attempt; +1 per resume from a checkpoint


def windows(steps: int, warmup_steps: int, log_every: int) -> list[tuple[int, int, bool]]:
    """Split steps 1..steps into timing windows (first, last, is_warmup) of at most
    ``log_every`` steps; no window mixes warm-up and measured steps."""
    out = []
    for lo, hi, warm in ((1, warmup_steps, True), (warmup_steps + 1, steps, False)):
        out += [(s, min(s + log_every - 1, hi), warm) for s in range(lo, hi + 1, log_every)]
    return out


def remaining_windows(tc: Schedule, done: int) -> Iterator[tuple[int, tuple[int, int, bool]]]:
    """(index, (first, last, is_warmup)) of the timing windows (:func:`windows` of ``tc``'s
    steps, warm-up steps and steps per window) still to train after step ``done``; a window
    that ``done`` cuts starts at ``done + 1``."""
    for i, (first, last, warmup) in enumerate(windows(tc.steps, tc.warmup_steps,
                                                      tc.log_every)):
        if last > done:
            yield i, (max(first, done + 1), last, warmup)


def skip_batches(batches: Iterator, num_batches: int) -> None:
    """Draw ``num_batches`` batches, so a resumed run sees the data an uninterrupted one
    would (real data sets load them: a resume of a long run on a large data set pays that)."""
    for _ in range(num_batches):
        next(batches)


def stop_before_first_step(stop: str | None, progress: Progress) -> None:
    """Before this attempt's first step: if a stop signal arrived (during start-up,
    :mod:`vitfsdp.startup_signals`, or while the model was built, restored or compiled),
    stop at once rather than spend what is left of the job on a first window.

    Args:
        stop: the signal's name as every rank agreed on it
            (:meth:`vitfsdp.failures.StopSignals.agreed`, or the JAX trainer's
            ``agreed_stop``), ``None`` if no rank received one.

    Raises:
        Preempted: a signal arrived (``saved=False``); an earlier attempt's checkpoint is
            kept.
    """
    if stop:
        raise Preempted(stop, progress.step, saved=False)


def checkpoint_at_boundary(stop: str | None, every: int, progress: Progress,
                           window_first: int, save: Callable[[int], object]) -> None:
    """At the end of the timing window that began at step ``window_first``: ``save(step)``
    when a stop signal arrived (``stop``, agreed by every rank as for
    :func:`stop_before_first_step`) or the window reached a multiple of ``every``
    (``train.checkpoint_every``; 0 = never); stop after a signal's save.

    Raises:
        Preempted: a stop signal arrived (after the checkpoint is saved).
    """
    step = progress.step
    if stop or (every > 0 and step // every > (window_first - 1) // every):
        save(step)
    if stop:
        raise Preempted(stop, step)
