"""Acceptance test of the analysis report on a synthetic sweep of records (no training).

The sweep mixes two models, three strategies, 1-4 nodes, a prefetch ablation, repeats, an
OOM, a killed run whose metrics.jsonl ends in a truncated line, and a point the plan
skipped as infeasible. Every record is written with :mod:`vitfsdp.records`' writers.
"""

from __future__ import annotations

import html
import json
import logging
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib import image as plt_image
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.text import Text

from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.__main__ import main as analysis_main
from vitfsdp.analysis.figures import (
    FIGURES as FIGURE_FUNCTIONS,
)
from vitfsdp.analysis.figures import (
    figure_script,
    plot_memory,
    plot_prefetch,
    plot_weak_scaling,
)
from vitfsdp.analysis.figures.style import model_name, short_label
from vitfsdp.analysis.tables import (
    best_table,
    calibration_table,
    failures_table,
    points_table,
)
from vitfsdp.records import METRICS_FILE, RUN_FILE, SUMMARY_FILE, RunRecords, write_json_atomic

GPUS_PER_NODE = 8
LOCAL_BATCH = 32
DEVICE_GIB = 80.0
PRICE = 12.5  # per node-hour
SHARDING = {"FULL_SHARD": "FULL_SHARD", "HYBRID_8GPU": "HYBRID_SHARD", "DDP": "DDP"}
#: Global images/s per (model, strategy, nodes) at the default prefetch settings.
IPS = {
    ("vit_base", "FULL_SHARD", 1): 2400.0, ("vit_base", "FULL_SHARD", 2): 4500.0,
    ("vit_base", "FULL_SHARD", 4): 8400.0,
    ("vit_base", "HYBRID_8GPU", 1): 2500.0, ("vit_base", "HYBRID_8GPU", 2): 4900.0,
    ("vit_base", "HYBRID_8GPU", 4): 9600.0,
    ("vit_base", "DDP", 1): 2600.0, ("vit_base", "DDP", 2): 5000.0,
    ("vit_huge", "FULL_SHARD", 1): 300.0, ("vit_huge", "FULL_SHARD", 2): 560.0,
    ("vit_huge", "HYBRID_8GPU", 1): 320.0,
}  # fmt: skip
#: Peak allocated GiB per (model, strategy) at 1 node (FULL_SHARD shrinks with nodes).
MEM = {("vit_base", "FULL_SHARD"): 6.0, ("vit_base", "HYBRID_8GPU"): 6.5,
       ("vit_base", "DDP"): 9.0, ("vit_huge", "FULL_SHARD"): 40.0,
       ("vit_huge", "HYBRID_8GPU"): 44.0}  # fmt: skip
#: The prefetch ablation of vit_base FULL_SHARD at 4 nodes: ips per (prefetch, limit).
ABLATION = {("BACKWARD_POST", True): 8000.0, ("NONE", True): 7000.0,
            ("BACKWARD_PRE", False): 8200.0, ("BACKWARD_POST", False): 7900.0,
            ("NONE", False): 6800.0}  # fmt: skip
#: Repeats of vit_huge FULL_SHARD at 1 node (repeat 0 is IPS's 300).
REPEATS = {1: 330.0, 2: 270.0}
SKIPPED_GIB = 97.5  # the plan's prediction for the skipped point (vit_huge DDP, 1 node)
DATASET_SIZE = 1_000_000
#: The figures this sweep holds data for (no recipe ablation: ``plot_recipe`` gives None).
FIGURES = ("weak_scaling", "efficiency", "memory", "loss", "prefetch", "tflops")


