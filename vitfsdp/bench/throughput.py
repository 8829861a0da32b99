"""Single-device training throughput: our FSDP step vs the unwrapped model vs timm.

    python -m vitfsdp.bench --models vit_base,vit_large_patch16_224,vit_huge_patch14_224,vit_1b \\
        --batch 32 --precision bf16 --out runs/bench/h100

For each model, in one process on one device, three measurements of the same training step
(same batch, precision, attention kernel, compile choice, AdamW implementation, data):

``fsdp``
    our training run itself: :func:`vitfsdp.torch_train.run` on a config composed from
    ``conf/config.yaml`` like any sweep point (``strategy=FULL_SHARD nodes=1
    cluster.gpus_per_node=1``, the default recipe), so the model is built and wrapped by
    :func:`vitfsdp.torch_train.build` / :func:`vitfsdp.parallel.wrap` (FSDP on a world of 1) and
    timed by the training loop.
``unwrapped``
    the same model, initial weights, kernels and :func:`vitfsdp.torch_train.train_step` without
    FSDP (bf16/fp16 by autocast instead of FSDP's parameter casting): what FSDP costs on
    one GPU (target: the ``fsdp`` step within 3% of it).
``timm``
    timm's own training benchmark loop, built from timm's public API as ``benchmark.py``'s
    ``TrainBenchmarkRunner`` does (huggingface/pytorch-image-models, ``benchmark.py``:
    ``create_model``, ``create_optimizer_v2``, the step ``zero_grad``; forward, loss and
    backward under autocast; ``optimizer.step``; the whole model ``torch.compile``-d for
    ``--torchcompile``), with AdamW of our implementation and learning rate instead of its
    default SGD; the model is ``timm.create_model`` of the registered name, or of a
    registered ViT with our variant's architecture as keyword arguments, and must have our
    parameter count (target: ours / timm >= 1.0).

All three are timed alike: the device is synchronized only at the boundaries of windows of
``--log-every`` steps (:class:`vitfsdp.metrics.WindowMeter`), the first ``--warmup`` steps
(compilation, allocator, cuDNN autotuning) left out, the median window reported.
benchmark.py synchronizes after every step; that would charge timm one host round trip per
step that our loop does not pay, so it is not copied.

Each path is measured ``--repeats`` times (default 3), the paths taking turns (fsdp,
unwrapped, timm, fsdp, ...) so that a machine that slows down or speeds up during the run
reaches all three alike; the table gives each path's median images/s over its repeats with
the minimum and maximum beside it, and one warning line names the paths whose repeats spread
more than :data:`~vitfsdp.bench.options.SPREAD_WARN` of their median (three back-to-back
single measurements on a loaded 2-core machine once gave ours/timm 17.35, 1.156 and 0.474).
Each measurement is a run directory ``OUT/<model>/<path>/repeat_<r>/`` with ``run.json``,
``metrics.jsonl`` and ``summary.json`` (:mod:`vitfsdp.records`); ``OUT/bench.csv`` and
``OUT/bench.json`` hold the table (``bench.json`` also every measurement's row). Without
a GPU the defaults shrink to ``vit_tiny``, a small batch and a few fp32 steps, so the CPU run
takes seconds and still goes through all three paths.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import gzip
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pandas as pd
import timm
import torch
import torch.distributed as dist
from hydra import compose, initialize_config_dir
from timm.layers import SwiGLU
from timm.optim import create_optimizer_v2

from vitfsdp import data, distributed, failures, models, parallel, provenance, torch_train
from vitfsdp.bench.options import PATHS as PATHS  # noqa: F401 (re-exported)
from vitfsdp.bench.options import SPREAD_WARN, BenchOptions, parse_args
from vitfsdp.config import CONF_DIR, RunConfig, register_configs, to_run_config
from vitfsdp.core.atomic import write_atomic
from vitfsdp.core.loop import windows
from vitfsdp.core.resolved import Resolved
from vitfsdp.core.throughput import HOST_BOUND_BUSY_FRAC
from vitfsdp.metrics import DeviceMemoryProbe, WindowMeter, device_info
from vitfsdp.records import (
    RUN_FILE,
    SUMMARY_FILE,
    RunRecords,
    mark_failed,
    read_json,
    write_json_atomic,
)

log = logging.getLogger("vitfsdp.bench")

#: The benchmark's targets (docs/benchmarks.md), checked on a GPU only: MFU of ViT-H/14 bf16
#: at a local batch >= 32 against the device's dense bf16 peak (989 TFLOP/s on an H100 SXM;
#: 50 %, with 40 % the floor below which the profile must say where the time goes),
#: ours / timm and FSDP / unwrapped in the same run.
TARGET_MODEL, TARGET_MFU, TARGET_MIN_BATCH = "vit_huge_patch14_224", 0.50, 32
FLOOR_MFU = 0.40
TARGET_VS_TIMM, TARGET_VS_UNWRAPPED = 1.05, 0.97
#: bench.csv's columns under timm's benchmark.py names where they mean the same thing, so
#: the two CSVs join on model: ours -> timm's (timm: ``train_step_time`` in ms,
#: ``param_count`` in millions).
TIMM_COLUMNS = {"batch": "train_batch_size", "img_size": "train_img_size",
                "ips": "train_samples_per_sec"}
#: timm's registered ViT whose constructor takes our variants' architecture as keywords.
TIMM_BASE_VIT = "vit_base_patch16_224"
#: torch.profiler's schedule before the profiled steps: (steps waited, steps warming it up).
PROFILE_SCHEDULE = (1, 2)
#: A profile's compressed trace above this many MB is not kept (ops.txt says so).
MAX_TRACE_MB = 8
#: Columns of the printed table: (column of bench.csv, header); images/s is the median over
#: the repeats, min and max their range, spread (max - min) / median.
TABLE = (("model", "model"), ("path", "path"), ("wrapper", "wrapper"), ("batch", "batch"),
         ("precision", "precision"), ("ips", "images/s"), ("ips_min", "min"),
         ("ips_max", "max"), ("repeat_spread", "spread"), ("tflops_per_gpu", "TFLOP/s"),
         ("mfu", "MFU"), ("vs_timm", "ips/timm"), ("vs_unwrapped", "ips/unwrapped"),
         ("status", "status"))


def main(argv: Sequence[str]) -> int:
    """Run the benchmark of ``argv``, print the table and the target checks.

    Returns:
        0 when every measurement completed and no target check failed (targets are checked
        on a GPU only), 1 otherwise (the table and the FAIL lines say which), 2 for bad
        arguments.
    """
    provenance.setup_logging(0)
    try:
        opts = parse_args(argv)
        table = run_bench(opts)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(table))
    if warning := spread_warning(table):
        print(warning)
    checks = check_targets(table)
    if not checks:
        print("targets: none checked (they apply to a GPU run; this one ran on "
              f"{table['device_type'].iloc[0] if len(table) else 'no device'})")
    for line in checks:
        print(line)
    failed = any(line.startswith("FAIL") for line in checks)
    return 0 if (table["status"] == "completed").all() and not failed else 1


def run_bench(opts: BenchOptions) -> pd.DataFrame:
    """Measure every model of ``opts`` three ways (:data:`PATHS`, or ``opts.paths``) on one
    device.

    Returns:
        One row per (model, path), as in ``OUT/bench.csv`` (:func:`summarize_repeats` of the
        ``opts.repeats`` measurements of each): model, path, wrapper, batch, precision, ips
        (images/s), tflops_per_gpu (model FLOPs: 3 × forward), mfu (``None`` without a known
        peak, e.g. on CPU), step_time_s, ips_spread (over one measurement's windows),
        ips_min, ips_max, repeat_spread, num_repeats, num_completed, compile, adamw,
        num_params, vs_timm / vs_unwrapped (this row's ips over that path's for the same
        model), status, run_dir.

    Raises:
        ValueError: an unknown model, a config the overrides make invalid, a non-empty
            measurement folder, or timm's model not matching ours.
    """
    device = distributed.pick_device(opts.device, 0)
    opts = opts.resolve(device.type)
    cfgs = {name: bench_config(name, opts, device) for name in opts.models}
    for name in opts.models:
        _check_empty(opts.out / name)
    rows = []
    for name, cfg in cfgs.items():
        log.info("benchmarking %s: batch %d, %d steps (%d warm-up), %d repeats of each path",
                 name, opts.batch, opts.steps, opts.warmup, opts.repeats)
        for repeat in range(opts.repeats):  # the paths take turns: a drift reaches all three
            labelled = dataclasses.replace(cfg, repeat=repeat)  # run.json's repeat label
            for path, measure in (("fsdp", _fsdp), ("unwrapped", _unwrapped), ("timm", _timm)):
                if opts.paths and path not in opts.paths:
                    continue
                run_dir = opts.out / name / path / f"repeat_{repeat}"
                _guarded(lambda m=measure, d=run_dir, c=labelled: m(c, device, d), run_dir,
                         device)
                rows.append({**_row(name, path, run_dir), "repeat": repeat,
                             "device_type": device.type})
                # the rows so far: a run stopped by a deadline keeps what it measured
                write_csv(summarize_repeats(pd.DataFrame(rows)), opts.out)
        if opts.profile_steps > 0:
            _guarded(lambda c=cfg, n=name: profile_fsdp_step(c, device, opts.out / n /
                                                             "profile", opts.profile_steps),
                     None, device)
    measurements = pd.DataFrame(rows)
    table = summarize_repeats(measurements)
    write_csv(table, opts.out)
    write_json_atomic(opts.out / "bench.json", {
        "options": {k: str(v) if isinstance(v, Path) else v
                    for k, v in dataclasses.asdict(opts).items()},
        "device": device_info(device),
        "rows": _records(table), "measurements": _records(measurements),
        "checks": check_targets(table), "warnings": [w for w in [spread_warning(table)] if w],
        **provenance.collect(driver=DeviceMemoryProbe(device).driver_version)})
    log.info("wrote %s and %s", opts.out / "bench.csv", opts.out / "bench.json")
    return table


def bench_config(model: str, opts: BenchOptions, device: torch.device) -> RunConfig:
    """The run config of ``model`` for this benchmark: ``conf/config.yaml`` composed as a
    sweep point would be, on one process (``nodes=1 cluster.gpus_per_node=1``), FULL_SHARD,
    synthetic data, ``opts``' batch, steps and precision, then ``opts.overrides``.

    Raises:
        ValueError: the composed config is invalid (unknown model, bad override).
    """
    overrides = [f"model={model}", "strategy=FULL_SHARD", "nodes=1", "cluster.gpus_per_node=1",
                 "data=synthetic", f"device={device.type}", f"precision={opts.precision}",
                 f"train.local_batch_size={opts.batch}", f"train.steps={opts.steps}",
                 f"train.warmup_steps={opts.warmup}", f"train.log_every={opts.log_every}",
                 *opts.overrides]
    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = to_run_config(compose("config", overrides=overrides))
    except ValueError:
        raise
    except Exception as e:  # Hydra's own errors (unknown option, wrong type): one line
        raise ValueError(f"{' '.join(overrides)}: {str(e).splitlines()[0]}") from e
    if cfg.train.activation_checkpointing:
        log.warning("train.activation_checkpointing applies to the fsdp path only; its "
                    "ratios to the other paths then include the recomputation")
    return cfg


# --- the three measurements ---------------------------------------------------------------


def _fsdp(cfg: RunConfig, device: torch.device, run_dir: Path) -> None:
    """Our training run, exactly as a sweep point runs it (records written by torch_train.run)."""
    torch_train.run(cfg, distributed.DistEnv(), device, run_dir)


def _unwrapped(cfg: RunConfig, device: torch.device, run_dir: Path) -> None:
    """The same model, weights, kernels and train_step, without FSDP."""
    numerics = torch_train.apply_numerics(cfg.kernels)
    resolved = torch_train.resolve(cfg, distributed.DistEnv(), device)
    torch.manual_seed(cfg.train.seed)
    model = models.build_model(cfg.model, cfg.num_classes, device="meta")
    num_attn = models.set_fused_attn(model, resolved.fused_attn)
    models.ViTInit(model, cfg.train.seed).init_model_(model.to_empty(device=device))
    compiled = resolved.compile
    blocks = [m for m in model.modules() if type(m) in models.block_classes()]
    for block in blocks if compiled else []:
        block.compile()  # in place, as vitfsdp.parallel compiles the FSDP units
    optimizer, adamw = torch_train.build_optimizer(model.parameters(), cfg.train, cfg.kernels,
                                                   device, resolved.adamw)
    # the run's precision as DDP applies it (autocast), not FSDP's parameter casting
    settings = parallel.resolve_precision(resolved.precision, parallel.MixedPrecisionConfig(),
                                          is_fsdp=False, engine=cfg.engine,
                                          device_type=device.type)
    autocast = torch_train.autocast_context(settings.autocast_dtype, device)
    scaler = parallel.grad_scaler(settings, device)
    applied = numerics | {"precision": {"name": resolved.precision,
                                        **dataclasses.asdict(settings)},
                          "fused_attn": cfg.kernels.fused_attn, "fused_attn_modules": num_attn,
                          "compile": "per_block" if compiled else "off",
                          "compiled_blocks": len(blocks) if compiled else 0, "adamw": adamw}
    records = _start(cfg, device, run_dir, "unwrapped", model, applied, "none", resolved)
    batches = _batches(cfg, device)
    _measure(lambda: torch_train.train_step(model, optimizer, next(batches), autocast, scaler),
             cfg, device, records, resolved)


def _timm(cfg: RunConfig, device: torch.device, run_dir: Path) -> None:
    """timm's training benchmark loop (benchmark.py TrainBenchmarkRunner) at our settings."""
    numerics = torch_train.apply_numerics(cfg.kernels)
    resolved = torch_train.resolve(cfg, distributed.DistEnv(), device)
    name, kwargs = timm_model_args(cfg.model, cfg.num_classes)
    with torch.device(device):
        model = timm.create_model(name, pretrained=False, **kwargs)
    _check_same_size(cfg, model, name)
    model.train()
    num_attn = models.set_fused_attn(model, resolved.fused_attn)
    impl = resolved.adamw
    optimizer = create_optimizer_v2(model, opt="adamw", lr=cfg.train.lr,
                                    weight_decay=cfg.train.weight_decay,
                                    **torch_train.ADAMW_FLAGS[impl])
    impl = impl if impl != "auto" else torch_train.default_adamw(list(model.parameters()))
    compiled = resolved.compile
    if compiled:  # benchmark.py --torchcompile: the whole model (after the optimizer here,
        model = torch.compile(model)  # so timm's weight-decay groups see plain names)
    precision = resolved.precision
    autocast_dtype = None if precision == "fp32" else precision  # benchmark.py --amp
    autocast = torch_train.autocast_context(autocast_dtype, device)
    img = cfg.model.resolved_img_size()
    inputs = torch.randn((cfg.train.local_batch_size, 3, img, img), device=device)
    applied = numerics | {"precision": {"name": precision, "autocast_dtype": autocast_dtype},
                          "fused_attn": cfg.kernels.fused_attn, "fused_attn_modules": num_attn,
                          "compile": "whole_model" if compiled else "off", "adamw": impl,
                          "timm_model": name,
                          "timm_kwargs": {k: getattr(v, "__name__", v) for k, v in kwargs.items()}}
    records = _start(cfg, device, run_dir, "timm", model, applied, "timm", resolved)
    loss_fn = torch.nn.CrossEntropyLoss()
    _measure(lambda: timm_train_step(model, optimizer, loss_fn, inputs, kwargs["num_classes"],
                                     autocast), cfg, device, records, resolved)


def write_csv(table: pd.DataFrame, out: Path) -> Path:
    """``out/bench.csv`` (:func:`csv_table` of ``table``), replaced atomically: the
    benchmark writes it after every measurement. Returns its path."""
    out.mkdir(parents=True, exist_ok=True)  # where every measurement failed early
    path = out / "bench.csv"
    write_atomic(path, csv_table(table).to_csv(index=False))
    return path


def profile_fsdp_step(cfg: RunConfig, device: torch.device, folder: Path,
                      num_steps: int) -> Path:
    """Profile ``num_steps`` training steps of the FSDP-wrapped model (built by
    :func:`vitfsdp.torch_train.build` as the ``fsdp`` path is, after ``cfg.train.warmup_steps``
    unprofiled steps) with ``torch.profiler``: CPU and, on a GPU, CUDA activity, on the
    profiler's schedule (:data:`PROFILE_SCHEDULE` steps of waiting and warming the profiler
    up first, so its own start-up is not in the trace).

    Writes ``folder/trace.json.gz`` (Chrome/Perfetto trace, gzip; removed if over
    :data:`MAX_TRACE_MB` MB, with a line in ops.txt saying so) and ``folder/ops.txt`` (the
    40 operators with the most device time, or CPU time on CPU).

    Returns:
        The path of ``ops.txt``.
    """
    # torch.profiler only where --profile-steps asks for a trace
    from torch.profiler import ProfilerActivity, profile, schedule

    numerics = torch_train.apply_numerics(cfg.kernels)
    resolved = torch_train.resolve(cfg, distributed.DistEnv(), device, peak=False)
    model, _ = torch_train.build(cfg, distributed.DistEnv(), device, resolved)
    optimizer, _ = torch_train.build_optimizer(model.parameters(), cfg.train, cfg.kernels,
                                               device, resolved.adamw)
    settings = resolved.settings
    autocast = torch_train.autocast_context(settings.autocast_dtype, device)
    scaler, batches = parallel.grad_scaler(settings, device), _batches(cfg, device)
    for _ in range(cfg.train.warmup_steps):
        torch_train.train_step(model, optimizer, next(batches), autocast, scaler)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    wait, warmup = PROFILE_SCHEDULE
    with profile(activities=activities,
                 schedule=schedule(wait=wait, warmup=warmup, active=num_steps)) as prof:
        for _ in range(wait + warmup + num_steps):
            torch_train.train_step(model, optimizer, next(batches), autocast, scaler)
            if cuda:
                torch.cuda.synchronize(device)  # the step's kernels inside its own window
            prof.step()
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "trace.json.gz"
    prof.export_chrome_trace(str(trace))  # gzip-compressed for a .gz name (torch.profiler)
    busy = device_busy(trace)
    note = ""
    if trace.stat().st_size > MAX_TRACE_MB * 1e6:
        note = f"trace.json.gz of {trace.stat().st_size / 1e6:.1f} MB removed (cap " \
               f"{MAX_TRACE_MB} MB): profile fewer steps\n"
        trace.unlink()
    if busy is not None:
        line = busy_line(*busy)
        note += line + "\n"
        log.info("%s", line)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    ops = folder / "ops.txt"
    ops.write_text(f"{cfg.model.name}, {num_steps} steps, numerics {numerics}\n{note}"
                   + prof.key_averages().table(sort_by=key, row_limit=40) + "\n")
    log.info("profile of %d steps: %s", num_steps, ops)
    return ops


#: Device activity in a torch.profiler trace: kernels, copies and memsets.
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Below this share of the profiled span busy, the profile says the host bounds the step
#: (the same bound as the runs' ``device_busy_frac``).
HOST_BOUND_BELOW = HOST_BOUND_BUSY_FRAC


def device_busy(trace: Path) -> tuple[float, float] | None:
    """How long the device worked in a torch.profiler Chrome trace (``.json`` or ``.json.gz``):
    (span, busy) in seconds, span from the first device event's start to the last one's end,
    busy the union of the device events' intervals (:data:`DEVICE_CATEGORIES`; overlapping
    streams counted once). ``None`` where the trace holds no device event (a CPU profile).

    Raises:
        OSError, ValueError: the file cannot be read, or is not a trace's JSON.
    """
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                   if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES)
    if not spans:
        return None
    busy, end = 0.0, spans[0][0]
    for start, stop in spans:  # the union of sorted intervals
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return (end - spans[0][0]) / 1e6, busy / 1e6  # trace times are in microseconds


