"""``--scripts-only`` writing more job scripts than the site queues for a user
(``cluster.max_queued_jobs``) says so last: the warning came while the points were checked,
before every 'wrote', 'submit with' and 'not ended' line (126 of each in a reviewer's ViT-3B
and ViT-5B sweep), which scrolled it away. On the virtual cluster (its sbatch checks the
scripts' shape), three points under a cap of two."""

from __future__ import annotations

import os

import pytest

from tests.conftest import run_module
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster

WARNING = ("--scripts-only wrote 3 job scripts to submit by hand, and cluster=virtual queues at "
           "most 2 jobs of a user (cluster.max_queued_jobs; sbatch rejects more): add "
           "hydra.launcher.pack=by_nodes (1 job: one per node count and repeat round), or "
           "submit at most 2 at a time, the next as earlier jobs end")


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_the_queue_cap_warning_is_the_last_line_after_the_submit_lines(tmp_path):
    require_cluster()
    proc = run_module("vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
                      "train.steps=4", "train.warmup_steps=1", "train.seed=1,2,3",
                      "cluster.max_queued_jobs=2", "--scripts-only",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, timeout=300)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    print("\n".join(lines))
    assert proc.returncode == 3, lines[-20:]  # written, not run
    said = [i for i, line in enumerate(lines) if "cluster.max_queued_jobs" in line]
    submit = [i for i, line in enumerate(lines) if "submit with: sbatch " in line]
    assert len(submit) == 3 and said == [len(lines) - 1], lines  # once, and last
    assert lines[-1].endswith(f"] {WARNING}"), lines[-1]
