"""A Slurm sweep's stall lines, on the virtual cluster: a point whose rank 1 hangs at step 3
(``VITFSDP_TEST_FAULT=hang:1:3``, passed to the job with the sweep's environment) until rank
0's collective times out (``train.timeout_s=20``) showed an unchanged table for 20 s; with
``hydra.launcher.stall_floor_s=2`` the sweep now says 'no progress for ...' of it, from its
windows in metrics.jsonl, as a local sweep does (test_sweep_stall_floor.py)."""

from __future__ import annotations

import os
import re
import uuid

import pytest

from tests.conftest import run_module
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster
from vitfsdp import failures

pytestmark = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)


def test_a_hung_slurm_point_gets_stall_lines(tmp_path, monkeypatch):
    require_cluster()
    monkeypatch.setenv(failures.FAULT_ENV, "hang:1:3")
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
                      "train.steps=6", "train.log_every=1", "train.warmup_steps=1",
                      "cluster.gpus_per_node=2", "train.timeout_s=20", "cluster.poll_s=1",
                      "hydra.launcher.stall_floor_s=2",
                      f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=400)
    out = proc.stdout + proc.stderr
    said = [line for line in out.splitlines() if "no progress for" in line]
    print("\n".join(said), out[-1500:], sep="\n")
    assert proc.returncode == 1, out[-3000:]  # the point ended timeout
    assert any(re.search(r"\] point 0 \(Slurm job \d+ on vnode\d\): no progress for \d+ s "
                         r"\(last step 2/6 at \d\d:\d\d:\d\d", line) for line in said), out[-3000:]
