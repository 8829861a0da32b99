"""The study's tables from a :func:`vitfsdp.analysis.collect.collect_runs` frame.

- :func:`study_tables`: every table below (and the scaling and JAX/PyTorch tables of
  :mod:`vitfsdp.analysis.collect`) by name;
- :func:`points_table`: one row per sweep point (repeats aggregated: median ips with its
  min and max over repeats), with scaling efficiency, TFLOP/s, MFU, memory and the cost of
  an epoch;
- :func:`best_table`: the fastest configuration per model and node count;
- :func:`failures_table`: every run that did not complete (or measured no ips), with why;
- :func:`prefetch_table`: ips under each ``backward_prefetch`` x ``limit_all_gathers``;
- :func:`calibration_table`: the plan's predictions against the measurements, per run.

Cost per epoch: ``epoch_hours = dataset_size / ips / 3600`` (ips = global images/s),
``node_hours_per_epoch = epoch_hours x nodes`` and ``cost_per_epoch = node_hours_per_epoch x
cluster.price_per_node_hour`` (``NaN`` where the cluster profile sets no price).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from vitfsdp.analysis.lines import (
    _ideal_ips,
    _sort_key,
    at_their_points,
    baseline_nodes,
    competed_flags,
    configurations,
    efficiency_footnote,
    flag_column,
    format_efficiency,
    framework_ratio_table,
    judged_busy,
    judged_over_windows,
    line_columns,
    line_label,
    numeric_column,
    scaling_table,
)
from vitfsdp.analysis.recipe import recipe_table
from vitfsdp.analysis.reference import reference_table
from vitfsdp.analysis.rows import NETWORK_COLUMNS, STATE_COLUMNS
from vitfsdp.analysis.verdict import (
    BEYOND,
    CONTENDED,
    FEW_RUNS,
    HOST_BOUND,
    IN_NOISE,
    MAX_SEPARATION_CHANCE,
    NOT_KNOWN_REPEATS,
    NOT_LIKE_FOR_LIKE,
    NOT_RESULTS,
    ONE_RUN,
    UNMEASURED,
    WITHIN,
    above_ideal_cause,
    contended_verdict,
    differs,
    failed_note,
    gpu_unmeasured,
    judge,
    judged_runs,
    left_out_note,
    loss_parted,
    loss_range,
    pooled_verdict,
    ranked,
    read_flag,
    span,
    unlike_verdict,
    with_notes,
)
from vitfsdp.core.throughput import (
    HOST_BOUND_BUSY_FRAC,
    NOISY_SPREAD,
    OTHER_WORK_FRAC,
    WINDOW_OTHER_WORK_FRAC,
    any_host_bound,
    host_bound,
)
from vitfsdp.plan.calibrate import compare
from vitfsdp.plan.memory import CPU_BASELINE_GIB

log = logging.getLogger(__name__)

#: Training images of ImageNet-1k (ILSVRC-2012 train split; Russakovsky et al. 2015, table 2),
#: the default dataset size of the cost per epoch.
IMAGENET_TRAIN_IMAGES = 1_281_167
#: Per-point aggregation over repeats: the median of rates and times ...
POINT_MEDIANS = ("ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "mfu",
                 "hw_tflops_per_gpu", "hfu", "device_busy_frac", "device_busy_min_frac")
#: ... the maximum of memory maxima and counts (the worst repeat) ...
POINT_MAXIMA = ("peak_mem_gib", "peak_mem_reserved_gib", "device_mem_used_gib",
                "alloc_retries", "num_ooms", "host_load_1m", "cpu_throttled_s")
#: ... the maximum of the model state a rank held and of the bytes sent over an emulated
#: link (the same in every repeat of a point) ...
POINT_HELD = (*STATE_COLUMNS, *NETWORK_COLUMNS)
#: ... the minimum of the minimum-over-ranks memory ...
POINT_MINIMA = ("peak_mem_min_gib", "device_mem_used_min_gib")
#: ... and what a point's runs share (world, device, price, the plan's prediction).
POINT_FIRST = ("world_size", "global_batch_size", "device_memory_gib", "price_per_node_hour",
               "memory_limit_gib", "peak_mem_kind", "pred_peak_mem_gib", "pred_step_time_s",
               "pred_ips", "pred_fits", "pred_mem_metric", "pred_source", "device_type")
#: The ``backward_prefetch`` values of the ablation, in the order bars are drawn.
PREFETCH_ORDER = ("BACKWARD_PRE", "BACKWARD_POST", "NONE")
#: Columns of the ablation that are not part of a bar group's identity.
ABLATION_COLUMNS = ("backward_prefetch", "limit_all_gathers")
#: Every verdict of :func:`verdict_kind`, the contended one first (it replaces the others).
VERDICTS = (CONTENDED, NOT_KNOWN_REPEATS, NOT_LIKE_FOR_LIKE, HOST_BOUND, UNMEASURED, BEYOND,
            *NOT_RESULTS)


def study_tables(df: pd.DataFrame,
                 dataset_size: int = IMAGENET_TRAIN_IMAGES) -> dict[str, pd.DataFrame]:  # fmt: skip
    """Every table of the study, by the file stem ``python -m vitfsdp.analysis`` writes it
    under: ``runs`` (``df`` itself), ``scaling``, ``points``, ``best``, ``failures``,
    ``equivalence`` (points that compute the same thing under two names:
    :func:`equivalence_table`), ``prefetch``, ``calibration``, ``framework_ratio``,
    ``reference`` (each point against
    the published figures of its setup, :func:`vitfsdp.analysis.reference.reference_table`)
    and ``recipe`` (a recipe ablation, :func:`vitfsdp.analysis.recipe.recipe_table`);
    a table with nothing to show is empty, never missing.

    Args:
        df: a :func:`vitfsdp.analysis.collect.collect_runs` frame.
        dataset_size: images per epoch for the cost columns of ``points`` and ``best``.

    Raises:
        ValueError: ``dataset_size`` is not a positive number of images.
    """
    warn_unlabelled_repeats(completed(df), [*line_columns(df), "nodes"])  # once: not
    # in points_table, which each figure process calls again
    points = points_table(df, dataset_size)
    equivalence = equivalence_table(points, df)
    return {"runs": df, "scaling": scaling_table(df), "points": points,
            "best": best_table(points, observed_noise(equivalence)),
            "equivalence": equivalence,
            "failures": failures_table(df),
            "prefetch": prefetch_table(points, observed_noise(equivalence), df),
            "calibration": calibration_table(df),
            "framework_ratio": framework_ratio_table(df, observed_noise(equivalence)),
            "reference": reference_table(df),
            "recipe": recipe_table(df, observed_noise(equivalence))}


def completed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` that completed with a measured ips at a known node count."""
    return df[(df["status"] == "completed") & df["ips"].notna() & df["nodes"].notna()]


