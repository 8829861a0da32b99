"""What each data-parallel wrapper costs the host per training step, apart from arithmetic.

    python -m vitfsdp.bench wrappers [--depth 32] [--width 16] [--device auto] [--steps 30]
        [--repeats 3] [--blocks-per-unit 4] [--compile off|on|both] [--clock auto|wall|cpu]
        [--out FILE.json]

One process, a world of 1 (gloo on CPU, NCCL on CUDA, over an in-memory store: no port).
The model is a timm ``VisionTransformer`` of ``--depth`` blocks so narrow (``--width``
channels, one head, 16 px inputs, batch 2) that its arithmetic is a small part of a step:
what a wrapper adds to the step time is its host work (hooks, flattening, views,
collectives of a world of 1, stream bookkeeping). The trainer's own step
(:func:`vitfsdp.torch_train.train_step`: forward, fp32 cross-entropy, backward, a foreach
AdamW step) runs for each path, in fp32. The paths (:func:`paths`), eager and, with
``--compile on|both``, with every block ``torch.compile``'d as the trainer compiles them:

- ``unwrapped``: the model alone, the baseline of the paths of its compile setting;
- ``DDP``: ``DistributedDataParallel``;
- ``FSDP1 orig`` and ``FSDP1 flat``: ``FullyShardedDataParallel``, each block a unit, then
  the root (:func:`vitfsdp.parallel.wrap`; on a world of 1 torch runs ``NO_SHARD``), with
  ``use_orig_params=True`` (what compiled blocks need) and ``False`` (eager only);
- ``FSDP2``: ``fully_shard`` on each block, then the root;
- ``... xK``: the same with ``--blocks-per-unit`` K consecutive blocks a unit
  (``strategy.blocks_per_unit``).

After a warm-up pass of each, the paths take turns ``--repeats`` times; each pass is the
median step time of ``--steps`` steps (synchronized per step on CUDA; one intra-op thread
on CPU), read from the wall clock on a GPU and from the stepping thread's CPU time on a CPU
device (``--clock``: on a shared machine the wall clock counts the other processes' turns
on the core, CPU time what the host itself spent). The report gives each path's median
over the passes (min-max), what it adds over the unwrapped model of its compile setting
per step, per FSDP unit (its units + the root; DDP has none, so per block) and per
transformer block, and names the FSDP path that adds the least per block.

Why: on the H100, FSDP1's hooks kept ViT-H/14's step host-bound at batch 32 (the GPU busy
37% of the step; docs/benchmarks.md, "GPU figures"); this separates the wrappers' host cost
from the model's arithmetic, on any device, in a minute. The plan's per-unit host term
without a probe is this benchmark's figure on the H100 (docs/plan.md).
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from vitfsdp import provenance
from vitfsdp.bench import run
from vitfsdp.distributed import pick_device
from vitfsdp.models import block_classes
from vitfsdp.parallel import StrategyConfig, wrap
from vitfsdp.torch_train import train_step


@dataclass(frozen=True)
class Path:
    """One timed path: ``strategy`` None is the unwrapped model."""

    name: str
    strategy: StrategyConfig | None
    engine: str = "fsdp1"
    compiled: bool = False

    @property
    def label(self) -> str:
        """The name with its compile setting, as the report and the record key it."""
        return f"{self.name} (compiled)" if self.compiled else self.name


def paths(blocks_per_unit: int, compile_modes: tuple[bool, ...]) -> list[Path]:
    """The paths, in the order they take turns (module docstring), for each compile setting
    of ``compile_modes``; ``blocks_per_unit`` 1 leaves out the ``xK`` paths. FSDP1 on flat
    parameters only eager: Dynamo compiles inside FSDP1 only with the original parameters
    (:func:`vitfsdp.parallel.use_orig_params`)."""
    k = blocks_per_unit
    out = []
    for compiled in compile_modes:
        fsdp1 = [("FSDP1 orig", True)] + ([] if compiled else [("FSDP1 flat", False)])
        rows = [("unwrapped", None, "fsdp1"),
                ("DDP", StrategyConfig(name="DDP", sharding_strategy="DDP"), "fsdp1")]
        for name, orig in fsdp1:
            rows.append((name, StrategyConfig(use_orig_params=orig), "fsdp1"))
            if k > 1:
                rows.append((f"{name} x{k}",
                             StrategyConfig(use_orig_params=orig, blocks_per_unit=k), "fsdp1"))
        rows.append(("FSDP2", StrategyConfig(), "fsdp2"))
        if k > 1:
            rows.append((f"FSDP2 x{k}", StrategyConfig(blocks_per_unit=k), "fsdp2"))
        out += [Path(name, strategy, engine, compiled) for name, strategy, engine in rows]
    return out


#: ``--compile``: the compile settings timed.
COMPILE_MODES = {"off": (False,), "on": (True,), "both": (False, True)}

#: ``--clock``: what a step's seconds are read from. ``wall``: ``time.perf_counter`` (what a
#: GPU step takes, the host's waits included). ``cpu``: ``time.thread_time``, the CPU time of
#: the thread that runs the step (on a CPU device autograd runs backward on it too): what
#: the host spent, apart from time lost to other processes on a shared machine. ``auto``:
#: ``cpu`` on a CPU device, ``wall`` on a GPU.
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
#: Input side (pixels), patch side, classes and batch: the least arithmetic a ViT step has.
IMG, PATCH, CLASSES, BATCH = 16, 8, 10, 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m vitfsdp.bench wrappers",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=32,
                   help="transformer blocks (default 32, as ViT-H/14 and vit_1b)")
    p.add_argument("--width", type=int, default=16, help="channels (default 16)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--steps", type=int, default=30, help="timed steps per pass")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before each pass")
    p.add_argument("--repeats", type=int, default=3, help="timed passes of each path")
    p.add_argument("--blocks-per-unit", type=int, default=4,
                   help="consecutive blocks a unit of the xK paths (default 4; 1 leaves "
                        "them out)")
    p.add_argument("--compile", choices=list(COMPILE_MODES), default="off",
                   help="time the paths eager (off, the default), with compiled blocks (on), "
                        "or both")
    p.add_argument("--clock", choices=["auto", *CLOCKS], default="auto",
                   help="wall (perf_counter) or cpu (the stepping thread's CPU time: steady "
                        "on a shared machine); auto: cpu on a CPU device, wall on a GPU")
    p.add_argument("--out", type=pathlib.Path, help="write the record as JSON to this file")
    args = p.parse_args(argv)
    for name in ("depth", "width", "steps", "repeats", "blocks_per_unit"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
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


def _wrapped(path: Path, depth: int, width: int,
             device: torch.device) -> tuple[torch.nn.Module, dict]:  # fmt: skip
    """The model of ``path`` on ``device`` and what :func:`vitfsdp.parallel.wrap` applied
    (``{}`` unwrapped)."""
    model = _model(depth, width).to(device)
    if path.strategy is None:
        if path.compiled:
            for block in model.blocks:
                block.compile()
        return model, {}
    return wrap(model, path.strategy, device=device, world_size=1,
                block_classes=block_classes(), engine=path.engine,
                compile_blocks=path.compiled)


def _pass(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
          batch: tuple[torch.Tensor, torch.Tensor], steps: int, warmup: int,
          clock=time.perf_counter) -> float:
    """The median seconds of ``steps`` steps after ``warmup`` untimed ones, by ``clock``."""
    device, times = batch[0].device, []
    for i in range(warmup + steps):
        _sync(device)
        t0 = clock()
        train_step(model, optimizer, batch, contextlib.nullcontext())
        _sync(device)
        if i >= warmup:
            times.append(clock() - t0)
    return statistics.median(times)



def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def benchmark(args: argparse.Namespace) -> dict:
    """Each path's step times (seconds) and what it adds over the unwrapped model of its
    compile setting; the record (``paths`` keyed by :attr:`Path.label`).

    Raises:
        RuntimeError: a process group is already initialized in this process.
    """
    if dist.is_initialized():
        raise RuntimeError("a process group is already initialized: run this benchmark in a "
                           "process of its own")
    device = pick_device(args.device, 0)
    if device.type == "cpu":
        torch.set_num_threads(1)  # host work is serial; a second thread only adds noise
    todo = paths(args.blocks_per_unit, COMPILE_MODES[args.compile])
    clock = args.clock if args.clock != "auto" else ("cpu" if device.type == "cpu" else "wall")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            store=dist.HashStore(), rank=0, world_size=1)
    try:
        times = _time_paths(todo, args, device, CLOCKS[clock])
    finally:
        dist.destroy_process_group()
    return {"benchmark": "wrappers", "device": str(device), "depth": args.depth,
            "width": args.width, "units": args.depth + 1, "batch": BATCH, "img_size": IMG,
            "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
            "blocks_per_unit": args.blocks_per_unit, "compile": args.compile, "clock": clock,
            "paths": _figures(todo, times, args.depth), "versions": provenance.versions()}


def _time_paths(todo: list[Path], args: argparse.Namespace, device: torch.device,
                clock) -> dict[str, tuple[list[float], dict]]:
    """Each path's kept pass times (seconds) and what :func:`vitfsdp.parallel.wrap` applied,
    by label: the paths take turns, pass 0 warms every path up and is not kept."""
    generator = torch.Generator().manual_seed(1)
    batch = (torch.randn(BATCH, 3, IMG, IMG, generator=generator).to(device),
             torch.randint(0, CLASSES, (BATCH,), generator=generator).to(device))
    setups, applied = {}, {}
    for path in todo:
        model, applied[path.label] = _wrapped(path, args.depth, args.width, device)
        setups[path.label] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4,
                                                       foreach=True))
    times: dict[str, list[float]] = {label: [] for label in setups}
    for i in range(args.repeats + 1):
        for label, (model, optimizer) in setups.items():
            t = _pass(model, optimizer, batch, args.steps, args.warmup, clock)
            if i:
                times[label].append(t)
    return {label: (times[label], applied[label]) for label in setups}


def _figures(todo: list[Path], times: dict[str, tuple[list[float], dict]],
             depth: int) -> dict[str, dict]:
    """Per path: step times, the median, and what it adds over the unwrapped model of its
    compile setting per step (ms), per FSDP unit (its units + the root; DDP: per block) and
    per transformer block (µs)."""
    base = {p.compiled: statistics.median(times[p.label][0])
            for p in todo if p.strategy is None}
    out = {}
    for p in todo:
        ts, applied = times[p.label]
        added = statistics.median(ts) - base[p.compiled]
        units = applied.get("fsdp_units")
        out[p.label] = {"applied": applied, "compiled": p.compiled, "engine": p.engine,
                        "blocks_per_unit": p.strategy.blocks_per_unit if p.strategy else None,
                        "step_s": ts, "median_step_s": statistics.median(ts),
                        "added_ms_per_step": added * 1e3,
                        "added_us_per_unit": added * 1e6 / (units + 1 if units else depth),
                        "added_us_per_block": added * 1e6 / depth}
    return out


def best_fsdp(record: dict) -> tuple[str, dict]:
    """(label, figures) of the FSDP path of ``record`` that adds the least host time per
    transformer block."""
    fsdp = {k: v for k, v in record["paths"].items() if v["applied"].get("fsdp_units")}
    label = min(fsdp, key=lambda k: fsdp[k]["added_us_per_block"])
    return label, fsdp[label]


def format_record(r: dict) -> str:
    """The terminal report of a :func:`benchmark` record: one row per path, then the FSDP
    path that adds the least per block."""
    lines = [f"host cost of the wrappers: {r['depth']} blocks of width {r['width']}, batch "
             f"{r['batch']} of {r['img_size']} px, on {r['device']}, a world of 1; median of "
             f"{r['repeats']} passes of {r['steps']} steps, {r.get('clock', 'wall')} clock",
             f"  {'path':<26} {'units':>5} {'ms/step':>8} {'(min-max)':>16} {'added ms':>9} "
             f"{'us/unit':>8} {'us/block':>9}"]
    for label, p in r["paths"].items():
        spread = f"({1e3 * min(p['step_s']):.2f}-{1e3 * max(p['step_s']):.2f})"
        units = p["applied"].get("fsdp_units")
        base = p["applied"] == {}
        added = "" if base else f"{p['added_ms_per_step']:+.2f}"
        per_unit = "" if base else f"{p['added_us_per_unit']:+.0f}"
        per_block = "" if base else f"{p['added_us_per_block']:+.0f}"
        lines.append(f"  {label:<26} {units + 1 if units else '':>5} "
                     f"{1e3 * p['median_step_s']:>8.2f} {spread:>16} {added:>9} "
                     f"{per_unit:>8} {per_block:>9}")
    label, best = best_fsdp(r)
    lines.append(f"  least added by an FSDP path: {label}, {best['added_us_per_block']:+.0f} us "
                 "per block")
    lines.append("  (added: over the unwrapped model of the same compile setting; units: FSDP "
                 "units with the root; orig / flat: use_orig_params=True / False; xK: K blocks "
                 "a unit; DDP: per block; a negative figure is below the noise of the machine, "
                 "or a wrapper whose flat parameters make AdamW's step cheaper)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m vitfsdp.bench wrappers``: print the table, write ``--out``; 0."""
    return run(argv, parse_args, benchmark, format_record)


if __name__ == "__main__":
    raise SystemExit(main())
