"""What a paper's reader of the report must not be told: a scaling efficiency of points on
one device, a ranking across runs that did not train alike, memory peaks of two kinds side
by side unlabelled, and invented numbers as measured ones."""

from __future__ import annotations

import random
from pathlib import Path

from tests.fake_records import run_info
from vitfsdp.analysis import collect_runs, study_tables, synthetic
from vitfsdp.analysis.lines import INVENTED_DATA, invented_runs
from vitfsdp.analysis.report import (
    NOT_RECORDED,
    ONE_DEVICE,
    ONE_DEVICE_TITLE,
    report_sections,
)
from vitfsdp.analysis.tables import PEAK_SINCE
from vitfsdp.analysis.verdict import NOT_LIKE_FOR_LIKE
from vitfsdp.records import RunRecords


def _one_gpu(root: Path, name: str, framework: str, ips: float, loss: float,
             grads: bool = True) -> None:  # fmt: skip
    """One completed run on one GPU (world size 1), its model state in its summary (JAX's
    without gradients, as the JAX trainer records it)."""
    info = run_info("FULL_SHARD", 1, device="cuda")
    info["world"] |= {"size": 1, "ranks_per_node": 1}
    info["config"]["cluster"]["gpus_per_node"] = 1
    info["config"]["framework"] = framework
    records = RunRecords(root / name)
    records.start(info)
    params = 2**28
    records.summary_extra.update({"model_state_bytes": {
        "params": params, "grads": params if grads else None, "optimizer": 2 * params}})
    for step, delta in ((2, 0.0), (4, -1.0), (6, 1.0)):
        records.window({"step_end": step, "warmup": step == 2, "ips": ips + delta,
                        "ips_per_gpu": ips + delta, "peak_mem_allocated_gib": 1.5,
                        "loss": loss})
    records.finish("completed")


def _sections(root: Path) -> dict:
    return {s.title: s for s in report_sections(study_tables(collect_runs(root), 1000), 1000)}


def test_points_on_one_device_are_no_weak_scaling(tmp_path):
    _one_gpu(tmp_path, "a", "torch", 300.0, 0.3)
    _one_gpu(tmp_path, "b", "torch", 200.0, 0.3)
    sections = _sections(tmp_path)
    assert "Weak scaling" not in sections
    table = sections[ONE_DEVICE_TITLE].table
    assert set(table["scaling efficiency"]) == {ONE_DEVICE}
    assert "ideal images/s" not in table  # no ideal equal to the measured
    best = sections["Best configuration per model and node count"].table
    assert set(best["scaling efficiency"]) == {ONE_DEVICE}


def test_points_that_did_not_train_alike_are_not_ranked(tmp_path):
    """JAX fastest at loss 0.0096, PyTorch at 3.08: best.csv and the report say not
    like-for-like, and rank nothing; the memory table says since when each peak counts and
    'not recorded' for JAX's gradients."""
    _one_gpu(tmp_path, "jax", "jax", 293.0, 0.0096, grads=False)
    _one_gpu(tmp_path, "torch", "torch", 211.0, 3.08)
    tables = study_tables(collect_runs(tmp_path), 1000)
    best = tables["best"].iloc[0]
    assert best["difference"].startswith(NOT_LIKE_FOR_LIKE)
    assert "1.39x" in best["difference"]
    sections = _sections(tmp_path)
    assert "Not like-for-like (loss differs)" in sections[
        "Best configuration per model and node count"].text
    points = tables["points"].set_index("framework")
    assert points.loc["jax", "peak_mem_since"] == PEAK_SINCE["process"]
    assert points.loc["torch", "peak_mem_since"] == PEAK_SINCE["window"]
    memory = sections["Memory"].table.set_index("configuration")
    jax_row = memory.loc[memory.index.str.contains("jax")].iloc[0]
    assert jax_row["grads/rank (GiB)"] == NOT_RECORDED
    assert jax_row["peak counted since"] == PEAK_SINCE["process"]


def test_points_that_trained_alike_keep_their_ranking(tmp_path):
    _one_gpu(tmp_path, "jax", "jax", 293.0, 0.30)
    _one_gpu(tmp_path, "torch", "torch", 211.0, 0.32)
    best = study_tables(collect_runs(tmp_path), 1000)["best"].iloc[0]
    assert not best["difference"].startswith(NOT_LIKE_FOR_LIKE)


def test_invented_runs_say_so_and_are_never_measured(tmp_path):
    """The analysis benchmark's runs carry INVENTED DATA in their device and experiment
    fields; the report opens with it and calls no spread measured."""
    configs = {"FULL_SHARD": synthetic.base_configs()["FULL_SHARD"]}
    for repeat in (0, 1):
        info = synthetic.run_info(configs["FULL_SHARD"], "vit_base", 1, repeat)
        synthetic.write_synthetic_run(tmp_path / f"r{repeat}", info, "completed",
                                      random.Random(repeat))
    df = collect_runs(tmp_path)
    assert synthetic.INVENTED.startswith(INVENTED_DATA)
    assert invented_runs(df).all()
    assert df["experiment"].eq(synthetic.INVENTED).all()
    sections = report_sections(study_tables(df, 1000), 1000)
    assert sections[0].title == synthetic.INVENTED
    text = " ".join(s.text for s in sections)
    assert "measured" not in text.split("INVENTED")[0]
    assert "the noise between runs, measured" not in text
