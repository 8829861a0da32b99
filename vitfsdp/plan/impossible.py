"""Points of a sweep that cannot run at all, whatever the memory: the config refuses the
combination (a hybrid's shard group of 16 ranks at one node of 8; a batch the data cannot
split over the ranks). The plan lists them as rows of verdict ``n/a`` with their reason
and plans the rest (:func:`vitfsdp.plan.__main__.plan_table`); where every point is one,
or the user asked for one point, the plan refuses, as before. A point that is an earlier
point again (:func:`repeated_points`: the same config twice) refuses the sweep as a whole.

Nothing here imports Hydra or torch: the composed point comes in as a mapping.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vitfsdp.provenance import redact_args

#: The plan table's ``fits`` (``verdict``) of a point that cannot run.
NOT_APPLICABLE = "n/a"
#: How the reason recorded for a sweep's point that cannot run begins (its status is
#: ``skipped_infeasible``, as a point the plan predicts not to fit): ``cannot run: <the
#: refusal's line>``.
CANNOT_RUN = "cannot run: "


@dataclass(frozen=True)
class Impossible:
    """One point the config refuses: its overrides, the refusal's one line, a short form
    for summary lines (:func:`short_reason`), and what the point's row shows (model,
    strategy, nodes, local batch, precision, activation checkpointing; missing: unknown)."""

    point: list[str]
    reason: str
    short: str
    shown: dict = field(default_factory=dict)


def short_reason(composed: Mapping, error: str) -> str:
    """A few words on why ``composed`` (the point's composed config, before validation:
    ``strategy``, ``nodes``, ``cluster.gpus_per_node``) cannot run, for a summary line.

    A hybrid's shard group (``strategy.shard_group_size`` k) that does not tile the world
    and the nodes (:meth:`vitfsdp.parallel.StrategyConfig.check_world`) reads
    ``shard groups of 16 ranks > 8 ranks at 1 node``; any other refusal, its ``error``'s
    first clause (up to the first ``;``, where the fix begins).
    """
    return shard_group_refusal(composed) or error.split("; ")[0]


def shard_group_refusal(composed: Mapping) -> str | None:
    """The short reason :func:`short_reason` gives where ``composed``'s hybrid shard group
    (``strategy.shard_group_size`` k) does not tile its world and nodes (``shard groups of
    16 ranks > 8 ranks at 1 node``); ``None`` where it does, or where the point has none.
    A structural refusal: each value is valid alone, their combination cannot run (the
    sweep skips such a point of a cross product, :data:`CANNOT_RUN`)."""
    try:
        k = int(composed["strategy"].get("shard_group_size") or 0)
        per_node = int(composed["cluster"]["gpus_per_node"])
        nodes = int(composed["nodes"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    world = nodes * per_node
    if k and world > 0:
        at = f"{world} ranks at {nodes} node{'s' if nodes != 1 else ''}"
        if k > world:
            return f"shard groups of {k} ranks > {at}"
        if world % k:
            return f"shard groups of {k} ranks do not divide {at}"
        if per_node % k and k % per_node:
            return (f"shard groups of {k} ranks neither fill part of a node of {per_node} "
                    "ranks nor whole nodes")
    return None


def point_label(point: Sequence[str], shown: Mapping,
                common: Collection[str] = frozenset()) -> tuple[str, str]:
    """(``HYBRID_16GPU at 1 node``, the point's other overrides not in ``common``, those
    every point of the sweep shares, e.g. ``model=vit_15b``; ``""`` for none)."""
    nodes = shown.get("nodes")
    head = f"{shown.get('strategy', '?')} at {nodes} node{'s' if nodes != 1 else ''}"
    rest = [o for o in point if o not in common
            and o.split("=", 1)[0].lstrip("+~") not in ("strategy", "nodes")]
    return head, " ".join(rest)


def cannot_run_line(impossible: Sequence[Impossible], common: Collection[str] = frozenset(),
                    verb: str = "cannot run (n/a, not planned)") -> str:
    """One line naming every point of ``impossible`` with its short reason, points of the
    same strategy, node count and reason together: ``1 point cannot run (n/a, not planned):
    HYBRID_16GPU at 1 node (shard groups of 16 ranks > 8 ranks at 1 node)``, or with the
    other overrides that tell such points apart, ``HYBRID_16GPU at 1 node [model=vit_5b,
    model=vit_15b] (...)``. ``""`` for none. ``verb`` words what becomes of them (a sweep:
    ``that cannot run, skipped``)."""
    if not impossible:
        return ""
    groups: dict[tuple[str, str], list[str]] = {}
    for x in impossible:
        head, rest = point_label(x.point, x.shown, common)
        groups.setdefault((head, x.short), []).append(rest)
    parts = []
    for (head, reason), rests in groups.items():
        which = f" [{', '.join(rests)}]" if any(rests) else ""
        parts.append(f"{head}{which} ({reason})")
    n = len(impossible)
    return f"{n} point{'s' if n != 1 else ''} {verb}: " + "; ".join(parts)


class Numbered(Protocol):
    """A sweep's point as :func:`repeated_points` reads it: its number in the sweep (Hydra's
    job number, from 0), its overrides, its identity (``config_hash``:
    :func:`vitfsdp.launch.resume.config_hash`) and its resolved config (``cfg``: a
    :class:`vitfsdp.config.RunConfig`, read for the strategy and cluster a repeat's cause
    names). :class:`vitfsdp.sweep.point.Point` is one."""

    num: int
    overrides: list[str]
    config_hash: str
    cfg: Any


def repeated_points(points: Sequence[Numbered]) -> list[str]:
    """One line for each point whose config equals an earlier point's: the same run twice.
    Where the two points' overrides are the same (``nodes=1,1``), the way to measure a point
    several times (``repeat=0,1``); where they differ but resolve to the same point
    (``strategy=HYBRID_SHARD`` and ``HYBRID_8GPU`` on ``cluster=cuda8``), why
    (:func:`_same_point_cause`) and to drop one of them; overrides with secret values
    redacted. The sweep refuses such a command (:func:`vitfsdp.sweep.check.repeated_points`,
    this function); the plan says so and plans each config once
    (:func:`vitfsdp.plan.__main__.plan_sweep`). No line: no repeat."""
    first: dict[str, Numbered] = {}
    errors = []
    for p in points:
        if p.config_hash in first:
            earlier = first[p.config_hash]
            cause = _same_point_cause(p, earlier)
            fix = (f"{cause}: drop one of them" if cause else
                   "drop the repeated value (repeat=0,1 runs a point twice)")
            errors.append(f"point {p.num} ({_label(p.overrides)}) is point {earlier.num} "
                          f"({_label(earlier.overrides)}) again: {fix}")
        first.setdefault(p.config_hash, p)
    return errors


def _label(overrides: Sequence[str]) -> str:
    """Overrides for a message, secret values redacted."""
    return " ".join(redact_args(list(overrides)))


def _override_key(override: str) -> str:
    """The key of a Hydra override (``++cluster.env.X=1``: ``cluster.env.X``)."""
    return override.partition("=")[0].lstrip("+~")


def _same_point_cause(p: Numbered, earlier: Numbered) -> str | None:
    """Why ``p`` and ``earlier``, whose configs are equal, are one point though their
    overrides differ (None: the same overrides, a true repeat). A ``strategy=HYBRID_SHARD``
    without ``strategy.shard_group_size`` takes ``cluster.gpus_per_node`` as its shard group
    (conf/strategy/HYBRID_SHARD.yaml), so it is the profile's ``HYBRID_<n>GPU``; any other
    difference is named as the overrides that resolve to the same config."""
    mine = {_override_key(o): o for o in p.overrides}
    theirs = {_override_key(o): o for o in earlier.overrides}
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if not differ:
        return None
    strategy = p.cfg.strategy
    for overrides in (mine, theirs):
        if (overrides.get("strategy") == "strategy=HYBRID_SHARD"
                and "strategy.shard_group_size" not in overrides
                and strategy.sharding_strategy == "HYBRID_SHARD"):
            cluster = p.cfg.cluster
            return (f"strategy=HYBRID_SHARD is {strategy.name} on cluster={cluster.name} "
                    f"(shard groups of cluster.gpus_per_node={cluster.gpus_per_node})")
    here = _label([mine[k] for k in differ if k in mine]) or "no override"
    there = _label([theirs[k] for k in differ if k in theirs]) or "no override"
    return f"{here} and {there} resolve to the same config"
