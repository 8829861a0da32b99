"""Values the sweep has resolved reach the training (on the node, or here) as text: a ``${``
in a sweep directory is not resolved a second time, and the cluster profile's path values that
a command in the job would read as an option are refused before anything is queued."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import run_module
from tests.integration.test_sweep import FAST
from vitfsdp.config import CONF_DIR, register_configs
from vitfsdp.launch import ClusterConfig
from vitfsdp.launch.local import quote_override
from vitfsdp.launch.slurm import sbcast_lines

register_configs()

#: Values a path or name may hold that OmegaConf would read: interpolations (resolvable and
#: not), escapes of them, backslashes before and after, quotes.
VALUES = ["/a/b${oc.env:HOME,none}c", "x${IFS}y", "a\\${x}", "a\\\\${x}", "p\\", 'q"${a}"\\',
          "${", "$${x}", "plain \\:x", "end${", "${oc.env:PATH}"]


@pytest.mark.parametrize("value", VALUES)
def test_quoted_override_reads_back_as_text(value):
    """What the training composes from the override the launchers write is the value itself
    (hydra.run.dir, and any string key), not its interpolation."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=[f"hydra.run.dir={quote_override(value)}",
                                           f"data.path={quote_override(value)}"],
                      return_hydra_config=True)
    assert cfg.hydra.run.dir == value and cfg.data.path == value


@pytest.mark.parametrize("typed", ["a\\${oc.env:HOME,none}b", "a\\${IFS}b"])
def test_interpolation_left_in_the_sweep_dir_is_refused(tmp_path, typed):
    """The audit's hydra.sweep.dir=...a\\${oc.env:...}b resolves here to the text a${...}b,
    which Hydra resolves again in the training (hydra.runtime.output_dir): it wrote into
    a<value>b/ and the point was recorded failed; with ${IFS} every rank failed. Refused in one
    line naming the key, before any directory exists."""
    proc = run_module("vitfsdp.sweep", "-m", *FAST, f"hydra.sweep.dir={tmp_path}/s/{typed}",
                      cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: hydra.sweep.dir resolves to '{tmp_path}/s/a${{"), line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("typed", ["${IFS}", "a\\${IFS}b"])
def test_interpolation_in_the_job_name_is_refused_in_one_line(tmp_path, typed):
    """hydra.launcher.job_name=${IFS} (and its escaped form, which Hydra's instantiation of
    the launcher resolved a second time) ended in a traceback."""
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=X",
                      "--scripts-only", f"hydra.launcher.job_name={typed}",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: hydra.launcher.job_name") and "Traceback" not in line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("key", ["setup_script", "conda_env", "venv", "sbcast_env",
                                 "sbcast_dir", "cache_dir", "python"])
def test_a_path_read_as_an_option_is_refused_naming_the_key(key):
    """A leading '-' would reach mkdir, tar, source, conda or the launch as an option (the
    audit's cluster.cache_dir=-x reached mkdir)."""
    with pytest.raises(ValueError, match=rf"^cluster\.{key}='-rf x' starts with '-'.*\./-rf x"):
        ClusterConfig(name="virtual", launcher="slurm", **{key: "-rf x"})
    with pytest.raises(ValueError, match=r"^cluster\.modules\[1\]='--force' starts with '-'"):
        ClusterConfig(name="virtual", launcher="slurm", modules=["rocm/7.1.1", "--force"])
    ClusterConfig(name="virtual", launcher="slurm", **{key: "./-rf x"})  # the fix it names


def test_sbcast_dir_with_a_colon_is_refused_and_tar_reads_it_locally(tmp_path):
    """cluster.sbcast_dir=host:dir is refused (':' splits PATH, and tar read the archive from
    the host); the unpacking line itself reads such a path as a local file (--force-local)."""
    with pytest.raises(ValueError, match=r"^cluster\.sbcast_dir='nv:me' holds ':'"):
        ClusterConfig(name="virtual", launcher="slurm", sbcast_dir="nv:me")
    cluster = ClusterConfig(name="virtual", launcher="slurm", sbcast_env="/env.tar.gz")
    cluster.sbcast_dir = "nv:me"  # past the check, as a profile of an older vitfsdp had it
    unpack = next(line for line in sbcast_lines(cluster) if "tar " in line)
    env_dir = tmp_path / "nv:me" / "vitfsdp-env-77"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "activate").write_text("true\n")
    subprocess.run(["tar", "-czf", f"{env_dir}.tar.gz", "-C", str(env_dir), "."], check=True)
    shutil.rmtree(env_dir)
    proc = subprocess.run(["bash", "-c", 'srun() { while [[ $1 == -* ]]; do shift; done; "$@"; }\n'
                           'VITFSDP_ENV_DIR="nv:me/vitfsdp-env-77"\n' + unpack],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (env_dir / "bin" / "activate").is_file()
