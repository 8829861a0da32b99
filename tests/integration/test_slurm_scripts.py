"""Slurm job scripts without a cluster: time limits, profile checks, rendered scripts against
saved references, and shell quoting (values with metacharacters never run a command).

The scripts are also submitted to a real Slurm in tests/integration/test_slurm_sweep.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO, run_module
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster, slurm
from vitfsdp.config import RunConfig, check_group_choices, register_configs, to_run_config
from vitfsdp.launch import CONFIG_PATH_ENV, ClusterConfig, time_limit_s
from vitfsdp.launch.slurm import render_script, sbatch_options, setup_lines, task_spec

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
#: Every Slurm profile's saved reference (tests/reference/<profile>.sbatch): its overrides and
#: a point that fits its nodes.
REFERENCES = {
    **{name: (overrides, POINT) for name, overrides in PROFILES.items()},
    "lumi": (["cluster=lumi", "cluster.account=project_465000001"], POINT),
    "perlmutter": (["cluster=perlmutter", "cluster.account=m1234"],
                   ["model=vit_huge", "strategy=HYBRID_2GPU", "nodes=2", "precision=bf16"]),
    "virtual": (["cluster=virtual"], ["strategy=HYBRID_2GPU", "nodes=2"]),
}


def compose_cfg(*overrides: str) -> RunConfig:
    """The validated RunConfig of ``python -m vitfsdp.train overrides...``."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return to_run_config(compose("config", overrides=list(overrides)))


def render_point(profile_overrides: list[str], point: list[str], run_dir: Path = RUN_DIR,
                 workdir: str = WORKDIR, python: str | None = PYTHON) -> str:
    """Render the job script of one point, as ``--scripts-only`` does (``python``: the
    cluster.python override; None = the profile's)."""
    python_override = [f"cluster.python={python}"] if python else []
    overrides = [*profile_overrides, *python_override, *point]
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
        ({"conda_env": "torch", "venv": "/v"}, "are set; activate one environment"),
        ({"prepend_env": {"1BAD": ["/x"]}}, "cluster.prepend_env.1BAD: not a shell variable"),
        ({"prepend_env": {"PATH": "/x"}}, "cluster.prepend_env.PATH='/x' must be a list"),
        ({"prepend_env": {"PATH": ["/a:/b"]}}, "cluster.prepend_env.PATH[0]='/a:/b' holds ':'"),
        ({"cache_dir": "/c\n;id"}, "cluster.cache_dir='/c\\n;id' contains a control"),
        ({"conda_env": "a\nb"}, "cluster.conda_env='a\\nb' contains a control character"),
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


@pytest.mark.parametrize("profile", sorted(REFERENCES))
def test_rendered_script_matches_reference_and_parses(profile, tmp_path):
    text = render_point(*REFERENCES[profile])
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
                 "#SBATCH --partition=batch", "export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3",
                 "#SBATCH --network=disable_rdzv_get",
                 'export MIOPEN_USER_DB_PATH="/tmp/miopen-${USER:-vitfsdp}-${SLURM_JOB_ID}"'):
        assert line in frontier.splitlines()
    assert "srun --ntasks-per-node=8 --cpus-per-task=7 --gpus-per-task=1 --gpu-bind=closest" \
        in frontier
    torchrun = render_point([*PROFILES["cuda8"], "cluster.launch_mode=torchrun"], POINT)
    assert "#SBATCH --ntasks-per-node=1" in torchrun and "#SBATCH --cpus-per-task=64" in torchrun
    step = next(s for s in torchrun.split("\nsrun ") if "-m torch.distributed.run" in s)
    launch = [line.strip(" \\") for line in step.splitlines()]
    assert launch[2:10] == [
        "-m torch.distributed.run", "--log-dir=/dev/null", "--nnodes=2", "--nproc-per-node=8",
        "--rdzv-backend=c10d",
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
if os.path.basename(sys.argv[0]) == "srun" and any(a.startswith("--output=") for a in sys.argv):
    for path, text in json.loads(os.environ.get("STUB_SRUN_WRITES", "{}")).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)  # what the training records
        with open(path, "w") as out:
            out.write(text)
    sys.exit(int(os.environ.get("STUB_SRUN_RC", "0")))  # the training step's exit code
