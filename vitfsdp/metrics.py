"""Timing windows, ips, TFLOP/s, MFU/HFU and memory on every rank, reduced over ranks.

Definitions (records: docs/architecture.md): ``ips``, ``ips_per_gpu``, ``step_time_s``,
``tflops_per_gpu``, ``hw_tflops_per_gpu``, ``mfu`` and ``hfu`` are those of
:func:`vitfsdp.core.throughput.window_figures` (MODEL FLOPs: 3 × forward,
:func:`vitfsdp.models.train_flops_per_image`; HARDWARE FLOPs add the forward that activation
checkpointing recomputes, :func:`vitfsdp.models.hardware_flops_per_image`), the same for the
torch and the JAX trainer.

The peak (``device.peak_flops`` in run.json, with ``device.peak_source``) follows the
run's compute dtype: the dense bf16/fp16 tensor peak under bf16 or fp16, the dense TF32
peak for fp32 when matmul precision allows TF32, else the dense fp32 peak
(:data:`PEAK_TABLE`, from the vendors' data sheets); or, with ``metrics.peak=measure``,
the FLOP/s of a large GEMM in the compute dtype timed on the device before training
(:func:`measure_matmul_peak`). On a device the table does not name (and on CPU with
``metrics.peak=table``) the peak, ``mfu`` and ``hfu`` are null, with one warning: never
a guess.

Timing (:class:`WindowMeter`): the clock is read at window boundaries only. On CUDA (and
ROCm) a timing event is recorded on the stream at the start and at the end of a window of
``train.log_every`` steps; the host waits once, for the end event, so no step waits on the
host and windows follow each other without a gap on the device. On CPU the wall clock
(``time.perf_counter``) is read at the same boundaries. The elapsed time of a window is the
slowest rank's. Warm-up windows (``warmup: true`` in metrics.jsonl) are left out of the
summary; the rule, also written to run.json's ``timing``, is
:data:`vitfsdp.core.loop.WARMUP_RULE`.

Memory, measured on every rank per window and reduced over ranks (``*_gib`` = max over ranks,
``*_min_gib`` = min over ranks, so an unbalanced rank shows):

- ``peak_mem_allocated_gib`` / ``peak_mem_reserved_gib``: ``torch.cuda.max_memory_allocated``
  / ``max_memory_reserved``, reset at each window start (GPU; null on CPU);
- ``peak_rss_gib``: the process's peak resident set (Linux VmHWM, reset per window);
- ``device_mem_used_gib``: memory in use on the rank's whole device, as the driver sees it
  (every process, the CUDA context, the allocator's cache), sampled at the window end from
  NVML (nvidia-ml-py) or AMD SMI (``amdsmi``, where importable); null where unavailable;
- ``alloc_retries`` / ``num_ooms``: ``torch.cuda.memory_stats`` ``num_alloc_retries`` (the
  caching allocator freed its cache and retried: a sign of memory pressure that slows the
  step) and ``num_ooms`` during the window, summed over ranks (null on CPU).

How busy the device was (``device_busy_frac``, mean over ranks; ``device_busy_min_frac``,
the least busy rank): the fraction of the window during which a kernel ran, from the
driver's utilization samples taken during the window (NVML, :func:`nvml_busy_frac`; AMD SMI's
``gfx_activity``, read every 50 ms by :class:`vitfsdp.core.sampler.ActivitySampler`, as AMD SMI
keeps no history of its own). Below :data:`vitfsdp.core.throughput.HOST_BOUND_BUSY_FRAC`
the host decided the step (docs/benchmarks.md). Null on CPU ranks (the host is the device)
and where the driver library is missing.

Other work on the ranks' host during the window (``host_other_cpus``, cores; with
``host_own_cpus``, the cores the point's own ranks kept busy): each rank reads, at the window's
start and end, the wall clock (``time.monotonic``), the host's busy CPU seconds
(:func:`vitfsdp.records.host_busy_cpu_s`, ``/proc/stat``) and the CPU seconds of its own
process tree (:func:`vitfsdp.records.process_tree_cpu_s`: all its threads, and its data loader
workers where ``data.num_workers`` > 0, which are the run's work), with a number naming its
host (:func:`vitfsdp.records.host_id`). Ranks of one host are grouped by that number: the
host's busy cores (mean over its ranks of busy seconds / wall seconds) less the sum of its
ranks' own cores is the other processes' (clipped at 0: ``/proc/stat`` counts whole ticks of
1/100 s), and the window's figure is the most contended host's (as the slowest rank's time
sets the pace). What else the point runs on the host counts as other work: the torchrun agent
and the sweep's process, a few thousandths of a core (:data:`vitfsdp.core.throughput.
WINDOW_OTHER_WORK_FRAC` gives the figures). Null where any rank could not read ``/proc`` (not
Linux). This replaces, for the windows that have it, the local launcher's whole-point figure
(``host.json``), which averaged imports, rendezvous and teardown into the timed windows'.

The loss is the mean over the window's steps and over ranks. All figures of a window are
gathered with one collective at its end.

torch loads on first use, inside the functions that need it: the config reads
:class:`MetricsConfig` without it.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vitfsdp.core.loop import WARMUP_RULE as WARMUP_RULE  # its home is the loop's schedule
from vitfsdp.core.sampler import DEFAULT_PERIOD_S, ActivitySampler
from vitfsdp.core.throughput import window_figures
from vitfsdp.records import host_busy_cpu_s, host_id, process_tree_cpu_s
from vitfsdp.sinks import WANDB_MODES, require_package

if TYPE_CHECKING:  # torch is imported where a run measures: configs import this module
    import torch

log = logging.getLogger(__name__)

GIB = 1024**3

PEAK_MODES = ("table", "measure")

@dataclass
class MetricsConfig:
    """How throughput is judged (``metrics.*``)."""

    # table: the device's dense peak FLOP/s for the compute dtype from PEAK_TABLE (null on
    # CPU or an unknown device) | measure: time a large GEMM in the compute dtype on the
    # device before training and use its FLOP/s (the achievable peak) for MFU/HFU
    peak: str = "table"
    # side of the square matrices of the measured GEMM; 0 = auto (8192 on a GPU, 1024 on CPU)
    peak_matmul_size: int = 0
    # write the window records also as TensorBoard scalars into RUN_DIR/tensorboard/
    # (pip package tensorboard; vitfsdp.sinks)
    tensorboard: bool = False
    # offline | online | null: also log the window records to a Weights & Biases run in
    # RUN_DIR/wandb/ (pip package wandb; offline needs no network)
    wandb: str | None = None
    # the W&B project of metrics.wandb
    wandb_project: str = "vitfsdp"

    def __post_init__(self) -> None:
        if self.wandb is not None and self.wandb not in WANDB_MODES:
            raise ValueError(f"metrics.wandb={self.wandb!r} is unknown; valid: "
                             f"{', '.join(WANDB_MODES)} or null (off)")
        if self.tensorboard:
            require_package("tensorboard", "metrics.tensorboard", "tensorboard")
        if self.wandb:
            require_package("wandb", "metrics.wandb", "wandb")
        if self.peak not in PEAK_MODES:
            raise ValueError(f"metrics.peak={self.peak!r} is unknown; valid: "
                             f"{', '.join(PEAK_MODES)}")
        if self.peak_matmul_size < 0:
            raise ValueError(f"metrics.peak_matmul_size={self.peak_matmul_size} must be >= 0 "
                             "(0 = auto)")


@dataclass(frozen=True)
class DevicePeak:
    """Dense (no structured sparsity) peak FLOP/s of one device (for AMD MI250X/MI250: one
    GCD, which is one torch device).

    Attributes:
        bf16: bf16 and fp16 tensor/matrix cores.
        tf32: TF32 tensor cores; ``None`` where the device has none (fp32 matmuls then run
            at :attr:`fp32`).
        fp32: fp32 (matrix cores where the device has fp32 matrix units, e.g. CDNA MFMA).
    """

    bf16: float
    tf32: float | None
    fp32: float


T = 1e12
#: Keys are device-name tokens matched in ``torch.cuda.get_device_name()`` (or JAX's
#: ``device_kind``) as whole words; the longest matching key wins (``H100 PCIe`` over
#: ``H100``; ``A10`` does not match ``A100`` or ``A10G``). Data sheets give dense figures
#: for fp32 and "with sparsity" (2×, marked * below) figures for tensor cores, halved here.
PEAK_TABLE: dict[str, DevicePeak] = {
    # NVIDIA A100 Tensor Core GPU data sheet (SXM and PCIe alike): BF16 312, TF32 156,
    # FP32 19.5 TFLOPS
    "A100": DevicePeak(312 * T, 156 * T, 19.5 * T),
    # NVIDIA H100 Tensor Core GPU data sheet, H100 SXM: BF16 1979*, TF32 989*, FP32 67
    "H100": DevicePeak(989.5 * T, 494.5 * T, 67 * T),
    # same data sheet, H100 PCIe: BF16 1513*, TF32 756*, FP32 51
    "H100 PCIe": DevicePeak(756.5 * T, 378 * T, 51 * T),
    # same data sheet, H100 NVL: BF16 1671*, TF32 835*, FP32 60
    "H100 NVL": DevicePeak(835.5 * T, 417.5 * T, 60 * T),
    # NVIDIA H200 Tensor Core GPU data sheet, H200 SXM: BF16 1979*, TF32 989*, FP32 67
    "H200": DevicePeak(989.5 * T, 494.5 * T, 67 * T),
    # same data sheet, H200 NVL: BF16 1671*, TF32 835*, FP32 60
    "H200 NVL": DevicePeak(835.5 * T, 417.5 * T, 60 * T),
    # NVIDIA GH200 Grace Hopper Superchip data sheet (H100/H200 GPU): as H100 SXM
    "GH200": DevicePeak(989.5 * T, 494.5 * T, 67 * T),
    # NVIDIA L40S data sheet: BF16 362.05 (733*), TF32 183 (366*), FP32 91.6
    "L40S": DevicePeak(362.05 * T, 183 * T, 91.6 * T),
    # NVIDIA A10 data sheet: BF16 250*, TF32 125*, FP32 31.2
    "A10": DevicePeak(125 * T, 62.5 * T, 31.2 * T),
    # NVIDIA L4 data sheet: BF16 242*, TF32 120*, FP32 30.3
    "L4": DevicePeak(121 * T, 60 * T, 30.3 * T),
    # AMD Instinct MI250X data sheet, per OAM of 2 GCDs: BF16 383, FP32 matrix 95.7; no TF32.
    # Per GCD (one torch device) half of each
    "MI250X": DevicePeak(191.5 * T, None, 47.85 * T),
    # AMD Instinct MI250 data sheet, per OAM: BF16 362.1, FP32 matrix 90.5; per GCD half
    "MI250": DevicePeak(181.05 * T, None, 45.25 * T),
    # AMD Instinct MI210 data sheet: BF16 181, FP32 matrix 45.3; no TF32
    "MI210": DevicePeak(181 * T, None, 45.3 * T),
    # AMD Instinct MI300X data sheet: BF16 1307.4, TF32 653.7, FP32 matrix 163.4 (dense)
    "MI300X": DevicePeak(1307.4 * T, 653.7 * T, 163.4 * T),
    # AMD Instinct MI325X data sheet: same compute as MI300X
    "MI325X": DevicePeak(1307.4 * T, 653.7 * T, 163.4 * T),
    # AMD Instinct MI300A data sheet: BF16 980.6, TF32 490.3, FP32 matrix 122.6 (dense)
    "MI300A": DevicePeak(980.6 * T, 490.3 * T, 122.6 * T),
}

#: Dense bf16 peak FLOP/s per key of :data:`PEAK_TABLE` (kept for callers of the old name).
PEAK_BF16_FLOPS = {k: v.bf16 for k, v in PEAK_TABLE.items()}

_warned: set[str] = set()


def _warn_once(key: str, message: str, *args) -> None:
    """Log ``message`` at WARNING the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def match_device(name: str) -> str | None:
    """The key of :data:`PEAK_TABLE` that names the device ``name`` (longest whole-word
    match, case-sensitive), or ``None``."""
    hits = [k for k in PEAK_TABLE
            if re.search(rf"(?<![A-Za-z0-9]){re.escape(k)}(?![A-Za-z0-9])", name)]
    return max(hits, key=len) if hits else None


