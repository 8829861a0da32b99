"""A real site on day one: hostile values never run a command on any launch path, run
directories stay flat and secret-free for any value, records follow the umask, and a
``--scripts-only`` script can be submitted again.

The launch paths run for real with a stand-in for the compute nodes' python (:data:`STUB`):
it runs vitfsdp's and submitit's helpers with the real interpreter and, in place of a
training, records the argv and environment it got. The Slurm paths need the virtual
cluster (``VITFSDP_SLURM=1``, as tests/integration/test_slurm_sweep.py).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import read, run_module
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster, slurm
from vitfsdp.config import CONF_DIR, register_configs, to_run_config
from vitfsdp.launch import ClusterConfig, local
from vitfsdp.launch.local import quote_override
from vitfsdp.launch.resume import config_hash
from vitfsdp.launch.secrets import point_secrets
from vitfsdp.records import write_json_atomic
from vitfsdp.rundir import MAX_NAME_CHARS, constant_keys, run_dirname

register_configs()

SECRET = "s3cret-Value-42"  # appears only in the sweep's 0600 secrets file
MARK = "MARK_"  # every command a hostile value could run creates a file named MARK_*
needs_slurm = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)


def hostile(where: Path) -> dict[str, str]:
    """Values with every shell metacharacter, each creating ``where/MARK_<name>`` if run."""
    m = f"{where}/{MARK}"
    return {"semicolon": f"x;touch {m}semicolon;y", "dollar": f"$(touch {m}dollar)",
            "backtick": f"`touch {m}backtick`", "squote": f"' ; touch {m}squote ; '",
            "dquote": f'" ; touch {m}dquote ; "', "and": f"x && touch {m}and",
            "pipe": f"x | touch {m}pipe", "glob": "* ? [ab] ~", "backslash": "a\\b\\\\c\\"}


#: Stands in for the compute nodes' python (its shebang: the real interpreter). Runs anything
#: but a training for real; a training records argv and PROBE_* variables in the run
#: directory and writes the summary status named in status.txt beside the stub.
STUB = '''#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
if "vitfsdp.train" not in args:
    os.execv({python!r}, [{python!r}, *args])
from hydra.core.override_parser.overrides_parser import OverridesParser
parse = OverridesParser.create().parse_override
run_dir = Path(next(parse(a).value() for a in args if a.startswith("hydra.run.dir=")))
env = {{k: v for k, v in os.environ.items()
       if k.startswith("PROBE_") or k in ("FROM_SETUP", "MY_API_TOKEN")}}
with open(run_dir / "argv.jsonl", "a") as f:
    f.write(json.dumps({{"argv": args, "env": env}}) + "\\n")
status = Path(__file__).with_name("status.txt")
status = status.read_text().strip() if status.exists() else "completed"
(run_dir / "summary.json").write_text(json.dumps({{"status": status}}))
'''


def make_stubs(tmp_path: Path) -> tuple[Path, Path]:
    """The stand-in python (in a folder with a hostile name) and a folder holding a `module`
    that logs its arguments, for PATH."""
    py_dir = tmp_path / f"bin $(touch {MARK}pydir) `touch {MARK}pydir2`;'q\"&&x"
    py_dir.mkdir()
    python = py_dir / "python"
    python.write_text(STUB.format(python=sys.executable))
    python.chmod(stat.S_IRWXU)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "module").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" >> {tmp_path}/module.log\n')
    (tools / "module").chmod(stat.S_IRWXU)
    return python, tools


def hostile_overrides(tmp_path: Path, python: Path) -> list[str]:
    """A point's overrides that put a hostile value everywhere a value lands in a script."""
    values = hostile(tmp_path)
    setup = tmp_path / f"setup $(touch {MARK}setup) `touch {MARK}setup2`;'\";x.sh"
    setup.write_text("export FROM_SETUP=yes\n")
    comment = f"c $(touch {tmp_path}/{MARK}sbatch) 'x' \"y\" \\z"
    secrets_file = tmp_path / f"secrets $(touch {MARK}secrets);'x.env"
    secrets_file.write_text(f"MY_API_TOKEN={SECRET}\n")
    secrets_file.chmod(0o600)
    return [
        "cluster=virtual", "cluster.gpus_per_node=1", "nodes=1", "device=cpu",
        f"cluster.python={quote_override(str(python))}",
        f"cluster.setup_script={quote_override(str(setup))}",
        f"cluster.modules=[{quote_override(values['dollar'])},{quote_override('rocm/6.2.4')}]",
        f"cluster.sbatch_args=[{quote_override('--comment=' + comment)}]",
        f"cluster.srun_args=[{quote_override('--comment=' + values['semicolon'])}]",
        f"cluster.name={quote_override(values['dquote'])}",
        "cluster.secrets=[MY_API_TOKEN]",
        f"cluster.secrets_file={quote_override(str(secrets_file))}",
        *(f"+cluster.env.PROBE_{k}={quote_override(v)}" for k, v in values.items()),
    ]


