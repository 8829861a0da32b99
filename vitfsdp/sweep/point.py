"""A sweep point (:class:`Point`), how messages name it, and the sweep's refusals.

The bottom of :mod:`vitfsdp.sweep`: every other module of the sweep imports from here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra.errors import CompactHydraException

from vitfsdp import plan as planner
from vitfsdp import provenance
from vitfsdp.config import RunConfig
from vitfsdp.overrides import typed_override

log = logging.getLogger("vitfsdp.sweep")


class SweepRefused(CompactHydraException, ValueError):
    """Points refused before anything ran; Hydra prints the message alone (no traceback)."""


class SweepDiskError(CompactHydraException, OSError):
    """The sweep could not write its own records (a full, over-quota or read-only file
    system): one line says so and what runs on; the sweep exits :data:`EXIT_NOT_COMPLETED`."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during a sweep: its message says what was recorded, what runs on and
    what to do next (:func:`main_cli` prints it alone and exits :data:`EXIT_INTERRUPTED`)."""


class SweepStopped(SystemExit):
    """SIGTERM or SIGHUP during a sweep's points (``code``: 128 + the signal), after the
    interrupted line was printed and the running point recorded; :func:`main_cli` prints
    nothing more. A bare ``SystemExit`` of those codes (the signal came before any point or
    after the last) gets its one line there."""


@dataclass
class Point:
    """One sweep point: its overrides, validated config and run directory."""

    num: int  # Hydra job number
    overrides: list[str]  # the point's Hydra overrides, as typed
    cfg: RunConfig
    run_dir: Path
    config_hash: str = ""  # resume.config_hash(cfg): the point's identity across reruns
    #: the overrides that tell it from the sweep's other points (none of a key the sweep
    #: gives one value), as its run directory's name holds them: what messages name it by
    swept: list[str] = field(default_factory=list)
    #: its ``cluster.time`` is ``cluster.time=auto`` held to the queue's limit for its node
    #: count (:func:`vitfsdp.sweep.compose.resolve_auto_time`), not a time typed by hand
    auto_held: bool = False


@dataclass
class CannotRun:
    """A point of a cross product that cannot run: its validation refuses the combination
    (a hybrid's shard group that does not tile its nodes,
    :func:`vitfsdp.plan.impossible.shard_group_refusal`). The sweep skips it and records it
    ``skipped_infeasible`` with the reason (:func:`vitfsdp.sweep.choose._record_cannot_run`)
    where other points can run; named as a :class:`Point` is (``overrides``, ``swept``)."""

    num: int
    overrides: list[str]
    run_dir: Path
    swept: list[str]
    reason: str  # the refusal's line
    refusal: str  # the refusal as the sweep words it (one_line): where no point can run
    short: str  # shard groups of 16 ranks > 8 ranks at 1 node
    composed: dict  # the composed config (hydra key dropped), for its records
    shown: dict = field(default_factory=dict)  # strategy, nodes: for the skipped line


class PointCannotRun(ValueError):
    """Raised by :func:`vitfsdp.sweep.compose._compose_point` for a :class:`CannotRun`."""

    def __init__(self, point: CannotRun) -> None:
        super().__init__(point.reason)
        self.point = point


def _label(overrides: Sequence[str]) -> str:
    """A point's overrides for messages, as typed (:func:`vitfsdp.overrides.typed_override`:
    ``cluster.time=03:00:00``, not Hydra's ``03\\:00\\:00``), secret values redacted."""
    return " ".join(provenance.redact_args([typed_override(a) for a in overrides]))


def _point_label(point: Point) -> str:
    """What a message names a point by: its swept overrides (:attr:`Point.swept`), secret
    values redacted; all of them for a sweep of one point; ``(defaults)`` for none."""
    return _label(point.swept or point.overrides) or "(defaults)"


def points_span(points: Sequence[Point]) -> str:
    """The points compactly, as sweep overrides of their swept values (secret values
    redacted), and whether they are every combination of those values:
    ``model=vit_5b strategy=FULL_SHARD,HYBRID_8GPU nodes=1,2,4,8,16 repeat=0,1,2: every
    combination`` (``...: 12 of their 30 combinations`` where some are not among them)."""
    values: dict[str, list[str]] = {}
    for p in points:
        for arg in provenance.redact_args([typed_override(a) for a in p.swept or p.overrides]):
            key, _, value = arg.partition("=")
            values.setdefault(key, [])
            if value not in values[key]:
                values[key].append(value)
    span = " ".join(f"{key}={','.join(vals)}" for key, vals in values.items())
    combinations = math.prod(len(vals) for vals in values.values())
    every = ("every combination" if combinations == len(points)
             else f"{len(points)} of their {combinations} combinations")
    return f"{span or '(defaults)'}: {every}"


def say_group(group: Sequence, one: Callable[[object], str],
              many: Callable[[Sequence], str], level: int = logging.INFO) -> None:
    """Say a group of one kind of news about points (each item holding its point): one item
    in its own line (``one(item)``); several in one line (``many(group)``: their count, the
    points compactly, :func:`points_span`, and the first one's full line, say), each item's
    own line then at DEBUG (``hydra.verbose=vitfsdp.sweep``), so that a 90-point sweep
    does not say one thing 90 times; nothing for none."""
    if not group:
        return
    if len(group) == 1:
        log.log(level, "%s", one(group[0]))
        return
    log.log(level, "%s (hydra.verbose=%s names each)", many(group), log.name)
    for item in group:
        log.debug("%s", one(item))


def _predicted_step_s(point: Point) -> float | None:
    """The seconds per step of ``point`` its ETA starts from until a window is measured:
    :func:`vitfsdp.plan.sizing_step`'s, the basis of ``cluster.time=auto`` and the plan's
    node-hours (the plan's step, or the one published for its settings where slower);
    ``None`` where neither is known."""
    try:
        return planner.sizing_step(point.cfg).step_s
    except (ValueError, NotImplementedError):
        return None
