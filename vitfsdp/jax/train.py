"""One JAX training run (``framework=jax``): build → shard → compile → loop → write records.

    python -m vitfsdp.train framework=jax model=vit_tiny strategy=FULL_SHARD data=digits nodes=2

``vitfsdp.train`` hands over to :func:`main` after rank discovery, so a JAX run starts like a
torch run: under torchrun locally, under srun (or torchrun) on Slurm. Each process holds one
device; the train state is laid out by :mod:`vitfsdp.jax.sharding` and initialized sharded
(each device computes only its shard); the step is compiled ahead of time and its compile time
recorded separately (``compile_s`` in run.json's ``applied`` and in summary.json), so the
timing windows measure steady-state steps. Rank 0 writes the same ``run.json``,
``metrics.jsonl`` and ``summary.json`` as a torch run.

Checkpoints as in the torch run (:mod:`vitfsdp.jax.checkpoint`, orbax): SIGUSR2 or SIGTERM on
any process saves the sharded train state at the next window boundary on every process,
records ``preempted`` and exits with code 3 (:data:`vitfsdp.checkpoint.EXIT_PREEMPTED`);
``train.checkpoint_every`` saves periodically. Running again in the same directory resumes.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from vitfsdp import checkpoint, data, failures, models, provenance
from vitfsdp.config import KernelsConfig, RunConfig
from vitfsdp.config_jax import MATMUL_PRECISION
from vitfsdp.core import nodecpu, runinfo
from vitfsdp.core.loop import (
    Preempted,
    Progress,
    checkpoint_at_boundary,
    remaining_windows,
    skip_batches,
    stop_before_first_step,
)
from vitfsdp.core.resolved import Resolved
from vitfsdp.distributed import DistEnv
from vitfsdp.jax import checkpoint as jckpt
from vitfsdp.jax import distributed as jdist
from vitfsdp.jax import sharding
from vitfsdp.jax.metrics import (
    JaxWindowMeter,
    device_info,
    device_probe,
    local_memory,
    resolve_peak,
)
from vitfsdp.jax.model import (
    ViT,
    build_model,
    choose_attention,
    count_params,
    dummy_input,
    param_shapes,
)
from vitfsdp.records import RUN_FILE, RunRecords, write_json_atomic

log = logging.getLogger("vitfsdp.jax.train")

#: The train state: {"params": parameter pytree, "opt_state": optax AdamW state}.
State = dict[str, Any]


def main(cfg: RunConfig, env: DistEnv, run_dir: Path) -> dict:
    """Run ``cfg`` in this process as rank ``env.rank`` of ``env.world_size``: start
    ``jax.distributed``, train, write records, leave ``jax.distributed``.

    Returns:
        The summary (status and headline figures).

    Raises:
        SystemExit: with :data:`vitfsdp.checkpoint.EXIT_PREEMPTED` after a stop signal (the
            checkpoint is saved and the run recorded ``preempted``).

    A recorded failure (:class:`vitfsdp.failures.RunFailed`) ends the process with
    :data:`vitfsdp.failures.EXIT_FAILED` at once (``os._exit``), as in a torch run, without
    leaving ``jax.distributed``.
    """
    provenance.setup_logging(env.rank)
    # SIGTERM is a stop signal here (failures.StopSignals); JAX's preemption service would
    # install its own SIGTERM handler with jax.distributed and swallow the signal
    jax.config.update("jax_enable_preemption_service", False)
    jdist.initialize(env, cfg.device, cfg.train.timeout_s, cfg.gpu_expected())
    try:
        try:
            jdist.check_platform(cfg.device)
            return run(cfg, env, run_dir)
        except failures.RunFailed as e:  # recorded by rank 0 (vitfsdp.failures)
            # not jax.distributed.shutdown: its barrier would wait for a dead peer until the
            # coordination service's heartbeat timeout aborts the process (90 s, measured)
            provenance.exit_now(e.exit_code)
        finally:
            jdist.shutdown(env)
    except Preempted as e:  # recorded; every process saved its shards
        sys.exit(e.exit_code)


def run(cfg: RunConfig, env: DistEnv, run_dir: Path) -> dict:
    """Train per ``cfg`` over every device JAX sees (``jax.devices()``, one per rank);
    record the outcome, even a failure. Resumes from ``run_dir/checkpoint/`` when it holds a
    checkpoint of this config.

    Raises:
        ValueError: the number of devices is not ``nodes × cluster.gpus_per_node``, or a
            checkpoint of another config in ``run_dir`` (nothing recorded).
        Preempted: SIGUSR2/SIGTERM arrived on some process; a checkpoint was saved
            and the run recorded as ``preempted``.
        failures.RunFailed: training raised on some process; every process raises this
            after rank 0 recorded the agreed status (``oom``: XLA's RESOURCE_EXHAUSTED,
            ``timeout`` or ``failed``), as a torch run's ranks do
            (:class:`vitfsdp.failures.FailureBoard`: a killed or silent process is named).
            ``__cause__`` is this process's own error.
    """
    if jax.device_count() != cfg.world_size:
        raise ValueError(f"JAX sees {jax.device_count()} devices but nodes={cfg.nodes} × "
                         f"cluster.gpus_per_node={cfg.cluster.gpus_per_node} = {cfg.world_size}"
                         "; run one process per rank (one device each)")
    records = RunRecords(run_dir, is_writer=jax.process_index() == 0)
    t0 = time.time()
    mesh = sharding.make_mesh(cfg.strategy)
    numerics = apply_numerics(cfg.kernels)
    resolved = resolve(cfg)  # after apply_numerics: the matmul precision decides the peak
    model = build_model(cfg.model, cfg.num_classes, precision=resolved.compute_dtype,
                        fused_attn=resolved.fused_attn,
                        remat=cfg.train.activation_checkpointing)
    impl, refused = choose_attention(model)
    model = model.clone(attn_impl=impl)
    applied = numerics | _applied(resolved, model) | {"cudnn_attention_refused": refused}
    if model.remat and jax.default_backend() == "cpu":
        log.warning("train.activation_checkpointing=true on CPU: XLA's CPU compiler keeps the "
                    "activations remat recomputes (measured: no less memory, a slower step; "
                    "docs/jax.md), so this run's memory does not show checkpointing's saving")
    meta = jckpt.find(run_dir, cfg)
    progress = Progress(meta["step"], meta["attempt"] + 1) if meta else Progress()
    records.start(run_info(cfg, env, run_dir, model, mesh, resolved) | {"applied": applied},
                  resume_step=meta["step"] if meta else None, attempt=progress.attempt)
    records.open_sinks(cfg.metrics)
    attempts = {"num_attempts": progress.attempt + 1}
    rec = failure_recorder(cfg, env, records, progress, t0)
    with failures.StopSignals() as signals:  # also while a failure is being recorded
        try:
            compile_s, _ = train(cfg, model, mesh, records, signals, progress, meta, resolved)
        except Preempted as e:
            records.finish("preempted", reason=str(e), elapsed_s=time.time() - t0,
                           interrupted=True, last_step=e.step,
                           checkpoint_step=e.step if e.saved or meta else None, **attempts)
            log.warning("preempted: %s; exit code %d", e, e.exit_code)
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # any error but a stop, as in a torch run
            raise failures.record_failure(
                e, rec, signals.received,
                kind="oom" if "RESOURCE_EXHAUSTED" in str(e) else None) from e
        finally:
            rec.board.stop()
    summary = records.finish("completed", elapsed_s=time.time() - t0, compile_s=compile_s,
                             **attempts)
    if records.is_writer:
        checkpoint.remove(run_dir)
    log.info("completed: %.1f images/s, step %.3f s, compile %.1f s", summary["ips"],
             summary["step_time_s"], compile_s)
    return summary


def failure_recorder(cfg: RunConfig, env: DistEnv, records: RunRecords, progress: Progress,
                     t0: float) -> failures.Recorder:
    """The run's failure board (:class:`vitfsdp.failures.FailureBoard`, on the ranks' store:
    :func:`vitfsdp.jax.distributed.failure_store`), its watcher started as a torch run's
    (:func:`vitfsdp.failures.watch_failures`): rank 0 records a process that reported, or
    that stopped beating, while its own main thread is blocked in a collective.

    No process group is aborted after a failure (XLA's communicators cannot be aborted from
    Python): a peer blocked on a failed process errors when that process exits (gloo), or
    is recorded by rank 0's watcher (NCCL)."""
    board = failures.board_on_store(
        jdist.failure_store(env, cfg.train.timeout_s), env.rank, env.world_size,
        min(failures.GRACE_S, cfg.train.timeout_s))
    rec = failures.Recorder(board, records, progress, t0,
                            lambda: local_memory(jax.local_devices()[0]))
    failures.watch_failures(rec, cfg.train.timeout_s)
    return rec


