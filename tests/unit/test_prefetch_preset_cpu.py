"""experiment=prefetch_ablation_cpu measures each run over several timing windows and a few
seconds, not 2 windows of 2 steps (0.2 s): composed only, nothing trains."""

from __future__ import annotations

from tests.unit.test_reference import compose  # the validated RunConfig and the sweep's params


def test_the_cpu_preset_times_several_windows_over_seconds():
    """At ~0.06 s a step (2 gloo ranks of vit_tiny on this 2-core machine, measured
    2026-11-29), 6 steps with 2 warm-up and log_every=2 timed 2 windows of 2 steps, 0.2 s;
    now at least 5 windows of 10 steps, about 3 s."""
    cfg, params = compose("experiment=prefetch_ablation_cpu")
    timed = cfg.train.steps - cfg.train.warmup_steps
    assert cfg.train.warmup_steps % cfg.train.log_every == 0  # no window half warm-up
    assert timed // cfg.train.log_every >= 5 and timed * 0.06 >= 2.5
    assert params["model"] == "vit_tiny" and params["repeat"] == "0,1,2,3,4"