def peak_kind(compute_dtype: str, allow_tf32: bool) -> str:
    """Which peak a run's matmuls reach: ``bf16`` (compute dtype bf16 or fp16), ``tf32``
    (fp32 with TF32 allowed) or ``fp32``.

    Raises:
        ValueError: ``compute_dtype`` is not fp32, bf16 or fp16.
    """
    if compute_dtype in ("bf16", "fp16"):
        return "bf16"
    if compute_dtype != "fp32":
        raise ValueError(f"compute dtype {compute_dtype!r} is not one of fp32, bf16, fp16")
    return "tf32" if allow_tf32 else "fp32"


def table_peak(name: str, compute_dtype: str, allow_tf32: bool) -> tuple[float | None, str | None]:
    """Dense peak FLOP/s of the device called ``name`` for the compute dtype, and its
    source (e.g. ``"table:H100 bf16"``); ``(None, None)`` for a device not in the table.
    TF32 falls back to the fp32 peak on a device without TF32 units."""
    key = match_device(name)
    if key is None:
        return None, None
    peak, kind = PEAK_TABLE[key], peak_kind(compute_dtype, allow_tf32)
    if kind == "tf32" and peak.tf32 is None:
        kind = "fp32"
    return getattr(peak, kind), f"table:{key} {kind}"


