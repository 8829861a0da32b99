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
from vitfsdp.config import (
    KernelsConfig,
    RunConfig,
    TrainConfig,
    cli,
    register_configs,
    to_run_config,
)
from vitfsdp.metrics import WindowMeter, device_info
from vitfsdp.records import RUN_FILE, RunRecords, write_json_atomic

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
    if cfg.framework == "jax":  # no torch process group: jax.distributed instead
        from vitfsdp.jax.train import main as jax_main

        jax_main(cfg, env, run_dir)
        return
    provenance.setup_logging(env.rank)
    device = distributed.pick_device(cfg.device, env.local_rank)
    with distributed.process_group(env, device, cfg.train.timeout_s):
        run(cfg, env, device, run_dir)


def dry_run_report(cfg: RunConfig) -> str:
    """Per-rank parameter, gradient and optimizer bytes of ``cfg`` at its world size, from a
    meta-device build (nothing allocated, no process started)."""
    b = plan.state_bytes(cfg.model, _num_classes(cfg), cfg.strategy, cfg.world_size,
                         cfg.precision_settings().param_dtype)
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
    numerics = apply_numerics(cfg.kernels)
    records.start(run_info(cfg, env, device, run_dir) | {"applied": numerics | {
        "precision": dataclasses.asdict(cfg.precision_settings())}})
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
    """Build, wrap and train for ``cfg.train.steps`` steps, one records window at a time.

    What the build actually applied (materialization, checkpointed and compiled blocks,
    attention kernel, AdamW implementation) is added to run.json's ``applied`` first."""
    tc = cfg.train
    model, applied = build(cfg, env, device)
    optimizer, adamw = build_optimizer(model.parameters(), tc, cfg.kernels, device)
    settings = cfg.precision_settings()
    scaler = parallel.grad_scaler(settings, device)
    _record_applied(records, {**applied, "adamw": adamw})
    batches = data.batches(
        cfg.data, img_size=cfg.model.resolved_img_size(), local_batch_size=tc.local_batch_size,
        rank=env.rank, world_size=env.world_size, device=device, seed=tc.seed,
    )
    meter = WindowMeter(device, env.world_size, tc.local_batch_size * env.world_size,
                        3 * records.run_info["model"]["forward_flops_per_image"])
    autocast = _autocast(settings, device)
    for i, (first, last, warmup) in enumerate(windows(tc.steps, tc.warmup_steps, tc.log_every)):
        meter.start()
        loss_sum = torch.zeros((), device=device)
        for _ in range(first, last + 1):
            loss_sum += train_step(model, optimizer, next(batches), autocast, scaler)
        figures = meter.stop(last - first + 1, loss_sum)
        records.window({"window": i, "step_start": first, "step_end": last, "warmup": warmup,
                        "num_steps": last - first + 1,
                        "global_batch_size": tc.local_batch_size * env.world_size, **figures})
        log.info("step %d/%d%s: loss %.4f, %.1f images/s", last, tc.steps,
                 " (warm-up)" if warmup else "", figures["loss"], figures["ips"])


def train_step(model, optimizer, batch, autocast, scaler=None) -> torch.Tensor:
    """One AdamW step on ``batch`` = (images (B,3,H,W), labels (B,)); returns the detached
    local mean cross-entropy loss, with no host synchronization.

    With a gradient ``scaler`` (fp16) the loss is scaled before backward, and a step whose
    gradients hold an inf or NaN is skipped and the scale lowered."""
    x, y = batch
    with autocast:
        loss = torch.nn.functional.cross_entropy(model(x), y)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach().float()


def windows(steps: int, warmup_steps: int, log_every: int) -> list[tuple[int, int, bool]]:
    """Split steps 1..steps into timing windows (first, last, is_warmup) of at most
    ``log_every`` steps; no window mixes warm-up and measured steps."""
    out = []
    for lo, hi, warm in ((1, warmup_steps, True), (warmup_steps + 1, steps, False)):
        out += [(s, min(s + log_every - 1, hi), warm) for s in range(lo, hi + 1, log_every)]
    return out


