"""memory.png as a reader reads it: the prediction named by what it predicts, the marks of a
point beside its measured peak (not one blob on it), and the device's used memory where the
records hold it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from matplotlib.markers import MarkerStyle

from tests.fake_records import run_info
from vitfsdp.analysis import collect_runs, plot_memory, plot_weak_scaling
from vitfsdp.analysis.figures import PROXIES
from vitfsdp.analysis.figures.memory import MARK_SHAPES
from vitfsdp.records import RUN_FILE, RunRecords, write_json_atomic

GIB = 2**30
#: vit_huge FULL_SHARD on one H100 node (docs/data/gpu-h100-2026-11-26-sweep-runs.csv, GiB):
#: allocated, reserved, the device's used memory (NVML), the plan's predicted reserved.
ALLOCATED, RESERVED, USED, PREDICTED = 17.5, 21.1, 22.9, 22.3


def write_run(run_dir: Path, nodes: int, device: str = "cuda", framework: str = "torch",
              used: bool = True, state: bool = True) -> None:  # fmt: skip
    """A completed FULL_SHARD run at ``nodes``, its memory a little lower per node count, with
    its plan's prediction as the sweep records it (run.json ``plan``, its
    ``pred_mem_metric``: reserved memory on a GPU, resident memory on CPU); ``used``: the
    windows hold NVML's device used memory; ``state``: the summary holds the model state (the
    figure draws bars)."""
    info = run_info("FULL_SHARD", nodes, device=device)
    info["config"]["framework"] = framework
    if framework == "jax" and device == "cuda":  # as vitfsdp.jax.metrics.device_info records
        info["config"]["cluster"]["device_memory_gib"] = info["device"]["memory_gib"]
        info["device"]["memory_gib"] *= 0.75  # XLA's bytes_limit: its pool, 75% by default
    records = RunRecords(run_dir)
    records.start(info)
    if state:
        records.summary_extra["model_state_bytes_max"] = {
            "params": GIB // nodes, "grads": GIB // nodes, "optimizer": 2 * GIB // nodes}
    scale = 1 / nodes**0.25
    gpu = {"peak_mem_allocated_gib": ALLOCATED * scale, "peak_mem_reserved_gib": RESERVED * scale,
           **({"device_mem_used_gib": USED * scale} if used else {})}
    for step in (2, 4, 6):
        records.window({"step_end": step, "warmup": step == 2, "ips": 100.0 * nodes,
                        "loss": 2.0, **(gpu if device == "cuda" else
                                        {"peak_rss_gib": ALLOCATED * scale})})
    records.finish("completed")
    run = json.loads((run_dir / RUN_FILE).read_text())
    metric = "peak_mem_reserved_gib" if device == "cuda" else "peak_rss_gib"
    run["plan"] = {"peak_mem_gib": PREDICTED * scale, "ips": 90.0 * nodes, "step_time_s": 1.0,
                   "fits": True, "pred_mem_metric": metric,
                   "device": "gpu" if device == "cuda" else "cpu"}
    write_json_atomic(run_dir / RUN_FILE, run)


def _legend(fig) -> list[str]:
    return [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]


@pytest.mark.parametrize(("device", "framework", "label"), [
    ("cuda", "torch", "predicted peak reserved (plan)"),
    ("cpu", "torch", "predicted peak resident memory (plan)"),
    ("cpu", "jax", "predicted peak resident memory (plan)"),
    ("cuda", "jax", "predicted XLA's peak in use (plan)"),
])  # fmt: skip
def test_the_prediction_is_named_by_what_it_predicts(tmp_path: Path, device: str,
                                                     framework: str, label: str) -> None:
    """On a GPU the plan predicts peak reserved memory (22.3 GiB), the y axis is allocated
    (17.5): labelled "predicted (plan)", a reader took +27 % against allocated for the
    prediction's error, where it is +6 % against reserved (21.1). The legend now names what
    the prediction predicts (runs.csv pred_mem_metric): reserved on a GPU, resident memory
    on CPU; for JAX on a GPU XLA's peak in use (its reserved is XLA's pool, sized by a share
    of the device: the H100 export read -68% against it)."""
    write_run(tmp_path / "a", 1, device, framework)
    fig = plot_memory(collect_runs(tmp_path))
    legend = _legend(fig)
    assert label in legend
    assert PROXIES["predicted"]["label"] not in legend
    if device == "cuda" and framework == "jax":  # the pool: a line, not a mark per point
        assert not any(e.startswith("measured peak reserved") for e in legend), legend
        assert any(e.startswith("XLA's pool") for e in legend), legend


def test_cpu_and_gpu_predictions_in_one_figure_say_which_is_which(tmp_path: Path) -> None:
    write_run(tmp_path / "gpu", 1, "cuda")
    write_run(tmp_path / "cpu", 2, "cpu")
    legend = _legend(plot_memory(collect_runs(tmp_path)))
    assert ("predicted (plan): peak reserved on GPU, peak resident memory on CPU"
            in legend)


def test_other_figures_keep_their_prediction_label(tmp_path: Path) -> None:
    """weak_scaling.png's prediction is of images/s: its label stays the plain one."""
    write_run(tmp_path / "a", 1)
    assert PROXIES["predicted"]["label"] == "predicted (plan)"
    assert "predicted (plan)" in _legend(plot_weak_scaling(collect_runs(tmp_path)))