def apply_numerics(kernels: KernelsConfig) -> dict:
    """Set ``jax_default_matmul_precision`` from ``kernels.float32_matmul_precision``
    (:data:`vitfsdp.config_jax.MATMUL_PRECISION`); returns the values read back, for run.json."""
    jax.config.update("jax_default_matmul_precision",
                      MATMUL_PRECISION[kernels.float32_matmul_precision])
    return {"float32_matmul_precision": kernels.float32_matmul_precision,
            "jax_default_matmul_precision": jax.config.jax_default_matmul_precision}


def device_type() -> str:
    """This process's device type as the torch trainer names it and run.json records it:
    ``cpu`` on JAX's CPU backend, ``cuda`` on an accelerator (any GPU backend)."""
    return "cpu" if jax.local_devices()[0].platform == "cpu" else "cuda"


def resolve(cfg: RunConfig) -> Resolved:
    """This process's device-dependent choices, resolved once at run start with the torch
    trainer's rule (``RunConfig.resolved_precision`` of the device type: ``auto`` is bf16 on
    an accelerator, fp32 on the CPU), and the peak FLOP/s for that compute dtype and
    ``jax_default_matmul_precision`` (:func:`vitfsdp.jax.metrics.resolve_peak`). Call it
    after :func:`apply_numerics`.

    Collective with ``metrics.peak=measure``: the measured peak is averaged over processes,
    so every process calls it.
    """
    name = cfg.resolved_precision(device_type())
    sharded = cfg.strategy.shard_group(cfg.world_size) > 1  # gathers and reduces in `name`
    resolved = Resolved(
        framework="jax", device_type=device_type(), precision=name, compute_dtype=name,
        precision_record={"param_dtype": "fp32", "compute_dtype": name, "grad_dtype": "fp32",
                          "reduce_dtype": name if sharded else "fp32",
                          "optimizer_state_dtype": "fp32"},
        compile=True, adamw="optax.adamw", fused_attn=cfg.kernels.fused_attn,
        allow_tf32=jax.config.jax_default_matmul_precision not in ("float32", "highest"))
    return resolved.with_peak(_peak(cfg, jax.local_devices()[0], resolved))


