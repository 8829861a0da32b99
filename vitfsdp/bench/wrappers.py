"""What each data-parallel wrapper costs the host per training step, apart from arithmetic.

    python -m vitfsdp.bench wrappers [--depth 32] [--width 16] [--device auto] [--steps 30]
        [--repeats 3] [--out FILE.json]

One process, a world of 1 (gloo on CPU, NCCL on CUDA, over an in-memory store: no port).
The model is a timm ``VisionTransformer`` of ``--depth`` blocks so narrow (``--width``
channels, one head, 16 px inputs, batch 2) that its arithmetic is a small part of a step:
what a wrapper adds to the step time is its host work (hooks, flattening, views,
collectives of a world of 1, stream bookkeeping). The trainer's own step
(:func:`vitfsdp.torch_train.train_step`: forward, fp32 cross-entropy, backward, a foreach
AdamW step) runs for each path, in fp32:

- ``unwrapped``: the model alone;
- ``DDP``: ``DistributedDataParallel``;
- ``FSDP1 orig`` and ``FSDP1 flat``: ``FullyShardedDataParallel``, each block a unit, then
  the root (:func:`vitfsdp.parallel.wrap`; on a world of 1 torch runs ``NO_SHARD``), with
  ``use_orig_params=True`` (what compiled blocks need) and ``False`` (the default where
  the blocks are not compiled);
- ``FSDP2``: ``fully_shard`` on each block, then the root.

After a warm-up pass of each, the paths take turns ``--repeats`` times; each pass is the
median step time of ``--steps`` steps (synchronized per step on CUDA; one intra-op thread
on CPU). The report gives each
path's median over the passes (min-max), what it adds over ``unwrapped`` per step, and
that divided by its units (blocks + 1; DDP has none, so per block).

Why: on an H200, FSDP1's hooks kept ViT-H/14's step host-bound (docs/benchmarks.md, "GPU
figures"); this separates the wrappers' host cost from the model's arithmetic, on any
device, in a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from vitfsdp import provenance
from vitfsdp.bench import run
from vitfsdp.distributed import pick_device
from vitfsdp.models import block_classes
from vitfsdp.parallel import StrategyConfig, wrap
from vitfsdp.torch_train import train_step

#: The paths, in the order they take turns: name → (strategy, engine); ``None``: unwrapped.
PATHS: dict[str, tuple[StrategyConfig | None, str]] = {
    "unwrapped": (None, "fsdp1"),
    "DDP": (StrategyConfig(name="DDP", sharding_strategy="DDP"), "fsdp1"),
    "FSDP1 orig": (StrategyConfig(use_orig_params=True), "fsdp1"),
    "FSDP1 flat": (StrategyConfig(use_orig_params=False), "fsdp1"),
    "FSDP2": (StrategyConfig(), "fsdp2"),
}
#: Input side (pixels), patch side, classes and batch: the least arithmetic a ViT step has.
IMG, PATCH, CLASSES, BATCH = 16, 8, 10, 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m vitfsdp.bench wrappers",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=32,
                   help="blocks, each an FSDP unit (default 32, as ViT-H/14 and vit_1b)")
    p.add_argument("--width", type=int, default=16, help="channels (default 16)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--steps", type=int, default=30, help="timed steps per pass")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before each pass")
    p.add_argument("--repeats", type=int, default=3, help="timed passes of each path")
    p.add_argument("--out", type=Path, help="write the record as JSON to this file")
    args = p.parse_args(argv)
    for name in ("depth", "width", "steps", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name}={getattr(args, name)} must be >= 1")
    if args.warmup < 0:
        p.error(f"--warmup={args.warmup} must be >= 0")
    return args


def _model(depth: int, width: int) -> torch.nn.Module:
    """The narrow ViT (same seed each time: every path starts from the same weights)."""
    # timm on use: --help answers without it
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(img_size=IMG, patch_size=PATCH, embed_dim=width, depth=depth,
                             num_heads=1, mlp_ratio=1.0, num_classes=CLASSES)


def _wrapped(path: str, depth: int, width: int,
             device: torch.device) -> tuple[torch.nn.Module, dict]:  # fmt: skip
    """The model of ``path`` on ``device`` and what :func:`vitfsdp.parallel.wrap` applied
    (``{}`` unwrapped)."""
    strategy, engine = PATHS[path]
    model = _model(depth, width).to(device)
    if strategy is None:
        return model, {}
    return wrap(model, strategy, device=device, world_size=1, block_classes=block_classes(),
                engine=engine)


def _pass(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
          batch: tuple[torch.Tensor, torch.Tensor], steps: int, warmup: int) -> float:
    """The median seconds of ``steps`` steps after ``warmup`` untimed ones."""
    device, times = batch[0].device, []
    for i in range(warmup + steps):
        _sync(device)
        t0 = time.perf_counter()
        train_step(model, optimizer, batch, contextlib.nullcontext())
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def benchmark(args: argparse.Namespace) -> dict:
    """Each path's step times (seconds) and what it adds over ``unwrapped``; the record.

    Raises:
        RuntimeError: a process group is already initialized in this process.
    """
    if dist.is_initialized():
        raise RuntimeError("a process group is already initialized: run this benchmark in a "
                           "process of its own")
    device = pick_device(args.device, 0)
    if device.type == "cpu":
        torch.set_num_threads(1)  # host work is serial; a second thread only adds noise
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            store=dist.HashStore(), rank=0, world_size=1)
    try:
        generator = torch.Generator().manual_seed(1)
        batch = (torch.randn(BATCH, 3, IMG, IMG, generator=generator).to(device),
                 torch.randint(0, CLASSES, (BATCH,), generator=generator).to(device))
        setups, applied = {}, {}
        for path in PATHS:
            model, applied[path] = _wrapped(path, args.depth, args.width, device)
            setups[path] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4,
                                                     foreach=True))
        times: dict[str, list[float]] = {path: [] for path in PATHS}
        for i in range(args.repeats + 1):  # pass 0 warms every path up and is not kept
            for path, (model, optimizer) in setups.items():
                t = _pass(model, optimizer, batch, args.steps, args.warmup)
                if i:
                    times[path].append(t)
    finally:
        dist.destroy_process_group()
    base = statistics.median(times["unwrapped"])
    units = args.depth + 1
    paths = {}
    for path, ts in times.items():
        added = statistics.median(ts) - base
        paths[path] = {"applied": applied[path], "step_s": ts,
                       "median_step_s": statistics.median(ts),
                       "added_ms_per_step": added * 1e3,
                       "added_us_per_unit": added * 1e6 / (units if path != "DDP"
                                                           else args.depth)}
    return {"benchmark": "wrappers", "device": str(device), "depth": args.depth,
            "width": args.width, "units": units, "batch": BATCH, "img_size": IMG,
            "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
            "paths": paths, "versions": provenance.versions()}


def format_record(r: dict) -> str:
    """The terminal report of a :func:`benchmark` record: one row per path."""
    lines = [f"host cost of the wrappers: {r['depth']} blocks of width {r['width']} "
             f"({r['units']} FSDP units), batch {r['batch']} of {r['img_size']} px, on "
             f"{r['device']}, a world of 1; median of {r['repeats']} passes of "
             f"{r['steps']} steps",
             f"  {'path':<12} {'ms/step':>8} {'(min-max)':>16} {'added ms':>9} "
             f"{'added us/unit':>14}"]
    for path, p in r["paths"].items():
        spread = f"({1e3 * min(p['step_s']):.2f}-{1e3 * max(p['step_s']):.2f})"
        added = "" if path == "unwrapped" else f"{p['added_ms_per_step']:+.2f}"
        per = "" if path == "unwrapped" else f"{p['added_us_per_unit']:+.0f}"
        lines.append(f"  {path:<12} {1e3 * p['median_step_s']:>8.2f} {spread:>16} "
                     f"{added:>9} {per:>14}")
    lines.append("  (orig / flat: use_orig_params=True / False; DDP: per block; a negative "
                 "figure is below the noise of the machine)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m vitfsdp.bench wrappers``: print the table, write ``--out``; 0."""
    return run(argv, parse_args, benchmark, format_record)


if __name__ == "__main__":
    raise SystemExit(main())