def busy_line(span_s: float, busy_s: float) -> str:
    """One line on :func:`device_busy`'s figures: the busy share and what it means."""
    share = busy_s / span_s if span_s > 0 else 1.0
    verdict = (f"below {HOST_BOUND_BELOW:.0%}: the device waits on the host (Python, "
               "wrapper hooks, launches); read the CPU operators and the trace's gaps"
               if share < HOST_BOUND_BELOW else "the device bounds the step")
    return (f"device busy {share:.0%} of the profiled span ({busy_s * 1e3:.1f} of "
            f"{span_s * 1e3:.1f} ms): {verdict}")


def timm_train_step(model, optimizer, loss_fn, inputs: torch.Tensor, num_classes: int,
                    autocast) -> torch.Tensor:
    """One step of timm's ``TrainBenchmarkRunner._step`` (benchmark.py): zero the
    gradients; under ``autocast`` the forward on ``inputs`` (B, 3, H, W), random targets
    (B,) drawn on the device, the loss and backward; the optimizer step. Returns the
    detached loss (no host synchronization; benchmark.py's per-step timing sync is left to
    the window meter)."""
    optimizer.zero_grad()
    with autocast:
        output = model(inputs)
        target = torch.empty(output.shape[0], device=output.device,
                             dtype=torch.long).random_(num_classes)
        loss = loss_fn(output, target)
        loss.backward()
    optimizer.step()
    return loss.detach().float()