def hostile_point(tmp_path: Path, python: Path):
    """A sweep point (:class:`vitfsdp.sweep.Point`) of :func:`hostile_overrides` in a sweep
    directory with a hostile name, named as the sweep names it."""
    from vitfsdp.sweep import Point

    overrides = hostile_overrides(tmp_path, python)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = to_run_config(compose("config", overrides=overrides))
    sweep_dir = tmp_path / f"sweep $(touch {MARK}dir) `touch {MARK}dir2`;'q\" &&x *"
    run_dir = sweep_dir / f"0_{run_dirname(overrides)}"
    run_dir.mkdir(parents=True)
    return Point(0, overrides, cfg, run_dir, config_hash(cfg))


def assert_no_marker(tmp_path: Path) -> None:
    made = sorted(p.name for p in tmp_path.rglob(f"{MARK}*"))
    assert made == [], f"hostile values ran commands: {made}"


def assert_ran_verbatim(point, tmp_path: Path, runs: int = 1, setup: bool = True) -> None:
    """The stand-in training got every override exactly as typed (the secret by its name
    alone), and in its environment the secret's value (from cluster.secrets_file, which the
    sweep's process never exported), every PROBE_* value of cluster.env and (from a job
    script, ``setup``) the setup script's variable."""
    calls = read(point.run_dir / "argv.jsonl")
    assert len(calls) == runs
    assert [a for a in calls[-1]["argv"] if a in point.overrides] == point.overrides
    assert "MY_API_TOKEN" not in os.environ
    assert SECRET not in " ".join(calls[-1]["argv"])  # `ps` shows no secret
    assert calls[-1]["env"] == {**{f"PROBE_{k}": v for k, v in hostile(tmp_path).items()},
                                "MY_API_TOKEN": SECRET, **({"FROM_SETUP": "yes"} if setup else {})}


def assert_secret_kept_private(sweep_dir: Path, kept: bool = True) -> None:
    """The secret is in no path name, no record, no job script or pickle: only in the sweep's
    secrets file, which is its owner's (``kept``; else removed: nowhere)."""
    carriers = []
    for path in sweep_dir.rglob("*"):
        assert SECRET not in str(path.relative_to(sweep_dir))
        if path.name == "argv.jsonl":  # the stand-in training's own record
            continue
        if path.is_file() and SECRET.encode() in path.read_bytes():
            carriers.append(path)
    if not kept:
        assert carriers == []
        return
    assert carriers == [sweep_dir / ".secrets.env"]
    assert stat.S_IMODE(carriers[0].stat().st_mode) == 0o600


# ---------------------------------------------------------------- run-directory names


