"""``python -m vitfsdp.analysis RUNS_CSV... --out DIR``: the tables, figures and report
rebuilt from a runs.csv an analysis wrote earlier (real records written with RunRecords,
analysed, exported), columns newer than the export read as missing; a CSV that is not a
runs.csv refused with one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.fake_records import run_info, write_run
from vitfsdp.analysis.__main__ import REBUILT_FILE
from vitfsdp.analysis.__main__ import main as analysis_main

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = REPO_ROOT / "docs" / "data"
#: Global images/s of each repeat per (strategy, nodes); None: a run out of memory.
IPS = {("FULL_SHARD", 1): [100.0, 104.0, 98.0], ("FULL_SHARD", 2): [180.0, 190.0, None],
       ("DDP", 1): [120.0, 118.0], ("DDP", 2): [230.0, 236.0], ("HYBRID_2GPU", 2): [None]}
#: Columns a runs.csv of today has that an older export lacks (the H100 exports of
#: 2026-11-26 lack these among 17).
DROPPED = ["train.steps", "point_id", "device_busy_frac", "device_busy_min_frac",
           "host_other_cpus", "host_other_windows", "num_attempts", "attempts_differ",
           "memory_limit_gib", "attempt_of"]
#: points.csv columns made from the dropped ones: the rest must come back the same.
FROM_DROPPED = {"device_busy_frac", "device_busy_min_frac", "host_bound", "baseline_host_bound",
                "runs_resumed", "attempts_differ", "memory_limit_gib", "runs_contended"}


@pytest.fixture
def analysed(tmp_path: Path) -> Path:
    """A GPU sweep with repeats, a failed repeat and a failed point, analysed from its
    records; returns the analysis directory (runs.csv, points.csv, the figures)."""
    sweep = tmp_path / "sweep"
    for (strategy, nodes), values in IPS.items():
        for repeat, ips in enumerate(values):
            info = run_info(strategy, nodes, device="cuda")
            info["config"]["repeat"] = repeat
            write_run(sweep / f"{strategy}_{nodes}_r{repeat}", info, ips, busy=0.9,
                      status="completed" if ips is not None else "oom")
    assert analysis_main([str(sweep), "--out", str(tmp_path / "records"), "--jobs", "1"]) == 0
    return tmp_path / "records"


def _export(analysed: Path, dest: Path, drop: list[str]) -> Path:
    """runs.csv of ``analysed`` without the ``drop`` columns, as an export in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "gpu-h100-2026-11-26-sweep-runs.csv"
    pd.read_csv(analysed / "runs.csv").drop(columns=drop).to_csv(path, index=False)
    return path


def _pngs(out: Path) -> set[str]:
    return {p.stem for p in out.glob("*.png")}


def test_a_whole_runs_csv_rebuilds_the_same_tables_and_figures(analysed: Path,
                                                              tmp_path: Path) -> None:
    """The same tables but for the predictions, which are this checkout's plan recomputed
    from each row's settings (the fake records' configs are too partial to predict from)."""
    out = tmp_path / "again"
    assert analysis_main([str(analysed / "runs.csv"), "--out", str(out), "--jobs", "1"]) == 0
    for table in ("runs", "points", "scaling", "best", "failures", "equivalence"):
        after, before = pd.read_csv(out / f"{table}.csv"), pd.read_csv(analysed / f"{table}.csv")
        pred = [c for c in before.columns if c.startswith("pred_")]
        pd.testing.assert_frame_equal(after.drop(columns=pred), before.drop(columns=pred),
                                      obj=table)
    runs = pd.read_csv(out / "runs.csv")
    assert runs["pred_ips"].notna().all()
    assert runs["pred_source"].str.startswith("profile:cuda8 (recorded").all()
    assert _pngs(out) == _pngs(analysed) >= {"weak_scaling", "efficiency", "memory", "loss"}