def timm_model_args(cfg: models.ModelConfig, num_classes: int) -> tuple[str, dict]:
    """The ``timm.create_model`` name and keyword arguments of our variant ``cfg``.

    A name timm registers (``vit_large_patch16_224``, ``vit_huge_patch14_224`` …) is used
    as it is; any other variant is :data:`TIMM_BASE_VIT` with our architecture as keyword
    arguments (timm's ``_create_vision_transformer`` lets them override the registered
    ones), SwiGLU MLP included for the study's rows.

    Returns:
        (name, kwargs with ``img_size`` and ``num_classes``).
    """
    kwargs = {"img_size": cfg.resolved_img_size(), "num_classes": num_classes}
    if timm.is_model(cfg.name):
        return cfg.name, kwargs
    s = cfg.spec
    kwargs |= {"patch_size": s.patch_size, "embed_dim": s.width, "depth": s.depth,
               "num_heads": s.num_heads, "mlp_ratio": s.mlp_dim / s.width}
    if s.mlp == "swiglu":
        kwargs |= {"mlp_layer": SwiGLU, "act_layer": torch.nn.SiLU}
    return TIMM_BASE_VIT, kwargs


def _check_same_size(cfg: RunConfig, timm_model: torch.nn.Module, name: str) -> None:
    """Refuse a timm model whose parameter count differs from ours (not the same model).

    Raises:
        ValueError: the counts differ.
    """
    ours = models.count_params(models.build_model(cfg.model, cfg.num_classes, device="meta"))
    theirs = models.count_params(timm_model)
    if ours != theirs:
        raise ValueError(f"timm's {name} has {theirs} parameters, ours {cfg.model.name} "
                         f"{ours}: not the same architecture; fix timm_model_args")


