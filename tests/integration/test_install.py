"""The package stands alone: a built wheel and ``pip install .`` (not editable), each in a fresh
virtual environment, run a sweep, its analysis and ``--scripts-only`` from a folder outside
the checkout, with a model config of the user's own (``hydra.searchpath``); and
environment.yml lists every dependency of pyproject.toml.

The environments see this interpreter's site-packages as plain path entries (torch and the
other dependencies import from there; nothing is downloaded) while the ``.pth`` files there,
among them the checkout's editable install, are not run: each test asserts that vitfsdp, its
configs and its job template come from the environment's own copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
#: What a build reads from the checkout (pyproject.toml names the rest).
SOURCES = ("pyproject.toml", "README.md", "vitfsdp", "hydra_plugins", "conf", "launch")
#: A model of the user's own, beside the packaged ones: vit_tiny at 32 px instead of 16.
USER_MODEL = "name: vit_tiny\nimg_size: 32\n"
#: pip never reaches an index, never builds in isolation, installs the project alone.
PIP_OFFLINE = ("--no-index", "--no-build-isolation", "--no-deps", "--ignore-installed",
               "--no-compile", "--quiet")


def _run(cmd: list, cwd: Path, timeout_s: float = 300, code: int = 0,
         env: dict[str, str] | None = None) -> str:
    """Run ``cmd`` in ``cwd`` (with ``env`` added to the environment); its stdout, or a failure
    that shows its output (an exit status other than ``code``)."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})})
    assert proc.returncode == code, (f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def _fresh_env(path: Path) -> Path:
    """A virtual environment at ``path`` without pip whose path holds this interpreter's
    site-packages (a ``.pth`` line: their own ``.pth`` files are not run); its python."""
    venv.create(path, with_pip=False)
    python = path / "bin" / "python"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                path).strip()
    system = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))
              and Path(p).is_dir() and not Path(p).is_relative_to(path)]
    (Path(site) / "_system_site.pth").write_text("\n".join(system) + "\n", encoding="utf-8")
    return python


def _pip_install(python: Path, target: Path, cwd: Path, **env: str) -> None:
    _run([sys.executable, "-m", "pip", "--python", python, "install", *PIP_OFFLINE, target], cwd,
         env=env)


def _committed_copy(src: Path) -> str:
    """What a build reads (``SOURCES``) copied to ``src``, committed to a git repository of
    its own there; its commit."""
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "_version.py"))
        else:
            shutil.copy2(REPO / name, src / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "copy"]):
        _run([*git, *args], src)
    return _run([*git, "rev-parse", "HEAD"], src).strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """Two environments: ``wheel`` (the wheel built from a copy of the source tree, committed
    to a git repository of its own: ``commit``) and ``sdir`` (``pip install`` of that copy
    changed and without ``.git``, as tools/gpu-check.sh builds it on a GPU node: told its
    version by the variable, from what ``python -m setuptools_scm`` printed in the changed
    checkout, as make gpu-wheels writes it), a user config folder and a work folder outside
    the checkout."""
    pytest.importorskip("setuptools_scm", reason="the offline builds here run without build"
                        " isolation: pip install setuptools-scm")
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    commit = _committed_copy(src)
    _run([sys.executable, "-m", "pip", "wheel", *PIP_OFFLINE[:3], "--quiet", "-w", root / "dist",
          src], root)
    (wheel,) = (root / "dist").glob("vitfsdp-*.whl")
    envs = {"wheel": _fresh_env(root / "env-wheel"), "sdir": _fresh_env(root / "env-sdir")}
    _pip_install(envs["wheel"], wheel, root)
    with open(src / "README.md", "a", encoding="utf-8") as readme:
        readme.write("\nA change not committed.\n")
    version = _run([sys.executable, "-m", "setuptools_scm"], src).strip()
    shutil.rmtree(src / ".git")
    _pip_install(envs["sdir"], src, root, SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VITFSDP=version)
    shutil.rmtree(src)  # nothing may read the source tree from here on
    user = root / "user-conf"
    (user / "model").mkdir(parents=True)
    (user / "model" / "tiny32.yaml").write_text(USER_MODEL, encoding="utf-8")
    work = root / "work"
    work.mkdir()
    return {**envs, "user": user, "work": work, "commit": commit}


