"""The scaling lines of a :func:`~vitfsdp.analysis.collect.collect_runs` frame: which
columns make a line (model, strategy and any varying setting) and its label, the
weak-scaling table, JAX against PyTorch, and the frame as a text table.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from vitfsdp.analysis.rows import CONFIG_KEYS
from vitfsdp.analysis.verdict import (
    NO_RESULT,
    compare,
    contended_verdict,
    failed_note,
    gpu_unmeasured,
    judged_runs,
    left_out_note,
    loss_parted,
    loss_range,
    pooled_verdict,
    ranked,
    read_flag,
    span,
    with_notes,
)
from vitfsdp.core.throughput import NOISY_SPREAD, any_host_bound, competed, host_bound

#: Config columns that split a strategy into separate scaling lines when they vary at all.
VARIANT_COLUMNS = (
    "backward_prefetch", "limit_all_gathers", "precision", "engine", "framework", "data",
    "local_batch_size", "img_size", "device_name", *CONFIG_KEYS, "network", "ranks_per_node",
    "cluster",
)  # fmt: skip
#: Columns whose value a run records as it resolved once it started, and the placeholder
#: each holds until then (null besides): the precision ``auto`` chose, the device, whether
#: blocks were compiled, FSDP1's ``use_orig_params``, the AdamW ``auto`` chose
#: (:mod:`vitfsdp.analysis.rows`). A point that never started holds the placeholder.
RESOLVED_COLUMNS = {"precision": ("auto",), "device_name": (), "kernels.compile": (),
                    "strategy.use_orig_params": (), "kernels.adamw": ("auto",)}
#: Columns the run's config fills in (FSDP's prefetch settings: null in the composed config
#: of a point skipped as one that cannot run, which never starts), whose null is a value in
#: a run that started (DDP has none): only runs that started (``device_type`` recorded)
#: count where they vary, when any did.
STARTED_COLUMNS = ("backward_prefetch", "limit_all_gathers")
#: Timing settings (``train.steps``, ``train.warmup_steps``, ``train.log_every``) and the seed
#: (``train.seed``): runs of another step count, warm-up, window length or seed measure
#: another thing (repeats are ``repeat=0,1,2`` of one seed), so where they vary
#: they split lines (and a run is no repeat of one timed otherwise). A null, a record without
#: the key (run.json of a run that failed before it wrote its config, a frame read before
#: the columns), is no value of its own: it splits no line.
RECORDED_COLUMNS = ("train.steps", "train.seed", "train.warmup_steps", "train.log_every")
#: Columns a strategy name normally fixes; they split lines only if they vary within one.
#: (Not ``shard_group_size``: FULL_SHARD shards over the whole world, which grows with nodes.)
STRATEGY_COLUMNS = ("sharding_strategy",)
#: Line identity: the panel (model) and the strategy, before any varying config column.
BASE_LINE_COLUMNS = ("model", "strategy")
#: Settings only PyTorch runs have (JAX runs record them as null or leave the default, and
#: framework=jax refuses them): they do not keep a JAX run from being compared with the
#: PyTorch run of the same point. ``kernels.compile`` resolves per run under torch (null =
#: auto: compiled or not), while XLA always compiles.
TORCH_ONLY_COLUMNS = ("backward_prefetch", "limit_all_gathers", "engine", "kernels.compile",
                      "kernels.adamw", "kernels.cudnn_allow_tf32", "mixed_precision.param_dtype",
                      "mixed_precision.reduce_dtype", "mixed_precision.buffer_dtype",
                      "strategy.use_orig_params", "strategy.blocks_per_unit")
#: The world a JAX run shares with the PyTorch run it is compared with, beside the line
#: columns and the node count: the same nodes of another size (GPUs per node, hence world
#: size) or of another cluster profile (its interconnect, its hosts) are another point.
#: ``ranks_per_node`` and ``cluster`` are :data:`VARIANT_COLUMNS` too (they split lines
#: where they vary); the ratio table shows those of them that take more than one value at
#: one node count among the completed runs.
PAIRING_COLUMNS = ("world_size", "ranks_per_node", "cluster")
#: Text columns a line label writes as ``name=value`` (``cluster=frontier``): their value
#: alone does not say what it is.
NAMED_COLUMNS = ("cluster",)
#: The PyTorch strategy whose program a JAX strategy runs, where it is not the one of its
#: name: JAX's FULL_SHARD gathers each unit's parameters once and keeps them from forward to
#: backward, as torch's SHARD_GRAD_OP does, where torch's FULL_SHARD gathers them again
#: (docs/jax.md, "FULL_SHARD gathers once"). :func:`framework_ratio_table` pairs the JAX
#: strategy with both: its namesake and, where the sweep ran it, this one.
SAME_PROGRAM = {"FULL_SHARD": "SHARD_GRAD_OP"}
#: Columns of :func:`framework_ratio_table` after its key columns.
RATIO_COLUMNS = ("torch_ips", "jax_ips", "jax_over_torch", "ratio_low", "ratio_high",
                 "torch_runs", "jax_runs", "torch_failed", "jax_failed", "difference",
                 "torch_busy_frac", "jax_busy_frac", "host_bound", "noisy",
                 "torch_attention", "jax_attention", "torch_recipe", "torch_loss", "jax_loss")
#: What :func:`torch_recipe` writes of ``kernels.compile`` (as it resolved; null: auto, in
#: records that did not say what it resolved to) and of FSDP1's ``strategy.use_orig_params``.
COMPILE_WORDS = {True: "compiled", False: "eager", None: "compile auto"}
ORIG_PARAMS_WORDS = {True: "orig params", False: "flat params", None: "orig params auto"}


#: How runs whose numbers were invented, not measured, say so in their ``device_name`` and
#: ``experiment`` (:data:`vitfsdp.analysis.synthetic.INVENTED`, the analysis benchmark's
#: runs): :func:`invented_runs` finds them by it.
INVENTED_DATA = "INVENTED DATA"


def invented_runs(df: pd.DataFrame) -> pd.Series:
    """Whether each run of ``df`` (runs.csv's rows) holds invented numbers, on ``df``'s
    index: its ``device_name`` or ``experiment`` holds :data:`INVENTED_DATA`; False where
    neither column is there."""
    hit = pd.Series(False, index=df.index)
    for column in ("device_name", "experiment"):
        if column in df:
            hit |= df[column].astype("string").str.contains(INVENTED_DATA, regex=False) \
                .fillna(False).astype(bool)
    return hit


#: What the contention notes say of runs whose cores were shared (:func:`contention_note`).
NOT_HARDWARE = ": not a hardware measurement"


def contention_note(df: pd.DataFrame) -> str | None:
    """What figures and reports say of runs whose CPU ranks shared cores, e.g. ``"4-8 ranks
    on 2 cores (cluster=local): not a hardware measurement"``, of runs other work competed
    with (:func:`vitfsdp.core.throughput.competed` of ``host_other_cpus`` and ``host_cpus``:
    ``"other work used 1.5-1.7 of 2 cores during 13 runs: not a hardware measurement"``),
    followed by the network the nodes were on where it was emulated (``"; nodes apart on an
    emulated 1 Gbit/s link"``); ``None`` when none applies. Where ranks shared cores and
    other work competed too, "not a hardware measurement" closes the second part only:
    ``"4 ranks on 2 cores (cluster=local); other work used 0.8 of 2 cores during 1 run: not
    a hardware measurement"``."""
    networks = "; ".join(sorted(set(df["network"].dropna().astype(str)))) \
        if "network" in df else ""
    shared = df[df["shared_cores"].notna()] if "shared_cores" in df else df.iloc[0:0]
    cores = _shared_cores_note(shared) if len(shared) else ""
    # the figures' footers leave the cluster profile to this note where it says anything
    # of the cores (figures.finish): one of its two parts names it
    other = other_work_note(df, name_cluster=not cores)
    if cores and other:  # what neither is, said once, after both
        cores = cores.removesuffix(NOT_HARDWARE)
    notes = [cores, other, networks]
    return "; ".join(n for n in notes if n) or None


def other_work_note(df: pd.DataFrame, name_cluster: bool = False) -> str:
    """``"other work used 1.5-1.7 of 2 cores during 13 runs: not a hardware measurement"``
    where other processes of the host competed with runs of ``df`` (more than
    :data:`~vitfsdp.core.throughput.WINDOW_OTHER_WORK_FRAC` of its cores busy during their
    timed windows, or :data:`~vitfsdp.core.throughput.OTHER_WORK_FRAC` over a whole point
    where no window measured it: :func:`vitfsdp.core.throughput.competed`, the rule of
    :func:`vitfsdp.analysis.tables.competed_runs`); ``name_cluster``: the runs' cluster
    profiles after the runs, ``"during 13 runs (cluster=local): ..."``. ``""`` where none
    did or it was not measured (no ``host_other_cpus``: Slurm points, older records)."""
    other, cpus = numeric_column(df, "host_other_cpus"), numeric_column(df, "host_cpus")
    hit = competed_flags(df)
    if not hit.any():
        return ""
    low, high = other[hit].min(), other[hit].max()
    used = f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"
    cores = "/".join(str(int(c)) for c in sorted(set(cpus[hit].dropna())))
    runs = int(hit.sum())
    profiles = ",".join(sorted(set(df.loc[hit, "cluster"].dropna().astype(str)))) \
        if name_cluster and "cluster" in df else ""
    return (f"other work used {used} of {cores} cores during {runs} run{'s' if runs > 1 else ''}"
            f"{f' (cluster={profiles})' if profiles else ''}{NOT_HARDWARE}")


def _shared_cores_note(shared: pd.DataFrame) -> str:
    """``"4-8 ranks on 2 cores (cluster=local): not a hardware measurement"``."""
    ranks = shared["ranks_per_host"].dropna().astype(int)
    low, high = ranks.min(), ranks.max()
    count = f"{low}" if low == high else f"{low}-{high}"
    cores = "/".join(str(c) for c in sorted(set(shared["host_cpus"].dropna().astype(int))))
    profiles = ",".join(sorted(set(shared["cluster"].dropna().astype(str))))
    return f"{count} ranks on {cores} cores (cluster={profiles}){NOT_HARDWARE}"


def _sort_key(col: pd.Series) -> pd.Series:
    """Sort mixed-type object columns (e.g. booleans with ``None``) by their text."""
    return col.astype("string") if col.dtype == object else col


def line_columns(df: pd.DataFrame) -> list[str]:
    """The columns that identify one scaling line: model, strategy and any varying config.

    A column of :data:`VARIANT_COLUMNS` counts when it takes more than one value in ``df``
    (of :data:`RESOLVED_COLUMNS`, more than one value a run resolved: a point that never
    started, cancelled while pending, say, splits no line by its ``auto``, while a run that
    started and recorded no resolution keeps its ``auto`` as a value of its own, so that
    ``kernels.adamw=foreach`` beside ``auto`` is two lines, not repeats of one; of
    :data:`STARTED_COLUMNS`, more than one value among the runs that started; of
    :data:`RECORDED_COLUMNS`, more than one value besides null); one of
    :data:`STRATEGY_COLUMNS` when it takes more than one value within a strategy.
    """
    cols = list(BASE_LINE_COLUMNS)
    configured = df[df["framework"].notna()]  # a run that failed before its config was
    df = configured if len(configured) else df  # recorded splits no line
    started = df[df["device_type"].notna()] if "device_type" in df else df
    started = started if len(started) else df
    ran = _started(df)
    cols += [c for c in VARIANT_COLUMNS
             if _resolved((started if c in STARTED_COLUMNS else df)[c], c, ran)
             .nunique(dropna=c in RECORDED_COLUMNS) > 1]
    within = df.groupby(list(BASE_LINE_COLUMNS), dropna=False)
    cols += [c for c in STRATEGY_COLUMNS if (within[c].nunique(dropna=False) > 1).any()]
    return cols


def _resolved(values: pd.Series, column: str, started: pd.Series | None = None) -> pd.Series:
    """``values`` of ``column`` without those a run had not resolved yet
    (:data:`RESOLVED_COLUMNS`); every value of any other column. ``started``: which runs
    started (on ``values``' index, :func:`_started`): a placeholder of one of them is no
    placeholder but what it ran under (a record that did not say what ``auto`` chose), and
    stays; None: every placeholder is left out."""
    unresolved = RESOLVED_COLUMNS.get(column)
    if unresolved is None:
        return values
    placeholder = values.astype(object).isin(unresolved)
    if started is not None:
        placeholder &= ~started.reindex(values.index, fill_value=False)
    return values[~placeholder & values.notna()]


def _started(df: pd.DataFrame) -> pd.Series:
    """Whether each run of ``df`` started (its ``device_type`` recorded), on ``df``'s index;
    none where ``df`` has no such column (a frame read before it)."""
    if "device_type" not in df:
        return pd.Series(False, index=df.index)
    return df["device_type"].notna()


def at_their_points(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (runs.csv's rows) with each :data:`RESOLVED_COLUMNS` value a run had not
    resolved (it never started: cancelled while pending, say, holds ``precision=auto`` and
    no device) replaced by what the other runs of its point resolved (``point_id``), so that
    it counts and is drawn at its point where such a column splits lines (two devices, or
    ``precision=fp32,auto``); kept where none of them resolved one, or they resolved two.
    ``df`` itself where it has no ``point_id`` (records read before the column) or no run
    is unresolved; runs.csv keeps what each run recorded."""
    if "point_id" not in df or df.empty:
        return df
    out = df
    for column in (c for c in RESOLVED_COLUMNS if c in df):
        resolved = _resolved(df[column], column)
        missing = df.index.difference(resolved.index)
        if missing.empty or resolved.empty:
            continue
        by_point = resolved.groupby(df.loc[resolved.index, "point_id"])
        single = by_point.first()[by_point.nunique() == 1]
        found = df.loc[missing, "point_id"].map(single).dropna()
        if not found.empty:
            out = out.copy() if out is df else out
            out[column] = out[column].astype(object)
            out.loc[found.index, column] = found.astype(object)
    return out


def label_columns(df: pd.DataFrame) -> list[str]:
    """The line columns that label lines: :func:`line_columns` without a PyTorch-only
    setting that splits no strategy's lines within a framework (it varies only between
    strategies or frameworks: DDP and JAX runs record it as null)."""
    keys = line_columns(df)
    within = df.groupby(["model", "strategy", "framework"], dropna=False)
    return [k for k in keys if k not in TORCH_ONLY_COLUMNS
            or (within[k].nunique(dropna=False) > 1).any()]


def configurations(df: pd.DataFrame) -> pd.Series:
    """Each row's line label (:func:`line_label` over :func:`label_columns`), e.g.
    ``"FULL_SHARD BACKWARD_POST"``: what figures' legends and tables call a configuration."""
    return line_labels(df, label_columns(df))


def line_labels(df: pd.DataFrame, keys: list[str]) -> pd.Series:
    """:func:`line_label` of every row of ``df``, column by column (fast for tens of
    thousands of runs)."""
    df = at_their_points(df)
    strategy = df["strategy"].astype("object")
    labels = strategy.where(strategy.notna(), "unknown strategy").astype(str)
    jax = (df["framework"] == "jax").to_numpy() if "framework" in df else [False] * len(df)
    for key in keys[2:]:
        parts = [None if j and key in TORCH_ONLY_COLUMNS else _label_part(key, v)
                 for v, j in zip(df[key].astype("object"), jax, strict=True)]
        labels = labels + pd.Series(["" if p is None else " " + p for p in parts], df.index)
    return labels.astype("object")


def _label_part(key: str, value: Any) -> str | None:
    """One config value in a line label (see :func:`line_label`); ``None`` when null. The
    ``network`` column reads ``link 1 Gbit/s`` (nodes apart on an emulated link of that
    rate) or ``link not emulated``."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if key == "network":
        rate = re.search(r"emulated (\S+ Gbit/s)", str(value))
        return f"link {rate.group(1)}" if rate else "link not emulated"
    word = isinstance(value, str) and "." not in key and key not in NAMED_COLUMNS
    return value if word else f"{key}={value}"


def line_label(row: pd.Series, keys: list[str]) -> str:
    """A line's label: the strategy, then each varying config value of ``keys[2:]``
    (``name=value`` unless it is a word of an undotted column: ``bf16``, but
    ``kernels.adamw=fused`` and ``cluster=frontier``, :data:`NAMED_COLUMNS`); a null value
    (a setting that does not apply) is left out, and so is a :data:`TORCH_ONLY_COLUMNS`
    value of a JAX run (its record's default, ``kernels.adamw=auto``, which JAX never
    reads)."""
    parts = [str(row["strategy"]) if pd.notna(row["strategy"]) else "unknown strategy"]
    jax = row.get("framework") == "jax"
    parts += [p for p in (_label_part(key, row[key]) for key in keys[2:]
                          if not (jax and key in TORCH_ONLY_COLUMNS)) if p is not None]
    return " ".join(parts)


def judged_busy(runs: pd.DataFrame) -> pd.Series:
    """Each run's busy share as the host-bound flag judges it: its least busy rank's
    (``device_busy_min_frac``) where recorded, else the mean over ranks
    (``device_busy_frac``); NaN where neither (CPU ranks). On more than one GPU a rank that
    waits in a collective for a slower peer reads busy (its kernel runs while it waits), so
    a host-bound rank shows in the minimum and hides in the mean. A point's figure is the
    median of its runs' (the tables, the figures' rings and the framework ratio alike)."""
    low = numeric_column(runs, "device_busy_min_frac")
    return low.where(low.notna(), numeric_column(runs, "device_busy_frac"))


#: What a figure's footer says where GPU points have no busy share (:func:`busy_missing`).
BUSY_NOT_MEASURED = "device busy not measured"


def busy_missing(runs: pd.DataFrame) -> str:
    """Why the completed runs of ``runs`` (runs.csv's rows) that have no busy share
    (:func:`judged_busy` NaN) lack it, in one phrase: ``"on CPU ranks, where the host is the
    device"``, ``"on GPUs without NVML or AMD SMI readings, or in records older than the
    field"``, both joined by ``" and "`` where runs of both kinds lack it; ``""`` where every
    such run measured it. A run without one is never counted as not host-bound
    (:func:`vitfsdp.core.throughput.host_bound` is None)."""
    missing = _busy_unmeasured(runs)
    if missing.empty:
        return ""
    kinds = set(missing.get("device_type", pd.Series(None, index=missing.index))
                .fillna("unknown").astype(str))
    parts = (["on CPU ranks, where the host is the device"] * ("cpu" in kinds)
             + ["on GPUs without NVML or AMD SMI readings, or in records older than the "
                "field"] * bool(kinds - {"cpu"}))
    return " and ".join(parts)


def gpu_busy_missing(runs: pd.DataFrame) -> bool:
    """Whether a completed run of ``runs`` on a GPU (``device_type`` not ``cpu``) has no
    busy share (:func:`judged_busy` NaN): its host-bound flag is unknown, not False."""
    if "device_type" not in runs or runs.empty:
        return False
    missing = _busy_unmeasured(runs)["device_type"]
    return bool((missing.notna() & (missing.astype(str) != "cpu")).any())


def _busy_unmeasured(runs: pd.DataFrame) -> pd.DataFrame:
    """The completed runs of ``runs`` with images/s (every row where ``runs`` has no
    ``status``) that have no busy share (:func:`judged_busy` NaN)."""
    done = runs[(runs["status"] == "completed") & runs["ips"].notna()] \
        if "status" in runs else runs
    return done[judged_busy(done).isna()]


def competed_flags(runs: pd.DataFrame) -> pd.Series:
    """Whether other work competed with each run of ``runs`` (runs.csv's rows), on its index
    (:func:`vitfsdp.core.throughput.competed` of ``host_other_cpus`` and ``host_cpus``, by
    the bound of the span ``host_other_windows`` says it was measured over: the timed
    windows, else, and on nodes a CPU quota held back (``cpu_throttled_s`` > 0), the whole
    point's); False where either is absent or unknown (older records). The one rule of
    :func:`other_work_note`, the ratio table's ``noisy`` and the tables' ``runs_contended``."""
    other = numeric_column(runs, "host_other_cpus")
    cpus = numeric_column(runs, "host_cpus")
    over = judged_over_windows(runs)
    return pd.Series([competed(o, c, w) for o, c, w in zip(other, cpus, over, strict=True)],
                     index=runs.index, dtype=bool)


def judged_over_windows(runs: pd.DataFrame) -> pd.Series:
    """Whether each run's other work is judged by the window bound
    (:data:`~vitfsdp.core.throughput.WINDOW_OTHER_WORK_FRAC`): its ``host_other_cpus`` was
    measured over its timed windows (``host_other_windows``) and no CPU quota held its nodes
    back (``cpu_throttled_s`` not above 0); else the whole point's
    (:data:`~vitfsdp.core.throughput.OTHER_WORK_FRAC`). A node held by a quota (the demo's
    emulated nodes) keeps the whole point's bound: the window bound was measured on nodes
    without one, and there a quiet demo's windows read up to 0.19 cores."""
    throttled = numeric_column(runs, "cpu_throttled_s").fillna(0) > 0
    return flag_column(runs, "host_other_windows") & ~throttled


def flag_column(df: pd.DataFrame, name: str) -> pd.Series:
    """``df[name]`` as bools on ``df``'s index: True where a value reads True
    (:func:`~vitfsdp.analysis.verdict.read_flag`: ``True``, ``1``, ``"True"`` as runs.csv
    reads back), False elsewhere (not known included) and where ``df`` has no such column
    (records older than the field)."""
    values = df.get(name, pd.Series(False, index=df.index))
    return pd.Series([read_flag(v) is True for v in values], index=df.index, dtype=bool)


def numeric_column(df: pd.DataFrame, name: str) -> pd.Series:
    """``df[name]`` as floats on ``df``'s index: NaN where a value is not a number, and a
    column of NaN where ``df`` has none (records older than the field)."""
    values = pd.to_numeric(df.get(name, pd.Series(float("nan"), index=df.index)),
                           errors="coerce")
    return values.astype("Float64").astype(float)  # a nullable Int64's NA: NaN, as documented


def window_spreads(df: pd.DataFrame) -> pd.Series:
    """Each run's spread over its timed windows, (fastest - slowest) / median images/s, a
    fraction on ``df``'s index: runs.csv ``ips_spread``, else from ``ips_max``, ``ips_min``
    and ``ips`` (records without it); NaN where a run measured neither."""
    return numeric_column(df, "ips_spread").fillna(
        (numeric_column(df, "ips_max") - numeric_column(df, "ips_min"))
        / numeric_column(df, "ips"))


def scaling_table(df: pd.DataFrame) -> pd.DataFrame:
    """Weak-scaling table of the completed runs of ``df`` (a
    :func:`~vitfsdp.analysis.collect.collect_runs` frame).

    Each line is one model and strategy (split further by any varying config column, see
    :func:`line_columns`). Its ideal is linear scaling from its smallest completed node count
    ``n0``: ``ideal_ips = ips(n0) * nodes / n0``, where ``ips(n0)`` is the median over the
    completed runs at ``n0`` (one run per point in a plain sweep).

    Returns:
        One row per completed run with a measured ``ips``: the line columns, ``nodes``,
        ``world_size``, ``ips`` (global images/s), ``ideal_ips`` (images/s),
        ``scaling_efficiency`` (ips / ideal_ips, 1.0 = linear; NaN for every run at its
        line's baseline node count ``n0``, one run there or several: the ideal is scaled
        from that baseline, so a run there is scaled from nothing, and where it pooled runs
        a run's ips over their median, 1.14 say, is their spread, not an efficiency;
        points.csv gives the baseline point 1.0 by definition),
        ``tflops_per_gpu`` (model TFLOP/s per GPU), ``mfu`` (fraction of the device's
        peak), ``peak_mem_gib``, ``run_dir``; sorted like ``df``. Repeats stay separate rows
        here; see :func:`vitfsdp.analysis.tables.points_table` for one row per point.
    """
    keys = line_columns(df)
    done = df[(df["status"] == "completed") & df["ips"].notna() & df["nodes"].notna()].copy()
    cols = [*keys, "nodes", "world_size", "ips", "ideal_ips", "scaling_efficiency",
            "tflops_per_gpu", "mfu", "peak_mem_gib", "run_dir"]  # fmt: skip
    if done.empty:
        return pd.DataFrame(columns=cols)
    done["ideal_ips"] = _ideal_ips(done, keys)
    at_n0 = done["nodes"].astype("float64") == baseline_nodes(done, keys)
    done["scaling_efficiency"] = (done["ips"] / done["ideal_ips"]).where(~at_n0)
    return done[cols].reset_index(drop=True)


def baseline_nodes(done: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Each row's line's smallest node count among ``done`` (the completed runs or points):
    the baseline ``n0`` its ideal scales from, on ``done``'s index (float; NaN where the row
    has no node count)."""
    nodes = done["nodes"].astype("float64")
    return nodes.groupby([done[k] for k in keys], dropna=False).transform("min")


def _ideal_ips(done: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Linear scaling from each line's smallest node count: ips(n0) * nodes / n0."""
    nodes = done["nodes"].astype("float64")
    n0 = baseline_nodes(done, keys)
    ips_at_n0 = done["ips"].where(nodes == n0)
    base_ips = ips_at_n0.groupby([done[k] for k in keys], dropna=False).transform("median")
    return base_ips * nodes / n0


def comparison_columns(df: pd.DataFrame) -> list[str]:
    """The line columns that pair a JAX run with a PyTorch run: all but ``framework`` and
    the :data:`TORCH_ONLY_COLUMNS` (null under JAX)."""
    return [c for c in line_columns(df) if c not in ("framework", *TORCH_ONLY_COLUMNS)]


def framework_ratio_table(df: pd.DataFrame, noise: float = float("nan")) -> pd.DataFrame:
    """JAX against PyTorch: images/s of both and their ratio per model, strategy and node
    count (and any other varying config of :func:`comparison_columns`). A JAX run is compared
    only with PyTorch runs of its world size, GPUs per node and cluster profile
    (:data:`PAIRING_COLUMNS`).

    Every point both frameworks ran has a row, whatever its runs' status; only completed
    runs give images/s, the median where a side ran more than once. A PyTorch setting that
    splits a strategy's PyTorch lines (``backward_prefetch`` swept, say) stays a column,
    each of its rows compared with the same JAX runs.

    JAX's FULL_SHARD runs torch's SHARD_GRAD_OP program (:data:`SAME_PROGRAM`): where the
    sweep ran torch's SHARD_GRAD_OP at a JAX FULL_SHARD point, that pair is a row too,
    beside the FULL_SHARD pair, its ``strategy`` JAX's (FULL_SHARD) and ``torch_strategy``
    SHARD_GRAD_OP: the same collectives on both sides, where the FULL_SHARD pair's torch
    side gathers each unit again in backward.

    Returns:
        One row per point that both frameworks ran: the key columns, ``nodes``, those
        of :data:`PAIRING_COLUMNS` that take more than one value at one node count among the
        completed runs (``world_size`` in ranks, ``ranks_per_node``, ``cluster``: the
        profile), the varying PyTorch-only columns, ``torch_strategy`` (only where a row
        pairs by program: the PyTorch strategy compared where it is not ``strategy``,
        ``SHARD_GRAD_OP``; empty in the rows that pair by name), ``torch_ips`` and
        ``jax_ips`` (global images/s, NaN where the side completed no run) and
        ``jax_over_torch`` (jax_ips /
        torch_ips; > 1: JAX is faster), ``ratio_low`` and ``ratio_high`` (the ratio's bounds
        over both sides' spans, :func:`vitfsdp.analysis.verdict.span`: ``ratio_low`` is the
        slowest JAX measurement over the fastest PyTorch one, jax_low / torch_high,
        ``ratio_high`` the fastest JAX over the slowest PyTorch, jax_high / torch_low),
        ``torch_runs`` and ``jax_runs`` (completed runs of each), ``torch_failed`` and
        ``jax_failed`` (runs of each that did not complete, or measured no ips),
        ``difference`` (where a side completed no run, :data:`vitfsdp.analysis.verdict.NO_RESULT`
        and which side failed, ``"no result: jax failed (1 of 1 runs)"``; each side's
        images/s and span over its runs other work did not compete with where it has any
        (:func:`~vitfsdp.analysis.verdict.judged_runs`, points.csv's rule; ``"; jax: 1 run
        beside other work left out"``); where either side was host-bound (``host_bound``),
        :func:`~vitfsdp.analysis.verdict.host_bound_verdict` in place of any ranking, and
        where neither was but a side ran on GPUs without a busy share (``host_bound`` NA),
        :func:`~vitfsdp.analysis.verdict.unmeasured_verdict` (``"GPU busy share not
        measured: host-bound not known, not ranked (1.50x apart)"``; CPU ranks keep their
        verdict); else where every completed run of a side was contended
        (:func:`competed_flags`, the rule of best.csv's ``runs_contended``), no ranking:
        :func:`vitfsdp.analysis.verdict.contended_verdict` over both sides' runs, ``"not a
        result: other work competed (6 of 6 runs)"``; else
        :func:`vitfsdp.analysis.verdict.judge` of the two spans, over runs where a side
        ran twice, else its run's windows; ``noise`` the sweep's noise check's ratio: only
        ``beyond the spread`` makes one framework faster; where runs of a side failed,
        :func:`vitfsdp.analysis.verdict.failed_note` after it, ``"; jax: 1 of 2 runs
        failed"``), ``torch_busy_frac``
        and ``jax_busy_frac`` (the median busy share of each side's runs, on its least busy
        rank where recorded, :func:`judged_busy`; NaN where not
        measured: CPU ranks, ROCm under JAX) and ``host_bound`` (either side
        host-bound, :func:`vitfsdp.core.throughput.host_bound`: the ratio then compares the
        frameworks' host loops, not their kernels; False where both were measured and
        neither is; NA otherwise), ``noisy`` (either side's measurements disturbed: where
        the side ran at least twice, its runs' (max - min) / median images/s, points.csv's
        ``noisy``, where it ran once, its run's windows' (``ips_spread``), above
        :data:`vitfsdp.core.throughput.NOISY_SPREAD`; or other work competed with one of its
        runs, :func:`vitfsdp.core.throughput.competed` of ``host_other_cpus`` and
        ``host_cpus``. True where either side is; False where both sides' spreads were
        measured and neither is; NA otherwise: one run without a window spread),
        ``torch_attention`` and
        ``jax_attention`` (the attention each side ran, ``attention`` of the runs: ``sdpa``,
        ``xla``, ``cudnn``, ``written out``; where they differ, the ratio includes the
        attention kernels' difference),
        ``torch_recipe`` (the PyTorch side's :func:`torch_recipe`, e.g. ``"FSDP1 compiled,
        orig params, fused AdamW"``; ``"; "`` between the recipes of runs that differ),
        ``torch_loss`` and ``jax_loss`` (each side's final training loss, runs.csv's
        ``loss``, the median over the runs its images/s are over; NaN where not recorded,
        or where that side's runs' losses part, a median no run reached: whether the two
        trained alike, :func:`vitfsdp.analysis.verdict.loss_parted`); where a side pools
        runs that share a ``repeat`` label (points.csv's ``runs_share_repeat``: not known
        to be repeats), ``difference`` is
        :func:`~vitfsdp.analysis.verdict.pooled_verdict` in place of any ranking (``"not
        known repeats: PyTorch's 2 runs (final loss 0.317-3.24) share a repeat label, not
        ranked (1.55x apart)"``);
        empty (with these columns) when either framework ran no point.
    """
    table = _ratio_rows(df, df, noise)
    extra = [rows for rows in (_ratio_rows(df, frame, noise).assign(torch_strategy=torch_name)
                               for torch_name, frame in _same_programs(df)) if len(rows)]
    if not extra:
        return table
    keys = list(table.columns[:list(table.columns).index(RATIO_COLUMNS[0])])
    table = pd.concat([table.assign(torch_strategy=None), *extra], ignore_index=True)
    table = table[[*keys, "torch_strategy", *RATIO_COLUMNS]].astype(
        {"host_bound": "boolean", "noisy": "boolean"})
    return table.sort_values([*keys, "torch_strategy"], kind="stable", key=_sort_key,
                             na_position="first").reset_index(drop=True)


def _same_programs(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """For each JAX strategy of :data:`SAME_PROGRAM` the sweep ran beside the PyTorch
    strategy that runs its program: that PyTorch strategy's name and a frame of the JAX
    runs of the strategy and those PyTorch runs, the PyTorch runs under the JAX strategy's
    name (``strategy``, and ``sharding_strategy`` as the JAX runs recorded it), so that
    :func:`_ratio_rows` pairs them."""
    found = []
    for jax_name, torch_name in SAME_PROGRAM.items():
        jax = (df["framework"] == "jax") & (df["strategy"] == jax_name)
        torch = (df["framework"] == "torch") & (df["strategy"] == torch_name)
        if not (jax.any() and torch.any()):
            continue
        frame = df[jax | torch].copy()
        frame["strategy"] = frame["strategy"].astype(object)
        frame.loc[torch[jax | torch], "strategy"] = jax_name
        if "sharding_strategy" in frame:
            recorded = df.loc[jax, "sharding_strategy"].dropna().unique()
            frame["sharding_strategy"] = frame["sharding_strategy"].astype(object)
            frame.loc[torch[jax | torch], "sharding_strategy"] = (
                recorded[0] if len(recorded) == 1 else jax_name)
        found.append((torch_name, frame))
    return found


def _ratio_rows(df: pd.DataFrame, runs: pd.DataFrame, noise: float) -> pd.DataFrame:
    """:func:`framework_ratio_table`'s rows of the runs of ``runs`` (``df`` itself, or a
    frame of :func:`_same_programs`), keyed by the columns ``df`` varies."""
    by_framework, keys, torch_keys, pairing, ran = _framework_keys(df, None if runs is df else runs)
    cols = [*keys, *torch_keys, *RATIO_COLUMNS]
    groups = {"torch": [*pairing, *torch_keys], "jax": pairing}
    counts = {fw: _attempts(rows, groups[fw], fw) for fw, rows in ran.items()}
    if any(c.empty for c in counts.values()):
        return pd.DataFrame(columns=cols)
    table = counts["torch"].merge(counts["jax"], on=pairing, how="inner")  # null keys match
    for fw, rows in by_framework.items():
        if not rows.empty:
            table = table.merge(_side(rows, groups[fw], fw), on=groups[fw], how="left")
        table = table.reindex(columns=[*table.columns, *(
            c for c in _side_columns(fw) if c not in table.columns)])
        table[f"{fw}_runs"] = table[f"{fw}_runs"].fillna(0).astype(int)
        table[f"{fw}_failed"] = table[f"{fw}_total"] - table[f"{fw}_runs"]
    table["jax_over_torch"] = table["jax_ips"] / table["torch_ips"]
    table["ratio_low"] = table["jax_low"] / table["torch_high"]
    table["ratio_high"] = table["jax_high"] / table["torch_low"]
    table["host_bound"] = pd.array(
        [any_host_bound(host_bound(t), host_bound(j))
         for t, j in zip(table["torch_busy_frac"], table["jax_busy_frac"], strict=True)],
        dtype="boolean")
    table["difference"] = [_ratio_verdict(r, noise) for r in table.itertuples()]
    table["noisy"] = (table["torch_noisy"].astype("boolean")
                      | table["jax_noisy"].astype("boolean"))  # Kleene: True | NA is True
    return table[cols].sort_values(keys, kind="stable", key=_sort_key).reset_index(drop=True)


def _side_columns(fw: str) -> tuple[str, ...]:
    """The columns :func:`_side` gives of framework ``fw``."""
    return (f"{fw}_ips", f"{fw}_busy_frac", f"{fw}_runs", f"{fw}_low", f"{fw}_high",
            f"{fw}_noisy", f"{fw}_judged", f"{fw}_only_contended", f"{fw}_attention",
            f"{fw}_device", *(("torch_recipe",) if fw == "torch" else ()), f"{fw}_loss",
            f"{fw}_shared", f"{fw}_loss_min", f"{fw}_loss_max")


def _attempts(rows: pd.DataFrame, keys: list[str], fw: str) -> pd.DataFrame:
    """Framework ``fw``'s runs of ``rows`` (every status) counted per point of ``keys``:
    ``{fw}_total`` and ``{fw}_contended`` (those other work competed with,
    :func:`competed_flags`)."""
    if rows.empty:
        return pd.DataFrame(columns=[*keys, f"{fw}_total", f"{fw}_contended"])
    return rows.assign(_contended=competed_flags(rows)).groupby(keys, dropna=False).agg(
        **{f"{fw}_total": ("_contended", "size"),
           f"{fw}_contended": ("_contended", "sum")}).reset_index()


def _ratio_verdict(r: Any, noise: float) -> str:
    """framework_ratio.csv's ``difference`` of one row (see :func:`framework_ratio_table`)."""
    totals = {"torch": int(r.torch_total), "jax": int(r.jax_total)}
    failed = {"torch": int(r.torch_failed), "jax": int(r.jax_failed)}
    runs = {"torch": r.torch_runs, "jax": r.jax_runs}
    missing = [fw for fw in totals if not runs[fw]]
    contended = {"torch": int(r.torch_contended), "jax": int(r.jax_contended)}
    only = {"torch": bool(r.torch_only_contended), "jax": bool(r.jax_only_contended)}
    pooled = [f"{name}'s {int(shared)} runs{loss_range(low, high)}"
              for name, shared, low, high in (
                  ("PyTorch", r.torch_shared, r.torch_loss_min, r.torch_loss_max),
                  ("JAX", r.jax_shared, r.jax_loss_min, r.jax_loss_max))
              if pd.notna(shared) and shared > 0]
    if missing:
        verdict = NO_RESULT + ": " + ", ".join(
            f"{fw} failed ({failed[fw]} of {totals[fw]} runs)" for fw in missing)
    elif any(only.values()):
        verdict = contended_verdict(sum(contended.values()), sum(totals.values()))
    elif pooled:
        verdict = pooled_verdict(max(r.jax_ips / r.torch_ips, r.torch_ips / r.jax_ips), *pooled)
    else:
        ratio = max(r.jax_ips / r.torch_ips, r.torch_ips / r.jax_ips)
        unmeasured = any(gpu_unmeasured(busy, device) for busy, device in (
            (r.torch_busy_frac, r.torch_device), (r.jax_busy_frac, r.jax_device)))
        verdict = ranked(compare((r.torch_low, r.torch_high, r.torch_judged),
                                 (r.jax_low, r.jax_high, r.jax_judged), r.torch_ips, r.jax_ips,
                                 noise), r.host_bound, ratio, unmeasured)
    return with_notes(verdict, *(failed_note(failed[fw], totals[fw], fw)
                                 for fw in totals if fw not in missing),
                      *(left_out_note(contended[fw], fw) for fw in totals
                        if fw not in missing and not any(only.values())))


def _framework_keys(df: pd.DataFrame, runs: pd.DataFrame | None = None) -> tuple[
        dict[str, pd.DataFrame], list[str], list[str], list[str],
        dict[str, pd.DataFrame]]:  # fmt: skip
    """How :func:`framework_ratio_table` pairs the runs of ``df``: each framework's completed
    runs (``"torch"``, ``"jax"``), the key columns the table shows (:func:`comparison_columns`,
    ``nodes`` and the :data:`PAIRING_COLUMNS` that take more than one value at one node
    count), the PyTorch-only columns that split a strategy's PyTorch lines, the columns
    a JAX run shares with the PyTorch runs it is compared with (the keys and every pairing
    column), and each framework's runs of every status at a known node count (a run that
    never started at the values the other runs of its point resolved,
    :func:`at_their_points`). ``runs``: the runs to pair where not ``df``'s own (a frame of
    :func:`_same_programs`), the key columns still those ``df`` varies."""
    lines = line_columns(df)
    within = df[df["framework"] == "torch"].groupby(list(BASE_LINE_COLUMNS), dropna=False)
    torch_keys = [c for c in TORCH_ONLY_COLUMNS
                  if c in lines and (within[c].nunique(dropna=False) > 1).any()]
    done, ran = _completed(at_their_points(df))
    both = done[done["framework"].isin(["torch", "jax"])]
    if runs is not None:
        done, ran = _completed(at_their_points(runs))
    by_framework = {fw: done[done["framework"] == fw] for fw in ("torch", "jax")}
    at_nodes = both.groupby("nodes", dropna=False)
    compared = comparison_columns(df)
    world = [c for c in PAIRING_COLUMNS
             if c not in compared and (at_nodes[c].nunique(dropna=False) > 1).any()]
    keys = [*compared, "nodes", *world]
    pairing = [*keys, *(c for c in PAIRING_COLUMNS if c not in keys)]
    return by_framework, keys, torch_keys, pairing, ran


def _completed(placed: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The completed runs of ``placed`` with images/s at a known node count, and each
    framework's runs of every status at a known node count."""
    done = placed[(placed["status"] == "completed") & placed["ips"].notna()
                  & placed["nodes"].notna()]
    ran = {fw: placed[(placed["framework"] == fw) & placed["nodes"].notna()]
           for fw in ("torch", "jax")}
    return done, ran


def framework_partners(df: pd.DataFrame) -> pd.DataFrame:
    """Whether each completed PyTorch or JAX run of ``df`` (a
    :func:`~vitfsdp.analysis.collect.collect_runs` frame) has a row of
    :func:`framework_ratio_table`: ``paired`` where a run of the other framework, of any
    status, shares its point (model, strategy, node count, any other varying config of
    :func:`comparison_columns`, world size, GPUs per node and cluster profile); a run
    without one is in no row, and the table is partial by it.

    Returns:
        One row per completed run of either framework (those with ips at a known node
        count): ``framework``, the ratio table's key columns (model, strategy, ..., ``nodes``
        and the pairing columns that vary at one node count), ``run_dir`` and ``paired``
        (bool); every run unpaired where the other framework ran none.
    """
    found = _partners(df, df)
    for _, frame in _same_programs(df):  # a PyTorch run paired by its program, not its name
        also = _partners(df, frame)
        found["paired"] |= found["run_dir"].isin(also.loc[also["paired"], "run_dir"])
    return found


def _partners(df: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`framework_partners` of the runs of ``runs`` (``df`` itself, or a frame of
    :func:`_same_programs`), keyed by the columns ``df`` varies."""
    by_framework, keys, _, pairing, ran = _framework_keys(df, None if runs is df else runs)
    found = []
    for fw, other in (("torch", "jax"), ("jax", "torch")):
        rows = by_framework[fw]
        partners = ran[other][pairing].drop_duplicates()
        marked = rows[pairing].merge(partners, on=pairing, how="left", indicator=True)
        found.append(rows[["framework", *keys, "run_dir"]].assign(
            paired=(marked["_merge"] == "both").to_numpy()))
    return pd.concat(found, ignore_index=True)


def _side(rows: pd.DataFrame, keys: list[str], fw: str) -> pd.DataFrame:
    """One framework's points: median ips and busy share, completed runs, the span of its
    measurements (over runs where it ran at least twice, else its run's windows), whether
    they are noisy (see :func:`framework_ratio_table`'s ``noisy``), the attention it ran
    and, for PyTorch, its recipe (:func:`torch_recipe`); its final loss (median; NaN where
    its runs' losses part) and their lowest and highest; its runs that share a ``repeat``
    label with another of its runs (``{fw}_shared``, of every completed run). The
    images/s, busy share, span and loss are over the runs other work did not compete with
    where the side has any (:func:`~vitfsdp.analysis.verdict.judged_runs`, points.csv's
    rule: ``{fw}_judged`` counts them), ``{fw}_runs`` counts every completed run."""
    contended = competed_flags(rows)
    labels = rows[keys].assign(_repeat=rows.get("repeat", pd.Series(0, index=rows.index))
                               .fillna(0))
    every = rows.assign(competed=contended, shared=labels.duplicated(keep=False)).groupby(
        keys, dropna=False).agg(runs=("ips", "count"), competed=("competed", "any"),
                                shared=("shared", "sum")).reset_index()
    rows = rows[judged_runs(contended, [rows[k] for k in keys])]
    rows = rows.assign(busy=judged_busy(rows),
                       win_lo=rows.get("ips_min", rows["ips"]),
                       win_hi=rows.get("ips_max", rows["ips"]),
                       win_spread=window_spreads(rows),
                       competed_all=competed_flags(rows),
                       attention=rows.get("attention", pd.Series(None, index=rows.index)),
                       device=rows.get("device_type", pd.Series(None, index=rows.index)),
                       recipe=torch_recipe(rows) if fw == "torch" else None,
                       final_loss=numeric_column(rows, "loss"))
    side = rows.groupby(keys, dropna=False).agg(
        ips=("ips", "median"), busy=("busy", "median"), judged=("ips", "count"),
        run_lo=("ips", "min"), run_hi=("ips", "max"), win_lo=("win_lo", "min"),
        win_hi=("win_hi", "max"), win_spread=("win_spread", "max"),
        competed_all=("competed_all", "all"),
        attention=("attention", lambda a: _distinct(a, ", ")),
        device=("device", lambda d: _distinct(d, ", ")),
        recipe=("recipe", lambda r: _distinct(r, "; ")),
        loss=("final_loss", "median"), loss_min=("final_loss", "min"),
        loss_max=("final_loss", "max")).reset_index()
    side = side.merge(every, on=keys, how="left")  # null keys match (merge)
    low, high = span(side["judged"], side["run_lo"], side["run_hi"], side["win_lo"],
                     side["win_hi"], side["ips"])
    spread = ((side["run_hi"] - side["run_lo"]) / side["ips"]).where(
        side["judged"] >= 2, side["win_spread"])
    noisy = pd.array([True if c else None if s != s else bool(s > NOISY_SPREAD)
                      for c, s in zip(side["competed"], spread, strict=True)], dtype="boolean")
    return pd.DataFrame({
        **{k: side[k] for k in keys}, f"{fw}_ips": side["ips"],
        f"{fw}_busy_frac": side["busy"], f"{fw}_runs": side["runs"], f"{fw}_low": low,
        f"{fw}_high": high, f"{fw}_noisy": noisy, f"{fw}_judged": side["judged"],
        f"{fw}_only_contended": side["competed_all"], f"{fw}_attention": side["attention"],
        f"{fw}_device": side["device"],
        **({"torch_recipe": side["recipe"]} if fw == "torch" else {}),
        f"{fw}_loss": side["loss"].where(~pd.Series(  # a median no run reached
            map(loss_parted, side["loss_min"], side["loss_max"]), index=side.index)),
        f"{fw}_shared": side["shared"], f"{fw}_loss_min": side["loss_min"],
        f"{fw}_loss_max": side["loss_max"]})


def _distinct(values: pd.Series, sep: str) -> str | None:
    """The distinct non-null values of ``values`` as text, sorted, ``sep`` between them;
    ``None`` where there is none."""
    return sep.join(sorted(set(values.dropna().astype(str)))) or None


def torch_recipe(rows: pd.DataFrame) -> pd.Series:
    """Each PyTorch run's recipe in words, on ``rows``' index (a
    :func:`~vitfsdp.analysis.collect.collect_runs` frame): the wrapper (``DDP`` where the
    sharding strategy is DDP, else the ``engine``: ``FSDP1``, ``FSDP2``), ``kernels.compile``
    as it resolved (:data:`COMPILE_WORDS`), FSDP1's ``strategy.use_orig_params`` as it
    resolved (:data:`ORIG_PARAMS_WORDS`) and ``kernels.adamw`` as it resolved (``fused
    AdamW``; ``auto AdamW`` where the setting was auto and run.json recorded no choice),
    e.g. ``"FSDP1 compiled, orig params, fused AdamW"``; ``unrecorded`` where a record holds
    no engine or AdamW setting. The runs frame's values are the
    resolved ones where run.json recorded them (``applied``), else the configured ones."""
    columns = ("sharding_strategy", "engine", "kernels.compile", "strategy.use_orig_params",
               "kernels.adamw")
    values = zip(*(rows.get(c, pd.Series(None, index=rows.index)).astype(object)
                   for c in columns), strict=True)
    return pd.Series([_recipe(*v) for v in values], index=rows.index, dtype=object)


def _recipe(sharding: Any, engine: Any, compiled: Any, orig_params: Any, adamw: Any) -> str:
    """One run's :func:`torch_recipe` from its five columns (null: ``None`` or NaN)."""
    known = [None if v is None or (not isinstance(v, str) and pd.isna(v)) else v
             for v in (sharding, engine, compiled, orig_params, adamw)]
    sharding, engine, compiled, orig_params, adamw = known
    fsdp1 = sharding != "DDP" and engine == "fsdp1"
    wrapper = "DDP" if sharding == "DDP" else str(engine).upper() if engine else "engine unrecorded"
    parts = [f"{wrapper} {COMPILE_WORDS.get(_flag(compiled), f'compile={compiled}')}"]
    if fsdp1:
        parts.append(ORIG_PARAMS_WORDS.get(_flag(orig_params), f"orig params={orig_params}"))
    parts.append(f"{adamw} AdamW" if adamw else "AdamW unrecorded")
    return ", ".join(parts)


def _flag(value: Any) -> Any:
    """A recorded boolean as ``True``/``False`` (:func:`~vitfsdp.analysis.verdict.read_flag`:
    JSON's booleans, or their text in a reread runs.csv, ``"True"``), any other value as it
    is (``"auto"``)."""
    flag = read_flag(value)
    return value if flag is None else flag


def format_table(df: pd.DataFrame, scaling: pd.DataFrame | None = None) -> str:
    """A compact text table of every run: model, strategy, nodes (and ``repeat`` where the
    runs hold more than one), status, ips, efficiency, memory.

    Args:
        df: a :func:`~vitfsdp.analysis.collect.collect_runs` frame (all statuses).
        scaling: its :func:`scaling_table`; computed if not given.

    Returns:
        The table as text; ips in images/s, efficiency in percent of ideal
        (:data:`ONE_DEVICE` for a completed run of world size 1, as the report prints it;
        :data:`BASELINE_RUN` for another run at its line's baseline node count: it is not
        scaled from anything), peak memory in GiB; a missing value (a setting DDP does
        not have, a figure a failed run lacks) ``-``.
    """
    scaling = scaling_table(df) if scaling is None else scaling
    eff = scaling.set_index("run_dir")["scaling_efficiency"]
    alone = scaling.loc[numeric_column(scaling, "world_size") == 1, "run_dir"]
    keys = line_columns(df)
    repeats = ["repeat"] if "repeat" in df and df["repeat"].nunique(dropna=True) > 1 else []
    table = df[[*keys, "nodes", *repeats, "status"]].astype(object)
    table = table.where(table.notna(), "-")  # missing printed one way
    table["ips"] = df["ips"].map(lambda x: "-" if pd.isna(x) else f"{x:.1f}")
    table["efficiency"] = df["run_dir"].map(eff).map(format_efficiency).where(
        ~df["run_dir"].isin(_baseline_runs(scaling)), BASELINE_RUN).where(
        ~df["run_dir"].isin(alone), ONE_DEVICE)
    table["peak_mem_gib"] = df["peak_mem_gib"].map(lambda x: "-" if pd.isna(x) else f"{x:.2f}")
    return table.to_string(index=False) + efficiency_footnote(table["efficiency"])


#: What the printed table says of a run at its line's baseline node count
#: (:func:`scaling_table` leaves its efficiency blank): the run is one the ideal is scaled
#: from, not a point scaled.
BASELINE_RUN = "baseline"
#: What the printed table and the report's tables say as the scaling efficiency of a run or
#: point of world size 1: it is its own baseline, one device exchanges nothing, and its
#: ideal is itself.
ONE_DEVICE = "- (baseline, one device: no collectives)"


def _baseline_runs(scaling: pd.DataFrame) -> pd.Series:
    """The ``run_dir`` of each run of ``scaling`` (a :func:`scaling_table`) whose
    efficiency is blank: the runs at their line's baseline node count."""
    return scaling.loc[scaling["scaling_efficiency"].isna(), "run_dir"]


#: What an efficiency above 100 % of the ideal line means in weak scaling: not super-linear
#: scaling (every rank does the same work) but noise, in the baseline or the point.
ABOVE_IDEAL_NOTE = ("* above 100 % of ideal: not super-linear scaling, but its line's baseline "
                    "(host-bound, contended or one run: points.csv baseline_host_bound, "
                    "baseline_contended, baseline_runs; the cause in above_ideal_cause) or "
                    "noise in the baseline or this point")


def format_efficiency(x: float) -> str:
    """Scaling efficiency as a whole percent (``-`` where unknown), ``*`` after one that
    rounds above 100 % (see :data:`ABOVE_IDEAL_NOTE`)."""
    if pd.isna(x):
        return "-"
    return f"{x:.0%}" + ("*" if round(x * 100) > 100 else "")


def efficiency_footnote(column: pd.Series) -> str:
    """``\n`` and :data:`ABOVE_IDEAL_NOTE` where a formatted efficiency is flagged, else ``""``."""
    return f"\n{ABOVE_IDEAL_NOTE}" if column.str.endswith("*").any() else ""