def measure_matmul_peak(device: torch.device, compute_dtype: str, size: int = 0,
                        min_time_s: float = 0.2) -> float:
    """Achievable matmul FLOP/s of ``device``: a ``size`` × ``size`` GEMM in the compute
    dtype (fp32 GEMMs follow the current TF32 setting), timed after two warm-up runs over
    enough repetitions to last ``min_time_s`` (CUDA events on a GPU). FLOPs = 2·size³ per GEMM.

    Args:
        size: matrix side; 0 = 8192 on a GPU, 1024 on CPU.

    Raises:
        ValueError: ``compute_dtype`` is not fp32, bf16 or fp16.
    """
    # torch on use (module docstring)
    import torch

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if compute_dtype not in dtypes:
        raise ValueError(f"compute dtype {compute_dtype!r} is not one of {', '.join(dtypes)}")
    size = size or (8192 if device.type == "cuda" else 1024)
    gen = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(size, size, device=device, dtype=dtypes[compute_dtype], generator=gen)
            for _ in range(2))
    clock = _Clock(device)
    reps = 1
    while True:
        for _ in range(2 if reps == 1 else 0):  # warm-up: kernel selection, clocks
            torch.mm(a, b)
        clock.start()
        for _ in range(reps):
            torch.mm(a, b)
        elapsed = clock.stop()
        if elapsed >= min_time_s or reps >= 1 << 16:
            break
        reps = max(reps * 2, math.ceil(reps * min_time_s / max(elapsed, 1e-6)))
    del a, b
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * size**3 * reps / elapsed


