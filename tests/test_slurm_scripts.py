"""Slurm job scripts without a cluster: time limits, profile checks, rendered scripts against
saved references, and shell quoting (values with metacharacters never run a command).

The scripts are also submitted to a real Slurm in tests/test_slurm_sweep.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from vitfsdp.config import RunConfig, register_configs, to_run_config
from vitfsdp.launch import ClusterConfig, time_limit_s
from vitfsdp.launch.slurm import render_script, task_spec

register_configs()

REFERENCE = REPO / "tests" / "reference"
#: Fixed paths so that rendered scripts are reproducible (they do not need to exist).
RUN_DIR = Path("/lustre/proj/vitfsdp/runs/sweep/3_model=vit_1b,nodes=2,strategy=HYBRID_8GPU")
WORKDIR = "/lustre/proj/vitfsdp"
PYTHON = "/lustre/proj/venv/bin/python"
#: The point behind each reference script: profile-specific overrides, then the point's own.
PROFILES = {
    "frontier": ["cluster=frontier", "cluster.account=stf218"],
    "cuda8": ["cluster=cuda8", "cluster.partition=gpu"],
}
POINT = ["model=vit_1b", "strategy=HYBRID_8GPU", "nodes=2", "precision=bf16"]


def compose_cfg(*overrides: str) -> RunConfig:
    """The validated RunConfig of ``python -m vitfsdp.train overrides...``."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return to_run_config(compose("config", overrides=list(overrides)))


def render_point(profile_overrides: list[str], point: list[str], run_dir: Path = RUN_DIR,
                 workdir: str = WORKDIR) -> str:
    """Render the job script of one point, as ``--scripts-only`` does."""
    overrides = [*profile_overrides, f"cluster.python={PYTHON}", *point]
    cfg = compose_cfg(*overrides)
    spec = task_spec(cfg.cluster, overrides, run_dir, cfg.nodes)
    return render_script(cfg.cluster, spec, point=run_dir.name, job_name="vitfsdp",
                         workdir=workdir)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 5400), ("5:30", 330), ("00:30:00", 1800), ("2:00:00", 7200), ("1-12", 129600),
     ("1-0:30", 88200), ("2-00:00:01", 172801)],
)
def test_slurm_time_formats(text, seconds):
    assert time_limit_s(text) == seconds


@pytest.mark.parametrize("text", ["1:2:3:4", "30m", "abc", "0", "00:00:00", "-5", "", "1-"])
def test_malformed_time_limit_is_refused(text):
    with pytest.raises(ValueError, match="is not a Slurm time limit; use MM, HH:MM:SS"):
        ClusterConfig(launcher="slurm", time=text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"launch_mode": "mpirun"}, "cluster.launch_mode='mpirun' is unknown; valid: srun"),
        ({"launcher": "pbs"}, "cluster.launcher='pbs' is unknown; valid: local, slurm"),
        ({"account": "a\nrm -rf ~"}, "cluster.account='a\\nrm -rf ~' contains a control"),
        ({"modules": ["rocm\n;id"]}, "cluster.modules[0]="),
        ({"env": {"BAD NAME": "1"}}, "cluster.env.BAD NAME: not a shell variable name"),
        ({"env": {"X": "1\n2"}}, "cluster.env.X='1\\n2' contains a control character"),
        ({"sbatch_args": ["-N 4"]}, "cluster.sbatch_args[0]='-N 4' is not a long option"),
        ({"srun_args": ["--x=1", "; id"]}, "cluster.srun_args[1]='; id' is not a long option"),
        ({"cpus_per_task": 0}, "cluster.cpus_per_task=0 must be >= 1"),
        ({"required": ["account"], "name": "frontier"},
         "cluster.account is required by cluster=frontier"),
    ],
)
def test_bad_profile_values_are_refused(kwargs, message):
    with pytest.raises(ValueError) as err:
        ClusterConfig(**{"launcher": "slurm", **kwargs})
    assert message in str(err.value)
    assert "\n" not in str(err.value).replace("\\n", "")


