"""A host-bound comparison is no ranking, and a busy share not measured is not "not
host-bound": best.csv's ``difference``, prefetch.csv's ``vs_best``, the report's counts and
the figures' footers, on GPU records written with RunRecords."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.tables import study_tables

HOST_LOOPS = "host-bound: compares host loops and wrappers, not the devices"


def _gpu(strategy: str, nodes: int, repeat: int, prefetch: str = "BACKWARD_PRE",
         framework: str = "torch") -> dict:  # fmt: skip
    """A CUDA run.json of ``strategy`` on ``nodes`` nodes of 2 GPUs."""
    info = run_info(strategy, nodes, device="cuda", prefetch=prefetch)
    info["config"]["repeat"] = repeat
    info["config"]["framework"] = framework
    if strategy == "DDP" or framework == "jax":
        info["config"]["strategy"] |= {"backward_prefetch": None, "limit_all_gathers": None}
    return info


def test_a_host_bound_best_is_no_ranking(tmp_path: Path) -> None:
    """DDP 300-302 images/s at 40% busy against FULL_SHARD 200-202 at 95%, three runs each:
    apart beyond the spread, but DDP's host decided its step, so best.csv says the ranking
    compares host loops, with the ratio the records give."""
    for strategy, ips, busy in (("DDP", 300.0, 0.40), ("FULL_SHARD", 200.0, 0.95)):
        for repeat in range(3):
            write_run(tmp_path / f"{strategy}_{repeat}", _gpu(strategy, 1, repeat),
                      ips + repeat, busy=busy)
    best = study_tables(collect_runs(tmp_path), 1000)["best"].iloc[0]
    assert best["configuration"] == "DDP" and bool(best["host_bound"])
    assert best["difference"] == f"{HOST_LOOPS} ({best['speedup_over_runner_up']:.2f}x apart)"
    assert "beyond the spread" not in best["difference"]


def test_a_host_bound_prefetch_variant_is_no_ranking(tmp_path: Path) -> None:
    """NONE at 62% busy, slower than BACKWARD_PRE beyond the spread on 4 runs each: its
    ``vs_best`` says it compares host loops, not that it is slower."""
    for prefetch, ips, busy in (("BACKWARD_PRE", 800.0, 0.9), ("NONE", 700.0, 0.62)):
        for repeat in range(4):
            write_run(tmp_path / f"{prefetch}_{repeat}", _gpu("FULL_SHARD", 1, repeat, prefetch),
                      ips + repeat, busy=busy)
    table = study_tables(collect_runs(tmp_path), 1000)["prefetch"].set_index(
        "backward_prefetch")
    ratio = table.loc["BACKWARD_PRE", "ips"] / table.loc["NONE", "ips"]
    assert table.loc["NONE", "vs_best"] == f"{HOST_LOOPS} ({ratio:.2f}x apart)"


def test_a_pair_on_gpus_without_a_busy_share_is_not_counted_as_not_host_bound(
        tmp_path: Path) -> None:
    """PyTorch and JAX on GPUs whose records hold no busy share (no NVML, older records):
    the report does not count the pair as not host-bound, and says what is missing (not
    "CPU ranks"); the weak-scaling figure's footer says the busy share was not measured."""
    from vitfsdp.analysis.figures.weak_scaling import plot_weak_scaling
    from vitfsdp.analysis.report import report_sections

    for framework, ips in (("torch", 200.0), ("jax", 300.0)):
        for repeat in range(3):
            write_run(tmp_path / f"{framework}_{repeat}",
                      _gpu("FULL_SHARD", 1, repeat, framework=framework), ips + repeat)
    df = collect_runs(tmp_path)
    tables = study_tables(df, 1000)
    assert tables["framework_ratio"]["host_bound"].isna().all()
    text = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"].text
    assert "1 of 1 pairs not host-bound" not in text
    assert "0 of 0 pairs measured not host-bound are (`difference`)" in text
    assert ("At 1 pair the device busy share was not measured (on GPUs without NVML or AMD "
            "SMI readings, or in records older than the field)") in text
    assert "CPU ranks" not in text
    fig = plot_weak_scaling(df)
    footer = fig.legends[0].get_title().get_text() if fig.legends else ""
    assert "device busy not measured" in " ".join(footer.split())


NOT_KNOWN = "GPU busy share not measured: host-bound not known, not ranked"