def _applied(resolved: Resolved, model: ViT) -> dict:
    """What the JAX build applies: dtypes, attention, remat, optimizer, XLA flags."""
    return {
        "precision": resolved.applied_precision(),
        "attention": (f"jax.nn.dot_product_attention(implementation={model.attn_impl!r})"
                      if model.fused_attn else "einsum_softmax"),
        "fused_attn": model.fused_attn,
        "activation_checkpointed_blocks": model.depth if model.remat else 0,
        "adamw": resolved.adamw,
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def run_info(cfg: RunConfig, env: DistEnv, run_dir: Path, model: ViT,
             mesh: jax.sharding.Mesh, resolved: Resolved | None = None) -> dict:
    """What ran (:func:`vitfsdp.core.runinfo.run_info`, the torch run's schema) with the
    peak of ``resolved`` (``None``: :func:`resolve` it here), plus the mesh, the number of
    processes, the bytes of parameters and AdamW state per device and the JAX versions."""
    resolved = resolved or resolve(cfg)
    shapes = jax.eval_shape(lambda: _init(model, optax.adamw(1.0), jax.random.key(0)))
    stored = jax.eval_shape(lambda: _init(model, optax.adamw(1.0), jax.random.key(0), mesh))
    world = runinfo.World(
        size=jax.device_count(), nodes=cfg.nodes, ranks_per_node=cfg.cluster.gpus_per_node,
        replicas=mesh.shape[sharding.REPLICATE_AXIS],
        sharding_strategy=cfg.strategy.sharding_strategy,
        backend="gloo" if jax.default_backend() == "cpu" else "nccl", launched_by=env.source)
    size = runinfo.ModelSize(
        num_params=count_params(shapes["params"]),
        forward_flops_per_image=models.forward_flops_per_image(cfg.model, model.num_classes),
        train_flops_per_image=models.train_flops_per_image(cfg.model, model.num_classes),
        hardware_flops_per_image=models.hardware_flops_per_image(
            cfg.model, model.num_classes, model.depth if model.remat else 0),
        img_size=model.img_size, num_classes=model.num_classes)
    info = runinfo.run_info(
        run_dir.name, provenance.config_record(cfg), world,
        device_info(jax.local_devices()[0]) | resolved.peak_record(), size,
        timer="block_until_ready+perf_counter", warmup_steps=cfg.train.warmup_steps,
        log_every=cfg.train.log_every, rank_hosts=jdist.rank_hostnames(),
        provenance=provenance.collect(
            driver=device_probe(jax.local_devices()[0]).driver_version),
        world_extra={"mesh": dict(mesh.shape), "num_processes": jax.process_count()},
        model_extra={
            "param_bytes_per_device": sharding.bytes_per_device(stored["params"], mesh),
            "optimizer_bytes_per_device": sharding.bytes_per_device(stored["opt_state"], mesh),
        })
    info["versions"] |= {name: _version(name) for name in ("jax", "jaxlib", "flax", "optax")}
    info["versions"] |= _jax_gpu_versions(jax.local_devices()[0])
    return info


def _jax_gpu_versions(device: jax.Device) -> dict:
    """What a JAX run's GPU code is, in place of torch's (``cuda``, ``cudnn``, ``nccl`` of
    :func:`vitfsdp.provenance.versions` are the CUDA/ROCm, cuDNN and NCCL of torch's build,
    not what XLA loaded): the backend's platform version (``cuda 12090``, ``rocm ...``) and
    the installed JAX GPU plugin distributions; all None on the CPU."""
    if device.platform == "cpu":
        return {"cuda": None, "rocm": None, "cudnn": None, "nccl": None, "collectives": None,
                "xla_platform": None, "jax_plugins": None}
    plugins = {d.metadata["Name"]: d.version for d in metadata.distributions()
               if re.fullmatch(r"jax[-_](cuda|rocm)\d+[-_](plugin|pjrt)",
                               d.metadata["Name"] or "", re.IGNORECASE)}
    platform = str(getattr(getattr(device, "client", None), "platform_version", "")) or None
    return {"cuda": None, "rocm": None, "cudnn": None, "nccl": None,  # torch's, not XLA's
            "collectives": "rccl" if platform and "rocm" in platform.lower() else "nccl",
            "xla_platform": platform, "jax_plugins": plugins or None}


def _peak(cfg: RunConfig, device: jax.Device, resolved: Resolved) -> dict:
    """run.json's ``device.peak_*`` (:func:`vitfsdp.jax.metrics.resolve_peak`) for
    ``resolved``'s compute dtype and the matmul precision; a measured peak is averaged over
    processes."""
    peak = resolve_peak(device, resolved.compute_dtype, jax.config.jax_default_matmul_precision,
                        cfg.metrics, warn=jax.process_index() == 0)
    if peak["peak_source"] == "measured":
        peak["peak_flops"] = float(jdist.gather_floats([peak["peak_flops"]])[:, 0].mean())
    return peak


def model_state_bytes(state: dict) -> dict:
    """summary.json's ``model_state_bytes`` for this process: the bytes of the shards of
    ``state``'s ``params`` and ``opt_state`` (AdamW) it holds (each array's addressable
    shards, all of this process's devices). ``grads`` is None: the gradients live inside
    the compiled step and are never held between steps."""
    def held(tree) -> int:
        return sum(int(shard.data.nbytes) for leaf in jax.tree_util.tree_leaves(tree)
                   if isinstance(leaf, jax.Array) for shard in leaf.addressable_shards)
    return {"params": held(state["params"]), "grads": None,
            "optimizer": held(state["opt_state"])}


def train(cfg: RunConfig, model: ViT, mesh: jax.sharding.Mesh, records: RunRecords,
          signals: failures.StopSignals | None = None, progress: Progress | None = None,
          meta: dict | None = None, resolved: Resolved | None = None) -> tuple[float, State]:
    """Initialize the sharded state, compile the step, train up to ``cfg.train.steps`` steps
    one records window at a time; the window figures use ``resolved``'s peak (:func:`resolve`;
    ``None``: resolved here).

    With ``meta`` (a checkpoint's, from :func:`vitfsdp.jax.checkpoint.find`) the state is
    restored with its shardings and training continues after ``progress.step`` with the data
    order it would have had; the first window after it counts as warm-up
    (:data:`vitfsdp.core.loop.WARMUP_RULE`). After each window but the last, the processes
    agree on whether a stop signal arrived (:func:`agreed_stop`); a checkpoint is saved
    then, and every ``train.checkpoint_every`` steps.

    Returns:
        (seconds spent lowering and compiling the train step, ``compile_s``; the final
        train state).

    Raises:
        Preempted: after saving the checkpoint of a stop signal, or (``saved``
            false) when one arrived before the first step.
    """
    tc = cfg.train
    progress = progress or Progress()
    resolved = resolved or resolve(cfg)
    tx = optax.adamw(tc.lr, weight_decay=tc.weight_decay)
    if meta is not None:
        target, state_shardings = state_layout(model, tx, mesh, tc.seed)
        state = jckpt.load(records.run_dir, target)
        log.info("resumed from the checkpoint of step %d (attempt %d)", progress.step,
                 progress.attempt)
    else:
        state, state_shardings = init_state(model, tx, mesh, tc.seed)
    batches = device_batches(cfg, mesh, skip=progress.step)
    batch = next(batches)
    collectives = step_collectives()
    log.info("compiling the train step (XLA, %s collectives)", collectives)
    t = time.perf_counter()
    step = make_train_step(model, tx, mesh, state_shardings,
                           collectives).lower(state, *batch).compile()
    compile_s = time.perf_counter() - t
    log.info("compiled the train step in %.1f s", compile_s)
    xla_memory = compiled_memory(step)
    if xla_memory:
        log.info("XLA's memory analysis of the step, per device: %s", ", ".join(
            f"{k} {v / 2**30:.2f} GiB" for k, v in xla_memory.items()))
    _record_applied(records, {"compile_s": compile_s, "step_collectives": collectives,
                              "xla_memory_bytes": xla_memory})
    global_batch = tc.local_batch_size * cfg.world_size
    info = records.run_info
    meter = JaxWindowMeter(cfg.world_size, global_batch, info["model"]["train_flops_per_image"],
                           jax.local_devices()[0], info["model"]["hardware_flops_per_image"],
                           resolved.peak_flops)
    fault = failures.parse_fault(os.environ.get(failures.FAULT_ENV))
    cold = meta is not None  # the first window after a resume is warm-up (WARMUP_RULE)
    nodecpu.join()  # the emulated node's CPU quota from the first step (not for start-up)
    # a signal during start-up, the build or the compilation
    stop_before_first_step(agreed_stop(signals), progress)
    for i, (first, last, warmup) in remaining_windows(tc, progress.step):
        warmup, cold = warmup or cold, False
        meter.start(state)
        losses = []
        for n in range(first, last + 1):
            failures.inject_fault(fault, jax.process_index(), n)
            failures.mark_progress(n)  # rank 0's watcher names a rank that stops here
            state, loss = step(state, *batch)
            if "model_state_bytes" not in records.summary_extra:  # the attempt's first step
                records.summary_extra["model_state_bytes"] = model_state_bytes(state)
            losses.append(loss)
            batch = next(batches)
        figures = meter.stop(last - first + 1, losses, state)
        # the window's steps have run only now: JAX dispatches a step and returns, and a
        # failure in one (a peer lost in its collective) surfaces where the meter waits
        progress.step = last
        records.window({"window": i, "step_start": first, "step_end": last, "warmup": warmup,
                        "num_steps": last - first + 1, "attempt": progress.attempt,
                        "global_batch_size": global_batch, **figures})
        log.info("step %d/%d%s: loss %.4f, %.1f images/s", last, tc.steps,
                 " (warm-up)" if warmup else "", figures["loss"], figures["ips"])
        failures.mark_progress(last)
        if last < tc.steps:
            checkpoint_at_boundary(
                agreed_stop(signals), tc.checkpoint_every, progress, first,
                lambda step, state=state: jckpt.save(records.run_dir, step, state, cfg=cfg,
                                                     attempt=progress.attempt))
    return compile_s, state


def agreed_stop(signals: failures.StopSignals | None) -> str | None:
    """The stop signal some process received (its name, e.g. ``SIGUSR2``), the same on every
    process; ``None`` if none did. One all-gather of the signal numbers
    (:func:`vitfsdp.jax.distributed.gather_floats`), their maximum taken."""
    if signals is None:
        return None
    signum = int(jdist.gather_floats([signals.received or 0]).max())
    return signal.Signals(signum).name if signum else None


def _init(model: ViT, tx: optax.GradientTransformation, key: jax.Array,
          mesh: jax.sharding.Mesh | None = None) -> State:
    """Draw the parameters and AdamW's initial state (traced: runs under jit/eval_shape),
    stored as on ``mesh`` (:func:`vitfsdp.jax.sharding.to_stored`; None: the model's own
    shapes)."""
    params = model.init(key, jnp.zeros(dummy_input(model).shape))["params"]
    params = sharding.to_stored(params, mesh) if mesh is not None else params
    return {"params": params, "opt_state": tx.init(params)}


def init_state(model: ViT, tx: optax.GradientTransformation, mesh: jax.sharding.Mesh,
               seed: int) -> tuple[State, Any]:
    """The initial train state, laid out by :func:`vitfsdp.jax.sharding.tree_shardings`:
    one jitted init whose outputs are sharded, so each device draws only what it holds
    (nothing is built whole first). JAX's partitionable threefry RNG draws the same values
    whatever the layout, so every strategy starts from the same weights for ``seed``.

    Returns:
        (state, the NamedSharding pytree of the state).
    """
    _, shardings = state_layout(model, tx, mesh, seed)
    state = jax.jit(lambda: _init(model, tx, jax.random.key(seed), mesh),
                    out_shardings=shardings)()
    return state, shardings


def state_layout(model: ViT, tx: optax.GradientTransformation, mesh: jax.sharding.Mesh,
                 seed: int) -> tuple[Any, Any]:
    """The train state's shapes and layout, nothing computed (``jax.eval_shape``).

    Returns:
        (the state as ``jax.ShapeDtypeStruct`` leaves carrying their sharding: a restore
        target, :func:`vitfsdp.jax.checkpoint.load`; the NamedSharding pytree of the state,
        :func:`vitfsdp.jax.sharding.tree_shardings`).
    """
    abstract = jax.eval_shape(lambda: _init(model, tx, jax.random.key(seed), mesh))
    shardings = sharding.tree_shardings(abstract, mesh)
    target = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract, shardings)
    return target, shardings