def points_table(df: pd.DataFrame, dataset_size: int = IMAGENET_TRAIN_IMAGES) -> pd.DataFrame:
    """One row per completed sweep point; runs identical but for ``repeat`` are aggregated.

    A point is a line (:func:`~vitfsdp.analysis.lines.line_columns`: model, strategy and
    every varying config) at a node count. Its ideal is linear scaling from the line's
    smallest completed node count ``n0``: ``ideal_ips = ips(n0) x nodes / n0``.

    Args:
        df: a ``collect_runs`` frame (every status; only completed runs count here).
        dataset_size: images per epoch for the cost columns (default ImageNet-1k train).

    Returns:
        The line columns, ``nodes``, ``configuration`` (the line's label, as in the
        figures' legends), ``num_repeats`` (its completed runs), ``runs_share_repeat`` and
        ``repeats_differ`` (its completed runs that share a ``repeat`` label, 0 where none
        does, and what differs between its runs there: :func:`shared_repeats`; such runs
        are not known repeats), ``runs_failed`` (its runs
        that did not complete, or measured no ips: :func:`runs_per_point` less
        ``num_repeats``), ``runs_contended`` (its runs of any status that other work
        competed with: :func:`competed_runs`), ``runs_resumed`` (its completed runs that
        resumed from a checkpoint: runs.csv ``num_attempts`` > 1, their figures pooling
        every attempt's windows) and ``attempts_differ`` (true where one of them has runs.csv
        ``attempts_differ`` true: its attempts measured different speeds, a point to rerun;
        false where every resumed run's attempts agree; NA where none has windows of two
        attempts), ``runs_judged`` (the completed runs its images/s, spread and verdicts
        are over: those other work did not compete with where it has any,
        :func:`~vitfsdp.analysis.verdict.judged_runs`) and ``figures_contended`` (true where
        every one of them was contended: its figures measure the contention), ``ips``
        (median over those runs, global images/s), ``ips_repeat_min``/``ips_repeat_max``
        (over them),
        ``ips_repeat_spread`` ((max - min) / median over at least two repeats) and ``noisy``
        (that spread above :data:`vitfsdp.core.throughput.NOISY_SPREAD`; NA for one run),
        ``ips_window_min``/``ips_window_max`` (over every measured window of its runs),
        ``ideal_ips``, ``baseline_nodes`` (the line's ``n0``: larger than the model's
        smallest node count where the line did not complete there, and then its efficiencies
        do not compare with the other lines'), ``baseline_runs``, ``baseline_contended`` and
        ``baseline_host_bound`` (what every efficiency of the line inherits from its
        baseline, :func:`baseline_flags`), ``scaling_efficiency``,
        ``efficiency_min``/``efficiency_max`` (its bounds: the point's
        lowest measurement over the ideal from the baseline's highest, and the other way round,
        :func:`efficiency_bounds`; 1.0 at ``n0``), ``above_ideal_cause`` (where the
        efficiency rounds above 100 %: its baseline's host-bound, contended or one run, else
        noise), the medians of :data:`POINT_MEDIANS`
        (``tflops_per_gpu`` in TFLOP/s, ``mfu``/``hfu`` and ``device_busy_frac`` as fractions),
        ``loss`` (the median final training loss, nats; NaN where its runs' final losses
        part, :func:`~vitfsdp.analysis.verdict.loss_parted`: a median no run reached),
        ``loss_min``/``loss_max`` (the lowest and highest final loss of its runs, nats: its
        loss as a range where they part), ``peak_mem_since`` (since when its
        peak memory counts, :data:`PEAK_SINCE`: a JAX run's on a GPU since its process
        started, set-up included, PyTorch's since each window),
        ``device_busy_min_frac`` (the least busy rank's), ``host_bound``
        (:func:`vitfsdp.core.throughput.host_bound` of the median least busy rank's share,
        :func:`~vitfsdp.analysis.lines.judged_busy`:
        true where the host decided the step, NA where not measured), memory in GiB (max of
        maxima, min of minima), the model state a rank held (GiB) and the bytes sent over an
        emulated link (GB) of :data:`POINT_HELD` (their maximum over repeats), ``epoch_hours``,
        ``node_hours_per_epoch`` and ``cost_per_epoch`` (in the currency of
        ``price_per_node_hour``), the plan's ``pred_*`` columns, and ``device_type`` (what
        its runs ran on, runs.csv's: ``cpu`` or ``cuda``, ROCm too; a GPU point without a busy
        share is not ranked, :func:`best_table`).

    Raises:
        ValueError: ``dataset_size`` is not a positive number of images.
    """
    if not dataset_size or dataset_size <= 0:
        raise ValueError(f"dataset_size={dataset_size} must be a positive number of images "
                         "(--dataset-size)")
    keys = [*line_columns(df), "nodes"]
    done = completed(df)
    if done.empty:
        return pd.DataFrame(columns=[*keys, "configuration", "num_repeats", "runs_failed",
                                     "runs_contended", "ips", "ideal_ips",
                                     "scaling_efficiency"])
    shared = shared_repeats(done, keys)
    contended = competed_flags(done)
    judged = judged_runs(contended, [done[k] for k in keys])
    completed_runs = done.groupby(keys, dropna=False, sort=False)["run_dir"].count()
    done = done.assign(configuration=configurations(df).loc[done.index],
                       judged_busy=judged_busy(done), _contended=contended,
                       loss=numeric_column(done, "loss"), peak_mem_since=peak_since(done),
                       **_resumed_flags(done))[judged]
    groups = done.groupby(keys, dropna=False, sort=False)
    aggs = {"configuration": ("configuration", "first"), "runs_judged": ("run_dir", "count"),
            "figures_contended": ("_contended", "all"),
            "ips_repeat_min": ("ips", "min"), "ips_repeat_max": ("ips", "max"),
            "ips_window_min": ("ips_min", "min"), "ips_window_max": ("ips_max", "max"),
            "runs_resumed": ("resumed", "sum"), "attempts_differ": ("differ", _any_flag),
            "loss": ("loss", "median"), "loss_min": ("loss", "min"),
            "loss_max": ("loss", "max"),
            "peak_mem_since": ("peak_mem_since", lambda v: ", ".join(sorted(set(v))))}
    layout = [c for c in ("sharding_strategy", "shard_group_size") if c not in keys]
    aggs |= {c: (c, "first") for c in layout}  # what the point computes (equivalence_table)
    # where one of the ablation's settings is swept, the other (fixed, so it splits no
    # line) too: the prefetch table and figure need both
    fixed = ([c for c in ABLATION_COLUMNS if c not in keys and c in done]
             if set(ABLATION_COLUMNS) & set(keys) else [])
    aggs |= {c: (c, "first") for c in fixed}
    aggs |= {c: (c, "median") for c in (*POINT_MEDIANS, "judged_busy")}
    aggs |= {c: (c, "max") for c in POINT_MAXIMA}
    aggs |= {c: (c, "min") for c in POINT_MINIMA}
    aggs |= {c: (c, "max") for c in POINT_HELD if c in done}
    aggs |= {c: (c, "first") for c in POINT_FIRST}
    points = groups.agg(**aggs).reset_index()
    points["num_repeats"] = completed_runs.reindex(
        pd.MultiIndex.from_frame(points[keys]) if len(keys) > 1 else points[keys[0]]
    ).to_numpy().astype(int)
    points["nodes"] = points["nodes"].astype("Int64")
    points["loss"] = points["loss"].where(~pd.Series(  # a median no run reached
        map(loss_parted, points["loss_min"], points["loss_max"]), index=points.index))
    runs = point_runs(df, points)
    points["runs_failed"] = (runs["total"] - points["num_repeats"]).astype(int)
    points["runs_contended"] = runs["contended"].astype(int)
    points["ideal_ips"] = _ideal_ips(points, keys[:-1])
    points["baseline_nodes"] = baseline_nodes(points, keys[:-1]).astype("Int64")
    points["scaling_efficiency"] = points["ips"] / points["ideal_ips"]
    points["efficiency_min"], points["efficiency_max"] = efficiency_bounds(points, keys[:-1])
    points["host_bound"] = points.pop("judged_busy").map(host_bound).astype("boolean")
    points = points.join(baseline_flags(points, keys[:-1]))
    repeated = points["runs_judged"] >= 2
    points["ips_repeat_spread"] = ((points["ips_repeat_max"] - points["ips_repeat_min"])
                                   / points["ips"]).where(repeated)
    points["noisy"] = (points["ips_repeat_spread"] > NOISY_SPREAD).where(repeated).astype(
        "boolean")
    points = points.join(cost_columns(points, dataset_size))
    points = points.merge(shared, on=keys, how="left")  # null keys match (merge)
    points["runs_share_repeat"] = points["runs_share_repeat"].fillna(0).astype(int)
    points["attempts_differ"] = points["attempts_differ"].astype("boolean")
    order = [*keys, "configuration", "num_repeats", "runs_share_repeat", "repeats_differ",
             "runs_failed", "runs_contended",
             "runs_judged", "figures_contended", "runs_resumed", "attempts_differ",
             "world_size", "global_batch_size", "ips",
             "ips_repeat_min", "ips_repeat_max", "ips_repeat_spread", "noisy",
             "ips_window_min", "ips_window_max",
             "ideal_ips", "baseline_nodes", "baseline_runs", "baseline_contended",
             "baseline_host_bound", "scaling_efficiency", "efficiency_min",
             "efficiency_max", "above_ideal_cause", *POINT_MEDIANS[1:], "host_bound",
             "loss", "loss_min", "loss_max", *POINT_MAXIMA[:1], "peak_mem_since",
             *POINT_MINIMA[:1],
             *POINT_MAXIMA[1:], *POINT_MINIMA[1:], *[c for c in POINT_HELD if c in points],
             "device_memory_gib", "memory_limit_gib", "epoch_hours", "node_hours_per_epoch",
             "price_per_node_hour", "cost_per_epoch", *POINT_FIRST[5:], *layout,
             *fixed]  # fmt: skip
    points = points[order].sort_values(keys, kind="stable", key=_sort_key)
    return points.reset_index(drop=True)