def build(cfg: RunConfig, env: distributed.DistEnv,
          device: torch.device) -> tuple[torch.nn.Module, dict]:
    """Build the model on the meta device and wrap it, materializing only what this rank
    holds (:func:`vitfsdp.parallel.wrap`); every path, the single process included, draws
    the same initial weights for ``train.seed`` (:class:`vitfsdp.models.ViTInit`).

    Returns:
        (the wrapped model, what was applied: ``materialized``,
        ``activation_checkpointed_blocks``, ``compiled_blocks``, ``fused_attn`` and the
        number of attention modules it was set on).
    """
    torch.manual_seed(cfg.train.seed)  # anything random besides the init: same on all ranks
    model = models.build_model(cfg.model, _num_classes(cfg), device="meta")
    num_attn = models.set_fused_attn(model, cfg.kernels.fused_attn)
    init = models.ViTInit(model, cfg.train.seed)
    model, applied = parallel.wrap(
        model, cfg.strategy, device=device, world_size=env.world_size,
        block_classes=models.block_classes(), init=init, engine=cfg.engine,
        precision=cfg.precision_settings(),
        activation_checkpointing=cfg.train.activation_checkpointing,
        compile_blocks=cfg.kernels.compile)
    return model, {**applied, "fused_attn": cfg.kernels.fused_attn,
                   "fused_attn_modules": num_attn}


def build_optimizer(params, tc: TrainConfig, kernels: KernelsConfig,
                    device: torch.device) -> tuple[torch.optim.Optimizer, str]:
    """AdamW(``tc.lr``, ``tc.weight_decay``) with the implementation ``kernels.adamw``.

    Returns:
        (the optimizer, the implementation it runs: for_loop, foreach or fused; ``auto``
        resolved as torch resolves it for these parameters).

    Raises:
        ValueError: ``kernels.adamw=fused`` on a device type torch has no fused AdamW for.
    """
    params = list(params)
    if kernels.adamw == "fused" and device.type not in _fused_devices():
        raise ValueError(f"kernels.adamw=fused is not supported on {device.type} by torch "
                         f"{torch.__version__}; valid there: auto, for_loop, foreach")
    flags = {"auto": {}, "for_loop": {"foreach": False}, "foreach": {"foreach": True},
             "fused": {"fused": True}}[kernels.adamw]
    optimizer = torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, **flags)
    return optimizer, kernels.adamw if kernels.adamw != "auto" else _default_adamw(params)


def _fused_devices() -> list[str]:
    """Device types with fused optimizer kernels in this torch (torch's private list; if it
    moves, CUDA only)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return ["cuda"]
    return _get_fused_kernels_supported_devices()


def _default_adamw(params) -> str:
    """The implementation torch's AdamW picks when neither foreach nor fused is given."""
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
    except ImportError:
        return "auto"
    fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return "fused" if fused else "foreach" if foreach else "for_loop"


def apply_numerics(kernels: KernelsConfig) -> dict:
    """Set matmul precision and cuDNN TF32 from ``kernels`` for this process; returns the
    values read back from torch, for run.json.

    ``torch.set_float32_matmul_precision`` also sets ``torch.backends.cuda.matmul.
    allow_tf32`` (true unless ``highest``): the two are one switch, recorded both ways.
    """
    torch.set_float32_matmul_precision(kernels.float32_matmul_precision)
    torch.backends.cudnn.allow_tf32 = kernels.cudnn_allow_tf32
    return {"float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}


def _record_applied(records: RunRecords, applied: dict) -> None:
    """Add ``applied`` to run.json's ``applied`` section now (rank 0 writes)."""
    records.run_info.setdefault("applied", {}).update(applied)
    if records.is_writer:
        write_json_atomic(records.run_dir / RUN_FILE, records.run_info)
    log.info("applied: %s", applied)


def _autocast(settings: parallel.PrecisionSettings, device: torch.device):
    """Autocast to ``settings.autocast_dtype`` where FSDP's mixed precision does not
    already cast (DDP with bf16 or fp16); a disabled context otherwise."""
    dtype = parallel.DTYPES[settings.autocast_dtype or "bf16"]  # bf16: any valid one when off
    return torch.autocast(device.type, dtype=dtype, enabled=settings.autocast_dtype is not None)


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
