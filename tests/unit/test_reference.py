"""Published figures beside ours: the package data, the matching rule, reference.csv, the
published stars on the weak-scaling figure, the recipe ablation and the presets that
reproduce the studies (composed, not run)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from vitfsdp.analysis import (
    collect_runs,
    plot_memory,
    plot_recipe,
    plot_tflops,
    plot_weak_scaling,
)
from vitfsdp.analysis.__main__ import main as analysis_main
from vitfsdp.analysis.recipe import recipe_table
from vitfsdp.analysis.reference import (
    published,
    recipe_reference,
    reference_summary,
    reference_table,
)
from vitfsdp.config import CONF_DIR, register_configs, to_run_config
from vitfsdp.records import RunRecords

#: ORNL's published images/s of ViT-Base under NO_SHARD on one Frontier node (ips_base.py).
ORNL_VIT_BASE_NO_SHARD_1 = 1207.0
#: ORNL's published peak allocated memory of ViT-Base under DDP (fp32) on a Frontier node
#: (GB per GCD, mem_alloc_1G.py).
ORNL_VIT_BASE_DDP_ALLOCATED = 2.4721
#: PyCls's published images/s over the DDP baseline of its recipe up to the batch-second
#: layout (our step 3, pycls_recipe_3_foreach_adamw), as issue 39 quotes it.
PYCLS_STEP_3 = 1.51


def ornl_like(strategy: str = "NO_SHARD", nodes: int = 1, batch: int = 32,
              precision: str = "bf16", experiment: str | None = None,
              model: str = "vit_base", cpu: bool = False) -> dict:  # fmt: skip
    """run.json of a run with ORNL's setup (8 GPUs a node, 224 px, activation checkpointing,
    synthetic data, BACKWARD_PRE + limit_all_gathers), with the settings given; ``cpu``: on
    this machine's hardware instead (2 gloo ranks a node on a CPU)."""
    fsdp = strategy != "DDP"
    ranks = 2 if cpu else 8
    device = ({"type": "cpu", "name": "AMD EPYC", "host_cpus": 2} if cpu else
              {"type": "cuda", "name": "AMD Instinct MI250X", "memory_gib": 64.0,
               "peak_flops": 191.5e12})  # fmt: skip
    return {
        "run_id": f"{model}-{strategy}-n{nodes}-b{batch}-{precision}-{experiment}",
        "config": {
            "model": {"name": model, "img_size": None},
            "strategy": {"name": strategy, "sharding_strategy": "DDP" if not fsdp else strategy,
                         "shard_group_size": 0,
                         "backward_prefetch": "BACKWARD_PRE" if fsdp else None,
                         "limit_all_gathers": True if fsdp else None},
            "data": {"name": "synthetic"},
            "train": {"local_batch_size": batch, "steps": 8, "warmup_steps": 2,
                      "activation_checkpointing": True},
            "cluster": {"name": "local" if cpu else "frontier", "gpus_per_node": ranks},
            "engine": "fsdp1", "framework": "torch", "nodes": nodes, "precision": precision,
            "experiment": experiment,
        },
        "world": {"size": ranks * nodes, "nodes": nodes, "ranks_per_node": ranks,
                  "backend": "gloo" if cpu else "nccl"},
        "device": device,
        "model": {"num_params": 86_600_000, "forward_flops_per_image": 17.6e9,
                  "img_size": 224},
    }  # fmt: skip


def write(run_dir: Path, info: dict, ips: float | None, mem_gib: float = 2.0,
          busy: float | None = None) -> None:  # fmt: skip
    """A completed run at ``ips`` (three measured windows), or an oom one for None; its
    peak memory ``mem_gib`` is GPU allocated memory, or resident memory on a CPU; ``busy``
    each window's ``device_busy_frac`` (None: not measured)."""
    records = RunRecords(run_dir)
    records.start(info)
    if ips is None:
        records.finish("oom", reason="HIP out of memory")
        return
    memory = "peak_rss_gib" if info["device"]["type"] == "cpu" else "peak_mem_allocated_gib"
    for step in (2, 4, 6, 8):
        records.window({"step_end": step, "warmup": step == 2, "ips": ips,
                        "ips_per_gpu": ips / info["world"]["size"],
                        "tflops_per_gpu": 3 * 17.6e9 * ips / info["world"]["size"] / 1e12,
                        memory: mem_gib, "device_busy_frac": busy})  # fmt: skip
    records.finish("completed")


