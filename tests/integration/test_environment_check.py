"""The jobs' environment, asked before anything is queued: made here as the job script makes
it and run by the jobs' interpreter (real virtual environments; a torch distribution is
named by its metadata alone, as ``importlib.metadata`` reads an installed wheel's)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_module
from vitfsdp import sweep
from vitfsdp.launch import ClusterConfig, slurm_checks
from vitfsdp.launch.slurm_checks import environment_problem, found_build, jax_gpu_problem

REPO = Path(__file__).resolve().parents[2]


def _venv(root: Path, torch: str | None, **dists: str) -> Path:
    """A virtual environment without pip, holding a ``torch`` distribution of that version
    (metadata only: what the check reads for a labelled build), or none, and the other
    distributions ``dists`` (name with ``_`` for ``-``, as a wheel names its dist-info ->
    version: ``jax_cuda12_plugin="0.10.2"``)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    for name, version in ({"torch": torch, **dists} if torch else dists).items():
        _dist(root, name, version)
    return root


def _dist(venv: Path, name: str, version: str) -> None:
    """A distribution's metadata in ``venv`` (what ``importlib.metadata`` reads of a wheel)."""
    (site,) = venv.glob("lib/python*/site-packages")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                                   f"Version: {version}\n")


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


@pytest.fixture(scope="module")
def jax_venvs(tmp_path_factory):
    """A CUDA torch beside jax: CPU-only (the reviewer's jax 0.10.2), with the CUDA 12
    plugin, with a CUDA plugin of another version than jaxlib's, with the ROCm plugin, and
    none; vitfsdp importable from this clone (a .pth, as an editable install)."""
    root = tmp_path_factory.mktemp("jax_envs")
    jax = {"jax": "0.10.2", "jaxlib": "0.10.2"}
    envs = {name: _venv(root / name, "2.10.0+cu128", **dists) for name, dists in (
        ("cpu", jax), ("cuda12", {**jax, "jax_cuda12_plugin": "0.10.2"}),
        ("stale", {**jax, "jax_cuda12_plugin": "0.7.2"}),
        ("rocm", {**jax, "jax_rocm7_plugin": "0.10.2"}), ("nojax", {}))}
    for venv in envs.values():
        (site,) = venv.glob("lib/python*/site-packages")
        (site / "clone.pth").write_text(f"{REPO}\n")
    return envs


def _cuda(venv: Path) -> ClusterConfig:
    return ClusterConfig(name="cuda8", launcher="slurm", venv=str(venv), torch_build="cuda")


def test_jax_points_need_the_profiles_gpu_plugin_in_the_jobs_environment(tmp_path, jax_venvs):
    """framework=jax points on a CUDA profile: a jax without the CUDA plugin (CPU-only, the
    ROCm plugin only, a CUDA plugin jaxlib does not load) or no jax at all is refused in one
    line naming the profile, the environment and the install; jax with jax-cuda12-plugin of
    jaxlib's version passes. Read from metadata: these environments hold no jax code."""
    venv = jax_venvs["cpu"]
    problem, warning = environment_problem(_cuda(venv), tmp_path, jax=True)
    assert problem == (f"cluster=cuda8: framework=jax points need jax with the CUDA plugin in "
                       f"cluster.venv={venv}; it has jax 0.10.2 CPU-only: pip install "
                       "'jax[cuda12]' there, or drop framework=jax; or set "
                       "cluster.check_paths=false if the compute nodes have another "
                       "environment"), problem
    assert warning is None
    assert environment_problem(_cuda(jax_venvs["cuda12"]), tmp_path, jax=True) == (None, None)
    problem, _ = environment_problem(_cuda(jax_venvs["stale"]), tmp_path, jax=True)
    assert "it has jax-cuda12-plugin 0.7.2, which jaxlib 0.10.2 does not load" in problem
    problem, _ = environment_problem(_cuda(jax_venvs["rocm"]), tmp_path, jax=True)
    assert "it has jax 0.10.2 with the ROCm plugin only" in problem
    problem, _ = environment_problem(_cuda(jax_venvs["nojax"]), tmp_path, jax=True)
    assert "framework=jax points need jax with the CUDA plugin in" in problem
    assert "; it has no jax: pip install 'jax[cuda12]'" in problem and "\n" not in problem
    rocm = ClusterConfig(name="frontier", launcher="slurm", venv=str(jax_venvs["rocm"]))
    assert environment_problem(rocm, tmp_path, jax=True) == (None, None)  # no GPU asked
    problem, _ = environment_problem(
        ClusterConfig(name="virtual", launcher="slurm", venv=str(jax_venvs["nojax"])),
        tmp_path, jax=True)  # no GPU stack: jax itself is still needed
    assert "framework=jax points need jax in" in problem and "it has no jax" in problem


def test_a_torch_only_check_does_not_probe_jax(tmp_path, jax_venvs, monkeypatch):
    """Without framework=jax points the probe is asked nothing of JAX (its mode has no
    ``jax``) and a CPU-only jax passes; with them the same probe is asked once more."""
    asked = []
    run = subprocess.run

    def record(argv, *args, **kwargs):
        asked.append(argv[-1])
        return run(argv, *args, **kwargs)

    monkeypatch.setattr(slurm_checks.subprocess, "run", record)
    assert environment_problem(_cuda(jax_venvs["cpu"]), tmp_path) == (None, None)
    assert asked == ["import"]
    assert environment_problem(_cuda(jax_venvs["cpu"]), tmp_path, jax=True)[0]
    assert asked == ["import", "import,jax"]


