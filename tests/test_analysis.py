"""Tests of vitfsdp.analysis on real record directories written with RunRecords."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from vitfsdp.analysis import collect_runs, plot_memory, plot_weak_scaling, scaling_table
from vitfsdp.records import RUN_FILE, RunRecords, write_json_atomic

REPO_ROOT = Path(__file__).resolve().parents[1]
GPUS_PER_NODE = 2
LOCAL_BATCH = 8
#: Global images/s per (strategy, nodes) of the fixture sweep; FULL_SHARD at 8 nodes runs OOM.
IPS = {
    ("FULL_SHARD", 1): 100.0, ("FULL_SHARD", 2): 190.0, ("FULL_SHARD", 4): 360.0,
    ("HYBRID_2GPU", 1): 120.0, ("HYBRID_2GPU", 2): 240.0, ("HYBRID_2GPU", 4): 420.0,
}  # fmt: skip
SHARDING = {"FULL_SHARD": "FULL_SHARD", "HYBRID_2GPU": "HYBRID_SHARD", "DDP": "DDP"}


def run_info(strategy: str, nodes: int, model: str = "vit_tiny", device: str = "cpu",
             prefetch: str = "BACKWARD_PRE") -> dict:  # fmt: skip
    """A run.json payload in the schema train.py writes."""
    world_size = nodes * GPUS_PER_NODE
    memory_gib = 80.0 if device == "cuda" else None
    return {
        "run_id": f"{model}-{strategy}-{prefetch}-n{nodes}",
        "config": {
            "model": {"name": model},
            "strategy": {"name": strategy, "sharding_strategy": SHARDING[strategy],
                         "shard_group_size": 2 if strategy == "HYBRID_2GPU" else world_size,
                         "backward_prefetch": prefetch, "limit_all_gathers": True},
            "data": {"name": "digits"},
            "train": {"local_batch_size": LOCAL_BATCH, "steps": 8, "warmup_steps": 2},
            "cluster": {"name": "local", "gpus_per_node": GPUS_PER_NODE},
            "engine": "fsdp1", "framework": "torch", "nodes": nodes, "precision": "fp32",
        },
        "world": {"size": world_size, "nodes": nodes, "ranks_per_node": GPUS_PER_NODE,
                  "backend": "gloo" if device == "cpu" else "nccl"},
        "device": {"type": device, "name": "cpu" if device == "cpu" else "NVIDIA H100",
                   "memory_gib": memory_gib},
        "model": {"num_params": 5_500_000, "forward_flops_per_image": 1.0e9},
    }  # fmt: skip


def write_run(run_dir: Path, info: dict, ips: float | None, status: str = "completed",
              mem_gib: float = 1.5) -> None:  # fmt: skip
    """Start, three measured windows around ``ips`` after one warm-up window, finish."""
    records = RunRecords(run_dir)
    records.start(info)
    mem_key = "peak_rss_gib" if info["device"]["type"] == "cpu" else "peak_mem_allocated_gib"
    records.window({"step_end": 2, "warmup": True, "ips": 1.0, mem_key: 99.0, "loss": 3.0})
    if ips is None:
        records.finish(status, reason="CUDA out of memory")
        return
    for step, delta in ((4, -1.0), (6, 0.0), (8, 1.0)):
        records.window({"step_end": step, "warmup": False, "ips": ips + delta,
                        "ips_per_gpu": (ips + delta) / info["world"]["size"],
                        mem_key: mem_gib + step / 100, "loss": 2.0})  # fmt: skip
    records.finish(status)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Two strategies at 1, 2, 4 nodes plus FULL_SHARD at 8 nodes out of memory."""
    sweep_dir = tmp_path / "sweep"
    for (strategy, nodes), ips in IPS.items():
        write_run(sweep_dir / f"{strategy}_n{nodes}", run_info(strategy, nodes), ips)
    oom_dir = sweep_dir / "nested" / "FULL_SHARD_n8"  # runs are found at any depth
    write_run(oom_dir, run_info("FULL_SHARD", 8), None, status="oom")
    return sweep_dir


