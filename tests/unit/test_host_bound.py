"""How busy the device was (``device_busy_frac``): NVML's samples over a window (pynvml
mocked: no GPU here), null on CPU ranks, and the analysis' host-bound flag on recorded
figures: points.csv, the report's words and the weak-scaling figure's marks."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.fake_records import run_info
from vitfsdp import metrics
from vitfsdp.analysis import collect_runs, plot_prefetch, plot_tflops, plot_weak_scaling
from vitfsdp.analysis.report import best_text, host_bound_text, report_sections
from vitfsdp.analysis.tables import best_table, points_table, prefetch_table, study_tables
from vitfsdp.core.throughput import HOST_BOUND_BUSY_FRAC, any_host_bound, host_bound
from vitfsdp.metrics import DeviceMemoryProbe, WindowMeter, nvml_busy_frac
from vitfsdp.records import RunRecords


class _Nvml(types.ModuleType):
    """pynvml's utilization calls: ``samples`` as (timestamp µs, percent); ``rate`` the last
    period's utilization."""

    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, samples: list[tuple[int, int]], rate: int = 37) -> None:
        super().__init__("pynvml")
        self.samples, self.rate, self.asked = samples, rate, []

    def nvmlDeviceGetSamples(self, handle, kind, last_seen_us):
        self.asked.append((kind, last_seen_us))
        newer = [s for s in self.samples if s[0] > last_seen_us]
        if not newer:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return 1, [types.SimpleNamespace(timeStamp=t, sampleValue=types.SimpleNamespace(uiVal=v))
                   for t, v in newer]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return types.SimpleNamespace(gpu=self.rate, memory=5)


def test_busy_is_the_mean_of_the_samples_taken_in_the_window():
    nvml = _Nvml([(100, 10), (200, 50), (300, 90), (400, 70)])
    assert nvml_busy_frac(nvml, 0, since_us=250) == pytest.approx(0.8)  # 90 and 70
    assert nvml.asked == [(nvml.NVML_GPU_UTILIZATION_SAMPLES, 250)]
    assert nvml_busy_frac(nvml, 0, since_us=50) == pytest.approx(0.55)


def test_a_window_shorter_than_a_sample_period_reads_the_last_period():
    assert nvml_busy_frac(_Nvml([(100, 10)], rate=37), 0, since_us=500) == pytest.approx(0.37)


