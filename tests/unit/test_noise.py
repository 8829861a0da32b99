"""A difference is a result only beyond the spread: the best configuration's win over the
runner-up, and the built-in noise check of points that compute the same thing under two
names (FULL_SHARD and HYBRID_SHARD over the whole world), on synthetic repeats."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs, study_tables
from vitfsdp.analysis.report import best_text, report_sections
from vitfsdp.analysis.tables import (
    BEYOND,
    IN_NOISE,
    ONE_RUN,
    WITHIN,
    best_table,
    differs,
    equivalence_table,
    judge,
    points_table,
    spread_bounds,
)
from vitfsdp.analysis.verdict import FEW_RUNS, separation_chance


def _sweep(tmp_path: Path, ips: dict[tuple[str, int], list[float]]):
    """Runs of (strategy, nodes) at each of the given images/s, one repeat each; windows
    spread ±1 around it (tests.integration.test_analysis.write_run)."""
    for (strategy, nodes), values in ips.items():
        for repeat, value in enumerate(values):
            info = run_info(strategy, nodes)
            info["config"]["repeat"] = repeat
            write_run(tmp_path / f"{strategy}_{nodes}_r{repeat}", info, value)
    df = collect_runs(tmp_path)
    return df, points_table(df)


@pytest.mark.parametrize("a, b, expected", [
    ((10, 12), (13, 15), BEYOND), ((10, 13), (12, 15), WITHIN), ((13, 15), (10, 12), BEYOND),
    ((10, 10), (10, 10), WITHIN),
])  # fmt: skip
def test_two_spans_differ_only_where_they_do_not_overlap(a, b, expected):
    assert differs(*a, *b) == expected


def test_spread_is_over_repeats_else_over_one_runs_windows(tmp_path):
    _, points = _sweep(tmp_path, {("DDP", 1): [100.0, 110.0, 104.0], ("DDP", 2): [200.0]})
    low, high = spread_bounds(points.set_index("nodes", drop=False))
    assert (low[1], high[1]) == (100.0, 110.0)  # repeats
    assert (low[2], high[2]) == (199.0, 201.0)  # one run: its windows, ±1


def test_efficiency_bounds_carry_the_baselines_spread_as_well_as_the_points(tmp_path):
    """The 1-node point ran three times (100-110), the 4-node point once (windows 299-301):
    the efficiency is 300 / (4 x the median 104), its bounds 299 / (4 x 110) and
    301 / (4 x 100); the 1-node point is its own ideal."""
    _, points = _sweep(tmp_path, {("DDP", 1): [100.0, 110.0, 104.0], ("DDP", 4): [300.0]})
    rows = points.set_index("nodes")
    assert rows.loc[4, "scaling_efficiency"] == pytest.approx(300 / 416)
    assert rows.loc[4, "efficiency_min"] == pytest.approx(299 / 440)
    assert rows.loc[4, "efficiency_max"] == pytest.approx(301 / 400)
    assert rows.loc[1, ["efficiency_min", "efficiency_max"]].tolist() == [1.0, 1.0]


def test_a_win_inside_the_spread_is_no_difference(tmp_path):
    df, points = _sweep(tmp_path, {("DDP", 1): [100.0, 130.0, 112.0],
                                   ("FULL_SHARD", 1): [105.0, 108.0, 110.0]})
    row = best_table(points).iloc[0]
    assert row["configuration"] == "DDP" and row["speedup_over_runner_up"] > 1
    assert row["difference"] == WITHIN
    text = best_text(best_table(points), points)
    assert "**No difference**" in text and "DDP against FULL_SHARD" in text


def test_a_win_beyond_the_spread_is_called_so(tmp_path):
    _, points = _sweep(tmp_path, {("DDP", 1): [150.0, 152.0, 151.0],
                                  ("FULL_SHARD", 1): [100.0, 103.0, 101.0]})
    assert best_table(points).iloc[0]["difference"] == BEYOND
    assert "No difference" not in best_text(best_table(points), points)


def test_a_win_on_two_runs_each_is_too_few_to_be_a_result(tmp_path):
    """Two runs each, apart by 1.5x: two sets of two runs of one configuration separate
    that completely 1 time in 3, so it is not established (2 runs against 5: 1 in 10.5)."""
    _, points = _sweep(tmp_path, {("DDP", 1): [150.0, 152.0], ("FULL_SHARD", 1): [100.0, 103.0]})
    best = best_table(points)
    assert best.iloc[0]["difference"] == FEW_RUNS
    text = best_text(best, points)
    assert "**Not established on so few runs**" in text and "DDP against FULL_SHARD" in text
    assert text.endswith("Rerun with at least three repeats (repeat=0,1,2) to separate them; "
                         "the same sweep directory keeps the runs that completed.")
    more, _ = _sweep(tmp_path / "m", {("DDP", 1): [150.0, 152.0],
                                      ("FULL_SHARD", 1): [100.0, 103.0, 101.0, 99.0, 102.0]})
    assert best_table(points_table(more)).iloc[0]["difference"] == BEYOND


def test_the_advice_tells_a_failed_repeat_from_one_never_run(tmp_path):
    """DDP ran three repeats and one ran out of memory: the report says to rerun the failed
    one, not to add repeats the sweep already has (it said the latter)."""
    from vitfsdp.analysis.report import rerun_advice
    from vitfsdp.analysis.tables import runs_per_point

    df, points = _sweep(tmp_path, {("DDP", 1): [150.0, 152.0],
                                   ("FULL_SHARD", 1): [100.0, 103.0, 101.0]})
    info = run_info("DDP", 1)
    info["config"]["repeat"] = 2
    write_run(tmp_path / "DDP_1_r2", info, None, status="oom")
    df = collect_runs(tmp_path)
    points = points_table(df)
    assert runs_per_point(df, points).tolist() == [3, 3]
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    assert ("1 point(s) ran three repeats or more but completed fewer (vit_tiny DDP at 1 "
            "node(s); points.csv `num_repeats`): the same sweep command with `--rerun-failed` "
            "runs the failed ones again.") in sections["Best configuration per model and node "
                                                   "count"].text
    assert rerun_advice(points).startswith(" Rerun with at least three repeats")  # no runs
    assert rerun_advice(points.assign(num_repeats=3)) == (
        " More repeats (repeat=0,1,2,3,4) may separate them.")


def test_the_advice_is_on_the_points_a_tie_rests_on(tmp_path):
    """At 4 nodes HYBRID_2GPU and a noisy FULL_SHARD (50%) overlap; the only failed run is
    FULL_SHARD's at 2 nodes, third there. The advice was '--rerun-failed' for that run, which
    settles nothing at 4 nodes; now it is on the two tied points: their runs overlap, more
    repeats do not part them, and the noisy one is named."""
    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0, 101.0, 99.0],
                              ("HYBRID_2GPU", 1): [92.0, 93.0, 91.0],
                              ("FULL_SHARD", 1): [90.0, 91.0, 89.0],
                              ("DDP", 2): [190.0, 191.0, 189.0],
                              ("HYBRID_2GPU", 2): [175.0, 176.0, 174.0],
                              ("FULL_SHARD", 2): [170.0, 172.0],
                              ("HYBRID_2GPU", 4): [347.0, 348.0, 346.0],
                              ("FULL_SHARD", 4): [260.0, 340.0, 430.0]})
    info = run_info("FULL_SHARD", 2)
    info["config"]["repeat"] = 2
    write_run(tmp_path / "FULL_SHARD_2_r2", info, None, status="failed")
    tables = study_tables(collect_runs(tmp_path), 1000)
    assert tables["best"]["difference"].tolist()[2] == WITHIN
    text = {s.title: s for s in report_sections(tables, 1000)}[
        "Best configuration per model and node count"].text
    assert "--rerun-failed" not in text
    assert ("(HYBRID_2GPU against FULL_SHARD, 1.02x). The fastest and the runner-up of these "
            "each completed three runs or more. Runs that overlap stay overlapping as repeats "
            "are added (a min-max only widens), so more repeats do not separate them. Noisy "
            "among them: repeats spread more than 10% of their median: vit_tiny FULL_SHARD at "
            "4 node(s) (50%): more repeats of a noisy point widen its spread; only runs that "
            "agree better narrow it.") in text


@pytest.mark.parametrize("a, b, chance", [
    (1, 1, 1.0), (2, 2, 1 / 3), (3, 3, 0.1), (2, 5, 2 / 21), (5, 5, 1 / 126), (3, 1, 0.5),
])  # fmt: skip
def test_the_chance_that_one_configuration_separates_from_itself(a, b, chance):
    """Every order of the pooled runs equally likely: 2 of the C(a+b, a) orders put one
    side's runs all above the other's."""
    assert separation_chance(a, b) == pytest.approx(chance)
    assert separation_chance(b, a) == pytest.approx(chance)


def test_the_separation_chance_matches_a_simulation():
    """One configuration's runs drawn 20,000 times, 3 and 3: they separate completely
    about 1 time in 10 (binomial sd 0.002)."""
    import numpy as np

    draws = np.random.default_rng(0).normal(size=(20_000, 6))
    a, b = draws[:, :3], draws[:, 3:]
    apart = (a.min(axis=1) > b.max(axis=1)) | (b.min(axis=1) > a.max(axis=1))
    assert apart.mean() == pytest.approx(separation_chance(3, 3), abs=0.01)
    with pytest.raises(ValueError, match="each side needs a run"):
        separation_chance(0, 3)


def test_full_shard_and_hybrid_over_the_whole_world_are_checked_against_each_other(tmp_path):
    """At 1 node of 2 ranks HYBRID_2GPU shards over the world, as FULL_SHARD does: a pair;
    at 2 nodes (world 4) it does not. 13.9 against 8.5 images/s, each steady: too noisy."""
    df, points = _sweep(tmp_path, {("FULL_SHARD", 1): [13.9, 14.1], ("HYBRID_2GPU", 1): [8.5, 8.6],
                                   ("FULL_SHARD", 2): [20.0], ("HYBRID_2GPU", 2): [30.0]})
    table = equivalence_table(points, df)
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["nodes"], row["configuration_a"], row["configuration_b"]) == (
        1, "FULL_SHARD", "HYBRID_2GPU")
    assert row["difference"] == BEYOND and row["ips_ratio"] == pytest.approx(14.0 / 8.55)
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    text = sections["Noise check"].text
    assert f"**Noise of {14.0 / 8.55:.2f}x:** FULL_SHARD and HYBRID_2GPU" in text
    assert "within observed noise" in text and "rest on a point that ran once" not in text


def test_equivalent_points_that_agree_say_so(tmp_path):
    df, points = _sweep(tmp_path, {("FULL_SHARD", 1): [14.0, 14.5], ("HYBRID_2GPU", 1): [14.2]})
    assert equivalence_table(points, df).iloc[0]["difference"] == WITHIN
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    assert sections["Noise check"].text.endswith(
        f"They agree within their spread (at most {14.25 / 14.2:.2f}x apart, and no win up to "
        "that counts). 1 of 1 pairs rest on a point that ran once: its windows, not the noise "
        "between runs.")


@pytest.mark.parametrize("a, b, ratio, noise, expected", [
    ((10, 13, 3), (12, 15, 3), 1.1, float("nan"), WITHIN),   # overlap, however many runs
    ((10, 13, 1), (12, 15, 1), 1.1, float("nan"), WITHIN),
    ((13, 15, 3), (10, 12, 3), 1.27, float("nan"), BEYOND),  # apart, repeated, no noise pair
    ((13, 15, 3), (10, 12, 3), 1.27, 1.30, IN_NOISE),        # apart, but one computation
    ((13, 15, 3), (10, 12, 3), 1.27, 1.20, BEYOND),          # differed less than this
    ((13, 15, 1), (10, 12, 3), 1.27, float("nan"), ONE_RUN),  # apart on one run's windows
    ((13, 15, 3), (10, 12, 1), 1.27, 1.20, ONE_RUN),
    ((13, 15, 2), (10, 12, 2), 1.27, 1.20, FEW_RUNS),         # apart on 2 runs: 1 in 3
    ((13, 15, 2), (10, 12, 5), 1.27, 1.20, BEYOND),           # 2 against 5: 1 in 10.5
])  # fmt: skip
def test_a_difference_is_a_result_only_apart_repeated_and_beyond_the_observed_noise(
        a, b, ratio, noise, expected):
    assert judge(a, b, ratio, noise) == expected


def test_a_win_on_one_runs_windows_is_not_established(tmp_path):
    """Each point ran once; their windows (±1 images/s) do not overlap, but one run's
    windows do not hold a second run: the win is not called a speed-up, and the report
    and the terminal say each point ran once."""
    from vitfsdp.analysis.tables import noise_lines, study_tables

    df, points = _sweep(tmp_path, {("DDP", 1): [150.0], ("FULL_SHARD", 1): [100.0]})
    row = best_table(points).iloc[0]
    assert (row["configuration"], row["difference"]) == ("DDP", ONE_RUN)
    text = best_text(best_table(points), points)
    assert "**Not established**" in text and "DDP against FULL_SHARD, 1.50x" in text
    runs = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}["Runs"].text
    assert "Repeats per completed point: 1; timed windows per run: 3" in runs
    assert "2 of 2 points ran once" in runs
    # this sweep's own windows (±1 images/s: 2/150 and 2/100), not only the CPU demo's 1-4%
    assert ("in this sweep a run's windows spread 1.7% (median over runs), at most 2.0% "
            "(`ips_spread`); the noise between their runs is not measured") in runs
    lines = noise_lines(study_tables(df))
    assert any(line.startswith("one run: 2 of 2 points ran once") for line in lines), lines
    assert any(line.startswith("a difference resting on one run between the two fastest: "
                               "vit_tiny at 1 node(s)") for line in lines), lines


def test_a_win_no_larger_than_the_noise_checks_is_within_observed_noise(tmp_path):
    """At 1 node FULL_SHARD and HYBRID_2GPU compute the same thing and differ 1.25x; at 2
    nodes HYBRID_2GPU beats FULL_SHARD 1.2x, each repeated and apart: no more than one
    computation differed by, so not a result. DDP at 4 nodes over FULL_SHARD (1.5x) is."""
    from vitfsdp.analysis.tables import observed_noise, study_tables

    df, points = _sweep(tmp_path, {("FULL_SHARD", 1): [125.0, 126.0, 125.5],
                                   ("HYBRID_2GPU", 1): [100.0, 101.0, 100.5],
                                   ("FULL_SHARD", 2): [200.0, 202.0, 201.0],
                                   ("HYBRID_2GPU", 2): [240.0, 242.0, 241.0],
                                   ("FULL_SHARD", 4): [300.0, 302.0, 301.0],
                                   ("DDP", 4): [450.0, 452.0, 451.0]})
    noise = observed_noise(equivalence_table(points, df))
    assert noise == pytest.approx(125.5 / 100.5)
    best = study_tables(df)["best"].set_index("nodes")
    assert best.loc[2, "difference"] == IN_NOISE
    assert best.loc[4, "difference"] == BEYOND
    assert best_table(points).set_index("nodes").loc[2, "difference"] == BEYOND  # no pair
    section = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}[
        "Best configuration per model and node count"]
    assert "**Within observed noise** (the noise check differed 1.25x)" in section.text
    assert "HYBRID_2GPU against FULL_SHARD, 1.20x" in section.text
    runs = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}["Runs"].text
    # runs 1-2 images/s apart (0.4-1.0%); each run's windows ±1 (2/ips: 0.4-2.0%)
    assert ("6 points ran at least twice: their runs spread 0.8% of the median (at most "
            "1.0%, vit_tiny FULL_SHARD at 2 node(s); `ips_repeat_spread`): the noise between "
            "runs, measured, against the windows of one run: 0.9% (median over runs), at most "
            "2.0% (`ips_spread`).") in runs
    assert "ran once" not in runs and "CPU demo" not in runs


def test_points_whose_repeats_spread_are_flagged_noisy_and_one_run_is_not_judged(tmp_path):
    _, points = _sweep(tmp_path, {("DDP", 1): [100.0, 130.0, 112.0], ("DDP", 2): [200.0, 204.0],
                                  ("DDP", 4): [390.0]})
    by_nodes = points.set_index("nodes")
    assert by_nodes.loc[1, "ips_repeat_spread"] == pytest.approx(30.0 / 112.0)
    assert by_nodes.loc[1, "noisy"] and not by_nodes.loc[2, "noisy"]
    assert pd.isna(by_nodes.loc[4, "noisy"])


def test_the_terminal_names_noise_ties_and_too_noisy_pairs(tmp_path):
    from vitfsdp.analysis.tables import noise_lines, study_tables

    df, _ = _sweep(tmp_path, {("FULL_SHARD", 1): [13.9, 14.1], ("HYBRID_2GPU", 1): [8.5, 12.0]})
    lines = noise_lines(study_tables(df))
    assert any(line.startswith("noisy: repeats spread more than 10%")
               and "vit_tiny HYBRID_2GPU at 1 node(s)" in line
               for line in lines), lines
    assert any(line.startswith("noise: the same computation under two names differs")
               and line.endswith("differences up to that are not results") for line in lines)
    quiet, _ = _sweep(tmp_path / "quiet", {("DDP", 1): [150.0, 151.0, 150.5],
                                           ("FULL_SHARD", 1): [100.0, 101.0, 100.5]})
    assert noise_lines(study_tables(quiet)) == []


def test_the_report_names_the_noisy_points_as_the_terminal_does(tmp_path):
    """FULL_SHARD's three runs spread 50% of their median: the terminal said so, the report
    did not (its weak-scaling table had no spread, its runs section an unnamed maximum); now
    both give one sentence, the table a spread and a flag per point."""
    from vitfsdp.analysis.tables import noise_lines

    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0, 101.0, 99.0],
                              ("FULL_SHARD", 1): [80.0, 100.0, 130.0], ("DDP", 2): [190.0]})
    tables = study_tables(df, 1000)
    which = ("repeats spread more than 10% of their median: vit_tiny FULL_SHARD at 1 node(s) "
             "(50%)")
    assert f"noisy: {which}" in noise_lines(tables)
    sections = {s.title: s for s in report_sections(tables, 1000)}
    weak = sections["Weak scaling"]
    assert f"**Noisy (1 of 2 points that ran at least twice):** {which} (`repeat spread`" in (
        weak.text)
    rows = weak.table.set_index(["configuration", "nodes"])
    assert rows.loc[("FULL_SHARD", "1"), ["repeat spread", "noisy"]].tolist() == ["50%", "True"]
    assert rows.loc[("DDP", "1"), ["repeat spread", "noisy"]].tolist() == ["2%", "False"]
    assert rows.loc[("DDP", "2"), ["repeat spread", "noisy"]].tolist() == ["-", "-"]
    assert ("(at most 50.0%, vit_tiny FULL_SHARD at 1 node(s); `ips_repeat_spread`)"
            in sections["Runs"].text)
    quiet, _ = _sweep(tmp_path / "quiet", {("DDP", 1): [100.0, 101.0, 99.0]})
    weak = {s.title: s for s in report_sections(study_tables(quiet, 1000), 1000)}["Weak scaling"]
    assert ("No point's repeats spread more than 10% of their median (`noisy`, 1 point that "
            "ran at least twice).") in weak.text


def test_the_tables_say_which_runs_did_not_complete(tmp_path):
    """DDP ran out of memory in 3 of 3 runs at 4 nodes, FULL_SHARD failed 1 of 3 at 2: the
    best section named HYBRID_2GPU fastest at 4 nodes and the memory table had no DDP row
    there, neither saying why, and the weak-scaling table showed FULL_SHARD's 2 repeats
    with no failure; now each says it, read from the runs."""
    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0, 101.0, 99.0], ("DDP", 2): [190.0, 191.0, 189.0],
                              ("FULL_SHARD", 2): [170.0, 171.0],
                              ("HYBRID_2GPU", 4): [340.0, 341.0, 339.0]})
    for name, strategy, nodes, repeat, status in (("f", "FULL_SHARD", 2, 2, "failed"),
                                                  *((f"o{r}", "DDP", 4, r, "oom")
                                                    for r in range(3))):
        info = run_info(strategy, nodes)
        info["config"]["repeat"] = repeat
        write_run(tmp_path / name, info, None, status=status)
    sections = {s.title: s for s in report_sections(study_tables(collect_runs(tmp_path), 1000),
                                                    1000)}
    said = (" **Not completed, by node count** (runs.csv `status`; why: failures.csv): At 2 "
            "node(s): vit_tiny FULL_SHARD 1 of 3 failed. At 4 node(s): vit_tiny DDP 3 of 3 oom "
            "(none completed). A configuration none of whose runs completed at a node count ")
    best = sections["Best configuration per model and node count"].text
    assert said + "is not ranked there" in best
    assert said + "has no row there" in sections["Memory"].text
    weak = sections["Weak scaling"].table.set_index(["configuration", "nodes"])
    assert weak.loc[("FULL_SHARD", "2"), ["repeats", "runs failed"]].tolist() == ["2", "1"]
    assert weak.loc[("DDP", "1"), "runs failed"] == "0"
    assert "runs beside other work" not in weak  # none competed


def test_runs_record_what_they_competed_with_and_a_loaded_host_is_named(tmp_path):
    from vitfsdp.analysis.tables import noise_lines, study_tables

    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0, 101.0]})
    assert df["host_load_1m"].notna().all()  # os.getloadavg at the run's start and end
    tables = study_tables(df.assign(host_cpus=2, ranks_per_host=2, host_load_1m=[0.5, 5.0]))
    (line,) = noise_lines(tables)
    assert line.startswith("loaded: 1 run(s) started or ended with the host's load average")
    assert noise_lines(study_tables(df.assign(host_cpus=2, host_load_1m=[0.5, 1.5]))) == []
    # its own 2 ranks busy on 2 cores (load 3.5 < 2 cores + 2 ranks): nothing else competed
    assert noise_lines(study_tables(df.assign(host_cpus=2, ranks_per_host=2,
                                              host_load_1m=[0.5, 3.5]))) == []
    # where the launcher measured the other work (host.json), the load average is not used
    assert noise_lines(study_tables(df.assign(host_cpus=2, ranks_per_host=2, host_other_cpus=0.1,
                                              host_load_1m=[0.5, 5.0]))) == []


def test_other_work_beside_a_local_point_makes_it_not_a_result(tmp_path):
    """host.json (the local launcher's): other processes' cores while the point ran. Beyond
    25% of the host's cores the run is named in the terminal, and the report opens with it."""
    import json

    from vitfsdp.analysis.tables import competition_text, noise_lines, study_tables

    for name, other in (("DDP_1_r0", 0.9), ("DDP_1_r1", 0.05)):
        info = run_info("DDP", 1)
        info["config"]["repeat"] = int(name[-1])
        write_run(tmp_path / name, info, 100.0)
        (tmp_path / name / "host.json").write_text(json.dumps({"other_cpus": other}))
    df = collect_runs(tmp_path).assign(host_cpus=2)
    assert sorted(df["host_other_cpus"]) == [0.05, 0.9]
    text = competition_text(df)
    assert text.startswith("other work competed with 1 of 2 runs (it kept 0.9-0.9 of the "
                           "host's 2 cores busy"), text
    assert f"NOT A RESULT: {text}" in noise_lines(study_tables(df))
    sections = report_sections(study_tables(df, 1000), 1000)
    assert sections[0].title == "Not a result: other work competed"
    weak = {s.title: s for s in sections}["Weak scaling"].table
    assert weak["runs beside other work"].tolist() == ["1"]  # shown where any run competed
    assert competition_text(df.assign(host_other_cpus=0.49)) is None  # 24.5% of 2 cores
    assert "Not a result" not in report_sections(
        study_tables(df.assign(host_other_cpus=0.49), 1000), 1000)[0].title


def test_the_sweep_says_so_as_a_point_ends(tmp_path):
    import json

    from vitfsdp.sweep.local import _other_work

    assert _other_work(tmp_path, {}) == ""  # no host.json: a point of another launcher
    (tmp_path / "host.json").write_text(json.dumps({"other_cpus": 1.24, "host_cpus": 2}))
    assert _other_work(tmp_path, {}) == ("; NOT A RESULT: other work kept 1.2 of this host's 2 "
                                     "cores busy")
    (tmp_path / "host.json").write_text(json.dumps({"other_cpus": 0.23, "host_cpus": 2}))
    assert _other_work(tmp_path, {}) == ""  # the most a quiet demo's point measured


def test_the_sweep_judges_a_point_by_its_windows_as_the_analysis_does(tmp_path):
    """The end-of-point line read host.json's whole-point figure while the analysis judges
    a run by its measured windows (9339183): a run whose start-up competed with a busy loop
    but whose windows ran clear (0.97 cores over the point, 0.13 over its windows, measured)
    was called NOT A RESULT as it ended and a result in the report. Both now judge the
    windows where they recorded other work; warm-up windows count for neither."""
    import json

    from vitfsdp.sweep.local import _other_work

    (tmp_path / "host.json").write_text(json.dumps({"other_cpus": 0.97, "host_cpus": 2}))
    windows = [{"warmup": True, "time_s": 1.0, "host_other_cpus": 1.9},
               {"time_s": 1.0, "host_other_cpus": 0.1},
               {"time_s": 1.0, "host_other_cpus": 0.16}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    assert _other_work(tmp_path, {}) == ""
    windows[1]["host_other_cpus"] = 1.1
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    assert _other_work(tmp_path, {}) == ("; NOT A RESULT: other work kept 0.6 of this host's 2 "
                                     "cores busy during its timed windows")


def test_other_work_is_the_hosts_busy_time_less_the_points_own(tmp_path, monkeypatch):
    """OtherWork: /proc/stat's busy ticks (user, nice, system, steal; not idle, iowait, irq,
    softirq) over the interval, less this process's and its children's CPU seconds."""
    import os

    from vitfsdp import records

    tick = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"

    def ticks(user, system, steal, idle=0, softirq=0):
        stat.write_text(f"cpu  {user} 0 {system} {idle} 0 0 {softirq} {steal} 0 0\ncpu0 0\n")

    own = iter([10.0, 13.0])
    clock = iter([100.0, 104.0])
    monkeypatch.setattr(records, "own_cpu_s", lambda: next(own))
    monkeypatch.setattr(records.time, "monotonic", lambda: next(clock))
    ticks(0, 0, 0)
    work = records.OtherWork(host_cpus=2, stat=stat)
    # 8 busy CPU-seconds in 4 s (2 of them stolen), 3 of them the point's; idle and softirq
    # ticks count for nothing
    ticks(4 * tick, 2 * tick, 2 * tick, idle=50 * tick, softirq=9 * tick)
    rec = work.record()
    assert (rec["wall_s"], rec["host_busy_cpu_s"], rec["own_cpu_s"]) == (4.0, 8.0, 3.0)
    assert (rec["other_cpu_s"], rec["other_cpus"]) == (5.0, 1.25)
    assert records.host_busy_cpu_s(tmp_path / "absent") is None


def test_a_cpu_runs_provenance_names_no_gpu_stack(tmp_path):
    """A CUDA build of torch on a machine without a GPU reports its CUDA version: a CPU
    run's versions leave it (and ROCm, NCCL) out; a GPU run's keep it."""
    for device in ("cpu", "cuda"):
        info = run_info("DDP", 1, device=device)
        info["versions"] = {"python": "3.11.7", "torch": "2.14.1+cu130", "cuda": "13.0",
                            "nccl": "2.28.9"}
        write_run(tmp_path / device, info, 10.0)
    versions = collect_runs(tmp_path).set_index("device_type")["versions"]
    assert versions["cpu"] == "python 3.11.7, torch 2.14.1+cu130"
    assert versions["cuda"] == "python 3.11.7, torch 2.14.1+cu130, cuda 13.0, nccl 2.28.9"


def test_the_bound_on_other_work_is_one_predicate_unknown_is_not_competed():
    from vitfsdp.core.throughput import competed

    assert competed(0.51, 2) and not competed(0.5, 2)  # 25% of 2 cores
    assert not any(competed(o, c) for o, c in ((None, 2), (float("nan"), 2), (1.0, None),
                                               (1.0, 0), (1.0, float("nan"))))
    # runs.csv's nullable columns: a Ctrl-C'd local point has host.json's other_cpus but no
    # host_cpus, read back as pandas' NA (whose truth value raises)
    import pandas as pd

    from vitfsdp.analysis.tables import competed_runs

    assert not competed(0.6, pd.NA) and not competed(pd.NA, 2)
    runs = pd.DataFrame({"host_other_cpus": [0.6, 1.2], "host_cpus": [None, 2]}).astype(
        {"host_cpus": "Int64"})
    assert competed_runs(runs).index.tolist() == [1]


def test_a_point_that_ran_once_draws_its_windows_and_repeats_draw_theirs(tmp_path):
    """One run (windows 149-151 around 150, 1.3%: under the 2% a bar needs; 40-42 around
    41, 4.9%) draws a thin uncapped bar over its windows, through its point
    (test_figures_weak_scaling); two runs (100 and 110) a capped bar over the runs, and the
    caption names each kind."""
    from vitfsdp.analysis.figures import plot_weak_scaling

    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0, 110.0], ("DDP", 2): [41.0],
                              ("DDP", 4): [150.0]})
    fig = plot_weak_scaling(df)
    assert {"repeats", "windows"} <= set(fig.drawn_kinds)
    bars = {}
    for container in fig.axes[0].containers:
        (segments,) = container.lines[2]
        for (x, low), (_, high) in segments.get_segments():
            bars[round(x)] = (low, high, len(container.lines[1]), x)  # caps drawn
    assert bars[1] == (pytest.approx(100.0), pytest.approx(110.0), 2, 1.0)  # at the point
    assert bars[2] == (pytest.approx(40.0), pytest.approx(42.0), 0, 2.0)  # at the point
    assert 4 not in bars
    only_repeats, _ = _sweep(tmp_path / "r", {("DDP", 1): [100.0, 110.0]})
    assert "windows" not in plot_weak_scaling(only_repeats).drawn_kinds


