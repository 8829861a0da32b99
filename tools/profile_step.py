"""Where one point's step time goes, torch or JAX, measured in the ranks themselves.

Run it under torchrun, one process per rank, with the point's overrides (as for
``python -m vitfsdp.train``)::

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        tools/profile_step.py framework=jax strategy=FULL_SHARD model=vit_tiny \\
        data=synthetic device=cpu nodes=1 cluster.gpus_per_node=2 train.local_batch_size=16

It builds the model, state and step as the trainer does and times ``--windows`` windows of
``--steps`` steps (wall and this process's CPU seconds, the slowest rank's wall), after one
warm-up window. A JAX point times two steps, windows interleaved so that both see the same
host load: ``explicit`` (the trainer's: :func:`vitfsdp.jax.sharding.sharded_value_and_grad`,
one collective per unit on a flat buffer) and ``xla`` (gradients constrained to the
parameters' layout and XLA's SPMD partitioner placing the collectives, one per parameter);
it prints the collectives in each compiled step. ``--trace DIR`` writes a profiler trace of
one window per step (``jax.profiler``, or ``torch.profiler`` with its operator table printed);
``--cprofile FILE`` a Python profile of rank 0's timed windows. Rank 0 prints one line per
step kind: median images/s, step ms, CPU share of the wall time.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import re
import statistics
import time
from pathlib import Path

from vitfsdp.config import CONF_DIR, RunConfig, register_configs, to_run_config
from vitfsdp.distributed import DistEnv, discover

_OPEN: list = []
COLLECTIVE = re.compile(r" (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
                        r"(?:-start)?\(")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the point")
    parser.add_argument("--steps", type=int, default=10, help="steps per window")
    parser.add_argument("--windows", type=int, default=6, help="timed windows per step kind")
    parser.add_argument("--trace", type=Path, help="profiler trace folder")
    parser.add_argument("--cprofile", type=Path, help="rank 0's cProfile output file")
    args = parser.parse_args()
    cfg, env = compose(args.overrides), discover()
    if env.world_size != cfg.world_size:
        raise SystemExit(f"started {env.world_size} processes for nodes × cluster.gpus_per_node"
                         f" = {cfg.world_size} ranks; start as many (torchrun --nproc_per_node)")
    if cfg.framework == "jax":
        steps = jax_steps(cfg, env)
    else:
        steps = torch_steps(cfg, env)
    profile = cProfile.Profile() if args.cprofile and env.rank == 0 else None
    times = {name: [] for name in steps}
    for fn in steps.values():  # warm-up window
        fn(args.steps)
    for _ in range(args.windows):
        for name, fn in steps.items():
            if profile:
                profile.enable()
            times[name].append(fn(args.steps))
            if profile:
                profile.disable()
    if args.trace:
        for name, fn in steps.items():
            trace(cfg, fn, args.steps, args.trace / name)
    if profile:
        profile.dump_stats(args.cprofile)
    report(cfg, times, args.steps, env)


def compose(overrides: list[str]) -> RunConfig:
    """The point's RunConfig, composed as ``vitfsdp.train`` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return to_run_config(hydra_compose("config", overrides=overrides))


def jax_steps(cfg: RunConfig, env: DistEnv) -> dict:
    """``{kind: run(num_steps) → (wall s, cpu s)}`` for the trainer's step and the SPMD one."""
    import jax
    import optax

    from vitfsdp.jax import distributed as jdist
    from vitfsdp.jax import sharding
    from vitfsdp.jax import train as jtrain
    from vitfsdp.jax.model import build_model

    jdist.initialize(env, cfg.device, cfg.train.timeout_s)
    jax.config.update("jax_log_compiles", True)
    mesh = sharding.make_mesh(cfg.strategy)
    model = build_model(cfg.model, cfg.num_classes,
                        precision=cfg.resolved_precision(jtrain.device_type()),
                        fused_attn=cfg.kernels.fused_attn,
                        remat=cfg.train.activation_checkpointing)
    tx = optax.adamw(cfg.train.lr, weight_decay=cfg.train.weight_decay)
    batch = next(jtrain.device_batches(cfg, mesh))
    out = {}
    for kind in jtrain.STEP_COLLECTIVES:
        state, shardings = jtrain.init_state(model, tx, mesh, cfg.train.seed)
        step = jtrain.make_train_step(model, tx, mesh, shardings,
                                      kind).lower(state, *batch).compile()
        ops = collections.Counter(COLLECTIVE.findall(step.as_text()))
        if env.rank == 0:
            print(f"{kind}: collectives in the compiled step {dict(ops)}", flush=True)
        out[kind] = _jax_runner(step, state, batch)
    return out


