"""One run directory's records as a row of ``runs.csv`` (:func:`run_row`; the columns:
:mod:`vitfsdp.analysis.schema`), with the plan's prediction for it, and the runs' loss
curves (:func:`loss_curves`).

An unreadable record gives a ``failed`` row with the reason, never an exception, so one
broken run cannot hide the others.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import statistics
import typing
from pathlib import Path
from typing import Any

import pandas as pd

from vitfsdp.analysis.schema import PRED_COLUMNS
from vitfsdp.core.confighash import point_id
from vitfsdp.core.layout import HOST_FILE, NETWORK_FILE
from vitfsdp.core.throughput import window_other_cpus
from vitfsdp.models import VARIANTS
from vitfsdp.plan import mem_metric, predict_recorded, predict_run, xla_pool_fraction
from vitfsdp.records import (
    METRICS_FILE,
    RUN_FILE,
    RUNNING,
    STATUSES,
    SUMMARY_FILE,
    read_json,
    read_jsonl,
    reason_line,
    summarize_windows,
)

log = logging.getLogger(__name__)


#: Predictions by point (model, strategy, nodes: :func:`_point_key`), each a list of
#: ``(config without repeat, device, prediction)`` looked up by equality: a study repeats its
#: points, and each prediction rebuilds the config and the model's sizes.
_PREDICTIONS: dict[tuple, list[tuple[dict, dict, dict | None]]] = {}
#: Cluster profiles whose nodes are processes of one machine: every rank shares its cores.
SHARED_HOST_PROFILES = ("local", "virtual")
#: Where a run's output lies, in order of preference: the local launcher's log, then the
#: Slurm tasks' logs (``logs/task<rank>.log``).
LOG_FILES = ("train.log", "logs")
#: Loss per window (``(step_end, loss)``) of the runs the last
#: :func:`~vitfsdp.analysis.collect.collect_runs` read, by
#: run directory, so :func:`loss_curves` need not read metrics.jsonl again.
_LOSS_CURVES: dict[str, list[tuple[int, float]]] = {}


#: The model state a rank holds, in GiB, by summary.json ``model_state_bytes`` field: the
#: maximum over ranks (``model_state_bytes_max``) where recorded, else the one process's
#: (the JAX trainer's); ``NaN`` in older records and where a field is null (JAX's grads).
STATE_COLUMNS = {"state_params_gib": "params", "state_grads_gib": "grads",
                 "state_optimizer_gib": "optimizer"}
#: What the nodes sent over their emulated link (the point's ``network.json``, written by
#: the local launcher): the most any node sent and all nodes together, in GB (10^9 bytes);
#: ``NaN`` where the network was not emulated.
NETWORK_COLUMNS = ("sent_gb_per_node_max", "sent_gb_total")


#: Figures copied as they are from ``summary.json`` (absent in older records: ``NaN``).
SUMMARY_FIGURES = (
    "ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "hw_tflops_per_gpu", "hfu",
    "peak_mem_reserved_gib", "peak_mem_reserved_min_gib", "peak_rss_gib",
    "device_mem_used_gib", "device_mem_used_min_gib", "alloc_retries", "num_ooms",
    "device_busy_frac", "device_busy_min_frac",
    "ips_spread", "ips_min", "ips_max", "step_time_s_min", "step_time_s_max",
    "loss", "elapsed_s", "compile_s", "startup_s",
)  # fmt: skip
#: Window statistics over measured windows, computed from ``metrics.jsonl``
#: (:func:`vitfsdp.records.summarize_windows`) when the summary of a completed run lacks them
#: (records older than these fields).
WINDOW_RANGES = ("ips_min", "ips_max", "step_time_s_min", "step_time_s_max")
#: Config keys (as dotted paths into run.json's ``config``) recorded as columns of that name.
CONFIG_KEYS = (
    "train.activation_checkpointing", "train.steps", "train.seed", "train.warmup_steps",
    "train.log_every",
    "kernels.fused_attn", "kernels.compile", "kernels.adamw",
    "kernels.float32_matmul_precision", "kernels.cudnn_allow_tf32",
    "mixed_precision.param_dtype", "mixed_precision.reduce_dtype",
    "mixed_precision.buffer_dtype", "strategy.use_orig_params", "strategy.blocks_per_unit",
)  # fmt: skip
_CONFIG_PATHS = tuple((key, tuple(key.split("."))) for key in CONFIG_KEYS)


def run_row(run_dir: str | os.PathLike, probe: str | None = None) -> dict[str, Any]:
    """The flat row of one run directory (the columns of :data:`~vitfsdp.analysis.schema.COLUMNS`).

    Reads ``run.json``, ``summary.json`` and ``metrics.jsonl`` (through
    :func:`vitfsdp.records.read_jsonl`, which skips a killed run's truncated last line with a
    warning) and adds the plan's prediction (:func:`prediction`; from ``probe``, a probe.json,
    where the run's own ``cluster.probe`` is unset). An unreadable record gives
    a ``failed`` row with the reason, never an exception, so one broken run cannot hide the
    others.
    """
    run_dir = Path(run_dir)
    base = str(run_dir)  # text paths below: no Path per file read, tens of thousands of runs
    try:
        run = read_json(f"{base}{os.sep}{RUN_FILE}") or {}
        if not isinstance(run.get("config"), dict):  # failed before the trainer wrote it
            run = {**run, "config": _config_from_job(run_dir)}
        summary = read_json(f"{base}{os.sep}{SUMMARY_FILE}")
        windows = _read_windows(f"{base}{os.sep}{METRICS_FILE}")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
        log.warning("%s: unreadable records (%s)", run_dir, e)
        return {"run_dir": base, "status": "failed", "reason": f"unreadable records: {e}"}
    cluster = (run.get("config") or {}).get("cluster")
    if probe and isinstance(cluster, dict) and cluster.get("probe") in (None, "", "allocation"):
        # the sweep's probe (allocation: the packs measured into it)
        run = {**run, "config": {**run["config"], "cluster": {**cluster, "probe": probe}}}
    _LOSS_CURVES[base] = _loss_curve(windows)
    status = _status(run, summary)
    row = {"run_dir": base, **status, **_config(run), **_figures(summary),
           **_model_state(summary), **_sent(base), **_other_work(base, windows),
           **_window_figures(windows, summary, status["status"]),
           **_attempts(run, summary, windows), **prediction(run)}
    if row["status"] != "completed":
        row |= {"log": find_log(run_dir, status["reason"]),
                **_reached(windows, summary, row.get("peak_mem_kind"))}
    return row


def _read_windows(path: str | os.PathLike) -> list[dict]:
    """``metrics.jsonl`` as :func:`vitfsdp.records.read_jsonl` reads it, parsed in one
    ``json.loads`` of its lines as an array (one call per file, not per line); a file that
    does not parse so (a truncated last line, a corrupt one) goes to ``read_jsonl``, which
    skips the truncated line with a warning or raises ``ValueError``."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        rows = json.loads(f"[{','.join(lines)}]")
    except json.JSONDecodeError:
        return read_jsonl(path)
    if len(rows) != len(lines):  # a line holding two values: not JSON lines
        return read_jsonl(path)
    return rows


