"""``python -m vitfsdp.plan``: the predicted table of a sweep, before anything is queued.

    python -m vitfsdp.plan -m model=vit_base,vit_15b cluster=frontier \\
        strategy=DDP,FULL_SHARD,HYBRID_8GPU nodes=1,8 precision=bf16 [--csv FILE] [--json]
    python -m vitfsdp.plan -m ... cluster.probe=PROBE_JSON --terms   # from a site's probe
    python -m vitfsdp.plan --calibrate SWEEP_DIR [SWEEP_DIR ...] [--probe PROBE_JSON]

The overrides are a sweep's, expanded into points as the sweep expands them
(:func:`vitfsdp.overrides.expand`: comma lists, ``range(...)``, ``choice(...)``,
``glob(...)``; ``-m`` is accepted for symmetry with ``vitfsdp.sweep``), each point composed from
``conf/`` and validated by :func:`vitfsdp.config.to_run_config`. Keys a profile requires for
submitting (``cluster.required``, e.g. the account) are not needed to plan. A point its
validation refuses (a shard group that does not tile the nodes) is a row of verdict ``n/a``
with the reason, and the rest are planned; exit status 2 only where no point can run. A
point whose config is an earlier point's (``nodes=1,1``; on ``cluster=cuda8``
``strategy=HYBRID_8GPU,HYBRID_SHARD``, one strategy under two names) is named on stderr as
the sweep refuses it, and planned once. A point of ``repeat=0,1,2`` is one point: its runs
share a rank, and the summary counts it once and its runs' node-hours each.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import math
import re
import shlex
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from vitfsdp.core.confighash import config_digest, point_id
from vitfsdp.plan.impossible import (
    NOT_APPLICABLE,
    Impossible,
    cannot_run_line,
    repeated_points,
    short_reason,
)

if TYPE_CHECKING:  # pandas loads where a table is made: --help starts without it
    import pandas as pd

#: Terminal table columns, in order: (plan_table column, header). The memory parts, the
#: collective volumes and the compute/communication split are in --csv and --json. The
#: predicted peak's header is ``rsvd`` (torch's reserved peak: GPU rows), ``rss`` (CPU rows)
#: or ``peak`` (both).
COLUMNS = (
    ("model", "model"), ("strategy", "strategy"), ("nodes", "nodes"), ("local_batch_size", "batch"),
    ("precision", "prec"), ("activation_checkpointing", "ckpt"), ("allocated_gib", "alloc"),
    ("peak_mem_gib", "rsvd"), ("margin_gib", "margin"), ("fits", "fits"),
    ("step_time_s", "step"), ("exposed_comm_s", "comm"), ("ips", "ips"), ("rank", "rank"),
)  # fmt: skip
#: The widest table a terminal is assumed to show.
TABLE_WIDTH = 100
#: The width the lines under the table are wrapped to.
LEGEND_WIDTH = 88
MODEL_WIDTH = 16  # longer model names are cut (timm's vit_gigantic_patch14_224)


def compose_points(overrides: list[str]) -> list[tuple[list[str], object]]:
    """(point overrides, validated RunConfig) for every point of ``overrides``.

    Raises:
        ValueError: a point does not compose or validate; the message names the point.
    """
    points = []
    for point, cfg in compose_all(overrides):
        if isinstance(cfg, Impossible):
            raise ValueError(f"point {' '.join(point)}: {cfg.reason}")
        points.append((point, cfg))
    return points


def compose_all(overrides: list[str]) -> list[tuple[list[str], object]]:
    """(point overrides, validated RunConfig or :class:`~vitfsdp.plan.impossible.Impossible`)
    for every point of ``overrides``, in the sweep's order: a point the config refuses (its
    validation, :func:`vitfsdp.config.to_run_config`, raises ``ValueError``: a shard group
    that does not tile the nodes, a batch the data cannot split) is an ``Impossible`` with
    the one-line reason, so that the other points can still be planned.

    Raises:
        ValueError: an override unknown or malformed for every point
            (:func:`vitfsdp.config.check_overrides`); a sweep the expansion refuses.
        hydra.errors.ConfigCompositionException, omegaconf.errors.OmegaConfBaseException:
            a point does not compose (a value of the wrong type): a typo, not a combination.
    """
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    from vitfsdp.config import CONF_DIR, check_overrides, register_configs, to_run_config
    from vitfsdp.overrides import expand

    check_overrides(overrides)  # as the sweep: unknown keys, bad syntax, group options
    register_configs()
    points: list[tuple[list[str], object]] = []
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        loader = GlobalHydra.instance().config_loader()
        for point in [q for p in expand(overrides, loader) for q in _preset_points(p, loader)]:
            try:
                cfg = compose("config", point)
                with open_dict(cfg):
                    cfg.cluster.required = []  # planning submits nothing: no account needed
            except OmegaConfBaseException as e:
                raise ValueError(f"point {' '.join(point)}: {str(e).splitlines()[0]}") from None
            try:
                points.append((point, to_run_config(cfg)))
            except ValueError as e:  # the combination is refused: n/a, the rest planned
                points.append((point, _impossible(point, cfg, str(e).splitlines()[0],
                                                  OmegaConf)))
            except OmegaConfBaseException as e:
                raise ValueError(f"point {' '.join(point)}: {str(e).splitlines()[0]}") from None
    return points


def _impossible(point: list[str], cfg, reason: str, omegaconf) -> Impossible:
    """The :class:`Impossible` of a composed point ``cfg`` (a DictConfig) that validation
    refused with ``reason``; its row shows what the composed config says."""
    composed = omegaconf.to_container(cfg, resolve=False)
    train = composed.get("train") or {}
    shown = {"model": (composed.get("model") or {}).get("name"),
             "strategy": (composed.get("strategy") or {}).get("name"),
             "nodes": composed.get("nodes"),
             "local_batch_size": train.get("local_batch_size"),
             "precision": composed.get("precision"),
             "activation_checkpointing": train.get("activation_checkpointing")}
    return Impossible(point, reason, short_reason(composed, reason), shown)


def _preset_points(point: list[str], loader) -> list[list[str]]:
    """``point`` expanded by its preset's sweep (``experiment=NAME`` whose file sets
    ``hydra.sweeper.params``), as ``python -m vitfsdp.sweep`` runs it: the preset's axes
    first, the command line's overrides after them (a key given on the command line wins).
    A point without a preset is returned as it is."""
    # on use (see compose_points): `plan --help` starts without Hydra
    from hydra import compose

    from vitfsdp.overrides import expand

    if not any(o.split("=", 1)[0].lstrip("+~") == "experiment" for o in point):
        return [point]
    try:
        params = compose("config", point, return_hydra_config=True).hydra.sweeper.params
    except Exception:  # noqa: BLE001 (compose_points reports the point's own error)
        return [point]
    if not params:
        return [point]
    return expand([*(f"{k}={v}" for k, v in params.items()), *point], loader)


def plan_table(overrides: list[str]) -> pd.DataFrame:
    """One row per point: its overrides, model, strategy, nodes, local batch, precision,
    activation checkpointing, every Prediction field, ``verdict`` (``yes``, ``tight``,
    ``NO``, ``?``; ``n/a`` for a point that cannot run, whose ``reason`` says why and whose
    predictions are empty), ``config_hash`` (the sweep's identity of the run,
    :func:`vitfsdp.launch.resume.config_hash`), ``point_id`` (the same without ``repeat``:
    every repeat of a point shares it, as the analysis's ``point_id`` column), and
    ``rank``: 1 for the highest predicted ips among the points that fit with the same model
    and node count (None for a point that does not fit or has no ips). A point whose config
    is an earlier point's is left out (:func:`plan_sweep` says which).

    Raises:
        ValueError: no point can run (every point, or the one point asked for, is refused:
            :func:`compose_all`); the message names the first and its reason.
    """
    return plan_sweep(overrides)[0]


def plan_sweep(overrides: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """(:func:`plan_table`'s table, the lines of the sweep's refusal of points that are an
    earlier point again, :func:`vitfsdp.plan.impossible.repeated_points`: ``[]`` where there
    are none). ``python -m vitfsdp.sweep`` refuses such a command as a whole (two names of
    one strategy: on ``cluster=cuda8`` HYBRID_SHARD is HYBRID_8GPU); the table plans each
    config once, numbered as the sweep numbers its points.

    Raises:
        ValueError: as :func:`plan_table`.
    """
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    from vitfsdp.plan import predict

    rows = []
    points = compose_all(overrides)
    impossible = [(point, x) for point, x in points if isinstance(x, Impossible)]
    if impossible and len(impossible) == len(points):
        point, x = impossible[0]
        none = "" if len(points) == 1 else f"none of the {len(points)} points can run; "
        raise ValueError(f"{none}point {' '.join(point)}: {x.reason}")
    numbered = [_Numbered(num, point, config_digest(cfg, "point")[0], cfg)
                for num, (point, cfg) in enumerate(points) if not isinstance(cfg, Impossible)]
    refused = repeated_points(numbered)
    hashes = {p.num: p.config_hash for p in numbered}
    first: dict[str, int] = {}  # config_hash: the number of its first point
    repeats = {p.num for p in numbered if first.setdefault(p.config_hash, p.num) != p.num}
    points = [(num, p) for num, p in enumerate(points) if num not in repeats]
    common = (set.intersection(*(set(point) for _, (point, _) in points)) if len(points) > 1
              else set())
    for num, (point, cfg) in points:
        label = " ".join(o for o in point if o not in common) or " ".join(point) or "(defaults)"
        if isinstance(cfg, Impossible):
            rows.append({"point": label, "overrides": " ".join(point), **cfg.shown,
                         "verdict": NOT_APPLICABLE, "fits": None, "reason": cfg.reason,
                         "cannot_run": cfg.short})
            continue
        p = predict(cfg)
        rows.append({"point": label, "overrides": " ".join(point), "model": cfg.model.name,
                     "strategy": cfg.strategy.name, "nodes": cfg.nodes,
                     "world_size": cfg.world_size,
                     "local_batch_size": cfg.train.local_batch_size,
                     "precision": cfg.resolved_precision("cuda" if p.device == "gpu" else "cpu"),
                     "activation_checkpointing": cfg.train.activation_checkpointing,
                     "steps": cfg.train.steps,
                     "price_per_node_hour": cfg.cluster.price_per_node_hour,
                     "config_hash": hashes[num], "point_id": _point_id(cfg),
                     "cluster": cfg.cluster.name, "img_size": cfg.model.resolved_img_size(),
                     "torch_build": cfg.cluster.torch_build,
                     **p.as_dict()})
    return weak_scaling(rank_points(pd.DataFrame(rows))), refused


class _Numbered(NamedTuple):
    """A planned point as :func:`vitfsdp.plan.impossible.repeated_points` reads a sweep's:
    its number in the sweep (from 0, the points that cannot run counted), overrides,
    ``config_hash`` and resolved config."""

    num: int
    overrides: list[str]
    config_hash: str
    cfg: Any


def _point_id(cfg) -> str:
    """The identity of ``cfg``'s point whatever its ``repeat``
    (:func:`vitfsdp.core.confighash.point_id`), as the analysis's ``point_id`` column of a
    run."""
    return point_id(dataclasses.asdict(cfg))


def _point_keys(df: pd.DataFrame) -> pd.Series:
    """Per row, what tells its point from the others whatever its ``repeat``: ``point_id``
    where the row has one, else its overrides (or ``point``) without ``repeat=``; rows of
    one point (``repeat=0,1,2``) share it. A table made without either: each row its own."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    column = "overrides" if "overrides" in df else "point" if "point" in df else None
    if column is None:
        keys = pd.Series(df.index.astype(str), index=df.index, dtype=object)
    else:
        keys = df[column].astype(str).map(
            lambda o: " ".join(x for x in o.split() if not x.startswith("repeat=")))
    if "point_id" in df:
        keys = df["point_id"].astype(object).where(df["point_id"].notna(), keys)
    return keys


def _verdicts(df: pd.DataFrame) -> pd.Series:
    """Each row's verdict: its ``verdict`` column where set, else from ``fits`` and
    ``tight``/``squeezed`` (tables made before the column, or by hand): ``yes``, ``tight``,
    ``squeezed``, ``NO``, ``?`` or ``n/a``."""
    derived = df["fits"].map({True: "yes", False: "NO"}).fillna("?").astype(object)
    for column, word, fits in (("tight", "tight", True), ("squeezed", "squeezed", False)):
        if column in df:
            derived = derived.where(~((df["fits"] == fits) & (df[column] == True)), word)  # noqa: E712
    if "verdict" not in df:
        return derived
    return df["verdict"].astype(object).where(df["verdict"].notna(), derived)


def summary_line(df: pd.DataFrame) -> str:
    """One line on what a sweep of ``df``'s points would spend: how many fit, how many the
    sweep would skip (predicted not to fit), how many cannot run at all (``n/a``), and the
    node-hours of the points it would run,
    each ``nodes × (train.steps × step + start-up)`` with the step and start-up of
    ``cluster.time=auto`` (:func:`priced_steps`: the predicted step, or the published one
    of the same settings where slower, the line saying for how many points;
    :data:`vitfsdp.plan.STARTUP_S`), and their price where the profile has one; "node
    hours unknown" where a point that runs has neither step time. The counts are of points
    (:func:`_point_keys`: a point's ``repeat=0,1,2`` rows count once, and the line says how
    many runs they make); the node-hours are of every run."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    from vitfsdp.plan import STARTUP_S

    verdict = _verdicts(df)
    first = ~_point_keys(df).duplicated()  # a point's first row: its repeats count once
    fit = int((verdict.isin(("yes", "tight")) & first).sum())
    squeezed = int(((verdict == "squeezed") & first).sum())
    skipped = int(((verdict == "NO") & first).sum())
    impossible = int(((verdict == NOT_APPLICABLE) & first).sum())
    runs = df[verdict.isin(("yes", "tight", "squeezed", "?"))]
    repeated = len(df) > int(first.sum())
    sized = priced_steps(runs)
    step = pd.Series([s.step_s for s in sized], index=runs.index, dtype=float)
    text = (f"{int(first.sum())} point(s)"
            + (f" ({len(df)} runs with their repeats)" if repeated else "") + f": {fit} fit, "
            + (f"{squeezed} squeezed (the sweep runs them, warned), " if squeezed else "")
            + f"{skipped} predicted not to fit (the sweep skips them), "
            f"{int(((verdict == '?') & first).sum())} unknown"
            + (f", {impossible} cannot run (n/a)" if impossible else ""))
    if runs.empty:
        return text
    if step.isna().any() or "steps" not in runs:
        return text + "\nnode hours unknown: a point that runs has no predicted step time"
    published = [s.study for s, one in zip(sized, first[runs.index], strict=True)
                 if one and s.by_published]
    training = runs["nodes"] * runs["steps"] * step / 3600
    starting = runs["nodes"] * STARTUP_S / 3600
    hours = training + starting
    price = pd.to_numeric(runs.get("price_per_node_hour", pd.Series(math.nan, runs.index)),
                          errors="coerce")
    cost = f"; {(hours * price).sum():,.0f} at the profile's price" if price.notna().all() else ""
    running = int(first[runs.index].sum())
    text += (f"\nthe {running} that run"
             + (f" ({len(runs)} runs with their repeats)" if repeated else "")
             + f": {_hours(hours.sum())} node hours "
             f"(nodes x (steps x step + {STARTUP_S} s)){cost}: {_hours(training.sum())} "
             f"training at the predicted steps{_published_price_text(published)}, "
             f"{_hours(starting.sum())} starting "
             f"({STARTUP_S} s a {'run' if repeated else 'point'}, assumed); predictions, not "
             "measurements: docs/plan.md gives their errors against runs")
    if not runs["overrides"].astype(str).str.contains(r"(?:^|\s)repeat=").any():
        text += (f"\none run a point ranks nothing (best.csv: one run is not a result); with "
                 f"three repeats (repeat=0,1,2): {_hours(3 * hours.sum())} node hours")
    return text


def _published_price_text(studies: list[str]) -> str:
    """The summary's clause on the points priced at a published step time (``studies``: one
    study a point, :func:`priced_steps`); '' for none."""
    if not studies:
        return ""
    return (f" ({len(studies)} point{'s' if len(studies) > 1 else ''} at the slower step "
            f"time published for {'their' if len(studies) > 1 else 'its'} settings, "
            f"{', '.join(sorted(set(studies)))}, as cluster.time=auto sizes them)")


def _hours(x: float) -> str:
    """Node-hours as the cost line prints them: two significant digits below 1 (0.012),
    one decimal above (2.5, 589.6), and "<0.001" below that (not 5.6e-05)."""
    if x < 0.001:
        return "<0.001" if x > 0 else "0"
    return f"{x:,.2g}" if x < 1 else f"{x:,.1f}"


def weak_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``efficiency``: predicted ips / (the predicted ips at the smallest node
    count of the same point that has one × nodes / that count), per point with every
    override but ``nodes`` equal (:func:`_line_keys`); NaN where there is no ips. A node
    count that cannot run (HYBRID_16GPU at 1 node of 8) is no base: the line's base is its
    smallest with an ips."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    ips = pd.to_numeric(df["ips"], errors="coerce")
    lines = df.assign(_k=_line_keys(df), _ips=ips)
    base = (lines[ips.notna()].sort_values("nodes", kind="stable").groupby("_k")
            [["nodes", "_ips"]].first())
    nodes, first = (lines["_k"].map(base[c]) for c in ("nodes", "_ips"))
    return df.assign(efficiency=ips / (first * df["nodes"] / nodes))


#: Predicted ips closer than this fraction rank as ties: the plan's step time without a probe
#: errs by 27.6% (median |error|, max 40.0%) on the committed records it is checked against
#: (docs/plan.md, "How good it is", with the host term: tools/plan_check.py on
#: docs/data/gpu-h100-2026-11-26-sweep-runs.csv, 8 one-GPU H100 runs), so it cannot order
#: points closer than that.
RANK_TIE_FRAC = 0.276
#: The same from a probe: 12.0% median |error| (max 40.7%) on the same 8 runs, predicted from
#: the probe measured on their device after them, nothing fitted (docs/plan.md, "How good it
#: is"; docs/data/gpu-h100-2026-11-26-calibrate-probe.txt). A probe whose own repeats spread
#: more (:meth:`vitfsdp.plan.probed.Probe.worst_spread`) ties points within that spread.
PROBE_RANK_TIE_FRAC = 0.120
#: The runs :data:`RANK_TIE_FRAC` is measured on, as the rank line under the table names
#: them: one GPU each, so no collective of the plan's communication terms ran in any.
RANK_TIE_BASIS = "8 one-GPU H100 runs"
#: What the rank line says the communication terms are checked against: no collective ran in
#: :data:`RANK_TIE_BASIS`; :func:`published_efficiency` sets the plan's efficiency beside the
#: study of :data:`PUBLISHED_ON` where a point's :data:`PUBLISHED_KEYS` are the study's, and
#: a probe's collectives were checked on CPU sweeps of up to 8 gloo ranks (docs/plan.md).
COMM_CHECKED = ("no collective in it: the communication terms are checked only against ORNL's "
                "published Frontier weak-scaling efficiency, the 'published' line where a "
                "point's model, strategy, precision, local batch, checkpointing, image size "
                "and GPUs per node are the study's, and from a probe on gloo CPU ranks, never "
                "on NVIDIA GPUs")


def tie_fracs(df: pd.DataFrame) -> pd.Series:
    """Per row, the fraction of predicted ips within which :func:`rank_points` ties points:
    :data:`RANK_TIE_FRAC` for a prediction from the profile's data sheets; from a probe
    (``source`` ``probe:...``) :data:`PROBE_RANK_TIE_FRAC`, or the probe's own repeat spread
    (``probe_spread``) where larger: a NOISY probe's figures hold only to that."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    source = df["source"] if "source" in df else pd.Series("profile", df.index)
    spread = (pd.to_numeric(df["probe_spread"], errors="coerce").fillna(0.0)
              if "probe_spread" in df else pd.Series(0.0, df.index))
    from_probe = source.astype(str).str.startswith("probe:")
    return spread.clip(lower=PROBE_RANK_TIE_FRAC).where(from_probe, RANK_TIE_FRAC)