@pytest.mark.parametrize("env", ["wheel", "sdir"])
def test_the_environment_imports_its_own_copy(installed, env):
    python, work = installed[env], installed["work"]
    prefix = python.parents[1]
    # torch-free modules only (the sweep test imports the rest)
    out = _run([python, "-c", (
        "import json, importlib.resources as r, vitfsdp, vitfsdp.launch.slurm as s,"
        " hydra_plugins.vitfsdp_launcher.vitfsdp_launcher as h, vitfsdp.provenance as p;"
        "print(json.dumps([vitfsdp.__file__, str(r.files('vitfsdp.conf')), str(s.TEMPLATE),"
        " h.__file__, p.git_state()]))")], work)
    package, conf, template, plugin, git = json.loads(out)
    # the checkout is gone: the commit comes from the version setuptools-scm wrote at the build
    # (the wheel's from git; the copy's from the variable, dirty: it was changed)
    commit = git.pop("commit")
    assert len(commit) >= 7 and installed["commit"].startswith(commit), commit
    assert git == {"dirty": env == "sdir"}
    for path in (package, conf, template, plugin):
        assert Path(path).is_relative_to(prefix), f"{path} is not inside {prefix}"
    assert Path(template).is_file()
    shipped = sorted(p.relative_to(conf).as_posix() for p in Path(conf).rglob("*.yaml"))
    assert shipped == sorted(p.relative_to(REPO / "conf").as_posix()
                             for p in (REPO / "conf").rglob("*.yaml"))


