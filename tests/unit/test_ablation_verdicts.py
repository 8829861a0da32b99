"""What the prefetch ablation's and best.csv's verdicts say, and what they carry: each kind
of verdict counted apart in the report (never "no different" for "not established"), the
report's table with each cell's spread and runs and each variant's verdict, failed repeats
(``runs_failed``) and runs other work competed with (``runs_contended``) in points.csv,
prefetch.csv and best.csv, and the contention note of figures and the report's provenance.

The images/s are those of a 2-core CPU ablation (vit_tiny FULL_SHARD at 1 node,
3 prefetch x 2 limit_all_gathers variants, 2 repeats each; every fake run's windows are
its images/s +-1)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import ABLATION, run_info, write_ablation_run, write_run
from vitfsdp.analysis import collect_runs, plot_weak_scaling, study_tables
from vitfsdp.analysis.lines import configurations, contention_note
from vitfsdp.analysis.report import provenance_table, report_sections
from vitfsdp.analysis.tables import best_table, format_points, points_table, prefetch_table
from vitfsdp.analysis.verdict import BEYOND, FEW_RUNS, ONE_RUN, WITHIN
from vitfsdp.records import mark_failed

#: (backward_prefetch, limit_all_gathers) -> the images/s of its two repeats: PRE and NONE
#: lie below POST/True's 1,317-1,663 without overlapping it (apart, on 2 runs each: not
#: established for 6 variants), POST/False's 432-1,935 overlaps it (within the spread).
FASTEST = ("BACKWARD_POST", True)
#: best.csv's and prefetch.csv's verdict where other work competed (tables.CONTENDED).
CONTENDED = "not a result: other work competed"


def _ablation(root: Path, failed: tuple = (), other_cpus: dict | None = None) -> pd.DataFrame:
    """The ablation's runs on a 2-core host, plus a failed third repeat of each variant of
    ``failed``; ``other_cpus``: the cores other work kept busy beside each variant's runs
    (host.json, as the local launcher writes it; none: not measured)."""
    def write(prefetch, limit, repeat, ips, status="completed"):
        write_ablation_run(root, prefetch, limit, repeat, ips, status=status,
                           other_cpus=(other_cpus or {}).get((prefetch, limit)))

    for (prefetch, limit), values in ABLATION.items():
        for repeat, ips in enumerate(values):
            write(prefetch, limit, repeat, ips)
    for prefetch, limit in failed:
        write(prefetch, limit, 2, None, status="failed")
    return collect_runs(root)


def _by_variant(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_index(["backward_prefetch", "limit_all_gathers"])


def _prefetch_section(df: pd.DataFrame):
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    return sections["Prefetch ablation"]


def test_the_report_counts_each_verdict_apart_and_calls_not_established_no_difference_never(
        tmp_path):
    """5 slower variants: 1 within POST/True's spread, 4 apart but on 2 runs each, where 6
    variants need 5 each (10% / 5 comparisons: 2 / C(10, 5) = 0.8%, 2 / C(8, 4) = 2.9%).
    Before, the report said all 5 'are no different from the fastest as measured'."""
    df = _ablation(tmp_path)
    table = _by_variant(prefetch_table(points_table(df)))
    assert table["vs_best"].to_dict() == {
        **{variant: FEW_RUNS for variant in ABLATION}, FASTEST: "",
        ("BACKWARD_POST", False): WITHIN}
    text = _prefetch_section(df).text
    assert ("Against their group's fastest, the 5 slower variant(s): within the spread (no "
            "difference): 1; not established (2 runs each; 5 needed for 6 variants): 4; "
            "beyond the spread: 0.") in text
    assert "no different" not in text


def test_the_reports_prefetch_table_carries_each_cells_spread_runs_and_verdict(tmp_path):
    """Each cell: median (min–max over repeats; n); under each strategy's row, its
    variants' verdicts against the fastest; a one-run variant's span is its windows."""
    once = tmp_path / "once"
    df = _ablation(tmp_path)
    shown = _prefetch_section(df).table.set_index("configuration")
    cells = shown.loc["FULL_SHARD"]
    assert cells["BACKWARD_POST, limit=True"] == "1,490 (1,317–1,663; n=2)"
    assert cells["BACKWARD_PRE, limit=True"] == "450 (334–567; n=2)"
    verdicts = shown.loc["FULL_SHARD: vs fastest"]
    assert verdicts["BACKWARD_POST, limit=True"] == "fastest"
    assert verdicts["BACKWARD_POST, limit=False"] == WITHIN
    assert verdicts["NONE, limit=False"] == FEW_RUNS
    assert list(shown["nodes"]) == ["1", "1"]
    for prefetch, ips in (("BACKWARD_PRE", 150.0), ("NONE", 100.0)):
        write_run(once / prefetch, run_info("FULL_SHARD", 1, prefetch=prefetch), ips)
    one = _prefetch_section(collect_runs(once)).table.set_index("configuration")
    assert one.loc["FULL_SHARD", "NONE, limit=True"] == "100 (windows 99–101; n=1)"
    assert one.loc["FULL_SHARD: vs fastest", "NONE, limit=True"] == ONE_RUN


def test_a_failed_repeat_is_counted_in_points_prefetch_and_best(tmp_path):
    """The winner's third repeat failed: points.csv, prefetch.csv and best.csv count it
    (runs_failed), and the verdicts say '1 of 3 runs failed' (before: num_repeats=2 and
    nothing else)."""
    df = _ablation(tmp_path, failed=[FASTEST])
    points = _by_variant(points_table(df))
    assert points.loc[FASTEST, ["num_repeats", "runs_failed", "runs_contended"]].tolist() == [
        2, 1, 0]
    assert points["runs_failed"].sum() == 1
    prefetch = _by_variant(prefetch_table(points_table(df)))
    assert prefetch.loc[FASTEST, "runs_failed"] == 1
    assert prefetch.loc[FASTEST, "vs_best"] == "1 of 3 runs failed"
    assert prefetch.loc[("BACKWARD_POST", False), "vs_best"] == WITHIN
    best = best_table(points_table(df)).iloc[0]
    assert (best["num_repeats"], best["runs_failed"]) == (2, 1)
    assert best["difference"] == f"{WITHIN}; 1 of 3 runs failed"
    section = _prefetch_section(df)
    cells = section.table.set_index("configuration")
    assert cells.loc["FULL_SHARD", "BACKWARD_POST, limit=True"] == (
        "1,490 (1,317–1,663; n=2, 1 failed)")
    assert cells.loc["FULL_SHARD: vs fastest", "BACKWARD_POST, limit=True"] == (
        "fastest; 1 of 3 runs failed")
    assert "1 of 3 runs failed" in section.text
    # the runner-up's failures are named as its own
    runner = _ablation(tmp_path / "runner", failed=[("BACKWARD_POST", False)])
    assert best_table(points_table(runner)).iloc[0]["difference"] == (
        f"{WITHIN}; the runner-up: 1 of 3 runs failed")


def test_points_other_work_competed_with_are_not_ranked(tmp_path):
    """Other work kept 1.5-1.7 of the 2 cores busy beside every run (the reviewer's
    ablation): every point counts its contended runs, and no verdict ranks them."""
    busy = {variant: 1.5 + 0.04 * i for i, variant in enumerate(ABLATION)}
    df = _ablation(tmp_path, failed=[FASTEST], other_cpus=busy)
    points = _by_variant(points_table(df))
    assert points.loc[FASTEST, "runs_contended"] == 3  # the failed run competed too
    assert (points.drop(index=[FASTEST])["runs_contended"] == 2).all()
    prefetch = _by_variant(prefetch_table(points_table(df)))
    assert prefetch.loc[FASTEST, "vs_best"] == (
        "not a result: other work competed (3 of 3 runs); 1 of 3 runs failed")
    assert prefetch.loc[("BACKWARD_PRE", True), "vs_best"] == (
        "not a result: other work competed (2 of 2 runs)")
    best = best_table(points_table(df)).iloc[0]
    assert best["runs_contended"] == 3
    assert best["difference"].startswith(f"{CONTENDED} (3 of 3 runs)")
    text = _prefetch_section(df).text
    assert "not a result, other work competed: 5; within the spread (no difference): 0" in text
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    assert "**Not a result, other work competed**" in sections[
        "Best configuration per model and node count"].text


def test_a_contended_fastest_or_runner_up_leaves_the_others_unranked(tmp_path):
    """Only the fastest's runs were contended: every other variant's verdict rests on them;
    only the runner-up's: best.csv says so."""
    df = _ablation(tmp_path, other_cpus={FASTEST: 1.6})
    prefetch = _by_variant(prefetch_table(points_table(df)))
    assert prefetch.loc[("NONE", False), "vs_best"] == (
        "not a result: other work competed with the fastest (2 of 2 runs)")
    assert prefetch.loc[("NONE", False), "runs_contended"] == 0
    runner = _ablation(tmp_path / "runner", other_cpus={("BACKWARD_POST", False): 1.6})
    assert best_table(points_table(runner)).iloc[0]["difference"] == (
        "not a result: other work competed with the runner-up (2 of 2 runs)")
    quiet = _ablation(tmp_path / "quiet", other_cpus={v: 0.3 for v in ABLATION})  # 15%
    assert (points_table(quiet)["runs_contended"] == 0).all()
    assert best_table(points_table(quiet)).iloc[0]["difference"] == WITHIN


