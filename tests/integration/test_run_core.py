"""The run core (vitfsdp.core): the window figures, run.json's assembly, the resolved choices,
and the trainers' independence of each other."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from vitfsdp import metrics
from vitfsdp.core import runinfo
from vitfsdp.core.layout import EXIT_PREEMPTED
from vitfsdp.core.loop import (
    WARMUP_RULE,
    Preempted,
    Progress,
    checkpoint_at_boundary,
    stop_before_first_step,
    windows,
)
from vitfsdp.core.resolved import Resolved
from vitfsdp.core.throughput import FIGURES, window_figures


def _imported_after(module: str, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` a fresh interpreter holds after importing ``module``."""
    code = (f"import sys, {module}; "
            f"print(','.join(m for m in {names!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    return [m for m in out.split(",") if m]


def test_window_figures():
    # 2 ranks, 10 steps of 64 images in 4 s; 1e9 model and 1.5e9 hardware FLOPs per image
    f = window_figures(640, 4.0, 10, 2, 1e9, 1.5e9, peak_flops=1e11)
    assert tuple(f) == FIGURES
    assert (f["time_s"], f["step_time_s"], f["ips"], f["ips_per_gpu"]) == (4.0, 0.4, 160, 80)
    assert f["tflops_per_gpu"] == pytest.approx(0.08)
    assert f["hw_tflops_per_gpu"] == pytest.approx(0.12)
    assert (f["mfu"], f["hfu"]) == (pytest.approx(0.8), pytest.approx(1.2))
    no_peak = window_figures(640, 4.0, 10, 2, 1e9)
    assert no_peak["mfu"] is None and no_peak["hfu"] is None
    assert no_peak["hw_tflops_per_gpu"] == no_peak["tflops_per_gpu"]  # None: model FLOPs


def test_the_torch_window_meter_computes_its_figures_with_the_core_function(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        return window_figures(*args, **kwargs)

    monkeypatch.setattr(metrics, "window_figures", spy)
    meter = metrics.WindowMeter(torch.device("cpu"), 1, 8, 2e9, None, None)
    meter.start()
    out = meter.stop(2, torch.tensor(3.0))
    assert len(calls) == 1 and calls[0][:4] == (16, out["time_s"], 2, 1)
    assert out["loss"] == 1.5 and out["ips"] == 16 / out["time_s"]


def test_checkpoint_at_boundary_saves_on_multiples_and_on_a_signal():
    saved = []
    progress = Progress(step=4)
    checkpoint_at_boundary(None, 4, progress, 3, saved.append)  # window 3..4: 4 reached
    checkpoint_at_boundary(None, 0, progress, 3, saved.append)  # never
    with pytest.raises(Preempted) as e:
        checkpoint_at_boundary("SIGUSR2", 0, progress, 3, saved.append)
    assert saved == [4, 4] and (e.value.step, e.value.saved) == (4, True)
    assert e.value.exit_code == EXIT_PREEMPTED
    assert str(e.value) == "SIGUSR2 received; checkpoint saved at step 4"
    with pytest.raises(Preempted) as e:
        stop_before_first_step("SIGTERM", Progress(step=0))
    assert not e.value.saved and str(e.value).endswith("nothing to save (no checkpoint yet)")
    with pytest.raises(Preempted) as e:  # the time-limit signal: the advice on cluster.time
        stop_before_first_step("SIGUSR2", Progress(step=0))
    assert str(e.value).endswith("at a time limit, give cluster.time more than the start-up "
                                 "plus cluster.signal_delay_s")
    stop_before_first_step(None, progress)  # no signal: goes on
    assert windows(5, 1, 2) == [(1, 1, True), (2, 3, False), (4, 5, False)]


def test_run_info_writes_the_common_fields_in_order():
    world = runinfo.World(2, 1, 2, 1, "FULL_SHARD", "gloo", "torchrun")
    size = runinfo.ModelSize(10, 1.0, 3.0, 4.0, 32, 10)
    info = runinfo.run_info("0_x", {"nodes": 1}, world, {"type": "cpu"}, size,
                            timer="perf_counter", warmup_steps=1, log_every=2,
                            rank_hosts=["b", "a"], provenance={"versions": {}},
                            world_extra={"mesh": {"data": 1}})
    assert list(info) == ["run_id", "config", "world", "device", "model", "timing", "hosts",
                          "rank_hosts", "versions"]
    assert info["world"]["mesh"] == {"data": 1} and info["world"]["launched_by"] == "torchrun"
    assert info["hosts"] == ["a", "b"] and info["rank_hosts"] == ["b", "a"]
    assert info["timing"]["warmup_rule"] == WARMUP_RULE
    assert info["model"]["hardware_flops_per_image"] == 4.0


def test_resolved_is_frozen_and_takes_its_peak_once():
    r = Resolved("torch", "cpu", "fp32", "fp32", {"name": "fp32"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.precision = "bf16"
    p = r.with_peak({"peak_flops": 1e12, "peak_source": "measured", "peak_kind": "fp32"})
    assert r.peak_flops is None and p.peak_record() == {
        "peak_flops": 1e12, "peak_source": "measured", "peak_kind": "fp32"}
    assert p.applied_precision() == {"name": "fp32"}


def test_torch_resolve_on_cpu():
    from vitfsdp import distributed
    from vitfsdp.config import RunConfig
    from vitfsdp.torch_train import resolve

    r = resolve(RunConfig(device="cpu"), distributed.DistEnv(), torch.device("cpu"))
    assert (r.framework, r.precision, r.compute_dtype, r.compile) == ("torch", "fp32", "fp32",
                                                                      False)
    assert r.precision_record["name"] == "fp32" and r.settings.param_dtype == "fp32"
    assert r.peak_flops is None and r.peak_kind == "fp32"  # CPU: no table peak


def test_core_imports_no_framework():
    assert _imported_after("vitfsdp.core.loop, vitfsdp.core.throughput, vitfsdp.core.runinfo, "
                           "vitfsdp.core.resolved", ("torch", "jax", "hydra")) == []


@pytest.mark.parametrize("trainer, other", [
    ("vitfsdp.torch_train", ("vitfsdp.train", "vitfsdp.jax.train", "jax")),
    ("vitfsdp.jax.train", ("vitfsdp.train", "vitfsdp.torch_train")),
])
def test_trainers_import_neither_each_other_nor_the_entry_point(trainer, other):
    if "jax" in trainer:
        pytest.importorskip("jax")
    assert _imported_after(trainer, other) == []
