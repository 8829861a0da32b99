"""Every GPU path of vitfsdp on the GPUs of this machine (``make test-gpu``).

Marker ``gpu``; without a GPU (``torch.cuda.is_available()`` false, CUDA or ROCm) every test
is collected and skipped, so CPU CI pays only the collection. The two-rank tests also need
a second GPU. On a GPU node:

    make test-gpu        # = pip install -e ".[dev]"; pytest -m gpu -v tests/integration/test_gpu.py

What each test checks, on the device itself:

- the window meter's CUDA-event time agrees with a synchronized wall clock (10%) over a
  window of a fixed matmul workload, on the current GPU and on a GPU that is not current;
- the device-memory probe (NVML via nvidia-ml-py, AMD SMI on ROCm) sees 1 GiB allocated on
  the device, and names torch's device by PCI bus id, also when ``CUDA_VISIBLE_DEVICES``
  reorders the GPUs;
- :data:`vitfsdp.metrics.PEAK_TABLE` has a row for this device, and a bf16 GEMM reaches a
  plausible share of it;
- ``python -m vitfsdp.train`` on one GPU with the default GPU recipe (bf16, fused AdamW,
  compiled blocks) completes with MFU, device memory, the device's busy share and allocator
  retries recorded; under ``framework=jax`` it records the busy share and device memory too;
- an out-of-memory error on the GPU is recorded ``oom``, not ``failed``;
- two NCCL ranks: FULL_SHARD completes (really sharded), and a killed rank is recorded
  ``failed`` by rank 0 without waiting for the collective timeout;
- ``python -m vitfsdp.bench`` completes all three paths at the same batch and precision;
- the plan's per-block activations are what autograd saves on the GPU: bf16 parameters
  (FSDP's mixed precision), CUDA autocast (DDP: the residual stream in fp32, the weights'
  bf16 copies left out), and a compiled block (inductor's CUDA partition).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from tests.conftest import read, run_module

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no GPU: torch.cuda.is_available() is false (CUDA or ROCm)"),
]
needs_two_gpus = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"needs 2 GPUs on this node, torch sees {torch.cuda.device_count()}")

GIB = 1024**3
#: A one-GPU training run of vit_tiny with the default GPU recipe (nothing switched off).
ONE_GPU = ["model=vit_tiny", "data=synthetic", "device=cuda", "nodes=1",
           "cluster.gpus_per_node=1", "train.local_batch_size=32", "train.steps=12",
           "train.warmup_steps=4", "train.log_every=4"]
#: Two ranks on this node, NCCL, FULL_SHARD.
TWO_GPUS = ["model=vit_tiny", "data=synthetic", "device=cuda", "nodes=1",
            "cluster.gpus_per_node=2", "strategy=FULL_SHARD", "train.local_batch_size=32",
            "train.steps=12", "train.warmup_steps=4", "train.log_every=4"]


def _train(tmp_path, overrides, nproc=1, env=None, timeout=600):
    """``vitfsdp.train`` as a sweep point runs it (torchrun for 2 ranks): (code, output, s,
    run dir)."""
    from vitfsdp.launch.local import quote_override, torchrun_command

    run_dir = tmp_path / "run"
    if nproc == 1:
        cmd = [sys.executable, "-m", "vitfsdp.train", *overrides,
               f"hydra.run.dir={quote_override(str(run_dir))}", "hydra.output_subdir=null"]
    else:
        cmd = torchrun_command(overrides, run_dir, nproc)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0, run_dir


def _recompiles(output: str) -> list[str]:
    """The lines of ``TORCH_LOGS=recompiles`` output that report a recompilation. The blocks
    must share one compiled graph: a recompile per block would, past dynamo's
    ``cache_size_limit`` (8), leave the later blocks of a 32-block ViT-H/14 uncompiled.
    (None on CPU, FSDP1 bf16 NO_SHARD and 2-rank FULL_SHARD, 2026-11-21.)"""
    return [line for line in output.splitlines() if "Recompiling function" in line]


# --- the measurement side -----------------------------------------------------------------


@pytest.mark.parametrize("which", ["current", "not_current"])
def test_cuda_event_window_time_agrees_with_the_wall_clock(which):
    from vitfsdp.metrics import WindowMeter

    if which == "not_current" and torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs: a meter of a GPU that is not the current device")
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0 if which == "current" else torch.cuda.device_count() - 1)
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for _ in range(3):  # kernel selection, clocks up
        torch.mm(a, a, out=c)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(10):
        torch.mm(a, a, out=c)
    torch.cuda.synchronize(device)
    reps = max(20, math.ceil(1.0 / ((time.perf_counter() - t0) / 10)))  # about 1 s of work
    meter = WindowMeter(device, world_size=1, global_batch_size=1, train_flops_per_image=1.0)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    meter.start()
    for _ in range(reps):
        torch.mm(a, a, out=c)
    figures = meter.stop(reps, torch.zeros((), device=device))
    wall_s = time.perf_counter() - t0
    print(f"{device}: {reps} GEMMs, CUDA events {figures['time_s']:.4f} s, wall {wall_s:.4f} s")
    assert figures["time_s"] == pytest.approx(wall_s, rel=0.10)


def test_device_memory_probe_sees_an_allocation_on_this_device():
    from vitfsdp.metrics import DeviceMemoryProbe, device_info

    device = torch.device("cuda", torch.cuda.current_device())
    probe = DeviceMemoryProbe(device)
    assert probe.backend is not None, (
        "no device memory figures: install nvidia-ml-py (NVIDIA) or ROCm's amdsmi Python "
        "package (AMD); the warning above says why the probe could not open")
    assert probe.pci_bus_id == device_info(device)["pci_bus_id"], (
        f"the driver's handle is the GPU at PCI {probe.pci_bus_id}, torch's {device} is at "
        f"{device_info(device)['pci_bus_id']}")
    torch.cuda.empty_cache()  # the 1 GiB below must come from the driver, not the cache
    torch.cuda.synchronize(device)
    before = probe.used_gib()
    block = torch.ones(GIB // 4, dtype=torch.float32, device=device)  # 1 GiB, written
    torch.cuda.synchronize(device)
    after = probe.used_gib()
    print(f"{probe.backend}: {before:.3f} GiB used, {after:.3f} GiB with 1 GiB allocated")
    assert 0.9 <= after - before <= 1.5
    del block
    torch.cuda.empty_cache()


@needs_two_gpus
def test_memory_probe_follows_reordered_visible_devices(tmp_path):
    """With CUDA_VISIBLE_DEVICES in reverse order, each torch device's probe is the GPU at
    torch's PCI bus id (not the driver's device of the same index)."""
    n = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = visible.split(",") if visible else [str(i) for i in range(n)]
    script = textwrap.dedent("""
        import json, torch
        from vitfsdp.metrics import DeviceMemoryProbe, device_info
        print(json.dumps([[device_info(torch.device("cuda", i))["pci_bus_id"],
                           DeviceMemoryProbe(torch.device("cuda", i)).pci_bus_id]
                          for i in range(torch.cuda.device_count())]))
    """)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(reversed(entries))}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pairs = json.loads(proc.stdout.strip().splitlines()[-1])
    from vitfsdp.metrics import device_info

    here = [device_info(torch.device("cuda", i))["pci_bus_id"] for i in range(n)]
    assert [torch_bdf for torch_bdf, _ in pairs] == here[::-1]  # the reorder took effect
    assert all(torch_bdf == probe_bdf for torch_bdf, probe_bdf in pairs), pairs


def test_peak_table_names_this_device():
    from vitfsdp.metrics import PEAK_TABLE, match_device, measure_matmul_peak, table_peak

    device = torch.device("cuda", torch.cuda.current_device())
    name = torch.cuda.get_device_name(device)
    key = match_device(name)
    assert key is not None, (
        f"device {name!r} is missing from vitfsdp.metrics.PEAK_TABLE (rows: "
        f"{', '.join(PEAK_TABLE)}): add its dense bf16/TF32/fp32 peaks from its data sheet")
    peak, source = table_peak(name, "bf16", allow_tf32=False)
    assert source == f"table:{key} bf16"
    measured = measure_matmul_peak(device, "bf16")
    print(f"{name}: PEAK_TABLE row {key!r}, bf16 {peak / 1e12:.1f} TFLOP/s; an 8192^3 bf16 "
          f"GEMM reaches {measured / 1e12:.1f} ({measured / peak:.0%})")
    # a dense GEMM cannot beat the dense peak; far below it, the row is another chip's
    assert 0.25 * peak <= measured <= 1.05 * peak


# --- training on the GPU ----------------------------------------------------------------------


@pytest.mark.parametrize("batch", [32, 128])
def test_one_gpu_training_run_uses_the_gpu_recipe_and_records_it(tmp_path, batch):
    from vitfsdp.config import COMPILE_MIN_FSDP1_BATCH
    from vitfsdp.models import VARIANTS

    overrides = [o for o in ONE_GPU if not o.startswith("train.local_batch_size=")]
    code, out, seconds, run_dir = _train(tmp_path, [*overrides, f"train.local_batch_size={batch}"],
                                         env={"TORCH_LOGS": "recompiles"})
    assert code == 0, out[-4000:]
    run, summary = read(run_dir / "run.json"), read(run_dir / "summary.json")
    applied = run["applied"]
    print(f"{seconds:.0f} s; applied {applied}\nsummary {summary}")
    assert summary["status"] == "completed"
    assert applied["precision"]["name"] == "bf16" and applied["adamw"] == "fused"
    # FSDP1 below COMPILE_MIN_FSDP1_BATCH: eager blocks on flat parameters; above: compiled
    compiled = batch >= COMPILE_MIN_FSDP1_BATCH
    assert applied["compiled_blocks"] == (VARIANTS["vit_tiny"].depth if compiled else 0)
    assert applied["use_orig_params"] is compiled
    assert (run["timing"]["timer"], run["world"]["backend"]) == ("cuda_event", "nccl")
    assert summary["mfu"] is not None, (
        f"mfu is null: {run['device']['name']!r} has no row in vitfsdp.metrics.PEAK_TABLE")
    assert summary["device_mem_used_gib"] is not None and summary["device_mem_used_gib"] > 0
    assert summary["device_busy_frac"] is not None and 0 <= summary["device_busy_frac"] <= 1
    assert summary["alloc_retries"] is not None and summary["peak_mem_allocated_gib"] > 0
    assert run["versions"].get("driver"), "run.json versions.driver is empty"
    assert not _recompiles(out), "\n".join(_recompiles(out)[:10])


def test_one_gpu_jax_run_records_the_drivers_figures(tmp_path):
    """``framework=jax`` on this GPU: completed, with the driver's busy share and memory in
    use read through NVML by the JAX device's CUDA index (no torch in the measurement), and
    the driver version in run.json. XLA preallocation off, so the memory in use is the
    step's, not the 75% pool."""
    probe = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    if probe.returncode != 0 or probe.stdout.strip().splitlines()[-1:] != ["gpu"]:
        pytest.skip(f"JAX has no GPU backend here: {(probe.stdout + probe.stderr)[-300:]}")
    if torch.version.hip:
        pytest.skip("ROCm: the JAX trainer reads no driver figures (AMD SMI needs the PCI bus "
                    "id, which a JAX device does not give)")
    code, out, seconds, run_dir = _train(tmp_path, [*ONE_GPU, "framework=jax"],
                                         env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert code == 0, out[-4000:]
    run, summary = read(run_dir / "run.json"), read(run_dir / "summary.json")
    print(f"{seconds:.0f} s; summary {summary}")
    assert summary["status"] == "completed" and run["device"]["type"] == "cuda"
    assert "are null" not in out, [line for line in out.splitlines() if "are null" in line]
    assert summary["device_busy_frac"] is not None and 0 <= summary["device_busy_frac"] <= 1
    assert summary["device_mem_used_gib"] is not None and summary["device_mem_used_gib"] > 0
    assert run["versions"].get("driver"), "run.json versions.driver is empty"


def test_out_of_memory_on_the_gpu_is_recorded_oom(tmp_path):
    """vit_tiny at a batch of 65536 (about 7 GiB of bf16 activations) in a process allowed
    1 GiB of the GPU (``torch.cuda.set_per_process_memory_fraction``; train.memory_limit_gib
    limits host memory and is refused on GPUs)."""
    from vitfsdp import distributed, failures, torch_train
    from vitfsdp.bench.throughput import BenchOptions, bench_config

    device = distributed.pick_device("cuda", 0)
    opts = BenchOptions(batch=65536, steps=2, warmup=0, log_every=1,
                        overrides=["kernels.compile=false"]).resolve("cuda")
    cfg = bench_config("vit_tiny", opts, device)
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(device).total_memory
    allowed = torch.cuda.memory_reserved(device) + GIB
    torch.cuda.set_per_process_memory_fraction(allowed / total, device)
    try:
        with distributed.process_group(distributed.DistEnv(), device, timeout_s=300):
            with pytest.raises(failures.RunFailed) as raised:
                torch_train.run(cfg, distributed.DistEnv(), device, tmp_path / "run")
        assert raised.value.status == "oom", raised.value.reason
        del raised
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()
    summary = read(tmp_path / "run" / "summary.json")
    print("status", summary["status"], "memory", summary.get("memory_at_failure"))
    assert summary["status"] == "oom" and summary["ips"] is None
    assert summary["memory_at_failure"]["peak_mem_allocated_gib"] is not None


@needs_two_gpus
def test_two_ranks_full_shard_over_nccl(tmp_path):
    # compiled blocks named: at batch 32 FSDP1 would run them eagerly
    code, out, seconds, run_dir = _train(tmp_path, [*TWO_GPUS, "kernels.compile=true"],
                                         nproc=2, env={"TORCH_LOGS": "recompiles"})
    assert code == 0, out[-4000:]
    run, summary = read(run_dir / "run.json"), read(run_dir / "summary.json")
    print(f"{seconds:.0f} s; {summary['ips']:.0f} images/s, mfu {summary['mfu']}")
    assert summary["status"] == "completed"
    assert (run["world"]["size"], run["world"]["backend"]) == (2, "nccl")
    assert run["applied"]["sharding_strategy"] == "FULL_SHARD"  # sharded, not NO_SHARD
    assert summary["device_mem_used_min_gib"] is not None  # every rank's probe answered
    assert not _recompiles(out), "\n".join(_recompiles(out)[:10])


@needs_two_gpus
def test_killed_rank_is_recorded_failed_without_waiting_for_the_timeout(tmp_path):
    """Rank 1 SIGKILLs itself before step 6; rank 0 records ``failed`` naming rank 1 as
    silent, long before the 300 s collective timeout. (On NCCL a collective with a dead
    peer may not error before the timeout, unlike gloo's in test_failures.py, and the
    host of rank 0 may have queued a few steps more: last_step is 5 to 8.)"""
    from vitfsdp import failures

    code, out, seconds, run_dir = _train(
        tmp_path, [*TWO_GPUS, "kernels.compile=false", "train.timeout_s=300"], nproc=2,
        env={failures.FAULT_ENV: "kill:1:6"})
    assert (run_dir / "summary.json").exists(), (
        f"nothing recorded after {seconds:.0f} s (exit {code}): rank 0 ended before it could "
        f"record; run.json status {read(run_dir / 'run.json').get('status')}\n{out[-4000:]}")
    summary = read(run_dir / "summary.json")
    print(f"status {summary['status']} last_step {summary['last_step']} in {seconds:.0f} s\n"
          f"reason {summary['reason']}")
    assert code != 0 and seconds < 150
    assert summary["status"] == "failed" and 5 <= summary["last_step"] <= 8
    assert "ranks [1] sent no report" in summary["reason"]


# --- the single-GPU benchmark ---------------------------------------------------------------


def test_bench_runs_all_three_paths_at_the_same_batch_and_precision(tmp_path):
    import pandas as pd

    out = tmp_path / "bench"
    proc = run_module("vitfsdp.bench", "--device", "cuda", "--models", "vit_tiny", "--batch",
                      "8", "--steps", "12", "--warmup", "4", "--log-every", "4", "--out",
                      str(out), cwd=tmp_path)
    print(proc.stdout)
    # exit 1 also when a target check fails: vit_tiny is not what the targets are set for
    assert proc.returncode == 0 or (proc.returncode == 1 and "FAIL" in proc.stdout), (
        proc.stdout[-3000:] + proc.stderr[-4000:])
    table = pd.read_csv(out / "bench.csv")
    assert sorted(table["path"]) == ["fsdp", "timm", "unwrapped"]
    assert (table["status"] == "completed").all()
    assert (table["train_batch_size"] == 8).all() and (table["precision"] == "bf16").all()
    for col in ("train_samples_per_sec", "vs_timm", "vs_unwrapped"):
        assert table[col].map(lambda v: math.isfinite(v) and v > 0).all(), table[col]


@pytest.mark.parametrize("model,mode", [
    ("vit_base", "bf16"), ("vit_base", "autocast"), ("vit_base", "compiled"),
    ("vit_huge_patch14_224", "compiled"),  # timm's GELU MLP, as the bench's H/14
])
def test_block_activations_are_what_autograd_saves_on_the_gpu(model, mode):
    """One block at 224 px, batch 2, on this GPU: the bytes autograd saves for backward
    (:func:`tests.conftest.saved_for_backward_bytes`) against the plan's
    :func:`vitfsdp.plan.memory.block_activation_bytes`, within 2 % (the attention kernel's
    log-sum-exp may be padded; LayerNorm's statistics are left out of the plan)."""
    from tests.conftest import saved_for_backward_bytes
    from vitfsdp.models import ModelConfig, build_model
    from vitfsdp.plan.memory import block_activation_bytes

    cfg = ModelConfig(name=model)
    net = build_model(cfg, 10, device="cuda")
    block = net.blocks[0]
    if mode != "autocast":
        block = block.to(torch.bfloat16)
    n, d = net.patch_embed.num_patches + 1, net.embed_dim
    dtype = torch.float32 if mode == "autocast" else torch.bfloat16
    x = torch.randn(2, n, d, dtype=dtype, device="cuda", requires_grad=True)
    if mode == "compiled":
        block = torch.compile(block)
        block(x).sum().backward()
    measured = saved_for_backward_bytes(block, x, torch.bfloat16 if mode == "autocast" else None)
    residual = "fp32" if mode == "autocast" else "bf16"
    predicted = 2 * block_activation_bytes(cfg, dtype="bf16", residual_dtype=residual,
                                           compiled=mode == "compiled")
    assert predicted == pytest.approx(measured, rel=0.02), (measured, predicted)