def _pair(tmp_path: Path, device: str = "cuda", torch_busy: float | None = None) -> dict:
    """Three PyTorch runs at 200-202 images/s and three JAX runs at 300-302 of FULL_SHARD on
    one node of ``device``, JAX's busy share not measured: their study tables."""
    for framework, ips, busy in (("torch", 200.0, torch_busy), ("jax", 300.0, None)):
        for repeat in range(3):
            info = _gpu("FULL_SHARD", 1, repeat, framework=framework)
            if device == "cpu":
                info["device"] = {"type": "cpu", "name": "cpu", "memory_gib": None}
            write_run(tmp_path / f"{framework}_{repeat}", info, ips + repeat, busy=busy)
    return study_tables(collect_runs(tmp_path), 1000)


def test_a_gpu_pair_without_a_busy_share_is_not_ranked(tmp_path: Path) -> None:
    """PyTorch and JAX on GPUs apart beyond their spread, neither busy share measured:
    framework_ratio.csv's ``difference`` says the GPU busy share was not measured, with how
    far apart they are, not ``beyond the spread``; the report still counts the pair apart."""
    from vitfsdp.analysis.report import report_sections

    tables = _pair(tmp_path)
    row = tables["framework_ratio"].iloc[0]
    assert pd.isna(row["host_bound"])
    assert row["difference"] == f"{NOT_KNOWN} ({row['jax_over_torch']:.2f}x apart)"
    assert "beyond the spread" not in row["difference"]
    text = {s.title: s for s in report_sections(tables, 1000)}["PyTorch and JAX"].text
    assert "At 1 pair the device busy share was not measured" in text


def test_one_side_measured_the_other_not_is_not_ranked(tmp_path: Path) -> None:
    """PyTorch measured 95% busy (not host-bound), JAX on GPUs not measured: whether the
    pair compares host loops is still not known, so it is not ranked."""
    row = _pair(tmp_path, torch_busy=0.95)["framework_ratio"].iloc[0]
    assert row["difference"].startswith(NOT_KNOWN)


def test_a_cpu_pair_keeps_its_verdict(tmp_path: Path) -> None:
    """On CPU ranks, where the host is the device, the same pair is ranked as before."""
    row = _pair(tmp_path, device="cpu")["framework_ratio"].iloc[0]
    assert row["difference"] == "beyond the spread"


def test_a_best_on_gpus_without_a_busy_share_is_not_ranked(tmp_path: Path) -> None:
    """DDP 300-302 images/s against FULL_SHARD 200-202, three runs each, on GPUs without a
    busy share: best.csv does not rank them, and the report and the terminal say why."""
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import noise_lines

    for strategy, ips in (("DDP", 300.0), ("FULL_SHARD", 200.0)):
        for repeat in range(3):
            write_run(tmp_path / f"{strategy}_{repeat}", _gpu(strategy, 1, repeat), ips + repeat)
    tables = study_tables(collect_runs(tmp_path), 1000)
    best = tables["best"].iloc[0]
    assert best["difference"] == f"{NOT_KNOWN} ({best['speedup_over_runner_up']:.2f}x apart)"
    assert (tables["points"]["device_type"] == "cuda").all()
    text = {s.title: s for s in report_sections(tables, 1000)}
    assert any("**Host-bound not known:** at vit_tiny at 1 node(s)" in s.text
               for s in text.values())
    assert any(line.startswith("no ranking: the GPU busy share") for line in noise_lines(tables))


def test_a_prefetch_variant_on_gpus_without_a_busy_share_is_not_ranked(tmp_path: Path) -> None:
    """NONE slower than BACKWARD_PRE beyond the spread on 4 runs each, on GPUs without a
    busy share: ``vs_best`` says it was not measured, not that NONE is slower."""
    for prefetch, ips in (("BACKWARD_PRE", 800.0), ("NONE", 700.0)):
        for repeat in range(4):
            write_run(tmp_path / f"{prefetch}_{repeat}", _gpu("FULL_SHARD", 1, repeat, prefetch),
                      ips + repeat)
    table = study_tables(collect_runs(tmp_path), 1000)["prefetch"].set_index(
        "backward_prefetch")
    ratio = table.loc["BACKWARD_PRE", "ips"] / table.loc["NONE", "ips"]
    assert table.loc["NONE", "vs_best"] == f"{NOT_KNOWN} ({ratio:.2f}x apart)"