def run_info(model: str, strategy: str, nodes: int, prefetch: str | None = "BACKWARD_PRE",
             limit: bool | None = True, repeat: int = 0) -> dict:  # fmt: skip
    """A run.json payload in the schema train.py writes (config = asdict(RunConfig))."""
    if strategy == "DDP":
        prefetch, limit = None, None
    world = nodes * GPUS_PER_NODE
    return {
        "run_id": f"{model}-{strategy}-n{nodes}-{prefetch}-{limit}-r{repeat}",
        "config": {
            "model": {"name": model},
            "strategy": {"name": strategy, "sharding_strategy": SHARDING[strategy],
                         "shard_group_size": 8 if strategy == "HYBRID_8GPU" else 0,
                         "backward_prefetch": prefetch, "limit_all_gathers": limit},
            "data": {"name": "synthetic"},
            "train": {"local_batch_size": LOCAL_BATCH, "steps": 20, "warmup_steps": 5,
                      "activation_checkpointing": False},
            "kernels": {"fused_attn": True, "compile": False, "adamw": "auto"},
            "mixed_precision": {"param_dtype": None, "reduce_dtype": None},
            "cluster": {"name": "cuda8", "gpus_per_node": GPUS_PER_NODE,
                        "device_memory_gib": DEVICE_GIB, "price_per_node_hour": PRICE},
            "engine": "fsdp1", "framework": "torch", "nodes": nodes, "precision": "bf16",
            "repeat": repeat,
        },
        "world": {"size": world, "nodes": nodes, "ranks_per_node": GPUS_PER_NODE},
        "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_gib": DEVICE_GIB,
                   "peak_flops": 989e12, "peak_source": "table:H100 bf16"},
        "model": {"num_params": 86_600_000 if model == "vit_base" else 632_000_000,
                  "forward_flops_per_image": 17.6e9},
    }  # fmt: skip


def write_run(run_dir: Path, info: dict, ips: float, mem_gib: float) -> None:
    """A completed run: one warm-up window and three measured windows around ``ips``."""
    records = RunRecords(run_dir)
    records.start(info)
    records.window({"step_end": 5, "warmup": True, "ips": 1.0, "loss": 7.0})
    world = info["world"]["size"]
    for step, delta in ((10, -0.01), (15, 0.0), (20, 0.01)):
        w_ips = ips * (1 + delta)
        records.window({
            "step_end": step, "warmup": False, "ips": w_ips, "ips_per_gpu": w_ips / world,
            "step_time_s": LOCAL_BATCH * world / w_ips,
            "tflops_per_gpu": w_ips / world * 3 * 17.6e9 / 1e12,
            "mfu": w_ips / world * 3 * 17.6e9 / 989e12,
            "peak_mem_allocated_gib": mem_gib, "peak_mem_allocated_min_gib": mem_gib * 0.9,
            "peak_mem_reserved_gib": mem_gib * 1.1, "loss": 6.0,
        })  # fmt: skip
    records.finish("completed")


def write_oom(run_dir: Path, info: dict) -> None:
    records = RunRecords(run_dir)
    records.start(info)
    records.finish("oom", reason="CUDA out of memory. Tried to allocate 2.00 GiB")


def write_killed(run_dir: Path, info: dict) -> None:
    """A run killed mid-write: run.json says running, metrics.jsonl ends in half a line."""
    records = RunRecords(run_dir)
    records.start(info)
    records.window({"step_end": 5, "warmup": True, "ips": 1.0})
    records.window({"step_end": 10, "warmup": False, "ips": 900.0})
    with open(run_dir / METRICS_FILE, "a", encoding="utf-8") as f:
        f.write('{"step_end": 15, "warmup": false, "ip')


def write_skipped(run_dir: Path, info: dict, pred_gib: float) -> None:
    """A point the sweep skipped: run.json with the plan, summary.json with the reason."""
    run_dir.mkdir(parents=True)
    plan = {"peak_mem_gib": pred_gib, "device_memory_gib": DEVICE_GIB, "fits": False,
            "step_time_s": None, "ips": None,
            "reason": f"predicted {pred_gib} GiB per GPU > {DEVICE_GIB} GiB"}
    write_json_atomic(run_dir / RUN_FILE, {**info, "status": "skipped_infeasible",
                                           "plan": plan})
    write_json_atomic(run_dir / SUMMARY_FILE, {"status": "skipped_infeasible",
                                               "reason": plan["reason"]})