@pytest.mark.parametrize("overrides", [
    ["cluster.setup_script=/sw/site/env.sh"], ["cluster.modules=[rocm/6.2.4,craype]"],
    ["+cluster.env.X=/opt/plugin/lib"], ["cluster.python=/ccs/venv/bin/python"],
    ["+cluster.env.MY_API_TOKEN=abc/def", "nodes=2"], [f"model=vit_1b,x={'y' * 300}"],
])
def test_run_dirname_is_one_safe_short_name(overrides):
    name = run_dirname(overrides)
    assert re.fullmatch(r"[A-Za-z0-9._,=+-]+", name) and len(name) <= MAX_NAME_CHARS
    assert "abc" not in name and re.search(r"_[0-9a-f]{8}$", name)  # changed: hashed
    assert run_dirname([*overrides[:-1], overrides[-1] + "0"]) != name  # unique


def test_run_dirname_keeps_plain_overrides_as_typed():
    assert run_dirname(["strategy=FULL_SHARD", "nodes=2", "data.path=/x"], ["data.path"]) \
        == "nodes=2,strategy=FULL_SHARD"


def test_a_single_point_of_many_overrides_keeps_its_study_keys_whole():
    """One point of ten overrides (a time-limit trial): the model, strategy and node count
    whole, other overrides left out (the hash stands for them), not ten keys with their
    values cut to nothing (``cluster.time=,cluster=,model=,nodes=,strategy=,...``)."""
    overrides = ["cluster.max_requeues=1", "cluster.signal_delay_s=60",
                 "cluster.time=00:05:00", "cluster=virtual", "model=vit_tiny", "nodes=1",
                 "strategy=FULL_SHARD", "train.log_every=5", "train.steps=200",
                 "cluster.venv=/lustre/orion/proj123/scratch/me/envs/vitfsdp-rocm-6.2.4"]
    name = run_dirname(overrides)
    assert len(name) <= MAX_NAME_CHARS and re.search(r"_[0-9a-f]{8}$", name)
    for whole in ("cluster=virtual", "model=vit_tiny", "nodes=1", "strategy=FULL_SHARD"):
        assert whole in name.split(",") or name.startswith(whole + ",") \
            or f",{whole}_" in name, name
    assert "=," not in name and not re.search(r"=_[0-9a-f]{8}$", name)


def test_run_dirname_keeps_keys_whole_and_shortens_the_longest_value():
    name = run_dirname([f"cluster.conda_env=/lustre/{'x' * 300}", "nodes=2", "strategy=DDP"])
    assert name.startswith("cluster.conda_env=_lustre_x") and len(name) <= MAX_NAME_CHARS
    assert name.endswith(",nodes=2,strategy=DDP_" + name[-8:])


def test_constant_keys_are_those_of_one_value_at_every_point():
    assert constant_keys([["a=1", "b=2", "c=1"], ["a=1", "b=3"]]) == ["a"]
    assert constant_keys([["a=1", "b=2"]]) == []  # a single point keeps all its overrides