def _marks(ax) -> dict[str, list[tuple[float, float]]]:
    """``(x, y)`` in data coordinates of each mark a memory panel drew for its one line, by
    kind: the measured peak, the prediction, the reserved circle, the device used triangle."""
    lines = {ln.get_label(): ln for ln in ax.lines}
    collections = {c.get_label(): c for c in ax.collections}
    return {"measured": [tuple(xy) for xy in lines["FULL_SHARD"].get_xydata()],
            "predicted": [tuple(xy) for xy in lines["_predicted FULL_SHARD"].get_xydata()],
            "reserved": [tuple(xy) for xy in collections["_reserved"].get_offsets()],
            "used": [tuple(xy) for xy in collections["_device used"].get_offsets()]
            if "_device used" in collections else []}


def _x_points(ax, x: float) -> float:
    """``x`` (data) in points from the figure's left edge."""
    return ax.transData.transform((x, 1.0))[0] * 72 / ax.figure.dpi


@pytest.mark.parametrize("state", [True, False], ids=["bars", "no bars"])
@pytest.mark.parametrize("nodes", [(1,), (1, 2, 4)], ids=["one node count", "three"])
def test_a_points_marks_stand_beside_its_measured_peak(tmp_path: Path, nodes: tuple,
                                                       state: bool) -> None:
    """At one node count the allocated marker, the reserved circle and the predicted dot
    were drawn at one x: one blob. Now the prediction stands left of the measured peak, the
    reserved circle right of it and the device's used memory further right, each a few
    points apart, on the point's bar where there is one."""
    for n in nodes:
        write_run(tmp_path / f"n{n}", n, state=state)
    fig = plot_memory(collect_runs(tmp_path))
    ax = fig.axes[0]
    marks = _marks(ax)
    kinds = ("predicted", "measured", "reserved")  # left to right
    assert all(len(marks[kind]) == len(nodes) for kind in kinds)
    bars = sorted({(p.get_x(), p.get_x() + p.get_width()) for p in ax.patches})
    assert len(bars) == (len(nodes) if state else 0)
    for i, n in enumerate(nodes):
        xs = [marks[kind][i][0] for kind in kinds]
        points = [_x_points(ax, x) for x in xs]
        assert all(b - a >= 4.0 for a, b in itertools.pairwise(points)), points
        assert len(marks["used"]) == len(nodes)  # then the device used, further right
        xs.append(marks["used"][i][0])
        assert _x_points(ax, xs[-1]) - points[-1] >= 4.0
        assert all(n / 1.4 < x < n * 1.4 for x in xs)  # beside its own node count
        if state:  # every mark on the point's bar
            left, right = bars[i]
            assert all(left <= x <= right for x in xs), (bars[i], xs)