def rank_points(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``rank``, ``rank_tied``, ``rank_tie_frac`` and ``rank_basis``: per model
    and node count, among the points that fit (or whose fit is unknown) and have a predicted
    ips, 1 + how many of them are faster by more than the group's tie fraction (the largest
    :func:`tie_fracs` of its points: ips above ``1 + frac`` times its own), so points closer
    than the plan's error share a rank; ``rank_tied`` where another point shares it. Two
    points that both have a published figure of their settings on the profile's machine
    (:func:`published_ips`, measured) are compared by it, others by the plan's predicted
    ips; ``rank_basis`` says which decided a point's comparisons: ``published`` (all),
    ``published+plan`` (some), ``plan`` (none, or no other point). A point is counted once
    however many rows it has (:func:`_point_keys`: ``repeat=0,1,2`` makes three rows of one
    point, which share its rank and are not faster points). All four None where a point
    does not fit or has no predicted ips."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    usable = (df["fits"] != False) & df["ips"].notna()  # noqa: E712 (None = unknown: kept)
    ips = df["ips"].where(usable).astype(float)
    found = [published_ips(row) for row in df.to_dict("records")]
    published = pd.Series([f[0] if f else float("nan") for f in found], index=df.index)
    ranked = pd.DataFrame({"model": df["model"], "nodes": df["nodes"], "frac": tie_fracs(df),
                           "point": _point_keys(df), "ips": ips,
                           "published": published})[ips.notna()]
    given: dict = {}  # index: (rank, tied, frac, basis)
    for _, rows in ranked.groupby(["model", "nodes"], sort=False, dropna=False):
        given.update(_group_ranks(rows, rows["frac"].max()))
    none = (None,) * 4
    extra = {name: pd.Series([given.get(i, none)[n] for i in df.index], index=df.index,
                             dtype=object)
             for n, name in enumerate(("rank_tied", "rank_tie_frac", "rank_basis"), start=1)}
    return df.assign(rank=pd.array([given.get(i, none)[0] for i in df.index], dtype="Int64"),
                     **extra)