"""


def _stub_path(tmp_path: Path) -> Path:
    """A folder of stand-ins for srun, module and scontrol that log their argv: this test
    checks bash's reading of the script, not Slurm (test_slurm_sweep.py submits)."""
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
        f"cluster.name='{evil[3]}'", "cluster.python=python3",  # the job checks it is there
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
    module, srun = calls[0], calls[-2]  # the training step; the last removes the caches
    assert calls[-1][0] == "srun" and "rm" in calls[-1]
    assert module == ["module", "load", evil[1]]
    assert srun[0] == "srun" and f"--comment={evil[2]}" in srun
    assert f"cluster.name='{evil[3]}'" in srun  # the override reaches Hydra as one argument
    assert any(a.startswith("hydra.run.dir=") and "$(touch" in a for a in srun)
    for line in text.splitlines():  # #SBATCH values are quoted for sbatch's own parser too
        if line.startswith("#SBATCH --account") or line.startswith("#SBATCH --comment"):
            assert f"'{evil[0]}'" in line


@pytest.mark.parametrize(("override", "message"), [
    ("cluster.venv=/opt/no/such/venv", "cluster.venv=/opt/no/such/venv has no bin/activate"),
    ("cluster.setup_script=/opt/no/such.sh",
     "cluster.setup_script=/opt/no/such.sh is not a readable file"),
    ("cluster.python=/opt/no/python",
     "cluster.python=/opt/no/python is not an executable or on PATH"),
])
def test_missing_environment_paths_end_the_job_in_one_line(tmp_path, override, message):
    """The job's first lines check the environment's paths on its node: a missing one ends
    the job at once, before any module or srun, with one line naming the field."""
    text = render_point(PROFILES["frontier"], [*POINT, override], run_dir=tmp_path / "run",
                        workdir=str(tmp_path))
    (tmp_path / "job.sbatch").write_text(text)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{_stub_path(tmp_path)}:{os.environ['PATH']}",
           "STUB_LOG": str(log), "SLURMD_NODENAME": "vnode3"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == f"vitfsdp: {message} on vnode3\n"
    assert not log.exists() or "srun" not in log.read_text()


@pytest.mark.parametrize(("restarts", "saved_by", "requeued"), [
    (0, 0, True), (1, 1, True), (2, 2, False), (0, None, False), (1, 0, False)])
def test_a_stopped_training_is_requeued_at_most_max_requeues_times(tmp_path, restarts,
                                                                    saved_by, requeued):
    """The training's exit code after a signal requeues the job while SLURM_RESTART_COUNT is
    below cluster.max_requeues (2 here) and this attempt saved the checkpoint; past the
    limit the job ends with that code and one line saying how to resume. An attempt that
    saved nothing (no checkpoint, or an earlier attempt's) is not requeued, with one line
    saying why. The job asks to be requeueable."""
    from vitfsdp.core.layout import EXIT_PREEMPTED

    run_dir = tmp_path / "run"
    writes = {str(run_dir / "run.json"): json.dumps({"attempt": restarts})}
    if saved_by is not None:
        writes[str(run_dir / "checkpoint" / "meta.json")] = json.dumps({"attempt": saved_by,
                                                                         "step": 40})
    text = render_point(PROFILES["cuda8"], [*POINT, "cluster.max_requeues=2",
                                            "cluster.python=" + sys.executable],
                        run_dir=run_dir, workdir=str(tmp_path))
    assert "#SBATCH --requeue" in text.splitlines()
    (tmp_path / "job.sbatch").write_text(text)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{_stub_path(tmp_path)}:{os.environ['PATH']}",
           "STUB_LOG": str(log), "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "vnode1",
           "SLURM_JOB_NUM_NODES": "1", "SLURM_RESTART_COUNT": str(restarts),
           "STUB_SRUN_RC": str(EXIT_PREEMPTED), "STUB_SRUN_WRITES": json.dumps(writes)}
    env.pop("VITFSDP_SLURM", None)
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, proc.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert (["scontrol", "requeue", "4242"] in calls) == requeued
    if restarts == 2:
        assert proc.stderr.strip().endswith("after 2 requeue(s) (cluster.max_requeues): not "
                                            "requeued again; sbatch this script to resume")
    elif not requeued:
        kept = "no checkpoint" if saved_by is None else "the checkpoint of step 40 is an " \
                                                        "earlier attempt's"
        assert f"vitfsdp: attempt {restarts} saved nothing ({kept}): it stopped before its " \
               "first timing window ended" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("cache_dir", "removed"), [
    ("/tmp/vitfsdp-$SLURM_JOB_ID", ["/tmp/vitfsdp-4242"]), ("/tmp/shared-cache", [])])
