"""Run by torchrun from tests/integration/test_memory.py: build and wrap one configuration through
vitfsdp.torch_train.build (meta-device build, per-unit or per-shard materialization) and report
each rank's peak resident memory (VmHWM) during build and wrap, as JSON on rank 0's stdout.

    torchrun --nproc_per_node 4 tests/integration/memory_worker.py OUT_JSON override override ...

With ``--state-bytes`` first, instead: for each of DDP, NO_SHARD and FULL_SHARD, build, take
one AdamW step (vitfsdp.torch_train.train_step) and report each rank's model-state bytes
(vitfsdp.torch_train.model_state_record): ``{strategy: [rank 0's record, rank 1's ...],
"full_model_bytes": fp32 bytes of all parameters}``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time

from vitfsdp import startup_gc

with startup_gc.paused():  # a rank's imports without the collector, as vitfsdp.train's
    import torch
    import torch.distributed as dist
    from hydra import compose, initialize_config_dir

    from vitfsdp import distributed
    from vitfsdp.config import CONF_DIR, register_configs, to_run_config
    from vitfsdp.models import build_model, count_params
    from vitfsdp.torch_train import build, build_optimizer, model_state_record, train_step

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


def state_bytes(out_json: str, *overrides: str) -> None:
    register_configs()
    env = distributed.discover()
    device = torch.device("cpu")
    result = {}
    with distributed.process_group(env, device, timeout_s=600):
        for strategy in ("DDP", "NO_SHARD", "FULL_SHARD"):
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
                cfg = to_run_config(compose("config", overrides=[*overrides,
                                                                 f"strategy={strategy}"]))
            model, _ = build(cfg, env, device)
            optimizer, _ = build_optimizer(model.parameters(), cfg.train, cfg.kernels, device)
            size = cfg.model.resolved_img_size()
            batch = (torch.randn(2, 3, size, size), torch.randint(0, cfg.num_classes, (2,)))
            count: dict = {}
            train_step(model, optimizer, batch, contextlib.nullcontext(), None, count)
            rows = [None] * env.world_size
            dist.all_gather_object(rows, model_state_record(count, device))
            result[strategy] = rows
            result["full_model_bytes"] = 4 * count_params(  # fp32, every parameter
                build_model(cfg.model, cfg.num_classes, device="meta"))
            del model, optimizer
            gc.collect()
        if env.rank == 0:
            with open(out_json, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2)
        dist.barrier()


if __name__ == "__main__":
    if sys.argv[1] == "--state-bytes":
        state_bytes(*sys.argv[2:])
    else:
        main(*sys.argv[1:])
