"""Synthetic sweeps in the real record format, and the analysis benchmark that reads them.

``python analysis/bench_analysis.py`` writes N runs (``run.json``, ``metrics.jsonl``,
``summary.json``, through :class:`vitfsdp.records.RunRecords`, the trainer's own writer) of a
study of 4 models x 6 strategies x 8 node counts (192 points on a Frontier-like profile),
repeated until N runs exist, about 5 % of them failing (oom with the windows measured before
it, failed with a traceback, timeout), then times ``python -m vitfsdp.analysis`` on the first
100, 1,000 and 10,000 runs, each in a fresh process (imports and the plan's caches
included). Figures are invented (a plausible ips and memory per point, 2 % noise): they test
speed and readability, not the plan.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import resource
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from vitfsdp.records import RunRecords

log = logging.getLogger(__name__)

MODELS = {"vit_base": 87e6, "vit_huge": 635e6, "vit_1b": 914e6, "vit_3b": 3067e6}
STRATEGIES = ("DDP", "NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_2GPU", "HYBRID_8GPU")
NODES = (1, 2, 4, 8, 16, 32, 64, 128)
GPUS_PER_NODE = 8
#: What every synthetic run's device name and experiment field say it is, so that every
#: figure's title and footer and the report's opening carry it
#: (:data:`vitfsdp.analysis.lines.INVENTED_DATA` is how the analysis tells it): its numbers
#: are invented, not measured on the MI250X-like profile they imitate.
INVENTED = "INVENTED DATA (bench_analysis)"
DEVICE = {"type": "cuda", "name": f"{INVENTED}: AMD Instinct MI250X", "memory_gib": 64.0,
          "peak_flops": 191.5e12, "peak_source": "table", "peak_kind": "bf16"}
#: Share of runs per failure status (the rest complete).
FAILURE_RATES = {"oom": 0.03, "failed": 0.01, "timeout": 0.01}
TRACEBACK = ("raised on rank 3 (ranks 3) at step 7: RuntimeError: NCCL error in: "
             "ProcessGroupNCCL.cpp:1970, unhandled system error\nTraceback (most recent call "
             "last):\n  File \"vitfsdp/train.py\", line 212, in train_loop\n    loss.backward()"
             "\nRuntimeError: NCCL error: unhandled system error")


def point_overrides() -> list[list[str]]:
    """The study's points as sweep overrides, in sweep order."""
    return [[f"model={m}", f"strategy={s}", f"nodes={n}"]
            for m in MODELS for s in STRATEGIES for n in NODES]


def base_configs() -> dict[str, dict]:
    """The resolved config (``dataclasses.asdict(RunConfig)``, as run.json holds it) of each
    strategy on a Frontier-like profile, composed once through Hydra."""
    # Hydra and the config only where synthetic runs are made (benchmarks, tests)
    from hydra import compose, initialize_config_dir

    from vitfsdp.config import CONF_DIR, register_configs, to_run_config

    register_configs()
    configs = {}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        for strategy in STRATEGIES:
            cfg = compose("config", overrides=[
                f"strategy={strategy}", "cluster=frontier", "cluster.account=BENCH",
                "precision=bf16", "train.local_batch_size=32", "train.steps=50",
                "train.warmup_steps=10", "train.log_every=10"])  # fmt: skip
            configs[strategy] = dataclasses.asdict(to_run_config(cfg))
    return configs


def run_info(config: dict, model: str, nodes: int, repeat: int) -> dict:
    """run.json of one synthetic run (config, world, device, model)."""
    cfg = {**config, "model": {**config["model"], "name": model}, "nodes": nodes,
           "repeat": repeat, "experiment": INVENTED}
    world = nodes * GPUS_PER_NODE
    return {"run_id": f"{model}-{cfg['strategy']['name']}-n{nodes}-r{repeat}", "config": cfg,
            "world": {"size": world, "nodes": nodes, "ranks_per_node": GPUS_PER_NODE,
                      "backend": "nccl", "launched_by": "srun"},
            "device": DEVICE, "model": {"num_params": int(MODELS[model]),
                                        "forward_flops_per_image": 2 * MODELS[model] * 257}}


def _figures(model: str, strategy: str, nodes: int, rng: random.Random) -> tuple[float, float]:
    """A plausible global ips and peak allocated GiB per GPU of one run."""
    per_gpu = 40e9 / MODELS[model] * (0.93 if strategy == "DDP" else 0.85)
    ips = per_gpu * nodes * GPUS_PER_NODE * 0.96 ** (nodes.bit_length() - 1)
    shards = {"DDP": 1, "NO_SHARD": 1, "HYBRID_2GPU": 2, "HYBRID_8GPU": 8}.get(
        strategy, nodes * GPUS_PER_NODE)
    mem = 16 * MODELS[model] / shards / 2**30 + 4.0
    return ips * rng.gauss(1.0, 0.02), mem * rng.gauss(1.0, 0.01)


