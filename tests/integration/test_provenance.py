"""Provenance: what run.json says about the software and the environment, and that it never
holds a secret (a real in-process training run started with secret-looking variables)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir

from tests.conftest import TINY
from vitfsdp import distributed
from vitfsdp.config import CONF_DIR, register_configs, to_run_config
from vitfsdp.provenance import REDACTED, environment, redact, redact_args
from vitfsdp.records import RUN_FILE, SUMMARY_FILE

SECRETS = {"HF_TOKEN": "hf_s3cr3tT0ken", "MY_API_KEY": "k-4242-xyz",
           "TORCH_HUB_TOKEN": "thub-9876", "NCCL_PASSWORD": "nccl-pw-1",
           "FI_CXI_SECRET_SAUCE": "sauce-77"}


@pytest.mark.parametrize("name, value, expected", [
    ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1", "mlx5_0:1,mlx5_1:1"),  # host:port-like, no @
    ("HF_TOKEN", "hf_abc", REDACTED),
    ("aws_secret_access_key", "abc", REDACTED),
    ("DB_PASSWD", "abc", REDACTED),
    ("GITHUB_AUTH", "abc", REDACTED),
    ("PROXY", "https://alice:pw@proxy:3128/", f"https://{REDACTED}@proxy:3128/"),
    ("MASTER_ADDR", "node001", "node001"),
])
def test_redact(name, value, expected):
    assert redact(name, value) == expected


def test_environment_selects_run_relevant_variables():
    env = environment({"NCCL_DEBUG": "INFO", "HOME": "/home/x", "SLURM_JOB_ID": "42",
                       "OMP_NUM_THREADS": "7", "TORCH_TOKEN": "t", "PATH": "/bin"})
    assert env == {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "7", "SLURM_JOB_ID": "42",
                   "TORCH_TOKEN": REDACTED}


def test_command_line_secrets_are_redacted():
    assert redact_args(["train", "cluster.env.HF_TOKEN=abc", "nodes=2"]) == [
        "train", f"cluster.env.HF_TOKEN={REDACTED}", "nodes=2"]


def test_run_json_of_a_real_run_holds_no_secret(tmp_path, monkeypatch):
    """One in-process training run (world of 1, CPU) started with secrets in the
    environment, named in cluster.secrets, and on the command line (argv as recorded); a
    secret's value in cluster.env is refused (vitfsdp.launch.secrets)."""
    from vitfsdp.torch_train import run

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    monkeypatch.setenv("PYTORCH_MIRROR", "https://carol:hunter22@mirror.example/x")
    overrides = [*TINY, "cluster.gpus_per_node=1", "cluster.secrets=[HF_TOKEN]", "repeat=2"]
    monkeypatch.setattr(sys, "argv", ["train.py", *overrides, "MY_API_KEY=argv-key-31"])
    register_configs()
    env, device = distributed.DistEnv(), torch.device("cpu")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        with pytest.raises(ValueError, match="^cluster.env.HF_TOKEN holds a secret's value"):
            to_run_config(compose("config", overrides=[*overrides, "+cluster.env.HF_TOKEN=x1"]))
        cfg = to_run_config(compose("config", overrides=overrides))
    with distributed.process_group(env, device, timeout_s=60):
        run(cfg, env, device, tmp_path)
    text = (tmp_path / RUN_FILE).read_text()
    for secret in [*SECRETS.values(), "hunter22", "argv-key-31"]:
        assert secret not in text
    info = json.loads(text)
    assert info["environment"]["NCCL_IB_HCA"] == "mlx5_0"
    assert info["environment"]["TORCH_HUB_TOKEN"] == REDACTED
    assert info["config"]["cluster"]["secrets"] == ["HF_TOKEN"]  # a name, kept
    assert info["config"]["repeat"] == 2
    assert {"python", "torch", "timm", "cuda", "rocm", "nccl", "driver"} <= set(info["versions"])
    assert info["git"]["commit"] and isinstance(info["git"]["dirty"], bool)
    assert info["device"]["peak_flops"] is None and info["timing"]["timer"] == "perf_counter"
    model = info["model"]
    assert model["train_flops_per_image"] == 3 * model["forward_flops_per_image"]
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert summary["status"] == "completed" and summary["mfu"] is None
    assert summary["ips_min"] <= summary["ips"] <= summary["ips_max"]
    assert summary["peak_rss_min_gib"] <= summary["peak_rss_gib"]


