"""This checkout's plan for the rows of a runs.csv export (vitfsdp.plan.exported), the
composition tools/plan_check.py and the analysis rebuilt from an export share. A DGX
user's review: the rebuilt report compared the H100 exports' own pred_* columns, written by
an older plan (975 images/s for a ViT-H/14 point that measured 201-293), while the plan of
the same checkout gives 326 for it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from vitfsdp.analysis.rows import prediction
from vitfsdp.plan.__main__ import compose_points, plan_table
from vitfsdp.plan.exported import (
    PRED_COLUMNS,
    compose_row,
    predict_row,
    predicted_columns,
    row_device,
    row_overrides,
)

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"
SWEEP = DATA / "gpu-h100-2026-11-26-sweep-runs.csv"
JAX = DATA / "gpu-h100-2026-11-26-jax-runs.csv"


def _rows(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, low_memory=False)


@pytest.mark.parametrize(("framework", "compiled", "ips"), [("jax", "false", 326),
                                                            ("torch", "true", 238)])
def test_the_h14_rows_are_what_the_plan_command_prints_not_the_exports_975(
        framework: str, compiled: str, ips: float) -> None:  # fmt: skip
    """The JAX export's rows (the JAX one records no kernels.compile: false, as JAX accepts;
    the PyTorch ones compiled their blocks): each is the plan's figure for its point written
    out by hand, not the export's 975 images/s."""
    export = _rows(JAX)
    row = export[export["framework"] == framework].iloc[-1]
    assert row["pred_ips"] == pytest.approx(974.8, abs=0.1)  # the plan of its day
    p = predict_row(row)
    assert p["pred_source"] == "profile:cuda8 (recorded peak)" if framework == "jax" else True
    # python -m vitfsdp.plan, the point written out by hand
    table = plan_table(["model=vit_huge_patch14_224", "strategy=FULL_SHARD", "nodes=1",
                        "cluster=cuda8", "cluster.gpus_per_node=1", "precision=bf16",
                        f"framework={framework}", f"kernels.compile={compiled}"])
    assert p["pred_ips"] == pytest.approx(table["ips"].iloc[0])
    assert p["pred_step_time_s"] == pytest.approx(table["step_time_s"].iloc[0])
    assert p["pred_peak_mem_gib"] == pytest.approx(table["peak_mem_gib"].iloc[0])
    assert p["pred_ips"] == pytest.approx(ips, abs=1)
    assert p["pred_mem_metric"] == ("peak_mem_gib" if framework == "jax"  # XLA's peak in use
                                    else "peak_mem_reserved_gib")


def test_a_local_h100_row_gets_cuda8s_figures_and_the_same_prediction_as_its_records() -> None:
    """The exports ran under cluster=local, whose plan has no GPU peak: vit_huge DDP was
    predicted at 586 images/s from its records (the local profile) and 313 from the export
    (cuda8), measured 317. Both now go through plan.recorded_config: the run's recorded
    peak and memory, cuda8's efficiency and bandwidths (an H100)."""
    row = _rows(SWEEP).iloc[4]
    assert (row["cluster"], row["model"], row["strategy"]) == ("local", "vit_huge", "DDP")
    cfg = compose_row(row)
    assert cfg.cluster.name == "local"
    p = predict_row(row)
    assert p["pred_ips"] == pytest.approx(313, abs=1)
    assert p["pred_source"] == "profile:cuda8 (recorded peak and memory)"
    device = {"type": "cuda", "name": row["device_name"],
              "peak_flops": row["device_peak_flops"], "memory_gib": row["device_memory_gib"]}
    recorded = prediction({"config": dataclasses.asdict(cfg), "device": device})
    assert {k: recorded[k] for k in PRED_COLUMNS} == pytest.approx(p)


def _another_gpu(name: str | None, peak: float | None, memory: float | None,
                 ranks: int = 1) -> dict:
    """The prediction of the vit_huge DDP row (cluster=local) as if run on device ``name``."""
    row = _rows(SWEEP).iloc[4].copy()
    row["device_name"], row["device_peak_flops"], row["device_memory_gib"] = name, peak, memory
    row["ranks_per_node"] = ranks
    return predict_row(row)


