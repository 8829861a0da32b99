"""The package list, which pyproject.toml cannot state: ``packages.find`` discovers only the
folders under ``vitfsdp/`` and ``hydra_plugins/``, not the two data packages that
``[tool.setuptools.package-dir]`` maps from the repository's ``conf/`` and ``launch/sbatch/``.

And the commit a build comes from: ``pip install .`` and ``pip wheel .`` of a git checkout
write it into the built package (:data:`BUILD_RECORD`), where run.json's provenance finds it
once the checkout is out of reach (``vitfsdp.provenance.git_state``). Everything else is in
pyproject.toml."""

import json
import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

DATA_PACKAGES = ["vitfsdp.conf", "vitfsdp.launch.sbatch"]
#: ``vitfsdp.provenance.BUILD_RECORD``: setup.py runs before the package can be imported.
BUILD_RECORD = "_build_commit.json"
HERE = Path(__file__).resolve().parent


def source_commit() -> dict | None:
    """``{"commit", "dirty"}`` of the git checkout this file is at the top of (tracked files
    only), else None (an sdist, a copy, a folder inside some other repository)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], cwd=HERE,
                             capture_output=True, text=True, timeout=10, check=True).stdout
        top, commit = out.split()
        if Path(top).resolve() != HERE:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=HERE, capture_output=True, text=True, timeout=10,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


class BuildPyWithCommit(build_py):
    """setuptools' build_py, then :func:`source_commit` written into the built package
    (not for an editable install, whose package is the checkout itself)."""

    def run(self):
        super().run()
        state = source_commit()
        if state and not getattr(self, "editable_mode", False):
            target = Path(self.build_lib) / "vitfsdp" / BUILD_RECORD
            target.write_text(json.dumps(state) + "\n", encoding="utf-8")


setup(packages=[*find_namespace_packages(include=["vitfsdp*", "hydra_plugins*"]),
                *DATA_PACKAGES],
      cmdclass={"build_py": BuildPyWithCommit})