def resolve_peak(device: torch.device, device_name: str, compute_dtype: str,
                 allow_tf32: bool, cfg: MetricsConfig | None = None,
                 warn: bool = True) -> dict:
    """The peak FLOP/s MFU and HFU are computed against, for run.json's ``device``.

    Args:
        device_name: ``torch.cuda.get_device_name`` (or JAX's ``device_kind``).
        compute_dtype: the dtype the matmuls run in (fp32 | bf16 | fp16).
        allow_tf32: fp32 matmuls may use TF32 (``torch.backends.cuda.matmul.allow_tf32``).
        warn: log the one warning for an unknown device (rank 0 only, so a job logs one).

    Returns:
        ``{"peak_flops": FLOP/s or None, "peak_source": "table:<key> <kind>" | "measured"
        | None, "peak_kind": bf16 | tf32 | fp32}``.
    """
    cfg = cfg or MetricsConfig()
    kind = peak_kind(compute_dtype, allow_tf32)
    if cfg.peak == "measure":
        flops = measure_matmul_peak(device, compute_dtype, cfg.peak_matmul_size)
        return {"peak_flops": flops, "peak_source": "measured", "peak_kind": kind}
    if device.type != "cuda":
        flops, source = None, None
    else:
        flops, source = table_peak(device_name, compute_dtype, allow_tf32)
    if flops is None and warn:
        _warn_once(f"peak:{device_name}", "no peak FLOP/s known for %s device %r: mfu and hfu "
                   "are null (add it to vitfsdp.metrics.PEAK_TABLE with its data sheet, or "
                   "set metrics.peak=measure)", device.type, device_name)
    return {"peak_flops": flops, "peak_source": source, "peak_kind": kind}


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo ``model name``, e.g. ``AMD EPYC 7763 64-Core
    Processor``), else the machine's architecture (``x86_64``) where Linux does not say."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            names = [line.split(":", 1)[1].strip() for line in f
                     if line.startswith(("model name", "Model name"))]
    except OSError:
        names = []
    return next((n for n in names if n), platform.processor() or platform.machine())


def device_info(device: torch.device) -> dict:
    """Name and memory of ``device`` for run.json (memory in GiB; ``None`` on CPU), the
    host's logical CPUs (``host_cpus``: what CPU ranks of one host share, and what other
    work's share is judged against on any device: each window's ``host_other_cpus``), with
    its NVML/AMD SMI index and UUID where known."""
    if device.type != "cuda":
        # host_cpus: the logical CPUs of the host, which CPU ranks of one host share
        return {"type": "cpu", "name": cpu_name(), "memory_gib": None,
                "host_cpus": os.cpu_count()}
    # torch on use (module docstring)
    import torch

    props = torch.cuda.get_device_properties(device)
    return {"type": "cuda", "name": props.name, "memory_gib": props.total_memory / GIB,
            "uuid": str(getattr(props, "uuid", "")) or None, "pci_bus_id": _pci_bus_id(props),
            "rocm_arch": getattr(props, "gcnArchName", None) if torch.version.hip else None,
            "host_cpus": os.cpu_count()}


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
    # torch on use (module docstring)
    import torch

    alloc = reserved = None
    if device.type == "cuda":
        try:
            alloc = torch.cuda.max_memory_allocated(device) / GIB
            reserved = torch.cuda.max_memory_reserved(device) / GIB
        except RuntimeError:  # a broken CUDA context after an error
            pass
    return {"peak_mem_allocated_gib": alloc, "peak_mem_reserved_gib": reserved,
            "peak_rss_gib": _read_vm_hwm_gib()}


# --- device-level memory: NVML (nvidia-ml-py) and AMD SMI -------------------------------

def _pci_bus_id(props) -> str | None:
    """``dddd:bb:dd.0`` of a torch device's properties, or None where torch lacks them."""
    try:
        return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def normalize_pci_bus_id(bus_id: str) -> str | None:
    """``domain:bus:device.function`` in the form torch's is written here (``dddd:bb:dd.f``,
    lower-case hex): NVML writes an 8-digit domain (``00000000:18:00.0``), AMD SMI and sysfs
    4 digits. ``None`` for a string that is not a PCI address."""
    m = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])\s*", bus_id)
    if m is None:
        return None
    domain, bus, dev, fn = (int(g, 16) for g in m.groups())
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


#: CUDA device index (torch's device) or ("index", index) (:meth:`DeviceMemoryProbe.of_cuda_index`)
#: → what DeviceMemoryProbe opened for it in this process.
_OPENED: dict[int | tuple[str, int], tuple] = {}