def test_a_local_row_of_another_gpu_is_predicted_from_its_record_not_h100_figures() -> None:
    """An A100 40GB row under cluster=local was predicted at the H100's 313.4 images/s, then
    (06df5df) not at all. Now: its recorded memory and peak, the assumed efficiency and the
    H100 node's host term, both named as assumed for this device in pred_source."""
    h100 = predict_row(_rows(SWEEP).iloc[4])
    p = _another_gpu("NVIDIA A100-SXM4-40GB", 312e12, 39.39)
    assert p["pred_peak_mem_gib"] == pytest.approx(h100["pred_peak_mem_gib"])  # same model
    assert p["pred_fits"] is True
    assert 0 < p["pred_ips"] < h100["pred_ips"] * 0.5  # 312 of the H100's 989.5 TFLOP/s
    assert p["pred_source"].startswith("profile:local (recorded memory; recorded peak; "
                                       "plan_efficiency 0.4 (assumed, checked on H100 only)")
    assert "host term, assumed for NVIDIA A100-SXM4-40GB" in p["pred_source"]
    assert "memory-bound ops not counted" in p["pred_source"]
    # an MI250X GCD: its memory bandwidth is frontier's data sheet's, the step longer for it
    gcd = _another_gpu("AMD Instinct MI250X", 191.5e12, 63.98)
    assert "memory bandwidth 1600 GB/s (cluster=frontier's data sheet)" in gcd["pred_source"]


def test_a_cpu_only_fit_when_the_other_gpu_recorded_no_peak_or_ran_on_several() -> None:
    """No step time without a recorded peak, or over several GPUs (no profile gives the
    workstation's links), each said in pred_source; memory and fit still predicted; nothing
    recorded at all: memory only, fit unknown."""
    no_peak = _another_gpu("NVIDIA L40S", None, 44.4)
    two = _another_gpu("NVIDIA L40S", 362.05e12, 44.4, ranks=2)
    bare = _another_gpu(None, None, None)
    for p in (no_peak, two, bare):
        assert p["pred_step_time_s"] is None and p["pred_ips"] is None
        assert p["pred_peak_mem_gib"] > 0
    assert no_peak["pred_fits"] is True and two["pred_fits"] is True and bare["pred_fits"] is None
    assert "no step time: the run recorded no peak FLOP/s for NVIDIA L40S" in no_peak["pred_source"]
    assert "no step time: the links between the run's 2 GPUs" in two["pred_source"]
    assert "no recorded memory: fits unknown" in bare["pred_source"]


@pytest.mark.parametrize(("changes", "reason"), [
    ({"nodes": 0}, "nodes=0 in the row is not a whole number >= 1"),
    ({"nodes": 1.5}, "nodes=1.5 in the row is not a whole number >= 1"),
    ({"local_batch_size": -4}, "local_batch_size=-4 in the row is not a whole number >= 1"),
    ({"local_batch_size": float("inf")}, "local_batch_size=inf in the row is not a whole"),
    ({"nodes": 0, "ranks_per_node": None, "world_size": 1}, "nodes=0 in the row is not a"),
    ({"nodes": 2, "ranks_per_node": None, "world_size": 3},
     "world_size=3 in the row is not a multiple of nodes=2"),
    ({"strategy": "FOO"}, "strategy=FOO is unknown; valid: DDP, "),
    ({"model": "  "}, "no model in the row"),
    ({"strategy": " "}, "no strategy in the row"),
])
def test_a_bad_row_is_one_line_naming_its_column_not_a_traceback(changes: dict,
                                                                  reason: str) -> None:
    """The rows after the first of a point are built by dataclasses.replace: nodes=0 with a
    world_size raised ZeroDivisionError, an infinite batch OverflowError (out of the whole
    re-analysis), and nodes=1.5 or world_size 3 over 2 nodes were truncated silently."""
    rows = _rows(SWEEP).iloc[[4, 4]].reset_index(drop=True)  # the second reuses the first
    rows = rows.astype({"nodes": object, "local_batch_size": object, "ranks_per_node": object})
    for column, value in changes.items():
        rows.loc[1, column] = value
    pred, failed = predicted_columns(rows)
    assert list(failed) == [1] and "\n" not in failed[1]
    assert reason in failed[1]
    assert pred.loc[0, "pred_ips"] == pytest.approx(313, abs=1)