def _group_ranks(rows: pd.DataFrame, frac: float) -> dict:
    """:func:`rank_points` within one model and node count (``rows``: ``point``, ``ips``,
    ``published``, NaN where none): per row index, (rank, tied, ``frac``, basis)."""
    points = rows.drop_duplicates("point")
    rank, basis = {}, {}
    for i, row in rows.iterrows():
        faster, used = 0, set()
        for _, other in points[points["point"] != row["point"]].iterrows():
            both = not (math.isnan(row["published"]) or math.isnan(other["published"]))
            mine, theirs = ((row["published"], other["published"]) if both
                            else (row["ips"], other["ips"]))
            faster += theirs > mine * (1 + frac)
            used.add("published" if both else "plan")
        rank[i] = 1 + int(faster)
        basis[i] = {frozenset({"published"}): "published",
                    frozenset({"published", "plan"}): "published+plan"}.get(frozenset(used),
                                                                              "plan")
    sharing = {r: sum(rank[i] == r for i in points.index) for r in set(rank.values())}
    return {i: (r, sharing[r] > 1, frac, basis[i]) for i, r in rank.items()}


def _rank_line(df: pd.DataFrame) -> str:
    """The line under the table on what a rank is and the error it rests on, for each basis
    its ranked rows were predicted on: the data sheets' :data:`RANK_TIE_FRAC`, a probe's
    :data:`PROBE_RANK_TIE_FRAC`, or a probe's repeat spread where larger (:func:`tie_fracs`;
    a table of several profiles may hold more than one), and the ranks decided by published
    figures (:func:`_published_rank_text`)."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    ranked = df[df["rank"].notna()]
    probed = ranked.get("source", pd.Series("", ranked.index)).astype(str).str.startswith(
        "probe:")
    frac = float(tie_fracs(ranked[probed]).max()) if probed.any() else None
    spread = frac is not None and frac > PROBE_RANK_TIE_FRAC  # the probe's own noise decides
    if frac is None:
        basis = f"{RANK_TIE_FRAC:.1%}, the plan's median step-time error on {RANK_TIE_BASIS}"
    elif (~probed).any():  # e.g. cluster.probe=null,<file>: each model and node count's largest
        basis = (f"the error of what predicted them: {RANK_TIE_FRAC:.1%} from the data "
                 f"sheets, {frac:.1%} from a probe (median errors on {RANK_TIE_BASIS}"
                 + (", or the probe's own repeat spread" if spread else "")
                 + "), the larger where a model and node count mixes them")
    elif spread:
        basis = (f"{frac:.1%}, the probe's own repeat spread, above the plan's median "
                 f"step-time error from a probe ({PROBE_RANK_TIE_FRAC:.1%} on "
                 f"{RANK_TIE_BASIS})")
    else:
        basis = (f"{frac:.1%}, the plan's median step-time error from a probe on "
                 f"{RANK_TIE_BASIS}")
    return (f"rank: 1 + the points predicted faster by more than {basis} ({COMM_CHECKED}); "
            "a shared rank is written 1=" + _published_rank_text(ranked))


def _published_rank_text(ranked: pd.DataFrame) -> str:
    """The rank line's words on ranks decided by published figures (:func:`rank_points`'s
    ``rank_basis``): which model and node counts, and the study; '' where none was."""
    import pandas as pd  # on use: `python -m vitfsdp.plan --help` starts without pandas

    by = ranked[ranked.get("rank_basis", pd.Series(None, ranked.index)).map(_by_published)]
    if by.empty:
        return ""
    nodes = by.drop_duplicates(["model", "nodes"]).groupby("model", sort=False)["nodes"]
    where = "; ".join(f"{m} at {', '.join(map(str, sorted(n)))} node{'s' if max(n) > 1 else ''}"
                      for m, n in nodes)
    studies = ", ".join(sorted({published_ips(r)[1] for r in by.to_dict("records")}))
    return (f"; p: compared with each other point of its model and nodes that has one by a "
            f"published figure, the images/s measured with the same settings on this machine "
            f"({studies}: vitfsdp/reference; one run each, so within the same tie fraction), "
            f"with the rest by the plan (basis published: {where})")


def _number(x) -> str:
    """A figure for the terminal: no scientific notation, 3-4 significant digits."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    if x is None or x is pd.NA or (isinstance(x, float) and pd.isna(x)):
        return "-"
    if isinstance(x, bool | str):
        return str(x)
    if float(x).is_integer() and abs(x) >= 1:
        return f"{int(x):,}"
    a = abs(float(x))
    if a == 0 or a >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if a >= 10 else f"{x:.2f}" if a >= 1 else f"{x:.3f}"