def baseline_flags(points: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """What each point's efficiency inherits from its line's baseline (the point at the
    line's smallest node count, ``n0``), on ``points``' index: ``baseline_runs`` (the runs
    its images/s are taken over, ``runs_judged``), ``baseline_contended`` (its figures rest
    on runs other work competed with only: ``figures_contended``) and
    ``baseline_host_bound`` (its ``host_bound``; NA where not measured); every point of a
    line carries them, since every efficiency of the line divides by that baseline. Then
    ``above_ideal_cause`` (:func:`~vitfsdp.analysis.verdict.above_ideal_cause` of the
    three; null where the efficiency does not round above 100 %).

    Args:
        points: :func:`points_table`'s rows (``nodes``, ``runs_judged``,
            ``figures_contended``, ``host_bound``, ``scaling_efficiency``).
        keys: the line columns (a line is one baseline).
    """
    by_line = [points[k] for k in keys]
    nodes = points["nodes"].astype("float64")
    at_n0 = nodes == nodes.groupby(by_line, dropna=False).transform("min")

    def at_baseline(column: str) -> pd.Series:
        values = points[column].astype(object).where(at_n0)
        return values.groupby(by_line, dropna=False).transform("first")

    out = pd.DataFrame({
        "baseline_runs": pd.to_numeric(at_baseline("runs_judged")).astype("Int64"),
        "baseline_contended": at_baseline("figures_contended").astype("boolean"),
        "baseline_host_bound": at_baseline("host_bound").astype("boolean")},
        index=points.index)
    above = points["scaling_efficiency"].map(
        lambda x: pd.notna(x) and round(x * 100) > 100)
    causes = [above_ideal_cause(b, c, r) if a else None for a, b, c, r in zip(
        above, out["baseline_host_bound"], out["baseline_contended"], out["baseline_runs"],
        strict=True)]
    return out.assign(above_ideal_cause=pd.Series(causes, index=points.index, dtype=object))


def _resumed_flags(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """Per run of ``runs`` (runs.csv rows): ``resumed``, whether it took more than one
    attempt (``num_attempts`` > 1), and ``differ``, its ``attempts_differ`` as True, False
    or None (:func:`~vitfsdp.analysis.verdict.read_flag`; None: its measured windows are
    one attempt's, or older records without the column)."""
    attempts = numeric_column(runs, "num_attempts")
    differ = runs.get("attempts_differ", pd.Series(None, index=runs.index, dtype=object))
    return {"resumed": (attempts > 1).astype(int),
            "differ": pd.Series([read_flag(v) for v in differ], index=runs.index,
                                dtype=object)}


def _any_flag(flags: pd.Series) -> bool | None:
    """True where any of ``flags`` is, False where the known ones all are not, None where
    none is known."""
    known = flags.dropna()
    return bool(known.any()) if len(known) else None


def runs_per_point(df: pd.DataFrame, points: pd.DataFrame) -> pd.Series:
    """How many runs each point of ``points`` (a :func:`points_table` frame) had in ``df``
    (a ``collect_runs`` frame), whatever their status, on ``points``' index: with
    ``num_repeats`` (the completed ones) it tells a repeat that failed from one never run."""
    return point_runs(df, points)["total"]


def point_runs(df: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Each point of ``points`` (a :func:`points_table` frame, or its first columns: the line
    columns of ``df`` and ``nodes``) counted in ``df`` (a ``collect_runs`` frame), on
    ``points``' index: ``total``, its runs whatever their status, and ``contended``, those
    of them other work competed with (:func:`competed_runs`' rule)."""
    keys = [*line_columns(df), "nodes"]
    counts = at_their_points(df).assign(_contended=competed_flags(df)).groupby(
        keys, dropna=False, sort=False).agg(total=("_contended", "size"),
                                            contended=("_contended", "sum")).reset_index()
    counts["nodes"] = counts["nodes"].astype("Int64")
    merged = points[keys].merge(counts, on=keys, how="left")  # null keys match (merge)
    return pd.DataFrame({"total": merged["total"].to_numpy(),
                         "contended": merged["contended"].fillna(0).to_numpy()},
                        index=points.index)


def format_points(df: pd.DataFrame, points: pd.DataFrame) -> str:
    """A compact text table per point, for studies too large to print run by run: model,
    configuration, nodes, completed runs of all the point's runs, median ips (images/s),
    scaling efficiency (percent of ideal) and peak memory (GiB), then one line counting the
    runs and points and naming the files that hold every run and every failure.

    Args:
        df: a ``collect_runs`` frame (every status).
        points: its :func:`points_table` (completed points only).
    """
    table = points.assign(total=runs_per_point(df, points))
    text = pd.DataFrame({
        "model": table["model"], "configuration": table["configuration"],
        "nodes": table["nodes"],
        "runs": [f"{done}/{total}" for done, total in
                 zip(table["num_repeats"], table["total"], strict=True)],
        "ips": table["ips"].map(lambda x: "-" if pd.isna(x) else f"{x:.1f}"),
        "efficiency": table["scaling_efficiency"].map(format_efficiency),
        "peak_mem_gib": table.get("peak_mem_gib", pd.Series(dtype=float)).map(
            lambda x: "-" if pd.isna(x) else f"{x:.2f}"),
    })  # fmt: skip
    failed = int((df["status"] != "completed").sum())
    num_points = len(at_their_points(df).groupby([*line_columns(df), "nodes"], dropna=False,
                                                   sort=False))
    return (f"{text.to_string(index=False)}{efficiency_footnote(text['efficiency'])}"
            f"\n\n{len(df):,} runs of {num_points:,} points: "
            f"{len(points):,} points completed at least once, {failed:,} runs did not "
            "complete (failures.csv); every run is in runs.csv, every point in points.csv")


#: What points.csv ``peak_mem_since`` says of a run's peak memory: since when it counts.
#: PyTorch resets its peak every timed window (torch.cuda.reset_peak_memory_stats, VmHWM
#: on CPU); JAX cannot reset XLA's ``peak_bytes_in_use``: on a GPU its peak is the whole
#: process's, set-up and compilation included, so the two do not compare as equals.
PEAK_SINCE = {"window": "window start (reset every window)",
              "process": "process start (never reset: JAX on a GPU)"}
#: Settings that tell runs pooled at one point apart where they differ
#: (:func:`shared_repeats`): what the run was configured with, beside the line columns that
#: already split points, and the code it ran.
SETTING_COLUMNS = ("experiment", "attention", "data", "img_size", "local_batch_size",
                   "train.steps", "train.warmup_steps", "train.log_every", "git_commit",
                   "versions")


def peak_since(runs: pd.DataFrame) -> pd.Series:
    """Since when each run's peak memory counts (:data:`PEAK_SINCE`), on ``runs``' index:
    the process's start for a JAX run on a GPU, the timed window's start for any other."""
    jax_gpu = (runs.get("framework", pd.Series(None, index=runs.index)) == "jax") & (
        runs.get("device_type", pd.Series(None, index=runs.index)).fillna("cpu") != "cpu")
    return pd.Series(np.where(jax_gpu, PEAK_SINCE["process"], PEAK_SINCE["window"]),
                     index=runs.index, dtype=object)


def shared_repeats(done: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The points of ``done`` (completed runs; ``keys``: the line columns and ``nodes``)
    whose runs share a ``repeat`` label: they are pooled as repeats though nothing says
    they were meant as such (a rerun under another seed, a setting the records do not
    hold), so their spread is not known to be the noise between runs.

    Returns:
        One row per such point: ``keys``, ``runs_share_repeat`` (its runs that share a
        label with another of its runs) and ``repeats_differ`` (what differs between its
        runs, in words: each of :data:`SETTING_COLUMNS` that takes two values or more, e.g.
        ``"git_commit: 4e745be, 5c4d54e"``, and the final loss where it parts,
        :func:`~vitfsdp.analysis.verdict.loss_parted`: ``"final loss 0.317-3.24 (did not
        train alike)"``; ``"no recorded setting differs"`` where none does).
    """
    labelled = done[keys].assign(_repeat=done["repeat"].fillna(0))
    dup = done[labelled.duplicated(keep=False)]  # one pass, not a function per point
    if dup.empty:
        return pd.DataFrame(columns=[*keys, "runs_share_repeat", "repeats_differ"])
    counts = dup.groupby(keys, dropna=False, sort=False)["run_dir"].count().rename(
        "runs_share_repeat").reset_index()
    runs = done.merge(counts[keys], on=keys, how="inner")
    words = [_differ_words(group) for _, group in runs.groupby(keys, dropna=False, sort=False)]
    return counts.assign(repeats_differ=words)


def _differ_words(runs: pd.DataFrame) -> str:
    """What differs between the runs of one point (see :func:`shared_repeats`)."""
    parts = [f"{c}: {', '.join(sorted(set(runs[c].dropna().astype(str))))}"
             for c in SETTING_COLUMNS if c in runs and runs[c].nunique(dropna=False) > 1]
    loss = numeric_column(runs, "loss")
    if loss_parted(loss.min(), loss.max()):
        parts.append(f"final loss {loss.min():.3g}-{loss.max():.3g} (did not train alike)")
    return "; ".join(parts) or "no recorded setting differs"


def warn_unlabelled_repeats(done: pd.DataFrame, keys: list[str]) -> None:
    """Warn (a log warning) when runs of ``done`` (completed runs) that share a point
    (``keys``: the line columns and ``nodes``) share a ``repeat`` label: they are aggregated
    as repeats, but they may differ in a setting the analysis does not tell apart. Called
    once per analysis (:func:`study_tables`), not by :func:`points_table`, which each figure
    process calls again."""
    if done.empty:
        return
    labelled = done[keys].assign(_repeat=done["repeat"].fillna(0))
    dup = done[labelled.duplicated(keep=False)]  # one pass, not a function per point
    if len(dup):
        log.warning("%d completed runs share a point and a repeat label (e.g. %s); they are "
                    "aggregated as repeats: give repeated runs distinct repeat=N",
                    len(dup), dup["run_dir"].iloc[0])


def cost_columns(points: pd.DataFrame, dataset_size: int) -> pd.DataFrame:
    """Hours, node-hours and cost of one epoch of ``dataset_size`` images at each row's ips.

    ``epoch_hours = dataset_size / ips / 3600``; ``node_hours_per_epoch = epoch_hours x
    nodes``; ``cost_per_epoch = node_hours_per_epoch x price_per_node_hour`` (``NaN`` where
    no price is set). Excludes evaluation, data loading beyond what was measured, and
    start-up: a lower bound on what an epoch costs.
    """
    hours = dataset_size / points["ips"].astype("float64") / 3600.0
    node_hours = hours * points["nodes"].astype("float64")
    return pd.DataFrame({"epoch_hours": hours, "node_hours_per_epoch": node_hours,
                         "cost_per_epoch": node_hours * points["price_per_node_hour"]},
                        index=points.index)  # fmt: skip




def spread_bounds(points: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(low, high) images/s a point's measurements span: the min and max over repeats where
    it ran at least twice, else over its run's measured windows (one run: the spread of its
    windows is the least its noise can be), else its ips alone."""
    return span(judged_count(points), points["ips_repeat_min"], points["ips_repeat_max"],
                points.get("ips_window_min", points["ips"]),
                points.get("ips_window_max", points["ips"]), points["ips"])


def judged_count(points: pd.DataFrame) -> pd.Series:
    """The runs each point's images/s, spread and verdicts are taken over (``runs_judged``:
    :func:`~vitfsdp.analysis.verdict.judged_runs`), its completed runs (``num_repeats``)
    in a frame without the column (older analyses)."""
    return points["runs_judged"] if "runs_judged" in points else points["num_repeats"]


def figures_contended(row: pd.Series | object) -> bool:
    """Whether a point's figures rest on runs other work competed with only
    (``figures_contended``); in a frame without the column (older analyses), whether any
    run was contended (``runs_contended``)."""
    value = read_flag(getattr(row, "figures_contended", None) if not isinstance(row, pd.Series)
                      else row.get("figures_contended"))
    return _counted(row, "runs_contended") > 0 if value is None else value


def left_out(row: pd.Series | object) -> int:
    """How many of a point's contended runs its figures leave out (``runs_contended`` where
    its figures do not rest on them; contended runs that did not complete count too: their
    figures are no part of the point's either)."""
    return 0 if figures_contended(row) else _counted(row, "runs_contended")


def efficiency_bounds(points: pd.DataFrame, keys: list[str]) -> tuple[pd.Series, pd.Series]:
    """The bounds of each point's weak-scaling efficiency, carrying the noise of both of its
    terms: its lowest measurement over the ideal drawn from its line's baseline (smallest node
    count ``n0``) at that baseline's highest, and its highest over the ideal at the
    baseline's lowest (:func:`spread_bounds` for both: repeats, else windows). A ratio's
    bounds from its terms' bounds (interval arithmetic): the efficiency divides by the
    baseline's median, whose own noise the point's spread alone leaves out (quiet, the
    demo's 1-node point measured 7.4-8.9 images/s over four runs while each run's 4-node
    windows spread 1-4 %).

    Args:
        points: :func:`points_table`'s rows (``nodes``, ``num_repeats``, ``ips`` and the
            ``ips_repeat_*``/``ips_window_*`` columns).
        keys: the line columns (a line is one baseline).

    Returns:
        (low, high) fractions, 1.0 both at ``n0`` (the baseline is its own ideal), NaN where
        the baseline has no measurement.
    """
    low, high = spread_bounds(points)
    nodes = points["nodes"].astype("float64")
    by_line = [points[k] for k in keys]
    n0 = nodes.groupby(by_line, dropna=False).transform("min")
    at_n0 = nodes == n0
    base_low = low.where(at_n0).groupby(by_line, dropna=False).transform("max")
    base_high = high.where(at_n0).groupby(by_line, dropna=False).transform("max")
    scale = nodes / n0
    eff_low = (low / (base_high * scale)).mask(at_n0, 1.0)
    eff_high = (high / (base_low * scale)).mask(at_n0, 1.0)
    return eff_low.astype(float), eff_high.astype(float)


def observed_noise(equivalence: pd.DataFrame) -> float:
    """The largest images/s ratio of two points that compute the same thing
    (:func:`equivalence_table`'s ``ips_ratio``, >= 1): a difference no larger is what the
    machine did to one computation in this sweep, not a result; NaN where there is no pair."""
    if equivalence.empty:
        return np.nan
    return float(pd.to_numeric(equivalence["ips_ratio"], errors="coerce").max())


def verdict_kind(text: object) -> str:
    """Which verdict of :data:`VERDICTS` a best.csv ``difference`` or prefetch.csv
    ``vs_best`` holds, its count and failure notes left aside (``"not a result: other work
    competed (2 of 2 runs); 1 of 3 runs failed"``: :data:`CONTENDED`); ``""`` for none (the
    fastest variant itself, a best row without a runner-up)."""
    if not isinstance(text, str):
        return ""
    return next((v for v in VERDICTS if text.startswith(v)), "")


def _counted(row: pd.Series | object, column: str) -> int:
    """A point's ``runs_failed`` or ``runs_contended`` as an int, 0 where not recorded
    (a points frame of an older analysis)."""
    value = getattr(row, column, None) if not isinstance(row, pd.Series) else row.get(column)
    return 0 if value is None or pd.isna(value) else int(value)


def best_table(points: pd.DataFrame, noise: float = np.nan) -> pd.DataFrame:
    """The fastest configuration per model and node count, and by how much it wins.

    A win is a win only beyond the spread of repeated runs: ``difference`` is :func:`judge`'s
    verdict, :data:`BEYOND` only where the fastest point's lowest measurement
    (:func:`spread_bounds`) is above the runner-up's highest, both ran often enough
    (:func:`~vitfsdp.analysis.verdict.separation_chance` at most
    :data:`~vitfsdp.analysis.verdict.MAX_SEPARATION_CHANCE`: 3 runs each) and the ratio
    exceeds ``noise``; else :data:`WITHIN`, :data:`IN_NOISE`, :data:`ONE_RUN` or
    :data:`FEW_RUNS`, and the report calls no such ratio a speed-up; where either point was
    host-bound (``host_bound``), :func:`~vitfsdp.analysis.verdict.host_bound_verdict` in
    place of any of those (``"host-bound: compares host loops and wrappers, not the devices
    (1.50x apart)"``), and where neither was measured host-bound but either ran on GPUs
    without a busy share (``host_bound`` NA),
    :func:`~vitfsdp.analysis.verdict.unmeasured_verdict` (``"GPU busy share not measured:
    host-bound not known, not ranked (1.50x apart)"``; CPU ranks, where the host is the
    device, keep their verdict). Where the two points' final losses part
    (:func:`~vitfsdp.analysis.verdict.loss_parted`: they did not train alike, a JAX run
    against a PyTorch one, say), :func:`~vitfsdp.analysis.verdict.unlike_verdict` in place
    of any ranking (``"not like-for-like (loss differs): final loss 0.00961 against 3.21,
    not ranked (1.39x apart)"``), and before that, where either pools runs that share a
    repeat label (``runs_share_repeat`` > 0: not known to be repeats, so its median, spread
    and loss are not one configuration's),
    :func:`~vitfsdp.analysis.verdict.pooled_verdict` (``"not known repeats: the fastest's 2
    runs (final loss 0.317-3.24) share a repeat label, not ranked (1.07x apart)"``, the
    loss range where its runs' losses part). Each point is judged on its runs other work did not
    compete with (``runs_judged``), the contended ones noted (``"; 1 run beside other work
    left out"``);
    where every run of the fastest point (``figures_contended``), or else of the runner-up,
    was contended, nothing is ranked: ``difference`` is :func:`contended_verdict` (``"not a
    result: other work competed (3 of 3 runs)"``, ``"... with the runner-up (2 of 2
    runs)"``), also where there is no runner-up. Where runs of either failed, the
    verdict ends with :func:`failed_note` (``"; 1 of 3 runs failed"``, ``"; the runner-up: 1
    of 3 runs failed"``).

    Args:
        points: a :func:`points_table` frame.
        noise: :func:`observed_noise` of the sweep's :func:`equivalence_table`.

    Returns:
        One row per model and node count: ``configuration`` (strategy and varying config),
        ``ips``, ``scaling_efficiency`` (over the ideal from ``baseline_nodes``),
        ``tflops_per_gpu``, ``mfu``, ``peak_mem_gib``, ``node_hours_per_epoch``,
        ``cost_per_epoch``, ``runner_up`` (the second fastest configuration, or empty),
        ``speedup_over_runner_up`` (ips / its ips),
        ``difference`` (empty without a runner-up, unless runs were contended or failed),
        ``host_bound`` (:func:`vitfsdp.core.throughput.any_host_bound` of the two: where
        True, the ranking is of host loops and wrappers, not of the strategies'
        communication), and the fastest point's ``num_repeats``, ``runs_failed``,
        ``runs_contended``, ``world_size`` and ``loss`` (:func:`points_table`'s).
    """
    cols = ["model", "nodes", "configuration", "ips", "scaling_efficiency", "baseline_nodes",
            "tflops_per_gpu", "mfu", "peak_mem_gib", "node_hours_per_epoch", "cost_per_epoch",
            "runner_up", "speedup_over_runner_up", "difference", "host_bound", "num_repeats",
            "runs_failed", "runs_contended", "world_size", "loss"]  # fmt: skip
    if points.empty:
        return pd.DataFrame(columns=cols)
    low, high = spread_bounds(points)
    ranked = points.assign(_low=low, _high=high).sort_values("ips", ascending=False,
                                                             kind="stable")
    rows = []
    for (_, _), group in ranked.groupby(["model", "nodes"], dropna=False, sort=True):
        best = group.iloc[0].copy()
        second = group.iloc[1] if len(group) > 1 else None
        best["runner_up"] = second["configuration"] if second is not None else ""
        best["speedup_over_runner_up"] = (best["ips"] / second["ips"]
                                          if second is not None else np.nan)
        unmeasured = any(_gpu_unmeasured(row) for row in (best, second) if row is not None)
        best["host_bound"] = any_host_bound(best["host_bound"], *(
            [second["host_bound"]] if second is not None else []))
        best["difference"] = _best_verdict(best, second, noise, unmeasured)
        best["runs_failed"] = _counted(best, "runs_failed")
        best["runs_contended"] = _counted(best, "runs_contended")
        rows.append(best)
    table = pd.DataFrame(rows).reindex(columns=cols).reset_index(drop=True)
    return table.assign(host_bound=table["host_bound"].astype("boolean"))


def _gpu_unmeasured(point: pd.Series | object) -> bool:
    """Whether a point (a row of a points frame) ran on GPUs without a busy share
    (:func:`~vitfsdp.analysis.verdict.gpu_unmeasured` of its ``host_bound`` and
    ``device_type``; False in a frame without ``device_type``: older analyses)."""
    get = point.get if isinstance(point, pd.Series) else lambda c: getattr(point, c, None)
    return gpu_unmeasured(get("host_bound"), get("device_type"))


def _final_loss(point: pd.Series, column: str = "loss") -> float:
    """A point's final training loss (points.csv ``loss``, or ``column``: ``loss_min``,
    ``loss_max``; nats), NaN where not recorded (a points frame of an older analysis, runs
    without a loss)."""
    value = pd.to_numeric(pd.Series([point.get(column)]), errors="coerce").iloc[0]
    return float(value)


def _best_verdict(best: pd.Series, second: pd.Series | None, noise: float,
                  unmeasured: bool = False) -> str:  # fmt: skip
    """best.csv's ``difference`` of the fastest point ``best`` over the runner-up ``second``
    (None: there is none), both rows of a points frame with their spans (``_low``,
    ``_high``), ``unmeasured`` where either ran on GPUs without a busy share: see
    :func:`best_table`."""
    sides = [(best, "")] + ([(second, "the runner-up")] if second is not None else [])
    totals = [int(row["num_repeats"]) + _counted(row, "runs_failed") for row, _ in sides]
    contended = [(_counted(row, "runs_contended"), total, whose)
                 for (row, whose), total in zip(sides, totals, strict=True)
                 if figures_contended(row)]
    losses = [_final_loss(row) for row, _ in sides]
    pooled = [f"{whose or 'the fastest'}'s {_counted(row, 'runs_share_repeat')} runs"
              f"{loss_range(_final_loss(row, 'loss_min'), _final_loss(row, 'loss_max'))}"
              for row, whose in sides if _counted(row, "runs_share_repeat")]
    if contended:
        verdict = contended_verdict(*contended[0])
    elif second is not None and pooled:
        verdict = pooled_verdict(best["speedup_over_runner_up"], *pooled)
    elif second is not None and loss_parted(*losses):
        verdict = unlike_verdict(*losses, best["speedup_over_runner_up"])
    elif second is not None:
        verdict = ranked(judge((best["_low"], best["_high"], judged_count(best)),
                               (second["_low"], second["_high"], judged_count(second)),
                               best["speedup_over_runner_up"], noise),
                         best["host_bound"], best["speedup_over_runner_up"], unmeasured)
    else:
        verdict = ""
    return with_notes(verdict, *(failed_note(_counted(row, "runs_failed"), total, whose)
                                 for (row, whose), total in zip(sides, totals, strict=True)),
                      *(left_out_note(left_out(row), whose) for row, whose in sides))


def failures_table(df: pd.DataFrame) -> pd.DataFrame:
    """Every run that did not complete with a measured ips: what, where and why.

    Returns:
        The line columns, ``nodes``, ``configuration``, ``repeat``, ``status`` (oom,
        timeout, failed, preempted, skipped_infeasible, running, or completed without ips),
        ``reason`` (one line), ``last_step`` (the last step a window recorded),
        ``ips_reached`` and ``peak_mem_reached_gib`` (what it measured before it ended),
        ``pred_peak_mem_gib``, ``device_memory_gib`` and ``memory_limit_gib`` (GiB; why a
        point was skipped as infeasible, or ran out of memory), ``log`` (the run's log: the
        full reason and traceback), ``run_dir``; with these columns and no rows when every
        run completed.
    """
    keys = line_columns(df)
    failed = df[(df["status"] != "completed") | df["ips"].isna()]
    failed = failed.assign(configuration=configurations(df).loc[failed.index])
    cols = [*keys, "nodes", "configuration", "repeat", "status", "reason", "last_step",
            "ips_reached", "peak_mem_reached_gib", "pred_peak_mem_gib", "device_memory_gib",
            "memory_limit_gib", "log", "run_dir"]  # fmt: skip
    return failed[cols].reset_index(drop=True)


def prefetch_table(points: pd.DataFrame, noise: float = np.nan,
                   runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The prefetch ablation: ips of each strategy under each ``backward_prefetch`` x
    ``limit_all_gathers`` pair (FSDP1 points only; DDP and FSDP2 record them as null).

    Args:
        points: a :func:`points_table` frame.
        noise: :func:`observed_noise` of the sweep (a slower variant within it is no
            different from the fastest).
        runs: the ``collect_runs`` frame ``points`` was made from, for the devices the
            variants ran on (``cpu_ranks``); None: not known.

    Returns:
        ``model``, ``nodes``, ``configuration`` (the bar group: strategy and any other
        varying config), ``backward_prefetch``, ``limit_all_gathers``, ``ips`` (median over
        repeats, images/s), ``ips_repeat_min``, ``ips_repeat_max``, ``num_repeats``,
        ``runs_failed`` and ``runs_contended`` (:func:`points_table`'s),
        ``ips_span_low``/``ips_span_high`` (what the verdict compares: the span over
        repeats, else over the one run's timed windows: :func:`~vitfsdp.analysis.verdict.span`),
        ``ips_vs_best`` (ips / the group's fastest variant), ``vs_best`` (:func:`judge` of
        the group's fastest against this variant, empty for the fastest itself: only
        :data:`BEYOND` makes a variant slower; with ``k`` variants each comparison may rest
        on a :func:`~vitfsdp.analysis.verdict.separation_chance` of at most
        ``MAX_SEPARATION_CHANCE / (k - 1)``, as the fastest is picked from them: 6 variants
        of 3 runs each would otherwise call one slower by chance 39% of the time; each
        variant judged on its runs other work did not compete with (``runs_judged``; the
        others counted in ``runs_contended`` and noted, ``"1 run beside other work left
        out"``); where either variant was host-bound,
        :func:`~vitfsdp.analysis.verdict.host_bound_verdict`, and where neither was but
        either ran on GPUs without a busy share,
        :func:`~vitfsdp.analysis.verdict.unmeasured_verdict`; where every run of the
        variant (``figures_contended``), or else of the fastest, was contended, no ranking:
        :func:`contended_verdict`, ``"not a result: other work competed (2 of 2 runs)"``,
        ``"... with the fastest (3 of 3 runs)"``, the fastest's own row included; where
        runs of the variant failed, :func:`failed_note` after it, ``"1 of 3 runs
        failed"``), ``device_busy_frac`` (mean over ranks), ``device_busy_min_frac`` (the least busy
        rank's, which ``host_bound`` judges), ``host_bound`` (the points': a host-bound
        variant's images/s measure the wrapper, not what prefetching does to
        communication; NA where the busy share was not measured, as on CPU ranks) and
        ``cpu_ranks`` (every run of the variant's point that recorded its device ran on CPU
        ranks, runs.csv ``device_type``: there FSDP's streams are no-ops, so prefetch and
        ``limit_all_gathers`` change only the order of the collectives, not their overlap
        with compute, and a difference between variants is not prefetching's effect; NA
        where ``runs`` is not given or no run recorded its device); empty when no point
        varies either setting.

    The no-ops (torch 2.14): FSDP1 takes its streams and events from ``torch.<device
    type>`` (``torch.distributed.fsdp._common_utils._FSDPDeviceHandle``), and
    ``torch.cpu.Stream``'s ``wait_stream`` and ``torch.cpu.Event``'s ``record`` and
    ``synchronize`` do nothing (``torch/cpu/__init__.py``: "only exists to facilitate
    device-agnostic code"), so the unshard stream runs in line with compute and the rate
    limiter of ``limit_all_gathers`` (``event.synchronize()`` in
    ``torch.distributed.fsdp._runtime_utils._unshard``) waits for nothing; the all-gather of
    a CPU flat parameter is a ``dist.all_gather`` without ``async_op``
    (``FlatParamHandle._all_gather_flat_param``), which waits for gloo's work in the calling
    thread.
    """
    cols = ["model", "nodes", "configuration", *ABLATION_COLUMNS, "ips", "ips_repeat_min",
            "ips_repeat_max", "num_repeats", "runs_failed", "runs_contended", "runs_judged",
            "figures_contended", "ips_span_low",
            "ips_span_high", "ips_vs_best", "vs_best", "device_busy_frac",
            "device_busy_min_frac", "host_bound", "cpu_ranks"]  # fmt: skip
    if points.empty or not set(ABLATION_COLUMNS) & set(points.columns):
        return pd.DataFrame(columns=cols)
    fsdp1 = points.dropna(subset=list(ABLATION_COLUMNS))
    fsdp1 = fsdp1.assign(**{c: numeric_column(fsdp1, c).fillna(0).astype(int)
                            for c in ("runs_failed", "runs_contended")})  # 0: older frames
    fsdp1 = fsdp1.assign(runs_judged=judged_count(fsdp1).astype(int),
                         figures_contended=[figures_contended(r) for r in fsdp1.itertuples()])
    keys = [c for c in points.columns[:list(points.columns).index("nodes")]
            if c not in ABLATION_COLUMNS]
    table = fsdp1.assign(configuration=[line_label(r, keys) for _, r in fsdp1.iterrows()])
    if runs is not None and "device_type" in runs and len(runs):
        at = list(points.columns[:list(points.columns).index("nodes") + 1])  # a point's keys
        started = runs.dropna(subset=["device_type"])
        cpu = (started["device_type"] == "cpu").groupby(
            [started[c] for c in at], dropna=False).all().rename("cpu_ranks").reset_index()
        # null keys match (merge), as points_table's count of each point's runs
        table = table.merge(cpu.astype({"nodes": table["nodes"].dtype}), on=at, how="left")
    table["cpu_ranks"] = table.get("cpu_ranks", pd.Series(pd.NA, table.index)).astype(
        "boolean")
    low, high = spread_bounds(table)
    group = ["model", "nodes", "configuration"]
    table = table.assign(ips_span_low=low, ips_span_high=high).reset_index(drop=True)
    fastest = table.loc[table.groupby(group)["ips"].idxmax(),
                        [*group, "ips", "ips_span_low", "ips_span_high", "num_repeats",
                         "runs_failed", "runs_contended", "runs_judged", "figures_contended",
                         "host_bound", *(["device_type"] if "device_type" in table else [])]]
    table = table.merge(fastest, on=group, how="left", suffixes=("", "_best"))
    # the fastest of k is compared with each of the k - 1 others: Bonferroni keeps the
    # group's chance of a slower variant by chance alone at MAX_SEPARATION_CHANCE
    others = table.groupby(group)["ips"].transform("size").clip(lower=2) - 1
    table = table.assign(ips_vs_best=table["ips"] / table["ips_best"], vs_best=[
        _variant_verdict(r, noise, MAX_SEPARATION_CHANCE / k)
        for r, k in zip(table.itertuples(), others, strict=True)])
    order = {v: i for i, v in enumerate(PREFETCH_ORDER)}
    table = table.assign(_order=table["backward_prefetch"].map(order),
                         _limit=~table["limit_all_gathers"].astype(bool))
    table = table.sort_values(["model", "nodes", "configuration", "_order", "_limit"])
    return table[cols].reset_index(drop=True)


def prefetch_limits(table: pd.DataFrame, by: list[str]) -> tuple[pd.Series, pd.Series]:
    """What the ablation's groups of ``table`` (prefetch.csv rows, grouped by the columns
    ``by``: a figure's panel, a report's comparison) could not measure, as two boolean
    series on the groups: every variant ran on CPU ranks (``cpu_ranks`` all true: FSDP's
    streams are no-ops there, :func:`prefetch_table`; False where the column is absent), and
    no variant measured its busy share (every ``host_bound`` NA)."""
    groups = table.groupby(by, sort=False)
    cpu = (groups["cpu_ranks"].agg(lambda c: bool(c.notna().all() and c.astype(bool).all()))
           if "cpu_ranks" in table else pd.Series(False, index=groups.size().index))
    unmeasured = groups["host_bound"].agg(lambda b: bool(b.isna().all()))
    return cpu, unmeasured


def _variant_verdict(r, noise: float, max_chance: float) -> str:
    """prefetch.csv's ``vs_best`` of one variant (a row of :func:`prefetch_table`'s frame,
    its group's fastest's columns suffixed ``_best``): see :func:`prefetch_table`."""
    total = int(r.num_repeats) + r.runs_failed
    if r.figures_contended:
        verdict = contended_verdict(r.runs_contended, total)
    elif r.ips == r.ips_best:
        verdict = ""
    elif r.figures_contended_best:
        verdict = contended_verdict(r.runs_contended_best,
                                    int(r.num_repeats_best) + r.runs_failed_best, "the fastest")
    else:
        verdict = ranked(judge((r.ips_span_low_best, r.ips_span_high_best, r.runs_judged_best),
                               (r.ips_span_low, r.ips_span_high, r.runs_judged),
                               r.ips_best / r.ips, noise, max_chance),
                         any_host_bound(r.host_bound, r.host_bound_best), r.ips_best / r.ips,
                         _gpu_unmeasured(r) or gpu_unmeasured(
                             r.host_bound_best, getattr(r, "device_type_best", None)))
    return with_notes(verdict, failed_note(r.runs_failed, total),
                      left_out_note(0 if r.figures_contended else r.runs_contended))


def calibration_table(df: pd.DataFrame) -> pd.DataFrame:
    """The plan's predictions against the measurements, for every completed run that has one:
    the plan's one calibration table (:func:`vitfsdp.plan.calibrate.compare`), keyed by the
    line columns, ``nodes``, ``configuration`` and ``repeat``.

    Returns:
        Those keys and :data:`vitfsdp.plan.calibrate.CALIBRATION_COLUMNS`; empty when no run
        has a prediction.
    """
    keys = [*line_columns(df), "nodes", "configuration", "repeat"]
    done = completed(df)
    done = done[done["pred_peak_mem_gib"].notna() | done["pred_ips"].notna()]
    return compare(done.assign(configuration=configurations(df).loc[done.index]), keys)


def calibration_summary(calibration: pd.DataFrame) -> pd.DataFrame:
    """Median and worst absolute relative error of each prediction over the runs.

    Returns:
        One row per quantity (``peak memory``; on CPU ranks also ``peak memory above the
        baseline``, the error over what a rank holds beyond the process baseline the plan
        assumes, :func:`vitfsdp.plan.calibrate.compare`; ``step time``, ``ips``):
        ``num_runs``, ``median_abs_rel_error`` and ``max_abs_rel_error`` (fractions), and
        ``median_rel_error`` (signed: > 0 the plan over-predicts).
    """
    rows = []
    for name, col in (("peak memory", "mem_rel_error"),
                      (f"peak memory above the {CPU_BASELINE_GIB:g} GiB baseline (CPU)",
                       "mem_above_baseline_rel_error"),
                      ("step time", "step_time_rel_error"), ("ips", "ips_rel_error")):
        err = calibration[col].dropna().astype("float64") if col in calibration else []
        if len(err):
            rows.append({"quantity": name, "num_runs": len(err),
                         "median_rel_error": err.median(),
                         "median_abs_rel_error": err.abs().median(),
                         "max_abs_rel_error": err.abs().max()})
    return pd.DataFrame(rows, columns=["quantity", "num_runs", "median_rel_error",
                                       "median_abs_rel_error", "max_abs_rel_error"])


def _layout(sharding: str | None, group, world) -> tuple:
    """What a point computes, as (sharding, shard group): HYBRID_SHARD with the shard group
    equal to the world is FULL_SHARD's arithmetic over it, with a group of 1 NO_SHARD (which
    torch then runs: :meth:`vitfsdp.parallel.StrategyConfig.effective_sharding_strategy`).
    The first is the same arithmetic, not the same code: FSDP1's HYBRID_SHARD still
    all-reduces each unit's sharded gradient over its replica group, here of one rank
    (``torch.distributed.fsdp._runtime_utils._reduce_grad``); on CPU that measured no
    difference (docs/benchmarks.md, "The 1-node pair")."""
    if sharding == "HYBRID_SHARD" and pd.notna(group) and pd.notna(world):
        if int(group) == int(world):
            return "FULL_SHARD", int(world)
        if int(group) == 1:
            return "NO_SHARD", 1
    if sharding in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return sharding, None if pd.isna(world) else int(world)
    return sharding, None if pd.isna(group) else int(group)


#: Columns of :func:`equivalence_table`.
EQUIVALENCE_COLUMNS = ("model", "nodes", "configuration_a", "configuration_b", "ips_a",
                       "ips_b", "ips_ratio", "runs_a", "runs_b", "difference")


def equivalence_table(points: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Pairs of points that compute the same thing under two names, a built-in check of
    the machine's noise: FULL_SHARD and HYBRID_SHARD with the shard group equal to the world
    (at 1 node, HYBRID_2GPU on 2-rank nodes), NO_SHARD and HYBRID_1GPU, at the same model,
    node count and other settings. Their images/s should agree; ``difference``
    (:func:`differs` of their :func:`spread_bounds`) says whether they do.

    Args:
        points: a :func:`points_table` frame of ``df``.
        df: its ``collect_runs`` frame (which columns make a line).

    Returns:
        :data:`EQUIVALENCE_COLUMNS`: one row per pair, ``ips_ratio`` = ips_a / ips_b (a the
        faster), ``runs_a``/``runs_b`` the runs each completed (one run: its spread is its
        windows); empty where no two points compute the same thing.
    """
    if points.empty or "sharding_strategy" not in points:
        return pd.DataFrame(columns=EQUIVALENCE_COLUMNS)
    low, high = spread_bounds(points)
    named = {"strategy", "sharding_strategy", "shard_group_size"}
    keys = [c for c in line_columns(df) if c not in named and c in points] + ["nodes"]
    layouts = [_layout(s, g, w) for s, g, w in zip(
        points["sharding_strategy"], points["shard_group_size"], points["world_size"],
        strict=True)]
    frame = points.assign(_layout=layouts, spread_low=low, spread_high=high)
    rows = []
    for _, group in frame.groupby([*keys, "_layout"], dropna=False, sort=True):
        group = group.sort_values("ips", ascending=False, kind="stable")
        for i, a in enumerate(group.itertuples()):
            for b in list(group.itertuples())[i + 1:]:
                rows.append({"model": a.model, "nodes": a.nodes,
                             "configuration_a": a.configuration,
                             "configuration_b": b.configuration, "ips_a": a.ips,
                             "ips_b": b.ips, "ips_ratio": a.ips / b.ips if b.ips else np.nan,
                             "runs_a": a.num_repeats, "runs_b": b.num_repeats,
                             "difference": differs(a.spread_low, a.spread_high,
                                                     b.spread_low, b.spread_high)})
    return pd.DataFrame(rows, columns=list(EQUIVALENCE_COLUMNS))


def competed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``runs`` (runs.csv's rows) whose host's other processes kept more than
    :data:`~vitfsdp.core.throughput.WINDOW_OTHER_WORK_FRAC` of its cores busy during their
    timed windows (:data:`~vitfsdp.core.throughput.OTHER_WORK_FRAC` over a whole point where
    no window measured it: :func:`~vitfsdp.analysis.lines.competed_flags`); none where
    ``host_other_cpus`` or ``host_cpus`` is absent or unknown (older records)."""
    return runs[competed_flags(runs)]


def competition_text(runs: pd.DataFrame) -> str | None:
    """One sentence on runs that shared their host with other work (:func:`competed_runs`),
    e.g. ``"other work competed with 9 of 9 runs (it kept 0.6-1.3 of the host's 2 cores busy
    while they ran: host_other_cpus in runs.csv, more than 10% of the cores during the timed
    windows): their figures measure the contention, not the study; rerun them on a quiet
    host"``; the bound is the one each run was judged by
    (:func:`~vitfsdp.analysis.lines.judged_over_windows`: the whole point's, more than 25%,
    for records without window figures and nodes a CPU quota held back); None where none
    did."""
    found = competed_runs(runs)
    if found.empty:
        return None
    other = pd.to_numeric(found["host_other_cpus"], errors="coerce")
    cores = "/".join(str(c) for c in sorted(set(
        pd.to_numeric(found["host_cpus"], errors="coerce").dropna().astype(int))))
    windows = judged_over_windows(found).tolist()
    bounds = [f"more than {WINDOW_OTHER_WORK_FRAC:.0%} of the cores during the timed "
              "windows"] * any(windows) + [f"more than {OTHER_WORK_FRAC:.0%} over the whole "
                                           "point"] * (not all(windows))
    return (f"other work competed with {len(found)} of {len(runs)} runs (it kept "
            f"{other.min():.1f}-{other.max():.1f} of the host's {cores} cores busy while they "
            f"ran: host_other_cpus in runs.csv, {'; '.join(bounds)}): their "
            "figures measure the contention, not the study; rerun them on a quiet host")


def loaded_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``runs`` (runs.csv's rows) whose host's 1-minute load average, at their
    start or end, was above its cores and the run's own ranks there (``host_load_1m``,
    ``host_cpus``, ``ranks_per_host``), where ``host.json`` did not measure the other work
    itself (no ``host_other_cpus``: a Slurm point; :func:`competed_runs` judges the others);
    none where the columns are absent."""
    if not {"host_load_1m", "host_cpus"} <= set(runs):
        return runs.iloc[0:0]
    # the run's own ranks on the host are load it expects (8 ranks of a 4-node demo on 2
    # cores: a load near 6 on a quiet machine, 2026-11-27); beyond them, other work ran
    own = pd.to_numeric(runs["ranks_per_host"], errors="coerce").fillna(0) \
        if "ranks_per_host" in runs else 0
    # where host.json measured the other work itself (competition_text), the load
    # average says no more: beside a quiet demo it flagged 3 of 9 runs, as many as
    # beside two busy loops (2026-11-27)
    measured = pd.to_numeric(runs.get("host_other_cpus", pd.Series(np.nan, runs.index)),
                             errors="coerce").notna()
    return runs[(pd.to_numeric(runs["host_load_1m"], errors="coerce")
                 > pd.to_numeric(runs["host_cpus"], errors="coerce") + own) & ~measured]


def noisy_text(points: pd.DataFrame) -> str:
    """The points of ``points`` (a :func:`points_table` frame) whose repeats spread more than
    :data:`NOISY_SPREAD` of their median (``noisy``), in the words the terminal and the
    report both give, e.g. ``"repeats spread more than 10% of their median: vit_tiny
    FULL_SHARD at 4 node(s) (50%)"`` (``ips_repeat_spread``); ``""`` where none is."""
    noisy = points[points["noisy"].fillna(False).astype(bool)] if len(points) else points
    if noisy.empty:
        return ""
    which = ", ".join(f"{r.model} {r.configuration} at {r.nodes} node(s) "
                      f"({r.ips_repeat_spread:.0%})" for r in noisy.itertuples())
    return f"repeats spread more than {NOISY_SPREAD:.0%} of their median: {which}"


def resumed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``runs`` (runs.csv's rows; a point's earlier attempts, ``attempt_of``,
    left out) that took more than one attempt (``num_attempts``: resumed from a checkpoint);
    none where the column is absent (older records)."""
    latest = _latest_runs(runs)
    if "num_attempts" not in latest:
        return latest.iloc[0:0]
    return latest[pd.to_numeric(latest["num_attempts"], errors="coerce") > 1]


def _latest_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` that are a point's latest run (no ``attempt_of``)."""
    return runs[runs["attempt_of"].isna()] if "attempt_of" in runs else runs


def resumed_text(runs: pd.DataFrame) -> str:
    """The runs of ``runs`` that resumed (:func:`resumed_runs`), in the words the terminal and
    the report both give, e.g. ``"1 of 2 runs resumed from a checkpoint: vit_tiny DDP at 1
    node(s) (2 attempts) (num_attempts in runs.csv), so their figures pool the measured
    windows of every attempt; the attempts of vit_tiny DDP at 1 node(s) measured different
    speeds (attempts_differ: one attempt's slowest window faster than another's fastest): its
    images/s pools them, a point to rerun"``; ``""`` where none did."""
    found = resumed_runs(runs)
    if found.empty:
        return ""
    labels = configurations(runs).loc[found.index]

    def name(r, label: str) -> str:
        repeat = getattr(r, "repeat", None)
        return (f"{r.model} {label} at {r.nodes} node(s)"
                + (f" repeat {int(repeat)}" if pd.notna(repeat) and repeat else ""))

    which = ", ".join(f"{name(r, label)} ({int(r.num_attempts)} attempts)"
                      for r, label in zip(found.itertuples(), labels, strict=True))
    text = (f"{len(found)} of {len(_latest_runs(runs))} runs resumed from a checkpoint: "
            f"{which} (num_attempts in runs.csv), so their figures pool the measured windows "
            "of every attempt")
    differ = flag_column(found, "attempts_differ")
    if differ.any():
        apart = ", ".join(name(r, label) for r, label, d in
                          zip(found.itertuples(), labels, differ, strict=True) if d)
        one = bool(differ.sum() == 1)
        text += (f"; the attempts of {apart} measured different speeds (attempts_differ: one "
                 "attempt's slowest window faster than another's fastest): "
                 f"{'its' if one else 'their'} images/s pool{'s' * one} them, "
                 f"{'a point' if one else 'points'} to rerun")
    return text


def noise_lines(tables: dict[str, pd.DataFrame]) -> list[str]:
    """What the terminal says of the study's noise and host, one line each (none when all
    is well): runs whose host was loaded beyond its cores and the run's own ranks on it
    (rank 0's host, at the run's start or end; the 1-minute average still carries the
    previous point's ranks for about a minute), runs other work competed with
    (:func:`competition_text`, ``NOT A RESULT``), points whose repeats spread beyond
    :data:`NOISY_SPREAD`, runs resumed from a checkpoint, whose figures pool attempts
    (:func:`resumed_text`), pairs of points that compute the same thing yet differ beyond
    their spread, points that ran once, wins that are not results (:func:`judge`: within the
    spread, within the observed noise, or on one run), and host-bound points.

    Args:
        tables: :func:`study_tables`' result.
    """
    points, lines, runs = tables["points"], [], tables["runs"]
    loaded = loaded_runs(runs)
    if len(loaded):
        lines.append(f"loaded: {len(loaded)} run(s) started or ended with the host's load "
                     "average above its cores and the run's own ranks there "
                     "(host_load_1m, host_cpus, ranks_per_host in runs.csv): other work "
                     "competed with them")
    text = competition_text(runs)
    if text:
        lines.append(f"NOT A RESULT: {text}")
    noisy = noisy_text(points)
    if noisy:
        lines.append(f"noisy: {noisy}")
    resumed = resumed_text(runs)
    if resumed:
        lines.append(f"resumed: {resumed}")
    apart = tables["equivalence"]
    apart = apart[apart["difference"] == BEYOND]
    if len(apart):
        which = ", ".join(f"{r.model} {r.configuration_a} and {r.configuration_b} at "
                          f"{r.nodes} node(s) ({r.ips_ratio:.2f}x)" for r in apart.itertuples())
        lines.append(f"noise: the same computation under two names differs beyond its "
                     f"spread: {which} (equivalence.csv); differences up to that are not "
                     "results")
    shared = points[numeric_column(points, "runs_share_repeat").fillna(0) > 0]
    if len(shared):
        which = "; ".join(f"{r.model} {r.configuration} at {r.nodes} node(s): "
                          f"{r.repeats_differ}" for r in shared.itertuples())
        lines.append(f"not known repeats: runs that share a repeat label are pooled at "
                     f"{len(shared)} point(s) ({which}; points.csv runs_share_repeat, "
                     "repeats_differ): their spread is not the noise between runs")
    once = points[points["num_repeats"] < 2] if len(points) else points
    if len(once):
        lines.append(f"one run: {len(once)} of {len(points)} points ran once, so their "
                     "spreads are one run's windows and the noise between runs is not "
                     "measured; rerun with repeat=0,1,2 to measure it")
    best = tables["best"]
    kinds = best["difference"].map(verdict_kind)
    between = "between the two fastest"
    for verdict, words in ((CONTENDED, "no ranking: other work competed with runs of the "
                                       "fastest or the runner-up"),
                           (NOT_KNOWN_REPEATS, "no ranking: the fastest or the runner-up "
                                               "pools runs that share a repeat label (not "
                                               "known repeats)"),
                           (NOT_LIKE_FOR_LIKE, "no ranking: the fastest and the runner-up did "
                                               "not train alike (final loss differs)"),
                           (UNMEASURED, "no ranking: the GPU busy share of the fastest or "
                                        "the runner-up was not measured, so whether the host "
                                        "decided the step is not known"),
                           (WITHIN, f"no difference within the spread {between}"),
                           (IN_NOISE, f"a difference within the noise check's {between}"),
                           (ONE_RUN, f"a difference resting on one run {between}"),
                           (FEW_RUNS, f"a difference on too few runs to be a result {between}")):
        tied = best[kinds == verdict]
        if len(tied):
            which = ", ".join(f"{r.model} at {r.nodes} node(s)" for r in tied.itertuples())
            lines.append(f"{words}: {which} (best.csv)")
    bound = points[points["host_bound"].fillna(False).astype(bool)] if len(points) else points
    if len(bound):
        which = ", ".join(f"{r.model} {r.configuration} at {r.nodes} node(s)"
                          for r in bound.itertuples())
        lines.append(f"host-bound (device busy below {HOST_BOUND_BUSY_FRAC:.0%}): {which}: "
                     "their figures measure the "
                     "wrapper and the loop")
    return lines