def test_the_contention_note_names_other_work_and_provenance_does_not_read_clean(tmp_path):
    """2 ranks on 2 cores (no shared cores) beside other work: the note the figures' footers
    and the report's captions end with says so, and the provenance row does not say
    'none' (before: 'shared cores: none: one rank per core or GPU', no note at all)."""
    busy = {variant: 1.5 + 0.04 * i for i, variant in enumerate(ABLATION)}
    df = _ablation(tmp_path, other_cpus=busy)
    note = contention_note(df)
    assert note == ("other work used 1.5-1.7 of 2 cores during 12 runs (cluster=local): not "
                    "a hardware measurement")
    fig = plot_weak_scaling(df)
    footer = fig.legends[0].get_title().get_text().replace("\n", " ")
    assert note in footer, footer
    rows = dict(provenance_table(df).values.tolist())
    assert rows["contention"] == note
    shared = df.assign(shared_cores="4 ranks on 2 cores", ranks_per_host=4)
    assert contention_note(shared) == (
        "4 ranks on 2 cores (cluster=local); other work used "
        "1.5-1.7 of 2 cores during 12 runs: not a hardware measurement")
    quiet = _ablation(tmp_path / "quiet", other_cpus={v: 0.3 for v in ABLATION})
    assert contention_note(quiet) is None
    assert dict(provenance_table(quiet).values.tolist())["contention"].startswith("none:")
    unmeasured = _ablation(tmp_path / "unmeasured").assign(host_load_1m=0.5)  # a quiet host
    assert "not measured" in dict(provenance_table(unmeasured).values.tolist())["contention"]
    loaded = unmeasured.assign(host_load_1m=13.5)  # a Slurm point's only sign
    assert dict(provenance_table(loaded).values.tolist())["contention"].startswith(
        "12 of 12 runs started or ended with the host's load average (13.5-13.5")
    # a GPU run's windows measure other work, but records before its host_cpus was kept
    # cannot be judged: not "none ... below the bound", which no bound had judged
    no_cores = quiet.assign(host_cpus=float("nan"), host_other_cpus=40.0)
    assert "not measured" in dict(provenance_table(no_cores).values.tolist())["contention"]