def make_sweep(root: Path) -> Path:
    """Write the sweep described in the module docstring below ``root``."""
    for (model, strategy, nodes), ips in IPS.items():
        mem = MEM[model, strategy] / (nodes if strategy == "FULL_SHARD" else 1)
        write_run(root / f"{model}_{strategy}_n{nodes}", run_info(model, strategy, nodes),
                  ips, mem)
    for (prefetch, limit), ips in ABLATION.items():
        info = run_info("vit_base", "FULL_SHARD", 4, prefetch, limit)
        write_run(root / "ablation" / f"{prefetch}_{limit}", info, ips, 1.6)
    for repeat, ips in REPEATS.items():
        info = run_info("vit_huge", "FULL_SHARD", 1, repeat=repeat)
        write_run(root / f"vit_huge_FULL_SHARD_n1_r{repeat}", info, ips, 40.0)
    write_oom(root / "vit_huge_FULL_SHARD_n4", run_info("vit_huge", "FULL_SHARD", 4))
    write_killed(root / "vit_huge_HYBRID_8GPU_n2", run_info("vit_huge", "HYBRID_8GPU", 2))
    write_skipped(root / "vit_huge_DDP_n1", run_info("vit_huge", "DDP", 1), SKIPPED_GIB)
    write_oom(root / "ablation" / "HYBRID_NONE_False",
              run_info("vit_base", "HYBRID_8GPU", 4, "NONE", False))
    return root


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sweep(tmp_path_factory.mktemp("report") / "sweep")


@pytest.fixture(scope="module")
def runs(sweep: Path) -> pd.DataFrame:
    """The sweep's ``collect_runs`` frame, read once for the figure tests."""
    return collect_runs(sweep)


