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
(VmHWM, reset per window) is ``peak_rss_gib``. Every memory figure is the maximum over ranks.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from vitfsdp.jax.distributed import gather_floats
from vitfsdp.metrics import GIB, PEAK_BF16_FLOPS, _read_vm_hwm_gib, _reset_vm_hwm


def peak_flops(device: jax.Device) -> float | None:
    """Dense bf16 peak FLOP/s of a JAX GPU from :data:`vitfsdp.metrics.PEAK_BF16_FLOPS`
    (matched in ``device.device_kind``); ``None`` on the CPU or an unknown GPU, never a guess."""
    if device.platform == "cpu":
        return None
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in device.device_kind), None)


def device_info(device: jax.Device) -> dict:
    """Type (``cpu`` or ``cuda``, as torch runs record it), name and memory (GiB; ``None`` on
    the CPU) of ``device``, for run.json."""
    if device.platform == "cpu":
        import platform

        return {"type": "cpu", "name": platform.processor() or platform.machine(),
                "memory_gib": None, "jax_platform": "cpu"}
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    return {"type": "cuda", "name": device.device_kind,
            "memory_gib": limit / GIB if limit else None, "jax_platform": device.platform}


class JaxWindowMeter:
    """Measures one timing window after another; :meth:`start`, then :meth:`stop`.

    Args:
        world_size: devices (ranks) in the job.
        global_batch_size: images per step over all ranks.
        train_flops_per_image: 3 × forward FLOPs per image.
        device: this process's device (for the peak FLOP/s and memory statistics).
    """

    def __init__(self, world_size: int, global_batch_size: int, train_flops_per_image: float,
                 device: jax.Device) -> None:
        self.world_size = world_size
        self.global_batch_size = global_batch_size
        self.train_flops_per_image = train_flops_per_image
        self.device = device
        self.peak = peak_flops(device)
        self._t0 = 0.0

    def start(self, state: Any) -> None:
        """Wait for ``state`` (the previous steps), reset the CPU peak, start the clock."""
        jax.block_until_ready(state)
        _reset_vm_hwm()
        self._t0 = time.perf_counter()

    def stop(self, num_steps: int, losses: list[jax.Array], state: Any) -> dict:
        """End the window after ``num_steps`` steps that returned ``losses`` (replicated
        scalars) and left ``state``.

        Returns:
            time_s, step_time_s, ips, ips_per_gpu, tflops_per_gpu, mfu (None without a known
            peak), loss (mean over the window's steps), peak_mem_allocated_gib,
            peak_mem_reserved_gib (GPU; None on the CPU), peak_rss_gib.
        """
        jax.block_until_ready((state, losses))
        elapsed = time.perf_counter() - self._t0
        loss = sum(float(np.asarray(x.addressable_data(0))) for x in losses) / num_steps
        alloc, reserved = self._device_memory_gib()
        rss = _read_vm_hwm_gib()
        rows = gather_floats([elapsed, alloc, reserved, np.nan if rss is None else rss])
        elapsed = float(rows[:, 0].max())  # the slowest rank sets the pace
        ips = self.global_batch_size * num_steps / elapsed
        flops = self.train_flops_per_image * ips / self.world_size
        return {
            "time_s": elapsed,
            "step_time_s": elapsed / num_steps,
            "ips": ips,
            "ips_per_gpu": ips / self.world_size,
            "tflops_per_gpu": flops / 1e12,
            "mfu": flops / self.peak if self.peak else None,
            "loss": loss,
            "peak_mem_allocated_gib": _max_or_none(rows[:, 1]),
            "peak_mem_reserved_gib": _max_or_none(rows[:, 2]),
            "peak_rss_gib": _max_or_none(rows[:, 3]),
        }

    def _device_memory_gib(self) -> tuple[float, float]:
        """XLA's peak bytes in use and peak pool bytes on a GPU, GiB; NaN where unreported."""
        stats = (self.device.memory_stats() or {}) if self.device.platform != "cpu" else {}
        return tuple(stats[k] / GIB if k in stats else np.nan
                     for k in ("peak_bytes_in_use", "peak_pool_bytes"))


def _max_or_none(values: np.ndarray) -> float | None:
    """The maximum of the finite values, or ``None`` if there are none."""
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else None
