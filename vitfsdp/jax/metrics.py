"""Timing windows of the JAX trainer: the same figures, under the same names, as
:class:`vitfsdp.metrics.WindowMeter` (see :mod:`vitfsdp.metrics` for the definitions).

The clock is read only at window boundaries, after ``jax.block_until_ready`` on the train
state: JAX dispatches asynchronously, so no step in between waits on the host. The elapsed
time is the slowest process's; the loss is the step's global mean (the jitted step averages
over the whole batch), summed over the window's steps on the host at its end.

Memory: on a GPU, ``peak_mem_allocated_gib`` is XLA's ``peak_bytes_in_use`` and
``peak_mem_reserved_gib`` its ``peak_pool_bytes`` where the allocator reports it; JAX cannot
reset peaks, so they are the peaks since the process started (after the warm-up windows this
is the steady-state peak). On the CPU, as in torch runs, the ranks' peak resident memory
(VmHWM, reset per window) is ``peak_rss_gib``. Every memory figure is the maximum over ranks,
with the minimum over ranks beside it (``*_min_gib``), as in torch runs.

On an NVIDIA GPU the driver's figures come from NVML as in torch runs
(:meth:`vitfsdp.metrics.DeviceMemoryProbe.of_cuda_index`, :func:`device_probe`):
``device_busy_frac`` (mean over ranks, with ``device_busy_min_frac``), the share of the window
during which a kernel ran, so a JAX point the host decided is marked as a torch point is; and
``device_mem_used_gib``, the whole device's memory in use, which under XLA's default
preallocation (``XLA_PYTHON_CLIENT_PREALLOCATE``, 75% of the device, or
``XLA_PYTHON_CLIENT_MEM_FRACTION``) is the pool XLA took, not what the step needs. Null on the
CPU, on ROCm (AMD SMI finds a GPU by its PCI bus id, which a JAX device does not give) and
where nvidia-ml-py is missing. What JAX cannot measure is null under the torch names:
``alloc_retries`` and ``num_ooms`` (XLA's allocator keeps no such counts).

Other work on the ranks' host during each window (``host_other_cpus``, with
``host_own_cpus``) is measured as in torch runs (:mod:`vitfsdp.metrics`): each process reads
the wall clock, the host's busy CPU seconds (``/proc/stat``) and its own process tree's CPU
seconds at the window's start and end, with its host's id; the figures are gathered with the
window's others and reduced by :func:`vitfsdp.metrics.host_other_cpus`, so the analysis
judges a JAX run's windows by the same bound as a torch run's
(:data:`vitfsdp.core.throughput.WINDOW_OTHER_WORK_FRAC`). XLA's CPU threads and the data
loader workers are the process's own work.

The peak FLOP/s follows :func:`vitfsdp.metrics.resolve_peak`'s rules: the table
(:data:`vitfsdp.metrics.PEAK_TABLE`, matched in ``device.device_kind``) for the compute
dtype and matmul precision, or a timed GEMM with ``metrics.peak=measure``
(:func:`measure_matmul_peak`); null, with one warning, on the CPU or an unknown GPU.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vitfsdp.core.throughput import window_figures
from vitfsdp.jax.distributed import gather_floats
from vitfsdp.metrics import (
    GIB,
    DeviceMemoryProbe,
    MetricsConfig,
    _cpu_now,
    _finite,
    _read_vm_hwm_gib,
    _reset_vm_hwm,
    _warn_once,
    cpu_name,
    host_other_cpus,
    peak_kind,
    table_peak,
)
from vitfsdp.records import host_id

_DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}


def measure_matmul_peak(device: jax.Device, compute_dtype: str, size: int = 0,
                        min_time_s: float = 0.2) -> float:
    """Achievable matmul FLOP/s of ``device``: a jitted ``size`` × ``size`` GEMM in the
    compute dtype (under the current ``jax_default_matmul_precision``), timed after a
    warm-up over enough repetitions to last ``min_time_s``; 2·size³ FLOPs per GEMM.

    Args:
        size: matrix side; 0 = 8192 on a GPU, 1024 on the CPU.
    """
    size = size or (1024 if device.platform == "cpu" else 8192)
    key = jax.random.key(0)
    a = jax.device_put(jax.random.normal(key, (size, size), _DTYPES[compute_dtype]), device)
    mm = jax.jit(jnp.matmul)
    jax.block_until_ready(mm(a, a))  # compile and warm up
    reps = 1
    while True:
        t0 = time.perf_counter()
        out = [mm(a, a) for _ in range(reps)]
        jax.block_until_ready(out)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time_s or reps >= 1 << 16:
            return 2 * size**3 * reps / elapsed
        reps = max(reps * 2, int(reps * min_time_s / max(elapsed, 1e-6)) + 1)


def resolve_peak(device: jax.Device, compute_dtype: str, matmul_precision: str,
                 cfg: MetricsConfig | None = None, warn: bool = True) -> dict:
    """run.json's ``device.peak_flops``/``peak_source``/``peak_kind`` for a JAX device, as
    :func:`vitfsdp.metrics.resolve_peak`: fp32 matmuls count as TF32 unless
    ``matmul_precision`` (``jax_default_matmul_precision``) is ``float32``/``highest``."""
    cfg = cfg or MetricsConfig()
    kind = peak_kind(compute_dtype, matmul_precision not in ("float32", "highest"))
    if cfg.peak == "measure":
        flops = measure_matmul_peak(device, compute_dtype, cfg.peak_matmul_size)
        return {"peak_flops": flops, "peak_source": "measured", "peak_kind": kind}
    flops = source = None
    if device.platform != "cpu":
        flops, source = table_peak(device.device_kind, compute_dtype, kind == "tf32")
    if flops is None and warn:
        _warn_once(f"peak:{device.device_kind}", "no peak FLOP/s known for JAX device %r: mfu "
                   "and hfu are null (add it to vitfsdp.metrics.PEAK_TABLE, or set "
                   "metrics.peak=measure)", device.device_kind)
    return {"peak_flops": flops, "peak_source": source, "peak_kind": kind}


def device_info(device: jax.Device) -> dict:
    """Type (``cpu`` or ``cuda``, as torch runs record it), name and memory (GiB; ``None`` on
    the CPU; on a GPU XLA's pool and a null total, :func:`gpu_memory`) of ``device``, and
    the host's logical CPUs (``host_cpus``, what each window's
    ``host_other_cpus`` is judged against, on any device as in torch runs), for run.json."""
    if device.platform == "cpu":
        return {"type": "cpu", "name": cpu_name(), "memory_gib": None, "jax_platform": "cpu",
                "host_cpus": os.cpu_count()}
    return {"type": "cuda", "name": device.device_kind, **gpu_memory(device.memory_stats()),
            "jax_platform": device.platform, "host_cpus": os.cpu_count()}


def gpu_memory(stats: dict | None) -> dict[str, float | None]:
    """run.json's memory fields of a JAX GPU from its ``jax.Device.memory_stats()`` (XLA's
    allocator statistics, bytes), in GiB:

    - ``memory_gib``: XLA's pool, ``bytes_limit`` (what the allocator may hand out: 75% of
      the device by default, ``XLA_PYTHON_CLIENT_MEM_FRACTION``); the analysis reads it as
      the run's memory limit (:func:`vitfsdp.analysis.rows.memory_limit`). None where absent.
    - ``total_memory_gib``: the device's total memory, the figure a torch run records as
      ``memory_gib`` (``torch.cuda.get_device_properties().total_memory``). Always None:
      JAX exposes no total. PJRT's statistics hold ``num_allocs``, ``bytes_in_use``,
      ``peak_bytes_in_use``, ``largest_alloc_size``, ``bytes_limit``, ``bytes_reserved``,
      ``peak_bytes_reserved``, ``bytes_reservable_limit``, ``largest_free_block_bytes``,
      ``pool_bytes`` and ``peak_pool_bytes``, all of them the allocator's, none the
      device's; the pool over an assumed fraction would be a guess, and torch is not asked
      (its CUDA context would take device memory beside XLA's). The analysis takes the
      cluster profile's ``cluster.device_memory_gib`` for it.

    Args:
        stats: ``memory_stats()`` of the device; None (a backend without statistics) gives
            None for both.
    """
    limit = (stats or {}).get("bytes_limit")
    return {"memory_gib": limit / GIB if limit else None, "total_memory_gib": None}


def local_memory(device: jax.Device) -> dict:
    """This process's memory figures, without any collective (for a failure report, when
    collectives may be broken), GiB: ``peak_mem_allocated_gib`` and ``peak_mem_reserved_gib``
    (XLA's ``peak_bytes_in_use`` and ``peak_pool_bytes`` on a GPU, since the process
    started; None on the CPU or where unreported), ``peak_rss_gib`` (VmHWM since the
    window started; None where unreadable), the keys of :func:`vitfsdp.metrics.local_memory`."""
    try:
        stats = (device.memory_stats() or {}) if device.platform != "cpu" else {}
    except RuntimeError:  # a device in error after the failure
        stats = {}
    alloc, reserved = (stats[k] / GIB if k in stats else None
                       for k in ("peak_bytes_in_use", "peak_pool_bytes"))
    return {"peak_mem_allocated_gib": alloc, "peak_mem_reserved_gib": reserved,
            "peak_rss_gib": _read_vm_hwm_gib()}


def device_probe(device: jax.Device) -> DeviceMemoryProbe:
    """The driver's view of ``device`` (:class:`vitfsdp.metrics.DeviceMemoryProbe`): its
    memory in use and how busy it was, through NVML on an NVIDIA GPU, found by its CUDA
    ordinal (``local_hardware_id``) and checked by its name (``device_kind``); every figure
    None on the CPU and on ROCm (:meth:`DeviceMemoryProbe.of_cuda_index`)."""
    index = getattr(device, "local_hardware_id", None)
    if device.platform == "cpu" or index is None:
        return DeviceMemoryProbe(None)
    version = str(getattr(getattr(device, "client", None), "platform_version", "")).lower()
    return DeviceMemoryProbe.of_cuda_index(index, device.device_kind, rocm="rocm" in version)


class JaxWindowMeter:
    """Measures one timing window after another; :meth:`start`, then :meth:`stop`.

    Args:
        world_size: devices (ranks) in the job.
        global_batch_size: images per step over all ranks.
        train_flops_per_image: MODEL training FLOPs per image (3 × forward).
        device: this process's device (for the memory statistics).
        hardware_flops_per_image: with the recomputed forward of remat; None = model FLOPs.
        peak_flops: the device's peak FLOP/s (:func:`resolve_peak`); None = mfu/hfu null.
    """

    def __init__(self, world_size: int, global_batch_size: int, train_flops_per_image: float,
                 device: jax.Device, hardware_flops_per_image: float | None = None,
                 peak_flops: float | None = None) -> None:
        self.world_size = world_size
        self.global_batch_size = global_batch_size
        self.train_flops_per_image = train_flops_per_image
        self.hardware_flops_per_image = hardware_flops_per_image or train_flops_per_image
        self.device = device
        self.peak = peak_flops
        self.probe = device_probe(device)
        self._t0 = 0.0
        self._start_us = 0.0
        self._host_id = host_id()
        self._cpu0: tuple[float, float | None, float | None] = (0.0, None, None)

    def start(self, state: Any) -> None:
        """Wait for ``state`` (the previous steps), reset the CPU peak, read the host's and
        this process tree's CPU seconds, start the clock."""
        jax.block_until_ready(state)
        _reset_vm_hwm()
        self._start_us = time.time() * 1e6
        self._cpu0 = _cpu_now()
        self._t0 = time.perf_counter()

    def stop(self, num_steps: int, losses: list[jax.Array], state: Any) -> dict:
        """End the window after ``num_steps`` steps that returned ``losses`` (replicated
        scalars) and left ``state``.

        Returns:
            The keys of :meth:`vitfsdp.metrics.WindowMeter.stop`: time_s, step_time_s, ips,
            ips_per_gpu, tflops_per_gpu, hw_tflops_per_gpu, mfu, hfu (None without a peak),
            loss (mean over the window's steps), peak_mem_allocated_gib,
            peak_mem_reserved_gib (GPU; None on the CPU), peak_rss_gib (max over ranks) and
            their ``*_min_gib`` (min over ranks); device_mem_used_gib (max) and its
            ``_min_gib``, device_busy_frac (mean over ranks) and device_busy_min_frac (min),
            None where the driver gives none (the module docstring); alloc_retries and
            num_ooms are None: XLA keeps no such counts; host_other_cpus and host_own_cpus
            (cores, the most contended host's: :func:`vitfsdp.metrics.host_other_cpus`,
            None where ``/proc`` is unreadable).
        """
        jax.block_until_ready((state, losses))
        elapsed = time.perf_counter() - self._t0
        cpu = _cpu_now()
        loss = sum(float(np.asarray(x.addressable_data(0))) for x in losses) / num_steps
        alloc, reserved = self._device_memory_gib()
        local = [elapsed, alloc, reserved, _read_vm_hwm_gib(), self.probe.used_gib(),
                 self.probe.busy_frac(self._start_us), self._host_id, cpu[0] - self._cpu0[0],
                 *(None if a is None or b is None else b - a
                   for a, b in zip(self._cpu0[1:], cpu[1:], strict=True))]
        rows = gather_floats([np.nan if v is None else v for v in local])
        elapsed = float(rows[:, 0].max())  # the slowest rank sets the pace
        out = window_figures(self.global_batch_size * num_steps, elapsed, num_steps,
                             self.world_size, self.train_flops_per_image,
                             self.hardware_flops_per_image, self.peak) | {"loss": loss}
        for col, name in enumerate(("peak_mem_allocated", "peak_mem_reserved", "peak_rss",
                                    "device_mem_used"), 1):
            out[f"{name}_gib"] = _finite(max, rows[:, col].tolist())
            out[f"{name}_min_gib"] = _finite(min, rows[:, col].tolist())
        busy = rows[:, 5].tolist()
        other, own = host_other_cpus(*(rows[:, col].tolist() for col in range(6, 10)))
        return out | {"alloc_retries": None, "num_ooms": None,
                      "device_busy_frac": _finite(lambda v: sum(v) / len(v), busy),
                      "device_busy_min_frac": _finite(min, busy),
                      "host_other_cpus": None if other is None else round(other, 4),
                      "host_own_cpus": None if own is None else round(own, 4)}

    def _device_memory_gib(self) -> tuple[float, float]:
        """XLA's peak bytes in use and peak pool bytes on a GPU, GiB; NaN where unreported."""
        stats = (self.device.memory_stats() or {}) if self.device.platform != "cpu" else {}
        return tuple(stats[k] / GIB if k in stats else np.nan
                     for k in ("peak_bytes_in_use", "peak_pool_bytes"))