def test_the_probe_reads_the_busy_share_of_its_device_and_none_on_cpu(monkeypatch):
    from tests.unit.test_metrics import _FakeNvml

    fake = _FakeNvml()
    for name in ("NVML_GPU_UTILIZATION_SAMPLES", "nvmlDeviceGetSamples",
                 "nvmlDeviceGetUtilizationRates"):
        setattr(fake, name, getattr(_Nvml([(10, 40), (20, 60)]), name))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    props = types.SimpleNamespace(uuid="bbbb", pci_domain_id=0, pci_bus_id=0x2a,
                                  pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(metrics, "_OPENED", {})
    assert DeviceMemoryProbe(torch.device("cuda", 0)).busy_frac(5) == pytest.approx(0.5)
    assert DeviceMemoryProbe(torch.device("cpu")).busy_frac(5) is None


def test_cpu_ranks_record_no_busy_share():
    meter = WindowMeter(torch.device("cpu"), world_size=1, global_batch_size=2,
                        train_flops_per_image=1e6)
    meter.start()
    out = meter.stop(num_steps=1, loss_sum=torch.tensor(1.0))
    assert out["device_busy_frac"] is None and out["device_busy_min_frac"] is None


@pytest.mark.parametrize("busy, expected", [
    (0.37, True), (HOST_BOUND_BUSY_FRAC - 1e-9, True), (HOST_BOUND_BUSY_FRAC, False),
    (0.97, False), (None, None), (float("nan"), None),
])  # fmt: skip
def test_host_bound_below_the_bound_and_unknown_where_not_measured(busy, expected):
    assert host_bound(busy) is expected


@pytest.mark.parametrize("flags, expected", [
    ((True, False), True), ((None, True), True), ((pd.NA, True), True),
    ((False, False), False), ((False,), False),
    ((False, None), None), ((pd.NA, False), None), ((float("nan"),), None), ((), False),
])  # fmt: skip
def test_a_comparison_is_host_bound_where_any_side_is(flags, expected):
    assert any_host_bound(*flags) is expected


def _write(run_dir: Path, info: dict, ips: float, busy: list[float] | None,
           gap: float = 0.05) -> None:  # fmt: skip
    """A completed run of three measured windows with these busy shares (None: CPU), the
    least busy rank ``gap`` below the mean."""
    records = RunRecords(run_dir)
    records.start(info)
    for step, b in zip((2, 4, 6), busy or [None] * 3, strict=True):
        records.window({"step_end": step, "warmup": False, "ips": ips, "loss": 2.0,
                        "tflops_per_gpu": ips / 100, "peak_mem_allocated_gib": 10.0,
                        "device_busy_frac": b,
                        "device_busy_min_frac": None if b is None else b - gap})
    records.finish("completed")


def test_a_host_bound_rank_shows_in_the_least_busy_not_in_the_mean(tmp_path):
    """Two GPUs: one rank's host lags (busy 0.5) while the other waits for it inside the
    collective, whose kernel counts as busy: the mean reads 0.92, above the bound; the least
    busy rank's 0.5 flags the point, and the report names both figures. One window's dip
    alone does not (the run's figure is the median over windows)."""
    _write(tmp_path / "lagging", run_info("DDP", 1, device="cuda"), 100.0, [0.92] * 3, gap=0.42)
    info = run_info("FULL_SHARD", 1, device="cuda")
    records = RunRecords(tmp_path / "one_dip")
    records.start(info)
    for step, low in ((2, 0.3), (4, 0.9), (6, 0.9)):
        records.window({"step_end": step, "warmup": False, "ips": 100.0, "loss": 2.0,
                        "device_busy_frac": 0.95, "device_busy_min_frac": low})
    records.finish("completed")
    df = collect_runs(tmp_path)
    points = points_table(df).set_index("strategy")
    assert points.loc["DDP", "device_busy_frac"] > HOST_BOUND_BUSY_FRAC
    assert points.loc["DDP", "host_bound"] and not points.loc["FULL_SHARD", "host_bound"]
    text = host_bound_text(points_table(df), df)
    assert "DDP at 1 node(s) (least busy rank 50%, mean 92%)" in text


@pytest.fixture
def gpu_runs(tmp_path: Path) -> pd.DataFrame:
    """FULL_SHARD host-bound at 1 node (busy 0.35-0.40) and not at 2 (0.9); DDP busy."""
    for strategy, nodes, ips, busy in (("FULL_SHARD", 1, 100.0, [0.40, 0.37, 0.35]),
                                       ("FULL_SHARD", 2, 190.0, [0.9, 0.9, 0.9]),
                                       ("DDP", 1, 120.0, [0.96, 0.97, 0.95]),
                                       ("DDP", 2, 230.0, [0.95, 0.95, 0.95])):
        _write(tmp_path / f"{strategy}_{nodes}", run_info(strategy, nodes, device="cuda"),
               ips, busy)
    return collect_runs(tmp_path)


def test_runs_and_points_carry_the_busy_share_and_the_flag(gpu_runs):
    row = gpu_runs.set_index(["strategy", "nodes"]).loc[("FULL_SHARD", 1)]
    assert row["device_busy_frac"] == pytest.approx(0.37)  # median over windows
    assert row["device_busy_min_frac"] == pytest.approx(0.32)  # least busy rank, median
    points = points_table(gpu_runs).set_index(["strategy", "nodes"])
    assert points.loc[("FULL_SHARD", 1), "host_bound"]
    assert not points.loc[("FULL_SHARD", 2), "host_bound"]
    assert not points.loc[("DDP", 1), "host_bound"]


def test_the_report_names_the_host_bound_points_and_what_they_measure(gpu_runs):
    text = host_bound_text(points_table(gpu_runs), gpu_runs)
    assert "Host-bound: 1 of 4 measured points" in text
    assert "FULL_SHARD at 1 node(s) (least busy rank 32%, mean 37%)" in text
    assert "measure the training loop and the wrapper" in text
    assert "at 2 node(s)" not in text


def test_the_figure_rings_host_bound_points_and_says_so_in_its_legend(gpu_runs):
    fig = plot_weak_scaling(gpu_runs)
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert any(label.startswith("host-bound: device busy < 80%") for label in labels)
    rings = [c for ax in fig.axes for c in ax.collections if c.get_label() == "_host-bound"]
    (point,) = [ln.get_xydata()[0] for ln in fig.axes[0].lines if ln.get_label() == "FULL_SHARD"]
    assert len(rings) == 1 and rings[0].get_offsets().tolist() == [list(point)]  # around its point
    assert point[1] == 100.0


def test_the_best_table_says_where_its_ranking_is_of_host_loops(gpu_runs):
    """At 1 node DDP (busy 0.96) beats FULL_SHARD (0.37): a ranking against a host-bound
    runner-up; at 2 nodes both are busy."""
    points = points_table(gpu_runs)
    best = best_table(points).set_index("nodes")
    assert best.loc[1, "configuration"] == "DDP" and best.loc[1, "runner_up"] == "FULL_SHARD"
    assert best.loc[1, "host_bound"] and not best.loc[2, "host_bound"]
    bound = best_text(best_table(points), points).split("**Host-bound:**")[1]
    assert bound.startswith(" at vit_tiny at 1 node(s) the fastest") and "2 node(s)" not in bound


def _rings(fig) -> list[list[float]]:
    """Where the figure drew its host-bound hexagons, (x, y) each."""
    return [xy for ax in fig.axes for c in ax.collections if c.get_label() == "_host-bound"
            for xy in c.get_offsets().tolist()]


def test_the_tflops_figure_rings_the_host_bound_point_at_its_gpus(gpu_runs):
    """FULL_SHARD at 1 node is 2 ranks (GPUS_PER_NODE) at 100 images/s: 1.0 TFLOP/s, ringed
    where its marker stands (beside 2 ranks: DDP's line shares the world size)."""
    from tests.fake_records import GPUS_PER_NODE

    fig = plot_tflops(gpu_runs)
    (point,) = [ln.get_xydata()[0] for ln in fig.axes[0].lines if ln.get_label() == "FULL_SHARD"]
    assert _rings(fig) == [list(point)] and point[1] == 1.0
    assert point[0] == pytest.approx(GPUS_PER_NODE, rel=0.2) and point[0] != GPUS_PER_NODE


@pytest.fixture
def ablation(tmp_path: Path) -> pd.DataFrame:
    """FULL_SHARD at 2 nodes under two prefetch settings: BACKWARD_POST host-bound."""
    for prefetch, ips, busy in (("BACKWARD_PRE", 200.0, [0.92] * 3),
                                ("BACKWARD_POST", 150.0, [0.45] * 3)):
        _write(tmp_path / prefetch, run_info("FULL_SHARD", 2, device="cuda", prefetch=prefetch),
               ips, busy)
    return collect_runs(tmp_path)


def test_the_prefetch_ablation_marks_its_host_bound_variant(ablation):
    table = prefetch_table(points_table(ablation)).set_index("backward_prefetch")
    assert table.loc["BACKWARD_POST", "host_bound"] and not table.loc["BACKWARD_PRE", "host_bound"]
    # the figure the flag judges is in the table beside the mean: the least busy rank's
    assert table.loc["BACKWARD_POST", ["device_busy_frac", "device_busy_min_frac"]].tolist() \
        == pytest.approx([0.45, 0.40])
    fig = plot_prefetch(ablation)
    assert [y for _, y in _rings(fig)] == [150.0]  # on the BACKWARD_POST bar only
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert any(label.startswith("host-bound") for label in labels)
    section = next(s for s in report_sections(study_tables(ablation, 1_281_167), 1_281_167)
                   if s.title == "Prefetch ablation")
    cells = section.table.iloc[0].tolist()
    assert "150 (n=1) (host-bound)" in cells and "200 (n=1)" in cells  # windows all at ips
    assert "does not say what prefetching does to communication" in section.text


def test_cpu_points_are_not_flagged_and_the_report_says_why(tmp_path):
    for nodes in (1, 2):
        _write(tmp_path / f"n{nodes}", run_info("FULL_SHARD", nodes), 50.0 * nodes, None)
    df = collect_runs(tmp_path)
    points = points_table(df)
    assert points["host_bound"].isna().all()
    assert "not measured on CPU ranks" in host_bound_text(points, df)
    best = best_table(points)
    assert best["host_bound"].isna().all() and "Host-bound" not in best_text(best, points)
    assert not _rings(plot_weak_scaling(df)) and not _rings(plot_tflops(df))


def test_the_caption_says_what_the_ring_means():
    from vitfsdp.analysis.report import caption

    assert "grey hexagon: a host-bound point" in caption("weak_scaling", drawn=["host_bound"])
    assert "hexagon" not in caption("weak_scaling", drawn=["ideal"])


def test_the_table_and_the_figure_judge_a_point_of_mixed_records_alike(tmp_path):
    """Two repeats of one point, one with the least busy rank recorded (0.70) and one
    without (an older record: its mean, 0.95): each run is judged first, then the median
    (0.825), so points.csv and the figure's ring agree: not host-bound. A point whose both
    runs read 0.70 is, in both."""
    for name, strategy, gaps in (("a", "DDP", (0.25, None)), ("b", "FULL_SHARD", (0.25, 0.25))):
        for repeat, gap in enumerate(gaps):
            info = run_info(strategy, 1, device="cuda")
            info["config"]["repeat"] = repeat
            records = RunRecords(tmp_path / f"{name}{repeat}")
            records.start(info)
            for step in (2, 4, 6):
                records.window({"step_end": step, "warmup": False, "ips": 100.0, "loss": 2.0,
                                "tflops_per_gpu": 1.0, "device_busy_frac": 0.95,
                                "device_busy_min_frac": None if gap is None else 0.95 - gap})
            records.finish("completed")
    df = collect_runs(tmp_path)
    points = points_table(df).set_index("strategy")
    assert not points.loc["DDP", "host_bound"] and points.loc["FULL_SHARD", "host_bound"]
    rings = _rings(plot_weak_scaling(df))
    assert len(rings) == 1  # FULL_SHARD's alone


def test_an_older_summary_of_the_least_busy_rank_is_read_as_todays(tmp_path):
    """Summaries before 2026-11-29 held the least busy rank's share as the minimum over
    windows (one dip); runs.csv takes the median over the measured windows from
    metrics.jsonl, as summaries now record it."""
    import json

    _write(tmp_path / "old", run_info("DDP", 1, device="cuda"), 100.0, [0.9, 0.95, 0.95])
    summary_path = tmp_path / "old" / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary_path.write_text(json.dumps(summary | {"device_busy_min_frac": 0.1}))
    row = collect_runs(tmp_path).iloc[0]
    assert row["device_busy_min_frac"] == pytest.approx(0.90)  # median of 0.85, 0.90, 0.90
