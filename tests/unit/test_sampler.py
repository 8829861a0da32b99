"""The activity sampler (AMD SMI keeps no history: the probe keeps one) and the ROCm probe's
busy share over a window, with ``amdsmi`` mocked (no AMD GPU here)."""

from __future__ import annotations

import logging
import sys
import threading
import time
import types

import pytest
import torch

from vitfsdp import metrics
from vitfsdp.core.sampler import ActivitySampler
from vitfsdp.metrics import DeviceMemoryProbe


def test_the_mean_is_of_the_readings_after_the_windows_start():
    sampler = ActivitySampler(lambda: 0.05, start=False)
    for t_us, value in ((100, 0.1), (200, 0.5), (300, 0.9), (400, 0.7)):
        sampler.add(t_us, value)
    assert sampler.mean_since(250) == pytest.approx(0.8)  # 0.9 and 0.7
    assert sampler.mean_since(0) == pytest.approx(0.55)


def test_a_window_shorter_than_a_period_reads_the_driver_now():
    sampler = ActivitySampler(lambda: 0.37, start=False)
    sampler.add(100, 0.9)
    assert sampler.mean_since(500) == pytest.approx(0.37)


def test_only_the_newest_readings_are_kept():
    sampler = ActivitySampler(lambda: 0.0, period_s=1.0, keep_s=3.0, start=False)
    for t in range(10):
        sampler.add(t, float(t))
    assert sampler.mean_since(-1) == pytest.approx((6 + 7 + 8 + 9) / 4)


@pytest.mark.parametrize("period_s, keep_s", [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.5)])
def test_a_bad_period_or_history_is_refused(period_s, keep_s):
    with pytest.raises(ValueError, match="period_s"):
        ActivitySampler(lambda: 0.0, period_s=period_s, keep_s=keep_s, start=False)


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "the sampler's thread did not read in time"
        time.sleep(0.002)


def test_the_thread_reads_until_closed_and_skips_a_failed_reading(caplog):
    calls = []

    def read() -> float:
        calls.append(threading.current_thread().name)
        if len(calls) == 2:
            raise OSError("SMU busy")
        return 0.6

    with caplog.at_level(logging.WARNING, logger="vitfsdp.core.sampler"):
        sampler = ActivitySampler(read, period_s=0.005)
        _wait_for(lambda: len(calls) >= 5)
        sampler.close()
    assert set(calls) == {"vitfsdp-activity"}  # never on the caller's thread
    assert sampler.mean_since(0) == pytest.approx(0.6)  # the failed reading is not a 0
    assert caplog.text.count("SMU busy") == 1
    stopped = len(calls)
    time.sleep(0.05)
    assert len(calls) == stopped


class _FakeAmdsmi(types.ModuleType):
    """amdsmi's functions used here: one MI250X GCD at PCI 0000:c1:00.0 whose
    ``gfx_activity`` (percent) is ``activity`` at the moment it is read."""

    def __init__(self) -> None:
        super().__init__("amdsmi")
        self.activity, self.reads = 90, 0

    def amdsmi_init(self):
        pass

    def amdsmi_get_processor_handles(self):
        return ["gcd0"]

    def amdsmi_get_gpu_device_bdf(self, handle):
        return "0000:c1:00.0"

    def amdsmi_get_gpu_driver_info(self, handle):
        return {"driver_version": "6.7.0"}

    def amdsmi_get_gpu_vram_usage(self, handle):
        return {"vram_used": 3 * 1024, "vram_total": 64 * 1024}

    def amdsmi_get_gpu_activity(self, handle):
        self.reads += 1
        return {"gfx_activity": self.activity, "umc_activity": 10, "mm_activity": 0}


def test_on_rocm_the_busy_share_is_the_windows_not_its_last_instant(monkeypatch):
    """The GCD ran kernels 90% of the window and was idle when it ended (the loop waiting
    on the host, say): the window reads busy, where one read at the end would say 0.10."""
    fake = _FakeAmdsmi()
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    monkeypatch.setattr(metrics, "_OPENED", {})
    monkeypatch.setattr(torch.version, "hip", "6.2.4")
    props = types.SimpleNamespace(uuid="", pci_domain_id=0, pci_bus_id=0xC1, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(metrics, "AMDSMI_PERIOD_S", 0.005)  # so the test waits milliseconds
    start_us = time.time() * 1e6
    probe = DeviceMemoryProbe(torch.device("cuda", 0))
    assert probe.backend == "amdsmi" and probe.used_gib() == pytest.approx(3.0)
    _wait_for(lambda: fake.reads >= 20)
    fake.activity = 10
    busy = probe.busy_frac(start_us)
    probe._busy.__self__.close()  # the sampler's thread, for the tests after this one
    assert busy > 0.5, busy
    assert DeviceMemoryProbe(torch.device("cpu")).busy_frac(start_us) is None
