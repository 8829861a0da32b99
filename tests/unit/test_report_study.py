"""The study figures (TFLOP/s per GPU, the recipe ablation) are part of the default figure
set and of the report where the runs hold data for them, and absent (no file, no section)
where they do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_records import run_info
from vitfsdp.analysis import collect_runs, study_tables
from vitfsdp.analysis.__main__ import main as analysis_main
from vitfsdp.analysis.figures import write_figures
from vitfsdp.analysis.report import caption, drawn_kinds
from vitfsdp.records import RunRecords

#: Images/s per (experiment preset, nodes): a recipe ``r`` with two steps.
RECIPE_IPS = {("r", 1): 100.0, ("r", 2): 180.0, ("r_1_amp", 1): 150.0, ("r_1_amp", 2): 280.0,
              ("r_2_fsdp", 1): 160.0, ("r_2_fsdp", 2): 300.0}  # fmt: skip


def write_run(run_dir: Path, nodes: int, ips: float, experiment: str | None,
              tflops: bool = True, loss: bool = True) -> None:  # fmt: skip
    """A completed DDP CPU run of preset ``experiment`` with two measured windows; its
    windows record model TFLOP/s per rank where ``tflops``, the loss where ``loss``."""
    info = run_info("DDP", nodes)
    info["config"]["experiment"] = experiment
    records = RunRecords(run_dir)
    records.start(info)
    for step in (2, 4, 6):
        window = {"step_end": step, "warmup": step == 2, "ips": ips, "peak_rss_gib": 1.0,
                  **({"loss": 2.0} if loss else {})}
        if tflops:
            window["tflops_per_gpu"] = ips / (2 * nodes) * 3e9 / 1e12
        records.window(window)
    records.finish("completed")


@pytest.fixture(scope="module")
def recipe_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m vitfsdp.analysis SWEEP --report`` of a recipe sweep."""
    root = tmp_path_factory.mktemp("recipe")
    for (experiment, nodes), ips in RECIPE_IPS.items():
        write_run(root / f"{experiment}_{nodes}", nodes, ips, experiment)
    assert analysis_main([str(root), "--report", "--jobs", "1"]) == 0
    return root / "analysis"


def test_the_provenance_gives_the_analysis_command(recipe_report: Path) -> None:
    """The command that wrote the report, as typed and shell-quoted: a reader can rerun it
    (the report gave the sweep's command, not its own)."""
    import shlex

    md = (recipe_report / "report.md").read_text(encoding="utf-8")
    row = next(line for line in md.splitlines() if line.startswith("| analysis command"))
    command = row.split("`")[1]
    assert shlex.split(command) == ["python", "-m", "vitfsdp.analysis",
                                    str(recipe_report.parent), "--report", "--jobs", "1"]


@pytest.mark.parametrize("name", ["tflops", "recipe"])
def test_report_shows_the_study_figures(recipe_report: Path, name: str) -> None:
    png = recipe_report / f"{name}.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.with_suffix(".svg").is_file()
    md = (recipe_report / "report.md").read_text(encoding="utf-8")
    assert f"]({name}.png)" in md and f"]({name}.svg)" in md
    assert caption(name, None, drawn_kinds(png.read_bytes())) in md  # its own caption
    html = (recipe_report / "report.html").read_text(encoding="utf-8")
    assert html.count('src="data:image/png;base64,') == 6  # + weak scaling, efficiency,
    # memory, loss
    assert "## Recipe ablation\n" in md


def test_no_study_figure_without_its_data(tmp_path: Path) -> None:
    """Runs of no recipe that recorded no TFLOP/s: neither figure is written, and the
    report has no recipe section and no broken figure link."""
    for nodes in (1, 2):
        write_run(tmp_path / f"n{nodes}", nodes, 100.0 * nodes, None, tflops=False)
    assert analysis_main([str(tmp_path), "--report", "--jobs", "1"]) == 0
    out = tmp_path / "analysis"
    assert not (out / "tflops.png").exists() and not (out / "recipe.png").exists()
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "tflops.png" not in md and "recipe.png" not in md and "## Recipe" not in md
    written = write_figures(collect_runs(tmp_path), tmp_path / "w", formats=("png",))
    assert set(written) == {"weak_scaling", "efficiency", "memory", "loss"}


