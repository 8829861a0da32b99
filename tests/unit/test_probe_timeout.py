"""The probe's ``--timeout``: refused, before anything is composed or submitted, where it is
not a finite number of seconds > 0; and what a Slurm probe's first line counts."""

from __future__ import annotations

import math

import pytest

from vitfsdp.probe.__main__ import jax_jobs, main, slurm_wait_line
from vitfsdp.probe.slurm import signal_name, wait_for_job


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "soon"])
def test_a_timeout_not_finite_and_positive_is_refused_before_anything(value, tmp_path,
                                                                      capsys) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        main(["-m", "cluster=virtual", "model=vit_tiny", "nodes=1,2", "--timeout", value,
              "--out", str(out)])
    assert exit_.value.code == 2
    (error,) = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert "argument --timeout" in error and "a finite number > 0" in error, error
    assert "--timeout 1800" in error  # the fix
    assert not out.exists()  # nothing composed, written or submitted


def test_wait_for_job_refuses_nan_instead_of_polling_sacct_without_pause() -> None:
    """NaN made every deadline comparison false and the sleep 0: sacct in a tight loop."""
    with pytest.raises(ValueError, match="finite number of seconds > 0"):
        wait_for_job(object(), math.nan)


def test_the_first_line_counts_the_jax_framework_jobs() -> None:
    """Two world sizes of torch and JAX points, FULL_SHARD and DDP: the JAX points submit a
    framework job per world size and strategy (PyTorch's train in the world's job)."""
    from vitfsdp.plan.__main__ import compose_points

    points = compose_points(["cluster=virtual", "framework=torch,jax", "model=vit_tiny",
                             "strategy=FULL_SHARD,DDP", "nodes=1,2", "device=cpu"])
    assert jax_jobs(points) == 4
    line = slurm_wait_line(2, 60, jax_jobs(points))
    assert line.startswith("[probe] Slurm: 6 job(s) (2 world size(s) + 4 JAX framework run(s)), "
                           "waited for here one after another, each at most --timeout 60 s")
    assert "up to 0:06:00" in line and "a SIGHUP or SIGTERM cancels the job" in line
    assert "(1 world size(s))" in slurm_wait_line(1, 60)


def test_signal_names() -> None:
    assert [signal_name(c) for c in (129, 143, 130, 1)] == [
        "SIGHUP", "SIGTERM", "Ctrl-C (SIGINT)", "exit 1"]