def test_the_calibration_names_what_the_plan_rested_on_and_a_noisy_probe(tmp_path):
    from vitfsdp.analysis.report import source_text

    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0, 110.0]})
    assert source_text(df) == ""  # no prediction recorded
    quiet = "probe:runs/demo/probe.json (2026-11-28T20:00:00Z; repeats within 4%)"
    text = source_text(df.assign(pred_source=[quiet, "profile"]))
    assert text == f" Predictions from: {quiet} (1 run); profile (1 run)."
    noisy = "probe:runs/demo/probe.json (NOISY: repeats spread 34% > 10%)"
    text = source_text(df.assign(pred_source=noisy))
    assert text.startswith(f" Predictions from: {noisy} (2 runs). **A noisy probe:**")


def test_rates_keep_three_digits_below_a_hundred_images_per_second(tmp_path):
    """The CPU demo's 11-16 images/s printed as whole numbers hid the differences its text
    quotes (16.3 against 14.6): tables show three significant digits below 100."""
    from vitfsdp.analysis.report import _with_range, display
    from vitfsdp.analysis.schema import format_rate

    assert [format_rate(v) for v in (1234.4, 123.4, 16.34, 0.5123)] == [
        "1,234", "123", "16.3", "0.512"]
    _, points = _sweep(tmp_path, {("DDP", 1): [16.3, 14.6], ("DDP", 2): [1234.4]})
    shown = display(_with_range(points), ["nodes", "ips", "ips_range", "ideal_ips"])
    assert shown.values.tolist() == [["1", "15.4", "14.6-16.3", "15.4"],
                                     ["2", "1,234", "-", "30.9"]]


