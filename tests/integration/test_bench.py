"""``python -m vitfsdp.bench``: the CPU tiny path runs all three measurements in-process, each
repeated with the paths taking turns, and records them; the table's median, range and spread
over the repeats and the spread warning; timm's model is our architecture; the target checks;
subcommand dispatch."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import statistics
import sys
import types

import pandas as pd
import pytest
import timm
import torch

from tests.conftest import read
from vitfsdp import models
from vitfsdp.bench import __main__ as bench_cli
from vitfsdp.bench import throughput

PATHS = ("fsdp", "unwrapped", "timm")
REPEATS = 2


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One CPU tiny benchmark in this process, each path measured twice: (out folder, exit
    status, printed text)."""
    out = tmp_path_factory.mktemp("bench") / "out"
    argv = ["--device", "cpu", "--batch", "4", "--steps", "4", "--warmup", "2",
            "--log-every", "2", "--profile-steps", "1", "--repeats", str(REPEATS),
            "--out", str(out), "train.lr=0.002"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = throughput.main(argv)
    return out, code, printed.getvalue()


def test_cpu_tiny_bench_measures_every_path_with_the_same_settings(bench):
    out, code, _ = bench
    assert code == 0
    table = pd.read_csv(out / "bench.csv")
    assert sorted(zip(table["model"], table["path"], strict=True)) == sorted(
        ("vit_tiny", p) for p in PATHS)
    assert (table["status"] == "completed").all() and (table["train_samples_per_sec"] > 0).all()
    # timm's benchmark.py column names, so its CSV joins ours on model
    assert (table["train_batch_size"] == 4).all() and (table["train_img_size"] == 16).all()
    assert table["train_step_time"].tolist() == pytest.approx(
        (table["step_time_s"] * 1000).tolist())
    assert table["param_count"].iloc[0] == round(table["num_params"].iloc[0] / 1e6, 2)
    assert table["mfu"].isna().all()  # no peak FLOP/s for a CPU
    for path, repeat in [(p, r) for p in PATHS for r in range(REPEATS)]:
        run = read(out / "vit_tiny" / path / f"repeat_{repeat}" / "run.json")
        windows = read(out / "vit_tiny" / path / f"repeat_{repeat}" / "metrics.jsonl")
        assert [w["warmup"] for w in windows] == [True, False], path
        assert (run["config"]["train"]["local_batch_size"], run["config"]["train"]["lr"]) == (
            4, 0.002), path  # the command line's batch and override reached every path
        assert run["config"]["repeat"] == repeat, path  # each repeat labelled as a sweep does
        applied = run["applied"]  # CPU: the defaults resolve to eager fp32, torch's AdamW
        assert (applied["precision"]["name"], applied["adamw"], applied["fused_attn"]) == (
            "fp32", "for_loop", True), path
        assert applied.get("compiled_blocks", 0) == 0 and applied.get("compile") in (None, "off")
    timm_run = read(out / "vit_tiny" / "timm" / "repeat_0" / "run.json")
    assert timm_run["applied"]["timm_model"] == throughput.TIMM_BASE_VIT


def test_fsdp_path_is_the_sweeps_fsdp_wrapping_on_a_world_of_one(bench):
    out, _, _ = bench
    run = read(out / "vit_tiny" / "fsdp" / "repeat_0" / "run.json")
    assert (run["world"]["size"], run["world"]["sharding_strategy"]) == (1, "FULL_SHARD")
    assert run["config"]["engine"] == "fsdp1"
    # FSDP1 runs NO_SHARD on a world of 1 whatever is asked: recorded and shown as such
    assert run["applied"]["sharding_strategy"] == "NO_SHARD"
    row = pd.read_csv(out / "bench.csv").set_index("path").loc["fsdp"]
    assert row["wrapper"] == "FSDP1 FULL_SHARD->NO_SHARD world 1"
    assert run["applied"]["materialized"] == "per_unit"  # FSDP1's param_init_fn ran per unit
    assert read(out / "vit_tiny" / "unwrapped" / "repeat_1" / "run.json")["world"]["wrapper"] == (
        "none")


def test_profile_of_the_fsdp_step_lists_the_matmuls(bench):
    out, _, _ = bench
    ops = (out / "vit_tiny" / "profile" / "ops.txt").read_text()
    assert "aten::addmm" in ops or "aten::mm" in ops
    with gzip.open(out / "vit_tiny" / "profile" / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    # the profiler's schedule: one active step, after its wait and warm-up steps
    steps = {e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith(
        "ProfilerStep#")}
    assert steps == {f"ProfilerStep#{sum(throughput.PROFILE_SCHEDULE)}"}


def test_device_busy_is_the_union_of_device_events(tmp_path):
    events = [  # microseconds: two streams overlapping, a copy after a gap, host ops ignored
        {"ph": "X", "cat": "kernel", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "kernel", "ts": 50, "dur": 100},
        {"ph": "X", "cat": "gpu_memcpy", "ts": 400, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1000},
        {"ph": "i", "cat": "kernel", "ts": 900},
    ]
    trace = tmp_path / "trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    span, busy = throughput.device_busy(trace)
    assert span == pytest.approx(500e-6) and busy == pytest.approx(250e-6)
    assert throughput.busy_line(span, busy).startswith(
        "device busy 50% of the profiled span (0.2 of 0.5 ms): below 80%: the device waits")
    assert throughput.busy_line(1.0, 0.9).endswith("the device bounds the step")
    host_only = tmp_path / "cpu.json"
    host_only.write_text(json.dumps({"traceEvents": events[3:4]}))
    assert throughput.device_busy(host_only) is None


def test_a_cpu_profile_claims_no_device_share(bench):
    out, _, _ = bench
    assert "device busy" not in (out / "vit_tiny" / "profile" / "ops.txt").read_text()


def test_bench_csv_says_how_each_path_casts(bench):
    out, _, _ = bench
    table = pd.read_csv(out / "bench.csv")
    assert set(table["cast"]) == {"none"}  # fp32 on a CPU
    assert throughput.cast_kind({"name": "bf16", "param_dtype": "bf16",
                                 "autocast_dtype": None}) == "parameters"  # fsdp on a GPU
    assert throughput.cast_kind({"name": "bf16", "autocast_dtype": "bf16"}) == "autocast"


def test_table_ratios_are_the_measured_ips_ratios(bench):
    out, _, _ = bench
    ips = {p: statistics.median(read(out / "vit_tiny" / p / f"repeat_{r}" / "summary.json")
                                ["ips"] for r in range(REPEATS)) for p in PATHS}
    row = pd.read_csv(out / "bench.csv").set_index("path").loc["fsdp"]
    assert row["vs_timm"] == pytest.approx(ips["fsdp"] / ips["timm"])
    assert row["vs_unwrapped"] == pytest.approx(ips["fsdp"] / ips["unwrapped"])
    saved = read(out / "bench.json")
    assert {r["path"] for r in saved["rows"]} == set(PATHS)
    assert saved["checks"] == []  # the targets are GPU figures: none checked on a CPU


def test_repeats_take_turns_and_the_table_gives_their_range(bench):
    out, _, printed = bench
    saved = read(out / "bench.json")
    # the paths take turns: repeat 0 of every path before repeat 1 of any
    assert [(m["path"], m["repeat"]) for m in saved["measurements"]] == [
        (p, r) for r in range(REPEATS) for p in PATHS]
    table = pd.read_csv(out / "bench.csv").set_index("path")
    for path in PATHS:
        ips = sorted(read(out / "vit_tiny" / path / f"repeat_{r}" / "summary.json")["ips"]
                     for r in range(REPEATS))
        row = table.loc[path]
        assert (row["num_repeats"], row["num_completed"]) == (REPEATS, REPEATS)
        assert (row["ips_min"], row["ips_max"]) == pytest.approx((ips[0], ips[-1]))
        assert row["repeat_spread"] == pytest.approx((ips[-1] - ips[0]) / statistics.median(ips))
    header = printed.splitlines()[0].split()
    assert header[header.index("images/s") + 1:header.index("images/s") + 4] == [
        "min", "max", "spread"]
    noisy = any(table["repeat_spread"] > 0.10)  # on a busy machine the warning says so
    assert ("warning: images/s spread over 10% between repeats" in printed) == noisy


def _measurements(ips_by_path: dict[str, list], status: dict | None = None) -> pd.DataFrame:
    """Rows as run_bench collects them, one per (path, repeat), for vit_tiny."""
    status = status or {}
    return pd.DataFrame([
        {"model": "vit_tiny", "path": p, "repeat": r, "wrapper": "none", "batch": 8,
         "precision": "fp32", "mfu": None, "status": status.get((p, r), "completed"),
         "ips": v, "tflops_per_gpu": v and v / 100, "step_time_s": v and 8 / v,
         "ips_spread": 0.01, "run_dir": f"out/vit_tiny/{p}/repeat_{r}", "device_type": "cpu"}
        for p, values in ips_by_path.items() for r, v in enumerate(values)])


def test_spread_over_ten_percent_is_warned_in_one_line():
    steady = throughput.summarize_repeats(_measurements(
        {"fsdp": [100.0, 104.0, 102.0], "unwrapped": [200.0, 190.0, 195.0],
         "timm": [210.0, 212.0, 211.0]}))
    assert throughput.spread_warning(steady) is None  # 3.9 %, 5.1 %, 0.9 %
    row = steady.set_index("path").loc["fsdp"]
    assert (row["ips"], row["ips_min"], row["ips_max"]) == (102.0, 100.0, 104.0)
    assert row["vs_unwrapped"] == pytest.approx(102 / 195)  # medians, not first repeats
    noisy = throughput.summarize_repeats(_measurements(
        {"fsdp": [100.0, 150.0, 102.0], "unwrapped": [200.0, 190.0, 195.0],
         "timm": [210.0, 240.0, 211.0]}))
    warning = throughput.spread_warning(noisy)
    assert "\n" not in warning
    assert "vit_tiny fsdp 49%" in warning and "vit_tiny timm 14%" in warning
    assert "unwrapped" not in warning
    assert "spread" in throughput.format_table(noisy).splitlines()[0]


def test_a_failed_repeat_is_the_paths_status_and_left_out_of_the_median():
    table = throughput.summarize_repeats(_measurements(
        {"fsdp": [100.0, None, 110.0], "unwrapped": [200.0], "timm": [210.0]},
        status={("fsdp", 1): "oom"})).set_index("path")
    row = table.loc["fsdp"]
    assert (row["status"], row["num_repeats"], row["num_completed"]) == ("oom", 3, 2)
    assert row["ips"] == 105.0 and row["run_dir"] == "out/vit_tiny/fsdp"
    assert pd.isna(table.loc["timm", "repeat_spread"])  # one repeat: no spread


@pytest.mark.parametrize(("args", "message"), [
    (["--repeats", "0"], "--repeats 0: give 1 or more"),
    (["--batch", "0"], "--batch 0: give 1 or more"),  # ran the default batch of 8
    (["--steps", "0"], "--steps 0: give 1 or more"),
    (["--warmup", "-1"], "--warmup -1: give 0 or more"),
])
def test_counts_below_their_least_are_refused(capsys, args, message):
    with pytest.raises(SystemExit) as raised:
        throughput.main(args)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_help_names_the_overhead_benchmark(capsys):
    with pytest.raises(SystemExit):
        throughput.main(["--help"])
    assert "python -m vitfsdp.bench overhead" in " ".join(capsys.readouterr().out.split())


def test_printed_table_has_every_path_and_the_checks(bench):
    _, _, printed = bench
    header = printed.splitlines()[0].split()
    assert header[:3] == ["model", "path", "wrapper"] and "ips/timm" in header
    assert all(f"vit_tiny {p}" in " ".join(printed.split()) for p in PATHS)
    assert "PASS" not in printed and "FAIL" not in printed  # no GPU target on a CPU run
    assert "targets: none checked (they apply to a GPU run; this one ran on cpu)" in printed


@pytest.mark.parametrize("name", ["vit_tiny", "vit_base", "vit_1b", "vit_huge_patch14_224"])
def test_timm_model_args_build_our_architecture(name):
    cfg = models.ModelConfig(name)
    timm_name, kwargs = throughput.timm_model_args(cfg, 1000)
    with torch.device("meta"):
        theirs = timm.create_model(timm_name, pretrained=False, **kwargs)
    ours = models.build_model(cfg, 1000, device="meta")
    assert models.count_params(theirs) == models.count_params(ours)
    assert [tuple(p.shape) for p in theirs.parameters()] == [
        tuple(p.shape) for p in ours.parameters()]


def _gpu_table(rows, device_type="cuda"):
    table = pd.DataFrame(rows, columns=["model", "path", "ips", "mfu"])
    table["precision"], table["batch"], table["device_type"] = "bf16", 32, device_type
    return throughput._with_ratios(table)


def test_targets_pass_and_fail_on_the_measured_figures():
    rows = [("vit_huge_patch14_224", "fsdp", 520.0, 0.52),
            ("vit_huge_patch14_224", "unwrapped", 524.0, 0.524),
            ("vit_huge_patch14_224", "timm", 480.0, 0.48), ("vit_base", "fsdp", 90.0, 0.2),
            ("vit_base", "unwrapped", 100.0, 0.22), ("vit_base", "timm", 88.0, 0.19)]
    lines = throughput.check_targets(_gpu_table(rows))
    verdicts = {(ln.split()[1], ln.split()[2]): ln.split()[0] for ln in lines}
    assert verdicts == {("vit_huge_patch14_224:", "FSDP/unwrapped"): "PASS",
                        ("vit_huge_patch14_224:", "ours/timm"): "PASS",  # 1.083 >= 1.05
                        ("vit_huge_patch14_224:", "MFU"): "PASS",
                        ("vit_base:", "FSDP/unwrapped"): "FAIL",
                        ("vit_base:", "ours/timm"): "FAIL"}  # 1.023 < 1.05
    assert throughput.check_targets(_gpu_table(rows, device_type="cpu")) == []


def test_mfu_below_the_floor_points_at_the_profile():
    rows = [("vit_huge_patch14_224", p, ips, ips / 1000) for p, ips in
            (("fsdp", 450.0), ("unwrapped", 455.0), ("timm", 400.0))]
    mfu = [ln for ln in throughput.check_targets(_gpu_table(rows)) if "MFU" in ln]
    assert mfu == ["FAIL vit_huge_patch14_224: MFU 45.0% (target >= 50.0%)"]  # above 40 %
    rows = [(m, p, ips * 0.8, mfu * 0.8) for m, p, ips, mfu in rows]
    mfu = [ln for ln in throughput.check_targets(_gpu_table(rows)) if "MFU" in ln]
    assert mfu[0].startswith("FAIL") and "below the 40% floor" in mfu[0]


def test_a_failed_target_exits_non_zero(monkeypatch, tmp_path, capsys):
    rows = [("vit_base", p, ips, None) for p, ips in
            (("fsdp", 90.0), ("unwrapped", 100.0), ("timm", 88.0))]
    table = _gpu_table(rows).assign(status="completed")
    monkeypatch.setattr(throughput, "run_bench", lambda opts: table)
    monkeypatch.setattr(throughput, "format_table", lambda table: "(table)")
    assert throughput.main(["--out", str(tmp_path / "out")]) == 1
    assert "FAIL vit_base: ours/timm" in capsys.readouterr().out
    monkeypatch.setattr(throughput, "run_bench",
                        lambda opts: table.assign(device_type="cpu"))
    assert throughput.main(["--out", str(tmp_path / "out")]) == 0


def test_a_failed_training_run_does_not_end_the_benchmark(tmp_path, monkeypatch):
    """A failed fsdp measurement aborts its process group (as train.run does): the next
    repeat's and the next model's fsdp measurements still get a live group, and the table
    is written."""
    import torch.distributed as dist

    from vitfsdp import failures

    groups = []

    def fsdp(cfg, device, run_dir):
        groups.append(dist.is_initialized())
        if len(groups) == 1:
            failures.abort_process_group()
            raise failures.RunFailed("oom", "CUDA out of memory")

    monkeypatch.setattr(throughput, "_fsdp", fsdp)
    monkeypatch.setattr(throughput, "_unwrapped", lambda cfg, device, run_dir: None)
    monkeypatch.setattr(throughput, "_timm", lambda cfg, device, run_dir: None)
    monkeypatch.setattr(throughput, "DeviceMemoryProbe",  # as NVML answers on a GPU node
                        lambda device: types.SimpleNamespace(driver_version="550.54.15"))
    out = tmp_path / "out"
    assert throughput.main(["--device", "cpu", "--models", "vit_tiny,vit_base", "--repeats",
                            "2", "--out", str(out)]) == 1  # nothing completed
    assert groups == [True] * 4  # 2 models x 2 repeats
    assert len(pd.read_csv(out / "bench.csv")) == 6
    assert read(out / "bench.json")["versions"]["driver"] == "550.54.15"  # for the docs


def test_unknown_model_is_one_line_error(tmp_path, capsys):
    assert throughput.main(["--device", "cpu", "--models", "vit_nope", "--out",
                            str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model" in err and "vit_nope" in err


def test_subcommands_dispatch_lazily(monkeypatch):
    calls = []
    fake = types.ModuleType("vitfsdp.bench.overhead")
    fake.main = lambda argv: calls.append(list(argv)) or 7
    monkeypatch.setitem(sys.modules, "vitfsdp.bench.overhead", fake)
    assert bench_cli.main(["overhead", "--x", "1"]) == 7
    assert calls == [["--x", "1"]]