def test_frontier_needs_an_account():
    with pytest.raises(ValueError, match="cluster.account is required by cluster=frontier"):
        compose_cfg("cluster=frontier")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_rendered_script_matches_reference_and_parses(profile, tmp_path):
    text = render_point(PROFILES[profile], POINT)
    path = REFERENCE / f"{profile}.sbatch"
    if os.environ.get("VITFSDP_UPDATE_REFERENCE") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"rendered {profile} script differs from {path}"
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_profile_shapes_reach_the_script():
    frontier = render_point(PROFILES["frontier"], POINT)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --cpus-per-task=7",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --account=stf218",
                 "#SBATCH --partition=batch", "export NCCL_SOCKET_IFNAME=hsn0",
                 'export MIOPEN_USER_DB_PATH="/tmp/miopen-${USER:-vitfsdp}-${SLURM_JOB_ID}"'):
        assert line in frontier.splitlines()
    assert "srun --ntasks-per-node=8 --cpus-per-task=7 --gpus-per-task=1 --gpu-bind=closest" \
        in frontier
    torchrun = render_point([*PROFILES["cuda8"], "cluster.launch_mode=torchrun"], POINT)
    assert "#SBATCH --ntasks-per-node=1" in torchrun and "#SBATCH --cpus-per-task=64" in torchrun
    launch = [line.strip(" \\") for line in torchrun.split("\nsrun ", 1)[1].splitlines()]
    assert launch[2:9] == [
        "-m torch.distributed.run", "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
        '"--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}"', '"--rdzv-id=${SLURM_JOB_ID}"',
        "-m vitfsdp.train"]
    # torchrun forwards Slurm's SIGUSR2 to the ranks and waits for their checkpoint (the
    # cuda8 profile's signal_delay_s less 15 s); srun starts the ranks itself, no torchrun
    exports = [line for line in torchrun.splitlines() if line.startswith("export ")]
    assert "export PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2" in exports
    wait = int(next(e for e in exports if "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" in e).split("=")[1])
    assert wait == max(10, compose_cfg(*PROFILES["cuda8"], *POINT).cluster.signal_delay_s - 15)
    assert "PET_SIGNALS_TO_HANDLE" not in frontier


STUB = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
if os.path.basename(sys.argv[0]) == "scontrol":
    print("vnode1")
"""


def _stub_path(tmp_path: Path) -> Path:
    """A folder of stand-ins for srun, module and scontrol that log their argv: this test
    checks bash's reading of the script, not Slurm (tests/test_slurm_sweep.py submits)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("srun", "module", "scontrol"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return bin_dir


def test_metacharacters_in_values_never_run_a_command(tmp_path):
    pwned = "pwned"  # relative: a command that ran would create it in the script's cwd
    evil = [f"$(touch {pwned}1)", f"`touch {pwned}2`", f"x; touch {pwned}3",
            f'" ; touch {pwned}4 "']
    setup = tmp_path / f"setup $(touch {pwned}5).sh"
    setup.write_text("export FROM_SETUP=yes\n")
    run_dir = tmp_path / f"run $(touch {pwned}6);x"  # a directory that is never created
    overrides = [
        f"cluster.account='{evil[0]}'", f"cluster.qos='{evil[1]}'",
        f"+cluster.env.PROBE='{evil[2]}'", f"cluster.modules=[\"{evil[1]}\"]",
        f"cluster.setup_script='{setup}'", f"cluster.srun_args=['--comment={evil[2]}']",
        f"cluster.sbatch_args=['--comment={evil[0]}']",
        f"cluster.name='{evil[3]}'",
    ]
    text = render_point(PROFILES["frontier"], [*POINT, *overrides], run_dir=run_dir,
                        workdir=str(tmp_path))
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{_stub_path(tmp_path)}:{os.environ['PATH']}",
           "STUB_LOG": str(log), "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "vnode[1-2]",
           "SLURM_RESTART_COUNT": "1"}  # a requeue: no rerun step (its python is not here)
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not list(tmp_path.glob("pwned*")), "a value ran a command"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    module, srun = calls[0], calls[-1]
    assert module == ["module", "load", evil[1]]
    assert srun[0] == "srun" and f"--comment={evil[2]}" in srun
    assert f"cluster.name='{evil[3]}'" in srun  # the override reaches Hydra as one argument
    assert any(a.startswith("hydra.run.dir=") and "$(touch" in a for a in srun)
    for line in text.splitlines():  # #SBATCH values are quoted for sbatch's own parser too
        if line.startswith("#SBATCH --account") or line.startswith("#SBATCH --comment"):
            assert f"'{evil[0]}'" in line