def _jax_runner(step, state, batch):
    import jax

    holder = {"state": state}

    def run(num_steps: int) -> tuple[float, float]:
        jax.block_until_ready(holder["state"])
        t, c = time.perf_counter(), time.process_time()
        for _ in range(num_steps):
            holder["state"], loss = step(holder["state"], *batch)
        jax.block_until_ready((holder["state"], loss))
        return time.perf_counter() - t, time.process_time() - c

    return run


def torch_steps(cfg: RunConfig, env: DistEnv) -> dict:
    """``{"torch": run(num_steps) → (wall s, cpu s)}``: the trainer's build and step."""
    import torch

    from vitfsdp import data, distributed
    from vitfsdp.torch_train import autocast_context, build, build_optimizer, train_step

    device = distributed.pick_device(cfg.device, env.local_rank)
    group = distributed.process_group(env, device, cfg.train.timeout_s)
    group.__enter__()
    _OPEN.append(group)  # open until the process ends (a dropped generator would close it)
    model, _ = build(cfg, env, device)
    optimizer, _ = build_optimizer(model.parameters(), cfg.train, cfg.kernels, device)
    batches = data.batches(cfg.data, img_size=cfg.model.resolved_img_size(),
                           local_batch_size=cfg.train.local_batch_size, rank=env.rank,
                           world_size=env.world_size, device=device, seed=cfg.train.seed)
    autocast = autocast_context(cfg.precision_settings(device.type).autocast_dtype, device)

    def run(num_steps: int) -> tuple[float, float]:
        torch.distributed.barrier()
        t, c = time.perf_counter(), time.process_time()
        for _ in range(num_steps):
            loss = train_step(model, optimizer, next(batches), autocast)
        loss.item()
        return time.perf_counter() - t, time.process_time() - c

    return {"torch": run}


def trace(cfg: RunConfig, run, num_steps: int, folder: Path) -> None:
    """One window of ``run`` under the framework's profiler, written to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    if cfg.framework == "jax":
        import jax

        if os.environ.get("RANK", "0") != "0":  # one trace per host: rank 0's
            run(num_steps)
            return
        with jax.profiler.trace(str(folder), create_perfetto_trace=True):
            run(num_steps)
        return
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run(num_steps)
    prof.export_chrome_trace(str(folder / f"rank{os.environ.get('RANK', '0')}.json"))
    if os.environ.get("RANK", "0") == "0":
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def report(cfg: RunConfig, times: dict, num_steps: int, env: DistEnv) -> None:
    """Rank 0 prints, per step kind, the median over windows of the slowest rank's figures."""
    global_batch = cfg.train.local_batch_size * cfg.world_size
    for name, rows in times.items():
        walls = [_slowest(w, cfg) for w, _ in rows]
        wall = statistics.median(walls)
        cpu = statistics.median(c / w for w, c in rows)
        if env.rank == 0:
            print(f"{name}: {global_batch * num_steps / wall:.1f} images/s, step "
                  f"{1e3 * wall / num_steps:.1f} ms (windows {', '.join(f'{w:.2f}' for w in walls)}"
                  f" s), rank 0 CPU {100 * cpu:.0f}% of wall", flush=True)


def _slowest(wall: float, cfg: RunConfig) -> float:
    """The largest ``wall`` over the ranks."""
    if cfg.framework == "jax":
        from vitfsdp.jax.distributed import gather_floats

        return float(gather_floats([wall]).max())
    import torch

    t = torch.tensor([wall])
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return float(t)


if __name__ == "__main__":
    main()
