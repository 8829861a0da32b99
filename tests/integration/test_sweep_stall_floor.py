"""``hydra.launcher.stall_floor_s`` reaches a real local sweep's progress: a point whose rank
1 hangs at step 3 (``VITFSDP_TEST_FAULT=hang:1:3``) until rank 0's collective times out
(``train.timeout_s=8``) gets stall lines with the floor at 2 s; at the default 180 s it would
get none before its timeout."""

from __future__ import annotations

import re

from tests.conftest import TINY, run_module
from vitfsdp import failures


def test_the_floor_given_to_the_sweep_sets_when_stall_lines_come(tmp_path, monkeypatch):
    monkeypatch.setenv(failures.FAULT_ENV, "hang:1:3")
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", *TINY, "train.steps=6", "train.log_every=1",
                      "cluster.gpus_per_node=2", "train.timeout_s=8",
                      "hydra.launcher.stall_floor_s=2", f"hydra.sweep.dir={sweep_dir}",
                      cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    said = [line for line in out.splitlines() if "no progress for" in line]
    print("\n".join(said), out[-1500:], sep="\n")
    assert proc.returncode == 1  # the point ended timeout
    assert any(re.search(r"\[1/1\] no progress for \d+ s \(last step 2/6 at ", line)
               for line in said), out[-3000:]