def test_the_published_rows_are_package_data_with_their_setup() -> None:
    """Every ORNL weak-scaling row (6 models, the strategies each ran, 1-128 nodes) with its
    source and setup; the PyCls ratios; nothing without a value, unit or source."""
    rows = published()
    assert rows["value"].notna().all() and (rows["unit"] != "").all()
    assert (rows["source"] != "").all() and (rows["label"] != "").all()
    ornl = rows[(rows["study"] == "ornl_vit_fsdp") & (rows["metric"] == "ips")]
    weak = ornl[ornl["backward_prefetch"].isin(["BACKWARD_PRE", ""])
                & ~ornl["source"].str.endswith("ips_4B_configs.py")]
    assert len(weak) == 4 * 5 * 8 + (5 * 8 + 7) + (4 * 8 + 7)  # 16GPU groups from 2 nodes
    assert set(weak["nodes"].astype(int)) == {1, 2, 4, 8, 16, 32, 64, 128}
    base = weak[(weak["model"] == "vit_base") & (weak["strategy"] == "NO_SHARD")]
    assert base.set_index("nodes")["value"].to_dict()["1"] == ORNL_VIT_BASE_NO_SHARD_1
    assert set(weak.loc[weak["strategy"] == "DDP", "precision"]) == {"fp32"}
    assert set(weak.loc[weak["strategy"] != "DDP", "precision"]) == {"bf16"}
    assert (weak[["gpus_per_node", "local_batch_size", "img_size"]] ==
            ["8", "32", "224"]).all().all()  # fmt: skip
    pycls = rows[rows["study"] == "pycls_vit"]
    assert sorted(pycls["value"]) == [1.51, 1.83, 1.86, 2.18]


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """ViT-Base at one node: NO_SHARD as ORNL ran it, NO_SHARD at batch 16, FULL_SHARD in
    fp32, DDP in bf16 (ORNL's DDP ran fp32), and NO_SHARD at 256 nodes (ORNL stopped at
    128)."""
    root = tmp_path / "sweep"
    write(root / "match", ornl_like(), 1100.0)
    write(root / "batch16", ornl_like(batch=16), 900.0)
    write(root / "fp32", ornl_like("FULL_SHARD", precision="fp32"), 500.0)
    write(root / "ddp", ornl_like("DDP"), 800.0)
    write(root / "n256", ornl_like(nodes=256), 200000.0)
    return root


def test_only_a_point_of_the_same_setup_is_compared_and_the_rest_say_why(sweep: Path) -> None:
    table = reference_table(collect_runs(sweep))
    ips = table[table["metric"].fillna("ips") == "ips"]
    assert len(ips) == 5  # one published row per point here, or one row saying why none
    compared = ips[ips["compared"].astype(bool)]
    assert len(compared) == 1, ips[["configuration", "nodes", "compared", "differs"]]
    match = compared.iloc[0]
    assert match["published"] == ORNL_VIT_BASE_NO_SHARD_1
    assert match["ratio_per_device"] == pytest.approx(1100.0 / ORNL_VIT_BASE_NO_SHARD_1)
    assert match["differs"] == "" and match["nodes"] == 1
    why = list(ips.loc[~ips["compared"].astype(bool), "differs"])
    assert any("local_batch_size: 16 here, 32 published" in w for w in why), why
    assert any("precision: fp32 here, bf16 published" in w for w in why), why
    assert any("precision: bf16 here, fp32 published" in w for w in why), why  # DDP
    assert any("no published row of vit_base under NO_SHARD at 256 node(s)" in w for w in why)
    assert ips.loc[~ips["compared"].astype(bool), "ratio_per_device"].isna().all()