def test_no_loss_section_without_a_loss_figure(tmp_path: Path) -> None:
    """Runs that recorded no loss: no loss.png, and the report has no "Training loss"
    section saying each configuration trained (its figure is not there to show it)."""
    for nodes in (1, 2):
        write_run(tmp_path / f"n{nodes}", nodes, 100.0 * nodes, None, loss=False)
    assert analysis_main([str(tmp_path), "--report", "--jobs", "1"]) == 0
    out = tmp_path / "analysis"
    assert not (out / "loss.png").exists()
    for report in ("report.md", "report.html"):
        text = (out / report).read_text(encoding="utf-8")
        assert "Training loss" not in text and "each configuration trained" not in text


def test_cpu_ranks_flop_rates_are_drawn_in_gflops_per_rank(tmp_path: Path) -> None:
    """10 images/s on 2 ranks at 3 GFLOP per image: 0.015 TFLOP/s a rank would read as
    0.0x; the axis says GFLOP/s per rank and the line starts at 15."""
    from vitfsdp.analysis.figures import plot_tflops

    for nodes in (1, 2):
        write_run(tmp_path / f"n{nodes}", nodes, 100.0 * nodes / 10, None)
    fig = plot_tflops(collect_runs(tmp_path))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "model GFLOP/s per rank"
    assert ax.lines[0].get_ydata()[0] == pytest.approx(10.0 / 2 * 3e9 / 1e9)


def test_report_tables_show_flop_rates_in_the_figures_unit(tmp_path: Path) -> None:
    """The same CPU runs (0.015 TFLOP/s a rank): the weak-scaling and best tables say
    GFLOP/s per rank and print 15, as the figure's axis does, not TFLOP/s/GPU 0.015."""
    from vitfsdp.analysis.report import report_sections

    for nodes in (1, 2):
        write_run(tmp_path / f"n{nodes}", nodes, 100.0 * nodes / 10, None)
    sections = {s.title: s for s in report_sections(study_tables(collect_runs(tmp_path), 10),
                                                    10)}
    for title in ("Weak scaling", "Best configuration per model and node count"):
        table = sections[title].table
        assert "TFLOP/s/GPU (model)" not in table.columns, title
        assert table["GFLOP/s/rank (model)"].tolist()[0] == "15", title


def test_panel_titles_name_the_input_side(tmp_path: Path) -> None:
    from vitfsdp.analysis.figures import plot_weak_scaling

    for nodes in (1, 2):
        write_run(tmp_path / f"n{nodes}", nodes, 10.0 * nodes, None)
    df = collect_runs(tmp_path).assign(img_size=32, num_params=21_600_000)
    assert plot_weak_scaling(df).axes[0].get_title() == "vit_tiny (21.6M params, 32 px)"


def test_a_recipe_step_differs_from_its_baseline_only_over_repeats(tmp_path: Path) -> None:
    """Baseline 100-101 images/s, step 1 150-152, step 2 101-103, three runs each: step 1
    is a result, step 2 overlaps the baseline; the report counts the results."""
    from vitfsdp.analysis.recipe import recipe_table
    from vitfsdp.analysis.report import report_sections

    for name, values in (("r", (100.0, 101.0, 100.5)), ("r_1_amp", (150.0, 152.0, 151.0)),
                         ("r_2_fsdp", (101.0, 103.0, 102.0))):
        for i, ips in enumerate(values):
            write_run(tmp_path / f"{name}_{i}", 1, ips, name)
    df = collect_runs(tmp_path)
    verdicts = recipe_table(df).set_index("step")["vs_baseline"].to_dict()
    assert verdicts == {0: "", 1: "beyond the spread", 2: "within the spread: no difference"}
    section = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}[
        "Recipe ablation"]
    assert "1 of 2 do." in section.text