def test_jax_gpu_problem_reads_plugins_and_jaxlib_labels():
    jax = {"jax": "0.10.2", "jaxlib": "0.10.2"}
    assert jax_gpu_problem(jax, "cuda") == "it has jax 0.10.2 CPU-only"
    assert jax_gpu_problem(jax, None) is None and jax_gpu_problem(jax, "cpu") is None
    assert jax_gpu_problem({**jax, "jax-cuda13-plugin": "0.10.2"}, "cuda") is None
    assert jax_gpu_problem({**jax, "jax-cuda12-plugin": "0.10.2.dev1"}, "cuda") is None
    assert jax_gpu_problem({**jax, "jax-rocm60-plugin": "0.4.35"}, "rocm") is None  # unchecked
    assert jax_gpu_problem({**jax, "jax-cuda12-plugin": "0.10.2"}, "rocm") == (
        "it has jax 0.10.2 with the CUDA plugin only")
    assert jax_gpu_problem({"jax": "0.4.23", "jaxlib": "0.4.23+cuda12.cudnn89"}, "cuda") is None
    assert jax_gpu_problem({"jax": "0.4.30", "jaxlib": "0.4.30+rocm611"}, "cuda") == (
        "it has jax 0.4.30 (jaxlib 0.4.30+rocm611) with the ROCm plugin only")
    assert jax_gpu_problem({"jax": "0.10.2"}, "cuda") == "it has jax 0.10.2 without jaxlib"
    assert jax_gpu_problem({}, None) == "it has no jax"


def _vertex(venv: Path, sweep_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """The reviewer's command, on one small model: cluster=cuda8, both frameworks."""
    return run_module("vitfsdp.sweep", "experiment=vertex_single_node", "cluster=cuda8",
                      "cluster.partition=debug", f"cluster.venv={venv}", "model=vit_tiny",
                      f"hydra.sweep.dir={sweep_dir}", *extra, cwd=REPO, timeout=300)


def test_a_cuda8_jax_sweep_with_a_cpu_only_jax_is_refused_before_its_scripts(tmp_path,
                                                                           jax_venvs):
    """The reviewer's sweep (experiment=vertex_single_node on cluster=cuda8, --scripts-only)
    with a CPU-only jax in cluster.venv: its JAX points are refused in one line and no script
    is written; with jax-cuda12-plugin all are written; a torch-only sweep does not ask the
    environment about JAX."""
    venv = jax_venvs["cpu"]
    proc = _vertex(venv, tmp_path / "cpu", "--scripts-only")
    assert proc.returncode == sweep.EXIT_REFUSED, proc.stderr[-3000:]
    assert (f"error: points 2, 3 (2 of 4): cluster=cuda8: framework=jax points need jax with "
            f"the CUDA plugin in cluster.venv={venv}; it has jax 0.10.2 CPU-only: pip install "
            "'jax[cuda12]' there, or drop framework=jax") in proc.stderr, proc.stderr[-3000:]
    assert not list((tmp_path / "cpu").glob("*/job.sbatch"))
    proc = _vertex(jax_venvs["cuda12"], tmp_path / "cuda12", "--scripts-only")
    assert proc.returncode == sweep.EXIT_NOT_ENDED, proc.stderr[-3000:]  # written, not run
    assert len(list((tmp_path / "cuda12").glob("*/job.sbatch"))) == 4
    proc = _vertex(venv, tmp_path / "torch", "--scripts-only", "framework=torch")
    assert proc.returncode == sweep.EXIT_NOT_ENDED, proc.stderr[-3000:]
    assert len(list((tmp_path / "torch").glob("*/job.sbatch"))) == 2
    asked = [ln for ln in proc.stdout.splitlines() if "what it holds" in ln]
    assert len(asked) == 1 and "(torch, vitfsdp) before" in asked[0], asked


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                    reason="needs the virtual Slurm cluster (VITFSDP_SLURM=1)")
def test_a_jax_sweep_without_the_plugin_queues_no_job(tmp_path, jax_venvs):
    """The same sweep submitted to the virtual cluster (not --scripts-only): refused before
    sbatch, so Slurm holds no job of its name."""
    from tests.integration.test_virtual_slurm import require_cluster, slurm

    require_cluster()
    name = f"vitfsdp-jaxenv-{uuid.uuid4().hex[:8]}"
    try:
        proc = _vertex(jax_venvs["cpu"], tmp_path / "sweep", "--detach",
                       f"hydra.launcher.job_name={name}")
        assert proc.returncode == sweep.EXIT_REFUSED, proc.stderr[-3000:]
        assert "framework=jax points need jax with the CUDA plugin" in proc.stderr
        assert not slurm("squeue", "-h", "-n", name, "-o", "%i").stdout.strip()
    finally:  # without the check the sweep queues jobs of this name: gone with the test
        slurm("scancel", "-n", name)