def test_a_blank_nodes_cell_is_a_reason_not_a_crash() -> None:
    """A blank integer cell read as pandas' NA raised TypeError out of the re-analysis."""
    rows = _rows(SWEEP).astype({"nodes": "Int64", "local_batch_size": "Int64",
                                 "ranks_per_node": object})
    rows.loc[1, "nodes"] = pd.NA
    rows.loc[2, "local_batch_size"] = pd.NA
    rows.loc[3, "ranks_per_node"] = "two"
    pred, failed = predicted_columns(rows)
    assert failed[1].startswith("no nodes in the row")
    assert failed[2].startswith("no local_batch_size in the row")
    assert failed[3].startswith("ranks_per_node='two' in the row is not a whole number")
    assert sorted(failed) == [1, 2, 3] and pred.loc[[0, 4]]["pred_ips"].notna().all()


def test_a_blank_kernels_compile_cell_composes_auto_not_false() -> None:
    """kernels.compile empty = auto (null), as the run had it; it was sent as false."""
    row = _rows(SWEEP).iloc[0].copy()
    row["kernels.compile"] = float("nan")
    assert "kernels.compile=null" in row_overrides(row)
    for cell, word in (("True", "true"), ("TRUE", "true"), (False, "false"), (1, "true")):
        row["kernels.compile"] = cell
        assert f"kernels.compile={word}" in row_overrides(row)


@pytest.mark.parametrize(("column", "cell", "blank"), [
    ("train.activation_checkpointing", "maybe", "false"),
    ("kernels.compile", "yes", "null"),
    ("kernels.fused_attn", "1", "true"),  # no runs.csv writes a flag as the text "1"
])
def test_a_flag_cell_that_is_no_flag_is_one_line_not_the_default(column: str, cell: str,
                                                                   blank: str) -> None:
    """train.activation_checkpointing=maybe was read as false (the default) and the row
    predicted as a run without checkpointing. The line names the column and the fix, and
    the fix it names (a blank cell) composes the default."""
    rows = _rows(SWEEP).iloc[[4, 4]].reset_index(drop=True).astype({column: object})
    rows.loc[1, column] = cell
    pred, failed = predicted_columns(rows)
    assert list(failed) == [1] and "\n" not in failed[1]
    assert failed[1] == (f"{column}={cell!r} in the row is not a flag: its point cannot be "
                         f"composed (write true or false in the row's {column} cell, or "
                         f"blank it for {'auto' if blank == 'null' else blank})")
    assert pred.loc[0, "pred_ips"] == pytest.approx(313, abs=1)
    rows.loc[1, column] = " "
    assert f"{column}={blank}" in row_overrides(rows.loc[1])


def test_a_device_type_the_plan_does_not_model_is_one_line_not_a_gpu() -> None:
    """device_type=tpu was read as cuda and predicted with the profile's GPU figures; the
    schema's values (cuda, rocm, cpu; case aside) are read as before."""
    row = _rows(SWEEP).iloc[4].copy()
    for cell in ("tpu", "mps", "gpu"):
        row["device_type"] = cell
        with pytest.raises(ValueError) as e:
            predict_row(row)
        assert str(e.value) == (
            f"device_type={cell!r} in the row is not one of cuda, rocm, cpu (the devices the "
            "plan models): its point cannot be composed (correct the row's device_type cell, "
            "or blank it to read the device from peak_mem_kind or device_name)")
    for cell, device in (("rocm", "cuda"), ("CUDA", "cuda"), (" cpu", "cpu"), ("", "cuda")):
        row["device_type"] = cell  # blank: the H100's peak_mem_kind and device_name
        assert row_device(row)["type"] == device
        assert f"device={device}" in row_overrides(row)


@pytest.mark.parametrize(("kind", "name", "device"), [
    ("rss", None, "cpu"), ("allocated", None, "cuda"), (None, "NVIDIA H100 80GB HBM3", "cuda")])
def test_an_export_without_device_type_reads_it_from_its_other_columns(
        kind: str | None, name: str | None, device: str) -> None:  # fmt: skip
    row = _rows(SWEEP).iloc[0].drop("device_type").copy()
    row["peak_mem_kind"], row["device_name"] = kind, name
    assert row_device(row)["type"] == device
    assert f"device={device}" in row_overrides(row)


def test_an_export_with_no_device_at_all_is_not_predicted_as_a_cpu_run() -> None:
    rows = _rows(SWEEP).drop(columns=["device_type", "peak_mem_kind", "device_name"])
    pred, failed = predicted_columns(rows.iloc[[0]])
    assert pred["pred_ips"].isna().all()
    assert failed[0].startswith("no device_type in the row")


