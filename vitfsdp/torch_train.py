"""The torch trainer: one run with FSDP (or DDP) over torch.distributed: build → wrap →
loop → write records.

``python -m vitfsdp.train`` (:mod:`vitfsdp.train`) validates the config, discovers the rank
and hands a ``framework=torch`` run to :func:`main`. Rank 0 writes ``run.json``,
``metrics.jsonl`` and ``summary.json`` into the run directory. The device-dependent choices
(``precision=auto``, compilation, AdamW, the peak FLOP/s) are resolved once per rank
(:func:`resolve`, :class:`vitfsdp.core.resolved.Resolved`); the timing windows and the
checkpoint-boundary rules are the run core's (:mod:`vitfsdp.core.loop`), as in the JAX trainer.

Failures are data (:mod:`vitfsdp.failures`): an out-of-memory error, a collective that times
out or a rank that dies ends the run on every rank with status ``oom``, ``timeout`` or
``failed`` in summary.json and exit code 1, without a hang. SIGUSR2 or SIGTERM saves a
checkpoint (:mod:`vitfsdp.checkpoint`) at the next window boundary, records ``preempted`` and
exits with code 3; running again in the same directory resumes from it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import time
from pathlib import Path

# timm: models.build_model imports it on use; imported with the trainer too, so that a caller
# importing the trainer under startup_gc.paused() (vitfsdp.train) imports timm inside the pause
import timm  # noqa: F401
import torch
from torch.distributed.tensor import DTensor

from vitfsdp import checkpoint, data, distributed, failures, models, parallel, provenance
from vitfsdp.config import KernelsConfig, RunConfig, TrainConfig
from vitfsdp.core import netcount, nodecpu, runinfo
from vitfsdp.core.layout import NETWORK_FILE
from vitfsdp.core.loop import (
    Preempted,
    Progress,
    checkpoint_at_boundary,
    remaining_windows,
    skip_batches,
    stop_before_first_step,
)
from vitfsdp.core.resolved import Resolved
from vitfsdp.metrics import (
    GIB,
    DeviceMemoryProbe,
    WindowMeter,
    device_info,
    local_memory,
    resolve_peak,
    timer_kind,
)
from vitfsdp.records import RUN_FILE, RunRecords, write_json_atomic

#: The logger of ``python -m vitfsdp.train``'s torch runs (the name in the ranks' log lines).
log = logging.getLogger("vitfsdp.train")


def main(cfg: RunConfig, env: distributed.DistEnv, run_dir: Path) -> None:
    """Run ``cfg`` in this process as rank ``env.rank`` of ``env.world_size``: pick the
    device, join the process group, train, record, leave.

    Does not return: the process leaves with ``os._exit`` once the run is recorded (0
    completed, :data:`vitfsdp.failures.EXIT_FAILED` after a recorded failure, without
    tearing down the aborted group, or the preempted exit code after a stop signal, the
    checkpoint saved), without the interpreter's teardown.
    """
    provenance.setup_logging(env.rank)
    device = distributed.pick_device(cfg.device, env.local_rank, cfg.gpu_expected())
    with distributed.process_group(env, device, cfg.train.timeout_s):
        try:
            run(cfg, env, device, run_dir)
            code = 0
        except failures.RunFailed as e:  # recorded; the process group is aborted
            provenance.exit_now(e.exit_code)
        except Preempted as e:  # recorded, checkpoint saved, the group is healthy
            code = e.exit_code
    # Everything is recorded, flushed and closed, and the group is left: skip the
    # interpreter's teardown, whose garbage collection of torch's, timm's and Hydra's objects
    # took 9-10 s a rank on the demo's half core a node (py-spy: gc_collect_main at exit).
    provenance.exit_now(code)


def run(cfg: RunConfig, env: distributed.DistEnv, device: torch.device, run_dir: Path) -> dict:
    """Train per ``cfg`` in an initialized process group; record the outcome, even a failure.

    Resumes from ``run_dir/checkpoint/`` when it holds a checkpoint of this config.

    Returns:
        The summary (status and headline figures).

    Raises:
        Preempted: SIGUSR2/SIGTERM arrived; a checkpoint was saved and the run
            recorded as ``preempted`` (the process group is still usable).
        failures.RunFailed: training raised on some rank; every rank raises this after rank 0
            recorded the agreed status (``oom``, ``timeout`` or ``failed``). The process group
            is aborted. ``__cause__`` is this rank's own error.
        ValueError: ``train.memory_limit_gib`` on a GPU, or a checkpoint of another config
            in ``run_dir`` (nothing recorded).
    """
    _limit_memory(cfg.train.memory_limit_gib, device)
    records = RunRecords(run_dir, is_writer=env.rank == 0)
    t0 = time.time()
    numerics = apply_numerics(cfg.kernels) | release_freed_host_memory(
        device, cfg.train.release_host_memory)
    meta = checkpoint.find(run_dir, cfg, env.rank)
    progress = Progress(meta["step"], meta["attempt"] + 1) if meta else Progress()
    resolved = resolve(cfg, env, device)  # after apply_numerics: TF32 decides the peak
    records.start(run_info(cfg, env, device, run_dir, resolved) | {"applied": numerics | {
        "precision": resolved.applied_precision()}},
        resume_step=meta["step"] if meta else None, attempt=progress.attempt)
    records.open_sinks(cfg.metrics)
    board = failures.FailureBoard(env.rank, env.world_size,
                                  min(failures.GRACE_S, cfg.train.timeout_s))
    # the failure path both trainers share: posts before it aborts the process group
    # (aborting gloo can take seconds mid-collective; rank 0 waits GRACE_S for reports)
    rec = failures.Recorder(board, records, progress, t0, lambda: local_memory(device))
    failures.watch_failures(rec, cfg.train.timeout_s)
    with failures.StopSignals() as signals:  # also while a failure is being recorded
        try:
            stop_before_first_step(signals.agreed(device), progress)
            train(cfg, env, device, records, signals, progress, meta, resolved)
        except Preempted as e:
            records.finish("preempted", reason=str(e), elapsed_s=time.time() - t0,
                           interrupted=True, last_step=e.step,
                           checkpoint_step=e.step if e.saved or meta else None,
                           num_attempts=progress.attempt + 1)
            log.warning("preempted: %s; exit code %d", e, e.exit_code)
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            raise failures.record_failure(e, rec, signals.received,
                                          abort=failures.abort_process_group) from e
        finally:
            board.stop()
    summary = records.finish("completed", elapsed_s=time.time() - t0,
                             num_attempts=progress.attempt + 1)
    if records.is_writer:
        checkpoint.remove(run_dir)
    log.info("completed: %.1f images/s, step %.3f s, peak memory %s GiB", summary["ips"],
             summary["step_time_s"], _peak_mem(summary))
    return summary


#: glibc mallopt parameter number of M_MMAP_THRESHOLD (malloc.h).
_M_MMAP_THRESHOLD = -3
#: Allocations at least this large get their own mapping, returned to the OS when freed.
CPU_MMAP_THRESHOLD_BYTES = 128 * 1024


def release_freed_host_memory(device: torch.device, enabled: bool) -> dict:
    """``train.release_host_memory``: on a CPU run, make peak RSS measure what the training
    holds, not what glibc kept.

    glibc raises its mmap threshold each time an mmapped block is freed (up to 32 MiB,
    ``mallopt(3)``: M_MMAP_THRESHOLD is dynamic unless set), after which FSDP's
    unit-sized buffers (an all-gathered block, its gradient) come from the heap and stay
    there, fragmented, after FSDP frees them: a ViT-Base FULL_SHARD rank then grows by about
    a model's worth over the first steps. Fixing the threshold at 128 KiB (glibc's default
    start) keeps every large tensor in its own mapping, returned on free; CPU peak RSS then
    follows the plan within a few percent (ViT-Base at 32 px, FULL_SHARD on 2 ranks: 1.49
    GiB measured against 1.53 GiB predicted, 2.00 GiB and rising without it). The price is
    time: every such tensor is mapped and zero-filled afresh, about 2x the step time there
    (3.1 against 1.5 s), hence off by default.

    Returns:
        ``{"cpu_mmap_threshold_bytes": N}`` for run.json ``applied`` (enabled, a CPU run,
        glibc's ``mallopt``), else ``{}`` (GPU memory is torch's caching allocator's).
    """
    if not enabled or device.type != "cpu":
        return {}
    try:  # ctypes only for glibc's mallopt on Linux
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        if libc.mallopt(_M_MMAP_THRESHOLD, CPU_MMAP_THRESHOLD_BYTES) != 1:
            return {}
    except (OSError, AttributeError):  # not glibc
        return {}
    return {"cpu_mmap_threshold_bytes": CPU_MMAP_THRESHOLD_BYTES}


def _limit_memory(limit_gib: float, device: torch.device) -> None:
    """Let this process grow its data segment by at most ``limit_gib`` GiB (RLIMIT_DATA);
    0 = no limit. A CPU test aid (``train.memory_limit_gib``).

    oneDNN is turned off in the limited process (``torch.backends.mkldnn``; the patch
    embedding's convolution and GELU otherwise run in it): oneDNN allocates outside
    PyTorch's CPU allocator and reports a failed allocation as "could not create a
    primitive", which cannot be told from its other errors, so a step that runs out there
    was recorded ``failed`` instead of ``oom``. Without oneDNN every allocation of the step
    fails as the allocator's "can't allocate memory" (:func:`vitfsdp.failures.classify`).

    Raises:
        ValueError: a limit on a GPU run (it limits host memory only).
    """
    if limit_gib <= 0:
        return
    if device.type != "cpu":
        raise ValueError(f"train.memory_limit_gib={limit_gib} limits host memory and is a "
                         "CPU test aid; set train.memory_limit_gib=0 on GPUs")
    with open("/proc/self/status", encoding="ascii") as f:
        data_kib = next(int(line.split()[1]) for line in f if line.startswith("VmData:"))
    soft = data_kib * 1024 + int(limit_gib * GIB)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    torch.backends.mkldnn.enabled = False
    log.info("data segment limited to %.2f GiB (%.2f GiB above the current); oneDNN off",
             soft / GIB, limit_gib)


def resolve(cfg: RunConfig, env: distributed.DistEnv, device: torch.device,
            peak: bool = True) -> Resolved:
    """This rank's device-dependent choices, resolved once at run start: ``precision``
    (``auto``: bf16 on a GPU, fp32 on CPU, ``RunConfig.resolved_precision``) and its dtypes,
    ``kernels.compile`` (null: :meth:`~vitfsdp.config.RunConfig.compile_blocks`),
    ``kernels.adamw`` (:func:`adamw_choice`), TF32 as :func:`apply_numerics` set it, and the
    peak FLOP/s for the compute dtype
    (:func:`vitfsdp.metrics.resolve_peak`). Call it after :func:`apply_numerics`.

    Collective with ``metrics.peak=measure``: the GEMM is timed on every rank and the mean
    over ranks kept, so every rank calls it. ``peak=False`` leaves ``peak_*`` None: nothing
    timed, no collective (for a build that records no figures).

    Raises:
        ValueError: dtypes the config refuses
            (:meth:`vitfsdp.config.RunConfig.precision_settings`). ``kernels.adamw=fused``
            where torch has no fused AdamW is refused later, by :func:`build_optimizer`.
    """
    settings = cfg.precision_settings(device.type)
    name = cfg.resolved_precision(device.type)
    resolved = Resolved(
        framework="torch", device_type=device.type, precision=name,
        compute_dtype=settings.compute_dtype,
        precision_record={"name": name, **dataclasses.asdict(settings)}, settings=settings,
        compile=cfg.compile_blocks(device.type),
        # fused where torch has none is refused when the optimizer is built, in the run
        adamw=adamw_choice(cfg.kernels, device, check=False),
        fused_attn=cfg.kernels.fused_attn,
        allow_tf32=device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32)
    return resolved.with_peak(_peak(cfg, env, device, resolved)) if peak else resolved


def run_info(cfg: RunConfig, env: distributed.DistEnv, device: torch.device,
             run_dir: Path, resolved: Resolved | None = None) -> dict:
    """What ran (:func:`vitfsdp.core.runinfo.run_info`): resolved config (secret-looking
    ``cluster.env`` values redacted), world, device with the peak FLOP/s MFU is computed
    against (``resolved``'s; ``None``: :func:`resolve` it here), model size and FLOPs per
    image, the timing rule, versions with the GPU driver, hosts, Slurm ids and the redacted
    environment (:mod:`vitfsdp.provenance`). Collective (host names; a measured peak is
    averaged over ranks): every rank calls it after :func:`apply_numerics`.
    """
    resolved = resolved or resolve(cfg, env, device)
    num_classes = cfg.num_classes
    meta_model = models.build_model(cfg.model, num_classes, device="meta")
    checkpointed = cfg.model.spec.depth if cfg.train.activation_checkpointing else 0
    world = runinfo.World(
        size=env.world_size, nodes=cfg.nodes, ranks_per_node=cfg.cluster.gpus_per_node,
        replicas=cfg.strategy.replicas(env.world_size),
        sharding_strategy=cfg.strategy.effective_sharding_strategy(),
        backend=distributed.backend_for(device), launched_by=env.source)
    size = runinfo.ModelSize(
        num_params=models.count_params(meta_model),
        forward_flops_per_image=models.forward_flops_per_image(cfg.model, num_classes),
        train_flops_per_image=models.train_flops_per_image(cfg.model, num_classes),
        hardware_flops_per_image=models.hardware_flops_per_image(cfg.model, num_classes,
                                                                 checkpointed),
        img_size=cfg.model.resolved_img_size(), num_classes=num_classes)
    return runinfo.run_info(
        run_dir.name, provenance.config_record(cfg), world,
        device_info(device) | resolved.peak_record(), size, timer=timer_kind(device),
        warmup_steps=cfg.train.warmup_steps, log_every=cfg.train.log_every,
        rank_hosts=distributed.rank_hostnames(env),
        provenance=provenance.collect(driver=DeviceMemoryProbe(device).driver_version))


def _peak(cfg: RunConfig, env: distributed.DistEnv, device: torch.device,
          resolved: Resolved) -> dict:
    """run.json's ``device.peak_flops``/``peak_source``/``peak_kind`` for ``resolved``'s
    compute dtype and TF32 (:func:`vitfsdp.metrics.resolve_peak`); with
    ``metrics.peak=measure`` the GEMM is timed on every rank before training and the mean
    over ranks is used."""
    peak = resolve_peak(device, device_info(device)["name"], resolved.compute_dtype,
                        resolved.allow_tf32, cfg.metrics, warn=env.rank == 0)
    if peak["peak_source"] == "measured" and torch.distributed.is_initialized():
        t = torch.tensor([peak["peak_flops"]], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        peak["peak_flops"] = t.item() / env.world_size
    return peak


def train(cfg: RunConfig, env: distributed.DistEnv, device: torch.device,
          records: RunRecords, signals: failures.StopSignals | None = None,
          progress: Progress | None = None, meta: dict | None = None,
          resolved: Resolved | None = None) -> None:
    """Build, wrap and train up to ``cfg.train.steps`` steps, one records window at a time,
    with the choices of ``resolved`` (:func:`resolve`; ``None``: resolved here, collective
    with ``metrics.peak=measure``).

    What the build actually applied (materialization, checkpointed and compiled blocks,
    attention kernel, AdamW implementation) is added to run.json's ``applied`` first.
    With ``meta`` (a checkpoint's, from :func:`vitfsdp.checkpoint.find`) the model, optimizer
    and RNG are restored and training continues after ``progress.step`` with the data
    order it would have had. Warm-up windows follow :data:`vitfsdp.core.loop.WARMUP_RULE`.
    After each window but the last, the ranks agree on whether a
    stop signal arrived; a checkpoint is saved then, and every ``train.checkpoint_every``
    steps.

    Raises:
        Preempted: after saving the checkpoint of a stop signal, or (``saved``
            false) when one arrived during the build, before the first step.
    """
    tc = cfg.train
    progress = progress or Progress()
    resolved = resolved or resolve(cfg, env, device)
    log.info("building and wrapping %s (%s)", cfg.model.name, cfg.strategy.name)
    t_build = time.perf_counter()
    model, applied = build(cfg, env, device, resolved)
    log.info("built in %.1f s%s", time.perf_counter() - t_build,
             "; the first step compiles the blocks (torch.compile)"
             if applied.get("compiled_blocks") else "")
    optimizer, adamw = build_optimizer(model.parameters(), tc, cfg.kernels, device,
                                       resolved.adamw)
    settings = resolved.settings
    scaler = parallel.grad_scaler(settings, device)
    if meta is not None:
        checkpoint.load(records.run_dir, model, optimizer, rank=env.rank, scaler=scaler,
                        meta=meta)
        log.info("resumed from the checkpoint of step %d (attempt %d)", progress.step,
                 progress.attempt)
    _record_applied(records, {**applied, "adamw": adamw})
    batches = data.batches(
        cfg.data, img_size=cfg.model.resolved_img_size(), local_batch_size=tc.local_batch_size,
        rank=env.rank, world_size=env.world_size, device=device, seed=tc.seed,
    )
    skip_batches(batches, progress.step)
    info = records.run_info
    meter = WindowMeter(device, env.world_size, tc.local_batch_size * env.world_size,
                        info["model"]["train_flops_per_image"],
                        info["model"]["hardware_flops_per_image"], resolved.peak_flops)
    autocast = autocast_context(settings.autocast_dtype, device)
    fault = failures.parse_fault(os.environ.get(failures.FAULT_ENV))
    # warm-up besides train.warmup_steps (core.loop.WARMUP_RULE): the first window after a
    # resume (caches cold again), or with compiled blocks and no warm-up steps (compilation)
    cold = meta is not None or (tc.warmup_steps == 0 and applied.get("compiled_blocks", 0) > 0)
    nodecpu.join()  # the emulated node's CPU quota from the first step (not for start-up)
    link = _LinkBytes.start(env)  # where the ranks count their node's bytes (virtual Slurm)
    # a signal during the build
    stop_before_first_step(_agreed(signals, device), progress)
    for i, (first, last, warmup) in remaining_windows(tc, progress.step):
        warmup, cold = warmup or cold, False
        meter.start()
        loss_sum = torch.zeros((), device=device)
        for step in range(first, last + 1):
            failures.inject_fault(fault, env.rank, step)
            failures.mark_progress(step)  # rank 0's watcher names a rank that stops here
            count = {} if "model_state_bytes" not in records.summary_extra else None
            loss_sum += train_step(model, optimizer, next(batches), autocast, scaler, count)
            if count is not None:  # this attempt's first step: the local shards' bytes
                records.summary_extra.update(model_state_record(count, device))
            progress.step = step
        figures = meter.stop(last - first + 1, loss_sum)
        records.window({"window": i, "step_start": first, "step_end": last, "warmup": warmup,
                        "num_steps": last - first + 1, "attempt": progress.attempt,
                        "global_batch_size": tc.local_batch_size * env.world_size, **figures})
        log.info("step %d/%d%s: loss %.4f, %.1f images/s", last, tc.steps,
                 " (warm-up)" if warmup else "", figures["loss"], figures["ips"])
        failures.mark_progress(last)
        if last < tc.steps:
            checkpoint_at_boundary(
                _agreed(signals, device), tc.checkpoint_every, progress, first,
                lambda step: checkpoint.save(records.run_dir, step, model, optimizer, cfg=cfg,
                                             rank=env.rank, attempt=progress.attempt,
                                             scaler=scaler))
    if link is not None:
        link.finish(env, records)


class _LinkBytes:
    """The bytes each node sends over its link while the ranks train, where the network
    record names the link (:mod:`vitfsdp.core.netcount`: the virtual Slurm cluster's nodes
    apart): the first rank of each node reads its link's counter before the first step and
    after the last; rank 0 writes network.json. Collective: every rank calls both."""

    def __init__(self, record: dict, ifname: str, first: int | None) -> None:
        self.record, self.ifname, self.first = record, ifname, first

    @classmethod
    def start(cls, env: distributed.DistEnv) -> _LinkBytes | None:
        """The counter at the first step, ``None`` where no link is counted (the same
        answer on every rank: the record is the job's)."""
        record = provenance.network_record()
        ifname = netcount.counted_link(record)
        if ifname is None:
            return None
        return cls(record, ifname, netcount.tx_bytes(ifname) if env.local_rank == 0 else None)

    def finish(self, env: distributed.DistEnv, records: RunRecords) -> None:
        """Gather the nodes' differences (node order = rank order of their first ranks);
        rank 0 writes them to ``network.json``."""
        last = netcount.tx_bytes(self.ifname) if env.local_rank == 0 else None
        sent = last - self.first if last is not None and self.first is not None else None
        gathered: list = [(env.local_rank == 0, sent)]
        if torch.distributed.is_initialized():
            gathered = [None] * env.world_size
            torch.distributed.all_gather_object(gathered, (env.local_rank == 0, sent))
        per_node = [b for first, b in gathered if first]
        if records.is_writer:
            write_json_atomic(records.run_dir / NETWORK_FILE,
                              netcount.network_file(per_node, self.record))
            log.info("the nodes sent %s MB over their links (%s)", ", ".join(
                "?" if b is None else f"{b / 1e6:.1f}" for b in per_node), self.ifname)


def _agreed(signals: failures.StopSignals | None, device: torch.device) -> str | None:
    return signals.agreed(device) if signals is not None else None


def train_step(model, optimizer, batch, autocast, scaler=None,
               state_bytes: dict | None = None) -> torch.Tensor:
    """One AdamW step on ``batch`` = (images (B,3,H,W), labels (B,)); returns the detached
    local mean cross-entropy loss, with no host synchronization.

    The loss is computed in fp32 on every path: the logits are cast up before the
    cross-entropy, as autocast does for DDP (``cross_entropy`` is on its fp32 list), so
    FSDP's bf16 parameters (no autocast) do not take the softmax in bf16.

    With a gradient ``scaler`` (fp16) the loss is scaled before backward, and a step whose
    gradients hold an inf or NaN is skipped and the scale lowered.

    With ``state_bytes`` (a dict) this rank's model-state bytes are counted into it
    (:func:`local_bytes`): ``params`` and ``grads`` after backward, ``optimizer`` (the AdamW
    state tensors, ``step`` included) after the optimizer step."""
    x, y = batch
    with autocast:
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    if scaler is None:
        loss.backward()
        _count_grads(state_bytes, model)
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        _count_grads(state_bytes, model)
        scaler.step(optimizer)
        scaler.update()
    if state_bytes is not None:
        state_bytes["optimizer"] = local_bytes(
            t for st in optimizer.state.values() for t in st.values()
            if isinstance(t, torch.Tensor))
    optimizer.zero_grad(set_to_none=True)
    return loss.detach().float()


def local_bytes(tensors) -> int:
    """Bytes (numel x element size) of the parts of ``tensors`` this rank holds: a DTensor's
    local tensor (FSDP2), an FSDP1 flat parameter's or its views' local shard, a plain
    tensor whole (DDP); None entries are skipped."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        total += t.numel() * t.element_size()
    return total


def _count_grads(state_bytes: dict | None, model: torch.nn.Module) -> None:
    if state_bytes is not None:
        params = list(model.parameters())
        state_bytes["params"] = local_bytes(params)
        state_bytes["grads"] = local_bytes(p.grad for p in params)


def model_state_record(state_bytes: dict, device: torch.device) -> dict:
    """summary.json's ``model_state_bytes`` (this rank's, from :func:`train_step`) and
    ``model_state_bytes_max`` (each field's maximum over the ranks: one all_reduce, so
    collective when a process group is up)."""
    keys = ("params", "grads", "optimizer")
    mine = {k: int(state_bytes.get(k, 0)) for k in keys}
    most = dict(mine)
    if torch.distributed.is_initialized():
        t = torch.tensor([mine[k] for k in keys], dtype=torch.int64, device=device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        most = dict(zip(keys, (int(v) for v in t.tolist()), strict=True))
    return {"model_state_bytes": mine, "model_state_bytes_max": most}


def build(cfg: RunConfig, env: distributed.DistEnv, device: torch.device,
          resolved: Resolved | None = None) -> tuple[torch.nn.Module, dict]:
    """Build the model on the meta device and wrap it, materializing only what this rank
    holds (:func:`vitfsdp.parallel.wrap`); every path, the single process included, draws
    the same initial weights for ``train.seed`` (:class:`vitfsdp.models.ViTInit`). Dtypes,
    compilation and the attention kernel are ``resolved``'s (:func:`resolve`; ``None``:
    resolved here for ``device``, without the peak).

    Returns:
        (the wrapped model, what was applied: ``materialized``,
        ``activation_checkpointed_blocks``, ``compiled_blocks``, ``fused_attn`` and the
        number of attention modules it was set on).
    """
    resolved = resolved or resolve(cfg, env, device, peak=False)
    torch.manual_seed(cfg.train.seed)  # anything random besides the init: same on all ranks
    model = models.build_model(cfg.model, cfg.num_classes, device="meta")
    num_attn = models.set_fused_attn(model, resolved.fused_attn)
    init = models.ViTInit(model, cfg.train.seed)
    model, applied = parallel.wrap(
        model, cfg.strategy, device=device, world_size=env.world_size,
        block_classes=models.block_classes(), init=init, engine=cfg.engine,
        precision=resolved.settings,
        activation_checkpointing=cfg.train.activation_checkpointing,
        compile_blocks=resolved.compile)
    return model, {**applied, "fused_attn": resolved.fused_attn,
                   "fused_attn_modules": num_attn}


def build_optimizer(params, tc: TrainConfig, kernels: KernelsConfig, device: torch.device,
                    impl: str | None = None) -> tuple[torch.optim.Optimizer, str]:
    """AdamW(``tc.lr``, ``tc.weight_decay``) with the implementation ``kernels.adamw``
    (``impl``: as already resolved, :attr:`vitfsdp.core.resolved.Resolved.adamw`; ``None``:
    :func:`adamw_choice` here).

    ``auto`` is fused on a GPU ``device`` whose type torch has fused AdamW kernels for
    (one kernel launch per step for all parameters: the fastest of the three), and torch's
    own pick elsewhere (on CPU a per-tensor loop, as before ``auto`` preferred fused).

    Returns:
        (the optimizer, the implementation it runs: for_loop, foreach or fused; ``auto``
        resolved as above, torch's pick as torch resolves it for these parameters).

    Raises:
        ValueError: ``kernels.adamw=fused`` on a device type torch has no fused AdamW for.
    """
    params = list(params)
    impl = impl or adamw_choice(kernels, device)
    if impl == "fused":
        _check_fused(device)
    optimizer = torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay,
                                  **ADAMW_FLAGS[impl])
    return optimizer, impl if impl != "auto" else default_adamw(params)


#: ``torch.optim.AdamW`` keyword arguments of each ``kernels.adamw`` implementation.
ADAMW_FLAGS = {"auto": {}, "for_loop": {"foreach": False}, "foreach": {"foreach": True},
               "fused": {"fused": True}}


def adamw_choice(kernels: KernelsConfig, device: torch.device, check: bool = True) -> str:
    """``kernels.adamw`` for ``device``: ``auto`` becomes ``fused`` on a GPU whose device
    type torch has fused AdamW kernels for, and stays ``auto`` (torch's pick) elsewhere.

    Args:
        check: refuse ``fused`` where torch has no fused AdamW; ``False`` leaves that to
            :func:`build_optimizer` (a run records the refusal as its failure).

    Raises:
        ValueError: ``kernels.adamw=fused`` on a device type torch has no fused AdamW for.
    """
    if check and kernels.adamw == "fused":
        _check_fused(device)
    if kernels.adamw == "auto" and device.type != "cpu" and device.type in _fused_devices():
        return "fused"
    return kernels.adamw


def _check_fused(device: torch.device) -> None:
    """Raises ValueError: torch has no fused AdamW for ``device``'s type."""
    if device.type not in _fused_devices():
        raise ValueError(f"kernels.adamw=fused is not supported on {device.type} by torch "
                         f"{torch.__version__}; valid there: auto, for_loop, foreach")


def _fused_devices() -> list[str]:
    """Device types with fused optimizer kernels in this torch (torch's private list; if it
    moves, CUDA only)."""
    try:  # private torch API, absent in some releases
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return ["cuda"]
    return _get_fused_kernels_supported_devices()


def default_adamw(params) -> str:
    """The implementation torch's AdamW picks when neither foreach nor fused is given."""
    try:  # private torch API, absent in some releases
        from torch.optim.optimizer import _default_to_fused_or_foreach
    except ImportError:
        return "auto"
    fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return "fused" if fused else "foreach" if foreach else "for_loop"


def apply_numerics(kernels: KernelsConfig) -> dict:
    """Set matmul precision and cuDNN TF32 from ``kernels`` for this process, and cuDNN's
    autotuner on; returns the values read back from torch, for run.json.

    ``torch.set_float32_matmul_precision`` also sets ``torch.backends.cuda.matmul.
    allow_tf32`` (true unless ``highest``): the two are one switch, recorded both ways.
    ``torch.backends.cudnn.benchmark``: a training run's shapes never change, so cuDNN times
    its algorithms for the patch embedding's convolution once and keeps the fastest
    (PyTorch's performance tuning guide); no effect on a CPU.
    """
    torch.set_float32_matmul_precision(kernels.float32_matmul_precision)
    torch.backends.cudnn.allow_tf32 = kernels.cudnn_allow_tf32
    torch.backends.cudnn.benchmark = True
    return {"float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark}


def _record_applied(records: RunRecords, applied: dict) -> None:
    """Add ``applied`` to run.json's ``applied`` section now (rank 0 writes)."""
    records.run_info.setdefault("applied", {}).update(applied)
    if records.is_writer:
        write_json_atomic(records.run_dir / RUN_FILE, records.run_info)
    log.info("applied: %s", applied)


def autocast_context(dtype: str | None, device: torch.device) -> torch.autocast:
    """``torch.autocast`` to ``dtype`` (a :data:`vitfsdp.parallel.DTYPES` name: a run's
    ``PrecisionSettings.autocast_dtype``, set where FSDP's mixed precision does not already
    cast, i.e. DDP with bf16 or fp16); a disabled context for ``None``."""
    return torch.autocast(device.type, dtype=parallel.DTYPES[dtype or "bf16"],  # any when off
                          enabled=dtype is not None)


def _peak_mem(summary: dict) -> str:
    value = summary["peak_mem_allocated_gib"] or summary["peak_rss_gib"]
    return f"{value:.2f}" if value is not None else "n/a"