def format_plan(df: pd.DataFrame, *, by_rank: bool = False) -> str:
    """The terminal table (at most :data:`TABLE_WIDTH` columns) and lines on its assumptions.

    Args:
        by_rank: order the rows per model and node count by ``rank`` (the points that fit,
            most ips first), the others after them.
    """
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    if by_rank:  # ties: the most ips first
        df = df.assign(_r=df["rank"].astype("float").fillna(float("inf")),
                       _ips=pd.to_numeric(df["ips"], errors="coerce"))
        df = df.sort_values(["model", "nodes", "_r", "_ips"], ascending=[True, True, True, False],
                            kind="stable", na_position="last")
    shown = pd.DataFrame({header: df[col].astype(object) if col in df else None
                          for col, header in COLUMNS})
    shown["model"] = [m if len(m) <= MODEL_WIDTH else m[:MODEL_WIDTH - 1] + "~"
                      for m in shown["model"].astype(str)]
    shown["fits"] = _verdicts(df)
    shown["ckpt"] = df["activation_checkpointing"].map({True: "yes", False: "no"})
    shown["rank"] = _ranks_shown(df)
    devices = set(df["device"].dropna()) if "device" in df else set()
    peak = {frozenset({"gpu"}): "rsvd", frozenset({"cpu"}): "rss"}.get(frozenset(devices),
                                                                     "peak")
    shown = shown.rename(columns={"rsvd": peak})
    others = _other_overrides(df)
    column = _one_key(others) if others is not None else None
    if column is not None:  # e.g. framework=torch|jax: a column of its own, beside strategy
        shown.insert(list(shown.columns).index("strategy") + 1, *column)
        others = None
    if others is not None:
        shown.insert(0, "#", range(len(shown)))
    text = shown.map(_number).to_string(index=False)
    lines = [text, *_sweep_lines(df)]
    if others is not None:
        lines += [f"#{i}: {o}" for i, o in enumerate(others)]
    builds = set(df["torch_build"].dropna()) if "torch_build" in df else set()
    lines += textwrap.wrap(_legend(peak, rocm="rocm" in builds, cuda=builds != {"rocm"}),
                           LEGEND_WIDTH)
    if "rank" in df and df["rank"].notna().any():
        lines += textwrap.wrap(_rank_line(df), LEGEND_WIDTH)
    planned = df[_verdicts(df) != NOT_APPLICABLE]
    unknown = []
    if planned["step_time_s"].isna().any():
        unknown.append("step time needs cluster.peak_tflops")
    if planned["comm_s"].isna().any():
        unknown.append("communication needs cluster.intra_node_gbps/inter_node_gbps")
    if unknown:
        lines += [f"unknown: {u}" for u in unknown]
    return "\n".join(lines)