def test_the_devices_used_memory_is_drawn_where_recorded(tmp_path: Path) -> None:
    """NVML's used memory of the whole device (runs.csv device_mem_used_gib: the CUDA context
    and NCCL beside the allocator) was only in the tables. It is now a three-spoked mark
    per point with its own legend entry, so the gap between the allocator and what the device
    holds shows; runs without it draw none."""
    for n in (1, 2):
        write_run(tmp_path / "with" / f"n{n}", n)
        write_run(tmp_path / "without" / f"n{n}", n, used=False)
    fig = plot_memory(collect_runs(tmp_path / "with"))
    (used,) = [c for c in fig.axes[0].collections if c.get_label() == "_device used"]
    assert list(used.get_offsets()[:, 1]) == pytest.approx([USED, USED / 2**0.25])
    # strokes alone, in a shape no line's point has (a hollow triangle read as NO_SHARD's)
    assert not MarkerStyle(MARK_SHAPES["device_used"]).is_filled()
    assert "device_used" in fig.drawn_kinds
    assert " ".join(PROXIES["device_used"]["label"].split()) in _legend(fig)
    assert "NVML" in PROXIES["device_used"]["label"]
    fig = plot_memory(collect_runs(tmp_path / "without"))
    assert not [c for c in fig.axes[0].collections if c.get_label() == "_device used"]
    assert "device_used" not in fig.drawn_kinds
    cpu = tmp_path / "cpu"
    write_run(cpu / "a", 1, "cpu")
    assert "device_used" not in plot_memory(collect_runs(cpu)).drawn_kinds


#: Peak resident memory per rank (GiB) of three repeats of one CPU point, and one run of
#: another: the spread a reader must see to tell two memory points apart.
RSS_REPEATS = {1: [1.50, 1.80, 2.10], 2: [1.20]}


def _cpu_repeats(root: Path) -> None:
    """FULL_SHARD on CPU ranks: ``repeat=0,1,2`` at 1 node, one run at 2 nodes
    (:data:`RSS_REPEATS`), written by the trainer's own writer with ``repeat`` set."""
    from tests.fake_records import write_run as write_fake

    for nodes, peaks in RSS_REPEATS.items():
        for repeat, peak in enumerate(peaks):
            info = run_info("FULL_SHARD", nodes)
            info["config"]["repeat"] = repeat
            write_fake(root / f"n{nodes}_r{repeat}", info, 100.0 * nodes, mem_gib=peak)


def _capped_bars(ax) -> dict[float, tuple[float, float, int]]:
    """``x -> (low, high, caps drawn)`` of a panel's error bars."""
    bars = {}
    for container in ax.containers:
        (segments,) = container.lines[2]
        for (x, low), (_, high) in segments.get_segments():
            bars[round(x, 3)] = (low, high, len(container.lines[1]))
    return bars


def test_peak_resident_memory_shows_its_spread_over_repeats(tmp_path: Path) -> None:
    """repeat=0,1,2 of one CPU point peaked at 1.58, 1.88 and 2.18 GiB per rank (the fake
    windows add step/100): memory.png drew one filled marker at the largest and no bar, so
    a reader could not tell whether two memory points differ. Now, as weak_scaling.png and
    tflops.png draw their repeats, a capped min-max bar over the repeats at the point, the
    point that ran once hollow, and the footer says how many runs each point holds."""
    _cpu_repeats(tmp_path)
    fig = plot_memory(collect_runs(tmp_path))
    assert {"repeats", "one_run"} <= set(fig.drawn_kinds)
    (x, top), = [xy for xy in fig.axes[0].lines[0].get_xydata() if round(xy[0]) == 1]
    low, high, caps = _capped_bars(fig.axes[0])[round(x, 3)]
    assert (low, high) == (pytest.approx(1.58), pytest.approx(2.18)) and caps == 2
    assert top == pytest.approx(2.18)  # the point: the highest repeat, as before
    (hollow,) = [c for c in fig.axes[0].collections if c.get_label() == "_one run"]
    assert [round(x) for x, _ in hollow.get_offsets()] == [2]
    legend = " ".join(" ".join(_legend(fig)) .split())
    footer = " ".join(fig.legends[0].get_title().get_text().split())
    assert "n=1-3 completed runs" in footer, footer
    assert "error bar: min-max over repeats" in legend