def test_cli_writes_reference_csv_and_stars_the_matching_point(sweep: Path, tmp_path: Path,
                                                               capsys) -> None:  # fmt: skip
    """reference.csv beside the other tables; the weak-scaling figure draws the published
    figure of the matching point (and only it) as a star, named in the legend; the printed
    summary counts it."""
    out = tmp_path / "out"
    assert analysis_main([str(sweep), "--out", str(out), "--jobs", "1"]) == 0
    table = pd.read_csv(out / "reference.csv")
    assert table["compared"].sum() == 2  # images/s and peak allocated memory of the match
    assert "1 of 5 points compared" in capsys.readouterr().out
    fig = plot_weak_scaling(collect_runs(sweep))
    assert "reference" in fig.drawn_kinds
    stars = [c for ax in fig.axes for c in ax.collections
             if str(c.get_label()).startswith("_published")]
    assert len(stars) == 1 and stars[0].get_offsets().tolist() == [[1.0,
                                                                    ORNL_VIT_BASE_NO_SHARD_1]]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "published: ORNL, Frontier, 2023" in legend


def test_other_hardware_is_compared_and_named(tmp_path: Path) -> None:
    """ORNL's setup on a CPU (2 gloo ranks a node) is compared with ORNL's figure, the
    hardware that differs named in ``differs`` and in the weak-scaling figure's footer (no
    star: another count of devices a node); at another batch
    on the same CPU it is not compared, and ``differs`` says so."""
    root = tmp_path / "cpu"
    write(root / "match", ornl_like(cpu=True), 1.5)
    write(root / "b16", ornl_like(batch=16, cpu=True), 3.0)
    table = reference_table(collect_runs(root))
    ips = table[table["metric"] == "ips"].set_index("compared")
    match, other = ips.loc[True], ips.loc[False]
    assert match["ratio_per_device"] == pytest.approx((1.5 / 2) / (ORNL_VIT_BASE_NO_SHARD_1 / 8))
    hardware = ("gpus_per_node: 2 ranks here, 8 published; "
                "device: cpu (AMD EPYC) here, AMD MI250X GCD published")
    assert match["differs"] == hardware
    assert match["label"] == "ORNL, Frontier, 2023 (8 x AMD MI250X GCD a node)"
    assert other["differs"].startswith("local_batch_size: 16 here, 32 published")
    assert pd.isna(other["ratio_per_device"])
    # 2 ranks a node against a node of 8 GCDs: not on the global images/s axis, where it
    # would read 4x slower; the footer names the study and the per-device comparison
    fig = plot_weak_scaling(collect_runs(root))
    assert "reference" not in fig.drawn_kinds
    assert "ORNL, Frontier, 2023 (8 x AMD MI250X GCD a node): ours / published per device" in (
        " ".join(fig.legends[0].get_title().get_text().split()))


def h100s(gpus: int) -> dict:
    """run.json of ORNL's ViT-Base FULL_SHARD setup on one node of ``gpus`` H100s."""
    info = ornl_like("FULL_SHARD")
    info["world"].update(size=gpus, ranks_per_node=gpus)
    info["config"]["cluster"] = {"name": "local", "gpus_per_node": gpus}
    info["device"] = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.0,
                      "peak_flops": 989e12}
    return info