def _sweep_lines(df: pd.DataFrame) -> list[str]:
    """The lines under either table (:func:`format_plan`, :func:`format_terms`) on what the
    sweep of ``df``'s points would do: :func:`summary_line` (fit, skipped, node-hours), a
    line per model that fits nowhere (:func:`_no_fit_lines`) and one naming the points that
    cannot run (:func:`_cannot_run`), wrapped to :data:`LEGEND_WIDTH`."""
    lines = [summary_line(df), *_no_fit_lines(df), *_published_lines(df)]
    if cannot := _cannot_run(df):
        lines += textwrap.wrap(cannot + "; python -m vitfsdp.sweep skips such a point where "
                               "its shard group does not tile its nodes (recorded "
                               "skipped_infeasible) and refuses a command that holds any other "
                               "(reasons: --json)", LEGEND_WIDTH)
    return lines


#: The published studies measured on a profile's machine (vitfsdp/reference/*.csv ``study``):
#: ORNL's ViT-FSDP study ran on Frontier (docs/reproduce.md).
PUBLISHED_ON = {"frontier": "ornl_vit_fsdp"}
#: The published settings a plan point must share to be set beside a published figure.
PUBLISHED_KEYS = ("model", "strategy", "precision", "local_batch_size",
                  "activation_checkpointing", "img_size", "gpus_per_node")