def test_the_memory_limit_a_point_ran_under_is_in_runs_csv_and_the_figure(tmp_path: Path) -> None:
    """runs.csv had no column for the memory a rank could use: a CPU run under
    train.memory_limit_gib=0.4 that ended oom read as if nothing limited it, and a JAX run's
    XLA pool (75 % of the device by default) was nowhere. ``memory_limit_gib`` is now the
    device's memory (torch on a GPU), XLA's pool of it (JAX), train.memory_limit_gib (CPU,
    where set) or null; memory.png draws the pool beside the device's memory and says the
    CPU limit under the legend (it caps a rank's data-segment growth, not its RSS: no line
    on the RSS axis)."""
    write_run(tmp_path / "torch" / "a", 1)
    write_run(tmp_path / "jax" / "a", 1, framework="jax")
    write_run(tmp_path / "cpu" / "a", 1, "cpu")
    write_run(tmp_path / "limited" / "a", 1, "cpu")
    run = json.loads((tmp_path / "limited" / "a" / RUN_FILE).read_text())
    run["config"]["train"]["memory_limit_gib"] = 0.4
    write_json_atomic(tmp_path / "limited" / "a" / RUN_FILE, run)
    limits = {name: collect_runs(tmp_path / name)["memory_limit_gib"].iloc[0]
              for name in ("torch", "jax", "cpu", "limited")}
    assert limits["torch"] == 80.0 and limits["jax"] == pytest.approx(60.0)
    assert limits["limited"] == pytest.approx(0.4)
    assert limits["cpu"] != limits["cpu"]  # NaN: no limit known
    fig = plot_memory(collect_runs(tmp_path / "jax"))
    levels = {round(ln.get_ydata()[0], 3): ln.get_label() for ln in fig.axes[0].lines
              if ln.get_label().startswith(("NVIDIA", "XLA"))}
    assert levels == {80.0: "NVIDIA H100 memory (80 GiB)",
                      60.0: "XLA's pool, 75% of the memory (60 GiB)"}
    fig = plot_memory(collect_runs(tmp_path / "limited"))
    footer = " ".join(fig.legends[0].get_title().get_text().split())
    assert "train.memory_limit_gib=0.4 GiB per rank" in footer, footer
    fig = plot_memory(collect_runs(tmp_path / "cpu"))
    assert "memory_limit_gib" not in fig.legends[0].get_title().get_text()


def test_the_report_names_a_limit_other_than_the_devices(tmp_path: Path) -> None:
    """A CPU point under train.memory_limit_gib=0.4 whose second repeat ran out of memory:
    the report's memory and failures tables showed no limit. They now show it (memory
    limit (GiB) 0.40) and the memory section says what it limits; a torch GPU run's limit is
    its device's memory, shown once (no limit column)."""
    from tests.fake_records import write_run as write_fake
    from vitfsdp.analysis import study_tables
    from vitfsdp.analysis.report import report_sections

    info = run_info("FULL_SHARD", 1)
    info["config"]["train"]["memory_limit_gib"] = 0.4
    write_fake(tmp_path / "cpu" / "r0", info, 100.0)
    write_fake(tmp_path / "cpu" / "r1", {**info, "config": {**info["config"], "repeat": 1}},
               None, status="oom")
    sections = {s.title: s for s in report_sections(study_tables(
        collect_runs(tmp_path / "cpu")), 1_281_167)}
    memory, failed = sections["Memory"], sections["Runs that did not complete"]
    assert memory.table["memory limit (GiB)"].tolist() == ["0.40"]
    assert failed.table["memory limit (GiB)"].tolist() == ["0.40"]
    assert "train.memory_limit_gib, the growth of a rank's data segment" in memory.text
    write_run(tmp_path / "gpu" / "a", 1)
    sections = {s.title: s for s in report_sections(study_tables(
        collect_runs(tmp_path / "gpu")), 1_281_167)}
    assert "memory limit (GiB)" not in sections["Memory"].table
    assert "device memory (GiB)" in sections["Memory"].table