def nvml_handle(nvml, torch_index: int, uuid: str | None, pci_bus_id: str | None,
                environ: dict[str, str] | None = None):
    """The NVML handle of torch's CUDA device ``torch_index``, or ``None``.

    torch's index counts the devices CUDA shows this process (``CUDA_VISIBLE_DEVICES``, in
    CUDA's order); NVML counts every device in PCI order. Tried in turn: the device UUID
    from torch (``GPU-…``), its PCI bus id, and the ``CUDA_VISIBLE_DEVICES`` entry at
    ``torch_index`` (an NVML index or a UUID); with no ``CUDA_VISIBLE_DEVICES``,
    ``torch_index`` itself.

    Args:
        nvml: the ``pynvml`` module (nvidia-ml-py), initialized.
    """
    environ = os.environ if environ is None else environ
    tries = []
    if uuid:
        tries.append((nvml.nvmlDeviceGetHandleByUUID,
                      uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"))
    if pci_bus_id:
        tries.append((nvml.nvmlDeviceGetHandleByPciBusId, pci_bus_id))
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        tries.append((nvml.nvmlDeviceGetHandleByIndex, torch_index))
    else:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        entry = entries[torch_index] if torch_index < len(entries) else ""
        if entry.isdigit():
            tries.append((nvml.nvmlDeviceGetHandleByIndex, int(entry)))
        elif entry.startswith(("GPU-", "MIG-")):
            tries.append((nvml.nvmlDeviceGetHandleByUUID, entry))
    for get, key in tries:
        try:
            return get(key)
        except Exception:  # noqa: BLE001 - pynvml.NVMLError and its many subclasses
            continue
    return None


def _open_driver(index: int, uuid: str | None, pci_bus_id: str | None, name: str | None,
                 rocm: bool) -> tuple:
    """(backend, used-GiB function, driver version, PCI bus id, busy-fraction function of a
    window's start) of CUDA device ``index``, found by ``uuid`` and ``pci_bus_id`` where
    given (:func:`nvml_handle`); all None, with one warning, where the driver library cannot
    give them or its device is not this one (another PCI bus id, another ``name``)."""
    try:
        opened = (_open_amdsmi if rocm else _open_nvml)(index, uuid, pci_bus_id)
    except Exception as e:  # noqa: BLE001 - a missing library or driver: null figures
        _warn_once(f"devmem:{type(e).__name__}", "device_mem_used_gib and "
                   "device_busy_frac are null: %s", e)
        return None, None, None, None, None
    *opened, driver_name = opened
    if pci_bus_id and opened[3] and opened[3] != pci_bus_id:  # the lookup fell back wrongly
        _warn_once("devmem:pci", "device_mem_used_gib and device_busy_frac are null: the "
                   "driver's device for CUDA device %d is at PCI %s, this process's at %s",
                   index, opened[3], pci_bus_id)
        return None, None, opened[2], None, None
    if name and driver_name and driver_name.strip().casefold() != name.strip().casefold():
        _warn_once("devmem:name", "device_mem_used_gib and device_busy_frac are null: the "
                   "driver's device for CUDA device %d is a %s, this process's a %s (set "
                   "CUDA_DEVICE_ORDER=PCI_BUS_ID)", index, driver_name, name)
        return None, None, opened[2], None, None
    return tuple(opened)


def _open_nvml(index: int, uuid: str | None, pci_bus_id: str | None) -> tuple:
    # nvidia-ml-py only on NVIDIA GPUs (optional where absent)
    import pynvml

    pynvml.nvmlInit()
    handle = nvml_handle(pynvml, index, uuid, pci_bus_id)
    if handle is None:
        raise RuntimeError(f"NVML found no device for CUDA device {index}")
    try:
        bdf = normalize_pci_bus_id(_str(pynvml.nvmlDeviceGetPciInfo(handle).busId))
    except Exception:  # noqa: BLE001 - pynvml.NVMLError: no check, not an error
        bdf = None
    try:
        name = _str(pynvml.nvmlDeviceGetName(handle))
    except Exception:  # noqa: BLE001 - as above
        name = None
    return ("nvml", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used / GIB,
            _str(pynvml.nvmlSystemGetDriverVersion()), bdf,
            lambda since_us: nvml_busy_frac(pynvml, handle, since_us), name)


#: Seconds between AMD SMI ``gfx_activity`` readings (:class:`ActivitySampler`).
AMDSMI_PERIOD_S = DEFAULT_PERIOD_S


def _open_amdsmi(index: int, uuid: str | None, pci_bus_id: str | None) -> tuple:
    if not pci_bus_id:
        raise RuntimeError(f"AMD SMI finds a GPU by its PCI bus id, which this process does "
                           f"not know for device {index}")
    # AMD SMI's Python library: ROCm ships it (share/amd_smi); PyPI's `amdsmi` is a
    # community build of it, versioned as ROCm, which loads ROCm's libamd_smi.so
    import amdsmi

    amdsmi.amdsmi_init()
    handle = next((h for h in amdsmi.amdsmi_get_processor_handles()
                   if normalize_pci_bus_id(amdsmi.amdsmi_get_gpu_device_bdf(h)) == pci_bus_id),
                  None)
    if handle is None:
        raise RuntimeError(f"AMD SMI found no device at PCI {pci_bus_id} (device {index})")
    driver = amdsmi.amdsmi_get_gpu_driver_info(handle).get("driver_version")
    calls = threading.Lock()  # the sampler's thread and the loop's share one handle

    def used_gib() -> float:
        with calls:  # vram_used is in MiB
            return amdsmi.amdsmi_get_gpu_vram_usage(handle)["vram_used"] / 1024

    def gfx_activity() -> float:
        with calls:  # percent, the SMU's short average: one instant of the step
            return amdsmi.amdsmi_get_gpu_activity(handle)["gfx_activity"] / 100

    # so a window's mean, not its last instant
    sampler = ActivitySampler(gfx_activity, period_s=AMDSMI_PERIOD_S)
    return "amdsmi", used_gib, driver, pci_bus_id, sampler.mean_since, None


class DeviceMemoryProbe:
    """Memory in use on one GPU as its driver reports it (NVML on NVIDIA, AMD SMI on ROCm),
    how busy it was over a window (:meth:`busy_frac`), the driver version and the PCI bus id
    of the device the driver's handle names.
    Everything is ``None`` on CPU or where the library is missing or cannot find the device
    (one warning).

    The driver library is opened and the device looked up once per device and process
    (run.json's driver version and every window meter share it). A process that has no
    torch device (the JAX trainer) opens one with :meth:`of_cuda_index`.

    Args:
        device: the rank's torch device; None = no device (every figure None).
    """

    def __init__(self, device: torch.device | None) -> None:
        self.backend: str | None = None
        self._used = self._busy = None
        self.driver_version: str | None = None
        #: ``dddd:bb:dd.f`` (lower-case hex) of the driver's device; None where unknown.
        self.pci_bus_id: str | None = None
        if device is None or device.type != "cuda":
            return
        # torch on use (module docstring)
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in _OPENED:
            props = torch.cuda.get_device_properties(index)
            _OPENED[index] = _open_driver(index, str(getattr(props, "uuid", "")) or None,
                                          _pci_bus_id(props), None, bool(torch.version.hip))
        self._adopt(_OPENED[index])

    @classmethod
    def of_cuda_index(cls, index: int, name: str | None = None,
                      rocm: bool = False) -> DeviceMemoryProbe:
        """The probe of CUDA device ``index`` as this process counts its devices (after
        ``CUDA_VISIBLE_DEVICES``), without torch: for the JAX trainer, whose device gives
        its index (``jax.Device.local_hardware_id``) and name (``device_kind``) but neither
        UUID nor PCI bus id. The driver's device is the one :func:`nvml_handle` finds from
        the index alone; one of another ``name`` gives null figures and a warning (a node
        of mixed GPUs whose CUDA order is not the driver's). AMD SMI finds a GPU by its PCI
        bus id only, so on ROCm every figure is None, with one warning.

        Args:
            index: the CUDA device ordinal, 0 to the visible devices' count - 1.
            name: the device's name as the driver gives it (``NVIDIA H100 80GB HBM3``);
                None = not compared.
            rocm: the device is an AMD GPU.
        """
        probe = cls(None)
        key = ("index", index)
        if key not in _OPENED:
            _OPENED[key] = _open_driver(index, None, None, name, rocm)
        probe._adopt(_OPENED[key])
        return probe

    def _adopt(self, opened: tuple) -> None:
        self.backend, self._used, self.driver_version, self.pci_bus_id, self._busy = opened

    def used_gib(self) -> float | None:
        """Memory in use on the whole device now, GiB; None where unavailable."""
        if self._used is None:
            return None
        try:
            return float(self._used())
        except Exception as e:  # noqa: BLE001
            _warn_once("devmem:read", "device_mem_used_gib is null: %s", e)
            return None

    def busy_frac(self, since_us: float) -> float | None:
        """Fraction of the time since ``since_us`` (microseconds of the epoch,
        ``time.time() * 1e6``) during which the device ran a kernel, 0-1, as the driver
        samples it (:func:`nvml_busy_frac`; AMD SMI: the mean of ``gfx_activity`` read every
        50 ms since ``since_us``, :class:`vitfsdp.core.sampler.ActivitySampler`);
        None on CPU or where unavailable."""
        if self._busy is None:
            return None
        try:
            value = self._busy(since_us)
        except Exception as e:  # noqa: BLE001 - a driver error: a null figure, not a failure
            _warn_once("devbusy:read", "device_busy_frac is null: %s", e)
            return None
        return None if value is None else min(1.0, max(0.0, float(value)))


def nvml_busy_frac(nvml, handle, since_us: float) -> float | None:
    """Mean GPU utilization of the samples NVML took after ``since_us`` (its timestamps are
    the host's clock in microseconds), as a fraction; where it holds none yet (a window
    shorter than its sample period, 1/6 to 1 s by device), the utilization of the last
    period (``nvmlDeviceGetUtilizationRates``).

    NVML's utilization is "the percent of time over the past sample period during which one
    or more kernels was executing on the GPU" (NVML API reference, ``nvmlUtilization_t``):
    a GPU waiting in a collective runs that collective's kernel and counts as busy; one with
    no kernel queued, because the host has not issued the next, counts as idle.

    Args:
        nvml: the ``pynvml`` module (nvidia-ml-py), initialized.
        handle: the device's NVML handle.
        since_us: the window's start.

    Returns:
        0-1, or None where NVML reports neither.
    """
    try:
        _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES,
                                               int(since_us))
    except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_FOUND: no sample since then
        samples = []
    values = [s.sampleValue.uiVal for s in samples if s.timeStamp > since_us]
    if values:
        return sum(values) / len(values) / 100
    return nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100


def _str(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


# --- the window meter ---------------------------------------------------------------------

def timer_kind(device: torch.device) -> str:
    """How windows on ``device`` are timed (run.json ``timing.timer``): ``cuda_event`` on a
    GPU, ``perf_counter`` (the wall clock) elsewhere."""
    return "cuda_event" if device.type == "cuda" else "perf_counter"


class _Clock:
    """Elapsed seconds between :meth:`start` and :meth:`stop`: CUDA events on a GPU (the
    host waits only for the end event), the wall clock elsewhere (:func:`timer_kind`).

    The events are recorded on ``device``'s current stream, the one the step's kernels are
    queued on, whichever device is current (a bare ``Event.record()`` would use the current
    device's stream: another GPU's where the rank did not make its own device current)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.kind = timer_kind(device)
        self.cuda = self.kind == "cuda_event"
        self._start = self._t0 = None

    def start(self) -> None:
        # torch on use (module docstring)
        import torch

        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(self.device))
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if not self.cuda:
            return time.perf_counter() - self._t0
        # torch on use (module docstring)
        import torch

        end = torch.cuda.Event(enable_timing=True)
        end.record(torch.cuda.current_stream(self.device))
        end.synchronize()
        return self._start.elapsed_time(end) / 1000


#: Per-rank values gathered at each window end, in this order (the last four:
#: :func:`host_other_cpus`'s).
_GATHERED = ("time_s", "loss", "peak_mem_allocated_gib", "peak_mem_reserved_gib",
             "peak_rss_gib", "device_mem_used_gib", "alloc_retries", "num_ooms",
             "device_busy_frac", "host_id", "wall_s", "host_busy_cpu_s", "own_cpu_s")


def host_other_cpus(host_ids, walls, busy, own) -> tuple[float | None, float | None]:
    """Cores other processes kept busy on the ranks' most contended host during a window,
    and the cores the point's own ranks kept busy there: ``(other, own)``.

    Args (one value per rank, NaN where the rank could not read it):
        host_ids: :func:`vitfsdp.records.host_id` of each rank's host.
        walls: seconds between the rank's two readings (wall clock).
        busy: the host's busy CPU seconds between them (``/proc/stat``).
        own: the rank's process tree's CPU seconds between them.

    Per host: busy cores = mean over its ranks of busy / wall (each rank read the same
    ``/proc/stat`` over nearly the same span), own cores = the sum over its ranks of own /
    wall, other = busy - own clipped at 0 (whole ticks). Returns the host with the most
    other cores, with its own; ``(None, None)`` where any value is NaN or a wall is not
    positive (one host unknown could be the contended one).
    """
    hosts: dict[float, list[tuple[float, float]]] = {}
    for h, w, b, o in zip(host_ids, walls, busy, own, strict=True):
        if not all(math.isfinite(v) for v in (h, w, b, o)) or w <= 0:
            return None, None
        hosts.setdefault(h, []).append((b / w, o / w))
    if not hosts:
        return None, None
    figures = [(max(0.0, sum(b for b, _ in r) / len(r) - sum(o for _, o in r)),
                sum(o for _, o in r)) for r in hosts.values()]
    return max(figures)
#: Memory fields reported as max (``<name>_gib``) and min (``<name>_min_gib``) over ranks.
_MEMORY = ("peak_mem_allocated", "peak_mem_reserved", "peak_rss", "device_mem_used")


class WindowMeter:
    """Measures one timing window after another: :meth:`start`, the steps, :meth:`stop`.

    Args:
        device: the rank's device.
        world_size: processes (GPUs) in the job.
        global_batch_size: images per step over all ranks.
        train_flops_per_image: MODEL training FLOPs per image (3 × forward).
        hardware_flops_per_image: HARDWARE FLOPs per image (with the recomputed forward);
            ``None`` = the model FLOPs.
        peak_flops: the device's peak FLOP/s (:func:`resolve_peak`); ``None`` = mfu/hfu null.
    """

    def __init__(self, device: torch.device, world_size: int, global_batch_size: int,
                 train_flops_per_image: float, hardware_flops_per_image: float | None = None,
                 peak_flops: float | None = None) -> None:
        self.device = device
        self.world_size = world_size
        self.global_batch_size = global_batch_size
        self.train_flops_per_image = train_flops_per_image
        self.hardware_flops_per_image = hardware_flops_per_image or train_flops_per_image
        self.peak = peak_flops
        self.clock = _Clock(device)
        self.probe = DeviceMemoryProbe(device)
        self._counts0 = (0, 0)
        self._start_us = 0.0
        self._host_id = host_id()
        self._cpu0: tuple[float, float | None, float | None] = (0.0, None, None)

    def start(self) -> None:
        """Reset the peak-memory counters and start the clock (no host synchronization)."""
        if self.device.type == "cuda":
            # torch on use (module docstring)
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
            self._counts0 = self._alloc_counts()
        _reset_vm_hwm()
        self._start_us = time.time() * 1e6
        self._cpu0 = _cpu_now()
        self.clock.start()

    def stop(self, num_steps: int, loss_sum: torch.Tensor) -> dict:
        """End the window: figures over ``num_steps`` steps whose summed local losses are
        ``loss_sum`` (a 0-dim tensor on the device). Collective: every rank calls it.

        Returns:
            time_s (slowest rank), step_time_s, ips, ips_per_gpu, tflops_per_gpu,
            hw_tflops_per_gpu, mfu, hfu (None without a peak), loss (mean over steps and
            ranks), peak_mem_allocated_gib, peak_mem_reserved_gib, peak_rss_gib,
            device_mem_used_gib (max over ranks) and their ``*_min_gib`` (min over ranks),
            alloc_retries and num_ooms (during the window, summed over ranks),
            device_busy_frac (mean over ranks) and device_busy_min_frac (min),
            host_other_cpus and host_own_cpus (cores, the most contended host's:
            :func:`host_other_cpus`); figures a device cannot give are None (busy: on CPU,
            and where the driver library is missing; the host's cores: where ``/proc`` is
            unreadable).
        """
        elapsed = self.clock.stop()
        cpu = _cpu_now()
        local = {"time_s": elapsed, "loss": loss_sum.item() / num_steps, **self._local_memory(),
                 "host_id": self._host_id, "wall_s": cpu[0] - self._cpu0[0],
                 **{k: None if a is None or b is None else b - a
                    for k, a, b in zip(("host_busy_cpu_s", "own_cpu_s"), self._cpu0[1:], cpu[1:],
                                       strict=True)}}
        ranks = self._gather([_nan_if_none(local[k]) for k in _GATHERED])
        cols = dict(zip(_GATHERED, zip(*ranks, strict=True), strict=True))
        elapsed = max(cols["time_s"])  # the slowest rank sets the pace
        out = window_figures(self.global_batch_size * num_steps, elapsed, num_steps,
                             self.world_size, self.train_flops_per_image,
                             self.hardware_flops_per_image, self.peak)
        out["loss"] = sum(cols["loss"]) / len(cols["loss"])
        for name in _MEMORY:
            out[f"{name}_gib"] = _finite(max, cols[f"{name}_gib"])
            out[f"{name}_min_gib"] = _finite(min, cols[f"{name}_gib"])
        for name in ("alloc_retries", "num_ooms"):
            total = _finite(sum, cols[name])
            out[name] = int(total) if total is not None else None
        busy = cols["device_busy_frac"]
        out["device_busy_frac"] = _finite(lambda v: sum(v) / len(v), busy)
        out["device_busy_min_frac"] = _finite(min, busy)
        other, own = host_other_cpus(cols["host_id"], cols["wall_s"], cols["host_busy_cpu_s"],
                                     cols["own_cpu_s"])
        out["host_other_cpus"] = None if other is None else round(other, 4)
        out["host_own_cpus"] = None if own is None else round(own, 4)
        return out

    def _alloc_counts(self) -> tuple[int, int]:
        # torch on use (module docstring)
        import torch

        stats = torch.cuda.memory_stats(self.device)
        return stats.get("num_alloc_retries", 0), stats.get("num_ooms", 0)

    def _local_memory(self) -> dict:
        """This rank's memory figures of the window (None where the device has none):
        :func:`local_memory`'s peaks, the device's used memory, the allocator's counts."""
        counts = {"alloc_retries": None, "num_ooms": None}
        if self.device.type == "cuda":
            retries, ooms = self._alloc_counts()
            counts = {"alloc_retries": retries - self._counts0[0],
                      "num_ooms": ooms - self._counts0[1]}
        return local_memory(self.device) | counts | {
            "device_mem_used_gib": self.probe.used_gib(),
            "device_busy_frac": self.probe.busy_frac(self._start_us)}

    def _gather(self, values: list[float]) -> list[list[float]]:
        """Every rank's ``values``, indexed by rank (one all-gather)."""
        # torch on use (module docstring)
        import torch
        import torch.distributed as dist

        if not dist.is_initialized() or dist.get_world_size() == 1:
            return [values]
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        rows = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(rows, t)
        return [r.tolist() for r in rows]


def _cpu_now() -> tuple[float, float | None, float | None]:
    """The wall clock (``time.monotonic``), the host's busy CPU seconds and this process
    tree's CPU seconds, now (the last two None where ``/proc`` is unreadable)."""
    return time.monotonic(), host_busy_cpu_s(), process_tree_cpu_s()


def _nan_if_none(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def _finite(reduce, values) -> float | None:
    """``reduce`` over the finite values, or None if there are none."""
    finite = [v for v in values if math.isfinite(v)]
    return reduce(finite) if finite else None