def test_the_report_names_the_commit_of_the_code_that_wrote_it(tmp_path):
    """The runs' commit says what measured; the analysis code's, what drew and judged (a
    report re-written later may differ): both are in the provenance table."""
    from vitfsdp.analysis.report import provenance_table
    from vitfsdp.provenance import git_state

    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0]})
    rows = dict(provenance_table(df).values.tolist())
    state = git_state()
    assert state["commit"], "a checkout or a built package names its commit"
    assert rows["analysis code"].startswith(state["commit"][:12])
    assert rows["analysis code"].endswith(
        "+dirty (uncommitted changes: this analysis code is not that commit's)"
        if state["dirty"] else state["commit"][:12])


def test_the_provenance_says_what_a_paper_needs_to_rebuild_the_runs(tmp_path):
    """A dirty commit said '5e5bf291d51e+dirty' and no more; the devices 'AMD EPYC' with no
    core count; the analysis command was not given. Now each is said in words."""
    from vitfsdp.analysis.report import provenance_table
    from vitfsdp.provenance import command_line

    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0], ("DDP", 2): [190.0]})
    df = df.assign(git_commit="5e5bf291d51e+dirty", device_name="AMD EPYC",
                   host_cpus=[64, pd.NA])
    command = command_line(["python", "-m", "vitfsdp.analysis", "runs/my sweep", "--report",
                            "hf.token=s3cret"])
    rows = dict(provenance_table(df, command=command).values.tolist())
    assert rows["git commit"] == ("5e5bf291d51e+dirty (uncommitted changes: the runs' code is "
                                  "not that commit's)")
    assert rows["devices"] == "AMD EPYC (host: 64 CPUs) (1 runs); AMD EPYC (1 runs)"
    assert rows["analysis command"] == ("`python -m vitfsdp.analysis 'runs/my sweep' --report "
                                        "'hf.token=<redacted>'`")
    clean = dict(provenance_table(df.assign(git_commit="5e5bf291d51e")).values.tolist())
    assert clean["git commit"] == "5e5bf291d51e" and "analysis command" not in clean