def test_an_export_without_newer_columns_rebuilds_the_same_points(
        analysed: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    export = _export(analysed, tmp_path / "data", DROPPED)
    out = tmp_path / "again"
    assert analysis_main([str(export), "--out", str(out), "--jobs", "1", "--report"]) == 0
    before, after = pd.read_csv(analysed / "points.csv"), pd.read_csv(out / "points.csv")
    # the predictions: this checkout's plan from each row's settings (the fake records'
    # configs are too partial to predict from)
    kept = [c for c in before.columns if c not in FROM_DROPPED and not c.startswith("pred_")]
    assert len(after) == len(before) == 4
    pd.testing.assert_frame_equal(after[kept], before[kept])
    assert after["pred_ips"].notna().all() and before["pred_ips"].isna().all()
    assert before["device_busy_frac"].eq(0.9).all() and after["device_busy_frac"].isna().all()
    assert before["host_bound"].eq(False).all() and after["host_bound"].isna().all()  # unjudged
    assert _pngs(out) == _pngs(analysed)
    said = (out / REBUILT_FILE).read_text()
    assert f"export {export} (dated 2026-11-26)" in said
    assert "device_busy_frac" in said and "not measured" in said
    assert "no point is judged host-bound" in said and "attempt_of" not in said
    assert ("the predictions (pred_*) are this checkout's plan (python -m vitfsdp.plan) "
            "recomputed from the export's settings") in said and "every run composed" in said
    report = (out / "report.md").read_text()
    assert "## Rebuilt from a runs.csv export" in report
    # the first section, the provenance table and every figure's caption
    assert report.lower().count(f"rebuilt from the runs.csv export {export}".lower()) == (
        2 + len(_pngs(out)))
    assert "no point is judged host-bound" in capsys.readouterr().out
    # the runs.csv rebuilt from it (those columns now there, empty) reads back the same
    third = tmp_path / "third"
    assert analysis_main([str(out / "runs.csv"), "--out", str(third), "--jobs", "1"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(third / "points.csv"), after)


def test_a_csv_that_is_not_a_runs_csv_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    summary = tmp_path / "cpu-demo-2026-11-26.csv"
    summary.write_text("demo,strategy,nodes,ips,scaling_efficiency\ndemo1,DDP,1,10.4,1.0\n")
    out = tmp_path / "out"
    assert analysis_main([str(summary), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {summary} is not a runs.csv")
    assert "run_dir, status, model" in err
    assert not out.exists()


def test_a_dir_of_exports_names_the_command_that_reads_them(
        analysed: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    export = _export(analysed, tmp_path / "data", [])
    shutil.copy(export, tmp_path / "data" / "cpu-demo-2026-11-26.csv")  # a runs.csv too
    (tmp_path / "data" / "summary.csv").write_text("demo,ips\ndemo1,10.4\n")
    header = Path(export).read_text().splitlines()[0]  # an analysis's empty attempts.csv
    (tmp_path / "data" / "attempts.csv").write_text(header + "\n")
    assert analysis_main([str(tmp_path / "data"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no run.json" in err and "summary.csv" not in err
    assert "attempts.csv" not in err  # its header only: the command would fail on it
    assert err.endswith(f"{tmp_path / 'data' / 'cpu-demo-2026-11-26.csv'} {export} --out DIR")


def test_exports_of_two_dates_get_a_command_each(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """docs/data holds H100 exports of 2026-11-26 and 2026-11-27: one command read them
    together, and the day-apart runs of a point were pooled as repeats (a reviewer)."""
    assert analysis_main([str(DATA), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out DIR-2026-11-26; python -m vitfsdp.analysis" in err, err
    assert "--out DIR-2026-11-27 (one per date" in err, err


@pytest.mark.parametrize("exports", [["gpu-h100-2026-11-26-sweep-runs.csv"],
                                     ["gpu-h100-2026-11-26-jax-runs.csv"],
                                     ["gpu-h100-2026-11-26-sweep-runs.csv",
                                      "gpu-h100-2026-11-26-jax-runs.csv"]])
def test_the_committed_h100_exports_rebuild(exports: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The command docs/benchmarks.md gives: every figure the runs hold is drawn (one node:
    no efficiency; no loss curves in a runs.csv), and the report says what it lacked; the
    terminal says why ORNL's figures are not compared (one GPU against 8 GCDs a node), where
    it said nothing once none was compared."""
    paths = [str(DATA / name) for name in exports]
    assert analysis_main([*paths, "--out", str(tmp_path), "--jobs", "1", "--report"]) == 0
    ornl = "not the same work a device, no ratio" in capsys.readouterr().out
    assert ornl == ("gpu-h100-2026-11-26-sweep-runs.csv" in exports)  # PyTorch's ViT-Huge
    assert _pngs(tmp_path) == {"weak_scaling", "memory", "tflops"}
    said = (tmp_path / REBUILT_FILE).read_text()
    assert "(dated 2026-11-26)" in said and "17 column(s)" in said  # pred_source recomputed
    assert "device_busy_frac" in said and "the loss figure is not drawn" in said
    points = pd.read_csv(tmp_path / "points.csv")  # each export: one completed run a point
    assert len(points) == sum(len(pd.read_csv(p)) for p in paths)
    assert points["ips"].notna().all()


def test_every_figure_of_a_rebuild_says_so_in_its_footer() -> None:
    """The report's captions said the figures were rebuilt from an export, the PNGs alone
    did not (a helper's note): the runs' frame carries the line, every footer adds it."""
    from vitfsdp.analysis import plot_memory, plot_weak_scaling
    from vitfsdp.analysis.collect import absent_lines, read_runs_csv
    from vitfsdp.analysis.figures.finish import REBUILT_ATTR

    runs, absent = read_runs_csv([str(DATA / "gpu-h100-2026-11-26-sweep-runs.csv")])
    runs.attrs[REBUILT_ATTR] = absent_lines(absent, runs)[0]
    for plot in (plot_weak_scaling, plot_memory):
        footer = " ".join(plot(runs).legends[0].get_title().get_text().split())
        assert "rebuilt from the runs.csv export" in footer, footer
        assert "(dated 2026-11-26), not from the run records" in footer, footer


def test_a_rebuild_into_the_dir_it_reads_is_refused(analysed: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    before = (analysed / "runs.csv").read_bytes()
    with pytest.raises(SystemExit) as done:
        analysis_main([str(analysed / "runs.csv"), "--out", str(analysed)])
    assert done.value.code == 2
    assert "would write over" in capsys.readouterr().err
    assert (analysed / "runs.csv").read_bytes() == before


def test_a_rebuilt_runs_csv_rebuilt_again_says_what_it_could_not_judge(tmp_path: Path) -> None:
    """The runs.csv of a rebuild holds the export's missing columns, empty: rebuilt again,
    its rebuilt_from.txt lost every 'without device_busy_frac ...' line (a reviewer's run)."""
    first, second = tmp_path / "first", tmp_path / "second"
    export = str(DATA / "gpu-h100-2026-11-26-sweep-runs.csv")
    assert analysis_main([export, "--out", str(first), "--jobs", "1"]) == 0
    assert analysis_main([str(first / "runs.csv"), "--out", str(second), "--jobs", "1"]) == 0
    for said in ((first / REBUILT_FILE).read_text(), (second / REBUILT_FILE).read_text()):
        assert "without device_busy_frac (not in the export)" in said, said
        assert "without num_attempts (not in the export)" in said, said


def test_the_h100_jax_export_reads_its_pool_as_the_limit_not_the_device() -> None:
    """The JAX export holds XLA's pool (71.26 GiB, bytes_limit) as device_memory_gib and
    the older pred_mem_metric: memory.png drew 'NVIDIA H100 ... memory (71.2617 GiB)' and
    no pool, while calibration.csv compared XLA's peak in use (a reviewer). Read back, the
    pool is the run's memory_limit_gib, its device memory unknown, its metric the rule's."""
    from vitfsdp.analysis import plot_memory
    from vitfsdp.analysis.collect import read_runs_csv

    export = pd.read_csv(DATA / "gpu-h100-2026-11-26-jax-runs.csv")
    pool = float(export.loc[export["framework"] == "jax", "device_memory_gib"].iloc[0])
    runs, _ = read_runs_csv([str(DATA / "gpu-h100-2026-11-26-jax-runs.csv")])
    jax = runs[runs["framework"] == "jax"].iloc[0]
    assert jax["memory_limit_gib"] == pytest.approx(pool) and pd.isna(jax["device_memory_gib"])
    assert jax["pred_mem_metric"] == "peak_mem_gib"
    torch = runs[runs["framework"] == "torch"].iloc[0]
    assert torch["device_memory_gib"] > pool and torch["pred_mem_metric"] != "peak_mem_gib"
    legend = [t.get_text() for t in plot_memory(runs).legends[0].get_texts()]
    assert any(e.startswith("XLA's pool") and f"{pool:.3g} GiB" in e for e in legend), legend
    assert not any(f"({pool:g} GiB)" in e and "memory" in e and "XLA" not in e
                   for e in legend), legend


def test_the_h100_exports_are_predicted_by_this_checkouts_plan(tmp_path: Path) -> None:
    """The README's rebuild of the H100 exports compared their own pred_* columns, written by
    an older plan (975 images/s for ViT-H/14, measured 201-293; step time median error
    -24.5%, ips up to +385%) under 'The plan's predictions' (a DGX user's review). Each row
    is now predicted by this checkout's plan from its settings; a row that cannot be
    composed has no prediction, not the export's, and the notes count it."""
    from vitfsdp.analysis.__main__ import parse_args, read_runs
    from vitfsdp.analysis.figures.finish import PREDICTED_NOTE_ATTR, REBUILT_ATTR
    from vitfsdp.plan.exported import predict_row

    exports = [DATA / "gpu-h100-2026-11-26-sweep-runs.csv",
               DATA / "gpu-h100-2026-11-26-jax-runs.csv"]
    rows = pd.concat([pd.read_csv(p, low_memory=False) for p in exports], ignore_index=True)
    rows.loc[rows["model"] == "vit_base", "precision"] = None  # 4 rows that cannot compose
    broken = tmp_path / "data" / "gpu-h100-2026-11-26-sweep-runs.csv"
    broken.parent.mkdir()
    rows.to_csv(broken, index=False)
    out = tmp_path / "out"
    assert analysis_main([str(broken), "--out", str(out), "--jobs", "1", "--report"]) == 0
    runs = pd.read_csv(out / "runs.csv").set_index("run_dir")
    export = rows.set_index("run_dir").loc[runs.index]
    base = export["model"] == "vit_base"
    assert runs.loc[base, [c for c in runs if c.startswith("pred_")]].isna().all().all()
    for run_dir, row in export[~base].iterrows():
        assert runs.loc[run_dir, "pred_ips"] == pytest.approx(predict_row(row)["pred_ips"])
        assert abs(runs.loc[run_dir, "pred_ips"] - row["pred_ips"]) > 1  # not the export's
    h14 = runs[runs["model"] == "vit_huge_patch14_224"]
    assert h14["pred_ips"].max() < 330
    assert h14["pred_source"].str.startswith("profile:cuda8 (recorded peak").all()
    said = (out / REBUILT_FILE).read_text()
    assert "the predictions (pred_*) are this checkout's plan" in said
    assert "4 of 11 run(s) could not be composed into a point: their predictions left empty" \
        in said
    report = (out / "report.md").read_text()
    first = report.split("## Rebuilt from a runs.csv export")[1].split("\n## ")[0]
    assert "4 of 11 run(s) could not be composed" in first
    calibration = pd.read_csv(out / "calibration.csv")
    assert len(calibration) == 7 and calibration["pred_ips"].lt(400).all()
    # whose plan the predictions are: on the figures that draw one, not on tflops.png
    said_by = {f: "checkout's" in (out / f"{f}.svg").read_text()
               for f in ("weak_scaling", "memory", "tflops")}
    assert said_by == {"weak_scaling": True, "memory": True, "tflops": False}
    every, _ = read_runs(parse_args([str(broken), "--out", str(tmp_path / "again")]), None)
    assert "not from the run records" in every.attrs[REBUILT_ATTR]
    footer = every.attrs[PREDICTED_NOTE_ATTR]  # only on figures that draw a prediction
    assert "predicted: this checkout's plan (profile:cuda8)" in footer
    assert "none for the 4 of 11 run(s) that could not be composed" in footer


def test_a_blank_nodes_cell_leaves_its_run_unpredicted_not_the_rebuild_failed(
        tmp_path: Path) -> None:  # fmt: skip
    """A failed run's blank nodes cell (pandas' NA in an Int64 column) raised TypeError out
    of `python -m vitfsdp.analysis export.csv` (rc 1): the run is now not composed, with
    its reason, and the rest are predicted."""
    rows = pd.read_csv(DATA / "gpu-h100-2026-11-26-sweep-runs.csv", low_memory=False)
    rows["nodes"] = rows["nodes"].astype(object)
    rows.loc[1, ["nodes", "status"]] = ["", "failed"]
    export = tmp_path / "data" / "gpu-h100-2026-11-26-sweep-runs.csv"
    export.parent.mkdir()
    rows.to_csv(export, index=False)
    out = tmp_path / "out"
    assert analysis_main([str(export), "--out", str(out), "--jobs", "1"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs["pred_ips"].isna().sum() == 1 and runs["pred_ips"].notna().sum() == 7
    assert "1 of 8 run(s) could not be composed" in (out / REBUILT_FILE).read_text()