def test_jax_ignores_kernels_compile_in_its_host_term() -> None:
    """null gave 238 images/s and false 326 for the JAX ViT-H/14 row: JAX's step is one
    jitted call (no per-unit hooks), whatever kernels.compile says."""
    row = _rows(JAX).query("framework == 'jax'").iloc[0].copy()
    ips = set()
    for cell in (float("nan"), False):
        row["kernels.compile"] = cell
        p = predict_row(row)
        ips.add(round(p["pred_ips"], 6))
    assert len(ips) == 1 and ips.pop() == pytest.approx(326, abs=1)


@pytest.mark.parametrize("column", ["precision", "local_batch_size", "strategy"])
def test_a_row_without_a_needed_value_is_one_line_naming_the_column(column: str) -> None:
    row = _rows(SWEEP).iloc[0]
    empty = row.copy()
    empty[column] = float("nan")
    for bad in (row.drop(column), empty):
        with pytest.raises(ValueError, match=rf"^no {column} in the row") as e:
            predict_row(bad)
        assert "\n" not in str(e.value)


def test_a_frame_predicts_every_row_it_can_and_leaves_the_others_empty() -> None:
    rows = _rows(SWEEP)
    rows.loc[1, "strategy"] = "HYBRID_8GPU"  # a shard group of 8 on one GPU: refused
    rows.loc[2, "precision"] = None
    pred, failed = predicted_columns(rows)
    assert list(pred.columns) == list(PRED_COLUMNS) and list(pred.index) == list(rows.index)
    assert sorted(failed) == [1, 2]
    assert failed[2].startswith("no precision in the row")
    assert "HYBRID_8GPU" in failed[1] and "\n" not in failed[1]
    assert pred.loc[[1, 2]].isna().all().all()  # empty, not the export's
    kept = pred.drop(index=[1, 2])
    assert kept["pred_ips"].notna().all()
    assert kept["pred_source"].eq("profile:cuda8 (recorded peak and memory)").all()
    assert not (kept["pred_ips"] - rows.loc[kept.index, "pred_ips"]).abs().lt(1e-6).any()


def test_a_cpu_row_gets_the_prediction_its_records_get() -> None:
    """The analysis of run records predicts from run.json's config (rows.prediction); a row
    of the same run composed from its runs.csv settings gets the same figures."""
    overrides = ["model=vit_tiny", "strategy=FULL_SHARD", "cluster=virtual", "nodes=2",
                 "cluster.gpus_per_node=2", "precision=fp32", "device=cpu",
                 "train.local_batch_size=4"]
    [(_, cfg)] = compose_points(overrides)
    recorded = prediction({"config": dataclasses.asdict(cfg), "device": {"type": "cpu"}})
    row = {"model": "vit_tiny", "strategy": "FULL_SHARD", "cluster": "virtual", "nodes": 2,
           "ranks_per_node": 2, "precision": "fp32", "device_type": "cpu",
           "local_batch_size": 4, "train.activation_checkpointing": False}
    assert "device=cpu" in row_overrides(row)
    pred, failed = predicted_columns(pd.DataFrame([row]))
    assert not failed
    for column in ("pred_peak_mem_gib", "pred_step_time_s", "pred_ips"):
        assert pred[column].iloc[0] == pytest.approx(recorded[column]), column
    assert pred["pred_fits"].iloc[0] == recorded["pred_fits"]
    assert pred["pred_mem_metric"].iloc[0] == recorded["pred_mem_metric"] == "peak_rss_gib"


def test_calibrate_on_an_export_names_the_commands_that_check_one(
        capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    """`python -m vitfsdp.plan --calibrate some-runs.csv` said 'sweep dir ... is not a
    directory': the fit reads run records, and the commands that check this plan against an
    export are named instead, on one line."""
    from vitfsdp.plan.__main__ import main

    assert main(["--calibrate", str(SWEEP), str(JAX)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {SWEEP} is a file")
    assert f"python tools/plan_check.py {SWEEP} or " in err
    assert f"python -m vitfsdp.analysis {SWEEP} {JAX} --out DIR --report" in err


def test_the_prediction_columns_are_the_schemas() -> None:
    """exported.PRED_COLUMNS repeats runs.csv's (the plan cannot import the analysis)."""
    from vitfsdp.analysis.schema import PRED_COLUMNS as SCHEMA

    assert tuple(PRED_COLUMNS) == tuple(SCHEMA)
