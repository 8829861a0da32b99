"""Run by torchrun from tests/test_memory.py: build and wrap one configuration through
vitfsdp.torch_train.build (meta-device build, per-unit or per-shard materialization) and report
each rank's peak resident memory (VmHWM) during build and wrap, as JSON on rank 0's stdout.

    torchrun --nproc_per_node 4 tests/memory_worker.py OUT_JSON override override ...
"""

from __future__ import annotations

import gc
import json
import sys
import time

import torch
import torch.distributed as dist
from hydra import compose, initialize_config_dir

from vitfsdp import distributed
from vitfsdp.config import CONF_DIR, register_configs, to_run_config
from vitfsdp.torch_train import build

GIB = 1024**3


def _status_gib(field: str) -> float:
    """A memory line of /proc/self/status (``VmHWM``, ``VmRSS``) in GiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / GIB
    raise RuntimeError(f"{field} not in /proc/self/status")


def main(out_json: str, *overrides: str) -> None:
    register_configs()
    env = distributed.discover()
    device = torch.device("cpu")
    with distributed.process_group(env, device, timeout_s=600):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = to_run_config(compose("config", overrides=list(overrides)))
        before_gib = _status_gib("VmHWM")
        t0 = time.perf_counter()
        model, applied = build(cfg, env, device)
        dist.barrier()
        local_bytes = sum(_local(p).numel() * _local(p).element_size() for p in model.parameters())
        row = {"peak_rss_gib": _status_gib("VmHWM"), "rss_before_build_gib": before_gib,
               "param_gib": local_bytes / GIB, "build_s": time.perf_counter() - t0}
        rows = [None] * env.world_size
        dist.all_gather_object(rows, row)
        if env.rank == 0:
            result = {"applied": applied, "ranks": rows}
            with open(out_json, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2)
        del model  # free the shards on every rank, then leave the process group together
        gc.collect()
        dist.barrier()


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


if __name__ == "__main__":
    main(*sys.argv[1:])
