"""The jobs' environment, asked before anything is queued: made here as the job script makes
it and run by the jobs' interpreter (real virtual environments; a torch distribution is
named by its metadata alone, as ``importlib.metadata`` reads an installed wheel's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_module
from vitfsdp import sweep
from vitfsdp.launch import ClusterConfig
from vitfsdp.launch.slurm_checks import environment_problem, found_build


def _venv(root: Path, torch: str | None) -> Path:
    """A virtual environment without pip, holding a ``torch`` distribution of that version
    (metadata only: what the check reads for a labelled build), or none."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    if torch:
        (site,) = root.glob("lib/python*/site-packages")
        info = site / f"torch-{torch}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    return root


def _cluster(venv: Path, build: str | None) -> ClusterConfig:
    return ClusterConfig(name="site", launcher="slurm", venv=str(venv), torch_build=build)


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    root = tmp_path_factory.mktemp("envs")
    return {name: _venv(root / name, torch) for name, torch in
            (("none", None), ("cuda", "2.10.0+cu128"), ("rocm", "2.10.0+rocm7.1"))}


def test_each_broken_environment_is_refused_in_one_line(tmp_path, venvs):
    """No torch; a CUDA wheel where the profile runs ROCm; no vitfsdp where the jobs start:
    each is one line naming the field and the fix. The ROCm wheel with vitfsdp in the
    jobs' working directory passes."""
    work = tmp_path / "clone"
    work.mkdir()
    problem, _ = environment_problem(_cluster(venvs["none"], "rocm"), work)
    assert problem.startswith(f"cluster.venv={venvs['none']} has no torch")
    problem, _ = environment_problem(_cluster(venvs["cuda"], "rocm"), work)
    assert "has torch 2.10.0+cu128, a cuda build" in problem
    assert "install torch's rocm wheel there" in problem and "\n" not in problem
    problem, _ = environment_problem(_cluster(venvs["rocm"], "rocm"), work)
    assert f"cannot import vitfsdp from {work}, where the jobs start" in problem
    (work / "vitfsdp").mkdir()
    (work / "vitfsdp" / "__init__.py").write_text("")
    assert environment_problem(_cluster(venvs["rocm"], "rocm"), work) == (None, None)
    assert environment_problem(_cluster(venvs["cuda"], None), work) == (None, None)  # any
    elsewhere = tmp_path / "elsewhere"  # vitfsdp on the profile's PYTHONPATH, as the job
    elsewhere.mkdir()  # exports it: asked with the profile's env too
    with_path = ClusterConfig(name="site", launcher="slurm", venv=str(venvs["rocm"]),
                              torch_build="rocm", env={"PYTHONPATH": str(work)})
    assert environment_problem(with_path, elsewhere) == (None, None)
    unchecked = ClusterConfig(name="site", launcher="slurm", venv=str(venvs["none"]),
                              torch_build="rocm", check_paths=False)
    assert environment_problem(unchecked, work) == (None, None)


def test_found_build_reads_the_wheel_label_or_torch_itself():
    assert found_build({"torch": "2.10.0+rocm7.1"}) == ("rocm", "7.1")
    assert found_build({"torch": "2.9.1+rocm6.4.2"}) == ("rocm", "6.4")
    assert found_build({"torch": "2.8.0+cu128"}) == ("cuda", "12.8")
    assert found_build({"torch": "2.8.0+cpu"}) == ("cpu", None)
    assert found_build({"torch": "2.8.0"}) == ("unknown", None)  # not imported: not said
    assert found_build({"torch": "2.8.0", "hip": "6.4.43482", "cuda": None}) == ("rocm", "6.4")
    assert found_build({"torch": "2.8.0", "hip": None, "cuda": "12.9"}) == ("cuda", "12.9")
    assert found_build({"torch": "2.8.0", "hip": None, "cuda": None}) == ("cpu", None)


def test_a_frontier_sweep_with_a_cuda_wheel_is_refused_before_its_scripts(tmp_path, venvs):
    """The README's Frontier sweep, its venv holding a CUDA wheel: refused before a script is
    written (on Frontier, before a job queues), in one line."""
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=STF218",
                      "cluster.modules=[]", f"cluster.venv={venvs['cuda']}", "model=vit_1b",
                      "strategy=FULL_SHARD,HYBRID_8GPU", "nodes=1,8", "--scripts-only",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=300)
    assert proc.returncode == sweep.EXIT_REFUSED, proc.stderr[-3000:]
    assert "cluster.torch_build=rocm" in proc.stderr and "a cuda build" in proc.stderr
    assert not list(sweep_dir.glob("*/job.sbatch"))


def test_export_env_false_is_asked_from_the_login_environment_not_this_shell(tmp_path, venvs,
                                                                             monkeypatch):
    """vitfsdp importable only through this shell's PYTHONPATH: a job that inherits the
    submitting shell (export_env=true) imports it; one started with --export=NONE gets the
    login environment, which has no such PYTHONPATH, and is refused before queueing."""
    work, elsewhere = tmp_path / "clone", tmp_path / "elsewhere"
    (work / "vitfsdp").mkdir(parents=True)
    (work / "vitfsdp" / "__init__.py").write_text("")
    elsewhere.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(work))
    inherit = ClusterConfig(name="site", launcher="slurm", venv=str(venvs["rocm"]),
                            torch_build="rocm")
    assert environment_problem(inherit, elsewhere) == (None, None)
    login = ClusterConfig(name="site", launcher="slurm", venv=str(venvs["rocm"]),
                          torch_build="rocm", export_env=False)
    problem, _ = environment_problem(login, elsewhere)
    assert problem.startswith(f"cluster.venv={venvs['rocm']} (from your login environment, "
                              "as cluster.export_env=false starts the jobs) cannot import "
                              f"vitfsdp from {elsewhere}"), problem