# --- shared pieces ------------------------------------------------------------------------


def _measure(step: Callable[[], torch.Tensor], cfg: RunConfig, device: torch.device,
             records: RunRecords, resolved: Resolved) -> None:
    """Run ``cfg.train.steps`` steps in the training loop's windows (warm-up first), one
    metrics.jsonl line per window, then the summary; MFU against ``resolved``'s peak."""
    tc, info = cfg.train, records.run_info
    meter = WindowMeter(device, 1, tc.local_batch_size, info["model"]["train_flops_per_image"],
                        info["model"]["hardware_flops_per_image"], resolved.peak_flops)
    for i, (first, last, warmup) in enumerate(windows(tc.steps, tc.warmup_steps, tc.log_every)):
        meter.start()
        loss_sum = torch.zeros((), device=device)
        for _ in range(first, last + 1):
            loss_sum += step()
        figures = meter.stop(last - first + 1, loss_sum)
        records.window({"window": i, "step_start": first, "step_end": last, "warmup": warmup,
                        "num_steps": last - first + 1, "attempt": 0,
                        "global_batch_size": tc.local_batch_size, **figures})
    summary = records.finish("completed")
    log.info("%s: %.1f images/s", records.run_dir, summary["ips"])


def _start(cfg: RunConfig, device: torch.device, run_dir: Path, path: str,
           model: torch.nn.Module, applied: dict, wrapper: str,
           resolved: Resolved) -> RunRecords:
    """Open the records of a bench-built measurement: the trainer's run.json (model FLOPs,
    ``resolved``'s device peak, versions) with this path's world, applied settings and
    parameter count."""
    info = torch_train.run_info(cfg, distributed.DistEnv(), device, run_dir, resolved)
    info["run_id"] = f"{cfg.model.name}/{path}/repeat_{cfg.repeat}"
    info["bench"] = {"path": path, "repeat": cfg.repeat}
    info["world"] = {"size": 1, "nodes": 1, "ranks_per_node": 1, "replicas": 1,
                     "sharding_strategy": None, "wrapper": wrapper, "backend": None,
                     "launched_by": "single"}
    info["model"]["num_params"] = models.count_params(model)
    records = RunRecords(run_dir)
    records.start(info | {"applied": applied})
    return records