#: How the train step's collectives are placed (:func:`make_train_step`).
STEP_COLLECTIVES = ("explicit", "xla")


def step_collectives(backend: str | None = None) -> str:
    """Which step :func:`make_train_step` builds on JAX ``backend`` (``None``:
    ``jax.default_backend()``): ``explicit`` on ``cpu``, where XLA's CPU runtime runs a combined
    collective as one gloo call per parameter (docs/jax.md); ``xla`` on accelerators, where
    XLA's SPMD partitioner places the collectives, combines them into single NCCL/RCCL calls
    and gathers the weights in the compute dtype."""
    return "explicit" if (backend or jax.default_backend()) == "cpu" else "xla"


def make_train_step(model: ViT, tx: optax.GradientTransformation, mesh: jax.sharding.Mesh,
                    state_shardings: Any, collectives: str | None = None):
    """The jitted AdamW step ``(state, images (B,3,H,W) f32, labels (B,) i32) → (state,
    mean cross-entropy over the global batch)``; the state is donated (updated in place).

    ``collectives`` (``None``: :func:`step_collectives` of the backend):

    - ``explicit``: the loss and gradients come from
      :func:`vitfsdp.jax.sharding.sharded_value_and_grad`: each FSDP unit's weights
      all-gathered and its gradients reduce-scattered (or, where parameters are whole,
      all-reduced in buckets), one collective per unit on a flat buffer.
    - ``xla``: activations kept split by batch
      (:func:`vitfsdp.jax.sharding.activation_constraint`) and gradients constrained to the
      parameters' layout; XLA's SPMD partitioner all-gathers weights and reduce-scatters
      gradients where they are used.

    Raises:
        ValueError: ``collectives`` is not one of :data:`STEP_COLLECTIVES`.
    """
    collectives = collectives or step_collectives()
    if collectives not in STEP_COLLECTIVES:
        raise ValueError(f"collectives={collectives!r}; valid: {', '.join(STEP_COLLECTIVES)}")
    shapes = param_shapes(model)  # what from_stored gives the model back

    if collectives == "explicit":
        def loss_fn(params: Any, images: jax.Array, labels: jax.Array) -> jax.Array:
            logits = model.apply({"params": sharding.from_stored(params, shapes)}, images)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        value_and_grad = sharding.sharded_value_and_grad(loss_fn, mesh, model.dtype)
    else:
        constrained = model.clone(constrain=sharding.activation_constraint(mesh))
        grad_shardings = state_shardings["params"]

        def value_and_grad(params: Any, images: jax.Array, labels: jax.Array):
            def loss_fn(p: Any) -> jax.Array:
                logits = constrained.apply({"params": sharding.from_stored(p, shapes)}, images)
                return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

            if not sharding.in_compute_dtype(params, mesh, model.dtype):
                loss, grads = jax.value_and_grad(loss_fn)(params)
                return loss, jax.lax.with_sharding_constraint(grads, grad_shardings)
            # cast on the shards: the gathers carry the compute dtype, and so does the
            # gradients' reduction (torch FSDP's MixedPrecision; vitfsdp.jax.sharding)
            low = jax.lax.with_sharding_constraint(
                jax.tree.map(lambda x: x.astype(model.dtype), params), grad_shardings)
            loss, grads = jax.value_and_grad(loss_fn)(low)
            grads = jax.lax.with_sharding_constraint(grads, grad_shardings)
            return loss, jax.tree.map(lambda g, x: g.astype(x.dtype), grads, params)

    def step(state: State, images: jax.Array, labels: jax.Array) -> tuple[State, jax.Array]:
        loss, grads = value_and_grad(state["params"], images, labels)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates),
                "opt_state": opt_state}, loss

    batch = sharding.batch_sharding(mesh)
    return jax.jit(step, in_shardings=(state_shardings, batch, batch),
                   out_shardings=(state_shardings, sharding.replicated(mesh)),
                   donate_argnums=0)