def test_collect_keeps_every_run(sweep: Path) -> None:
    df = collect_runs(sweep)
    assert len(df) == 7
    assert list(zip(df["strategy"], df["nodes"], strict=True)) == [
        ("FULL_SHARD", 1), ("FULL_SHARD", 2), ("FULL_SHARD", 4), ("FULL_SHARD", 8),
        ("HYBRID_2GPU", 1), ("HYBRID_2GPU", 2), ("HYBRID_2GPU", 4),
    ]  # fmt: skip
    oom = df[df["status"] == "oom"].iloc[0]
    assert oom["nodes"] == 8 and oom["reason"] == "CUDA out of memory"
    assert pd.isna(oom["ips"]) and pd.isna(oom["peak_mem_gib"])
    done = df[df["status"] == "completed"]
    assert list(done["ips"]) == [100.0, 190.0, 360.0, 120.0, 240.0, 420.0]  # warm-up excluded
    assert list(done["peak_mem_kind"]) == ["rss"] * 6
    assert done["peak_mem_gib"].iloc[0] == pytest.approx(1.58)  # max over measured windows
    assert list(df["world_size"]) == [2, 4, 8, 16, 2, 4, 8]
    assert list(df["global_batch_size"]) == [16, 32, 64, 128, 16, 32, 64]
    assert set(df["sharding_strategy"]) == {"FULL_SHARD", "HYBRID_SHARD"}


def test_scaling_table_ideal_and_efficiency(sweep: Path) -> None:
    table = scaling_table(collect_runs(sweep))
    assert list(table.columns[:2]) == ["model", "strategy"]  # nothing else varies
    assert len(table) == 6  # the oom run is not a scaling point
    fs = table[table["strategy"] == "FULL_SHARD"]
    assert list(fs["nodes"]) == [1, 2, 4]
    assert list(fs["ideal_ips"]) == pytest.approx([100.0, 200.0, 400.0])
    assert list(fs["scaling_efficiency"]) == pytest.approx([1.0, 0.95, 0.9])
    hy = table[table["strategy"] == "HYBRID_2GPU"]
    assert list(hy["ideal_ips"]) == pytest.approx([120.0, 240.0, 480.0])
    assert list(hy["scaling_efficiency"]) == pytest.approx([1.0, 1.0, 0.875])


def test_ideal_starts_at_smallest_completed_node_count(tmp_path: Path) -> None:
    write_run(tmp_path / "n1", run_info("DDP", 1), None, status="oom")
    write_run(tmp_path / "n2", run_info("DDP", 2), 50.0)
    write_run(tmp_path / "n8", run_info("DDP", 8), 150.0)
    table = scaling_table(collect_runs(tmp_path))
    assert list(table["ideal_ips"]) == pytest.approx([50.0, 200.0])
    assert list(table["scaling_efficiency"]) == pytest.approx([1.0, 0.75])


def test_run_without_summary_is_kept(tmp_path: Path) -> None:
    RunRecords(tmp_path / "running").start(run_info("DDP", 1))
    (tmp_path / "killed").mkdir()
    write_json_atomic(tmp_path / "killed" / RUN_FILE, run_info("DDP", 2) | {"status": "??"})
    df = collect_runs(tmp_path)
    assert list(df["status"]) == ["running", "failed"]
    assert list(df["reason"]) == ["no summary.json (still running, or killed before writing "
                                  "one)", "no summary.json"]
    assert df["ips"].isna().all()


def test_varying_config_splits_lines(tmp_path: Path) -> None:
    for prefetch, ips in (("BACKWARD_PRE", 100.0), ("BACKWARD_POST", 80.0)):
        for nodes in (1, 2):
            info = run_info("FULL_SHARD", nodes, prefetch=prefetch)
            write_run(tmp_path / f"{prefetch}_{nodes}", info, ips * nodes * 0.9 ** (nodes - 1))
    df = collect_runs(tmp_path)
    table = scaling_table(df)
    assert "backward_prefetch" in table.columns
    post = table[table["backward_prefetch"] == "BACKWARD_POST"]
    assert list(post["ideal_ips"]) == pytest.approx([80.0, 160.0])
    fig = plot_weak_scaling(df)
    labels = sorted(ln.get_label() for ln in fig.axes[0].lines if ln.get_linestyle() == "-")
    assert labels == ["FULL_SHARD BACKWARD_POST", "FULL_SHARD BACKWARD_PRE"]