@pytest.fixture(scope="module")
def report(sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLI run in-process once: ``--report --dataset-size`` into its own directory."""
    out = tmp_path_factory.mktemp("analysis")
    argv = [str(sweep), "--report", "--out", str(out), "--dataset-size", str(DATASET_SIZE)]
    assert analysis_main(argv) == 0
    return out


def _point(points: pd.DataFrame, model: str, strategy: str, nodes: int,
           prefetch: str = "BACKWARD_PRE", limit: bool = True) -> pd.Series:  # fmt: skip
    rows = points[(points["model"] == model) & (points["strategy"] == strategy)
                  & (points["nodes"] == nodes) & (points["backward_prefetch"] == prefetch)
                  & (points["limit_all_gathers"] == limit)]
    (i,) = rows.index
    return rows.loc[i]


def test_every_figure_png_and_svg(report: Path) -> None:
    for name in FIGURES:
        assert (report / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (report / f"{name}.svg").read_text(encoding="utf-8")[:2000]


def test_report_md_and_html(report: Path) -> None:
    md = (report / "report.md").read_text(encoding="utf-8")
    for title in ("Provenance", "Weak scaling", "Memory", "Training loss",
                  "Best configuration per model and node count",
                  "Cost per epoch", "Prefetch ablation", "Runs that did not complete",
                  "Predicted against measured"):
        assert f"## {title}\n" in md
    for header in ("scaling efficiency", "MFU", "TFLOP/s/GPU (model)", "cost/epoch",
                   "peak mem min over ranks (GiB)", "BACKWARD_POST, limit=False"):
        assert f" {header} " in md  # a table column
    assert "| HFU " not in md  # no run recorded hw FLOPs: the column is left out
    for name in FIGURES:  # relative links, PNG shown and SVG linked
        assert f"]({name}.png)" in md and f"]({name}.svg)" in md
    # links are relative; the one absolute path is the analysis command's, as it was typed
    command = next(line for line in md.splitlines() if line.startswith("| analysis command"))
    assert f"--out {report} " in command
    assert str(report) not in md.replace(command, "")
    html = (report / "report.html").read_text(encoding="utf-8")
    assert html.count('src="data:image/png;base64,') == len(FIGURES)
    assert ".png" not in html  # nothing linked: self-contained
    assert html.count("<table") == md.count("\n|:") >= 7
    for block in md.split("\n\n"):  # every table row has its header's cells (a "|" in a
        rows = [r for r in block.splitlines() if r.startswith("|")]  # header escaped)
        assert len({len(re.findall(r"(?<!\\)\|", r)) for r in rows}) <= 1, block
    assert "median \\|error\\|" in md
    for name in FIGURES:  # the caption once, in italics; the image's alt text its name
        assert f"![{name}]({name}.png)" in md
    # a numeric last column is right-aligned like the others, a text column left-aligned
    assert '<th class="text">runner-up</th>' in html and "<th>ips over runner-up</th>" in html


def test_captions_name_only_what_each_figure_drew(report: Path) -> None:
    """Each caption names the marks its PNG says were drawn (the figure's own record), and
    no other: the weak-scaling figure of this sweep has no device line, the memory figure
    no ideal line."""
    from vitfsdp.analysis.figures.captions import FIGURE_MARK_CAPTIONS, SINGLE_DEVICE
    from vitfsdp.analysis.report import MARK_CAPTIONS, caption, drawn_kinds

    for name in FIGURES:
        drawn = drawn_kinds((report / f"{name}.png").read_bytes())
        assert drawn is not None, name
        text = caption(name, None, drawn)
        own = {**MARK_CAPTIONS, **FIGURE_MARK_CAPTIONS.get(name, {})}  # the figure's words
        assert all((words in text) == (kind in drawn) for kind, words in own.items())
        assert set(drawn) <= set(own) | {SINGLE_DEVICE}, (name, drawn)  # none unexplained
    assert "ideal" in drawn_kinds((report / "weak_scaling.png").read_bytes())
    assert "ideal" not in drawn_kinds((report / "memory.png").read_bytes())
    md = (report / "report.md").read_text(encoding="utf-8")
    assert caption("memory", None, drawn_kinds((report / "memory.png").read_bytes())) in md


def test_failed_points_listed(report: Path) -> None:
    failed = pd.read_csv(report / "failures.csv")
    got = sorted(zip(failed["model"], failed["strategy"], failed["nodes"], failed["status"],
                     strict=True))  # fmt: skip
    assert got == [("vit_base", "HYBRID_8GPU", 4, "oom"),
                   ("vit_huge", "DDP", 1, "skipped_infeasible"),
                   ("vit_huge", "FULL_SHARD", 4, "oom"),
                   ("vit_huge", "HYBRID_8GPU", 2, "running")]  # the killed run
    killed = failed[failed["status"] == "running"].iloc[0]
    assert killed["last_step"] == 10  # its truncated third window was skipped
    skipped = failed[failed["status"] == "skipped_infeasible"].iloc[0]
    assert skipped["pred_peak_mem_gib"] == SKIPPED_GIB
    md = (report / "report.md").read_text(encoding="utf-8")
    assert "| 1 skipped_infeasible " in md and "CUDA out of memory" in md


def test_truncated_last_line_skipped_with_warning(sweep: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        df = collect_runs(sweep)
    killed = str(sweep / "vit_huge_HYBRID_8GPU_n2" / METRICS_FILE)
    assert any("truncated last line" in r.getMessage() and killed in r.getMessage()
               for r in caplog.records)
    row = df[df["run_dir"] == str(sweep / "vit_huge_HYBRID_8GPU_n2")].iloc[0]
    assert row["num_windows"] == 1 and pd.isna(row["ips"])


def test_repeats_aggregated(report: Path) -> None:
    points = pd.read_csv(report / "points.csv")
    p = _point(points, "vit_huge", "FULL_SHARD", 1)
    ips = [IPS["vit_huge", "FULL_SHARD", 1], *REPEATS.values()]
    assert p["num_repeats"] == 3
    assert p["ips"] == pytest.approx(sorted(ips)[1])  # the median
    assert (p["ips_repeat_min"], p["ips_repeat_max"]) == (min(ips), max(ips))
    assert len(points[(points["model"] == "vit_huge") & (points["nodes"] == 1)
                      & (points["strategy"] == "FULL_SHARD")]) == 1
    runs = pd.read_csv(report / "scaling.csv")  # per run: the repeats stay apart
    assert len(runs[(runs["model"] == "vit_huge") & (runs["nodes"] == 1)
                    & (runs["strategy"] == "FULL_SHARD")]) == 3


def test_cost_per_epoch_and_efficiency(report: Path) -> None:
    points = pd.read_csv(report / "points.csv")
    p = _point(points, "vit_base", "FULL_SHARD", 4)
    hours = DATASET_SIZE / IPS["vit_base", "FULL_SHARD", 4] / 3600
    assert p["epoch_hours"] == pytest.approx(hours)
    assert p["node_hours_per_epoch"] == pytest.approx(hours * 4)
    assert p["cost_per_epoch"] == pytest.approx(hours * 4 * PRICE)
    ideal = IPS["vit_base", "FULL_SHARD", 1] * 4
    assert p["scaling_efficiency"] == pytest.approx(IPS["vit_base", "FULL_SHARD", 4] / ideal)
    assert p["mfu"] == pytest.approx(IPS["vit_base", "FULL_SHARD", 4] / 32 * 3 * 17.6e9 / 989e12)
    assert p["peak_mem_min_gib"] == pytest.approx(0.9 * MEM["vit_base", "FULL_SHARD"] / 4)


def test_best_configuration(report: Path) -> None:
    best = pd.read_csv(report / "best.csv")
    row = best[(best["model"] == "vit_base") & (best["nodes"] == 4)].iloc[0]
    assert row["configuration"].startswith("HYBRID_8GPU")
    assert row["runner_up"].startswith("FULL_SHARD BACKWARD_PRE")
    assert row["speedup_over_runner_up"] == pytest.approx(9600.0 / 8400.0)
    assert len(best) == len({(m, n) for m, _, n in IPS})


def _marks(ax) -> list[tuple[float, float]]:
    """(x, y) of the marks of runs that did not complete (``x`` at the bottom, y in axes
    fraction; a skipped point's diamond at its predicted value)."""
    return [tuple(xy) for c in ax.collections if isinstance(c, PathCollection)
            and c.get_label().startswith(("_not completed", "_skipped", "not completed"))
            for xy in c.get_offsets()]


def test_failed_points_marked_in_figures(sweep: Path) -> None:
    df = collect_runs(sweep)
    huge = next(ax for ax in plot_weak_scaling(df).axes
                if ax.get_title().startswith(model_name("vit_huge")[:-1]))  # ...; params)
    # skipped, killed, oom: each beside its node count, where its line's points stand
    assert sorted(2 ** round(np.log2(x)) for x, _ in _marks(huge)) == [1, 2, 4]
    panels = {ax.get_title(): ax for ax in plot_memory(df).axes}
    assert len(panels) == 4  # two models x (FULL_SHARD, other strategies)
    other = next(ax for t, ax in panels.items()
                 if t.startswith(model_name("vit_huge")[:-1]) and "other" in t)
    # each mark just left of its node count (memory.py: a failed repeat's x stood under
    # the completed marker), at its value
    near = [(2.0 ** round(np.log2(x)), y) for x, y in _marks(other)]
    assert all(x < n for (x, _), (n, _) in zip(_marks(other), near, strict=True))
    assert (1.0, SKIPPED_GIB) in near  # at its predicted memory
    assert 2.0 in [x for x, _ in near]  # the killed run
    assert other.get_ylim()[1] > SKIPPED_GIB
    device = [ln for ln in other.lines if ln.get_linestyle() == ":" and ln.get_color() == "black"]
    assert list(device[0].get_ydata()) == [DEVICE_GIB, DEVICE_GIB]
    full = next(ax for t, ax in panels.items()
                if t.startswith(model_name("vit_huge")[:-1]) and "FULL_SHARD" in t)
    assert [2.0 ** round(np.log2(x)) for x, _ in _marks(full)] == [4.0]  # the oom
    text = " ".join(t.get_text() for t in full.texts)
    assert "nodes=4 (1 oom)" in text


def test_prefetch_bars(sweep: Path) -> None:
    fig = plot_prefetch(collect_runs(sweep))
    (ax,) = fig.axes  # only vit_base ran an ablation, at 4 nodes
    assert "at 4 node(s)" in ax.get_title()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["FULL_SHARD", "HYBRID_8GPU"]
    heights = {p.get_label(): [] for p in ax.containers}
    for bars in ax.containers:
        heights[bars.get_label()] = [b.get_height() for b in bars]
    assert heights["BACKWARD_PRE, limit_all_gathers=True"] == [8400.0, 9600.0]
    assert heights["NONE, limit_all_gathers=False"] == [ABLATION["NONE", False]]
    (x,) = [x for x, _ in _marks(ax)]  # the HYBRID_8GPU oom, inside its group
    assert abs(x - labels.index("HYBRID_8GPU")) < 0.4


def test_a_sweep_of_backward_prefetch_alone_is_an_ablation(tmp_path: Path) -> None:
    """``strategy.backward_prefetch=BACKWARD_PRE,BACKWARD_POST`` with limit_all_gathers
    left at its default: the fixed setting splits no line, yet the ablation's table, figure
    and report need it (it raised KeyError: ['limit_all_gathers'] before)."""
    for prefetch, ips in (("BACKWARD_PRE", 9000.0), ("BACKWARD_POST", 8000.0)):
        write_run(tmp_path / prefetch, run_info("vit_base", "FULL_SHARD", 2, prefetch, True),
                  ips, 1.6)
    assert analysis_main([str(tmp_path), "--report"]) == 0
    table = pd.read_csv(tmp_path / "analysis" / "prefetch.csv")
    assert list(zip(table["backward_prefetch"], table["limit_all_gathers"], table["ips"],
                    strict=True)) == [("BACKWARD_PRE", True, 9000.0),
                                      ("BACKWARD_POST", True, 8000.0)]
    assert (tmp_path / "analysis" / "prefetch.png").exists()
    assert "Prefetch ablation" in (tmp_path / "analysis" / "report.md").read_text()


def test_predicted_beside_measured(tmp_path: Path) -> None:
    """A run whose recorded plan predicts twice its memory and half its ips."""
    info = run_info("vit_base", "FULL_SHARD", 1)
    measured_reserved = MEM["vit_base", "FULL_SHARD"] * 1.1
    write_run(tmp_path / "a", info, 1000.0, MEM["vit_base", "FULL_SHARD"])
    run = json.loads((tmp_path / "a" / RUN_FILE).read_text())
    run["plan"] = {"peak_mem_gib": 2 * measured_reserved, "ips": 500.0,
                   "step_time_s": LOCAL_BATCH * 8 / 500.0, "fits": True}
    write_json_atomic(tmp_path / "a" / RUN_FILE, run)
    df = collect_runs(tmp_path)
    (row,) = calibration_table(df).to_dict("records")
    assert row["mem_metric"] == "peak_mem_reserved_gib"
    assert row["measured_mem_gib"] == pytest.approx(measured_reserved)
    assert row["mem_rel_error"] == pytest.approx(1.0)
    assert row["ips_rel_error"] == pytest.approx(-0.5)
    assert row["step_time_rel_error"] == pytest.approx(1.0)
    for fig, value in ((plot_weak_scaling(df), 500.0), (plot_memory(df), 2 * measured_reserved)):
        (pred,) = [ln for ln in fig.axes[0].lines if ln.get_label().startswith("_predicted")]
        assert pred.get_linestyle() == ":" and list(pred.get_ydata()) == pytest.approx([value])


def test_no_price_gives_node_hours_only(tmp_path: Path) -> None:
    info = run_info("vit_base", "DDP", 2)
    info["config"]["cluster"]["price_per_node_hour"] = None
    write_run(tmp_path / "a", info, 7200.0, 9.0)
    points = points_table(collect_runs(tmp_path), dataset_size=DATASET_SIZE)
    assert points["node_hours_per_epoch"].iloc[0] == pytest.approx(DATASET_SIZE / 7200 / 3600 * 2)
    assert points["cost_per_epoch"].isna().all()
    assert best_table(points)["cost_per_epoch"].isna().all()
    with pytest.raises(ValueError, match="dataset_size"):
        points_table(collect_runs(tmp_path), dataset_size=0)


def test_failures_table_old_records(tmp_path: Path) -> None:
    """Records without the new fields (no repeat, no *_min, no price) still analyse."""
    info = run_info("vit_base", "DDP", 1)
    for key in ("repeat",):
        del info["config"][key]
    del info["config"]["cluster"]["price_per_node_hour"]
    write_run(tmp_path / "a", info, 100.0, 1.0)
    write_oom(tmp_path / "b", run_info("vit_base", "DDP", 2))
    df = collect_runs(tmp_path)
    assert list(failures_table(df)["status"]) == ["oom"]
    assert points_table(df)["num_repeats"].tolist() == [1]


def test_figure_script(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    """The body of analysis/prefetch_ablation.py: one figure into SWEEP_DIR/analysis."""
    assert figure_script("prefetch", [str(sweep)]) == 0
    assert {p.name for p in (sweep / "analysis").iterdir()} == {"prefetch.png", "prefetch.svg"}
    assert figure_script("memory", []) == 2
    assert "usage: python analysis/memory.py SWEEP_DIR" in capsys.readouterr().err


def _data_points_px(ax) -> np.ndarray:
    """Display coordinates (pixels) of every data point drawn in a panel: the vertices of
    its lines, scatter marks and error bars."""
    points = [line.get_transform().transform(line.get_xydata()) for line in ax.lines]
    for c in ax.collections:
        if isinstance(c, PathCollection):
            points.append(c.get_offset_transform().transform(c.get_offsets()))
        elif isinstance(c, LineCollection):
            points += [c.get_transform().transform(seg) for seg in c.get_segments()]
    points = np.concatenate([p for p in points if len(p)] or [np.empty((0, 2))])
    return points[np.isfinite(points).all(axis=1)]


@pytest.fixture(scope="module")
def drawn(runs: pd.DataFrame) -> dict[str, Figure]:
    """Each figure of the sweep, laid out (drawn without rendering pixels)."""
    figures = {name: FIGURE_FUNCTIONS[name](runs) for name in FIGURES}
    for fig in figures.values():
        fig.draw_without_rendering()
    return figures


@pytest.mark.parametrize("name", FIGURES)
def test_one_legend_outside_the_data(drawn: dict[str, Figure], name: str) -> None:
    """Lines of every prefetch variant, failures and predictions in one figure: its one
    legend covers no data point, bar or note and is inside what savefig keeps."""
    fig = drawn[name]
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *[ax.get_legend() for ax in fig.axes if ax.get_legend()]]
    for box in [legend.get_window_extent(renderer) for legend in legends]:
        for ax in fig.axes:
            xy = _data_points_px(ax)
            assert len(xy) > 0
            inside = ((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1)
                      & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1))
            assert not inside.any(), f"a legend covers {xy[inside]} in {ax.get_title()!r}"
            for artist in [*ax.patches, *ax.texts]:  # bars, not-completed notes
                assert not box.overlaps(artist.get_window_extent(renderer))
    (legend,) = legends  # one for the figure, none per panel
    assert legend in fig.legends
    kept = fig.get_tightbbox(renderer)  # inches: the area savefig(bbox_inches="tight") keeps
    box = legend.get_window_extent(renderer).transformed(fig.dpi_scale_trans.inverted())
    assert kept.x0 <= box.x0 and box.x1 <= kept.x1 and kept.y0 <= box.y0 and box.y1 <= kept.y1
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels))  # one entry per line across panels
    lines = {ln.get_label() for ax in fig.axes for ln in ax.lines}
    assert {short_label(label) for label in lines if not label.startswith("_")} <= set(labels)


