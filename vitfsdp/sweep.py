"""The multirun entry point: expand, validate, launch, watch.

    python -m vitfsdp.sweep -m strategy=FULL_SHARD,HYBRID_2GPU nodes=1,2,4,8

Hydra's sweeper expands the overrides into points; the ``vitfsdp`` launcher
(``hydra_plugins/vitfsdp_launcher``) hands them to :func:`launch`, which composes and
validates every point before the first one starts, then runs them one after another as
local torchrun processes (``cluster=local``), showing progress. Each point writes its records
into ``<sweep dir>/<num>_<overrides>/``; a point that dies without writing its own summary is
recorded as ``failed`` with the tail of its log, so no point is ever lost.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from vitfsdp.config import RunConfig, cli, register_configs, to_run_config
from vitfsdp.launch import local
from vitfsdp.records import SUMMARY_FILE, mark_failed, read_json

log = logging.getLogger("vitfsdp.sweep")

register_configs()


@dataclass
class Point:
    """One sweep point: its overrides, validated config and run directory."""

    num: int  # Hydra job number
    overrides: list[str]  # the point's Hydra overrides, as typed
    cfg: RunConfig
    run_dir: Path


def plan(hydra_context, config: DictConfig, job_overrides: Sequence[Sequence[str]],
         initial_job_idx: int) -> list[Point]:
    """Compose and validate every point before anything runs.

    Raises:
        ValueError: one or more points are invalid; the message has one line per refused
            point naming the field and the fix. No point has run and no run directory exists.
    """
    points, errors = [], []
    for i, overrides in enumerate(job_overrides):
        num = initial_job_idx + i
        try:
            points.append(_compose_point(hydra_context, config, list(overrides), num))
        except (ValueError, ConfigCompositionException, OmegaConfBaseException) as e:
            errors.append(f"point {num} ({' '.join(overrides)}): {_one_line(hydra_context, e)}")
    errors += _shared_run_dirs(points)
    if errors:
        raise ValueError(f"{len(errors)} of {len(job_overrides)} sweep points refused, "
                         "nothing was launched:\n" + "\n".join(errors))
    return points


def _shared_run_dirs(points: list[Point]) -> list[str]:
    first: dict[Path, Point] = {}
    errors = []
    for p in points:
        if p.run_dir in first:
            errors.append(f"points {first[p.run_dir].num} and {p.num} would both write into "
                          f"{p.run_dir}; make hydra.sweep.subdir tell them apart")
        first.setdefault(p.run_dir, p)
    return errors


def _compose_point(hydra_context, config: DictConfig, overrides: list[str], num: int) -> Point:
    sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
    HydraConfig.instance().set_config(sweep_config)
    run_dir = Path(sweep_config.hydra.sweep.dir) / str(sweep_config.hydra.sweep.subdir)
    cfg = to_run_config(sweep_config)
    _check_launchable(cfg)
    return Point(num, overrides, cfg, run_dir)


def _check_launchable(cfg: RunConfig) -> None:
    if cfg.cluster.launcher == "local" and cfg.world_size > cfg.cluster.max_local_procs:
        raise ValueError(
            f"nodes={cfg.nodes} × cluster.gpus_per_node={cfg.cluster.gpus_per_node} = "
            f"{cfg.world_size} local processes exceeds cluster.max_local_procs="
            f"{cfg.cluster.max_local_procs}; use fewer nodes or raise the limit"
        )


def _one_line(hydra_context, e: Exception) -> str:
    """Hydra's multi-line 'Could not find' becomes 'strategy=X is unknown; valid: ...'."""
    m = re.search(r"Could not find '([\w/]+)/([^']+)'", str(e))
    if m:
        group, name = m.groups()
        options = hydra_context.config_loader.get_group_options(group)
        return f"{group}={name} is unknown; valid: {', '.join(options)}"
    return " ".join(str(e).split())


def launch(hydra_context, config: DictConfig, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> list[JobReturn]:
    """Validate all points, then run them one after another; called by the Hydra launcher.

    Every point gets a JobReturn whose value is its summary (status and figures), failures
    included, so Hydra's sweeper never aborts the sweep on one point's failure.
    """
    points = plan(hydra_context, config, job_overrides, initial_job_idx)
    sweep_dir = Path(config.hydra.sweep.dir)
    log.info("sweep of %d points into %s", len(points), sweep_dir)
    returns = []
    for i, point in enumerate(points, start=1):
        summary = run_one(point, f"[{i}/{len(points)}]")
        returns.append(JobReturn(overrides=point.overrides, cfg=OmegaConf.create({}),
                                 hydra_cfg=config, working_dir=str(point.run_dir),
                                 _return_value=summary, status=JobStatus.COMPLETED))
    _report(points, [r.return_value for r in returns], sweep_dir)
    return returns


def run_one(point: Point, tag: str) -> dict:
    """Run one point with progress lines; return its summary (a failure recorded as data)."""
    log.info("%s %s  (%d ranks) -> %s", tag, " ".join(point.overrides) or "(defaults)",
             point.cfg.world_size, point.run_dir)
    steps = point.cfg.train.steps
    t0 = time.time()
    rc = local.run_point(
        point.overrides, point.run_dir, point.cfg.world_size,
        log_path=point.run_dir / local.LOG_FILE,
        on_window=lambda w: log.info("%s   step %d/%d  loss %.4f  %.1f images/s%s", tag,
                                     w["step_end"], steps, w["loss"], w["ips"],
                                     "  (warm-up)" if w.get("warmup") else ""),
    )
    summary = read_json(point.run_dir / SUMMARY_FILE)
    if summary is None:
        reason = f"exit code {rc} without a summary; log tail:\n" + local.tail(
            point.run_dir / local.LOG_FILE)
        mark_failed(point.run_dir, "failed", reason)
        summary = read_json(point.run_dir / SUMMARY_FILE)
    log.info("%s %s in %.0f s%s", tag, summary["status"], time.time() - t0, _figures(summary))
    return summary


def _figures(summary: dict) -> str:
    if summary["status"] != "completed":
        reason = (summary.get("reason") or "").splitlines()
        return f": {reason[0]}" if reason else ""
    mem = summary.get("peak_mem_allocated_gib") or summary.get("peak_rss_gib")
    return (f": {summary['ips']:.1f} images/s, {summary['step_time_s']:.3f} s/step, "
            f"peak memory {mem:.2f} GiB")


def _report(points: list[Point], summaries: list[dict], sweep_dir: Path) -> None:
    counts: dict[str, int] = {}
    for s in summaries:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    log.info("sweep done: %s", ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    log.info("figures and tables: python -m vitfsdp.analysis %s", sweep_dir)


@hydra.main(version_base=None, config_path="../conf", config_name="sweep")
def main(dcfg: DictConfig) -> None:
    """Reached only if Hydra runs the task in-process, which the vitfsdp launcher never does."""
    raise RuntimeError("vitfsdp.sweep runs points through the vitfsdp launcher only")


if __name__ == "__main__":
    cli(main)