def test_weak_scaling_figure(sweep: Path) -> None:
    fig = plot_weak_scaling(collect_runs(sweep))
    ax = fig.axes[0]
    solid = {ln.get_label(): ln for ln in ax.lines if ln.get_linestyle() == "-"}
    dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert sorted(solid) == ["FULL_SHARD", "HYBRID_2GPU"]
    assert len(dashed) == 2 and len(ax.lines) == 4
    fs_ideal = next(ln for ln in dashed if ln.get_color() == solid["FULL_SHARD"].get_color())
    assert list(fs_ideal.get_xdata()) == [1, 2, 4, 8]  # drawn up to the oom point too
    assert list(fs_ideal.get_ydata()) == pytest.approx([100.0, 200.0, 400.0, 800.0])
    assert list(solid["FULL_SHARD"].get_ydata()) == [100.0, 190.0, 360.0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    assert "images/s" in ax.get_ylabel() and ax.get_xlabel() == "nodes"
    notes = " ".join(t.get_text() for t in ax.texts)
    assert "not completed: FULL_SHARD nodes=8 (oom)" in notes
    (marks,) = ax.collections  # the oom point, as an x at the bottom
    assert list(marks.get_offsets()[:, 0]) == [8.0]


def test_memory_figure_cpu_and_gpu(sweep: Path, tmp_path: Path) -> None:
    fig = plot_memory(collect_runs(sweep))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "peak resident memory per rank (GiB)"
    assert not [ln for ln in ax.lines if ln.get_linestyle() == ":"]  # no device memory on CPU
    assert "FULL_SHARD nodes=8 (oom)" in " ".join(t.get_text() for t in ax.texts)
    gpu = tmp_path / "gpu"
    write_run(gpu / "a", run_info("FULL_SHARD", 1, device="cuda"), 500.0, mem_gib=30.0)
    write_run(gpu / "b", run_info("FULL_SHARD", 2, device="cuda"), 900.0, mem_gib=20.0)
    ax = plot_memory(collect_runs(gpu)).axes[0]
    assert ax.get_ylabel() == "peak allocated per GPU (GiB)"
    (device_line,) = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert list(device_line.get_ydata()) == [80.0, 80.0]
    (solid,) = [ln for ln in ax.lines if ln.get_linestyle() == "-"]
    assert list(solid.get_ydata()) == pytest.approx([30.08, 20.08])


def test_one_panel_per_model(sweep: Path, tmp_path: Path) -> None:
    write_run(tmp_path / "big", run_info("DDP", 1, model="vit_base"), 10.0)
    fig = plot_weak_scaling(collect_runs([sweep, tmp_path / "big"]))
    assert [ax.get_title().split()[0] for ax in fig.axes] == ["vit_base", "vit_tiny"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get(
        "PYTHONPATH", "")])}  # fmt: skip
    cmd = [sys.executable, "-m", "vitfsdp.analysis", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_cli_writes_tables_and_figures(sweep: Path) -> None:
    result = run_cli(str(sweep))
    assert result.returncode == 0, result.stderr
    out = sweep / "analysis"
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 7 and (runs["status"] == "oom").sum() == 1
    scaling = pd.read_csv(out / "scaling.csv")
    assert list(scaling["scaling_efficiency"]) == pytest.approx([1.0, 0.95, 0.9, 1.0, 1.0, 0.875])
    for name in ("weak_scaling.png", "memory.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(out / name) in result.stderr  # logged
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["model", "strategy", "nodes", "status", "ips", "efficiency",
                                "peak_mem_gib"]  # fmt: skip
    assert lines[3].split() == ["vit_tiny", "FULL_SHARD", "4", "completed", "360.0", "90%", "1.58"]
    assert lines[4].split() == ["vit_tiny", "FULL_SHARD", "8", "oom", "-", "-", "-"]


def test_cli_several_dirs_need_out(sweep: Path, tmp_path: Path) -> None:
    assert run_cli(str(sweep), str(sweep)).returncode == 2
    result = run_cli(str(sweep), "--out", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "report" / "weak_scaling.png").exists()


@pytest.mark.parametrize("make_dir, message", [(False, "does not exist"), (True, "no run.json")])
def test_cli_bad_dir(tmp_path: Path, make_dir: bool, message: str) -> None:
    bad = tmp_path / "nothing"
    if make_dir:
        bad.mkdir()
    result = run_cli(str(bad))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not (bad / "analysis").exists()
    with pytest.raises(ValueError, match=message):
        collect_runs(bad)


def test_precision_and_compile_show_what_auto_resolved_to(tmp_path):
    """precision=auto and kernels.compile=null (the defaults) are shown as what the run
    applied (run.json ``applied``), so a bf16 GPU run is not labelled 'auto'."""
    from vitfsdp.analysis.collect import run_row

    info = run_info("FULL_SHARD", 1)
    info["config"] |= {"precision": "auto", "kernels": {"compile": None}}
    auto = tmp_path / "auto"
    records = RunRecords(auto)
    records.start(info | {"applied": {"precision": {"name": "bf16"}, "compiled_blocks": 12}})
    records.finish("failed", "stopped")
    row = run_row(auto)
    assert row["precision"] == "bf16" and row["kernels.compile"] is True

    info["config"] |= {"precision": "fp16", "kernels": {"compile": False}}
    plain = tmp_path / "plain"
    RunRecords(plain).start(info)  # older records: no `applied`
    row = run_row(plain)
    assert row["precision"] == "fp16" and row["kernels.compile"] is False