#: Batches placed on the devices ahead of the one a step runs on: their host-to-device
#: copies (asynchronous in JAX) overlap the steps before them.
PREFETCH_BATCHES = 2


def device_batches(cfg: RunConfig, mesh: jax.sharding.Mesh,
                   skip: int = 0) -> Iterator[tuple[jax.Array, ...]]:
    """Endless global batches (images (B,3,H,W) float32, labels (B,) int32, B = local batch ×
    world), split over the mesh's devices, after the first ``skip`` (drawn and dropped on
    the host, so a resumed run sees the data an uninterrupted one would), placed
    :data:`PREFETCH_BATCHES` ahead of the one yielded.

    This process reads its part with :func:`vitfsdp.data.batches` as rank
    ``jax.process_index()`` of ``jax.process_count()`` (local batch × its devices), so with
    one device per process each rank reads what the torch run's rank reads, with the loader
    workers a torch rank on this device type would have (:func:`vitfsdp.data.resolved_workers`).
    Real images travel as uint8 and are normalized on the devices (:func:`normalize`).
    ``synthetic`` yields one batch again and again, placed on the devices once.
    """
    local_devices = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
    data_cfg = dataclasses.replace(
        cfg.data, num_workers=data.resolved_workers(cfg.data, device_type()))
    source = data.batches(data_cfg, img_size=cfg.model.resolved_img_size(),
                          local_batch_size=cfg.train.local_batch_size * local_devices,
                          rank=jax.process_index(), world_size=jax.process_count(),
                          device=torch.device("cpu"), seed=cfg.train.seed, normalized=False)
    skip_batches(source, skip)
    placed = _placed(source, sharding.batch_sharding(mesh))
    ahead = collections.deque(itertools.islice(placed, PREFETCH_BATCHES))
    while True:
        ahead.append(next(placed))
        yield ahead.popleft()