def _config_from_job(run_dir: Path) -> dict:
    """The config of a run whose run.json holds none (it failed before the trainer started
    and no launcher recorded its end): the resolved config the sweep put in its
    ``job.json`` (:func:`vitfsdp.launch.local.job_record`), so that every column of its
    point is known; from a ``job.json`` written without one, the model, strategy and nodes
    of its overrides; ``{}`` if none."""
    job = read_json(run_dir / "job.json") or {}
    if isinstance(job.get("config"), dict):
        return job["config"]
    given = dict(o.split("=", 1) for o in job.get("overrides") or [] if "=" in o)
    config: dict[str, Any] = {}
    if "model" in given:
        config["model"] = {"name": given["model"]}
    if "strategy" in given:
        config["strategy"] = {"name": given["strategy"]}
    if str(given.get("nodes", "")).isdigit():
        config["nodes"] = int(given["nodes"])
    return config


def _loss_curve(windows: list[dict]) -> list[tuple[int, float]]:
    """``(step_end, loss)`` of every window that recorded both (warm-up included)."""
    return [(w["step_end"], w["loss"]) for w in windows
            if isinstance(w.get("step_end"), int) and _number(w.get("loss"))]


def loss_curves(df: pd.DataFrame) -> pd.DataFrame:
    """The training loss against step of every run of ``df`` (a
    :func:`~vitfsdp.analysis.collect.collect_runs` frame),
    warm-up windows included: columns ``run_dir``, ``step`` (the window's last step) and
    ``loss`` (the window's mean loss). Read from metrics.jsonl, or kept from
    :func:`~vitfsdp.analysis.collect.collect_runs` when it read these runs last."""
    rows = []
    for run_dir in df["run_dir"]:
        curve = _LOSS_CURVES.get(str(run_dir))
        if curve is None:
            try:
                curve = _loss_curve(read_jsonl(Path(run_dir) / METRICS_FILE))
            except (OSError, ValueError) as e:
                log.warning("%s: no loss curve (%s)", run_dir, e)
                curve = []
        rows += [(str(run_dir), step, loss) for step, loss in curve]
    return pd.DataFrame(rows, columns=["run_dir", "step", "loss"])


