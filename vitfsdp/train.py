"""One training run: build → wrap → loop → write records.

    python -m vitfsdp.train model=vit_tiny strategy=FULL_SHARD data=digits nodes=2

Run under torchrun or srun, each rank executes this; run plainly for a run of more than one
process, it starts the processes itself with torchrun on this machine. Rank 0 writes
``run.json``, ``metrics.jsonl`` and ``summary.json`` into Hydra's run directory.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vitfsdp import data, distributed, models, parallel, plan, provenance
from vitfsdp.config import RunConfig, cli, register_configs, to_run_config
from vitfsdp.metrics import WindowMeter, device_info
from vitfsdp.records import RunRecords

log = logging.getLogger("vitfsdp.train")

register_configs()


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(dcfg: DictConfig) -> None:
    """Hydra entry point: validate the config, then train in this process or launch ranks."""
    cfg = to_run_config(dcfg)
    if cfg.dry_run:
        print(dry_run_report(cfg))
        return
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    env = distributed.discover()
    if not env.is_distributed and cfg.world_size > 1:
        sys.exit(_launch_ranks_here(cfg, run_dir))
    if env.world_size != cfg.world_size:
        raise ValueError(
            f"launched {env.world_size} processes but nodes={cfg.nodes} × "
            f"cluster.gpus_per_node={cfg.cluster.gpus_per_node} = {cfg.world_size}; "
            "launch as many processes as nodes × cluster.gpus_per_node"
        )
    provenance.setup_logging(env.rank)
    device = distributed.pick_device(cfg.device, env.local_rank)
    with distributed.process_group(env, device, cfg.train.timeout_s):
        run(cfg, env, device, run_dir)


def dry_run_report(cfg: RunConfig) -> str:
    """Per-rank parameter, gradient and optimizer bytes of ``cfg`` at its world size, from a
    meta-device build (nothing allocated, no process started)."""
    b = plan.state_bytes(cfg.model, _num_classes(cfg), cfg.strategy, cfg.world_size,
                         cfg.precision)
    label = (f"{cfg.model.name} {cfg.strategy.name} on {cfg.world_size} ranks "
             f"({cfg.nodes} nodes × {cfg.cluster.gpus_per_node})")
    return plan.format_state_bytes(b, label)


def run(cfg: RunConfig, env: distributed.DistEnv, device: torch.device, run_dir: Path) -> dict:
    """Train per ``cfg`` in an initialized process group; record the outcome, even a failure.

    Returns:
        The summary (status and headline figures).

    Raises:
        Exception: whatever training raised, after rank 0 recorded it as ``oom`` or ``failed``.
    """
    records = RunRecords(run_dir, is_writer=env.rank == 0)
    t0 = time.time()
    records.start(run_info(cfg, env, device, run_dir))
    try:
        train(cfg, env, device, records)
    except torch.OutOfMemoryError as e:
        records.finish("oom", reason=f"OutOfMemoryError: {e}"[:2000], elapsed_s=time.time() - t0)
        raise
    except Exception as e:
        records.finish("failed", reason=f"{type(e).__name__}: {e}"[:2000],
                       elapsed_s=time.time() - t0)
        raise
    summary = records.finish("completed", elapsed_s=time.time() - t0)
    log.info("completed: %.1f images/s, step %.3f s, peak memory %s GiB", summary["ips"],
             summary["step_time_s"], _peak_mem(summary))
    return summary


def run_info(cfg: RunConfig, env: distributed.DistEnv, device: torch.device,
             run_dir: Path) -> dict:
    """What ran: resolved config, world, device, model size, versions, hosts, Slurm ids."""
    num_classes = _num_classes(cfg)
    meta_model = models.build_model(cfg.model, num_classes, device="meta")
    return {
        "run_id": run_dir.name,
        "config": dataclasses.asdict(cfg),
        "world": {
            "size": env.world_size,
            "nodes": cfg.nodes,
            "ranks_per_node": cfg.cluster.gpus_per_node,
            "replicas": cfg.strategy.replicas(env.world_size),
            "sharding_strategy": cfg.strategy.effective_sharding_strategy(),
            "backend": distributed.backend_for(device),
            "launched_by": env.source,
        },
        "device": device_info(device),
        "model": {
            "num_params": models.count_params(meta_model),
            "forward_flops_per_image": models.forward_flops_per_image(cfg.model, num_classes),
            "img_size": cfg.model.resolved_img_size(),
            "num_classes": num_classes,
        },
        **_hosts(env),
        **provenance.collect(),
    }


def _hosts(env: distributed.DistEnv) -> dict:
    """Node names: distinct (``hosts``) and per global rank (``rank_hosts``)."""
    per_rank = distributed.rank_hostnames(env)
    return {"hosts": sorted(set(per_rank)), "rank_hosts": per_rank}


def train(cfg: RunConfig, env: distributed.DistEnv, device: torch.device,
          records: RunRecords) -> None:
    """Build, wrap and train for ``cfg.train.steps`` steps, one records window at a time."""
    model = _build_and_wrap(cfg, env, device)
    tc = cfg.train
    optimizer = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    batches = data.batches(
        cfg.data, img_size=cfg.model.resolved_img_size(), local_batch_size=tc.local_batch_size,
        rank=env.rank, world_size=env.world_size, device=device, seed=tc.seed,
    )
    meter = WindowMeter(device, env.world_size, tc.local_batch_size * env.world_size,
                        3 * records.run_info["model"]["forward_flops_per_image"])
    autocast = _autocast(cfg, device)
    for i, (first, last, warmup) in enumerate(windows(tc.steps, tc.warmup_steps, tc.log_every)):
        meter.start()
        loss_sum = torch.zeros((), device=device)
        for _ in range(first, last + 1):
            loss_sum += train_step(model, optimizer, next(batches), autocast)
        figures = meter.stop(last - first + 1, loss_sum)
        records.window({"window": i, "step_start": first, "step_end": last, "warmup": warmup,
                        "num_steps": last - first + 1,
                        "global_batch_size": tc.local_batch_size * env.world_size, **figures})
        log.info("step %d/%d%s: loss %.4f, %.1f images/s", last, tc.steps,
                 " (warm-up)" if warmup else "", figures["loss"], figures["ips"])


def train_step(model, optimizer, batch, autocast) -> torch.Tensor:
    """One AdamW step on ``batch`` = (images (B,3,H,W), labels (B,)); returns the detached
    local mean cross-entropy loss, with no host synchronization."""
    x, y = batch
    with autocast:
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach().float()


def windows(steps: int, warmup_steps: int, log_every: int) -> list[tuple[int, int, bool]]:
    """Split steps 1..steps into timing windows (first, last, is_warmup) of at most
    ``log_every`` steps; no window mixes warm-up and measured steps."""
    out = []
    for lo, hi, warm in ((1, warmup_steps, True), (warmup_steps + 1, steps, False)):
        out += [(s, min(s + log_every - 1, hi), warm) for s in range(lo, hi + 1, log_every)]
    return out


def _build_and_wrap(cfg: RunConfig, env: distributed.DistEnv, device: torch.device):
    torch.manual_seed(cfg.train.seed)  # identical initial weights on every rank
    model = models.build_model(cfg.model, _num_classes(cfg), device=device)
    return parallel.wrap(model, cfg.strategy, device=device, world_size=env.world_size,
                         block_classes=models.block_classes(), precision=cfg.precision,
                         engine=cfg.engine)


def _autocast(cfg: RunConfig, device: torch.device):
    """bf16 autocast where FSDP's MixedPrecision does not already cast (DDP)."""
    enabled = cfg.precision == "bf16" and not cfg.strategy.is_fsdp
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def _num_classes(cfg: RunConfig) -> int:
    return cfg.model.num_classes or data.num_classes(cfg.data)


def _peak_mem(summary: dict) -> str:
    value = summary["peak_mem_allocated_gib"] or summary["peak_rss_gib"]
    return f"{value:.2f}" if value is not None else "n/a"


def _launch_ranks_here(cfg: RunConfig, run_dir: Path) -> int:
    from vitfsdp.launch import local

    provenance.setup_logging(0)
    overrides = list(HydraConfig.get().overrides.task)
    log.info("starting %d local processes with torchrun", cfg.world_size)
    return local.run_point(overrides, run_dir, cfg.world_size)


if __name__ == "__main__":
    cli(main)
