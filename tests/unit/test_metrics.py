"""The measurement side: peak table and its choice by dtype, the window meter's record keys
and arithmetic, NVML device lookup (pynvml mocked: no GPU here), and the overhead benchmark."""

from __future__ import annotations

import json
import logging
import sys
import time
import types

import pytest
import torch

from tests.conftest import requires_jax
from vitfsdp import metrics
from vitfsdp.metrics import (
    GIB,
    PEAK_TABLE,
    DeviceMemoryProbe,
    MetricsConfig,
    WindowMeter,
    match_device,
    nvml_handle,
    resolve_peak,
    table_peak,
)

#: Every key a window carries (the record contract), torch and JAX alike.
WINDOW_KEYS = {
    "time_s", "step_time_s", "ips", "ips_per_gpu", "tflops_per_gpu", "hw_tflops_per_gpu",
    "mfu", "hfu", "loss", "peak_mem_allocated_gib", "peak_mem_allocated_min_gib",
    "peak_mem_reserved_gib", "peak_mem_reserved_min_gib", "peak_rss_gib", "peak_rss_min_gib",
    "device_mem_used_gib", "device_mem_used_min_gib", "alloc_retries", "num_ooms",
    "device_busy_frac", "device_busy_min_frac", "host_other_cpus", "host_own_cpus",
}


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", None),  # another chip (AWS): no guess from A10
    ("AMD Instinct MI250X", "MI250X"),
    ("AMD Instinct MI250", "MI250"),
    ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_device_names_match_the_right_row(name, key):
    assert match_device(name) == key


def test_peak_follows_the_compute_dtype_and_tf32():
    h100 = PEAK_TABLE["H100"]
    assert h100.bf16 == pytest.approx(1979e12 / 2, rel=1e-3)  # data sheet: 1,979 sparse
    assert table_peak("NVIDIA H100 80GB HBM3", "bf16", False) == (h100.bf16, "table:H100 bf16")
    assert table_peak("NVIDIA H100 80GB HBM3", "fp16", False)[0] == h100.bf16
    assert table_peak("NVIDIA H100 80GB HBM3", "fp32", True) == (h100.tf32, "table:H100 tf32")
    assert table_peak("NVIDIA H100 80GB HBM3", "fp32", False) == (h100.fp32, "table:H100 fp32")
    # no TF32 units on CDNA2: fp32 matmuls run at the fp32 matrix peak
    assert table_peak("AMD Instinct MI250X", "fp32", True)[1] == "table:MI250X fp32"
    assert table_peak("NVIDIA GeForce RTX 4090", "bf16", False) == (None, None)


def test_every_row_orders_its_peaks():
    for key, p in PEAK_TABLE.items():
        assert p.bf16 > (p.tf32 or p.fp32) >= p.fp32 > 0, key


def test_unknown_device_gives_null_peak_and_one_warning(caplog, monkeypatch):
    monkeypatch.setattr(metrics, "_warned", set())
    cpu = torch.device("cpu")
    with caplog.at_level(logging.WARNING, logger="vitfsdp.metrics"):
        for _ in range(3):
            peak = resolve_peak(cpu, "some cpu", "fp32", False)
    assert peak == {"peak_flops": None, "peak_source": None, "peak_kind": "fp32"}
    assert len([r for r in caplog.records if "no peak FLOP/s" in r.message]) == 1


def test_measured_peak_is_a_timed_gemm():
    peak = resolve_peak(torch.device("cpu"), "cpu", "fp32", False,
                        MetricsConfig(peak="measure", peak_matmul_size=128))
    assert peak["peak_source"] == "measured" and 1e6 < peak["peak_flops"] < 1e14


def test_bad_metrics_config_is_refused():
    with pytest.raises(ValueError, match="metrics.peak"):
        MetricsConfig(peak="guess")


def test_window_meter_keys_and_arithmetic_on_cpu():
    meter = WindowMeter(torch.device("cpu"), world_size=1, global_batch_size=8,
                        train_flops_per_image=3e9, hardware_flops_per_image=4e9,
                        peak_flops=1e12)
    meter.start()
    x = torch.randn(256, 256)
    for _ in range(3):
        x = x @ x.T / 256
    out = meter.stop(num_steps=2, loss_sum=torch.tensor(3.0))
    assert set(out) == WINDOW_KEYS
    assert out["ips"] == pytest.approx(16 / out["time_s"])
    assert out["hw_tflops_per_gpu"] == pytest.approx(out["tflops_per_gpu"] * 4 / 3)
    assert out["mfu"] == pytest.approx(out["tflops_per_gpu"] * 1e12 / 1e12)
    assert out["hfu"] > out["mfu"] and out["loss"] == pytest.approx(1.5)
    for key in ("peak_mem_allocated_gib", "device_mem_used_gib", "alloc_retries", "num_ooms"):
        assert out[key] is None  # a CPU has none of these
    assert 0 < out["peak_rss_min_gib"] <= out["peak_rss_gib"]


