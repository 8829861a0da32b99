"""The sweep's use of the plan's memory verdict (vitfsdp.sweep.choose._consult_plan): which
points run, with a warning, and which are skipped as data."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vitfsdp.launch import LaunchOptions
from vitfsdp.sweep import choose


def _prediction(fits, squeezed=False, tight=False):
    return SimpleNamespace(fits=fits, squeezed=squeezed, tight=tight,
                           reason=f"fits={fits} squeezed={squeezed}")


@pytest.mark.parametrize("run_infeasible", [False, True])
def test_a_squeezed_point_runs_warned_and_only_no_is_skipped(monkeypatch, caplog,
                                                              run_infeasible):
    """``squeezed`` (only the allocated peak fits: ORNL ran two such points on 64 GB GCDs)
    runs with its reason as a warning; ``NO`` is recorded skipped_infeasible unless
    --run-infeasible; ``yes`` runs without a word."""
    verdicts = {0: _prediction(True), 1: _prediction(False, squeezed=True),
                2: _prediction(False)}
    points = [SimpleNamespace(num=n, cfg=n, swept=[f"p={n}"], overrides=[f"p={n}"])
              for n in verdicts]
    monkeypatch.setattr(choose.planner, "predict", lambda cfg: verdicts[cfg])
    monkeypatch.setattr(choose, "_record_infeasible",
                        lambda p, pred: {"status": "skipped_infeasible"})
    with caplog.at_level("WARNING"):
        run, skipped = choose._consult_plan(points, LaunchOptions(
            run_infeasible=run_infeasible))
    assert [p.num for p in run] == ([0, 1, 2] if run_infeasible else [0, 1])
    assert list(skipped) == ([] if run_infeasible else [2])
    assert "p=1: fits=False squeezed=True; running it" in caplog.text
    assert "p=0:" not in caplog.text
