"""Signals to a probe on the virtual Slurm cluster: one that arrives while sbatch runs (the
job's id not yet read) still leaves no job behind, and one while a JAX framework job runs
keeps the framework run already measured and records that job's run interrupted."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import read, requires_jax
from tests.integration.test_probe import _assert_cancelled

pytestmark = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                                reason="the virtual Slurm cluster is not started (make slurm-up)")

#: One world size of 2 ranks on one node of the virtual cluster.
PROBE = ["cluster=virtual", "model=vit_tiny", "strategy=FULL_SHARD", "nodes=1", "device=cpu"]


def _probe(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """Start ``python -m vitfsdp.probe -m args`` in ``tmp_path``, its output to probe.log."""
    with open(tmp_path / "probe.log", "w") as out:
        return subprocess.Popen([sys.executable, "-m", "vitfsdp.probe", "-m", *args, "--out",
                                 str(tmp_path)], cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def _stop(proc: subprocess.Popen, tmp_path: Path) -> int:
    """SIGTERM to the probe; its exit status (within 60 s)."""
    try:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def _kept_world(tmp_path: Path) -> dict:
    (kept,) = (tmp_path / "probes").glob("*.json")
    (world,) = read(kept)["worlds"]
    return world


def test_a_signal_while_sbatch_runs_cancels_the_job_it_submitted(tmp_path):
    """An sbatch that has queued the job but not yet returned its id (3 s more here) when
    SIGTERM arrives: the probe waits for it, then cancels that job and records it, exit 143.
    Before, the SystemExit left sbatch's output unread and the job queued."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "submitted"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\n"
        f"out=$({shlex.quote(shutil.which('sbatch'))} \"$@\") || exit $?\n"
        f"echo \"$out\" > {shlex.quote(str(seen))}.tmp && mv {shlex.quote(str(seen))}.tmp "
        f"{shlex.quote(str(seen))}\n"
        "sleep 3\n"
        "echo \"$out\"\n")
    (bin_dir / "sbatch").chmod(0o755)
    proc = _probe(tmp_path, *PROBE, "--timeout", "120",
                  env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    deadline = time.monotonic() + 60
    while not seen.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert seen.exists(), (tmp_path / "probe.log").read_text()
    job = re.search(r"Submitted batch job (\d+)", seen.read_text())[1]
    assert _stop(proc, tmp_path) == 128 + signal.SIGTERM, (tmp_path / "probe.log").read_text()
    _assert_cancelled(job)
    world = _kept_world(tmp_path)
    assert world["status"] == "failed", world
    assert re.fullmatch(rf"interrupted by SIGTERM after \d+ s: Slurm job {job} \w+ cancelled",
                        world["reason"]), world["reason"]


@requires_jax
def test_a_signal_during_a_jax_framework_job_keeps_what_was_measured(tmp_path):
    """A SIGTERM once the world size is measured (its PyTorch framework run inside its job)
    while its JAX framework run's job is queued: the job is cancelled, the world size stays
    completed with the PyTorch run's loop+wrapper time, and the JAX run is recorded
    ``interrupted`` naming its job. Before, every framework figure of it was dropped."""
    log = tmp_path / "probe.log"
    proc = _probe(tmp_path, *PROBE, "framework=torch,jax", "--timeout", "100")
    found, deadline = None, time.monotonic() + 240
    while found is None and time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"framework run \S+_jax: Slurm job (\d+) submitted", log.read_text())
        time.sleep(0.2)
    assert found, log.read_text()
    assert _stop(proc, tmp_path) == 128 + signal.SIGTERM, log.read_text()
    _assert_cancelled(found[1])
    world = _kept_world(tmp_path)
    assert world["status"] == "completed" and world["gemm"], world
    runs = {f["framework"]: f for f in world["framework"]}
    assert runs["torch"]["status"] == "completed" and runs["torch"]["overhead_s"] >= 0, runs
    assert runs["jax"]["status"] == "interrupted", runs
    assert re.fullmatch(rf"interrupted by SIGTERM after \d+ s: Slurm job {found[1]} \w+ "
                        "cancelled", runs["jax"]["reason"]), runs["jax"]