def test_readme_frontier_sweep_names_points_by_swept_values(tmp_path):
    """The README's Frontier overrides with a long conda path: each point's directory and
    its --status label name only the swept values, whole (no hash, no constant key)."""
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=STF218",
                      f"cluster.conda_env=/lustre/orion/stf218/proj-shared/{'e' * 120}/my_env",
                      "cluster.check_paths=false",  # the env exists on Frontier only
                      "model=vit_1b", "strategy=FULL_SHARD,HYBRID_8GPU", "nodes=1,8",
                      "precision=bf16", "--scripts-only", f"hydra.sweep.dir={sweep_dir}",
                      "hydra.verbose=vitfsdp.sweep",  # each point's line: at DEBUG
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 3, proc.stderr[-3000:]  # written, not run
    assert sorted(p.name for p in sweep_dir.glob("*_*")) == [
        "0_nodes=1,strategy=FULL_SHARD", "1_nodes=8,strategy=FULL_SHARD",
        "2_nodes=1,strategy=HYBRID_8GPU", "3_nodes=8,strategy=HYBRID_8GPU"]
    status = run_module("vitfsdp.sweep", "--status", str(sweep_dir), cwd=tmp_path)
    (line,) = [x for x in status.stdout.splitlines() if x.startswith("3 ")]
    assert line.endswith("  nodes=8 strategy=HYBRID_8GPU"), status.stdout  # whole, last
    # the sweep's own lines name a point the same way, not by the constant keys
    not_ended = [line for line in (proc.stdout + proc.stderr).splitlines()
                 if "not ended: " in line]
    assert len(not_ended) == 4, proc.stderr[-3000:]
    assert not_ended[0].endswith("not ended: strategy=FULL_SHARD nodes=1: script"), not_ended
    # submit.sh submits every point's script, round by round (1 node first), as bash reads it
    listed = subprocess.run(["bash", "-c", 'eval "$(sed -n "/^scripts=(/,/^)/p" "$1")"; '
                             'printf "%s\\n" "${scripts[@]}"', "-", sweep_dir / "submit.sh"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert listed == [str(sweep_dir / name / "job.sbatch") for name in (
        "0_nodes=1,strategy=FULL_SHARD", "2_nodes=1,strategy=HYBRID_8GPU",
        "1_nodes=8,strategy=FULL_SHARD", "3_nodes=8,strategy=HYBRID_8GPU")]


def test_slash_and_secret_values_keep_status_and_resume(tmp_path, monkeypatch):
    """The values Frontier users set (paths, module versions) and a token named in
    cluster.secrets: one flat run directory (named by conf/config.yaml's
    hydra.sweep.subdir), found by --status, and skipped by a rerun of the sweep once it
    completed; the token's value only in the sweep's 0600 file, which the script sources,
    until the rerun finds every point ended and removes it."""
    from omegaconf import open_dict

    from vitfsdp.launch import slurm as launcher
    from vitfsdp.sweep import Point

    sweep_dir = tmp_path / "sweep"
    overrides = ["cluster=virtual", "nodes=1", "cluster.setup_script=/sw/env.sh",
                 "cluster.modules=[rocm/6.2.4]", "+cluster.env.RCCL_PLUGIN=/opt/plugin/lib",
                 "cluster.python=/ccs/venv/bin/python", "cluster.secrets=[MY_API_TOKEN]",
                 "cluster.check_paths=false"]
    monkeypatch.setenv("MY_API_TOKEN", SECRET)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        dcfg = compose("config", overrides=overrides, return_hydra_config=True)
    with open_dict(dcfg):
        dcfg.hydra.job.num = 0
    cfg = to_run_config(dcfg)
    point = Point(0, overrides, cfg, sweep_dir / str(dcfg.hydra.sweep.subdir), config_hash(cfg))
    point.run_dir.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    launcher.write_scripts([point], "vitfsdp")  # as --scripts-only writes them
    assert sorted(sweep_dir.iterdir()) == sorted([point.run_dir, sweep_dir / ".secrets.env"])
    script = (point.run_dir / "job.sbatch").read_text()
    assert SECRET not in script and f"source {sweep_dir / '.secrets.env'}" in script
    status = run_module("vitfsdp.sweep", "--status", str(sweep_dir), cwd=tmp_path)
    assert status.returncode == 3 and "1 point: 1 written" in status.stdout, status.stdout
    assert_secret_kept_private(sweep_dir)  # the written job will read it
    write_json_atomic(point.run_dir / "summary.json", {"status": "completed"})
    proc = run_module("vitfsdp.sweep", "-m", "--scripts-only", *overrides,
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"completed in {point.run_dir.name}" in proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert sorted(p.name for p in sweep_dir.iterdir()) == sorted(
        [point.run_dir.name, "multirun.yaml", "commands.jsonl", ".sweep.lock"])  # every
    # point ended: the secrets file removed
    assert_secret_kept_private(sweep_dir, kept=False)


def test_hydra_saved_configs_are_redacted(tmp_path):
    """multirun.yaml and a run's .hydra/ files as Hydra saves them: the token is gone from
    the config, the override list and override_dirname; nothing else changes."""
    from omegaconf import OmegaConf

    from vitfsdp.provenance import redact_hydra_outputs, redact_yaml_file

    overrides = ["nodes=2", f"+cluster.env.MY_API_TOKEN='{SECRET},x'", "data.path=/d"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    cfg.hydra.job.override_dirname = ",".join(sorted(overrides))
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(cfg, tmp_path / "multirun.yaml")
    OmegaConf.save(OmegaConf.create(overrides), tmp_path / ".hydra" / "overrides.yaml")
    assert redact_yaml_file(tmp_path / "multirun.yaml")
    redact_hydra_outputs(tmp_path, ".hydra")
    for path in (tmp_path / "multirun.yaml", tmp_path / ".hydra" / "overrides.yaml"):
        assert SECRET not in path.read_text() and "MY_API_TOKEN" in path.read_text()
    saved = OmegaConf.load(tmp_path / "multirun.yaml")
    assert saved.cluster.env.MY_API_TOKEN == "<redacted>" and saved.nodes == 2
    assert saved.hydra.job.override_dirname == \
        "+cluster.env.MY_API_TOKEN=<redacted>,data.path=/d,nodes=2"
    assert not redact_yaml_file(tmp_path / "multirun.yaml")  # nothing left: untouched


# ---------------------------------------------------------------- hostile values, every path


@pytest.mark.parametrize(("where", "message"), [
    ("override", "override 1 '+cluster.env.MY_API_TOKEN=<redacted>' contains a control"),
    ("job_name", "hydra.launcher.job_name='a\\nb' contains a control character"),
    ("run_dir", "contains a control character"),
    ("percent", "contains '%' or a backslash, which Slurm reads in --output paths"),
    ("backslash", "contains '%' or a backslash, which Slurm reads in --output paths"),
])
def test_values_no_script_can_carry_are_refused_in_one_line(where, message):
    from vitfsdp.launch.slurm import check_values

    overrides = ["nodes=1", "+cluster.env.MY_API_TOKEN=a\nb" if where == "override" else "x=1"]
    run_dir = {"run_dir": "/s/a\nb", "percent": "/s/%j", "backslash": "/s/a\\b"}.get(where, "/s")
    with pytest.raises(ValueError) as err:
        check_values(overrides, run_dir, "a\nb" if where == "job_name" else "vitfsdp")
    assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="contains a control character"):
        ClusterConfig(launcher="slurm", python="python3\ntouch x")
    with pytest.raises(ValueError, match=r"^cluster.env.MY_API_TOKEN='<redacted>' contains"):
        ClusterConfig(launcher="slurm", env={"MY_API_TOKEN": f"{SECRET}\n"})


def test_local_launcher_runs_no_hostile_value(tmp_path, monkeypatch):
    python, _ = make_stubs(tmp_path)
    point = hostile_point(tmp_path, python)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", str(python))  # the local launcher's interpreter
    env = {**point.cfg.cluster.env, **point_secrets([point])}  # as the sweep's run_one
    assert local.run_point(point.overrides, point.run_dir, 1, poll_s=0.1, env=env) == 0
    assert_no_marker(tmp_path)
    assert_ran_verbatim(point, tmp_path, setup=False)  # no setup script runs here


def _wait_gone(job_id: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not slurm("squeue", "-h", "-j", job_id.split("_")[0], "-o", "%i").stdout.strip():
            return
        time.sleep(0.5)
    pytest.fail(f"Slurm job {job_id} still queued after {timeout_s} s")


@pytest.fixture
def hostile_slurm_point(tmp_path, monkeypatch):
    """(point, job name, stub python) of a Slurm path test: the hostile point and job name,
    with the stub python, module command and PATH in place (sbatch exports PATH to the job); the
    virtual cluster must be up."""
    require_cluster()
    python, tools = make_stubs(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    job_name = f"vitfsdp-test $(touch {tmp_path}/{MARK}job) 'q' \"d\" \\b"
    return hostile_point(tmp_path, python), job_name, python


def _job_name(job_id: str) -> str:
    shown = slurm("scontrol", "show", "job", "-o", job_id).stdout
    return re.search(r"JobName=(.*) UserId=", shown)[1]


@needs_slurm
def test_submitit_path_runs_no_hostile_value(tmp_path, hostile_slurm_point):
    from vitfsdp.launch import slurm as launcher

    point, job_name, _ = hostile_slurm_point
    (job_id,) = launcher.submit([point], point.run_dir.parent, job_name)
    assert _job_name(job_id) == job_name  # #SBATCH --job-name read back exactly
    _wait_gone(job_id)
    assert_no_marker(tmp_path)
    assert_ran_verbatim(point, tmp_path)
    assert "cluster.secrets=[MY_API_TOKEN]" in read(point.run_dir / "job.json")["overrides"]
    assert_secret_kept_private(point.run_dir.parent)
    assert (tmp_path / "module.log").read_text().split("\n")[:3] == \
        ["load", hostile(tmp_path)["dollar"], "rocm/6.2.4"]


@needs_slurm
def test_pack_path_runs_no_hostile_value(tmp_path, hostile_slurm_point):
    """hydra.launcher.pack=by_nodes: the pack's own script, run by sbatch."""
    from vitfsdp.launch import pack

    point, job_name, _ = hostile_slurm_point
    (pk,) = pack.make_packs([point], {})
    script = pack.write(pk, point.run_dir.parent, job_name)
    proc = slurm("sbatch", "--parsable", "--wait", str(script), cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert_no_marker(tmp_path)
    assert _job_name(proc.stdout.strip()) == job_name
    assert_ran_verbatim(point, tmp_path)
    assert_secret_kept_private(point.run_dir.parent)


@needs_slurm
def test_scripts_only_script_runs_no_hostile_value_and_can_run_again(tmp_path, hostile_slurm_point):
    """sbatch job.sbatch three times: a failed attempt moves to attempts/0, the second
    completes, the third ends at once (nothing to do)."""
    from vitfsdp.launch import slurm as launcher

    point, job_name, python = hostile_slurm_point
    (script,) = launcher.write_scripts([point], job_name)
    assert SECRET not in script.read_text()
    text = script.read_text()
    ids = []
    for status in ("failed", "completed", "failed"):
        (python.parent / "status.txt").write_text(status)
        proc = slurm("sbatch", "--parsable", "--wait", str(script), cwd=tmp_path, timeout=240)
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.strip())
        assert (point.run_dir / f"slurm-{ids[-1]}.out").is_file()  # --output read right
    assert_no_marker(tmp_path)
    assert _job_name(ids[0]) == job_name  # #SBATCH --job-name read back exactly
    assert_ran_verbatim(point, tmp_path, runs=1)  # this attempt's; the third ran nothing
    assert read(point.run_dir / "summary.json")["status"] == "completed"
    first = point.run_dir / "attempts" / "0"
    assert read(first / "summary.json")["status"] == "failed"
    assert (first / f"slurm-{ids[0]}.out").is_file() and not (first.parent / "1").exists()
    assert script.read_text() == text and (point.run_dir / "job.json").is_file()
    assert_secret_kept_private(point.run_dir.parent)


# ---------------------------------------------------------------- records follow the umask


@pytest.mark.parametrize(("umask", "record", "script"),
                         [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_records_and_scripts_follow_the_umask(tmp_path, umask, record, script):
    from vitfsdp.launch.slurm import write_script
    from vitfsdp.records import RunRecords

    old = os.umask(umask)
    try:
        write_json_atomic(tmp_path / "job.json", {"a": 1})
        records = RunRecords(tmp_path)
        records.run_info = {"run_id": "x"}
        records.finish("failed", "test")
        write_script(tmp_path / "job.sbatch", "#!/bin/bash\n", secret=False)
        write_script(tmp_path / "secret.sbatch", "#!/bin/bash\n", secret=True)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"job.json": record, "run.json": record, "summary.json": record,
                     "job.sbatch": script, "secret.sbatch": 0o700}


def _frontier_point(num: int, run_dir: Path, read_only: list[str]):
    """A frontier sweep point writing into ``run_dir``, its profile declaring ``read_only``
    as cluster.read_only_paths."""
    from vitfsdp.sweep import Point

    overrides = ["cluster=frontier", "cluster.account=STF218", f"repeat={num}",
                 f"cluster.read_only_paths=[{','.join(read_only)}]"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = to_run_config(compose("config", overrides=overrides))
    assert cfg.cluster.read_only_paths == read_only  # the profile key, as a user sets it
    return Point(num, overrides, cfg, run_dir, config_hash(cfg))


def test_a_probe_of_the_allocation_needs_packs():
    """``cluster.probe=allocation`` is measured by each pack's first step: a sweep of one
    job per point is refused in one line naming the fix."""
    from vitfsdp.launch import LaunchOptions
    from vitfsdp.sweep import Point
    from vitfsdp.sweep.check import _check_launchers

    overrides = ["cluster=frontier", "cluster.account=STF218", "cluster.probe=allocation"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = to_run_config(compose("config", overrides=overrides))
    point = Point(0, overrides, cfg, Path("/lustre/orion/p/0"), config_hash(cfg))
    [line] = _check_launchers([point], LaunchOptions(scripts_only=True))
    assert "hydra.launcher.pack=by_nodes" in line and "\n" not in line


def test_a_sweep_under_a_read_only_path_is_refused_in_one_line(tmp_path, monkeypatch):
    """A profile's cluster.read_only_paths (``$NAME`` expanded at check time): a sweep whose
    run directories lie below one is refused before anything is queued, in one line for the
    whole sweep naming hydra.sweep.dir and the key; a sweep elsewhere passes."""
    from vitfsdp.launch import LaunchOptions
    from vitfsdp.sweep.check import _check_launchers

    home = tmp_path / "home"
    monkeypatch.setenv("VITFSDP_TEST_HOME", str(home))
    options = LaunchOptions(scripts_only=True)  # no Slurm query
    read_only = ["$VITFSDP_TEST_HOME", "$VITFSDP_UNSET_VARIABLE/x"]
    under = [_frontier_point(i, home / "study" / f"{i}_repeat={i}", read_only) for i in (0, 1)]
    [line] = _check_launchers(under, options)
    assert line.startswith(f"hydra.sweep.dir={(home / 'study').resolve()} is under "
                           f"$VITFSDP_TEST_HOME = {home.resolve()}, which cluster=frontier "
                           "mounts read-only")
    assert "(cluster.read_only_paths)" in line and "\n" not in line
    work = tmp_path / "work" / "study"
    assert _check_launchers([_frontier_point(0, work / "0_repeat=0", read_only)], options) == []
    assert _check_launchers([_frontier_point(0, home / "0_repeat=0", [])], options) == []


def test_swept_presets_name_their_points(tmp_path):
    """experiment=A,B is a swept key like any other: it names the points (it used to be
    left out of every name, so two presets' points were told apart by their number only);
    a preset common to every point stays out, as every constant key does."""
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=STF218",
                      "experiment=pycls_recipe,pycls_recipe_2_fsdp", "nodes=1",
                      "train.local_batch_size=8",  # fits a GCD: both written
                      "--scripts-only", f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path,
                      timeout=300)
    assert proc.returncode == 3, proc.stderr[-3000:]  # written, not run
    assert sorted(p.name for p in sweep_dir.glob("*_*")) == [
        "0_experiment=pycls_recipe", "1_experiment=pycls_recipe_2_fsdp"]