def test_a_line_whose_smallest_point_failed_says_its_ideal_starts_later(tmp_path):
    """FULL_SHARD's 1-node run ran out of memory, so its ideal starts at 2 nodes (100%
    there): the report says its efficiencies are over another baseline than DDP's.
    HYBRID_2GPU never ran at 1 node: the report said its smaller count 'did not complete'
    too; now it says it was not run there."""
    from vitfsdp.analysis.report import baseline_text

    write_run(tmp_path / "oom", run_info("FULL_SHARD", 1), None, status="oom")
    for strategy, nodes, ips in (("FULL_SHARD", 2, 200.0), ("FULL_SHARD", 4, 380.0),
                                 ("DDP", 1, 100.0), ("DDP", 2, 190.0),
                                 ("HYBRID_2GPU", 2, 195.0), ("HYBRID_2GPU", 4, 370.0)):
        write_run(tmp_path / f"{strategy}_{nodes}", run_info(strategy, nodes), ips)
    df = collect_runs(tmp_path)
    points = points_table(df)
    assert points.set_index(["strategy", "nodes"]).loc[("FULL_SHARD", 2),
                                                       "scaling_efficiency"] == 1.0
    assert baseline_text(points, df) == (
        " Ideal from a larger node count: FULL_SHARD of vit_tiny from 2 nodes (it did not "
        "complete at 1 node), HYBRID_2GPU of vit_tiny from 2 nodes (it was not run at 1 node); "
        "these efficiencies are over another baseline and do not compare with the other "
        "lines'.")
    write_run(tmp_path / "DDP_8", run_info("DDP", 8), 700.0)
    write_run(tmp_path / "FULL_SHARD_16", run_info("FULL_SHARD", 16), 1300.0)
    late = collect_runs(tmp_path)
    late = late[(late["strategy"] != "FULL_SHARD") | late["nodes"].isin([1, 16])]
    assert baseline_text(points_table(late), late) == (
        " Ideal from a larger node count: FULL_SHARD of vit_tiny from 16 nodes (it did not "
        "complete at 1 node and was not run at 2, 4 and 8 nodes), HYBRID_2GPU of vit_tiny "
        "from 2 nodes (it was not run at 1 node); these efficiencies are over another "
        "baseline and do not compare with the other lines'.")
    weak = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}["Weak scaling"].text
    assert "FULL_SHARD of vit_tiny from 2 nodes" in weak
    complete = points[points["strategy"] == "DDP"]
    assert baseline_text(complete, df[df["strategy"] == "DDP"]) == ""