def _placed(source: Iterator[tuple[torch.Tensor, torch.Tensor]],
            target: jax.sharding.Sharding) -> Iterator[tuple[jax.Array, jax.Array]]:
    """Each host batch of ``source`` put on the devices of ``target`` (a batch object seen
    again, synthetic's, is not copied again); uint8 images normalized there."""
    last, placed = None, None
    for x, y in source:
        if x is not last:
            images = jax.make_array_from_process_local_data(target, x.numpy())
            placed = (normalize(images) if images.dtype == jnp.uint8 else images,
                      jax.make_array_from_process_local_data(target, y.numpy().astype(np.int32)))
            last = x
        yield placed


@jax.jit
def normalize(images: jax.Array) -> jax.Array:
    """uint8 images (B, 3, H, W) as float32 scaled to [0, 1] and normalized per channel with
    ImageNet's statistics (:func:`vitfsdp.data.normalize`, on JAX's devices)."""
    mean = jnp.asarray(data.IMAGENET_MEAN, jnp.float32).reshape(1, 3, 1, 1)
    std = jnp.asarray(data.IMAGENET_STD, jnp.float32).reshape(1, 3, 1, 1)
    return (images.astype(jnp.float32) / 255.0 - mean) / std


#: The fields of XLA's ``CompiledMemoryStats`` that :func:`compiled_memory` keeps.
XLA_MEMORY_FIELDS = ("argument", "output", "alias", "temp", "generated_code")