def _git(cwd, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_git_state_takes_the_checkout_the_package_is_in_and_no_other(tmp_path):
    """The package at the top of a work tree: that commit, and dirty once a tracked file
    changes. The package inside a virtual environment that sits in another repository (a
    user's project): not that repository's commit, but the version setuptools-scm wrote into
    the package at its build, else None."""
    from vitfsdp import provenance

    checkout = tmp_path / "checkout"
    (checkout / "vitfsdp").mkdir(parents=True)
    (checkout / "vitfsdp" / "__init__.py").write_text("")
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".")
    _git(checkout, "commit", "-qm", "c")
    head = _git(checkout, "rev-parse", "HEAD")
    # the checkout's own version file (an editable install's) is not read: git is
    (checkout / "vitfsdp" / provenance.VERSION_FILE).write_text("__version__ = '0.1+gbadbad1'\n")
    assert provenance.git_state(checkout / "vitfsdp") == {"commit": head, "dirty": False}
    (checkout / "vitfsdp" / "__init__.py").write_text("x = 1\n")
    assert provenance.git_state(checkout / "vitfsdp") == {"commit": head, "dirty": True}

    site = checkout / ".venv" / "lib" / "python3.12" / "site-packages" / "vitfsdp"
    site.mkdir(parents=True)
    assert provenance.git_state(site) == {"commit": None, "dirty": None}
    version_file = site / provenance.VERSION_FILE
    version_file.write_text(  # as setuptools-scm >= 9 writes it
        "from __future__ import annotations\n__version__: str\n"
        "__version__ = version = '0.1.dev389+g260590c2b.d20261126'\n"
        "__version_tuple__ = version_tuple = (0, 1, 'dev389', 'g260590c2b.d20261126')\n"
        "__commit_id__ = commit_id = 'g260590c2b'\n")
    assert provenance.git_state(site) == {"commit": "260590c2b", "dirty": True}
    version_file.write_text("__version__ = version = '1.0'\n__commit_id__ = None\n")
    assert provenance.git_state(site) == {"commit": None, "dirty": False}
    version_file.write_text("__version__ = version = (\n")  # not Python: not read
    assert provenance.git_state(site) == {"commit": None, "dirty": None}


@pytest.mark.parametrize(("version", "commit_id", "state"), [
    ("0.1.dev3+g1a2b3c4d5", None, ("1a2b3c4d5", False)),
    ("0.1.dev3+g1a2b3c4d5.d20261126", "g1a2b3c4d5", ("1a2b3c4d5", True)),
    # what make gpu-wheels hands a copy without .git: the version alone, no commit id
    ("0.1.dev3+g1a2b3c4d5.d20261126", None, ("1a2b3c4d5", True)),
    ("0.2.0", "g1a2b3c4d5", ("1a2b3c4d5", False)),  # clean, at a tag
    ("0.2.0+d20261126", "g1a2b3c4d5", ("1a2b3c4d5", True)),  # dirty, at a tag
    ("0.2.0", None, (None, False)),
    ("0.2.0+cu121", None, (None, None)),  # a local part not of setuptools-scm's making
    ("0.2.0+gnothex", None, (None, None)),
    (None, "g1a2b3c4d5", (None, None)),
])
def test_version_state_reads_setuptools_scm_versions(version, commit_id, state):
    from vitfsdp.provenance import version_state

    commit, dirty = state
    assert version_state(version, commit_id) == {"commit": commit, "dirty": dirty}
