"""``python -m vitfsdp.plan --calibrate SWEEP_DIR...``: predicted against measured for every
completed run, the device figures that make the plan match a few runs, and how well they
transfer to runs the fit did not see.

One calibration table (:func:`compare`; ``calibration.csv``), written by this command and by
``python -m vitfsdp.analysis``: per run, the measured and predicted memory (the column the plan
names: ``peak_mem_reserved_gib`` on a GPU, ``peak_rss_gib`` on CPU), step time and ips, and
each relative error ``(predicted - measured) / measured``.

The fit (:func:`fit`) minimizes the mean squared log ratio of predicted to measured step time
over the runs, coordinate by coordinate on logarithmic grids (the step time has ``max`` terms,
so it is not linear in its unknowns): the compute figure (``cluster.plan_efficiency``
where the runs record a peak FLOP/s, i.e. GPUs; else the peak of the runs' compute dtype
(``cluster.peak_tflops``, ``_tf32`` or ``_fp32``) at efficiency 1,
the FLOP/s CPU ranks reach), and the link the runs vary: across node counts
``cluster.inter_node_gbps`` and ``cluster.inter_node_latency_us`` (what decides a flat
FULL_SHARD at scale), else ``cluster.intra_node_gbps`` across world sizes.
:func:`leave_one_out` refits without each run in turn and predicts it: the error on a run
the fit did not see.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from vitfsdp.plan import GIB, JAX_GPU_MEM_METRIC, mem_metric, peak_flops_for, predict
from vitfsdp.plan.memory import CPU_BASELINE_GIB
from vitfsdp.plan.probed import PROBE_FILE, load_probe
from vitfsdp.plan.recorded import find_run_dirs

log = logging.getLogger(__name__)

CALIBRATION_FILE = "calibration.csv"
#: The calibration table's columns after the caller's key columns (:func:`compare`).
CALIBRATION_COLUMNS = [
    "mem_metric", "measured_mem_gib", "pred_peak_mem_gib", "mem_rel_error",
    "mem_above_baseline_rel_error", "step_time_s",
    "pred_step_time_s", "step_time_rel_error", "ips", "pred_ips", "ips_rel_error", "run_dir",
]  # fmt: skip
#: Grids of the fitted cluster keys (log-spaced).
GRIDS = {
    "plan_efficiency": np.geomspace(0.01, 1.0, 120),
    "peak_tflops": np.geomspace(1e-4, 1e4, 240),
    "peak_tflops_tf32": np.geomspace(1e-4, 1e4, 240),
    "peak_tflops_fp32": np.geomspace(1e-4, 1e4, 240),
    "intra_node_gbps": np.geomspace(1e-3, 1e4, 150),
    "inter_node_gbps": np.geomspace(1e-3, 1e4, 150),
    "inter_node_latency_us": np.geomspace(0.1, 1e4, 100),
}
ROUNDS = 3  # coordinate-descent passes
#: The predicted step's terms (seconds; :class:`vitfsdp.plan.Prediction`), which sum to it:
#: matmuls, the other ops of forward and backward, the optimizer, exposed communication,
#: the loop's and wrapper's own time (from a probe).
TERMS = ("gemm_s", "other_s", "optimizer_s", "exposed_comm_s", "framework_s")


def compare(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """The calibration table of ``runs`` (one row per run with measured columns and the
    plan's ``pred_peak_mem_gib``, ``pred_step_time_s``, ``pred_ips``, ``pred_mem_metric``).

    Args:
        runs: the runs; ``run_dir`` and the measured columns may be missing (then NaN).
        keys: columns of ``runs`` that lead the table (model, strategy, nodes ...).

    Returns:
        ``keys`` then :data:`CALIBRATION_COLUMNS`; relative error = (predicted - measured)
        / measured, > 0 where the plan over-predicts. ``mem_above_baseline_rel_error``: on
        CPU ranks (``mem_metric`` ``peak_rss_gib``) the same error over what the rank holds
        above the process baseline the plan adds to every rank
        (:data:`~vitfsdp.plan.memory.CPU_BASELINE_GIB`: the interpreter and libraries,
        assumed, not predicted), (predicted - measured) / (measured - baseline); NaN on a GPU
        and where the measured peak is not above the baseline. A CPU rank's RSS is mostly
        that baseline, so the plain error there measures the constant: FULL_SHARD of
        ``experiment=ornl_frontier_memory_cpu`` at 2 nodes (a run of 2026-11-29), 0.895 GiB
        predicted against 0.854 measured, is +5% of the peak but +76% of the 0.054 GiB
        above the baseline.
    """
    if runs.empty:
        return pd.DataFrame(columns=[*keys, *CALIBRATION_COLUMNS])
    metric = runs["pred_mem_metric"].where(runs["pred_mem_metric"].isin(runs.columns))
    if {"framework", "device_type"} <= set(runs.columns):  # records of the older rule
        jax_gpu = ((runs["framework"] == "jax")
                   & runs["device_type"].map(lambda t: mem_metric(t, "jax") == JAX_GPU_MEM_METRIC))
        metric = metric.where(~jax_gpu | metric.isna(), JAX_GPU_MEM_METRIC)
    measured = pd.Series(np.nan, runs.index, dtype="float64")
    for name in metric.dropna().unique():  # one column per metric, not one row at a time
        rows = metric == name
        measured[rows] = pd.to_numeric(runs.loc[rows, name], errors="coerce")
    table = runs.assign(mem_metric=metric, measured_mem_gib=measured)
    for col in CALIBRATION_COLUMNS:
        if col not in table:
            table[col] = np.nan
    for pred, meas, err in (("pred_peak_mem_gib", "measured_mem_gib", "mem_rel_error"),
                            ("pred_step_time_s", "step_time_s", "step_time_rel_error"),
                            ("pred_ips", "ips", "ips_rel_error")):
        p, m = (pd.to_numeric(table[c], errors="coerce") for c in (pred, meas))
        table[err] = (p - m) / m
    p, m = (pd.to_numeric(table[c], errors="coerce")
            for c in ("pred_peak_mem_gib", "measured_mem_gib"))
    above = (m - CPU_BASELINE_GIB).where((table["mem_metric"] == "peak_rss_gib")
                                         & (m > CPU_BASELINE_GIB))
    table["mem_above_baseline_rel_error"] = (p - m) / above
    return table[[*keys, *CALIBRATION_COLUMNS]].reset_index(drop=True)


def _load(run_dir: Path):
    """(run.json, summary.json, RunConfig) of a completed run, or None."""
    # the config (Hydra) on use: `python -m vitfsdp.plan --help` starts without it
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from vitfsdp.config import to_run_config
    from vitfsdp.records import read_json

    run, summary = read_json(run_dir / "run.json"), read_json(run_dir / "summary.json")
    if not run or not summary or summary.get("status") != "completed":
        return None
    config = dict(run["config"])
    config["cluster"] = dict(config.get("cluster") or {}, required=[])
    try:
        return run, summary, to_run_config(OmegaConf.create(config))
    except (KeyError, TypeError, ValueError, OmegaConfBaseException):
        return None


@dataclasses.dataclass(frozen=True)
class Measured:
    """One completed run: its config, its recorded device and its measured step time."""

    cfg: object  # vitfsdp.config.RunConfig
    device: dict  # run.json ``device``: type, peak_flops, memory_gib
    step_time_s: float


def _predict(m: Measured, probe=None, **cluster) -> object:
    """:func:`vitfsdp.plan.predict` of ``m`` with ``cluster`` keys replaced (from ``probe``,
    a :class:`vitfsdp.plan.probed.Probe`, where one is given)."""
    cfg = m.cfg
    if cluster:
        cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, **cluster))
    kind = {"cuda": "gpu", "cpu": "cpu"}.get(m.device.get("type"))
    return predict(cfg, peak_flops=m.device.get("peak_flops"),
                   device_memory_gib=m.device.get("memory_gib"), device=kind, probe=probe)


def read_runs(sweep_dirs: Sequence[Path], probe=None) -> tuple[pd.DataFrame, list[Measured]]:
    """Every completed run below ``sweep_dirs``: the rows :func:`compare` takes, and what
    :func:`fit` needs (same order); predicted from ``probe`` where one is given."""
    rows, measured = [], []
    for run_dir in (d for s in sweep_dirs for d in find_run_dirs(Path(s))):
        loaded = _load(run_dir)
        if loaded is None:
            continue
        run, summary, cfg = loaded
        m = Measured(cfg, run.get("device") or {}, summary.get("step_time_s") or math.nan)
        p = _predict(m, probe)
        rows.append({"pred_notes": p.notes, "model": cfg.model.name,
                     "strategy": cfg.strategy.name,
                     "nodes": cfg.nodes, "world_size": cfg.world_size,
                     "activation_checkpointing": cfg.train.activation_checkpointing,
                     **{f"pred_{t}": getattr(p, t) for t in TERMS},
                     "framework": cfg.framework, "device": p.device, "run_dir": str(run_dir),
                     **{k: v for k, v in summary.items() if not isinstance(v, dict | list)},
                     "pred_peak_mem_gib": p.peak_mem_gib, "pred_step_time_s": p.step_time_s,
                     "pred_ips": p.ips, "pred_mem_metric": p.pred_mem_metric})
        measured.append(m)
    return pd.DataFrame(rows), measured


def calibration_table(sweep_dirs: Sequence[Path]) -> pd.DataFrame:
    """The calibration table (:func:`compare`) of every completed run below ``sweep_dirs``."""
    df, _ = read_runs(sweep_dirs)
    return compare(df, ["model", "strategy", "nodes", "world_size", "framework", "device"])


def _peak_key(m: Measured) -> str:
    """The profile key of the peak the plan uses for ``m``'s compute dtype
    (:func:`vitfsdp.plan.peak_flops_for`): ``peak_tflops``, ``peak_tflops_tf32`` or
    ``peak_tflops_fp32``."""
    _, kind = peak_flops_for(m.cfg, {"cuda": "gpu"}.get(m.device.get("type"), "cpu"))
    return "peak_tflops" if kind == "bf16" else f"peak_tflops_{kind}"


def _keys(runs: list[Measured]) -> list[str]:
    """The cluster keys :func:`fit` fits for ``runs`` (module docstring)."""
    gpu = all(m.device.get("peak_flops") or m.cfg.cluster.peak_tflops for m in runs)
    keys = ["plan_efficiency" if gpu else _peak_key(runs[0])]
    if len({m.cfg.nodes for m in runs}) > 1:
        keys += ["inter_node_gbps", "inter_node_latency_us"]
    elif len({m.cfg.world_size for m in runs}) > 1:
        keys.append("intra_node_gbps")
    return keys


#: Every ``COARSE``-th grid value is tried first, then every value within ``COARSE`` steps
#: of the best of those: the full grid's argmin where the loss has one minimum along the
#: key, at a sixth of the predictions.
COARSE = 6
#: Up to this many runs, each run is held out alone (:func:`leave_one_out`); beyond it, in
#: :data:`FOLDS` folds (k-fold cross-validation), so that the check costs FOLDS fits, not
#: one per run (36 runs took 6 minutes one at a time).
MAX_LEAVE_ONE_OUT = 20
FOLDS = 10


def _groups(runs: list[Measured]) -> list[tuple[Measured, np.ndarray]]:
    """The runs by what the plan predicts them from (config but its ``repeat`` label, and
    the recorded device): one run of each, with the log step times of them all."""
    groups: dict[str, tuple[Measured, list[float]]] = {}
    for m in runs:
        key = repr((dataclasses.replace(m.cfg, repeat=0), sorted(m.device.items())))
        groups.setdefault(key, (m, []))[1].append(math.log(m.step_time_s))
    return [(m, np.asarray(logs)) for m, logs in groups.values()]


def _loss(groups: list[tuple[Measured, np.ndarray]], values: dict[str, float]) -> float:
    """Mean squared log(predicted / measured step time) over the runs (one prediction per
    group of :func:`_groups`)."""
    total = sum(float(np.sum(np.square(math.log(_predict(m, **values).step_time_s) - logs)))
                for m, logs in groups)
    return total / sum(len(logs) for _, logs in groups)


def _argmin(grid: np.ndarray, loss) -> float:
    """The grid value of least ``loss``: coarse, then around the best (:data:`COARSE`)."""
    coarse = range(0, len(grid), COARSE)
    best = min(coarse, key=lambda i: loss(float(grid[i])))
    near = range(max(0, best - COARSE + 1), min(len(grid), best + COARSE))
    return float(grid[min(near, key=lambda i: loss(float(grid[i])))])


def fit(runs: list[Measured]) -> dict[str, float]:
    """The cluster keys that best predict ``runs``' step times, and ``rms_rel_error``.

    Raises:
        ValueError: no run has a measured step time.
    """
    runs = [m for m in runs if m.step_time_s > 0]
    if not runs:
        raise ValueError("no completed run with a step time to calibrate against")
    keys, groups = _keys(runs), _groups(runs)
    values = {k: float(GRIDS[k][len(GRIDS[k]) // 2]) for k in keys}
    if any(k.startswith("peak_tflops") for k in values):
        values["plan_efficiency"] = 1.0
    for _ in range(ROUNDS):
        for key in keys:
            values[key] = _argmin(GRIDS[key], lambda x, k=key: _loss(groups, values | {k: x}))
    errors = [_predict(m, **values).step_time_s / m.step_time_s - 1 for m in runs]
    return values | {"rms_rel_error": float(np.sqrt(np.mean(np.square(errors))))}


def held_out_folds(n: int) -> list[list[int]]:
    """The runs' indices held out together: each alone up to :data:`MAX_LEAVE_ONE_OUT` runs,
    else :data:`FOLDS` folds, run i in fold i mod FOLDS."""
    if n <= MAX_LEAVE_ONE_OUT:
        return [[i] for i in range(n)]
    return [list(range(f, n, FOLDS)) for f in range(FOLDS)]


def leave_one_out(runs: list[Measured]) -> list[float]:
    """For each run, the relative step-time error of a fit to the runs not held out with it
    (:func:`held_out_folds`: alone, or in one of :data:`FOLDS` folds beyond
    :data:`MAX_LEAVE_ONE_OUT` runs); NaN where fewer than two runs remain."""
    runs = [m for m in runs if m.step_time_s > 0]
    errors = [math.nan] * len(runs)
    folds = held_out_folds(len(runs))
    for n, fold in enumerate(folds, 1):
        held = set(fold)
        rest = [m for j, m in enumerate(runs) if j not in held]
        if len(rest) < 2:
            continue
        if len(folds) > 1:
            log.info("held-out fit %d of %d (%d runs held out)", n, len(folds), len(fold))
        values = {k: v for k, v in fit(rest).items() if k != "rms_rel_error"}
        for i in fold:
            errors[i] = _predict(runs[i], **values).step_time_s / runs[i].step_time_s - 1
    return errors


def term_scales(df: pd.DataFrame) -> dict[str, float]:
    """Which predicted term is off, and by how much: per term the factor ``x`` of its
    group in :func:`term_groups` (1 = the term is right; 1.3 = the runs behave as if that
    term were 30% longer); ``nan`` for a term that cannot be told apart (hardly varies, or
    too few runs). Terms of one group share their factor.

    Args:
        df: :func:`read_runs`' rows (``step_time_s`` and ``pred_<term>`` columns).
    """
    out = dict.fromkeys(TERMS, math.nan)
    for terms, x in term_groups(df):
        out.update(dict.fromkeys(terms, x))
    return out


#: Standard error of a term's factor (:func:`term_errors`) above which the report says the
#: runs do not pin the term, rather than how far its prediction is off.
UNPINNED_SE = 0.25
#: Uncentred R² above which a term's column (predicted seconds / measured step, per run) is
#: taken as a combination of the others': the runs cannot tell it apart from them.
COLLINEAR_R2 = 0.999


def term_groups(df: pd.DataFrame) -> list[tuple[tuple[str, ...], float]]:
    """The non-negative factors ``x_g`` that make ``sum_g x_g · pred_g`` best match the
    measured step times (least squares relative to each run's step: ``scipy.optimize.nnls``
    on rows divided by the measured step), where a group ``g`` is one term, or the terms
    that move alike across the runs, summed. A diagnosis, not a fit the plan uses.

    Terms move alike when one's column is (nearly, :data:`COLLINEAR_R2`) a combination of
    the others': in a weak-scaling sweep of one model every rank computes the same, so the
    GEMM and the other compute terms are constant seconds at every node count, and least
    squares could give either any share (one printed ``gemm x0.00`` beside a large factor
    for the other). Such terms are fitted as their sum and share its factor. A term that
    hardly varies across runs relative to its step (all zero, say) is left out.

    Returns:
        ``[(terms, x), ...]`` in :data:`TERMS` order of each group's first term; ``[]`` with
        fewer runs than terms.
    """
    return [(terms, x) for terms, x, _ in _group_fit(df)]


def term_errors(df: pd.DataFrame) -> dict[tuple[str, ...], float]:
    """The standard error of each group's factor in :func:`term_groups`, as ordinary least
    squares gives it for the same columns (``sqrt(diag(σ² (AᵀA)⁻¹))``, ``σ²`` the residual
    variance of the non-negative fit over ``runs - groups`` degrees of freedom); ``nan`` with
    no degree of freedom left. A factor whose error is large is one these runs cannot pin:
    e.g. nine weak-scaling runs of one model, where the compute terms hardly move."""
    return {terms: se for terms, _, se in _group_fit(df)}


def _group_fit(df: pd.DataFrame) -> list[tuple[tuple[str, ...], float, float]]:
    """:func:`term_groups` with each factor's standard error (:func:`term_errors`)."""
    from scipy.optimize import nnls  # on use: `plan --help` starts without scipy

    cols = [f"pred_{t}" for t in TERMS]
    data = df[["step_time_s", *cols]].apply(pd.to_numeric, errors="coerce").dropna()
    data = data[data["step_time_s"] > 0]
    if len(data) < len(TERMS):
        return []
    a = data[cols].to_numpy() / data[["step_time_s"]].to_numpy()
    kept = [i for i in range(len(TERMS)) if a[:, i].std() > 1e-3]  # vary enough to be seen
    groups = _alike(a, kept)
    sums = np.column_stack([a[:, g].sum(axis=1) for g in groups])
    x, residual_norm = nnls(sums, np.ones(len(data)))
    free = len(data) - len(groups)
    if free > 0:
        cov = residual_norm ** 2 / free * np.linalg.pinv(sums.T @ sums)
        se = np.sqrt(np.clip(np.diag(cov), 0, None))
    else:
        se = np.full(len(groups), math.nan)
    return [(tuple(TERMS[i] for i in g), float(v), float(e))
            for g, v, e in zip(groups, x, se, strict=True)]


def _alike(a: np.ndarray, kept: list[int]) -> list[list[int]]:
    """``kept`` columns of ``a`` split into groups: each column that the other kept columns
    explain (uncentred R² > :data:`COLLINEAR_R2`, no intercept, as the fit has none) joins
    one group; the rest stand alone. Groups in order of their first column."""
    alike = []
    for i in kept:
        others = a[:, [j for j in kept if j != i]]
        if others.shape[1] == 0:
            continue
        coef, *_ = np.linalg.lstsq(others, a[:, i], rcond=None)
        residual = a[:, i] - others @ coef
        if 1 - residual @ residual / (a[:, i] @ a[:, i]) > COLLINEAR_R2:
            alike.append(i)
    groups = [[i] for i in kept if i not in alike]
    if alike:
        groups.append(alike)
    return sorted(groups, key=lambda g: g[0])


def _terms_table(df: pd.DataFrame, table: pd.DataFrame) -> str:
    """Per run: the point, the predicted terms (seconds), predicted and measured step, error."""
    shown = pd.DataFrame({
        "model": df["model"], "strategy": df["strategy"], "nodes": df["nodes"],
        "ckpt": df["activation_checkpointing"].map({True: "yes", False: "no"}),
        **{t[:-2].replace("exposed_comm", "comm").replace("optimizer", "optim"):
           pd.to_numeric(df[f"pred_{t}"], errors="coerce") for t in TERMS},
        "pred s": table["pred_step_time_s"], "measured s": table["step_time_s"],
        "error": table["step_time_rel_error"].map(lambda e: f"{e:+.0%}" if pd.notna(e) else "-"),
    })
    return shown.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-")


def _probe_report(df: pd.DataFrame, table: pd.DataFrame, probe) -> str:
    """Prediction from a probe against the records: the errors, and per term its share of
    the predicted step and the factor the runs suggest (:func:`term_scales`)."""
    err = table["step_time_rel_error"].dropna().abs()
    fitted = _group_fit(df)  # once: term_scales and term_errors would each fit again
    groups = {t: terms for terms, _, _ in fitted for t in terms}
    errors = {t: se for terms, _, se in fitted for t in terms}
    scales = dict.fromkeys(TERMS, math.nan) | {t: x for terms, x, _ in fitted for t in terms}
    steps = pd.to_numeric(df["pred_step_time_s"], errors="coerce")
    parts = []
    for t in TERMS:
        share = (pd.to_numeric(df[f"pred_{t}"], errors="coerce") / steps).median()
        x = scales[t]
        together = [g[:-2] for g in groups.get(t, ()) if g != t]
        with_ = (f" (with {', '.join(together)}: they move alike across these runs)"
                 if together else "")
        if not (pd.to_numeric(df[f"pred_{t}"], errors="coerce").fillna(0) > 0).any():
            verdict = "not measured (0 in every prediction: the probe has no figure for it)"
        elif math.isnan(x):
            verdict = "not separable (hardly varies across the runs)"
        elif errors.get(t, 0) > UNPINNED_SE or x < 0.005:  # a factor of 0 measures nothing
            shown = "x0 (the other terms leave it no time)" if x < 0.005 else f"x{x:.2f}"
            verdict = (f"{shown} ± {errors.get(t, math.nan):.2f}: these runs do not pin it "
                       f"(the other terms can take its share){with_}")
        elif abs(1 - x) <= 0.1:
            verdict = f"x{x:.2f}: right within 10%{with_}"
        else:
            verdict = (f"x{x:.2f}: predicted {abs(1 - x):.0%} {'short' if x > 1 else 'long'}"
                       f"{with_}")
        parts.append(f"  {t[:-2]:<12} median share {share:.0%} of the step: {verdict}")
    seen = sorted({n for text in df.get("pred_notes", []) if text for n in text.split("; ")})
    notes = "".join(f"\nnote: {n}" for n in seen)
    return (f"step time from the probe {probe.path}: median |error| {err.median():.1%}, max "
            f"{err.max():.1%} over {len(err)} run(s) (nothing fitted)\nterms (which is off, "
            "from all runs together):\n" + "\n".join(parts) + notes)


def _csv_table(df: pd.DataFrame, table: pd.DataFrame, sweep_dir: Path) -> pd.DataFrame:
    """``calibration.csv``: the table with activation checkpointing and the predicted terms
    (seconds) beside it, and run directories relative to ``sweep_dir`` where they are below
    it (the file can be published without the machine's paths)."""
    out = table.copy()
    out.insert(4, "activation_checkpointing", df["activation_checkpointing"].to_numpy())
    at = list(out.columns).index(CALIBRATION_COLUMNS[0])  # the calibration columns stay last
    for i, t in enumerate(TERMS):
        out.insert(at + i, f"pred_{t}",
                   pd.to_numeric(df[f"pred_{t}"], errors="coerce").to_numpy())
    root = sweep_dir.resolve()

    def rel(d: str) -> str:
        try:
            return str(Path(d).resolve().relative_to(root))
        except ValueError:
            return d
    out["run_dir"] = out["run_dir"].map(rel)
    return out


def calibrate(sweep_dirs: list[Path], overrides: list[str] | None = None,
              probe_path: Path | None = None) -> str:
    """The calibration report; writes ``calibration.csv`` into the first sweep directory.

    With a probe (``probe_path``, else the first directory's ``probe.json`` where there is
    one) every run is predicted from the probe alone and the report says which term of the
    step is off (:func:`term_scales`); without, the profile's figures are fitted
    (:func:`fit`) and checked on held-out runs (:func:`leave_one_out`).

    Raises:
        ValueError: a directory holds no run, or no run completed; the probe is unreadable.
    """

    dirs = [Path(d) for d in sweep_dirs]
    if probe_path is None and (dirs[0] / PROBE_FILE).exists():
        probe_path = dirs[0] / PROBE_FILE
    probe = load_probe(probe_path) if probe_path else None
    df, runs = read_runs(dirs, probe)
    if df.empty:
        raise ValueError(f"no completed run below {', '.join(map(str, sweep_dirs))}")
    table = compare(df, ["model", "strategy", "nodes", "world_size", "framework", "device"])
    _csv_table(df, table, dirs[0]).to_csv(dirs[0] / CALIBRATION_FILE, index=False)
    cols = ["model", "strategy", "nodes", "measured_mem_gib", "pred_peak_mem_gib",
            "mem_rel_error", "step_time_s", "pred_step_time_s", "step_time_rel_error"]
    text = table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-")
    mem = table["mem_rel_error"].dropna().abs()
    counts = (f"{len(table)} completed run(s); memory: median |error| {mem.median():.1%}, "
              f"max {mem.max():.1%}\n")
    head = f"{text}\n{counts}"
    if probe is not None:
        return (f"{_terms_table(df, table)}\n{counts}{_probe_report(df, table, probe)}"
                f"\nwrote {dirs[0] / CALIBRATION_FILE}")
    log.info("fitting the profile's figures to %d run(s)", len(runs))
    fitted = fit(runs)
    loo = np.abs([e for e in leave_one_out(runs) if not math.isnan(e)])
    line = " ".join(f"cluster.{k}={v:.3g}" for k, v in fitted.items() if k != "rms_rel_error")
    how = ("leave-one-out" if len(runs) <= MAX_LEAVE_ONE_OUT
           else f"held out in {FOLDS} folds")
    held = (f"{how} step time: median |error| {np.median(loo):.1%}, max "
            f"{np.max(loo):.1%} over {len(loo)} run(s)" if len(loo) else
            "leave-one-out: needs 3 runs or more")
    return (head + f"fit (step time, rms relative error {fitted['rms_rel_error']:.1%}): {line}\n"
            f"{held}\nwrote {dirs[0] / CALIBRATION_FILE}")


__all__ = ["CALIBRATION_COLUMNS", "CALIBRATION_FILE", "GIB", "TERMS", "calibrate",
           "calibration_table", "compare", "fit", "held_out_folds", "leave_one_out",
           "read_runs", "term_errors",
           "term_groups", "term_scales"]