def test_a_point_on_fewer_devices_a_node_is_compared_per_device(tmp_path: Path) -> None:
    """Four H100s a node at 1,324 images/s against ORNL's node of 8 MI250X GCDs at 1,205
    (both sharded, both communicating): the ratio is per device, (1,324 / 4) / (1,205 / 8)
    = 2.2, not the global 1.1; where the published row states no devices a node the ratio
    is left empty and ``differs`` says why; the printed summary and the report's header say
    per device."""
    from vitfsdp.analysis.report import display

    write(tmp_path / "h100" / "fs", h100s(4), 1324.0)
    df = collect_runs(tmp_path / "h100")
    table = reference_table(df)
    ips = table[(table["metric"] == "ips") & table["compared"].astype(bool)].iloc[0]
    assert ips["published"] == 1205.0 and ips["measured"] == pytest.approx(1324.0)
    assert ips["ratio_per_device"] == pytest.approx((1324.0 / 4) / (1205.0 / 8))
    assert "gpus_per_node: 4 GPUs here, 8 published" in ips["differs"]
    assert "world_size" not in ips["differs"]
    assert "measured / published per device, median 2.20" in reference_summary(table)
    shown = display(table[table["compared"].astype(bool)], ["ratio_per_device"])
    assert list(shown.columns) == ["measured / published, per device"]

    refs = published().assign(gpus_per_node="")
    unstated = reference_table(df, refs)
    row = unstated[(unstated["metric"] == "ips") & unstated["compared"].astype(bool)].iloc[0]
    assert pd.isna(row["ratio_per_device"])
    assert "ratio_per_device: devices a node not known (4 here, not stated published)" in (
        row["differs"])


def test_one_device_is_not_compared_with_a_sharded_node(tmp_path: Path) -> None:
    """One H100 (world size 1: FSDP1 runs FULL_SHARD as NO_SHARD, no collective) at 331
    images/s in ORNL's setup against ORNL's 8 GCDs at 1,205 (8-way all-gathers and
    reduce-scatters): not the same work a device, so no ratio (it read 2.2 "per device"),
    ``differs`` names the world sizes, and the printed summary gives no median but names the
    figure apart; memory rows name it too (one device holds what 8 shard)."""
    write(tmp_path / "h100" / "fs", h100s(1), 331.0)
    table = reference_table(collect_runs(tmp_path / "h100"))
    ornl = table[table["study"] == "ornl_vit_fsdp"].set_index("metric")
    assert not ornl["compared"].astype(bool).any()
    assert ornl["ratio_per_device"].isna().all() and (ornl["drawn"].fillna("") == "").all()
    ips = ornl.loc["ips"]
    assert ips["published"] == 1205.0 and ips["measured"] == pytest.approx(331.0)
    assert ips["differs"] == (
        "world_size: 1 here (one device: no collectives), 8 published; "
        "gpus_per_node: 1 GPUs here, 8 published; "
        "device: cuda (NVIDIA H100 80GB HBM3) here, AMD MI250X GCD published")
    assert "world_size: 1 here" in ornl.loc["peak_mem_active", "differs"]
    summary = reference_summary(table)
    assert "per device, median" not in summary
    assert ("ORNL, Frontier, 2023 (8 x AMD MI250X GCD a node), ips: 1 figure(s) of the same "
            "setup not compared (world_size: 1 here (one device: no collectives), 8 "
            "published): not the same work a device, no ratio") in summary
    assert "0 of 1 points compared" in summary
    fig = plot_weak_scaling(collect_runs(tmp_path / "h100"))  # no star, no per-device footer
    assert "reference" not in fig.drawn_kinds
    assert "per device" not in " ".join(fig.legends[0].get_title().get_text().split())


def test_no_star_where_nothing_matches(tmp_path: Path) -> None:
    write(tmp_path / "s" / "b16", ornl_like(batch=16), 900.0)
    assert "reference" not in plot_weak_scaling(collect_runs(tmp_path / "s")).drawn_kinds


