"""``--scripts-only`` on the virtual cluster (its sbatch checks the scripts' shape): one line
counts the scripts and names ``submit.sh``, which queues them round by round; writing more
than the site queues for a user (``cluster.max_queued_jobs``) says so last. A DGX user's
90-point sweep printed a 'wrote', a 'submit with: sbatch ...' and a 'not ended' line per
point (and 126 of each in a reviewer's ViT-3B and ViT-5B sweep scrolled the cap's warning
away). Eight points under a cap of seven."""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid

import pytest

from tests.conftest import run_module
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster, slurm
from vitfsdp.launch.local import quote_override

WARNING = ("--scripts-only wrote 8 job scripts to submit by hand, and cluster=virtual queues at "
           "most 7 jobs of a user (cluster.max_queued_jobs; sbatch rejects more): add "
           "hydra.launcher.pack=by_nodes (4 jobs: one per node count and repeat round), or "
           "submit at most 7 at a time, the next as earlier jobs end (submit.sh stops at the "
           "first script sbatch refuses and prints the command that goes on from it)")

#: submit.sh's order: repeat 0's points, those of 1 node first, then repeat 1's
ROUND_ORDER = ["0_nodes=1,repeat=0,strategy=FULL_SHARD", "2_nodes=1,repeat=0,strategy=NO_SHARD",
               "1_nodes=2,repeat=0,strategy=FULL_SHARD", "3_nodes=2,repeat=0,strategy=NO_SHARD",
               "4_nodes=1,repeat=1,strategy=FULL_SHARD", "6_nodes=1,repeat=1,strategy=NO_SHARD",
               "5_nodes=2,repeat=1,strategy=FULL_SHARD", "7_nodes=2,repeat=1,strategy=NO_SHARD"]


def _bash(line: str, cwd) -> subprocess.CompletedProcess:
    """``line`` pasted into bash, against the virtual cluster."""
    return slurm("bash", "-c", line, cwd=cwd, timeout=120)


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_one_line_names_submit_sh_which_queues_round_by_round_and_the_cap_is_said_last(
        tmp_path):
    require_cluster()
    sweep_dir = tmp_path / "my sweep"
    proc = run_module("vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
                      "train.steps=4", "train.warmup_steps=1", "repeat=0,1",
                      "strategy=FULL_SHARD,NO_SHARD", "nodes=1,2", "cluster.max_queued_jobs=7",
                      f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
                      "--scripts-only", f"hydra.sweep.dir={quote_override(str(sweep_dir))}",
                      cwd=tmp_path, timeout=300)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    print("\n".join(lines))
    assert proc.returncode == 3, lines[-20:]  # written, not run
    assert len(lines) < 10 and not [x for x in lines if "submit with: " in x
                                     or "not ended: " in x or "/job.sbatch" in x], lines
    (wrote,) = [x for x in lines if "submit them round by round with: " in x]
    assert "wrote 8 job scripts (a point each); " in wrote
    submit = wrote.split("submit them round by round with: ", 1)[1]
    assert shlex.split(submit) == ["bash", str(sweep_dir / "submit.sh")]
    said = [i for i, line in enumerate(lines) if "cluster.max_queued_jobs" in line]
    assert said == [len(lines) - 1] and lines[-1].endswith(f"] {WARNING}"), lines  # once, last
    # the fourth script names a partition the cluster has not: sbatch refuses it, and
    # submit.sh stops there with the command that goes on once it is fixed
    fourth = sweep_dir / ROUND_ORDER[3] / "job.sbatch"
    text = fourth.read_text()
    fourth.write_text(text.replace("#SBATCH --partition=debug\n", "#SBATCH --partition=nope\n"))
    ids = []
    try:
        first = _bash(f"{submit} 1 --hold", tmp_path)  # held: queued, never run
        ids += [x.split()[-1] for x in first.stdout.splitlines() if "Submitted batch" in x]
        assert first.returncode == 1 and len(ids) == 3, first.stdout + first.stderr
        refused = first.stderr.strip().splitlines()[-1]
        assert f"sbatch refused script 4 of 8 ({fourth}); " in refused, refused
        fourth.write_text(text)
        go_on = _bash(refused.split("go on with: ", 1)[1], tmp_path)
        ids += [x.split()[-1] for x in go_on.stdout.splitlines() if "Submitted batch" in x]
        assert go_on.returncode == 0 and len(ids) == 8, go_on.stdout + go_on.stderr
        queue = slurm("squeue", "-h", "-j", ",".join(ids), "-o", "%i %r %o").stdout
        queued = {int(i): (reason, script) for i, reason, script in
                  (x.split(" ", 2) for x in queue.splitlines())}
        assert [queued[i][1] for i in sorted(queued)] == [
            str(sweep_dir / name / "job.sbatch") for name in ROUND_ORDER]
        assert {reason for reason, _ in queued.values()} == {"JobHeldUser"}
    finally:
        if ids:
            slurm("scancel", *ids)