@pytest.mark.parametrize("name", FIGURES)
def test_print_size_and_greyscale(drawn: dict[str, Figure], name: str) -> None:
    """At 100 % on a page: a panel per 3.5 in column, no text under 6.5 pt; without colour,
    measured lines differ by marker or dash and ideal/predicted lines by dash style."""
    fig = drawn[name]
    columns = len({round(ax.get_position().x0, 3) for ax in fig.axes})
    assert fig.get_figwidth() == pytest.approx(3.5 * columns)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    assert texts and min(t.get_fontsize() for t in texts) >= 6.5
    for ax in fig.axes:
        measured = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
        looks = [(ln.get_marker(), ln.get_linestyle()) for ln in measured]
        assert len(looks) == len(set(looks))
        for ln in ax.lines:
            for prefix, style in (("_ideal", "--"), ("_predicted", ":")):
                assert not ln.get_label().startswith(prefix) or ln.get_linestyle() == style


#: A headless browser to open the report in: Debian's chromium (``make test`` installs it).
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)
#: Appended to a copy of report.html: once the page has loaded, what the reader would see.
PROBE = """<pre id="probe"></pre><script>
window.addEventListener("load", () => {
  const imgs = [...document.images].map(i => ({complete: i.complete, natural: i.naturalWidth,
    shown: i.getBoundingClientRect().width, width: Number(i.getAttribute("width")),
    room: i.parentElement.clientWidth}));
  document.getElementById("probe").textContent = JSON.stringify({imgs,
    backticks: document.body.innerText.split("`").length - 1,
    code: document.querySelectorAll("code").length,
    headings: [...document.querySelectorAll("h2")].map(h => h.textContent)});
});
</script>"""