def test_recipe_ablation_relative_to_the_baseline(tmp_path: Path) -> None:
    """Steps of a recipe (``<recipe>`` and ``<recipe>_<n>_<what>`` presets) relative to the
    baseline at each node count; a step that ran out of memory has no bar but a row; runs
    of other presets are not part of it. The GPUs were measured busy (95%), so the verdicts
    rank the steps (test_recipe_verdicts: not where unmeasured)."""
    root = tmp_path / "recipe"
    ips = {("r", 1): 100.0, ("r", 2): 190.0, ("r_1_amp", 1): 150.0, ("r_1_amp", 2): 300.0,
           ("r_2_fsdp", 1): 180.0, ("r_2_fsdp", 2): None, ("other", 1): 999.0}
    for (name, nodes), value in ips.items():
        strategy = "FULL_SHARD" if name == "r_2_fsdp" else "DDP"
        write(root / f"{name}_{nodes}", ornl_like(strategy, nodes, experiment=name), value,
              busy=0.95)
    df = collect_runs(root)
    table = recipe_table(df).set_index(["step", "nodes"])
    assert set(table["what"]) == {"baseline", "amp", "fsdp"}
    assert table.loc[(0, 2), "relative_ips"] == pytest.approx(1.0)
    assert table.loc[(1, 1), "relative_ips"] == pytest.approx(1.5)
    assert table.loc[(1, 2), "relative_ips"] == pytest.approx(300.0 / 190.0)
    assert pd.isna(table.loc[(2, 2), "relative_ips"]) and table.loc[(2, 2), "statuses"] == "1 oom"
    # one run a step: apart beyond its windows, yet not a result; the baseline is no verdict
    assert table["vs_baseline"].to_dict() == {
        (0, 1): "", (0, 2): "", (1, 1): "one run: not established",
        (1, 2): "one run: not established", (2, 1): "one run: not established", (2, 2): ""}
    assert recipe_table(df, noise=1.55).set_index(["step", "nodes"]).loc[
        (1, 1), "vs_baseline"] == "within observed noise"  # 1.5x
    fig = plot_recipe(df)
    assert fig is not None and "failed" in fig.drawn_kinds
    assert plot_recipe(collect_runs(root / "other_1")) is None  # no recipe: no figure


def published_segments(fig) -> list[list[list[float]]]:
    """The published-but-not-compared segments a figure drew, as [[x0, y], [x1, y]]."""
    return [seg.tolist() for ax in fig.axes for c in ax.collections
            if c.get_label() == "_published other" for seg in c.get_segments()]


def legend_texts(fig) -> list[str]:
    """The figure legend's entries, each on one line (a long one is wrapped)."""
    return [t.get_text().replace("\n", " ") for t in fig.legends[0].get_texts()]


def write_recipe(root: Path, steps: dict[str, str], ips: dict[tuple[str, int], float]) -> None:
    """A recipe ablation on this machine's CPU as pycls_recipe_cpu runs it (vit_tiny, batch
    8): ``steps`` maps each preset to its precision, ``ips`` (preset, nodes) to images/s."""
    for (name, nodes), value in ips.items():
        strategy = "DDP" if steps[name] == "fp32" or name.endswith("amp_fp16") else "FULL_SHARD"
        info = ornl_like(strategy, nodes, batch=8, precision=steps[name], experiment=name,
                         model="vit_tiny", cpu=True)
        write(root / f"{name}_{nodes}", info, value)


PYCLS_CPU = {"pycls_recipe_cpu": "fp32", "pycls_recipe_cpu_1_amp_fp16": "fp16",
             "pycls_recipe_cpu_3_foreach_adamw": "fp16"}


