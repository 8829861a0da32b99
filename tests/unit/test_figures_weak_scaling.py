"""The weak-scaling figure as a reader reads it off: tick labels over everything drawn."""

from pathlib import Path

import pandas as pd

from tests.fake_records import run_info, write_run
from vitfsdp.analysis import collect_runs
from vitfsdp.analysis.figures import plot_weak_scaling


def _sweep(root: Path, ips: dict[tuple[str, int], list[float | None]]) -> pd.DataFrame:
    for (strategy, nodes), values in ips.items():
        for repeat, value in enumerate(values):
            info = run_info(strategy, nodes)
            info["config"]["repeat"] = repeat
            write_run(root / f"{strategy}_{nodes}_r{repeat}", info, value,
                      status="completed" if value is not None else "oom")
    return collect_runs(root)


#: A CPU sweep at 1 and 2 nodes that scaled badly: less than a decade from the slowest
#: 2-node run (11) to FULL_SHARD's ideal at 2 nodes (46); the spans overlap at 2 nodes.
POOR = {("FULL_SHARD", 1): [22.0, 23.0, 24.0], ("FULL_SHARD", 2): [11.0, 12.1, 21.0],
        ("HYBRID_2GPU", 1): [21.0, 22.5, 23.0], ("HYBRID_2GPU", 2): [13.0, 14.0, 20.5],
        ("DDP", 1): [20.0, 21.0, 22.0], ("DDP", 2): [15.0, 18.0, 19.0]}


def test_the_y_labels_span_every_value_drawn(tmp_path):
    """On a log axis over less than a decade the reader reads a value off between two
    labels: the labelled ticks run from at or below the lowest value drawn (the slowest
    run's bar, 11) to at or above the highest (the ideal, 46), every one inside the axis."""
    ax = plot_weak_scaling(_sweep(tmp_path, POOR)).axes[0]
    low, high = ax.get_ylim()
    labelled = {t.get_position()[1]: t.get_text() for t in ax.get_yticklabels()
                if t.get_text() and low <= t.get_position()[1] <= high}
    assert min(labelled) <= ax.dataLim.y0 <= 11.0
    assert max(labelled) >= ax.dataLim.y1 >= 46.0
    assert labelled == {10.0: "10", 15.0: "15", 20.0: "20", 30.0: "30", 40.0: "40",
                        50.0: "50"}