@requires_jax
def test_jax_window_meter_has_the_same_keys():
    import jax

    from vitfsdp.jax.metrics import JaxWindowMeter

    meter = JaxWindowMeter(1, 4, 3e9, jax.devices("cpu")[0])
    state = jax.numpy.ones(3)
    meter.start(state)
    out = meter.stop(1, [jax.numpy.float32(2.0)], state)
    assert set(out) == WINDOW_KEYS and out["mfu"] is None
    assert out["alloc_retries"] is None
    assert out["host_other_cpus"] is not None and out["host_own_cpus"] is not None


@pytest.fixture(autouse=True)
def _fresh_probes(monkeypatch):
    """Each test opens its own (mocked) device-memory probes: none cached from another."""
    monkeypatch.setattr(metrics, "_OPENED", {})


class _FakeNvml(types.ModuleType):
    """pynvml's functions used here, over a machine of 4 GPUs (NVML index = position)."""

    UUIDS = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"]
    BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.num_inits = 0

    def nvmlInit(self):
        self.num_inits += 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.UUIDS:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return self.UUIDS.index(uuid)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        known = [metrics.normalize_pci_bus_id(b) for b in self.BUS_IDS]
        if metrics.normalize_pci_bus_id(bus_id) not in known:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return known.index(metrics.normalize_pci_bus_id(bus_id))

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.UUIDS):
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return index

    def nvmlDeviceGetPciInfo(self, handle):
        return types.SimpleNamespace(busId=self.BUS_IDS[handle].encode())

    def nvmlSystemGetDriverVersion(self):
        return b"550.54.15"

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=(handle + 1) * GIB, total=80 * GIB)


@pytest.mark.parametrize("uuid, visible, expected", [
    ("cccc", None, 2),  # torch's UUID names the device (any visibility)
    ("GPU-dddd", "3", 3),
    (None, "3,1", 1),  # torch device 1 is the second visible: NVML index 1
    (None, "2,0", 2),
    ("zzzz", "GPU-bbbb,GPU-cccc", 2),  # NVML lacks torch's UUID: the visible entry's
    (None, None, 1),  # nothing hidden: the same index
    (None, "7", None),  # a device NVML does not have: None, not a guess
])
def test_nvml_handle_maps_torch_index_to_nvml(uuid, visible, expected):
    torch_index = 1 if visible in (None, "3,1", "GPU-bbbb,GPU-cccc") else 0
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    handle = nvml_handle(_FakeNvml(), torch_index, uuid, None, environ)
    assert handle == expected


def test_device_memory_probe_reads_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    props = types.SimpleNamespace(uuid="bbbb", pci_domain_id=0, pci_bus_id=0x2a,
                                  pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.version, "hip", None)
    probe = DeviceMemoryProbe(torch.device("cuda", 0))
    assert probe.backend == "nvml" and probe.driver_version == "550.54.15"
    assert probe.used_gib() == pytest.approx(2.0)  # NVML device 1 (uuid bbbb): 2 GiB used
    assert DeviceMemoryProbe(torch.device("cpu")).used_gib() is None


def _mock_gpus(monkeypatch, fake: _FakeNvml, props_by_index: dict) -> None:
    """torch sees CUDA devices with ``props_by_index``; pynvml is ``fake``."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props_by_index[i])
    monkeypatch.setattr(torch.version, "hip", None)


def test_reordered_visible_devices_find_the_device_by_pci_bus_id(monkeypatch):
    """CUDA_VISIBLE_DEVICES=3,1: torch's device 0 is NVML's 3. Without a UUID the PCI bus id
    decides, not the position; the probe's bus id is the driver's, in torch's form."""
    fake = _FakeNvml()
    props = {0: types.SimpleNamespace(uuid="", pci_domain_id=0, pci_bus_id=0x5d,
                                      pci_device_id=0)}
    assert nvml_handle(fake, 0, None, "0000:5d:00.0", {"CUDA_VISIBLE_DEVICES": "1,3"}) == 3
    _mock_gpus(monkeypatch, fake, props)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    probe = DeviceMemoryProbe(torch.device("cuda", 0))
    assert probe.pci_bus_id == "0000:5d:00.0"
    assert probe.used_gib() == pytest.approx(4.0)  # NVML device 3


