"""prefetch.png says what prefetch.csv says: each bar's run count, bars whose difference
from the fastest is no result drawn pale and the fastest starred only beyond the spread,
ranks (not GPUs) on CPU runs, a failed run's x at what it reached with the note under the
panel, and prefetch settings apart in greyscale."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs, plot_prefetch
from vitfsdp.analysis.figures.prefetch import (
    PREFETCH_COLORS,
    UNSETTLED_ALPHA,
    UNSETTLED_LABEL,
    WINNER_LABEL,
)
from vitfsdp.analysis.figures.style import NOT_COMPLETED_Y
from vitfsdp.analysis.tables import (
    equivalence_table,
    observed_noise,
    points_table,
    prefetch_table,
)
from vitfsdp.analysis.verdict import BEYOND, FEW_RUNS, WITHIN

#: The least luma (ITU-R BT.601, 0-255: what PIL's convert("L") and a greyscale print keep)
#: between two prefetch colours. The hatching of limit_all_gathers=False moves a bar's mean
#: grey by up to 21 levels (measured on the 300 dpi PNG: 52 -> 74, 121 -> 109, 192 -> 171),
#: so colours 60 apart keep every bar at least ~35 levels (a seventh of the range) from every
#: bar of another setting, hatched or not; the old colours were 114, 121 and 121.
MIN_LUMA_APART = 60


def _luma(color) -> float:
    r, g, b = to_rgb(color)
    return 255 * (0.299 * r + 0.587 * g + 0.114 * b)


def _ablation(root: Path, runs: dict[tuple[str, bool], list[float | None]],
              device: str = "cpu", failed: dict[tuple[str, bool], float | None] | None = None,
              ) -> pd.DataFrame:  # fmt: skip
    """FULL_SHARD at 1 node: one completed run per images/s of each (prefetch, limit), and
    a failed run per entry of ``failed``, after measured windows around its images/s (what
    it reached) or before any (None)."""
    def write(prefetch, limit, ips, repeat, status):
        info = run_info("FULL_SHARD", 1, prefetch=prefetch, device=device)
        info["config"]["strategy"]["limit_all_gathers"] = limit
        info["config"]["repeat"] = repeat
        write_run(root / f"{prefetch}_{limit}_{status}_{repeat}", info, ips, status=status)

    for (prefetch, limit), values in runs.items():
        for repeat, ips in enumerate(values):
            write(prefetch, limit, ips, repeat, "completed")
    for (prefetch, limit), ips in (failed or {}).items():
        write(prefetch, limit, ips, 99, "failed")
    return collect_runs(root)


def _bars(ax) -> dict[tuple[str, bool], list]:
    """The bar patches of each (prefetch, limit_all_gathers), from their containers' labels
    (``BACKWARD_PRE, limit_all_gathers=True``)."""
    bars = {}
    for container in ax.containers:
        if hasattr(container, "patches") and container.get_label().count(", limit_all_gathers="):
            prefetch, limit = container.get_label().split(", limit_all_gathers=")
            bars[prefetch, limit == "True"] = list(container.patches)
    return bars


def _legend(fig) -> list[str]:
    return [t.get_text().replace("\n", " ") for legend in fig.legends for t in legend.texts]


def _middle(patch) -> float:
    return patch.get_x() + patch.get_width() / 2


def test_two_runs_a_variant_draw_pale_bars_no_star_and_say_n_in_the_legend(tmp_path):
    """The reviewer's sweep: two runs of each variant, 1.5-3x apart. prefetch.csv calls none
    of them established (2 and 2 runs separate by chance 1 time in 3), so no bar is drawn as
    a result (pale, outlined in its colour), none starred, and the legend says n=2 for every
    bar. Before, every bar was solid and the legend said only 'min-max over repeats'."""
    df = _ablation(tmp_path, {("BACKWARD_PRE", True): [330.0, 570.0],
                              ("BACKWARD_POST", True): [1320.0, 1660.0],
                              ("NONE", True): [430.0, 930.0]})
    points = points_table(df)
    verdicts = prefetch_table(points, observed_noise(equivalence_table(points, df)))["vs_best"]
    assert set(verdicts) == {"", FEW_RUNS}  # what the figure must not read as a 3x win
    fig = plot_prefetch(df)
    ax = fig.axes[0]
    patches = [p for ps in _bars(ax).values() for p in ps]
    assert len(patches) == 3
    assert all(p.get_facecolor()[3] == pytest.approx(UNSETTLED_ALPHA) for p in patches)
    (post,) = _bars(ax)["BACKWARD_POST", True]
    assert post.get_edgecolor()[:3] == pytest.approx(to_rgb(PREFETCH_COLORS["BACKWARD_POST"]))
    assert not [t for t in ax.texts if t.get_gid() == "winner"]  # the fastest: no star
    legend = _legend(fig)
    assert UNSETTLED_LABEL in legend and WINNER_LABEL not in legend
    assert "every bar: median of n=2 completed runs" in legend
    assert not [t for t in ax.texts if t.get_gid() == "runs"]  # all equal: once, in the legend


def test_a_win_beyond_the_spread_is_solid_and_starred_and_each_bar_says_its_runs(tmp_path):
    """BACKWARD_PRE 4 runs at ~200, BACKWARD_POST 5 and NONE 4 at ~100: both slower beyond
    the spread on enough runs (4 and 5: 2/126 of separating by chance), so every bar is
    solid, the fastest starred, and as the counts differ each bar says its own n."""
    runs = {("BACKWARD_PRE", True): [200.0, 202.0, 204.0, 206.0],
            ("BACKWARD_POST", True): [100.0, 102.0, 104.0, 106.0, 108.0],
            ("NONE", True): [100.0, 102.0, 104.0, 106.0]}
    df = _ablation(tmp_path, runs)
    points = points_table(df)
    table = prefetch_table(points, observed_noise(equivalence_table(points, df)))
    assert list(table["vs_best"]) == ["", BEYOND, BEYOND]
    fig = plot_prefetch(df)
    ax = fig.axes[0]
    bars = _bars(ax)
    assert all(p.get_facecolor()[3] == 1.0 for ps in bars.values() for p in ps)
    (star,) = [t for t in ax.texts if t.get_gid() == "winner"]
    (pre,) = bars["BACKWARD_PRE", True]
    assert star.xy[0] == pytest.approx(_middle(pre))
    assert star.xy[1] >= pre.get_height()  # over the bar (and its error bar)
    counts = {round(t.xy[0], 6): t.get_text() for t in ax.texts if t.get_gid() == "runs"}
    assert counts == {round(_middle(p), 6): f"n={len(runs[v])}"
                      for v, (p,) in bars.items()}
    legend = _legend(fig)
    assert WINNER_LABEL in legend and UNSETTLED_LABEL not in legend
    assert not any(label.startswith("every bar") for label in legend)


def test_within_the_spread_the_fastest_is_pale_beside_a_slower_one_that_is_not(tmp_path):
    """BACKWARD_PRE and BACKWARD_POST overlap (within the spread: no difference), NONE is
    slower beyond it: NONE solid, the two that tie pale, no star."""
    df = _ablation(tmp_path, {("BACKWARD_PRE", True): [200.0, 204.0, 208.0, 212.0],
                              ("BACKWARD_POST", True): [198.0, 202.0, 206.0, 210.0],
                              ("NONE", True): [100.0, 102.0, 104.0, 106.0]})
    points = points_table(df)
    table = prefetch_table(points, observed_noise(equivalence_table(points, df)))
    assert list(table["vs_best"]) == ["", WITHIN, BEYOND]
    ax = plot_prefetch(df).axes[0]
    alpha = {v: p.get_facecolor()[3] for v, (p,) in _bars(ax).items()}
    assert alpha == {("BACKWARD_PRE", True): pytest.approx(UNSETTLED_ALPHA),
                     ("BACKWARD_POST", True): pytest.approx(UNSETTLED_ALPHA),
                     ("NONE", True): 1.0}
    assert not [t for t in ax.texts if t.get_gid() == "winner"]


@pytest.mark.parametrize("device, word", [("cpu", "2 ranks"), ("cuda", "2 GPUs")])
def test_the_title_counts_ranks_on_cpu_and_gpus_on_gpus(tmp_path, device, word):
    """A CPU/gloo run at 1 node is 2 ranks, not 2 GPUs (as the TFLOP/s figure says)."""
    df = _ablation(tmp_path, {("BACKWARD_PRE", True): [200.0], ("NONE", True): [100.0]},
                   device=device)
    title = plot_prefetch(df).axes[0].get_title()
    assert title.endswith(f"at 1 node(s), {word}")
    assert ("GPU" in title) == (device == "cuda")


def test_a_failed_run_is_an_x_at_what_it_reached_and_named_under_the_panel(tmp_path):
    """BACKWARD_POST failed after windows around 120 images/s: its x at that (ips_reached),
    beside its two completed runs; NONE failed before any window: an x at the panel's
    bottom. The note under the panel names both and says where each x stands. Before,
    both were at 4% of the axis, reading as a measurement."""
    df = _ablation(tmp_path, {("BACKWARD_PRE", True): [200.0, 204.0],
                              ("BACKWARD_POST", True): [150.0, 154.0]},
                   failed={("BACKWARD_POST", True): 120.0, ("NONE", True): None})
    reached = df.loc[df["status"] == "failed", ["backward_prefetch", "ips_reached"]]
    assert reached.set_index("backward_prefetch")["ips_reached"]["BACKWARD_POST"] == 120.0
    ax = plot_prefetch(df).axes[0]
    marks = {c.get_offset_transform() is ax.transData: c.get_offsets().tolist()
             for c in ax.collections if c.get_label() == "_not completed"}
    (post,) = _bars(ax)["BACKWARD_POST", True]
    assert marks[True] == [[pytest.approx(_middle(post)), 120.0]]  # data units: images/s
    ((x, y),) = marks[False]  # axes fraction: nothing reached
    assert y == NOT_COMPLETED_Y and x > _middle(post)  # NONE's slot, right of BACKWARD_POST
    note = " ".join(t.get_text() for t in ax.texts if t.get_text().startswith("not completed"))
    note = note.replace("\n", " ")
    assert ("FULL_SHARD BACKWARD_POST limit_all_gathers=True nodes=1 (1 failed of 3 runs; "
            "x at 120 images/s reached)") in note
    assert ("FULL_SHARD NONE limit_all_gathers=True nodes=1 (1 failed; nothing reached: x at "
            "the bottom)") in note


def test_the_prefetch_settings_are_apart_in_greyscale_and_limit_is_hatched(tmp_path):
    """The colours' luma pairwise at least MIN_LUMA_APART; on the PNG turned to greyscale,
    every bar (solid: 5 runs each, all beyond the spread) at least 30 levels from every bar
    of another prefetch setting, hatched or not; limit_all_gathers=False hatched for each
    setting, True not."""
    from PIL import Image

    for a, b in itertools.combinations(PREFETCH_COLORS.values(), 2):
        assert abs(_luma(a) - _luma(b)) >= MIN_LUMA_APART, (a, b)
    runs = {(p, lim): [ips + r for r in range(5)]
            for (p, lim), ips in {("BACKWARD_PRE", True): 300, ("BACKWARD_PRE", False): 250,
                                  ("BACKWARD_POST", True): 200, ("BACKWARD_POST", False): 170,
                                  ("NONE", True): 140, ("NONE", False): 100}.items()}
    fig = plot_prefetch(_ablation(tmp_path, runs))
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=fig.dpi)
    grey = np.asarray(Image.open(png).convert("L"), dtype=float)
    bars = _bars(fig.axes[0])
    assert {v: p.get_hatch() for v, (p,) in bars.items()} == {
        (p, lim): None if lim else "///" for p, lim in runs}
    assert all(p.get_facecolor()[3] == 1.0 for (p,) in bars.values())
    mean = {}
    for v, (p,) in bars.items():  # the bar's inside, 6 px clear of its outline
        box = p.get_window_extent()
        rows = slice(grey.shape[0] - int(box.y1) + 6, grey.shape[0] - int(box.y0) - 6)
        mean[v] = grey[rows, int(box.x0) + 6:int(box.x1) - 6].mean()
    for a, b in itertools.combinations(mean, 2):
        if a[0] != b[0]:
            assert abs(mean[a] - mean[b]) >= 30, (a, b, mean)


def test_a_slower_variant_beyond_the_spread_with_a_failed_run_is_still_settled():
    """prefetch.csv's ``vs_best`` notes failed runs after the verdict (``beyond the spread;
    1 of 3 runs failed``): the bar is a result all the same, and the fastest a winner."""
    from vitfsdp.analysis.figures.prefetch import _settled

    bars = pd.DataFrame({"configuration": ["FULL_SHARD"] * 2, "ips": [100.0, 60.0],
                         "vs_best": [None, f"{BEYOND}; 1 of 3 runs failed"]})
    settled, winner = _settled(bars)
    assert list(settled) == [True, True] and list(winner) == [True, False]


def test_a_footer_keeps_the_cluster_where_the_note_names_only_the_network(tmp_path):
    """The footer leaves ``cluster=`` out only where the contention note names it (shared
    cores, other work); a note of the emulated network alone keeps it."""
    from vitfsdp.analysis.figures.finish import _finish
    from vitfsdp.analysis.figures.panels import _new_figure
    from vitfsdp.analysis.lines import contention_note

    info = run_info("FULL_SHARD", 1, device="cuda")
    info["network"] = {"emulate": True, "emulated": True, "inter_node_gbit_s": 1.0}
    write_run(tmp_path / "run", info, 100.0)
    df = collect_runs(tmp_path)
    assert contention_note(df) == "nodes apart on an emulated 1 Gbit/s link"
    fig, _ = _new_figure(1)
    _finish(fig, "title", df, None, set())
    assert "cluster=local" in fig._supxlabel.get_text()