def _chromium(*args: str) -> subprocess.CompletedProcess:
    """Headless chromium with ``args`` (no sandbox: CI runs as root)."""
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--virtual-time-budget=15000", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: make test installs Debian's")
def test_report_in_a_headless_browser(report: Path, tmp_path: Path) -> None:
    """report.html in a real browser: every figure loads and is shown at twice its print
    size (readable text), or the page's width; the Markdown is rendered (no literal
    backticks), the page is not blank."""
    page = tmp_path / "probe.html"
    page.write_text((report / "report.html").read_text(encoding="utf-8")
                    .replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = _chromium("--dump-dom", page.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found and found.group(1), f"no probe result: {dom.stderr[-2000:]}"
    seen = json.loads(html.unescape(found.group(1)))
    assert len(seen["imgs"]) == len(FIGURES)
    for img in seen["imgs"]:
        assert img["complete"] and img["natural"] > 0  # decoded
        assert img["shown"] == pytest.approx(min(img["width"], img["room"]), abs=1)
        assert img["natural"] == pytest.approx(img["width"] * 300 / 96 / 2, rel=0.01)
    assert seen["backticks"] == 0 and seen["code"] > 0
    assert seen["headings"][:3] == ["Provenance", "Runs", "Weak scaling"]
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,2400", (report / "report.html").as_uri())
    pixels = plt_image.imread(shot)[..., :3]
    ink = (pixels < 0.9).any(axis=-1).mean()  # share of pixels that are not near-white
    assert 0.02 < ink < 0.9 and pixels.std() > 0.05, f"blank screenshot? ink={ink:.3f}"