def find_log(run_dir: Path, reason: str | None = None) -> str | None:
    """The run's log with its full output and traceback: ``train.log`` (local launcher), or
    the Slurm task log of the rank the reason names (``... on rank 3 ...``), else the first
    task's; ``None`` when there is none."""
    if (run_dir / LOG_FILES[0]).is_file():
        return str(run_dir / LOG_FILES[0])
    tasks = run_dir / LOG_FILES[1]
    if not tasks.is_dir():
        return None
    rank = re.search(r"on rank (\d+)", reason or "")
    named = tasks / f"task{rank.group(1)}.log" if rank else None
    if named is not None and named.is_file():
        return str(named)
    logs = sorted(tasks.glob("task*.log"))
    return str(logs[0]) if logs else None


def _reached(windows: list[dict], summary: dict | None, kind: str | None) -> dict[str, Any]:
    """What a run that did not complete reached before it ended: ``ips_reached`` (median of
    its measured windows; None where it measured none: a warm-up window's images/s hold the
    compilation and first allocations, a fraction of the run's speed, and drawn beside the
    completed points they read as a collapse) and ``peak_mem_reached_gib`` (the largest window
    peak, warm-up included, or the memory its failing ranks reported: summary
    ``memory_at_failure``)."""
    measured = [w["ips"] for w in windows if not w.get("warmup") and _number(w.get("ips"))]
    ips = statistics.median(measured) if measured else None
    at_failure = (summary or {}).get("memory_at_failure") or {}
    keys = ("peak_rss_gib",) if kind == "rss" else ("peak_mem_allocated_gib", "peak_rss_gib")
    mem = None
    for key in keys:
        values = [w[key] for w in windows if _number(w.get(key))]
        values += [at_failure[key]] if _number(at_failure.get(key)) else []
        if values:
            mem = max(values)
            break
    return {"ips_reached": ips, "peak_mem_reached_gib": mem}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _status(run: dict, summary: dict | None) -> dict[str, Any]:
    """Status and reason: the summary's, or a stand-in when the run wrote no summary."""
    if summary is not None:
        return {"status": summary.get("status"), "reason": reason_line(summary.get("reason"))}
    status = run.get("status")
    if status != RUNNING and (status not in STATUSES or status == "completed"):
        status = "failed"
    why = "no summary.json (still running, or killed before writing one)" \
        if status == RUNNING else "no summary.json"
    return {"status": status, "reason": why}


def _config(run: dict) -> dict[str, Any]:
    """Config, world and device columns from ``run.json`` (``None`` where a field is missing)."""
    cfg, world, device = run.get("config", {}), run.get("world", {}), run.get("device", {})
    strategy, train = cfg.get("strategy", {}), cfg.get("train", {})
    nodes = cfg.get("nodes", world.get("nodes"))
    per_node = world.get("ranks_per_node", _get(cfg, "cluster", "gpus_per_node"))
    world_size = world.get("size", nodes * per_node if nodes and per_node else None)
    local_batch = train.get("local_batch_size")
    framework = cfg.get("framework")
    return {
        "model": _get(cfg, "model", "name"),
        "strategy": strategy.get("name"),
        "sharding_strategy": strategy.get("sharding_strategy"),
        "shard_group_size": strategy.get("shard_group_size"),
        "backward_prefetch": strategy.get("backward_prefetch"),
        "limit_all_gathers": strategy.get("limit_all_gathers"),
        "engine": None if framework == "jax" else cfg.get("engine"),  # FSDP1/2: torch only
        "framework": framework,
        "precision": _applied_precision(run),
        "data": _get(cfg, "data", "name"),
        "img_size": _img_size(run),
        **{key: _get(cfg, *path) for key, path in _CONFIG_PATHS},
        **_applied_kernels(run),
        "attention": _applied_attention(run),
        "experiment": cfg.get("experiment"),
        "point_id": _point_id(cfg),
        "repeat": cfg.get("repeat", 0),
        "nodes": nodes,
        "world_size": world_size,
        "ranks_per_node": per_node,
        "local_batch_size": local_batch,
        "global_batch_size": local_batch * world_size if local_batch and world_size else None,
        **_host_sharing(_get(cfg, "cluster", "name"), device, world_size, per_node),
        "network": _network(run.get("network")),
        "device_type": device.get("type"),
        "device_name": device.get("name"),
        "device_memory_gib": _device_memory(cfg, device),
        "memory_limit_gib": memory_limit(cfg, device),
        "device_peak_flops": device.get("peak_flops"),
        "peak_source": device.get("peak_source"),
        "price_per_node_hour": _get(cfg, "cluster", "price_per_node_hour"),
        "num_params": _get(run, "model", "num_params"),
        "num_classes": _get(run, "model", "num_classes") or _get(cfg, "data", "num_classes"),
        **_provenance(run),
    }