def test_a_jax_gpu_runs_memory_is_compared_with_xlas_peak_in_use_not_its_pool() -> None:
    """The H100 JAX export's calibration compared the plan's 22.75 GiB with XLA's pool,
    71.26 GiB (preallocated at 90% of the device): -68%, the report's worst memory error.
    The pool is sized by a share of the device, not by the step; XLA's peak in use is what
    the plan's tensors predict. Records of the older rule (pred_mem_metric reserved) too."""
    import pandas as pd

    from vitfsdp.plan import mem_metric
    from vitfsdp.plan.calibrate import compare

    assert mem_metric("cuda", "jax") == "peak_mem_gib"
    assert mem_metric("cuda", "torch") == "peak_mem_reserved_gib"
    assert mem_metric("cpu", "jax") == "peak_rss_gib"
    assert mem_metric(pd.NA, "jax") == mem_metric(float("nan"), "jax") == "peak_rss_gib"
    runs = pd.DataFrame([{"framework": "jax", "device_type": "cuda", "peak_mem_gib": 29.5,
                          "peak_mem_reserved_gib": 71.26, "pred_peak_mem_gib": 22.75,
                          "pred_mem_metric": "peak_mem_reserved_gib"},
                         {"framework": "torch", "device_type": "cuda", "peak_mem_gib": 17.5,
                          "peak_mem_reserved_gib": 21.1, "pred_peak_mem_gib": 22.3,
                          "pred_mem_metric": "peak_mem_reserved_gib"}])
    table = compare(runs, ["framework"])
    assert table["mem_metric"].tolist() == ["peak_mem_gib", "peak_mem_reserved_gib"]
    assert table["mem_rel_error"].tolist() == pytest.approx([(22.75 - 29.5) / 29.5,
                                                             (22.3 - 21.1) / 21.1])