def test_the_job_removes_its_own_caches_on_every_node_after_the_training(tmp_path, cache_dir,
                                                                         removed):
    """A per-job cache_dir (cuda8's /tmp/vitfsdp-$SLURM_JOB_ID) is removed by one task per
    node once the training step ends, failed or not; one shared between jobs is kept."""
    text = render_point(PROFILES["cuda8"], [*POINT, f"cluster.cache_dir={cache_dir}",
                                            "cluster.python=python3"],
                        run_dir=tmp_path / "run", workdir=str(tmp_path))
    (tmp_path / "job.sbatch").write_text(text)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{_stub_path(tmp_path)}:{os.environ['PATH']}",
           "STUB_LOG": str(log), "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "vnode1",
           "SLURM_JOB_NUM_NODES": "2", "STUB_SRUN_RC": "1"}
    env.pop("VITFSDP_SLURM", None)
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr  # the training's exit code, not the clean-up's
    sruns = [c for c in map(json.loads, log.read_text().splitlines()) if c[0] == "srun"]
    training = next(i for i, c in enumerate(sruns) if "vitfsdp.train" in " ".join(c))
    after = [c for c in sruns[training + 1:] if "rm" in c]
    assert [c[c.index("-rf") + 1:] for c in after] == ([removed] if removed else [])
    if removed:
        assert after[0][1:4] == ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1"]


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

    from vitfsdp.sweep.check import _check_slurm_point

    options = SimpleNamespace(scripts_only=True, job_name="vitfsdp")

    def check(*overrides, checked=None):
        cfg = compose_cfg(*PROFILES["cuda8"], *POINT, *overrides)
        return _check_slurm_point(SimpleNamespace(cfg=cfg, auto_held=False), options,
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


# ---------------------------------------------------------------- the environment on the nodes


def _setup_of(text: str) -> list[str]:
    """The lines between the #SBATCH block and the launch of a rendered script."""
    lines = text.splitlines()
    return lines[lines.index("set -eo pipefail"):lines.index("export OMP_NUM_THREADS=7")]


@pytest.mark.parametrize(
    ("overrides", "activation", "python"),
    [
        (["cluster.conda_env=/proj/envs/torch210"],
         ['eval "$(conda shell.bash hook)"', "conda activate /proj/envs/torch210"], "python"),
        (["cluster.venv='/proj/my venv'"], ["source '/proj/my venv/bin/activate'"], "python"),
        (["cluster.export_env=false"], ["unset SLURM_EXPORT_ENV"], sys.executable),
        ([], [], sys.executable),
    ],
)
def test_environment_is_activated_before_the_launch(overrides, activation, python):
    """conda or venv activation after the modules, and the job runs that env's python; with
    --export=NONE the script unsets SLURM_EXPORT_ENV first (else srun steps would drop what it
    set up) and keeps the sweeping interpreter's absolute path."""
    text = render_point(PROFILES["frontier"], [*POINT, *overrides], python=None)
    setup = _setup_of(text)
    modules = next(i for i, line in enumerate(setup) if line.startswith("module load "))
    for line in activation:
        assert line in setup
        assert (setup.index(line) > modules) != (line == "unset SLURM_EXPORT_ENV")
    assert ("#SBATCH --export=NONE" in text) == ("cluster.export_env=false" in overrides)
    launch = text.split("\nsrun --ntasks-per-node=8 ", 1)[1].splitlines()
    assert launch[1].strip(" \\") == f"{python} -u"


def test_frontier_environment_follows_the_olcf_guide():
    setup = _setup_of(render_point(*REFERENCES["frontier"]))
    assert setup[1] == ("module load PrgEnv-gnu/8.7.0 cpe/26.03 miniforge3/23.11.0-0 rocm/7.1.1 "
                        "rccl-net-plugin/1.0 craype-accel-amd-gfx90a")
    prepend = 'export LD_LIBRARY_PATH="${CRAY_LD_LIBRARY_PATH}"${LD_LIBRARY_PATH:+:'
    assert prepend + "${LD_LIBRARY_PATH}}" in setup
    mkdir = next(line for line in setup if line.startswith("srun "))
    for var in ("XDG_CACHE_HOME", "TORCH_HOME", "TRITON_CACHE_DIR", "HF_HOME",
                "MIOPEN_USER_DB_PATH"):  # every cache is exported before the srun that makes it
        exported = next(i for i, line in enumerate(setup) if line.startswith(f"export {var}="))
        assert exported < setup.index(mkdir) and f'"${{{var}}}"' in mkdir
    assert 'export XDG_CACHE_HOME="/tmp/vitfsdp-${SLURM_JOB_ID}"' in setup


def test_prepend_and_cache_expand_only_node_variables(tmp_path):
    """``$NAME`` in prepend_env and cache_dir expands on the node; ``$(...)``, backticks and
    quotes stay text (conda_env reaches ``conda activate`` as one word); an unset variable
    gets no empty (current directory) entry."""
    hostile = ["$(touch pwned1)", "`touch pwned2`", '"; touch pwned3; "', "a'b"]
    cluster = ClusterConfig(
        launcher="slurm", miopen_cache_per_job=True,
        prepend_env={"LD_LIBRARY_PATH": ["/opt/ofi-$SLURM_JOB_ID/lib", *hostile, "${HOME}/x"],
                     "VITFSDP_EMPTY": ["/e"], "VITFSDP_NONE": []},
        cache_dir=f"{tmp_path}/c-$SLURM_JOB_ID $(touch pwned4)",
        conda_env="env $(touch pwned5) `touch pwned6`;'\"")
    script = tmp_path / "setup.sh"
    script.write_text('srun() { printf "%s\\n" "$@" >> srun.args; }\nscontrol() { echo n1; }\n'
                      'conda() { printf "%s\\n" "$@" >> conda.args; }\n'
                      + "\n".join(setup_lines(cluster))
                      + '\nprintf "%s\\n" "$LD_LIBRARY_PATH" "$VITFSDP_EMPTY" "$TORCH_HOME"'
                      + ' "${VITFSDP_NONE-unset}"\n')
    env = {"PATH": os.environ["PATH"], "HOME": "/h", "USER": "u", "SLURM_JOB_ID": "77",
           "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_NUM_NODES": "1", "LD_LIBRARY_PATH": "/old"}
    proc = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    cache = f"{tmp_path}/c-77 $(touch pwned4)"
    assert proc.stdout.splitlines() == [
        ":".join(["/opt/ofi-77/lib", *hostile, "/h/x", "/old"]), "/e", f"{cache}/torch", "unset"]
    args = (tmp_path / "srun.args").read_text().splitlines()
    trap = args.index("rm")  # the EXIT trap's step, after its three options
    assert args[trap - 6:trap - 2] == [f"{cache}/huggingface", f"{cache}/nv-compute",
                                       "/tmp/miopen-u-77", "--nodes=1"]
    assert args[trap + 1:] == ["-rf", cache, "/tmp/miopen-u-77"]
    assert (tmp_path / "conda.args").read_text().splitlines() == [
        "shell.bash", "hook", "activate", cluster.conda_env]
    assert not list(tmp_path.glob("pwned*")), "a value ran a command"


def test_user_profile_from_a_directory_of_ones_own(tmp_path, monkeypatch):
    """A profile in the user's folder (VITFSDP_CONFIG_PATH) extends a shipped one and drives
    ``--scripts-only``; the script carries the variable so the nodes find the profile too."""
    folder = tmp_path / "my-profiles"
    (folder / "cluster").mkdir(parents=True)
    (folder / "cluster" / "mysite.yaml").write_text(
        "defaults:\n  - frontier\n  - _self_\nname: mysite\naccount: stf218\n"
        "max_nodes: 16\nvenv: /proj/venvs/torch\n"
        "check_paths: false\n")  # the venv is the site's: --scripts-only checks paths too
    with pytest.raises(ValueError, match="cluster=mysite is unknown; valid: cuda8, frontier"):
        check_group_choices(["cluster=mysite"])
    monkeypatch.setenv(CONFIG_PATH_ENV, str(folder))
    check_group_choices(["cluster=mysite"])
    proc = run_module("vitfsdp.sweep", "-m", "cluster=mysite", "nodes=1", "--scripts-only",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 3, proc.stderr  # written, not run
    [script] = (tmp_path / "sweep").glob("*/job.sbatch")
    setup = _setup_of(script.read_text())
    assert "#SBATCH --account=stf218" in script.read_text()
    assert setup[2].startswith("module load PrgEnv-gnu/8.7.0 ")  # from frontier, after the
    assert setup[1].startswith("[[ -r /proj/venvs/torch/bin/activate ]] || ")  # venv's check
    assert "source /proj/venvs/torch/bin/activate" in setup
    assert f"export {CONFIG_PATH_ENV}={folder}" in setup
    assert "    cluster=mysite \\" in script.read_text().splitlines()


PROBE = """#!/bin/bash
{ echo "ld=${LD_LIBRARY_PATH}"; echo "miopen=${MIOPEN_USER_DB_PATH}"
  [[ -d ${MIOPEN_USER_DB_PATH} && -d ${TRITON_CACHE_DIR} ]] && echo "dirs=made"
  echo "args=$*"; } >> "${PROBE_OUT}"
"""


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_job_setup_on_the_virtual_cluster(tmp_path):
    """A real job: its setup creates the MIOpen and cache directories before the tasks start
    (the tasks see them), the tasks see the prepended paths (the interpreter itself is found
    through PATH), and the job removes its own caches when it ends."""
    require_cluster()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vitfsdp-probe").write_text(PROBE)
    (bin_dir / "vitfsdp-probe").chmod(0o755)
    out = tmp_path / "probe.txt"
    text = render_point(
        ["cluster=virtual", "cluster.miopen_cache_per_job=true",
         f"cluster.cache_dir={tmp_path}/cache-$SLURM_JOB_ID", f"+cluster.env.PROBE_OUT={out}",
         f"+cluster.prepend_env.PATH=[{bin_dir}]",
         f"+cluster.prepend_env.LD_LIBRARY_PATH=[{tmp_path}/ofi-$SLURM_JOB_ID]"],
        ["nodes=1"], run_dir=tmp_path / "run", workdir=str(tmp_path),
        python="vitfsdp-probe")
    (tmp_path / "run" / "logs").mkdir(parents=True)  # as write_scripts does
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    proc = slurm("sbatch", "--parsable", "--wait", str(script), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    job_id = proc.stdout.strip().split(";")[0]
    miopen = f"/tmp/miopen-{os.environ.get('USER', 'vitfsdp')}-{job_id}"
    try:
        train = [line for line in out.read_text().splitlines() if "vitfsdp.train" in line]
        assert len(train) == 2  # one line per task (2 ranks on the node)
        lines = set(out.read_text().splitlines())
        assert {f"ld={tmp_path}/ofi-{job_id}", f"miopen={miopen}", "dirs=made"} <= lines
        assert not (tmp_path / f"cache-{job_id}").exists() and not Path(miopen).exists()
    finally:
        subprocess.run(["rm", "-rf", miopen], check=False)


#: srun, sbcast, module and scontrol that do what the job needs on one host: srun runs its
#: command (one task), sbcast copies, module and scontrol log / answer. Run by this test's own
#: interpreter, not ``env python3``: a pyenv shim found first on PATH puts its Python's bin
#: first on PATH for what it runs, so srun's ``python`` was that Python, not the activated
#: environment's (seen under a virtual environment whose PATH starts with pyenv's shims).
RUNNING_STUB = f"""#!{sys.executable}
import json, os, shutil, sys
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps([name, *args]) + "\\n")
if name == "scontrol":
    print("vnode1")
elif name == "sbcast":
    shutil.copy(args[-2], args[-1])
elif name == "srun":
    command = next(i for i, a in enumerate(args) if not a.startswith("-"))
    os.execvp(args[command], args[command:])
elif name == "pigz":
    os.execvp("gzip", ["gzip", *args])
"""


@pytest.mark.parametrize("nodes", [1, 2])
def test_sbcast_env_and_multi_node_env_reach_the_ranks(tmp_path, nodes):
    """Frontier's cluster.sbcast_env (OLCF's sbcast guide): the packed environment is copied to
    the node-local folder, unpacked, activated, its conda-unpack run, and the ranks run its
    python; NCCL_NET=OFI (multi_node_env) only in a job of more than one node, Socket
    (single_node_env) in a job of one, as OLCF's PyTorch guide sets them."""
    import tarfile

    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "activate").write_text('export PATH="$VITFSDP_ENV_DIR/bin:$PATH"\n'
                                          "export FROM_ENV=yes\n")
    (env / "bin" / "python").write_text(
        f"#!/bin/bash\nprintf '%s\\n' \"$FROM_ENV\" \"${{NCCL_NET:-unset}}\" > {tmp_path}/ran\n")
    (env / "bin" / "conda-unpack").write_text(f"#!/bin/bash\ntouch {tmp_path}/unpacked\n")
    for tool in ("python", "conda-unpack"):
        (env / "bin" / tool).chmod(stat.S_IRWXU)
    with tarfile.open(tmp_path / "env.tar.gz", "w:gz") as tar:
        tar.add(env, arcname=".")
    text = render_point(PROFILES["frontier"], [*POINT, f"cluster.sbcast_env={tmp_path}/env.tar.gz",
                                               f"cluster.sbcast_dir={tmp_path}/nvme"],
                        python=None, run_dir=tmp_path / "run", workdir=str(tmp_path))
    assert "#SBATCH --constraint=nvme" in text
    (tmp_path / "nvme").mkdir()
    bin_dir = tmp_path / "stubs"
    bin_dir.mkdir()
    for name in ("srun", "module", "scontrol", "sbcast", "pigz"):
        (bin_dir / name).write_text(RUNNING_STUB)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(text)
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "STUB_LOG": str(tmp_path / "calls.jsonl"), "SLURM_JOB_ID": "77",
               "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_JOB_NODELIST": "vnode1",
               "SLURM_RESTART_COUNT": "1"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=run_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ran").read_text().split() == ["yes", "OFI" if nodes > 1 else "Socket"]
    assert (tmp_path / "unpacked").exists()
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert ["pigz", "-d"] in calls  # [S]'s unpacking on the node's cores, where pigz is
    unpack = next(c for c in calls if c[0] == "srun" and "bash" in c)
    assert "--cpus-per-task=56" in unpack, unpack  # the cores the job holds: 8 tasks x 7
    assert (tmp_path / "nvme" / "vitfsdp-env-77" / "bin" / "activate").is_file()


@pytest.mark.parametrize("sbatch_args", [[], ["--wckey=proj"]])
def test_the_submitted_script_asks_no_wckey_the_profile_does_not(tmp_path, sbatch_args):
    """submitit writes ``--wckey=submitit`` unless told otherwise, which a site enforcing
    wckeys refuses only at submission; the script submitit makes of a point's parameters
    carries the profile's wckey or none, as ``--scripts-only`` writes it."""
    from dataclasses import replace

    import submitit

    from vitfsdp.launch.slurm import executor_parameters

    cluster = replace(compose_cfg("cluster=cuda8").cluster, sbatch_args=sbatch_args)
    executor = submitit.SlurmExecutor(folder=tmp_path)
    executor.update_parameters(**executor_parameters(cluster, 2, "vitfsdp", tmp_path))
    text = executor._make_submission_file_text("python -c 1", "uid")
    wckeys = [line for line in text.splitlines() if "wckey" in line]
    assert wckeys == [f"#SBATCH {a}" for a in sbatch_args], text


@pytest.mark.parametrize("profile", ["cuda8", "frontier", "virtual"])
def test_the_submitted_script_asks_to_be_requeueable(tmp_path, profile):
    """submitit requeues a point after its time limit with ``scontrol requeue``, which a site
    whose slurm.conf has JobRequeue=0 refuses for a job submitted without ``--requeue``
    ("Requested operation is presently disabled"), and submitit writes no ``--requeue`` of
    its own: the script submitit makes of a point's parameters asks for it, once, as
    ``--scripts-only`` writes it."""
    import submitit

    from vitfsdp.launch.slurm import executor_parameters

    cluster = compose_cfg(f"cluster={profile}", "cluster.account=p").cluster
    executor = submitit.SlurmExecutor(folder=tmp_path)
    executor.update_parameters(**executor_parameters(cluster, 2, "vitfsdp", tmp_path))
    lines = executor._make_submission_file_text("python -c 1", "uid").splitlines()
    assert [x for x in lines if "requeue" in x] == ["#SBATCH --requeue"], lines
    assert "#SBATCH --requeue" in render_point(PROFILES["cuda8"], POINT).splitlines()


@pytest.mark.parametrize(("profile", "site_arg"), [("perlmutter", "constraint=gpu"),
                                                   ("frontier", "network=disable_rdzv_get"),
                                                   ("cuda8", "mem=0")])
def test_a_sweeps_own_sbatch_args_keep_the_sites(tmp_path, profile, site_arg):
    """A sweep's own ``cluster.sbatch_args`` add to the profile's ``site_sbatch_args``
    (Perlmutter's jobs would go to CPU nodes without ``--constraint=gpu``); the same key in
    both: the sweep's wins (the 80 GB nodes' ``gpu&hbm80g``)."""
    overrides = [f"cluster={profile}", "cluster.account=p", "cluster.sbatch_args=['--wckey=w']"]
    opts = sbatch_options(compose_cfg(*overrides).cluster, 2, "vitfsdp")
    key, _, value = site_arg.partition("=")
    assert opts[key] == value and opts["wckey"] == "w"
    wider = compose_cfg(f"cluster={profile}", "cluster.account=p",
                        f"cluster.sbatch_args=['--{key}=other']").cluster
    assert sbatch_options(wider, 2, "vitfsdp")[key] == "other"


@pytest.mark.parametrize("saves", [True, False])
def test_submitit_requeues_only_an_attempt_that_saved(tmp_path, saves):
    """submitit's requeue decision (TrainTask.checkpoint, in task 0 on SIGUSR2): it forwards
    the signal, waits for the training to exit, then requeues the task only when this
    attempt saved the checkpoint; an attempt stopped in its start-up returns None (submitit
    ends the job without a requeue: it would stop the same way)."""
    from vitfsdp.launch.slurm import TaskSpec, TrainTask

    run_dir = tmp_path / "run"
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"attempt": 1}))
    meta = json.dumps({"attempt": 1, "step": 60})
    on_signal = (f"open({str(run_dir / 'checkpoint' / 'meta.json')!r}, 'w').write({meta!r}); "
                 if saves else "")
    child = textwrap.dedent(f"""
        import os, signal, sys, time
        def stop(*_):
            {on_signal}os._exit(3)
        signal.signal(signal.SIGUSR2, stop)
        open({str(tmp_path / 'ready')!r}, 'w').close()
        time.sleep(60)
        """)
    task = TrainTask()
    task._child = subprocess.Popen([sys.executable, "-c", child])
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    spec = TaskSpec(overrides=(), run_dir=str(run_dir), nodes=1, gpus_per_node=1,
                    launch_mode="srun", python=sys.executable, checkpoint_wait_s=20)
    again = task.checkpoint(spec)
    assert task._child.returncode == 3  # the training had exited before the decision
    if saves:
        assert again is not None and again.args == (spec,)
    else:
        assert again is None


def test_submitit_requeues_a_training_still_running_after_the_wait(tmp_path):
    """A training that has not exited checkpoint_wait_s after SIGUSR2 (a save that overruns,
    or a hang) leaves nothing final to read: requeued as before the saved-attempt rule."""
    from vitfsdp.launch.slurm import TaskSpec, TrainTask

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"attempt": 0}))  # no checkpoint
    task = TrainTask()
    ready = tmp_path / "ready"
    task._child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                    "signal.signal(signal.SIGUSR2, signal.SIG_IGN); "
                                    f"open({str(ready)!r}, 'w').close(); time.sleep(60)"])
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:  # the signal is ignored now
        time.sleep(0.05)
    spec = TaskSpec(overrides=(), run_dir=str(run_dir), nodes=1, gpus_per_node=1,
                    launch_mode="srun", python=sys.executable, checkpoint_wait_s=1)
    try:
        assert task.checkpoint(spec) is not None
    finally:
        task._child.kill()
        task._child.wait()