def test_recipe_step_gets_the_published_ratio_drawn_not_compared(tmp_path: Path) -> None:
    """PyCls's 1.51x (its recipe up to the batch-second layout, our step 3) is drawn across
    the CPU recipe's step 3 and listed per node count, never compared: its model, image size
    and device differ, and reference.csv says so; PyCls's other figures get a row each
    saying why no step of ours has them."""
    root = tmp_path / "pycls"
    write_recipe(root, PYCLS_CPU, {("pycls_recipe_cpu", 1): 100.0, ("pycls_recipe_cpu", 2): 180.0,
                                   ("pycls_recipe_cpu_1_amp_fp16", 1): 40.0,
                                   ("pycls_recipe_cpu_3_foreach_adamw", 1): 20.0,
                                   ("pycls_recipe_cpu_3_foreach_adamw", 2): 45.0})
    df = collect_runs(root)
    table = reference_table(df)
    assert not table["compared"].astype(bool).any() and table["ratio_per_device"].isna().all()
    step3 = table[table["configuration"] == "pycls_recipe_cpu_3_foreach_adamw"]
    assert step3.set_index("nodes")["measured"].to_dict() == {1: 0.2, 2: 0.25}
    assert (step3["published"] == PYCLS_STEP_3).all() and (step3["drawn"] == "recipe.png").all()
    for why in ("model: vit_tiny here, ViT-H/16 published",
                "recipe: PyCls's step also has the pooled classifier",
                "device: cpu (AMD EPYC) here, NVIDIA A100 published"):
        assert step3["differs"].str.contains(why, regex=False).all(), (why, step3["differs"])
    assert set(step3["label"]) == {"PyCls, A100, 2022 (ViT-H/16, 224 px)"}
    others = table[(table["study"] == "pycls_vit") & (table["drawn"] == "")]
    assert sorted(others["published"]) == [1.83, 1.86, 2.18] and others["measured"].isna().all()
    why = " | ".join(others["differs"])
    assert "no step 4 (img252) of pycls_recipe_cpu" in why and "full FP16" in why
    assert "drawn in recipe.png, not compared" in reference_summary(table)
    assert "0 of 5 points compared" in reference_summary(table)  # the recipe rows aside

    fig = plot_recipe(df)
    assert "published_other" in fig.drawn_kinds
    assert published_segments(fig) == [[[1.55, PYCLS_STEP_3], [2.45, PYCLS_STEP_3]]]  # step 3
    assert any(t.get_text() == "PyCls 1.51x" for t in fig.axes[0].texts)
    assert ("published ratio of the step in the published setup, not compared: PyCls, A100, "
            "2022 (ViT-H/16, 224 px)") in legend_texts(fig)


def test_gpu_recipe_step_4_gets_pycls_256_px_ratio(tmp_path: Path) -> None:
    """The GPU recipe's own step 4 (252 px) gets PyCls's 1.86x (256 px), the image size
    named in ``differs``; step 3 absent: 1.51x is listed, not drawn."""
    root = tmp_path / "gpu"
    for name, precision, img, ips in (("pycls_recipe", "fp32", 224, 100.0),
                                      ("pycls_recipe_4_img252", "fp16", 252, 150.0)):
        info = ornl_like("DDP" if precision == "fp32" else "FULL_SHARD", batch=70,
                         precision=precision, experiment=name, model="vit_huge_patch14_224")
        info["model"]["img_size"] = img
        write(root / name, info, ips)
    rows = recipe_reference(collect_runs(root)).set_index("published")
    step4 = rows.loc[1.86]
    assert step4["drawn"] == "recipe.png" and step4["measured"] == 1.5 and step4["step"] == 4
    assert "img_size: 252 here, 256 published" in step4["differs"]
    assert rows.loc[PYCLS_STEP_3, "drawn"] == "" and "no step 3" in rows.loc[PYCLS_STEP_3,
                                                                               "differs"]
    assert published_segments(plot_recipe(collect_runs(root))) == [[[0.55, 1.86],
                                                                    [1.45, 1.86]]]


def test_no_published_ratio_without_its_step_or_its_recipe(tmp_path: Path) -> None:
    """A PyCls recipe sweep without step 3, and another recipe with a step 3, draw none."""
    root = tmp_path / "pycls"
    write_recipe(root, PYCLS_CPU, {("pycls_recipe_cpu", 1): 100.0,
                                   ("pycls_recipe_cpu_1_amp_fp16", 1): 40.0})
    assert "published_other" not in plot_recipe(collect_runs(root)).drawn_kinds
    other = tmp_path / "other"
    write_recipe(other, {"r": "fp32", "r_3_foreach_adamw": "fp16"},
                 {("r", 1): 100.0, ("r_3_foreach_adamw", 1): 20.0})
    assert recipe_reference(collect_runs(other)).empty
    assert "published_other" not in plot_recipe(collect_runs(other)).drawn_kinds


