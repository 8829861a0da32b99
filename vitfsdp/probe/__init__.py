"""``python -m vitfsdp.probe``: measure a site before its sweep, so that the plan predicts
from the site's own figures instead of data sheets.

    python -m vitfsdp.probe -m model=vit_small_patch16_224,vit_base strategy=DDP,FULL_SHARD \\
        nodes=1,2,4 --out runs/sweep/my-study        # writes runs/sweep/my-study/probe.json
    python -m vitfsdp.plan -m ... cluster.probe=runs/sweep/my-study/probe.json

The overrides are the sweep's. For every world size of the sweep one job runs, as the
sweep's points would (locally: torchrun with ``cluster.gpus_per_node`` ranks a simulated
node), and measures with every rank busy at once (:mod:`vitfsdp.probe.measure`):

- the sweep's own GEMM shapes (every linear layer's forward, input and weight gradient) in
  the compute dtype: seconds and TFLOP/s per shape;
- the blocks' other ops at their shapes (LayerNorm, residual add, GELU or SwiGLU, fused or
  written-out attention), forward and backward;
- AdamW's step per parameter, and STREAM copy and triad bandwidth;
- all-gather, reduce-scatter and all-reduce over the groups the sweep's strategies form
  (shard groups, replica groups, the world), from 4 KiB to the largest buffer a point
  moves: time, latency and bus bandwidth against message size;
- how much of an asynchronous all-gather hides behind GEMMs on the same rank.

The result is ``probe.json`` (schema: :mod:`vitfsdp.plan.probed`). A world size whose job
fails is recorded ``failed`` with the reason (the log's tail) and the others go on. What the
plan does with it: docs/plan.md, "The probe".
"""

from __future__ import annotations

import math
from collections import defaultdict

from vitfsdp.plan.memory import fsdp_units, model_sizes
from vitfsdp.plan.timing import block_workload, collectives, outer_gemms

#: The largest parameter count AdamW is timed over (its time per parameter is flat above
#: a few million; the plan scales it to the shard).
OPTIMIZER_PARAMS_CAP = 16 * 1024 * 1024


def _dtypes(cfg, device_type: str) -> tuple[str, str, str]:
    """(compute, gather, reduce) dtypes of ``cfg`` on ``device_type`` (cpu | cuda)."""
    s = cfg.precision_settings(device_type)
    if not cfg.strategy.is_fsdp:
        return s.compute_dtype, "fp32", "fp32"
    return s.compute_dtype, s.param_dtype, s.reduce_dtype


def world_specs(cfgs, device_type: str = "cpu", extra=()) -> list[dict]:
    """What to measure at each world size of the points ``cfgs`` (RunConfigs), sorted by
    world size: the worker's spec (:mod:`vitfsdp.probe.worker`); ``extra`` configs add their
    shapes at the world sizes of ``cfgs`` (the framework probe's model)."""
    by_world: dict[int, list] = defaultdict(list)
    for cfg in cfgs:
        by_world[cfg.world_size].append(cfg)
    for cfg in extra:
        if cfg.world_size in by_world:
            by_world[cfg.world_size].append(cfg)
    return [_spec(world, points, device_type) for world, points in sorted(by_world.items())]


def _spec(world: int, cfgs: list, device_type: str) -> dict:
    gemms, ops, coll, shard_params = set(), set(), {}, 0
    overlap = None
    for cfg in cfgs:
        dtype, gather, reduce_ = _dtypes(cfg, device_type)
        block_g, block_o = block_workload(cfg.model.spec, cfg.model.num_tokens(),
                                          cfg.train.local_batch_size, cfg.kernels.fused_attn)
        for g in [*block_g, *outer_gemms(cfg)]:
            gemms |= {(g.m, g.n, g.k, dtype), (g.n, g.k, g.m, dtype), (g.m, g.k, g.n, dtype)}
        ops |= {(o.op, o.shape, dtype) for o in block_o}
        sizes = model_sizes(cfg.model, cfg.num_classes)
        group = cfg.strategy.shard_group(cfg.world_size)
        shard_params = max(shard_params, math.ceil(sizes.num_params / group))
        num_units, unit_params = fsdp_units(sizes, cfg.strategy.blocks_per_unit)
        for c in collectives(cfg, sizes.num_params, unit_params, num_units):
            if c.ranks < 2:
                continue
            key = (c.op, c.ranks, c.nodes, gather if c.op == "all_gather" else reduce_)
            coll[key] = max(coll.get(key, 0), int(c.size_bytes))
        if overlap is None or block_g[2].m * block_g[2].n > overlap["m"] * overlap["n"]:
            unit = sizes.num_params / (num_units + 1) * 4
            overlap = {"m": block_g[2].m, "n": block_g[2].n, "k": block_g[2].k,
                       "dtype": dtype, "size_bytes": int(unit)}
    first = cfgs[0]
    return {"world_size": world, "nodes": first.nodes,
            "ranks_per_node": first.cluster.gpus_per_node, "device": first.device,
            "gpu_expected": first.gpu_expected(),
            "gemms": sorted(gemms), "ops": sorted((o, list(s), d) for o, s, d in ops),
            "optimizer": {"impl": _adamw_impl(first, device_type),
                          "num_params": min(shard_params, OPTIMIZER_PARAMS_CAP)},
            "collectives": sorted([*k, v] for k, v in coll.items()), "overlap": overlap,
            "timeout_s": first.train.timeout_s}


def _adamw_impl(cfg, device_type: str) -> str:
    """The AdamW implementation a run of ``cfg`` uses (``kernels.adamw``; auto = torch's
    default for the device, fused on a GPU)."""
    if cfg.kernels.adamw != "auto":
        return cfg.kernels.adamw
    return "fused" if device_type == "cuda" else "auto"


__all__ = ["OPTIMIZER_PARAMS_CAP", "world_specs"]