def published_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """Per plan point with a published weak-scaling figure of the same settings on the same
    machine (:data:`PUBLISHED_ON`, :data:`PUBLISHED_KEYS`, the node count too): ``model``,
    ``strategy``, ``nodes``, ``predicted`` (the plan's ``efficiency``), ``published`` (the
    study's ips at these nodes / (its ips at the plan line's smallest node count × nodes /
    that count): the plan's definition, on the same base) and ``study``. Empty where none
    matches. A study's scaling rows are the first of a setting and node count (ORNL's later
    prefetch ablation at 8 nodes repeats some)."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    from vitfsdp import reference

    columns = ["model", "strategy", "nodes", "predicted", "published", "study"]
    study = df["cluster"].map(PUBLISHED_ON) if "cluster" in df else pd.Series(dtype=object)
    if study.isna().all() or "efficiency" not in df:
        return pd.DataFrame(columns=columns)
    ips = _published_table()
    ours = df.assign(study=study, gpus_per_node=df["world_size"] // df["nodes"],
                     _line=_line_keys(df))
    ours = ours[ours["efficiency"].notna() & ours["study"].notna()]
    rows = []
    for _, line in ours.groupby("_line"):
        base = int(line["nodes"].min())
        for _, point in line[line["nodes"] > base].iterrows():
            key = (point["study"], *(reference.as_setting(point[k]) for k in PUBLISHED_KEYS))
            at, first = ips.get((*key, int(point["nodes"]))), ips.get((*key, base))
            if at is not None and first is not None:
                rows.append({"model": point["model"], "strategy": point["strategy"],
                             "nodes": int(point["nodes"]), "predicted": point["efficiency"],
                             "published": at / (first * point["nodes"] / base),
                             "study": point["study"]})
    return pd.DataFrame(rows, columns=columns)


@functools.cache
def _published_table() -> dict[tuple, float]:
    """The published studies' global images/s by (``study``, the :data:`PUBLISHED_KEYS`
    settings as the CSVs write them, nodes): the first row of a setting and node count
    (:func:`published_efficiency`); empty where the package data is not installed."""
    # on use: `python -m vitfsdp.plan --help` starts without pandas
    import pandas as pd

    from vitfsdp import reference

    tables = [t for _, t in reference.tables()]
    if not tables:
        return {}
    ref = pd.concat(tables, ignore_index=True)
    ref = ref[ref["metric"] == "ips"].drop_duplicates(["study", *PUBLISHED_KEYS, "nodes"])
    return {(r["study"], *(r[k] for k in PUBLISHED_KEYS), int(r["nodes"])): float(r["value"])
            for _, r in ref.iterrows()}


def published_ips(point: Mapping[str, Any]) -> tuple[float, str] | None:
    """(global images/s, study) a published study measured with ``point``'s settings at its
    node count on its profile's machine (:data:`PUBLISHED_ON`; :data:`PUBLISHED_KEYS`,
    ``gpus_per_node`` as ``world_size // nodes``), or None where no row matches or a
    setting is missing. ``point``: a :func:`plan_table` row, or :func:`published_settings`
    of a config."""
    from vitfsdp import reference  # on use: `python -m vitfsdp.plan --help` loads no pandas

    study = PUBLISHED_ON.get(point.get("cluster"))
    nodes, world = point.get("nodes"), point.get("world_size")
    if study is None or not nodes or not world:
        return None
    settings = {**point, "gpus_per_node": int(world) // int(nodes)}
    if any(k not in settings for k in PUBLISHED_KEYS):
        return None
    key = (study, *(reference.as_setting(settings[k]) for k in PUBLISHED_KEYS), int(nodes))
    ips = _published_table().get(key)
    return None if ips is None else (ips, study)


def published_step(point: Mapping[str, Any]) -> tuple[float, str] | None:
    """(seconds per step, study): ``point``'s global batch (``local_batch_size`` ×
    ``world_size``) over the images/s a published study measured with its settings
    (:func:`published_ips`), or None where none matches. ``point``: as
    :func:`published_ips`'s."""
    found = published_ips(point)
    if found is None:
        return None
    return float(point["local_batch_size"]) * float(point["world_size"]) / found[0], found[1]


def priced_steps(df: pd.DataFrame) -> list:
    """Per row of a plan table, the :class:`vitfsdp.plan.SizingStep` its node-hours are priced
    at (:func:`summary_line`), as ``cluster.time=auto`` sizes its job
    (:func:`vitfsdp.plan.sizing_step`): the slower of its predicted ``step_time_s`` and the
    step time published for its settings (:func:`published_step`)."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    from vitfsdp.plan import SizingStep

    predicted = (pd.to_numeric(df["step_time_s"], errors="coerce") if "step_time_s" in df
                 else pd.Series(math.nan, df.index))
    return [SizingStep.of(float(s), published_step(row))
            for s, row in zip(predicted, df.to_dict("records"), strict=True)]


def published_settings(cfg, device: str) -> dict[str, Any]:
    """The settings of ``cfg`` (a :class:`vitfsdp.config.RunConfig`) that
    :func:`published_ips` matches, as :func:`plan_sweep` writes them in a row; ``device``:
    ``gpu`` or ``cpu`` (the precision it resolves to)."""
    return {"cluster": cfg.cluster.name, "model": cfg.model.name,
            "strategy": cfg.strategy.name, "nodes": cfg.nodes, "world_size": cfg.world_size,
            "local_batch_size": cfg.train.local_batch_size,
            "precision": cfg.resolved_precision("cuda" if device == "gpu" else "cpu"),
            "activation_checkpointing": cfg.train.activation_checkpointing,
            "img_size": cfg.model.resolved_img_size()}


def _line_keys(df: pd.DataFrame) -> pd.Series:
    """Per row, its weak-scaling line: every override but ``nodes`` (:func:`weak_scaling`)."""
    return df["overrides"].map(lambda o: " ".join(x for x in str(o).split()
                                                  if not x.startswith("nodes=")))


def _published_lines(df: pd.DataFrame) -> list[str]:
    """Lines under the plan table setting its predicted efficiency beside a published
    study's measured one on the same machine (:func:`published_efficiency`): for each
    model and strategy, the largest node count both have, and the whole comparison's worst
    miss; ``[]`` where nothing matches."""
    both = published_efficiency(df)
    if both.empty:
        return []
    last = both.sort_values("nodes").groupby(["model", "strategy"], sort=False).tail(1)
    pairs = ", ".join(f"{r.model} {r.strategy} at {r.nodes} nodes {r.published:.2f} "
                      f"(plan {r.predicted:.2f})" for r in last.itertuples())
    worst = both.loc[(both["predicted"] - both["published"]).abs().idxmax()]
    return textwrap.wrap(
        f"published weak-scaling efficiency on this machine, same settings "
        f"({', '.join(sorted(set(both['study'])))}: vitfsdp/reference; docs/plan.md, \"How "
        f"good it is\"): {pairs}; the plan's largest miss here: {worst['model']} "
        f"{worst['strategy']} at {worst['nodes']} nodes, {worst['predicted']:.2f} predicted, "
        f"{worst['published']:.2f} measured", LEGEND_WIDTH)


def _ranks_shown(df: pd.DataFrame) -> list:
    """The table's rank column: ``2``, or ``2=`` where another point shares the rank
    (``rank_tied``); None where there is no rank."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    ranks = df["rank"] if "rank" in df else pd.Series(None, df.index, dtype=object)
    tied = df["rank_tied"] if "rank_tied" in df else pd.Series(False, df.index)
    basis = df["rank_basis"] if "rank_basis" in df else pd.Series(None, df.index)
    return [None if pd.isna(r) else
            f"{int(r)}{'=' if not pd.isna(t) and t else ''}{'p' if _by_published(b) else ''}"
            for r, t, b in zip(ranks, tied, basis, strict=True)]