def test_wheel_sweeps_with_a_user_model_and_pip_install_analyses_and_writes_scripts(installed):
    """A sweep of one tiny CPU point from the wheel's environment, on the user's model; the
    analysis and Slurm scripts for frontier from the ``pip install .`` environment."""
    work, user = installed["work"], installed["user"]
    searchpath = f"hydra.searchpath=[file://{user}]"
    _run([installed["wheel"], "-m", "vitfsdp.sweep", "-m", "model=tiny32", "cluster=local",
          "cluster.gpus_per_node=1", "nodes=1", "device=cpu", "train.steps=3",
          "train.warmup_steps=1", "train.log_every=1", "train.local_batch_size=4", searchpath,
          "hydra.sweep.dir=sweep"], work)
    (run_json,) = (work / "sweep").glob("*/run.json")
    summary = json.loads((run_json.parent / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed", summary
    assert json.loads(run_json.read_text(encoding="utf-8"))["config"]["model"]["img_size"] == 32

    _run([installed["sdir"], "-m", "vitfsdp.analysis", "sweep"], work)
    runs = (work / "sweep" / "analysis" / "runs.csv").read_text(encoding="utf-8")
    assert len(runs.splitlines()) == 2 and "completed" in runs

    _run([installed["sdir"], "-m", "vitfsdp.sweep", "-m", "model=tiny32,vit_base",
          "cluster=frontier", "cluster.account=abc123", "nodes=1,2", searchpath,
          "hydra.sweep.dir=scripts", "--scripts-only"], work, code=3)  # written, not run
    scripts = sorted((work / "scripts").glob("*/job.sbatch"))
    assert len(scripts) == 4
    text = scripts[0].read_text(encoding="utf-8")
    assert text.startswith("#!/bin/bash") and "#SBATCH --account=" in text
    assert "@" + "LAUNCH_LINE@" not in text and str(user) in text  # rendered; user path kept
    assert str(REPO) not in "".join(s.read_text(encoding="utf-8") for s in scripts)


def test_pyproject_lists_every_package():
    """pyproject.toml lists the packages (discovery sees only folders): every package folder
    under vitfsdp/ and hydra_plugins/, and the two data packages mapped from conf/ and
    launch/sbatch/."""
    from setuptools import find_namespace_packages

    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    listed = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    found = find_namespace_packages(str(REPO), include=["vitfsdp*", "hydra_plugins*"])
    assert sorted(listed["tool"]["setuptools"]["packages"]) == sorted(
        [*found, "vitfsdp.conf", "vitfsdp.launch.sbatch"])


def test_group_check_knows_the_user_folders_of_hydra_searchpath(tmp_path):
    from vitfsdp.config import check_group_choices, searchpath_dirs

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tiny32.yaml").write_text(USER_MODEL, encoding="utf-8")
    user = f"hydra.searchpath=[file://{tmp_path}]"
    check_group_choices([user, "model=tiny32,vit_tiny"])
    with pytest.raises(ValueError, match=r"model=tiny33 is unknown; did you mean "
                       r"model=tiny32\? valid: tiny32, "):
        check_group_choices([user, "model=tiny33"])
    with pytest.raises(ValueError, match="model=tiny32 is unknown"):
        check_group_choices(["model=tiny32"])  # without the folder
    assert searchpath_dirs(["pkg://vitfsdp.conf"])[0] / "config.yaml" == (
        REPO / "conf" / "config.yaml")
    with pytest.raises(ValueError, match="pkg://no_such_pkg names no importable package"):
        searchpath_dirs(["pkg://no_such_pkg"])


# --------------------------------------------------------------------------- a checkout's vitfsdp/
# Inside a checkout (or with it on PYTHONPATH) Python imports the checkout's vitfsdp/ in place
# of the installed package, and vitfsdp.conf and vitfsdp.launch.sbatch, which pyproject.toml
# maps from conf/ and launch/sbatch/, are not importable from it. The fresh environment runs
# no .pth file, so the checkout's editable install cannot supply them either.


def test_a_checkouts_own_package_finds_its_configs_and_template(tmp_path):
    """Run inside the checkout, the plan reads the checkout's conf/ and the job template its
    launch/sbatch/ (it ended in ``ModuleNotFoundError: No module named 'vitfsdp.conf'``)."""
    python = _fresh_env(tmp_path / "env")
    out = _run([python, "-c", (
        "import json, importlib.util as u, vitfsdp, vitfsdp.config as c, vitfsdp.launch.slurm"
        " as s; print(json.dumps([vitfsdp.__file__, u.find_spec('vitfsdp.conf') is None,"
        " str(c.CONF_DIR), str(s.TEMPLATE)]))")], REPO)
    package, unimportable, conf, template = json.loads(out)
    assert Path(package) == REPO / "vitfsdp" / "__init__.py"
    assert unimportable  # the fallback, not an import, found them
    assert Path(conf) == REPO / "conf"
    assert Path(template) == REPO / "launch" / "sbatch" / "job.sbatch.in"
    table = _run([python, "-m", "vitfsdp.plan", "-m", "model=vit_3b", "cluster=frontier",
                  "nodes=1"], REPO)
    assert re.search(r"^vit_3b +FULL_SHARD +1 ", table, re.MULTILINE), table


def test_a_checkout_on_pythonpath_reads_its_own_configs_not_the_editable_installs(tmp_path):
    """With checkout A installed editable and checkout B on PYTHONPATH, B's code reads B's
    conf/ and job template. Before, the installed data packages came first: B's vitfsdp/ was
    imported, yet its configs and template were A's (code and configs of two commits)."""
    pytest.importorskip("setuptools_scm", reason="the offline builds here run without build"
                        " isolation: pip install setuptools-scm")
    checkouts = {name: tmp_path / name for name in ("a", "b")}
    for checkout in checkouts.values():
        _committed_copy(checkout)
    python = _fresh_env(tmp_path / "env")
    _run([sys.executable, "-m", "pip", "--python", python, "install", *PIP_OFFLINE, "-e",
          checkouts["a"]], tmp_path)  # checkout a, installed editable
    work = tmp_path / "work"
    work.mkdir()
    out = _run([python, "-c", (
        "import json, importlib.resources as r, vitfsdp, vitfsdp.launch.slurm as s;"
        " print(json.dumps([vitfsdp.__file__, str(r.files('vitfsdp.conf')),"
        " str(s.data_dir('vitfsdp.conf')), str(s.TEMPLATE)]))")], work,
        env={"PYTHONPATH": str(checkouts["b"])})
    package, installed, conf, template = json.loads(out)
    assert Path(package) == checkouts["b"] / "vitfsdp" / "__init__.py"
    assert Path(installed) == checkouts["a"] / "conf"  # the editable install's data
    assert Path(conf) == checkouts["b"] / "conf"
    assert Path(template) == checkouts["b"] / "launch" / "sbatch" / "job.sbatch.in"


def test_a_package_without_its_data_says_how_to_fix_it(tmp_path):
    """A vitfsdp/ with neither the installed data packages nor a checkout's folders beside
    it: one line naming the package and the fixes ends the traceback."""
    shutil.copytree(REPO / "vitfsdp", tmp_path / "vitfsdp",
                    ignore=shutil.ignore_patterns("__pycache__"))
    python = _fresh_env(tmp_path / "env")
    proc = subprocess.run([python, "-c", "import vitfsdp.config"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: No module named 'vitfsdp.launch.sbatch': "
                           f"vitfsdp was imported from {tmp_path / 'vitfsdp'}"), last
    assert "pip install -e ." in last and "run from outside it" in last, last


def test_the_checkout_fallback_knows_every_mapped_folder():
    """:data:`vitfsdp.launch.slurm.CHECKOUT_DATA` is pyproject.toml's package-dir."""
    from vitfsdp.launch.slurm import CHECKOUT_DATA

    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert CHECKOUT_DATA == pyproject["tool"]["setuptools"]["package-dir"]


# --------------------------------------------------------------------------- environment.yml


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement (``jax[cuda12]>=0.5`` -> ``jax``)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]).lower()


def test_environment_yml_holds_every_pyproject_dependency():
    env = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    # pyproject.toml's dependencies and its dev and jax extras (dev pulls jax), as the
    # install recorded them; the project itself (dev's vitfsdp[jax]) is environment.yml's -e
    wanted = {_name(r) for r in metadata.requires("vitfsdp")
              if "extra ==" not in r or 'extra == "dev"' in r or 'extra == "jax"' in r}
    wanted.discard("vitfsdp")
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {_name(r) for r in conda + pip if not r.startswith("-")}
    assert wanted - listed == set(), f"environment.yml lacks {sorted(wanted - listed)}"
    assert "pytest-xdist" in listed and any(r.startswith("python") for r in conda)
    assert any(r.replace(" ", "") in ("-e.[dev]", "-e.") for r in pip)