def test_each_panel_has_its_own_scale_and_none_is_empty() -> None:
    """The H100 exports: vit_base's 1.6-3.6 GiB lay flat on the 0-80 GiB axis its row
    shared with the device's memory, and vit_huge_patch14_224 had an empty 'no other
    strategies runs' panel. A model's panels now run from 0 to a little above its own
    values, a device memory far above them named at the top under an arrow (off scale),
    and there is a panel per model and group the runs hold, no more."""
    from tests.unit.test_figures_single_device import H100
    from vitfsdp.analysis.collect import read_runs_csv
    df, _ = read_runs_csv(H100)
    fig = plot_memory(df)
    titles = [" ".join(ax.get_title().split()) for ax in fig.axes]
    assert len(titles) == 5 and not [t for ax in fig.axes for t in ax.texts
                                     if "no " in t.get_text() and " runs" in t.get_text()]
    based = 0
    for ax, title in zip(fig.axes, titles, strict=True):
        values = [y for ln in ax.lines if not ln.get_label().startswith("_")  # measured
                  and "memory (" not in ln.get_label() and "XLA" not in ln.get_label()
                  for y in ln.get_ydata()]
        low, high = ax.get_ylim()
        device = [ln for ln in ax.lines if "memory (" in ln.get_label()]
        off = [t.get_text() for t in ax.texts if t.get_text().startswith("off scale")]
        if title.startswith("ViT-B/16"):  # vit_base
            based += 1
            assert high < 10 and not device, title  # its own scale, not 0-80 GiB
            assert off and "79.2 GiB" in off[0], title
            assert [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
            assert max(values) > high / 3  # the values fill the panel
        if device:  # vit_huge: up to 29 GiB, the device's 79.2 within OFF_SCALE of them
            assert device[0].get_ydata()[0] <= high and not off, title
    assert based == 2 and "device_off_scale" in fig.drawn_kinds


def test_the_device_memory_reads_alike_in_the_legend_and_the_panels() -> None:
    """The H100's memory read '(79.1787 GiB)' in the legend but '79.2 GiB' in the panels'
    off-scale names: both now in three significant digits."""
    import re

    from tests.unit.test_figures_single_device import H100
    from vitfsdp.analysis.collect import read_runs_csv
    fig = plot_memory(read_runs_csv(H100)[0])
    drawn = [ln.get_label() for ax in fig.axes for ln in ax.lines
             if "memory (" in ln.get_label()]
    drawn += [t.get_text() for t in fig.legends[0].get_texts()]
    drawn += [t.get_text() for ax in fig.axes for t in ax.texts]
    sizes = {size for text in drawn for size in re.findall(r"([\d.]+) GiB", text)}
    assert "79.2" in sizes and not [s for s in sizes if len(s.replace(".", "")) > 3], sizes


def _texts(fig):
    """Every text artist a figure drew that holds text (titles, labels, tick labels,
    annotations, the legend's)."""
    from matplotlib.text import Text
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("device", ["NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                    "INVENTED DATA (bench_analysis): AMD Instinct MI250X"])
def test_every_text_lies_inside_the_figure_and_the_off_scale_names_inside_their_axes(
        device: str) -> None:
    """The off-scale 'NVIDIA RTX PRO 6000 Blackwell Server Edition memory 79.2 GiB' ran over
    the y axis's tick labels, and the synthetic sample's 'INVENTED DATA (bench_analysis):
    AMD Instinct MI250X GCD memory 64 GiB' past the figure's left edge into the next panel:
    each name is now wrapped to its axes' width."""
    from tests.unit.test_figures_single_device import H100
    from vitfsdp.analysis.collect import read_runs_csv
    fig = plot_memory(read_runs_csv(H100)[0].assign(device_name=device))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.get_figwidth() * fig.dpi, fig.get_figheight() * fig.dpi
    for text in _texts(fig):
        box = text.get_window_extent(renderer)
        assert 0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height, \
            text.get_text()
    off = [(ax, t) for ax in fig.axes for t in ax.texts if t.get_text().startswith("off scale")]
    assert off
    for ax, text in off:
        box, axes = text.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert axes.x0 <= box.x0 and box.x1 <= axes.x1, text.get_text()


def test_a_bar_without_gradient_bytes_and_a_peak_since_process_start_say_so() -> None:
    """The H100 JAX bar (timm ViT-H/14) recorded no gradient bytes: its gradients fell,
    unsaid, into the hollow 'peak above the model state', read as a run without gradients;
    and its peak counts from the process's start where PyTorch's is reset every window.
    Its hollow top is now dashed and the legend says why; the footer says what each peak
    counts from."""
    from tests.unit.test_figures_single_device import H100
    from vitfsdp.analysis.collect import read_runs_csv
    df = read_runs_csv(H100)[0]
    fig = plot_memory(df)
    jax = df[df["framework"] == "jax"]
    assert len(jax) == 1 and jax["state_grads_gib"].isna().all()
    rests = {(bars.get_label(), bar.get_linestyle()) for ax in fig.axes
             for bars in ax.containers if bars.get_label().startswith("_state_rest")
             for bar in bars.patches}
    assert rests == {("_state_rest", "-"), ("_state_rest_no_grads", "--")}
    legend = [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]
    assert "dashed: grads not recorded (JAX), in the peak above the model state" in legend
    texts = " ".join(" ".join(t.get_text().split()) for t in _texts(fig))
    assert "JAX peak since process start" in texts and "PyTorch peak per window" in texts
    torch_only = plot_memory(df[df["framework"] == "torch"])
    assert "JAX peak" not in " ".join(t.get_text() for t in _texts(torch_only))
    assert "grads not recorded" not in " ".join(t.get_text() for t in _texts(torch_only))