def _by_published(basis) -> bool:
    """Whether a ``rank_basis`` (:func:`rank_points`) compared the point by a published
    figure with at least one other point."""
    return isinstance(basis, str) and basis.startswith("published")


#: ``--terms``: the predicted step split into its terms, seconds (plan_table column, header),
#: after the point and its ``fits`` (:func:`_verdicts`, as the default table's).
TERM_COLUMNS = (
    ("model", "model"), ("strategy", "strategy"), ("nodes", "nodes"), ("fits", "fits"),
    ("gemm_s", "gemm"),
    ("other_s", "other"), ("optimizer_s", "optim"), ("exposed_comm_s", "comm"),
    ("framework_s", "loop"), ("step_time_s", "step s"), ("ips", "ips"),
    ("efficiency", "eff"),
)  # fmt: skip


def format_terms(df: pd.DataFrame) -> str:
    """The terminal table of the predicted step's terms (seconds per step) and the weak-scaling
    efficiency against the smallest node count, each point's ``fits`` as the default table
    says it, the same lines under it on what the sweep would run (:func:`_sweep_lines`: fit
    counts, node-hours, a model that fits nowhere, points that cannot run), and the
    figures' source."""
    # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
    import pandas as pd

    shown = pd.DataFrame({header: df[col].astype(object) for col, header in TERM_COLUMNS})
    shown["model"] = [m if len(m) <= MODEL_WIDTH else m[:MODEL_WIDTH - 1] + "~"
                      for m in shown["model"]]
    shown["fits"] = _verdicts(df)
    lines = [shown.map(_number).to_string(index=False), *_sweep_lines(df),
             "fits: as the default table's (yes, tight, squeezed: run; NO: skipped; n/a)",
             "seconds per step: gemm = matmuls of forward and backward (and recompute); other",
             "= attention, LayerNorm, activation, adds; optim = AdamW; comm = collectives not",
             "hidden behind compute; loop = the loop's and wrapper's own time: the probe's,",
             "else on a GPU what the host needs beyond the device's step (docs/plan.md's",
             "host constants, measured on an H100); eff = ips / (ips at the fewest nodes x",
             "nodes ratio)"]
    sources = sorted(set(df["source"].dropna().astype(str)))  # an n/a row has none
    lines.append("figures from: " + ", ".join(sources))
    notes = sorted({n for x in df["notes"].dropna().astype(str) for n in x.split("; ") if n})
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _outside_text(rocm: bool, cuda: bool) -> str:
    """The legend's words on what a GPU rank holds outside the allocator: the context
    (:data:`vitfsdp.plan.memory.GPU_CONTEXT_GIB`, measured on an H100) and a communicator's
    buffers (:data:`~vitfsdp.plan.memory.NCCL_COMMUNICATOR_GIB`, published for NCCL on an
    A100); on a ROCm profile's rows (HIP, RCCL) both are assumed, neither measured there."""
    # on use, as the plan's other modules here: `python -m vitfsdp.plan --help` loads none
    from vitfsdp.plan.memory import GPU_CONTEXT_GIB, NCCL_COMMUNICATOR_GIB

    context, comm = f"{GPU_CONTEXT_GIB:.2f} GiB", f"{NCCL_COMMUNICATOR_GIB:.2f} GiB"
    if not rocm:
        return (f"the CUDA context, {context} measured, + {comm} per NCCL communicator, "
                "published")
    assumed = (f"{context} assumed (measured on an H100), + {comm} per RCCL communicator "
               "assumed (published for NCCL on A100)")
    if not cuda:
        return f"the HIP context, {assumed}"
    return (f"the CUDA context, {context} measured, + {comm} per NCCL communicator, "
            f"published; on the ROCm profile's rows the HIP context, {assumed}")


def _legend(peak: str, *, rocm: bool = False, cuda: bool = True) -> str:
    """What the table's columns mean, ``peak`` being the header of the predicted peak
    (``rsvd``, ``rss`` or ``peak``); ``rocm``/``cuda``: rows of a ROCm profile
    (``cluster.torch_build=rocm``: frontier, lumi) / of any other are in the table, whose
    context and communicator figures are assumed there (:func:`_outside_text`)."""
    # on use, as the plan's other modules here: `python -m vitfsdp.plan --help` loads none
    from vitfsdp.plan.memory import GPU_ALLOCATOR_OVERHEAD

    cache = f"the allocator's cache, {GPU_ALLOCATOR_OVERHEAD:.0%} of alloc"
    what = {"rsvd": f"torch's reserved peak: alloc + {cache}",
            "rss": "the resident peak: alloc + the process baseline",
            "peak": f"the reserved peak (GPU: alloc + {cache}) or the resident one (CPU)"}[peak]
    return (f"GiB per rank: alloc = the allocated peak; {peak} = {what}; margin = the device "
            f"memory (JAX: XLA's pool) - {peak} - what a GPU rank holds outside the allocator "
            f"({_outside_text(rocm, cuda)}); fits: yes "
            "where margin >= 0, tight where it is under cluster.memory_reserve_frac of the "
            "device, NO where it is negative (the sweep skips it), squeezed where alloc alone "
            "would fit (the allocator left less cache than it keeps: the sweep runs it, "
            "warned), n/a where "
            "the point cannot run. step: seconds; comm: seconds of step - compute (the "
            "communication not hidden); rank: per model and nodes, 1 + the points that fit "
            "predicted faster by more than the plan's error (next line). All columns: "
            "--csv FILE, --json; docs/plan.md: the model and its sources")


#: The fix a reason of :func:`vitfsdp.plan.predict` names for a point that does not fit:
#: ``"; fits with train.activation_checkpointing=true (predicted peak X GiB)"``.
FIX_IN_REASON = re.compile(r"; fits with (\S+=\S+) \(predicted peak")