def test_cost_text_says_when_the_runs_are_not_imagenet_at_224_px(tmp_path: Path) -> None:
    """The cost table extrapolates to ImageNet-1k's 1,281,167 images; the fake runs trained
    digits at 16 px, so the text says these are not an ImageNet epoch's hours. Synthetic
    data at 224 px gets the note that no loading is counted; another --dataset-size (the
    user's own data) gets neither."""
    from vitfsdp.analysis.report import report_sections
    from vitfsdp.analysis.tables import IMAGENET_TRAIN_IMAGES

    write_run(tmp_path / "s" / "a", 1, 100.0, None)
    df = collect_runs(tmp_path / "s")
    assert set(df["data"]) == {"digits"} and set(df["img_size"]) == {16}

    def cost(frame, size=IMAGENET_TRAIN_IMAGES) -> str:
        sections = report_sections(study_tables(frame, size), size)
        return next(s.text for s in sections if s.title == "Cost per epoch")

    assert ("**Not an ImageNet epoch:** these runs trained digits data at 16 px, not "
            "ImageNet-1k at 224 px") in cost(df)
    synthetic = df.assign(data="synthetic", img_size=224)
    assert "Not an ImageNet epoch" not in cost(synthetic)
    assert "synthetic data held in memory, not ImageNet from files" in cost(synthetic)
    assert "ImageNet" not in cost(df, 50_000)


def test_the_cost_text_sets_the_measured_start_up_against_the_plans():
    """runs.csv startup_s in the cost section: median, range, where the most, and the
    plan's assumed 300 s; nothing where no run measured it (records older than it)."""
    import pandas as pd

    from vitfsdp.analysis.report import _startup_text
    from vitfsdp.plan import STARTUP_S

    df = pd.DataFrame({"startup_s": [12.0, 40.0, None, 95.0], "nodes": [1, 2, 4, 8]})
    text = _startup_text(df)
    assert "median 40 s (12-95 s, 3 runs), the most at 8 node(s)" in text
    assert f"the plan assumes {STARTUP_S} s a point" in text
    assert _startup_text(pd.DataFrame({"nodes": [1]})) == ""
    assert _startup_text(df.assign(startup_s=None)) == ""


def test_the_efficiency_caption_names_its_bars_as_the_figure_does(tmp_path: Path) -> None:
    """efficiency.png's capped bars are the efficiency bounds (slowest run over the
    baseline's fastest to fastest over its slowest: mark ``efficiency_bounds``), its
    one-run points hollow (``one_run``); the caption said 'min-max over repeats' of the
    former and nothing of either once the figure drew them as such."""
    from tests.fake_records import write_run as write_fake

    for nodes, values in ((1, [100.0, 101.0, 99.0]), (2, [150.0, 190.0, 200.0]), (4, [380.0])):
        for repeat, ips in enumerate(values):
            info = run_info("DDP", nodes)
            info["config"]["repeat"] = repeat
            write_fake(tmp_path / f"DDP_{nodes}_r{repeat}", info, ips)
    png = write_figures(collect_runs(tmp_path), tmp_path / "w", formats=("png",),
                        names=("efficiency",))["efficiency"]
    drawn = drawn_kinds(png.read_bytes())
    assert {"efficiency_bounds", "one_run"} <= set(drawn) and "repeats" not in drawn
    text = caption("efficiency", None, drawn)
    assert ("capped bars: efficiency bounds (slowest run / baseline's fastest to fastest / "
            "baseline's slowest: points.csv efficiency_min-efficiency_max") in text
    assert "hollow marker, one run: no spread over repeats" in text
    assert "min-max over repeats" not in text
