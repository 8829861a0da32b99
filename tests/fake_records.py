"""Run records written as the trainer writes them (:class:`vitfsdp.records.RunRecords`),
for tests of what reads them: the analysis, the report, the noise checks."""

from __future__ import annotations

import json
from pathlib import Path

from vitfsdp.records import RunRecords

GPUS_PER_NODE = 2
LOCAL_BATCH = 8
SHARDING = {"FULL_SHARD": "FULL_SHARD", "HYBRID_2GPU": "HYBRID_SHARD", "DDP": "DDP"}


def run_info(strategy: str, nodes: int, model: str = "vit_tiny", device: str = "cpu",
             prefetch: str = "BACKWARD_PRE") -> dict:  # fmt: skip
    """A run.json payload in the schema train.py writes."""
    world_size = nodes * GPUS_PER_NODE
    memory_gib = 80.0 if device == "cuda" else None
    return {
        "run_id": f"{model}-{strategy}-{prefetch}-n{nodes}",
        "config": {
            "model": {"name": model},
            "strategy": {"name": strategy, "sharding_strategy": SHARDING[strategy],
                         "shard_group_size": 2 if strategy == "HYBRID_2GPU" else world_size,
                         "backward_prefetch": prefetch, "limit_all_gathers": True},
            "data": {"name": "digits"},
            "train": {"local_batch_size": LOCAL_BATCH, "steps": 8, "warmup_steps": 2},
            "cluster": {"name": "local", "gpus_per_node": GPUS_PER_NODE},
            "engine": "fsdp1", "framework": "torch", "nodes": nodes, "precision": "fp32",
        },
        "world": {"size": world_size, "nodes": nodes, "ranks_per_node": GPUS_PER_NODE,
                  "backend": "gloo" if device == "cpu" else "nccl"},
        "device": {"type": device, "name": "cpu" if device == "cpu" else "NVIDIA H100",
                   "memory_gib": memory_gib},
        "model": {"num_params": 5_500_000, "forward_flops_per_image": 1.0e9},
    }  # fmt: skip


def write_run(run_dir: Path, info: dict, ips: float | None, status: str = "completed",
              mem_gib: float = 1.5, busy: float | None = None,
              loss: float = 2.0) -> None:  # fmt: skip
    """Start, three measured windows around ``ips`` after one warm-up window, finish;
    ``busy``: every measured window's ``device_busy_frac`` (None: not measured, as on CPU);
    ``loss``: every measured window's training loss."""
    records = RunRecords(run_dir)
    records.start(info)
    mem_key = "peak_rss_gib" if info["device"]["type"] == "cpu" else "peak_mem_allocated_gib"
    records.window({"step_end": 2, "warmup": True, "ips": 1.0, mem_key: 99.0, "loss": 3.0})
    if ips is None:
        records.finish(status, reason="CUDA out of memory")
        return
    for step, delta in ((4, -1.0), (6, 0.0), (8, 1.0)):
        records.window({"step_end": step, "warmup": False, "ips": ips + delta,
                        "ips_per_gpu": (ips + delta) / info["world"]["size"],
                        mem_key: mem_gib + step / 100, "loss": loss,
                        "device_busy_frac": busy})  # fmt: skip
    records.finish(status)


def write_sweep(root: Path, ips: dict[tuple[str, int], list[float | None]]):
    """A sweep of ``run_info`` points under ``root``: ``{(strategy, nodes): [ips of each
    repeat]}``, a ``None`` ips an ``oom`` run; returns its ``collect_runs`` frame."""
    # on use: the analysis only for the tests that read a sweep back
    from vitfsdp.analysis import collect_runs

    for (strategy, nodes), values in ips.items():
        for repeat, value in enumerate(values):
            info = run_info(strategy, nodes)
            info["config"]["repeat"] = repeat
            write_run(root / f"{strategy}_{nodes}_r{repeat}", info, value,
                      status="completed" if value is not None else "oom")
    return collect_runs(root)


#: A prefetch ablation's images/s, two repeats of each (backward_prefetch, limit_all_gathers)
#: variant of FULL_SHARD at 1 node: a reviewer's CPU run, 2026-11-28.
ABLATION = {("BACKWARD_PRE", True): [334.0, 567.0], ("BACKWARD_PRE", False): [327.0, 642.0],
            ("BACKWARD_POST", True): [1317.0, 1663.0],
            ("BACKWARD_POST", False): [432.0, 1935.0],
            ("NONE", True): [431.0, 935.0], ("NONE", False): [476.0, 1181.0]}


def write_ablation_run(root: Path, prefetch: str, limit: bool, repeat: int,
                       ips: float | None, *, device: str = "cpu", status: str = "completed",
                       busy: float | None = None, other_cpus: float | None = None) -> None:
    """One run of a prefetch ablation variant (FULL_SHARD at 1 node on a 2-core host) under
    ``root``: :func:`write_run` with ``busy``; ``other_cpus``: the cores other work kept
    busy beside it, written to host.json as the local launcher writes it (None: not
    measured)."""
    info = run_info("FULL_SHARD", 1, prefetch=prefetch, device=device)
    info["config"]["strategy"]["limit_all_gathers"] = limit
    info["config"]["repeat"] = repeat
    info["device"]["host_cpus"] = 2
    run_dir = root / f"{prefetch}_{limit}_r{repeat}"
    write_run(run_dir, info, ips, status=status, busy=busy)
    if other_cpus is not None:
        (run_dir / "host.json").write_text(json.dumps({"other_cpus": other_cpus,
                                                       "host_cpus": 2}))
