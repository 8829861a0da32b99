"""``python -m vitfsdp.plan --calibrate SWEEP_DIR...``: predicted against measured for every
completed run, and the efficiency (and bandwidth) that make the plan match a small sweep.

The fit is a least-squares fit of the relative step-time error over every completed run,
on a logarithmic grid (the step-time model has a ``max``, so it is not linear in its
unknowns): of ``cluster.plan_efficiency`` where the runs record a peak FLOP/s (GPUs), else
of ``cluster.peak_tflops`` at efficiency 1 (CPU ranks: the FLOP/s they reach); and of
``cluster.inter_node_gbps`` where the runs span more than one node count (else
``cluster.intra_node_gbps`` where they span more than one world size), the other link
staying at the profile's figure. It prints the overrides to plan with.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from vitfsdp.plan import GIB, predict
from vitfsdp.plan.timing import comm_volumes, compute_seconds

CALIBRATION_FILE = "calibration.csv"
_EFFICIENCY_GRID = np.geomspace(1e-3, 1.0, 400)
_TFLOPS_GRID = np.geomspace(1e-4, 1e4, 600)
_GBPS_GRID = np.geomspace(1e-3, 1e4, 500)


def _load(run_dir: Path):
    """(run.json, summary.json, RunConfig) of a completed run, or None."""
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


def _unit_comm(cfg, link: str) -> tuple[float, float]:
    """(overlapped, exposed) seconds of ``cfg``'s collectives on ``link`` (intra | inter)
    at 1 GB/s, the other link free."""
    fast = 1e30
    bw = {"intra_node_gbps": 1.0 if link == "intra" else fast,
          "inter_node_gbps": 1.0 if link == "inter" else fast}
    probe = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, **bw))
    num_params, num_units = _sizes(cfg)
    c = comm_volumes(probe, num_params, num_units)
    return c.overlapped_s or 0.0, c.exposed_s or 0.0


def _sizes(cfg) -> tuple[int, int]:
    from vitfsdp.plan.memory import model_sizes

    s = model_sizes(cfg.model, cfg.num_classes)
    return s.num_params, s.num_units


def calibration_table(sweep_dirs: list[Path]) -> pd.DataFrame:
    """One row per completed run below ``sweep_dirs``: measured and predicted memory and step
    time, their relative errors, and the terms the fit needs."""
    from vitfsdp.analysis.collect import find_run_dirs
    from vitfsdp.plan import _flops_per_image

    rows = []
    for run_dir in (d for s in sweep_dirs for d in find_run_dirs(s)):
        loaded = _load(run_dir)
        if loaded is None:
            continue
        run, summary, cfg = loaded
        dev = run.get("device") or {}
        kind = {"cuda": "gpu", "cpu": "cpu"}.get(dev.get("type"))
        p = predict(cfg, peak_flops=dev.get("peak_flops"),
                    device_memory_gib=dev.get("memory_gib"), device=kind)
        peak = cfg.cluster.peak_tflops * 1e12 if cfg.cluster.peak_tflops else dev.get("peak_flops")
        measured_mem = summary.get(p.pred_mem_metric)
        (oi, ei), (oe, ee) = _unit_comm(cfg, "intra"), _unit_comm(cfg, "inter")
        rows.append({
            "run_dir": str(run_dir), "model": cfg.model.name, "strategy": cfg.strategy.name,
            "nodes": cfg.nodes, "world_size": cfg.world_size, "device": p.device,
            "mem_metric": p.pred_mem_metric, "measured_mem_gib": measured_mem,
            "pred_mem_gib": p.peak_mem_gib,
            "mem_rel_error": (p.peak_mem_gib / measured_mem - 1) if measured_mem else None,
            "measured_step_time_s": summary.get("step_time_s"),
            "pred_step_time_s": p.step_time_s,
            "step_rel_error": (p.step_time_s / summary["step_time_s"] - 1)
            if p.step_time_s and summary.get("step_time_s") else None,
            "peak_flops": peak,
            "compute_s_at_1tflops": compute_seconds(_flops_per_image(cfg),
                                                    cfg.train.local_batch_size, 1e12, 1.0),
            "intra_overlapped_s_at_1gbps": oi, "intra_exposed_s_at_1gbps": ei,
            "inter_overlapped_s_at_1gbps": oe, "inter_exposed_s_at_1gbps": ee,
            "intra_node_gbps": cfg.cluster.intra_node_gbps,
            "inter_node_gbps": cfg.cluster.inter_node_gbps,
        })
    return pd.DataFrame(rows)


def fit(df: pd.DataFrame) -> dict[str, float]:
    """Least-squares fit of the relative step-time error on a log grid; returns the fitted
    cluster keys (``plan_efficiency`` or ``peak_tflops``, and a bandwidth where the runs
    vary it) and ``rms_rel_error`` at the fit.

    Raises:
        ValueError: no run has a measured step time.
    """
    df = df[df["measured_step_time_s"].notna()]
    if df.empty:
        raise ValueError("no completed run with a step time to calibrate against")
    t = df["measured_step_time_s"].to_numpy(float)
    gpu_peak = df["peak_flops"].notna().all()
    # compute seconds at efficiency 1 of the recorded peak, or at 1 TFLOP/s achieved
    c = df["compute_s_at_1tflops"].to_numpy(float)
    c = c * 1e12 / df["peak_flops"].to_numpy(float) if gpu_peak else c
    xs = _EFFICIENCY_GRID if gpu_peak else _TFLOPS_GRID
    link = ("inter" if df["nodes"].nunique() > 1 else
            "intra" if df["world_size"].nunique() > 1 else None)
    fixed = {}
    for name in ("intra", "inter"):
        gbps = df[f"{name}_node_gbps"].to_numpy(float)
        gbps = np.where(np.isnan(gbps), np.inf, gbps)  # unknown: not modelled
        fixed[name] = (df[f"{name}_overlapped_s_at_1gbps"].to_numpy(float) / gbps,
                       df[f"{name}_exposed_s_at_1gbps"].to_numpy(float) / gbps)
    ys = _GBPS_GRID if link else np.array([np.nan])
    best = (np.inf, None, None)
    for y in ys:
        over, exp = np.zeros_like(t), np.zeros_like(t)
        for name in ("intra", "inter"):
            if name == link:
                over = over + df[f"{name}_overlapped_s_at_1gbps"].to_numpy(float) / y
                exp = exp + df[f"{name}_exposed_s_at_1gbps"].to_numpy(float) / y
            else:
                over, exp = over + fixed[name][0], exp + fixed[name][1]
        pred = np.maximum(c[None, :] / xs[:, None], over[None, :]) + exp[None, :]
        err = ((pred / t[None, :] - 1) ** 2).mean(axis=1)
        i = int(np.argmin(err))
        if err[i] < best[0]:
            best = (err[i], xs[i], y)
    out = {"plan_efficiency" if gpu_peak else "peak_tflops": float(best[1])}
    if not gpu_peak:
        out["plan_efficiency"] = 1.0
    if link:
        out[f"{link}_node_gbps"] = float(best[2])
    out["rms_rel_error"] = float(np.sqrt(best[0]))
    return out


def calibrate(sweep_dirs: list[Path], overrides: list[str] | None = None) -> str:
    """The calibration report; writes ``calibration.csv`` into the first sweep directory.

    Raises:
        ValueError: a directory holds no run, or no run completed.
    """
    df = calibration_table([Path(d) for d in sweep_dirs])
    if df.empty:
        raise ValueError(f"no completed run below {', '.join(map(str, sweep_dirs))}")
    fitted = fit(df)
    df.to_csv(Path(sweep_dirs[0]) / CALIBRATION_FILE, index=False)
    cols = ["model", "strategy", "nodes", "mem_metric", "measured_mem_gib", "pred_mem_gib",
            "mem_rel_error", "measured_step_time_s", "pred_step_time_s", "step_rel_error"]
    table = df[cols].to_string(index=False, float_format=lambda x: f"{x:.3g}", na_rep="-")
    mem = df["mem_rel_error"].dropna().abs()
    keys = {k: v for k, v in fitted.items() if k != "rms_rel_error"}
    line = " ".join(f"cluster.{k}={v:.3g}" for k, v in keys.items())
    return (f"{table}\n{len(df)} completed run(s); memory: median |error| "
            f"{mem.median():.1%}, max {mem.max():.1%}\n"
            f"fit (step time, rms relative error {fitted['rms_rel_error']:.1%}): {line}\n"
            f"wrote {Path(sweep_dirs[0]) / CALIBRATION_FILE}")


__all__ = ["CALIBRATION_FILE", "GIB", "calibrate", "calibration_table", "fit"]
