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


def test_git_state_takes_the_checkout_the_package_is_in_and_no_other(tmp_path, monkeypatch):
    """The package at the top of a work tree: that commit, and dirty once a tracked file
    changes. The package inside a virtual environment that sits in another repository (a
    user's project): not that repository's commit, but what pip recorded (PEP 610), else
    None."""
    import json

    from vitfsdp import provenance

    checkout = tmp_path / "checkout"
    (checkout / "vitfsdp").mkdir(parents=True)
    (checkout / "vitfsdp" / "__init__.py").write_text("")
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".")
    _git(checkout, "commit", "-qm", "c")
    head = _git(checkout, "rev-parse", "HEAD")
    assert provenance.git_state(checkout / "vitfsdp") == {"commit": head, "dirty": False}
    (checkout / "vitfsdp" / "__init__.py").write_text("x = 1\n")
    assert provenance.git_state(checkout / "vitfsdp") == {"commit": head, "dirty": True}

    site = checkout / ".venv" / "lib" / "python3.12" / "site-packages" / "vitfsdp"
    site.mkdir(parents=True)
    monkeypatch.setattr(provenance, "_installed_commit", lambda: None)
    assert provenance.git_state(site) == {"commit": None, "dirty": None}

    class Dist:  # what importlib.metadata gives for `pip install git+URL@REV`
        def read_text(self, name: str) -> str | None:
            return json.dumps({"url": "https://example.org/vitfsdp.git",
                               "vcs_info": {"vcs": "git", "commit_id": "a" * 40}})

    monkeypatch.undo()
    monkeypatch.setattr(provenance.metadata, "distribution", lambda name: Dist())
    assert provenance.git_state(site) == {"commit": "a" * 40, "dirty": None}

    # `pip install .` of a checkout: setup.py's record in the package comes first
    (site / provenance.BUILD_RECORD).write_text(json.dumps({"commit": "b" * 40, "dirty": True}))
    assert provenance.git_state(site) == {"commit": "b" * 40, "dirty": True}
    (site / provenance.BUILD_RECORD).write_text("{not json")
    assert provenance.git_state(site) == {"commit": "a" * 40, "dirty": None}


def test_a_copy_without_git_is_told_its_commit_by_the_manifest_of_head(tmp_path):
    """What the GPU node receives: the work tree without .git. head_manifest of the checkout
    (make gpu-wheels) gives the copy HEAD's commit, clean while every file of HEAD is there
    unchanged (an extra untracked file does not count, as for git status), dirty once one
    differs or is missing; the object ids are git's own (checked against git hash-object)."""
    import os
    import shutil

    from vitfsdp.core.checkout import (
        MANIFEST,
        checkout_state,
        head_manifest,
        manifest_state,
        source_state,
    )

    checkout = tmp_path / "checkout"
    (checkout / "vitfsdp" / "core").mkdir(parents=True)
    (checkout / "vitfsdp" / "core" / "a.py").write_text("a = 1\n")
    (checkout / "data.bin").write_bytes(bytes(range(256)) * 3)
    os.symlink("vitfsdp/core/a.py", checkout / "link.py")
    os.symlink(b"target-not-utf-8-\xff", os.fsencode(checkout / "raw-link"))
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".")
    _git(checkout, "commit", "-qm", "c")
    head = _git(checkout, "rev-parse", "HEAD")
    manifest = head_manifest(checkout)
    assert manifest["commit"] == head
    assert set(manifest["blobs"]) == {"vitfsdp/core/a.py", "data.bin", "link.py", "raw-link"}
    assert manifest["blobs"]["data.bin"] == _git(checkout, "hash-object", "data.bin")
    assert manifest_state(checkout, manifest) == {"commit": head, "dirty": False}
    assert source_state(checkout) == checkout_state(checkout)

    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    assert checkout_state(copy) is None and head_manifest(copy) is None
    assert source_state(copy) is None  # no manifest carried: no commit
    (copy / MANIFEST).parent.mkdir(parents=True)
    (copy / MANIFEST).write_text(json.dumps(manifest))  # what make gpu-wheels writes
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / "untracked.txt").write_text("not in HEAD\n")
    assert manifest_state(copy, manifest) == {"commit": head, "dirty": False}
    assert source_state(copy) == {"commit": head, "dirty": False}
    (copy / "data.bin").write_bytes(bytes(range(256)) * 3 + b"!")
    assert manifest_state(copy, manifest) == {"commit": head, "dirty": True}
    assert source_state(copy) == {"commit": head, "dirty": True}
    (copy / "data.bin").write_bytes(bytes(range(256)) * 3)
    (copy / "link.py").unlink()
    assert manifest_state(copy, manifest) == {"commit": head, "dirty": True}
    assert manifest_state(copy, {"commit": head}) is None
    assert manifest_state(copy, [head]) is None  # valid JSON, not a manifest
    assert manifest_state(copy, {"commit": head, "blobs": {"a\0b": "0" * 40}}) == {
        "commit": head, "dirty": True}  # a path no file can have: missing, not an error