def _device_memory(cfg: dict, device: dict) -> float | None:
    """The ``device_memory_gib`` column: the device's memory, GiB: ``device.memory_gib`` as
    a torch run recorded it, else ``cluster.device_memory_gib``; a JAX run on a GPU records
    XLA's pool there (:func:`memory_limit`), not the device's, so its device memory is the
    profile's (None where the profile gives none)."""
    recorded = device.get("memory_gib")
    jax_gpu = cfg.get("framework") == "jax" and device.get("type") not in ("cpu", None)
    if _number(recorded) and not jax_gpu:
        return float(recorded)
    memory = _get(cfg, "cluster", "device_memory_gib")
    return float(memory) if _number(memory) else None


def memory_limit(cfg: dict, device: dict) -> float | None:
    """The ``memory_limit_gib`` column: the memory (GiB) one rank of the run could use, by
    run.json's ``config`` and ``device``. On a GPU ``device.memory_gib`` as the run recorded
    it: the device's memory under torch, XLA's pool under JAX (its ``bytes_limit``,
    :func:`vitfsdp.jax.metrics.device_info`: 71.3 GiB of an H100's 79.2 with
    ``XLA_PYTHON_CLIENT_MEM_FRACTION=0.9``); else ``cluster.device_memory_gib``, a JAX run's
    XLA pool of it (:func:`vitfsdp.plan.xla_pool_fraction` of ``cluster.env``: 75 % by
    default); on CPU
    ranks ``train.memory_limit_gib`` where set (RLIMIT_DATA: the growth of each rank's data
    segment after its start, not a cap on its resident memory); None where none is known
    (CPU ranks without a limit share the host's memory)."""
    if device.get("type") == "cpu" or (device.get("type") is None
                                       and _get(cfg, "cluster", "device_memory_gib") is None):
        limit = _get(cfg, "train", "memory_limit_gib")
        return float(limit) if _number(limit) and limit > 0 else None
    memory = device.get("memory_gib")
    if _number(memory):  # as the run saw it: a JAX run's is XLA's pool already (bytes_limit)
        return float(memory)
    memory = _get(cfg, "cluster", "device_memory_gib")
    if not _number(memory):
        return None
    if cfg.get("framework") == "jax":  # the profile's device: XLA's share of it
        return memory * xla_pool_fraction(_get(cfg, "cluster", "env") or {})
    return float(memory)


def _point_id(cfg: dict) -> str | None:
    """The ``point_id`` column: the point identity's hash
    (:func:`vitfsdp.core.confighash.hashed_dict`, the rule of the sweep's ``config_hash``)
    of the recorded config (run.json, or the sweep's ``job.json`` for a run that ended
    before its training wrote one: the same dict) without ``repeat``, so every run of a
    point shares it whether it started or not; ``None`` without a config."""
    return point_id(cfg) if cfg else None


def _img_size(run: dict) -> int | None:
    """The input side in pixels: run.json's model record (what ran), else the config's
    ``model.img_size``, else the variant's default (a run that ended before its model was
    built has no model record: it still belongs to its point's line)."""
    recorded = _get(run, "model", "img_size") or _get(run, "config", "model", "img_size")
    if recorded is not None:
        return recorded
    spec = VARIANTS.get(_get(run, "config", "model", "name"))
    return spec.img_size if spec is not None else None