def test_probe_refuses_a_driver_device_on_another_pci_bus(monkeypatch, caplog):
    """A fallback lookup (the visible-devices entry) that lands on another GPU than torch's
    gives null figures and a warning, never another device's memory."""
    fake = _FakeNvml()
    fake.nvmlDeviceGetHandleByPciBusId = lambda bus_id: (_ for _ in ()).throw(
        RuntimeError("NVML_ERROR_NOT_FOUND"))  # an old driver: no lookup by bus id
    props = {0: types.SimpleNamespace(uuid="", pci_domain_id=0, pci_bus_id=0x5d,
                                      pci_device_id=0)}
    _mock_gpus(monkeypatch, fake, props)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # wrong: NVML 1 is at 2a, torch's at 5d
    monkeypatch.setattr(metrics, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="vitfsdp.metrics"):
        probe = DeviceMemoryProbe(torch.device("cuda", 0))
    assert probe.used_gib() is None and probe.pci_bus_id is None
    assert probe.driver_version == "550.54.15"
    assert "0000:2a:00.0" in caplog.text and "0000:5d:00.0" in caplog.text


def test_probe_opens_the_driver_once_per_device(monkeypatch):
    fake = _FakeNvml()
    props = {i: types.SimpleNamespace(uuid=u[4:], pci_domain_id=0,
                                      pci_bus_id=int(b.split(":")[1], 16), pci_device_id=0)
             for i, (u, b) in enumerate(zip(fake.UUIDS, fake.BUS_IDS, strict=True))}
    _mock_gpus(monkeypatch, fake, props)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    first, again = DeviceMemoryProbe(torch.device("cuda", 2)), DeviceMemoryProbe(
        torch.device("cuda", 2))
    assert fake.num_inits == 1 and first.used_gib() == again.used_gib() == pytest.approx(3.0)
    assert DeviceMemoryProbe(torch.device("cuda", 0)).used_gib() == pytest.approx(1.0)
    assert fake.num_inits == 2


def _jax_gpu(index: int | None, kind: str = "NVIDIA H100 80GB HBM3",
             platform_version: str = "cuda 12080") -> types.SimpleNamespace:
    """What the probe reads of a JAX GPU device (no JAX GPU here)."""
    return types.SimpleNamespace(platform="gpu", local_hardware_id=index, device_kind=kind,
                                 client=types.SimpleNamespace(platform_version=platform_version))


