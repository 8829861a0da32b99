"""The model state a rank holds and the bytes its node sent: collected from summary.json and
network.json into runs.csv and points.csv, drawn as stacked bars in memory.png, shown in the
report's tables; older records without them draw as before."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.fake_records import run_info
from vitfsdp.analysis import collect_runs, plot_memory, points_table, study_tables
from vitfsdp.analysis.figures import PATCH_PROXIES, TINY_STATE
from vitfsdp.analysis.lines import configurations
from vitfsdp.analysis.report import display, report_sections
from vitfsdp.core.layout import NETWORK_FILE
from vitfsdp.records import RUN_FILE, RunRecords, write_json_atomic

GIB = 2**30
#: The whole model's parameters (bytes): FULL_SHARD holds 1/world of them per rank.
MODEL_BYTES = 0.25 * GIB
PEAK_GIB = 1.5  # measured peak of every window (GiB): the state stays under it


def state(world: int, strategy: str, grads: bool = True) -> dict:
    """model_state_bytes of one rank: params, grads (fp32) and AdamW (2 x params)."""
    shard = world if strategy == "FULL_SHARD" else 1
    params = int(MODEL_BYTES / shard)
    return {"params": params, "grads": params if grads else None, "optimizer": 2 * params}


def write_run(run_dir: Path, strategy: str, nodes: int, extra: dict | None = None) -> None:
    """A completed CPU run of two measured windows at :data:`PEAK_GIB` and ``extra`` in its
    summary (the trainer's ``summary_extra``)."""
    records = RunRecords(run_dir)
    records.start(run_info(strategy, nodes))
    records.summary_extra.update(extra or {})
    for step in (2, 4):
        records.window({"step_end": step, "warmup": step == 2, "ips": 100.0 * nodes,
                        "peak_rss_gib": PEAK_GIB, "loss": 2.0})
    records.finish("completed")


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """FULL_SHARD and DDP at 1, 2, 4 nodes with their model state (rank 0 holding less
    than the most any rank held), HYBRID_2GPU from records older than the field, and the
    bytes FULL_SHARD's two nodes sent at 2 nodes."""
    for strategy in ("FULL_SHARD", "DDP"):
        for nodes in (1, 2, 4):
            most = state(2 * nodes, strategy)
            mine = {k: v // 2 if v else v for k, v in most.items()}
            write_run(tmp_path / f"{strategy}_n{nodes}", strategy, nodes,
                      {"model_state_bytes": mine, "model_state_bytes_max": most})
    for nodes in (1, 2):
        write_run(tmp_path / f"HYBRID_2GPU_n{nodes}", "HYBRID_2GPU", nodes)
    write_json_atomic(tmp_path / "FULL_SHARD_n2" / NETWORK_FILE, {
        "sent_bytes_per_node": [3_000_000_000, 2_500_000_000, None],
        "sent_bytes_total": 5_500_000_000, "inter_node_gbit_s": 1.0, "nodes": 2,
        "network": "vitfsdp-1-2"})
    return tmp_path


def test_state_and_sent_bytes_collected(sweep: Path) -> None:
    df = collect_runs(sweep).set_index("run_dir")
    full = df.loc[str(sweep / "FULL_SHARD_n4")]
    assert full["state_params_gib"] == pytest.approx(MODEL_BYTES / 8 / GIB)  # the max: 1/8
    assert full["state_optimizer_gib"] == pytest.approx(2 * MODEL_BYTES / 8 / GIB)
    ddp = df.loc[str(sweep / "DDP_n4")]
    assert ddp["state_grads_gib"] == pytest.approx(MODEL_BYTES / GIB)  # flat for DDP
    assert math.isnan(df.loc[str(sweep / "HYBRID_2GPU_n1"), "state_params_gib"])
    sent = df.loc[str(sweep / "FULL_SHARD_n2")]
    assert sent["sent_gb_per_node_max"] == pytest.approx(3.0)  # the unreadable one skipped
    assert sent["sent_gb_total"] == pytest.approx(5.5)
    assert df["sent_gb_total"].notna().sum() == 1
    points = points_table(collect_runs(sweep))
    shown = display(points, ["configuration", "nodes", "sent_gb_per_node_max",
                             "state_params_gib"])
    assert list(shown.columns) == ["configuration", "nodes", "sent/node max (GB)",
                                   "params/rank (GiB)"]
    assert set(shown["sent/node max (GB)"]) == {"3.00", "-"}


def test_jax_state_without_max_or_grads(tmp_path: Path) -> None:
    """The JAX trainer records its process's params and optimizer state, grads null."""
    write_run(tmp_path / "a", "FULL_SHARD", 1,
              {"model_state_bytes": state(2, "FULL_SHARD", grads=False)})
    row = collect_runs(tmp_path).iloc[0]
    assert row["state_params_gib"] == pytest.approx(MODEL_BYTES / 2 / GIB)
    assert math.isnan(row["state_grads_gib"])
    fig = plot_memory(collect_runs(tmp_path))
    assert "state_grads" not in fig.drawn_kinds and "state_params" in fig.drawn_kinds
    assert len(fig.axes[0].patches) == 3  # params, optimizer, the rest of the peak


def _bars(ax) -> list[tuple[float, float, float]]:
    """``(middle x, bottom, top)`` of each bar of a panel (x in nodes: the axis is log 2)."""
    return [(math.sqrt(p.get_x() * (p.get_x() + p.get_width())), p.get_y(),
             p.get_y() + p.get_height()) for p in ax.patches]


def test_memory_bars_stack_the_state_under_the_peak(sweep: Path) -> None:
    fig = plot_memory(collect_runs(sweep))
    panels = {ax.get_title().split(":")[-1].strip(): ax for ax in fig.axes}  # may wrap
    full = _bars(panels["FULL_SHARD"])
    assert len(full) == 3 * 4  # per node count: params, grads, optimizer, the rest
    for nodes in (1, 2, 4):
        stack = sorted((b, t) for x, b, t in full if nodes / 1.3 < x < nodes * 1.3)
        per_rank = MODEL_BYTES / (2 * nodes) / GIB
        assert [t - b for b, t in stack[:3]] == pytest.approx([per_rank, per_rank,
                                                               2 * per_rank])
        assert stack[0][0] == 0 and stack[-1][1] == pytest.approx(PEAK_GIB)  # to the peak
    # DDP's bars beside no HYBRID_2GPU bar (older records), the lines at the bars' middles
    other = panels["other strategies"]
    assert len(_bars(other)) == 3 * 4
    ddp = next(ln for ln in other.lines if ln.get_label() == "DDP")
    middles = sorted({round(x, 6) for x, _, _ in _bars(other)})
    assert [round(x, 6) for x in ddp.get_xdata()] == middles
    hybrid = next(ln for ln in other.lines if ln.get_label() == "HYBRID_2GPU")
    assert not set(hybrid.get_xdata()) & set(ddp.get_xdata())  # its own slot
    kinds = {"state_params", "state_grads", "state_optimizer", "state_rest"}
    assert kinds <= set(fig.drawn_kinds)
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {PATCH_PROXIES[k]["label"] for k in kinds} <= labels
    assert "ranks" not in fig.drawn_kinds  # every rank peaked alike: no error bar listed


def test_records_without_state_draw_no_bars(sweep: Path) -> None:
    df = collect_runs(sweep)
    fig = plot_memory(df[df["strategy"] == "HYBRID_2GPU"])
    assert not fig.axes[0].patches
    assert not {k for k in fig.drawn_kinds if k.startswith("state")}
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert not labels & {p["label"] for p in PATCH_PROXIES.values()}


def test_a_state_too_small_to_see_is_said_not_listed(tmp_path: Path) -> None:
    tiny = {"params": 1000, "grads": 1000, "optimizer": 2000}
    write_run(tmp_path / "a", "DDP", 1, {"model_state_bytes_max": tiny})
    fig = plot_memory(collect_runs(tmp_path))
    assert "state_tiny" in fig.drawn_kinds and "state_params" not in fig.drawn_kinds
    ax = fig.axes[0]
    (note,) = [t for t in ax.texts if TINY_STATE in " ".join(t.get_text().split())]
    fig.canvas.draw()  # under the panel, not over the device's memory line at its top
    renderer = fig.canvas.get_renderer()
    assert note.get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0


def test_report_tables_show_state_and_sent_bytes(sweep: Path) -> None:
    df = collect_runs(sweep)
    sections = {s.title: s for s in report_sections(study_tables(df, 1000), 1000)}
    assert "sent/node max (GB)" in sections["Weak scaling"].table.columns
    memory = sections["Memory"].table
    assert {"params/rank (GiB)", "grads/rank (GiB)", "optimizer state/rank (GiB)"} <= set(
        memory.columns)
    old = df[df["strategy"] == "HYBRID_2GPU"]  # records without either: no such columns
    sections = {s.title: s for s in report_sections(study_tables(old, 1000), 1000)}
    assert "params/rank (GiB)" not in sections["Memory"].table.columns
    assert "sent/node max (GB)" not in sections["Weak scaling"].table.columns


def test_runs_on_an_emulated_link_are_their_own_line(tmp_path: Path) -> None:
    """The same point with and without nodes apart on an emulated link: two lines (never
    repeats of one), the emulated one labelled with its rate."""
    for nodes in (1, 2):
        write_run(tmp_path / f"loop{nodes}", "FULL_SHARD", nodes)
        info_dir = tmp_path / f"apart{nodes}"
        write_run(info_dir, "FULL_SHARD", nodes)
        run = json.loads((info_dir / RUN_FILE).read_text())
        run["network"] = {"emulate": True, "emulated": True, "inter_node_gbit_s": 0.2}
        write_json_atomic(info_dir / RUN_FILE, run)
    df = collect_runs(tmp_path)
    assert set(configurations(df)) == {"FULL_SHARD", "FULL_SHARD link 0.2 Gbit/s"}
    assert (points_table(df)["num_repeats"] == 1).all()


def test_an_mi250x_ranks_device_is_named_as_its_gcd(tmp_path: Path) -> None:
    """torch names an MI250X GCD "AMD Instinct MI250X" with 64 GiB: the device memory's name
    says GCD (the package has 128 GB), other devices keep their name; a line's label where
    drawn, else (over 4x the model's values, 94c2e83) the panel's off-scale note."""
    from tests.fake_records import write_run

    for name, gib in (("AMD Instinct MI250X", 64.0), ("NVIDIA H100", 80.0)):
        info = run_info("FULL_SHARD", 1, device="cuda")
        info["device"] |= {"name": name, "memory_gib": gib}
        write_run(tmp_path / name.replace(" ", "_"), info, 100.0)
        ax = plot_memory(collect_runs(tmp_path / name.replace(" ", "_"))).axes[0]
        said = " ".join([ln.get_label() for ln in ax.get_lines()]
                        + [" ".join(t.get_text().split()) for t in ax.texts])
        unit = "AMD Instinct MI250X GCD" if "MI250X" in name else name
        assert f"{unit} memory ({gib:g} GiB)" in said or f"{unit} memory {gib:g} GiB" in said, said
        assert "MI250X memory" not in said  # never the package's name for a GCD