#: Library versions named in the ``versions`` column (run.json ``versions``), in order.
VERSION_KEYS = ("python", "torch", "timm", "jax", "flax", "cuda", "rocm", "nccl",
                "xla_platform")


def _provenance(run: dict) -> dict[str, Any]:
    """When the run started, the git commit it ran (``+dirty`` with local changes) and its
    library versions (``torch 2.4.1, timm 1.0.9, ...``; CUDA, ROCm and NCCL only for runs on
    a GPU)."""
    commit, dirty = _get(run, "git", "commit"), _get(run, "git", "dirty")
    versions = run.get("versions") if isinstance(run.get("versions"), dict) else {}
    # a CPU run names no GPU stack: a CUDA build of torch reports its CUDA on any machine
    gpu_only = ("cuda", "rocm", "nccl") if _get(run, "device", "type") == "cpu" else ()
    named = [f"{k} {versions[k]}" for k in VERSION_KEYS if versions.get(k) and k not in gpu_only]
    return {"started_at": run.get("started_at"),
            "git_commit": f"{commit[:12]}{'+dirty' if dirty else ''}" if commit else None,
            "versions": ", ".join(named) or None}


def _host_sharing(cluster: str | None, device: dict, world_size: int | None,
                  per_node: int | None) -> dict[str, Any]:  # fmt: skip
    """The cluster profile, the host's CPUs, the ranks that shared them (the whole world on
    :data:`SHARED_HOST_PROFILES`, else a node's ranks) and, for CPU ranks that outnumbered
    the cores, ``shared_cores``: ``"8 ranks on 2 cores"``."""
    cpus = device.get("host_cpus")
    per_host = world_size if cluster in SHARED_HOST_PROFILES else per_node
    shared = (device.get("type") == "cpu" and isinstance(cpus, int) and isinstance(per_host, int)
              and per_host > cpus)
    return {"cluster": cluster, "host_cpus": cpus, "ranks_per_host": per_host,
            "shared_cores": f"{per_host} ranks on {cpus} cores" if shared else None}


def _network(record: dict | None) -> str | None:
    """The ``network`` column: ``"nodes apart on an emulated 1 Gbit/s link"`` for a run whose
    local launcher emulated one (run.json ``network``, :mod:`vitfsdp.launch.netns`), with
    ``", a quota of 0.5 cores a node"`` where each node had a CPU quota (``node_cpus``),
    ``"network not emulated (not root)"`` where one was asked for but not made, else
    ``None``."""
    if not isinstance(record, dict) or not record.get("emulate"):
        return None
    if record.get("emulated") and record.get("inter_node_gbit_s"):
        cpus = record.get("node_cpus")
        quota = (f", a quota of {cpus:g} cores a node" if isinstance(cpus, (int, float))
                 and cpus else "")
        return f"nodes apart on an emulated {record['inter_node_gbit_s']:g} Gbit/s link{quota}"
    return f"network not emulated ({record.get('reason') or 'unknown'})"


def _applied_precision(run: dict) -> str | None:
    """The precision the run computed in: run.json ``applied.precision`` (torch: ``name``;
    JAX: ``compute_dtype``) where recorded, so ``precision=auto`` shows as what it resolved
    to; else the configured value."""
    applied = _get(run, "applied", "precision")
    if isinstance(applied, dict):
        resolved = applied.get("name") or applied.get("compute_dtype")
        if resolved:
            return resolved
    return _get(run, "config", "precision")


def _applied_attention(run: dict) -> str | None:
    """Which attention ran, from run.json ``applied``: ``sdpa`` (torch's
    scaled_dot_product_attention; which of its backends, flash, cuDNN or memory-efficient,
    torch picks at run time and does not say), JAX's ``xla`` or ``cudnn``
    (``jax.nn.dot_product_attention``'s implementation), or ``written out`` (softmax(q·kᵀ)
    computed op by op); None where not recorded."""
    attention = _get(run, "applied", "attention")
    if isinstance(attention, str):  # JAX
        found = re.search(r"implementation='?(\w+)", attention)
        return found.group(1) if found else "written out"
    fused = _get(run, "applied", "fused_attn")
    return None if fused is None else ("sdpa" if fused else "written out")