def test_requeue_exit_code_matches_the_training():
    from vitfsdp.checkpoint import EXIT_PREEMPTED
    from vitfsdp.launch.slurm import PREEMPTED_EXIT

    assert PREEMPTED_EXIT == EXIT_PREEMPTED


@pytest.mark.parametrize("value", [
    r"sweep/0_cluster.time=00\:01\:00,nodes=1",  # Hydra's escaped ':' in a run dir's name
    'a"b', "ends with a backslash\\", 'both \\" of them', "x,y=z w", "$(touch pwned)", "",
])
def test_quote_override_reads_back_exactly_in_hydra(value):
    """The run directory handed to the training must be the one the sweep watches."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from vitfsdp.launch.local import quote_override

    parsed = OverridesParser.create().parse_override(f"hydra.run.dir={quote_override(value)}")
    assert parsed.value() == value


def test_config_hash_ignores_what_does_not_change_the_measurement():
    """Recalibrating the plan, pricing, requeues or polling keep a completed point's identity;
    anything the run measures changes it."""
    from vitfsdp.config import RunConfig
    from vitfsdp.launch.resume import config_hash

    cfg = RunConfig()
    before = config_hash(cfg)
    for key, value in (("plan_efficiency", 0.37), ("price_per_node_hour", 2.5),
                       ("max_requeues", 9), ("poll_s", 1.0), ("inter_node_gbps", 9.8)):
        setattr(cfg.cluster, key, value)
    assert config_hash(cfg) == before
    cfg.train.local_batch_size = 8
    assert config_hash(cfg) != before


def test_stop_signal_that_would_come_at_the_start_is_refused(caplog):
    """cluster.signal_delay_s at or above cluster.time: refused before anything is queued;
    less than SIGNAL_MARGIN_S between them: one warning per time limit."""
    from types import SimpleNamespace

    from vitfsdp import sweep

    options = SimpleNamespace(scripts_only=True, job_name="vitfsdp")

    def check(*overrides, checked=None):
        cfg = compose_cfg(*PROFILES["cuda8"], *POINT, *overrides)
        return sweep._check_slurm_point(SimpleNamespace(cfg=cfg), options,
                                        {} if checked is None else checked)

    assert check("cluster.time=00:01:00", "cluster.signal_delay_s=90") == (
        "cluster.signal_delay_s=90 is not below cluster.time=00:01:00 (60 s): Slurm would "
        "signal the job as it starts; use a longer cluster.time or a smaller "
        "cluster.signal_delay_s")
    checked: dict = {}
    assert check("cluster.time=00:02:00", "cluster.signal_delay_s=30", checked=checked) is None
    assert check("cluster.time=00:02:00", "cluster.signal_delay_s=30", checked=checked) is None
    warned = [r.message for r in caplog.records if "leaves 90 s before the SIGUSR2" in r.message]
    assert len(warned) == 1 and "may stop (preempted) during start-up" in warned[0]
    assert check("cluster.time=00:30:00", "cluster.signal_delay_s=90") is None
