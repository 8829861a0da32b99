"""cluster.secrets end to end at a site: the values never reach Slurm's stored job
environment (sbatch's --export=ALL copies the submitting environment), the sweep's secrets
file is removed once every point has ended, and a refusal never echoes what may be a value.

``sbatch`` is a stand-in on PATH that records the environment it was started with (what
Slurm would store with the job) and answers with a job id; nothing is queued.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import run_module
from vitfsdp.config import CONF_DIR, register_configs, to_run_config
from vitfsdp.launch import pack, secrets, slurm
from vitfsdp.launch.resume import SweepLock, config_hash
from vitfsdp.records import write_json_atomic

register_configs()

SECRET = "hf_s3cretValue42xyz"
SBATCH = """#!{python}
import json, os, sys
with open({out!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
print("4242" if "--parsable" in sys.argv else "Submitted batch job 4242")
"""


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch) -> Path:
    """An ``sbatch`` first on PATH that logs argv and environment to the returned file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = tmp_path / "sbatch.jsonl"
    (bin_dir / "sbatch").write_text(SBATCH.format(python=sys.executable, out=str(out)))
    (bin_dir / "sbatch").chmod(stat.S_IRWXU)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")  # submitit looks for it
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return out


def _point(num: int, sweep_dir: Path, *extra: str):
    """A virtual-cluster point naming MY_API_TOKEN in cluster.secrets."""
    from vitfsdp.sweep import Point

    overrides = ["cluster=virtual", "nodes=1", "cluster.secrets=[MY_API_TOKEN]",
                 "cluster.check_paths=false", f"repeat={num}", *extra]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = to_run_config(compose("config", overrides=overrides))
    run_dir = sweep_dir / f"{num}_repeat={num}"
    run_dir.mkdir(parents=True)
    return Point(num, overrides, cfg, run_dir, config_hash(cfg))


def _submitted_envs(log: Path) -> list[dict]:
    return [json.loads(line)["env"] for line in log.read_text().splitlines()]


@pytest.mark.parametrize("array", [False, True])
def test_submitit_submission_environment_lacks_the_secret(tmp_path, fake_sbatch, monkeypatch,
                                                          array):
    """A secret exported in the sweeping shell is not in sbatch's environment (a single job
    and a job array); the job script sources the 0600 file; the shell's value is back after."""
    monkeypatch.setenv("MY_API_TOKEN", SECRET)
    monkeypatch.chdir(tmp_path)
    sweep_dir = tmp_path / "sweep"
    points = [_point(i, sweep_dir, f"cluster.array={str(array).lower()}") for i in range(2)]
    slurm.submit(points, sweep_dir, "vitfsdp")
    envs = _submitted_envs(fake_sbatch)
    assert len(envs) == (1 if array else 2)
    for env in envs:
        assert "MY_API_TOKEN" not in env and SECRET not in json.dumps(env)
        assert env["PATH"] == os.environ["PATH"]  # the rest is passed on
    assert os.environ["MY_API_TOKEN"] == SECRET
    assert secrets.secrets_path(sweep_dir).read_text() == f"MY_API_TOKEN={SECRET}\n"


def test_pack_submission_environment_lacks_the_secret(tmp_path, fake_sbatch, monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", SECRET)
    monkeypatch.chdir(tmp_path)
    sweep_dir = tmp_path / "sweep"
    # two points of one repeat round (a pack holds one round)
    (pk,) = pack.make_packs([_point(0, sweep_dir), _point(1, sweep_dir, "repeat=0",
                                                           "train.seed=2")], {})
    assert pack.submit(pk, sweep_dir, "vitfsdp") == "4242"
    (env,) = _submitted_envs(fake_sbatch)
    assert "MY_API_TOKEN" not in env and SECRET not in json.dumps(env)
    assert os.environ["MY_API_TOKEN"] == SECRET


def _ended_sweep(tmp_path: Path, status: str | None) -> Path:
    """A sweep directory of one point (``status``: its summary's, None: none yet) and its
    secrets file."""
    sweep_dir = tmp_path / "sweep"
    run_dir = sweep_dir / "0_repeat=0"
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "job.json", {"job_id": None, "submitted_with": "script"})
    if status:
        write_json_atomic(run_dir / "summary.json", {"status": status})
    secrets.write_secrets(sweep_dir, {"MY_API_TOKEN": SECRET})
    return sweep_dir


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_status_removes_the_secrets_file_once_every_point_ended(tmp_path, status):
    from vitfsdp.sweep import status_main

    sweep_dir = _ended_sweep(tmp_path, status)
    status_main(["--status", str(sweep_dir)])
    assert not secrets.secrets_path(sweep_dir).exists()


def test_status_keeps_the_secrets_file_for_jobs_not_ended_or_a_live_sweep(tmp_path):
    from vitfsdp.sweep import status_main

    sweep_dir = _ended_sweep(tmp_path, None)  # written, not run: its job will read it
    status_main(["--status", str(sweep_dir)])
    assert secrets.secrets_path(sweep_dir).exists()
    write_json_atomic(sweep_dir / "0_repeat=0" / "summary.json", {"status": "completed"})
    lock = SweepLock(sweep_dir).acquire()  # a sweep works there: it may submit more jobs
    try:
        status_main(["--status", str(sweep_dir)])
    finally:
        lock.release()
    assert secrets.secrets_path(sweep_dir).exists()
    status_main(["--status", str(sweep_dir)])
    assert not secrets.secrets_path(sweep_dir).exists()


def test_a_local_sweep_that_ends_leaves_no_secrets_file(tmp_path):
    """A sweep that watched its points to the end removes the file (here a local sweep, whose
    sweep directory held one from an earlier --scripts-only run)."""
    sweep_dir = tmp_path / "sweep"
    secrets.write_secrets(sweep_dir, {"MY_API_TOKEN": SECRET})
    env_file = tmp_path / "token.env"
    env_file.write_text(f"MY_API_TOKEN={SECRET}\n")
    env_file.chmod(0o600)
    proc = run_module("vitfsdp.sweep", "-m", "model=vit_tiny", "device=cpu", "train.steps=2",
                      "train.warmup_steps=1", "train.local_batch_size=2",
                      "cluster.secrets=[MY_API_TOKEN]",
                      f"cluster.secrets_file={env_file}", f"hydra.sweep.dir={sweep_dir}",
                      cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert not secrets.secrets_path(sweep_dir).exists()
    assert "every point has ended" in out and SECRET not in out


@pytest.mark.parametrize("name", [SECRET, "ghp_" + "A1b2" * 9, "sk-live.value/with+chars"])
def test_refusal_of_an_unset_secret_never_echoes_what_may_be_a_value(name):
    """A value typed where a name belongs (it is set nowhere) is refused by its position."""
    with pytest.raises(ValueError) as e:
        secrets.secret_values(["HOME_UNUSED_X", name], environ={"HOME_UNUSED_X": "1"})
    assert name not in str(e.value) and "cluster.secrets[1]" in str(e.value)
    assert "\n" not in str(e.value)


def test_refusal_of_an_unset_variable_name_names_it():
    with pytest.raises(ValueError, match=r"cluster.secrets\[0\] \(WANDB_API_KEY\) is not set.*"
                                         r"export WANDB_API_KEY="):
        secrets.secret_values(["WANDB_API_KEY"], environ={})


def test_sweep_refuses_a_typed_value_without_echoing_it(tmp_path):
    """The command line a user gets wrong: the value in place of the name."""
    proc = run_module("vitfsdp.sweep", "-m", f"cluster.secrets=[{SECRET}]",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "cluster.secrets[0]" in out, out[-3000:]
    assert SECRET not in out