def test_cpu_memory_of_ornl_setup_is_drawn_beside_not_compared(tmp_path: Path) -> None:
    """ORNL's own setup on a CPU (ViT-Base, DDP in fp32, batch 32, one node): its images/s
    are compared; its resident memory is not GPU allocated memory, so ORNL's allocated
    figure is drawn beside it on memory.png, not compared, and ``differs`` says why; at
    batch 16 nothing is drawn there."""
    root = tmp_path / "cpu"
    write(root / "match", ornl_like("DDP", precision="fp32", cpu=True), 0.29, mem_gib=4.3)
    table = reference_table(collect_runs(root)).set_index("metric")
    assert table.loc["ips", "compared"] and table.loc["ips", "drawn"] == "weak_scaling.png"
    mem = table.loc["peak_mem_allocated"]
    assert not mem["compared"] and pd.isna(mem["ratio_per_device"]) and mem["drawn"] == "memory.png"
    assert (mem["measured"], mem["published"]) == (4.3, ORNL_VIT_BASE_DDP_ALLOCATED)
    assert mem["differs"].startswith("peak_mem_allocated: peak resident memory of a rank's "
                                     "process here (CPU")
    assert "device: cpu (AMD EPYC) here, AMD MI250X GCD published" in mem["differs"]
    assert mem["unit"].startswith("GiB per rank (peak resident, CPU) here; GB per GPU")
    assert table.loc["peak_mem_reserved", "drawn"] == ""
    fig = plot_memory(collect_runs(root))
    assert "published_other" in fig.drawn_kinds and "reference" not in fig.drawn_kinds
    [[(x0, y0), (x1, y1)]] = published_segments(fig)
    assert y0 == y1 == ORNL_VIT_BASE_DDP_ALLOCATED and x0 < 1 < x1
    assert any("published GPU allocated memory, not compared (ours: CPU resident): ORNL, "
               "Frontier, 2023 (8 x AMD MI250X GCD a node)" in t for t in legend_texts(fig))
    write(tmp_path / "b16" / "p", ornl_like("DDP", batch=16, precision="fp32", cpu=True), 0.5,
          mem_gib=3.0)
    assert (reference_table(collect_runs(tmp_path / "b16"))["drawn"] == "").all()
    assert "published_other" not in plot_memory(collect_runs(tmp_path / "b16")).drawn_kinds


def test_gpu_memory_of_the_same_setup_is_starred_on_the_memory_figure(tmp_path: Path) -> None:
    write(tmp_path / "g" / "ddp", ornl_like("DDP", precision="fp32"), 800.0, mem_gib=2.6)
    table = reference_table(collect_runs(tmp_path / "g")).set_index("metric")
    assert table.loc["peak_mem_allocated", "ratio_per_device"] == pytest.approx(
        2.6 / ORNL_VIT_BASE_DDP_ALLOCATED)
    fig = plot_memory(collect_runs(tmp_path / "g"))
    assert "reference" in fig.drawn_kinds and "published_other" not in fig.drawn_kinds
    stars = [c for ax in fig.axes for c in ax.collections if c.get_label() == "_published"]
    assert len(stars) == 1 and stars[0].get_offsets()[0][1] == ORNL_VIT_BASE_DDP_ALLOCATED


def test_tflops_figure_has_the_peak_and_an_mfu_axis(sweep: Path) -> None:
    fig = plot_tflops(collect_runs(sweep))
    assert "peak" in fig.drawn_kinds
    ax = fig.axes[0]
    assert any(line.get_ydata()[0] == pytest.approx(191.5) for line in ax.lines)
    assert [c.get_ylabel() for c in ax.child_axes] == ["MFU"]


# --- the presets (composed, as the sweep composes each point; nothing runs) ---------------

def compose(*overrides: str):
    """The validated RunConfig of ``overrides``, and its preset's hydra.sweeper.params."""
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = hydra_compose("config", list(overrides), return_hydra_config=True)
        params = dict(cfg.hydra.sweeper.params or {})
        cfg = hydra_compose("config", list(overrides))
    return to_run_config(cfg), params


@pytest.mark.parametrize("preset,cpu,model", [
    ("ornl_frontier_weak", "ornl_frontier_weak_cpu", "vit_tiny"),
    # the memory study's model state stands out of the libraries' on memory.png
    ("ornl_frontier_memory", "ornl_frontier_memory_cpu", "vit_small_patch16_224")])
