"""The probe's progress line (the time left at the pace so far, scaled by ranks) and its repeats
(each item the median of three, their spread recorded and flagged above the bound)."""

from __future__ import annotations

import pytest

from vitfsdp.probe.__main__ import eta_line, spread_text


def test_eta_scales_the_measured_pace_by_ranks() -> None:
    """Worlds of 2 and 4 ranks took 60 s (10 s a rank): one of 8 ranks is 80 s more."""
    line = eta_line(60.0, [{"world_size": 2}, {"world_size": 4}], [{"world_size": 8}])
    assert line == ("60 s so far; ETA ~0:01:20 for 1 world size(s) left (measured: 60 s for "
                    "6 rank(s), scaled by ranks)")


def test_the_last_world_says_done_and_none_measured_says_unknown() -> None:
    assert eta_line(90.4, [{"world_size": 2}], []) == "90 s so far; done"
    assert "ETA ~-:--:--" in eta_line(0.0, [], [{"world_size": 2}])


def test_each_item_is_the_median_of_its_repeats_and_its_spread_is_kept(monkeypatch) -> None:
    """A call that takes 1, 3 then 2 time units per repetition (a machine that moved): the
    figure is the median, 2, and the spread (3 - 1) / 2 = 100% is kept and flagged."""
    import torch

    from vitfsdp.probe import measure

    measure.SPREADS.clear()
    per_call = iter([5.0, 1.0, 3.0, 2.0])  # the warm-up call, then the three repeats' loops
    monkeypatch.setattr(measure, "_once", lambda fn, device: next(per_call))
    monkeypatch.setattr(measure, "MIN_REPS", 1)
    t = measure.timed(lambda: None, torch.device("cpu"), target_s=3 * 5.0)  # 1 call a loop
    assert t == 2.0
    summary = measure.spread_summary(0.10)
    assert summary == {"repeats": 3, "items": 1, "median": 1.0, "max": 1.0, "bound": 0.10,
                       "noisy": True}
    assert measure.SPREADS == []  # taken once
    assert "NOISY: 3 repeats spread 100%" in spread_text(summary)


def test_a_quiet_probe_says_how_well_its_repeats_agree() -> None:
    quiet = {"repeats": 3, "items": 40, "median": 0.03, "max": 0.12, "bound": 0.10,
             "noisy": False}
    assert spread_text(quiet) == "; 3 repeats agree within 3% (median item; worst 12%)"
    assert spread_text(None) == ""  # a probe recorded before repeats


def test_the_prediction_names_what_its_probe_held_to() -> None:
    """pred_source carries the probe's repeat spread: the largest median of its world
    sizes, NOISY where one exceeded its bound; nothing for a probe recorded before repeats."""
    from vitfsdp.plan import _probe_source
    from vitfsdp.plan.probed import Probe

    quiet = {"repeats": 3, "items": 40, "median": 0.02, "max": 0.2, "bound": 0.1,
             "noisy": False}
    loud = {**quiet, "median": 0.35, "noisy": True}
    when = "2026-11-27T12:00:00+00:00"
    assert _probe_source(Probe("p.json", "cpu", {}, when, (quiet, {**quiet, "median": 0.04}))
                         ) == f"probe:p.json ({when}; repeats within 4%)"
    assert _probe_source(Probe("p.json", "cpu", {}, when, (quiet, loud))) == (
        f"probe:p.json ({when}; NOISY: repeats spread 35% > 10%)")
    assert _probe_source(Probe("p.json", "cpu", {}, when, ({},))) == f"probe:p.json ({when})"


def test_a_jax_point_takes_jax_loop_time_never_pytorchs() -> None:
    """The framework probe's loop+wrapper time is per framework: a mixed sweep's JAX point
    took the PyTorch run's per-unit FSDP hook time (its (strategy, engine) key), which says
    nothing of a jitted JAX step; a probe file from before the field holds PyTorch's."""
    from vitfsdp.plan.probed import Probe, ProbeWorld

    def world(*entries: dict) -> Probe:
        w = ProbeWorld.from_json({"world_size": 2, "framework": list(entries)})
        return Probe("p.json", "cpu", {2: w})

    torch_fs = {"strategy": "FULL_SHARD", "engine": "fsdp1", "status": "completed",
                "overhead_s": 0.002, "per": "unit"}  # recorded before the framework field
    jax_fs = {**torch_fs, "framework": "jax", "overhead_s": 0.0005}
    probe = world(torch_fs)
    assert probe.framework_s(2, "FULL_SHARD", "fsdp1", True, 5)[0] == pytest.approx(0.01)
    seconds, notes = probe.framework_s(2, "FULL_SHARD", "fsdp1", True, 5, "jax")
    assert seconds == 0.0 and "loop+wrapper time of jax not probed" in notes
    both = world(torch_fs, jax_fs)
    assert both.framework_s(2, "FULL_SHARD", "fsdp1", True, 5, "jax")[0] == pytest.approx(
        0.0025)
    assert both.framework_s(2, "FULL_SHARD", "fsdp1", True, 5, "torch")[0] == pytest.approx(
        0.01)