def _applied_kernels(run: dict) -> dict[str, Any]:
    """``kernels.compile``, ``strategy.use_orig_params`` and ``kernels.adamw`` as they
    resolved (null or ``auto`` in the config): whether any block was compiled (run.json
    ``applied.compiled_blocks``), FSDP1's ``applied.use_orig_params``, and the AdamW
    implementation ``auto`` chose (``applied.adamw``: fused, foreach, for_loop); absent when
    none says. ``strategy.blocks_per_unit``
    1 in records older than the key."""
    out = {}
    compiled = _get(run, "applied", "compiled_blocks")
    if _get(run, "config", "kernels", "compile") is None and compiled is not None:
        out["kernels.compile"] = compiled > 0
    orig_params = _get(run, "applied", "use_orig_params")
    if _get(run, "config", "strategy", "use_orig_params") is None and orig_params is not None:
        out["strategy.use_orig_params"] = orig_params
    adamw = _get(run, "applied", "adamw")  # what kernels.adamw=auto chose (torch_train)
    if (_get(run, "config", "kernels", "adamw") == "auto" and adamw not in (None, "auto")
            and _get(run, "config", "framework") != "jax"):  # JAX: optax's one AdamW
        out["kernels.adamw"] = adamw
    if _get(run, "config", "strategy") and \
            _get(run, "config", "strategy", "blocks_per_unit") is None:
        out["strategy.blocks_per_unit"] = 1  # recorded before the key: one block a unit
    return out


def _figures(summary: dict | None) -> dict[str, Any]:
    """Headline figures from ``summary.json``; peak memory is allocated GPU memory, else RSS
    (``peak_mem_min_gib``: its minimum over ranks, where the records have it)."""
    summary = summary or {}
    figures = {key: summary.get(key) for key in SUMMARY_FIGURES}
    figures["last_step"] = summary.get("last_step")
    competed = summary.get("competition") or {}
    loads = [x for x in (competed.get("load_1m_start"), competed.get("load_1m_end"))
             if x is not None]
    figures["host_load_1m"] = max(loads) if loads else None  # what rank 0's host also ran
    figures["cpu_throttled_s"] = competed.get("cpu_throttled_s")
    allocated, rss = summary.get("peak_mem_allocated_gib"), summary.get("peak_rss_gib")
    if allocated is not None:
        figures |= {"peak_mem_gib": allocated, "peak_mem_kind": "allocated",
                    "peak_mem_min_gib": summary.get("peak_mem_allocated_min_gib")}
    elif rss is not None:
        figures |= {"peak_mem_gib": rss, "peak_mem_kind": "rss",
                    "peak_mem_min_gib": summary.get("peak_rss_min_gib")}
    return figures


def _model_state(summary: dict | None) -> dict[str, float | None]:
    """The :data:`STATE_COLUMNS` of a summary: ``model_state_bytes_max`` (the most any rank
    held), else ``model_state_bytes`` (JAX: its process's), in GiB; ``{}`` where neither."""
    summary = summary or {}
    state = summary.get("model_state_bytes_max") or summary.get("model_state_bytes")
    if not isinstance(state, dict):
        return {}
    return {column: state[key] / 2**30 if _number(state.get(key)) else None
            for column, key in STATE_COLUMNS.items()}


def _side_record(run_dir: str | os.PathLike, name: str) -> dict:
    """The launcher's record ``name`` beside the point's other records (``network.json``,
    ``host.json``); ``{}`` where there is none or it cannot be read (a warning: the run's
    other records still count)."""
    try:
        record = read_json(f"{run_dir}{os.sep}{name}")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
        log.warning("%s: unreadable %s (%s)", run_dir, name, e)
        return {}
    return record if isinstance(record, dict) else {}


def _sent(run_dir: str | os.PathLike) -> dict[str, float | None]:
    """The :data:`NETWORK_COLUMNS` from the point's ``network.json`` (bytes each node sent
    over its emulated link, :data:`vitfsdp.core.layout.NETWORK_FILE`), in GB; ``{}`` where
    there is none or it cannot be read."""
    record = _side_record(run_dir, NETWORK_FILE)
    if not record:
        return {}
    sent = [b for b in record.get("sent_bytes_per_node") or [] if _number(b)]
    total = record.get("sent_bytes_total")
    return {"sent_gb_per_node_max": max(sent) / 1e9 if sent else None,
            "sent_gb_total": total / 1e9 if _number(total) else None}