def compiled_memory(compiled: Any) -> dict[str, int] | None:
    """XLA's own memory analysis of a compiled step (``Compiled.memory_analysis()``), bytes per
    device: ``argument`` (the state and batch passed in), ``output``, ``alias`` (outputs
    written over donated arguments), ``temp`` (everything the step allocates while it runs:
    activations, gathered weights, gradients before the update) and ``generated_code``, plus
    ``peak`` where the jaxlib reports it. A static figure of the compiled program, recorded
    beside the measured ``peak_bytes_in_use``; ``None`` where the backend gives none.
    """
    try:
        stats = compiled.memory_analysis()
    except (AttributeError, NotImplementedError, RuntimeError):
        return None
    if stats is None:
        return None
    out = {k: int(getattr(stats, f"{k}_size_in_bytes")) for k in XLA_MEMORY_FIELDS
           if hasattr(stats, f"{k}_size_in_bytes")}
    if getattr(stats, "peak_memory_in_bytes", None):
        out["peak"] = int(stats.peak_memory_in_bytes)
    return out or None


def _record_applied(records: RunRecords, applied: dict) -> None:
    """Add ``applied`` to run.json's ``applied`` section now (rank 0 writes)."""
    records.run_info.setdefault("applied", {}).update(applied)
    if records.is_writer:
        write_json_atomic(records.run_dir / RUN_FILE, records.run_info)


def _version(dist_name: str) -> str | None:
    try:
        return metadata.version(dist_name)
    except metadata.PackageNotFoundError:
        return None