def test_the_sections_name_only_what_the_points_measured(tmp_path):
    """CPU ranks: FLOP rates but no MFU (no peak), resident memory, no allocator counts; a
    GPU point with its peak known: MFU, allocated bytes."""
    from vitfsdp.analysis.report import _flops_text, _memory_text

    _, points = _sweep(tmp_path, {("DDP", 1): [100.0]})
    cpu = points.assign(tflops_per_gpu=0.01, mfu=float("nan"), peak_mem_kind="rss")
    assert _flops_text(cpu) == (", model FLOP rates (3 x forward FLOPs; no MFU: the device's "
                                "peak is not known, as for CPU ranks)")
    assert "resident memory (RSS)" in _memory_text(cpu)
    assert "allocator retries" not in _memory_text(cpu)
    gpu = cpu.assign(mfu=0.4, peak_mem_kind="allocated", alloc_retries=0)
    assert _flops_text(gpu).endswith(") and MFU (over the device's data-sheet peak)")
    assert "max_memory_allocated" in _memory_text(gpu)
    assert _memory_text(gpu).endswith("allocator retries and OOMs.")
    assert _flops_text(cpu.assign(tflops_per_gpu=float("nan"))) == ""
    # the table's hardware column is defined wherever it is shown, HFU or not
    hardware = ("; hardware FLOP rates (the `(hardware)` column) count what the device ran: "
                "the model FLOPs plus the forward that activation checkpointing recomputes in "
                "backward (each checkpointed block's forward but its MLP output projection), "
                "so they equal the model rates where no block is checkpointed")
    assert "hardware" not in _flops_text(cpu)
    assert _flops_text(cpu.assign(hw_tflops_per_gpu=0.01)).endswith(hardware)
    assert _flops_text(gpu.assign(hw_tflops_per_gpu=0.5, hfu=0.4)).endswith(
        hardware + "; HFU is the hardware rate over the same peak")
    # a JAX rank's RSS holds torch too (its data pipeline): said where JAX ran on CPU ranks
    assert "counts torch too" not in _memory_text(cpu)
    assert "counts torch too" in _memory_text(cpu.assign(framework="jax"))
    assert "counts torch too" not in _memory_text(gpu.assign(framework="jax"))