def write_synthetic_run(run_dir: Path, info: dict, status: str, rng: random.Random) -> None:
    """One run's records: a warm-up window and four measured ones (an oom stops after two, a
    timeout after one, a failure before any)."""
    cfg = info["config"]
    ips, mem = _figures(cfg["model"]["name"], cfg["strategy"]["name"], cfg["nodes"], rng)
    windows = {"completed": 5, "oom": 2, "timeout": 1, "failed": 0}[status]
    records = RunRecords(run_dir)
    records.start(info)
    for i in range(windows):
        w_ips = ips * rng.gauss(1.0, 0.01) * (0.3 if i == 0 else 1.0)
        records.window({"window": i, "step_start": 10 * i + 1, "step_end": 10 * i + 10,
                        "warmup": i == 0, "num_steps": 10, "ips": w_ips,
                        "ips_per_gpu": w_ips / info["world"]["size"],
                        "step_time_s": 32 * info["world"]["size"] / w_ips,
                        "loss": 6.9 * 0.93 ** i, "peak_mem_allocated_gib": mem,
                        "peak_mem_allocated_min_gib": 0.98 * mem,
                        "peak_mem_reserved_gib": 1.05 * mem})  # fmt: skip
    if status == "completed":
        records.finish("completed")
    else:
        reason = {"oom": f"out of memory on rank 0 (ranks 0) at step {10 * windows + 1}: "
                         "OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB\n"
                         "Traceback (most recent call last):\n  ...",
                  "timeout": "collective timed out on rank 1 (ranks 1, 5) at step 12: "
                             "DistBackendError: watchdog timeout after 600 s",
                  "failed": TRACEBACK}[status]
        records.finish(status, reason=reason, last_step=10 * windows)


def _status(rng: random.Random) -> str:
    """A run's status, drawn with :data:`FAILURE_RATES`."""
    draw, edge = rng.random(), 0.0
    for status, rate in FAILURE_RATES.items():
        edge += rate
        if draw < edge:
            return status
    return "completed"


@contextmanager
def _no_fsync():
    """Skip the records' fsync while writing thousands of synthetic runs (speed only)."""
    fsync = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = fsync


def write_synthetic_sweep(root: str | os.PathLike, counts: tuple[int, ...],
                          seed: int = 0) -> list[Path]:  # fmt: skip
    """Write ``max(counts)`` runs below ``root``, split into one sweep dir per step of
    ``counts`` (``part0`` holds the first ``counts[0]`` runs, ``part1`` the next ones up to
    ``counts[1]``, ...), so the first N runs are the sweep dirs up to N's. Returns them.

    Raises:
        ValueError: ``counts`` is empty or not increasing.
    """
    if not counts or any(b <= a for a, b in zip(counts, counts[1:], strict=False)):
        raise ValueError(f"counts={counts} must be increasing numbers of runs, e.g. 100,1000")
    rng, configs, points = random.Random(seed), base_configs(), point_overrides()
    parts = [Path(root) / f"part{i}" for i in range(len(counts))]
    with _no_fsync():
        for i in range(counts[-1]):
            part = parts[next(k for k, n in enumerate(counts) if i < n)]
            model, strategy, nodes = (o.split("=")[1] for o in points[i % len(points)])
            info = run_info(configs[strategy], model, int(nodes), i // len(points))
            write_synthetic_run(part / f"{i}_{info['run_id']}", info, _status(rng), rng)
    return parts


def time_analysis(sweep_dirs: list[Path], out: Path, report: bool = False,
                  jobs: int | None = None) -> tuple[float, float]:  # fmt: skip
    """Seconds of ``python -m vitfsdp.analysis SWEEP_DIR... --out OUT [--jobs N]`` in a fresh
    process (imports included): wall clock, and CPU (user + system, the figure processes'
    included), which other load on the machine does not inflate.

    Raises:
        RuntimeError: the analysis exited non-zero (its stderr's tail in the message).
    """
    cmd = [sys.executable, "-m", "vitfsdp.analysis", *map(str, sweep_dirs), "--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd += (["--report"] if report else []) + ([f"--jobs={jobs}"] if jobs else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"analysis exited {proc.returncode}: {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def png_sizes(out_dir: Path) -> dict[str, tuple[int, int]]:
    """``(width, height)`` in pixels of every PNG figure in ``out_dir``, by name (read from
    the PNG header: no image library needed)."""
    sizes = {}
    for path in sorted(Path(out_dir).glob("*.png")):
        with open(path, "rb") as f:
            header = f.read(24)  # signature (8), IHDR length and type (8), width, height
        sizes[path.stem] = (int.from_bytes(header[16:20], "big"),
                            int.from_bytes(header[20:24], "big"))
    return sizes