@pytest.mark.parametrize("text, kind", [
    ("", ""), (None, ""), (BEYOND, BEYOND), (f"{BEYOND}; 1 of 3 runs failed", BEYOND),
    ("1 of 3 runs failed", ""), (f"{CONTENDED} with the fastest (2 of 2 runs)", CONTENDED),
    (f"{WITHIN}; the runner-up: 1 of 4 runs failed", WITHIN),
])  # fmt: skip
def test_a_verdicts_kind_leaves_its_notes_aside(text, kind):
    from vitfsdp.analysis.tables import CONTENDED as DECLARED
    from vitfsdp.analysis.tables import verdict_kind

    assert DECLARED == CONTENDED
    assert verdict_kind(text) == kind


def test_a_run_that_never_started_counts_at_its_point_where_the_device_splits_lines(tmp_path):
    """Two H100 runs of a point completed, its third was cancelled while pending (no device,
    precision=auto unresolved), and a CPU point ran too: device_name splits the lines. The
    cancelled run belongs to the H100 point by its point_id (before: a line of its own,
    runs_failed 0, and '4 runs of 3 points')."""
    def info(device: str, repeat: int) -> dict:
        payload = run_info("DDP", 1, device=device)
        payload["config"] |= {"precision": "auto", "repeat": repeat}
        payload["config"]["cluster"]["name"] = "cuda8" if device == "cuda" else "local"
        return payload

    for repeat in (0, 1):
        write_run(tmp_path / f"gpu{repeat}", info("cuda", repeat), 100.0 + repeat)
    write_run(tmp_path / "cpu0", info("cpu", 0), 10.0)
    pending = tmp_path / "gpu2"
    pending.mkdir()
    (pending / "job.json").write_text(json.dumps({"config": info("cuda", 2)["config"]}))
    mark_failed(pending, "cancelled", "cancelled while pending", interrupted=True)
    df = collect_runs(tmp_path)
    assert df.set_index("run_dir")["device_name"].isna().sum() == 1  # runs.csv: as recorded
    points = points_table(df).set_index("device_name")
    assert points.loc["NVIDIA H100", ["num_repeats", "runs_failed"]].tolist() == [2, 1]
    assert points.loc["cpu", "runs_failed"] == 0
    labels = configurations(df)
    assert labels.nunique() == 2
    assert "4 runs of 2 points" in format_points(df, points_table(df))


def test_point_id_is_the_point_hash_rule_without_repeat(tmp_path):
    """point_id follows the sweep's config_hash rule (core.confighash.hashed_dict): a
    cluster field added empty, or one that changes no measurement (the price), leaves a
    point's runs one point; repeat alone does not make another; any measured setting does."""
    def point_id(**changes) -> str:
        info = run_info("DDP", 1)
        for key, value in changes.items():
            section, _, name = key.rpartition(".")
            (info["config"][section] if section else info["config"])[name] = value
        run_dir = tmp_path / str(len(list(tmp_path.iterdir())))
        write_run(run_dir, info, 100.0)
        return collect_runs(run_dir)["point_id"].iloc[0]

    base = point_id()
    assert point_id(repeat=2) == base
    assert point_id(**{"cluster.single_node_env": {}}) == base  # confighash.ADDED_EMPTY
    assert point_id(**{"cluster.price_per_node_hour": 3.5}) == base  # POINT_EXCLUDED
    assert point_id(precision="bf16") != base