def test_a_prefetch_variant_is_slower_only_beyond_the_spread(tmp_path):
    """BACKWARD_PRE (150-152) against BACKWARD_POST (100-101), four runs each: slower as a
    result; NONE ran once at 149 (windows 148-150, touching PRE's 150-152): no different.
    With three variants the fastest is picked from three, so each comparison may rest on a
    chance of 5% (4 runs each: 1 in 35), not 10% (3 each: 1 in 10, too few here)."""
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import prefetch_table

    for prefetch, values in (("BACKWARD_PRE", [150.0, 152.0, 151.0, 151.5]),
                             ("BACKWARD_POST", [100.0, 101.0, 100.5, 100.5]), ("NONE", [149.0])):
        for repeat, value in enumerate(values):
            info = run_info("FULL_SHARD", 1, prefetch=prefetch)
            info["config"]["repeat"] = repeat
            write_run(tmp_path / f"{prefetch}_r{repeat}", info, value)
    df = collect_runs(tmp_path)
    points = points_table(df)
    table = prefetch_table(points).set_index("backward_prefetch")
    assert table["vs_best"].to_dict() == {"BACKWARD_PRE": "", "BACKWARD_POST": BEYOND,
                                          "NONE": WITHIN}
    assert table.loc["BACKWARD_POST", "ips_vs_best"] == pytest.approx(100.5 / 151.25)
    three = points.assign(num_repeats=points["num_repeats"].clip(upper=3),
                          runs_judged=points["runs_judged"].clip(upper=3))
    assert prefetch_table(three).set_index("backward_prefetch").loc[
        "BACKWARD_POST", "vs_best"] == FEW_RUNS  # 1 in 10 > 10% / 2
    assert prefetch_table(points, noise=1.6).loc[1, "vs_best"] == IN_NOISE  # POST: 1.50x
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    text = sections["Prefetch ablation"].text
    assert ("Slower than its group's fastest variant, as a result: BACKWARD_POST, limit=True "
            "(FULL_SHARD, 1 node(s): 66% of the fastest).") in text
    assert ("Against their group's fastest, the 2 slower variant(s): within the spread (no "
            "difference): 1; not established: 0; beyond the spread: 1.") in text


