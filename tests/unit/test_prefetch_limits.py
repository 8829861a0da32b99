"""What the prefetch ablation cannot measure, said where a reviewer reads it: on CPU ranks
FSDP's streams are no-ops, so the variants differ in the order of their collectives, not in
prefetching (prefetch.csv ``cpu_ranks``, prefetch.png's footer, the report's prefetch
section); a busy share that was not measured is "not measured", not "not host-bound"; a bar
other work competed with says so over it.

The fake runs are the reviewer's ablation (experiment=prefetch_ablation_cpu): vit_tiny
FULL_SHARD at 1 node of 2 gloo ranks, 3 prefetch x 2 limit_all_gathers variants, 2 repeats
each; every fake run's windows are its images/s +-1."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.fake_records import ABLATION, write_ablation_run
from vitfsdp.analysis import collect_runs, plot_prefetch, study_tables
from vitfsdp.analysis.figures.prefetch import (
    BUSY_NOT_MEASURED,
    CONTENDED_LABEL,
    CPU_NOTE,
    UNSETTLED_CONTENDED_LABEL,
    UNSETTLED_LABEL,
)
from vitfsdp.analysis.report import report_sections
from vitfsdp.analysis.tables import (
    equivalence_table,
    observed_noise,
    points_table,
    prefetch_table,
)

#: (backward_prefetch, limit_all_gathers) -> its two repeats' images/s (the reviewer's).


def _ablation(root: Path, device: str = "cpu", busy: float | None = None,
              other_cpus: dict | None = None) -> pd.DataFrame:  # fmt: skip
    """The ablation on ``device`` (``busy``: every timed window's device_busy_frac, None as
    on CPU), on a 2-core host; ``other_cpus``: the cores other work kept busy beside each
    listed variant's runs (host.json, as the local launcher writes it)."""
    for (prefetch, limit), values in ABLATION.items():
        for repeat, ips in enumerate(values):
            write_ablation_run(root, prefetch, limit, repeat, ips, device=device, busy=busy,
                               other_cpus=(other_cpus or {}).get((prefetch, limit)))
    return collect_runs(root)


def _footer(fig) -> str:
    return " ".join(legend.get_title().get_text().replace("\n", " ") for legend in fig.legends)


def _legend(fig) -> list[str]:
    return [t.get_text().replace("\n", " ") for legend in fig.legends for t in legend.texts]


def _section(df: pd.DataFrame):
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    return sections["Prefetch ablation"]


def _prefetch(df: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    points = points_table(df)
    return prefetch_table(points, observed_noise(equivalence_table(points, df)), runs)


def test_on_cpu_ranks_the_csv_the_figure_and_the_report_say_prefetching_is_not_measured(
        tmp_path):
    """torch.cpu.Stream and torch.cpu.Event are no-ops, so on CPU ranks the variants only
    reorder their collectives. Before, the footer said 'local batch 8/rank; fp32; digits;
    cpu; cluster=local' and nothing else, and prefetch.csv had no column to say it."""
    df = _ablation(tmp_path)
    table = _prefetch(df, df)
    assert table["cpu_ranks"].tolist() == [True] * 6
    assert _prefetch(df, None)["cpu_ranks"].isna().all()  # the devices not given: not known
    footer = _footer(plot_prefetch(df))
    assert f"{CPU_NOTE}." in footer, footer
    assert len(CPU_NOTE) < 150  # one short sentence in the figure
    text = _section(df).text
    assert "**Not prefetching's effect:** the comparisons ran on CPU ranks" in text
    assert "`torch.cpu.Stream` and `torch.cpu.Event` do nothing" in text
    assert "not their overlap with compute" in text


def test_on_gpus_nothing_is_said_of_cpu_ranks_and_a_measured_busy_share_is_judged(tmp_path):
    df = _ablation(tmp_path, device="cuda", busy=0.95)
    assert _prefetch(df, df)["cpu_ranks"].tolist() == [False] * 6
    assert not _prefetch(df, df)["host_bound"].isna().any()
    fig = plot_prefetch(df)
    assert CPU_NOTE not in _footer(fig)
    assert not any(text in _footer(fig) for text in BUSY_NOT_MEASURED.values())
    text = _section(df).text
    assert "CPU ranks" not in text and "not measured" not in text


def test_an_unmeasured_busy_share_reads_not_measured_not_not_host_bound(tmp_path):
    """prefetch.csv's host_bound is empty on CPU ranks: the figure's footer and the report
    say it was not measured, in the weak-scaling section's words (before: the report's
    fillna(False) made them 'not host-bound', and nothing said otherwise). A GPU without
    NVML says why in its own words."""
    df = _ablation(tmp_path)
    assert _prefetch(df, df)["host_bound"].isna().all()
    assert f"{BUSY_NOT_MEASURED[True]}." in _footer(plot_prefetch(df))
    text = _section(df).text
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    weak = "Device busy share (device_busy_frac): not measured on CPU ranks, where the host " \
           "is the device."
    assert weak in sections["Weak scaling"].text and weak in text
    assert "Host-bound is not known for any variant (prefetch.csv `host_bound` empty)" in text
    gpu = _ablation(tmp_path / "gpu", device="cuda")  # no busy share recorded: no NVML
    assert f"{BUSY_NOT_MEASURED[False]}." in _footer(plot_prefetch(gpu))
    assert "(no NVML or AMD SMI on the nodes" in _section(gpu).text


def test_a_contended_bar_says_so_over_it_and_in_the_legend(tmp_path):
    """Other work kept 1.6 of the 2 cores busy beside BACKWARD_PRE/True's runs: its bar says
    'n=2, 2 contended' (every bar has n=2, so the others say nothing), and the legend's pale
    entry names other work. Before, the bar was pale under 'too few runs / within the spread
    or the noise' like a tight result."""
    df = _ablation(tmp_path, other_cpus={("BACKWARD_PRE", True): 1.6})
    assert _prefetch(df, df).set_index(["backward_prefetch", "limit_all_gathers"]).loc[
        ("BACKWARD_PRE", True), "runs_contended"] == 2
    fig = plot_prefetch(df)
    # one part a line where the bar is too narrow for both (prefetch._place_labels)
    counts = [t.get_text().replace("\n", ", ") for t in fig.axes[0].texts
              if t.get_gid() == "runs"]
    assert counts == ["n=2, 2 contended"]
    legend = _legend(fig)
    assert UNSETTLED_CONTENDED_LABEL in legend and UNSETTLED_LABEL not in legend
    assert CONTENDED_LABEL in legend and "other work competed" in CONTENDED_LABEL
    quiet = _legend(plot_prefetch(_ablation(tmp_path / "quiet")))
    assert UNSETTLED_LABEL in quiet and CONTENDED_LABEL not in quiet