def _no_fit_lines(df: pd.DataFrame) -> list[str]:
    """One line per model none of whose points fits (``yes``/``tight``; none unknown, at
    least one ``NO`` or ``squeezed``): how many of its points that can run (not ``n/a``)
    would with the override their reasons name (:data:`FIX_IN_REASON`), or that none names
    one; wrapped to :data:`LEGEND_WIDTH`."""
    verdict = _verdicts(df)
    reasons = df["reason"] if "reason" in df else verdict.map(lambda _: None)
    fixes = reasons.map(lambda r: m.group(1) if isinstance(r, str)
                        and (m := FIX_IN_REASON.search(r)) else None)
    lines = []
    for model, v in verdict.groupby(df["model"], sort=False):
        if v.isin(("yes", "tight", "?")).any() or not v.isin(("NO", "squeezed")).any():
            continue
        planned = int((v != NOT_APPLICABLE).sum())
        head = f"{model}: 0 of {planned} point{'s' if planned != 1 else ''} fit"
        named = fixes[v.index].dropna()
        texts = ([f"{head}; {n} would with {fix} (add it)"
                  for fix, n in named.value_counts(sort=False).items()]
                 or [f"{head}; their reasons name no override that fits (reasons: --json)"])
        lines += [w for t in texts for w in textwrap.wrap(t, LEGEND_WIDTH)]
    return lines


def _cannot_run(df: pd.DataFrame) -> str:
    """The line naming ``df``'s points of verdict ``n/a`` with their short reasons
    (:func:`vitfsdp.plan.impossible.cannot_run_line`); ``""`` where there are none."""
    if "cannot_run" not in df:
        return ""
    rows = df[_verdicts(df) == NOT_APPLICABLE]
    return cannot_run_line([Impossible(str(r["point"]).split(), str(r.get("reason", "")),
                                       str(r["cannot_run"]),
                                       {"strategy": r["strategy"], "nodes": r["nodes"]})
                            for _, r in rows.iterrows()])


def _other_overrides(df: pd.DataFrame) -> list[str] | None:
    """Per row, the point's overrides besides model, strategy and nodes, where they differ
    between rows (a legend under the table); None when they do not."""
    shown = ("model=", "strategy=", "nodes=", "strategy.shard_group_size=",  # in the name
             "train.local_batch_size=", "precision=", "train.activation_checkpointing=")
    rest = [" ".join(o for o in str(p).split() if not o.startswith(shown)) for p in df["point"]]
    return rest if len(set(rest)) > 1 else None


def _one_key(others: list[str]) -> tuple[str, list[str]] | None:
    """``(key, values)`` where every row's other overrides are one ``key=value`` of the
    same key (``framework=torch``, ``framework=jax``): shown as a column; else None."""
    pairs = [o.split("=", 1) if o and " " not in o and "=" in o else None for o in others]
    if any(p is None for p in pairs) or len({k for k, _ in pairs}) != 1:
        return None
    return pairs[0][0], [v for _, v in pairs]


def plain_text(doc: str) -> str:
    """``doc`` (reStructuredText, as the module's docstring) as ``--help`` prints it: a role
    (``:func:`~a.b` ``) becomes its target's name, double backquotes go."""
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", doc).replace("``", "")


def _check_sweep_dirs(paths: list[Path]) -> None:
    """ValueError (one line) where a ``--calibrate`` path is a file, such as a runs.csv
    export: the fit reads run records; it names the commands that check this plan against
    an export (tools/plan_check.py, the analysis rebuilt from it), shell-quoted."""
    files = [str(p) for p in paths if p.is_file()]
    if files:
        raise ValueError(
            f"{files[0]} is a file, not a sweep dir: --calibrate reads run records; this "
            "checkout's plan is checked against a runs.csv export by "
            f"{shlex.join(['python', 'tools/plan_check.py', files[0]])} or "
            f"{shlex.join(['python', '-m', 'vitfsdp.analysis', *files, '--out', 'DIR'])} "
            "--report (its 'Predicted against measured' section)")


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit status: 0 when a table is printed (points that cannot run
    among the others are rows of verdict ``n/a``; points the sweep refuses as an earlier
    point again are named on stderr first, and planned once), 2 for a refused option or
    override and where no point can run (the one point asked for, or every point, cannot:
    one line)."""
    parser = argparse.ArgumentParser(prog="python -m vitfsdp.plan",
                                     description=plain_text(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="sweep overrides (key=a,b ...)")
    parser.add_argument("-m", "--multirun", action="store_true", help="accepted, as in sweep")
    parser.add_argument("--csv", type=Path, help="also write the table to this CSV file")
    parser.add_argument("--json", action="store_true", help="print JSON records, not a table")
    parser.add_argument("--terms", action="store_true",
                        help="print the predicted step split into its terms, and efficiency")
    parser.add_argument("--rank", action="store_true",
                        help="order the points that fit by predicted ips, per model and nodes")
    parser.add_argument("--calibrate", nargs="+", type=Path, metavar="SWEEP_DIR",
                        help="predicted vs measured for every completed run: from the probe "
                             "(--probe, or SWEEP_DIR/probe.json) term by term, else a fit")
    parser.add_argument("--probe", type=Path, default=None, metavar="PROBE_JSON",
                        help="with --calibrate: predict from this probe file")
    args = parser.parse_args(argv)
    try:
        if args.calibrate:
            _check_sweep_dirs(args.calibrate)
            # on use: `python -m vitfsdp.plan --help` starts without Hydra, the config and pandas
            from vitfsdp.plan.calibrate import calibrate

            # the fit's progress on stderr: minutes where a study holds hundreds of runs
            logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
            print(calibrate(args.calibrate, args.overrides, args.probe))
            return 0
        df, refused = plan_sweep(args.overrides)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # an override Hydra or OmegaConf refuses: one line, as the sweep
        from hydra.errors import ConfigCompositionException  # loaded by now: no cost
        from omegaconf.errors import OmegaConfBaseException

        from vitfsdp.config import one_line

        if not isinstance(e, ConfigCompositionException | OmegaConfBaseException):
            raise
        print(f"error: {one_line(e, args.overrides)}", file=sys.stderr)
        return 2
    if refused:  # before the table, on stderr: --json's output stays JSON
        print("python -m vitfsdp.sweep refuses these overrides, launching nothing; the plan "
              "below counts each config once:", *refused, sep="\n", file=sys.stderr)
        sys.stderr.flush()
    if args.csv:
        df.to_csv(args.csv, index=False)
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    print(json.dumps(records, indent=1) if args.json
          else format_terms(df) if args.terms else format_plan(df, by_rank=args.rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
