"""Tests of vitfsdp.analysis on real record directories written with RunRecords."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from tests.fake_records import LOCAL_BATCH, run_info, write_run
from vitfsdp.analysis import (
    collect_runs,
    contention_note,
    loss_curves,
    plot_loss,
    plot_memory,
    plot_weak_scaling,
    scaling_table,
)
from vitfsdp.analysis.__main__ import main as analysis_main
from vitfsdp.analysis.figures.panels import line_shifts
from vitfsdp.analysis.lines import configurations
from vitfsdp.analysis.tables import points_table
from vitfsdp.records import RUN_FILE, RunRecords, reason_line, write_json_atomic

NAN = float("nan")

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Global images/s per (strategy, nodes) of the fixture sweep; FULL_SHARD at 8 nodes runs OOM.
IPS = {
    ("FULL_SHARD", 1): 100.0, ("FULL_SHARD", 2): 190.0, ("FULL_SHARD", 4): 360.0,
    ("HYBRID_2GPU", 1): 120.0, ("HYBRID_2GPU", 2): 240.0, ("HYBRID_2GPU", 4): 420.0,
}  # fmt: skip


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
    # blank at the baseline node count: the ideal is scaled from it, not it from anything
    assert list(fs["scaling_efficiency"]) == pytest.approx([NAN, 0.95, 0.9], nan_ok=True)
    hy = table[table["strategy"] == "HYBRID_2GPU"]
    assert list(hy["ideal_ips"]) == pytest.approx([120.0, 240.0, 480.0])
    assert list(hy["scaling_efficiency"]) == pytest.approx([NAN, 1.0, 0.875], nan_ok=True)


def test_ideal_starts_at_smallest_completed_node_count(tmp_path: Path) -> None:
    write_run(tmp_path / "n1", run_info("DDP", 1), None, status="oom")
    write_run(tmp_path / "n2", run_info("DDP", 2), 50.0)
    write_run(tmp_path / "n8", run_info("DDP", 8), 150.0)
    table = scaling_table(collect_runs(tmp_path))
    assert list(table["ideal_ips"]) == pytest.approx([50.0, 200.0])
    assert list(table["scaling_efficiency"]) == pytest.approx([NAN, 0.75], nan_ok=True)


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


@pytest.mark.parametrize("change", ["ranks_per_node", "cluster"])
def test_nodes_of_another_size_or_cluster_are_another_line(tmp_path: Path, change: str) -> None:
    """One strategy at 1 and 2 nodes, run on nodes of 2 ranks and again on nodes of 4 (or
    under another cluster profile): two lines, each scaled from its own 1-node point, not one
    line whose points average the two as repeats."""
    for variant, ips in (("a", 100.0), ("b", 180.0)):
        for nodes in (1, 2):
            info = run_info("FULL_SHARD", nodes)
            if variant == "b" and change == "ranks_per_node":
                info["config"]["cluster"]["gpus_per_node"] = 4
                info["world"] |= {"size": 4 * nodes, "ranks_per_node": 4}
            elif variant == "b":
                info["config"]["cluster"]["name"] = "local_other"
            write_run(tmp_path / f"{variant}_{nodes}", info, ips * nodes * 0.8 ** (nodes - 1))
    df = collect_runs(tmp_path)
    points = points_table(df)
    assert len(points) == 4
    assert list(points["num_repeats"]) == [1, 1, 1, 1]
    assert sorted(points["ips"]) == pytest.approx([100.0, 160.0, 180.0, 288.0])
    assert list(points["scaling_efficiency"]) == pytest.approx([1.0, 0.8, 1.0, 0.8])
    word = {"ranks_per_node": "ranks_per_node=4", "cluster": "cluster=local_other"}[change]
    assert sorted(set(points["configuration"]))[1].endswith(word)


def test_a_point_that_never_started_splits_no_line(tmp_path: Path) -> None:
    """precision=auto and kernels.adamw=auto resolve when a run starts; a point cancelled
    while pending keeps ``auto`` and no device: it stays on its strategy's line (one legend
    entry), not a configuration of its own."""
    for nodes in (1, 2, 4):
        info = run_info("FULL_SHARD", nodes)
        info["config"] |= {"precision": "auto", "kernels": {"adamw": "auto"}}
        if nodes < 4:
            info["applied"] = {"precision": {"name": "fp32"}, "adamw": "for_loop"}
            write_run(tmp_path / f"n{nodes}", info, 100.0 * nodes)
        else:
            del info["device"], info["world"]
            records = RunRecords(tmp_path / f"n{nodes}")
            records.start(info)
            records.finish("cancelled", reason="scancel")
    df = collect_runs(tmp_path)
    assert sorted(df["precision"]) == ["auto", "fp32", "fp32"]
    assert set(configurations(df)) == {"FULL_SHARD"}
    fig = plot_weak_scaling(df)
    labels = {ln.get_label() for ln in fig.axes[0].lines if ln.get_linestyle() == "-"}
    assert labels == {"FULL_SHARD"}


def test_a_point_skipped_as_one_that_cannot_run_splits_no_line(tmp_path: Path) -> None:
    """A point that cannot run is recorded from its composed config, where FSDP's prefetch
    settings are still null (the run's config fills them in): HYBRID_16GPU at 1 node stays
    on the HYBRID_16GPU line of its 2- and 4-node runs."""
    for nodes in (1, 2, 4):
        info = run_info("FULL_SHARD", nodes)
        info["config"]["strategy"]["name"] = "HYBRID_16GPU"
        if nodes > 1:
            write_run(tmp_path / f"n{nodes}", info, 100.0 * nodes)
            continue
        info["config"]["strategy"] |= {"backward_prefetch": None, "limit_all_gathers": None}
        del info["device"], info["world"]
        records = RunRecords(tmp_path / "n1")
        records.start(info)
        records.finish("skipped_infeasible", reason="cannot run: shard groups of 16 ranks")
    df = collect_runs(tmp_path)
    assert set(configurations(df)) == {"HYBRID_16GPU"}


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
    assert ax.get_ylabel() == "throughput (images/s, global; log scale)"
    assert ax.get_xlabel() == "nodes (log scale)"
    notes = " ".join(t.get_text() for t in ax.texts)
    assert "not completed: FULL_SHARD nodes=8 (1 oom)" in notes
    # the oom point, as an x at the bottom, beside 8 as its line (each point ran once: hollow)
    (marks,) = [c for c in ax.collections if c.get_label().startswith("_not completed")]
    fs_shift = line_shifts(2, collect_runs(sweep)["nodes"])[0]
    assert list(marks.get_offsets()[:, 0]) == [8.0 * fs_shift]


def test_memory_figure_cpu_and_gpu(sweep: Path, tmp_path: Path) -> None:
    fig = plot_memory(collect_runs(sweep))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "peak resident memory per rank (GiB)"
    assert not [ln for ln in ax.lines if ln.get_linestyle() == ":"]  # no device memory on CPU
    assert "FULL_SHARD nodes=8 (1 oom)" in " ".join(t.get_text() for t in ax.texts)
    gpu = tmp_path / "gpu"
    write_run(gpu / "a", run_info("FULL_SHARD", 1, device="cuda"), 500.0, mem_gib=30.0)
    write_run(gpu / "b", run_info("FULL_SHARD", 2, device="cuda"), 900.0, mem_gib=20.0)
    ax = plot_memory(collect_runs(gpu)).axes[0]
    assert ax.get_ylabel() == "peak allocated per GPU (GiB)"
    (device_line,) = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert list(device_line.get_ydata()) == [80.0, 80.0]
    (solid,) = [ln for ln in ax.lines if ln.get_linestyle() == "-"]
    assert list(solid.get_ydata()) == pytest.approx([30.08, 20.08])


def test_a_models_memory_panels_share_one_scale(tmp_path: Path) -> None:
    """FULL_SHARD's panel and the other strategies' of one model read against each other:
    one y scale a row (DDP's 60 GiB sets it), not each panel its own."""
    for strategy, mem in (("FULL_SHARD", 10.0), ("DDP", 60.0)):
        for nodes in (1, 2):
            write_run(tmp_path / f"{strategy}_{nodes}", run_info(strategy, nodes),
                      100.0 * nodes, mem_gib=mem / nodes)
    fig = plot_memory(collect_runs(tmp_path))
    assert len(fig.axes) == 2
    assert fig.axes[0].get_ylim() == pytest.approx(fig.axes[1].get_ylim())
    assert fig.axes[0].get_ylim()[1] >= 60.0


def test_one_panel_per_model(sweep: Path, tmp_path: Path) -> None:
    write_run(tmp_path / "big", run_info("DDP", 1, model="vit_base"), 10.0)
    fig = plot_weak_scaling(collect_runs([sweep, tmp_path / "big"]))
    assert [ax.get_title().split()[0] for ax in fig.axes] == ["ViT-B/16", "vit_tiny"]


def test_panels_go_from_the_smallest_model(sweep: Path, tmp_path: Path) -> None:
    """Panels are ordered by the recorded parameter count, not by name (``vit_1b`` sorts
    before ``vit_base`` by name), in every figure."""
    for model, params in (("vit_1b", 914_000_000), ("vit_base", 87_000_000)):
        info = run_info("DDP", 1, model=model)
        info["model"]["num_params"] = params
        write_run(tmp_path / model, info, 10.0)
    df = collect_runs([sweep, tmp_path])
    for plot in (plot_weak_scaling, plot_memory, plot_loss):
        titles = [ax.get_title().split()[0].rstrip(":") for ax in plot(df).axes]
        assert list(dict.fromkeys(titles)) == ["vit_tiny", "ViT-B/16", "ViT-1B/14"], plot


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
    assert list(scaling["scaling_efficiency"]) == pytest.approx(
        [NAN, 0.95, 0.9, NAN, 1.0, 0.875], nan_ok=True)
    for name in ("weak_scaling.png", "memory.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(out / name) in result.stderr  # logged
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["model", "strategy", "nodes", "status", "ips", "efficiency",
                                "peak_mem_gib"]  # fmt: skip
    assert lines[3].split() == ["vit_tiny", "FULL_SHARD", "4", "completed", "360.0", "90%", "1.58"]
    assert lines[4].split() == ["vit_tiny", "FULL_SHARD", "8", "oom", "-", "-", "-"]


def test_a_large_study_prints_a_row_per_point(sweep: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Above MAX_PRINTED_RUNS runs the printed table has a row per point, counting its
    completed runs among all of them (a repeat of FULL_SHARD at 1 node ran out of memory),
    and a last line counting runs and points; a point none of whose runs completed is
    counted there, not given a row."""
    import vitfsdp.analysis.__main__ as cli

    repeat = run_info("FULL_SHARD", 1)
    repeat["config"]["repeat"] = 1
    write_run(sweep / "repeat", repeat, None, status="oom")
    monkeypatch.setattr(cli, "MAX_PRINTED_RUNS", 4)
    assert cli.main([str(sweep), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["model", "configuration", "nodes", "runs", "ips", "efficiency",
                                "peak_mem_gib"]  # fmt: skip
    assert lines[1].split() == ["vit_tiny", "FULL_SHARD", "1", "1/2", "100.0", "100%", "1.58"]
    assert lines[3].split() == ["vit_tiny", "FULL_SHARD", "4", "1/1", "360.0", "90%", "1.58"]
    # header, 6 completed points, a blank line, the count, then the noise check: at 1 node
    # of 2 ranks HYBRID_2GPU shards over the world as FULL_SHARD does, at 120 against 100
    # (1.2x); every point ran once; HYBRID_2GPU's wins at 1 and 4 nodes (1.2x, 1.17x) are
    # within that, at 2 nodes (1.26x) beyond it but on one run
    assert len(lines) == 1 + 6 + 2 + 4
    assert lines[-5].startswith("8 runs of 7 points: 6 points completed at least once, "
                                "2 runs did not complete (failures.csv)")
    assert lines[-4].startswith("noise: the same computation under two names differs")
    assert lines[-3].startswith("one run: 6 of 6 points ran once")
    assert lines[-2] == ("a difference within the noise check's between the two fastest: "
                         "vit_tiny at 1 node(s), vit_tiny at 4 node(s) (best.csv)")
    assert lines[-1] == ("a difference resting on one run between the two fastest: vit_tiny "
                         "at 2 node(s) (best.csv)")


def test_the_printed_table_shows_missing_values_one_way(sweep: Path) -> None:
    """A setting DDP does not have (``backward_prefetch``, ``limit_all_gathers``) and the
    figures of a run that ran out of memory print as ``-``, never ``NaN`` or ``None``."""
    from vitfsdp.analysis import format_table

    info = run_info("DDP", 1)
    info["config"]["strategy"] |= {"backward_prefetch": None, "limit_all_gathers": None}
    write_run(sweep / "ddp", info, 50.0)
    lines = format_table(collect_runs(sweep)).splitlines()
    assert "backward_prefetch" in lines[0] and len(lines) == 9
    ddp = next(line.split() for line in lines if " DDP " in line)
    assert ddp[2:4] == ["-", "-"], ddp
    assert not any(word in line for line in lines for word in ("NaN", "None", "<NA>"))


def heading(fig) -> str:
    """A figure's title and the shared settings over its legend, as one line of text."""
    legend = fig.legends[0].get_title().get_text() if fig.legends else ""
    return f"{fig.get_suptitle()} {legend}".replace("\n", " ")


def test_the_figure_names_the_local_batch_per_rank_on_cpu_and_per_gpu_on_gpus(
        sweep: Path, tmp_path: Path) -> None:
    title = heading(plot_memory(collect_runs(sweep)))
    assert f"local batch {LOCAL_BATCH}/rank" in title and "/GPU" not in title
    write_run(tmp_path / "gpu", run_info("DDP", 1, device="cuda"), 10.0)
    assert f"local batch {LOCAL_BATCH}/GPU" in heading(plot_memory(collect_runs(tmp_path)))


def test_a_study_with_no_completed_run_prints_its_count(tmp_path: Path) -> None:
    from vitfsdp.analysis import points_table
    from vitfsdp.analysis.tables import format_points

    write_run(tmp_path / "a", run_info("DDP", 1), None, status="oom")
    write_run(tmp_path / "b", run_info("DDP", 2), None, status="failed")
    df = collect_runs(tmp_path)
    text = format_points(df, points_table(df))
    assert text.splitlines()[-1].startswith(
        "2 runs of 2 points: 0 points completed at least once, 2 runs did not complete")


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


def test_cli_jobs_must_be_positive(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        analysis_main([str(sweep), "--jobs", "0"])
    assert exit_info.value.code == 2
    assert "--jobs=0 must be at least 1" in capsys.readouterr().err
    assert not (sweep / "analysis").exists()


def test_precision_and_compile_show_what_auto_resolved_to(tmp_path):
    """precision=auto and kernels.compile=null (the defaults) are shown as what the run
    applied (run.json ``applied``), so a bf16 GPU run is not labelled 'auto'."""
    from vitfsdp.analysis.rows import run_row

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


@pytest.mark.parametrize("reason, expected", [
    ("out of memory on rank 0 (ranks 0) at step 5: OutOfMemoryError: CUDA out of memory\n"
     "Traceback (most recent call last):\n  File x", "out of memory on rank 0 (ranks 0) at step "
     "5: OutOfMemoryError: CUDA out of memory"),
    ("Traceback (most recent call last):\n  File \"a.py\", line 1\nRuntimeError: boom",
     "RuntimeError: boom"),
    ("exit code 1 without a summary; log tail:\nMemoryError: \nMemoryError: ",
     "exit code 1 without a summary; log tail: MemoryError:"),
    ("exit code 1 without a summary; log tail:\nRuntimeError: operator torchvision::nms does "
     "not exist\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
     "exit code 1 without a summary; log tail: RuntimeError: operator torchvision::nms does "
     "not exist"),
    ("x" * 250 + "y" * 250, "x" * 195 + " ... " + "y" * 100),
    ("Slurm job 59_0 ended FAILED before the first step without a summary: RuntimeError: "
     "[enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
     "ifa != nullptr. Unable to find address for: ib0", "Slurm job 59_0 ended FAILED before "
     "the first step without a summary: RuntimeError: [enforce fail at .../device.cc:84] ifa "
     "!= nullptr. Unable to find address for: ib0"),
    (None, None),
])  # fmt: skip
def test_failure_reason_on_one_line(reason: str | None, expected: str | None) -> None:
    assert reason_line(reason) == expected


def test_failed_run_links_its_log_and_what_it_reached(tmp_path: Path) -> None:
    """An oom after two windows: one-line reason, its task log, the ips and memory reached."""
    run_dir = tmp_path / "oom"
    records = RunRecords(run_dir)
    records.start(run_info("FULL_SHARD", 2))
    for step, ips in ((2, 10.0), (4, 50.0), (6, 70.0)):
        records.window({"step_end": step, "warmup": step == 2, "ips": ips, "peak_rss_gib": 3.0})
    records.finish("oom", reason="out of memory on rank 3 (ranks 3) at step 7: OOM\nTraceback")
    (run_dir / "logs").mkdir()
    for task in (0, 3):
        (run_dir / "logs" / f"task{task}.log").write_text("...")
    row = collect_runs(tmp_path).iloc[0]
    assert row["reason"] == "out of memory on rank 3 (ranks 3) at step 7: OOM"
    assert row["log"] == str(run_dir / "logs" / "task3.log")  # the rank the reason names
    assert row["ips_reached"] == 60.0 and row["peak_mem_reached_gib"] == 3.0


def test_a_run_that_ended_in_its_warm_up_reached_no_throughput(tmp_path: Path) -> None:
    """A timeout after its warm-up window alone (compilation: 131 images/s against 430 of
    the completed points, in a DGX user's synthetic study): no images/s reached, so the
    figure puts its x in the bottom row, not at the warm-up's speed; its memory counts."""
    records = RunRecords(tmp_path / "timeout")
    records.start(run_info("FULL_SHARD", 1))
    records.window({"step_end": 5, "warmup": True, "ips": 131.0, "peak_rss_gib": 2.0})
    records.finish("timeout", reason="time limit")
    row = collect_runs(tmp_path).iloc[0]
    assert pd.isna(row["ips_reached"]) and row["peak_mem_reached_gib"] == 2.0


def test_cpu_ranks_sharing_cores_are_stated(tmp_path: Path) -> None:
    """local profile, 2-8 CPU ranks on a 2-core host: runs.csv and every figure say so, and
    name the CPU."""
    for nodes in (1, 2, 4):
        info = run_info("FULL_SHARD", nodes)
        info["device"] |= {"name": "AMD EPYC 7763", "host_cpus": 2}
        write_run(tmp_path / f"n{nodes}", info, 100.0 * nodes)
    df = collect_runs(tmp_path)
    assert list(df["shared_cores"].fillna("-")) == ["-", "4 ranks on 2 cores", "8 ranks on 2 cores"]
    assert set(df["cluster"]) == {"local"}
    note = contention_note(df)
    assert note == "4-8 ranks on 2 cores (cluster=local): not a hardware measurement"
    for plot in (plot_weak_scaling, plot_memory, plot_loss):
        fig = plot(df)
        assert len(fig.get_suptitle().splitlines()) <= 2, fig.get_suptitle()
        assert note in heading(fig) and "AMD EPYC 7763" in heading(fig), heading(fig)


def test_strategy_keeps_its_colour_and_marker_across_sweeps(sweep: Path, tmp_path: Path) -> None:
    """FULL_SHARD alone in one sweep looks as FULL_SHARD beside HYBRID_2GPU in another."""
    write_run(tmp_path / "alone", run_info("FULL_SHARD", 1), 100.0)
    looks = []
    for runs in (collect_runs(sweep), collect_runs(tmp_path / "alone")):
        ax = plot_weak_scaling(runs).axes[0]
        (line,) = [ln for ln in ax.lines if ln.get_label() == "FULL_SHARD"]
        looks.append((line.get_color(), line.get_marker()))
    assert looks[0] == looks[1]


def test_empty_tables_written_with_their_header(sweep: Path, tmp_path: Path) -> None:
    (sweep / "nested").rename(tmp_path / "oom_elsewhere")  # leave only completed runs
    assert analysis_main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    for name in ("failures", "framework_ratio", "prefetch"):
        table = pd.read_csv(tmp_path / "out" / f"{name}.csv")
        assert table.empty and len(table.columns) > 3, name
    assert "log" in pd.read_csv(tmp_path / "out" / "failures.csv").columns
    loss = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert (tmp_path / "out" / "loss.png").exists() and len(loss) == 6


def test_loss_curves_one_line_per_point(sweep: Path) -> None:
    df = collect_runs(sweep)
    curves = loss_curves(df)
    assert len(curves) == 6 * 4 + 1 and set(curves["step"]) == {2, 4, 6, 8}  # oom: warm-up
    ax = plot_loss(df).axes[0]
    assert len(ax.lines) == 7  # 2 strategies x 3 node counts, and the oom's one window


def test_synthetic_runs_and_one_prediction_per_point(tmp_path: Path, monkeypatch) -> None:
    """The benchmark's runs read back with every status; 3 repeats of 4 points cost 4
    predictions (the cache ignores ``repeat``)."""
    import vitfsdp.plan
    from vitfsdp.analysis import rows, synthetic

    points = synthetic.point_overrides()[:4]
    monkeypatch.setattr(synthetic, "point_overrides", lambda: points)
    monkeypatch.setattr(synthetic, "FAILURE_RATES", {"oom": 0.2, "failed": 0.1})
    parts = synthetic.write_synthetic_sweep(tmp_path, (4, 12), seed=1)
    calls = []
    predict = vitfsdp.plan.predict
    monkeypatch.setattr(vitfsdp.plan, "predict",
                        lambda *a, **k: calls.append(1) or predict(*a, **k))
    monkeypatch.setattr(rows, "_PREDICTIONS", {})
    df = collect_runs(parts)
    assert len(df) == 12 and sorted(df["repeat"].unique()) == [0, 1, 2]
    assert {"completed", "oom", "failed"} <= set(df["status"])
    assert len(calls) == 4 and df["pred_peak_mem_gib"].notna().all()
    # the prediction without OmegaConf is the plan's own predict_run
    run = json.loads((Path(df["run_dir"].iloc[-1]) / RUN_FILE).read_text())
    expected = vitfsdp.plan.predict_run(run)
    assert {k: df[k].iloc[-1] for k in expected} == pytest.approx(expected)
    assert df.loc[df["status"] == "failed", "reason"].str.contains("\n").sum() == 0


def test_efficiency_above_ideal_is_flagged_as_noise(tmp_path: Path) -> None:
    """A point faster than linear from its baseline: starred in the printed table with the
    footnote, and a marked point of weak_scaling.png (its caption kind)."""
    from vitfsdp.analysis.lines import ABOVE_IDEAL_NOTE, format_table

    for nodes, ips in ((1, 100.0), (2, 226.0), (4, 380.0)):  # 113 %, then 95 %
        write_run(tmp_path / "a" / f"n{nodes}", run_info("FULL_SHARD", nodes), ips)
    df = collect_runs(tmp_path / "a")
    text = format_table(df)
    assert "113%*" in text and "95%" in text and "95%*" not in text
    assert text.endswith(ABOVE_IDEAL_NOTE)
    assert "above_ideal" in plot_weak_scaling(df).drawn_kinds
    from vitfsdp.analysis.report import display  # the report's tables star it too

    assert "113%*" in set(display(scaling_table(df), ["scaling_efficiency"])["scaling efficiency"])
    for nodes, ips in ((1, 100.0), (2, 190.0)):  # 95 %: nothing flagged
        write_run(tmp_path / "b" / f"n{nodes}", run_info("FULL_SHARD", nodes), ips)
    assert "*" not in format_table(collect_runs(tmp_path / "b"))
    assert "repeat" not in format_table(collect_runs(tmp_path / "b")).splitlines()[0]
    for repeat, ips in ((1, 104.0), (2, 98.0)):  # repeats of n1: a column tells them apart
        info = run_info("FULL_SHARD", 1)
        info["config"]["repeat"] = repeat
        write_run(tmp_path / "b" / f"n1_r{repeat}", info, ips)
    header, *rows = format_table(collect_runs(tmp_path / "b")).splitlines()
    assert header.split()[:5] == ["model", "strategy", "nodes", "repeat", "status"], header
    assert sorted(r.split()[3] for r in rows if r.split()[2] == "1") == ["0", "1", "2"]


def test_n_labels_do_not_overlap_and_merge_where_lines_meet() -> None:
    """Line ends close together at one step and one just left of it: no two ``n=`` labels
    overlap once drawn, a moved one has a leader to its end, and ends at one place share
    one label (two node counts listed, eight as their range and count)."""
    from vitfsdp.analysis.figures.loss import _label_ends
    from vitfsdp.analysis.figures.panels import _new_figure

    fig, (ax,) = _new_figure(1)
    ax.plot([0, 100], [2.0, 2.4])
    ends = {(100.0, 2.30, "n=1"), (100.0, 2.3005, "n=8"), (100.0, 2.315, "n=2"),
            (100.0, 2.33, "n=4"), (50.0, 2.30, "n=1"), (97.0, 2.31, "n=16")}
    ends |= {(100.0, 2.1, f"n={2**k}") for k in range(8)}
    _label_ends(ax, ends)
    texts = {t.get_text(): t for t in ax.texts}
    assert len(texts) == len(ax.texts)
    assert set(texts) == {"n=1,8", "n=2", "n=4", "n=1", "n=16", "n=1-128 (8)"}
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    # the text's own box (an annotation's extent includes its leader)
    boxes = {name: Text.get_window_extent(t, renderer) for name, t in texts.items()}
    for a, b in itertools.combinations(boxes, 2):
        both = Bbox.intersection(boxes[a], boxes[b])
        assert both is None or both.width * both.height < 1.0, (a, b)  # px^2: touching
    assert texts["n=1,8"].arrow_patch is None  # at its end
    assert texts["n=2"].arrow_patch is not None or texts["n=16"].arrow_patch is not None
    for box in boxes.values():  # inside the axes' height
        assert ax.bbox.y0 <= box.y0 and box.y1 <= ax.bbox.y1


def test_an_attempt_a_rerun_superseded_is_kept_apart_not_counted(tmp_path):
    """A point that failed, then completed when the sweep ran again (its first attempt moved
    to attempts/0/): the tables and figures count the completed run alone, one run of the
    point, no failure; attempts.csv keeps the failed attempt, naming its point."""
    point = tmp_path / "sweep" / "0_strategy=DDP"
    write_run(point / "attempts" / "0", run_info("DDP", 1), None, status="failed")
    write_run(point, run_info("DDP", 1), 100.0)
    assert len(collect_runs(tmp_path / "sweep")) == 1
    every = collect_runs(tmp_path / "sweep", earlier_attempts=True)
    assert every["attempt_of"].tolist().count(str(point)) == 1
    out = tmp_path / "out"
    assert analysis_main([str(tmp_path / "sweep"), "--out", str(out)]) == 0
    runs, attempts = pd.read_csv(out / "runs.csv"), pd.read_csv(out / "attempts.csv")
    assert runs["status"].tolist() == ["completed"] and runs["attempt_of"].isna().all()
    assert attempts["status"].tolist() == ["failed"]
    assert attempts["attempt_of"].tolist() == [str(point)]
    assert pd.read_csv(out / "failures.csv").empty
    assert pd.read_csv(out / "points.csv")["num_repeats"].tolist() == [1]


def test_a_point_that_ended_before_its_training_is_still_its_own_point(tmp_path):
    """A point cancelled before its training wrote run.json (scancel of a queued job, a
    Ctrl-C at its start) was recorded with no config: the analysis drew it in a panel of
    model "unknown". The sweep's job.json carries the point's config, which the record
    then takes."""
    from tests.integration.test_slurm_scripts import compose_cfg
    from vitfsdp.launch.local import job_record
    from vitfsdp.records import mark_failed
    from vitfsdp.sweep.point import Point

    cfg = compose_cfg("model=vit_base", "strategy=FULL_SHARD", "nodes=2")
    run_dir = tmp_path / "sweep" / "0_nodes=2"
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "job.json", job_record(Point(0, ["nodes=2"], cfg, run_dir)))
    mark_failed(run_dir, "cancelled", "scancel", interrupted=True)
    row = collect_runs(tmp_path / "sweep").iloc[0]
    assert (row["model"], row["strategy"], row["nodes"], row["status"]) == (
        "vit_base", "FULL_SHARD", 2, "cancelled")


def test_a_run_json_without_config_takes_its_points_whole_config_from_job_json(tmp_path):
    """A run.json with no config (written before mark_failed copied job.json's) was read
    back from job.json's overrides: model, strategy and nodes, every other column null, so
    where the sweep varied one (``train.steps``, a prefetch) the run drew a line of its own
    and had no ``point_id`` to count at. job.json holds the point's resolved config, which
    the row now takes whole."""
    from tests.integration.test_slurm_scripts import compose_cfg
    from vitfsdp.launch.local import job_record
    from vitfsdp.sweep.point import Point

    cfg = compose_cfg("model=vit_base", "strategy=FULL_SHARD", "nodes=2", "train.steps=8")
    run_dir = tmp_path / "sweep" / "0_nodes=2"
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "job.json",
                      job_record(Point(0, ["nodes=2", "train.steps=8"], cfg, run_dir)))
    write_json_atomic(run_dir / RUN_FILE, {"run_id": run_dir.name, "status": "failed"})
    row = collect_runs(tmp_path / "sweep").iloc[0]
    assert (row["model"], row["strategy"], row["nodes"], row["train.steps"]) == (
        "vit_base", "FULL_SHARD", 2, 8)
    assert isinstance(row["point_id"], str) and row["point_id"]
    assert row["local_batch_size"] == cfg.train.local_batch_size


def test_points_that_never_started_or_have_no_end_record_are_named(tmp_path):
    """The analysis reads records, so a Ctrl-C'd sweep's points that never started, and a
    Slurm point cancelled before it wrote anything, had no row and no word: the figures read
    as the whole sweep. Each kind gets a line (printed and in the report); the points of
    the last command are its config hashes, which the sweep recorded."""
    from vitfsdp.records import append_jsonl

    sweep = tmp_path / "sweep"
    done = sweep / "0_nodes=1,strategy=DDP"
    write_run(done, run_info("DDP", 1), 100.0)
    write_json_atomic(done / "job.json", {"config_hash": "a"})
    queued = sweep / "1_nodes=2,strategy=DDP"
    queued.mkdir()
    write_json_atomic(queued / "job.json", {"config_hash": "b"})
    append_jsonl(sweep / "commands.jsonl", {"task": [], "config_hashes": ["a"]})
    append_jsonl(sweep / "commands.jsonl", {"task": [], "config_hashes": ["a", "b", "c", "d"]})
    result = run_cli(str(sweep), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (f"1 point(s) in {sweep} have no end record (queued, running, or ended without "
            f"one; e.g. 1_nodes=2,strategy=DDP): they are in no table or figure until "
            f"python -m vitfsdp.sweep --status {sweep} records how they ended") in result.stdout
    assert (f"2 of the 4 points of the last sweep command in {sweep} never started"
            ) in result.stdout