@requires_jax
def test_a_jax_gpu_is_found_by_its_cuda_index_without_torch(monkeypatch):
    """JAX's device 0 under CUDA_VISIBLE_DEVICES=3,1 is NVML's 3; its name agrees."""
    from vitfsdp.jax.metrics import device_probe

    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: pytest.fail(
        "the JAX trainer's probe must not ask torch (a CUDA context beside XLA's)"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    probe = device_probe(_jax_gpu(0))
    assert probe.backend == "nvml" and probe.pci_bus_id == "0000:5d:00.0"
    assert probe.used_gib() == pytest.approx(4.0)  # NVML device 3
    assert device_probe(_jax_gpu(1, kind="nvidia h100 80gb hbm3 ")).used_gib() == \
        pytest.approx(2.0)  # NVML device 1; the name compared without case or padding
    assert fake.num_inits == 2


@requires_jax
@pytest.mark.parametrize("device, warning", [
    (_jax_gpu(0, kind="NVIDIA A100-SXM4-80GB"), "is a NVIDIA H100 80GB HBM3"),
    (_jax_gpu(0, platform_version="rocm 6.2"), "AMD SMI finds a GPU by its PCI bus id"),
    (_jax_gpu(7), "NVML found no device for CUDA device 7"),
])
def test_a_jax_gpu_the_driver_cannot_name_gives_null_figures(monkeypatch, caplog, device,
                                                             warning):
    """Another GPU by name (a mixed node in CUDA's fastest-first order), ROCm (AMD SMI needs
    a PCI bus id) and an index NVML lacks: None and one warning, not another device's."""
    from vitfsdp.jax.metrics import device_probe

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(metrics, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="vitfsdp.metrics"):
        probe = device_probe(device)
    assert probe.used_gib() is None and probe.busy_frac(0) is None
    assert warning in caplog.text


@requires_jax
def test_the_jax_meter_records_the_drivers_figures():
    import jax

    from vitfsdp.jax.metrics import JaxWindowMeter

    class Driver:
        since = None

        def used_gib(self):
            return 61.5

        def busy_frac(self, since_us):
            Driver.since = since_us
            return 0.42

    meter = JaxWindowMeter(1, 4, 3e9, jax.devices("cpu")[0])
    assert meter.probe.used_gib() is None and meter.probe.busy_frac(0) is None  # the CPU
    meter.probe = Driver()
    state = jax.numpy.ones(3)
    before_us = time.time() * 1e6
    meter.start(state)
    out = meter.stop(1, [jax.numpy.float32(2.0)], state)
    assert Driver.since >= before_us  # the window's start, not the process's
    assert out["device_busy_frac"] == out["device_busy_min_frac"] == pytest.approx(0.42)
    assert out["device_mem_used_gib"] == out["device_mem_used_min_gib"] == 61.5


@pytest.mark.parametrize("bus_id, expected", [
    ("00000000:2A:00.0", "0000:2a:00.0"),  # NVML
    ("0000:c1:00.0", "0000:c1:00.0"),  # AMD SMI, sysfs
    ("0001:03:1f.7", "0001:03:1f.7"),
    ("GPU-aaaa", None),
])
def test_pci_bus_ids_compare_in_one_form(bus_id, expected):
    assert metrics.normalize_pci_bus_id(bus_id) == expected


def test_cuda_events_are_recorded_on_the_measured_devices_stream(monkeypatch):
    """With cuda:0 current, a meter of cuda:1 records its events on cuda:1's stream."""
    recorded = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self, stream=None):
            recorded.append(stream)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return 250.0  # ms

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: f"stream of {torch.device(device)}")
    clock = metrics._Clock(torch.device("cuda", 1))
    clock.start()
    assert clock.stop() == pytest.approx(0.25)
    assert recorded == ["stream of cuda:1", "stream of cuda:1"]


def test_overhead_benchmark_runs_both_loops_alike(tmp_path, capsys):
    from vitfsdp.bench.overhead import main

    out = tmp_path / "overhead.json"
    assert main(["--steps", "4", "--log-every", "2", "--batch", "2", "--repeats", "2",
                 "--device", "cpu", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["num_steps_unmeasured"] == record["num_steps_measured"] == [4, 4]
    assert record["num_windows"] == 2 and len(record["measured_s"]) == 2
    assert record["overhead_pct"] == pytest.approx(
        (record["measured_median_s"] / record["unmeasured_median_s"] - 1) * 100)
    printed = capsys.readouterr().out
    assert "unmeasured loop" in printed and "overhead" in printed


@pytest.mark.parametrize("local_rank, visible, expected", [
    (0, 8, 0), (5, 8, 5), (5, 4, 1),
    (3, 1, 0),  # a rank bound to its own GPU (srun --gpus-per-task=1) sees one: index 0
])
def test_each_rank_takes_and_makes_current_its_own_gpu(monkeypatch, local_rank, visible,
                                                        expected):
    """The rank's GPU becomes the current device, so NCCL, the timing events and the memory
    probe all use it (torch.cuda mocked: no GPU here)."""
    from vitfsdp import distributed

    made_current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    device = distributed.pick_device("auto", local_rank)
    assert device == torch.device("cuda", expected) and made_current == [expected]
    assert distributed.backend_for(device) == "nccl"


def test_cuda_asked_for_without_a_gpu_is_one_line_error(monkeypatch):
    from vitfsdp import distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.pick_device("auto", 3) == torch.device("cpu")
    with pytest.raises(ValueError, match="device=cuda"):
        distributed.pick_device("cuda", 0)


def test_a_gpu_runs_device_record_keeps_the_hosts_cpus(monkeypatch):
    """Each window of a GPU run now measures other work on its host (host_other_cpus), which
    is judged against the host's cores; device_info kept host_cpus for CPU ranks only, so a
    GPU run's other work was never judged and the report called it 'none ... below the
    bound'. The GPU record keeps them too (torch's device properties faked: no GPU here)."""
    import os
    import types

    import torch

    from vitfsdp.metrics import device_info

    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * 1024**3,
                                  uuid="GPU-0", pci_domain_id=0, pci_bus_id=0x18,
                                  pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    info = device_info(torch.device("cuda", 0))
    assert info["type"] == "cuda" and info["host_cpus"] == os.cpu_count()
    assert device_info(torch.device("cpu"))["host_cpus"] == os.cpu_count()