def _batches(cfg: RunConfig, device: torch.device) -> Iterator:
    return data.batches(cfg.data, img_size=cfg.model.resolved_img_size(),
                        local_batch_size=cfg.train.local_batch_size, rank=0, world_size=1,
                        device=device, seed=cfg.train.seed)


def _guarded(measure: Callable[[], object], run_dir: Path | None,
             device: torch.device) -> None:
    """Run one measurement in a world-of-1 process group of its own, then free what it
    held; a failure is recorded in its run directory (``oom`` or ``failed``; only logged
    without one) and the benchmark goes on with the next one (a failed training run aborts
    its process group, so the next measurement needs a new one)."""
    try:
        with _single_process_group(device):
            measure()
    except failures.RunFailed as e:  # torch_train.run recorded it already
        log.error("%s: %s", run_dir, e)
    except torch.OutOfMemoryError as e:
        log.error("%s: out of memory", run_dir)
        if run_dir is not None:
            mark_failed(run_dir, "oom", f"{type(e).__name__}: {e}"[:2000])
    except Exception as e:
        log.exception("%s failed", run_dir or "profile")
        if run_dir is not None:
            mark_failed(run_dir, "failed", f"{type(e).__name__}: {e}"[:2000])
    finally:
        _release(device)


def _release(device: torch.device) -> None:
    """Free what the last measurement held (compiled graphs, cached device memory)."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@contextlib.contextmanager
def _single_process_group(device: torch.device) -> Iterator[None]:
    """A world-of-1 process group for FSDP (the caller's, if one is initialized)."""
    if dist.is_initialized():
        yield
        return
    with distributed.process_group(distributed.DistEnv(), device, timeout_s=1800):
        yield


def _check_empty(folder: Path) -> None:
    """Refuse to measure into a folder that already holds measurements.

    Raises:
        ValueError: ``folder`` has a run.json below it.
    """
    if next(folder.rglob(RUN_FILE), None) is not None:
        raise ValueError(f"{folder} already holds measurements; pass another --out")


# --- the table ----------------------------------------------------------------------------


def _row(model: str, path: str, run_dir: Path) -> dict:
    """One table row from a measurement's run.json and summary.json."""
    run, summary = read_json(run_dir / RUN_FILE) or {}, read_json(run_dir / SUMMARY_FILE) or {}
    applied, world = run.get("applied", {}), run.get("world", {})
    if path == "fsdp":  # the strategy asked for, and the one FSDP ran where they differ
        engine = (run.get("config") or {}).get("engine", "")
        asked, ran = world.get("sharding_strategy"), applied.get("sharding_strategy")
        strategy = asked if ran in (None, asked) else f"{asked}->{ran}"
        wrapper = f"{engine.upper()} {strategy} world {world.get('size')}"
        compiled = "per_block" if applied.get("compiled_blocks") else "off"
    else:
        wrapper, compiled = world.get("wrapper"), applied.get("compile")
    return {"model": model, "path": path, "wrapper": wrapper,
            "batch": (run.get("config") or {}).get("train", {}).get("local_batch_size"),
            "img_size": (run.get("model") or {}).get("img_size"),
            "precision": (applied.get("precision") or {}).get("name"),
            "cast": cast_kind(applied.get("precision") or {}),
            **{k: summary.get(k) for k in ("ips", "tflops_per_gpu", "mfu", "step_time_s",
                                           "ips_spread")},
            "compile": compiled, "adamw": applied.get("adamw"),
            "num_params": (run.get("model") or {}).get("num_params"),
            "status": summary.get("status", "failed"), "run_dir": str(run_dir)}


def cast_kind(precision: dict) -> str | None:
    """How a measurement's compute dtype was applied, from run.json ``applied.precision``:
    ``autocast`` (torch.autocast per op: the ``unwrapped`` and ``timm`` paths, and DDP),
    ``parameters`` (FSDP's mixed precision holds the parameters in the compute dtype: the
    ``fsdp`` path), ``none`` (fp32), ``None`` where nothing was recorded. bench.csv's
    ``cast`` column: the three paths' ratios include this difference."""
    if not precision:
        return None
    if precision.get("autocast_dtype"):
        return "autocast"
    return "parameters" if precision.get("param_dtype") not in (None, "fp32") else "none"


#: Figures of a path's row that are the median over its completed repeats.
MEDIAN_COLUMNS = ("ips", "tflops_per_gpu", "mfu", "step_time_s", "ips_spread")


def summarize_repeats(measurements: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, path) from the rows of its repeated measurements (:func:`_row`
    plus ``repeat``), in the order the paths were first measured.

    The :data:`MEDIAN_COLUMNS` are medians over the repeats that completed; ``ips_min`` and
    ``ips_max`` their range, ``repeat_spread`` = (max - min) / median of their images/s
    (``None`` below two completed repeats); ``num_repeats`` the measurements made,
    ``num_completed`` those that completed; ``status`` is ``completed`` only when every
    repeat completed, else the first other status (a failure is never averaged away);
    ``run_dir`` the folder holding the path's ``repeat_<r>/`` directories. The settings
    (wrapper, batch, precision ...) are the first repeat's: the repeats share one config.
    Then :func:`_with_ratios` of the medians.
    """
    rows = []
    for _, group in measurements.groupby(["model", "path"], sort=False):
        done = group[group["status"] == "completed"]
        ips = done["ips"].astype(float).dropna()
        median = ips.median() if len(ips) else None
        others = group.loc[group["status"] != "completed", "status"]
        row = group.iloc[0].drop(labels=["repeat"], errors="ignore").to_dict()
        row.update({col: done[col].astype(float).median() if len(done) else None
                    for col in MEDIAN_COLUMNS if col in group})
        row.update(ips_min=ips.min() if len(ips) else None,
                   ips_max=ips.max() if len(ips) else None,
                   repeat_spread=(ips.max() - ips.min()) / median
                   if len(ips) > 1 and median else None,
                   num_repeats=len(group), num_completed=len(done),
                   status=others.iloc[0] if len(others) else "completed",
                   run_dir=str(Path(row["run_dir"]).parent))
        rows.append(row)
    return _with_ratios(pd.DataFrame(rows))


def spread_warning(table: pd.DataFrame) -> str | None:
    """One line naming the paths of ``table`` (:func:`summarize_repeats`) whose repeats'
    images/s spread more than :data:`~vitfsdp.bench.options.SPREAD_WARN` of their median,
    with each spread; None when none did (or no path has two completed repeats)."""
    if "repeat_spread" not in table:
        return None
    spread = pd.to_numeric(table["repeat_spread"], errors="coerce")
    noisy = table[spread > SPREAD_WARN]
    if noisy.empty:
        return None
    which = ", ".join(f"{m} {p} {s:.0%}" for m, p, s in
                      zip(noisy["model"], noisy["path"], spread[noisy.index], strict=True))
    return (f"warning: images/s spread over {SPREAD_WARN:.0%} between repeats ({which}): "
            "the machine was not steady enough for the ratios; rerun on an idle machine, "
            "with more --steps or more --repeats")


def _records(table: pd.DataFrame) -> list[dict]:
    """``table``'s rows as JSON-ready dicts (NaN as None)."""
    return table.astype(object).where(table.notna(), None).to_dict("records")


def _with_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Add ``vs_timm`` and ``vs_unwrapped``: each row's ips over the timm / unwrapped row's
    ips of the same model (``None`` where either is missing)."""
    ips = table.pivot(index="model", columns="path", values="ips").astype(float).reindex(
        columns=["fsdp", "unwrapped", "timm"])  # paths not measured yet: NaN, no ratio
    for col, ref in (("vs_timm", "timm"), ("vs_unwrapped", "unwrapped")):
        table[col] = [ips.at[m, p] / ips.at[m, ref] if ips.at[m, ref] > 0 else None
                      for m, p in zip(table["model"], table["path"], strict=True)]
    return table


def format_table(table: pd.DataFrame) -> str:
    """The printed table (:data:`TABLE` columns; null figures as ``-``)."""
    shown = table[[c for c, _ in TABLE]].rename(columns=dict(TABLE))
    fmt = {"images/s": "{:.1f}", "min": "{:.1f}", "max": "{:.1f}", "spread": "{:.1%}",
           "TFLOP/s": "{:.3g}", "MFU": "{:.1%}", "ips/timm": "{:.3f}", "ips/unwrapped": "{:.3f}"}
    for col, f in fmt.items():
        shown[col] = [f.format(v) if pd.notna(v) else "-" for v in shown[col]]
    return shown.to_string(index=False)


def csv_table(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` as ``bench.csv`` holds it: :data:`TIMM_COLUMNS` renamed to timm's
    benchmark.py names, plus its ``train_step_time`` (ms) and ``param_count`` (millions)."""
    out = table.rename(columns=TIMM_COLUMNS)
    out["train_step_time"] = table["step_time_s"].astype(float) * 1000.0
    out["param_count"] = (table["num_params"].astype(float) / 1e6).round(2)
    return out


def check_targets(table: pd.DataFrame) -> list[str]:
    """The target checks (docs/benchmarks.md) on ``table``, one line each ("PASS"/"FAIL"/"n/a"):
    FSDP / unwrapped >= :data:`TARGET_VS_UNWRAPPED` and ours / timm >= :data:`TARGET_VS_TIMM`
    for every model; MFU >= :data:`TARGET_MFU` for :data:`TARGET_MODEL` in bf16 at a batch of
    at least :data:`TARGET_MIN_BATCH` where the device's peak is known. None for rows not
    measured on a GPU (``device_type`` other than cuda): the targets are GPU figures."""
    lines = []
    gpu = table["device_type"] == "cuda" if "device_type" in table else True
    for _, r in table[(table["path"] == "fsdp") & gpu].iterrows():
        for what, value, target in (("FSDP/unwrapped", r["vs_unwrapped"], TARGET_VS_UNWRAPPED),
                                    ("ours/timm", r["vs_timm"], TARGET_VS_TIMM)):
            lines.append(_check(r["model"], what, value, target, "{:.3f}"))
        if (r["model"] == TARGET_MODEL and r["precision"] == "bf16"
                and r["batch"] >= TARGET_MIN_BATCH):
            line = _check(r["model"], "MFU", r["mfu"], TARGET_MFU, "{:.1%}")
            if line.startswith("FAIL") and r["mfu"] < FLOOR_MFU:
                line += f", below the {FLOOR_MFU:.0%} floor: read the profile (--profile-steps)"
            lines.append(line)
    return lines


def _check(model: str, what: str, value, target: float, fmt: str) -> str:
    if value is None or pd.isna(value):
        return f"n/a  {model}: {what} not measured"
    verdict = "PASS" if value >= target else "FAIL"
    return f"{verdict} {model}: {what} {fmt.format(value)} (target >= {fmt.format(target)})"