def _error_bars(ax) -> dict[float, tuple[float, float, int]]:
    """The error bars an axes drew: x -> (low, high, caps drawn)."""
    bars = {}
    for container in ax.containers:
        if not hasattr(container, "has_yerr"):
            continue  # a bar chart's bars
        (segments,) = container.lines[2]
        for (x, low), (_, high) in segments.get_segments():
            bars[round(x, 3)] = (low, high, len(container.lines[1]))
    return bars


def test_the_tflops_figure_draws_repeats_and_one_runs_windows(tmp_path):
    """TFLOP/s moves with images/s at a fixed model and world: DDP at 1 node (2 ranks) ran
    twice (100, 110 images/s), at 2 nodes once (41, windows 40-42): a capped bar over the
    runs at 2 ranks, a thin one over the windows (scaled by 40/41 and 42/41) through the
    point at 4 ranks (test_figures_tflops). Before, the figure drew neither."""
    from vitfsdp.analysis.figures import plot_tflops

    df, _ = _sweep(tmp_path, {("DDP", 1): [100.0, 110.0], ("DDP", 2): [41.0]})
    fig = plot_tflops(df.assign(tflops_per_gpu=df["ips"] / 100))  # the records hold none
    assert {"repeats", "windows"} <= set(fig.drawn_kinds)
    bars = _error_bars(fig.axes[0])
    assert bars[2.0] == (pytest.approx(1.0), pytest.approx(1.1), 2)
    assert bars[4.0] == (pytest.approx(0.40), pytest.approx(0.42), 0)