def _other_work(run_dir: str | os.PathLike, windows: list[dict]) -> dict[str, float | None]:
    """``host_other_cpus``: the cores other processes of the ranks' host kept busy during the
    run's measured windows (:func:`~vitfsdp.core.throughput.window_other_cpus`), else, for
    records without it (older
    records, of either trainer), during the whole point, from its ``host.json``
    (:data:`~vitfsdp.core.layout.HOST_FILE`, :class:`vitfsdp.records.OtherWork`: imports,
    rendezvous and teardown included); ``host_other_windows``: which of the two (True: the
    windows'), as :func:`vitfsdp.core.throughput.competed` judges them by different
    bounds; ``{}`` where neither (a Slurm point's older records)."""
    other = window_other_cpus(windows)
    if other is not None:
        return {"host_other_cpus": other, "host_other_windows": True}
    other = _side_record(run_dir, HOST_FILE).get("other_cpus")
    return {"host_other_cpus": other, "host_other_windows": False} if _number(other) else {}


def _window_figures(windows: list[dict], summary: dict | None, status: str) -> dict[str, Any]:
    """From ``metrics.jsonl``: measured windows, the last step reached, the least busy rank's
    busy share (median over measured windows, whatever the summary's age), and (completed
    runs whose summary predates them) the min/max of ips and step time over measured windows and
    the minimum over ranks of peak memory (``peak_mem_min_gib``)."""
    steps = [w["step_end"] for w in windows if isinstance(w.get("step_end"), int)]
    out: dict[str, Any] = {"num_windows": sum(not w.get("warmup") for w in windows),
                           "last_step": max(steps, default=None)}
    summary = summary or {}
    for key in ("num_windows", "last_step"):
        if summary.get(key) is not None:
            out[key] = summary[key]
    # the least busy rank's share, median over measured windows, as summaries now record it
    # (records before 2026-11-29 summarised it as the minimum over windows)
    least = [w["device_busy_min_frac"] for w in windows if not w.get("warmup")
             and isinstance(w.get("device_busy_min_frac"), int | float)]
    if least:
        out["device_busy_min_frac"] = statistics.median(least)
    kind = "peak_rss_min_gib" if summary.get("peak_mem_allocated_gib") is None \
        else "peak_mem_allocated_min_gib"
    if status != "completed" or all(summary.get(k) is not None for k in (*WINDOW_RANGES, kind)):
        return out  # nothing to fill in (the summary has it all: current records)
    derived = summarize_windows(windows)
    for column in WINDOW_RANGES:
        if summary.get(column) is None and derived[column] is not None:
            out[column] = derived[column]
    if summary.get(kind) is None and derived[kind] is not None:
        out["peak_mem_min_gib"] = derived[kind]
    return out


def _attempts(run: dict, summary: dict | None, windows: list[dict]) -> dict[str, Any]:
    """``num_attempts``: the attempts the run took (summary.json ``num_attempts``, else
    run.json ``attempt`` + 1 for a run that wrote no summary; more than 1 where it resumed
    from a checkpoint, its figures then pooling the measured windows of every attempt that
    kept some; None where neither records it). ``attempts_differ``: where the measured (not
    warm-up) windows come from more than one attempt (each window's ``attempt``, 0 where
    unrecorded: :meth:`vitfsdp.records.RunRecords.start`), whether one attempt's slowest
    window (lowest ips) is faster than another attempt's fastest, i.e. their ranges of
    images/s do not overlap; None where the windows are one attempt's."""
    n = (summary or {}).get("num_attempts")
    if not _number(n):
        attempt = run.get("attempt")
        n = attempt + 1 if _number(attempt) else None
    by_attempt: dict[Any, list[float]] = {}
    for w in windows:
        if not w.get("warmup") and _number(w.get("ips")):
            by_attempt.setdefault(w.get("attempt", 0), []).append(w["ips"])
    differ = None
    if len(by_attempt) > 1:  # the fastest attempt's slowest above the slowest's fastest
        differ = (max(min(v) for v in by_attempt.values())
                  > min(max(v) for v in by_attempt.values()))
    return {"num_attempts": n, "attempts_differ": differ}