def test_ornl_presets_and_their_cpu_variants(preset: str, cpu: str, model: str) -> None:
    """ORNL's setup in the preset, the same keys in its CPU variant, only smaller."""
    cfg, params = compose(f"experiment={preset}", "cluster=frontier", "cluster.account=X")
    assert (cfg.precision, cfg.train.local_batch_size, cfg.data.name) == ("bf16", 32, "synthetic")
    assert cfg.train.activation_checkpointing and cfg.kernels.compile is False
    assert params["model"] == "vit_base,vit_huge,vit_1b,vit_3b,vit_5b,vit_15b"
    small, small_params = compose(f"experiment={cpu}")
    assert (small.precision, small.train.local_batch_size) == ("bf16", 32)
    assert small.train.activation_checkpointing and small_params["model"] == model
    assert set(small_params["nodes"].split(",")) <= {"1", "2"}


def test_pycls_recipe_steps_are_cumulative() -> None:
    """Each step's preset changes what its name says over the step before, nothing else."""
    steps = ["pycls_recipe", "pycls_recipe_1_amp_fp16", "pycls_recipe_2_fsdp",
             "pycls_recipe_3_foreach_adamw", "pycls_recipe_4_img252"]
    cfgs = [compose(f"experiment={s}")[0] for s in steps]
    seen = [(c.strategy.name, c.precision, c.kernels.adamw, c.model.img_size) for c in cfgs]
    assert seen == [("DDP", "fp32", "for_loop", None), ("DDP", "fp16", "for_loop", None),
                    ("FULL_SHARD", "fp16", "for_loop", None),
                    ("FULL_SHARD", "fp16", "foreach", None),
                    ("FULL_SHARD", "fp16", "foreach", 252)]  # fmt: skip
    assert {c.model.name for c in cfgs} == {"vit_huge_patch14_224"}
    cpu = compose("experiment=pycls_recipe_cpu_2_fsdp")[0]
    assert (cpu.model.name, cpu.strategy.name, cpu.precision) == ("vit_tiny", "FULL_SHARD", "fp16")


def test_memory_cpu_vit_base_preset_is_ornl_published_memory_setup() -> None:
    """experiment=ornl_frontier_memory_cpu_vit_base composes to the setup of ORNL's
    published ViT-Base DDP memory rows (model, strategy, nodes, batch, precision, image
    size, checkpointing, data): the point its memory.png draws ORNL's figure beside."""
    cfg, params = compose("experiment=ornl_frontier_memory_cpu_vit_base")
    rows = published()
    rows = rows[(rows["metric"] == "peak_mem_allocated") & (rows["model"] == params["model"])
                & (rows["strategy"] == params["strategy"]) & (rows["nodes"] == params["nodes"])]
    assert len(rows) == 1 and rows.iloc[0]["value"] == ORNL_VIT_BASE_DDP_ALLOCATED
    row = rows.iloc[0]
    assert (cfg.precision, str(cfg.train.local_batch_size), cfg.data.name) == (
        row["precision"], row["local_batch_size"], row["data"])
    assert cfg.train.activation_checkpointing and row["activation_checkpointing"] == "true"
    assert cfg.model.img_size in (None, int(row["img_size"]))  # None: the model's own, 224
    assert cfg.train.steps - cfg.train.warmup_steps >= 1


@pytest.mark.parametrize("step", sorted({s for s in published()["recipe_step"] if s}))
def test_published_recipe_steps_name_our_presets(step: str) -> None:
    """Each ``recipe_step`` of the published rows is a preset, and so is its CPU sizing
    where the CPU recipe has that step (pycls_recipe_cpu: steps 0-3)."""
    assert compose(f"experiment={step}")[0].experiment == step
    cpu = step.replace("pycls_recipe_", "pycls_recipe_cpu_", 1)
    if (CONF_DIR / "experiment" / f"{cpu}.yaml").is_file():
        assert compose(f"experiment={cpu}")[0].model.name == "vit_tiny"