def test_ablation_bars_draw_one_runs_windows_thin_and_repeats_capped(tmp_path):
    """Prefetch: BACKWARD_PRE ran twice (150, 160), NONE once (41, windows 40-42, 4.9%),
    BACKWARD_POST once (150, windows 149-151, 1.3%: under the 2% a bar needs): a capped bar,
    a thin uncapped one, none. Recipe: the baseline twice (100, 110), a step once at 41.
    Before, one-run bars drew nothing and under-2% repeats drew a bar."""
    from vitfsdp.analysis.figures import plot_prefetch, plot_recipe

    for prefetch, values in (("BACKWARD_PRE", [150.0, 160.0]), ("NONE", [41.0]),
                             ("BACKWARD_POST", [150.0])):
        for repeat, value in enumerate(values):
            info = run_info("FULL_SHARD", 1, prefetch=prefetch)
            info["config"]["repeat"] = repeat
            write_run(tmp_path / "p" / f"{prefetch}_r{repeat}", info, value)
    bars = sorted(_error_bars(plot_prefetch(collect_runs(tmp_path / "p")).axes[0]).values())
    assert bars == [(pytest.approx(40.0), pytest.approx(42.0), 0),
                    (pytest.approx(150.0), pytest.approx(160.0), 2)]
    for name, values in (("r", [100.0, 110.0]), ("r_1_amp", [41.0])):
        for repeat, value in enumerate(values):
            info = run_info("DDP", 1)
            info["config"].update(repeat=repeat, experiment=name)
            write_run(tmp_path / "r" / f"{name}_r{repeat}", info, value)
    fig = plot_recipe(collect_runs(tmp_path / "r"))
    bars = sorted(_error_bars(fig.axes[0]).values())
    assert bars == [(pytest.approx(40 / 105), pytest.approx(42 / 105), 0),
                    (pytest.approx(100 / 105), pytest.approx(110 / 105), 2)]
    assert {"repeats", "windows"} <= set(fig.drawn_kinds)
