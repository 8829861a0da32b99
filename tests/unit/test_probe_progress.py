"""The probe's progress line: the time left at the pace measured so far, scaled by ranks."""

from __future__ import annotations

from vitfsdp.probe.__main__ import eta_line


def test_eta_scales_the_measured_pace_by_ranks() -> None:
    """Worlds of 2 and 4 ranks took 60 s (10 s a rank): one of 8 ranks is 80 s more."""
    line = eta_line(60.0, [{"world_size": 2}, {"world_size": 4}], [{"world_size": 8}])
    assert line == ("60 s so far; ETA ~0:01:20 for 1 world size(s) left (measured: 60 s for "
                    "6 rank(s), scaled by ranks)")


def test_the_last_world_says_done_and_none_measured_says_unknown() -> None:
    assert eta_line(90.4, [{"world_size": 2}], []) == "90 s so far; done"
    assert "ETA ~-:--:--" in eta_line(0.0, [], [{"world_size": 2}])
