"""The virtual Slurm cluster (launch/virtual/start.sh) through real sinfo, srun and sbatch.

Gated on ``VITFSDP_SLURM``: unset, these tests skip; ``1``, the cluster must be up and a
missing or unreachable one fails them.
"""

from __future__ import annotations

import functools
import os
import subprocess
import time

import pytest

NODES = {f"vnode{i}" for i in range(1, 5)}
PARTITION = "debug"
DEFAULT_CONF = os.path.join(os.environ.get("VITFSDP_SLURM_DIR", "/tmp/vitfsdp-slurm"),
                            "etc", "slurm.conf")
NOT_STARTED = ("virtual Slurm cluster not started (bash launch/virtual/start.sh; "
               "export VITFSDP_SLURM=1 SLURM_CONF=...)")

pytestmark = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)


def slurm(*args: str, cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a Slurm client command against the virtual cluster; output captured as text."""
    env = {**os.environ, "SLURM_CONF": os.environ.get("SLURM_CONF") or DEFAULT_CONF}
    return subprocess.run(list(args), env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@functools.cache
def _cluster_problem() -> str | None:
    """Why the cluster cannot be used, or None when slurmctld answers."""
    conf = os.environ.get("SLURM_CONF") or DEFAULT_CONF
    if not os.path.isfile(conf):
        return f"VITFSDP_SLURM=1 but {conf} does not exist: {NOT_STARTED}"
    try:
        proc = slurm("scontrol", "ping", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"VITFSDP_SLURM=1 but scontrol ping failed ({err}): {NOT_STARTED}"
    if proc.returncode != 0 or "UP" not in proc.stdout:
        return (f"VITFSDP_SLURM=1 but slurmctld does not answer "
                f"({(proc.stdout + proc.stderr).strip()}): {NOT_STARTED}")
    return None


def require_cluster() -> None:
    """Fail (never skip) the calling test when VITFSDP_SLURM=1 and the cluster is unreachable."""
    problem = _cluster_problem()
    if problem:
        pytest.fail(problem, pytrace=False)


def node_states(timeout_s: float = 20) -> dict[str, str]:
    """Node name → state in the debug partition, waiting for jobs of earlier tests to clear."""
    deadline = time.monotonic() + timeout_s
    while True:
        proc = slurm("sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %t")
        assert proc.returncode == 0, proc.stderr
        states = dict(line.split() for line in proc.stdout.splitlines())
        if set(states.values()) == {"idle"} or time.monotonic() > deadline:
            return states
        time.sleep(0.5)


def hostnames(nodelist: str) -> list[str]:
    """Expand a Slurm node list such as ``vnode[1-2]``."""
    proc = slurm("scontrol", "show", "hostnames", nodelist)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_sinfo_lists_four_idle_nodes():
    require_cluster()
    assert node_states() == {node: "idle" for node in NODES}
    proc = slurm("sinfo", "-h", "-o", "%P %a")
    assert f"{PARTITION}* up" in proc.stdout.splitlines()


def test_srun_spreads_ranks_over_two_nodes():
    require_cluster()
    proc = slurm("srun", "-N2", "-n4", "bash", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME")
    assert proc.returncode == 0, proc.stderr
    ranks = dict(line.split() for line in proc.stdout.splitlines())
    assert sorted(ranks, key=int) == ["0", "1", "2", "3"]
    assert len(set(ranks.values())) == 2 and set(ranks.values()) <= NODES


def test_sbatch_wait_runs_two_node_job(tmp_path):
    require_cluster()
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --job-name=vitfsdp-virtual-test\n"
        "#SBATCH --nodes=2\n"
        "#SBATCH --ntasks-per-node=1\n"
        "#SBATCH --time=00:02:00\n"
        f"#SBATCH --output={tmp_path}/job-%j.out\n"
        "echo SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST\n"
        "srun bash -c 'echo step-node=$SLURMD_NODENAME'\n"
    )
    proc = slurm("sbatch", "--wait", "--parsable", str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    lines = (tmp_path / f"job-{job_id}.out").read_text().splitlines()
    nodelist = next(ln.split("=", 1)[1] for ln in lines if ln.startswith("SLURM_JOB_NODELIST="))
    nodes = hostnames(nodelist)
    assert len(nodes) == 2 and set(nodes) <= NODES
    step_nodes = {ln.split("=", 1)[1] for ln in lines if ln.startswith("step-node=")}
    assert step_nodes == set(nodes)


def test_more_nodes_than_partition_is_refused():
    require_cluster()
    proc = slurm("sbatch", "--test-only", "-N", "5", "--wrap", "true")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "not available" in proc.stderr


@pytest.mark.parametrize(("profile", "per_task_gpu"), [("cuda8", False), ("frontier", True)])
def test_the_profiles_srun_step_asks_per_task_gpus_only_where_it_binds_them(
        tmp_path, profile, per_task_gpu):
    """cuda8's step (gpu_bind none) leaves every task the node's GPUs, so a site's cgroups
    cannot hide the other GPUs from NCCL; Frontier's binds one GCD per task, as OLCF's
    guide launches. Checked on the step Slurm made (scontrol show step), 4 GPUs a node."""
    require_cluster()
    from dataclasses import replace

    from tests.integration.test_slurm_scripts import compose_cfg
    from vitfsdp.launch.slurm import srun_options

    cluster = replace(compose_cfg(f"cluster={profile}", "cluster.account=a").cluster,
                      gpus_per_node=4, cpus_per_task=1, srun_args=[])
    step = " ".join(srun_options(cluster))
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=1 --ntasks-per-node=4 --cpus-per-task=1 --gpus-per-node=4\n"
        f"#SBATCH --time=00:02:00 --output={tmp_path}/job-%j.out\n"
        f"srun {step} bash -c '[ $SLURM_LOCALID = 0 ] && "
        "scontrol show step $SLURM_JOB_ID.$SLURM_STEP_ID || true'\n")
    proc = slurm("sbatch", "--wait", "--parsable", str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / f"job-{proc.stdout.strip().split(';')[0]}.out").read_text()
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    assert fields["TresPerNode"] == "gres:gpu:4", out  # the job's GPUs reach the step
    assert ("gres:gpu:1" in fields["TresPerTask"]) is per_task_gpu, (step, out)