def prediction(run: dict) -> dict[str, Any]:
    """The plan's prediction for a run, as ``pred_*`` columns (empty when there is none).

    Uses the ``plan`` dict the sweep wrote into ``run.json`` when there is one (a
    ``skipped_infeasible`` point: the prediction it was skipped on, ``Prediction.as_dict()``;
    keys ``peak_mem_gib``, ``step_time_s``, ``ips``, ``fits``, ``pred_mem_metric``), else
    :func:`vitfsdp.plan.predict_run`. Predictions are
    compared with measurements in :func:`vitfsdp.analysis.tables.calibration_table`.
    """
    plan = run.get("plan")
    if isinstance(plan, dict):
        cpu = plan.get("device") == "cpu" or _get(run, "device", "type") == "cpu"
        framework = _get(run, "config", "framework") or "torch"
        metric = mem_metric("cpu" if cpu else "gpu", framework)  # one rule, older plans too
        return {"pred_peak_mem_gib": plan.get("peak_mem_gib"),
                "pred_step_time_s": plan.get("step_time_s"), "pred_ips": plan.get("ips"),
                "pred_fits": plan.get("fits"), "pred_mem_metric": metric,
                "pred_source": plan.get("source")}
    pred = _predict_run(run)
    return {} if pred is None else {key: pred.get(key) for key in PRED_COLUMNS}


def _predict_run(run: dict) -> dict | None:
    """The plan's prediction for ``run``, memoized per config and device (a study's repeats
    of one point cost one prediction): the config without its ``repeat`` label, and the
    device's kind, name, memory and peak (not its UUID or bus id, which differ per node),
    compared as dicts (cheaper than writing each run's config out as a key); ``None`` where
    the config cannot be rebuilt (older records)."""
    if not isinstance(run.get("config"), dict) or "train" not in run["config"]:
        return None  # no config, or only the overrides of a run that never started
    config = {k: v for k, v in run["config"].items() if k != "repeat"}
    device = {k: _get(run, "device", k) for k in ("type", "name", "memory_gib", "peak_flops")}
    known = _PREDICTIONS.setdefault(_point_key(config), [])
    for known_config, known_device, pred in known:
        if known_device == device and known_config == config:
            return pred
    try:
        pred = _fast_predict(run)
    except (ValueError, TypeError, KeyError) as e:
        log.warning("no prediction for run %s: %s", run.get("run_id", "?"), e)
        pred = None
    known.append((config, device, pred))
    return pred


def _point_key(config: dict) -> tuple[str, str, str]:
    """The model, strategy and nodes of a config, as text: where :data:`_PREDICTIONS` looks
    for its prediction."""
    return (str(_get(config, "model", "name")), str(_get(config, "strategy", "name")),
            str(config.get("nodes")))


def _fast_predict(run: dict) -> dict | None:
    """``vitfsdp.plan.predict_run(run)`` without its OmegaConf rebuild of the config (most of
    its time): the recorded config (``dataclasses.asdict(RunConfig)``) becomes a
    :class:`~vitfsdp.config.RunConfig` field by field, validated by its ``__post_init__``s,
    and goes to :func:`vitfsdp.plan.predict_recorded`, as in ``predict_run``.
    A config this cannot rebuild goes to ``predict_run`` itself."""
    # the config (and Hydra under it) only where a run is predicted: rows read from the
    # cache (collect_runs' cache) need none, and its import is a tenth of a re-analysis
    from vitfsdp.config import RunConfig

    try:
        cfg = _dataclass_from_dict(RunConfig, run["config"])
    except (TypeError, ValueError, KeyError, AttributeError):
        return predict_run(run)
    return predict_recorded(cfg, run.get("device") or {})


def _dataclass_from_dict(cls: type, data: dict) -> Any:
    """``cls(**data)`` with every dataclass-typed field built the same way from its dict.

    Raises:
        TypeError: a key ``cls`` has no field for, or a nested value that is not a dict.
        ValueError: a field's ``__post_init__`` refuses its value.
    """
    hints = _type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        kind = hints[key] if key in hints else None
        if kind is None:
            raise TypeError(f"{cls.__name__} has no field {key!r}")
        kwargs[key] = (_dataclass_from_dict(kind, value)
                       if dataclasses.is_dataclass(kind) else value)
    return cls(**kwargs)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The init fields of dataclass ``cls`` and their resolved types."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _get(d: dict, *keys: str) -> Any:
    """``d[k1][k2]...``, or ``None`` where any level is missing or not a dict."""
    for key in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d
