"""Timing windows, ips, TFLOP/s, MFU and peak memory, reduced over ranks.

The clock is read only at window boundaries: :class:`WindowMeter` synchronizes the device
once at the start and once at the end of a window of ``train.log_every`` steps, so no step
in between waits on the host. Peak memory is reset at each window start and reduced with
``max`` over ranks at its end; the loss is averaged over ranks.

Definitions (DESIGN.md): ips = images per second over the whole job (global batch × steps /
seconds); ``ips_per_gpu`` = ips / world size; TFLOP/s per GPU = 3 × forward FLOPs per image ×
ips per GPU / 1e12 (training = forward + backward ≈ 3 × forward); MFU = that / the device's
dense bf16 peak (PaLM, Chowdhery et al. 2022, appendix B).
"""

from __future__ import annotations

import logging
import time

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

GIB = 1024**3

#: Dense bf16 peak FLOP/s per device, from the vendors' data sheets. Keys are matched as
#: substrings of ``torch.cuda.get_device_name()``; the first match wins.
PEAK_BF16_FLOPS = {
    "H200": 989e12,  # NVIDIA H200 SXM data sheet, dense
    "H100": 989e12,  # NVIDIA H100 SXM data sheet, dense
    "A100": 312e12,  # NVIDIA A100 data sheet
    "MI300X": 1307e12,  # AMD Instinct MI300X data sheet
    "MI250X": 191.5e12,  # AMD Instinct MI250X: 383 TFLOP/s per package, per GCD half
}


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak FLOP/s of ``device``, or ``None`` (CPU, unknown GPU): never a guess."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def device_info(device: torch.device) -> dict:
    """Name and memory of ``device`` for run.json (memory in GiB; ``None`` on CPU)."""
    if device.type != "cuda":
        import platform

        return {"type": "cpu", "name": platform.processor() or platform.machine(),
                "memory_gib": None}
    props = torch.cuda.get_device_properties(device)
    return {"type": "cuda", "name": props.name, "memory_gib": props.total_memory / GIB}


def _read_vm_hwm_gib() -> float | None:
    """Peak resident set size of this process (Linux VmHWM), GiB; None where unavailable."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / GIB
    except OSError:
        return None
    return None


def _reset_vm_hwm() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write "5" to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass


def local_memory(device: torch.device) -> dict:
    """This rank's memory figures since the current window started, without any collective
    (for a failure report, when collectives may be broken): ``peak_mem_allocated_gib`` and
    ``peak_mem_reserved_gib`` (GPU; ``None`` on CPU), ``peak_rss_gib`` (VmHWM; ``None``
    where unreadable), all in GiB."""
    alloc = reserved = None
    if device.type == "cuda":
        try:
            alloc = torch.cuda.max_memory_allocated(device) / GIB
            reserved = torch.cuda.max_memory_reserved(device) / GIB
        except RuntimeError:  # a broken CUDA context after an error
            pass
    return {"peak_mem_allocated_gib": alloc, "peak_mem_reserved_gib": reserved,
            "peak_rss_gib": _read_vm_hwm_gib()}


class WindowMeter:
    """Measures one timing window after another; call :meth:`start`, then :meth:`stop`.

    Args:
        device: the rank's device; CUDA is synchronized at window boundaries only.
        world_size: processes in the job.
        global_batch_size: images per step over all ranks.
        train_flops_per_image: 3 × forward FLOPs per image.
    """

    def __init__(self, device, world_size, global_batch_size, train_flops_per_image) -> None:
        self.device = device
        self.world_size = world_size
        self.global_batch_size = global_batch_size
        self.train_flops_per_image = train_flops_per_image
        self.peak = peak_flops(device)
        self._t0 = 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        """Reset peak memory and start the clock."""
        self._sync()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        _reset_vm_hwm()
        self._t0 = time.perf_counter()

    def stop(self, num_steps: int, loss_sum: torch.Tensor) -> dict:
        """End the window: figures over ``num_steps`` steps whose summed local losses are
        ``loss_sum`` (a 0-dim tensor on the device).

        Returns:
            ips, ips_per_gpu, step_time_s, tflops_per_gpu, mfu (None without a known peak),
            loss (mean over steps and ranks), peak_mem_allocated_gib / peak_mem_reserved_gib
            (GPU; None on CPU) and peak_rss_gib (max over ranks), time_s.
        """
        self._sync()
        elapsed = time.perf_counter() - self._t0
        elapsed = self._reduce([elapsed], dist.ReduceOp.MAX)[0]  # slowest rank sets the pace
        ips = self.global_batch_size * num_steps / elapsed
        flops = self.train_flops_per_image * ips / self.world_size
        loss = self._reduce([loss_sum.item() / num_steps], dist.ReduceOp.SUM)[0]
        out = {
            "time_s": elapsed,
            "step_time_s": elapsed / num_steps,
            "ips": ips,
            "ips_per_gpu": ips / self.world_size,
            "tflops_per_gpu": flops / 1e12,
            "mfu": flops / self.peak if self.peak else None,
            "loss": loss / self.world_size,
        }
        return out | self._memory()

    def _memory(self) -> dict:
        if self.device.type == "cuda":
            alloc = torch.cuda.max_memory_allocated(self.device) / GIB
            reserved = torch.cuda.max_memory_reserved(self.device) / GIB
        else:
            alloc = reserved = float("nan")
        rss = _read_vm_hwm_gib()
        vals = self._reduce([alloc, reserved, rss if rss is not None else float("nan")],
                            dist.ReduceOp.MAX)
        return {
            "peak_mem_allocated_gib": _nan_to_none(vals[0]),
            "peak_mem_reserved_gib": _nan_to_none(vals[1]),
            "peak_rss_gib": _nan_to_none(vals[2]),
        }

    def _reduce(self, values: list[float], op) -> list[float]:
        if not dist.is_initialized():
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op)
        return t.tolist()


def _nan_to_none(x: float) -> float | None:
    return None if x != x else x
