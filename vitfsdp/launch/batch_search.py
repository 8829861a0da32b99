"""Batch-size search: the largest power-of-two local batch that fits, per sweep point.

    python -m vitfsdp.sweep -m --batch-search model=vit_1b strategy=FULL_SHARD,DDP nodes=1,2

The published FSDP ViT studies chose, per model and strategy, the largest local batch
that is a power of two and fits in GPU memory. For every point of the sweep (model ×
strategy × nodes × ...), the search runs whole training runs, each an ordinary point with
its own run directory and records, at local batch sizes

- starting from the largest power of two <= the point's ``train.local_batch_size``;
- doubling after a run that completed, up to ``hydra.launcher.batch_search_max``;
- halving after a run that ended ``oom``, down to 1.

It stops at the first pair "B completed, 2B oom" (the answer is B), at the limit, or at a
run that ended for another reason (``failed``, ``timeout``, ...: the search cannot say what
fits, and says so). All points search in lock step: each round is one ordinary launch of
every point still searching (so a Slurm round is one set of job arrays). Every attempt is
recorded; ``batch_search.json`` in the sweep directory holds each point's attempts and
answer. Rerunning the command reuses the attempts already recorded (a point's identity is
its config hash, so ``train.local_batch_size=B`` attempts are found again).

This module holds the search itself (which batch comes next, what the answer is);
:func:`vitfsdp.sweep.launch` runs the rounds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: The key the search sets on every attempt.
BATCH_KEY = "train.local_batch_size"
#: File in the sweep directory with every point's attempts and answer.
RESULT_FILE = "batch_search.json"
#: Figures copied from an attempt's summary into the search record.
FIGURES = ("ips", "ips_per_gpu", "peak_mem_allocated_gib", "peak_mem_reserved_gib",
           "peak_rss_gib")


def power_of_two_floor(n: int) -> int:
    """The largest power of two <= ``n``.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"{BATCH_KEY}={n} must be >= 1")
    return 1 << (n.bit_length() - 1)


def without_batch(overrides: list[str]) -> list[str]:
    """The point's overrides without any ``train.local_batch_size`` (``+``/``++`` forms
    included)."""
    return [o for o in overrides if o.lstrip("+").split("=", 1)[0] != BATCH_KEY]


def with_batch(overrides: list[str], batch: int) -> list[str]:
    """The point's overrides with ``train.local_batch_size`` set to ``batch`` (any earlier
    value of the key removed)."""
    return [*without_batch(overrides), f"{BATCH_KEY}={batch}"]


@dataclass
class Attempt:
    """One training run of the search."""

    local_batch_size: int
    status: str  # the run's summary status (completed, oom, failed, ...)
    run_dir: str
    figures: dict = field(default_factory=dict)  # FIGURES from the summary (completed runs)
    reason: str | None = None  # first line of the summary's reason (runs that did not complete)


@dataclass
class Search:
    """The search for one sweep point.

    Args:
        num: the point's Hydra job number.
        overrides: the point's overrides as typed (without the search's batch key).
        start: the first local batch (a power of two).
        max_batch: the largest local batch tried.
    """

    num: int
    overrides: list[str]
    start: int
    max_batch: int
    attempts: list[Attempt] = field(default_factory=list)

    def next_batch(self) -> int | None:
        """The local batch to try next, or ``None`` when the search is over."""
        if not self.attempts:
            return self.start
        last = self.attempts[-1]
        if last.status not in ("completed", "oom"):
            return None
        fits = [a.local_batch_size for a in self.attempts if a.status == "completed"]
        ooms = [a.local_batch_size for a in self.attempts if a.status == "oom"]
        if fits and ooms:
            return None
        if fits:
            nxt = max(fits) * 2
            return nxt if nxt <= self.max_batch else None
        nxt = min(ooms) // 2
        return nxt if nxt >= 1 else None

    @property
    def largest_fitting(self) -> int | None:
        """The answer: the largest local batch that completed, or None (nothing fits, or a
        run failed for another reason before any fitted)."""
        fits = [a.local_batch_size for a in self.attempts if a.status == "completed"]
        return max(fits) if fits else None

    @property
    def stopped_by(self) -> str:
        """Why the search ended (or that it has not)."""
        if self.next_batch() is not None:
            return "not finished"
        last = self.attempts[-1]
        if last.status not in ("completed", "oom"):
            return f"{last.status} at {last.local_batch_size}: {last.reason or 'no reason'}"
        if self.largest_fitting is None:
            return "oom at local batch 1"
        ooms = [a.local_batch_size for a in self.attempts if a.status == "oom"]
        if ooms:
            return f"oom at {min(ooms)}"
        return f"batch_search_max={self.max_batch} reached"

    def record(self) -> dict:
        """JSON-ready: the point, its answer, why the search stopped, every attempt."""
        return {"num": self.num, "overrides": self.overrides,
                "largest_local_batch": self.largest_fitting, "stopped_by": self.stopped_by,
                "attempts": [asdict(a) for a in self.attempts]}


def attempt_from_summary(batch: int, run_dir: str, summary: dict | None) -> Attempt:
    """An :class:`Attempt` from a run's summary (``None``: the run left none, recorded as
    ``failed``)."""
    summary = summary or {"status": "failed", "reason": "no summary.json"}
    reason = (summary.get("reason") or "").strip().splitlines()
    return Attempt(batch, summary.get("status", "failed"), run_dir,
                   {k: summary.get(k) for k in FIGURES if summary.get(k) is not None},
                   reason[0] if reason else None)


def format_results(searches: list[Search]) -> str:
    """A table for the terminal: point, answer, attempts (``32 ok, 64 oom``), why it ended."""
    rows = [("point", "largest local batch", "attempts", "stopped by")]
    for s in searches:
        tried = ", ".join(f"{a.local_batch_size} {'ok' if a.status == 'completed' else a.status}"
                          for a in sorted(s.attempts, key=lambda a: a.local_batch_size))
        rows.append((f"{s.num} {' '.join(s.overrides) or '(defaults)'}",
                     str(s.largest_fitting or "-"), tried, s.stopped_by))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)
